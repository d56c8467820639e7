//! The pure frame-pointer stack walker.
//!
//! Input: the registers a walk starts from ([`WalkRegs`]) and a [`MemoryReader`] (the only way stack memory is
//! read: `process_vm_readv` on Linux, `mach_vm_read_overwrite` on Apple, a byte map in tests). Output: raw frame
//! addresses (frame 0 = PC, then return addresses, unadjusted; the `- 1` for symbol lookup is the viewer's job)
//! into a caller-provided buffer, plus repeat records that keep deep recursion whole.
//!
//! A frame record is `[previous fp, return address]` at `fp` on both x86-64 (`push rbp; mov rbp, rsp`) and arm64
//! (`stp x29, x30, [sp, #-16]!; mov x29, sp`). The walk stops when the frame pointer is 0, misaligned, not strictly
//! increasing, outside `[sp, sp + max_stack_span)`, unreadable, when a return address is 0 (after PAC stripping),
//! or at the step cap.
//!
//! **arm64 leaf heuristic.** A leaf function (or any function before its prologue has stored `x30`) has no frame
//! record of its own, so its caller appears only in LR. When `lr` is given, the walker uses LR as frame 1 unless it
//! equals the return address stored in the first frame record (then the function already saved it and LR adds
//! nothing). Cost of the heuristic: a non-leaf function interrupted after a call returned and before its epilogue
//! holds a stale LR that points into itself, so its own function appears twice (frames 0 and 1). This is the
//! trade-off PLCrashReporter and KSCrash make; only the crashed thread of a fault, and threads stopped by signal, pass
//! LR.
//!
//! **Repeats.** A run of `p` frames (1 ≤ p ≤ [`MAX_REPEAT_PERIOD`]) that repeats back to back is stored once and
//! counted, so a stack overflow's callers (below thousands of recursive frames) stay in the report.
//!
//! Never allocates, locks or panics; async-signal-safe when the reader is.

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
}

use crate::arch::pac::PacStrip;

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
pub use crate::arch::WalkRegs;

/// Longest repeating run (in frames) the walker compresses.
pub const MAX_REPEAT_PERIOD: usize = 8;

/// Walk limits and per-architecture rules.
#[derive(Clone, Copy, Debug)]
pub struct WalkOptions {
    /// Required alignment of a frame pointer in bytes (8 on x86-64 and arm64).
    pub fp_align: u64,
    /// Frame records must lie in `[sp, sp + max_stack_span)` (bytes).
    pub max_stack_span: u64,
    /// Most frame records followed (bounds the time a pathological stack costs; repeats count too).
    pub max_steps: usize,
    /// Clears pointer-authentication bits from return addresses and `lr` (`None`: values are used as they are,
    /// right on x86-64). The one stripper shared by the Linux and Apple paths ([`crate::arch::pac`]).
    pub strip: Option<PacStrip>,
    /// Bytes above `sp` searched for a frame record when the first one is not valid (see [`walk_checked`]);
    /// 0 disables the search.
    pub scan_bytes: u64,
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

impl WalkOptions {
    /// Options for this host: 8-byte alignment, 1 GiB stack span, 1 Mi steps, and PAC stripping on arm64.
    pub const fn host() -> Self {
        WalkOptions {
            fp_align: 8,
            max_stack_span: 1 << 30,
            max_steps: 1 << 20,
            strip: HOST_STRIP,
            scan_bytes: 16 * 1024,
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
    /// The frame pointer was 0: the normal end of a stack.
    NullFramePointer,
    /// The frame pointer was not aligned.
    Misaligned,
    /// The next frame pointer was not above the previous one (a cycle or garbage).
    NotIncreasing,
    /// The frame pointer left `[sp, sp + max_stack_span)`.
    OutsideStack,
    /// The frame record could not be read.
    Unreadable,
    /// A return address was 0.
    NullReturnAddress,
    /// The output buffer filled up (frames truncated).
    FrameCap,
    /// `max_steps` frame records were followed.
    StepCap,
    /// The output buffer has no room even for frame 0.
    NoRoom,
}

/// A repeating run (same meaning as `report_format::encode::Repeat`).
pub type Repeat = report_format::encode::Repeat;

/// Result of a walk.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkOutcome {
    /// Frames stored at the front of the output buffer.
    pub frames: usize,
    /// Repeat records stored at the front of the repeat buffer.
    pub repeats: usize,
    /// True when frames were lost to a cap (frame buffer, repeat buffer or steps).
    pub truncated: bool,
    /// Why the walk ended.
    pub stop: StopReason,
}

/// Output under construction: frames plus online repeat detection.
struct Out<'a> {
    frames: &'a mut [u64],
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

    fn store(&mut self, v: u64) -> bool {
        match self.frames.get_mut(self.n) {
            Some(slot) => {
                *slot = v;
                self.n += 1;
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
                    self.nrep += 1;
                }
                None => self.lost = true,
            }
        }
        self.floor = self.n;
        for j in 0..k {
            let v = self.at(start + j);
            if !self.store(v) {
                return false;
            }
        }
        self.floor = self.n;
        true
    }

    /// Appends one frame; `false` when the buffer is full.
    fn push(&mut self, v: u64) -> bool {
        if let Some((start, p, k, cycles)) = self.active {
            if self.at(start + k) == v {
                let k = k + 1;
                self.active =
                    Some(if k == p { (start, p, 0, cycles.saturating_add(1)) } else { (start, p, k, cycles) });
                return true;
            }
            if !self.close_repeat() {
                return false;
            }
        }
        if !self.store(v) {
            return false;
        }
        // Do the last 2p stored frames form two copies of one run? Then drop the second copy and count.
        for p in 1..=MAX_REPEAT_PERIOD {
            if self.n < self.floor + 2 * p {
                break;
            }
            let a = self.n - 2 * p;
            if (0..p).all(|j| self.at(a + j) == self.at(a + p + j)) {
                self.n -= p;
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
}

/// Walks one stack. `frames` receives frame 0 (the PC) and the return addresses; `repeats` the compressed runs.
/// Never allocates or panics; async-signal-safe when `mem` is.
pub fn walk<M: MemoryReader>(
    start: &WalkRegs,
    mem: &mut M,
    opts: &WalkOptions,
    frames: &mut [u64],
    repeats: &mut [Repeat],
) -> WalkOutcome {
    walk_checked(start, mem, opts, None, frames, repeats)
}

/// Like [`walk`], with a code-address test (e.g. "inside the text range of a loaded image").
///
/// **Bridging frameless code.** When the chain breaks (the frame pointer is not aligned, not above the previous
/// record, outside the stack, unreadable, or its return address is not accepted by `is_code`), the code that ran
/// keeps no frame pointer (glibc's `raise`/`abort`, or a precompiled library) and `rbp`/`x29` holds an unrelated
/// value. The walker then searches the `opts.scan_bytes` above the last good record (or above `sp` at the start)
/// for the lowest frame record that starts a believable chain ([`SCAN_MIN_CHAIN`] valid records, or fewer ending
/// in a null frame pointer) and continues from there, at most [`MAX_BRIDGES`] times. Frames of the frameless
/// functions themselves are lost (documented in the handler README).
pub fn walk_checked<M: MemoryReader>(
    start: &WalkRegs,
    mem: &mut M,
    opts: &WalkOptions,
    is_code: Option<&dyn Fn(u64) -> bool>,
    frames: &mut [u64],
    repeats: &mut [Repeat],
) -> WalkOutcome {
    let mut out = Out { frames, n: 0, repeats, nrep: 0, active: None, floor: 0, lost: false };
    let stop = walk_into(start, mem, opts, is_code, &mut out);
    let (n, nrep, lost) = out.finish();
    let truncated = lost || matches!(stop, StopReason::FrameCap | StopReason::StepCap);
    let stop =
        if lost && !matches!(stop, StopReason::StepCap | StopReason::NoRoom) { StopReason::FrameCap } else { stop };
    WalkOutcome { frames: n, repeats: nrep, truncated, stop }
}

/// Most times one walk bridges a broken chain by searching for a frame record.
pub const MAX_BRIDGES: usize = 16;

fn walk_into<M: MemoryReader>(
    start: &WalkRegs,
    mem: &mut M,
    opts: &WalkOptions,
    is_code: Option<&dyn Fn(u64) -> bool>,
    out: &mut Out<'_>,
) -> StopReason {
    if !out.push(start.pc) {
        return StopReason::NoRoom;
    }
    let lo = start.sp;
    let hi = start.sp.saturating_add(opts.max_stack_span);
    let align = opts.fp_align.max(1);
    let mut fp = start.fp;
    // The last frame record followed (the next one must lie above it); `None` before the first.
    let mut prev: Option<u64> = None;
    let mut bridges = 0usize;
    for _ in 0..opts.max_steps {
        let first = prev.is_none();
        let checked = if fp == 0 {
            Err(StopReason::NullFramePointer)
        } else if fp % align != 0 {
            Err(StopReason::Misaligned)
        } else if prev.is_some_and(|p| fp <= p) {
            Err(StopReason::NotIncreasing)
        } else if fp < lo || fp >= hi || fp.checked_add(16).is_none_or(|end| end > hi) {
            Err(StopReason::OutsideStack)
        } else {
            let mut rec = [0u8; 16];
            if mem.read(fp, &mut rec) {
                let (a, b) = rec.split_at(8);
                let next_fp = u64::from_ne_bytes(a.try_into().unwrap_or([0; 8]));
                let ret = opts.strip_value(u64::from_ne_bytes(b.try_into().unwrap_or([0; 8])));
                if ret == 0 {
                    Err(StopReason::NullReturnAddress)
                } else if is_code.is_some_and(|f| !f(ret)) {
                    Err(StopReason::Unreadable)
                } else {
                    Ok((next_fp, ret))
                }
            } else {
                Err(StopReason::Unreadable)
            }
        };
        match checked {
            Ok((next_fp, ret)) => {
                if first {
                    if let Some(lr) = start.lr.map(|v| opts.strip_value(v)) {
                        if lr != 0 && lr != ret && !out.push(lr) {
                            return StopReason::FrameCap;
                        }
                    }
                }
                if !out.push(ret) {
                    return StopReason::FrameCap;
                }
                prev = Some(fp);
                fp = next_fp;
            }
            Err(why) => {
                // A null frame pointer is usually the end of the stack, but frameless code (glibc's `abort`) can
                // leave a 0 in the chain too: search anyway; above the real end no believable chain is found.
                if let Some(f) = is_code {
                    if bridges < MAX_BRIDGES && opts.scan_bytes > 0 {
                        let base = prev.map_or(start.sp, |p| p.saturating_add(16));
                        if let Some(found) = scan_for_record(start, base, mem, opts, f) {
                            bridges += 1;
                            if first {
                                finish_lr(start, opts, out, true, why);
                            }
                            // The bridged record counts as "after the first": LR was handled above.
                            prev = Some(found.saturating_sub(align));
                            fp = found;
                            continue;
                        }
                    }
                }
                return finish_lr(start, opts, out, first, why);
            }
        }
    }
    StopReason::StepCap
}

/// Reads the record at `fp`: `Some((next_fp, return address))` when it is structurally valid and the return
/// address is code.
fn read_record<M: MemoryReader>(
    fp: u64,
    start: &WalkRegs,
    mem: &mut M,
    opts: &WalkOptions,
    is_code: &dyn Fn(u64) -> bool,
) -> Option<(u64, u64)> {
    let hi = start.sp.saturating_add(opts.max_stack_span);
    if fp == 0 || fp % opts.fp_align.max(1) != 0 || fp < start.sp || fp.checked_add(16)? > hi {
        return None;
    }
    let next = mem.read_u64(fp)?;
    let ret = opts.strip_value(mem.read_u64(fp + 8)?);
    if !is_code(ret) || (next != 0 && (next <= fp || next >= hi || next % opts.fp_align.max(1) != 0)) {
        return None;
    }
    Some((next, ret))
}

/// Valid records a searched-for chain must show (or reach its end with a null frame pointer) to be believed.
/// Stale frame records left below the live frames by earlier calls rarely chain this far, because the frameless
/// code running now has overwritten what they point to.
pub const SCAN_MIN_CHAIN: usize = 4;

/// Finds the lowest address in `[base, base + scan_bytes)` where a chain of at least [`SCAN_MIN_CHAIN`] valid frame
/// records starts (or a shorter one that ends with a null frame pointer).
fn scan_for_record<M: MemoryReader>(
    start: &WalkRegs,
    base: u64,
    mem: &mut M,
    opts: &WalkOptions,
    is_code: &dyn Fn(u64) -> bool,
) -> Option<u64> {
    let align = opts.fp_align.max(1);
    let first = base.checked_add(align - 1)? / align * align;
    let steps = opts.scan_bytes / align;
    for k in 0..steps {
        let a = first.checked_add(k * align)?;
        let mut fp = a;
        let mut good = 0usize;
        while let Some((next, _)) = read_record(fp, start, mem, opts, is_code) {
            good += 1;
            if next == 0 || good >= SCAN_MIN_CHAIN {
                return Some(a);
            }
            fp = next;
        }
    }
    None
}

/// When the walk ends before reading the first record, LR is still the best guess for frame 1 (arm64 leaf).
fn finish_lr(start: &WalkRegs, opts: &WalkOptions, out: &mut Out<'_>, first: bool, why: StopReason) -> StopReason {
    if first {
        if let Some(lr) = start.lr.map(|v| opts.strip_value(v)) {
            if lr != 0 && !out.push(lr) {
                return StopReason::FrameCap;
            }
        }
    }
    why
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
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    /// Synthetic memory: 8-byte words at addresses.
    #[derive(Default)]
    struct Mem {
        words: BTreeMap<u64, u64>,
        reads: usize,
    }

    impl Mem {
        fn record(&mut self, fp: u64, next: u64, ret: u64) {
            self.words.insert(fp, next);
            self.words.insert(fp + 8, ret);
        }
    }

    impl MemoryReader for Mem {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
            self.reads += 1;
            for (k, chunk) in buf.chunks_mut(8).enumerate() {
                match self.words.get(&(addr + 8 * k as u64)) {
                    Some(w) => chunk.copy_from_slice(&w.to_ne_bytes()[..chunk.len()]),
                    None => return false,
                }
            }
            true
        }
    }

    fn x86(pc: u64, sp: u64, fp: u64) -> WalkRegs {
        WalkRegs { pc, sp, fp, lr: None }
    }

    fn run(start: WalkRegs, mem: &mut Mem, cap: usize) -> (Vec<u64>, Vec<Repeat>, WalkOutcome) {
        let mut frames = vec![0u64; cap];
        let mut reps = [Repeat::default(); 8];
        let o = walk(&start, mem, &WalkOptions { strip: None, ..WalkOptions::host() }, &mut frames, &mut reps);
        (frames[..o.frames].to_vec(), reps[..o.repeats].to_vec(), o)
    }

    /// A normal chain of three records ending with fp = 0.
    fn chain() -> Mem {
        let mut m = Mem::default();
        m.record(0x7000_0010, 0x7000_0040, 0x40_1111);
        m.record(0x7000_0040, 0x7000_0100, 0x40_2222);
        m.record(0x7000_0100, 0, 0x40_3333);
        m
    }

    #[test]
    fn follows_a_chain_to_the_null_frame_pointer() {
        let mut m = chain();
        let (f, r, o) = run(x86(0x40_0000, 0x7000_0000, 0x7000_0010), &mut m, 64);
        assert_eq!(f, vec![0x40_0000, 0x40_1111, 0x40_2222, 0x40_3333]);
        assert!(r.is_empty());
        assert_eq!(o.stop, StopReason::NullFramePointer);
        assert!(!o.truncated);
    }

    #[test]
    fn a_cycle_stops_as_not_increasing() {
        let mut m = Mem::default();
        m.record(0x7000_0010, 0x7000_0040, 0x40_1111);
        m.record(0x7000_0040, 0x7000_0010, 0x40_2222); // points back down
        let (f, _, o) = run(x86(0x40_0000, 0x7000_0000, 0x7000_0010), &mut m, 64);
        assert_eq!(f, vec![0x40_0000, 0x40_1111, 0x40_2222]);
        assert_eq!(o.stop, StopReason::NotIncreasing);
        // Self-loop.
        let mut m = Mem::default();
        m.record(0x7000_0010, 0x7000_0010, 0x40_1111);
        let (_, _, o) = run(x86(0x40_0000, 0x7000_0000, 0x7000_0010), &mut m, 64);
        assert_eq!(o.stop, StopReason::NotIncreasing);
    }

    #[test]
    fn misaligned_frame_pointer_stops() {
        let mut m = chain();
        let (f, _, o) = run(x86(0x40_0000, 0x7000_0000, 0x7000_0013), &mut m, 64);
        assert_eq!(f, vec![0x40_0000]);
        assert_eq!(o.stop, StopReason::Misaligned);
        let mut m = Mem::default();
        m.record(0x7000_0010, 0x7000_0043, 0x40_1111);
        let (f, _, o) = run(x86(0x40_0000, 0x7000_0000, 0x7000_0010), &mut m, 64);
        assert_eq!(f, vec![0x40_0000, 0x40_1111]);
        assert_eq!(o.stop, StopReason::Misaligned);
    }

    #[test]
    fn garbage_and_unreadable_memory_stop_without_panicking() {
        // fp below sp.
        let mut m = chain();
        let (f, _, o) = run(x86(0x40_0000, 0x7000_0020, 0x7000_0010), &mut m, 64);
        assert_eq!((f.len(), o.stop), (1, StopReason::OutsideStack));
        // Unmapped record.
        let mut m = Mem::default();
        let (f, _, o) = run(x86(0x40_0000, 0x7000_0000, 0x7000_0010), &mut m, 64);
        assert_eq!((f.len(), o.stop), (1, StopReason::Unreadable));
        // Near the top of the address space: no overflow.
        let mut m = Mem::default();
        let (_, _, o) = run(x86(0x40_0000, u64::MAX - 64, u64::MAX - 7), &mut m, 64);
        assert!(matches!(o.stop, StopReason::OutsideStack | StopReason::Misaligned), "{o:?}");
        // A zero return address.
        let mut m = Mem::default();
        m.record(0x7000_0010, 0x7000_0040, 0);
        let (f, _, o) = run(x86(0x40_0000, 0x7000_0000, 0x7000_0010), &mut m, 64);
        assert_eq!((f.len(), o.stop), (1, StopReason::NullReturnAddress));
        // Pseudo-random words: every run ends, no panic.
        let mut seed = 0x1234_5678_9abc_def0u64;
        for _ in 0..200 {
            let mut m = Mem::default();
            for k in 0..64u64 {
                seed ^= seed << 13;
                seed ^= seed >> 7;
                seed ^= seed << 17;
                m.words.insert(0x7000_0000 + 8 * k, if k % 3 == 0 { 0x7000_0000 + (seed % 512) } else { seed });
            }
            let (f, _, o) = run(x86(1, 0x7000_0000, 0x7000_0000 + (seed % 64) * 8), &mut m, 32);
            assert!(!f.is_empty() && f.len() <= 32, "{o:?}");
        }
    }

    #[test]
    fn frame_cap_truncates() {
        let mut m = Mem::default();
        for k in 0..100u64 {
            m.record(0x7000_0000 + 16 * k, 0x7000_0000 + 16 * (k + 1), 0x40_0000 + k);
        }
        let (f, _, o) = run(x86(0x1, 0x7000_0000, 0x7000_0000), &mut m, 10);
        assert_eq!(f.len(), 10);
        assert!(o.truncated);
        assert_eq!(o.stop, StopReason::FrameCap);
        assert_eq!(f[9], 0x40_0008);
        // No room at all.
        let (f, _, o) = run(x86(0x1, 0x7000_0000, 0x7000_0000), &mut m, 0);
        assert_eq!((f.len(), o.stop), (0, StopReason::NoRoom));
    }

    #[test]
    fn step_cap_bounds_the_work() {
        let mut m = Mem::default();
        for k in 0..100u64 {
            m.record(0x7000_0000 + 16 * k, 0x7000_0000 + 16 * (k + 1), 0x40_0000);
        }
        let mut frames = [0u64; 16];
        let mut reps = [Repeat::default(); 4];
        let opts = WalkOptions { max_steps: 20, strip: None, ..WalkOptions::host() };
        let o = walk(&x86(1, 0x7000_0000, 0x7000_0000), &mut m, &opts, &mut frames, &mut reps);
        assert_eq!(o.stop, StopReason::StepCap);
        assert!(o.truncated);
        assert!(m.reads <= 20);
    }

    #[test]
    fn deep_recursion_is_compressed_and_keeps_its_callers() {
        // pc in recurse(); 5000 records returning into recurse(), then trigger(), run(), main().
        let mut m = Mem::default();
        let base = 0x7000_0000u64;
        let n = 5000u64;
        for k in 0..n {
            m.record(base + 32 * k, base + 32 * (k + 1), 0x40_0abc);
        }
        m.record(base + 32 * n, base + 32 * (n + 1), 0x40_1000);
        m.record(base + 32 * (n + 1), base + 32 * (n + 2), 0x40_2000);
        m.record(base + 32 * (n + 2), 0, 0x40_3000);
        let (f, r, o) = run(x86(0x40_0aa0, base, base), &mut m, 64);
        assert!(!o.truncated, "{o:?}");
        assert_eq!(f, vec![0x40_0aa0, 0x40_0abc, 0x40_1000, 0x40_2000, 0x40_3000]);
        assert_eq!(r, vec![Repeat { start: 1, len: 1, count: (n - 1) as u32 }]);
        let full = expand(&f, &r);
        assert_eq!(full.len() as u64, 1 + n + 3);
    }

    #[test]
    fn period_two_recursion_and_a_partial_cycle() {
        // a b a b a b a (then c): stored "a b" once with 2 more cycles, then the partial "a", then c.
        let seq = [0xa, 0xb, 0xa, 0xb, 0xa, 0xb, 0xa, 0xc];
        let mut m = Mem::default();
        let base = 0x7000_0000u64;
        for (k, ret) in seq.iter().enumerate() {
            let k = k as u64;
            let next = if k + 1 == seq.len() as u64 { 0 } else { base + 16 * (k + 1) };
            m.record(base + 16 * k, next, *ret);
        }
        let (f, r, _) = run(x86(0x1, base, base), &mut m, 64);
        assert_eq!(expand(&f, &r), [&[0x1u64][..], &seq[..]].concat());
        assert_eq!(r.len(), 1);
        assert_eq!(f.len(), 1 + 2 + 2);
    }

    #[test]
    fn a_frameless_pc_is_bridged_by_searching_for_a_frame_record() {
        let mut m = Mem::default();
        let sp = 0x7000_0000u64;
        // Junk a frameless libc function left on the stack, including a code-looking value with a bad successor.
        m.words.insert(sp, 0x1234);
        m.words.insert(sp + 8, 0x7000_0100); // looks like an fp, but its "return address" is not code
        m.words.insert(sp + 16, 0x40_9999);
        m.record(sp + 0x100, 0x7000_0003, 0x40_1000); // misaligned successor: rejected
        m.record(sp + 0x20, sp + 0x30, 0x40_3333); // a stale pair: chains once, then into junk
        m.record(sp + 0x30, sp + 0x38, 0x40_4444);
        m.record(sp + 0x40, sp + 0x80, 0x40_1111); // the first real record
        m.record(sp + 0x80, 0, 0x40_2222);
        let is_code = |a: u64| (0x40_0000..0x50_0000).contains(&a);
        let start = WalkRegs { pc: 0x7f00_0000_1000, sp, fp: 0x5, lr: None };
        let mut frames = [0u64; 16];
        let mut reps = [Repeat::default(); 4];
        let opts = WalkOptions { strip: None, ..WalkOptions::host() };
        let o = walk_checked(&start, &mut m, &opts, Some(&is_code), &mut frames, &mut reps);
        assert_eq!(&frames[..o.frames], &[0x7f00_0000_1000, 0x40_1111, 0x40_2222]);
        // Without the code test there is no search: the bad fp ends the walk.
        let o = walk(&start, &mut m, &opts, &mut frames, &mut reps);
        assert_eq!(o.frames, 1);
        // A valid start is used as is, even when a search would find something else.
        let start = WalkRegs { fp: sp + 0x80, ..start };
        let o = walk_checked(&start, &mut m, &opts, Some(&is_code), &mut frames, &mut reps);
        assert_eq!(&frames[..o.frames], &[0x7f00_0000_1000, 0x40_2222]);
        // Nothing to find: falls back to the plain walk.
        let o = walk_checked(&start, &mut Mem::default(), &opts, Some(&is_code), &mut frames, &mut reps);
        assert_eq!(o.frames, 1);
    }

    #[test]
    fn arm64_leaf_uses_lr_and_strips_signed_return_addresses() {
        let mut m = Mem::default();
        // Signed return addresses as qemu's pac-ret produces them.
        m.record(0x7000_0010, 0x7000_0040, 0x0029_0055_0001_1111);
        m.record(0x7000_0040, 0, 0x0013_0055_0001_2222);
        let opts = WalkOptions { strip: PacStrip::with_va_bits(48), ..WalkOptions::host() };
        let mut frames = [0u64; 16];
        let mut reps = [Repeat::default(); 4];
        // Leaf: LR differs from the first record's return address -> frame 1.
        let start = WalkRegs { pc: 0x55_0000_9000, sp: 0x7000_0000, fp: 0x7000_0010, lr: Some(0x0077_0055_0000_9999) };
        let o = walk(&start, &mut m, &opts, &mut frames, &mut reps);
        assert_eq!(&frames[..o.frames], &[0x55_0000_9000, 0x55_0000_9999, 0x55_0001_1111, 0x55_0001_2222]);
        // Non-leaf: LR equals the saved return address -> not duplicated.
        let start = WalkRegs { lr: Some(0x0029_0055_0001_1111), ..start };
        let o = walk(&start, &mut m, &opts, &mut frames, &mut reps);
        assert_eq!(&frames[..o.frames], &[0x55_0000_9000, 0x55_0001_1111, 0x55_0001_2222]);
        // No frame record at all: LR still gives frame 1.
        let start = WalkRegs { fp: 0, ..start };
        let o = walk(&start, &mut m, &opts, &mut frames, &mut reps);
        assert_eq!(&frames[..o.frames], &[0x55_0000_9000, 0x55_0001_1111]);
    }
}
