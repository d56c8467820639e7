//! The fault-proof memory reader: `process_vm_readv(2)` on the own pid (a bad address returns `EFAULT` instead of
//! faulting), with a one-page cache so a stack walk costs one system call per 4 KiB of stack.
#![allow(unsafe_code)]

use crate::unwind::MemoryReader;

/// Size of the cached block in bytes (the smallest page size on Linux x86-64 and arm64; mappings are at least this
/// granular, so a whole block is readable whenever one byte of it is).
pub const BLOCK: usize = 4096;

/// Reads the own process's memory with `process_vm_readv`. Signal-safe; never faults.
#[derive(Debug)]
pub struct ProcessVmReader<'a> {
    pid: i32,
    cache: &'a mut [u8],
    base: u64,
    valid: bool,
}

impl<'a> ProcessVmReader<'a> {
    /// A reader for process `pid` using `cache` (at least [`BLOCK`] bytes for caching; smaller disables it).
    pub fn new(pid: i32, cache: &'a mut [u8]) -> Self {
        ProcessVmReader { pid, cache, base: 0, valid: false }
    }

    /// Reads exactly `buf.len()` bytes at `addr` without the cache.
    pub fn read_direct(&self, addr: u64, buf: &mut [u8]) -> bool {
        if buf.is_empty() {
            return true;
        }
        let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: buf.len() };
        let remote = libc::iovec { iov_base: addr as usize as *mut libc::c_void, iov_len: buf.len() };
        // SAFETY: `local` describes `buf`, valid for writes; the kernel validates `remote` and returns EFAULT for
        // unmapped addresses instead of faulting.
        let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
        n >= 0 && n as usize == buf.len()
    }
}

impl MemoryReader for ProcessVmReader<'_> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        let len = buf.len() as u64;
        let block = BLOCK as u64;
        let base = addr & !(block - 1);
        let Some(end) = addr.checked_add(len) else { return false };
        if self.cache.len() < BLOCK || end > base + block {
            return self.read_direct(addr, buf);
        }
        if !self.valid || self.base != base {
            self.valid = false;
            let Some(c) = self.cache.get_mut(..BLOCK) else { return false };
            let local = libc::iovec { iov_base: c.as_mut_ptr().cast(), iov_len: BLOCK };
            let remote = libc::iovec { iov_base: base as usize as *mut libc::c_void, iov_len: BLOCK };
            // SAFETY: as in `read_direct`; `c` is BLOCK bytes valid for writes.
            let n = unsafe { libc::process_vm_readv(self.pid, &local, 1, &remote, 1, 0) };
            if n < 0 || n as usize != BLOCK {
                return self.read_direct(addr, buf);
            }
            self.base = base;
            self.valid = true;
        }
        let off = (addr - base) as usize;
        match self.cache.get(off..off + buf.len()) {
            Some(src) => {
                buf.copy_from_slice(src);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_memory_and_refuses_bad_addresses() {
        let data: Vec<u64> = (0..2048u64).map(|i| i * 3).collect();
        let mut cache = vec![0u8; BLOCK];
        // SAFETY: getpid has no preconditions.
        let pid = unsafe { libc::getpid() };
        let mut r = ProcessVmReader::new(pid, &mut cache);
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
    }
}
