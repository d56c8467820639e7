//! The signal fallback on Apple platforms: `SIGABRT` always (`abort()` raises it with `pthread_kill`; no Mach
//! exception precedes it), and `SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE`, `SIGTRAP`, `SIGSYS` when the Mach path did
//! not see the fault (our exception ports are not registered for it any more, or the signal was sent by software).
//! The decision is [`crate::platform::darwin::crash::policy::signal_fallback_captures_with_hook`], tested on every
//! host.
//!
//! The first-chance hook (`crate::set_first_chance_handler`) runs here first, on the faulting thread, as on Linux.
//! While one is set the exception server declines every fault, so a fault the hook handles is never reported.
//! Without a hook the Mach path reports a fault before any signal handler runs, **even one a previous signal
//! handler would recover from** (Mono's and Unity's null-reference checks, JIT guard pages): apps embedding such a
//! runtime must set a first-chance hook that recognises its faults.
//!
//! The owner runs [`super::capture`] on the faulting thread itself (on the alternate stack when the thread has one),
//! suspending the others with `thread_suspend`. After a report (ours or the exception server's), the previous signal
//! actions are restored and the signal is re-raised or the faulting instruction re-executed, so earlier handlers
//! and the default action still run. Handlers use `SA_SIGINFO | SA_ONSTACK | SA_NODEFER`.
//!
//! Crash path: no allocation, no locks, no panics, bounded waits. **Type-checked only.**

use super::mach::{self, FLAVORS};
use super::server::own_port;
use super::{capture, state, wait_done, write_minimal, Crashed, State, GATE};
use crate::crash::actions::{self, FATAL_SIGNALS};
use crate::crash::capture::CrashRecord;
use crate::crash::first_chance;
use crate::crash::reentrancy::Entry;
use crate::crash::writer;
use crate::platform::darwin::crash::exc::{exception_mask_for_signal, signal_is_user_sent, Cpu};
use crate::platform::darwin::crash::policy::{reraise_after_report, signal_fallback_captures_with_hook};
use crate::platform::darwin::crash::state::mcontext64_parts;
use core::ffi::c_void;
use core::sync::atomic::Ordering;

/// Milliseconds a thread that faulted while another owns the crash waits for it.
const OTHER_WAIT_MS: u32 = 10_000;

fn set_errno(e: i32) {
    // SAFETY: `__error` returns a valid pointer to this thread's errno.
    unsafe { *libc::__error() = e };
}

/// Re-sends `sig` to this thread when returning would not re-deliver it
/// ([`crate::platform::darwin::crash::policy::reraise_after_report`]): signals sent by software, SIGABRT/SIGSYS,
/// and SIGTRAP on x86_64 (`int3` advanced the pc). Faults, and `brk` on arm64, fault again on return instead, so
/// Apple's own crash log shows the original exception at the faulting instruction.
fn reraise(sig: i32, code: i32) {
    let cpu = if cfg!(target_arch = "aarch64") { Cpu::Arm64 } else { Cpu::X86_64 };
    if reraise_after_report(sig, code, cpu) {
        // SAFETY: pthread_kill on the calling thread with a valid signal number (async-signal-safe per POSIX).
        unsafe { libc::pthread_kill(libc::pthread_self(), sig) };
    }
}

/// Dies by `sig` with the default action.
fn die(sig: i32) {
    for s in FATAL_SIGNALS.iter().copied().chain(core::iter::once(sig)) {
        actions::set_default(s);
    }
    // SAFETY: as in `reraise`.
    unsafe { libc::pthread_kill(libc::pthread_self(), sig) };
}

/// Registers of this thread from the signal's `ucontext` (`uc_mcontext`: exception state, then thread state).
///
/// # Safety
/// `uc` is null or the `ucontext_t` the kernel passed to this handler.
unsafe fn registers(uc: *mut c_void, st: &State) -> crate::arch::RegisterValues {
    let uc = uc.cast::<libc::ucontext_t>();
    // SAFETY: the caller guarantees `uc` is null or valid.
    let Some(uc) = (unsafe { uc.as_ref() }) else { return crate::arch::RegisterValues::EMPTY };
    let mc = uc.uc_mcontext;
    if mc.is_null() {
        return crate::arch::RegisterValues::EMPTY;
    }
    let (_, thread_words, _, _) = FLAVORS;
    let n = crate::platform::darwin::crash::state::MCONTEXT64_EXCEPTION_WORDS.saturating_add(thread_words);
    // SAFETY: `uc_mcontext` points to the kernel-written `__darwin_mcontext64` on this signal's stack, which starts
    // with the exception state (4 words) and the thread state (`thread_words` words), so `n` words are readable.
    let words = unsafe { core::slice::from_raw_parts(mc.cast::<u32>(), n) };
    match mcontext64_parts(words, thread_words) {
        Some((es, ss)) => mach::decode(ss, Some(es), st.pac).unwrap_or(crate::arch::RegisterValues::EMPTY),
        None => crate::arch::RegisterValues::EMPTY,
    }
}

/// The handler for [`FATAL_SIGNALS`].
///
/// # Safety
/// Called by the kernel as an `SA_SIGINFO` handler: `info` and `uc` are null or valid.
pub unsafe extern "C" fn fatal_handler(sig: libc::c_int, info: *mut libc::siginfo_t, uc: *mut c_void) {
    let saved_errno = writer::errno();
    // SAFETY: `info` is null or the kernel's siginfo for this signal.
    let (code, addr) = match unsafe { info.as_ref() } {
        Some(i) => (i.si_code, i.si_addr as usize as u64),
        None => (0, 0),
    };
    let me = own_port();
    let tid = mach::identify(me).map_or(1, |(t, _)| t.max(1));
    // The first-chance hook sees the signal before anything else, as on Linux. The Mach server declined every fault
    // while a hook is set (policy::mach_server_action), so the fault reaches this handler unreported.
    let hook_set = first_chance::is_set();
    if first_chance::call(tid, sig, info, uc) {
        set_errno(saved_errno);
        return;
    }
    let Some(st) = state() else {
        die(sig);
        return;
    };
    let mask = exception_mask_for_signal(sig);
    let ours = st.mask & mask == mask && mask != 0 && mach::ports_are(st.exc_port, mask);
    if !signal_fallback_captures_with_hook(sig, code, ours, st.reported.load(Ordering::Acquire), hook_set) {
        // The exception server reported this crash (or will: wait for it), or the Mach path owns it.
        if GATE.owner() != 0 {
            wait_done(st, OTHER_WAIT_MS);
        }
        st.prev_actions.restore_all();
        reraise(sig, code);
        set_errno(saved_errno);
        return;
    }
    match GATE.enter(tid) {
        Entry::First => {
            // SAFETY: we won the gate: the record and the buffers are ours.
            let rec = unsafe { st.core.record() };
            *rec = CrashRecord {
                signal: sig,
                si_code: code,
                addr: (!signal_is_user_sent(code) && addr != 0).then_some(addr),
                tid,
                // SAFETY: `uc` is the kernel's ucontext for this signal (or null).
                regs: unsafe { registers(uc, st) },
                ..CrashRecord::EMPTY
            };
            let _ = capture(st, rec, Crashed { port: me, self_port: me });
            st.done.store(true, Ordering::Release);
            st.prev_actions.restore_all();
            reraise(sig, code);
        }
        Entry::Recursive { depth: 1 } => {
            // A fault inside our own handler with the Mach path absent: minimal report, then die.
            // SAFETY: this thread owns the record (it won the gate at first entry).
            let rec = unsafe { st.core.record() };
            let _ = write_minimal(st, rec);
            st.done.store(true, Ordering::Release);
            die(rec.signal);
        }
        Entry::Recursive { .. } => die(sig),
        Entry::Other { .. } => {
            wait_done(st, OTHER_WAIT_MS);
            st.prev_actions.restore_all();
            reraise(sig, code);
        }
    }
    set_errno(saved_errno);
}
