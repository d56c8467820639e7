//! Thread state → register set: converts the word arrays `thread_get_state` returns (and exception messages carry)
//! into the value arrays of `report_format::regs` (`ARM64_NAMES`, `X86_64_NAMES` order). Allocation-free; fills a
//! caller's `[Option<u64>; N]`.
//!
//! Flavors and counts (32-bit words), from XNU `osfmk/mach/arm/thread_status.h` and
//! `osfmk/mach/i386/thread_status.h`; field order from `osfmk/mach/arm/_structs.h` and `osfmk/mach/i386/_structs.h`:
//! - `ARM_THREAD_STATE64` = 6, `ARM_THREAD_STATE64_COUNT` = 68: `__x[29]`, `__fp`, `__lr`, `__sp`, `__pc` (u64 each),
//!   `__cpsr` (u32), `__pad` / `__flags` (u32; arm64e: `__DARWIN_ARM_THREAD_STATE64_FLAGS_*`);
//! - `ARM_EXCEPTION_STATE64` = 7, count 4: `__far` (u64), `__esr` (u32), `__exception` (u32);
//! - `x86_THREAD_STATE64` = 4, count 42: rax rbx rcx rdx rdi rsi rbp rsp r8..r15 rip rflags cs fs gs (u64 each);
//! - `x86_EXCEPTION_STATE64` = 6, count 4: `__trapno` (u16), `__cpu` (u16), `__err` (u32), `__faultvaddr` (u64).
//!
//! Words are the host's `natural_t` (u32) in little-endian order; a u64 field is word `2i` (low) + `2i+1` (high).

use report_format::regs::{ARM64_NAMES, X86_64_NAMES};

use crate::arch::pac::PacStrip;

/// `ARM_THREAD_STATE64` flavor (arm/thread_status.h).
pub const ARM_THREAD_STATE64: i32 = 6;
/// `ARM_THREAD_STATE64_COUNT`: 68 words = `sizeof(arm_thread_state64_t)` / 4 (arm/thread_status.h).
pub const ARM_THREAD_STATE64_COUNT: usize = 68;
/// `ARM_EXCEPTION_STATE64` flavor (arm/thread_status.h).
pub const ARM_EXCEPTION_STATE64: i32 = 7;
/// `ARM_EXCEPTION_STATE64_COUNT`: 4 words (arm/thread_status.h).
pub const ARM_EXCEPTION_STATE64_COUNT: usize = 4;
/// `x86_THREAD_STATE64` flavor (i386/thread_status.h).
pub const X86_THREAD_STATE64: i32 = 4;
/// `x86_THREAD_STATE64_COUNT`: 42 words (i386/thread_status.h).
pub const X86_THREAD_STATE64_COUNT: usize = 42;
/// `x86_EXCEPTION_STATE64` flavor (i386/thread_status.h).
pub const X86_EXCEPTION_STATE64: i32 = 6;
/// `x86_EXCEPTION_STATE64_COUNT`: 4 words (i386/thread_status.h).
pub const X86_EXCEPTION_STATE64_COUNT: usize = 4;

/// `__DARWIN_ARM_THREAD_STATE64_FLAGS_NO_PTRAUTH` (arm/_structs.h): the state's pointers are not signed.
pub const ARM_THREAD_STATE64_FLAGS_NO_PTRAUTH: u32 = 0x1;

/// Number of values in an arm64 register set (`ARM64_NAMES.len()`).
pub const ARM64_REG_COUNT: usize = ARM64_NAMES.len();
/// Number of values in an x86-64 register set (`X86_64_NAMES.len()`).
pub const X86_64_REG_COUNT: usize = X86_64_NAMES.len();

/// A state array is shorter than its flavor's count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShortState {
    /// Words needed.
    pub needed: usize,
    /// Words given.
    pub got: usize,
}

fn word(w: &[u32], i: usize) -> Option<u32> {
    w.get(i).copied()
}

fn dword(w: &[u32], i: usize) -> Option<u64> {
    let lo = u64::from(*w.get(i)?);
    let hi = u64::from(*w.get(i.checked_add(1)?)?);
    Some(lo | (hi << 32))
}

// arm64 output positions (report_format::regs::ARM64_NAMES).
const A_FP: usize = 29;
const A_LR: usize = 30;
const A_SP: usize = 31;
const A_PC: usize = 32;
const A_CPSR: usize = 33;
const A_FAR: usize = 34;
const A_ESR: usize = 35;

/// Positions (in `ARM64_NAMES` order) of the registers arm64e signs in a thread state handed to user space: `fp`,
/// `lr`, `sp`, `pc` (XNU `osfmk/arm64/status.c`, `machine_thread_state_convert_to_user`).
pub const ARM64_SIGNED_REGS: [usize; 4] = [A_FP, A_LR, A_SP, A_PC];

/// Fills `out` (arm64 order: x0..x28, fp, lr, sp, pc, cpsr, far, esr) from an `ARM_THREAD_STATE64` word array and,
/// if given, an `ARM_EXCEPTION_STATE64` one. `far`/`esr` stay `None` without exception state.
///
/// `pac`: on arm64e the kernel signs `pc`, `lr`, `sp` and `fp` when it hands out a thread state
/// (`thread_get_state`, exception messages and the signal context all go through
/// `machine_thread_state_convert_to_user`, XNU `osfmk/arm64/status.c`; the SDK headers hide the last two as
/// `__opaque_fp`/`__opaque_sp`). With `Some(strip)` all four are stripped, always: the `NO_PTRAUTH` flag is not
/// trusted (stripping an unsigned user address is a no-op, so nothing is lost when it is set). Leaving `fp` or `sp`
/// signed ends every frame-pointer walk at frame 0 or 1. `x0..x28` are stored raw (data, not known pointers).
pub fn arm64_from_words(
    thread: &[u32],
    exception: Option<&[u32]>,
    pac: Option<PacStrip>,
    out: &mut [Option<u64>; ARM64_REG_COUNT],
) -> Result<(), ShortState> {
    if thread.len() < ARM_THREAD_STATE64_COUNT {
        return Err(ShortState { needed: ARM_THREAD_STATE64_COUNT, got: thread.len() });
    }
    if let Some(e) = exception {
        if e.len() < ARM_EXCEPTION_STATE64_COUNT {
            return Err(ShortState { needed: ARM_EXCEPTION_STATE64_COUNT, got: e.len() });
        }
    }
    // x0..x28, fp, lr, sp, pc: 33 u64 at words 0..66.
    for (i, slot) in out.iter_mut().enumerate().take(A_CPSR) {
        *slot = i.checked_mul(2).and_then(|w| dword(thread, w));
    }
    if let Some(cpsr) = out.get_mut(A_CPSR) {
        *cpsr = word(thread, 66).map(u64::from);
    }
    if let Some(strip) = pac {
        for i in ARM64_SIGNED_REGS {
            if let Some(Some(v)) = out.get_mut(i) {
                *v = strip.strip(*v);
            }
        }
    }
    let (far, esr) = match exception {
        Some(e) => (dword(e, 0), word(e, 2).map(u64::from)),
        None => (None, None),
    };
    if let Some(s) = out.get_mut(A_FAR) {
        *s = far;
    }
    if let Some(s) = out.get_mut(A_ESR) {
        *s = esr;
    }
    Ok(())
}

// x86-64 output positions (report_format::regs::X86_64_NAMES).
const X_TRAPNO: usize = 21;
const X_ERR: usize = 22;
const X_CR2: usize = 23;

/// Fills `out` (x86-64 order: rax..r15, rip, rflags, cs, fs, gs, trapno, err, cr2) from an `x86_THREAD_STATE64` word
/// array and, if given, an `x86_EXCEPTION_STATE64` one (`trapno`, `err`, `cr2` = `__faultvaddr`).
pub fn x86_64_from_words(
    thread: &[u32],
    exception: Option<&[u32]>,
    out: &mut [Option<u64>; X86_64_REG_COUNT],
) -> Result<(), ShortState> {
    if thread.len() < X86_THREAD_STATE64_COUNT {
        return Err(ShortState { needed: X86_THREAD_STATE64_COUNT, got: thread.len() });
    }
    if let Some(e) = exception {
        if e.len() < X86_EXCEPTION_STATE64_COUNT {
            return Err(ShortState { needed: X86_EXCEPTION_STATE64_COUNT, got: e.len() });
        }
    }
    // 21 u64 fields in the report's order.
    for (i, slot) in out.iter_mut().enumerate().take(X_TRAPNO) {
        *slot = i.checked_mul(2).and_then(|w| dword(thread, w));
    }
    let (trapno, err, cr2) = match exception {
        Some(e) => (word(e, 0).map(|w| u64::from(w & 0xffff)), word(e, 1).map(u64::from), dword(e, 2)),
        None => (None, None, None),
    };
    for (i, v) in [(X_TRAPNO, trapno), (X_ERR, err), (X_CR2, cr2)] {
        if let Some(s) = out.get_mut(i) {
            *s = v;
        }
    }
    Ok(())
}

/// Words of the exception state at the start of `__darwin_mcontext64` (`arm_exception_state64`: `far` u64, `esr`
/// u32, `exception` u32; `x86_exception_state64`: `trapno` u16, `cpu` u16, `err` u32, `faultvaddr` u64), both 16
/// bytes. Source: `<arm/_mcontext.h>`, `<i386/_mcontext.h>` (`__es`, then `__ss`, then the FP state).
pub const MCONTEXT64_EXCEPTION_WORDS: usize = 4;

/// Splits the words of a signal's `__darwin_mcontext64` into its exception state and its thread state of
/// `thread_words` words (`ARM_THREAD_STATE64_COUNT` or `X86_THREAD_STATE64_COUNT`). `None` when `words` is shorter.
pub fn mcontext64_parts(words: &[u32], thread_words: usize) -> Option<(&[u32], &[u32])> {
    let es = words.get(..MCONTEXT64_EXCEPTION_WORDS)?;
    let ss = words.get(MCONTEXT64_EXCEPTION_WORDS..MCONTEXT64_EXCEPTION_WORDS.checked_add(thread_words)?)?;
    Some((es, ss))
}

/// Reinterprets little-endian bytes (e.g. a request's `state_bytes()`) as state words into `out`; returns the number
/// of words written.
pub fn words_from_bytes(bytes: &[u8], out: &mut [u32]) -> usize {
    let mut n: usize = 0;
    for (w, c) in out.iter_mut().zip(bytes.chunks_exact(4)) {
        let mut b = [0u8; 4];
        b.copy_from_slice(c);
        *w = u32::from_le_bytes(b);
        n = n.saturating_add(1);
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;
    use report_format::regs::{index_of, ARM64, X86_64};

    fn push(v: &mut Vec<u32>, x: u64) {
        v.push(x as u32);
        v.push((x >> 32) as u32);
    }

    fn arm_state(flags: u32) -> Vec<u32> {
        let mut w = Vec::new();
        for i in 0..29u64 {
            push(&mut w, 0x1111_0000_0000_0000 | i);
        }
        push(&mut w, 0x0000_0001_6f62_90b0); // fp
        push(&mut w, 0x4c2d_8001_ad98_ab74); // lr, signed
        push(&mut w, 0x0000_0001_6f62_9030); // sp
        push(&mut w, 0x6e1e_0001_ad98_ab74); // pc, signed
        w.push(0x6000_1000); // cpsr
        w.push(flags);
        assert_eq!(w.len(), ARM_THREAD_STATE64_COUNT);
        w
    }

    #[test]
    fn arm64_positions_follow_report_format() {
        let mut out = [None; ARM64_REG_COUNT];
        let mut e = Vec::new();
        push(&mut e, 0x0000_0002_042f_a800); // far
        e.push(0xf200_0001); // esr: brk #1
        e.push(0); // exception
        arm64_from_words(&arm_state(0), Some(&e), None, &mut out).unwrap();
        let at = |n: &str| out[index_of(ARM64, n).unwrap()];
        assert_eq!(at("x0"), Some(0x1111_0000_0000_0000));
        assert_eq!(at("x28"), Some(0x1111_0000_0000_001c));
        assert_eq!(at("fp"), Some(0x1_6f62_90b0));
        assert_eq!(at("lr"), Some(0x4c2d_8001_ad98_ab74), "raw without a PAC stripper");
        assert_eq!(at("sp"), Some(0x1_6f62_9030));
        assert_eq!(at("pc"), Some(0x6e1e_0001_ad98_ab74));
        assert_eq!(at("cpsr"), Some(0x6000_1000));
        assert_eq!(at("far"), Some(0x2_042f_a800));
        assert_eq!(at("esr"), Some(0xf200_0001));
        assert!(out.iter().all(Option::is_some));
    }

    /// An arm64e state as `thread_get_state` returns it: fp, lr, sp and pc all signed.
    fn arm_state_all_signed(flags: u32) -> Vec<u32> {
        let mut w = arm_state(flags);
        let mut set = |reg: usize, v: u64| {
            w[reg * 2] = v as u32;
            w[reg * 2 + 1] = (v >> 32) as u32;
        };
        set(A_FP, 0x3a7f_0001_6f62_90b0);
        set(A_SP, 0x5511_0001_6f62_9030);
        w
    }

    #[test]
    fn arm64e_strips_fp_lr_sp_pc_always() {
        let strip = PacStrip::with_va_bits(36).unwrap(); // iOS: MACH_VM_MAX_ADDRESS 0xFC0000000
        for flags in [0, ARM_THREAD_STATE64_FLAGS_NO_PTRAUTH] {
            let mut out = [None; ARM64_REG_COUNT];
            arm64_from_words(&arm_state_all_signed(flags), None, Some(strip), &mut out).unwrap();
            assert_eq!(out[A_FP], Some(0x1_6f62_90b0), "fp stripped (flags {flags:#x})");
            assert_eq!(out[A_LR], Some(0x1_ad98_ab74), "lr stripped (flags {flags:#x})");
            assert_eq!(out[A_SP], Some(0x1_6f62_9030), "sp stripped (flags {flags:#x})");
            assert_eq!(out[A_PC], Some(0x1_ad98_ab74), "pc stripped (flags {flags:#x})");
            assert_eq!(out[0], Some(0x1111_0000_0000_0000), "x0 is data: stored raw");
            assert_eq!((out[A_FAR], out[A_ESR]), (None, None));
        }
        // Unsigned values (arm64, or a NO_PTRAUTH state that tells the truth) come back unchanged.
        let mut out = [None; ARM64_REG_COUNT];
        let mut plain = arm_state(0);
        for reg in ARM64_SIGNED_REGS {
            plain[reg * 2 + 1] &= 0xf;
        }
        arm64_from_words(&plain, None, Some(strip), &mut out).unwrap();
        assert_eq!(out[A_FP], Some(0x1_6f62_90b0));
        assert_eq!(out[A_PC], Some(0x1_ad98_ab74));
        // Without a stripper (x86_64 host decoding, or no PAC) everything stays raw.
        arm64_from_words(&arm_state_all_signed(0), None, None, &mut out).unwrap();
        assert_eq!(out[A_SP], Some(0x5511_0001_6f62_9030));
    }

    #[test]
    fn signal_mcontext_splits_into_exception_then_thread_state() {
        // __darwin_mcontext64 as a signal handler sees it: __es (4 words), __ss (68 words), then __ns.
        let mut m = Vec::new();
        push(&mut m, 0x0000_0002_042f_a800); // far
        m.push(0x9200_0006); // esr
        m.push(0);
        m.extend(arm_state(0));
        m.extend([0xeeee_eeee; 10]); // start of the NEON state
        let (es, ss) = mcontext64_parts(&m, ARM_THREAD_STATE64_COUNT).unwrap();
        let mut out = [None; ARM64_REG_COUNT];
        arm64_from_words(ss, Some(es), None, &mut out).unwrap();
        assert_eq!(out[index_of(ARM64, "far").unwrap()], Some(0x2_042f_a800));
        assert_eq!(out[index_of(ARM64, "fp").unwrap()], Some(0x1_6f62_90b0));
        assert_eq!(out[A_CPSR], Some(0x6000_1000));
        assert!(mcontext64_parts(&m[..71], ARM_THREAD_STATE64_COUNT).is_none());
    }

    #[test]
    fn short_states_are_refused() {
        let mut out = [None; ARM64_REG_COUNT];
        assert_eq!(arm64_from_words(&[0; 67], None, None, &mut out), Err(ShortState { needed: 68, got: 67 }));
        assert_eq!(arm64_from_words(&[0; 68], Some(&[0; 3]), None, &mut out), Err(ShortState { needed: 4, got: 3 }));
        let mut x = [None; X86_64_REG_COUNT];
        assert_eq!(x86_64_from_words(&[0; 41], None, &mut x), Err(ShortState { needed: 42, got: 41 }));
    }

    #[test]
    fn x86_64_positions_follow_report_format() {
        let mut w = Vec::new();
        for i in 0..21u64 {
            push(&mut w, 0xabcd_0000_0000_0000 + i);
        }
        assert_eq!(w.len(), X86_THREAD_STATE64_COUNT);
        let mut e = Vec::new();
        e.push(0x0003_000e); // cpu 3, trapno 14 (page fault)
        e.push(0x6); // err: user write
        push(&mut e, 0x0000_0000_0000_0010); // faultvaddr
        let mut out = [None; X86_64_REG_COUNT];
        x86_64_from_words(&w, Some(&e), &mut out).unwrap();
        let at = |n: &str| out[index_of(X86_64, n).unwrap()];
        assert_eq!(at("rax"), Some(0xabcd_0000_0000_0000));
        assert_eq!(at("rsp"), Some(0xabcd_0000_0000_0007));
        assert_eq!(at("r15"), Some(0xabcd_0000_0000_000f));
        assert_eq!(at("rip"), Some(0xabcd_0000_0000_0010));
        assert_eq!(at("rflags"), Some(0xabcd_0000_0000_0011));
        assert_eq!(at("gs"), Some(0xabcd_0000_0000_0014));
        assert_eq!(at("trapno"), Some(14), "the cpu half-word is not part of trapno");
        assert_eq!(at("err"), Some(6));
        assert_eq!(at("cr2"), Some(0x10));
        x86_64_from_words(&w, None, &mut out).unwrap();
        assert_eq!((out[X_TRAPNO], out[X_ERR], out[X_CR2]), (None, None, None));
    }

    #[test]
    fn words_from_request_bytes() {
        let bytes = [1u8, 0, 0, 0, 2, 0, 0, 0, 3, 0];
        let mut w = [0u32; 4];
        assert_eq!(words_from_bytes(&bytes, &mut w), 2);
        assert_eq!(w, [1, 2, 0, 0]);
    }
}
