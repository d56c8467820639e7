//! Test hooks called from the crash path. They exist so the crash-test client can prove that nothing allocates
//! after a fault (it counts allocations between [`CrashEvent::Start`] and [`CrashEvent::BeforeReraise`]) and can
//! make the handler fault on purpose. Production code leaves them unset.
//!
//! Async-signal-safe: one atomic load each.

use core::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

/// When the crash path calls the hook.
#[repr(u32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashEvent {
    /// The owning thread entered the handler (before anything else is done).
    Start = 1,
    /// The report is written (or failed); previous handlers are about to be restored and the signal re-raised.
    BeforeReraise = 2,
    /// The threads listed at crash start were stopped (Linux: asked to stop, and answered or were given up on; the
    /// thread list is about to be read once more for threads created meanwhile. Apple: suspended).
    ThreadsStopped = 3,
    /// The thread list was read and the table filled; the stop requests are about to go out (Linux). For phase
    /// timing (benchmarks).
    ThreadsListed = 4,
    /// Every thread is stopped or given up on (both stop rounds done); the report is about to be written.
    StopDone = 5,
    /// Every section is encoded and written to the file (not yet `fsync`ed); the commit is next.
    ReportWritten = 6,
    /// A stopped thread `fdatasync`ed the reserved report file early, successfully (Linux:
    /// `crash::writer::set_early_sync`). Called on that thread, not the owner (`tid` is that thread's), while the
    /// owner goes on: this hook can run at the same time as the owner's. At most once per reservation.
    EarlySync = 7,
}

/// A crash hook. It runs inside a signal handler, possibly on a small alternate stack: it must be
/// async-signal-safe, must not allocate and must not panic. `tid` is the kernel id of the thread it runs on: the
/// thread handling the crash, except for [`CrashEvent::EarlySync`].
pub type CrashHook = extern "C" fn(event: CrashEvent, tid: u64);

static HOOK: AtomicUsize = AtomicUsize::new(0);

/// When true, the crash handler faults on purpose after stopping the other threads (tests of the recursive-crash
/// path only).
pub static FAULT_IN_HANDLER: AtomicBool = AtomicBool::new(false);

/// Sets (or clears) the crash hook. For tests.
pub fn set_crash_hook(hook: Option<CrashHook>) {
    HOOK.store(hook.map_or(0, |h| h as usize), Ordering::Release);
}

/// Calls the hook, if one is set. Signal-safe.
pub(crate) fn call(event: CrashEvent, tid: u64) {
    let h = HOOK.load(Ordering::Acquire);
    if h != 0 {
        #[allow(unsafe_code)]
        // SAFETY: a non-zero value was stored by `set_crash_hook` from a valid `CrashHook` fn pointer of the same
        // type, and fn pointers are never null.
        let f: CrashHook = unsafe { core::mem::transmute::<usize, CrashHook>(h) };
        f(event, tid);
    }
}

/// Whether the test switch asks for a fault inside the handler.
pub(crate) fn fault_requested() -> bool {
    FAULT_IN_HANDLER.load(Ordering::Acquire)
}

/// Faults on purpose (a write to an unmapped low address): what [`FAULT_IN_HANDLER`] asks for, to test the
/// recursive-crash path. Never returns normally.
#[inline(never)]
pub(crate) fn deliberate_fault() {
    let p = core::hint::black_box(16usize) as *mut u8;
    #[allow(unsafe_code)]
    // SAFETY: not sound by design: writes to an unmapped low address to fault inside the handler. Only reached
    // when a test set `FAULT_IN_HANDLER`.
    unsafe {
        core::ptr::write_volatile(p, 1)
    };
}
