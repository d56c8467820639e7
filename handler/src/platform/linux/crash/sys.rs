//! Raw Linux system calls the crash path uses. Every function is async-signal-safe: each is one system call (or a
//! vDSO clock read), touching only caller-provided memory.
#![allow(unsafe_code)]

use core::sync::atomic::AtomicU32;

/// Kernel thread id of the caller (`gettid(2)`).
pub fn gettid() -> u64 {
    // SAFETY: `gettid` takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as u64 }
}

/// Process id (`getpid(2)`; the raw syscall, not a cached value, so it is right after `fork`).
pub fn getpid() -> i32 {
    // SAFETY: `getpid` takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_getpid) as i32 }
}

/// The real user id (`getuid(2)`; async-signal-safe, cannot fail).
pub fn getuid() -> u32 {
    // SAFETY: getuid takes no arguments and cannot fail.
    unsafe { libc::getuid() }
}

/// A new pipe `(read, write)`, both ends non-blocking and close-on-exec (`pipe2(2)`); `None` when it cannot be
/// opened (out of descriptors).
pub fn pipe_nonblocking() -> Option<(i32, i32)> {
    let mut fds = [0i32; 2];
    // SAFETY: `fds` is a valid out-array of two ints.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
    (r == 0).then_some((fds[0], fds[1]))
}

/// Parent process id.
pub fn getppid() -> i32 {
    // SAFETY: `getppid` takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_getppid) as i32 }
}

/// Sends `sig` to thread `tid` of process `pid` (`tgkill(2)`); `Err(errno)` on failure.
pub fn tgkill(pid: i32, tid: u64, sig: i32) -> Result<(), i32> {
    // SAFETY: plain integer arguments; the kernel validates them.
    let r = unsafe { libc::syscall(libc::SYS_tgkill, pid, tid as libc::pid_t, sig) };
    if r == 0 {
        Ok(())
    } else {
        Err(crate::crash::writer::errno())
    }
}

/// The `siginfo_t` of a queued signal as the kernel reads it (128 bytes; `<asm-generic/siginfo.h>`: `si_signo`,
/// `si_errno`, `si_code`, then the `_rt` member of the union at offset 16 on 64-bit targets: `si_pid`, `si_uid`,
/// `si_value`).
#[repr(C)]
struct QueuedInfo {
    signo: i32,
    errno: i32,
    code: i32,
    _pad: i32,
    pid: i32,
    uid: u32,
    value: usize,
    _rest: [u64; 12],
}

/// Sends `sig` to thread `tid` of our own process `pid` with `value` attached (`rt_tgsigqueueinfo(2)`,
/// `si_code = SI_QUEUE`, `si_uid = uid`; the handler reads `value` as `si_value`); where that call is missing (`ENOSYS`: old kernels,
/// some emulators) it is a plain [`tgkill`], without the value. `Err(errno)` on failure.
pub fn queue_to_thread(pid: i32, uid: u32, tid: u64, sig: i32, value: usize) -> Result<(), i32> {
    let info = QueuedInfo { signo: sig, errno: 0, code: libc::SI_QUEUE, _pad: 0, pid, uid, value, _rest: [0; 12] };
    // SAFETY: `info` is a 128-byte siginfo the kernel copies in; plain integer arguments otherwise.
    let r =
        unsafe { libc::syscall(libc::SYS_rt_tgsigqueueinfo, pid, tid as libc::pid_t, sig, core::ptr::from_ref(&info)) };
    if r == 0 {
        return Ok(());
    }
    match crate::crash::writer::errno() {
        libc::ENOSYS => tgkill(pid, tid, sig),
        e => Err(e),
    }
}

/// The value a signal was queued with by [`queue_to_thread`] from process `sender` (`SI_QUEUE` and that pid, which
/// is never 0); `None` for a signal sent any other way. The caller passes its own pid ([`getpid`]), or one it knows
/// already (the stop handler: the pid the crash owner stored before sending, one system call fewer per stopped
/// thread).
///
/// # Safety
/// `info` is null or the kernel's `siginfo_t` of the signal being handled.
pub unsafe fn queued_value(info: *const libc::siginfo_t, sender: i32) -> Option<usize> {
    // SAFETY: the caller guarantees `info` is null or valid.
    let i = unsafe { info.as_ref() }?;
    // SAFETY: for `SI_QUEUE` the kernel filled the `_rt` member, so `si_pid` and `si_value` are meaningful.
    (i.si_code == libc::SI_QUEUE && sender != 0 && unsafe { i.si_pid() } == sender)
        .then(|| unsafe { i.si_value() }.sival_ptr as usize)
}

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as libc::c_long }
}

/// `fdatasync(2)`, the raw system call, on a stopped thread: glibc's wrapper is a cancellation point, and the
/// thread is one of the application's, perhaps with a cancel request pending. `true` on success.
pub fn fdatasync(fd: i32) -> bool {
    // SAFETY: a plain system call on an integer descriptor; no memory arguments.
    unsafe { libc::syscall(libc::SYS_fdatasync, fd) == 0 }
}

/// Sets the file's modification (and change) time to now: `utimensat(fd, NULL, {UTIME_OMIT, UTIME_NOW}, 0)`, the
/// raw system call behind `futimens(3)` (async-signal-safe, POSIX.1-2008). A `write` in the same tick of the
/// file system's clock then finds the time current and leaves the inode clean, so the following `fdatasync` need
/// not write it (ext4 without a journal writes a dirty inode's table block at every `fdatasync`). `true` on
/// success.
pub fn touch_mtime(fd: i32) -> bool {
    let times = [
        libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_OMIT },
        libc::timespec { tv_sec: 0, tv_nsec: libc::UTIME_NOW },
    ];
    // SAFETY: `times` is two valid timespecs that outlive the call; a null path with `fd` names the open file.
    unsafe { libc::syscall(libc::SYS_utimensat, fd, core::ptr::null::<libc::c_char>(), times.as_ptr(), 0) == 0 }
}

/// `sched_yield(2)`: lets another runnable thread have this CPU.
pub fn sched_yield() {
    // SAFETY: no arguments; cannot fail on Linux.
    unsafe { libc::syscall(libc::SYS_sched_yield) };
}

/// `close(2)`, the raw system call (as above).
pub fn close(fd: i32) {
    // SAFETY: as above; the caller owns `fd`.
    unsafe { libc::syscall(libc::SYS_close, fd) };
}

/// `FUTEX_WAIT_PRIVATE`: sleeps while `*word == expected`, at most `timeout_ns` nanoseconds (relative).
/// Returns early on a wake, a signal, or when the value already differs.
pub fn futex_wait(word: &AtomicU32, expected: u32, timeout_ns: u64) {
    let ts = timespec(timeout_ns);
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call; `ts` lives on our stack until return.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG,
            expected,
            &ts as *const libc::timespec,
            core::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// `FUTEX_WAKE_PRIVATE`: wakes up to `n` waiters on `word`.
pub fn futex_wake(word: &AtomicU32, n: i32) {
    // SAFETY: `word` is a valid, aligned u32; FUTEX_WAKE does not access other memory.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG,
            n,
            0usize,
            0usize,
            0u32,
        );
    }
}

fn clock(id: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `ts` is a valid out-pointer; `clock_gettime` is async-signal-safe (POSIX.1-2017 §2.4.3).
    unsafe { libc::clock_gettime(id, &mut ts) };
    (ts.tv_sec as u64).saturating_mul(1_000_000_000).saturating_add(ts.tv_nsec as u64)
}

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn monotonic_ns() -> u64 {
    clock(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_REALTIME` in nanoseconds since the Unix epoch.
pub fn realtime_ns() -> u64 {
    clock(libc::CLOCK_REALTIME)
}

/// Sleeps about `ns` nanoseconds (`nanosleep(2)`, async-signal-safe).
pub fn sleep_ns(ns: u64) {
    let ts = timespec(ns);
    // SAFETY: `ts` is valid for reading; a null remainder pointer is allowed.
    unsafe { libc::nanosleep(&ts, core::ptr::null_mut()) };
}

/// Fills `buf` from `getrandom(2)` (non-blocking); `false` when it failed or was short.
pub fn getrandom(buf: &mut [u8]) -> bool {
    // SAFETY: `buf` is valid for writes of its length.
    let r = unsafe { libc::syscall(libc::SYS_getrandom, buf.as_mut_ptr(), buf.len(), libc::GRND_NONBLOCK) };
    r == buf.len() as libc::c_long
}

/// The calling thread's name (`prctl(PR_GET_NAME)`, at most 16 bytes with the NUL; source: `prctl(2)`).
pub fn thread_name(out: &mut [u8; 16]) {
    // SAFETY: PR_GET_NAME writes at most 16 bytes into the buffer, which is 16 bytes long.
    unsafe { libc::prctl(libc::PR_GET_NAME, out.as_mut_ptr() as libc::c_ulong, 0, 0, 0) };
}

/// Sets `sig` to its default action and unblocks it for the calling thread.
pub fn reset_to_default(sig: i32) {
    crate::crash::actions::set_default(sig);
    // SAFETY: the sigset is initialised by sigemptyset before use.
    unsafe {
        let mut set: libc::sigset_t = core::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, sig);
        libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, core::ptr::null_mut());
    }
}

/// Changes the calling thread's signal mask (`pthread_sigmask(3)`, async-signal-safe: POSIX.1-2017 §2.4.3) and
/// returns the previous one.
pub fn sigmask(how: i32, set: &libc::sigset_t) -> libc::sigset_t {
    // SAFETY: `set` is a valid sigset; `old` a valid out-pointer, initialised by the call.
    unsafe {
        let mut old: libc::sigset_t = core::mem::zeroed();
        libc::pthread_sigmask(how, set, &mut old);
        old
    }
}

/// The calling thread's alternate signal stack `(base, size)` when the thread is running on it now
/// (`sigaltstack(2)` query, `SS_ONSTACK`), else `None`.
pub fn on_alt_stack() -> Option<(usize, usize)> {
    // SAFETY: a null new stack only queries; `cur` is a valid out-pointer.
    unsafe {
        let mut cur: libc::stack_t = core::mem::zeroed();
        if libc::sigaltstack(core::ptr::null(), &mut cur) != 0 || cur.ss_flags & libc::SS_ONSTACK == 0 {
            return None;
        }
        Some((cur.ss_sp as usize, cur.ss_size))
    }
}

/// Makes `[base, base + size)` the calling thread's alternate signal stack and returns the previous setting
/// (`sigaltstack(2)`; fails, returning `None`, while the thread runs on its current alternate stack).
pub fn swap_alt_stack(base: usize, size: usize) -> Option<libc::stack_t> {
    // SAFETY: valid in/out pointers; the region is the caller's mapped stack.
    unsafe {
        let new = libc::stack_t { ss_sp: base as *mut libc::c_void, ss_flags: 0, ss_size: size };
        let mut old: libc::stack_t = core::mem::zeroed();
        (libc::sigaltstack(&new, &mut old) == 0).then_some(old)
    }
}

/// Puts back an alternate-stack setting returned by [`swap_alt_stack`].
pub fn restore_alt_stack(old: &libc::stack_t) {
    // SAFETY: `old` came from the kernel; a null out-pointer is allowed.
    unsafe { libc::sigaltstack(old, core::ptr::null_mut()) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::{AtomicUsize, Ordering};

    static GOT: AtomicUsize = AtomicUsize::new(0);
    static FOREIGN: AtomicUsize = AtomicUsize::new(usize::MAX);

    extern "C" fn record(_sig: libc::c_int, info: *mut libc::siginfo_t, _uc: *mut libc::c_void) {
        // SAFETY: the kernel's siginfo of this signal.
        let v = unsafe { queued_value(info, getpid()) };
        GOT.store(v.map_or(1, |v| v.wrapping_add(2)), Ordering::SeqCst);
        // SAFETY: as above. The same signal is not from another sender, nor from "no crash yet" (0).
        let others = unsafe { [queued_value(info, getpid().wrapping_add(1)), queued_value(info, 0)] };
        FOREIGN.store(others.iter().filter(|o| o.is_some()).count(), Ordering::SeqCst);
    }

    #[test]
    fn a_queued_signal_carries_its_value_and_a_plain_one_does_not() {
        // A real-time signal no other test of this crate uses.
        let sig = libc::SIGRTMIN() + 3;
        // SAFETY: installing a plain SA_SIGINFO handler for a signal only this test sends.
        unsafe {
            let mut act: libc::sigaction = core::mem::zeroed();
            act.sa_sigaction = record as *const () as usize;
            act.sa_flags = libc::SA_SIGINFO;
            libc::sigaction(sig, &act, core::ptr::null_mut());
        }
        // Signals sent to the calling thread are delivered before the sending call returns.
        queue_to_thread(getpid(), getuid(), gettid(), sig, 1234).expect("rt_tgsigqueueinfo");
        assert_eq!(GOT.load(Ordering::SeqCst), 1236, "value 1234 arrived");
        assert_eq!(FOREIGN.load(Ordering::SeqCst), 0, "no value when another sender (or none) is expected");
        tgkill(getpid(), gettid(), sig).expect("tgkill");
        assert_eq!(GOT.load(Ordering::SeqCst), 1, "a tgkill signal has no value");
    }

    /// `touch_mtime` sets the modification time of the open file to now and leaves its access time alone.
    #[test]
    fn touch_mtime_sets_the_modification_time_to_now_and_only_that() {
        use std::os::fd::AsRawFd;
        use std::time::{Duration, SystemTime};
        let f = tempfile::tempfile().expect("temporary file");
        let old = SystemTime::now() - Duration::from_secs(3600);
        f.set_times(std::fs::FileTimes::new().set_accessed(old).set_modified(old)).expect("set times");
        let before = SystemTime::now() - Duration::from_secs(1);
        assert!(touch_mtime(f.as_raw_fd()), "utimensat succeeds on an open file");
        let md = f.metadata().expect("metadata");
        let modified = md.modified().expect("mtime");
        assert!(modified >= before, "the modification time is now: {modified:?}");
        let accessed = md.accessed().expect("atime");
        assert!(accessed < before, "the access time is left alone: {accessed:?}");
        assert!(!touch_mtime(-1), "a bad descriptor fails");
    }
}
