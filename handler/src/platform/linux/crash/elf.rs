//! Pure ELF decoding shared by the install-time image snapshot and the crash-time link-map walk: program headers
//! (`Elf64_Phdr`), the ELF header (`Elf64_Ehdr`), the summary both image lists store (load address, text size,
//! `.eh_frame_hdr`, dynamic section) and the GNU build id note.
//!
//! Everything here is pure, bounds-checked, allocation-free and signal-safe: byte slices in, values out. 64-bit
//! ELF only (the backends are x86_64 and arm64). Layouts and constants: glibc `elf.h`, the System V gABI (ELF-64
//! Object File Format 1.5) and, for the GNU extensions, LSB 5.0 Core §10.

use crate::unwind::UnwindSections;

/// `PT_LOAD`: a loadable segment. Source: glibc `elf.h`.
pub const PT_LOAD: u32 = 1;
/// `PT_DYNAMIC`: the dynamic section. Source: glibc `elf.h`.
pub const PT_DYNAMIC: u32 = 2;
/// `PT_NOTE`: auxiliary information (notes). Source: glibc `elf.h`.
pub const PT_NOTE: u32 = 4;
/// `PT_PHDR`: the program header table itself. Source: glibc `elf.h`.
pub const PT_PHDR: u32 = 6;
/// `PT_GNU_EH_FRAME`: the segment holding `.eh_frame_hdr`. Source: glibc `elf.h`; LSB 5.0 Core §10.6.2.
pub const PT_GNU_EH_FRAME: u32 = 0x6474_e550;
/// `PF_X`: executable segment flag. Source: glibc `elf.h`.
pub const PF_X: u32 = 1;
/// `NT_GNU_BUILD_ID`: the note type of the GNU build id (owner `"GNU"`). Source: glibc `elf.h`.
pub const NT_GNU_BUILD_ID: u32 = 3;
/// `DT_NULL`: ends the dynamic array. Source: glibc `elf.h`.
pub const DT_NULL: i64 = 0;
/// `DT_DEBUG`: the dynamic linker stores the address of its `struct r_debug` here at start-up. Source: glibc
/// `elf.h`; System V gABI "Dynamic Section".
pub const DT_DEBUG: i64 = 21;

/// `sizeof(Elf64_Ehdr)` in bytes. Source: glibc `elf.h`.
pub const EHDR_SIZE: usize = 64;
/// `sizeof(Elf64_Phdr)` in bytes (also the only valid `e_phentsize` for ELF-64). Source: glibc `elf.h`.
pub const PHDR_SIZE: usize = 56;
/// `sizeof(Elf64_Dyn)` in bytes. Source: glibc `elf.h`.
pub const DYN_SIZE: usize = 16;
/// `ELFMAG`: the first four bytes of every ELF file. Source: glibc `elf.h`.
pub const ELF_MAGIC: [u8; 4] = [0x7f, b'E', b'L', b'F'];
/// `ELFCLASS64` (byte `EI_CLASS` = 4 of `e_ident`). Source: glibc `elf.h`.
pub const ELFCLASS64: u8 = 2;
/// `PN_XNUM`: `e_phnum` value meaning "too many to count here" (the real count is in section header 0). Source:
/// glibc `elf.h`. Loaded objects never use it; it is rejected.
pub const PN_XNUM: u16 = 0xffff;

fn u16_at(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_ne_bytes(b.get(at..at.checked_add(2)?)?.try_into().ok()?))
}

fn u32_at(b: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_ne_bytes(b.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

fn u64_at(b: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_ne_bytes(b.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

/// One program header (the fields the image lists need), decoded from `Elf64_Phdr`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Phdr {
    /// `p_type`.
    pub p_type: u32,
    /// `p_flags`.
    pub p_flags: u32,
    /// `p_vaddr`: link-time virtual address.
    pub p_vaddr: u64,
    /// `p_memsz`: size in memory, bytes.
    pub p_memsz: u64,
    /// `p_align`: alignment, bytes.
    pub p_align: u64,
}

impl Phdr {
    /// Decodes an `Elf64_Phdr` (native endianness; offsets: type 0, flags 4, vaddr 16, memsz 40, align 48).
    /// `None` when `b` is shorter than [`PHDR_SIZE`].
    pub fn parse(b: &[u8]) -> Option<Phdr> {
        if b.len() < PHDR_SIZE {
            return None;
        }
        Some(Phdr {
            p_type: u32_at(b, 0)?,
            p_flags: u32_at(b, 4)?,
            p_vaddr: u64_at(b, 16)?,
            p_memsz: u64_at(b, 40)?,
            p_align: u64_at(b, 48)?,
        })
    }
}

/// The fields of an `Elf64_Ehdr` needed to find the program headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ehdr {
    /// `e_phoff`: file offset of the program header table (also its offset from the header in memory, since
    /// the first `PT_LOAD` maps file offset 0).
    pub phoff: u64,
    /// `e_phnum`: number of program headers.
    pub phnum: u16,
}

impl Ehdr {
    /// Decodes and checks an ELF-64 header: magic, `ELFCLASS64`, `e_phentsize == 56`, `0 < e_phnum < PN_XNUM`.
    /// `None` when any check fails or `b` is shorter than [`EHDR_SIZE`].
    pub fn parse(b: &[u8]) -> Option<Ehdr> {
        if b.get(..4)? != ELF_MAGIC || *b.get(4)? != ELFCLASS64 || b.len() < EHDR_SIZE {
            return None;
        }
        let phoff = u64_at(b, 32)?;
        let phentsize = u16_at(b, 54)?;
        let phnum = u16_at(b, 56)?;
        if usize::from(phentsize) != PHDR_SIZE || phnum == 0 || phnum == PN_XNUM {
            return None;
        }
        Some(Ehdr { phoff, phnum })
    }
}

/// What both image lists record about one object, accumulated over its program headers.
///
/// The rules (the install snapshot's since it was written, kept identical for the crash-time list): the load
/// address is `bias + lowest PT_LOAD p_vaddr` rounded down to that segment's `p_align`; the text size runs from
/// there to the end (`p_vaddr + p_memsz`) of the highest executable `PT_LOAD`; `.eh_frame_hdr` is
/// `(bias + p_vaddr, p_memsz)` of `PT_GNU_EH_FRAME`; the dynamic section is `bias + p_vaddr` of `PT_DYNAMIC`.
/// Address arithmetic wraps (addresses are modulo 2^64, as the loader computes them); sizes saturate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PhdrSummary {
    lo: u64,
    text_end: u64,
    /// `.eh_frame_hdr` at runtime (address, size); `(0, 0)` without `PT_GNU_EH_FRAME`.
    pub eh_frame_hdr: (u64, u64),
    /// Runtime address of the dynamic section (`None` without `PT_DYNAMIC`).
    pub dynamic: Option<u64>,
    /// `PT_NOTE` segments seen.
    pub notes: usize,
}

impl Default for PhdrSummary {
    fn default() -> Self {
        PhdrSummary { lo: u64::MAX, text_end: 0, eh_frame_hdr: (0, 0), dynamic: None, notes: 0 }
    }
}

impl PhdrSummary {
    /// Adds one program header of an object loaded with load bias `bias`.
    pub fn add(&mut self, ph: &Phdr, bias: u64) {
        match ph.p_type {
            PT_GNU_EH_FRAME => self.eh_frame_hdr = (bias.wrapping_add(ph.p_vaddr), ph.p_memsz),
            PT_DYNAMIC => self.dynamic = Some(bias.wrapping_add(ph.p_vaddr)),
            PT_NOTE => self.notes = self.notes.saturating_add(1),
            PT_LOAD => {
                let mask = !ph.p_align.max(1).wrapping_sub(1);
                self.lo = self.lo.min(ph.p_vaddr & mask);
                if ph.p_flags & PF_X != 0 {
                    self.text_end = self.text_end.max(ph.p_vaddr.saturating_add(ph.p_memsz));
                }
            }
            _ => {}
        }
    }

    /// Lowest `PT_LOAD` address at link time (rounded down to its alignment); `None` without `PT_LOAD`.
    pub fn lowest_vaddr(&self) -> Option<u64> {
        (self.lo != u64::MAX).then_some(self.lo)
    }

    /// `(load address, text size)` for load bias `bias`; `None` without `PT_LOAD`.
    pub fn load_and_size(&self, bias: u64) -> Option<(u64, u64)> {
        let lo = self.lowest_vaddr()?;
        Some((bias.wrapping_add(lo), self.text_end.saturating_sub(lo)))
    }

    /// The unwind tables this object declares.
    pub fn unwind(&self) -> UnwindSections {
        UnwindSections { eh_frame_hdr: self.eh_frame_hdr, ..UnwindSections::default() }
    }
}

/// Finds the GNU build id in an ELF note area (`Elf64_Nhdr` records: namesz, descsz, type, name, desc, each
/// padded to `align` bytes, 4 or 8; any other `align` is taken as 4). Pure; bounds-checked; signal-safe. `None`
/// when no complete `NT_GNU_BUILD_ID` note with owner `"GNU"` lies inside `notes`.
pub fn find_build_id(notes: &[u8], align: usize) -> Option<&[u8]> {
    let align = if align == 8 { 8usize } else { 4 };
    let pad = |n: usize| n.checked_next_multiple_of(align);
    let mut off = 0usize;
    // Every iteration advances `off` by at least the 12-byte header, so this ends; the bound is belt and braces.
    for _ in 0..notes.len() {
        let name_at = off.checked_add(12)?;
        if name_at > notes.len() {
            return None;
        }
        let namesz = u32_at(notes, off)? as usize;
        let descsz = u32_at(notes, off.checked_add(4)?)? as usize;
        let ntype = u32_at(notes, off.checked_add(8)?)?;
        let desc_at = name_at.checked_add(pad(namesz)?)?;
        let next = desc_at.checked_add(pad(descsz)?)?;
        if ntype == NT_GNU_BUILD_ID && notes.get(name_at..name_at.checked_add(namesz)?) == Some(b"GNU\0") {
            return notes.get(desc_at..desc_at.checked_add(descsz)?);
        }
        if next <= off {
            return None;
        }
        off = next;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn note(name: &[u8], ty: u32, desc: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&(name.len() as u32).to_ne_bytes());
        v.extend_from_slice(&(desc.len() as u32).to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(name);
        v.resize(v.len().div_ceil(4) * 4, 0);
        v.extend_from_slice(desc);
        v.resize(v.len().div_ceil(4) * 4, 0);
        v
    }

    #[test]
    fn build_id_after_other_notes() {
        let id: Vec<u8> = (1..=20).collect();
        let notes = [note(b"GNU\0", 1, &[0; 16]), note(b"Go\0", 4, b"xyz"), note(b"GNU\0", 3, &id)].concat();
        assert_eq!(find_build_id(&notes, 4), Some(&id[..]));
        assert_eq!(find_build_id(&notes[..notes.len() - 4], 4), None);
        assert_eq!(find_build_id(&[0xff; 12], 4), None);
        assert_eq!(find_build_id(&[], 4), None);
        // Sizes near u32::MAX must not overflow or panic.
        let mut huge = note(b"GNU\0", 3, &id);
        huge[0..4].copy_from_slice(&u32::MAX.to_ne_bytes());
        assert_eq!(find_build_id(&huge, 4), None);
        huge[0..4].copy_from_slice(&4u32.to_ne_bytes());
        huge[4..8].copy_from_slice(&(u32::MAX - 2).to_ne_bytes());
        assert_eq!(find_build_id(&huge, 8), None);
    }

    fn phdr(p_type: u32, p_flags: u32, p_vaddr: u64, p_memsz: u64, p_align: u64) -> Phdr {
        Phdr { p_type, p_flags, p_vaddr, p_memsz, p_align }
    }

    #[test]
    fn summary_rules() {
        let mut s = PhdrSummary::default();
        assert_eq!(s.load_and_size(0x1000), None);
        s.add(&phdr(PT_LOAD, 4, 0x400040, 0x1000, 0x1000), 0x10_0000);
        s.add(&phdr(PT_LOAD, 5, 0x401000, 0x2345, 0x1000), 0x10_0000);
        s.add(&phdr(PT_LOAD, 6, 0x404000, 0x100, 0x1000), 0x10_0000);
        s.add(&phdr(PT_DYNAMIC, 6, 0x404010, 0x80, 8), 0x10_0000);
        s.add(&phdr(PT_GNU_EH_FRAME, 4, 0x402000, 0x44, 4), 0x10_0000);
        s.add(&phdr(PT_NOTE, 4, 0x400300, 0x24, 4), 0x10_0000);
        assert_eq!(s.lowest_vaddr(), Some(0x400000));
        assert_eq!(s.load_and_size(0x10_0000), Some((0x500000, 0x3345)));
        assert_eq!(s.dynamic, Some(0x504010));
        assert_eq!(s.unwind().eh_frame_hdr, (0x502000, 0x44));
        assert_eq!(s.notes, 1);
        // Garbage never panics.
        s.add(&phdr(PT_LOAD, PF_X, u64::MAX, u64::MAX, 0), u64::MAX);
        s.add(&phdr(PT_LOAD, PF_X, 3, 1, 3), u64::MAX);
    }

    #[test]
    fn headers_are_checked() {
        let mut e = [0u8; EHDR_SIZE];
        e[..4].copy_from_slice(&ELF_MAGIC);
        e[4] = ELFCLASS64;
        e[32..40].copy_from_slice(&64u64.to_ne_bytes());
        e[54..56].copy_from_slice(&56u16.to_ne_bytes());
        e[56..58].copy_from_slice(&9u16.to_ne_bytes());
        assert_eq!(Ehdr::parse(&e), Some(Ehdr { phoff: 64, phnum: 9 }));
        assert_eq!(Ehdr::parse(&e[..63]), None);
        let mut bad = e;
        bad[4] = 1;
        assert_eq!(Ehdr::parse(&bad), None, "ELFCLASS32");
        let mut bad = e;
        bad[54] = 32;
        assert_eq!(Ehdr::parse(&bad), None, "e_phentsize");
        let mut bad = e;
        bad[56..58].copy_from_slice(&PN_XNUM.to_ne_bytes());
        assert_eq!(Ehdr::parse(&bad), None, "PN_XNUM");
        let mut bad = e;
        bad[0] = 0;
        assert_eq!(Ehdr::parse(&bad), None, "magic");
        let mut p = [0u8; PHDR_SIZE];
        p[0..4].copy_from_slice(&PT_LOAD.to_ne_bytes());
        p[4..8].copy_from_slice(&5u32.to_ne_bytes());
        p[16..24].copy_from_slice(&0x1000u64.to_ne_bytes());
        p[40..48].copy_from_slice(&0x2000u64.to_ne_bytes());
        p[48..56].copy_from_slice(&0x1000u64.to_ne_bytes());
        assert_eq!(Phdr::parse(&p), Some(phdr(PT_LOAD, 5, 0x1000, 0x2000, 0x1000)));
        assert_eq!(Phdr::parse(&p[..55]), None);
    }
}
