//! Linux: another thread's stack, captured by the thread itself. The caller claims a request slot and sends the
//! thread the capture signal with `rt_tgsigqueueinfo` (`SI_QUEUE`, the slot index and the request's generation in
//! `si_value`, as the crash path's stop signal does); the thread's handler claims a walker, takes its registers
//! from the `ucontext` the kernel gave it, walks its own stack (plain loads inside its recorded stack,
//! [`super::reader`]), hands the walker with the result to the request and returns: the thread goes on at once.
//! The caller waits on the slot's state (a futex) with a timeout and never waits longer: a thread that blocks the
//! signal, sleeps uninterruptibly, or is stopped by a debugger makes the capture fail with
//! [`CaptureError::Timeout`]. The caller holds no walker while it waits, so a thread that does not answer costs
//! a slot and the wait (200 ms per thread in a non-fatal report), never the walker other captures need: one
//! walker (the default `Config::capture_walkers`) serves every capture, each holding it for one walk.
//!
//! A request slot's state is one `u32`: a phase in the low [`PHASE_BITS`] bits and the slot's generation above
//! them, bumped each time the slot is taken, so that a handler acting on what it saw of an earlier request of the
//! same slot fails its compare-and-swap instead of taking the new one (the slot may have been taken back on
//! timeout and armed for another thread meanwhile: that thread's request must not get this thread's stack). The
//! phases: `FREE` → `SETUP` (the caller fills it) → `ARMED` (signal sent) → `WALKING` (the thread took it) → `DONE`
//! (result published) → `FREE` (the caller copied it). On timeout the caller takes an `ARMED` slot back (a signal
//! arriving later finds nothing to do), or marks a `WALKING` slot `ABANDONED`: the thread then frees its walker
//! and the slot itself when it finishes, so nothing it writes lands in a reused slot. The walker's claim travels
//! from the thread to the caller through the slot (`pool::Claim::into_index`), and whoever frees the slot frees
//! it.
//!
//! **One signal in flight per thread.** A real-time signal is queued once per send, and a thread that blocks it
//! keeps every copy: a request per stall to such a thread would pile them up until the user's queued-signal limit
//! (`RLIMIT_SIGPENDING`) is reached, and then the crash path's own stop signals could not be sent (`EAGAIN`). So
//! each signal sent is recorded in a small table of outstanding signals ([`OUTSTANDING`] entries: the thread id and
//! the request's token) before it is sent, and the handler clears its entry first thing. A request for a thread
//! with an entry sends nothing: it waits (polling, within its timeout) for the entry to go, then sends, and fails
//! with [`CaptureError::Timeout`] if it never goes (the thread blocks the signal). An entry whose signal `/proc`
//! says is no longer pending for that thread (`SigPnd:`; the thread exited and its id was reused, or it took the
//! signal with `sigwait`) is stale: replaced at once (under qemu-user, where `/proc` shows the emulator's host
//! state, only an entry of a thread that is gone). At most [`OUTSTANDING`] capture signals are ever queued in
//! the process.
//!
//! The handler (`SA_SIGINFO | SA_ONSTACK | SA_RESTART`, every signal but the fatal ones blocked, as the crash
//! handlers) follows the crash-path rules: no allocation, no lock, no panic; its walk reads only the image table
//! (counted read), the walker it claimed, and memory through the fault-proof reader or its own live stack.
#![allow(unsafe_code)]

use super::current::{claim_walker, walk_live, Captured};
use super::{state, CaptureError, State};
use crate::crash::stack_bounds;
use crate::crash::writer::errno as writer_errno;
use crate::platform::linux::crash::{context, sys, tasks};
use core::ffi::c_void;
use core::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// Captures of other threads that can be under way at once.
pub const REQUESTS: usize = 8;
/// Capture signals that can be in flight (sent and not yet taken by their thread) at once, one per thread at most.
pub const OUTSTANDING: usize = 32;

/// Bits of a slot's state word that hold its phase; the generation is above them.
pub const PHASE_BITS: u32 = 4;
const PHASE_MASK: u32 = (1 << PHASE_BITS) - 1;
const FREE: u32 = 0;
const SETUP: u32 = 1;
const ARMED: u32 = 2;
const WALKING: u32 = 3;
const DONE: u32 = 4;
const ABANDONED: u32 = 5;

/// Tag in the upper bits of the `si_value` a request is sent with (`"CAP"` at bit 40), so a stray `SI_QUEUE` value
/// of the same signal from elsewhere in the process is not taken for ours. Below it, bits 0..32 are the request's
/// token: the slot's generation above [`PHASE_BITS`] bits of slot index.
const VALUE_TAG: u64 = 0x0043_4150 << 40;
const VALUE_TAG_MASK: u64 = !0xff_ffff_ffff;
const VALUE_TOKEN_MASK: u64 = 0xffff_ffff;

/// One capture request.
#[derive(Debug)]
struct Request {
    /// Generation and phase (see the module docs).
    state: AtomicU32,
    /// The thread asked.
    tid: AtomicU64,
    /// The walker of the finished walk (`pool::Claim::into_index`, claimed by the handler), or [`NO_WALKER`].
    walker: AtomicUsize,
}

static SLOTS: [Request; REQUESTS] = [const { Request::new() }; REQUESTS];

/// [`Request::walker`] when the handler found no free walker.
const NO_WALKER: usize = usize::MAX;

/// Signals in flight: `tid << 32 | token`, 0 when free (a thread id is never 0).
static IN_FLIGHT: [AtomicU64; OUTSTANDING] = [const { AtomicU64::new(0) }; OUTSTANDING];

const fn phase(state: u32) -> u32 {
    state & PHASE_MASK
}

const fn generation(state: u32) -> u32 {
    state >> PHASE_BITS
}

const fn word(generation: u32, phase: u32) -> u32 {
    (generation << PHASE_BITS) | (phase & PHASE_MASK)
}

/// A request's token: the slot's generation and the slot's index.
fn token(generation: u32, index: usize) -> u32 {
    (generation << PHASE_BITS) | ((index as u32) & PHASE_MASK)
}

fn encode(token: u32) -> usize {
    (VALUE_TAG | u64::from(token)) as usize
}

/// The token of a value sent by [`capture_with`]; `None` for any other value.
fn decode(value: usize) -> Option<u32> {
    let v = value as u64;
    (v & VALUE_TAG_MASK == VALUE_TAG).then_some((v & VALUE_TOKEN_MASK) as u32)
}

/// Slot index and generation of a token.
fn untoken(token: u32) -> (usize, u32) {
    ((token & PHASE_MASK) as usize, token >> PHASE_BITS)
}

impl Request {
    const fn new() -> Request {
        Request { state: AtomicU32::new(FREE), tid: AtomicU64::new(0), walker: AtomicUsize::new(NO_WALKER) }
    }

    /// Takes the slot if it is free: its new generation (the old one plus one) in phase `SETUP`.
    fn take_free(&self) -> Option<u32> {
        let s = self.state.load(Ordering::Acquire);
        if phase(s) != FREE {
            return None;
        }
        let g = generation(s).wrapping_add(1) & (u32::MAX >> PHASE_BITS);
        self.state.compare_exchange(s, word(g, SETUP), Ordering::AcqRel, Ordering::Relaxed).ok().map(|_| g)
    }

    /// Arms a slot taken by [`Request::take_free`] at generation `g` for thread `tid`.
    fn arm(&self, g: u32, tid: u64) {
        self.tid.store(tid, Ordering::Release);
        self.walker.store(NO_WALKER, Ordering::Release);
        self.state.store(word(g, ARMED), Ordering::Release);
    }

    /// The state word of this slot if it is armed for thread `me` (and, with `g`, at that generation): what the
    /// handler then tries to take with [`Request::take`]. The state is read before the thread id, so a word seen
    /// armed with a matching id was armed for `me` at that generation.
    fn armed_for(&self, me: u64, g: Option<u32>) -> Option<u32> {
        let s = self.state.load(Ordering::Acquire);
        let ok = phase(s) == ARMED && g.is_none_or(|g| generation(s) == g) && self.tid.load(Ordering::Acquire) == me;
        ok.then_some(s)
    }

    /// `ARMED` → `WALKING` for the word `seen` ([`Request::armed_for`]); fails when the slot changed since, even if
    /// it was armed again (another generation).
    fn take(&self, seen: u32) -> bool {
        let to = word(generation(seen), WALKING);
        self.state.compare_exchange(seen, to, Ordering::AcqRel, Ordering::Acquire).is_ok()
    }
}

/// Why [`record_in_flight`] recorded nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NotRecorded {
    /// A signal sent to that thread earlier is still pending (or another request is sending one right now).
    Pending,
    /// [`OUTSTANDING`] signals are in flight.
    Full,
}

/// Records a signal about to be sent to `tid` with `token`, and returns its entry. When an entry for that thread
/// is there already and `check` is set, `/proc` is asked whether its signal is still pending; if not, the entry is
/// stale (the thread exited, or took the signal some other way) and replaced.
fn record_in_flight(tid: u64, token: u32, sig: i32, check: bool) -> Result<&'static AtomicU64, NotRecorded> {
    let mine = (tid << 32) | u64::from(token);
    // An earlier signal to this thread: still pending, or stale.
    for e in &IN_FLIGHT {
        let v = e.load(Ordering::SeqCst);
        if v != 0 && v >> 32 == tid {
            if !check || !no_longer_pending(tid, sig) {
                return Err(NotRecorded::Pending);
            }
            // Taken (its handler clears the entry in a moment) or lost with an exited thread: forget it.
            let _ = e.compare_exchange(v, 0, Ordering::SeqCst, Ordering::SeqCst);
        }
    }
    let put = || IN_FLIGHT.iter().find(|e| e.compare_exchange(0, mine, Ordering::SeqCst, Ordering::SeqCst).is_ok());
    let entry = match put() {
        Some(e) => e,
        None => {
            // Full: free the entries whose signal is no longer pending (threads that exited), then try once more.
            for e in &IN_FLIGHT {
                let v = e.load(Ordering::SeqCst);
                if v != 0 && no_longer_pending(v >> 32, sig) {
                    let _ = e.compare_exchange(v, 0, Ordering::SeqCst, Ordering::SeqCst);
                }
            }
            put().ok_or(NotRecorded::Full)?
        }
    };
    // Two requests for the same thread at once may both have found no entry: every one that sees another entry
    // for its thread withdraws (at least one of two sees the other: all sequentially consistent), so at most one
    // signal is sent. Both may withdraw; each then tries again after a pause of its own length.
    if IN_FLIGHT.iter().any(|e| !core::ptr::eq(e, entry) && e.load(Ordering::SeqCst) >> 32 == tid) {
        let _ = entry.compare_exchange(mine, 0, Ordering::SeqCst, Ordering::SeqCst);
        return Err(NotRecorded::Pending);
    }
    Ok(entry)
}

/// Whether a capture signal sent to thread `tid` is known to be no longer pending: `/proc` says so (`SigPnd:`),
/// where `/proc` shows this process's own signal state truthfully (not under qemu-user, which takes every host
/// signal at once and queues it itself: the crash path's `sigblk_truthful`, tested at install); otherwise only
/// when the thread is gone (`tgkill` with signal 0: `ESRCH`).
fn no_longer_pending(tid: u64, sig: i32) -> bool {
    let st = crate::platform::linux::crash::STATE.load(Ordering::Acquire);
    // SAFETY: a non-null crash STATE points to the leaked state install published; it is never freed.
    let truthful = unsafe { st.as_ref() }.is_some_and(|s| s.sigblk_truthful);
    if truthful {
        tasks::signal_pending(tid, sig) == Some(false)
    } else {
        sys::tgkill(sys::getpid(), tid, 0) == Err(libc::ESRCH)
    }
}

/// The handler's part: clears the entry of the signal it took (`token`; without one, a plain `tgkill`, any entry
/// of this thread).
fn clear_in_flight(tid: u64, token: Option<u32>) {
    for e in &IN_FLIGHT {
        let v = e.load(Ordering::SeqCst);
        if v != 0 && v >> 32 == tid && token.is_none_or(|t| v & VALUE_TOKEN_MASK == u64::from(t)) {
            let _ = e.compare_exchange(v, 0, Ordering::SeqCst, Ordering::SeqCst);
            return;
        }
    }
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
    // SAFETY: `errno_location` returns a valid pointer to this thread's errno.
    unsafe { *crate::crash::writer::errno_location() = e };
}

/// The body of [`capture_handler`].
///
/// # Safety
/// As [`capture_handler`].
unsafe fn answer(st: &'static State, info: *mut libc::siginfo_t, uc: *mut c_void) {
    let tid = sys::gettid();
    // SAFETY: `info` is the kernel's siginfo for this signal (or null).
    let token = unsafe { sys::queued_value(info, sys::getpid()) }.and_then(decode);
    // This signal is no longer in flight: cleared before the slots are looked at.
    clear_in_flight(tid, token);
    // The slot the token names, if it is still that request and for this thread; else (a plain `tgkill` where
    // `rt_tgsigqueueinfo` is missing, or a signal whose request was taken back) any request armed for this thread.
    let named = token.map(untoken).and_then(|(i, g)| Some((SLOTS.get(i)?, g)));
    let taken = named
        .and_then(|(r, g)| r.armed_for(tid, Some(g)).filter(|&s| r.take(s)).map(|s| (r, s)))
        .or_else(|| SLOTS.iter().find_map(|r| r.armed_for(tid, None).filter(|&s| r.take(s)).map(|s| (r, s))));
    let Some((req, seen)) = taken else {
        return; // taken back by its caller (timeout) meanwhile
    };
    let g = generation(seen);
    // The walker is claimed here, for the walk alone: the caller holds none while it waits (a thread that does
    // not answer costs its caller a request slot and time, never a walker). Bounded wait (`claim_walker`: 10 ms
    // at most, `sched_yield` and `nanosleep`); none free: the caller gets `Busy`.
    let index = match claim_walker(st) {
        Ok(mut claim) => {
            // SAFETY: `uc` is the kernel's ucontext for this signal (or null).
            let regs = unsafe { context::registers(uc) };
            let bounds = stack_bounds::stack_bounds(tid).map(|b| (b.lo, b.hi));
            let w = claim.walker();
            let top = w.stack_top;
            let mut args = WalkArgs { st, w, regs, bounds };
            if top != 0 {
                // The walk runs on the walker's own stack: the signal may have arrived on a small alternate stack.
                // SAFETY: `top` is the 16-aligned top of the walker's mapped stack, used by nobody else while this
                // thread holds the walker (its claim); `args` outlives the call.
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
            // The claim goes to the request (its caller frees it).
            claim.into_index()
        }
        Err(_) => NO_WALKER,
    };
    req.walker.store(index, Ordering::Release);
    if req.state.compare_exchange(word(g, WALKING), word(g, DONE), Ordering::AcqRel, Ordering::Acquire).is_ok() {
        sys::futex_wake(&req.state, 1);
        return;
    }
    // Abandoned by its caller (timeout): free the walker and the slot here.
    if index != NO_WALKER {
        // SAFETY: `ABANDONED` leaves the request's claim with this thread; nobody else uses it.
        drop(unsafe { st.pool.reclaim(index) });
    }
    req.state.store(word(g, FREE), Ordering::Release);
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
/// [`CaptureError::Os`] (the signal could not be sent), [`CaptureError::Timeout`] (also when a capture signal
/// sent to that thread earlier stayed pending the whole time: nothing is sent again, see the module docs; and
/// [`CaptureError::Busy`] when [`OUTSTANDING`] signals are pending), [`CaptureError::NoRegisters`].
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
    if st.pool.is_empty() {
        return Err(CaptureError::NotInstalled);
    }
    let Some((index, req, g)) = SLOTS.iter().enumerate().find_map(|(i, r)| r.take_free().map(|g| (i, r, g))) else {
        return Err(CaptureError::Busy);
    };
    req.arm(g, tid);
    // Takes an `ARMED` slot back (the thread did not take it) and frees it.
    let take_back = |req: &Request| {
        let back =
            req.state.compare_exchange(word(g, ARMED), word(g, SETUP), Ordering::AcqRel, Ordering::Acquire).is_ok();
        if back {
            req.state.store(word(g, FREE), Ordering::Release);
        }
        back
    };
    let deadline = sys::monotonic_ns().saturating_add(timeout_ns);
    let tok = token(g, index);
    // One signal in flight per thread (module docs): while an earlier one is pending, wait for its handler to run
    // (it clears the entry, microseconds for a thread that does not block the signal) instead of sending another.
    let mut check = true;
    let sent = loop {
        if req.state.load(Ordering::Acquire) != word(g, ARMED) {
            break Ok(()); // the handler of an earlier signal to this thread took this request
        }
        match record_in_flight(tid, tok, st.signal, check) {
            Ok(entry) => {
                break sys::queue_to_thread(sys::getpid(), sys::getuid(), tid, st.signal, encode(tok)).map_err(|e| {
                    let _ = entry.compare_exchange((tid << 32) | u64::from(tok), 0, Ordering::SeqCst, Ordering::SeqCst);
                    if e == libc::ESRCH {
                        CaptureError::NoSuchThread
                    } else {
                        CaptureError::Os(e)
                    }
                })
            }
            Err(NotRecorded::Full) => break Err(CaptureError::Busy),
            Err(NotRecorded::Pending) => {
                check = false;
                if sys::monotonic_ns() >= deadline {
                    break Err(CaptureError::Timeout);
                }
                // A pause of this request's own length (slot index), so two withdrawn requests do not meet again.
                sys::sleep_ns(50_000u64.saturating_mul((index as u64).saturating_add(1)));
            }
        }
    };
    if let Err(e) = sent {
        if take_back(req) {
            return Err(e);
        }
        // Not ours any more: an earlier signal to the same thread took it; wait as usual.
    }
    loop {
        let s = req.state.load(Ordering::Acquire);
        if s == word(g, DONE) {
            let walker = req.walker.load(Ordering::Acquire);
            let result = if walker == NO_WALKER {
                Err(CaptureError::Busy) // the thread found every walker in use
            } else {
                // SAFETY: `DONE` hands the claim the thread put in the request to the caller; the thread no longer
                // touches the walker.
                match unsafe { st.pool.reclaim(walker) } {
                    Some(mut c) => take(c.walker()), // the claim is dropped here: the walker is free again
                    None => Err(CaptureError::NoRegisters),
                }
            };
            req.state.store(word(g, FREE), Ordering::Release);
            return result;
        }
        let now = sys::monotonic_ns();
        if now >= deadline {
            if take_back(req) {
                return Err(CaptureError::Timeout);
            }
            if req
                .state
                .compare_exchange(word(g, WALKING), word(g, ABANDONED), Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
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
    fn values_carry_a_tagged_token() {
        let t = token(0x0abc_def1, 3);
        assert_eq!(untoken(t), (3, 0x0abc_def1));
        assert_eq!(decode(encode(t)), Some(t));
        assert_eq!(decode(3), None, "an untagged value is not ours");
        assert_eq!(decode(encode(t) ^ (1 << 50)), None, "nor one with another tag");
    }

    /// The slot-reuse race: the handler of thread T sees a slot armed for it, then (before its compare-and-swap)
    /// the caller times out, takes the slot back and the slot is armed again, for thread U. T must not take U's
    /// request (its stack would be published as U's). Driven here step by step with the handler's own two steps
    /// (`armed_for`, then `take`); with a bare phase (no generation) the final compare-and-swap would succeed.
    #[test]
    fn a_handler_never_takes_a_slot_armed_again_for_another_thread() {
        let (t, u) = (1001u64, 1002u64);
        let r = Request::new();
        let g1 = r.take_free().expect("free");
        r.arm(g1, t);
        let seen = r.armed_for(t, Some(g1)).expect("armed for T");
        // The caller times out: ARMED -> SETUP -> FREE; another caller arms it for U.
        assert!(r
            .state
            .compare_exchange(word(g1, ARMED), word(g1, SETUP), Ordering::AcqRel, Ordering::Acquire)
            .is_ok());
        r.state.store(word(g1, FREE), Ordering::Release);
        let g2 = r.take_free().expect("free again");
        assert_ne!(g1, g2);
        r.arm(g2, u);
        assert!(!r.take(seen), "T took the request armed for U");
        assert_eq!(r.state.load(Ordering::Acquire), word(g2, ARMED), "U's request untouched");
        // T's stale token names the old generation; a scan finds nothing for T either.
        assert_eq!(r.armed_for(t, Some(g1)), None);
        assert_eq!(r.armed_for(t, None), None);
        // U takes its own.
        let s = r.armed_for(u, Some(g2)).expect("armed for U");
        assert!(r.take(s));
        assert_eq!(r.state.load(Ordering::Acquire), word(g2, WALKING));
    }

    #[test]
    fn generations_wrap_within_their_bits() {
        let r = Request::new();
        r.state.store(word(u32::MAX >> PHASE_BITS, FREE), Ordering::Relaxed);
        assert_eq!(r.take_free(), Some(0));
        assert_eq!(phase(r.state.load(Ordering::Relaxed)), SETUP);
        assert_eq!(r.take_free(), None, "taken");
    }
}
