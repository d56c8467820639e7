//! Hostile input over real HTTP (SQLite): random bytes and randomly damaged reports to the ingest and debug-file
//! endpoints, random paths and queries to the read endpoints. Every answer is a 2xx or a 4xx, never a 5xx or a
//! dropped connection (a panic in a handler would show as either); a damaged report that still has its id is
//! stored, flagged.

use collector::{Config, Running};
use proptest::prelude::*;
use report_format::model::{Exception, Image, ImageId, Meta, Report, ReportId, Thread};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

struct Server {
    srv: Running,
    token: String,
    _tmp: tempfile::TempDir,
}

fn server() -> &'static Server {
    static S: OnceLock<Server> = OnceLock::new();
    S.get_or_init(|| {
        let tmp = tempfile::tempdir().expect("tmp");
        let mut c = Config::new(tmp.path().join("store"));
        c.rate_per_minute = 0;
        let srv =
            Running::start(c, Arc::new(viewer::collector::ViewerAnalyzer::default()), "127.0.0.1:0", 2).expect("start");
        let token = srv.block_on(srv.collector().create_token("p", "")).expect("token");
        Server { srv, token, _tmp: tmp }
    })
}

fn valid_report(n: u32) -> Vec<u8> {
    let mut id = [0u8; 16];
    id[..4].copy_from_slice(&n.to_be_bytes());
    let r = Report {
        format_version: (1, 1),
        meta: Some(Meta { report_id: ReportId(id), capture_time_ns: Some(1), ..Meta::default() }),
        exception: Some(Exception { signal: Some(11), crashed_thread: Some(0), ..Exception::default() }),
        threads: vec![Thread { crashed: true, captured: true, frames: vec![0x1010, 0x1020], ..Thread::default() }],
        images: vec![Image {
            name: "app".into(),
            load_address: 0x1000,
            size: 0x1000,
            id: Some(ImageId::Uuid([7; 16])),
            ..Image::default()
        }],
        ..Report::default()
    };
    report_format::owned::to_bytes(&r).expect("encode")
}

fn status(method: &str, path: &str, ctype: &str, body: &[u8]) -> u16 {
    let s = server();
    let url = format!("{}{path}", s.srv.base_url());
    let agent = collector::client::agent(Duration::from_secs(30));
    let auth = format!("Bearer {}", s.token);
    let res = if method == "GET" {
        agent.get(&url).call()
    } else {
        agent.post(&url).header("Authorization", &auth).header("Content-Type", ctype).send(body)
    };
    match res {
        Ok(r) => r.status().as_u16(),
        Err(e) => panic!("{method} {path}: no answer: {e}"),
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_bodies_get_4xx(body in proptest::collection::vec(any::<u8>(), 0..2048)) {
        for path in ["/api/v1/reports", "/api/v1/debug-files", "/"] {
            let st = status("POST", path, "application/x-crash-report", &body);
            prop_assert!((400..500).contains(&st), "POST {} -> {}", path, st);
        }
    }

    #[test]
    fn damaged_reports_are_stored_or_refused_never_5xx(
        n in 1u32..1_000_000,
        flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..6),
        cut in proptest::option::of(any::<prop::sample::Index>()),
    ) {
        let mut b = valid_report(n);
        for (i, x) in &flips {
            let i = i.index(b.len());
            b[i] ^= x;
        }
        if let Some(c) = cut {
            let len = c.index(b.len()).max(1);
            b.truncate(len);
        }
        let st = status("POST", "/api/v1/reports", "application/x-crash-report", &b);
        prop_assert!(st == 201 || st == 200 || (400..500).contains(&st), "-> {}", st);
        if st == 201 {
            // Stored: its pages render without a server error.
            if let Some(id) = report_format::decode(&b).ok().and_then(|d| d.report.meta).map(|m| m.report_id.to_string()) {
                for p in [format!("/reports/{id}"), format!("/api/v1/reports/{id}?format=json")] {
                    let s = status("GET", &p, "", &[]);
                    prop_assert!(s == 200 || s == 404, "GET {} -> {}", p, s);
                }
            }
        }
    }

    #[test]
    fn random_paths_and_queries_never_5xx(seg in "[ -~]{0,40}", q in "[ -~]{0,40}") {
        let enc: String = seg.bytes().chain(std::iter::once(b'?')).chain(q.bytes())
            .map(|b| if b.is_ascii_alphanumeric() || b == b'?' || b == b'=' || b == b'&' { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect();
        for base in ["/groups/", "/reports/", "/api/v1/groups/", "/api/v1/reports/", "/api/v1/groups?", "/?"] {
            let st = status("GET", &format!("{base}{enc}"), "", &[]);
            prop_assert!(st < 500, "GET {}{} -> {}", base, enc, st);
        }
    }
}
