//! Enables crash reporting at app launch and uploads pending reports on the next launch.
//!
//! ```no_run
//! use reporter::{AppInfo, Reporter};
//! let r = Reporter::builder("/var/mobile/Containers/Data/Application/X/Library/Caches/crashes")
//!     .upload_url("https://crashes.example.com/upload")
//!     .app_info(AppInfo { bundle_id: "com.example.app".into(), short_version: "1.2".into(), build_version: "42".into() })
//!     .enable()?;
//! r.set_value("user.plan", "pro")?;
//! # Ok::<(), reporter::Error>(())
//! ```
//!
//! [`Builder::enable`] installs the crash handler (`handler::install`) writing into the store's `pending/`
//! directory, tidies the store (claims of dead processes back to pending, torn writes set aside, the pending limit
//! enforced), and starts uploading pending reports on a background thread so launch is not blocked. When the
//! previous run crashed within [`Limits::crash_loop_window`] of its launch (a crash loop: the app may crash again
//! before a background upload finishes), it uploads before returning, bounded by [`Limits::crash_loop_deadline`].
//!
//! Store layout: [`store`]. Upload protocol and retry policy: [`upload`]. C ABI: [`ffi`] and `include/crash_reporter.h`.

pub mod app;
pub mod ffi;
pub mod store;
pub mod upload;

pub use app::AppInfo;
pub use handler::hangs::{heartbeat, idle, HangConfig, HangError, HangStats};
pub use handler::nonfatal::{NonFatalError, ReportId};
pub use handler::set_crash_reason;
pub use store::{PendingReport, Store};
pub use upload::{Summary, UploadPolicy};

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Limits and timings. `Limits::default()` gives the values documented on each field.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Most reports kept waiting for upload; the oldest beyond it are dropped and the drop recorded (default 10).
    pub max_pending: usize,
    /// Reports older than this are set aside as expired instead of uploaded (default 30 days).
    pub max_report_age: Duration,
    /// First retry delay after a failed upload, doubled after each further failure (default 60 s).
    pub retry_initial: Duration,
    /// Longest retry delay (default 6 h).
    pub retry_max: Duration,
    /// Timeout of one upload request (default 30 s).
    pub upload_timeout: Duration,
    /// A crash this soon after its launch marks a crash loop (default 5 s).
    pub crash_loop_window: Duration,
    /// How long `enable()` may spend uploading in a crash loop (default 3 s).
    pub crash_loop_deadline: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_pending: 10,
            max_report_age: Duration::from_secs(30 * 24 * 3600),
            retry_initial: Duration::from_secs(60),
            retry_max: Duration::from_secs(6 * 3600),
            upload_timeout: Duration::from_secs(30),
            crash_loop_window: Duration::from_secs(5),
            crash_loop_deadline: Duration::from_secs(3),
        }
    }
}

/// What can go wrong.
#[derive(Debug)]
pub enum Error {
    /// The upload URL is neither `https://` nor `http://` to a loopback address.
    InsecureUrl(String),
    /// The report directory could not be prepared.
    Store(io::Error),
    /// The crash handler could not be installed (includes: already enabled in this process).
    Install(handler::InstallError),
    /// No upload URL was configured, so nothing can be uploaded.
    NoUploadUrl,
    /// A user key or value was refused (empty key, too long, table full); the text says which.
    Value(handler::user_values::ValueError),
    /// `Info.plist` could not be read for the app metadata.
    AppInfo(app::InfoPlistError),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InsecureUrl(u) => {
                write!(f, "upload URL {u:?} must use https (plain http only to a loopback address)")
            }
            Error::Store(e) => write!(f, "report directory: {e}"),
            Error::Install(e) => write!(f, "crash handler: {e}"),
            Error::NoUploadUrl => write!(f, "no upload URL configured"),
            Error::Value(e) => write!(f, "user value: {e}"),
            Error::AppInfo(e) => write!(f, "app metadata: {e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Store(e)
    }
}

/// Checks an upload URL: `https://…`, or `http://` to `localhost`, `127.0.0.0/8` or `[::1]`.
///
/// # Errors
/// [`Error::InsecureUrl`] otherwise.
pub fn check_url(url: &str) -> Result<(), Error> {
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("https://") {
        return Ok(());
    }
    let Some(rest) = lower.strip_prefix("http://") else { return Err(Error::InsecureUrl(url.into())) };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = if let Some(v6) = host.strip_prefix('[') {
        v6.split(']').next().unwrap_or("")
    } else {
        host.split(':').next().unwrap_or("")
    };
    let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if loopback {
        Ok(())
    } else {
        Err(Error::InsecureUrl(url.into()))
    }
}

/// Configures and enables crash reporting.
#[derive(Clone, Debug)]
pub struct Builder {
    dir: PathBuf,
    url: Option<String>,
    app: Option<AppInfo>,
    limits: Limits,
    handler_config: Option<handler::Config>,
}

/// Crash reporting, enabled. One per process.
#[derive(Debug)]
pub struct Reporter {
    store: Store,
    policy: Option<UploadPolicy>,
    limits: Limits,
    background: Mutex<Option<JoinHandle<io::Result<Summary>>>>,
    crash_loop: bool,
    loop_summary: Option<Summary>,
}

impl Reporter {
    /// Starts configuring: `dir` is the report directory (created, mode 0700).
    pub fn builder(dir: impl Into<PathBuf>) -> Builder {
        Builder { dir: dir.into(), url: None, app: None, limits: Limits::default(), handler_config: None }
    }

    /// The report store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// Sets a key/value that lands in the next crash report. The strings are copied into storage preallocated at
    /// install, so nothing is allocated at crash time. Setting a key again replaces its value.
    ///
    /// # Errors
    /// [`Error::Value`]: empty or too long key or value, or the table is full (limits in `handler::user_values`).
    pub fn set_value(&self, key: &str, value: &str) -> Result<(), Error> {
        handler::user_values::set(key, value).map_err(Error::Value)
    }

    /// Removes a key/value. Removing a key that is not set is not an error.
    pub fn remove_value(&self, key: &str) {
        handler::user_values::remove(key);
    }

    /// Reports waiting for upload, newest first.
    ///
    /// # Errors
    /// I/O errors listing the store.
    pub fn pending_reports(&self) -> Result<Vec<PendingReport>, Error> {
        Ok(self.store.pending()?)
    }

    /// Uploads pending reports now, on this thread (reports whose backoff has not run out are left).
    ///
    /// # Errors
    /// [`Error::NoUploadUrl`], or I/O errors listing the store.
    pub fn upload_pending(&self) -> Result<Summary, Error> {
        let policy = self.policy.as_ref().ok_or(Error::NoUploadUrl)?;
        Ok(upload::upload_pending(&self.store, policy, None)?)
    }

    /// Waits up to `timeout` for the background upload started by `enable()`; `None` when there was none, it is
    /// still running, or it was already collected.
    pub fn wait_for_background_upload(&self, timeout: Duration) -> Option<io::Result<Summary>> {
        let mut guard = self.background.lock().unwrap_or_else(|p| p.into_inner());
        let end = Instant::now() + timeout;
        while guard.as_ref().is_some_and(|h| !h.is_finished()) && Instant::now() < end {
            std::thread::sleep(Duration::from_millis(10));
        }
        if guard.as_ref().is_some_and(JoinHandle::is_finished) {
            return guard.take().and_then(|h| h.join().ok());
        }
        None
    }

    /// Whether `enable()` found that the previous run crashed right after launch.
    pub fn crash_loop_detected(&self) -> bool {
        self.crash_loop
    }

    /// What the synchronous crash-loop upload in `enable()` did, if one ran.
    pub fn crash_loop_upload(&self) -> Option<&Summary> {
        self.loop_summary.as_ref()
    }

    /// Writes a non-fatal report now (every thread's stack, format 2.3 META `nf`) into the pending reports: kind
    /// `app` with `reason`, or `manual` without. It is uploaded like a crash report (at the next launch, or by
    /// [`Reporter::upload_pending`]). See `handler::nonfatal::report`.
    ///
    /// # Errors
    /// [`NonFatalError`].
    pub fn report_non_fatal(&self, reason: Option<&str>) -> Result<ReportId, NonFatalError> {
        handler::nonfatal::report(reason)
    }

    /// Starts hang detection: a watchdog writes a non-fatal `hang` report when the watched thread (by default the
    /// calling one: call it on the thread that runs the event loop) makes no progress for longer than
    /// `config.threshold`. The event loop tells its progress with [`heartbeat`] and [`idle`]; on Apple platforms a
    /// run-loop observer on the main run loop does that too (type-checked only). See `handler::hangs`.
    ///
    /// # Errors
    /// [`HangError`].
    pub fn start_hang_detection(&self, config: &HangConfig) -> Result<(), HangError> {
        handler::hangs::start(config)?;
        #[cfg(target_vendor = "apple")]
        {
            let _ = handler::platform::darwin::runloop::observe_main_run_loop();
        }
        Ok(())
    }

    /// Stops hang detection (a hang report being written is finished first).
    pub fn stop_hang_detection(&self) {
        handler::hangs::stop();
    }

    /// The limits in force.
    pub fn limits(&self) -> &Limits {
        &self.limits
    }
}

fn now_ns() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as u64).unwrap_or(0)
}

/// Reads the previous launch's time and records this one, in `<root>/last-launch` (ns since the epoch, text).
fn swap_launch_marker(root: &Path, now: u64) -> Option<u64> {
    let path = root.join("last-launch");
    let prev = std::fs::read_to_string(&path).ok().and_then(|s| s.trim().parse().ok());
    let _ = store::write_private(&path, now.to_string().as_bytes());
    prev
}

/// True when the newest pending crash report was captured within `window` of the previous launch. Non-fatal
/// reports (format 2.3 META `nf`: a hang, one the app asked for) are not crashes: they are passed over.
fn is_crash_loop(store: &Store, prev_launch_ns: Option<u64>, window: Duration) -> bool {
    let Some(launch) = prev_launch_ns else { return false };
    let Ok(pending) = store.pending() else { return false };
    let newest_crash = pending.iter().find_map(|r| {
        let bytes = std::fs::read(&r.path).ok()?;
        let meta = report_format::decode(&bytes).ok()?.report.meta;
        match meta {
            Some(m) if m.non_fatal.is_some() => None,
            other => Some(other.and_then(|m| m.capture_time_ns)),
        }
    });
    newest_crash.flatten().is_some_and(|t| t >= launch && t - launch <= window.as_nanos() as u64)
}

impl Builder {
    /// The collector URL (`https://…`, or plain `http://` to a loopback address). Without one, reports are kept
    /// locally. The collector's ingest token goes in the URL's user part, `https://TOKEN@host/api/v1/reports`: it is
    /// sent as `Authorization: Bearer TOKEN` (see [`upload`]).
    pub fn upload_url(mut self, url: impl Into<String>) -> Self {
        self.url = Some(url.into());
        self
    }

    /// App metadata. Without it, Apple platforms read the main bundle's `Info.plist`; elsewhere the fields stay
    /// empty.
    pub fn app_info(mut self, app: AppInfo) -> Self {
        self.app = Some(app);
        self
    }

    /// Limits and timings.
    pub fn limits(mut self, limits: Limits) -> Self {
        self.limits = limits;
        self
    }

    /// Overrides the crash handler's configuration (table sizes, timeouts); its report directory and app fields
    /// are set by the builder.
    pub fn handler_config(mut self, config: handler::Config) -> Self {
        self.handler_config = Some(config);
        self
    }

    /// Installs the crash handler and starts uploading pending reports. See the crate documentation.
    ///
    /// # Errors
    /// [`Error::InsecureUrl`], [`Error::Store`], [`Error::Install`] (also when already enabled in this process),
    /// [`Error::AppInfo`] on Apple platforms when no app info was given and `Info.plist` is unreadable.
    pub fn enable(self) -> Result<Reporter, Error> {
        if let Some(u) = &self.url {
            check_url(u)?;
        }
        let app = match self.app {
            Some(a) => a,
            #[cfg(target_vendor = "apple")]
            None => AppInfo::from_main_bundle().map_err(Error::AppInfo)?,
            #[cfg(not(target_vendor = "apple"))]
            None => AppInfo::default(),
        };
        let store = Store::open(&self.dir)?;
        store.recover_stale_claims()?;
        store.sweep_reserved()?;
        store.sweep_torn()?;
        store.enforce_limit(self.limits.max_pending)?;

        let mut hc = self.handler_config.unwrap_or_else(|| handler::Config::new(store.pending_dir()));
        hc.report_dir = store.pending_dir();
        hc.app_id = app.bundle_id.clone();
        hc.short_version = app.short_version.clone();
        hc.build_version = app.build_version.clone();
        handler::install(&hc).map_err(Error::Install)?;

        let prev_launch = swap_launch_marker(store.root(), now_ns());
        let crash_loop = is_crash_loop(&store, prev_launch, self.limits.crash_loop_window);
        let policy = self.url.map(|url| UploadPolicy {
            url,
            timeout: self.limits.upload_timeout,
            retry_initial: self.limits.retry_initial,
            retry_max: self.limits.retry_max,
            max_age: self.limits.max_report_age,
        });
        let mut loop_summary = None;
        if let (true, Some(p)) = (crash_loop, &policy) {
            let mut p = p.clone();
            p.timeout = p.timeout.min(self.limits.crash_loop_deadline);
            let deadline = Instant::now() + self.limits.crash_loop_deadline;
            loop_summary = upload::upload_pending(&store, &p, Some(deadline)).ok();
        }
        let background = policy.clone().map(|p| {
            let s = store.clone();
            std::thread::Builder::new()
                .name("crash-report-upload".into())
                .spawn(move || upload::upload_pending(&s, &p, None))
        });
        let background = match background {
            Some(Ok(h)) => Some(h),
            Some(Err(e)) => return Err(Error::Store(e)),
            None => None,
        };
        Ok(Reporter {
            store,
            policy,
            limits: self.limits,
            background: Mutex::new(background),
            crash_loop,
            loop_summary,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_must_be_https_or_loopback() {
        for ok in [
            "https://crashes.example.com/upload",
            "HTTPS://x",
            "http://127.0.0.1:8787/",
            "http://127.5.6.7/",
            "http://localhost:1234/up",
            "http://[::1]:80/",
            "http://user@127.0.0.1/",
        ] {
            assert!(check_url(ok).is_ok(), "{ok}");
        }
        for bad in [
            "http://example.com/",
            "http://10.0.0.1/",
            "ftp://127.0.0.1/",
            "127.0.0.1:80",
            "http://127.0.0.1.evil.com/",
        ] {
            assert!(matches!(check_url(bad), Err(Error::InsecureUrl(_))), "{bad}");
        }
    }

    #[test]
    fn crash_loop_is_a_report_captured_right_after_the_previous_launch() {
        let dir = tempfile::tempdir().expect("tmp");
        let s = Store::open(dir.path()).expect("open");
        let launch = 1_000_000_000_000u64;
        let write = |name: &str, t: u64| {
            let meta = report_format::model::Meta { capture_time_ns: Some(t), ..Default::default() };
            let r = report_format::Report { format_version: (1, 0), meta: Some(meta), ..Default::default() };
            std::fs::write(s.pending_dir().join(name), report_format::owned::to_bytes(&r).expect("enc")).expect("w");
        };
        assert!(!is_crash_loop(&s, Some(launch), Duration::from_secs(5)), "no report, no loop");
        write("a.crashreport", launch + 2_000_000_000);
        assert!(is_crash_loop(&s, Some(launch), Duration::from_secs(5)));
        assert!(!is_crash_loop(&s, None, Duration::from_secs(5)), "first launch ever");
        assert!(!is_crash_loop(&s, Some(launch), Duration::from_secs(1)));
        // A non-fatal report right after launch (a hang, one the app asked for) is not a crash: passed over.
        std::fs::remove_file(s.pending_dir().join("a.crashreport")).expect("rm");
        let meta = report_format::model::Meta {
            capture_time_ns: Some(launch + 1_000_000_000),
            non_fatal: Some(report_format::model::NonFatal { kind: "hang".into(), ..Default::default() }),
            ..Default::default()
        };
        let r = report_format::Report { format_version: (2, 3), meta: Some(meta), ..Default::default() };
        std::fs::write(s.pending_dir().join("b.crashreport"), report_format::owned::to_bytes(&r).expect("enc"))
            .expect("w");
        assert!(!is_crash_loop(&s, Some(launch), Duration::from_secs(5)), "a hang is not a crash loop");
        assert_eq!(swap_launch_marker(dir.path(), 7), None);
        assert_eq!(swap_launch_marker(dir.path(), 9), Some(7));
    }
}
