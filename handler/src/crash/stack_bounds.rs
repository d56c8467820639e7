//! Stack bounds of threads, recorded when each thread starts and read lock-free after a fault, and
//! [`MappedStackReader`], which reads a stopped thread's stack inside those bounds with plain loads.
//!
//! Writers: the thread itself, at start (Linux: the `pthread_create` wrapper in `platform::linux::threads`; the
//! installing thread at install) and at exit (its key destructor removes the entry). Reader: the crash path,
//! through [`stack_bounds`], to bound a stack walk to the thread's own stack.
//!
//! The table is a fixed array of [`SLOTS`] entries in static storage (zero pages until used; nothing is allocated).
//! Each entry is three atomics; its `tid` word is the publication flag: 0 free, `CLAIMED` while the owner writes
//! the bounds, the thread id once they are valid. A reader checks the `tid` before and after reading the bounds,
//! so an entry removed and reused meanwhile is never returned with another thread's bounds. Crash-path code:
//! no allocation, no lock, no panic.

#![allow(unsafe_code)]

use crate::unwind::MemoryReader;
use core::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};

/// How many live threads the table holds. Threads beyond it have no recorded bounds ([`stack_bounds`] returns
/// `None` for them and the walk falls back to its own limits). 4096 entries of 24 bytes: 96 KiB of `.bss`, touched
/// only as far as used.
pub const SLOTS: usize = 4096;

/// `tid` value of an entry whose owner is writing it. No kernel thread id is this large (`PID_MAX_LIMIT` is 2^22,
/// Linux `include/linux/threads.h`).
const CLAIMED: u64 = u64::MAX;

struct Entry {
    tid: AtomicU64,
    lo: AtomicU64,
    hi: AtomicU64,
    mapped: AtomicBool,
    /// The recording thread's `pthread_self()`, for [`own_stack_bounds`] (which needs no system call).
    thread: AtomicU64,
}

static TABLE: [Entry; SLOTS] = [const {
    Entry {
        tid: AtomicU64::new(0),
        lo: AtomicU64::new(0),
        hi: AtomicU64::new(0),
        mapped: AtomicBool::new(false),
        thread: AtomicU64::new(0),
    }
}; SLOTS];

/// The calling thread's `pthread_self()` as a number (a thread's control block address with glibc and on Apple
/// platforms: a register or TLS read, no system call); 0 elsewhere.
fn own_thread() -> u64 {
    #[cfg(unix)]
    {
        // SAFETY: pthread_self has no preconditions and is async-signal-safe in practice (it reads the thread
        // pointer).
        unsafe { libc::pthread_self() as u64 }
    }
    #[cfg(not(unix))]
    {
        0
    }
}

/// A thread's stack as recorded when it started.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StackBounds {
    /// Lowest address of the stack (bytes; the guard page excluded).
    pub lo: u64,
    /// One past the highest address.
    pub hi: u64,
    /// The whole range is mapped for as long as the thread lives: a stack mapped whole when the thread was made
    /// (glibc maps a `pthread_create` stack in one `mmap`), not a main-thread stack that grows on demand. Only
    /// such a stack may be read with plain loads ([`MappedStackReader`]).
    pub mapped: bool,
}
/// One past the highest entry ever claimed: readers scan only this far.
static HIGH_WATER: AtomicUsize = AtomicUsize::new(0);

/// Records that thread `tid` runs on the stack `[lo, hi)` (bytes; `lo < hi`), mapped whole for the thread's
/// life when `mapped` (see [`StackBounds::mapped`]). Called by the thread itself (so two live entries never share
/// a tid); an earlier entry of the same tid is replaced. Returns `false` when the table is full, `tid` is 0 or
/// reserved, or `lo >= hi`. Lock-free; signal-safe.
pub fn record(tid: u64, lo: u64, hi: u64, mapped: bool) -> bool {
    if tid == 0 || tid == CLAIMED || lo >= hi {
        return false;
    }
    remove(tid);
    for (i, e) in TABLE.iter().enumerate() {
        if e.tid.compare_exchange(0, CLAIMED, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            e.lo.store(lo, Ordering::Relaxed);
            e.hi.store(hi, Ordering::Relaxed);
            e.mapped.store(mapped, Ordering::Relaxed);
            e.thread.store(own_thread(), Ordering::Relaxed);
            HIGH_WATER.fetch_max(i.saturating_add(1), Ordering::AcqRel);
            // Publishes lo/hi: a reader that sees `tid` with Acquire sees them.
            e.tid.store(tid, Ordering::Release);
            return true;
        }
    }
    false
}

/// Forgets thread `tid`'s entry (at thread exit, by the thread itself). Lock-free; signal-safe.
pub fn remove(tid: u64) {
    if tid == 0 || tid == CLAIMED {
        return;
    }
    let n = HIGH_WATER.load(Ordering::Acquire);
    for e in TABLE.iter().take(n) {
        if e.tid.load(Ordering::Acquire) == tid {
            e.tid.store(0, Ordering::Release);
        }
    }
}

/// The stack of thread `tid` as recorded when it started (the whole stack from `pthread_getattr_np`, guard page
/// excluded). `None` when the thread was not recorded (started before install, made without the `pthread_create`
/// wrapper, e.g. by glibc internals or `clone`, or the table was full).
///
/// Crash path: lock-free, no allocation, no panic; at most [`SLOTS`] entries scanned (5 loads each).
pub fn stack_bounds(tid: u64) -> Option<StackBounds> {
    if tid == 0 || tid == CLAIMED {
        return None;
    }
    let n = HIGH_WATER.load(Ordering::Acquire);
    for e in TABLE.iter().take(n) {
        if e.tid.load(Ordering::Acquire) != tid {
            continue;
        }
        let lo = e.lo.load(Ordering::Acquire);
        let hi = e.hi.load(Ordering::Acquire);
        let mapped = e.mapped.load(Ordering::Acquire);
        // Still the same thread's entry: not removed (and perhaps reused) while we read.
        if e.tid.load(Ordering::Acquire) == tid && lo < hi {
            return Some(StackBounds { lo, hi, mapped });
        }
    }
    None
}

/// The calling thread's recorded stack, found without a system call: the entry this thread recorded (same
/// `pthread_self()`) that holds `sp`, the caller's current stack pointer (so an entry of an exited thread whose
/// control block a new, unrecorded thread reuses is never taken: its stack holds no live frame of ours). `None`
/// when this thread recorded none, or runs on another stack (an alternate signal stack).
///
/// Lock-free, no allocation, no panic; at most [`SLOTS`] entries scanned.
pub fn own_stack_bounds(sp: u64) -> Option<StackBounds> {
    let me = own_thread();
    if me == 0 {
        return None;
    }
    let n = HIGH_WATER.load(Ordering::Acquire);
    for e in TABLE.iter().take(n) {
        let tid = e.tid.load(Ordering::Acquire);
        if tid == 0 || tid == CLAIMED || e.thread.load(Ordering::Acquire) != me {
            continue;
        }
        let lo = e.lo.load(Ordering::Acquire);
        let hi = e.hi.load(Ordering::Acquire);
        let mapped = e.mapped.load(Ordering::Acquire);
        if e.tid.load(Ordering::Acquire) == tid && lo <= sp && sp < hi {
            return Some(StackBounds { lo, hi, mapped });
        }
    }
    None
}

/// A [`MemoryReader`] for walking one stopped thread's stack: reads inside the thread's recorded stack are plain
/// loads when that stack is [`StackBounds::mapped`]; every other read goes to the fault-proof reader `inner`.
///
/// This is the one exception the crash-path rules allow (design.md §2): plain loads strictly inside a range proven
/// mapped for as long as it is read. The thread is stopped (it answered the stop signal, or it is the thread that
/// crashed and now runs the handler on its alternate stack), so it cannot exit and have its stack unmapped while
/// the walk reads it. A stack overflow leaves the stack pointer below `lo`, in the guard page: those reads are
/// outside the range and go to `inner`, which refuses them. Signal-safe; never faults.
#[derive(Debug)]
pub struct MappedStackReader<'a, M: MemoryReader + ?Sized> {
    inner: &'a mut M,
    lo: u64,
    hi: u64,
}

impl<'a, M: MemoryReader + ?Sized> MappedStackReader<'a, M> {
    /// Reads `bounds`' range directly when it is mapped whole, else everything through `inner`.
    ///
    /// # Safety
    /// The thread whose stack `bounds` describes is stopped (or is the crashing thread running the handler on
    /// another stack) for as long as the reader is used.
    pub unsafe fn new(inner: &'a mut M, bounds: StackBounds) -> Self {
        let (lo, hi) = if bounds.mapped { (bounds.lo, bounds.hi) } else { (0, 0) };
        MappedStackReader { inner, lo, hi }
    }
}

impl<M: MemoryReader + ?Sized> MappedStackReader<'_, M> {
    /// Whether `[addr, addr + len)` lies inside the stack range read with plain loads (never for an unmapped stack,
    /// whose range is empty).
    fn inside(&self, addr: u64, len: u64) -> bool {
        addr >= self.lo && addr.checked_add(len).is_some_and(|end| end <= self.hi)
    }
}

impl<M: MemoryReader + ?Sized> MemoryReader for MappedStackReader<'_, M> {
    fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
        if buf.is_empty() || !self.inside(addr, buf.len() as u64) {
            return self.inner.read(addr, buf);
        }
        // SAFETY: `[addr, addr + len)` lies inside `[lo, hi)`, a stack mapped whole for the life of its thread
        // (`StackBounds::mapped`), and the thread is stopped while this reader exists (`new`'s contract): the
        // memory is mapped and readable for the whole copy. `buf` is a distinct, writable buffer.
        unsafe {
            core::ptr::copy_nonoverlapping(addr as usize as *const u8, buf.as_mut_ptr(), buf.len());
        }
        true
    }

    /// As [`MemoryReader::read_u64`], with a stack word read as one load (the walker reads return addresses and
    /// saved registers this way, a few per frame; [`MappedStackReader::read`]'s copy of a length not known at compile
    /// time is a call to `memcpy`).
    fn read_u64(&mut self, addr: u64) -> Option<u64> {
        if !self.inside(addr, 8) {
            return self.inner.read_u64(addr);
        }
        // SAFETY: `[addr, addr + 8)` lies inside `[lo, hi)`, mapped and readable for the whole read, as in `read`
        // above; an unaligned load is allowed by `read_unaligned`.
        Some(unsafe { core::ptr::read_unaligned(addr as usize as *const u64) })
    }
}

#[cfg(test)]
#[allow(clippy::arithmetic_side_effects, clippy::indexing_slicing, clippy::unwrap_used, clippy::panic)]
mod tests {
    use super::*;

    // Tids far above PID_MAX_LIMIT so they never collide with real threads recorded by other tests in this process.
    const BASE: u64 = 1 << 40;

    #[test]
    fn record_lookup_replace_remove() {
        assert_eq!(stack_bounds(BASE + 1), None);
        let b = |lo, hi, mapped| Some(StackBounds { lo, hi, mapped });
        assert!(record(BASE + 1, 0x1000, 0x9000, true));
        assert!(record(BASE + 2, 0x20000, 0x40000, false));
        assert_eq!(stack_bounds(BASE + 1), b(0x1000, 0x9000, true));
        assert_eq!(stack_bounds(BASE + 2), b(0x20000, 0x40000, false));
        // A tid recorded again (reused by a new thread) has one entry, the new one.
        assert!(record(BASE + 1, 0x5000, 0x6000, false));
        assert_eq!(stack_bounds(BASE + 1), b(0x5000, 0x6000, false));
        remove(BASE + 1);
        assert_eq!(stack_bounds(BASE + 1), None);
        assert_eq!(stack_bounds(BASE + 2), b(0x20000, 0x40000, false));
        remove(BASE + 2);
        assert_eq!(stack_bounds(BASE + 2), None);
        // Nonsense is refused.
        assert!(!record(0, 1, 2, true));
        assert!(!record(CLAIMED, 1, 2, true));
        assert!(!record(BASE + 3, 5, 5, true));
        assert_eq!(stack_bounds(0), None);
    }

    #[test]
    fn own_bounds_are_found_by_thread_and_stack_pointer() {
        let local = 0u8;
        let sp = core::ptr::addr_of!(local) as u64;
        let tid = BASE + 50;
        assert!(record(tid, sp - 0x1000, sp + 0x1000, true));
        let b = own_stack_bounds(sp).expect("recorded by this thread, holding sp");
        assert_eq!((b.lo, b.hi), (sp - 0x1000, sp + 0x1000));
        assert_eq!(own_stack_bounds(sp + 0x2000), None, "another stack");
        let other = std::thread::spawn(move || own_stack_bounds(sp)).join().unwrap();
        assert_eq!(other, None, "another thread's entry");
        remove(tid);
        assert_eq!(own_stack_bounds(sp), None);
    }

    #[test]
    fn concurrent_threads_see_only_their_own_bounds() {
        let hs: Vec<_> = (0..8u64)
            .map(|k| {
                std::thread::spawn(move || {
                    let tid = BASE + 100 + k;
                    for round in 0..2000u64 {
                        let lo = (k << 32) + round * 0x1000;
                        let mapped = round % 2 == 0;
                        assert!(record(tid, lo, lo + 0x800, mapped));
                        assert_eq!(stack_bounds(tid), Some(StackBounds { lo, hi: lo + 0x800, mapped }));
                        if round % 3 == 0 {
                            remove(tid);
                            assert_eq!(stack_bounds(tid), None);
                        }
                    }
                    remove(tid);
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
    }

    /// Reads inside a mapped stack are plain loads (they see the memory as it is, with no system call); reads
    /// outside it, or anywhere when the stack is not mapped whole, go to the fault-proof reader.
    #[test]
    fn mapped_stack_reads_inside_directly_and_delegates_the_rest() {
        struct Counting(usize);
        impl MemoryReader for Counting {
            fn read(&mut self, _addr: u64, buf: &mut [u8]) -> bool {
                self.0 += 1;
                buf.fill(0xee);
                true
            }
        }
        let stack: Vec<u64> = (0..512u64).map(|i| i * 7).collect();
        let lo = stack.as_ptr() as u64;
        let hi = lo + 8 * 512;
        let mut inner = Counting(0);
        // SAFETY: the "stack" is our own live vector, mapped for the whole test.
        let mut r = unsafe { MappedStackReader::new(&mut inner, StackBounds { lo, hi, mapped: true }) };
        assert_eq!(r.read_u64(lo + 8 * 3), Some(21));
        assert_eq!(r.read_u64(hi - 8), Some(511 * 7));
        assert_eq!(r.read_u64(hi - 4), Some(u64::from_ne_bytes([0xee; 8])), "straddles the top: delegated");
        assert_eq!(r.read_u64(lo - 8), Some(u64::from_ne_bytes([0xee; 8])), "below the stack: delegated");
        assert_eq!(r.read_u64(u64::MAX - 3), Some(u64::from_ne_bytes([0xee; 8])), "wrapping range: delegated");
        assert_eq!(inner.0, 3);
        let mut inner = Counting(0);
        // SAFETY: as above.
        let mut r = unsafe { MappedStackReader::new(&mut inner, StackBounds { lo, hi, mapped: false }) };
        assert_eq!(r.read_u64(lo), Some(u64::from_ne_bytes([0xee; 8])), "not mapped whole: never a plain load");
        assert_eq!(inner.0, 1);
    }
}
