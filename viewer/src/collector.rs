//! The collector behind `viewer serve`: receives uploads from `reporter` over HTTP, checks them and stores each
//! report once, by id. Protocol: `report-format/SCHEMA.md` §7.
//!
//! Storage: `<store>/<REPORT-ID>.crashreport`, written to a temporary name and then hard-linked into place, so two
//! uploads of the same id at once store it once (the second link fails with "exists" and is answered `200`).
//! Plain HTTP, meant for loopback and for tests; put a TLS-terminating proxy in front for anything else.
//!
//! Besides uploads (`POST`, any path) it answers `GET /` with a one-line summary and `GET /reports` with the stored
//! report ids, one per line, oldest capture first (what `viewer list` shows, machine-readable; `ios-harness` polls
//! it to see an upload arrive).

use crate::names::{signal_name, SignalOs};
use report_format::framing::FILE_SUFFIX;
use report_format::transport::{CONTENT_TYPE, MAX_UPLOAD_BYTES, REPORT_ID_HEADER};
use std::fs;
use std::io::{self, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Default listening address of `viewer serve`.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8787";

/// A running collector.
pub struct Collector {
    server: Arc<tiny_http::Server>,
    store: PathBuf,
    max_body: u64,
    stop: Arc<AtomicBool>,
    tmp_seq: Arc<AtomicU64>,
}

/// One stored report, for `viewer list`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredReport {
    /// Report id (uppercase dashed UUID), the file stem.
    pub id: String,
    /// File path.
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// Capture time, ns since the Unix epoch.
    pub capture_time_ns: Option<u64>,
    /// Process name.
    pub process: Option<String>,
    /// One-line summary of the exception, e.g. `SIGSEGV` or `EXC_BAD_ACCESS`.
    pub exception: Option<String>,
}

/// What the collector answered, for logs and tests.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    /// HTTP status.
    pub status: u16,
    /// Text body.
    pub body: String,
}

impl Collector {
    /// Binds to `addr` ("127.0.0.1:0" picks a free port) and creates `store` (mode 0700) when needed.
    ///
    /// # Errors
    /// I/O errors binding or creating the store.
    pub fn bind(addr: &str, store: impl Into<PathBuf>) -> io::Result<Collector> {
        let store = store.into();
        let mut b = fs::DirBuilder::new();
        b.recursive(true);
        #[cfg(unix)]
        std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
        b.create(&store)?;
        let server =
            tiny_http::Server::http(addr).map_err(|e| io::Error::other(format!("cannot listen on {addr}: {e}")))?;
        Ok(Collector {
            server: Arc::new(server),
            store,
            max_body: MAX_UPLOAD_BYTES,
            stop: Arc::new(AtomicBool::new(false)),
            tmp_seq: Arc::new(AtomicU64::new(0)),
        })
    }

    /// Sets the largest accepted body in bytes (default [`MAX_UPLOAD_BYTES`]).
    pub fn max_body(mut self, bytes: u64) -> Self {
        self.max_body = bytes;
        self
    }

    /// The bound address (useful after binding port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.server.server_addr().to_ip()
    }

    /// A flag that makes [`Collector::serve`] return (within 100 ms) once set.
    pub fn stop_flag(&self) -> Arc<AtomicBool> {
        self.stop.clone()
    }

    /// Serves requests on `workers` threads until the stop flag is set. `log` receives one line per request.
    pub fn serve(&self, workers: usize, log: impl Fn(&str) + Send + Sync + 'static) {
        let log = Arc::new(log);
        std::thread::scope(|s| {
            for _ in 0..workers.max(1) {
                let log = log.clone();
                s.spawn(move || {
                    while !self.stop.load(Ordering::SeqCst) {
                        match self.server.recv_timeout(Duration::from_millis(100)) {
                            Ok(Some(req)) => self.handle(req, &*log),
                            Ok(None) => {}
                            Err(e) => log(&format!("accept failed: {e}")),
                        }
                    }
                });
            }
        });
    }

    fn handle(&self, mut req: tiny_http::Request, log: &dyn Fn(&str)) {
        let answer = self.answer(&mut req);
        log(&format!("{} {} -> {} {}", req.method(), req.url(), answer.status, answer.body.trim_end()));
        let resp = tiny_http::Response::from_string(answer.body).with_status_code(answer.status);
        let _ = req.respond(resp);
    }

    fn answer(&self, req: &mut tiny_http::Request) -> Answer {
        let a = |status: u16, body: String| Answer { status, body };
        match req.method() {
            tiny_http::Method::Post => {}
            tiny_http::Method::Get if req.url() == "/" => {
                let n = list(&self.store).map(|v| v.len()).unwrap_or(0);
                return a(200, format!("crash report collector: {n} reports stored\n"));
            }
            // Machine-readable list for test harnesses (ios-harness polls it to see an upload arrive).
            tiny_http::Method::Get if req.url().split('?').next() == Some("/reports") => {
                return match list(&self.store) {
                    Ok(v) => a(200, v.iter().map(|r| format!("{}\n", r.id)).collect()),
                    Err(e) => a(500, format!("cannot list the store: {e}\n")),
                };
            }
            _ => return a(405, "only POST uploads (and GET / or GET /reports) are accepted\n".into()),
        }
        let ctype = header(req, "Content-Type").unwrap_or_default();
        if ctype.split(';').next().map(str::trim) != Some(CONTENT_TYPE) {
            return a(415, format!("expected Content-Type: {CONTENT_TYPE}\n"));
        }
        if req.body_length().is_some_and(|n| n as u64 > self.max_body) {
            return a(413, format!("body larger than {} bytes\n", self.max_body));
        }
        let claimed_id = header(req, REPORT_ID_HEADER);
        let mut body = Vec::new();
        if let Err(e) = req.as_reader().take(self.max_body + 1).read_to_end(&mut body) {
            return a(400, format!("could not read the body: {e}\n"));
        }
        if body.len() as u64 > self.max_body {
            return a(413, format!("body larger than {} bytes\n", self.max_body));
        }
        let d = match report_format::decode(&body) {
            Ok(d) => d,
            Err(e) => return a(400, format!("{e}\n")),
        };
        if !d.is_intact() {
            let p: Vec<String> = d.problems.iter().map(ToString::to_string).collect();
            return a(400, format!("damaged report: {}\n", p.join("; ")));
        }
        let Some(meta) = d.report.meta.as_ref() else { return a(400, "report has no META section\n".into()) };
        let id = meta.report_id.to_string();
        if claimed_id.as_deref().is_some_and(|c| !c.eq_ignore_ascii_case(&id)) {
            return a(400, format!("{REPORT_ID_HEADER} does not match the report's id {id}\n"));
        }
        match self.store_once(&id, &body) {
            Ok(true) => a(201, format!("stored {id}\n")),
            Ok(false) => a(200, format!("already stored {id}\n")),
            Err(e) => a(500, format!("could not store {id}: {e}\n")),
        }
    }

    /// Stores `bytes` as `<id>.crashreport` unless present. `Ok(true)` when this call stored it.
    fn store_once(&self, id: &str, bytes: &[u8]) -> io::Result<bool> {
        let dst = self.store.join(format!("{id}{FILE_SUFFIX}"));
        if dst.exists() {
            return Ok(false);
        }
        let seq = self.tmp_seq.fetch_add(1, Ordering::SeqCst);
        let tmp = self.store.join(format!(".{id}.{}.{seq}.tmp", std::process::id()));
        {
            let mut o = fs::OpenOptions::new();
            o.write(true).create_new(true);
            #[cfg(unix)]
            std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
            let mut f = o.open(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
        }
        let linked = fs::hard_link(&tmp, &dst);
        let _ = fs::remove_file(&tmp);
        match linked {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(e),
        }
    }
}

fn header(req: &tiny_http::Request, name: &'static str) -> Option<String> {
    req.headers().iter().find(|h| h.field.equiv(name)).map(|h| h.value.as_str().to_owned())
}

/// The reports in a collector store, oldest capture first. Files that do not decode are listed with empty fields.
///
/// # Errors
/// I/O errors listing the directory.
pub fn list(store: &Path) -> io::Result<Vec<StoredReport>> {
    let mut v = Vec::new();
    for e in fs::read_dir(store)? {
        let e = e?;
        let path = e.path();
        let Some(id) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(FILE_SUFFIX)) else {
            continue;
        };
        if id.starts_with('.') {
            continue;
        }
        let bytes = fs::read(&path)?;
        let d = report_format::decode(&bytes).ok();
        let r = d.as_ref().map(|d| &d.report);
        let meta = r.and_then(|r| r.meta.as_ref());
        v.push(StoredReport {
            id: id.to_owned(),
            size: bytes.len() as u64,
            capture_time_ns: meta.and_then(|m| m.capture_time_ns),
            process: meta.and_then(|m| m.process.name.clone()),
            exception: r.and_then(|r| r.exception.as_ref()).and_then(|e| {
                let os = if meta.is_none_or(|m| m.os.is_apple()) { SignalOs::Darwin } else { SignalOs::Linux };
                let sig = e.signal?;
                Some(signal_name(os, sig).map(str::to_owned).unwrap_or_else(|| format!("signal {sig}")))
            }),
            path,
        });
    }
    v.sort_by(|a, b| a.capture_time_ns.cmp(&b.capture_time_ns).then_with(|| a.id.cmp(&b.id)));
    Ok(v)
}
