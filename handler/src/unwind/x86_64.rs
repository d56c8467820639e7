//! x86-64 facts for the unwinder: DWARF register numbers (System V AMD64 psABI §3.6.2, Figure 3.36), the
//! callee-saved set (§3.2.1), and how to recognise a return address (the instruction before it is a `call`).

use super::regs::ArchSpec;
use super::MemoryReader;

/// `rbx`, `rbp`, `r12`..`r15` (DWARF 3, 6, 12..15).
const CALLEE_SAVED: u64 = (1 << 3) | (1 << 6) | (1 << 12) | (1 << 13) | (1 << 14) | (1 << 15);

/// The x86-64 description.
pub const SPEC: ArchSpec = ArchSpec {
    sp: 7,
    fp: 6,
    ra: 16,
    pc: 16,
    callee_saved: CALLEE_SAVED,
    link_register: false,
    call_pushes: 8,
    vendor: gimli::Vendor::Default,
};

/// Whether the bytes right before `ret` end with a `call` instruction: `E8 rel32`, or `FF /2` (`call r/m64`, with
/// an optional REX prefix) whose ModRM/SIB/displacement length ends exactly at `ret` (Intel SDM Vol. 2A, CALL and
/// §2.1.5). Reads 8 code bytes through `mem`; `false` when unreadable.
pub fn call_precedes<M: MemoryReader + ?Sized>(mem: &mut M, ret: u64) -> bool {
    let Some(start) = ret.checked_sub(8) else { return false };
    let mut b = [0u8; 8];
    if !mem.read(start, &mut b) {
        return false;
    }
    // b[8 - n] is the first byte of an n-byte instruction ending at `ret`.
    if b.get(3) == Some(&0xE8) {
        return true;
    }
    let is_rex = |x: Option<&u8>| x.is_some_and(|p| (0x40..=0x4f).contains(p));
    for n in 2..=8usize {
        let at = 8usize.saturating_sub(n);
        // `FF /2` alone, or behind a REX prefix (`41 FF D0` = call r8).
        for (opcode, extra) in [(at, 0usize), (at.saturating_add(1), 1)] {
            if extra == 1 && !is_rex(b.get(at)) {
                continue;
            }
            if b.get(opcode) != Some(&0xFF) {
                continue;
            }
            let (Some(&modrm), sib) =
                (b.get(opcode.saturating_add(1)), b.get(opcode.saturating_add(2)).copied().unwrap_or(0))
            else {
                continue;
            };
            if (modrm >> 3) & 7 == 2 && modrm_len(modrm, sib).saturating_add(extra) == n {
                return true;
            }
        }
    }
    false
}

/// Length of `FF modrm [sib] [disp]` in bytes (opcode included).
fn modrm_len(modrm: u8, sib: u8) -> usize {
    let md = modrm >> 6;
    let rm = modrm & 7;
    let sib_len = usize::from(rm == 4 && md != 3);
    let disp = match md {
        0 if rm == 5 => 4,                   // rip-relative
        0 if rm == 4 && (sib & 7) == 5 => 4, // SIB with no base: disp32
        0 => 0,
        1 => 1,
        2 => 4,
        _ => 0,
    };
    sib_len.saturating_add(disp).saturating_add(2)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unwind::tests::Code;

    fn ends_with_call(insn: &[u8]) -> bool {
        let mut code = vec![0x90u8; 16];
        code.extend_from_slice(insn);
        let ret = code.len() as u64;
        call_precedes(&mut Code(code), ret)
    }

    #[test]
    fn recognises_call_forms() {
        assert!(ends_with_call(&[0xE8, 1, 2, 3, 4])); // call rel32
        assert!(ends_with_call(&[0xFF, 0xD0])); // call rax
        assert!(ends_with_call(&[0x41, 0xFF, 0xD0])); // call r8
        assert!(ends_with_call(&[0xFF, 0x15, 1, 2, 3, 4])); // call [rip+x]
        assert!(ends_with_call(&[0xFF, 0x55, 0x08])); // call [rbp+8]
        assert!(ends_with_call(&[0xFF, 0x14, 0x24])); // call [rsp]
        assert!(ends_with_call(&[0xFF, 0x94, 0x24, 1, 2, 3, 4])); // call [rsp+disp32]
        assert!(ends_with_call(&[0x41, 0xFF, 0x54, 0x24, 0x08])); // call [r12+8]
        assert!(!ends_with_call(&[0x48, 0x89, 0xC7])); // mov rdi, rax
        assert!(!ends_with_call(&[0xFF, 0xE0])); // jmp rax (FF /4)
        assert!(!ends_with_call(&[0x90, 0x90, 0xC3])); // ret
                                                       // Unreadable code bytes.
        assert!(!call_precedes(&mut Code(vec![0; 4]), 2));
    }
}
