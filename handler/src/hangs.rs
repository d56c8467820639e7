//! Hang detection: a watchdog thread that notices the watched thread (the app's main thread, running its event
//! loop) making no progress for longer than a threshold, and then writes a non-fatal `hang` report
//! ([`crate::nonfatal`]): every thread's stack, once per stall. If the app is killed during the stall (the iOS
//! watchdog's `0x8badf00d`, a user's force-quit), that report is what explains it at the next launch.
//!
//! Progress is told by the event loop itself: [`heartbeat`] each time it handles something, [`idle`] right before
//! it blocks waiting for the next event (waiting is not a hang). On Apple platforms a run-loop observer on the main
//! run loop does both (`crate::platform::darwin::runloop`, type-checked only); elsewhere the app calls them:
//!
//! ```no_run
//! # fn wait_for_event() -> u32 { 0 }
//! # fn handle(_: u32) {}
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! handler::install(&handler::Config::new("/tmp/crashes"))?;
//! handler::hangs::start(&handler::hangs::HangConfig::default())?; // on the event-loop thread
//! loop {
//!     handler::hangs::idle();
//!     let event = wait_for_event();
//!     handler::hangs::heartbeat();
//!     handle(event);
//! }
//! # }
//! ```
//!
//! **Cost.** [`heartbeat`] and [`idle`] are one relaxed atomic store each (plus, for [`heartbeat`], an increment);
//! the watchdog sleeps on a timed wait and wakes once per period ([`HangConfig::period`]: half the smaller
//! threshold, 250 ms by default) to compare two counters, and does nothing else while nothing stalls. The stall
//! is measured from the watchdog's last wake that saw progress, so a reported duration is at most one period short
//! of the real one, and a stall is noticed at most one period late.
//!
//! **Slow frames**, the lighter threshold ([`HangConfig::slow_frame`], 500 ms by default): a stall longer than it
//! (but not yet a hang) is counted ([`stats`]) and, if the app registered [`HangConfig::on_slow_frame`], the
//! watched thread's stack alone is captured (stacks on demand) and handed to it; no report is written.

use crate::ondemand::nonfatal::{self, Request};
use report_format::encode::NON_FATAL_HANG;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Incremented by [`heartbeat`] and [`idle`].
static BEAT: AtomicU64 = AtomicU64::new(0);
/// Set by [`idle`], cleared by [`heartbeat`].
static IDLE: AtomicBool = AtomicBool::new(false);
static HANGS: AtomicU64 = AtomicU64::new(0);
static SLOW_FRAMES: AtomicU64 = AtomicU64::new(0);
static REPORT_FAILURES: AtomicU64 = AtomicU64::new(0);

/// A slow frame, handed to [`HangConfig::on_slow_frame`] on the watchdog thread.
#[derive(Debug)]
pub struct SlowFrame<'a> {
    /// How long the watched thread had made no progress (at most one period short).
    pub duration: Duration,
    /// Its stack (as [`crate::stacks::thread_stack`] lists it); empty when it could not be captured.
    pub frames: &'a [u64],
}

/// What the watchdog watches for.
#[derive(Clone, Debug)]
pub struct HangConfig {
    /// A stall longer than this is a hang: one `hang` report per stall. Default 2 s.
    pub threshold: Duration,
    /// A stall longer than this (and shorter than `threshold`) is a slow frame: counted, and handed to
    /// `on_slow_frame` with the watched thread's stack. `None`: not watched. Default 500 ms.
    pub slow_frame: Option<Duration>,
    /// How often the watchdog wakes; `None`: half of the smaller of `threshold` and `slow_frame`.
    pub period: Option<Duration>,
    /// Called on the watchdog thread for each slow frame (it may allocate; it must not block for long).
    pub on_slow_frame: Option<fn(&SlowFrame<'_>)>,
    /// The thread to watch (a kernel thread id, as [`crate::stacks::current_thread_id`] gives it); `None`: the
    /// thread that calls [`start`].
    pub thread: Option<u64>,
}

impl Default for HangConfig {
    fn default() -> Self {
        HangConfig {
            threshold: Duration::from_secs(2),
            slow_frame: Some(Duration::from_millis(500)),
            period: None,
            on_slow_frame: None,
            thread: None,
        }
    }
}

impl HangConfig {
    /// The period the watchdog wakes at (see [`HangConfig::period`]), at least 10 ms.
    pub fn effective_period(&self) -> Duration {
        let smaller = self.slow_frame.map_or(self.threshold, |s| s.min(self.threshold));
        self.period.unwrap_or(smaller / 2).max(Duration::from_millis(10))
    }
}

/// Why [`start`] did not start the watchdog.
#[derive(Debug)]
pub enum HangError {
    /// The crash handler is not installed.
    NotInstalled,
    /// The watchdog already runs.
    AlreadyRunning,
    /// The threshold is zero.
    InvalidConfig,
    /// The watchdog thread could not be started.
    Spawn(std::io::Error),
}

impl core::fmt::Display for HangError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            HangError::NotInstalled => f.write_str("the crash handler is not installed"),
            HangError::AlreadyRunning => f.write_str("hang detection already runs"),
            HangError::InvalidConfig => f.write_str("the hang threshold must be above zero"),
            HangError::Spawn(e) => write!(f, "the watchdog thread could not be started: {e}"),
        }
    }
}

impl std::error::Error for HangError {}

/// What the watchdog saw so far (since the process started).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HangStats {
    /// Hangs reported (one per stall).
    pub hangs: u64,
    /// Slow frames seen.
    pub slow_frames: u64,
    /// Hang reports that could not be written.
    pub report_failures: u64,
}

/// The counters.
pub fn stats() -> HangStats {
    HangStats {
        hangs: HANGS.load(Ordering::Relaxed),
        slow_frames: SLOW_FRAMES.load(Ordering::Relaxed),
        report_failures: REPORT_FAILURES.load(Ordering::Relaxed),
    }
}

/// The watched thread made progress (call it each time the event loop handles something). One relaxed store and
/// one relaxed increment; allocation-free, lock-free, signal-safe.
#[inline]
pub fn heartbeat() {
    IDLE.store(false, Ordering::Relaxed);
    BEAT.fetch_add(1, Ordering::Relaxed);
}

/// The watched thread is about to wait for its next event: not a stall until the next [`heartbeat`]. One relaxed
/// store and one relaxed increment.
#[inline]
pub fn idle() {
    IDLE.store(true, Ordering::Relaxed);
    BEAT.fetch_add(1, Ordering::Relaxed);
}

struct Running {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: std::thread::JoinHandle<()>,
}

static RUNNING: Mutex<Option<Running>> = Mutex::new(None);

/// Starts the watchdog (see the module docs). Prepares the non-fatal writer's buffers first, so that writing a
/// hang report allocates nothing while the watched thread may hold the allocator's lock.
///
/// # Errors
/// [`HangError`].
pub fn start(config: &HangConfig) -> Result<(), HangError> {
    if config.threshold.is_zero() {
        return Err(HangError::InvalidConfig);
    }
    let mut running = RUNNING.lock().unwrap_or_else(|e| e.into_inner());
    if running.is_some() {
        return Err(HangError::AlreadyRunning);
    }
    crate::nonfatal::prepare().map_err(|_| HangError::NotInstalled)?;
    let watched = config.thread.unwrap_or_else(crate::stacks::current_thread_id);
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let cfg = config.clone();
    let stop2 = Arc::clone(&stop);
    let thread = std::thread::Builder::new()
        .name("hang-watchdog".into())
        .spawn(move || watch(&cfg, watched, &stop2))
        .map_err(HangError::Spawn)?;
    *running = Some(Running { stop, thread });
    Ok(())
}

/// Stops the watchdog and waits for it (a report being written is finished first). Does nothing when it does not
/// run.
pub fn stop() {
    let r = RUNNING.lock().unwrap_or_else(|e| e.into_inner()).take();
    if let Some(r) = r {
        let (flag, cv) = &*r.stop;
        *flag.lock().unwrap_or_else(|e| e.into_inner()) = true;
        cv.notify_all();
        let _ = r.thread.join();
    }
}

/// Whether the watchdog runs.
pub fn is_running() -> bool {
    RUNNING.lock().map(|r| r.is_some()).unwrap_or(false)
}

/// The watchdog's loop.
fn watch(cfg: &HangConfig, watched: u64, stop: &(Mutex<bool>, Condvar)) {
    let period = cfg.effective_period();
    let mut last_beat = BEAT.load(Ordering::Acquire);
    let mut last_progress = Instant::now();
    let mut hang_reported = false;
    let mut slow_noted = false;
    let mut frames = [0u64; 512];
    let (flag, cv) = stop;
    loop {
        {
            let guard = flag.lock().unwrap_or_else(|e| e.into_inner());
            if *guard {
                return;
            }
            let (guard, _) = cv.wait_timeout(guard, period).unwrap_or_else(|e| e.into_inner());
            if *guard {
                return;
            }
        }
        let now = Instant::now();
        let beat = BEAT.load(Ordering::Acquire);
        if beat != last_beat || IDLE.load(Ordering::Acquire) {
            last_beat = beat;
            last_progress = now;
            hang_reported = false;
            slow_noted = false;
            continue;
        }
        let stalled = now.duration_since(last_progress);
        if !hang_reported && stalled >= cfg.threshold {
            hang_reported = true;
            report_hang(cfg, watched, stalled);
            continue;
        }
        if let Some(slow) = cfg.slow_frame {
            if !slow_noted && stalled >= slow && stalled < cfg.threshold {
                slow_noted = true;
                SLOW_FRAMES.fetch_add(1, Ordering::Relaxed);
                if let Some(f) = cfg.on_slow_frame {
                    let n = crate::stacks::thread_stack(watched, &mut frames, period).map_or(0, |c| c.len);
                    f(&SlowFrame { duration: stalled, frames: frames.get(..n).unwrap_or(&[]) });
                }
            }
        }
    }
}

/// Writes the hang report of a stall of `stalled` (allocation-free: `nonfatal::write`; the reason text is built
/// in a stack buffer).
fn report_hang(cfg: &HangConfig, watched: u64, stalled: Duration) {
    let mut text = [0u8; 128];
    let reason = reason_text(&mut text, stalled, cfg.threshold);
    let req = Request {
        kind: NON_FATAL_HANG,
        reason,
        duration_ns: Some(u64::try_from(stalled.as_nanos()).unwrap_or(u64::MAX)),
        focus_tid: watched,
    };
    match nonfatal::write(&req) {
        Ok(_) => HANGS.fetch_add(1, Ordering::Relaxed),
        Err(_) => REPORT_FAILURES.fetch_add(1, Ordering::Relaxed),
    };
}

/// `main thread unresponsive for 2.41 s (threshold 2.00 s)` into `buf`, without allocating.
fn reason_text(buf: &mut [u8; 128], stalled: Duration, threshold: Duration) -> &[u8] {
    use std::io::Write;
    let mut c = std::io::Cursor::new(&mut buf[..]);
    let _ = write!(
        c,
        "main thread unresponsive for {:.2} s (threshold {:.2} s)",
        stalled.as_secs_f64(),
        threshold.as_secs_f64()
    );
    let n = usize::try_from(c.position()).unwrap_or(0);
    buf.get(..n).unwrap_or(&[])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_period_is_half_the_smaller_threshold_unless_given() {
        let c = HangConfig::default();
        assert_eq!(c.effective_period(), Duration::from_millis(250));
        let c = HangConfig { slow_frame: None, ..HangConfig::default() };
        assert_eq!(c.effective_period(), Duration::from_secs(1));
        let c = HangConfig { period: Some(Duration::from_millis(1)), ..HangConfig::default() };
        assert_eq!(c.effective_period(), Duration::from_millis(10), "at least 10 ms");
    }

    #[test]
    fn the_reason_names_the_stall_and_the_threshold() {
        let mut b = [0u8; 128];
        let t = reason_text(&mut b, Duration::from_millis(2412), Duration::from_secs(2));
        assert_eq!(t, b"main thread unresponsive for 2.41 s (threshold 2.00 s)");
    }
}
