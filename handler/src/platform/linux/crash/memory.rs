//! The fault-proof memory reader: `process_vm_readv(2)` on the own pid (a bad address returns `EFAULT` instead of
//! faulting), with a set-associative cache of up to [`MAX_BLOCKS`] 4 KiB blocks, so that the binary searches of the
//! unwinder over `.eh_frame_hdr` tables and the FDEs and CIEs it copies, which jump between a few pages of each image,
//! mostly hit the cache instead of costing a system call per probe; and a one-block negative cache: a block that
//! could not be read is not asked for again (the walker's scan for a frame record probes the unmapped page above a
//! stack hundreds of times; each probe used to cost two failing system calls).
//!
//! Cache: block `b` may live in any of the [`WAYS`] slots of set `b % sets`; a miss replaces the set's least recently
//! used block. A miss on the block right after a cached one (a sequential read: a stack read upwards, link-map
//! nodes and their strings in increasing heap addresses) also reads the blocks after it, up to [`READ_AHEAD`] in all,
//! in the same system call; a lone miss (a binary-search probe) reads one block, so it evicts one block, not four.
//!
//! The pipe: the reader can also copy memory by `write(2)`-ing it into a non-blocking pipe (the kernel, or the
//! emulator, checks the source and returns `EFAULT` instead of faulting) and reading it back.
//! - [`PipeUse::Gathers`]: only [`MemoryReader::read_gather`] goes through it, as one `writev(2)` of many small
//!   ranges and one `read(2)`. `process_vm_readv` pins every page it reads from: about 0.35 µs a range on the
//!   development machine against 0.04 µs copied into the pipe (300 ranges of 32 bytes on 300 pages: 108 µs against
//!   12 µs; a C micro-benchmark, not in the tree, BENCHMARKS.md), while a whole 4 KiB block costs about the same
//!   either way, so blocks stay with `process_vm_readv`. Those 12 µs hold only while the ranges are in the caches;
//!   after a crash they are not, and the kernel copies the ranges one after the other, each miss waited for in
//!   turn (55-137 µs in the same benchmark with 64 MiB touched in between). So the gather first asks the CPU to
//!   prefetch every range (`prefetcht0` or `prfm`: a hint that never faults), and the misses overlap (20 µs; in
//!   the crash, where the caches are less cold, it took about 0.01 ms off the stop phase at 8 threads). The
//!   crash owner opens this pipe for its capture alone ([`ProcessVmReader::with_own_pipe`]: no other process,
//!   forked or not, and no earlier capture shares it, and no descriptor the application closed is reused). The
//!   only gather is the link-map check, whose addresses are the loader's own nodes recorded at install, not
//!   pointers found on a stack. (A copy through the pipe reads mappings `process_vm_readv` refuses, `VM_IO` and
//!   `VM_PFNMAP` device memory; those addresses are the loader's heap, unless it was unmapped since install and a
//!   device mapped in its place.)
//! - [`PipeUse::Everything`], the fallback where `process_vm_readv` does not work on the own process (qemu-user does
//!   not emulate it; some seccomp sandboxes forbid it; install detects it with [`process_vm_readv_works`] and opens
//!   the pipe): every read goes through the pipe.
//!
//! Every address computation is checked: a garbage stack pointer near 2^64 is refused, never wrapped (a wrap would
//! read the wrong memory in release builds and panic in debug builds).
#![allow(unsafe_code)]

use crate::unwind::MemoryReader;

/// Size of the cached block in bytes (the smallest page size on Linux x86-64 and arm64; mappings are at least this
/// granular, so a whole block is readable whenever one byte of it is).
pub const BLOCK: usize = 4096;

/// Most blocks the cache holds (the cache buffer's length in blocks, capped here).
pub const MAX_BLOCKS: usize = 64;

/// The cache size the Linux backend preallocates, in bytes: 32 blocks (128 KiB).
pub const CACHE_BYTES: usize = 32 * BLOCK;

/// Slots per set of a cache of at least `2 * WAYS` blocks (a smaller cache is direct-mapped: one slot per set).
pub const WAYS: usize = 4;

/// Most blocks one sequential miss reads in one system call: the missing block and the ones after it (never more
/// than the cache has sets, so that each lands in its own set).
pub const READ_AHEAD: usize = 4;

/// Tag of an empty cache slot (no block starts there: block bases are multiples of [`BLOCK`]).
const EMPTY: u64 = u64::MAX;

/// Reads the own process's memory with `process_vm_readv`. Signal-safe; never faults.
#[derive(Debug)]
pub struct ProcessVmReader<'a> {
    pid: i32,
    cache: &'a mut [u8],
    /// Block base held by each cache slot ([`EMPTY`] when none).
    tags: [u64; MAX_BLOCKS],
    /// When each slot was last used: a tick of `clock` (larger is more recent).
    used: [u32; MAX_BLOCKS],
    /// Counts cache uses (saturating: past 2^32 reads the replacement order degrades, the bytes stay right).
    clock: u32,
    /// Base of the last block that could not be read (`u64::MAX`: none).
    bad_base: u64,
    pipe: Option<(i32, i32)>,
    pipe_use: PipeUse,
    /// The pipe was opened for this reader alone: closed when the reader is dropped.
    owns_pipe: bool,
}

/// Which reads of a [`ProcessVmReader`] go through its pipe (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PipeUse {
    /// Only [`MemoryReader::read_gather`] (many small ranges, each on its own page).
    Gathers,
    /// Every read (where `process_vm_readv` cannot read the own process).
    Everything,
}

impl Drop for ProcessVmReader<'_> {
    fn drop(&mut self) {
        if let Some((r, w)) = self.pipe.filter(|_| self.owns_pipe) {
            // SAFETY: closing the two descriptors of the pipe opened for this reader alone, which nothing else
            // uses (`with_own_pipe`).
            unsafe {
                libc::close(r);
                libc::close(w);
            }
        }
    }
}

/// Whether `process_vm_readv` can read this process's own memory (install time or crash time; signal-safe).
pub fn process_vm_readv_works() -> bool {
    let probe: u64 = 0x5a5a_a5a5_0123_4567;
    let mut out = [0u8; 8];
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() };
    let r = ProcessVmReader::new(pid, &mut []);
    r.read_direct(core::ptr::addr_of!(probe) as u64, &mut out) && u64::from_ne_bytes(out) == probe
}

/// Asks the CPU to bring the cache line at `addr` into its data cache: `prefetcht0` on x86-64 (Intel SDM vol. 2B,
/// "PREFETCHh"), `prfm pldl1keep` on arm64 (Arm ARM, "PRFM (immediate)"), nothing on other targets. A prefetch is a
/// hint, not a load: it never faults, whatever the address (unmapped, or device memory, which it does not access),
/// and returns nothing, so it reads no memory in the sense of the crash-path rules.
///
/// Why: the kernel copies a gather's ranges one after the other, each miss (a page walk, then the line) waited for
/// before the next begins. With the caches cold, 300 ranges of 32 bytes on 300 pages took 55-137 µs through the
/// pipe; prefetched first, 20 µs (a C micro-benchmark with 64 MiB touched in between, not in the tree,
/// BENCHMARKS.md). In a crash, whose caches are less cold, it saved about 0.01 ms at 8 threads (an A/B).
///
/// Signal-safe: one instruction.
#[inline(always)]
fn prefetch(addr: u64) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: `prefetcht0` changes no register, flag or memory and never raises an exception for any address.
    unsafe {
        core::arch::asm!("prefetcht0 [{a}]", a = in(reg) addr, options(nomem, nostack, preserves_flags));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: `prfm` changes no register, flag or memory and never raises an exception for any address.
    unsafe {
        core::arch::asm!("prfm pldl1keep, [{a}]", a = in(reg) addr, options(nomem, nostack, preserves_flags));
    }
    #[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
    let _ = addr;
}

impl<'a> ProcessVmReader<'a> {
    /// A reader for process `pid` caching in `cache` (whole [`BLOCK`]s of it, at most [`MAX_BLOCKS`]; less than
    /// one block disables the cache).
    pub fn new(pid: i32, cache: &'a mut [u8]) -> Self {
        ProcessVmReader {
            pid,
            cache,
            tags: [EMPTY; MAX_BLOCKS],
            used: [0; MAX_BLOCKS],
            clock: 0,
            bad_base: u64::MAX,
            pipe: None,
            pipe_use: PipeUse::Everything,
            owns_pipe: false,
        }
    }

    /// The cache's shape `(sets, ways)`: whole blocks of the buffer, at most [`MAX_BLOCKS`], in sets of [`WAYS`]
    /// slots (one slot per set below `2 * WAYS` blocks), the set count rounded down to a power of two. `(0, _)`: no
    /// cache.
    fn geometry(&self) -> (usize, usize) {
        let slots = (self.cache.len() / BLOCK).min(MAX_BLOCKS);
        let ways = if slots >= 2 * WAYS { WAYS } else { 1 };
        // A power of two, so that a block's set is a mask of its number, not a division.
        let sets = match slots.checked_div(ways).unwrap_or(0) {
            0 => 0,
            n => 1usize << n.ilog2(),
        };
        (sets, ways)
    }

    /// First slot of the set of the block at `base` (`sets`: a power of two).
    fn set_start(base: u64, sets: usize, ways: usize) -> usize {
        let set = ((base >> BLOCK.trailing_zeros()) as usize) & sets.wrapping_sub(1);
        set.saturating_mul(ways)
    }

    /// The slot that holds the block at `base`, if the cache has it.
    fn lookup(&self, base: u64, sets: usize, ways: usize) -> Option<usize> {
        let first = Self::set_start(base, sets, ways);
        (first..first.saturating_add(ways)).find(|&s| self.tags.get(s) == Some(&base))
    }

    /// The slot the block at `base` replaces: an empty slot of its set, else the set's least recently used one.
    fn victim(&self, base: u64, sets: usize, ways: usize) -> usize {
        let first = Self::set_start(base, sets, ways);
        (first..first.saturating_add(ways))
            .min_by_key(|&s| match (self.tags.get(s), self.used.get(s)) {
                (Some(&EMPTY), _) | (None, _) => 0,
                (Some(_), Some(&t)) => u64::from(t).saturating_add(1),
                (Some(_), None) => 0,
            })
            .unwrap_or(first)
    }

    /// Marks `slot` as just used.
    fn touch(&mut self, slot: usize) {
        self.clock = self.clock.saturating_add(1);
        if let Some(u) = self.used.get_mut(slot) {
            *u = self.clock;
        }
    }

    /// Reads through the pipe `(read_fd, write_fd)` (both non-blocking, empty, used by no one else meanwhile)
    /// instead of `process_vm_readv`: the reads `what` names.
    pub fn with_pipe(mut self, pipe: Option<(i32, i32)>, what: PipeUse) -> Self {
        self.pipe = pipe;
        self.pipe_use = what;
        self
    }

    /// As [`ProcessVmReader::with_pipe`], for a pipe opened for this reader alone: the reader closes it when it is
    /// dropped (async-signal-safe `close(2)`).
    pub fn with_own_pipe(self, pipe: Option<(i32, i32)>, what: PipeUse) -> Self {
        let mut r = self.with_pipe(pipe, what);
        r.owns_pipe = pipe.is_some();
        r
    }

    /// The pipe, when every read goes through it.
    fn pipe_for_all(&self) -> Option<(i32, i32)> {
        self.pipe.filter(|_| self.pipe_use == PipeUse::Everything)
    }

    /// Empties the pipe after a failed copy (bounded: a copy puts at most one [`BLOCK`] into it).
    fn drain(r: i32) {
        let mut sink = [0u8; 64];
        for _ in 0..=(BLOCK / 64) {
            // SAFETY: `sink` is valid for writes of its length; `r` is our non-blocking pipe.
            if unsafe { libc::read(r, sink.as_mut_ptr().cast(), sink.len()) } <= 0 {
                break;
            }
        }
    }

    /// [`MemoryReader::read_gather`] through the pipe: per call, as many ranges as fill at most one [`BLOCK`] (so
    /// the non-blocking write never meets a full pipe), copied in by one `writev` and out by one `read`; a range
    /// longer than a block alone through [`Self::read_pipe`]. `Some(false)` when a range is unreadable (`EFAULT`, or
    /// a copy cut short); `None` when the pipe itself failed (any other error: the caller may gather another way).
    fn gather_pipe(&self, r: i32, w: i32, addrs: &[u64], each: usize, buf: &mut [u8]) -> Option<bool> {
        let per_call = BLOCK.checked_div(each).unwrap_or(0).min(GATHER);
        if per_call == 0 {
            let all = addrs.iter().zip(buf.chunks_exact_mut(each)).all(|(a, chunk)| self.read_pipe(r, w, *a, chunk));
            return Some(all);
        }
        let Some(chunk_bytes) = each.checked_mul(per_call) else { return Some(false) };
        for (addrs, out) in addrs.chunks(per_call).zip(buf.chunks_mut(chunk_bytes)) {
            let mut src = [libc::iovec { iov_base: core::ptr::null_mut(), iov_len: 0 }; GATHER];
            let mut n = 0usize;
            for (s, a) in src.iter_mut().zip(addrs) {
                // A range that wraps past 2^64 is never readable (and the kernel must not be asked about one).
                if a.checked_add(each as u64).is_none() {
                    return Some(false);
                }
                *s = libc::iovec { iov_base: *a as usize as *mut libc::c_void, iov_len: each };
                n = n.saturating_add(1);
            }
            // Each range's first and last line, asked for all at once, so that the misses overlap instead of each
            // `copy_from_user` waiting for its own (see `prefetch`).
            for s in src.iter().take(n) {
                let a = s.iov_base as usize as u64;
                prefetch(a);
                prefetch(a.saturating_add(each.saturating_sub(1) as u64));
            }
            let want = out.len();
            // SAFETY: the kernel reads the `n` source ranges on our behalf and returns `EFAULT` (or a short count)
            // for unmapped memory instead of faulting; `w` is our pipe, and `want` <= BLOCK bytes fit it empty.
            let put = unsafe { libc::writev(w, src.as_ptr(), n as libc::c_int) };
            let err = if put < 0 { crate::crash::writer::errno() } else { 0 };
            // SAFETY: `out` is valid for writes of its length; `r` is our non-blocking pipe.
            let got = unsafe { libc::read(r, out.as_mut_ptr().cast(), want) };
            if put < 0 || put as usize != want || got != put {
                Self::drain(r);
                return if put >= 0 || err == libc::EFAULT { Some(false) } else { None };
            }
        }
        Some(true)
    }

    fn read_pipe(&self, r: i32, w: i32, addr: u64, buf: &mut [u8]) -> bool {
        let mut src = addr;
        for chunk in buf.chunks_mut(BLOCK) {
            let len = chunk.len();
            // The whole chunk must lie below 2^64: a wrapped range would read the bottom of the address space.
            let Some(next) = src.checked_add(len as u64) else { return false };
            let src_ptr = src as usize as *const libc::c_void;
            // SAFETY: the kernel reads `src_ptr` on our behalf and returns EFAULT for unmapped memory; `w` is our
            // pipe.
            let n = unsafe { libc::write(w, src_ptr, len) };
            if n <= 0 {
                // Nothing should be left in the pipe; made sure of (one `read` when it is empty).
                Self::drain(r);
                return false;
            }
            // SAFETY: `chunk` is valid for writes of its length; `r` is our non-blocking pipe.
            let m = unsafe { libc::read(r, chunk.as_mut_ptr().cast(), n as usize) };
            if n as usize != len || m != n {
                // Empty the pipe for the next read.
                Self::drain(r);
                return false;
            }
            src = next;
        }
        true
    }

    /// Reads the block at `base` into the cache and returns its slot; a miss right after a cached block also reads
    /// the next blocks not cached yet, up to [`READ_AHEAD`] in all (no more than `sets`), into their own sets, in the
    /// same system call. A read-ahead block that is not mapped only ends the run: `process_vm_readv` reads whole
    /// remote iovecs in order and stops at the first that fails. `None` (and the block remembered as unreadable)
    /// when the block at `base` could not be read.
    fn fill(&mut self, base: u64, sets: usize, ways: usize) -> Option<usize> {
        let mut slots = [0usize; READ_AHEAD];
        let mut bases = [0u64; READ_AHEAD];
        let first = self.victim(base, sets, ways);
        if let (Some(s), Some(b)) = (slots.first_mut(), bases.first_mut()) {
            *s = first;
            *b = base;
        }
        let mut run = 1usize;
        let sequential = base.checked_sub(BLOCK as u64).is_some_and(|prev| self.lookup(prev, sets, ways).is_some());
        if self.pipe_for_all().is_none() && sequential {
            while run < READ_AHEAD.min(sets) {
                let Some(next) = base.checked_add((run as u64).saturating_mul(BLOCK as u64)) else { break };
                // Not below 2^64 and not a block the cache holds already.
                if next.checked_add(BLOCK as u64).is_none() || self.lookup(next, sets, ways).is_some() {
                    break;
                }
                let victim = self.victim(next, sets, ways);
                let (Some(s), Some(b)) = (slots.get_mut(run), bases.get_mut(run)) else { break };
                *s = victim;
                *b = next;
                run = run.saturating_add(1);
            }
        }
        let got = if run == 1 {
            let start = first.saturating_mul(BLOCK);
            let cache = core::mem::take(&mut self.cache);
            let ok = match cache.get_mut(start..start.saturating_add(BLOCK)) {
                Some(c) => self.read_direct(base, c),
                None => false,
            };
            self.cache = cache;
            usize::from(ok)
        } else {
            self.read_run(slots.get(..run).unwrap_or(&[]), bases.get(..run).unwrap_or(&[]))
        };
        for (k, (&slot, &b)) in slots.iter().zip(bases.iter()).take(run).enumerate() {
            if let Some(tag) = self.tags.get_mut(slot) {
                *tag = if k < got { b } else { EMPTY };
            }
            if k < got {
                self.touch(slot);
            }
        }
        if got == 0 {
            self.bad_base = base;
            return None;
        }
        Some(first)
    }

    /// One `process_vm_readv` of the blocks at `bases` (consecutive) into the cache slots `slots`; how many whole
    /// blocks arrived, in order (0: not even the first).
    fn read_run(&mut self, slots: &[usize], bases: &[u64]) -> usize {
        let mut local = [libc::iovec { iov_base: core::ptr::null_mut(), iov_len: 0 }; READ_AHEAD];
        let mut remote = [libc::iovec { iov_base: core::ptr::null_mut(), iov_len: 0 }; READ_AHEAD];
        let mut n = 0usize;
        let cache_at = self.cache.as_mut_ptr();
        for ((l, r), (&slot, &at)) in local.iter_mut().zip(remote.iter_mut()).zip(slots.iter().zip(bases)) {
            let from = slot.saturating_mul(BLOCK);
            if from.checked_add(BLOCK).is_none_or(|end| end > self.cache.len()) {
                break;
            }
            // The slots are distinct (one per set), so the iovecs describe disjoint parts of the cache.
            *l = libc::iovec { iov_base: cache_at.wrapping_add(from).cast(), iov_len: BLOCK };
            *r = libc::iovec { iov_base: at as usize as *mut libc::c_void, iov_len: BLOCK };
            n = n.saturating_add(1);
        }
        if n == 0 {
            return 0;
        }
        // SAFETY: each local iovec describes a distinct BLOCK-sized part of `self.cache` (checked in bounds above;
        // distinct slots), valid for writes; the kernel validates the remote ranges and stops at the first
        // unreadable one (or returns EFAULT for the first) instead of faulting.
        let r = unsafe {
            libc::process_vm_readv(self.pid, local.as_ptr(), n as libc::c_ulong, remote.as_ptr(), n as libc::c_ulong, 0)
        };
        if r <= 0 {
            return 0;
        }
        (r as usize / BLOCK).min(n)
    }

    /// Reads exactly `buf.len()` bytes at `addr` without the cache.
    pub fn read_direct(&self, addr: u64, buf: &mut [u8]) -> bool {
        if buf.is_empty() {
            return true;
        }
        // A range that wraps past 2^64 is never readable (and the kernel must not be asked about one).
        if addr.checked_add(buf.len() as u64).is_none() {
            return false;
        }
        if let Some((r, w)) = self.pipe_for_all() {
            return self.read_pipe(r, w, addr, buf);
        }
        let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let remote = libc::iovec { iov_base: addr as usize as *mut libc::c_void, iov_len: buf.len() };
        // SAFETY: `local` describes `buf`, valid for writes; the kernel validates `remote` and returns EFAULT for
        // unmapped addresses instead of faulting.
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        n >= 0 && n as usize == buf.len()
    }
}

/// Most ranges one [`MemoryReader::read_gather`] system call reads (`process_vm_readv` takes up to `IOV_MAX` =
/// 1024 iovecs, Linux `<linux/uio.h>` `UIO_MAXIOV`; 64 keeps the two iovec arrays at 2 KiB of stack).
pub const GATHER: usize = 64;

impl MemoryReader for ProcessVmReader<'_> {
    /// With a pipe: one `writev` into it and one `read` out of it per block's worth of ranges (at most [`GATHER`]).
    /// Without: one `process_vm_readv` per [`GATHER`] addresses, each range its own remote iovec. Bypasses the
    /// block cache: the ranges are read once.
    fn read_gather(&mut self, addrs: &[u64], each: usize, buf: &mut [u8]) -> bool {
        if each == 0 || addrs.len().checked_mul(each) != Some(buf.len()) {
            return false;
        }
        if let Some((r, w)) = self.pipe {
            match self.gather_pipe(r, w, addrs, each, buf) {
                Some(read) => return read,
                // The pipe failed, not the memory: `process_vm_readv` below, where it works.
                None if self.pipe_use == PipeUse::Everything => return false,
                None => {}
            }
        }
        let Some(chunk_bytes) = each.checked_mul(GATHER) else { return false };
        for (addrs, out) in addrs.chunks(GATHER).zip(buf.chunks_mut(chunk_bytes)) {
            let mut local = [libc::iovec { iov_base: core::ptr::null_mut(), iov_len: 0 }; GATHER];
            let mut remote = [libc::iovec { iov_base: core::ptr::null_mut(), iov_len: 0 }; GATHER];
            let mut n = 0usize;
            for ((l, r), (a, dst)) in
                local.iter_mut().zip(remote.iter_mut()).zip(addrs.iter().zip(out.chunks_exact_mut(each)))
            {
                // A range that wraps past 2^64 is never readable (and the kernel must not be asked about one).
                if a.checked_add(each as u64).is_none() {
                    return false;
                }
                *l = libc::iovec { iov_base: dst.as_mut_ptr().cast(), iov_len: each };
                *r = libc::iovec { iov_base: *a as usize as *mut libc::c_void, iov_len: each };
                n = n.saturating_add(1);
            }
            // SAFETY: each local iovec describes a distinct `each`-byte part of `buf`, valid for writes; the kernel
            // validates the remote ranges and stops at the first unreadable one (or returns EFAULT) instead of
            // faulting.
            let got = unsafe {
                libc::process_vm_readv(
                    self.pid,
                    local.as_ptr(),
                    n as libc::c_ulong,
                    remote.as_ptr(),
                    n as libc::c_ulong,
                    0,
                )
            };
            if got < 0 || Some(got as usize) != n.checked_mul(each) {
                return false;
            }
        }
        true
    }

    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        const MASK: u64 = !(BLOCK as u64 - 1);
        let base = addr & MASK;
        let Some(end) = addr.checked_add(buf.len() as u64) else { return false };
        // `base + BLOCK` overflows for the last block below 2^64: such a block is never cached (read directly).
        let block_end = base.checked_add(BLOCK as u64);
        let (sets, ways) = self.geometry();
        if sets == 0 || block_end.is_none_or(|b| end > b) {
            return self.read_direct(addr, buf);
        }
        if base == self.bad_base {
            // The whole block was unreadable a moment ago; mappings are at least a block wide, so this read fails too.
            return false;
        }
        let slot = match self.lookup(base, sets, ways) {
            Some(slot) => {
                self.touch(slot);
                slot
            }
            None => match self.fill(base, sets, ways) {
                Some(slot) => slot,
                None => return false,
            },
        };
        let Some(start) = slot.checked_mul(BLOCK) else { return false };
        // `addr >= base` and `end <= base + BLOCK`, so both offsets are below BLOCK; still computed checked.
        let (Some(off), Some(off_end)) = (addr.checked_sub(base), end.checked_sub(base)) else { return false };
        let (Some(from), Some(to)) = (start.checked_add(off as usize), start.checked_add(off_end as usize)) else {
            return false;
        };
        match self.cache.get(from..to) {
            Some(src) => {
                buf.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    /// `read_gather` reads every range (more than one system call's worth: 150 > [`GATHER`], and 4,800 bytes >
    /// [`BLOCK`]) into its chunk, and fails as a whole when one range is unmapped or the lengths disagree, without
    /// `process_vm_readv` and through the pipe in both uses; a failed gather leaves the pipe empty (the next gather
    /// reads the right bytes), and ranges longer than a block are read too.
    #[test]
    fn gather_reads_many_ranges_and_fails_on_any_unmapped_one() {
        let words: Vec<[u64; 4]> = (0..150u64).map(|i| [i, i * 3, !i, 0x5a5a]).collect();
        let addrs: Vec<u64> = words.iter().rev().map(|w| w.as_ptr() as u64).collect();
        let long: Vec<Vec<u8>> = (0..3u8).map(|i| (0..5000u32).map(|j| (j as u8) ^ i).collect()).collect();
        let long_addrs: Vec<u64> = long.iter().map(|v| v.as_ptr() as u64).collect();
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        for via in [None, Some(PipeUse::Gathers), Some(PipeUse::Everything)] {
            if via.is_none() && !process_vm_readv_works() {
                continue;
            }
            let mut r = ProcessVmReader::new(pid, &mut []);
            if let Some(what) = via {
                r = r.with_pipe(Some(pipe()), what);
            }
            let mut buf = vec![0u8; 150 * 32];
            let mut bad = addrs.clone();
            bad[100] = 8; // the zero page is never mapped
            assert!(!r.read_gather(&bad, 32, &mut buf), "pipe: {via:?}");
            assert!(r.read_gather(&addrs, 32, &mut buf), "pipe: {via:?}");
            for (chunk, w) in buf.chunks_exact(32).zip(words.iter().rev()) {
                let got: Vec<u64> = chunk.chunks_exact(8).map(|b| u64::from_ne_bytes(b.try_into().unwrap())).collect();
                assert_eq!(got, w.to_vec(), "pipe: {via:?}");
            }
            assert!(!r.read_gather(&addrs, 32, &mut buf[..64]), "lengths disagree");
            let mut big = vec![0u8; 3 * 5000];
            assert!(r.read_gather(&long_addrs, 5000, &mut big), "pipe: {via:?}");
            assert_eq!(big, long.concat(), "pipe: {via:?}");
        }
    }

    /// A gather whose pipe fails rather than the memory (here its read end is closed: `EPIPE`; std ignores
    /// `SIGPIPE`) is read with `process_vm_readv` instead where that works ([`PipeUse::Gathers`]), and fails where
    /// every read depends on the pipe; a reader's own pipe ([`ProcessVmReader::with_own_pipe`]) is closed when the
    /// reader is dropped (a duplicate of its read end then sees end of file).
    #[test]
    fn a_failing_pipe_falls_back_and_an_own_pipe_is_closed_with_its_reader() {
        let words = [11u64, 22, 33, 44];
        let addrs = [words.as_ptr() as u64 + 16, words.as_ptr() as u64];
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let (r, w) = pipe();
        // SAFETY: closing our own pipe's read end.
        unsafe { libc::close(r) };
        let mut buf = [0u8; 32];
        if process_vm_readv_works() {
            let mut g = ProcessVmReader::new(pid, &mut []).with_pipe(Some((r, w)), PipeUse::Gathers);
            assert!(g.read_gather(&addrs, 16, &mut buf), "process_vm_readv took over");
            let got: Vec<u64> = buf.chunks_exact(8).map(|b| u64::from_ne_bytes(b.try_into().unwrap())).collect();
            assert_eq!(got, [33, 44, 11, 22]);
        }
        let mut e = ProcessVmReader::new(pid, &mut []).with_pipe(Some((r, w)), PipeUse::Everything);
        assert!(!e.read_gather(&addrs, 16, &mut buf), "no other way to read");
        // SAFETY: closing our own pipe's write end.
        unsafe { libc::close(w) };

        let (r, w) = pipe();
        // SAFETY: duplicating our own descriptor.
        let r2 = unsafe { libc::dup(r) };
        assert!(r2 >= 0);
        {
            let mut own = ProcessVmReader::new(pid, &mut []).with_own_pipe(Some((r, w)), PipeUse::Gathers);
            assert!(own.read_gather(&addrs, 16, &mut buf));
            let mut one = [0u8; 1];
            // SAFETY: reading into a valid one-byte buffer from our non-blocking duplicate.
            assert_eq!(unsafe { libc::read(r2, one.as_mut_ptr().cast(), 1) }, -1, "open and empty: EAGAIN");
        }
        let mut one = [0u8; 1];
        // SAFETY: as above.
        assert_eq!(unsafe { libc::read(r2, one.as_mut_ptr().cast(), 1) }, 0, "the write end was closed");
        // SAFETY: closing our duplicate.
        unsafe { libc::close(r2) };
    }

    /// Block `b` lives in one of the [`WAYS`] slots of set `b % sets`: reads across many pages return the right
    /// bytes, a block stays cached while its set has room, and a miss in a full set evicts the set's least recently
    /// used block, which is read again when asked for.
    #[test]
    fn set_associative_cache_evicts_the_least_recently_used_block_of_a_set() {
        // 17 pages, 4096-aligned, each word its own address-derived value.
        let mut mem = vec![0u64; 18 * BLOCK / 8];
        let start = (mem.as_ptr() as usize).next_multiple_of(BLOCK);
        let first = (start - mem.as_ptr() as usize) / 8;
        let words = &mut mem[first..first + 17 * BLOCK / 8];
        for (i, w) in words.iter_mut().enumerate() {
            *w = 0xabcd_0000_0000 + i as u64;
        }
        let base = words.as_ptr() as u64;
        // 8 blocks: 2 sets of 4. The pages with an even block number share a set; so do the odd ones.
        let mut cache = vec![0u8; 8 * BLOCK];
        // SAFETY: getpid has no preconditions.
        let mut r = ProcessVmReader::new(unsafe { libc::getpid() }, &mut cache);
        // Where `process_vm_readv` cannot read the own process (qemu-user), the pipe reader is cached the same way
        // (without read-ahead).
        if !process_vm_readv_works() {
            r = r.with_pipe(Some(pipe()), PipeUse::Everything);
        }
        let per_page = BLOCK / 8;
        let read = |r: &mut ProcessVmReader<'_>, page: usize| {
            let mut b = [0u8; 8];
            assert!(r.read(base + (8 * page * per_page) as u64, &mut b));
            u64::from_ne_bytes(b)
        };
        let fresh = |page: usize| 0xabcd_0000_0000 + (page * per_page) as u64;
        for i in (0..17 * BLOCK / 8).step_by(97) {
            let mut b = [0u8; 8];
            assert!(r.read(base + 8 * i as u64, &mut b));
            assert_eq!(u64::from_ne_bytes(b), 0xabcd_0000_0000 + i as u64);
        }
        // A page's set: its block number's parity. Fill one set with four pages, lone misses all (never the page
        // right after a cached one, so nothing is read ahead).
        let set_of = |page: usize| ((base as usize / BLOCK) + page) % 2;
        let same: Vec<usize> = (0..17).filter(|&p| set_of(p) == set_of(0)).collect();
        let (a, b, c, d, e) = (same[0], same[1], same[2], same[3], same[4]);
        for p in [a, b, c, d] {
            assert_eq!(read(&mut r, p), fresh(p));
        }
        // SAFETY: writing our own live buffer through a raw pointer (the borrow `words` is not used after this).
        let poke = |page: usize, v: u64| unsafe { *((base + (page * BLOCK) as u64) as *mut u64) = v };
        for (k, p) in [a, b, c, d, e].into_iter().enumerate() {
            poke(p, k as u64 + 1);
        }
        // All four are served from the cache; `a` is used last, so `b` is now the least recently used.
        for p in [b, c, d, a] {
            assert_eq!(read(&mut r, p), fresh(p), "page {p} is cached");
        }
        // A fifth page of the set evicts `b` only.
        assert_eq!(read(&mut r, e), 5, "page {e} was read now");
        assert_eq!(read(&mut r, a), fresh(a), "the most recently used page stays");
        assert_eq!(read(&mut r, c), fresh(c));
        assert_eq!(read(&mut r, d), fresh(d));
        assert_eq!(read(&mut r, b), 2, "the least recently used page was evicted and read again");
    }

    /// A lone miss reads one block; a miss on the block right after a cached one reads the following blocks in the
    /// same system call; a read-ahead block that is not mapped ends the run without failing the read, and is refused
    /// when asked for; the block after it is read on its own.
    #[test]
    fn sequential_misses_read_ahead_and_stop_at_unmapped_memory() {
        if !process_vm_readv_works() {
            return; // The pipe fallback (qemu-user) reads one block per miss; covered by the test above.
        }
        // SAFETY: a fresh anonymous private mapping of six pages; page 4 is unmapped again below.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                6 * BLOCK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let base = p as u64;
        let page = |i: u64| (base + i * BLOCK as u64) as *mut u64;
        // SAFETY: pages 0-5 are mapped and writable; page 4 is unmapped after the writes and never touched again.
        unsafe {
            for i in 0..6 {
                *page(i) = 100 + i;
            }
            assert_eq!(libc::munmap(page(4).cast(), BLOCK), 0);
        }
        // 16 blocks: 4 sets of 4, so a run reads up to READ_AHEAD = 4 blocks.
        let mut cache = vec![0u8; 16 * BLOCK];
        // SAFETY: getpid has no preconditions.
        let mut r = ProcessVmReader::new(unsafe { libc::getpid() }, &mut cache);
        assert_eq!(r.read_u64(base), Some(100));
        // SAFETY: pages 1 and 2 are mapped.
        unsafe { *page(1) = 7 };
        assert_eq!(r.read_u64(base + BLOCK as u64), Some(7), "a lone miss read page 0 alone");
        // That miss followed cached page 0: it read pages 2 and 3 too, and stopped at the hole (page 4).
        // SAFETY: pages 2 and 3 are mapped.
        unsafe {
            *page(2) = 8;
            *page(3) = 9;
        }
        assert_eq!(r.read_u64(base + 2 * BLOCK as u64), Some(102), "page 2 was read ahead");
        assert_eq!(r.read_u64(base + 3 * BLOCK as u64), Some(103), "page 3 too");
        assert_eq!(r.read_u64(base + 4 * BLOCK as u64), None, "the unmapped page is refused");
        assert_eq!(r.read_u64(base + 5 * BLOCK as u64), Some(105), "the page after the hole is read on its own");
        // SAFETY: unmapping what this test mapped (pages 0-3 and 5).
        unsafe {
            libc::munmap(page(0).cast(), 4 * BLOCK);
            libc::munmap(page(5).cast(), BLOCK);
        }
    }

    /// Garbage stack pointers near the top of the address space (a corrupted `sp`, a walk that ran off the
    /// end) must be refused, never overflow an address computation (which panics in debug builds).
    #[test]
    fn reads_near_the_top_of_the_address_space_without_panicking() {
        let mut cache = vec![0u8; BLOCK];
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        for pipe in [None, Some(pipe())] {
            let mut r = ProcessVmReader::new(pid, &mut cache).with_pipe(pipe, PipeUse::Everything);
            // The top of the 48-bit user address space (x86-64 and arm64 with 4-level tables), and u64::MAX.
            let user_top = 1u64 << 47;
            for addr in [
                u64::MAX,
                u64::MAX - 7,
                u64::MAX - 8,
                u64::MAX - 4095,
                u64::MAX - 4096 - 7,
                user_top - 8,
                user_top - 4,
                user_top,
                (1u64 << 48) - 8,
                1u64 << 63,
            ] {
                assert_eq!(r.read_u64(addr), None, "{addr:#x}");
                let mut big = [0u8; 64];
                assert!(!r.read(addr, &mut big), "{addr:#x}");
                let mut huge = vec![0u8; 3 * BLOCK];
                assert!(!r.read(addr, &mut huge), "{addr:#x}");
                assert!(!r.read_direct(addr, &mut huge), "{addr:#x}");
            }
        }
    }

    #[test]
    fn reads_own_memory_and_refuses_bad_addresses() {
        let data: Vec<u64> = (0..2048u64).map(|i| i * 3).collect();
        let mut cache = vec![0u8; BLOCK];
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let pipe = if process_vm_readv_works() { None } else { Some(pipe()) };
        let mut r = ProcessVmReader::new(pid, &mut cache).with_pipe(pipe, PipeUse::Everything);
        for i in [0usize, 1, 511, 512, 1000, 2047] {
            let addr = data.as_ptr() as u64 + 8 * i as u64;
            assert_eq!(r.read_u64(addr), Some(i as u64 * 3));
        }
        // Across a block boundary.
        let mut buf = [0u8; 64];
        let base = (data.as_ptr() as u64 + 4095) & !4095;
        if base + 64 <= data.as_ptr() as u64 + 8 * 2048 && base - 32 >= data.as_ptr() as u64 {
            assert!(r.read(base - 32, &mut buf));
        }
        assert_eq!(r.read_u64(0), None);
        assert_eq!(r.read_u64(8), None);
        assert_eq!(r.read_u64(u64::MAX - 3), None);
        // The failed block is remembered; other blocks still read, and so does the refused one's neighbour.
        assert_eq!(r.read_u64(16), None);
        assert_eq!(r.read_u64(data.as_ptr() as u64 + 8), Some(3));
        assert_eq!(r.read_u64(4096), None);
    }

    fn pipe() -> (i32, i32) {
        crate::platform::linux::crash::sys::pipe_nonblocking().expect("pipe")
    }

    #[test]
    fn the_pipe_fallback_reads_and_refuses_bad_addresses() {
        let data: Vec<u64> = (0..2048u64).map(|i| i ^ 0xabcd).collect();
        let mut cache = vec![0u8; BLOCK];
        // SAFETY: getpid has no preconditions.
        let mut r =
            ProcessVmReader::new(unsafe { libc::getpid() }, &mut cache).with_pipe(Some(pipe()), PipeUse::Everything);
        for i in [0usize, 7, 600, 2047] {
            assert_eq!(r.read_u64(data.as_ptr() as u64 + 8 * i as u64), Some(i as u64 ^ 0xabcd));
        }
        assert_eq!(r.read_u64(8), None);
        // After a refused read the pipe is empty again and reads still work.
        assert_eq!(r.read_u64(data.as_ptr() as u64 + 8), Some(1 ^ 0xabcd));
        let mut big = vec![0u8; 3 * BLOCK];
        assert!(r.read_direct(data.as_ptr() as u64, &mut big[..2 * BLOCK]));
        assert_eq!(&big[..8], &(0xabcdu64).to_ne_bytes());
    }
}
