//! x86-64 register decoding (pure). Decodes the `gregs` array of a Linux `ucontext_t` into the report's
//! `x86_64` set (`report_format::regs::X86_64_NAMES`).

use super::{RegisterValues, WalkRegs};

/// Register set name (`report_format::regs::X86_64`).
pub const SET: &[u8] = b"x86_64";
/// Number of registers in the set.
pub const LEN: u8 = 24;

// Storage indexes in `report_format::regs::X86_64_NAMES`.
const RAX: usize = 0;
const RBX: usize = 1;
const RCX: usize = 2;
const RDX: usize = 3;
const RDI: usize = 4;
const RSI: usize = 5;
const RBP: usize = 6;
const RSP: usize = 7;
const R8: usize = 8;
const RIP: usize = 16;
const RFLAGS: usize = 17;
const CS: usize = 18;
const FS: usize = 19;
const GS: usize = 20;
const TRAPNO: usize = 21;
const ERR: usize = 22;
const CR2: usize = 23;

/// Indexes into `mcontext_t.gregs`. Source: glibc `sysdeps/unix/sysv/linux/x86/sys/ucontext.h` (`REG_R8` = 0 ...
/// `REG_CR2` = 22); the kernel's `struct sigcontext` (`arch/x86/include/uapi/asm/sigcontext.h`) has the same order.
pub mod greg {
    /// `REG_R8`; r9..r15 follow at 1..7.
    pub const R8: usize = 0;
    /// `REG_RDI`.
    pub const RDI: usize = 8;
    /// `REG_RSI`.
    pub const RSI: usize = 9;
    /// `REG_RBP`.
    pub const RBP: usize = 10;
    /// `REG_RBX`.
    pub const RBX: usize = 11;
    /// `REG_RDX`.
    pub const RDX: usize = 12;
    /// `REG_RAX`.
    pub const RAX: usize = 13;
    /// `REG_RCX`.
    pub const RCX: usize = 14;
    /// `REG_RSP`.
    pub const RSP: usize = 15;
    /// `REG_RIP`.
    pub const RIP: usize = 16;
    /// `REG_EFL`.
    pub const EFL: usize = 17;
    /// `REG_CSGSFS`: `cs` in bits 0..16, `gs` in 16..32, `fs` in 32..48.
    pub const CSGSFS: usize = 18;
    /// `REG_ERR`.
    pub const ERR: usize = 19;
    /// `REG_TRAPNO`.
    pub const TRAPNO: usize = 20;
    /// `REG_CR2`.
    pub const CR2: usize = 22;
    /// Number of `gregs`.
    pub const COUNT: usize = 23;
}

/// Decodes `mcontext_t.gregs` (values reinterpreted as `u64`). Pure; signal-safe.
pub fn from_gregs(g: &[u64; greg::COUNT]) -> RegisterValues {
    let mut r = RegisterValues::new(SET, LEN);
    let pairs: [(usize, usize); 8] = [
        (RAX, greg::RAX),
        (RBX, greg::RBX),
        (RCX, greg::RCX),
        (RDX, greg::RDX),
        (RDI, greg::RDI),
        (RSI, greg::RSI),
        (RBP, greg::RBP),
        (RSP, greg::RSP),
    ];
    let at = |i: usize| g.get(i).copied().unwrap_or(0);
    for (dst, src) in pairs {
        r.put(dst, at(src));
    }
    // r8..r15 are consecutive in both numberings (small constants: no overflow).
    for k in 0..8 {
        r.put(R8.wrapping_add(k), at(greg::R8.wrapping_add(k)));
    }
    r.put(RIP, at(greg::RIP));
    r.put(RFLAGS, at(greg::EFL));
    let segs = at(greg::CSGSFS);
    r.put(CS, segs & 0xffff);
    r.put(GS, (segs >> 16) & 0xffff);
    r.put(FS, (segs >> 32) & 0xffff);
    r.put(TRAPNO, at(greg::TRAPNO));
    r.put(ERR, at(greg::ERR));
    r.put(CR2, at(greg::CR2));
    r
}

/// The walk start (`rip`, `rsp`, `rbp`) of an x86-64 set.
pub fn walk_regs(r: &RegisterValues) -> Option<WalkRegs> {
    Some(WalkRegs { pc: r.get(RIP)?, sp: r.get(RSP)?, fp: r.get(RBP).unwrap_or(0), lr: None })
}

#[cfg(test)]
mod tests {
    use super::*;
    use report_format::regs;

    #[test]
    fn gregs_land_on_their_names() {
        let mut g = [0u64; greg::COUNT];
        for (i, v) in g.iter_mut().enumerate() {
            *v = 0x1000 + i as u64;
        }
        g[greg::CSGSFS] = 0x0000_002b_0000_0033; // fs=0x2b, gs=0, cs=0x33
        let r = from_gregs(&g);
        let at = |n: &str| r.get(regs::index_of(regs::X86_64, n).expect("known name")).expect("captured");
        assert_eq!(at("rax"), 0x1000 + greg::RAX as u64);
        assert_eq!(at("rbp"), 0x1000 + greg::RBP as u64);
        assert_eq!(at("rsp"), 0x1000 + greg::RSP as u64);
        assert_eq!(at("r8"), 0x1000);
        assert_eq!(at("r15"), 0x1007);
        assert_eq!(at("rip"), 0x1000 + greg::RIP as u64);
        assert_eq!(at("cr2"), 0x1000 + greg::CR2 as u64);
        assert_eq!(at("trapno"), 0x1000 + greg::TRAPNO as u64);
        assert_eq!(at("cs"), 0x33);
        assert_eq!(at("gs"), 0);
        assert_eq!(at("fs"), 0x2b);
        assert_eq!(usize::from(r.len), regs::X86_64_NAMES.len());
        assert_eq!(r.valid.count_ones(), 24);
        let w = r.walk_start().expect("walk regs");
        assert_eq!((w.pc, w.sp, w.fp, w.lr), (at("rip"), at("rsp"), at("rbp"), None));
    }
}
