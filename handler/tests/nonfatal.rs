//! Non-fatal reports (`handler::nonfatal`, report format 2.3 META `nf`) in this very process: written atomically
//! into the report directory, every thread captured (a sleeping thread with its own frames), nothing crashed, no
//! exception, the reason and the thread it is about; and, once prepared, written without a single heap allocation
//! (a counting global allocator). One test: the allocation count is process-wide.
#![cfg(target_os = "linux")]
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc;
use std::time::Duration;

struct Counting;
static COUNT: AtomicBool = AtomicBool::new(false);
static ALLOCS: AtomicU64 = AtomicU64::new(0);

// SAFETY: forwards every call to `System` unchanged; the counter has no effect on the memory.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        if COUNT.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract, forwarded.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: same contract, forwarded.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, n: usize) -> *mut u8 {
        if COUNT.load(Ordering::Relaxed) {
            ALLOCS.fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: same contract, forwarded.
        unsafe { System.realloc(p, l, n) }
    }
}

#[global_allocator]
static A: Counting = Counting;

#[inline(never)]
fn sleeper(fd: i32, ready: mpsc::Sender<u64>) {
    ready.send(handler::stacks::current_thread_id()).expect("send");
    let mut b = [0u8; 1];
    // SAFETY: one byte into a valid buffer from our pipe; blocks until the test writes.
    black_box(unsafe { libc::read(fd, b.as_mut_ptr().cast(), 1) });
}

fn reports(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".crashreport"))
        .collect();
    v.sort();
    v
}

#[test]
fn non_fatal_reports_hold_every_thread_and_allocate_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    handler::install(&handler::Config::new(dir.path())).expect("install");
    let mut fds = [0i32; 2];
    // SAFETY: valid out-array.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (tx, rx) = mpsc::channel();
    let rd = fds[0];
    let t = std::thread::Builder::new().name("sleeper".into()).spawn(move || sleeper(rd, tx)).expect("spawn");
    let sleeper_tid = rx.recv().expect("sleeper");
    std::thread::sleep(Duration::from_millis(50));

    let id = handler::nonfatal::report(Some("checkout took 4 s")).expect("report");
    let files = reports(dir.path());
    assert_eq!(files.len(), 1, "{files:?}");
    let hex: String = id.0.iter().map(|b| format!("{b:02x}")).collect();
    assert!(files[0].ends_with(format!("{hex}.crashreport")), "named after its id: {files:?}");
    let d = report_format::decode(&std::fs::read(&files[0]).expect("read")).expect("decodes");
    assert!(d.is_intact(), "{:?}", d.problems);
    let r = d.report;
    assert_eq!(r.format_version, (2, 4));
    let nf = r.meta.as_ref().and_then(|m| m.non_fatal.clone()).expect("non-fatal");
    assert_eq!((nf.kind.as_str(), nf.reason.as_deref(), nf.duration_ns), ("app", Some("checkout took 4 s"), None));
    let me = handler::stacks::current_thread_id();
    let focus = nf.thread.expect("focus thread");
    assert_eq!(r.threads.iter().find(|t| t.index == focus).and_then(|t| t.id), Some(me), "about the calling thread");
    let e = r.exception.as_ref().expect("exception section");
    assert_eq!((e.signal, e.mach_type, e.crashed_thread), (None, None, None));
    assert!(r.threads.iter().all(|t| !t.crashed));
    let live = std::fs::read_dir("/proc/self/task").expect("tasks").count();
    assert!(r.threads.len() >= live - 1 && r.threads.len() <= live + 1, "{} threads, {live} live", r.threads.len());
    // Every thread captured; under qemu-user (where `process_vm_readv` does not work on the own process) the
    // emulator's own RCU thread, which blocks every signal, is listed as not captured, with the reason.
    let emulated = !handler::platform::linux::crash::memory::process_vm_readv_works();
    for t in &r.threads {
        let qemu_own = emulated && t.name.as_deref().is_some_and(|n| n.starts_with("qemu"));
        assert!(
            t.captured || (qemu_own && t.not_captured_reason.as_deref().is_some_and(|w| w.contains("in time"))),
            "{t:?}"
        );
    }
    let s = r.threads.iter().find(|t| t.id == Some(sleeper_tid)).expect("the sleeper");
    assert_eq!(s.name.as_deref(), Some("sleeper"));
    let start = sleeper as *const () as usize as u64;
    assert!(s.expanded_frames().iter().any(|&a| a > start && a < start + 0x1000), "a return into `sleeper`");
    // The process thread (index 0) is the main thread: the task order.
    assert_eq!(r.threads[0].id, Some(std::process::id() as u64));

    // Once prepared, a report allocates nothing (this thread, the threads answering the capture signal).
    COUNT.store(true, Ordering::SeqCst);
    let id2 = handler::nonfatal::report(None);
    COUNT.store(false, Ordering::SeqCst);
    let id2 = id2.expect("second report");
    assert_eq!(ALLOCS.load(Ordering::SeqCst), 0, "heap allocations while writing a non-fatal report");
    assert_ne!(id2, id);
    let files = reports(dir.path());
    assert_eq!(files.len(), 2);
    let r2 = files.iter().map(|f| report_format::decode(&std::fs::read(f).expect("read")).expect("decode").report);
    let kinds: Vec<String> = r2.filter_map(|r| r.meta.and_then(|m| m.non_fatal).map(|n| n.kind)).collect::<Vec<_>>();
    assert!(kinds.contains(&"manual".to_string()) && kinds.contains(&"app".to_string()), "{kinds:?}");
    // No temporary file is left.
    let left = std::fs::read_dir(dir.path()).expect("dir").flatten();
    // The crash path's reserved report file (`.<pid>-<time>.reserved`) stays while the process lives.
    assert_eq!(left.filter(|e| !e.file_name().to_string_lossy().ends_with(".reserved")).count(), 2);

    // SAFETY: one byte into our pipe, then closing it.
    unsafe {
        libc::write(fds[1], [1u8].as_ptr().cast(), 1);
        libc::close(fds[1]);
    }
    t.join().expect("join");
}
