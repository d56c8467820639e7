//! The collector over real HTTP on loopback, with the viewer's analyzer: the same suite against SQLite and against
//! a throwaway PostgreSQL cluster (`collector::pg_cluster`). Under `CI=true` a missing PostgreSQL fails the test;
//! elsewhere it is skipped with a message.
//!
//! Reports are built with `report_format::owned` (a Linux process `/opt/app/bin/app` whose image has this test
//! binary's build ID, so uploading this binary as a debug file symbolicates them).

use collector::{Config, Running};
use report_format::model::{Exception, FrameTrust, Image, ImageId, Meta, Os, Process, Report, ReportId, Thread};
use std::sync::Arc;
use std::time::Duration;

const APP_BASE: u64 = 0x5555_0000_0000;
const LIBC_BASE: u64 = 0x7f00_0000_0000;

#[inline(never)]
fn marker_alpha(x: u64) -> u64 {
    std::hint::black_box(x).wrapping_mul(3)
}

#[inline(never)]
fn marker_beta(x: u64) -> u64 {
    std::hint::black_box(x).wrapping_mul(5)
}

/// This test binary's build ID and the offsets of the two marker functions from its load address.
struct SelfImage {
    id: Vec<u8>,
    alpha: u64,
    beta: u64,
}

fn self_image() -> SelfImage {
    let exe = std::env::current_exe().expect("exe");
    let ids = viewer::symbols::identify(&exe);
    let id = match ids.first().and_then(|i| i.id.clone()) {
        Some(ImageId::BuildId(b)) => b,
        other => panic!("the test binary has no build ID: {other:?}"),
    };
    // The load address: the start of the first mapping of the executable (file offset 0).
    let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
    let exe_s = exe.to_str().expect("utf-8 path");
    let base = maps
        .lines()
        .find(|l| l.ends_with(exe_s) && l.split_whitespace().nth(2) == Some("00000000"))
        .and_then(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
        .expect("mapping of the test binary");
    let alpha = marker_alpha as *const () as u64 - base;
    let beta = marker_beta as *const () as u64 - base;
    assert_eq!(marker_alpha(1) + marker_beta(1), 8);
    SelfImage { id, alpha, beta }
}

/// A report: `variant` picks the innermost app frame (0: marker_alpha, 1: marker_beta, others: raw offsets).
fn report(me: &SelfImage, n: u32, variant: u8, version: &str) -> Vec<u8> {
    let mut rid = [0u8; 16];
    rid[..4].copy_from_slice(&n.to_be_bytes());
    rid[4] = variant;
    rid[6] = 0x40;
    let top = match variant {
        0 => me.alpha,
        1 => me.beta,
        v => 0x100 * u64::from(v),
    };
    let meta = Meta {
        report_id: ReportId(rid),
        capture_time_ns: Some(1_700_000_000_000_000_000 + u64::from(n) * 1_000_000_000),
        arch: Some("x86_64".into()),
        os: Os { name: Some("Linux".into()), version: Some("6.1.0".into()), build: None },
        process: Process {
            pid: Some(100 + n),
            name: Some("app".into()),
            path: Some("/opt/app/bin/app".into()),
            short_version: Some(version.into()),
            build_version: Some("1".into()),
            ..Process::default()
        },
        ..Meta::default()
    };
    let crashed = Thread {
        index: 0,
        name: Some("main".into()),
        crashed: true,
        captured: true,
        frames: vec![APP_BASE + top, APP_BASE + 0x2000 + 5, LIBC_BASE + 0x300],
        frame_trust: vec![FrameTrust::Context, FrameTrust::FramePointer, FrameTrust::FramePointer],
        ..Thread::default()
    };
    let r = Report {
        format_version: (1, 1),
        meta: Some(meta),
        exception: Some(Exception {
            signal: Some(11),
            si_code: Some(1),
            crashed_thread: Some(0),
            ..Exception::default()
        }),
        threads: vec![crashed],
        images: vec![
            Image {
                index: 0,
                name: "app".into(),
                path: Some("/opt/app/bin/app".into()),
                load_address: APP_BASE,
                size: 0x4000_0000,
                id: Some(ImageId::BuildId(me.id.clone())),
                arch: Some("x86_64".into()),
                ..Image::default()
            },
            Image {
                index: 1,
                name: "libc.so.6".into(),
                path: Some("/usr/lib/x86_64-linux-gnu/libc.so.6".into()),
                load_address: LIBC_BASE,
                size: 0x20_0000,
                id: Some(ImageId::BuildId(vec![0xab; 20])),
                arch: Some("x86_64".into()),
                ..Image::default()
            },
        ],
        ..Report::default()
    };
    report_format::owned::to_bytes(&r).expect("encode")
}

const IOS_ID: &str = "A1A2A3A4-B1B2-4C1C-8D1D-E1E2E3E4E5E6";

/// An iOS report of Xcode's `iOSCrashingTest` app (UUID 82D13D98-219E-3040-B62A-07A297007A7C at 0x1007d4000).
fn ios_report() -> Vec<u8> {
    let id = [0xA1, 0xA2, 0xA3, 0xA4, 0xB1, 0xB2, 0x4C, 0x1C, 0x8D, 0x1D, 0xE1, 0xE2, 0xE3, 0xE4, 0xE5, 0xE6];
    let exe = "/private/var/containers/Bundle/Application/X/iOSCrashingTest.app/iOSCrashingTest";
    let uuid = [0x82, 0xD1, 0x3D, 0x98, 0x21, 0x9E, 0x30, 0x40, 0xB6, 0x2A, 0x07, 0xA2, 0x97, 0x00, 0x7A, 0x7C];
    let r = Report {
        format_version: (1, 1),
        meta: Some(Meta {
            report_id: ReportId(id),
            capture_time_ns: Some(1_700_000_000_000_000_000),
            arch: Some("arm64".into()),
            os: Os { name: Some("iPhone OS".into()), version: Some("15.5".into()), build: Some("19F77".into()) },
            process: Process {
                name: Some("iOSCrashingTest".into()),
                path: Some(exe.into()),
                short_version: Some("1.0".into()),
                build_version: Some("1".into()),
                ..Process::default()
            },
            ..Meta::default()
        }),
        exception: Some(Exception { signal: Some(5), crashed_thread: Some(0), ..Exception::default() }),
        threads: vec![Thread {
            crashed: true,
            captured: true,
            frames: vec![0x1007da384],
            frame_trust: vec![FrameTrust::Context],
            ..Thread::default()
        }],
        images: vec![Image {
            name: "iOSCrashingTest".into(),
            path: Some(exe.into()),
            load_address: 0x1007d4000,
            size: 0x8000,
            id: Some(ImageId::Uuid(uuid)),
            arch: Some("arm64".into()),
            ..Image::default()
        }],
        ..Report::default()
    };
    report_format::owned::to_bytes(&r).expect("encode")
}

fn agent() -> ureq::Agent {
    collector::client::agent(Duration::from_secs(30))
}

struct Answer {
    status: u16,
    body: String,
    bytes: Vec<u8>,
    headers: Vec<(String, String)>,
}

fn send(method: &str, url: &str, headers: &[(&str, &str)], body: Option<&[u8]>) -> Answer {
    let a = agent();
    let res = match (method, body) {
        ("GET", _) => {
            let mut r = a.get(url);
            for (k, v) in headers {
                r = r.header(*k, *v);
            }
            r.call()
        }
        (m, b) => {
            let mut r = if m == "PUT" { a.put(url) } else { a.post(url) };
            for (k, v) in headers {
                r = r.header(*k, *v);
            }
            r.send(b.unwrap_or(&[]))
        }
    };
    let mut r = res.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let headers =
        r.headers().iter().map(|(k, v)| (k.as_str().to_owned(), v.to_str().unwrap_or("").to_owned())).collect();
    let bytes = r.body_mut().read_to_vec().unwrap_or_default();
    Answer { status: r.status().as_u16(), body: String::from_utf8_lossy(&bytes).into_owned(), bytes, headers }
}

fn post_report(base: &str, token: &str, bytes: &[u8]) -> Answer {
    let auth = format!("Bearer {token}");
    send(
        "POST",
        &format!("{base}/api/v1/reports"),
        &[("Authorization", &auth), ("Content-Type", "application/x-crash-report")],
        Some(bytes),
    )
}

fn get_json(url: &str) -> serde_json::Value {
    let a = send("GET", url, &[], None);
    assert_eq!(a.status, 200, "GET {url}: {}", a.body);
    serde_json::from_str(&a.body).unwrap_or_else(|e| panic!("GET {url}: {e}: {}", a.body))
}

fn start(store: &std::path::Path, database: Option<String>, rate: u32, burst: u32) -> Running {
    let mut c = Config::new(store);
    c.database = database;
    c.max_body = 64 * 1024;
    c.rate_per_minute = rate;
    c.rate_burst = burst;
    Running::start(c, Arc::new(viewer::collector::ViewerAnalyzer::default()), "127.0.0.1:0", 2)
        .expect("collector starts")
}

/// The whole suite against one database (`None`: SQLite in the store).
fn suite(database: Option<String>, second_database: Option<String>) {
    let me = self_image();
    let tmp = tempfile::tempdir().expect("tmp");
    let store = tmp.path().join("store");
    let srv = start(&store, database.clone(), 0, 1);
    let base = srv.base_url();
    let token = srv.block_on(srv.collector().create_token("shop", "tests")).expect("token");

    // --- Authentication.
    let r1 = report(&me, 1, 0, "1.0");
    let none =
        send("POST", &format!("{base}/api/v1/reports"), &[("Content-Type", "application/x-crash-report")], Some(&r1));
    assert_eq!(none.status, 401, "{}", none.body);
    assert!(none.headers.iter().any(|(k, v)| k.eq_ignore_ascii_case("www-authenticate") && v == "Bearer"));
    assert_eq!(post_report(&base, "crt_wrong", &r1).status, 401);
    let revoked = srv.block_on(srv.collector().create_token("shop", "revoked")).expect("token");
    let id = srv
        .block_on(srv.collector().db().tokens())
        .expect("tokens")
        .into_iter()
        .find(|t| t.label == "revoked")
        .expect("listed")
        .id;
    assert_eq!(srv.block_on(srv.collector().db().revoke_token(&id, 1)).expect("revoke"), 1);
    assert_eq!(post_report(&base, &revoked, &r1).status, 401, "a revoked token is refused");

    // --- Ingest: stored once by id, the old protocol's answers.
    let a = post_report(&base, &token, &r1);
    assert_eq!(a.status, 201, "{}", a.body);
    assert_eq!(post_report(&base, &token, &r1).status, 200, "a resend is stored once");
    let auth = format!("Bearer {token}");
    let wrong_type = send(
        "POST",
        &format!("{base}/api/v1/reports"),
        &[("Authorization", &auth), ("Content-Type", "text/plain")],
        Some(&r1),
    );
    assert_eq!(wrong_type.status, 415);
    assert_eq!(post_report(&base, &token, &vec![0x89; 70 * 1024]).status, 413);
    assert_eq!(post_report(&base, &token, b"not a report").status, 400);
    let mismatch = send(
        "POST",
        &format!("{base}/api/v1/reports"),
        &[
            ("Authorization", &auth),
            ("Content-Type", "application/x-crash-report"),
            ("X-Report-Id", "00000000-0000-4000-8000-000000000000"),
        ],
        Some(&report(&me, 2, 0, "1.0")),
    );
    assert_eq!(mismatch.status, 400, "{}", mismatch.body);
    // The legacy paths older apps post to.
    let legacy = send(
        "POST",
        &format!("{base}/"),
        &[("Authorization", &auth), ("Content-Type", "application/x-crash-report")],
        Some(&report(&me, 3, 0, "1.0")),
    );
    assert_eq!(legacy.status, 201, "{}", legacy.body);

    // --- A damaged report is stored, flagged.
    let mut damaged = report(&me, 4, 0, "1.0");
    let n = damaged.len();
    damaged[n - 2] ^= 0x40;
    assert!(!report_format::decode(&damaged).expect("decodes").is_intact());
    let a = post_report(&base, &token, &damaged);
    assert_eq!(a.status, 201, "{}", a.body);
    assert!(a.body.contains("damaged"), "{}", a.body);

    // --- Grouping: two crashes, three reports each (1, 3 and 4 above are variant 0), another version.
    for n in [5, 6, 7] {
        assert_eq!(post_report(&base, &token, &report(&me, n, 7, "2.0")).status, 201);
    }
    let groups = get_json(&format!("{base}/api/v1/groups"));
    let groups = groups.as_array().expect("array");
    assert_eq!(groups.len(), 2, "{groups:?}");
    let counts: Vec<i64> = groups.iter().map(|g| g["count"].as_i64().expect("count")).collect();
    assert_eq!(counts, vec![3, 3]);
    let v2 = get_json(&format!("{base}/api/v1/groups?version=2.0%20(1)"));
    assert_eq!(v2.as_array().expect("array").len(), 1, "filtered by app version: {v2}");
    let g7 = v2[0]["id"].as_str().expect("id").to_owned();
    assert!(v2[0]["title"].as_str().expect("title").contains("app +0x700"), "{v2}");
    let by_last = get_json(&format!("{base}/api/v1/groups?sort=last_seen"));
    assert_eq!(by_last[0]["id"], serde_json::Value::String(g7.clone()), "the 2.0 crash came last");
    let g = get_json(&format!("{base}/api/v1/groups/{g7}"));
    assert_eq!(g["count"], 3);
    assert_eq!(g["app_versions"], serde_json::json!([["2.0 (1)", 3]]));
    assert_eq!(g["os_versions"][0][1], 3);
    assert_eq!(g["reports"].as_array().expect("reports").len(), 3);
    assert!(g["signature"].as_str().expect("sig").starts_with("SIGSEGV (SEGV_MAPERR)\napp +0x700\napp +0x2005"));

    // --- Debug files: garbage is refused; this binary (ELF with DWARF) is indexed and regroups the reports.
    let dbg = format!("{base}/api/v1/debug-files");
    assert_eq!(send("POST", &dbg, &[("Authorization", &auth)], Some(b"nope")).status, 400);
    assert_eq!(send("POST", &dbg, &[], Some(b"\x7fELF")).status, 401);
    let exe = std::env::current_exe().expect("exe");
    // This test binary is over 100 MB, and the server re-symbolicates six reports with it (unoptimised in a test
    // build): the request gets a generous hang guard, not a speed limit.
    let slow = collector::client::agent(Duration::from_secs(600));
    let up = collector::client::send(&slow, &base, &token, &collector::client::Upload::Object(exe));
    assert_eq!(up.status, Some(201), "{}", up.answer);
    let up: serde_json::Value = serde_json::from_str(&up.answer).expect("json");
    assert!(up["reanalysed"].as_u64().expect("n") >= 6, "{up}");
    let groups = get_json(&format!("{base}/api/v1/groups"));
    let titles: Vec<&str> = groups.as_array().expect("a").iter().map(|g| g["title"].as_str().unwrap_or("")).collect();
    assert!(titles.iter().any(|t| t.contains("marker_alpha")), "symbolicated after the upload: {titles:?}");
    let alpha =
        groups.as_array().expect("a").iter().find(|g| g["title"].as_str().unwrap_or("").contains("marker_alpha"));
    let alpha = alpha.expect("alpha group");
    assert_eq!(alpha["count"], 3, "regrouping keeps the reports together");
    let alpha_id = alpha["id"].as_str().expect("id").to_owned();

    // --- Concurrent uploads of the same reports: each stored exactly once, counted once.
    let statuses: Vec<(u32, u16)> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..12u32)
            .map(|i| {
                let (me, base, token) = (&me, &base, &token);
                sc.spawn(move || (30 + i % 3, post_report(base, token, &report(me, 30 + i % 3, 9, "3.0")).status))
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    for n in 30..33 {
        let s: Vec<u16> = statuses.iter().filter(|x| x.0 == n).map(|x| x.1).collect();
        assert_eq!((s.iter().filter(|x| **x == 201).count(), s.iter().filter(|x| **x == 200).count()), (1, 3), "{s:?}");
    }
    let v3 = get_json(&format!("{base}/api/v1/groups?version=3.0%20(1)"));
    assert_eq!(v3[0]["count"], 3, "{v3}");

    // --- A zipped dSYM bundle (Xcode's, from the viewer's fixtures): indexed by UUID; an iOS report of that app is
    // symbolicated on the server (0x1007da384 in the image at 0x1007d4000 is main, AppDelegate.swift:9).
    let dsym = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../viewer/tests/fixtures/third_party/macsymbolicator/ios15-swift-assert/iOSCrashingTest.app.dSYM");
    let up = collector::client::send(&agent(), &base, &token, &collector::client::Upload::Bundle(dsym));
    assert_eq!(up.status, Some(201), "{}", up.answer);
    assert!(up.answer.contains("82d13d98219e3040b62a07a297007a7c") && up.answer.contains("arm64"), "{}", up.answer);
    let ios = ios_report();
    assert_eq!(post_report(&base, &token, &ios).status, 201);
    let ios_text = send("GET", &format!("{base}/api/v1/reports/{IOS_ID}?format=text"), &[], None);
    assert!(ios_text.body.contains("main + ") && ios_text.body.contains("AppDelegate.swift:9"), "{}", ios_text.body);

    // --- Reports: text, JSON, downloads, pages.
    let rid = "00000001-0000-4000-0000-000000000000";
    let text = send("GET", &format!("{base}/api/v1/reports/{rid}?format=text"), &[], None);
    assert_eq!(text.status, 200, "{}", text.body);
    assert!(text.body.contains("Exception Type:  SIGSEGV (SEGV_MAPERR)"), "{}", text.body);
    assert!(text.body.contains("http::marker_alpha"), "server-side symbolication: {}", text.body);
    let json = get_json(&format!("{base}/api/v1/reports/{rid}?format=json"));
    assert_eq!(json["source"], "report");
    let raw = send("GET", &format!("{base}/reports/{rid}/download?format=raw"), &[], None);
    assert_eq!(raw.status, 200);
    assert_eq!(raw.bytes, r1, "the raw download is the uploaded bytes");
    let crash = send("GET", &format!("{base}/reports/{rid}/download?format=crash"), &[], None);
    assert!(crash.headers.iter().any(|(k, v)| k == "content-disposition" && v.contains(".crash")));
    let ips = send("GET", &format!("{base}/reports/{rid}/download?format=ips"), &[], None);
    assert_eq!(ips.status, 200, "{}", ips.body);
    assert!(ips.headers.iter().any(|(k, v)| k == "content-disposition" && v.contains(".ips")));
    assert!(ips.body.starts_with('{') && ips.body.contains("\"bug_type\":\"309\""), "{}", ips.body);
    assert!(ips.body.contains("marker_alpha"), "the .ips is symbolicated on the server: {}", ips.body);
    let page = send("GET", &format!("{base}/"), &[], None);
    assert_eq!(page.status, 200);
    assert!(page.body.contains(&format!("/groups/{alpha_id}")), "{}", page.body);
    let gpage = send("GET", &format!("{base}/groups/{alpha_id}"), &[], None);
    assert!(gpage.body.contains(&format!("/reports/{rid}")) && gpage.body.contains("marker_alpha"), "{}", gpage.body);
    assert!(gpage.body.contains("damaged"), "the damaged report is flagged in its group");
    let rpage = send("GET", &format!("{base}/reports/{rid}"), &[], None);
    assert!(rpage.body.contains("marker_alpha") && rpage.body.contains("format=crash"), "{}", rpage.body);
    assert!(rpage.body.contains("format=ips"), "the report page links the .ips download: {}", rpage.body);
    let ids = send("GET", &format!("{base}/reports"), &[], None).body;
    assert_eq!(ids.lines().count(), 10, "{ids}");

    // --- Hostile input: 4xx everywhere, never a 5xx, never a path from the request.
    let junk: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
    for path in [
        "/api/v1/reports",
        "/api/v1/debug-files",
        "/",
        "/reports",
        "/api/v1/groups",
        "/api/v1/groups/..%2F..%2Fetc%2Fpasswd",
        "/api/v1/reports/..%2Fcollector.db?format=text",
        "/reports/%00/download?format=raw",
        "/groups/zzzz",
        "/api/v1/groups?sort=%ff",
        "/api/v1/groups?limit=-1",
        "/api/v1/reports/00000001-0000-4000-0000-000000000000?format=exe",
    ] {
        for method in ["GET", "POST", "PUT"] {
            for headers in
                [vec![], vec![("Authorization", auth.as_str()), ("Content-Type", "application/x-crash-report")]]
            {
                let a = send(method, &format!("{base}{path}"), &headers, Some(&junk));
                assert!(
                    a.status < 500 && (a.status >= 400 || method == "GET"),
                    "{method} {path} -> {} {}",
                    a.status,
                    a.body
                );
            }
        }
    }

    // --- Files on disk are private.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &std::path::Path| std::fs::metadata(p).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode(&store), 0o700);
        assert_eq!(mode(&store.join("reports")), 0o700);
        assert_eq!(mode(&store.join("debug-files")), 0o700);
        for dir in ["reports", "debug-files"] {
            for e in std::fs::read_dir(store.join(dir)).expect("dir") {
                assert_eq!(mode(&e.expect("e").path()), 0o600);
            }
        }
        if database.is_none() {
            assert_eq!(mode(&store.join("collector.db")), 0o600);
        }
    }
    srv.stop().expect("stops");

    // --- Rate limit per token (a second collector: burst 2, then 429 with Retry-After; another token is not
    // affected).
    let store2 = tmp.path().join("store2");
    let srv = start(&store2, second_database, 1, 2);
    let base = srv.base_url();
    let t1 = srv.block_on(srv.collector().create_token("shop", "")).expect("token");
    let t2 = srv.block_on(srv.collector().create_token("shop", "")).expect("token");
    assert_eq!(post_report(&base, &t1, &report(&me, 20, 0, "1.0")).status, 201);
    assert_eq!(post_report(&base, &t1, &report(&me, 21, 0, "1.0")).status, 201);
    let limited = post_report(&base, &t1, &report(&me, 22, 0, "1.0"));
    assert_eq!(limited.status, 429, "{}", limited.body);
    assert!(limited.headers.iter().any(|(k, _)| k == "retry-after"));
    assert_eq!(post_report(&base, &t2, &report(&me, 22, 0, "1.0")).status, 201);
    srv.stop().expect("stops");
}

#[test]
fn sqlite() {
    suite(None, None);
}

#[test]
fn postgres() {
    let pg = match collector::pg_cluster::PgCluster::start() {
        Ok(pg) => pg,
        Err(collector::pg_cluster::PgError::NotInstalled) if std::env::var("CI").as_deref() != Ok("true") => {
            eprintln!("SKIPPED: the PostgreSQL suite needs PostgreSQL (apt-get install postgresql); CI installs it");
            return;
        }
        Err(e) => panic!("PostgreSQL suite: {e}"),
    };
    pg.create_database("suite").expect("createdb");
    pg.create_database("suite_rate").expect("createdb");
    suite(Some(pg.url("suite")), Some(pg.url("suite_rate")));
}
