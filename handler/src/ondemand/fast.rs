//! The fast path of [`super::current::current_stack`]: a stack whose every frame's unwind row is already in the
//! walker's row cache is walked here, keeping only the registers a return-address walk needs (pc, stack pointer,
//! frame pointer, and arm64's link register) and writing return addresses straight into the caller's buffer,
//! instead of through the general walk (`crate::unwind::walk`), which carries every register through every step,
//! tries other methods and compresses repeats.
//!
//! It takes exactly the steps the general walk takes on a cache hit (same row, same rules: `cfi::apply`,
//! `caller_regs` and `finish` of `crate::unwind::cfi`, the walk's PAC stripping, "the stack pointer moves up",
//! "the callee's frame lies in the stack"), restricted to those four registers, and gives up, returning `None`,
//! wherever the general walk would do anything else or would need another register: a pc in no image or in an
//! image without `.eh_frame_hdr`, a row not cached, a signal frame, a CFA or rule based on a register not kept
//! here, a rule that yields no value for the return address, a stack pointer that does not move up or leaves the
//! stack. The caller then runs the general walk, which also caches the rows this one lacked, so the next capture
//! of the same stack takes the fast path. Both list the same frames (`tests/ondemand.rs` compares them with
//! `backtrace(3)`, with the general walk's answer in between).
//!
//! Only for the calling thread's own stack with recorded bounds: every stack read is a plain load in `[sp, hi)`
//! ([`super::reader::LiveStackReader`]). Allocation-free, lock-free, no panics.

use crate::arch::RegisterValues;
use crate::crash::images::ImageList;
use crate::unwind::cfi::{Context, Kind, Row, RuleCache};
use crate::unwind::regs::{ArchSpec, UnwindRegs};
use crate::unwind::{arch_of, CodeMap, MemoryReader, Module, WalkOptions};

/// A row reduced to what a return-address walk evaluates, for rows of the common shapes only (see
/// `Recipe::from_row`): CFA = stack or frame pointer + offset; the return address at CFA + offset (or, on arm64,
/// in the link register); the frame pointer at CFA + offset, unchanged, or unknown; the stack pointer = CFA.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Recipe {
    /// Lookup pc this recipe is for (0: empty slot).
    key: u64,
    cfa_off: i32,
    ra_off: i32,
    fp_off: i32,
    /// [`CFA_FP`], [`RA_LINK`], [`FP_SAVED`], [`FP_UNKNOWN`], [`END`] bits.
    flags: u8,
}

/// CFA = frame pointer + offset (else stack pointer + offset).
const CFA_FP: u8 = 1;
/// The return address is the link register's value (arm64, no rule for it); else at CFA + `ra_off`.
const RA_LINK: u8 = 2;
/// The caller's frame pointer is at CFA + `fp_off`.
const FP_SAVED: u8 = 4;
/// The caller's frame pointer is unknown (without [`FP_SAVED`] nor this: unchanged).
const FP_UNKNOWN: u8 = 8;
/// The outermost frame (return-address column undefined).
const END: u8 = 16;

/// Recipes of one walker: [`TRACE_SLOTS`] of them (12 KiB), in sets of [`TRACE_WAYS`] by lookup pc.
pub const TRACE_SLOTS: usize = 512;
/// Recipes per set: pcs whose hash collides (different functions, one set) keep their recipes side by side, so a
/// stack that holds several of them still takes the fast path every time.
pub const TRACE_WAYS: usize = 4;

/// A walker's recipe cache.
#[derive(Clone, Copy, Debug)]
pub struct Trace {
    slots: [Recipe; TRACE_SLOTS],
}

impl Trace {
    /// Empty.
    pub const EMPTY: Trace =
        Trace { slots: [Recipe { key: 0, cfa_off: 0, ra_off: 0, fp_off: 0, flags: 0 }; TRACE_SLOTS] };

    /// Forgets every recipe (the image table changed).
    pub fn clear(&mut self) {
        for r in &mut self.slots {
            r.key = 0;
        }
    }

    /// The set of `pc`: its first slot and the slots.
    fn set(pc: u64) -> core::ops::Range<usize> {
        // A different hash from the row cache's (`cfi::RuleCache`), so pcs colliding there need not collide here.
        let sets = TRACE_SLOTS / TRACE_WAYS;
        let set = ((pc ^ (pc >> 17)).wrapping_mul(0xD6E8_FEB8_6659_FD93) >> 40) as usize;
        let first = set.checked_rem(sets).unwrap_or(0).saturating_mul(TRACE_WAYS);
        first..first.saturating_add(TRACE_WAYS)
    }

    fn get(&self, pc: u64) -> Option<&Recipe> {
        self.slots.get(Self::set(pc))?.iter().find(|r| r.key == pc && pc != 0)
    }

    /// Adds `r` at the front of its set (the last one falls out).
    fn put(&mut self, r: Recipe) {
        if let Some(set) = self.slots.get_mut(Self::set(r.key)) {
            let at = set.iter().position(|s| s.key == r.key).unwrap_or(set.len().saturating_sub(1));
            if let Some(head) = set.get_mut(..=at) {
                head.rotate_right(1);
                if let Some(first) = head.first_mut() {
                    *first = r;
                }
            }
        }
    }
}

impl Recipe {
    /// The recipe of `row` for lookup pc `key`, when the row has one of the shapes a recipe holds: not a signal
    /// frame; CFA from the stack or frame pointer; a return-address rule `offset(N)` (or `undefined`: the end), or
    /// none on arm64 (the link register); a frame-pointer rule `offset(N)`, `same value`, `undefined` or none; no
    /// stack-pointer rule. Other rules (callee-saved registers the walk does not keep) are ignored: a later row
    /// that needs one has no recipe and is not cached.
    fn from_row(arch: &ArchSpec, row: &Row, key: u64) -> Option<Recipe> {
        if row.is_signal_frame() || row.has_sp_rule() || key == 0 {
            return None;
        }
        let (cfa_reg, cfa_off) = row.cfa_rule();
        let mut r = Recipe { key, cfa_off, ..Recipe::default() };
        if cfa_reg == arch.fp {
            r.flags |= CFA_FP;
        } else if cfa_reg != arch.sp {
            return None;
        }
        let mut ra_rule = false;
        let fp_carries = arch.callee_saved & (1u64 << arch.fp) != 0;
        if !fp_carries {
            r.flags |= FP_UNKNOWN;
        }
        for (reg, kind, arg) in row.rules() {
            if reg == arch.ra {
                ra_rule = true;
                match kind {
                    Kind::Undefined => r.flags |= END,
                    Kind::Offset => r.ra_off = arg,
                    _ => return None,
                }
            } else if reg == arch.fp {
                r.flags &= !FP_UNKNOWN;
                match kind {
                    Kind::Offset => {
                        r.flags |= FP_SAVED;
                        r.fp_off = arg;
                    }
                    Kind::Same => {}
                    Kind::Undefined | Kind::Unknown => r.flags |= FP_UNKNOWN,
                    _ => return None,
                }
            } else if reg == arch.sp {
                return None;
            }
        }
        if row.ra_is_undefined() {
            r.flags |= END;
        }
        if !ra_rule && r.flags & END == 0 {
            if !arch.link_register {
                return None;
            }
            r.flags |= RA_LINK;
        }
        Some(r)
    }
}

/// The registers kept: pc, stack pointer, frame pointer, return-address column (arm64 `x30`; on x86-64 it is the
/// pc column itself).
#[derive(Clone, Copy, Debug)]
struct Kept {
    pc: u64,
    sp: u64,
    fp: Option<u64>,
    ra: Option<u64>,
}

impl Kept {
    /// The value of DWARF register `r` when kept and known; `Err(())` when `r` is not kept here (give up).
    fn get(&self, arch: &ArchSpec, r: u16) -> Result<Option<u64>, ()> {
        if r == arch.sp {
            Ok(Some(self.sp))
        } else if r == arch.fp {
            Ok(self.fp)
        } else if r == arch.ra {
            Ok(if arch.ra == arch.pc { Some(self.pc) } else { self.ra })
        } else {
            Err(())
        }
    }
}

/// How one step ended.
enum Next {
    /// The caller's registers.
    Caller(Kept),
    /// The outermost frame (return-address column undefined).
    End,
}

/// Evaluates the FDE of `lookup` in the image whose `.eh_frame_hdr` is `hdr` with the general step
/// (`cfi::step`), for the row it leaves in `rules` (rows with expressions are not cached: the caller then gives
/// up). Its own frame holds gimli's evaluation context (8 KiB), on the stack only while it runs.
#[inline(never)]
fn learn_row<M: MemoryReader + ?Sized>(
    arch: &ArchSpec,
    mem: &mut M,
    rules: &mut RuleCache,
    hdr: u64,
    k: &Kept,
    lookup: u64,
) {
    let mut regs = UnwindRegs::default();
    regs.set(arch.pc, k.pc);
    regs.set(arch.sp, k.sp);
    if let Some(fp) = k.fp {
        regs.set(arch.fp, fp);
    }
    if let Some(ra) = k.ra {
        regs.set(arch.ra, ra);
    }
    let mut ctx = Context::new_in();
    let _ = crate::unwind::cfi::step(arch, mem, &mut ctx, rules, hdr, &regs, lookup);
}

/// One step by recipe `r` from `k`: the same as [`step`] on the row the recipe came from (`None` where that
/// would give up; the row path then decides).
fn apply<M: MemoryReader + ?Sized>(mem: &mut M, r: &Recipe, k: &Kept) -> Option<Next> {
    let base = if r.flags & CFA_FP != 0 { k.fp? } else { k.sp };
    let cfa = base.checked_add_signed(i64::from(r.cfa_off))?;
    if r.flags & END != 0 {
        return Some(Next::End);
    }
    let fp = if r.flags & FP_SAVED != 0 {
        Some(mem.read_u64(cfa.checked_add_signed(i64::from(r.fp_off))?)?)
    } else if r.flags & FP_UNKNOWN != 0 {
        None
    } else {
        k.fp
    };
    let ra = if r.flags & RA_LINK != 0 { k.ra? } else { mem.read_u64(cfa.checked_add_signed(i64::from(r.ra_off))?)? };
    Some(Next::Caller(Kept { pc: ra, sp: cfa, fp, ra: Some(ra) }))
}

/// One cached-row step from `k` (see the module docs): `None` to give up.
fn step<M: MemoryReader + ?Sized>(arch: &ArchSpec, mem: &mut M, row: &Row, k: &Kept) -> Option<Next> {
    if row.is_signal_frame() {
        return None;
    }
    let (cfa_reg, cfa_off) = row.cfa_rule();
    let cfa = k.get(arch, cfa_reg).ok()??.checked_add_signed(i64::from(cfa_off))?;
    // Rules for the kept registers; callee-saved ones without a rule carry over (x29/rbp), the return-address
    // column too (`keep | 1 << ra` in `caller_regs`).
    let mut fp = if arch.callee_saved & (1u64 << arch.fp) != 0 { k.fp } else { None };
    let mut ra = k.get(arch, arch.ra).ok()?;
    let mut sp_value = None;
    for (r, kind, arg) in row.rules() {
        if r != arch.fp && r != arch.ra && r != arch.sp {
            continue;
        }
        let value = match kind {
            Kind::Undefined => {
                if r == arch.ra {
                    return Some(Next::End);
                }
                None
            }
            Kind::Same => k.get(arch, r).ok()?,
            Kind::Offset => Some(mem.read_u64(cfa.checked_add_signed(i64::from(arg))?)?),
            Kind::ValOffset => cfa.checked_add_signed(i64::from(arg)),
            Kind::Register => k.get(arch, u16::try_from(arg).ok()?).ok()?,
            Kind::Unknown => None,
        };
        if r == arch.ra {
            // No value for the return address: the general walk tries other methods.
            ra = Some(value?);
        } else if r == arch.fp {
            fp = value;
        } else {
            sp_value = value;
        }
    }
    if row.ra_is_undefined() {
        return Some(Next::End);
    }
    // `cfi::finish`.
    let ra = if row.has_ra_rule() || arch.link_register { ra? } else { return None };
    let sp = match sp_value {
        Some(v) if row.has_sp_rule() => v,
        _ => cfa,
    };
    Some(Next::Caller(Kept { pc: ra, sp, fp, ra: Some(ra) }))
}

/// Walks from `start` with the rows of `rules` only, reading memory with `mem` inside the stack `[lo, hi)`
/// (`stack`), and writes the frames after the first `skip` into `out`. `Some((written, truncated))` when the whole
/// stack was walked (to its outermost frame) or `out` filled up; `None` when a step needs more than a cached row
/// and the kept registers (see the module docs).
#[allow(clippy::too_many_arguments)]
pub fn walk<M: MemoryReader + ?Sized>(
    start: &RegisterValues,
    mem: &mut M,
    images: &ImageList,
    rules: &mut RuleCache,
    trace: &mut Trace,
    opts: &WalkOptions,
    stack: (u64, u64),
    skip: usize,
    out: &mut [u64],
) -> Option<(usize, bool)> {
    let arch = arch_of(start)?;
    let regs = arch.regs_from(start)?;
    let (lo, hi) = stack;
    let pc0 = opts.strip_value(regs.get(arch.pc)?);
    let mut k = Kept {
        pc: pc0,
        sp: regs.get(arch.sp)?,
        fp: regs.get(arch.fp),
        ra: if arch.link_register { regs.get(arch.ra).map(|v| opts.strip_value(v)) } else { Some(pc0) },
    };
    let mut n = 0usize;
    let mut seen = 0usize;
    // Appends a frame; `false` when `out` is full.
    let mut emit = |v: u64, n: &mut usize, seen: &mut usize| -> bool {
        if *seen < skip {
            *seen = seen.saturating_add(1);
            return true;
        }
        match out.get_mut(*n) {
            Some(slot) => {
                *slot = v;
                *n = n.saturating_add(1);
                true
            }
            None => false,
        }
    };
    if !emit(pc0, &mut n, &mut seen) {
        return Some((n, true));
    }
    let mut exact = true;
    let mut first = true;
    // The last frame's image: consecutive frames are mostly in the same one (no search then).
    let mut module: Option<Module> = None;
    for _ in 0..opts.max_steps {
        let (pc, sp) = (k.pc, k.sp);
        let lookup = if exact { pc } else { pc.wrapping_sub(1) };
        let stepped = match trace.get(lookup) {
            Some(r) => apply(mem, r, &k),
            None => None,
        };
        let stepped = match stepped {
            Some(s) => s,
            None => {
                let m = match module {
                    Some(m) if m.start <= lookup && lookup < m.end => m,
                    _ => images.module_for(lookup)?,
                };
                module = Some(m);
                let hdr = m.unwind.eh_frame_hdr.0;
                if hdr == 0 {
                    return None;
                }
                if rules.row(hdr, lookup).is_none() {
                    // Not cached (never seen, or evicted by a pc sharing its slot in the row cache): evaluate this
                    // one step's FDE, which caches its row, so every capture makes progress.
                    learn_row(arch, mem, rules, hdr, &k, lookup);
                }
                let row = rules.row(hdr, lookup)?;
                if let Some(r) = Recipe::from_row(arch, row, lookup) {
                    trace.put(r);
                }
                step(arch, mem, row, &k)?
            }
        };
        let mut next = match stepped {
            Next::End => return Some((n, false)),
            Next::Caller(c) => c,
        };
        // The walk's own checks of a CFI caller.
        let ra = opts.strip_value(next.pc);
        if ra == 0 {
            return Some((n, false));
        }
        next.pc = ra;
        next.ra = Some(ra);
        let nsp = next.sp;
        let moved_up = nsp > sp || (first && arch.link_register && nsp == sp);
        if !moved_up || sp < lo || nsp > hi || (ra == pc && nsp == sp) {
            return None;
        }
        if !emit(ra, &mut n, &mut seen) {
            return Some((n, true));
        }
        k = next;
        exact = false;
        first = false;
    }
    None
}
