//! The register file an unwind step reads and produces, indexed by DWARF register number, and the per-architecture
//! facts the walker needs ([`ArchSpec`]). Pure, `Copy`, allocation-free.

use crate::arch::RegisterValues;

/// Registers kept: DWARF numbers `0..NREGS`. x86-64 uses 0..=16 (16 = the return-address column, i.e. `rip`);
/// arm64 uses 0..=31 (x0..x30, sp) plus [`ArchSpec::pc`] = 32 for the program counter, which arm64's DWARF
/// numbering does not name.
pub const NREGS: usize = 34;

/// Register values by DWARF number with a validity mask (a register whose value is unknown in a caller's frame is
/// invalid, never guessed).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnwindRegs {
    vals: [u64; NREGS],
    valid: u64,
}

impl Default for UnwindRegs {
    fn default() -> Self {
        UnwindRegs { vals: [0; NREGS], valid: 0 }
    }
}

impl UnwindRegs {
    /// The value of DWARF register `r`, when known.
    pub fn get(&self, r: u16) -> Option<u64> {
        let i = usize::from(r);
        if i < NREGS && self.valid & (1u64 << i) != 0 {
            self.vals.get(i).copied()
        } else {
            None
        }
    }

    /// Sets DWARF register `r` (ignored beyond [`NREGS`]).
    pub fn set(&mut self, r: u16, v: u64) {
        let i = usize::from(r);
        if let Some(slot) = self.vals.get_mut(i) {
            *slot = v;
            self.valid |= 1u64 << i;
        }
    }

    /// Marks DWARF register `r` unknown.
    pub fn clear(&mut self, r: u16) {
        if usize::from(r) < NREGS {
            self.valid &= !(1u64 << r);
        }
    }

    /// Only the registers in `mask` (bit = DWARF number) stay known.
    pub fn keep_only(&mut self, mask: u64) {
        self.valid &= mask;
    }
}

/// What the walker needs to know about one architecture. Same shape for [`super::x86_64::SPEC`] and
/// [`super::aarch64::SPEC`].
#[derive(Clone, Copy, Debug)]
pub struct ArchSpec {
    /// DWARF number of the stack pointer (x86-64 `rsp` = 7, arm64 `sp` = 31).
    pub sp: u16,
    /// DWARF number of the frame pointer (x86-64 `rbp` = 6, arm64 `x29` = 29).
    pub fp: u16,
    /// The CIE return-address column (x86-64 16, arm64 `x30` = 30).
    pub ra: u16,
    /// Where the program counter is kept in [`UnwindRegs`] (x86-64 16, the return-address column; arm64 32).
    pub pc: u16,
    /// DWARF numbers of callee-saved registers whose value carries into the caller when the CFI row names no rule
    /// for them (bit = number). System V x86-64 psABI §3.2.1; AAPCS64 §6.1.1.
    pub callee_saved: u64,
    /// Whether the return address of a function that has not stored it yet is in a link register (arm64 `x30`):
    /// with no CFI rule for the return-address column, its current value is the return address.
    pub link_register: bool,
    /// Bytes of a return address slot pushed by a call (x86-64 `call` pushes 8; arm64 `bl` pushes nothing).
    pub call_pushes: u64,
    /// The vendor extensions gimli must parse (`DW_CFA_AARCH64_negate_ra_state` on arm64).
    pub vendor: gimli::Vendor,
}

impl ArchSpec {
    /// The unwind registers of a captured thread, from the report's register set (`report_format::regs`); `None`
    /// when the set is not this architecture's or the pc or sp is missing.
    pub fn regs_from(&self, r: &RegisterValues) -> Option<UnwindRegs> {
        let mut out = UnwindRegs::default();
        if r.set == crate::arch::x86_64::SET {
            // Storage order (report_format::regs::X86_64_NAMES) -> DWARF numbers (psABI Figure 3.36).
            const MAP: [u16; 17] = [0, 3, 2, 1, 5, 4, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
            for (i, dw) in MAP.iter().enumerate() {
                if let Some(v) = r.get(i) {
                    out.set(*dw, v);
                }
            }
        } else if r.set == crate::arch::aarch64::SET {
            // Storage order x0..x28, fp, lr, sp, pc: DWARF 0..=31, pc kept at 32.
            for i in 0..=32usize {
                if let Some(v) = r.get(i) {
                    out.set(i as u16, v);
                }
            }
        } else {
            return None;
        }
        out.get(self.pc)?;
        out.get(self.sp)?;
        Some(out)
    }
}
