//! arm64 facts for the unwinder: DWARF register numbers ("DWARF for the Arm 64-bit Architecture" §4.1: x0..x30 =
//! 0..30, sp = 31), the callee-saved set (AAPCS64 §6.1.1: x19..x29), the link register, and how to recognise a
//! return address (the instruction before it is a `bl`/`blr`/`blra*`).

use super::regs::ArchSpec;
use super::MemoryReader;

/// x19..x29 (DWARF 19..=29).
const CALLEE_SAVED: u64 = ((1u64 << 30) - 1) & !((1u64 << 19) - 1);

/// The arm64 description.
pub const SPEC: ArchSpec = ArchSpec {
    sp: 31,
    fp: 29,
    ra: 30,
    pc: 32,
    callee_saved: CALLEE_SAVED,
    link_register: true,
    call_pushes: 0,
    vendor: gimli::Vendor::AArch64,
};

/// Whether the instruction right before `ret` is a branch with link: `BL imm26`, `BLR Xn`, or the
/// pointer-authenticating `BLRAA`/`BLRAB`/`BLRAAZ`/`BLRABZ` (Arm ARM C6.2). Reads 4 bytes through `mem`.
pub fn call_precedes<M: MemoryReader + ?Sized>(mem: &mut M, ret: u64) -> bool {
    let Some(at) = ret.checked_sub(4) else { return false };
    let mut b = [0u8; 4];
    if ret % 4 != 0 || !mem.read(at, &mut b) {
        return false;
    }
    let insn = u32::from_le_bytes(b);
    insn & 0xFC00_0000 == 0x9400_0000 // BL
        || insn & 0xFFFF_FC1F == 0xD63F_0000 // BLR
        || insn & 0xFFFF_F800 == 0xD63F_0800 // BLRAAZ, BLRABZ
        || insn & 0xFFFF_F800 == 0xD73F_0800 // BLRAA, BLRAB
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unwind::tests::Code;

    fn after(insn: u32) -> bool {
        let mut code = vec![0u8; 8];
        code.extend_from_slice(&insn.to_le_bytes());
        call_precedes(&mut Code(code), 12)
    }

    #[test]
    fn recognises_branch_with_link() {
        assert!(after(0x9400_0010)); // bl #0x40
        assert!(after(0x97FF_FFFF)); // bl #-4
        assert!(after(0xD63F_0100)); // blr x8
        assert!(after(0xD63F_0A1F)); // blraaz x16
        assert!(after(0xD73F_0A11)); // blraa x16, x17
        assert!(!after(0x1400_0010)); // b #0x40
        assert!(!after(0xD61F_0100)); // br x8
        assert!(!after(0xD65F_03C0)); // ret
        assert!(!after(0xA9BF_7BFD)); // stp x29, x30, [sp, #-16]!
        assert!(!call_precedes(&mut Code(vec![0; 16]), 13)); // misaligned
    }
}
