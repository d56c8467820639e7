//! The fault-proof memory reader: `process_vm_readv(2)` on the own pid (a bad address returns `EFAULT` instead of
//! faulting), with a direct-mapped cache of up to [`MAX_BLOCKS`] 4 KiB blocks (block `b` lives in slot
//! `b % blocks`; a miss reads up to [`READ_AHEAD`] consecutive blocks in one call), so a stack walk costs one system call per 4 KiB of stack, and the binary searches of the unwinder
//! over `.eh_frame_hdr` tables and the FDEs it copies, which jump between a few pages of each image, mostly hit the
//! cache instead of costing a system call per probe; and a one-block negative cache: a block that could not be read is not asked for again (the walker's scan for a frame record
//! probes the unmapped page above a stack hundreds of times; each probe used to cost two failing system calls).
//!
//! Fallback: where `process_vm_readv` does not work on the own process (qemu-user does not emulate it; some
//! seccomp sandboxes forbid it), install detects it with [`process_vm_readv_works`] and preopens a non-blocking
//! pipe; the reader then copies memory by `write(2)`-ing it into the pipe (the kernel, or the emulator, checks
//! the source and returns `EFAULT` instead of faulting) and reading it back.
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

/// Most blocks one cache miss reads in one system call: the missing block and the ones after it (link-map nodes
/// and the strings they point to sit in increasing heap addresses; stacks are read upwards).
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
    /// Base of the last block that could not be read (`u64::MAX`: none).
    bad_base: u64,
    pipe: Option<(i32, i32)>,
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

impl<'a> ProcessVmReader<'a> {
    /// A reader for process `pid` caching in `cache` (whole [`BLOCK`]s of it, at most [`MAX_BLOCKS`]; less than
    /// one block disables the cache).
    pub fn new(pid: i32, cache: &'a mut [u8]) -> Self {
        ProcessVmReader { pid, cache, tags: [EMPTY; MAX_BLOCKS], bad_base: u64::MAX, pipe: None }
    }

    /// Cache slots in use: whole blocks of the buffer, at most [`MAX_BLOCKS`].
    fn slots(&self) -> usize {
        (self.cache.len() / BLOCK).min(MAX_BLOCKS)
    }

    /// Reads through the pipe `(read_fd, write_fd)` (both non-blocking) instead of `process_vm_readv`.
    pub fn with_pipe(mut self, pipe: Option<(i32, i32)>) -> Self {
        self.pipe = pipe;
        self
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
                return false;
            }
            // SAFETY: `chunk` is valid for writes of its length; `r` is our non-blocking pipe.
            let m = unsafe { libc::read(r, chunk.as_mut_ptr().cast(), n as usize) };
            if n as usize != len || m != n {
                // Drain anything left so the pipe is empty for the next read (bounded).
                let mut sink = [0u8; 64];
                for _ in 0..=(BLOCK / 64) {
                    // SAFETY: as above.
                    if unsafe { libc::read(r, sink.as_mut_ptr().cast(), sink.len()) } <= 0 {
                        break;
                    }
                }
                return false;
            }
            src = next;
        }
        true
    }

    /// Fills cache slot `slot` (bytes `start..stop` of the cache) with the block at `base`, and with it, in the same
    /// system call, the next blocks up to [`READ_AHEAD`] in all, into the slots that follow (those that do not hold
    /// their block already; the run stops at the cache's end). A read-ahead block that is not mapped only ends the
    /// run: `process_vm_readv` reads whole remote iovecs in order and stops at the first that fails. `false` (and
    /// the block remembered as unreadable) when the block at `base` could not be read.
    fn fill(&mut self, base: u64, slot: usize, slots: usize, start: usize, stop: usize) -> bool {
        let mut run = 1usize;
        if self.pipe.is_none() {
            while run < READ_AHEAD {
                let (Some(next_slot), Some(next_base)) =
                    (slot.checked_add(run), base.checked_add((run as u64).saturating_mul(BLOCK as u64)))
                else {
                    break;
                };
                // Not past the cache's end, not below 2^64, and not a block the cache holds already.
                if next_slot >= slots
                    || next_base.checked_add(BLOCK as u64).is_none()
                    || self.tags.get(next_slot) == Some(&next_base)
                {
                    break;
                }
                run = run.saturating_add(1);
            }
        }
        let got = if run == 1 {
            let cache = core::mem::take(&mut self.cache);
            let ok = match cache.get_mut(start..stop) {
                Some(c) => self.read_direct(base, c),
                None => false,
            };
            self.cache = cache;
            usize::from(ok)
        } else {
            self.read_run(base, start, run)
        };
        for k in 0..run {
            let (Some(tag), Some(b)) =
                (self.tags.get_mut(slot.saturating_add(k)), base.checked_add((k as u64).saturating_mul(BLOCK as u64)))
            else {
                break;
            };
            *tag = if k < got { b } else { EMPTY };
        }
        if got == 0 {
            self.bad_base = base;
            return false;
        }
        true
    }

    /// One `process_vm_readv` of `run` consecutive blocks from `base` into the cache bytes from `start`; how many
    /// whole blocks arrived (0: not even the first).
    fn read_run(&mut self, base: u64, start: usize, run: usize) -> usize {
        let mut local = [libc::iovec { iov_base: core::ptr::null_mut(), iov_len: 0 }; READ_AHEAD];
        let mut remote = [libc::iovec { iov_base: core::ptr::null_mut(), iov_len: 0 }; READ_AHEAD];
        let mut n = 0usize;
        for (k, (l, r)) in local.iter_mut().zip(remote.iter_mut()).take(run).enumerate() {
            let (Some(from), Some(at)) =
                (start.checked_add(k.saturating_mul(BLOCK)), base.checked_add((k as u64).saturating_mul(BLOCK as u64)))
            else {
                break;
            };
            let Some(dst) = self.cache.get_mut(from..from.saturating_add(BLOCK)) else { break };
            *l = libc::iovec { iov_base: dst.as_mut_ptr().cast(), iov_len: BLOCK };
            *r = libc::iovec { iov_base: at as usize as *mut libc::c_void, iov_len: BLOCK };
            n = n.saturating_add(1);
        }
        if n == 0 {
            return 0;
        }
        // SAFETY: each local iovec describes a distinct BLOCK-sized part of `self.cache`, valid for writes; the
        // kernel validates the remote ranges and stops at the first unreadable one (or returns EFAULT for the
        // first) instead of faulting.
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
        if let Some((r, w)) = self.pipe {
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
    /// One `process_vm_readv` per [`GATHER`] addresses, each range its own remote iovec (through the pipe, one
    /// read per address). Bypasses the block cache: the ranges are read once.
    fn read_gather(&mut self, addrs: &[u64], each: usize, buf: &mut [u8]) -> bool {
        if each == 0 || addrs.len().checked_mul(each) != Some(buf.len()) {
            return false;
        }
        if self.pipe.is_some() {
            return addrs.iter().zip(buf.chunks_exact_mut(each)).all(|(a, chunk)| self.read_direct(*a, chunk));
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
        let slots = self.slots();
        if slots == 0 || block_end.is_none_or(|b| end > b) {
            return self.read_direct(addr, buf);
        }
        if base == self.bad_base {
            // The whole block was unreadable a moment ago; mappings are at least a block wide, so this read fails too.
            return false;
        }
        // Direct-mapped: block number modulo the slot count (`slots > 0`).
        let slot = base.checked_div(BLOCK as u64).and_then(|b| b.checked_rem(slots as u64)).unwrap_or(0) as usize;
        let Some(start) = slot.checked_mul(BLOCK) else { return false };
        let Some(stop) = start.checked_add(BLOCK) else { return false };
        if self.tags.get(slot) != Some(&base) && !self.fill(base, slot, slots, start, stop) {
            return false;
        }
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

    /// `read_gather` reads every range (more than one system call's worth: 150 > [`GATHER`]) into its chunk, and
    /// fails as a whole when one range is unmapped or the lengths disagree; through the pipe as well.
    #[test]
    fn gather_reads_many_ranges_and_fails_on_any_unmapped_one() {
        let words: Vec<[u64; 4]> = (0..150u64).map(|i| [i, i * 3, !i, 0x5a5a]).collect();
        let addrs: Vec<u64> = words.iter().rev().map(|w| w.as_ptr() as u64).collect();
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        for via_pipe in [false, true] {
            if !via_pipe && !process_vm_readv_works() {
                continue;
            }
            let mut r = ProcessVmReader::new(pid, &mut []);
            if via_pipe {
                r = r.with_pipe(Some(pipe()));
            }
            let mut buf = vec![0u8; 150 * 32];
            assert!(r.read_gather(&addrs, 32, &mut buf), "pipe: {via_pipe}");
            for (chunk, w) in buf.chunks_exact(32).zip(words.iter().rev()) {
                let got: Vec<u64> = chunk.chunks_exact(8).map(|b| u64::from_ne_bytes(b.try_into().unwrap())).collect();
                assert_eq!(got, w.to_vec(), "pipe: {via_pipe}");
            }
            let mut bad = addrs.clone();
            bad[100] = 8; // the zero page is never mapped
            assert!(!r.read_gather(&bad, 32, &mut buf), "pipe: {via_pipe}");
            assert!(!r.read_gather(&addrs, 32, &mut buf[..64]), "lengths disagree");
        }
    }

    /// Blocks live in slot `block % slots`: reads across many pages return the right bytes, a block stays cached
    /// while no other block maps to its slot (a miss also fills the next slots with the next blocks, up to
    /// [`READ_AHEAD`] in all), and is read again once evicted.
    #[test]
    fn direct_mapped_cache_keeps_blocks_until_a_colliding_block_evicts_them() {
        // 16 pages, 4096-aligned, each word its own address-derived value.
        let mut mem = vec![0u64; 17 * BLOCK / 8];
        let start = (mem.as_ptr() as usize).next_multiple_of(BLOCK);
        let first = (start - mem.as_ptr() as usize) / 8;
        let words = &mut mem[first..first + 16 * BLOCK / 8];
        for (i, w) in words.iter_mut().enumerate() {
            *w = 0xabcd_0000_0000 + i as u64;
        }
        let base = words.as_ptr() as u64;
        let mut cache = vec![0u8; 8 * BLOCK];
        // SAFETY: getpid has no preconditions.
        let mut r = ProcessVmReader::new(unsafe { libc::getpid() }, &mut cache);
        // Where `process_vm_readv` cannot read the own process (qemu-user), the pipe reader is cached the same way
        // (without read-ahead).
        if !process_vm_readv_works() {
            r = r.with_pipe(Some(pipe()));
        }
        let read = |r: &mut ProcessVmReader<'_>, i: usize| {
            let mut b = [0u8; 8];
            assert!(r.read(base + 8 * i as u64, &mut b));
            u64::from_ne_bytes(b)
        };
        for i in (0..16 * BLOCK / 8).step_by(97) {
            assert_eq!(read(&mut r, i), 0xabcd_0000_0000 + i as u64);
        }
        // Page 0 and page 1 cached now (slots 0 and 1); change both in memory.
        let per_page = BLOCK / 8;
        assert_eq!(read(&mut r, 0), 0xabcd_0000_0000);
        assert_eq!(read(&mut r, per_page), 0xabcd_0000_0000 + per_page as u64);
        // SAFETY: writing our own live buffer through a raw pointer (the borrow `words` is not used after this).
        unsafe {
            *(base as *mut u64) = 1;
            *((base + BLOCK as u64) as *mut u64) = 2;
        }
        assert_eq!(read(&mut r, 0), 0xabcd_0000_0000, "page 0 still served from its slot");
        assert_eq!(read(&mut r, per_page), 0xabcd_0000_0000 + per_page as u64, "page 1 too");
        // Page 12 maps to slot 4 (8 slots): it and its read-ahead (slots 5-7) leave slots 0 and 1 alone.
        assert_eq!(read(&mut r, 12 * per_page), 0xabcd_0000_0000 + 12 * per_page as u64);
        assert_eq!(read(&mut r, 0), 0xabcd_0000_0000, "page 0 not evicted by page 12");
        assert_eq!(read(&mut r, per_page), 0xabcd_0000_0000 + per_page as u64, "nor page 1");
        // Page 9 maps to page 1's slot: it evicts page 1 but not page 0.
        assert_eq!(read(&mut r, 9 * per_page), 0xabcd_0000_0000 + 9 * per_page as u64);
        assert_eq!(read(&mut r, per_page), 2, "page 1 was evicted and read again");
        assert_eq!(read(&mut r, 0), 0xabcd_0000_0000, "page 0 was not");
    }

    /// A miss reads the following blocks in the same system call; a read-ahead block that is not mapped ends the
    /// run without failing the read, and is refused when asked for; the block after it is read on its own.
    #[test]
    fn read_ahead_fills_the_next_slots_and_stops_at_unmapped_memory() {
        if !process_vm_readv_works() {
            return; // The pipe fallback (qemu-user) reads one block per miss; covered by the test above.
        }
        // SAFETY: a fresh anonymous private mapping of four pages; the middle one is unmapped again below.
        let p = unsafe {
            libc::mmap(
                core::ptr::null_mut(),
                4 * BLOCK,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let base = p as u64;
        let page = |i: u64| (base + i * BLOCK as u64) as *mut u64;
        // SAFETY: pages 0-3 are mapped and writable; page 2 is unmapped after the writes and never touched again.
        unsafe {
            for i in 0..4 {
                *page(i) = 100 + i;
            }
            assert_eq!(libc::munmap(page(2).cast(), BLOCK), 0);
        }
        let mut cache = vec![0u8; 8 * BLOCK];
        // SAFETY: getpid has no preconditions.
        let mut r = ProcessVmReader::new(unsafe { libc::getpid() }, &mut cache);
        assert_eq!(r.read_u64(base), Some(100));
        // Page 1 came with page 0: a change in memory is not seen until it is evicted.
        // SAFETY: page 1 is mapped.
        unsafe { *page(1) = 7 };
        assert_eq!(r.read_u64(base + BLOCK as u64), Some(101), "page 1 was read ahead with page 0");
        assert_eq!(r.read_u64(base + 2 * BLOCK as u64), None, "the unmapped page is refused");
        assert_eq!(r.read_u64(base + 3 * BLOCK as u64), Some(103), "the page after the hole is read on its own");
        // SAFETY: unmapping what this test mapped (pages 0, 1 and 3).
        unsafe {
            libc::munmap(page(0).cast(), 2 * BLOCK);
            libc::munmap(page(3).cast(), BLOCK);
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
            let mut r = ProcessVmReader::new(pid, &mut cache).with_pipe(pipe);
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
        let mut r = ProcessVmReader::new(pid, &mut cache).with_pipe(pipe);
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
        let mut fds = [0i32; 2];
        // SAFETY: valid out-array of two ints.
        assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) }, 0);
        (fds[0], fds[1])
    }

    #[test]
    fn the_pipe_fallback_reads_and_refuses_bad_addresses() {
        let data: Vec<u64> = (0..2048u64).map(|i| i ^ 0xabcd).collect();
        let mut cache = vec![0u8; BLOCK];
        // SAFETY: getpid has no preconditions.
        let mut r = ProcessVmReader::new(unsafe { libc::getpid() }, &mut cache).with_pipe(Some(pipe()));
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
