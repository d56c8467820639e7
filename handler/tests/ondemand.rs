//! Stacks on demand (`handler::stacks`) in this very process, checked against an independent unwinder, glibc's
//! `backtrace(3)` (libgcc's DWARF unwinder), and against each other: the current thread's capture must list the
//! same callers as `backtrace(3)` from the same function; another thread's capture, taken by signal while it
//! sleeps in a known function, must end with the very callers that thread listed itself just before it went to
//! sleep. Plus the protocol's edges: a thread that blocks the capture signal (timeout, then the next capture works),
//! a thread id that is not ours, many captures at once racing image refreshes.
#![cfg(target_os = "linux")]
#![allow(unsafe_code)]

use handler::stacks::{self, CaptureError};
use std::hint::black_box;
use std::sync::mpsc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

extern "C" {
    /// glibc `<execinfo.h>`.
    fn backtrace(buffer: *mut *mut libc::c_void, size: libc::c_int) -> libc::c_int;
}

fn installed() {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    let dir = DIR.get_or_init(|| {
        let d = tempfile::tempdir().expect("tempdir");
        let mut c = handler::Config::new(d.path());
        c.capture_walkers = 4;
        handler::install(&c).expect("install");
        d
    });
    black_box(dir);
}

/// `f` again while it says `Busy` (more captures at once than walkers: this file's tests run in parallel, and
/// under qemu-user each capture takes milliseconds), for at most 30 s.
fn retry<T>(mut f: impl FnMut() -> Result<T, CaptureError>) -> Result<T, CaptureError> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        match f() {
            Err(CaptureError::Busy) if Instant::now() < until => std::thread::sleep(Duration::from_millis(1)),
            other => return other,
        }
    }
}

fn show(v: &[u64]) -> String {
    // Addresses in the test executable as file offsets (`addr2line -e <test binary> -f -C <offset>` names them).
    let exe = std::fs::read_link("/proc/self/exe").unwrap_or_default();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let base = maps
        .lines()
        .find(|l| l.ends_with(&*exe.to_string_lossy()))
        .and_then(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
        .unwrap_or(0);
    v.iter()
        .map(|&a| if a >= base && a - base < 1 << 28 { format!("exe+{:#x}", a - base) } else { format!("{a:#x}") })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Both unwinders from the same function.
#[inline(never)]
fn both_here() -> (Vec<u64>, Vec<u64>) {
    let mut ours = [0u64; 256];
    // Retried in place (a closure would add frames of its own to the capture).
    let until = Instant::now() + Duration::from_secs(30);
    let got = loop {
        match stacks::current_stack(&mut ours) {
            Err(CaptureError::Busy) if Instant::now() < until => std::thread::sleep(Duration::from_millis(1)),
            other => break other.expect("current_stack"),
        }
    };
    let mut raw = [std::ptr::null_mut(); 256];
    // SAFETY: the buffer holds 256 pointers.
    let n = unsafe { backtrace(raw.as_mut_ptr(), 256) };
    assert!(!got.truncated);
    (ours[..got.len].to_vec(), raw[..n as usize].iter().map(|p| *p as u64).collect())
}

#[inline(never)]
fn level2() -> (Vec<u64>, Vec<u64>) {
    let r = both_here();
    black_box(&r);
    r
}

#[inline(never)]
fn level1() -> (Vec<u64>, Vec<u64>) {
    let r = level2();
    black_box(&r);
    r
}

fn check_current(what: &str) {
    installed();
    for round in 0..3 {
        let (ours, theirs) = level1();
        let ctx = format!("{what}, round {round}: ours {}\ntheirs {}", show(&ours), show(&theirs));
        assert!(theirs.len() >= 5, "{ctx}");
        // Frame 0 of each is its own call site in `both_here`: within a few hundred bytes of each other.
        assert!(ours[0].abs_diff(theirs[0]) < 0x400, "{ctx}");
        assert_eq!(&ours[1..], &theirs[1..], "callers differ; {ctx}");
    }
}

#[test]
fn current_stack_lists_the_callers_backtrace_lists_on_a_std_thread() {
    check_current("test thread");
}

#[test]
fn current_stack_lists_the_callers_backtrace_lists_on_a_pthread_create_thread() {
    extern "C" fn start(_: *mut libc::c_void) -> *mut libc::c_void {
        check_current("pthread_create thread");
        std::ptr::null_mut()
    }
    installed();
    let mut t: libc::pthread_t = 0;
    // SAFETY: default attributes; `start` matches the signature.
    assert_eq!(unsafe { libc::pthread_create(&mut t, std::ptr::null(), start, std::ptr::null_mut()) }, 0);
    let mut ret = std::ptr::null_mut();
    // SAFETY: joining the thread created above.
    assert_eq!(unsafe { libc::pthread_join(t, &mut ret) }, 0);
}

/// A wrapper that leaves itself out: the list starts at the wrapper's caller, as if that one had called
/// `current_stack`.
#[test]
fn current_stack_skipping_leaves_out_the_wrappers_own_frame() {
    #[inline(never)]
    fn wrapper(out: &mut [u64]) -> usize {
        let until = Instant::now() + Duration::from_secs(30);
        let got = loop {
            match stacks::current_stack_skipping(out, 1) {
                Err(CaptureError::Busy) if Instant::now() < until => std::thread::sleep(Duration::from_millis(1)),
                other => break other.expect("capture"),
            }
        };
        black_box(&out);
        got.len
    }
    #[inline(never)]
    fn caller() -> (Vec<u64>, Vec<u64>) {
        let mut ours = [0u64; 256];
        let n = wrapper(&mut ours);
        let mut raw = [std::ptr::null_mut(); 256];
        // SAFETY: the buffer holds 256 pointers.
        let m = unsafe { backtrace(raw.as_mut_ptr(), 256) };
        (ours[..n].to_vec(), raw[..m as usize].iter().map(|p| *p as u64).collect())
    }
    installed();
    for _ in 0..2 {
        let (ours, theirs) = caller();
        assert!(ours[0].abs_diff(theirs[0]) < 0x200, "both return into `caller`: {}\n{}", show(&ours), show(&theirs));
        assert_eq!(&ours[1..], &theirs[1..]);
    }
}

#[test]
fn a_short_buffer_is_filled_and_flagged_truncated() {
    installed();
    let mut two = [0u64; 2];
    let got = retry(|| stacks::current_stack(&mut two)).expect("capture");
    assert_eq!(got.len, 2);
    assert!(got.truncated);
    let mut none: [u64; 0] = [];
    assert!(retry(|| stacks::current_stack(&mut none)).expect("capture").truncated);
}

/// Deep recursion: the walker stores it compressed, the caller gets it in full (as `backtrace(3)` lists it).
#[test]
fn recursion_is_listed_in_full() {
    #[inline(never)]
    fn recurse(n: u32) -> (Vec<u64>, Vec<u64>) {
        if n == 0 {
            return both_here();
        }
        let r = recurse(black_box(n - 1));
        black_box(&r);
        r
    }
    installed();
    let (ours, theirs) = recurse(100);
    assert!(theirs.len() > 100, "{}", show(&theirs));
    assert_eq!(&ours[1..], &theirs[1..]);
}

/// A thread that sleeps in `read(2)` inside `sleeper`, after listing its own stack there.
struct Sleeper {
    tid: u64,
    own: Vec<u64>,
    wake: i32,
    handle: std::thread::JoinHandle<()>,
}

#[inline(never)]
fn sleeper(fd: i32, tx: mpsc::Sender<(u64, Vec<u64>)>) {
    let mut own = [0u64; 128];
    let until = Instant::now() + Duration::from_secs(30);
    let got = loop {
        match stacks::current_stack(&mut own) {
            Err(CaptureError::Busy) if Instant::now() < until => std::thread::sleep(Duration::from_millis(1)),
            other => break other.expect("own stack"),
        }
    };
    tx.send((stacks::current_thread_id(), own[..got.len].to_vec())).expect("send");
    let mut b = [0u8; 1];
    // SAFETY: reading one byte into a valid buffer from our pipe; blocks until the test writes.
    let n = unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) };
    black_box(n);
}

fn start_sleeper(block_capture_signal: bool) -> Sleeper {
    let mut fds = [0i32; 2];
    // SAFETY: valid out-array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (tx, rx) = mpsc::channel();
    let rd = fds[0];
    let handle = std::thread::spawn(move || {
        if block_capture_signal {
            // SAFETY: blocking one signal for this thread only; valid sigset pointers.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigemptyset(&mut set);
                libc::sigaddset(&mut set, libc::SIGRTMAX() - 5);
                libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
            }
        }
        sleeper(rd, tx);
        // SAFETY: closing our end.
        unsafe { libc::close(rd) };
    });
    let (tid, own) = rx.recv().expect("sleeper started");
    // Let it reach read(2).
    std::thread::sleep(Duration::from_millis(50));
    Sleeper { tid, own, wake: fds[1], handle }
}

impl Sleeper {
    fn finish(self) {
        // SAFETY: one byte into our pipe, then closing it.
        unsafe {
            libc::write(self.wake, [1u8].as_ptr().cast(), 1);
            libc::close(self.wake);
        }
        self.handle.join().expect("sleeper");
    }
}

#[test]
fn another_threads_stack_ends_with_the_callers_it_listed_itself() {
    installed();
    let s = start_sleeper(false);
    let mut frames = [0u64; 256];
    for round in 0..3 {
        let got = retry(|| stacks::thread_stack(s.tid, &mut frames, Duration::from_secs(5))).expect("thread_stack");
        let theirs = &frames[..got.len];
        // Its own list: [return into `sleeper` after current_stack, sleeper's caller, ...]. Ours, taken in read(2):
        // [pc in libc's read, ..., return into `sleeper` after read, sleeper's caller, ...].
        let callers = &s.own[1..];
        let ctx = format!("round {round}: on demand {}\nits own {}", show(theirs), show(&s.own));
        assert!(!got.truncated, "{ctx}");
        assert!(theirs.len() > callers.len() + 1, "{ctx}");
        assert!(theirs.ends_with(callers), "{ctx}");
        let in_sleeper = theirs[theirs.len() - callers.len() - 1];
        let start = sleeper as *const () as usize as u64;
        assert!(in_sleeper > start && in_sleeper < start + 0x1000, "return into `sleeper`; {ctx}");
        assert_ne!(in_sleeper, s.own[0], "a different call site of `sleeper` (read, not current_stack); {ctx}");
    }
    s.finish();
}

#[test]
fn a_thread_that_blocks_the_capture_signal_times_out_and_the_next_capture_works() {
    installed();
    let blocked = start_sleeper(true);
    let mut frames = [0u64; 64];
    let t0 = Instant::now();
    let r = retry(|| stacks::thread_stack(blocked.tid, &mut frames, Duration::from_millis(200)));
    let took = t0.elapsed();
    assert_eq!(r, Err(CaptureError::Timeout));
    assert!(took >= Duration::from_millis(200) && took < Duration::from_secs(5), "{took:?}");
    // Its pending signal arrives when it unblocks (never here: it exits with it blocked). Walker and slot are free:
    let other = start_sleeper(false);
    for _ in 0..8 {
        retry(|| stacks::thread_stack(other.tid, &mut frames, Duration::from_secs(5))).expect("after a timeout");
    }
    blocked.finish();
    other.finish();
}

/// However often a thread that blocks the capture signal is asked, at most one capture signal is queued for it:
/// real-time signals queue one copy per send, and copies piling up would exhaust `RLIMIT_SIGPENDING`, after which
/// the crash path's stop signals cannot be sent. The thread counts what is queued for it with `sigtimedwait`.
#[test]
fn a_thread_that_blocks_the_capture_signal_gets_one_signal_queued_however_often_it_is_asked() {
    installed();
    let sig = libc::SIGRTMAX() - 5;
    let (tid_tx, tid_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel::<()>();
    let (count_tx, count_rx) = mpsc::channel::<usize>();
    let (end_tx, end_rx) = mpsc::channel::<()>();
    let h = std::thread::spawn(move || {
        // SAFETY: a zeroed sigset_t is valid; sigemptyset/sigaddset initialize it.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        // SAFETY: valid sigset pointers; blocks one signal for this thread only.
        unsafe {
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, sig);
            libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        }
        tid_tx.send(stacks::current_thread_id()).expect("send");
        go_rx.recv().expect("go");
        let zero = libc::timespec { tv_sec: 0, tv_nsec: 0 };
        let mut queued = 0usize;
        // SAFETY: valid set and timeout; a null info pointer is allowed.
        while unsafe { libc::sigtimedwait(&set, std::ptr::null_mut(), &zero) } == sig {
            queued += 1;
        }
        // SAFETY: as above: unblocks it again.
        unsafe { libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut()) };
        count_tx.send(queued).expect("send");
        end_rx.recv().expect("end");
    });
    let tid = tid_rx.recv().expect("tid");
    let mut frames = [0u64; 64];
    for round in 0..20 {
        let r = retry(|| stacks::thread_stack(tid, &mut frames, Duration::from_millis(20)));
        assert_eq!(r, Err(CaptureError::Timeout), "round {round}");
    }
    go_tx.send(()).expect("go");
    let queued = count_rx.recv().expect("count");
    assert_eq!(queued, 1, "capture signals queued for a thread that blocks it");
    // Its signal was taken by `sigtimedwait`, never by the handler: the next capture sees it is no longer pending,
    // sends again, and the thread (no longer blocking it) answers. (Not under qemu-user, where `/proc` shows the
    // emulator's host signal state: there an entry is only known stale once its thread is gone.)
    if handler::platform::linux::crash::memory::process_vm_readv_works() {
        let got = retry(|| stacks::thread_stack(tid, &mut frames, Duration::from_secs(5))).expect("once unblocked");
        assert!(got.len > 2);
    }
    end_tx.send(()).expect("end");
    h.join().expect("join");
}

#[test]
fn threads_that_are_not_ours_are_refused() {
    installed();
    let mut frames = [0u64; 8];
    // pid 1's main thread is not a thread of this process.
    assert_eq!(
        retry(|| stacks::thread_stack(1, &mut frames, Duration::from_millis(100))),
        Err(CaptureError::NoSuchThread)
    );
    let t = std::thread::spawn(stacks::current_thread_id);
    let gone = t.join().expect("join");
    std::thread::sleep(Duration::from_millis(20));
    assert_eq!(
        retry(|| stacks::thread_stack(gone, &mut frames, Duration::from_millis(100))),
        Err(CaptureError::NoSuchThread)
    );
}

#[test]
fn the_calling_thread_can_ask_for_its_own_stack() {
    installed();
    let mut frames = [0u64; 128];
    let got =
        retry(|| stacks::thread_stack(stacks::current_thread_id(), &mut frames, Duration::from_secs(5))).expect("self");
    let (ours, _) = level1();
    // Both end with this test function's callers (the harness's frames).
    let tail = &ours[ours.len() - 4..];
    assert!(frames[..got.len].ends_with(tail), "{}\n{}", show(&frames[..got.len]), show(&ours));
}

/// Captures from several threads at once, of themselves and of a sleeper, while the image table is refreshed
/// over and over (every capture reads it under a counted read).
#[test]
fn concurrent_captures_and_refreshes() {
    installed();
    let s = start_sleeper(false);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let refresher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut n = 0u32;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                handler::refresh_images().expect("refresh");
                n += 1;
            }
            n
        })
    };
    let tid = s.tid;
    let callers = s.own[1..].to_vec();
    let workers: Vec<_> = (0..4)
        .map(|k| {
            let callers = callers.clone();
            std::thread::spawn(move || {
                let mut frames = [0u64; 256];
                for _ in 0..200 {
                    if k % 2 == 0 {
                        match stacks::thread_stack(tid, &mut frames, Duration::from_secs(5)) {
                            Ok(got) => assert!(
                                frames[..got.len].ends_with(&callers),
                                "{}\nits own callers {}",
                                show(&frames[..got.len]),
                                show(&callers)
                            ),
                            Err(CaptureError::Busy) => {}
                            Err(e) => panic!("thread_stack: {e}"),
                        }
                    } else {
                        match stacks::current_stack(&mut frames) {
                            Ok(got) => assert!(got.len >= 3),
                            Err(CaptureError::Busy) => {}
                            Err(e) => panic!("current_stack: {e}"),
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(refresher.join().expect("refresher") > 0);
    s.finish();
}

/// The symbol cache names the frames of a capture: this file's functions by their (mangled) names, and the same
/// answers the second time, from the cache.
#[test]
fn the_symbol_cache_names_captured_frames() {
    installed();
    let (ours, _) = level1();
    let mut cache = handler::symbols::SymbolCache::new().expect("cache");
    let names = |cache: &mut handler::symbols::SymbolCache| -> Vec<String> {
        ours.iter()
            .map(|&ra| match cache.lookup_return_address(ra) {
                Some(s) => format!("{}:{}+{:#x}", s.image, s.name.unwrap_or("?"), s.offset),
                None => "??".to_string(),
            })
            .collect()
    };
    let first = names(&mut cache);
    let n = cache.len();
    assert_eq!(names(&mut cache), first, "the second lookup is the cached first one");
    assert_eq!(cache.len(), n);
    // ours[0] returns into both_here, then level2, level1 (then this test, unless an optimized build inlined it).
    for (i, want) in ["both_here", "level2", "level1"].iter().enumerate() {
        assert!(first[i].contains(want), "frame {i}: {} (all: {first:?})", first[i]);
        assert!(first[i].starts_with("ondemand-"), "frame {i} is in the test executable: {}", first[i]);
    }
    // The outermost frames are in libc (named by its .dynsym at least).
    assert!(first.iter().any(|f| f.starts_with("libc.so")), "{first:?}");
    // An exact address: a function's own start, offset 0.
    let f = level1 as *const () as usize as u64;
    let s = cache.lookup(f).expect("level1");
    assert_eq!(s.offset, 0);
    assert!(s.name.is_some_and(|n| n.contains("level1")));
    assert!(cache.lookup(8).is_none(), "no image at address 8");
}

/// The process's main thread (here: libtest's, created before install, with Rust std's small alternate signal
/// stack, where the walk itself would not fit): captured all the same, on the walker's own stack.
#[test]
fn the_main_thread_with_std_s_small_alternate_stack_is_captured() {
    installed();
    let mut frames = [0u64; 256];
    let main = u64::from(std::process::id());
    let got = retry(|| stacks::thread_stack(main, &mut frames, Duration::from_secs(5))).expect("main thread");
    assert!(got.len > 3 && !got.truncated, "{}", show(&frames[..got.len]));
}
