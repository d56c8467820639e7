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
//! watched thread's stack alone is captured (stacks on demand) and handed to it; no report is written. The
//! callback runs on a thread of its own (`hang-notifier`), never on the watchdog: it may allocate, and while the
//! stalled thread holds the allocator's lock it would block there, and a watchdog blocked in it could not write
//! the hang report. The watchdog only copies the frames into a preallocated buffer (atomics) and wakes the
//! notifier (`Thread::unpark`: an atomic swap and a futex wake); a slow frame that comes while the callback still
//! runs is counted but not handed to it.
//!
//! **Arming.** The watchdog starts watching at the first [`heartbeat`] or [`idle`] after [`start`]: an event loop
//! that never reports progress is not taken for a hang. A hang report refused because another non-fatal report
//! was being written at that moment ([`crate::nonfatal::NonFatalError::Busy`]) is tried again at the next wake;
//! one that failed otherwise is counted ([`HangStats::report_failures`]) and not retried for that stall.

use crate::ondemand::nonfatal::{self, Request};
use report_format::encode::NON_FATAL_HANG;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

/// Incremented by [`heartbeat`] and [`idle`].
static BEAT: AtomicU64 = AtomicU64::new(0);
/// Set by [`idle`], cleared by [`heartbeat`].
static IDLE: AtomicBool = AtomicBool::new(false);
static HANGS: AtomicU64 = AtomicU64::new(0);
static SLOW_FRAMES: AtomicU64 = AtomicU64::new(0);
static REPORT_FAILURES: AtomicU64 = AtomicU64::new(0);

/// A slow frame, handed to [`HangConfig::on_slow_frame`] on the notifier thread.
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
    /// Called for each slow frame on a notifier thread of its own (not the watchdog: it may allocate, or block;
    /// slow frames that come while it runs are counted and not handed to it).
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

/// Frames a slow frame hands to its callback at most.
const SLOW_FRAMES_MAX: usize = 512;

/// A slow frame on its way from the watchdog to the notifier thread: written by the watchdog while `ready` is
/// false, read by the notifier while it is true (release/acquire), so neither waits for the other.
struct Notice {
    ready: AtomicBool,
    stop: AtomicBool,
    duration_ns: AtomicU64,
    len: AtomicUsize,
    frames: [AtomicU64; SLOW_FRAMES_MAX],
}

impl Notice {
    fn new() -> Notice {
        Notice {
            ready: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            duration_ns: AtomicU64::new(0),
            len: AtomicUsize::new(0),
            frames: [const { AtomicU64::new(0) }; SLOW_FRAMES_MAX],
        }
    }
}

/// The notifier thread: its notice and handle.
struct Notifier {
    notice: Arc<Notice>,
    thread: std::thread::JoinHandle<()>,
}

struct Running {
    stop: Arc<(Mutex<bool>, Condvar)>,
    thread: std::thread::JoinHandle<()>,
    notifier: Option<Notifier>,
    /// The process the threads run in: a forked child has none of them.
    pid: u32,
}

static RUNNING: Mutex<Option<Running>> = Mutex::new(None);

/// Starts the watchdog (see the module docs), and the notifier thread when [`HangConfig::on_slow_frame`] is set.
/// Prepares the non-fatal writer's buffers first, so that writing a hang report allocates nothing while the
/// watched thread may hold the allocator's lock.
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
    let notifier = match config.on_slow_frame {
        Some(f) => {
            let notice = Arc::new(Notice::new());
            let n = Arc::clone(&notice);
            let thread = std::thread::Builder::new()
                .name("hang-notifier".into())
                .spawn(move || notify(&n, f))
                .map_err(HangError::Spawn)?;
            Some(Notifier { notice, thread })
        }
        None => None,
    };
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let cfg = config.clone();
    let stop2 = Arc::clone(&stop);
    let to_notifier = notifier.as_ref().map(|n| (Arc::clone(&n.notice), n.thread.thread().clone()));
    // Progress counts from here (not from when the watchdog thread gets to run).
    let beat = BEAT.load(Ordering::Acquire);
    let spawned = std::thread::Builder::new()
        .name("hang-watchdog".into())
        .spawn(move || watch(&cfg, watched, beat, &stop2, to_notifier.as_ref().map(|(n, t)| (&**n, t))));
    let thread = match spawned {
        Ok(t) => t,
        Err(e) => {
            if let Some(n) = notifier {
                end_notifier(n);
            }
            return Err(HangError::Spawn(e));
        }
    };
    *running = Some(Running { stop, thread, notifier, pid: std::process::id() });
    Ok(())
}

/// Stops the watchdog and waits for it (a report being written is finished first), then the notifier thread (a
/// slow-frame callback under way is finished first, unless `stop` is called from that very callback). Does nothing
/// when it does not run. In a child forked while it ran, where neither thread exists, it only forgets them.
pub fn stop() {
    let r = RUNNING.lock().unwrap_or_else(|e| e.into_inner()).take();
    let Some(r) = r else { return };
    if r.pid != std::process::id() {
        // A forked child: the threads are the parent's. Joining one would wait forever, detaching it would act on
        // a thread that is not there.
        core::mem::forget(r);
        return;
    }
    let (flag, cv) = &*r.stop;
    *flag.lock().unwrap_or_else(|e| e.into_inner()) = true;
    cv.notify_all();
    let _ = r.thread.join();
    if let Some(n) = r.notifier {
        end_notifier(n);
    }
}

/// Tells the notifier to end and waits for it (unless this is the notifier: then it ends after the callback).
fn end_notifier(n: Notifier) {
    n.notice.stop.store(true, Ordering::Release);
    n.thread.thread().unpark();
    if n.thread.thread().id() != std::thread::current().id() {
        let _ = n.thread.join();
    }
}

/// Whether the watchdog runs.
pub fn is_running() -> bool {
    RUNNING.lock().map(|r| r.is_some()).unwrap_or(false)
}

/// The notifier thread's loop: waits (parked) for a slow frame and calls `f` with it.
fn notify(notice: &Notice, f: fn(&SlowFrame<'_>)) {
    let mut frames = [0u64; SLOW_FRAMES_MAX];
    loop {
        if notice.stop.load(Ordering::Acquire) {
            return;
        }
        if notice.ready.load(Ordering::Acquire) {
            let len = notice.len.load(Ordering::Relaxed).min(SLOW_FRAMES_MAX);
            for (d, s) in frames.iter_mut().zip(notice.frames.iter()).take(len) {
                *d = s.load(Ordering::Relaxed);
            }
            let duration = Duration::from_nanos(notice.duration_ns.load(Ordering::Relaxed));
            notice.ready.store(false, Ordering::Release);
            f(&SlowFrame { duration, frames: frames.get(..len).unwrap_or(&[]) });
            continue;
        }
        std::thread::park();
    }
}

/// What the watchdog does at a wake ([`Detector::tick`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Action {
    /// Nothing.
    Nothing,
    /// Write a hang report of a stall this long, then tell [`Detector::hang_written`] how it went.
    Hang(Duration),
    /// Hand a slow frame of a stall this long to the callback.
    SlowFrame(Duration),
}

/// How writing a hang report went.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Written {
    /// Written.
    Ok,
    /// Refused: another non-fatal report was being written (try again at the next wake).
    Busy,
    /// Failed otherwise (counted; not retried for this stall).
    Failed,
}

/// The watchdog's decisions, from the progress counters it reads at each wake (pure: no clock, no I/O).
#[derive(Debug)]
struct Detector {
    threshold: Duration,
    slow_frame: Option<Duration>,
    last_beat: u64,
    last_progress: Instant,
    /// A heartbeat or idle was seen since start: only then is a stall a stall.
    armed: bool,
    hang_reported: bool,
    slow_noted: bool,
}

impl Detector {
    fn new(cfg: &HangConfig, beat: u64, now: Instant) -> Detector {
        Detector {
            threshold: cfg.threshold,
            slow_frame: cfg.slow_frame,
            last_beat: beat,
            last_progress: now,
            armed: false,
            hang_reported: false,
            slow_noted: false,
        }
    }

    /// One wake at `now`, seeing the counter `beat` and the idle flag `idle`.
    fn tick(&mut self, now: Instant, beat: u64, idle: bool) -> Action {
        if beat != self.last_beat || idle {
            self.last_beat = beat;
            self.last_progress = now;
            self.armed = true;
            self.hang_reported = false;
            self.slow_noted = false;
            return Action::Nothing;
        }
        if !self.armed {
            return Action::Nothing;
        }
        let stalled = now.saturating_duration_since(self.last_progress);
        if !self.hang_reported && stalled >= self.threshold {
            return Action::Hang(stalled);
        }
        if let Some(slow) = self.slow_frame {
            if !self.slow_noted && stalled >= slow && stalled < self.threshold {
                self.slow_noted = true;
                return Action::SlowFrame(stalled);
            }
        }
        Action::Nothing
    }

    /// How the hang report [`Detector::tick`] asked for went.
    fn hang_written(&mut self, w: Written) {
        if w != Written::Busy {
            self.hang_reported = true;
        }
    }
}

/// The watchdog's loop. It never calls the app's code: slow frames go to the notifier through `notifier`.
fn watch(
    cfg: &HangConfig,
    watched: u64,
    beat: u64,
    stop: &(Mutex<bool>, Condvar),
    notifier: Option<(&Notice, &std::thread::Thread)>,
) {
    let period = cfg.effective_period();
    let mut detector = Detector::new(cfg, beat, Instant::now());
    let mut frames = [0u64; SLOW_FRAMES_MAX];
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
        match detector.tick(Instant::now(), BEAT.load(Ordering::Acquire), IDLE.load(Ordering::Acquire)) {
            Action::Nothing => {}
            Action::Hang(stalled) => detector.hang_written(report_hang(cfg, watched, stalled)),
            Action::SlowFrame(stalled) => {
                SLOW_FRAMES.fetch_add(1, Ordering::Relaxed);
                // Only when the notifier is free: the previous slow frame's callback may still run.
                if let Some((notice, thread)) = notifier.filter(|(n, _)| !n.ready.load(Ordering::Acquire)) {
                    let n = crate::stacks::thread_stack(watched, &mut frames, period).map_or(0, |c| c.len);
                    for (d, s) in notice.frames.iter().zip(frames.iter()).take(n) {
                        d.store(*s, Ordering::Relaxed);
                    }
                    notice.len.store(n, Ordering::Relaxed);
                    notice.duration_ns.store(u64::try_from(stalled.as_nanos()).unwrap_or(u64::MAX), Ordering::Relaxed);
                    notice.ready.store(true, Ordering::Release);
                    thread.unpark();
                }
            }
        }
    }
}

/// Writes the hang report of a stall of `stalled` (allocation-free: `nonfatal::write`; the reason text is built
/// in a stack buffer), and says how it went.
fn report_hang(cfg: &HangConfig, watched: u64, stalled: Duration) -> Written {
    let mut text = [0u8; 128];
    let reason = reason_text(&mut text, stalled, cfg.threshold);
    let req = Request {
        kind: NON_FATAL_HANG,
        reason,
        duration_ns: Some(u64::try_from(stalled.as_nanos()).unwrap_or(u64::MAX)),
        focus_tid: watched,
    };
    match nonfatal::write(&req) {
        Ok(_) => {
            HANGS.fetch_add(1, Ordering::Relaxed);
            Written::Ok
        }
        Err(nonfatal::NonFatalError::Busy) => Written::Busy,
        Err(_) => {
            REPORT_FAILURES.fetch_add(1, Ordering::Relaxed);
            Written::Failed
        }
    }
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

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// An event loop that never reported progress is not hung: no report `threshold` after start.
    #[test]
    fn nothing_is_reported_before_the_first_heartbeat() {
        let cfg = HangConfig { threshold: ms(400), slow_frame: Some(ms(100)), ..HangConfig::default() };
        let t0 = Instant::now();
        let mut d = Detector::new(&cfg, 7, t0);
        for k in 1..40 {
            assert_eq!(d.tick(t0 + ms(50 * k), 7, false), Action::Nothing, "wake {k}, no heartbeat yet");
        }
        // The first heartbeat arms it; a stall after it is one.
        let t1 = t0 + ms(2000);
        assert_eq!(d.tick(t1, 8, false), Action::Nothing);
        assert_eq!(d.tick(t1 + ms(150), 8, false), Action::SlowFrame(ms(150)));
        assert_eq!(d.tick(t1 + ms(450), 8, false), Action::Hang(ms(450)));
        // Idle arms it too.
        let mut d = Detector::new(&cfg, 7, t0);
        assert_eq!(d.tick(t0 + ms(10), 7, true), Action::Nothing);
        assert_eq!(d.tick(t0 + ms(500), 7, false), Action::Hang(ms(490)));
    }

    /// A hang report refused as Busy is tried again at the next wake; one written, or failed otherwise, is not.
    #[test]
    fn a_hang_report_refused_as_busy_is_tried_again() {
        let cfg = HangConfig { threshold: ms(400), slow_frame: None, ..HangConfig::default() };
        let t0 = Instant::now();
        let mut d = Detector::new(&cfg, 0, t0);
        assert_eq!(d.tick(t0, 1, false), Action::Nothing);
        assert_eq!(d.tick(t0 + ms(400), 1, false), Action::Hang(ms(400)));
        d.hang_written(Written::Busy);
        assert_eq!(d.tick(t0 + ms(600), 1, false), Action::Hang(ms(600)), "retried after Busy");
        d.hang_written(Written::Ok);
        assert_eq!(d.tick(t0 + ms(800), 1, false), Action::Nothing, "once per stall");
        // The next stall is reported again; a failure other than Busy is not retried.
        assert_eq!(d.tick(t0 + ms(900), 2, false), Action::Nothing);
        assert_eq!(d.tick(t0 + ms(1300), 2, false), Action::Hang(ms(400)));
        d.hang_written(Written::Failed);
        assert_eq!(d.tick(t0 + ms(1500), 2, false), Action::Nothing);
    }

    #[test]
    fn the_reason_names_the_stall_and_the_threshold() {
        let mut b = [0u8; 128];
        let t = reason_text(&mut b, Duration::from_millis(2412), Duration::from_secs(2));
        assert_eq!(t, b"main thread unresponsive for 2.41 s (threshold 2.00 s)");
    }
}
