//! The first-chance hook: a callback that sees every fatal signal before the crash handler does, for runtimes that
//! use faults on purpose (JITs, wasm runtimes' guard pages, garbage collectors' write barriers), like Crashpad's
//! `FirstChanceHandler` that wasmtime registers.
//!
//! If the hook returns `true` the signal counts as handled: the crash handler returns at once (the thread resumes
//! with whatever context the hook left), writes nothing and stops nobody. A fault inside the hook itself re-enters
//! the crash handler; the hook is then skipped on that thread (a per-thread guard), so it cannot recurse.
//!
//! Lock-free; async-signal-safe (one atomic load, and a bounded scan of [`GUARD_SLOTS`] atomics).

use core::ffi::c_void;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

/// A first-chance handler: called with the signal number, the kernel's `siginfo_t` and `ucontext_t` (as an
/// `SA_SIGINFO` handler receives them; either may be null), from inside the signal handler, on the faulting thread,
/// before the crash handler does anything else. Return `true` when the signal was handled (the fault is fixed, or
/// the context was changed to resume elsewhere), `false` to let the crash handler report it.
///
/// # Safety
/// It runs inside a signal handler: it must be async-signal-safe (no allocation, no locks, no `println!`), must not
/// unwind, and may only dereference `info` / `context` when they are non-null.
pub type FirstChanceHandler =
    unsafe extern "C" fn(sig: libc::c_int, info: *mut libc::siginfo_t, context: *mut c_void) -> bool;

static HANDLER: AtomicUsize = AtomicUsize::new(0);

/// Threads currently inside the hook (kernel thread ids; 0 = free). More threads than this at once are not guarded
/// against recursion (the hook still runs).
pub const GUARD_SLOTS: usize = 64;

static INSIDE: [AtomicU64; GUARD_SLOTS] = [const { AtomicU64::new(0) }; GUARD_SLOTS];

/// Sets (or, with `None`, clears) the first-chance handler. May be called at any time, from any thread; a signal
/// arriving meanwhile sees either the old or the new handler. Not for use inside a signal handler (it is
/// async-signal-safe, but changing it there races the other threads' faults).
pub fn set_first_chance_handler(handler: Option<FirstChanceHandler>) {
    HANDLER.store(handler.map_or(0, |h| h as usize), Ordering::Release);
}

/// Whether a first-chance handler is set (one atomic load; async-signal-safe). On Apple platforms the Mach exception
/// server then leaves faults to the signal path, where the hook runs on the faulting thread with its `ucontext`.
pub fn is_set() -> bool {
    HANDLER.load(Ordering::Acquire) != 0
}

/// Calls the first-chance handler for a signal on thread `tid`; `true` when it handled the signal. `false` when
/// none is set, or when this thread is already inside it (a fault in the hook). Async-signal-safe.
pub(crate) fn call(tid: u64, sig: i32, info: *mut libc::siginfo_t, context: *mut c_void) -> bool {
    let h = HANDLER.load(Ordering::Acquire);
    if h == 0 || tid == 0 {
        return false;
    }
    if INSIDE.iter().any(|s| s.load(Ordering::Acquire) == tid) {
        return false;
    }
    let slot = INSIDE.iter().find(|s| s.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Acquire).is_ok());
    #[allow(unsafe_code)]
    // SAFETY: a non-zero value was stored by `set_first_chance_handler` from a valid `FirstChanceHandler` of the
    // same type (fn pointers are never null); its contract (async-signal-safe, no unwinding) is the caller's.
    let handled = unsafe {
        let f = core::mem::transmute::<usize, FirstChanceHandler>(h);
        f(sig, info, context)
    };
    if let Some(s) = slot {
        s.store(0, Ordering::Release);
    }
    handled
}

#[cfg(test)]
mod tests {
    use super::*;
    use core::sync::atomic::AtomicU32;

    static CALLS: AtomicU32 = AtomicU32::new(0);
    static NESTED: AtomicU32 = AtomicU32::new(0);

    #[allow(unsafe_code)] // the hook's type is an `unsafe extern "C" fn`; this one has no preconditions
    unsafe extern "C" fn handles_sigsegv(sig: libc::c_int, _i: *mut libc::siginfo_t, _c: *mut c_void) -> bool {
        CALLS.fetch_add(1, Ordering::SeqCst);
        // A nested call on the same thread (what a fault inside the hook looks like) is refused.
        if call(4242, sig, core::ptr::null_mut(), core::ptr::null_mut()) {
            NESTED.fetch_add(1, Ordering::SeqCst);
        }
        sig == libc::SIGSEGV
    }

    #[test]
    fn calls_the_hook_once_per_signal_and_never_recursively() {
        assert!(!call(4242, libc::SIGSEGV, core::ptr::null_mut(), core::ptr::null_mut()), "no hook set");
        assert!(!is_set());
        set_first_chance_handler(Some(handles_sigsegv));
        assert!(is_set());
        assert!(call(4242, libc::SIGSEGV, core::ptr::null_mut(), core::ptr::null_mut()));
        assert!(!call(4242, libc::SIGBUS, core::ptr::null_mut(), core::ptr::null_mut()));
        assert_eq!(CALLS.load(Ordering::SeqCst), 2);
        assert_eq!(NESTED.load(Ordering::SeqCst), 0);
        assert!(INSIDE.iter().all(|s| s.load(Ordering::SeqCst) == 0), "guard slots released");
        set_first_chance_handler(None);
        assert!(!call(4242, libc::SIGSEGV, core::ptr::null_mut(), core::ptr::null_mut()));
        assert_eq!(CALLS.load(Ordering::SeqCst), 2);
    }
}
