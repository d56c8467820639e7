//! Mach exception constants, their names, and the Mach exception → BSD signal mapping, with Darwin's signal
//! numbers (which differ from Linux's: SIGBUS is 10 on Darwin, 7 on Linux).
//!
//! Sources: XNU `osfmk/mach/exception_types.h` (types, masks, behaviours), `osfmk/mach/kern_return.h`,
//! `osfmk/mach/arm/exception.h` (`EXC_ARM_*`), `osfmk/mach/i386/exception.h` (`EXC_I386_*`),
//! `bsd/sys/ux_exception.h` (`EXC_UNIX_*`, `EXC_SOFT_SIGNAL`), `bsd/sys/signal.h` (Darwin signal numbers), and the
//! kernel's own mapping in `bsd/uxkern/ux_exception.c` (`ux_exception()`) and `bsd/dev/i386/unix_signal.c`
//! (`machine_exception()`).

// ---- exception types (exception_types.h) ---------------------------------------------------------------------------

/// `EXC_BAD_ACCESS`: could not access memory; code = `kern_return_t` (or `EXC_ARM_*`), subcode = address.
pub const EXC_BAD_ACCESS: i32 = 1;
/// `EXC_BAD_INSTRUCTION`: illegal or undefined instruction.
pub const EXC_BAD_INSTRUCTION: i32 = 2;
/// `EXC_ARITHMETIC`: arithmetic exception (e.g. divide by zero).
pub const EXC_ARITHMETIC: i32 = 3;
/// `EXC_EMULATION`: emulation instruction.
pub const EXC_EMULATION: i32 = 4;
/// `EXC_SOFTWARE`: software-generated exception; codes `0x10000..` are the UNIX ones (`EXC_UNIX_*`).
pub const EXC_SOFTWARE: i32 = 5;
/// `EXC_BREAKPOINT`: trace, breakpoint, `brk`, `__builtin_trap` on arm64.
pub const EXC_BREAKPOINT: i32 = 6;
/// `EXC_SYSCALL`: system call.
pub const EXC_SYSCALL: i32 = 7;
/// `EXC_MACH_SYSCALL`: Mach system call.
pub const EXC_MACH_SYSCALL: i32 = 8;
/// `EXC_RPC_ALERT`: RPC alert.
pub const EXC_RPC_ALERT: i32 = 9;
/// `EXC_CRASH`: abnormal process exit; code packs the signal (see [`exc_crash_signal`]). Never catch in-process.
pub const EXC_CRASH: i32 = 10;
/// `EXC_RESOURCE`: resource consumption limit hit.
pub const EXC_RESOURCE: i32 = 11;
/// `EXC_GUARD`: violation of a guarded resource.
pub const EXC_GUARD: i32 = 12;
/// `EXC_CORPSE_NOTIFY`: a corpse was created.
pub const EXC_CORPSE_NOTIFY: i32 = 13;

/// `EXC_MASK_BAD_ACCESS` = `1 << EXC_BAD_ACCESS` (exception_types.h).
pub const EXC_MASK_BAD_ACCESS: u32 = 1 << EXC_BAD_ACCESS;
/// `EXC_MASK_BAD_INSTRUCTION` (exception_types.h).
pub const EXC_MASK_BAD_INSTRUCTION: u32 = 1 << EXC_BAD_INSTRUCTION;
/// `EXC_MASK_ARITHMETIC` (exception_types.h).
pub const EXC_MASK_ARITHMETIC: u32 = 1 << EXC_ARITHMETIC;
/// `EXC_MASK_EMULATION` (exception_types.h).
pub const EXC_MASK_EMULATION: u32 = 1 << EXC_EMULATION;
/// `EXC_MASK_SOFTWARE` (exception_types.h).
pub const EXC_MASK_SOFTWARE: u32 = 1 << EXC_SOFTWARE;
/// `EXC_MASK_BREAKPOINT` (exception_types.h).
pub const EXC_MASK_BREAKPOINT: u32 = 1 << EXC_BREAKPOINT;
/// `EXC_MASK_CRASH` (exception_types.h). Never registered in-process (it deadlocks).
pub const EXC_MASK_CRASH: u32 = 1 << EXC_CRASH;
/// `EXC_MASK_RESOURCE` (exception_types.h).
pub const EXC_MASK_RESOURCE: u32 = 1 << EXC_RESOURCE;
/// `EXC_MASK_GUARD` (exception_types.h).
pub const EXC_MASK_GUARD: u32 = 1 << EXC_GUARD;
/// `EXC_MASK_CORPSE_NOTIFY` (exception_types.h).
pub const EXC_MASK_CORPSE_NOTIFY: u32 = 1 << EXC_CORPSE_NOTIFY;
/// The mask the crash reporter registers (design §3): bad access, bad instruction, arithmetic, breakpoint.
pub const CRASH_EXCEPTION_MASK: u32 =
    EXC_MASK_BAD_ACCESS | EXC_MASK_BAD_INSTRUCTION | EXC_MASK_ARITHMETIC | EXC_MASK_BREAKPOINT;

// ---- behaviours (exception_behavior_t, exception_types.h) ----------------------------------------------------------

/// `EXCEPTION_DEFAULT`: send `mach_exception_raise` (thread and task ports).
pub const EXCEPTION_DEFAULT: u32 = 1;
/// `EXCEPTION_STATE`: send `mach_exception_raise_state` (thread state, no identity).
pub const EXCEPTION_STATE: u32 = 2;
/// `EXCEPTION_STATE_IDENTITY`: send `mach_exception_raise_state_identity` (ports and state).
pub const EXCEPTION_STATE_IDENTITY: u32 = 3;
/// `EXCEPTION_IDENTITY_PROTECTED`: send `mach_exception_raise_identity_protected` (thread id + task id token).
pub const EXCEPTION_IDENTITY_PROTECTED: u32 = 4;
/// `EXCEPTION_STATE_IDENTITY_PROTECTED`: send `mach_exception_raise_state_identity_protected` (thread id, task
/// id token and state).
pub const EXCEPTION_STATE_IDENTITY_PROTECTED: u32 = 5;
/// `MACH_EXCEPTION_BACKTRACE_PREFERRED` (exception_types.h).
pub const MACH_EXCEPTION_BACKTRACE_PREFERRED: u32 = 0x2000_0000;
/// `MACH_EXCEPTION_ERRORS` (exception_types.h).
pub const MACH_EXCEPTION_ERRORS: u32 = 0x4000_0000;
/// `MACH_EXCEPTION_CODES`: send 64-bit codes (the `mach_exc` subsystem instead of `exc`).
pub const MACH_EXCEPTION_CODES: u32 = 0x8000_0000;
/// `MACH_EXCEPTION_MASK` = `CODES | ERRORS | BACKTRACE_PREFERRED` (exception_types.h): the flag bits of a behaviour.
pub const MACH_EXCEPTION_MASK: u32 = MACH_EXCEPTION_CODES | MACH_EXCEPTION_ERRORS | MACH_EXCEPTION_BACKTRACE_PREFERRED;

// ---- kern_return_t (kern_return.h) ---------------------------------------------------------------------------------

/// `KERN_SUCCESS` (kern_return.h).
pub const KERN_SUCCESS: i32 = 0;
/// `KERN_INVALID_ADDRESS`: address not valid / not mapped (kern_return.h).
pub const KERN_INVALID_ADDRESS: i32 = 1;
/// `KERN_PROTECTION_FAILURE`: access not allowed by the protection (kern_return.h).
pub const KERN_PROTECTION_FAILURE: i32 = 2;
/// `KERN_FAILURE` (kern_return.h); what an exception handler replies to pass the exception on.
pub const KERN_FAILURE: i32 = 5;

pub use report_format::mach_names::{bad_access_code_name, kern_return_name};

// ---- machine-specific codes ----------------------------------------------------------------------------------------

/// `EXC_ARM_UNDEFINED`: undefined instruction (`EXC_BAD_INSTRUCTION` code, osfmk/mach/arm/exception.h).
pub const EXC_ARM_UNDEFINED: i64 = 1;
/// `EXC_ARM_FP_IO`..`EXC_ARM_FP_ID`: floating-point traps (`EXC_ARITHMETIC` codes, arm/exception.h): invalid op,
/// divide by zero, overflow, underflow, inexact, input denormal; `EXC_ARM_FP_UNDEFINED` (0) is undefined.
pub const EXC_ARM_FP_IO: i64 = 1;
/// `EXC_ARM_FP_DZ`: floating-point divide by zero (arm/exception.h).
pub const EXC_ARM_FP_DZ: i64 = 2;
/// `EXC_ARM_DA_ALIGN`: alignment fault (`EXC_BAD_ACCESS` code, arm/exception.h).
pub const EXC_ARM_DA_ALIGN: i64 = 0x101;
/// `EXC_ARM_DA_DEBUG`: debug (watchpoint) fault (arm/exception.h).
pub const EXC_ARM_DA_DEBUG: i64 = 0x102;
/// `EXC_ARM_SP_ALIGN`: stack-pointer alignment fault (arm/exception.h).
pub const EXC_ARM_SP_ALIGN: i64 = 0x103;
/// `EXC_ARM_SWP`: SWP instruction (arm/exception.h).
pub const EXC_ARM_SWP: i64 = 0x104;
/// `EXC_ARM_PAC_FAIL`: pointer-authentication failure (arm/exception.h).
pub const EXC_ARM_PAC_FAIL: i64 = 0x105;
/// `EXC_ARM_BREAKPOINT`: breakpoint trap (`EXC_BREAKPOINT` code, arm/exception.h).
pub const EXC_ARM_BREAKPOINT: i64 = 1;
/// `EXC_I386_GPFLT`: general-protection fault (`EXC_BAD_ACCESS` code on x86, subcode 0; i386/exception.h).
pub const EXC_I386_GPFLT: i64 = 13;

/// `EXC_UNIX_BAD_SYSCALL` (`EXC_SOFTWARE` code, bsd/sys/ux_exception.h) → SIGSYS.
pub const EXC_UNIX_BAD_SYSCALL: i64 = 0x10000;
/// `EXC_UNIX_BAD_PIPE` (ux_exception.h) → SIGPIPE.
pub const EXC_UNIX_BAD_PIPE: i64 = 0x10001;
/// `EXC_UNIX_ABORT` (ux_exception.h) → SIGABRT.
pub const EXC_UNIX_ABORT: i64 = 0x10002;
/// `EXC_SOFT_SIGNAL` (ux_exception.h; "unhandled signal") → SIGKILL.
pub const EXC_SOFT_SIGNAL: i64 = 0x10003;

// ---- Darwin signals (bsd/sys/signal.h) -----------------------------------------------------------------------------

/// Darwin signal numbers (bsd/sys/signal.h). Not Linux's: do not mix with `libc::SIG*` on a Linux host.
pub mod signal {
    /// `SIGHUP`.
    pub const SIGHUP: i32 = 1;
    /// `SIGINT`.
    pub const SIGINT: i32 = 2;
    /// `SIGQUIT`.
    pub const SIGQUIT: i32 = 3;
    /// `SIGILL`.
    pub const SIGILL: i32 = 4;
    /// `SIGTRAP`.
    pub const SIGTRAP: i32 = 5;
    /// `SIGABRT`.
    pub const SIGABRT: i32 = 6;
    /// `SIGEMT`.
    pub const SIGEMT: i32 = 7;
    /// `SIGFPE`.
    pub const SIGFPE: i32 = 8;
    /// `SIGKILL`.
    pub const SIGKILL: i32 = 9;
    /// `SIGBUS` (10 on Darwin, 7 on Linux).
    pub const SIGBUS: i32 = 10;
    /// `SIGSEGV`.
    pub const SIGSEGV: i32 = 11;
    /// `SIGSYS` (12 on Darwin, 31 on Linux).
    pub const SIGSYS: i32 = 12;
    /// `SIGPIPE`.
    pub const SIGPIPE: i32 = 13;
    /// `SIGALRM`.
    pub const SIGALRM: i32 = 14;
    /// `SIGTERM`.
    pub const SIGTERM: i32 = 15;
}

/// Darwin signal name (`SIGSEGV`, ...) for numbers 1..=15; `None` otherwise.
pub fn signal_name(sig: i32) -> Option<&'static str> {
    const NAMES: [&str; 16] = [
        "", "SIGHUP", "SIGINT", "SIGQUIT", "SIGILL", "SIGTRAP", "SIGABRT", "SIGEMT", "SIGFPE", "SIGKILL", "SIGBUS",
        "SIGSEGV", "SIGSYS", "SIGPIPE", "SIGALRM", "SIGTERM",
    ];
    match usize::try_from(sig) {
        Ok(i) if i >= 1 => NAMES.get(i).copied(),
        _ => None,
    }
}

/// Name of a Mach exception type (`EXC_BAD_ACCESS`, ...), `None` when unknown (`report_format::mach_names`).
pub fn exception_name(exception: i32) -> Option<&'static str> {
    report_format::mach_names::exception_name(i64::from(exception))
}

/// Which CPU family raised the exception: the machine-dependent part of the mapping differs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cpu {
    /// arm64 / arm64e.
    Arm64,
    /// x86_64.
    X86_64,
}

/// The signal the kernel would deliver for a Mach exception, in Darwin numbering; `None` when the kernel sends no
/// signal for it (`EXC_GUARD`, `EXC_RESOURCE`, `EXC_CORPSE_NOTIFY`, unknown types and codes).
///
/// Follows `ux_exception()` (bsd/uxkern/ux_exception.c) after the machine hook (`machine_exception()`): on x86 a
/// general-protection fault (`EXC_BAD_ACCESS` with `EXC_I386_GPFLT`) is SIGSEGV; `EXC_BAD_ACCESS` is SIGSEGV for
/// `KERN_INVALID_ADDRESS` and SIGBUS for any other code (including `KERN_PROTECTION_FAILURE` and the `EXC_ARM_*`
/// alignment/PAC codes); `EXC_SOFTWARE` uses the `EXC_UNIX_*` codes; `EXC_EMULATION` is SIGEMT. Not modelled: the
/// kernel turns a protection fault in a thread's stack guard into SIGSEGV, which needs the stack bounds.
/// `EXC_CRASH` carries its signal in the code (see [`exc_crash_signal`]).
pub fn signal_for(cpu: Cpu, exception: i32, code: i64) -> Option<i32> {
    use signal::*;
    if cpu == Cpu::X86_64 && exception == EXC_BAD_ACCESS && code == EXC_I386_GPFLT {
        return Some(SIGSEGV);
    }
    match exception {
        EXC_BAD_ACCESS if code == i64::from(KERN_INVALID_ADDRESS) => Some(SIGSEGV),
        EXC_BAD_ACCESS => Some(SIGBUS),
        EXC_BAD_INSTRUCTION => Some(SIGILL),
        EXC_ARITHMETIC => Some(SIGFPE),
        EXC_EMULATION => Some(SIGEMT),
        EXC_SOFTWARE => match code {
            EXC_UNIX_BAD_SYSCALL => Some(SIGSYS),
            EXC_UNIX_BAD_PIPE => Some(SIGPIPE),
            EXC_UNIX_ABORT => Some(SIGABRT),
            EXC_SOFT_SIGNAL => Some(SIGKILL),
            _ => None,
        },
        EXC_BREAKPOINT => Some(SIGTRAP),
        EXC_CRASH => exc_crash_signal(code),
        _ => None,
    }
}

/// The signal packed in an `EXC_CRASH` code: bits 31..24 hold the signal, 23..20 the original exception type and
/// 19..0 its code (XNU `bsd/kern/kern_exit.c`, `proc_prepareexit()`). `None` when the field is 0.
pub fn exc_crash_signal(code: i64) -> Option<i32> {
    let sig = ((code >> 24) & 0xff) as i32;
    if sig == 0 {
        None
    } else {
        Some(sig)
    }
}

/// The original exception type packed in an `EXC_CRASH` code (bits 23..20, see [`exc_crash_signal`]).
pub fn exc_crash_original_exception(code: i64) -> i32 {
    ((code >> 20) & 0xf) as i32
}

/// `SI_USER` (`bsd/sys/signal.h`): `si_code` of a signal sent with `kill()`/`raise()`. Darwin's user codes start at
/// 0x10001 (`SI_QUEUE` 0x10002, `SI_TIMER`, `SI_ASYNCIO`, `SI_MESGQ`); kernel fault codes are small (`SEGV_MAPERR` 1).
pub const SI_USER: i32 = 0x10001;

/// Whether a signal was sent by software (`kill`, `raise`, `pthread_kill`, `abort()`) rather than raised by the
/// kernel for a fault: such a signal never went through a Mach exception first.
pub fn signal_is_user_sent(si_code: i32) -> bool {
    si_code <= 0 || si_code >= SI_USER
}

/// The Mach exception mask under which the kernel would have raised `sig` (Darwin numbering) before turning it into
/// a signal (`ux_exception()`, the inverse of [`signal_for`]); 0 for signals with no Mach exception of their own
/// (`SIGABRT`, which `abort()` sends with `pthread_kill`, and `SIGSYS`).
pub fn exception_mask_for_signal(sig: i32) -> u32 {
    use signal::*;
    match sig {
        SIGSEGV | SIGBUS => EXC_MASK_BAD_ACCESS,
        SIGILL => EXC_MASK_BAD_INSTRUCTION,
        SIGFPE => EXC_MASK_ARITHMETIC,
        SIGTRAP => EXC_MASK_BREAKPOINT,
        _ => 0,
    }
}

/// The signal fallback's decision for a fatal signal (issue 7, design.md §3): `SIGABRT` is always captured by the
/// signal handler (no Mach exception precedes it); the fault signals are captured there only when the Mach path did
/// not see them: the Mach exception ports for the signal's exception are not ours (`mach_ports_ours` false: a
/// debugger or another library took them, or registration failed), or the signal was sent by software. Nothing is
/// captured twice: once the Mach server wrote a report (`mach_reported`), the signal just passes through.
pub fn signal_fallback_captures(sig: i32, si_code: i32, mach_ports_ours: bool, mach_reported: bool) -> bool {
    if mach_reported {
        return false;
    }
    sig == signal::SIGABRT || exception_mask_for_signal(sig) == 0 || !mach_ports_ours || signal_is_user_sent(si_code)
}

#[cfg(test)]
mod tests {
    use super::signal::*;
    use super::*;

    #[test]
    fn signal_fallback_rules() {
        // SIGABRT always (unless the Mach path already reported this crash).
        assert!(signal_fallback_captures(SIGABRT, SI_USER, true, false));
        assert!(!signal_fallback_captures(SIGABRT, SI_USER, true, true));
        // A kernel SIGSEGV while our Mach ports are registered: the exception server had it first.
        assert!(!signal_fallback_captures(SIGSEGV, 1, true, false));
        // ... unless the ports are not ours (debugger, another SDK, failed registration).
        assert!(signal_fallback_captures(SIGSEGV, 1, false, false));
        assert!(signal_fallback_captures(SIGBUS, 2, false, false));
        // kill(getpid(), SIGSEGV): no Mach exception ever happened.
        assert!(signal_fallback_captures(SIGSEGV, SI_USER, true, false));
        assert!(signal_fallback_captures(SIGILL, 0, true, false));
        // SIGSYS has no exception mask of its own.
        assert!(signal_fallback_captures(SIGSYS, 1, true, false));
        assert_eq!(exception_mask_for_signal(SIGSEGV), EXC_MASK_BAD_ACCESS);
        assert_eq!(exception_mask_for_signal(SIGBUS), EXC_MASK_BAD_ACCESS);
        assert_eq!(exception_mask_for_signal(SIGILL), EXC_MASK_BAD_INSTRUCTION);
        assert_eq!(exception_mask_for_signal(SIGFPE), EXC_MASK_ARITHMETIC);
        assert_eq!(exception_mask_for_signal(SIGTRAP), EXC_MASK_BREAKPOINT);
        assert_eq!(exception_mask_for_signal(SIGABRT), 0);
        // Each mask maps back to the signal the kernel sends for that exception.
        for sig in [SIGSEGV, SIGILL, SIGFPE, SIGTRAP] {
            let exc = exception_mask_for_signal(sig).trailing_zeros() as i32;
            let code = if sig == SIGSEGV { 1 } else { 0 };
            assert_eq!(signal_for(Cpu::Arm64, exc, code), Some(sig));
        }
    }

    #[test]
    fn ux_exception_mapping() {
        let a = Cpu::Arm64;
        assert_eq!(signal_for(a, EXC_BAD_ACCESS, 1), Some(SIGSEGV));
        assert_eq!(signal_for(a, EXC_BAD_ACCESS, 2), Some(SIGBUS));
        assert_eq!(signal_for(a, EXC_BAD_ACCESS, EXC_ARM_DA_ALIGN), Some(SIGBUS));
        assert_eq!(signal_for(a, EXC_BAD_ACCESS, EXC_ARM_PAC_FAIL), Some(SIGBUS));
        assert_eq!(signal_for(a, EXC_BAD_INSTRUCTION, EXC_ARM_UNDEFINED), Some(SIGILL));
        assert_eq!(signal_for(a, EXC_ARITHMETIC, EXC_ARM_FP_DZ), Some(SIGFPE));
        assert_eq!(signal_for(a, EXC_BREAKPOINT, EXC_ARM_BREAKPOINT), Some(SIGTRAP));
        assert_eq!(signal_for(a, EXC_SOFTWARE, 0x10000), Some(SIGSYS));
        assert_eq!(signal_for(a, EXC_SOFTWARE, 0x10001), Some(SIGPIPE));
        assert_eq!(signal_for(a, EXC_SOFTWARE, 0x10002), Some(SIGABRT));
        assert_eq!(signal_for(a, EXC_SOFTWARE, 0x10003), Some(SIGKILL));
        assert_eq!(signal_for(a, EXC_SOFTWARE, 0x10004), None);
        assert_eq!(signal_for(a, EXC_SOFTWARE, 1), None);
        assert_eq!(signal_for(a, EXC_EMULATION, 0), Some(SIGEMT));
        assert_eq!(signal_for(a, EXC_GUARD, 0x1234), None);
        assert_eq!(signal_for(a, EXC_RESOURCE, 0), None);
        assert_eq!(signal_for(a, EXC_CORPSE_NOTIFY, 0), None);
        assert_eq!(signal_for(a, 99, 0), None);
        // GPFLT is only special on x86: on arm64 code 13 is just "not KERN_INVALID_ADDRESS".
        assert_eq!(signal_for(Cpu::X86_64, EXC_BAD_ACCESS, EXC_I386_GPFLT), Some(SIGSEGV));
        assert_eq!(signal_for(a, EXC_BAD_ACCESS, EXC_I386_GPFLT), Some(SIGBUS));
        assert_eq!(signal_for(Cpu::X86_64, EXC_BAD_ACCESS, 2), Some(SIGBUS));
    }

    #[test]
    fn darwin_numbers_differ_from_linux() {
        assert_eq!(SIGBUS, 10);
        assert_eq!(SIGSYS, 12);
        assert_eq!(SIGSEGV, 11);
        assert_eq!(SIGABRT, 6);
        assert_eq!(signal_name(10), Some("SIGBUS"));
        assert_eq!(signal_name(7), Some("SIGEMT"));
        assert_eq!(signal_name(0), None);
        assert_eq!(signal_name(16), None);
        assert_eq!(signal_name(-1), None);
    }

    #[test]
    fn exc_crash_code_unpacking() {
        // abort(): SIGABRT (6), original exception EXC_SOFTWARE... packed as (6 << 24) | (5 << 20) | 0x10002 & 0xfffff.
        let code = (6i64 << 24) | (5 << 20) | (0x10002 & 0xfffff);
        assert_eq!(exc_crash_signal(code), Some(SIGABRT));
        assert_eq!(exc_crash_original_exception(code), EXC_SOFTWARE);
        assert_eq!(signal_for(Cpu::Arm64, EXC_CRASH, code), Some(SIGABRT));
        assert_eq!(exc_crash_signal(0x0010_0001), None);
    }

    #[test]
    fn names() {
        assert_eq!(exception_name(1), Some("EXC_BAD_ACCESS"));
        assert_eq!(exception_name(6), Some("EXC_BREAKPOINT"));
        assert_eq!(exception_name(10), Some("EXC_CRASH"));
        assert_eq!(exception_name(12), Some("EXC_GUARD"));
        assert_eq!(exception_name(13), Some("EXC_CORPSE_NOTIFY"));
        assert_eq!(exception_name(0), None);
        assert_eq!(exception_name(14), None);
        assert_eq!(kern_return_name(1), Some("KERN_INVALID_ADDRESS"));
        assert_eq!(kern_return_name(2), Some("KERN_PROTECTION_FAILURE"));
        assert_eq!(kern_return_name(50), Some("KERN_CODESIGN_ERROR"));
        assert_eq!(kern_return_name(53), Some("KERN_DENIED"));
        assert_eq!(kern_return_name(56), Some("KERN_NOT_FOUND"));
        assert_eq!(kern_return_name(0x32 + 7), None);
        assert_eq!(kern_return_name(-1), None);
        assert_eq!(bad_access_code_name(0x101), Some("EXC_ARM_DA_ALIGN"));
        assert_eq!(bad_access_code_name(0x105), Some("EXC_ARM_PAC_FAIL"));
        assert_eq!(bad_access_code_name(1), Some("KERN_INVALID_ADDRESS"));
        assert_eq!(bad_access_code_name(0x106), None);
    }

    #[test]
    fn masks_and_behaviours() {
        assert_eq!(EXC_MASK_BAD_ACCESS, 0x2);
        assert_eq!(EXC_MASK_BREAKPOINT, 0x40);
        assert_eq!(EXC_MASK_CRASH, 0x400);
        assert_eq!(EXC_MASK_GUARD, 0x1000);
        assert_eq!(CRASH_EXCEPTION_MASK, 0x4e);
        assert_eq!(CRASH_EXCEPTION_MASK & EXC_MASK_CRASH, 0, "never EXC_CRASH in-process");
        assert_eq!(EXCEPTION_STATE_IDENTITY_PROTECTED | MACH_EXCEPTION_CODES, 0x8000_0005);
        assert_eq!(MACH_EXCEPTION_MASK, 0xe000_0000);
        assert_eq!((EXCEPTION_DEFAULT | MACH_EXCEPTION_CODES) & !MACH_EXCEPTION_MASK, EXCEPTION_DEFAULT);
    }
}
