//! Stacks on demand and non-fatal reports over the handler's life, with the default configuration (one capture
//! walker), in one test because the steps share the one install of this process and end with `uninstall`:
//! a capture waiting for a thread that does not answer leaves the walker to other captures; a non-fatal report
//! under `EMFILE` fails without taking the crash path's spare descriptors; one whose writing fails part-way is not
//! committed; uninstall with a capture signal still
//! queued does not kill the process, and stops the hang watchdog.
#![cfg(target_os = "linux")]
#![allow(unsafe_code)]

use handler::stacks::{self, CaptureError};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A thread that blocks the capture signal until told, then unblocks it (a queued capture signal is then
/// delivered to it) and waits to be told to end.
struct Blocker {
    tid: u64,
    unblock: mpsc::Sender<()>,
    unblocked: mpsc::Receiver<()>,
    end: mpsc::Sender<()>,
    handle: std::thread::JoinHandle<()>,
}

fn start_blocker() -> Blocker {
    let (tid_tx, tid_rx) = mpsc::channel();
    let (unblock_tx, unblock_rx) = mpsc::channel::<()>();
    let (unblocked_tx, unblocked_rx) = mpsc::channel::<()>();
    let (end_tx, end_rx) = mpsc::channel::<()>();
    let handle = std::thread::spawn(move || {
        // SAFETY: a zeroed sigset_t is valid; sigemptyset/sigaddset initialize it.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid sigset pointers; blocks one signal for this thread only.
        unsafe {
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGRTMAX() - 5);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        tid_tx.send(stacks::current_thread_id()).expect("send");
        if unblock_rx.recv().is_ok() {
            // SAFETY: as above: unblocks it; a queued capture signal is delivered now.
            unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
            let _ = unblocked_tx.send(());
        }
        let _ = end_rx.recv();
    });
    let tid = tid_rx.recv().expect("tid");
    Blocker { tid, unblock: unblock_tx, unblocked: unblocked_rx, end: end_tx, handle }
}

/// Open descriptors that are `/dev/null` (the crash path's spares are `/dev/null` opened read-only).
fn dev_null_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .expect("fds")
        .flatten()
        .filter(|e| std::fs::read_link(e.path()).is_ok_and(|p| p == std::path::Path::new("/dev/null")))
        .count()
}

/// The reports in `dir`, sorted.
fn reports(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".crashreport"))
        .collect();
    v.sort();
    v
}

#[test]
fn one_walker_emfile_and_uninstall() {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = handler::Config::new(dir.path());
    assert_eq!(config.capture_walkers, 1, "this test is about the default");
    handler::install(&config).expect("install");

    // 1. A capture waiting for a thread that does not answer holds no walker: the one walker stays usable.
    let blocked = start_blocker();
    let tid = blocked.tid;
    let waiting = std::thread::spawn(move || {
        let mut frames = [0u64; 16];
        stacks::thread_stack(tid, &mut frames, Duration::from_millis(600))
    });
    std::thread::sleep(Duration::from_millis(100));
    let mut frames = [0u64; 64];
    let t0 = Instant::now();
    let mut captures = 0;
    while t0.elapsed() < Duration::from_millis(300) {
        let got = stacks::current_stack(&mut frames);
        assert!(got.is_ok(), "current_stack while another capture waits: {got:?}");
        captures += 1;
    }
    assert!(captures > 0);
    assert_eq!(waiting.join().expect("join"), Err(CaptureError::Timeout));

    blocked.unblock.send(()).expect("unblock");
    blocked.unblocked.recv().expect("unblocked");
    blocked.end.send(()).expect("end");
    blocked.handle.join().expect("join");

    // 2. Out of descriptors, a non-fatal report fails with EMFILE and leaves the crash path's spares alone.
    handler::nonfatal::report(None).expect("a report with descriptors to spare");
    let spares = dev_null_fds();
    assert!(spares >= 4, "install reserves four spare descriptors ({spares} /dev/null open)");
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid out pointer.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) }, 0);
    let low = libc::rlimit { rlim_cur: lim.rlim_cur.min(256), rlim_max: lim.rlim_max };
    // SAFETY: valid in pointer; lowers this process's soft limit only.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
    let mut hog = Vec::new();
    let filled = loop {
        match std::fs::File::open("/dev/zero") {
            Ok(f) => hog.push(f),
            Err(e) => break e,
        }
    };
    assert_eq!(filled.raw_os_error(), Some(libc::EMFILE));
    let r = handler::nonfatal::report(None);
    drop(hog);
    // SAFETY: valid in pointer; restores the limit read above.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    assert_eq!(r, Err(handler::nonfatal::NonFatalError::Io(libc::EMFILE)));
    assert_eq!(dev_null_fds(), spares, "a non-fatal report closed a spare descriptor of the crash path");

    // 2b. A report whose writing fails part-way (the file size limit) is not committed: Err(Encode), no file.
    let before = reports(dir.path());
    let full = std::fs::metadata(&before[0]).expect("size").len();
    // SAFETY: ignore SIGXFSZ, so a write past the limit fails with EFBIG instead of killing the process.
    let old_xfsz = unsafe { libc::signal(libc::SIGXFSZ, libc::SIG_IGN) };
    let mut fsize = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: valid out pointer.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_FSIZE, &mut fsize) }, 0);
    let small = libc::rlimit { rlim_cur: full / 2, rlim_max: fsize.rlim_max };
    // SAFETY: valid in pointer; lowers this process's soft limit only.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_FSIZE, &small) }, 0);
    let r = handler::nonfatal::report(None);
    // SAFETY: restores the limit and the action read above.
    unsafe {
        assert_eq!(libc::setrlimit(libc::RLIMIT_FSIZE, &fsize), 0);
        libc::signal(libc::SIGXFSZ, old_xfsz);
    }
    assert_eq!(r, Err(handler::nonfatal::NonFatalError::Encode), "a {full}-byte report cut at {}", full / 2);
    assert_eq!(reports(dir.path()), before, "a partial non-fatal report was committed");
    assert_eq!(entries_but_the_reservation(dir.path()), before.len(), "temporary file left");

    // 3. Uninstall with a capture signal still queued for a thread that blocks it, and the hang watchdog running:
    // the watchdog is stopped, and the queued signal does not kill the process when the thread unblocks it.
    handler::hangs::start(&handler::hangs::HangConfig::default()).expect("watchdog");
    let blocked = start_blocker();
    let mut frames = [0u64; 16];
    assert_eq!(stacks::thread_stack(blocked.tid, &mut frames, Duration::from_millis(50)), Err(CaptureError::Timeout));
    handler::uninstall().expect("uninstall");
    assert!(!handler::hangs::is_running(), "uninstall stops the hang watchdog");
    blocked.unblock.send(()).expect("unblock");
    blocked.unblocked.recv().expect("the thread took its queued capture signal and lives");
    blocked.end.send(()).expect("end");
    blocked.handle.join().expect("join");
    // SAFETY: reads the current action into a zeroed struct.
    let mut now: libc::sigaction = unsafe { std::mem::zeroed() };
    // SAFETY: a null new action only queries.
    assert_eq!(unsafe { libc::sigaction(libc::SIGRTMAX() - 5, std::ptr::null(), &mut now) }, 0);
    assert_eq!(now.sa_sigaction, libc::SIG_IGN, "the capture signal is ignored after uninstall");
    assert_eq!(
        stacks::thread_stack(stacks::current_thread_id(), &mut frames, Duration::from_millis(50)),
        Err(CaptureError::NotInstalled)
    );
}

/// Entries of `dir` but the crash path's reserved report file (`.<pid>-<time>.reserved`), which stays while the
/// process lives.
fn entries_but_the_reservation(dir: &std::path::Path) -> usize {
    let entries = std::fs::read_dir(dir).expect("dir").flatten();
    entries.filter(|e| !e.file_name().to_string_lossy().ends_with(".reserved")).count()
}
