//! The pure stack unwinder: unwind tables first, frame pointers second, a stack scan last.
//!
//! Input: a thread's registers (`RegisterValues`, any architecture the report knows: the set's name selects
//! [`x86_64::SPEC`] or [`aarch64::SPEC`]), a [`MemoryReader`] (the only way memory is read: `process_vm_readv` on
//! Linux, `vm_read_overwrite` on Apple, a byte map in tests) and a [`CodeMap`] (which image holds an address, and
//! where its unwind tables are). Output: raw frame addresses (frame 0 = PC, then return addresses, unadjusted; the
//! `- 1` for symbol lookup is the viewer's job) with how each was found ([`trust`]), into caller buffers, plus
//! repeat records that keep deep recursion whole.
//!
//! Each step, for the current frame:
//! 1. **CFI** ([`cfi`]): the image's `.eh_frame_hdr` table finds the FDE covering the pc (the return address minus
//!    one for callers), gimli evaluates its row, the rules give the caller's registers. A return-address column the
//!    CFI marks undefined ends the stack (glibc's `_start`, `clone3`). Apple images have no `.eh_frame_hdr`:
//!    their compact unwind table ([`compact`], `__TEXT,__unwind_info`) gives the step for frame and frameless
//!    functions (arm64 and x86-64 encodings) and sends the rest to their FDE in `__TEXT,__eh_frame`.
//! 2. **Link register** (arm64, frame 0 only, no CFI): `x30` is the caller when it follows a branch-with-link.
//!    **Return slot** (x86-64, frame 0 only, pc outside every image: a call through a bad pointer): the word at `sp`.
//! 3. **Frame pointer**: the record `[previous fp, return address]` at `fp`, when it lies inside the stack above
//!    `sp` and its return address is in an image right after a call instruction.
//! 4. **Scan** (last resort, at most [`WalkOptions::max_scans`] times a walk): the first of the
//!    [`WalkOptions::scan_words`] words above `sp` that is a return address (inside an image, right after a call
//!    instruction), never past an unreadable word or the end of the stack.
//!
//! Every caller must lie inside the thread's own stack: `[sp, end)` where `end` is the top of the stack recorded
//! when the thread started (`known_stack`, when it holds `sp`), else found lazily by probing pages upward from
//! `sp` until the first unreadable one (the guard page of the next mapping), at most
//! [`WalkOptions::max_stack_span`] bytes. A step must move `sp` up (arm64's frame 0 → 1 may keep it). Only a signal
//! frame (CIE augmentation `S`) may move to another stack (an alternate signal stack back to the interrupted one),
//! at most [`MAX_STACK_HOPS`] times.
//!
//! **Swift async frames** ([`swift_async`], Apple arm64 only: [`WalkOptions::swift_async`]). When a step reads a
//! saved frame pointer tagged as an extended frame record `[AsyncContext*, fp | 1 << 60, lr]`, the tag is cleared
//! (so the walk goes on through the untagged caller) and, when the record is the one at the current frame's `fp`,
//! the async context chain stored beside it is followed: its resume functions, the logical callers of the running
//! async function, are stored right after that function's frame with [`trust::ASYNC`], and the walk then goes on
//! with the OS stack from the record's return address (the executor: `swift_job_run`, the dispatch worker).
//! Apple's `thread_stack_async_pcs` (Libc `gen/thread_stack_pcs.c`) instead *switches* to the chain at the first
//! tagged record and drops the rest of the OS stack. Both are kept here because Apple's crash reports print the
//! OS stack (the executor frames say which queue or actor ran the job, and a report's text stays comparable with
//! Apple's), a nested run loop may run several jobs on one stack (each tagged record gets its chain), and the
//! trust byte lets a reader rebuild either view: drop the [`trust::ASYNC`] frames for the OS stack, or cut after
//! the first run of them for `thread_stack_async_pcs`'s. Every chain is bounded ([`swift_async::MAX_CHAIN`]
//! frames, cycles, null, misaligned and unreadable contexts end it) and reads only through the [`MemoryReader`].
//!
//! **Repeats.** A run of `p` frames (1 ≤ p ≤ [`MAX_REPEAT_PERIOD`]) that repeats back to back is stored once and
//! counted, so a stack overflow's callers (below thousands of recursive frames) stay in the report.
//!
//! Never allocates, locks or panics; async-signal-safe when the reader is. No `unsafe`.

pub mod aarch64;
pub mod cfi;
pub mod compact;
pub mod expr;
pub mod regs;
pub mod swift_async;
pub mod x86_64;

use crate::arch::pac::PacStrip;
use crate::arch::RegisterValues;
pub use crate::arch::WalkRegs;
pub use cfi::RuleCache;
use regs::{ArchSpec, UnwindRegs};

/// A fault-proof reader of the crashed process's memory.
pub trait MemoryReader {
    /// Fills `buf` from address `addr`; `false` when any byte is unreadable. Must never fault.
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool;

    /// Reads one native-endian `u64`.
    fn read_u64(&mut self, addr: u64) -> Option<u64> {
        let mut b = [0u8; 8];
        if self.read(addr, &mut b) {
            Some(u64::from_ne_bytes(b))
        } else {
            None
        }
    }

    /// Whether the byte at `addr` is readable (used to find where a stack's mapping ends, a page at a time).
    fn probe(&mut self, addr: u64) -> bool {
        self.read(addr, &mut [0u8; 1])
    }

    /// Reads `each` bytes at every address of `addrs` into consecutive `each`-byte chunks of `buf`
    /// (`buf.len()` must be `addrs.len() × each`); `false` when any of them is unreadable or the lengths disagree.
    /// Readers that can gather many ranges in one system call override it (the Linux fault-proof reader: one
    /// `writev` of the ranges into a pipe and one `read`, or `process_vm_readv` with one remote iovec per address);
    /// by default they are read one by one. Must never fault.
    fn read_gather(&mut self, addrs: &[u64], each: usize, buf: &mut [u8]) -> bool {
        if each == 0 || addrs.len().checked_mul(each) != Some(buf.len()) {
            return false;
        }
        addrs.iter().zip(buf.chunks_exact_mut(each)).all(|(a, chunk)| self.read(*a, chunk))
    }
}

/// Where one image's unwind tables are mapped in the crashed process: runtime addresses and sizes in bytes,
/// `(0, 0)` when the image has no such table. Recorded at install / image load; read after a fault only through
/// the [`MemoryReader`].
///
/// - `eh_frame_hdr`: ELF `.eh_frame_hdr`, located by the `PT_GNU_EH_FRAME` program header (LSB 5.0 §10.6.2);
///   its binary-search table leads to the FDEs in `.eh_frame`.
/// - `eh_frame`: a `.eh_frame` / Mach-O `__TEXT,__eh_frame` without a search table (Apple).
/// - `compact`: Mach-O `__TEXT,__unwind_info` (Apple compact unwind, `<mach-o/compact_unwind_encoding.h>`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UnwindSections {
    /// `.eh_frame_hdr`: address, size.
    pub eh_frame_hdr: (u64, u64),
    /// `.eh_frame` / `__eh_frame`: address, size (0 size when only known through the header).
    pub eh_frame: (u64, u64),
    /// `__unwind_info`: address, size.
    pub compact: (u64, u64),
}

/// An image as the unwinder sees it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Module {
    /// Start of the image's text range (bytes, runtime address).
    pub start: u64,
    /// End (exclusive) of the text range.
    pub end: u64,
    /// Its unwind tables.
    pub unwind: UnwindSections,
}

/// Which image holds a code address. Implemented by the crash path's image table; must be allocation-free and
/// signal-safe.
pub trait CodeMap {
    /// The image whose text range holds `addr`.
    fn module_for(&self, addr: u64) -> Option<Module>;
}

/// A code map with no images (every address is unknown code).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCode;

impl CodeMap for NoCode {
    fn module_for(&self, _addr: u64) -> Option<Module> {
        None
    }
}

/// How each frame was found, one byte per stored frame: the report's `THREAD.tr` values
/// (`report_format::model::FrameTrust`).
pub mod trust {
    /// The thread's own saved registers: an exact pc (frame 0, or the interrupted pc after a signal frame).
    pub const CONTEXT: u8 = 1;
    /// Unwind tables (DWARF CFI; compact unwind on Apple).
    pub const CFI: u8 = 2;
    /// A frame-pointer record.
    pub const FRAME_POINTER: u8 = 3;
    /// A stack scan (a word that looks like a return address).
    pub const SCAN: u8 = 4;
    /// The link register (arm64 `x30`) of frame 0 without unwind tables.
    pub const LINK_REGISTER: u8 = 5;
    /// A Swift async context's resume function, stored as its entry address + 1 (a logical caller of the async
    /// function before it, found through the async context chain; see [`super::swift_async`]).
    pub const ASYNC: u8 = 6;
}

/// Longest repeating run (in frames) the walker compresses.
pub const MAX_REPEAT_PERIOD: usize = 8;
/// Times a walk may move to another stack through a signal frame.
pub const MAX_STACK_HOPS: usize = 2;
/// Page granularity of the stack-end probe, bytes (the smallest page size of x86-64 and arm64 Linux and Apple
/// x86-64; a larger real page only means more probes, never a wrong answer).
pub const PROBE_PAGE: u64 = 4096;

/// Walk limits and per-architecture rules.
#[derive(Clone, Copy, Debug)]
pub struct WalkOptions {
    /// Required alignment of a frame pointer in bytes (8 on x86-64 and arm64).
    pub fp_align: u64,
    /// The stack is never taken to extend more than this many bytes above `sp`.
    pub max_stack_span: u64,
    /// Most unwind steps taken (bounds the time a pathological stack costs; repeats count too).
    pub max_steps: usize,
    /// Clears pointer-authentication bits from return addresses and `lr` (`None`: values are used as they are,
    /// right on x86-64). The one stripper shared by the Linux and Apple paths ([`crate::arch::pac`]).
    pub strip: Option<PacStrip>,
    /// Words above `sp` a scan looks at (0 disables scanning).
    pub scan_words: u64,
    /// Scans allowed in one walk.
    pub max_scans: usize,
    /// Interprets bits 63:60 of saved frame pointers as the Swift async tag and follows async context chains
    /// ([`swift_async`]). Only right on Apple arm64 (arm64e included), where no user address has those bits set: on
    /// Linux arm64 a high bit in a frame pointer is not a tag (top-byte-ignore lets tagged pointers be real
    /// addresses), so it is off there.
    pub swift_async: bool,
}

impl WalkOptions {
    /// `v` with pointer-authentication bits cleared by [`WalkOptions::strip`] (unchanged without a stripper).
    pub fn strip_value(&self, v: u64) -> u64 {
        match self.strip {
            Some(s) => s.strip(v),
            None => v,
        }
    }
}

/// The stripper for this host's ordinary processes: Linux/arm64's 48-bit user space; none on x86-64. The Apple
/// backend overrides it with the bound of its own address space (`TASK_VM_INFO.max_address`).
const HOST_STRIP: Option<PacStrip> =
    if cfg!(target_arch = "aarch64") { PacStrip::with_va_bits(crate::arch::pac::LINUX_ARM64_VA_BITS) } else { None };

/// Swift async frames are followed on Apple arm64 hosts only (see [`WalkOptions::swift_async`]). Apple x86-64 has
/// the same extended record (`[ctx, rbp | 1 << 60, return address]`, LLVM `X86MachineFunctionInfo`), but it is
/// left off there until it can be checked against a real macOS x86-64 stack.
const HOST_SWIFT_ASYNC: bool = cfg!(all(target_vendor = "apple", target_arch = "aarch64"));

impl WalkOptions {
    /// Options for this host: 8-byte alignment, 256 MiB stack span, 1 Mi steps, 64-word scans at most 4 times,
    /// PAC stripping on arm64, and Swift async frames on Apple arm64.
    pub const fn host() -> Self {
        WalkOptions {
            fp_align: 8,
            max_stack_span: 256 << 20,
            max_steps: 1 << 20,
            strip: HOST_STRIP,
            scan_words: 64,
            max_scans: 4,
            swift_async: HOST_SWIFT_ASYNC,
        }
    }
}

impl Default for WalkOptions {
    fn default() -> Self {
        Self::host()
    }
}

/// Why the walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The unwind tables mark the outermost frame, or the frame-pointer chain or return address ended with 0:
    /// the normal end of a stack.
    End,
    /// No unwind table, frame record or scanned word gave a believable caller.
    NoCaller,
    /// The caller's stack pointer was not above the current one (a cycle or garbage).
    NotIncreasing,
    /// The caller's frame would lie outside the thread's stack.
    OutsideStack,
    /// The output buffer filled up (frames truncated).
    FrameCap,
    /// `max_steps` steps were taken.
    StepCap,
    /// The output buffer has no room even for frame 0.
    NoRoom,
    /// The register set is not one this unwinder knows, or lacks the pc or sp.
    NoRegisters,
}

/// A repeating run (same meaning as `report_format::encode::Repeat`).
pub type Repeat = report_format::encode::Repeat;

/// Result of a walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkOutcome {
    /// Frames stored at the front of the output buffer (and trust bytes at the front of the trust buffer).
    pub frames: usize,
    /// Repeat records stored at the front of the repeat buffer.
    pub repeats: usize,
    /// True when frames were lost to a cap (frame buffer, repeat buffer or steps).
    pub truncated: bool,
    /// Why the walk ended.
    pub stop: StopReason,
}

/// Caller buffers a walk fills: frames, one trust byte per frame (same length or shorter: bytes past its end are
/// not stored), repeat records.
#[derive(Debug)]
pub struct WalkBuffers<'a> {
    /// Frame addresses.
    pub frames: &'a mut [u64],
    /// [`trust`] values, index-aligned with `frames`.
    pub trust: &'a mut [u8],
    /// Repeat records.
    pub repeats: &'a mut [Repeat],
    /// Unwind rows already evaluated, shared by every walk of one crash (cleared by the caller at crash start).
    pub rules: &'a mut cfi::RuleCache,
}

/// Output under construction: frames plus online repeat detection.
struct Out<'a> {
    frames: &'a mut [u64],
    trust: &'a mut [u8],
    n: usize,
    repeats: &'a mut [Repeat],
    nrep: usize,
    /// Active repeat: (start, period, matched frames in the current cycle, full cycles matched).
    active: Option<(usize, usize, usize, u32)>,
    /// Frames before this index belong to finished repeats and are never matched again.
    floor: usize,
    lost: bool,
}

impl Out<'_> {
    fn at(&self, i: usize) -> u64 {
        self.frames.get(i).copied().unwrap_or(0)
    }

    fn trust_at(&self, i: usize) -> u8 {
        self.trust.get(i).copied().unwrap_or(0)
    }

    fn store(&mut self, v: u64, t: u8) -> bool {
        match self.frames.get_mut(self.n) {
            Some(slot) => {
                *slot = v;
                if let Some(ts) = self.trust.get_mut(self.n) {
                    *ts = t;
                }
                self.n = self.n.saturating_add(1);
                true
            }
            None => {
                self.lost = true;
                false
            }
        }
    }

    /// Ends the active repeat: records it (if at least one full extra cycle) and stores the partial cycle.
    fn close_repeat(&mut self) -> bool {
        let Some((start, p, k, cycles)) = self.active.take() else { return true };
        if cycles > 0 {
            match self.repeats.get_mut(self.nrep) {
                Some(r) => {
                    *r = Repeat { start: start as u32, len: p as u32, count: cycles };
                    self.nrep = self.nrep.saturating_add(1);
                }
                None => self.lost = true,
            }
        }
        self.floor = self.n;
        for j in 0..k {
            let i = start.saturating_add(j);
            let (v, t) = (self.at(i), self.trust_at(i));
            if !self.store(v, t) {
                return false;
            }
        }
        self.floor = self.n;
        true
    }

    /// The part of [`Out::push`] before the search for a new repeat: `v` continues the active repeat
    /// (`Some(true)`), or the repeat is closed and `v` stored (`None`: search), or the buffer is full
    /// (`Some(false)`).
    fn continue_or_store(&mut self, v: u64, t: u8) -> Option<bool> {
        if let Some((start, p, k, cycles)) = self.active {
            if self.at(start.saturating_add(k)) == v {
                let k = k.saturating_add(1);
                self.active =
                    Some(if k == p { (start, p, 0, cycles.saturating_add(1)) } else { (start, p, k, cycles) });
                return Some(true);
            }
            if !self.close_repeat() {
                return Some(false);
            }
        }
        if !self.store(v, t) {
            return Some(false);
        }
        None
    }

    /// Appends one frame found by `t`; `false` when the buffer is full.
    fn push(&mut self, v: u64, t: u8) -> bool {
        if let Some(done) = self.continue_or_store(v, t) {
            return done;
        }
        // Do the last 2p stored frames form two copies of one run? Then drop the second copy and count. Only a period
        // whose frame p back is this one can (the two copies end alike), so those are looked for first: most frames
        // have none, and cost one pass over at most MAX_REPEAT_PERIOD words.
        let newest = self.n.saturating_sub(1);
        let max_p = MAX_REPEAT_PERIOD.min(self.n.saturating_sub(self.floor) / 2);
        let window = self.frames.get(newest.saturating_sub(max_p)..newest).unwrap_or(&[]);
        let mut candidates = 0u32;
        for (back, &f) in window.iter().rev().enumerate() {
            if f == v {
                candidates |= 1u32.checked_shl(back as u32).unwrap_or(0);
            }
        }
        while candidates != 0 {
            // The shortest period first, as the copies are compared from the shortest.
            let p = (candidates.trailing_zeros() as usize).saturating_add(1);
            candidates &= candidates.wrapping_sub(1);
            // p <= max_p <= MAX_REPEAT_PERIOD, so 2 * p cannot overflow and 2 * p <= n - floor.
            let a = self.n.saturating_sub(p.saturating_mul(2));
            if (0..p).all(|j| self.at(a.saturating_add(j)) == self.at(a.saturating_add(p).saturating_add(j))) {
                self.n = self.n.saturating_sub(p);
                self.active = Some((a, p, 0, 1));
                break;
            }
        }
        true
    }

    fn finish(mut self) -> (usize, usize, bool) {
        let _ = self.close_repeat();
        (self.n, self.nrep, self.lost)
    }

    /// [`Out::push`] as it was before its period search looked for candidates first (the same
    /// [`Out::continue_or_store`], then every period from 1 up, compared from its first frame). Tests check that
    /// both store the same frames and repeats.
    #[cfg(test)]
    fn push_reference(&mut self, v: u64, t: u8) -> bool {
        if let Some(done) = self.continue_or_store(v, t) {
            return done;
        }
        for p in 1..=MAX_REPEAT_PERIOD {
            let two_p = p.saturating_mul(2);
            if self.n < self.floor.saturating_add(two_p) {
                break;
            }
            let a = self.n.saturating_sub(two_p);
            if (0..p).all(|j| self.at(a.saturating_add(j)) == self.at(a.saturating_add(p).saturating_add(j))) {
                self.n = self.n.saturating_sub(p);
                self.active = Some((a, p, 0, 1));
                break;
            }
        }
        true
    }
}

/// Walks one stack from the registers `start` (see the module docs for the order of methods). Never allocates
/// or panics; async-signal-safe when `mem` and `code` are. Its large locals take about 13 KiB of stack (gimli's row
/// storage, 8.3 KiB on x86-64; the CIE/FDE copy, 4 KiB), 1 KiB more while an async context chain is followed.
///
/// `known_stack`: the thread's stack `(lo, hi)` in bytes when it is known (recorded at thread start); used as the
/// stack's end when it holds the starting `sp`, otherwise the end is probed.
pub fn walk<M: MemoryReader + ?Sized, C: CodeMap + ?Sized>(
    start: &RegisterValues,
    mem: &mut M,
    code: &C,
    opts: &WalkOptions,
    known_stack: Option<(u64, u64)>,
    bufs: WalkBuffers<'_>,
) -> WalkOutcome {
    let WalkBuffers { frames, trust, repeats, rules } = bufs;
    let mut out = Out { frames, trust, n: 0, repeats, nrep: 0, active: None, floor: 0, lost: false };
    let stop = walk_into(start, mem, code, opts, known_stack, rules, &mut out);
    let (n, nrep, lost) = out.finish();
    let truncated = lost || matches!(stop, StopReason::FrameCap | StopReason::StepCap);
    let stop =
        if lost && !matches!(stop, StopReason::StepCap | StopReason::NoRoom) { StopReason::FrameCap } else { stop };
    WalkOutcome { frames: n, repeats: nrep, truncated, stop }
}

/// The architecture a register set belongs to.
pub fn arch_of(regs: &RegisterValues) -> Option<&'static ArchSpec> {
    if regs.set == crate::arch::x86_64::SET {
        Some(&x86_64::SPEC)
    } else if regs.set == crate::arch::aarch64::SET {
        Some(&aarch64::SPEC)
    } else {
        None
    }
}

/// The thread's stack as far as it is known: `[lo, hi)` readable, never beyond `limit`; `hi` grows lazily by
/// probing a page at a time until the first unreadable page, which ends the stack for good.
struct Stack {
    lo: u64,
    hi: u64,
    limit: u64,
    ended: bool,
}

impl Stack {
    fn new(sp: u64, span: u64) -> Stack {
        Stack { lo: sp, hi: sp, limit: sp.saturating_add(span), ended: false }
    }

    /// The stack of `sp` when its recorded extent `known` holds it: readable up to the recorded top, never beyond.
    fn starting_at(sp: u64, span: u64, known: Option<(u64, u64)>) -> Stack {
        match known {
            Some((lo, hi)) if lo <= sp && sp < hi => {
                let limit = hi.min(sp.saturating_add(span));
                Stack { lo: sp, hi: limit, limit, ended: true }
            }
            _ => Stack::new(sp, span),
        }
    }

    /// Whether `[addr, addr + len)` lies inside the stack (probing further pages as needed).
    fn holds<M: MemoryReader + ?Sized>(&mut self, mem: &mut M, addr: u64, len: u64) -> bool {
        let Some(end) = addr.checked_add(len) else { return false };
        if addr < self.lo || end > self.limit {
            return false;
        }
        while end > self.hi {
            if self.ended {
                return false;
            }
            if !mem.probe(self.hi) {
                // A stack overflow leaves sp inside the guard page below the stack: the stack proper starts at the
                // next page. Only at the very start, and only one page.
                let next = (self.hi | (PROBE_PAGE - 1)).saturating_add(1);
                if self.hi == self.lo && next < self.limit && mem.probe(next) {
                    self.hi = next;
                    continue;
                }
                self.ended = true;
                return false;
            }
            // The page holding `hi` is readable: the stack reaches at least to its end.
            let next = (self.hi | (PROBE_PAGE - 1)).saturating_add(1).min(self.limit);
            if next <= self.hi {
                self.ended = true;
                return false;
            }
            self.hi = next;
        }
        true
    }
}

fn call_precedes<M: MemoryReader + ?Sized>(arch: &ArchSpec, mem: &mut M, ret: u64) -> bool {
    if arch.link_register {
        aarch64::call_precedes(mem, ret)
    } else {
        x86_64::call_precedes(mem, ret)
    }
}

/// Whether `ret` is believable as a return address: inside an image, right after a call instruction.
fn is_return_address<M: MemoryReader + ?Sized, C: CodeMap + ?Sized>(
    arch: &ArchSpec,
    mem: &mut M,
    code: &C,
    ret: u64,
) -> bool {
    ret > 1 && code.module_for(ret.wrapping_sub(1)).is_some() && call_precedes(arch, mem, ret)
}

/// One found caller: its registers and how it was found.
struct Caller {
    regs: UnwindRegs,
    trust: u8,
}

fn walk_into<M: MemoryReader + ?Sized, C: CodeMap + ?Sized>(
    start: &RegisterValues,
    mem: &mut M,
    code: &C,
    opts: &WalkOptions,
    known_stack: Option<(u64, u64)>,
    rules: &mut cfi::RuleCache,
    out: &mut Out<'_>,
) -> StopReason {
    let Some(arch) = arch_of(start) else {
        return StopReason::NoRegisters;
    };
    let Some(mut regs) = arch.regs_from(start) else {
        return StopReason::NoRegisters;
    };
    let (Some(pc0), Some(sp0)) = (regs.get(arch.pc), regs.get(arch.sp)) else {
        return StopReason::NoRegisters;
    };
    let pc0 = opts.strip_value(pc0);
    regs.set(arch.pc, pc0);
    if arch.link_register {
        if let Some(lr) = regs.get(arch.ra) {
            regs.set(arch.ra, opts.strip_value(lr));
        }
    }
    if opts.swift_async {
        // Stopped inside an async prologue, between `orr x29, x29, #1 << 60` and `add x29, sp, #16`.
        if let Some(fp) = regs.get(arch.fp) {
            regs.set(arch.fp, swift_async::untag(fp));
        }
    }
    if !out.push(pc0, trust::CONTEXT) {
        return StopReason::NoRoom;
    }
    let mut stack = Stack::starting_at(sp0, opts.max_stack_span, known_stack);
    let mut ctx = cfi::Context::new_in();
    let mut exact = true;
    let mut first = true;
    let mut scans = 0usize;
    let mut hops = 0usize;
    // The caller's registers, written in place by whichever method finds the caller (see `cfi::Stepped`).
    let mut next = UnwindRegs::default();
    for _ in 0..opts.max_steps {
        let (Some(pc), Some(sp)) = (regs.get(arch.pc), regs.get(arch.sp)) else {
            return StopReason::NoCaller;
        };
        let lookup = if exact { pc } else { pc.wrapping_sub(1) };
        let module = code.module_for(lookup);
        // The trust of the caller found, whose registers are then in `next`.
        let mut found: Option<u8> = None;

        // 1. Unwind tables.
        if let Some(m) = module {
            // ELF images index their CFI with `.eh_frame_hdr`; Apple images carry compact unwind (`__unwind_info`,
            // which sends the functions it cannot describe to their FDE in `__eh_frame`).
            let step = if m.unwind.eh_frame_hdr.0 == 0 && m.unwind.compact.0 != 0 {
                compact::step(arch, mem, &mut ctx, rules, &m, &regs, lookup, exact).map(|s| match s {
                    cfi::Step::Caller { regs: r, cfa, signal_frame } => {
                        next = r;
                        cfi::Stepped::Caller { cfa, signal_frame }
                    }
                    cfi::Step::End => cfi::Stepped::End,
                })
            } else {
                cfi::step_into(arch, mem, &mut ctx, rules, m.unwind.eh_frame_hdr.0, &regs, lookup, &mut next)
            };
            match step {
                Ok(cfi::Stepped::End) => return StopReason::End,
                Ok(cfi::Stepped::Caller { signal_frame, .. }) => {
                    let ra = next.get(arch.pc).map(|v| opts.strip_value(v)).unwrap_or(0);
                    if ra == 0 {
                        return StopReason::End;
                    }
                    next.set(arch.pc, ra);
                    if arch.link_register {
                        next.set(arch.ra, ra);
                    }
                    let nsp = next.get(arch.sp).unwrap_or(0);
                    if signal_frame {
                        if !stack.holds(mem, nsp, 1) {
                            if hops >= MAX_STACK_HOPS {
                                return StopReason::OutsideStack;
                            }
                            hops = hops.saturating_add(1);
                            stack = Stack::new(nsp, opts.max_stack_span);
                        }
                        found = Some(trust::CONTEXT);
                    } else {
                        let moved_up = nsp > sp || (first && arch.link_register && nsp == sp);
                        if !moved_up {
                            return StopReason::NotIncreasing;
                        }
                        if !stack.holds(mem, sp, nsp.saturating_sub(sp)) {
                            return StopReason::OutsideStack;
                        }
                        found = Some(trust::CFI);
                    }
                }
                Err(_) => {}
            }
        }

        // 2. Frame 0 without unwind tables: the link register (arm64), or the return slot at sp (x86-64, a call
        //    through a bad pointer leaves the pc outside every image).
        if found.is_none() && first {
            if arch.link_register {
                if let Some(lr) = regs.get(arch.ra) {
                    if is_return_address(arch, mem, code, lr) {
                        next = regs;
                        next.set(arch.pc, lr);
                        found = Some(trust::LINK_REGISTER);
                    }
                }
            } else if module.is_none() && stack.holds(mem, sp, 8) {
                if let Some(ret) = mem.read_u64(sp) {
                    if is_return_address(arch, mem, code, ret) {
                        next = regs;
                        next.keep_only(arch.callee_saved);
                        next.set(arch.pc, ret);
                        next.set(arch.sp, sp.saturating_add(arch.call_pushes));
                        found = Some(trust::SCAN);
                    }
                }
            }
        }

        // 3. The frame-pointer record.
        if found.is_none() {
            if let Some(c) = frame_pointer_step(arch, mem, code, opts, &mut stack, &regs, sp) {
                next = c.regs;
                found = Some(c.trust);
            }
        }

        // 4. A scan for a return address.
        if found.is_none() && scans < opts.max_scans {
            if let Some(c) = scan_step(arch, mem, code, opts, &mut stack, &regs, sp) {
                scans = scans.saturating_add(1);
                next = c.regs;
                found = Some(c.trust);
            }
        }

        let Some(caller_trust) = found else { return StopReason::NoCaller };
        let next_pc = next.get(arch.pc).unwrap_or(0);
        if next_pc == 0 {
            return StopReason::End;
        }
        if next_pc == pc && next.get(arch.sp) == Some(sp) {
            return StopReason::NotIncreasing;
        }
        if opts.swift_async {
            let room = async_callers(arch, mem, code, opts, &mut stack, &regs, &mut next, caller_trust, out);
            if !room {
                return StopReason::FrameCap;
            }
        }
        if !out.push(next_pc, caller_trust) {
            return StopReason::FrameCap;
        }
        exact = caller_trust == trust::CONTEXT;
        regs = next;
        first = false;
    }
    StopReason::StepCap
}

/// Swift async frames for one step (only with [`WalkOptions::swift_async`]): when the caller's frame pointer was
/// read from a tagged extended record, clears the tag in `caller` (the caller's registers, found with trust
/// `caller_trust`) and, when that record is the one at the current frame's own `fp` (the word there is the tagged
/// value, and `fp - 8 .. fp + 16` lies in the stack), stores the async context chain beside it. Not for callers
/// found by a scan (the record's owner may be a frame the scan skipped) or restored from a signal frame (its `fp`
/// is a register, not a record). `false` when the output is full.
#[allow(clippy::too_many_arguments)]
fn async_callers<M: MemoryReader + ?Sized, C: CodeMap + ?Sized>(
    arch: &ArchSpec,
    mem: &mut M,
    code: &C,
    opts: &WalkOptions,
    stack: &mut Stack,
    regs: &UnwindRegs,
    caller: &mut UnwindRegs,
    caller_trust: u8,
    out: &mut Out<'_>,
) -> bool {
    let Some(raw) = caller.get(arch.fp) else { return true };
    if !swift_async::is_tagged(raw) {
        return true;
    }
    caller.set(arch.fp, swift_async::untag(raw));
    if caller_trust == trust::SCAN || caller_trust == trust::CONTEXT {
        return true;
    }
    let Some(record) = regs.get(arch.fp) else { return true };
    let Some(slot) = record.checked_sub(swift_async::CONTEXT_SLOT) else { return true };
    if !stack.holds(mem, slot, 24) || mem.read_u64(record) != Some(raw) {
        return true;
    }
    let end = swift_async::follow(mem, code, opts.strip, record, |v| out.push(v, trust::ASYNC));
    end != swift_async::ChainEnd::Full
}

/// Follows the frame record at `fp` when it lies in the stack at or above `sp` and holds a believable return
/// address.
fn frame_pointer_step<M: MemoryReader + ?Sized, C: CodeMap + ?Sized>(
    arch: &ArchSpec,
    mem: &mut M,
    code: &C,
    opts: &WalkOptions,
    stack: &mut Stack,
    regs: &UnwindRegs,
    sp: u64,
) -> Option<Caller> {
    let fp = regs.get(arch.fp)?;
    if fp < sp || fp.checked_rem(opts.fp_align.max(1)) != Some(0) || !stack.holds(mem, fp, 16) {
        return None;
    }
    let next_fp = mem.read_u64(fp)?;
    let ret = opts.strip_value(mem.read_u64(fp.checked_add(8)?)?);
    if !is_return_address(arch, mem, code, ret) {
        return None;
    }
    let mut next = *regs;
    next.keep_only(arch.callee_saved & !(1u64 << arch.fp));
    next.set(arch.fp, next_fp);
    next.set(arch.sp, fp.checked_add(16)?);
    next.set(arch.pc, ret);
    if arch.link_register {
        next.set(arch.ra, ret);
    }
    Some(Caller { regs: next, trust: trust::FRAME_POINTER })
}

/// Looks at the words above `sp` (inside the stack, stopping at the first unreadable one) for a return address.
fn scan_step<M: MemoryReader + ?Sized, C: CodeMap + ?Sized>(
    arch: &ArchSpec,
    mem: &mut M,
    code: &C,
    opts: &WalkOptions,
    stack: &mut Stack,
    regs: &UnwindRegs,
    sp: u64,
) -> Option<Caller> {
    let base = sp.checked_add(7)? & !7;
    for k in 0..opts.scan_words {
        let slot = base.checked_add(k.checked_mul(8)?)?;
        if !stack.holds(mem, slot, 8) {
            return None;
        }
        let ret = opts.strip_value(mem.read_u64(slot)?);
        if !is_return_address(arch, mem, code, ret) {
            continue;
        }
        let mut next = *regs;
        next.keep_only(arch.callee_saved);
        next.set(arch.pc, ret);
        next.set(arch.sp, slot.checked_add(8)?);
        if arch.link_register {
            next.set(arch.ra, ret);
            // arm64 stores return addresses in frame records `[fp, lr]`: the word below is the caller's fp.
            match slot.checked_sub(8).filter(|a| *a >= sp).and_then(|a| mem.read_u64(a)) {
                Some(fp) => next.set(arch.fp, fp),
                None => next.clear(arch.fp),
            }
        }
        return Some(Caller { regs: next, trust: trust::SCAN });
    }
    None
}

/// Expands stored frames and repeats into the full frame list (launch-time helper for tests and tools).
#[cfg(test)]
pub(crate) fn expand(frames: &[u64], repeats: &[Repeat]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut i = 0usize;
    while i < frames.len() {
        if let Some(r) = repeats.iter().find(|r| r.start as usize == i) {
            let run = &frames[i..i + r.len as usize];
            for _ in 0..=r.count {
                out.extend_from_slice(run);
            }
            i += r.len as usize;
        } else {
            out.push(frames[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
pub(crate) mod tests;
