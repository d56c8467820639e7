//! DWARF call-frame information from `.eh_frame_hdr` / `.eh_frame`, read through the [`MemoryReader`] and evaluated
//! with `gimli` without allocating.
//!
//! Lookup (LSB 5.0 §10.6.2 "The .eh_frame_hdr section"): the header's binary-search table of `(initial location,
//! FDE address)` pairs, encoded `DW_EH_PE_datarel | DW_EH_PE_sdata4` (relative to the header) by every linker that
//! writes one, is searched for the last entry at or below the pc (by interpolation, reading few blocks of a large
//! table: [`find_fde`]). The FDE and its CIE are then copied, bounded, into a local buffer (CIE first, FDE after
//! it, the FDE's CIE pointer rewritten to point back to offset 0) and parsed and evaluated by gimli from there,
//! with base addresses that make the FDE's pc-relative fields decode to their real runtime values. Nothing is read
//! from the image by a plain load: an image unloaded meanwhile is just unreadable.
//! gimli's row storage is a fixed-size [`StoreOnStack`]; nothing here allocates, locks or panics.
//!
//! A row is a pure function of the code at a pc, the same for every thread: rows made only of register-and-offset
//! rules (nearly all of them) are kept, reduced to a [`Row`], in a crash-wide [`RuleCache`], so the threads of a
//! pool parked in the same code cost one table search and one gimli evaluation per distinct pc, then two or three
//! stack reads per frame (what framehop's rule cache does for profilers).

use super::expr;
use super::regs::{ArchSpec, UnwindRegs, NREGS};
use super::MemoryReader;
use gimli::{
    BaseAddresses, CfaRule, EhFrame, EhFrameOffset, NativeEndian, Register, RegisterRule, UnwindContext,
    UnwindContextStorage, UnwindSection, UnwindTableRow,
};

/// Largest CIE copied, bytes (CIEs are a few dozen bytes).
pub const MAX_CIE: usize = 512;
/// Largest FDE copied, bytes (a long function with many pushes and pops has a few hundred).
pub const MAX_FDE: usize = 3584;

/// gimli's unwind-row storage without heap: 64 register rules a row (arm64 functions name x19..x30 and d8..d15),
/// 4 remembered states (`DW_CFA_remember_state` nesting). A CFI program that needs more fails to evaluate, and the
/// walker falls back to the frame pointer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreOnStack;

impl<T: gimli::ReaderOffset> UnwindContextStorage<T> for StoreOnStack {
    type Rules = [(Register, RegisterRule<T>); 64];
    type Stack = [UnwindTableRow<T, Self>; 4];
}

/// gimli's evaluation context for one walk (reused for every frame; 8.3 KiB on x86-64, kept on the walker's stack).
pub type Context = UnwindContext<usize, StoreOnStack>;

/// Why CFI gave no answer for a pc.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Miss {
    /// The image has no `.eh_frame_hdr`, or its table is in an encoding this reader does not search.
    NoTable,
    /// No FDE covers the pc.
    NoEntry,
    /// The header, FDE or CIE could not be read or parsed, or is larger than the copy buffers.
    Bad,
    /// The row's rules need a register whose value is unknown, or an unsupported rule or expression.
    Unusable,
}

/// The result of one CFI step.
// Boxing the large variant would allocate on the crash path; the size difference is a few hundred bytes of stack.
#[allow(clippy::large_enum_variant)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Step {
    /// The caller's registers (its pc is the return address, or the interrupted pc after a signal frame).
    Caller {
        /// The caller's registers.
        regs: UnwindRegs,
        /// The CFA (the caller's stack pointer at the call, bytes).
        cfa: u64,
        /// The frame just unwound was a signal trampoline (CIE augmentation `S`): the caller's pc is exact, not a
        /// return address, and its stack may be another one.
        signal_frame: bool,
    },
    /// The CFI marks the return address undefined: the outermost frame (`_start`, `clone3`, `start_thread`).
    End,
}

/// What [`step_into`] found; on [`Stepped::Caller`] the caller's registers are in its `out` argument. The walker's
/// form of [`Step`]: the register set (280 bytes) is written once, in place, instead of being moved through every
/// return value on its way to the walk (those copies were about a third of the crash-time walk's samples, profiled
/// at 256 threads parked 96 calls deep).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stepped {
    /// The caller's registers are in `out`.
    Caller {
        /// The CFA (the caller's stack pointer at the call, bytes).
        cfa: u64,
        /// The frame just unwound was a signal trampoline (see [`Step::Caller`]).
        signal_frame: bool,
    },
    /// The outermost frame (see [`Step::End`]); `out` is unspecified.
    End,
}

impl Stepped {
    /// The [`Step`] this is, with the caller's registers `regs` (what was written to `out`).
    fn with_regs(self, regs: UnwindRegs) -> Step {
        match self {
            Stepped::Caller { cfa, signal_frame } => Step::Caller { regs, cfa, signal_frame },
            Stepped::End => Step::End,
        }
    }
}

/// `DW_EH_PE_*` pointer encodings used by `.eh_frame_hdr`. Source: LSB 5.0 §10.5.1 (DWARF Exception Header
/// Encoding).
mod pe {
    pub const OMIT: u8 = 0xff;
    pub const UDATA4: u8 = 0x03;
    pub const SDATA4: u8 = 0x0b;
    pub const UDATA8: u8 = 0x04;
    pub const SDATA8: u8 = 0x0c;
    pub const PCREL: u8 = 0x10;
    pub const DATAREL: u8 = 0x30;
}

/// Reads an `.eh_frame_hdr` pointer encoded `enc` at `addr`: (value, bytes used). Supports absolute and pc-relative
/// 4- and 8-byte forms, which is what linkers emit for `eh_frame_ptr` and `fde_count`.
fn read_encoded<M: MemoryReader + ?Sized>(mem: &mut M, addr: u64, enc: u8) -> Option<(u64, u64)> {
    let (raw, len) = match enc & 0x0f {
        pe::UDATA4 => {
            let mut b = [0u8; 4];
            mem.read(addr, &mut b).then_some(())?;
            (u64::from(u32::from_le_bytes(b)), 4)
        }
        pe::SDATA4 => {
            let mut b = [0u8; 4];
            mem.read(addr, &mut b).then_some(())?;
            (i64::from(i32::from_le_bytes(b)) as u64, 4)
        }
        pe::UDATA8 | pe::SDATA8 => (mem.read_u64(addr)?, 8),
        _ => return None,
    };
    let value = match enc & 0x70 {
        0 => raw,
        pe::PCREL => addr.wrapping_add(raw),
        _ => return None,
    };
    Some((value, len))
}

/// Bytes of the table a probe is assumed to bring in at once: the block a caching reader fetches (the Linux
/// fault-proof reader reads whole 4 KiB blocks) and the smallest page. The search reads the entries around a probe
/// that lie in the same block before it reads another block.
const TABLE_BLOCK: u64 = 4096;

/// Most interpolation rounds before the search goes on by bisection (a table sorted as the format requires needs
/// one or two; the cap only bounds a table whose locations are far from even).
const MAX_INTERPOLATIONS: u32 = 8;

/// Finds the address of the FDE whose range may hold `pc` in the search table of the `.eh_frame_hdr` at `hdr`: the
/// last entry whose initial location is at or below the pc.
///
/// The table is sorted by initial location, and functions are spread fairly evenly over an image's code, so the
/// search interpolates: it guesses the entry from the pc's place between the locations at the range's ends and
/// reads the first and last entries of the guess's 4 KiB block (`TABLE_BLOCK`), one block read for a caching
/// reader; the answer is then either in that block (a bisection of its entries ends the search) or the block's
/// ends narrow the range for the next guess. A lookup in a table of many blocks reads about three blocks (the
/// header's, the last entry's, the guessed one), where a bisection reads one per halving: five or six in the
/// 68 KiB table of the benchmark binary, each a system call and often a page fault in a crash. After two guesses
/// in a row that do not halve the range, or `MAX_INTERPOLATIONS` guesses, it bisects. Termination does not
/// depend on the table being sorted: every round shrinks the range.
pub fn find_fde<M: MemoryReader + ?Sized>(mem: &mut M, hdr: u64, pc: u64) -> Result<u64, Miss> {
    let mut h = [0u8; 4];
    if !mem.read(hdr, &mut h) {
        return Err(Miss::Bad);
    }
    let [version, ptr_enc, count_enc, table_enc] = h;
    if version != 1 || count_enc == pe::OMIT || table_enc != (pe::DATAREL | pe::SDATA4) {
        return Err(Miss::NoTable);
    }
    let at = hdr.checked_add(4).ok_or(Miss::Bad)?;
    let (_, ptr_len) = read_encoded(mem, at, ptr_enc).ok_or(Miss::NoTable)?;
    let at = at.checked_add(ptr_len).ok_or(Miss::Bad)?;
    let (count, count_len) = read_encoded(mem, at, count_enc).ok_or(Miss::NoTable)?;
    let table = at.checked_add(count_len).ok_or(Miss::Bad)?;
    if count == 0 || count > (1 << 28) {
        return Err(Miss::NoEntry);
    }
    // Entries are (initial location, FDE) as i32 offsets from `hdr`. Find the last entry with location <= pc.
    let target = pc.wrapping_sub(hdr) as i64;
    let entry = |mem: &mut M, i: u64| -> Option<(i64, i64)> {
        let mut b = [0u8; 8];
        mem.read(table.checked_add(i.checked_mul(8)?)?, &mut b).then_some(())?;
        let (l, f) = b.split_at(4);
        Some((i64::from(i32::from_le_bytes(l.try_into().ok()?)), i64::from(i32::from_le_bytes(f.try_into().ok()?))))
    };
    let loc = |mem: &mut M, i: u64| entry(mem, i).map(|(l, _)| l).ok_or(Miss::Bad);
    let last = count.saturating_sub(1);
    let (first_loc, last_loc) = (loc(mem, 0)?, loc(mem, last)?);
    let found = if first_loc > target {
        return Err(Miss::NoEntry);
    } else if last_loc <= target {
        last
    } else {
        // Invariant: loc(lo) <= target < loc(hi), lo < hi; the answer is in lo..hi.
        let (mut lo, mut hi) = (0u64, last);
        let (mut lo_loc, mut hi_loc) = (first_loc, last_loc);
        let (mut rounds, mut slow) = (0u32, 0u32);
        while hi.saturating_sub(lo) > 1 {
            let width = hi.saturating_sub(lo);
            let inner = width.saturating_sub(1);
            let guess = if rounds < MAX_INTERPOLATIONS {
                rounds = rounds.saturating_add(1);
                // lo_loc <= target < hi_loc, so both differences are positive and the quotient is below `inner`.
                let num = u128::from(target.abs_diff(lo_loc)).saturating_mul(u128::from(inner));
                let step = num.checked_div(u128::from(hi_loc.abs_diff(lo_loc))).unwrap_or(0);
                lo.saturating_add(1)
                    .saturating_add(u64::try_from(step).unwrap_or(u64::MAX).min(inner.saturating_sub(1)))
            } else {
                lo.saturating_add(width / 2)
            };
            // The entries of the guess's block (the entries from its first whole one to its last, whose last bytes
            // may lie in the next block), within lo+1..=hi-1, the guess among them.
            let start = table.saturating_add(guess.saturating_mul(8)) & !(TABLE_BLOCK - 1);
            let end = start.saturating_add(TABLE_BLOCK);
            let b0 = start.saturating_sub(table).div_ceil(8).max(lo.saturating_add(1)).min(guess);
            let b1 = (end.saturating_sub(table) / 8).saturating_sub(1).min(hi.saturating_sub(1)).max(guess);
            let (l0, l1) = (loc(mem, b0)?, loc(mem, b1)?);
            if l0 > target {
                (hi, hi_loc) = (b0, l0);
            } else if l1 <= target {
                (lo, lo_loc) = (b1, l1);
            } else {
                // loc(b0) <= target < loc(b1): bisect b0..b1, entries of one block.
                (lo, hi) = (b0, b1);
                while hi.saturating_sub(lo) > 1 {
                    let mid = lo.saturating_add(hi.saturating_sub(lo) / 2);
                    if loc(mem, mid)? <= target {
                        lo = mid;
                    } else {
                        hi = mid;
                    }
                }
                break;
            }
            // Two guesses in a row that did not halve the range (a table far from even: code far away, cold
            // sections) end the guessing: bisection from here, so a skewed table costs a few reads more than
            // bisection, not up to MAX_INTERPOLATIONS more.
            if hi.saturating_sub(lo) > width / 2 {
                slow = slow.saturating_add(1);
                if slow >= 2 {
                    rounds = MAX_INTERPOLATIONS;
                }
            } else {
                slow = 0;
            }
        }
        lo
    };
    let (_, fde) = entry(mem, found).ok_or(Miss::Bad)?;
    Ok(hdr.wrapping_add(fde as u64))
}

/// Whether the CIE's initial instructions or the FDE's instructions contain `DW_CFA_undefined` for the
/// return-address column (bounded: at most 1024 instructions each).
fn marks_ra_undefined<R: gimli::Reader<Offset = usize>>(
    arch: &ArchSpec,
    eh: &EhFrame<R>,
    bases: &BaseAddresses,
    fde: &gimli::FrameDescriptionEntry<R>,
) -> bool {
    let hit = |i: &gimli::CallFrameInstruction<usize>| matches!(i, gimli::CallFrameInstruction::Undefined { register } if register.0 == arch.ra);
    let mut cie = fde.cie().instructions(eh, bases);
    for _ in 0..1024 {
        match cie.next() {
            Ok(Some(i)) if hit(&i) => return true,
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    let mut own = fde.instructions(eh, bases);
    for _ in 0..1024 {
        match own.next() {
            Ok(Some(i)) if hit(&i) => return true,
            Ok(Some(_)) => {}
            _ => break,
        }
    }
    false
}

/// Most register rules a kept [`Row`] holds (x86-64 rows name at most 8 registers, arm64 rows x19..x30: 12). Rows
/// with more are evaluated from the tables every time.
pub const MAX_RULES: usize = 16;

/// How a [`Row`] recovers one register of the caller (the DWARF rules without expressions, DWARF 5 §6.4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `undefined`: unknown in the caller (for the return-address column: the outermost frame).
    Undefined,
    /// `same value`: unchanged.
    Same,
    /// `offset(N)`: saved at CFA + N.
    Offset,
    /// `val_offset(N)`: the value is CFA + N.
    ValOffset,
    /// `register(R)`: in register R.
    Register,
    /// `architectural` and any rule this reader does not evaluate: unknown.
    Unknown,
}

/// One CFI row reduced to what [`step`] evaluates: CFA = register + offset, and up to [`MAX_RULES`] register rules
/// without expressions. Registers beyond [`super::regs::NREGS`] are left out (the walker keeps none of them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Row {
    cfa_reg: u8,
    cfa_off: i32,
    n: u8,
    reg: [u8; MAX_RULES],
    kind: [Kind; MAX_RULES],
    /// The offset (`Offset`, `ValOffset`) or the source register (`Register`).
    arg: [i32; MAX_RULES],
    /// The row names a rule for the return-address column.
    ra_rule: bool,
    /// No rule for the return-address column and the CIE or FDE program marks it `DW_CFA_undefined`.
    ra_undefined: bool,
    /// The row names a rule for the stack pointer.
    sp_rule: bool,
    /// The FDE's CIE has augmentation `S` (a signal trampoline).
    signal_frame: bool,
}

/// Rows already evaluated, by lookup pc, for one crash: every walk of the crash shares it. Preallocated at install;
/// [`RuleCache::clear`] at each crash.
///
/// Set-associative: a pc hashes to one of [`RuleCache::SETS`] sets and may live in any of its [`RuleCache::WAYS`]
/// slots; a full set replaces its slots round robin. Direct-mapped (one slot per hash), two of 40 return addresses
/// share a slot with probability 1 - e^(-40²/1024), about 0.8; each thread's walk then evaluated both again. A
/// build of the benchmark where that happened walked 256 threads in 2.30 ms, and in 1.73 ms with this cache (an A/B
/// of `bench __crash-ours`, not a run beside the peer; BENCHMARKS.md). `ondemand::fast`'s recipe cache is
/// set-associative the same way, with its own hash and front insertion instead of a victim per set.
#[derive(Clone, Copy, Debug)]
pub struct RuleCache {
    keys: [(u64, u64); RuleCache::SLOTS],
    rows: [Row; RuleCache::SLOTS],
    /// Per set: the way the next row stored into the full set replaces.
    victim: [u8; RuleCache::SETS],
}

impl RuleCache {
    /// Rows kept (32 distinct return addresses in each of 16 code paths).
    pub const SLOTS: usize = 512;

    /// Slots of a set.
    pub const WAYS: usize = 4;

    /// Sets: [`RuleCache::SLOTS`] / [`RuleCache::WAYS`] (a power of two: the top bits of the hash pick one).
    pub const SETS: usize = RuleCache::SLOTS / RuleCache::WAYS;

    /// Bits of the hash that pick the set (7).
    const SET_BITS: u32 = RuleCache::SETS.trailing_zeros();

    /// An empty cache (62 KiB).
    pub const EMPTY: RuleCache = RuleCache {
        keys: [(0, 0); RuleCache::SLOTS],
        rows: [Row::EMPTY; RuleCache::SLOTS],
        victim: [0; RuleCache::SETS],
    };

    /// Forgets every row (a new crash: images may have moved since the last one). Signal-safe.
    pub fn clear(&mut self) {
        for k in &mut self.keys {
            *k = (0, 0);
        }
    }

    /// The set of `pc`: the top 7 bits of a Fibonacci hash (Knuth, TAOCP vol. 3, 6.4), so nearby return addresses
    /// spread over the sets.
    fn set(pc: u64) -> usize {
        (pc.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> (u64::BITS - Self::SET_BITS)) as usize % Self::SETS
    }

    /// Index of the first slot of `pc`'s set.
    fn first(pc: u64) -> usize {
        Self::set(pc).saturating_mul(Self::WAYS)
    }

    /// The row kept for `(key, pc)` (`key`: the table the FDE was found through, as [`step`] and [`step_fde`] key
    /// it), for callers that evaluate cached rows themselves (`crate::ondemand`'s fast path).
    pub fn row(&self, key: u64, pc: u64) -> Option<&Row> {
        self.get(key, pc)
    }

    fn get(&self, hdr: u64, pc: u64) -> Option<&Row> {
        if hdr == 0 {
            return None;
        }
        let first = Self::first(pc);
        let i = (first..first.saturating_add(Self::WAYS)).find(|&i| self.keys.get(i) == Some(&(hdr, pc)))?;
        self.rows.get(i)
    }

    /// Stores `row` for `(hdr, pc)`: in the slot already holding that key, else in an empty slot of its set, else
    /// in the set's next victim.
    fn put(&mut self, hdr: u64, pc: u64, row: Row) {
        let set = Self::set(pc);
        let first = Self::first(pc);
        let free = (first..first.saturating_add(Self::WAYS))
            .find(|&i| self.keys.get(i).is_some_and(|&(h, p)| (h, p) == (hdr, pc) || h == 0));
        let i = free.unwrap_or_else(|| {
            let v = self.victim.get(set).map_or(0, |v| usize::from(*v) % Self::WAYS);
            if let Some(next) = self.victim.get_mut(set) {
                *next = (v.wrapping_add(1) % Self::WAYS) as u8;
            }
            first.saturating_add(v)
        });
        if let (Some(k), Some(r)) = (self.keys.get_mut(i), self.rows.get_mut(i)) {
            *k = (hdr, pc);
            *r = row;
        }
    }
}

/// Reads a CFI entry's length field at `addr`: total bytes of the entry (length field included). 64-bit DWARF
/// entries (length `0xffffffff`) and the zero terminator are refused.
fn entry_len<M: MemoryReader + ?Sized>(mem: &mut M, addr: u64, max: usize) -> Result<usize, Miss> {
    let mut b = [0u8; 4];
    if !mem.read(addr, &mut b) {
        return Err(Miss::Bad);
    }
    let len = u32::from_le_bytes(b);
    if len == 0 || len == u32::MAX {
        return Err(Miss::Bad);
    }
    let total = usize::try_from(len).map_err(|_| Miss::Bad)?.checked_add(4).ok_or(Miss::Bad)?;
    if total > max {
        return Err(Miss::Bad);
    }
    Ok(total)
}

/// A caller register's value as a row's rule gives it: a value, unknown, or (for the return-address column only)
/// "undefined", which ends the stack.
enum Recovered {
    Value(u64),
    Unknown,
    Undefined,
}

/// Read access for callers that evaluate a cached row themselves ([`RuleCache::row`]); [`step`] is the reference
/// evaluation.
impl Row {
    /// CFA = this DWARF register + this offset.
    pub fn cfa_rule(&self) -> (u16, i32) {
        (u16::from(self.cfa_reg), self.cfa_off)
    }

    /// The row names a rule for the return-address column.
    pub fn has_ra_rule(&self) -> bool {
        self.ra_rule
    }

    /// The return-address column is `DW_CFA_undefined` (the outermost frame).
    pub fn ra_is_undefined(&self) -> bool {
        self.ra_undefined
    }

    /// The row names a rule for the stack pointer.
    pub fn has_sp_rule(&self) -> bool {
        self.sp_rule
    }

    /// The FDE's CIE has augmentation `S` (a signal trampoline).
    pub fn is_signal_frame(&self) -> bool {
        self.signal_frame
    }
}

impl Row {
    /// A row with no rules (filled in by [`Row::reduce`]).
    const EMPTY: Row = Row {
        cfa_reg: 0,
        cfa_off: 0,
        n: 0,
        reg: [0; MAX_RULES],
        kind: [Kind::Unknown; MAX_RULES],
        arg: [0; MAX_RULES],
        ra_rule: false,
        ra_undefined: false,
        sp_rule: false,
        signal_frame: false,
    };

    /// The row gimli evaluated, reduced, or `None` when it has an expression, more than [`MAX_RULES`] rules
    /// about registers the walker keeps, or an offset beyond 32 bits.
    fn reduce(
        arch: &ArchSpec,
        row: &UnwindTableRow<usize, StoreOnStack>,
        ra_undefined: impl FnOnce() -> bool,
        signal_frame: bool,
    ) -> Option<Row> {
        let CfaRule::RegisterAndOffset { register, offset } = row.cfa() else { return None };
        // Not `RuleCache::EMPTY.rows[0]`: that would build the whole 62 KiB cache on the crash stack first.
        let mut out = Row::EMPTY;
        out.cfa_reg = u8::try_from(register.0).ok().filter(|r| usize::from(*r) < NREGS)?;
        out.cfa_off = i32::try_from(*offset).ok()?;
        out.signal_frame = signal_frame;
        let mut n = 0usize;
        for (reg, rule) in row.registers() {
            let r = reg.0;
            if r == arch.ra {
                out.ra_rule = true;
            }
            if r == arch.sp {
                out.sp_rule = true;
            }
            if usize::from(r) >= NREGS {
                continue; // set and clear ignore it (UnwindRegs keeps 0..NREGS)
            }
            let (kind, arg) = match rule {
                RegisterRule::Undefined => (Kind::Undefined, 0),
                RegisterRule::SameValue => (Kind::Same, 0),
                RegisterRule::Offset(o) => (Kind::Offset, i32::try_from(*o).ok()?),
                RegisterRule::ValOffset(o) => (Kind::ValOffset, i32::try_from(*o).ok()?),
                RegisterRule::Register(from) => (Kind::Register, i32::from(from.0)),
                RegisterRule::Expression(_) | RegisterRule::ValExpression(_) | RegisterRule::Constant(_) => {
                    return None
                }
                _ => (Kind::Unknown, 0),
            };
            *out.reg.get_mut(n)? = u8::try_from(r).ok()?;
            *out.kind.get_mut(n)? = kind;
            *out.arg.get_mut(n)? = arg;
            n = n.checked_add(1)?;
        }
        out.n = u8::try_from(n).ok()?;
        out.ra_undefined = !out.ra_rule && ra_undefined();
        Some(out)
    }

    /// The CFA for `regs`.
    fn cfa(&self, regs: &UnwindRegs) -> Result<u64, Miss> {
        regs.get(u16::from(self.cfa_reg))
            .ok_or(Miss::Unusable)?
            .checked_add_signed(i64::from(self.cfa_off))
            .ok_or(Miss::Unusable)
    }

    /// The rules as (DWARF register, how its caller value is found, its offset or source register).
    pub fn rules(&self) -> impl Iterator<Item = (u16, Kind, i32)> + '_ {
        let n = usize::from(self.n);
        self.reg.iter().zip(&self.kind).zip(&self.arg).take(n).map(|((r, k), a)| (u16::from(*r), *k, *a))
    }
}

/// One CFI step for the frame whose registers are `regs`, looking up `lookup_pc` (the pc itself for an exact pc,
/// the return address minus one for a caller, so a call at a function's very end still finds its own FDE).
/// Rows already in `cache` skip the table search and gimli; new rows without expressions go into it.
pub fn step<M: MemoryReader + ?Sized>(
    arch: &ArchSpec,
    mem: &mut M,
    ctx: &mut Context,
    cache: &mut RuleCache,
    hdr: u64,
    regs: &UnwindRegs,
    lookup_pc: u64,
) -> Result<Step, Miss> {
    let mut next = UnwindRegs::default();
    let stepped = step_into(arch, mem, ctx, cache, hdr, regs, lookup_pc, &mut next)?;
    Ok(stepped.with_regs(next))
}

/// [`step`], with the caller's registers written into `out` (the walker's form; see [`Stepped`]). `out` may hold
/// anything on entry; on an error or [`Stepped::End`] its contents are unspecified.
#[allow(clippy::too_many_arguments)]
pub fn step_into<M: MemoryReader + ?Sized>(
    arch: &ArchSpec,
    mem: &mut M,
    ctx: &mut Context,
    cache: &mut RuleCache,
    hdr: u64,
    regs: &UnwindRegs,
    lookup_pc: u64,
    out: &mut UnwindRegs,
) -> Result<Stepped, Miss> {
    if hdr == 0 {
        return Err(Miss::NoTable);
    }
    if let Some(row) = cache.get(hdr, lookup_pc) {
        return apply_into(arch, mem, row, regs, out);
    }
    // First evaluation of this pc's row (once per function per crash): the general path.
    let fde_addr = find_fde(mem, hdr, lookup_pc)?;
    Ok(match step_fde(arch, mem, ctx, cache, (hdr, hdr), fde_addr, regs, lookup_pc)? {
        Step::Caller { regs: next, cfa, signal_frame } => {
            *out = next;
            Stepped::Caller { cfa, signal_frame }
        }
        Step::End => Stepped::End,
    })
}

/// One CFI step from the FDE at `fde_addr` (found by another index: `.eh_frame_hdr`'s search table, or a compact
/// unwind entry in `UNWIND_*_MODE_DWARF`, whose low 24 bits are the FDE's offset in `__eh_frame`). `key` is
/// `(cache key, data-relative base)`: the table the FDE was found through keys the [`RuleCache`] (non-zero), and
/// the `.eh_frame_hdr` address is the data-relative base (0 when there is none, as on Apple platforms, whose
/// `__eh_frame` uses pc-relative pointers only).
#[allow(clippy::too_many_arguments)]
pub fn step_fde<M: MemoryReader + ?Sized>(
    arch: &ArchSpec,
    mem: &mut M,
    ctx: &mut Context,
    cache: &mut RuleCache,
    key: (u64, u64),
    fde_addr: u64,
    regs: &UnwindRegs,
    lookup_pc: u64,
) -> Result<Step, Miss> {
    let (cache_key, hdr) = key;
    if let Some(row) = cache.get(cache_key, lookup_pc) {
        return apply(arch, mem, row, regs);
    }
    // Copy CIE then FDE into one buffer.
    let fde_len = entry_len(mem, fde_addr, MAX_FDE)?;
    let mut ptr = [0u8; 4];
    if !mem.read(fde_addr.checked_add(4).ok_or(Miss::Bad)?, &mut ptr) {
        return Err(Miss::Bad);
    }
    let cie_ptr = u32::from_le_bytes(ptr);
    if cie_ptr == 0 {
        return Err(Miss::Bad); // a CIE where an FDE was expected
    }
    let cie_addr = fde_addr.checked_add(4).and_then(|a| a.checked_sub(u64::from(cie_ptr))).ok_or(Miss::Bad)?;
    let cie_len = entry_len(mem, cie_addr, MAX_CIE)?;
    let mut buf = [0u8; MAX_CIE + MAX_FDE];
    let total = cie_len.checked_add(fde_len).ok_or(Miss::Bad)?;
    let (cie_dst, rest) = buf.split_at_mut_checked(cie_len).ok_or(Miss::Bad)?;
    if !mem.read(cie_addr, cie_dst) {
        return Err(Miss::Bad);
    }
    if !mem.read(fde_addr, rest.get_mut(..fde_len).ok_or(Miss::Bad)?) {
        return Err(Miss::Bad);
    }
    // The FDE's CIE pointer is the distance from its own field back to the CIE: now CIE offset 0.
    let field = cie_len.checked_add(4).ok_or(Miss::Bad)?;
    let back = u32::try_from(field).map_err(|_| Miss::Bad)?.to_le_bytes();
    buf.get_mut(field..field.saturating_add(4)).ok_or(Miss::Bad)?.copy_from_slice(&back);
    let data = buf.get(..total).ok_or(Miss::Bad)?;

    // Base addresses: the buffer stands where the FDE really is, so its pc-relative pc_begin decodes right (the
    // CIE's own pc-relative fields, the personality routine, are not used). `.eh_frame_hdr` is the data-relative
    // base glibc's and LLVM's unwinders use on x86-64 and arm64 Linux.
    let section_base = fde_addr.checked_sub(cie_len as u64).ok_or(Miss::Bad)?;
    let bases = BaseAddresses::default().set_eh_frame_hdr(hdr).set_eh_frame(section_base);
    let mut eh = EhFrame::new(data, NativeEndian);
    eh.set_vendor(arch.vendor);
    let fde =
        eh.fde_from_offset(&bases, EhFrameOffset(cie_len), |s, b, o| s.cie_from_offset(b, o)).map_err(|_| Miss::Bad)?;
    if !fde.contains(lookup_pc) {
        return Err(Miss::NoEntry);
    }
    let row = fde.unwind_info_for_address(&eh, &bases, ctx, lookup_pc).map_err(|_| Miss::Unusable)?;
    let signal_frame = fde.is_signal_trampoline();
    // No rule for the return-address column: either the CFI made it undefined (gimli drops undefined rules from
    // the row, so look for `DW_CFA_undefined` in the CIE's and FDE's programs: the outermost frame), or, on arm64,
    // the return address is still in the link register (a leaf, or a prologue before `x30` is stored).
    let ra_undefined = || marks_ra_undefined(arch, &eh, &bases, &fde);
    if let Some(reduced) = Row::reduce(arch, row, ra_undefined, signal_frame) {
        cache.put(cache_key, lookup_pc, reduced);
        return apply(arch, mem, &reduced, regs);
    }

    // A row with expressions: evaluated here, every time.
    let cfa = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => {
            regs.get(register.0).ok_or(Miss::Unusable)?.checked_add_signed(*offset).ok_or(Miss::Unusable)?
        }
        CfaRule::Expression(e) => {
            let ops = e.get(&eh).map_err(|_| Miss::Unusable)?;
            expr::evaluate(ops.0.slice(), regs, mem, None).ok_or(Miss::Unusable)?
        }
    };
    let mut ra_rule = false;
    let mut sp_rule = false;
    let rules = row.registers().map(|(reg, rule)| {
        let r = reg.0;
        ra_rule |= r == arch.ra;
        sp_rule |= r == arch.sp;
        let value = match rule {
            RegisterRule::Undefined => return (r, Recovered::Undefined),
            RegisterRule::SameValue => regs.get(r),
            RegisterRule::Offset(off) => cfa.checked_add_signed(*off).and_then(|a| mem.read_u64(a)),
            RegisterRule::ValOffset(off) => cfa.checked_add_signed(*off),
            RegisterRule::Register(from) => regs.get(from.0),
            RegisterRule::Expression(e) => e
                .get(&eh)
                .ok()
                .and_then(|ops| expr::evaluate(ops.0.slice(), regs, mem, Some(cfa)))
                .and_then(|a| mem.read_u64(a)),
            RegisterRule::ValExpression(e) => {
                e.get(&eh).ok().and_then(|ops| expr::evaluate(ops.0.slice(), regs, mem, Some(cfa)))
            }
            RegisterRule::Constant(v) => Some(*v),
            _ => None,
        };
        (r, value.map_or(Recovered::Unknown, Recovered::Value))
    });
    let mut next = UnwindRegs::default();
    if !caller_regs(arch, regs, rules, &mut next)? {
        return Ok(Step::End);
    }
    if !ra_rule && marks_ra_undefined(arch, &eh, &bases, &fde) {
        return Ok(Step::End);
    }
    finish(arch, &mut next, ra_rule, sp_rule, cfa)?;
    Ok(Step::Caller { regs: next, cfa, signal_frame })
}

/// The step for a kept row: the same rules as the general path in [`step`], evaluated from the [`Row`].
fn apply<M: MemoryReader + ?Sized>(arch: &ArchSpec, mem: &mut M, row: &Row, regs: &UnwindRegs) -> Result<Step, Miss> {
    let mut next = UnwindRegs::default();
    let stepped = apply_into(arch, mem, row, regs, &mut next)?;
    Ok(stepped.with_regs(next))
}

/// [`apply`] with the caller's registers written into `out`.
fn apply_into<M: MemoryReader + ?Sized>(
    arch: &ArchSpec,
    mem: &mut M,
    row: &Row,
    regs: &UnwindRegs,
    out: &mut UnwindRegs,
) -> Result<Stepped, Miss> {
    let cfa = row.cfa(regs)?;
    let rules = row.rules().map(|(r, kind, arg)| {
        let value = match kind {
            Kind::Undefined => return (r, Recovered::Undefined),
            Kind::Same => regs.get(r),
            Kind::Offset => cfa.checked_add_signed(i64::from(arg)).and_then(|a| mem.read_u64(a)),
            Kind::ValOffset => cfa.checked_add_signed(i64::from(arg)),
            Kind::Register => u16::try_from(arg).ok().and_then(|from| regs.get(from)),
            Kind::Unknown => None,
        };
        (r, value.map_or(Recovered::Unknown, Recovered::Value))
    });
    if !caller_regs(arch, regs, rules, out)? || row.ra_undefined {
        return Ok(Stepped::End);
    }
    finish(arch, out, row.ra_rule, row.sp_rule, cfa)?;
    Ok(Stepped::Caller { cfa, signal_frame: row.signal_frame })
}

/// The caller's registers from the row's rules, written into `next`, before the return-address and stack-pointer
/// fix-ups of [`finish`]: callee-saved registers carry over unless a rule says otherwise; the rest are unknown.
/// `Ok(false)` when the return-address column is undefined (the outermost frame; `next` is then unspecified);
/// `Unusable` when its rule gives no value. The registers' validity mask already holds the callee-saved and
/// recovered registers. The rules' values are computed from `regs`, which `next` never aliases.
fn caller_regs(
    arch: &ArchSpec,
    regs: &UnwindRegs,
    rules: impl Iterator<Item = (u16, Recovered)>,
    next: &mut UnwindRegs,
) -> Result<bool, Miss> {
    *next = *regs;
    let mut keep = arch.callee_saved;
    for (r, value) in rules {
        match value {
            Recovered::Value(v) => {
                next.set(r, v);
                if usize::from(r) < 64 {
                    keep |= 1u64 << r;
                }
            }
            Recovered::Undefined if r == arch.ra => return Ok(false),
            Recovered::Undefined | Recovered::Unknown => {
                if r == arch.ra {
                    return Err(Miss::Unusable);
                }
                next.clear(r);
                if usize::from(r) < 64 {
                    keep &= !(1u64 << r);
                }
            }
        }
    }
    next.keep_only(keep | (1u64 << arch.ra));
    Ok(true)
}

/// The return address becomes the caller's pc (from its rule, or on arm64 the link register); the caller's stack
/// pointer is the CFA unless a rule restored it (signal frames restore it from the context).
fn finish(arch: &ArchSpec, next: &mut UnwindRegs, ra_rule: bool, sp_rule: bool, cfa: u64) -> Result<(), Miss> {
    let ra = if ra_rule || arch.link_register { next.get(arch.ra) } else { None };
    let Some(ra) = ra else { return Err(Miss::Unusable) };
    next.set(arch.ra, ra);
    next.set(arch.pc, ra);
    if !sp_rule || next.get(arch.sp).is_none() {
        next.set(arch.sp, cfa);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    /// An `.eh_frame_hdr` at `hdr` whose search table has an entry at each of `locs` (sorted; relative to `hdr`),
    /// each entry's FDE field its own index, so the answer names the entry. Records the 4 KiB blocks read.
    struct Table {
        hdr: u64,
        bytes: Vec<u8>,
        blocks: BTreeSet<u64>,
        /// The 4 KiB block whose reads fail, as unmapped memory would.
        fault: u64,
    }

    impl Table {
        /// A block whose reads fail (none: `u64::MAX`).
        const NO_FAULT: u64 = u64::MAX;

        fn new(hdr: u64, locs: &[i32]) -> Self {
            // version 1, eh_frame_ptr pcrel|sdata4, fde_count udata4, table datarel|sdata4.
            let mut bytes = vec![1u8, 0x1b, 0x03, 0x3b];
            bytes.extend_from_slice(&0i32.to_le_bytes());
            bytes.extend_from_slice(&(locs.len() as u32).to_le_bytes());
            for (i, loc) in locs.iter().enumerate() {
                bytes.extend_from_slice(&loc.to_le_bytes());
                bytes.extend_from_slice(&(i as i32).to_le_bytes());
            }
            Table { hdr, bytes, blocks: BTreeSet::new(), fault: Self::NO_FAULT }
        }

        /// The entry `find_fde` names for `pc`, or its miss.
        fn find(&mut self, pc: u64) -> Result<u64, Miss> {
            find_fde(self, self.hdr, pc).map(|fde| fde.wrapping_sub(self.hdr))
        }
    }

    impl MemoryReader for Table {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
            let Some(off) = addr.checked_sub(self.hdr) else { return false };
            let Some(src) = self.bytes.get(off as usize..off as usize + buf.len()) else { return false };
            buf.copy_from_slice(src);
            let last = addr + buf.len() as u64 - 1;
            if (addr / TABLE_BLOCK..=last / TABLE_BLOCK).contains(&self.fault) {
                return false;
            }
            self.blocks.extend((addr / TABLE_BLOCK)..=(last / TABLE_BLOCK));
            true
        }
    }

    /// What the search must find: the last entry at or below `target`.
    fn oracle(locs: &[i32], target: i64) -> Result<u64, Miss> {
        locs.iter().rposition(|&l| i64::from(l) <= target).map(|i| i as u64).ok_or(Miss::NoEntry)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// Any sorted table (evenly spread or not, repeated locations, any placement against the 4 KiB blocks, code
        /// before or after the header) and any pc: the entry a plain scan finds.
        #[test]
        fn the_search_finds_the_last_entry_at_or_below_the_pc(
            gaps in proptest::collection::vec(prop_oneof![0i32..4, 1i32..200, 1000i32..100_000], 1..3000),
            start in -2_000_000i32..2_000_000,
            skew in 0u64..1024,
            probes in proptest::collection::vec(any::<u32>(), 1..40),
        ) {
            let mut locs = Vec::with_capacity(gaps.len());
            let mut at = start;
            for g in &gaps {
                at = at.saturating_add(*g);
                locs.push(at);
            }
            let hdr = 0x7f00_0000_0000 + skew * 4;
            let mut t = Table::new(hdr, &locs);
            let (lo, hi) = (i64::from(locs[0]) - 50, i64::from(*locs.last().unwrap()) + 50);
            for p in probes {
                let target = lo + i64::from(p) % (hi - lo + 1);
                prop_assert_eq!(t.find(hdr.wrapping_add(target as u64)), oracle(&locs, target), "target {}", target);
            }
            for (i, &l) in locs.iter().enumerate().step_by(7) {
                let want = oracle(&locs, i64::from(l));
                prop_assert_eq!(t.find(hdr.wrapping_add(i64::from(l) as u64)), want, "entry {}", i);
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(96))]

        /// A table that breaks the format's promise (locations in any order) or that cannot be read whole (one
        /// block unreadable): the search ends, without a panic, with an entry of the table or a miss.
        #[test]
        fn a_corrupt_or_partly_unreadable_table_ends_the_search(
            locs in proptest::collection::vec(any::<i32>(), 1..2000),
            fault in proptest::option::of(0u64..5),
            probes in proptest::collection::vec(any::<i32>(), 1..20),
        ) {
            let hdr = 0x7f00_0000_0000u64;
            let mut t = Table::new(hdr, &locs);
            t.fault = fault.map_or(Table::NO_FAULT, |b| hdr / TABLE_BLOCK + b);
            for p in probes {
                match t.find(hdr.wrapping_add(i64::from(p) as u64)) {
                    Ok(i) => prop_assert!(i < locs.len() as u64, "entry {} of {}", i, locs.len()),
                    Err(m) => prop_assert!(matches!(m, Miss::Bad | Miss::NoEntry), "{:?}", m),
                }
            }
        }
    }

    /// A skewed table (8,000 functions close together, then a few far away: a cold section) misleads the guesses;
    /// the search then bisects, and still finds the entry, reading a few blocks more than bisection at worst.
    #[test]
    fn a_skewed_table_costs_about_what_bisection_costs() {
        let mut locs: Vec<i32> = (0..8000).map(|i| 0x1000 + i * 64).collect();
        locs.extend([0x4000_0000, 0x4000_0100, 0x7000_0000]);
        let hdr = 0x5602_bf54_a8e0;
        let mut t = Table::new(hdr, &locs);
        let mut worst = 0usize;
        for target in (0x1000i64..0x1000 + 8000 * 64).step_by(997) {
            t.blocks.clear();
            assert_eq!(t.find(hdr.wrapping_add(target as u64)), oracle(&locs, target));
            worst = worst.max(t.blocks.len());
        }
        println!("skewed table: worst {worst} blocks per lookup (table {} bytes)", t.bytes.len());
        assert!(worst <= 10, "worst {worst} blocks");
    }

    /// A table like the benchmark binary's (8,500 functions of varied size over 4 MiB of code, 68 KiB of table):
    /// a lookup reads about three blocks (the header's, the last entry's, the guess's), where bisection reads one
    /// per halving (five or six here: 5.6 on average when the guesses are turned off).
    #[test]
    fn a_lookup_in_a_large_table_reads_few_blocks() {
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut locs = Vec::new();
        let mut at = 0x8_2000i32;
        for _ in 0..8500 {
            locs.push(at);
            // Mostly small functions, some large: 16 bytes to 8 KiB.
            at += 16 + (next() % 4 + 1).pow(3) as i32 * (next() % 128) as i32;
        }
        let hdr = 0x5602_bf54_a8e0;
        let mut t = Table::new(hdr, &locs);
        let (mut total, mut worst, lookups) = (0usize, 0usize, 500u64);
        for _ in 0..lookups {
            let target = i64::from(locs[0]) + (next() % (at - locs[0]) as u64) as i64;
            t.blocks.clear();
            assert_eq!(t.find(hdr.wrapping_add(target as u64)), oracle(&locs, target));
            total += t.blocks.len();
            worst = worst.max(t.blocks.len());
        }
        let mean = total as f64 / lookups as f64;
        println!("blocks read per lookup: mean {mean:.2}, worst {worst} (table {} bytes)", t.bytes.len());
        assert!(mean <= 3.6, "mean {mean:.2} blocks per lookup");
        assert!(worst <= 6, "worst {worst} blocks");
    }

    fn row(cfa_off: i32) -> Row {
        Row { cfa_off, ..Row::EMPTY }
    }

    /// Five return addresses whose hashes pick the same set: direct-mapped, each would have evicted the one before.
    #[test]
    fn a_set_keeps_four_colliding_pcs_and_replaces_round_robin() {
        let set = RuleCache::set(0x40_1000);
        let pcs: Vec<u64> = (0x40_1000u64..).step_by(4).filter(|&pc| RuleCache::set(pc) == set).take(5).collect();
        let mut cache = Box::new(RuleCache::EMPTY);
        let hdr = 0x7f00_0000;
        for (k, &pc) in pcs.iter().take(4).enumerate() {
            cache.put(hdr, pc, row(k as i32));
        }
        for (k, &pc) in pcs.iter().take(4).enumerate() {
            assert_eq!(cache.get(hdr, pc).map(|r| r.cfa_off), Some(k as i32), "pc {pc:#x} kept");
        }
        // Another table's row for the same pc, and the empty key, are not these rows.
        assert!(cache.get(hdr + 8, pcs[0]).is_none());
        assert!(cache.get(0, pcs[0]).is_none());
        // Storing a kept key again replaces its row in place.
        cache.put(hdr, pcs[1], row(11));
        assert_eq!(cache.get(hdr, pcs[1]).map(|r| r.cfa_off), Some(11));
        assert_eq!(cache.get(hdr, pcs[0]).map(|r| r.cfa_off), Some(0));
        // The fifth replaces the first way, the sixth the second; the rest stay.
        cache.put(hdr, pcs[4], row(4));
        assert!(cache.get(hdr, pcs[0]).is_none());
        assert_eq!(cache.get(hdr, pcs[4]).map(|r| r.cfa_off), Some(4));
        assert_eq!(cache.get(hdr, pcs[2]).map(|r| r.cfa_off), Some(2));
        cache.put(hdr, pcs[0], row(0));
        assert!(cache.get(hdr, pcs[1]).is_none());
        for (pc, off) in [(pcs[0], 0), (pcs[2], 2), (pcs[3], 3), (pcs[4], 4)] {
            assert_eq!(cache.get(hdr, pc).map(|r| r.cfa_off), Some(off));
        }
        cache.clear();
        assert!(pcs.iter().all(|&pc| cache.get(hdr, pc).is_none()), "clear forgets every row");
    }
}
