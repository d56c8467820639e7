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

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec { tv_sec: (ns / 1_000_000_000) as libc::time_t, tv_nsec: (ns % 1_000_000_000) as libc::c_long }
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
    // SAFETY: a zeroed sigaction with SIG_DFL is a valid argument; the sigset is initialised by sigemptyset.
    unsafe {
        let mut act: libc::sigaction = core::mem::zeroed();
        act.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(sig, &act, core::ptr::null_mut());
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
