//! The few raw OS calls the benchmarks need: the monotonic clock, a shared timestamp page, `dlopen`, the fault
//! itself, and resource usage.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicPtr, Ordering};

/// `CLOCK_MONOTONIC` in nanoseconds: one clock for every process on the machine, read through the vDSO
/// (async-signal-safe).
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out pointer; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time of the calling thread (`CLOCK_THREAD_CPUTIME_ID`) in nanoseconds (async-signal-safe).
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out pointer; CLOCK_THREAD_CPUTIME_ID always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Slots of the shared timestamp page.
pub mod slot {
    /// Written by the crashing child right before the faulting store.
    pub const FAULT: usize = 0;
    /// Written when the report is durable (our hook at `BeforeReraise`; the peer's callback after the ack).
    pub const DONE: usize = 1;
    /// Written by our hook at `CrashEvent::Start` (diagnostic: signal delivery).
    pub const START: usize = 2;
    /// Our hook at `CrashEvent::ThreadsListed`: `/proc/self/task` read, the table filled.
    pub const LISTED: usize = 3;
    /// Our hook at `CrashEvent::StopDone`: every thread stopped (or given up on).
    pub const STOPPED: usize = 4;
    /// Our hook at `CrashEvent::ReportWritten`: every section walked, encoded and written, before the commit.
    pub const WRITTEN: usize = 5;
    /// The handling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) at `CrashEvent::StopDone`.
    pub const STOPPED_CPU: usize = 6;
    /// The handling thread's CPU time at `CrashEvent::ReportWritten`: with [`STOPPED_CPU`], the CPU the walk,
    /// encode and write took (the rest of that phase's wall time is waiting: preemption, I/O).
    pub const WRITTEN_CPU: usize = 7;
    /// The handling thread's CPU time at `CrashEvent::ThreadsListed`: with [`STOPPED_CPU`], the CPU the owner spent
    /// in the stop phase (sending stop signals, preparing the report while the threads answer).
    pub const LISTED_CPU: usize = 8;
}

/// Number of `u64` slots in the page.
pub const SLOTS: usize = 9;

static SHARED: AtomicPtr<u64> = AtomicPtr::new(core::ptr::null_mut());

/// Maps the timestamp file `path` (created by the parent, `SLOTS * 8` bytes) shared, for [`store`].
pub fn map_shared(path: &Path) -> std::io::Result<()> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(std::io::Error::other)?;
    // SAFETY: `c` is NUL-terminated.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a fresh shared mapping of our open file, no address hint; checked below.
    let p = unsafe {
        libc::mmap(core::ptr::null_mut(), SLOTS * 8, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0)
    };
    // SAFETY: closing our own descriptor; the mapping stays valid.
    unsafe { libc::close(fd) };
    if p == libc::MAP_FAILED {
        return Err(std::io::Error::last_os_error());
    }
    SHARED.store(p.cast(), Ordering::Release);
    Ok(())
}

/// Stores `value` in slot `i` of the shared page (no-op when unmapped). Async-signal-safe: one volatile store.
pub fn store(i: usize, value: u64) {
    let p = SHARED.load(Ordering::Acquire);
    if !p.is_null() && i < SLOTS {
        // SAFETY: `p` points to our shared mapping of `SLOTS` u64s and `i < SLOTS`; the page stays mapped for the
        // life of the process.
        unsafe { core::ptr::write_volatile(p.add(i), value) };
    }
}

/// `dlopen`s every path (`RTLD_NOW | RTLD_LOCAL`); the handles are kept open for the life of the process.
pub fn dlopen_all(paths: &[std::path::PathBuf]) -> Result<(), String> {
    for p in paths {
        let c = CString::new(p.as_os_str().as_bytes()).map_err(|e| e.to_string())?;
        // SAFETY: `c` is NUL-terminated; the libraries are our generated leaf libraries with no constructors.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL) };
        if h.is_null() {
            return Err(format!("dlopen {} failed", p.display()));
        }
    }
    Ok(())
}

/// Faults on purpose: a store to address 0 (SIGSEGV, `SEGV_MAPERR`).
#[inline(never)]
pub fn fault() -> ! {
    let p = core::hint::black_box(0usize) as *mut u64;
    // SAFETY: not sound by design: this store faults, which is the point of the benchmark. The crash handler under
    // test takes the SIGSEGV; the process dies with it.
    unsafe { core::ptr::write_volatile(p, 0xdead) };
    // Only reached if the store did not kill the process.
    std::process::abort()
}

/// User + system CPU time of this process (all threads, `getrusage(RUSAGE_SELF)`), in microseconds, and the
/// voluntary + involuntary context switches of the process.
pub fn rusage_self() -> (u64, u64) {
    // SAFETY: zeroed rusage is a valid out buffer.
    let mut r: libc::rusage = unsafe { core::mem::zeroed() };
    // SAFETY: valid out pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut r) };
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (us(r.ru_utime) + us(r.ru_stime), (r.ru_nvcsw + r.ru_nivcsw) as u64)
}

/// Clock ticks per second (`sysconf(_SC_CLK_TCK)`), the unit of `/proc/*/stat` CPU times.
pub fn clock_ticks() -> u64 {
    // SAFETY: plain sysconf query.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 {
        t as u64
    } else {
        100
    }
}

/// `syncfs(2)` on the file system holding directory `dir`: every dirty page and inode of it written back.
///
/// # Errors
/// Opening `dir` or the call's `errno`, as text.
pub fn syncfs_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::io::AsRawFd;
    let d = std::fs::File::open(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    // SAFETY: `d` is an open descriptor for the duration of the call; syncfs has no memory arguments.
    if unsafe { libc::syncfs(d.as_raw_fd()) } != 0 {
        return Err(format!("syncfs {}: {}", dir.display(), std::io::Error::last_os_error()));
    }
    Ok(())
}
