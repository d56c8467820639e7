//! The `viewer` binary: subcommands, stdin, --output, exit codes, --help.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_viewer"))
}

fn apple(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/third_party/macsymbolicator").join(rel)
}

#[test]
fn renders_ips_from_a_path_and_from_stdin_identically() {
    let expected = std::fs::read(apple("ios15-swift-assert/apple-translation.crash")).unwrap();
    let out = bin().arg("--no-auto-symbols").arg(apple("ios15-swift-assert/report.ips")).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, expected);

    let mut child =
        bin().args(["render", "--no-auto-symbols", "-"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().unwrap();
    child.stdin.take().unwrap().write_all(&std::fs::read(apple("ios15-swift-assert/report.ips")).unwrap()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(out.stdout, expected);
}

#[test]
fn output_file_and_symbols_flag() {
    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out.crash");
    let st = bin()
        .arg(apple("macos12-single-target/report.ips"))
        .arg("--symbols")
        .arg(apple("macos12-single-target/CrashingTest.dSYM"))
        .arg("--output")
        .arg(&out_path)
        .output()
        .unwrap();
    assert_eq!(st.status.code(), Some(0), "{}", String::from_utf8_lossy(&st.stderr));
    assert!(st.stdout.is_empty());
    let text = std::fs::read_to_string(&out_path).unwrap();
    assert!(text.contains("0x10e311e45 -[MyClass crashingMethod] + 4 (main.m:21)\n"), "{text}");
    assert!(text.contains("0x10e311e80 main + 46 (main.m:28)\n"));
}

#[test]
fn exit_codes() {
    let dir = tempfile::tempdir().unwrap();
    // 1: unknown file type, one line on stderr naming what was expected.
    let junk = dir.path().join("junk.bin");
    std::fs::write(&junk, b"\x00\x01garbage").unwrap();
    let out = bin().arg(&junk).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("expected a crash report"), "{err}");
    // 1: missing file.
    assert_eq!(bin().arg(dir.path().join("nope")).output().unwrap().status.code(), Some(1));
    // 2: usage error.
    assert_eq!(bin().arg("--no-such-flag").output().unwrap().status.code(), Some(2));
    // 3: damaged (.ips cut in half) but rendered.
    let ips = std::fs::read(apple("ios15-swift-assert/report.ips")).unwrap();
    let cut = dir.path().join("cut.ips");
    std::fs::write(&cut, &ips[..ips.len() / 2]).unwrap();
    let out = bin().arg("--no-auto-symbols").arg(&cut).output().unwrap();
    assert_eq!(out.status.code(), Some(3));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Report Damage:"), "{text}");
    assert!(text.contains("Incident Identifier: 6251125F-0919-4879-B36B-F5F2D1E6902E"));
    assert!(String::from_utf8_lossy(&out.stderr).contains("damaged"));
    // 4: output not writable.
    let out = bin()
        .arg(apple("ios15-swift-assert/report.ips"))
        .arg("-o")
        .arg(dir.path().join("no/such/dir/out"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
}

#[test]
fn json_format() {
    let out = bin().args(["--format", "json"]).arg(apple("ios15-swift-assert/report.ips")).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["source"], "ips");
    assert_eq!(v["crash_log"]["header"]["process_name"], "iOSCrashingTest");
    assert_eq!(v["crash_log"]["threads"].as_array().unwrap().len(), 9);
}

#[test]
fn atos_subcommand() {
    let out = bin()
        .args(["atos", "-o"])
        .arg(apple("ios15-swift-assert/iOSCrashingTest.app.dSYM"))
        .args(["-l", "0x1007d4000", "0x1007da384", "0x1007da4bc", "0x2"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "main + 64 (AppDelegate.swift:9)\nspecialized static CrashClass.pleaseCrash() + 200 (<compiler-generated>:0)\n0x2\n"
    );
    // By UUID among --symbols, universal slice chosen by UUID.
    let out = bin()
        .args(["atos", "--symbols"])
        .arg(apple("macos12-single-target"))
        .args(["--uuid", "01D2A9D5-1F8A-35C8-9228-7C7CCA13C5FC", "-l", "0x10e30e000", "0x10e311e45"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "-[MyClass crashingMethod] + 4 (main.m:21)\n");
    // Addresses on standard input, one per line; a bad line is skipped with a message.
    let mut child = bin()
        .args(["atos", "-o"])
        .arg(apple("ios15-swift-assert/iOSCrashingTest.app.dSYM"))
        .args(["-l", "0x1007d4000"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"0x1007da384\nnot-an-address\n\n0x1007da4bc\n2\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "main + 64 (AppDelegate.swift:9)\nspecialized static CrashClass.pleaseCrash() + 200 (<compiler-generated>:0)\n0x2\n"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("line 2"));
}

#[test]
fn help_snapshots() {
    let out = bin().arg("--help").output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let help = String::from_utf8(out.stdout).unwrap();
    assert!(help.contains("Examples:"));
    insta::assert_snapshot!("help", help);
    let out = bin().args(["atos", "--help"]).output().unwrap();
    insta::assert_snapshot!("atos_help", String::from_utf8(out.stdout).unwrap());
    let out = bin().args(["symbolicate", "--help"]).output().unwrap();
    insta::assert_snapshot!("symbolicate_help", String::from_utf8(out.stdout).unwrap());
    let out = bin().args(["serve", "--help"]).output().unwrap();
    insta::assert_snapshot!("serve_help", String::from_utf8(out.stdout).unwrap());
}

#[test]
fn symbolicate_subcommand_from_stdin_and_a_file() {
    let crash = std::fs::read(apple("macos12-single-target/apple-translation.crash")).unwrap();
    let dsym = apple("macos12-single-target/CrashingTest.dSYM");
    let mut child = bin()
        .args(["symbolicate", "--no-auto-symbols", "-s"])
        .arg(&dsym)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(&crash).unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let expected = String::from_utf8(crash.clone())
        .unwrap()
        .replace("0x10e311e45 0x10e30e000 + 15941", "0x10e311e45 -[MyClass crashingMethod] + 4 (main.m:21)")
        .replace("0x10e311e80 0x10e30e000 + 16000", "0x10e311e80 main + 46 (main.m:28)");
    assert_eq!(text, expected);
    assert!(String::from_utf8_lossy(&out.stderr).contains("2 of 2 unsymbolicated frames symbolicated"));

    // A file, written with -o; an .ips given to symbolicate is rendered like `viewer render` does.
    let dir = tempfile::tempdir().unwrap();
    let o = dir.path().join("out.crash");
    let st = bin()
        .args(["symbolicate", "--no-auto-symbols", "-s"])
        .arg(&dsym)
        .arg(apple("macos12-single-target/report.ips"))
        .arg("-o")
        .arg(&o)
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(0));
    assert!(std::fs::read_to_string(&o).unwrap().contains("0x10e311e45 -[MyClass crashingMethod] + 4 (main.m:21)\n"));
    // Unreadable input: 1.
    assert_eq!(bin().args(["symbolicate"]).arg(dir.path().join("nope")).status().unwrap().code(), Some(1));
}
