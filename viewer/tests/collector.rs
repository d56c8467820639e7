//! `viewer serve`, `viewer serve token ...`, `viewer upload-symbols` and `viewer list` as real processes: a token
//! created on the command line is accepted by a running `viewer serve` and refused once revoked; upload-symbols
//! sends a debug file; `list` prints a reports directory. (The collector's own behaviour, over HTTP against SQLite
//! and PostgreSQL, is tested in `collector/tests/http.rs`.)

use report_format::model::{Meta, Report, ReportId};
use report_format::transport::CONTENT_TYPE;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

const VIEWER: &str = env!("CARGO_BIN_EXE_viewer");

fn report(id: u8) -> Vec<u8> {
    let mut m =
        Meta { report_id: ReportId([id; 16]), capture_time_ns: Some(u64::from(id) * 1_000_000_000), ..Meta::default() };
    m.process.name = Some("Demo".into());
    report_format::owned::to_bytes(&Report { format_version: (1, 1), meta: Some(m), ..Report::default() })
        .expect("encodes")
}

fn viewer(args: &[&str], store: &Path) -> (bool, String, String) {
    let out = Command::new(VIEWER).args(args).arg("--store").arg(store).output().expect("runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `viewer serve` on a free port; killed on drop.
struct Serve {
    child: Child,
    url: String,
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(store: &Path) -> Serve {
    let mut child = Command::new(VIEWER)
        .args(["serve", "--addr", "127.0.0.1:0", "--store"])
        .arg(store)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("viewer serve starts");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("first line");
    assert!(line.starts_with("http://127.0.0.1:"), "the first line is the URL: {line:?}");
    Serve { child, url: line.trim().trim_end_matches('/').to_owned() }
}

fn post(url: &str, token: Option<&str>, body: &[u8]) -> u16 {
    let agent = collector::client::agent(Duration::from_secs(30));
    let mut r = agent.post(format!("{url}/api/v1/reports")).header("Content-Type", CONTENT_TYPE);
    if let Some(t) = token {
        r = r.header("Authorization", &format!("Bearer {t}"));
    }
    r.send(body).expect("POST").status().as_u16()
}

#[test]
fn tokens_from_the_command_line_are_accepted_then_revoked() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = dir.path().join("store");
    let (ok, token, err) = viewer(&["serve", "token", "create", "--project", "shop", "--label", "ci"], &store);
    assert!(ok, "{err}");
    let token = token.trim().to_owned();
    assert!(token.starts_with("crt_"), "{token}");
    let (ok, listed, _) = viewer(&["serve", "token", "list"], &store);
    assert!(ok);
    assert!(listed.contains("shop") && listed.contains("ci") && listed.contains("live"), "{listed}");
    assert!(!listed.contains(&token), "the token itself is never listed");
    let id = listed.split_whitespace().next().expect("id").to_owned();

    let srv = serve(&store);
    assert_eq!(post(&srv.url, None, &report(1)), 401);
    assert_eq!(post(&srv.url, Some(&token), &report(1)), 201);
    assert_eq!(post(&srv.url, Some(&token), &report(1)), 200);

    let (ok, _, err) = viewer(&["serve", "token", "revoke", &id], &store);
    assert!(ok, "{err}");
    assert_eq!(post(&srv.url, Some(&token), &report(2)), 401, "revoked while the server runs");
    let (ok, _, err) = viewer(&["serve", "token", "revoke", "0000000000"], &store);
    assert!(!ok && err.contains("no live token"), "{err}");
    let (ok, listed, _) = viewer(&["serve", "token", "list"], &store);
    assert!(ok && listed.contains("revoked"), "{listed}");

    // upload-symbols: this test binary is an ELF with a build ID.
    let exe = std::env::current_exe().expect("exe");
    let token2 = viewer(&["serve", "token", "create", "--project", "shop"], &store).1.trim().to_owned();
    let out = Command::new(VIEWER)
        .arg("upload-symbols")
        .arg(&exe)
        .args(["--url", &srv.url, "--token", &token2])
        .output()
        .expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}{}", String::from_utf8_lossy(&out.stderr));
    assert!(text.contains("HTTP 201") && text.contains("\"has_dwarf\": true"), "{text}");
    let out = Command::new(VIEWER)
        .arg("upload-symbols")
        .arg(&exe)
        .args(["--url", &srv.url, "--token", "crt_bad"])
        .output()
        .expect("runs");
    assert!(!out.status.success(), "a refused upload fails the command");

    // `viewer list` on the store's reports/ directory: the one stored report, by its id.
    let out = Command::new(VIEWER).arg("list").arg(store.join("reports")).output().expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("01010101-0101-0101-0101-010101010101  1970-01-01 00:00:01.0000 +0000  Demo"), "{text}");
    assert!(text.ends_with("1 report\n"), "{text}");
}
