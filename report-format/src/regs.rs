//! Register sets: the canonical order of register values in a thread section.
//!
//! A thread section stores its registers as an array of values (`nil` where a value was not captured) plus the
//! name of the register set; the names below give each position its meaning. This keeps a 64-thread report small
//! while the decoder still hands out named values. New registers are only ever appended (a minor version change);
//! a reader names values beyond the end of a set it knows `r<N>`.

/// Register set name for 64-bit ARM (AArch64, Apple's arm64 and arm64e).
pub const ARM64: &str = "arm64";
/// Register set name for x86-64.
pub const X86_64: &str = "x86_64";

/// arm64 order: `x0`..`x28`, `fp` (x29), `lr` (x30), `sp`, `pc`, `cpsr` (32-bit PSTATE/CPSR), then the exception
/// state `far` (fault address register) and `esr` (exception syndrome register, 32-bit).
///
/// Source: the fields of `arm_thread_state64_t` and `arm_exception_state64_t` in XNU
/// `osfmk/mach/arm/_structs.h`; Linux `struct user_regs_struct` / `sigcontext` in `arch/arm64/include/uapi/asm/`
/// carry the same registers (`pstate` is stored as `cpsr`, `fault_address` as `far`, the ESR from the signal
/// frame's `esr_context` as `esr`).
pub const ARM64_NAMES: [&str; 36] = [
    "x0", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "x11", "x12", "x13", "x14", "x15", "x16", "x17",
    "x18", "x19", "x20", "x21", "x22", "x23", "x24", "x25", "x26", "x27", "x28", "fp", "lr", "sp", "pc", "cpsr", "far",
    "esr",
];

/// x86-64 order: the sixteen general registers in the order Apple prints them, `rip`, `rflags`, the segment
/// registers `cs`, `fs`, `gs`, then the exception state `trapno`, `err` and `cr2` (fault address).
///
/// Source: `x86_thread_state64_t` and `x86_exception_state64_t` in XNU `osfmk/mach/i386/_structs.h`; on Linux the
/// `gregs` of `ucontext_t` (`REG_TRAPNO`, `REG_ERR`, `REG_CR2` in glibc `sys/ucontext.h`).
pub const X86_64_NAMES: [&str; 24] = [
    "rax", "rbx", "rcx", "rdx", "rdi", "rsi", "rbp", "rsp", "r8", "r9", "r10", "r11", "r12", "r13", "r14", "r15",
    "rip", "rflags", "cs", "fs", "gs", "trapno", "err", "cr2",
];

/// The register names of a set, in storage order; `None` for a set this version does not know.
pub fn names(set: &str) -> Option<&'static [&'static str]> {
    match set {
        ARM64 => Some(&ARM64_NAMES),
        X86_64 => Some(&X86_64_NAMES),
        _ => None,
    }
}

/// Storage position of a register in a set, for writers filling a value array. Signal-safe.
pub fn index_of(set: &str, name: &str) -> Option<usize> {
    names(set)?.iter().position(|n| *n == name)
}

/// Names of the program counter, stack pointer and frame pointer in a set: `(pc, sp, fp)`.
pub fn pc_sp_fp(set: &str) -> Option<(&'static str, &'static str, &'static str)> {
    match set {
        ARM64 => Some(("pc", "sp", "fp")),
        X86_64 => Some(("rip", "rsp", "rbp")),
        _ => None,
    }
}
