//! The calling thread's stack: its registers read by a few instructions of inline assembly inside
//! [`current_stack`] (so the unwind tables of that very function describe them), then one walk with a pooled
//! walker over [`super::reader::LiveStackReader`].
//!
//! The register snapshot is consistent with the unwind tables because it is taken in one `asm!` block that moves
//! no stack pointer: every instruction of the block has the same CFI row, the block stores the callee-saved
//! registers, the stack pointer and the frame pointer as they are at that point, and its program counter is the
//! address of one of its own instructions. (x86-64: `rbx`, `rbp`, `rsp`, `r12`–`r15` and `rip`; arm64: `x19`–`x30`,
//! `sp` and `pc`.) A register the compiler had already spilled and reused holds the function's own value, and the
//! CFI row says where the caller's is saved; the walk reads it there, as for any frame.
#![allow(unsafe_code)]

use super::pool::{Claim, Walker};
use super::reader::LiveStackReader;
use super::{state, CaptureError, State};
use crate::arch::RegisterValues;
use crate::crash::stack_bounds;
use crate::unwind::{self, MemoryReader, WalkBuffers};

/// What a capture filled in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Captured {
    /// Addresses written to the front of the caller's buffer.
    pub len: usize,
    /// The stack was deeper than the buffer (or than the walker's 512 stored frames): the outermost frames are
    /// missing.
    pub truncated: bool,
}

/// Times [`claim_walker`] yields the CPU (`sched_yield`) between tries before it starts sleeping: a walker is held
/// for one walk, microseconds, unless its holder was preempted.
pub const CLAIM_YIELDS: u32 = 64;
/// Then it sleeps [`CLAIM_SLEEP_NS`] between tries, this many times (10 ms in all) before it gives up with
/// [`CaptureError::Busy`]: the holders were preempted, or more threads capture at once than there are walkers.
pub const CLAIM_SLEEPS: u32 = 100;
/// Nanoseconds of each sleep of [`claim_walker`].
pub const CLAIM_SLEEP_NS: u64 = 100_000;

/// A free walker of the pool, waiting (bounded: [`CLAIM_YIELDS`] yields, then [`CLAIM_SLEEPS`] sleeps of
/// [`CLAIM_SLEEP_NS`], 10 ms at most) while all are taken. Signal-safe (`sched_yield`, `nanosleep`). The Linux
/// capture handler does not wait here: it gets its walker from the request.
pub fn claim_walker(st: &'static State) -> Result<Claim<'static>, CaptureError> {
    if st.pool.is_empty() {
        return Err(CaptureError::NotInstalled);
    }
    for i in 0..CLAIM_YIELDS.saturating_add(CLAIM_SLEEPS) {
        if let Some(c) = st.pool.claim() {
            return Ok(c);
        }
        if i < CLAIM_YIELDS {
            yield_cpu();
        } else {
            sleep_ns(CLAIM_SLEEP_NS);
        }
    }
    Err(CaptureError::Busy)
}

fn yield_cpu() {
    #[cfg(unix)]
    // SAFETY: sched_yield has no preconditions (POSIX; async-signal-safe in practice: one system call).
    unsafe {
        libc::sched_yield();
    }
}

fn sleep_ns(ns: u64) {
    #[cfg(unix)]
    {
        let ts = libc::timespec { tv_sec: 0, tv_nsec: ns.min(999_999_999) as libc::c_long };
        // SAFETY: valid in-pointer; a null remainder is allowed (nanosleep is async-signal-safe, POSIX.1-2017).
        unsafe { libc::nanosleep(&ts, core::ptr::null_mut()) };
    }
    #[cfg(not(unix))]
    let _ = ns;
}

/// The body of [`current_stack`] and [`current_stack_skipping`]: a macro, not a function, so that the registers are
/// read in the frame of the function the caller sees (each is `#[inline(never)]`, and frame 0 of the walk is its
/// own pc); `$skip` more frames are left out after that one.
macro_rules! capture_here {
    ($out:expr, $skip:expr) => {{
        let regs = here();
        let out: &mut [u64] = $out;
        let skip: usize = $skip;
        let st = state().ok_or(CaptureError::NotInstalled)?;
        let mut claim = claim_walker(st)?;
        let w = claim.walker();
        // Frame 0 is the pc inside this function: the caller's return address comes next.
        let skip = skip.saturating_add(1);
        if let Some((len, truncated)) = fast_here(st, w, &regs, skip, out) {
            return Ok(Captured { len, truncated });
        }
        walk_here(st, w, &regs);
        let Some(o) = w.outcome else { return Err(CaptureError::NoRegisters) };
        if o.frames == 0 {
            return Err(CaptureError::NoRegisters);
        }
        let (len, cut) = super::expand::expand(w.frames(), w.repeats(), skip, out);
        Ok(Captured { len, truncated: cut || o.truncated })
    }};
}

/// The calling thread's return addresses, innermost first, into `out`: `out[0]` is the return address into the
/// function that called `current_stack`, then its caller's, and so on to the outermost frame (`_start`, or the
/// thread's start in `clone3`), as glibc's `backtrace(3)` lists them. Repeated runs of deep recursion are listed
/// in full. Uses the crash path's unwinder and image table (DWARF CFI with a row cache, then frame pointers, then a
/// bounded scan); a stack captured before takes the fast path ([`super::fast`]), a few nanoseconds per frame.
///
/// Never allocates, never takes a lock, never panics; safe to call from any thread, including inside a signal
/// handler (it then lists the handler's frames, the signal trampoline and the interrupted frames).
///
/// # Errors
/// [`CaptureError::NotInstalled`] before `crate::install` (or with `Config::capture_walkers` 0),
/// [`CaptureError::Busy`] when every walker stayed in use (more threads capturing at once than walkers),
/// [`CaptureError::NoRegisters`] on an architecture this crate does not walk.
#[inline(never)]
pub fn current_stack(out: &mut [u64]) -> Result<Captured, CaptureError> {
    capture_here!(out, 0)
}

/// [`current_stack`] without the `skip` innermost frames of the caller: for wrappers (the C ABI, the Swift
/// package) that want the list to start at their own caller. `skip` 0 is [`current_stack`]. Each wrapper must be
/// a frame of its own (`#[inline(never)]`, and not ending in a tail call to this function), or a frame too many
/// is left out.
///
/// # Errors
/// As [`current_stack`].
#[inline(never)]
pub fn current_stack_skipping(out: &mut [u64], skip: usize) -> Result<Captured, CaptureError> {
    capture_here!(out, skip)
}

/// The registers at this point of the calling function (see the module docs). Must be inlined into the function
/// whose frame the walk starts in (`#[inline(always)]`, and every caller is `#[inline(never)]`).
#[inline(always)]
pub fn here() -> RegisterValues {
    #[cfg(target_arch = "x86_64")]
    {
        // rbx, rbp, rsp, r12, r13, r14, r15, rip.
        let mut v = [0u64; 8];
        // SAFETY: the block only stores registers into `v` (8 writable u64 through `p`) and computes `rip` into a
        // scratch register it declares; it moves no stack pointer and leaves the flags alone.
        unsafe {
            core::arch::asm!(
                "mov [{p}], rbx",
                "mov [{p} + 8], rbp",
                "mov [{p} + 16], rsp",
                "mov [{p} + 24], r12",
                "mov [{p} + 32], r13",
                "mov [{p} + 40], r14",
                "mov [{p} + 48], r15",
                "lea {t}, [rip]",
                "mov [{p} + 56], {t}",
                p = in(reg) v.as_mut_ptr(),
                t = out(reg) _,
                options(nostack, preserves_flags),
            );
        }
        use crate::arch::x86_64::{from_gregs, greg};
        let mut g = [0u64; greg::COUNT];
        let [rbx, rbp, rsp, r12, r13, r14, r15, rip] = v;
        for (i, val) in [
            (greg::RBX, rbx),
            (greg::RBP, rbp),
            (greg::RSP, rsp),
            (greg::R8.wrapping_add(4), r12),
            (greg::R8.wrapping_add(5), r13),
            (greg::R8.wrapping_add(6), r14),
            (greg::R8.wrapping_add(7), r15),
            (greg::RIP, rip),
        ] {
            if let Some(slot) = g.get_mut(i) {
                *slot = val;
            }
        }
        from_gregs(&g)
    }
    #[cfg(target_arch = "aarch64")]
    {
        // x19..x30, sp, pc.
        let mut v = [0u64; 14];
        // SAFETY: the block only stores registers into `v` (14 writable u64 through `p`) and uses one scratch
        // register it declares; it moves no stack pointer and leaves the flags alone.
        unsafe {
            core::arch::asm!(
                "stp x19, x20, [{p}]",
                "stp x21, x22, [{p}, #16]",
                "stp x23, x24, [{p}, #32]",
                "stp x25, x26, [{p}, #48]",
                "stp x27, x28, [{p}, #64]",
                "stp x29, x30, [{p}, #80]",
                "mov {t}, sp",
                "str {t}, [{p}, #96]",
                "adr {t}, .",
                "str {t}, [{p}, #104]",
                p = in(reg) v.as_mut_ptr(),
                t = out(reg) _,
                options(nostack, preserves_flags),
            );
        }
        let mut regs = [0u64; 31];
        for (d, s) in regs.iter_mut().skip(19).zip(v.iter()) {
            *d = *s;
        }
        let [.., sp, pc] = v;
        crate::arch::aarch64::from_sigcontext(&crate::arch::aarch64::SigContext {
            fault_address: 0,
            regs,
            sp,
            pc,
            pstate: 0,
            reserved: &[],
        })
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    {
        RegisterValues::EMPTY
    }
}

/// The fast path ([`super::fast`]) from `regs` (taken on this thread, in a frame that has not returned) into
/// `out`, leaving out the first `skip` frames; `None` when it cannot do the whole stack (the caller then walks in
/// full).
#[inline(never)]
fn fast_here(st: &State, w: &mut Walker, regs: &RegisterValues, skip: usize, out: &mut [u64]) -> Option<(usize, bool)> {
    let sp = regs.walk_start()?.sp;
    let b = own_bounds(sp)?;
    let images = st.images.read();
    if w.rules_generation != st.images.generation() {
        return None;
    }
    let Walker { rules, trace, blocks, pipe, .. } = w;
    let mut inner = FaultProof::new(blocks, *pipe);
    // SAFETY: `regs` were taken on this thread in a caller's frame that has not returned, and `b` was recorded by
    // this thread and holds its stack pointer.
    let mut mem = unsafe { LiveStackReader::new(&mut inner, sp, Some((b.lo, b.hi))) };
    super::fast::walk(regs, &mut mem, &images, rules, trace, &st.opts, (sp, b.hi), skip, out)
}

/// Walks the calling thread's stack from `regs` (taken on this thread, in a frame that has not returned) with
/// walker `w`: the result is in `w.outcome`, `w.frames`, `w.repeats`. Its own frame lies below `regs`' stack
/// pointer, so nothing the walk reads directly is written meanwhile.
#[inline(never)]
fn walk_here(st: &State, w: &mut Walker, regs: &RegisterValues) {
    let sp = regs.walk_start().map_or(0, |r| r.sp);
    let bounds = own_bounds(sp).map(|b| (b.lo, b.hi));
    // SAFETY: `regs` were taken on this thread in a caller's frame that has not returned, and `bounds` are this
    // thread's (recorded by this very thread, holding its stack pointer).
    unsafe { walk_live(st, w, regs, bounds) };
}

/// Walks from `regs` with walker `w`, reading `[sp, bounds.hi)` of the calling thread's stack with plain loads
/// (`sp` from `regs`) and everything else through the fault-proof reader. The image table is read under a counted
/// read (`ImageTable::read`), so a concurrent refresh waits until the walk is done.
///
/// # Safety
/// `regs` describe the calling thread at a point it has not returned from (a frame of its current call chain, or
/// the context a signal interrupted, inside that signal's handler), and `bounds` were recorded for the calling
/// thread (or are `None`).
pub unsafe fn walk_live(st: &State, w: &mut Walker, regs: &RegisterValues, bounds: Option<(u64, u64)>) {
    let images = st.images.read();
    w.sync_rules(st.images.generation());
    w.regs = *regs;
    let Some(start) = regs.walk_start() else {
        w.outcome = None;
        return;
    };
    let Walker { rules, frames, trust, repeats, blocks, pipe, .. } = w;
    let mut inner = FaultProof::new(blocks, *pipe);
    // SAFETY: the caller's contract (this thread's live stack from `start.sp`, and its own recorded bounds).
    let mut mem = unsafe { LiveStackReader::new(&mut inner, start.sp, bounds) };
    let o = unwind::walk(regs, &mut mem, &*images, &st.opts, bounds, WalkBuffers { frames, trust, repeats, rules });
    w.outcome = Some(o);
}

/// The calling thread's stack when it holds `sp`: the bounds it recorded at start (`crate::crash::stack_bounds`;
/// Linux threads made through the `pthread_create` wrapper, and the installing thread); on Apple platforms, where
/// nothing records them, the thread's own stack from `pthread_get_stackaddr_np` / `pthread_get_stacksize_np`
/// (plain reads of the calling thread's pthread structure: no lock, no allocation).
fn own_bounds(sp: u64) -> Option<stack_bounds::StackBounds> {
    if let Some(b) = stack_bounds::own_stack_bounds(sp) {
        return Some(b);
    }
    #[cfg(target_vendor = "apple")]
    {
        // SAFETY: both read the calling thread's own pthread structure.
        let (top, size) = unsafe {
            let me = libc::pthread_self();
            (libc::pthread_get_stackaddr_np(me) as u64, libc::pthread_get_stacksize_np(me) as u64)
        };
        let lo = top.checked_sub(size)?;
        if lo <= sp && sp < top {
            return Some(stack_bounds::StackBounds { lo, hi: top, mapped: false });
        }
    }
    None
}

/// The platform's fault-proof reader, created at its first read (the Linux one needs the process id, a system
/// call a walk whose rows are all cached never makes).
#[derive(Debug)]
pub struct FaultProof<'a> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    blocks: Option<&'a mut [u8]>,
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pipe: Option<(i32, i32)>,
    #[cfg(any(target_os = "linux", target_os = "android"))]
    reader: Option<crate::platform::linux::crash::memory::ProcessVmReader<'a>>,
    #[cfg(target_vendor = "apple")]
    reader: crate::platform::darwin::crash::mach::TaskReader,
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    _blocks: core::marker::PhantomData<&'a mut [u8]>,
}

impl<'a> FaultProof<'a> {
    /// A reader caching in `blocks`, reading through `pipe` where `process_vm_readv` does not work (Linux).
    pub fn new(blocks: &'a mut [u8], pipe: Option<(i32, i32)>) -> Self {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            FaultProof { blocks: Some(blocks), pipe, reader: None }
        }
        #[cfg(target_vendor = "apple")]
        {
            let _ = (blocks, pipe);
            FaultProof {
                reader: crate::platform::darwin::crash::mach::TaskReader::new(),
                _blocks: core::marker::PhantomData,
            }
        }
        #[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
        {
            let _ = (blocks, pipe);
            FaultProof { _blocks: core::marker::PhantomData }
        }
    }
}

impl MemoryReader for FaultProof<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        {
            if self.reader.is_none() {
                let pid = crate::platform::linux::crash::sys::getpid();
                let blocks = self.blocks.take().unwrap_or_default();
                self.reader = Some(
                    crate::platform::linux::crash::memory::ProcessVmReader::new(pid, blocks)
                        .with_pipe(self.pipe, crate::platform::linux::crash::memory::PipeUse::Everything),
                );
            }
            match self.reader.as_mut() {
                Some(r) => r.read(addr, buf),
                None => false,
            }
        }
        #[cfg(target_vendor = "apple")]
        {
            self.reader.read(addr, buf)
        }
        #[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
        {
            let _ = (addr, buf);
            false
        }
    }
}
