//! Upload behaviour over real HTTP on loopback: collector down at first (report kept, sent next launch),
//! 500 then 201, a damaged file in the report directory, two uploaders (threads, and real processes) on one
//! directory never sending a report twice, and the whole loop with a real crash (the demo example).

use report_format::model::{Meta, Report, ReportId};
use reporter::store::Store;
use reporter::upload::{upload_pending, UploadPolicy};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

fn put_report(store: &Store, id: u8) -> String {
    let meta = Meta { report_id: ReportId([id; 16]), capture_time_ns: Some(now_ns()), ..Meta::default() };
    let r = Report { format_version: (1, 0), meta: Some(meta), ..Report::default() };
    let name = format!("{}.crashreport", hex(id));
    std::fs::write(store.pending_dir().join(&name), report_format::owned::to_bytes(&r).expect("enc")).expect("w");
    name
}

fn hex(id: u8) -> String {
    format!("{id:02x}").repeat(16)
}

/// A loopback HTTP server answering with the scripted statuses in turn (the last one repeats), recording the
/// report ids it received.
struct Scripted {
    url: String,
    received: Arc<Mutex<Vec<String>>>,
    stop: Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Scripted {
    fn start(statuses: Vec<u16>) -> Scripted {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind"));
        let url = format!("http://{}/upload", server.server_addr().to_ip().expect("ip"));
        let received = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (r2, s2) = (received.clone(), stop.clone());
        let n = Arc::new(AtomicUsize::new(0));
        let thread = std::thread::spawn(move || {
            while !s2.load(Ordering::SeqCst) {
                if let Ok(Some(mut req)) = server.recv_timeout(Duration::from_millis(50)) {
                    let mut body = Vec::new();
                    let _ = std::io::Read::read_to_end(req.as_reader(), &mut body);
                    let id = req
                        .headers()
                        .iter()
                        .find(|h| h.field.equiv("X-Report-Id"))
                        .map(|h| h.value.to_string())
                        .unwrap_or_default();
                    let i = n.fetch_add(1, Ordering::SeqCst);
                    let status = *statuses.get(i).or(statuses.last()).unwrap_or(&500);
                    if (200..300).contains(&status) {
                        assert!(report_format::decode(&body).expect("a report").report.meta.is_some());
                        r2.lock().expect("lock").push(id);
                    }
                    let _ = req.respond(tiny_http::Response::empty(status));
                }
            }
        });
        Scripted { url, received, stop, thread: Some(thread) }
    }
}

impl Drop for Scripted {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn policy(url: &str) -> UploadPolicy {
    let mut p = UploadPolicy::new(url);
    p.timeout = Duration::from_secs(10);
    p.retry_initial = Duration::ZERO; // retry at once in tests; backoff itself is unit-tested
    p
}

#[test]
fn collector_down_then_up_keeps_and_later_sends() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("open");
    let name = put_report(&store, 1);
    // Nothing listens on this port: the connection is refused.
    let closed = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let dead_url = format!("http://{}/upload", closed.local_addr().expect("addr"));
    drop(closed);
    let s = upload_pending(&store, &policy(&dead_url), None).expect("pass");
    assert!(s.delivered.is_empty());
    assert_eq!(s.kept.len(), 1, "{s:?}");
    assert_eq!(store.pending().expect("list").len(), 1, "the report is kept");
    let st = store.retry_state(&name);
    assert_eq!(st.attempts, 1);
    assert!(!st.last_error.is_empty());

    // "Next launch": the collector is up.
    let srv = Scripted::start(vec![201]);
    let s = upload_pending(&store, &policy(&srv.url), None).expect("pass");
    assert_eq!(s.delivered, vec![name.clone()]);
    assert!(store.pending().expect("list").is_empty());
    assert_eq!(store.retry_state(&name).attempts, 0, "retry state removed with the report");
    assert_eq!(srv.received.lock().expect("lock").as_slice(), ["01010101-0101-0101-0101-010101010101"]);
}

#[test]
fn server_error_then_created_and_backoff_is_respected() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("open");
    let name = put_report(&store, 2);
    let srv = Scripted::start(vec![500, 201]);
    let s = upload_pending(&store, &policy(&srv.url), None).expect("pass");
    assert_eq!(s.kept, vec![(name.clone(), "HTTP 500".to_string())]);

    // With a real backoff the next pass waits.
    let mut p = policy(&srv.url);
    p.retry_initial = Duration::from_secs(3600);
    let mut st = store.retry_state(&name);
    st.next_attempt_ms = u64::MAX / 2;
    store.set_retry_state(&name, &st).expect("state");
    let s = upload_pending(&store, &p, None).expect("pass");
    assert_eq!(s.waiting, 1);
    assert!(srv.received.lock().expect("lock").is_empty());

    st.next_attempt_ms = 0;
    store.set_retry_state(&name, &st).expect("state");
    let s = upload_pending(&store, &policy(&srv.url), None).expect("pass");
    assert_eq!(s.delivered, vec![name]);
}

#[test]
fn damaged_reports_are_sent_and_unreadable_or_refused_ones_set_aside() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("open");
    let good = put_report(&store, 3);
    let bad = put_report(&store, 4);
    let p = store.pending_dir().join(&bad);
    let mut bytes = std::fs::read(&p).expect("read");
    let n = bytes.len();
    bytes[n - 2] ^= 0x40;
    std::fs::write(&p, &bytes).expect("write");
    let d = report_format::decode(&bytes).expect("decodes");
    assert!(!d.is_intact() && d.report.meta.is_some(), "the test needs a damaged report that kept its id");
    std::fs::write(store.pending_dir().join("garbage.crashreport"), b"not a report at all").expect("write");

    let srv = Scripted::start(vec![201]);
    let s = upload_pending(&store, &policy(&srv.url), None).expect("pass");
    let mut delivered = s.delivered.clone();
    delivered.sort();
    assert_eq!(delivered, vec![good, bad], "the damaged report is sent: the collector stores it flagged");
    assert_eq!(s.set_aside.len(), 1, "{s:?}");
    assert_eq!(srv.received.lock().expect("lock").len(), 2);
    assert_eq!(store.list("damaged").expect("list"), vec!["garbage.crashreport".to_string()]);
    let why = std::fs::read_to_string(dir.path().join("damaged/garbage.crashreport.why")).expect("why");
    assert!(why.contains("not uploaded"), "{why}");

    // A permanent 4xx sets the report aside too.
    let refused = put_report(&store, 5);
    let srv = Scripted::start(vec![422]);
    let s = upload_pending(&store, &policy(&srv.url), None).expect("pass");
    assert_eq!(s.set_aside.len(), 1);
    assert!(store.list("damaged").expect("list").contains(&refused));
}

#[test]
fn two_uploaders_on_one_directory_send_each_report_once() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("open");
    let names: Vec<String> = (10..40).map(|i| put_report(&store, i)).collect();
    let srv = Scripted::start(vec![201]);
    let url = srv.url.clone();
    let sums: Vec<_> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..2)
            .map(|_| {
                let url = url.clone();
                let root = dir.path().to_owned();
                s.spawn(move || upload_pending(&Store::open(root).expect("open"), &policy(&url), None).expect("pass"))
            })
            .collect();
        hs.into_iter().map(|h| h.join().expect("thread")).collect()
    });
    let mut got = srv.received.lock().expect("lock").clone();
    got.sort();
    let mut dedup = got.clone();
    dedup.dedup();
    assert_eq!(got, dedup, "a report was sent twice");
    assert_eq!(got.len(), names.len());
    assert_eq!(sums.iter().map(|s| s.delivered.len()).sum::<usize>(), names.len());
    assert!(store.pending().expect("list").is_empty());
}

/// Not a test of its own: the entry point of the child processes of `two_processes_...` below (it does nothing
/// unless `CHILD_UPLOAD_DIR` is set).
#[test]
fn child_uploader_entry_point() {
    let (Ok(dir), Ok(url)) = (std::env::var("CHILD_UPLOAD_DIR"), std::env::var("CHILD_UPLOAD_URL")) else { return };
    let s = upload_pending(&Store::open(dir).expect("open"), &policy(&url), None).expect("pass");
    println!("CHILD_DELIVERED {}", s.delivered.len());
}

#[test]
fn two_processes_on_one_directory_send_each_report_once() {
    let dir = tempfile::tempdir().expect("tmp");
    let store = Store::open(dir.path()).expect("open");
    let n = 40usize;
    for i in 0..n {
        put_report(&store, 100 + i as u8);
    }
    let srv = Scripted::start(vec![201]);
    let exe = std::env::current_exe().expect("exe");
    let children: Vec<_> = (0..2)
        .map(|_| {
            std::process::Command::new(&exe)
                .args(["child_uploader_entry_point", "--exact", "--nocapture", "--test-threads=1"])
                .env("CHILD_UPLOAD_DIR", dir.path())
                .env("CHILD_UPLOAD_URL", &srv.url)
                .stdout(std::process::Stdio::piped())
                .spawn()
                .expect("spawn")
        })
        .collect();
    let delivered: usize = children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().expect("wait");
            assert!(out.status.success());
            let text = String::from_utf8_lossy(&out.stdout).into_owned();
            text.lines()
                .find_map(|l| l.split("CHILD_DELIVERED ").nth(1).and_then(|n| n.trim().parse::<usize>().ok()))
                .unwrap_or_else(|| panic!("no count from child: {text}"))
        })
        .collect::<Vec<_>>()
        .iter()
        .sum();
    let mut got = srv.received.lock().expect("lock").clone();
    got.sort();
    let before = got.len();
    got.dedup();
    assert_eq!(before, got.len(), "a report was sent twice");
    assert_eq!((got.len(), delivered), (n, n));
    assert!(store.pending().expect("list").is_empty());
}

#[test]
fn the_whole_loop_with_a_real_crash() {
    // The demo example crashes for real, relaunches, uploads to an in-process collector (the `collector` crate,
    // with an ingest token), uploads its own binary as the debug file and prints the report the collector
    // symbolicated.
    // `cargo test` builds examples next to the test binaries' directory.
    let exe = std::env::current_exe().expect("exe");
    let demo = exe.parent().and_then(|d| d.parent()).map(|d| d.join("examples").join("demo")).expect("path");
    assert!(demo.exists(), "the demo example was not built at {}", demo.display());
    let out = std::process::Command::new(&demo).output().expect("runs");
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "demo failed:\n{err}");
    assert!(err.contains("first launch ended with signal: 11"), "{err}");
    assert!(text.contains("uploaded 1 report(s) before enable() returned"), "{text}");
    assert!(err.contains("the collector holds 1 report(s); group: SIGSEGV (SEGV_MAPERR) in demo "), "{err}");
    assert!(text.contains("Exception Type:  SIGSEGV (SEGV_MAPERR)"), "{text}");
    assert!(text.contains("Identifier:          com.example.demo"), "{text}");
    assert!(text.contains("Thread 1 name:  network"), "{text}");
    // The crashing call chain, symbolicated, in order.
    let pos = |f: &str| text.find(f).unwrap_or_else(|| panic!("{f} missing:\n{text}"));
    assert!(pos("demo::parse_coupon") < pos("demo::apply_discount"));
    assert!(pos("demo::apply_discount") < pos("demo::handle_checkout"));
}
