//! Linux: another thread's stack, captured by the thread itself. The caller claims a walker and a request slot,
//! and sends the thread the capture signal with `rt_tgsigqueueinfo` (`SI_QUEUE`, the slot index in `si_value`, as
//! the crash path's stop signal does); the thread's handler takes its registers from the `ucontext` the kernel
//! gave it, walks its own stack (plain loads inside its recorded stack, [`super::reader`]) with the request's
//! walker, publishes the result and returns: the thread goes on at once. The caller waits on the slot's state (a
//! futex) with a timeout and never waits longer: a thread that blocks the signal, sleeps uninterruptibly, or is
//! stopped by a debugger makes the capture fail with [`CaptureError::Timeout`].
//!
//! A request slot's state: `FREE` → `SETUP` (the caller fills it) → `ARMED` (signal sent) → `WALKING` (the
//! thread took it) → `DONE` (result published) → `FREE` (the caller copied it). On timeout the caller takes an
//! `ARMED` slot back (a signal arriving later finds nothing to do), or marks a `WALKING` slot `ABANDONED`: the
//! thread then frees the walker and the slot itself when it finishes, so nothing it writes lands in a reused slot.
//! The walker's claim travels with the slot (`pool::Claim::into_index`), and whoever frees the slot frees it.
//!
//! The handler (`SA_SIGINFO | SA_ONSTACK | SA_RESTART`, every signal but the fatal ones blocked, as the crash
//! handlers) follows the crash-path rules: no allocation, no lock, no panic; its walk reads only the image table
//! (counted read), the walker the request holds, and memory through the fault-proof reader or its own live stack.
#![allow(unsafe_code)]

use super::current::{claim_walker, walk_live, Captured};
use super::{state, CaptureError, State};
use crate::crash::stack_bounds;
use crate::crash::writer::errno as writer_errno;
use crate::platform::linux::crash::{context, sys};
use core::ffi::c_void;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Captures of other threads that can be under way at once.
pub const REQUESTS: usize = 8;

const FREE: u32 = 0;
const SETUP: u32 = 1;
const ARMED: u32 = 2;
const WALKING: u32 = 3;
const DONE: u32 = 4;
const ABANDONED: u32 = 5;

/// Tag in the upper bits of the `si_value` a request is sent with (`"CAP"`), so a stray `SI_QUEUE` value of the
/// same signal from elsewhere in the process is not taken for a slot index.
const VALUE_TAG: usize = 0x0043_4150_0000;
const VALUE_INDEX_MASK: usize = 0xffff;

/// One capture request.
#[derive(Debug)]
struct Request {
    state: AtomicU32,
    /// The thread asked.
    tid: AtomicU64,
    /// The walker the request holds (`pool::Claim::into_index`).
    walker: AtomicUsize,
}

static SLOTS: [Request; REQUESTS] =
    [const { Request { state: AtomicU32::new(FREE), tid: AtomicU64::new(0), walker: AtomicUsize::new(0) } }; REQUESTS];

fn encode(index: usize) -> usize {
    VALUE_TAG | (index & VALUE_INDEX_MASK)
}

fn decode(value: usize) -> Option<usize> {
    (value & !VALUE_INDEX_MASK == VALUE_TAG).then_some(value & VALUE_INDEX_MASK)
}

/// The handler of the capture signal (installed by `platform::linux::ondemand`).
///
/// # Safety
/// Called by the kernel as an `SA_SIGINFO` handler: `info` and `uc` are null or valid.
pub unsafe extern "C" fn capture_handler(_sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut c_void) {
    let saved_errno = writer_errno();
    if let Some(st) = state() {
        // SAFETY: `info` and `uc` are the kernel's, for this signal.
        unsafe { answer(st, info, uc) };
    }
    set_errno(saved_errno);
}

fn set_errno(e: i32) {
    // SAFETY: `__errno_location` returns a valid pointer to this thread's errno.
    unsafe { *libc::__errno_location() = e };
}

/// The body of [`capture_handler`].
///
/// # Safety
/// As [`capture_handler`].
unsafe fn answer(st: &'static State, info: *mut libc::siginfo_t, uc: *mut c_void) {
    let tid = sys::gettid();
    // SAFETY: `info` is the kernel's siginfo for this signal (or null).
    let hint = unsafe { sys::queued_value(info) }.and_then(decode);
    // The slot the value names, if it is for this thread; else (a plain `tgkill` where `rt_tgsigqueueinfo` is
    // missing) the first armed request for this thread.
    let mine = |r: &&Request| r.tid.load(Ordering::Acquire) == tid && r.state.load(Ordering::Acquire) == ARMED;
    let Some(req) = hint.and_then(|i| SLOTS.get(i)).filter(mine).or_else(|| SLOTS.iter().find(mine)) else {
        return;
    };
    if req.state.compare_exchange(ARMED, WALKING, Ordering::AcqRel, Ordering::Acquire).is_err() {
        return; // taken back by its caller (timeout) meanwhile
    }
    let index = req.walker.load(Ordering::Acquire);
    // SAFETY: the request holds this walker's claim, and `WALKING` gives its use to this thread until it publishes
    // `DONE` (or frees it after `ABANDONED`).
    if let Some(mut claim) = unsafe { st.pool.reclaim(index) } {
        // SAFETY: `uc` is the kernel's ucontext for this signal (or null).
        let regs = unsafe { context::registers(uc) };
        let bounds = stack_bounds::stack_bounds(tid).map(|b| (b.lo, b.hi));
        let w = claim.walker();
        let top = w.stack_top;
        let mut args = WalkArgs { st, w, regs, bounds };
        if top != 0 {
            // The walk runs on the walker's own stack: the signal may have arrived on a small alternate stack.
            // SAFETY: `top` is the 16-aligned top of the walker's mapped stack, used by nobody else while this
            // thread holds the walker (the request's claim); `args` outlives the call.
            unsafe {
                crate::platform::linux::crash::stack_switch::run_on_stack(
                    top,
                    walk_trampoline,
                    core::ptr::from_mut(&mut args).cast(),
                )
            };
        } else {
            walk_trampoline(core::ptr::from_mut(&mut args).cast());
        }
        // The claim goes back to the request (its caller frees it).
        let _ = claim.into_index();
    }
    if req.state.compare_exchange(WALKING, DONE, Ordering::AcqRel, Ordering::Acquire).is_ok() {
        sys::futex_wake(&req.state, 1);
        return;
    }
    // Abandoned by its caller (timeout): free the walker and the slot here.
    // SAFETY: `ABANDONED` hands the request's claim to this thread; nobody else uses it any more.
    drop(unsafe { st.pool.reclaim(index) });
    req.state.store(FREE, Ordering::Release);
}

/// What [`walk_trampoline`] walks with.
struct WalkArgs<'a> {
    st: &'static State,
    w: &'a mut super::pool::Walker,
    regs: crate::arch::RegisterValues,
    bounds: Option<(u64, u64)>,
}

/// The walk of [`answer`], callable on another stack.
extern "C" fn walk_trampoline(arg: *mut c_void) {
    // SAFETY: `arg` is the `WalkArgs` `answer` passed, alive (and not otherwise used) until this returns.
    let a = unsafe { &mut *arg.cast::<WalkArgs<'_>>() };
    // SAFETY: `regs` are the context the capture signal interrupted on this very thread, whose handler runs this,
    // and `bounds` were recorded for this thread.
    unsafe { walk_live(a.st, a.w, &a.regs, a.bounds) };
}

/// Thread `tid`'s stack (a thread of this process), innermost first, into `out`: `out[0]` is the pc where the
/// capture signal interrupted it, then its return addresses to the outermost frame; repeats of deep recursion
/// listed in full. Waits at most `timeout_ns` nanoseconds for the thread to answer.
///
/// Normal context only (it waits). Allocation-free and lock-free.
///
/// # Errors
/// [`CaptureError::NotInstalled`], [`CaptureError::Busy`] (every walker or request slot taken),
/// [`CaptureError::NoSuchThread`] (`ESRCH`: not a thread of this process, or it exited),
/// [`CaptureError::Os`] (the signal could not be sent), [`CaptureError::Timeout`],
/// [`CaptureError::NoRegisters`].
pub fn thread_stack(tid: u64, out: &mut [u64], timeout_ns: u64) -> Result<Captured, CaptureError> {
    capture_with(tid, timeout_ns, |w| {
        let Some(o) = w.outcome.filter(|o| o.frames > 0) else { return Err(CaptureError::NoRegisters) };
        let (len, cut) = super::expand::expand(w.frames(), w.repeats(), 0, out);
        Ok(Captured { len, truncated: cut || o.truncated })
    })
}

/// Asks thread `tid` to walk its own stack (see [`thread_stack`]) and calls `take` with the walker holding the
/// result (`outcome`, `frames`, `trust`, `repeats`, `regs`) before it is freed.
///
/// # Errors
/// As [`thread_stack`]; `take`'s own error.
pub fn capture_with<R>(
    tid: u64,
    timeout_ns: u64,
    take: impl FnOnce(&super::pool::Walker) -> Result<R, CaptureError>,
) -> Result<R, CaptureError> {
    let st = state().ok_or(CaptureError::NotInstalled)?;
    let claim = claim_walker(st)?;
    let Some(req) =
        SLOTS.iter().find(|r| r.state.compare_exchange(FREE, SETUP, Ordering::AcqRel, Ordering::Relaxed).is_ok())
    else {
        return Err(CaptureError::Busy);
    };
    let index = SLOTS.iter().position(|r| core::ptr::eq(r, req)).unwrap_or(0);
    let walker = claim.into_index();
    req.tid.store(tid, Ordering::Release);
    req.walker.store(walker, Ordering::Release);
    req.state.store(ARMED, Ordering::Release);
    // Frees the walker and the slot; for a slot taken back (`SETUP`).
    let free = |req: &Request| {
        // SAFETY: the slot is `SETUP` again, taken back from `ARMED` by this caller: the request's claim is ours.
        drop(unsafe { st.pool.reclaim(walker) });
        req.state.store(FREE, Ordering::Release);
    };
    if let Err(e) = sys::queue_to_thread(sys::getpid(), sys::getuid(), tid, st.signal, encode(index)) {
        if req.state.compare_exchange(ARMED, SETUP, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            free(req);
            return Err(if e == libc::ESRCH { CaptureError::NoSuchThread } else { CaptureError::Os(e) });
        }
        // Not ours any more: a stale signal of an earlier request for the same thread took it; wait as usual.
    }
    let deadline = sys::monotonic_ns().saturating_add(timeout_ns);
    loop {
        let s = req.state.load(Ordering::Acquire);
        if s == DONE {
            // SAFETY: `DONE` hands the request's claim back to the caller; the thread no longer touches the walker.
            let result = match unsafe { st.pool.reclaim(walker) } {
                Some(mut c) => take(c.walker()), // the claim is dropped here: the walker is free again
                None => Err(CaptureError::NoRegisters),
            };
            req.state.store(FREE, Ordering::Release);
            return result;
        }
        let now = sys::monotonic_ns();
        if now >= deadline {
            if req.state.compare_exchange(ARMED, SETUP, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                free(req);
                return Err(CaptureError::Timeout);
            }
            if req.state.compare_exchange(WALKING, ABANDONED, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                return Err(CaptureError::Timeout);
            }
            continue; // it just became DONE
        }
        sys::futex_wait(&req.state, s, deadline.saturating_sub(now).min(100_000_000));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_carry_a_tagged_index() {
        assert_eq!(decode(encode(3)), Some(3));
        assert_eq!(decode(3), None, "an untagged value is not ours");
        assert_eq!(decode(VALUE_TAG | 0x1_0000), None);
    }
}
