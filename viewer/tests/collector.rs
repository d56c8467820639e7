//! The collector over real HTTP on loopback: stores each report once by id, refuses garbage, damaged, oversized
//! and mistyped bodies with 4xx, handles concurrent uploads, and lists what it holds.

use report_format::model::{Meta, Report, ReportId};
use report_format::transport::{CONTENT_TYPE, REPORT_ID_HEADER};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::Duration;
use viewer::collector::{list, Collector};

fn report(id: u8) -> Vec<u8> {
    let mut m =
        Meta { report_id: ReportId([id; 16]), capture_time_ns: Some(u64::from(id) * 1_000_000_000), ..Meta::default() };
    m.process.name = Some("Demo".into());
    report_format::owned::to_bytes(&Report { format_version: (1, 1), meta: Some(m), ..Report::default() })
        .expect("encodes")
}

/// Sends one POST and returns (status, body). A tiny HTTP/1.1 client so the test depends on nothing else.
fn post(addr: SocketAddr, ctype: &str, id: Option<&str>, body: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    let mut head = format!(
        "POST /reports HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if let Some(id) = id {
        head.push_str(&format!("{REPORT_ID_HEADER}: {id}\r\n"));
    }
    head.push_str("\r\n");
    s.write_all(head.as_bytes()).expect("head");
    let _ = s.write_all(body); // the server may answer 413 and close before reading it all
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let text = String::from_utf8_lossy(&resp).into_owned();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

/// Sends one GET and returns (status, body).
fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(30))).expect("timeout");
    s.write_all(format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes()).expect("head");
    let mut resp = Vec::new();
    let _ = s.read_to_end(&mut resp);
    let text = String::from_utf8_lossy(&resp).into_owned();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

struct Running {
    addr: SocketAddr,
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn start(store: &std::path::Path, max_body: u64) -> Running {
    let c = Collector::bind("127.0.0.1:0", store).expect("bind").max_body(max_body);
    let addr = c.local_addr().expect("addr");
    let stop = c.stop_flag();
    let thread = std::thread::spawn(move || c.serve(4, |_| {}));
    Running { addr, stop, thread: Some(thread) }
}

#[test]
fn stores_once_and_refuses_bad_bodies() {
    let dir = tempfile::tempdir().expect("tmp");
    let srv = start(dir.path(), 64 * 1024);
    let good = report(1);
    let id = "01010101-0101-0101-0101-010101010101";

    let (st, body) = post(srv.addr, CONTENT_TYPE, Some(id), &good);
    assert_eq!((st, body.trim()), (201, format!("stored {id}").as_str()));
    let (st, _) = post(srv.addr, CONTENT_TYPE, Some(id), &good);
    assert_eq!(st, 200, "a resend is stored once");
    assert_eq!(list(dir.path()).expect("list").len(), 1);

    let (st, body) = post(srv.addr, CONTENT_TYPE, None, b"garbage, not a report");
    assert_eq!(st, 400);
    assert!(body.contains("not a crash report"), "{body}");

    let mut damaged = report(2);
    let n = damaged.len();
    damaged[n - 3] ^= 0xff;
    let (st, body) = post(srv.addr, CONTENT_TYPE, None, &damaged);
    assert_eq!(st, 400);
    assert!(body.starts_with("damaged report:"), "{body}");

    let (st, _) = post(srv.addr, CONTENT_TYPE, None, &vec![0u8; 100 * 1024]);
    assert_eq!(st, 413);
    let (st, _) = post(srv.addr, "text/plain", None, &good);
    assert_eq!(st, 415);
    let (st, _) = post(srv.addr, CONTENT_TYPE, Some("00000000-0000-0000-0000-000000000000"), &report(3));
    assert_eq!(st, 400, "an id header that contradicts the report");

    let stored = list(dir.path()).expect("list");
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].id, id);
    assert_eq!(stored[0].process.as_deref(), Some("Demo"));
    assert_eq!(std::fs::read(&stored[0].path).expect("read"), good, "stored bytes are the uploaded bytes");
}

#[test]
fn concurrent_uploads_store_each_report_exactly_once() {
    let dir = tempfile::tempdir().expect("tmp");
    let srv = start(dir.path(), 1 << 20);
    let addr = srv.addr;
    let results: Vec<(u8, u16)> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..24u8)
            .map(|i| {
                s.spawn(move || {
                    let which = i % 3 + 10; // three distinct reports, eight uploads each
                    (which, post(addr, CONTENT_TYPE, None, &report(which)).0)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    for which in 10..13u8 {
        let statuses: Vec<u16> = results.iter().filter(|r| r.0 == which).map(|r| r.1).collect();
        assert_eq!(statuses.iter().filter(|s| **s == 201).count(), 1, "report {which}: {statuses:?}");
        assert_eq!(statuses.iter().filter(|s| **s == 200).count(), 7, "report {which}: {statuses:?}");
    }
    let stored = list(dir.path()).expect("list");
    assert_eq!(stored.len(), 3);
    let leftovers = std::fs::read_dir(dir.path()).expect("dir").count();
    assert_eq!(leftovers, 3, "no temporary files left behind");
}

#[test]
fn viewer_list_prints_the_store() {
    let dir = tempfile::tempdir().expect("tmp");
    std::fs::write(dir.path().join("01010101-0101-0101-0101-010101010101.crashreport"), report(1)).expect("write");
    let out =
        std::process::Command::new(env!("CARGO_BIN_EXE_viewer")).arg("list").arg(dir.path()).output().expect("runs");
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("01010101-0101-0101-0101-010101010101  1970-01-01 00:00:01.0000 +0000  Demo"), "{text}");
    assert!(text.ends_with("1 report\n"), "{text}");
}

#[test]
fn get_reports_lists_stored_ids_oldest_capture_first() {
    let dir = tempfile::tempdir().expect("tmp");
    let srv = start(dir.path(), 64 * 1024);
    assert_eq!(get(srv.addr, "/reports"), (200, String::new()), "empty store: empty list");
    assert_eq!(get(srv.addr, "/").1, "crash report collector: 0 reports stored\n");

    // Uploaded newest first; listed by capture time (report(n) is captured at n seconds).
    for id in [7u8, 3, 5] {
        assert_eq!(post(srv.addr, CONTENT_TYPE, None, &report(id)).0, 201);
    }
    let (st, body) = get(srv.addr, "/reports");
    assert_eq!(st, 200);
    assert_eq!(
        body,
        "03030303-0303-0303-0303-030303030303\n\
         05050505-0505-0505-0505-050505050505\n\
         07070707-0707-0707-0707-070707070707\n"
    );
    assert_eq!(get(srv.addr, "/reports?after=now").1, body, "a query string is ignored");
    assert_eq!(get(srv.addr, "/").1, "crash report collector: 3 reports stored\n");
    assert_eq!(get(srv.addr, "/elsewhere").0, 405);
}
