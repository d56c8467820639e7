//! AArch64 register decoding (pure) and pointer-authentication stripping.
//!
//! Decodes the Linux signal frame's `struct sigcontext` (`fault_address`, `regs[31]`, `sp`, `pc`, `pstate`, and the
//! `esr_context` record inside `__reserved`) into the report's `arm64` set (`report_format::regs::ARM64_NAMES`).

use super::pac::PacStrip;
use super::{RegisterValues, WalkRegs};

/// Register set name (`report_format::regs::ARM64`).
pub const SET: &[u8] = b"arm64";
/// Number of registers in the set.
pub const LEN: u8 = 36;

const FP: usize = 29;
const LR: usize = 30;
const SP: usize = 31;
const PC: usize = 32;
const CPSR: usize = 33;
const FAR: usize = 34;
const ESR: usize = 35;

/// `ESR_MAGIC`: the record in `sigcontext.__reserved` that holds the exception syndrome register.
/// Source: Linux `arch/arm64/include/uapi/asm/sigcontext.h` (`struct esr_context`).
pub const ESR_MAGIC: u32 = 0x4553_5201;
/// `EXTRA_MAGIC`: a record pointing outside `__reserved`; not followed here (the ESR record always comes first).
pub const EXTRA_MAGIC: u32 = 0x4558_5401;

/// The core of Linux's arm64 `struct sigcontext` (`mcontext_t` in glibc).
#[derive(Clone, Copy, Debug, Default)]
pub struct SigContext<'a> {
    /// `fault_address` (the FAR).
    pub fault_address: u64,
    /// `regs[0..31]`: x0..x30.
    pub regs: [u64; 31],
    /// `sp`.
    pub sp: u64,
    /// `pc`.
    pub pc: u64,
    /// `pstate`.
    pub pstate: u64,
    /// The `__reserved` area (4096 bytes): a chain of `{u32 magic, u32 size}` records ended by magic 0.
    pub reserved: &'a [u8],
}

/// Decodes a signal context. Pure; signal-safe. `esr` is captured only when the kernel put an `esr_context` record
/// in `__reserved` (it does for faults, not for signals sent by another thread).
pub fn from_sigcontext(c: &SigContext<'_>) -> RegisterValues {
    let mut r = RegisterValues::new(SET, LEN);
    for (i, v) in c.regs.iter().enumerate() {
        r.put(i, *v);
    }
    r.put(SP, c.sp);
    r.put(PC, c.pc);
    r.put(CPSR, c.pstate & 0xffff_ffff);
    r.put(FAR, c.fault_address);
    if let Some(esr) = find_esr(c.reserved) {
        r.put(ESR, esr & 0xffff_ffff);
    }
    r
}

/// Walks the `_aarch64_ctx` record chain of `__reserved` for the `esr_context` record. Bounds-checked; pure.
pub fn find_esr(reserved: &[u8]) -> Option<u64> {
    let mut off = 0usize;
    // Each record is at least 8 bytes, so this bounds the loop.
    for _ in 0..(reserved.len() / 8) {
        let word = |at: usize| -> Option<u32> {
            let start = off.checked_add(at)?;
            Some(u32::from_ne_bytes(reserved.get(start..start.checked_add(4)?)?.try_into().ok()?))
        };
        let magic = word(0)?;
        let size = word(4)? as usize;
        if magic == 0 || size < 8 {
            return None;
        }
        if magic == ESR_MAGIC {
            let start = off.checked_add(8)?;
            return Some(u64::from_ne_bytes(reserved.get(start..start.checked_add(8)?)?.try_into().ok()?));
        }
        off = off.checked_add(size)?;
    }
    None
}

/// The walk start (`pc`, `sp`, `fp` = x29, `lr` = x30) of an arm64 set.
pub fn walk_regs(r: &RegisterValues) -> Option<WalkRegs> {
    Some(WalkRegs { pc: r.get(PC)?, sp: r.get(SP)?, fp: r.get(FP).unwrap_or(0), lr: r.get(LR) })
}

/// Default number of virtual-address bits of user space on Linux/arm64 (`VA_BITS` 48, 4 KiB or 64 KiB pages).
/// Kernels built with 52-bit VAs only hand out addresses above 2^48 to processes that ask for them with an `mmap`
/// hint, so 48 is right for ordinary processes. Source: Linux `Documentation/arch/arm64/memory.rst`.
pub const LINUX_USER_VA_BITS: u32 = 48;

/// Strips a pointer-authentication code (and any top-byte tag) from a code address, the way `xpaci` does for user
/// space: the bits above the `va_bits`-bit virtual address are cleared. Addresses with bit 55 set (kernel half)
/// are returned unchanged, and so is every address when `va_bits` is outside what [`PacStrip`] accepts (25..=55).
/// Pure; signal-safe. The one implementation is [`PacStrip::strip`]; this is its Linux-facing form.
///
/// A fixed `0x0000_000F_FFFF_FFFF` mask (36 bits, iOS only) is wrong elsewhere; the caller passes the VA size of the
/// platform (Linux: [`LINUX_USER_VA_BITS`]; Apple: from `TASK_VM_INFO.max_address`, see [`PacStrip::covering`]).
pub fn strip_pac(addr: u64, va_bits: u32) -> u64 {
    match u8::try_from(va_bits).ok().and_then(PacStrip::with_va_bits) {
        Some(s) => s.strip(addr),
        None => addr,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use report_format::regs;

    fn reserved_with(records: &[(u32, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (magic, payload) in records {
            out.extend_from_slice(&magic.to_ne_bytes());
            out.extend_from_slice(&((8 + payload.len()) as u32).to_ne_bytes());
            out.extend_from_slice(payload);
        }
        out.extend_from_slice(&[0u8; 8]);
        out.resize(4096, 0);
        out
    }

    #[test]
    fn sigcontext_lands_on_names_and_finds_esr_after_fpsimd() {
        let fpsimd = vec![0xaau8; 520]; // fpsimd_context payload size
        let res = reserved_with(&[(0x4650_8001, &fpsimd), (ESR_MAGIC, &0x9200_0046u64.to_ne_bytes())]);
        let mut regs31 = [0u64; 31];
        for (i, v) in regs31.iter_mut().enumerate() {
            *v = 100 + i as u64;
        }
        let c = SigContext {
            fault_address: 0xdead,
            regs: regs31,
            sp: 0x7fff_0000,
            pc: 0x40_1000,
            pstate: 0x6000_0000,
            reserved: &res,
        };
        let r = from_sigcontext(&c);
        let at = |n: &str| r.get(regs::index_of(regs::ARM64, n).expect("name")).expect("captured");
        assert_eq!(at("x0"), 100);
        assert_eq!(at("x28"), 128);
        assert_eq!(at("fp"), 129);
        assert_eq!(at("lr"), 130);
        assert_eq!(at("sp"), 0x7fff_0000);
        assert_eq!(at("pc"), 0x40_1000);
        assert_eq!(at("cpsr"), 0x6000_0000);
        assert_eq!(at("far"), 0xdead);
        assert_eq!(at("esr"), 0x9200_0046);
        let w = r.walk_start().expect("walk");
        assert_eq!((w.pc, w.sp, w.fp, w.lr), (0x40_1000, 0x7fff_0000, 129, Some(130)));
    }

    #[test]
    fn esr_absent_or_garbage_reserved_is_none() {
        assert_eq!(find_esr(&[0u8; 64]), None);
        assert_eq!(find_esr(&[]), None);
        // A record claiming a huge size runs off the end without panicking.
        let mut bad = vec![0u8; 32];
        bad[..4].copy_from_slice(&0x1234_5678u32.to_ne_bytes());
        bad[4..8].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(find_esr(&bad), None);
        // A size smaller than a header stops the walk.
        bad[4..8].copy_from_slice(&4u32.to_ne_bytes());
        assert_eq!(find_esr(&bad), None);
        let c = SigContext { reserved: &bad, ..SigContext::default() };
        assert_eq!(from_sigcontext(&c).get(ESR), None);
    }

    #[test]
    fn pac_is_stripped_from_signed_return_addresses() {
        // A value seen under qemu with -Zbranch-protection=pac-ret (toolchain.md §2).
        assert_eq!(strip_pac(0x0029_0055_0001_cc60, LINUX_USER_VA_BITS), 0x0000_0055_0001_cc60);
        // PAC in the top byte too.
        assert_eq!(strip_pac(0x7f12_ffff_aaaa_bbbc, 48), 0x0000_ffff_aaaa_bbbc);
        // Unsigned user addresses are unchanged.
        assert_eq!(strip_pac(0x0000_aaaa_0000_1234, 48), 0x0000_aaaa_0000_1234);
        // Kernel-half addresses are left alone.
        assert_eq!(strip_pac(0xffff_8000_0000_1000, 48), 0xffff_8000_0000_1000);
        // iOS-style 39-bit VA.
        assert_eq!(strip_pac(0x8e2a_0001_0000_4000, 39), 0x0000_0001_0000_4000 & ((1 << 39) - 1));
        assert_eq!(strip_pac(0x1234, 0), 0x1234);
    }

    /// Signed return addresses captured live, with the address the CPU itself strips them to.
    ///
    /// Source: `tests/tests/pac.rs` (crash-tests) built by `scripts/test-arm64.sh`'s pac pass
    /// (`-C force-frame-pointers=yes -Zbranch-protection=pac-ret`, Debian rustc 1.96, aarch64-unknown-linux-gnu) and
    /// run under qemu-aarch64 7.2 with `--nocapture`. The probe reads the saved x30 from two frame records on its own
    /// stack and strips it with the `xpaclri` instruction: the `PAC_SAMPLE raw=… xpaclri=…` lines. The stripped
    /// values were checked against the binary with `aarch64-linux-gnu-addr2line` (qemu-user loads the PIE at
    /// 0x55_0000_0000): 0x2b28c is right after `bl innermost` in `pac::middle`, 0x2b1c8 is in `pac::outer`. The PAC
    /// bits differ per process (random keys) and per qemu algorithm, the stripped address does not.
    ///
    /// The last pair is from a crash report: the pac-ret `crash-client null_deref` under qemu
    /// (`-cpu max,pauth-impdef=on`), build id 306830eb…b581. At the fault `read_at` had signed x30 in its prologue,
    /// so the report's `lr` register is signed; its frame 1 is the stripped value, which addr2line puts in
    /// `crash_client::linux::trigger_null_deref` (the caller of `read_at`).
    const CAPTURED: [(u64, u64); 5] = [
        // qemu's default CPU (`max`, QARMA5 PACs).
        (0x003e_0055_0002_b28c, 0x0000_0055_0002_b28c),
        (0x004f_0055_0002_b1c8, 0x0000_0055_0002_b1c8),
        // `-cpu max,pauth-impdef=on` (what the script uses for pac-ret code).
        (0x0023_0055_0002_b28c, 0x0000_0055_0002_b28c),
        (0x002a_0055_0002_b1c8, 0x0000_0055_0002_b1c8),
        // The `lr` register of a crash report.
        (0x0032_0055_0002_0510, 0x0000_0055_0002_0510),
    ];

    #[test]
    fn pac_ret_values_captured_under_qemu_strip_to_the_cpus_answer() {
        for (signed, want) in CAPTURED {
            assert_ne!(signed, want, "the sample is really signed");
            assert_eq!(strip_pac(signed, LINUX_USER_VA_BITS), want, "{signed:#x}");
            // Idempotent: stripping an already stripped address changes nothing.
            assert_eq!(strip_pac(want, LINUX_USER_VA_BITS), want);
            // iOS's fixed 36-bit mask would cut the Linux address: the VA size matters.
            assert_ne!(strip_pac(signed, 36), want);
            // Keeping the PAC byte (a mask that is too wide) leaves the signature in.
            assert_ne!(strip_pac(signed, 56), want);
        }
    }
}
