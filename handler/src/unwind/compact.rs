//! Apple compact unwind (`__TEXT,__unwind_info`), read through the [`MemoryReader`] without allocating: the table
//! lookup for a pc, and one unwind step for the arm64 and x86-64 encodings, with the `UNWIND_*_MODE_DWARF` entries
//! handed to the DWARF evaluator ([`super::cfi::step_fde`]) at the FDE they name in `__TEXT,__eh_frame`.
//!
//! Format (`<mach-o/compact_unwind_encoding.h>`, as LLVM's libunwind and ld64 read and write it; all fields
//! little-endian, offsets relative to the start of the section unless said otherwise):
//!
//! - header (28 bytes): `version` (1), `commonEncodingsArraySectionOffset`, `commonEncodingsArrayCount`,
//!   `personalityArraySectionOffset`, `personalityArrayCount`, `indexSectionOffset`, `indexCount` (u32 each);
//! - first-level index (`indexCount` × 12 bytes, sorted): `functionOffset` (from the image's Mach-O header),
//!   `secondLevelPagesSectionOffset`, `lsdaIndexArraySectionOffset`; the last entry is a sentinel whose
//!   `functionOffset` ends the covered range;
//! - a second-level page, `kind` first: `UNWIND_SECOND_LEVEL_REGULAR` (2: `entryPageOffset` u16, `entryCount` u16,
//!   then `(functionOffset u32, encoding u32)` pairs) or `UNWIND_SECOND_LEVEL_COMPRESSED` (3: `entryPageOffset`,
//!   `entryCount`, `encodingsPageOffset`, `encodingsCount` (u16 each), then u32 entries: low 24 bits the function's
//!   offset from the first-level entry's `functionOffset`, high 8 bits an encoding index: below
//!   `commonEncodingsArrayCount` into the common array, else into the page's own array). Page offsets are relative
//!   to the page.
//!
//! An encoding of 0 means "no unwind information" ([`Miss::NoEntry`]: the walker falls back to the frame pointer).
//! Like every compact-unwind reader, a step is right only once the function's prologue has run (the encoding
//! describes the body): a crash inside a prologue may unwind wrongly, and the walker's plausibility checks (stack
//! bounds, increasing sp, a believable return address for frame-pointer and scan steps) still apply.

use super::cfi::{self, Context, Miss, RuleCache, Step};
use super::regs::{ArchSpec, UnwindRegs};
use super::{MemoryReader, Module};

/// `UNWIND_SECOND_LEVEL_REGULAR` (compact_unwind_encoding.h).
pub const SECOND_LEVEL_REGULAR: u32 = 2;
/// `UNWIND_SECOND_LEVEL_COMPRESSED` (compact_unwind_encoding.h).
pub const SECOND_LEVEL_COMPRESSED: u32 = 3;

/// Mode bits of an encoding (`UNWIND_ARM64_MODE_MASK`, `UNWIND_X86_64_MODE_MASK`).
pub const MODE_MASK: u32 = 0x0F00_0000;
/// `UNWIND_ARM64_MODE_FRAMELESS`: no frame record; `lr` holds the return address; the stack size is
/// `16 × bits 12..23`.
pub const ARM64_MODE_FRAMELESS: u32 = 0x0200_0000;
/// `UNWIND_ARM64_MODE_DWARF`: the low 24 bits are the FDE's offset in `__eh_frame`.
pub const ARM64_MODE_DWARF: u32 = 0x0300_0000;
/// `UNWIND_ARM64_MODE_FRAME`: a standard frame record at `fp`; the pairs named by the low bits are saved below it.
pub const ARM64_MODE_FRAME: u32 = 0x0400_0000;
/// `UNWIND_X86_64_MODE_RBP_FRAME`: `push rbp; mov rbp, rsp`; saved registers at `rbp − 8 × offset`.
pub const X86_64_MODE_RBP_FRAME: u32 = 0x0100_0000;
/// `UNWIND_X86_64_MODE_STACK_IMMD`: frameless, stack size `8 × bits 16..23` (return address included).
pub const X86_64_MODE_STACK_IMMD: u32 = 0x0200_0000;
/// `UNWIND_X86_64_MODE_STACK_IND`: frameless, stack size read from the `sub` instruction's immediate at
/// `function start + bits 16..23`, plus `8 × bits 13..15`.
pub const X86_64_MODE_STACK_IND: u32 = 0x0300_0000;
/// `UNWIND_X86_64_MODE_DWARF`: the low 24 bits are the FDE's offset in `__eh_frame`.
pub const X86_64_MODE_DWARF: u32 = 0x0400_0000;
/// `UNWIND_ARM64_DWARF_SECTION_OFFSET` / `UNWIND_X86_64_DWARF_SECTION_OFFSET`.
pub const DWARF_SECTION_OFFSET: u32 = 0x00FF_FFFF;

/// Most first-level entries searched (a real table has one per 4 KiB page of entries: far fewer).
const MAX_INDEX: u32 = 1 << 20;
/// Most entries in one second-level page (a page is 4 KiB: at most 1021 compressed entries).
const MAX_PAGE_ENTRIES: u32 = 4096;

/// The compact-unwind entry covering a pc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry {
    /// First byte of the function (runtime address).
    pub start: u64,
    /// One past its last byte: the next entry's start, or the end of the table's range.
    pub end: u64,
    /// The 32-bit encoding (`compact_unwind_encoding_t`).
    pub encoding: u32,
}

fn read_u32<M: MemoryReader + ?Sized>(mem: &mut M, addr: u64) -> Result<u32, Miss> {
    let mut b = [0u8; 4];
    mem.read(addr, &mut b).then(|| u32::from_le_bytes(b)).ok_or(Miss::Bad)
}

fn read_u16<M: MemoryReader + ?Sized>(mem: &mut M, addr: u64) -> Result<u16, Miss> {
    let mut b = [0u8; 2];
    mem.read(addr, &mut b).then(|| u16::from_le_bytes(b)).ok_or(Miss::Bad)
}

fn at(base: u64, off: u64) -> Result<u64, Miss> {
    base.checked_add(off).ok_or(Miss::Bad)
}

/// The last index in `0..count` whose key (`key(i)`) is at or below `target`; `None` when even the first is above.
fn last_at_or_below<M: MemoryReader + ?Sized>(
    mem: &mut M,
    count: u32,
    target: u32,
    mut key: impl FnMut(&mut M, u32) -> Result<u32, Miss>,
) -> Result<Option<u32>, Miss> {
    let (mut lo, mut hi) = (0u32, count);
    // Invariant: every index below `lo` has key <= target; every index at or above `hi` has key > target.
    while lo < hi {
        let mid = lo.saturating_add(hi.saturating_sub(lo) / 2);
        if key(mem, mid)? <= target {
            lo = mid.saturating_add(1);
        } else {
            hi = mid;
        }
    }
    Ok(lo.checked_sub(1))
}

/// Finds the entry of `__unwind_info` at `info` covering `pc` in the image whose Mach-O header is at
/// `image_base` (the table's function offsets are relative to it).
///
/// # Errors
/// [`Miss::NoTable`] for a version other than 1; [`Miss::NoEntry`] when no function of the table holds `pc`;
/// [`Miss::Bad`] for unreadable or inconsistent tables.
pub fn lookup<M: MemoryReader + ?Sized>(mem: &mut M, info: u64, image_base: u64, pc: u64) -> Result<Entry, Miss> {
    if info == 0 {
        return Err(Miss::NoTable);
    }
    let rel = pc.checked_sub(image_base).ok_or(Miss::NoEntry)?;
    let target = u32::try_from(rel).map_err(|_| Miss::NoEntry)?;
    if read_u32(mem, info)? != 1 {
        return Err(Miss::NoTable);
    }
    let common_off = u64::from(read_u32(mem, at(info, 4)?)?);
    let common_count = read_u32(mem, at(info, 8)?)?;
    let index_off = u64::from(read_u32(mem, at(info, 20)?)?);
    let index_count = read_u32(mem, at(info, 24)?)?;
    if !(2..=MAX_INDEX).contains(&index_count) {
        return Err(Miss::NoEntry);
    }
    let index = at(info, index_off)?;
    let first_key = |mem: &mut M, i: u32| read_u32(mem, at(index, u64::from(i).saturating_mul(12))?);
    let Some(i) = last_at_or_below(mem, index_count, target, first_key)? else { return Err(Miss::NoEntry) };
    let last = index_count.saturating_sub(1);
    if i >= last {
        return Err(Miss::NoEntry); // at or past the sentinel
    }
    let entry = at(index, u64::from(i).saturating_mul(12))?;
    let first_func = read_u32(mem, entry)?;
    let page_off = read_u32(mem, at(entry, 4)?)?;
    let next_first = read_u32(mem, at(entry, 12)?)?;
    if page_off == 0 {
        return Err(Miss::NoEntry);
    }
    let page = at(info, u64::from(page_off))?;
    let kind = read_u32(mem, page)?;
    let entries = at(page, u64::from(read_u16(mem, at(page, 4)?)?))?;
    let count = u32::from(read_u16(mem, at(page, 6)?)?);
    if count == 0 || count > MAX_PAGE_ENTRIES {
        return Err(Miss::NoEntry);
    }
    let (func, encoding, end) = match kind {
        SECOND_LEVEL_REGULAR => {
            let key = |mem: &mut M, j: u32| read_u32(mem, at(entries, u64::from(j).saturating_mul(8))?);
            let Some(j) = last_at_or_below(mem, count, target, key)? else { return Err(Miss::NoEntry) };
            let e = at(entries, u64::from(j).saturating_mul(8))?;
            let end = if j.saturating_add(1) < count { read_u32(mem, at(e, 8)?)? } else { next_first };
            (read_u32(mem, e)?, read_u32(mem, at(e, 4)?)?, end)
        }
        SECOND_LEVEL_COMPRESSED => {
            let enc_off = u64::from(read_u16(mem, at(page, 8)?)?);
            let enc_count = u32::from(read_u16(mem, at(page, 10)?)?);
            let func_of = |mem: &mut M, j: u32| -> Result<u32, Miss> {
                let raw = read_u32(mem, at(entries, u64::from(j).saturating_mul(4))?)?;
                first_func.checked_add(raw & 0x00FF_FFFF).ok_or(Miss::Bad)
            };
            let Some(j) = last_at_or_below(mem, count, target, func_of)? else { return Err(Miss::NoEntry) };
            let raw = read_u32(mem, at(entries, u64::from(j).saturating_mul(4))?)?;
            let end = if j.saturating_add(1) < count { func_of(mem, j.saturating_add(1))? } else { next_first };
            let idx = raw >> 24;
            let encoding = if idx < common_count {
                read_u32(mem, at(info, common_off.saturating_add(u64::from(idx).saturating_mul(4)))?)?
            } else {
                let k = idx.saturating_sub(common_count);
                if k >= enc_count {
                    return Err(Miss::Bad);
                }
                read_u32(mem, at(page, enc_off.saturating_add(u64::from(k).saturating_mul(4)))?)?
            };
            (first_func.checked_add(raw & 0x00FF_FFFF).ok_or(Miss::Bad)?, encoding, end)
        }
        _ => return Err(Miss::Bad),
    };
    if target >= end {
        return Err(Miss::NoEntry);
    }
    if encoding == 0 {
        return Err(Miss::NoEntry);
    }
    Ok(Entry { start: at(image_base, u64::from(func))?, end: at(image_base, u64::from(end))?, encoding })
}

/// x86-64 compact register numbers (`UNWIND_X86_64_REG_*`: 1 `rbx`, 2 `r12`, 3 `r13`, 4 `r14`, 5 `r15`,
/// 6 `rbp`) → DWARF numbers; 0 (`UNWIND_X86_64_REG_NONE`) has none.
fn x86_64_dwarf(reg: u32) -> Option<u16> {
    match reg {
        1 => Some(3),
        2 => Some(12),
        3 => Some(13),
        4 => Some(14),
        5 => Some(15),
        6 => Some(6),
        _ => None,
    }
}

/// Decodes the frameless encodings' register permutation (`UNWIND_X86_64_FRAMELESS_STACK_REG_PERMUTATION`, a
/// Lehmer code over the six saved-register numbers) into the compact register numbers in the order they sit on the
/// stack, lowest address first (the last push first). `None` for a count above 6 or a permutation out of range.
pub fn x86_64_permutation(count: u32, mut perm: u32) -> Option<[u32; 6]> {
    // Radices of the digits for each count: digit i selects among the (6 − i) registers not used yet.
    let mut digits = [0u32; 6];
    let n = usize::try_from(count).ok().filter(|n| *n <= 6)?;
    // The place value of digit i is (5 − i)! / (6 − n)!: the number of ways to fill the remaining places.
    for (i, d) in digits.iter_mut().enumerate().take(n) {
        let remaining = n.checked_sub(i)?.checked_sub(1)?; // places after this one
        let mut place = 1u32;
        for k in 0..remaining {
            // (6 − i − 1 − k) choices for each later place
            place = place.checked_mul(u32::try_from(5usize.checked_sub(i)?.checked_sub(k)?).ok()?)?;
        }
        *d = perm.checked_div(place)?;
        perm = perm.checked_rem(place)?;
    }
    let mut used = [false; 7];
    let mut out = [0u32; 6];
    for (slot, digit) in out.iter_mut().zip(digits).take(n) {
        let mut rank = 0u32;
        let mut found = None;
        for (reg, u) in used.iter_mut().enumerate().skip(1) {
            if *u {
                continue;
            }
            if rank == digit {
                *u = true;
                found = Some(reg);
                break;
            }
            rank = rank.saturating_add(1);
        }
        *slot = u32::try_from(found?).ok()?;
    }
    Some(out)
}

/// arm64 pairs saved by a `FRAME` or `FRAMELESS` encoding, in the order they sit below the frame (bit, first
/// register's DWARF number; `d8..d15` are tracked by position only: the walker keeps no vector registers).
const ARM64_PAIRS: [(u32, Option<u16>); 9] = [
    (0x1, Some(19)),
    (0x2, Some(21)),
    (0x4, Some(23)),
    (0x8, Some(25)),
    (0x10, Some(27)),
    (0x100, None),
    (0x200, None),
    (0x400, None),
    (0x800, None),
];

/// Restores the arm64 pairs of `encoding` from the words below `top` (the first register of each pair at
/// `top − 8`, its partner at `top − 16`, then the next pair); returns the address below the last pair.
fn arm64_restore_pairs<M: MemoryReader + ?Sized>(
    mem: &mut M,
    encoding: u32,
    top: u64,
    next: &mut UnwindRegs,
) -> Result<u64, Miss> {
    let mut loc = top;
    for (bit, first) in ARM64_PAIRS {
        if encoding & bit == 0 {
            continue;
        }
        let a = loc.checked_sub(8).ok_or(Miss::Unusable)?;
        let b = loc.checked_sub(16).ok_or(Miss::Unusable)?;
        if let Some(r) = first {
            next.set(r, mem.read_u64(a).ok_or(Miss::Unusable)?);
            next.set(r.saturating_add(1), mem.read_u64(b).ok_or(Miss::Unusable)?);
        }
        loc = b;
    }
    Ok(loc)
}

fn caller(regs: UnwindRegs, cfa: u64) -> Step {
    Step::Caller { regs, cfa, signal_frame: false }
}

/// One unwind step by compact unwind for the frame whose registers are `regs`, in image `module` (its
/// `unwind.compact` table; `unwind.eh_frame` for DWARF-mode entries). `lookup_pc` as for [`cfi::step`].
/// `lr_live`: `regs` hold the thread's real link register (frame 0, or the frame interrupted by a signal), which a
/// frameless arm64 function still returns through; for any other frame its value is unknown.
///
/// # Errors
/// The [`Miss`] of the lookup, [`Miss::Unusable`] when a needed register or stack word is unknown or unreadable.
#[allow(clippy::too_many_arguments)]
pub fn step<M: MemoryReader + ?Sized>(
    arch: &ArchSpec,
    mem: &mut M,
    ctx: &mut Context,
    cache: &mut RuleCache,
    module: &Module,
    regs: &UnwindRegs,
    lookup_pc: u64,
    lr_live: bool,
) -> Result<Step, Miss> {
    let info = module.unwind.compact.0;
    let entry = lookup(mem, info, module.start, lookup_pc)?;
    let enc = entry.encoding;
    let mode = enc & MODE_MASK;
    let sp = regs.get(arch.sp).ok_or(Miss::Unusable)?;
    let mut next = *regs;
    next.keep_only(arch.callee_saved);
    if arch.link_register {
        match mode {
            ARM64_MODE_FRAME => {
                let fp = regs.get(arch.fp).ok_or(Miss::Unusable)?;
                arm64_restore_pairs(mem, enc, fp, &mut next)?;
                let cfa = fp.checked_add(16).ok_or(Miss::Unusable)?;
                next.set(arch.fp, mem.read_u64(fp).ok_or(Miss::Unusable)?);
                next.set(arch.pc, mem.read_u64(fp.checked_add(8).ok_or(Miss::Unusable)?).ok_or(Miss::Unusable)?);
                next.set(arch.sp, cfa);
                Ok(caller(next, cfa))
            }
            ARM64_MODE_FRAMELESS => {
                if !lr_live {
                    return Err(Miss::Unusable);
                }
                let lr = regs.get(arch.ra).ok_or(Miss::Unusable)?;
                let size = ((enc >> 12) & 0xFFF).saturating_mul(16);
                let cfa = sp.checked_add(u64::from(size)).ok_or(Miss::Unusable)?;
                arm64_restore_pairs(mem, enc, cfa, &mut next)?;
                next.set(arch.pc, lr);
                next.set(arch.sp, cfa);
                Ok(caller(next, cfa))
            }
            ARM64_MODE_DWARF => dwarf(arch, mem, ctx, cache, module, enc, regs, lookup_pc),
            _ => Err(Miss::Bad),
        }
    } else {
        match mode {
            X86_64_MODE_RBP_FRAME => {
                let rbp = regs.get(arch.fp).ok_or(Miss::Unusable)?;
                let offset = u64::from((enc >> 16) & 0xFF);
                let mut loc = rbp.checked_sub(offset.saturating_mul(8)).ok_or(Miss::Unusable)?;
                let mut saved = enc & 0x7FFF;
                for _ in 0..5 {
                    if let Some(r) = x86_64_dwarf(saved & 7) {
                        next.set(r, mem.read_u64(loc).ok_or(Miss::Unusable)?);
                    }
                    loc = loc.checked_add(8).ok_or(Miss::Unusable)?;
                    saved >>= 3;
                }
                let cfa = rbp.checked_add(16).ok_or(Miss::Unusable)?;
                next.set(arch.fp, mem.read_u64(rbp).ok_or(Miss::Unusable)?);
                next.set(arch.pc, mem.read_u64(rbp.checked_add(8).ok_or(Miss::Unusable)?).ok_or(Miss::Unusable)?);
                next.set(arch.sp, cfa);
                Ok(caller(next, cfa))
            }
            X86_64_MODE_STACK_IMMD | X86_64_MODE_STACK_IND => {
                let field = (enc >> 16) & 0xFF;
                let size = if mode == X86_64_MODE_STACK_IMMD {
                    u64::from(field).saturating_mul(8)
                } else {
                    let imm = read_u32(mem, at(entry.start, u64::from(field))?).map_err(|_| Miss::Unusable)?;
                    u64::from(imm).saturating_add(u64::from((enc >> 13) & 7).saturating_mul(8))
                };
                let count = (enc >> 10) & 7;
                let order = x86_64_permutation(count, enc & 0x3FF).ok_or(Miss::Bad)?;
                // The return address is the top word of the frame; the saved registers sit right below it, first
                // push highest.
                let ret_slot = sp.checked_add(size).and_then(|v| v.checked_sub(8)).ok_or(Miss::Unusable)?;
                let mut loc = ret_slot.checked_sub(u64::from(count).saturating_mul(8)).ok_or(Miss::Unusable)?;
                for reg in order.iter().take(usize::try_from(count).unwrap_or(0)) {
                    let r = x86_64_dwarf(*reg).ok_or(Miss::Bad)?;
                    next.set(r, mem.read_u64(loc).ok_or(Miss::Unusable)?);
                    loc = loc.checked_add(8).ok_or(Miss::Unusable)?;
                }
                let cfa = ret_slot.checked_add(8).ok_or(Miss::Unusable)?;
                next.set(arch.pc, mem.read_u64(ret_slot).ok_or(Miss::Unusable)?);
                next.set(arch.sp, cfa);
                Ok(caller(next, cfa))
            }
            X86_64_MODE_DWARF => dwarf(arch, mem, ctx, cache, module, enc, regs, lookup_pc),
            _ => Err(Miss::Bad),
        }
    }
}

/// A DWARF-mode entry: evaluates the FDE at `__eh_frame + (encoding & DWARF_SECTION_OFFSET)`.
#[allow(clippy::too_many_arguments)]
fn dwarf<M: MemoryReader + ?Sized>(
    arch: &ArchSpec,
    mem: &mut M,
    ctx: &mut Context,
    cache: &mut RuleCache,
    module: &Module,
    enc: u32,
    regs: &UnwindRegs,
    lookup_pc: u64,
) -> Result<Step, Miss> {
    let (eh, size) = module.unwind.eh_frame;
    let off = u64::from(enc & DWARF_SECTION_OFFSET);
    if eh == 0 || (size != 0 && off >= size) {
        return Err(Miss::NoTable);
    }
    cfi::step_fde(arch, mem, ctx, cache, (module.unwind.compact.0, 0), at(eh, off)?, regs, lookup_pc)
}
