//! The memory reader of an on-demand walk: plain loads inside the walking thread's own live stack, the
//! fault-proof reader (`process_vm_readv` on Linux, `vm_read_overwrite` on Apple) for everything else.
//!
//! This is the exception design.md §2 allows: plain loads strictly inside a range proven mapped for as long as it
//! is read. Here the range is `[sp, hi)` of the thread that walks, where `sp` is its stack pointer when the walk
//! started (at the capture call, or where the capture signal interrupted it) and `hi` the top of the stack recorded
//! for that thread when it started (`crate::crash::stack_bounds`), used only when the recorded stack holds `sp`:
//! - the thread is the one running the walk (the current thread, or the signalled thread inside its handler), so
//!   it cannot exit or unmap its stack meanwhile, and the frames above `sp` do not change while it walks;
//! - everything between a running thread's stack pointer and the top of its stack is mapped: a `pthread_create`
//!   stack is mapped whole, and the main thread's stack mapping grows only downwards, from the lowest page ever
//!   touched (below `sp`) up to the top the recorded bounds name (`pthread_getattr_np` takes it from the mapping).
//!
//! A walk never reads below its starting `sp` (the unwinder keeps every read inside `[sp, end)`), and frames on
//! another stack (an alternate signal stack a walk hops from) are read through the fault-proof reader.
#![allow(unsafe_code)]

use crate::unwind::MemoryReader;

/// Plain loads in `[lo, hi)`, `inner` elsewhere. Signal-safe; never faults.
#[derive(Debug)]
pub struct LiveStackReader<'a, M: MemoryReader + ?Sized> {
    inner: &'a mut M,
    lo: u64,
    hi: u64,
}

impl<'a, M: MemoryReader + ?Sized> LiveStackReader<'a, M> {
    /// A reader for a walk that starts at stack pointer `sp` on the calling thread, whose recorded stack is
    /// `bounds` (`(lo, hi)`; `None` when none was recorded): plain loads in `[sp, hi)` when `lo <= sp < hi`, else
    /// none at all.
    ///
    /// # Safety
    /// `sp` is the calling thread's stack pointer at a point it has not returned from (a frame of the current call
    /// chain, or the context a signal interrupted on this thread, whose handler is running), and `bounds` were
    /// recorded for the calling thread.
    pub unsafe fn new(inner: &'a mut M, sp: u64, bounds: Option<(u64, u64)>) -> Self {
        let (lo, hi) = match bounds {
            Some((lo, hi)) if lo <= sp && sp < hi => (sp, hi),
            _ => (0, 0),
        };
        LiveStackReader { inner, lo, hi }
    }

    /// The range read with plain loads (`(0, 0)`: none).
    pub fn direct_range(&self) -> (u64, u64) {
        (self.lo, self.hi)
    }
}

impl<M: MemoryReader + ?Sized> MemoryReader for LiveStackReader<'_, M> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        let inside = addr >= self.lo && addr.checked_add(buf.len() as u64).is_some_and(|end| end <= self.hi);
        if !inside || buf.is_empty() {
            return self.inner.read(addr, buf);
        }
        // SAFETY: `[addr, addr + len)` lies inside `[sp, hi)` of the calling thread's own live stack, mapped for as
        // long as this thread runs (see `new`'s contract and the module docs); the frames there belong to callers
        // that have not returned, so nothing writes them during the copy. `buf` is a distinct buffer (the walk's
        // locals and outputs are below `sp`, or off the stack).
        unsafe {
            core::ptr::copy_nonoverlapping(addr as usize as *const u8, buf.as_mut_ptr(), buf.len());
        }
        true
    }

    #[inline(always)]
    fn read_u64(&mut self, addr: u64) -> Option<u64> {
        if addr >= self.lo && addr.checked_add(8).is_some_and(|end| end <= self.hi) {
            // SAFETY: as in `read`: `[addr, addr + 8)` lies inside the calling thread's live stack above `sp`.
            return Some(unsafe { core::ptr::read_unaligned(addr as usize as *const u64) });
        }
        let mut b = [0u8; 8];
        self.inner.read(addr, &mut b).then(|| u64::from_ne_bytes(b))
    }

    fn probe(&mut self, addr: u64) -> bool {
        if addr >= self.lo && addr < self.hi {
            return true;
        }
        self.inner.probe(addr)
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing)]
mod tests {
    use super::*;

    struct Counting(usize);
    impl MemoryReader for Counting {
        fn read(&mut self, _addr: u64, buf: &mut [u8]) -> bool {
            self.0 += 1;
            buf.fill(0xee);
            true
        }
    }

    #[test]
    fn plain_loads_only_from_sp_to_the_recorded_top() {
        let stack: Vec<u64> = (0..64u64).collect();
        let lo = stack.as_ptr() as u64;
        let hi = lo + 8 * 64;
        let sp = lo + 8 * 10;
        let mut inner = Counting(0);
        // SAFETY: the "stack" is this test's own live vector, mapped for the whole test.
        let mut r = unsafe { LiveStackReader::new(&mut inner, sp, Some((lo, hi))) };
        assert_eq!(r.direct_range(), (sp, hi));
        assert_eq!(r.read_u64(sp), Some(10));
        assert_eq!(r.read_u64(hi - 8), Some(63));
        assert!(r.probe(sp));
        let other = u64::from_ne_bytes([0xee; 8]);
        assert_eq!(r.read_u64(sp - 8), Some(other), "below sp: the fault-proof reader");
        assert_eq!(r.read_u64(hi - 4), Some(other), "past the top: the fault-proof reader");
        assert_eq!(inner.0, 2);
        // A stack pointer outside the recorded stack (an alternate signal stack): no plain loads at all.
        let mut inner = Counting(0);
        // SAFETY: as above; nothing is read directly.
        let mut r = unsafe { LiveStackReader::new(&mut inner, hi + 64, Some((lo, hi))) };
        assert_eq!(r.direct_range(), (0, 0));
        assert_eq!(r.read_u64(sp), Some(other));
        // SAFETY: as above.
        let r = unsafe { LiveStackReader::new(&mut inner, sp, None) };
        assert_eq!(r.direct_range(), (0, 0));
    }
}
