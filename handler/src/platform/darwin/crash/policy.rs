//! Crash-time decisions of the Darwin backend, separated from the system calls so they are tested on every host:
//!
//! - [`exception_is_ours`]: is a Mach exception request about this task, or about a child that inherited our
//!   exception ports across `fork`/`exec`;
//! - [`SIGNALS_TO_UNBLOCK`]: the fault signals unblocked before the server replies `KERN_FAILURE`;
//! - [`reraise_after_report`]: whether the signal fallback re-sends a signal after a report or returns and lets the
//!   instruction fault again;
//! - [`behavior_attempts`]: the exception behaviours tried at install, newest first, and which OS gets which.
//!
//! Signal numbers are Darwin's ([`super::exc::signal`]), not the host's. Pure, allocation-free.

use super::exc::signal::{SIGABRT, SIGBUS, SIGFPE, SIGILL, SIGSEGV, SIGSYS, SIGTRAP};
use super::exc::{
    signal_is_user_sent, Cpu, EXCEPTION_DEFAULT, EXCEPTION_IDENTITY_PROTECTED, EXCEPTION_STATE_IDENTITY_PROTECTED,
    MACH_EXCEPTION_CODES,
};

/// Who an exception request says crashed: the identity fields of [`super::msg::ExceptionRequest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestIdentity {
    /// The task port the request carried (`EXCEPTION_DEFAULT`, `EXCEPTION_STATE_IDENTITY`), as a name in our IPC
    /// space. Send rights to one port coalesce under one name, so our own task arrives as `mach_task_self()`.
    pub task_port: Option<u32>,
    /// The crashed thread's id (`EXCEPTION_IDENTITY_PROTECTED`, `EXCEPTION_STATE_IDENTITY_PROTECTED`), comparable
    /// with `THREAD_IDENTIFIER_INFO.thread_id` (system-wide unique, `thread_tid()` in XNU).
    pub thread_id: Option<u64>,
}

/// Whether a request is about this task. Exception ports are inherited by a child across `fork` and `exec` (XNU
/// `osfmk/kern/ipc_tt.c`, `ipc_task_init` copies the parent's exception actions), so a crashing child's exceptions
/// arrive on our port; taking one for ours would dump this process with a made-up crashed thread, commit that
/// report, hand our ports back and leave the parent's own later crash unreported.
///
/// - With a task port (the `EXCEPTION_DEFAULT` family): ours exactly when it is `own_task` (`mach_task_self()`).
/// - Without one (the protected behaviours, which carry a thread id and a task identity token): ours when
///   `thread_in_task(thread_id)` says the id belongs to one of our threads (`task_threads` +
///   `THREAD_IDENTIFIER_INFO`; the caller does the system calls).
/// - Neither: not ours (nothing proves it is).
///
/// A request that is not ours is answered `KERN_FAILURE` without touching the crash gate, the ports or the
/// `reported` flag; the child then takes its next handler (host level, then its signal). Crashlytics and Crashpad
/// make the same check.
pub fn exception_is_ours(req: RequestIdentity, own_task: u32, thread_in_task: impl FnOnce(u64) -> bool) -> bool {
    match (req.task_port, req.thread_id) {
        (Some(task), _) => task != 0 && task == own_task,
        (None, Some(tid)) => tid != 0 && thread_in_task(tid),
        (None, None) => false,
    }
}

/// Whether `tid` is among `ids` (the thread ids of our task, in any order); 0 never matches.
pub fn thread_id_listed(tid: u64, ids: impl IntoIterator<Item = u64>) -> bool {
    tid != 0 && ids.into_iter().any(|t| t == tid)
}

/// The signals unblocked (process-wide `sigprocmask(SIG_UNBLOCK)`) before the exception server replies
/// `KERN_FAILURE`: every signal the kernel turns one of our registered exceptions into (`ux_exception()`:
/// `EXC_BAD_ACCESS` → SIGSEGV/SIGBUS, `EXC_BAD_INSTRUCTION` → SIGILL, `EXC_ARITHMETIC` → SIGFPE, `EXC_BREAKPOINT`
/// → SIGTRAP). On XNU the kernel delivers a blocked synchronous signal nowhere: the thread returns to the faulting
/// instruction and faults again, forever. Darwin's `abort()` blocks every signal before raising SIGABRT, so a
/// fault after that (in an atexit handler, a C++ destructor, a logging call) would spin. Crashpad unblocks the same
/// set (`client/crash_handler_ios.cc`).
pub const SIGNALS_TO_UNBLOCK: [i32; 5] = [SIGILL, SIGTRAP, SIGFPE, SIGBUS, SIGSEGV];

/// After a report, does the signal fallback re-send `sig` to its thread (`pthread_kill`), or return and let the
/// saved `pc` execute again with the default action restored?
///
/// | signal | sent by software (`si_code`) | arm64 | x86_64 |
/// |---|---|---|---|
/// | any | yes (`kill`, `raise`, `pthread_kill`, `abort()`) | re-raise | re-raise |
/// | SIGABRT, SIGSYS | no | re-raise | re-raise |
/// | SIGTRAP | no | **return**: the saved pc stays on the `brk`, which faults again as `EXC_BREAKPOINT` | re-raise: `int3` advanced the pc past itself |
/// | SIGSEGV, SIGBUS, SIGILL, SIGFPE | no | return (re-faults) | return (re-faults) |
///
/// Returning on arm64 matters for Swift: every Swift runtime trap (`fatalError`, a failed `!`, an array index out
/// of range) is a `brk`. Re-raising SIGTRAP with `pthread_kill` makes ReportCrash, MetricKit and the Xcode Organizer
/// show `EXC_CRASH (SIGTRAP)` with our handler on top; re-executing the `brk` gives them `EXC_BREAKPOINT` at the
/// trap, as without us.
pub fn reraise_after_report(sig: i32, si_code: i32, cpu: Cpu) -> bool {
    if signal_is_user_sent(si_code) {
        return true;
    }
    match sig {
        SIGABRT | SIGSYS => true,
        SIGTRAP => cpu == Cpu::X86_64,
        _ => false,
    }
}

/// What the exception server does with a request ([`mach_server_action`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MachAction {
    /// Answer `KERN_FAILURE` and touch nothing: the exception is not ours, or the signal path is to see it first.
    Decline,
    /// Take the crash gate and capture.
    Capture,
}

/// The exception server's choice for a request: a request about another task (see [`exception_is_ours`]) is
/// declined; so is every request while a first-chance handler is set (`crate::set_first_chance_handler`): the
/// Mach exception arrives before any signal handler, so a fault that a runtime recovers from in its own signal
/// handler (Mono's and Unity's null checks, JIT guard pages) would otherwise be reported as a crash. Declined, the
/// kernel posts the signal; the signal fallback runs the hook on the faulting thread with its `ucontext` and
/// captures only when the hook did not handle it ([`signal_fallback_captures_with_hook`]). Cost: with a hook set,
/// a stack overflow on a thread without an alternate signal stack is not reported.
pub fn mach_server_action(ours: bool, first_chance_set: bool) -> MachAction {
    if ours && !first_chance_set {
        MachAction::Capture
    } else {
        MachAction::Decline
    }
}

/// [`super::exc::signal_fallback_captures`] with the first-chance hook taken into account: while a hook is set the
/// Mach server declined every fault, so the signal fallback captures kernel faults too (after the hook said it did
/// not handle them), as if our Mach ports were not registered.
pub fn signal_fallback_captures_with_hook(
    sig: i32,
    si_code: i32,
    mach_ports_ours: bool,
    mach_reported: bool,
    first_chance_set: bool,
) -> bool {
    super::exc::signal_fallback_captures(sig, si_code, mach_ports_ours && !first_chance_set, mach_reported)
}

/// What a behaviour carries with its request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlavorKind {
    /// The native thread state (`ARM_THREAD_STATE64` / `x86_THREAD_STATE64`).
    Native,
    /// No state (`THREAD_STATE_NONE`).
    None,
}

/// The behaviours `task_swap_exception_ports` is tried with at install, first that the kernel accepts wins (each
/// with `MACH_EXCEPTION_CODES`, 64-bit codes). None of them hands out a thread or task *control* port except the
/// last; the protected ones give a thread id and a task identity token, which is all the crash path needs.
///
/// | try | behaviour | kernels that accept it |
/// |---|---|---|
/// | 1 | `EXCEPTION_STATE_IDENTITY_PROTECTED` (state + ids) | iOS 18, macOS 15 and later |
/// | 2 | `EXCEPTION_IDENTITY_PROTECTED` (ids, no state) | iOS 15, macOS 12 and later: iOS 15–17, macOS 12–14 use this |
/// | 3 | `EXCEPTION_DEFAULT` (thread and task ports) | every kernel: iOS 14 and older, macOS 11 and older |
///
/// Sources: XNU `osfmk/mach/exception_types.h` (the behaviours and the `xnu-8019` / `xnu-10063` releases that
/// added them), `osfmk/kern/ipc_tt.c` (`set_exception_ports_validation` refuses unknown behaviours with
/// `KERN_INVALID_ARGUMENT`). Without state in the request the crash path reads the crashed thread's registers with
/// `thread_get_state`, as it does for every other thread.
pub const BEHAVIOR_ATTEMPTS: [(u32, FlavorKind); 3] = [
    (EXCEPTION_STATE_IDENTITY_PROTECTED | MACH_EXCEPTION_CODES, FlavorKind::Native),
    (EXCEPTION_IDENTITY_PROTECTED | MACH_EXCEPTION_CODES, FlavorKind::None),
    (EXCEPTION_DEFAULT | MACH_EXCEPTION_CODES, FlavorKind::None),
];

/// [`BEHAVIOR_ATTEMPTS`] with the flavor numbers of this CPU: `native` (`ARM_THREAD_STATE64` 6 /
/// `x86_THREAD_STATE64` 4) and `state_none` (`THREAD_STATE_NONE`: 5 on arm, 13 on x86). Returns
/// `(behavior, flavor)` pairs in the order to try.
pub fn behavior_attempts(native: i32, state_none: i32) -> [(u32, i32); 3] {
    BEHAVIOR_ATTEMPTS.map(|(b, kind)| {
        (
            b,
            match kind {
                FlavorKind::Native => native,
                FlavorKind::None => state_none,
            },
        )
    })
}

#[cfg(test)]
mod tests {
    use super::super::exc::signal::{SIGKILL, SIGPIPE};
    use super::super::exc::SI_USER;
    use super::*;

    const SELF_TASK: u32 = 0x203;

    #[test]
    fn child_task_is_not_ours() {
        let never = |_: u64| -> bool { panic!("the thread list is not consulted when a task port came") };
        // EXCEPTION_DEFAULT: the task port decides.
        let own = RequestIdentity { task_port: Some(SELF_TASK), thread_id: None };
        assert!(exception_is_ours(own, SELF_TASK, never));
        let child = RequestIdentity { task_port: Some(0x1a07), thread_id: None };
        assert!(!exception_is_ours(child, SELF_TASK, never));
        assert!(!exception_is_ours(RequestIdentity { task_port: Some(0), thread_id: None }, 0, never));
        // A task port wins over a thread id (EXCEPTION_STATE_IDENTITY carries both kinds of identity).
        let both = RequestIdentity { task_port: Some(0x1a07), thread_id: Some(7) };
        assert!(!exception_is_ours(both, SELF_TASK, never));
        // Protected behaviours: the thread id must be one of ours.
        let ours = [0x1_0000_0a01u64, 0x1_0000_0a02, 0x1_0000_0a40];
        let prot = |tid| RequestIdentity { task_port: None, thread_id: Some(tid) };
        assert!(exception_is_ours(prot(0x1_0000_0a40), SELF_TASK, |t| thread_id_listed(t, ours)));
        assert!(!exception_is_ours(prot(0x1_0000_0b00), SELF_TASK, |t| thread_id_listed(t, ours)));
        assert!(!exception_is_ours(prot(0), SELF_TASK, |_| true), "id 0 is no thread");
        // Nothing to prove it: not ours.
        assert!(!exception_is_ours(RequestIdentity { task_port: None, thread_id: None }, SELF_TASK, |_| true));
        assert!(!thread_id_listed(0, [0u64, 1]));
        assert!(!thread_id_listed(5, []));
    }

    #[test]
    fn unblocked_signals_cover_every_registered_exception() {
        use super::super::exc::{
            exception_mask_for_signal, signal_for, CRASH_EXCEPTION_MASK, EXC_ARITHMETIC, EXC_BAD_ACCESS,
            EXC_BAD_INSTRUCTION, EXC_BREAKPOINT,
        };
        for cpu in [Cpu::Arm64, Cpu::X86_64] {
            for (exc, codes) in [
                (EXC_BAD_ACCESS, &[1i64, 2, 0x101, 0x105, 13][..]),
                (EXC_BAD_INSTRUCTION, &[1][..]),
                (EXC_ARITHMETIC, &[1, 2][..]),
                (EXC_BREAKPOINT, &[1, 2][..]),
            ] {
                assert_ne!(CRASH_EXCEPTION_MASK & (1 << exc), 0);
                for code in codes {
                    let sig = signal_for(cpu, exc, *code).unwrap();
                    assert!(SIGNALS_TO_UNBLOCK.contains(&sig), "{sig} for exception {exc} code {code:#x}");
                }
            }
        }
        for sig in SIGNALS_TO_UNBLOCK {
            assert_ne!(exception_mask_for_signal(sig) & CRASH_EXCEPTION_MASK, 0);
        }
        assert!(!SIGNALS_TO_UNBLOCK.contains(&SIGABRT), "abort() blocked everything on purpose; SIGABRT is raised");
        assert!(!SIGNALS_TO_UNBLOCK.contains(&SIGKILL));
    }

    #[test]
    fn reraise_decision_table() {
        let (a, x) = (Cpu::Arm64, Cpu::X86_64);
        // Kernel faults (si_code > 0 and below SI_USER): return and re-fault.
        for sig in [SIGSEGV, SIGBUS, SIGILL, SIGFPE] {
            assert!(!reraise_after_report(sig, 1, a), "{sig} arm64");
            assert!(!reraise_after_report(sig, 1, x), "{sig} x86_64");
        }
        // brk on arm64 (TRAP_BRKPT = 1): the pc stays on it; int3 on x86_64 moved past it.
        assert!(!reraise_after_report(SIGTRAP, 1, a));
        assert!(reraise_after_report(SIGTRAP, 1, x));
        assert!(!reraise_after_report(SIGTRAP, 2, a), "TRAP_TRACE too");
        // Sent by software: always re-raise, whatever the signal and CPU.
        for code in [0, -1, SI_USER, SI_USER + 1] {
            for sig in [SIGSEGV, SIGTRAP, SIGILL, SIGABRT, SIGPIPE] {
                assert!(reraise_after_report(sig, code, a), "{sig} si_code {code:#x}");
                assert!(reraise_after_report(sig, code, x), "{sig} si_code {code:#x}");
            }
        }
        // Not re-executed by a return.
        assert!(reraise_after_report(SIGABRT, 1, a));
        assert!(reraise_after_report(SIGSYS, 1, a));
        assert!(reraise_after_report(SIGSYS, 1, x));
    }

    #[test]
    fn first_chance_hook_moves_faults_to_the_signal_path() {
        assert_eq!(mach_server_action(true, false), MachAction::Capture);
        assert_eq!(mach_server_action(true, true), MachAction::Decline, "the hook runs in the signal handler");
        assert_eq!(mach_server_action(false, false), MachAction::Decline, "a child's crash");
        assert_eq!(mach_server_action(false, true), MachAction::Decline);
        // A kernel SIGSEGV with our ports registered: captured by the signal path only when a hook is set (the
        // Mach server declined it), never twice.
        assert!(!signal_fallback_captures_with_hook(SIGSEGV, 1, true, false, false));
        assert!(signal_fallback_captures_with_hook(SIGSEGV, 1, true, false, true));
        assert!(!signal_fallback_captures_with_hook(SIGSEGV, 1, true, true, true), "already reported");
        assert!(signal_fallback_captures_with_hook(SIGABRT, SI_USER, true, false, false));
    }

    #[test]
    fn behaviour_fallback_order() {
        const ARM_THREAD_STATE64: i32 = 6;
        const ARM_THREAD_STATE_NONE: i32 = 5;
        let tries = behavior_attempts(ARM_THREAD_STATE64, ARM_THREAD_STATE_NONE);
        assert_eq!(
            tries,
            [
                (0x8000_0005, ARM_THREAD_STATE64),
                (0x8000_0004, ARM_THREAD_STATE_NONE),
                (0x8000_0001, ARM_THREAD_STATE_NONE)
            ]
        );
        let x86 = behavior_attempts(4, 13);
        assert_eq!(x86.map(|(_, f)| f), [4, 13, 13]);
        assert!(tries.iter().all(|(b, _)| b & MACH_EXCEPTION_CODES != 0));
    }
}
