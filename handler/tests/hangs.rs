//! Hang detection (`handler::hangs`) in this very process: a slow-frame callback that blocks (as one that
//! allocates would while the stalled thread holds the allocator's lock) does not keep the watchdog from writing
//! the hang report; and `stop` in a child forked while the watchdog ran returns and the child exits cleanly (the
//! threads are not there: `stop` forgets them; glibc marks the parent's threads as exited in the child, so a join
//! there returned too, on a descriptor whose stack glibc had reclaimed: this part passes without the pid check as
//! well). One test: the progress counters and the watchdog are process-wide.
#![cfg(target_os = "linux")]
#![allow(unsafe_code)]

use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

static CALLED: AtomicU64 = AtomicU64::new(0);
static RELEASE: AtomicBool = AtomicBool::new(false);
static ON_WATCHDOG: AtomicBool = AtomicBool::new(false);

/// Blocks until released (at most 20 s).
fn blocking_callback(_: &handler::hangs::SlowFrame<'_>) {
    CALLED.fetch_add(1, Ordering::SeqCst);
    if std::thread::current().name() == Some("hang-watchdog") {
        ON_WATCHDOG.store(true, Ordering::SeqCst);
    }
    let until = Instant::now() + Duration::from_secs(20);
    while !RELEASE.load(Ordering::SeqCst) && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn reports(dir: &Path) -> usize {
    std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .filter(|e| e.path().to_string_lossy().ends_with(".crashreport"))
        .count()
}

#[test]
fn a_blocked_slow_frame_callback_does_not_stop_the_hang_report_and_a_forked_child_can_stop() {
    let dir = tempfile::tempdir().expect("tempdir");
    handler::install(&handler::Config::new(dir.path())).expect("install");
    let cfg = handler::hangs::HangConfig {
        threshold: Duration::from_millis(400),
        slow_frame: Some(Duration::from_millis(100)),
        period: Some(Duration::from_millis(50)),
        on_slow_frame: Some(blocking_callback),
        thread: None,
    };
    handler::hangs::start(&cfg).expect("start");
    // This thread is the watched one: one heartbeat, then a stall (it waits here without heartbeats).
    handler::hangs::heartbeat();
    let until = Instant::now() + Duration::from_secs(10);
    while reports(dir.path()) == 0 && Instant::now() < until {
        std::thread::sleep(Duration::from_millis(10));
    }
    let written = reports(dir.path());
    let blocked_meanwhile = !RELEASE.load(Ordering::SeqCst);
    RELEASE.store(true, Ordering::SeqCst);
    assert!(CALLED.load(Ordering::SeqCst) >= 1, "the slow frame reached the callback");
    assert!(!ON_WATCHDOG.load(Ordering::SeqCst), "the callback ran on the watchdog thread");
    assert!(blocked_meanwhile);
    assert_eq!(written, 1, "no hang report while the slow-frame callback blocked");
    // The file is renamed into place a moment before the watchdog counts it.
    handler::hangs::idle();
    handler::hangs::stop();
    assert_eq!(handler::hangs::stats().hangs, 1);
    assert!(!handler::hangs::is_running());

    // A child forked while the watchdog runs can stop it: it only forgets the threads it does not have.
    handler::hangs::start(&cfg).expect("start again");
    // SAFETY: the child calls only `hangs::stop` (a lock no other thread of this test holds, no allocation) and
    // `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork");
    if pid == 0 {
        handler::hangs::stop();
        // SAFETY: ends the child at once, running nothing of the parent's.
        unsafe { libc::_exit(0) };
    }
    let until = Instant::now() + Duration::from_secs(10);
    let mut status = 0;
    let exited = loop {
        // SAFETY: waits for our own child, without blocking.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break true;
        }
        if Instant::now() >= until {
            // SAFETY: kills and reaps our own child.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            break false;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(exited, "hangs::stop in a forked child did not return");
    assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child status {status:#x}");
    handler::hangs::stop();
    assert!(!handler::hangs::is_running());
}
