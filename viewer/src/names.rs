//! Names for Mach exceptions, kern_return values, signals and `si_code`s, in the numbering of the OS that crashed.
//!
//! Sources: XNU `osfmk/mach/exception_types.h` (exception types), `osfmk/mach/kern_return.h` (kern_return_t),
//! `osfmk/mach/arm/exception.h` (EXC_ARM_*), `osfmk/mach/i386/exception.h` (EXC_I386_*), Darwin
//! `bsd/sys/signal.h` and `libc/gen/FreeBSD/strsignal.c` (signal numbers and `strsignal` texts); Linux
//! `include/uapi/asm-generic/signal.h`, `include/uapi/asm-generic/siginfo.h` and glibc `string/strsignal.c` /
//! `sysdeps/generic/siglist.h`. The ARM ESR decoding follows the Arm Architecture Reference Manual (ESR_ELx).

/// Mach exception type name (`EXC_*`) for a type number, or `None` when unknown (`report_format::mach_names`).
pub fn mach_exception_name(t: u32) -> Option<&'static str> {
    report_format::mach_names::exception_name(i64::from(t))
}

/// `EXC_BAD_ACCESS` code name: `EXC_ARM_*` or a `kern_return_t` name (`report_format::mach_names`); unknown values
/// print as `UNKNOWN_0x32` like Apple's.
pub fn kern_return_name(code: i64) -> String {
    match report_format::mach_names::bad_access_code_name(code) {
        Some(n) => n.to_owned(),
        None => format!("UNKNOWN_{code:#x}"),
    }
}

/// Which numbering a signal number is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SignalOs {
    /// Darwin (iOS, macOS): `bsd/sys/signal.h`.
    Darwin,
    /// Linux (asm-generic numbering, used by x86_64 and arm64).
    Linux,
}

/// Signal name (`SIGSEGV`) for a number in the given OS's numbering.
pub fn signal_name(os: SignalOs, sig: i32) -> Option<&'static str> {
    let common = match sig {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        4 => "SIGILL",
        5 => "SIGTRAP",
        6 => "SIGABRT",
        8 => "SIGFPE",
        9 => "SIGKILL",
        11 => "SIGSEGV",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => "",
    };
    if !common.is_empty() {
        return Some(common);
    }
    Some(match (os, sig) {
        (SignalOs::Darwin, 7) => "SIGEMT",
        (SignalOs::Darwin, 10) => "SIGBUS",
        (SignalOs::Darwin, 12) => "SIGSYS",
        (SignalOs::Darwin, 16) => "SIGURG",
        (SignalOs::Darwin, 17) => "SIGSTOP",
        (SignalOs::Darwin, 18) => "SIGTSTP",
        (SignalOs::Darwin, 19) => "SIGCONT",
        (SignalOs::Darwin, 20) => "SIGCHLD",
        (SignalOs::Darwin, 24) => "SIGXCPU",
        (SignalOs::Darwin, 25) => "SIGXFSZ",
        (SignalOs::Darwin, 30) => "SIGUSR1",
        (SignalOs::Darwin, 31) => "SIGUSR2",
        (SignalOs::Linux, 7) => "SIGBUS",
        (SignalOs::Linux, 10) => "SIGUSR1",
        (SignalOs::Linux, 12) => "SIGUSR2",
        (SignalOs::Linux, 16) => "SIGSTKFLT",
        (SignalOs::Linux, 17) => "SIGCHLD",
        (SignalOs::Linux, 18) => "SIGCONT",
        (SignalOs::Linux, 19) => "SIGSTOP",
        (SignalOs::Linux, 20) => "SIGTSTP",
        (SignalOs::Linux, 24) => "SIGXCPU",
        (SignalOs::Linux, 25) => "SIGXFSZ",
        (SignalOs::Linux, 31) => "SIGSYS",
        _ => return None,
    })
}

/// `strsignal` text without the number: Darwin's (`Trace/BPT trap`) or glibc's (`Trace/breakpoint trap`).
pub fn signal_text(os: SignalOs, sig: i32) -> Option<&'static str> {
    let name = signal_name(os, sig)?;
    Some(match (os, name) {
        (_, "SIGHUP") => "Hangup",
        (_, "SIGINT") => "Interrupt",
        (_, "SIGQUIT") => "Quit",
        (_, "SIGILL") => "Illegal instruction",
        (SignalOs::Darwin, "SIGTRAP") => "Trace/BPT trap",
        (SignalOs::Linux, "SIGTRAP") => "Trace/breakpoint trap",
        (SignalOs::Darwin, "SIGABRT") => "Abort trap",
        (SignalOs::Linux, "SIGABRT") => "Aborted",
        (_, "SIGEMT") => "EMT trap",
        (_, "SIGFPE") => "Floating point exception",
        (_, "SIGKILL") => "Killed",
        (_, "SIGBUS") => "Bus error",
        (_, "SIGSEGV") => "Segmentation fault",
        (_, "SIGSYS") => "Bad system call",
        (_, "SIGPIPE") => "Broken pipe",
        (_, "SIGALRM") => "Alarm clock",
        (_, "SIGTERM") => "Terminated",
        (SignalOs::Darwin, "SIGUSR1") => "User defined signal 1",
        (SignalOs::Darwin, "SIGUSR2") => "User defined signal 2",
        (SignalOs::Linux, "SIGUSR1") => "User defined signal 1",
        (SignalOs::Linux, "SIGUSR2") => "User defined signal 2",
        (_, "SIGSTKFLT") => "Stack fault",
        (_, "SIGCHLD") => "Child exited",
        (_, "SIGCONT") => "Continued",
        (_, "SIGSTOP") => "Stopped (signal)",
        (_, "SIGTSTP") => "Stopped",
        (_, "SIGXCPU") => "CPU time limit exceeded",
        (_, "SIGXFSZ") => "File size limit exceeded",
        (_, "SIGURG") => "Urgent I/O condition",
        _ => return None,
    })
}

/// `si_code` name for a signal (both in the given OS's numbering), e.g. `SEGV_MAPERR`. Only the signal-specific
/// codes of the crash signals are named; `None` otherwise.
pub fn si_code_name(os: SignalOs, sig: i32, code: i32) -> Option<&'static str> {
    let name = signal_name(os, sig)?;
    Some(match (name, code) {
        ("SIGSEGV", 1) => "SEGV_MAPERR",
        ("SIGSEGV", 2) => "SEGV_ACCERR",
        ("SIGBUS", 1) => "BUS_ADRALN",
        ("SIGBUS", 2) => "BUS_ADRERR",
        ("SIGBUS", 3) => "BUS_OBJERR",
        ("SIGILL", 1) => "ILL_ILLOPC",
        ("SIGILL", 2) => "ILL_ILLOPN",
        ("SIGILL", 3) => "ILL_ILLADR",
        ("SIGILL", 4) => "ILL_ILLTRP",
        ("SIGILL", 5) => "ILL_PRVOPC",
        ("SIGILL", 6) => "ILL_PRVREG",
        ("SIGILL", 7) => "ILL_COPROC",
        ("SIGILL", 8) => "ILL_BADSTK",
        ("SIGTRAP", 1) => "TRAP_BRKPT",
        ("SIGTRAP", 2) => "TRAP_TRACE",
        ("SIGFPE", c) => match (os, c) {
            // Darwin: FPE_NOOP 0, FLTDIV 1, FLTOVF 2, FLTUND 3, FLTRES 4, FLTINV 5, FLTSUB 6, INTDIV 7, INTOVF 8.
            (SignalOs::Darwin, 1) => "FPE_FLTDIV",
            (SignalOs::Darwin, 2) => "FPE_FLTOVF",
            (SignalOs::Darwin, 3) => "FPE_FLTUND",
            (SignalOs::Darwin, 4) => "FPE_FLTRES",
            (SignalOs::Darwin, 5) => "FPE_FLTINV",
            (SignalOs::Darwin, 6) => "FPE_FLTSUB",
            (SignalOs::Darwin, 7) => "FPE_INTDIV",
            (SignalOs::Darwin, 8) => "FPE_INTOVF",
            // Linux: INTDIV 1, INTOVF 2, FLTDIV 3, FLTOVF 4, FLTUND 5, FLTRES 6, FLTINV 7, FLTSUB 8.
            (SignalOs::Linux, 1) => "FPE_INTDIV",
            (SignalOs::Linux, 2) => "FPE_INTOVF",
            (SignalOs::Linux, 3) => "FPE_FLTDIV",
            (SignalOs::Linux, 4) => "FPE_FLTOVF",
            (SignalOs::Linux, 5) => "FPE_FLTUND",
            (SignalOs::Linux, 6) => "FPE_FLTRES",
            (SignalOs::Linux, 7) => "FPE_FLTINV",
            (SignalOs::Linux, 8) => "FPE_FLTSUB",
            _ => return None,
        },
        (_, 0) if os == SignalOs::Linux => "SI_USER",
        (_, -6) if os == SignalOs::Linux => "SI_TKILL",
        (_, 0x10001) if os == SignalOs::Darwin => "SI_USER",
        _ => return None,
    })
}

/// The Mach exception Apple reports for a signal that arrived without one (Darwin numbering), e.g. SIGSEGV ->
/// EXC_BAD_ACCESS, SIGABRT -> EXC_CRASH (ReportCrash's mapping).
pub fn mach_type_for_darwin_signal(sig: i32) -> u32 {
    match sig {
        11 | 10 => 1, // EXC_BAD_ACCESS
        4 => 2,       // EXC_BAD_INSTRUCTION
        8 => 3,       // EXC_ARITHMETIC
        5 => 6,       // EXC_BREAKPOINT
        _ => 10,      // EXC_CRASH
    }
}

/// Description Apple appends to `esr:` on arm64, e.g. `(Breakpoint) brk 1` or `(Data Abort) byte read Translation
/// fault`. Decoded from the exception class (ESR bits 31..26) and ISS (Arm ARM, ESR_ELx).
pub fn arm64_esr_description(esr: u64) -> Option<String> {
    let ec = (esr >> 26) & 0x3f;
    let iss = esr & 0x01ff_ffff;
    Some(match ec {
        0x3c => format!("(Breakpoint) brk {}", iss & 0xffff),
        0x24 | 0x25 => {
            let wnr = if iss & (1 << 6) != 0 { "write" } else { "read" };
            let size = if iss & (1 << 24) != 0 {
                ["byte", "halfword", "word", "dword"][((iss >> 22) & 3) as usize]
            } else {
                "byte"
            };
            format!("(Data Abort) {size} {wnr} {}", fault_status(iss & 0x3f))
        }
        0x20 | 0x21 => format!("(Instruction Abort) {}", fault_status(iss & 0x3f)),
        0x00 => "(Unknown) undefined instruction".to_string(),
        0x15 => format!("(Syscall) svc {}", iss & 0xffff),
        0x22 => "(PC Alignment)".to_string(),
        0x26 => "(SP Alignment)".to_string(),
        0x2c => "(Floating Point)".to_string(),
        0x1c => "(PAC Failure)".to_string(),
        _ => return None,
    })
}

fn fault_status(fsc: u64) -> &'static str {
    match fsc {
        0x00..=0x03 => "Address size fault",
        0x04..=0x07 => "Translation fault",
        0x08..=0x0b => "Access flag fault",
        0x0c..=0x0f => "Permission fault",
        0x10 => "Synchronous external abort",
        0x21 => "Alignment fault",
        0x30 => "TLB conflict abort",
        _ => "Fault",
    }
}

/// Description Apple appends to `Error Code:` for an x86 page fault (trap 14), from the page-fault error code bits
/// (P=1 protection, W=2 write, U=4 user, I=16 instruction fetch; Intel SDM vol. 3 §4.7), e.g.
/// `(no mapping for user data write)`.
pub fn x86_page_fault_description(trap: u64, err: u64) -> Option<String> {
    if trap != 14 {
        return None;
    }
    let what = if err & 1 != 0 { "protection violation" } else { "no mapping" };
    let who = if err & 4 != 0 { "user" } else { "kernel" };
    let access = if err & 16 != 0 {
        "instruction fetch"
    } else if err & 2 != 0 {
        "data write"
    } else {
        "data read"
    };
    Some(format!("({what} for {who} {access})"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_differ_by_os() {
        assert_eq!(signal_name(SignalOs::Darwin, 10), Some("SIGBUS"));
        assert_eq!(signal_name(SignalOs::Linux, 7), Some("SIGBUS"));
        assert_eq!(signal_name(SignalOs::Linux, 10), Some("SIGUSR1"));
        assert_eq!(signal_text(SignalOs::Darwin, 5), Some("Trace/BPT trap"));
        assert_eq!(si_code_name(SignalOs::Darwin, 8, 7), Some("FPE_INTDIV"));
        assert_eq!(si_code_name(SignalOs::Linux, 8, 1), Some("FPE_INTDIV"));
    }

    #[test]
    fn kern_return_and_esr() {
        assert_eq!(kern_return_name(1), "KERN_INVALID_ADDRESS");
        assert_eq!(kern_return_name(0x32), "KERN_CODESIGN_ERROR");
        assert_eq!(kern_return_name(0x33), "KERN_POLICY_STATIC"); // kern_return.h 51
        assert_eq!(kern_return_name(0x39), "UNKNOWN_0x39");
        assert_eq!(kern_return_name(0x105), "EXC_ARM_PAC_FAIL");
        assert_eq!(arm64_esr_description(0xf200_0001).as_deref(), Some("(Breakpoint) brk 1"));
        assert_eq!(arm64_esr_description(0x9200_0006).as_deref(), Some("(Data Abort) byte read Translation fault"));
        assert_eq!(x86_page_fault_description(14, 6).as_deref(), Some("(no mapping for user data write)"));
    }
}
