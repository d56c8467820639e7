//! Stack bounds of threads, recorded when each thread starts and read lock-free after a fault.
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

use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

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
}

static TABLE: [Entry; SLOTS] =
    [const { Entry { tid: AtomicU64::new(0), lo: AtomicU64::new(0), hi: AtomicU64::new(0) } }; SLOTS];
/// One past the highest entry ever claimed: readers scan only this far.
static HIGH_WATER: AtomicUsize = AtomicUsize::new(0);

/// Records that thread `tid` runs on the stack `[lo, hi)` (bytes; `lo < hi`). Called by the thread itself (so
/// two live entries never share a tid); an earlier entry of the same tid is replaced. Returns `false` when the
/// table is full, `tid` is 0 or reserved, or `lo >= hi`. Lock-free; signal-safe.
pub fn record(tid: u64, lo: u64, hi: u64) -> bool {
    if tid == 0 || tid == CLAIMED || lo >= hi {
        return false;
    }
    remove(tid);
    for (i, e) in TABLE.iter().enumerate() {
        if e.tid.compare_exchange(0, CLAIMED, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            e.lo.store(lo, Ordering::Relaxed);
            e.hi.store(hi, Ordering::Relaxed);
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

/// The stack of thread `tid` as recorded when it started: `(lo, hi)`, the lowest address and one past the highest
/// (bytes), the whole stack from `pthread_getattr_np`, guard page excluded. `None` when the thread was not
/// recorded (started before install, made without the `pthread_create` wrapper, e.g. by glibc internals or
/// `clone`, or the table was full).
///
/// Crash path: lock-free, no allocation, no panic; at most [`SLOTS`] entries scanned (3 loads each).
pub fn stack_bounds(tid: u64) -> Option<(u64, u64)> {
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
        // Still the same thread's entry: not removed (and perhaps reused) while we read.
        if e.tid.load(Ordering::Acquire) == tid && lo < hi {
            return Some((lo, hi));
        }
    }
    None
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
        assert!(record(BASE + 1, 0x1000, 0x9000));
        assert!(record(BASE + 2, 0x20000, 0x40000));
        assert_eq!(stack_bounds(BASE + 1), Some((0x1000, 0x9000)));
        assert_eq!(stack_bounds(BASE + 2), Some((0x20000, 0x40000)));
        // A tid recorded again (reused by a new thread) has one entry, the new one.
        assert!(record(BASE + 1, 0x5000, 0x6000));
        assert_eq!(stack_bounds(BASE + 1), Some((0x5000, 0x6000)));
        remove(BASE + 1);
        assert_eq!(stack_bounds(BASE + 1), None);
        assert_eq!(stack_bounds(BASE + 2), Some((0x20000, 0x40000)));
        remove(BASE + 2);
        assert_eq!(stack_bounds(BASE + 2), None);
        // Nonsense is refused.
        assert!(!record(0, 1, 2));
        assert!(!record(CLAIMED, 1, 2));
        assert!(!record(BASE + 3, 5, 5));
        assert_eq!(stack_bounds(0), None);
    }

    #[test]
    fn concurrent_threads_see_only_their_own_bounds() {
        let hs: Vec<_> = (0..8u64)
            .map(|k| {
                std::thread::spawn(move || {
                    let tid = BASE + 100 + k;
                    for round in 0..2000u64 {
                        let lo = (k << 32) + round * 0x1000;
                        assert!(record(tid, lo, lo + 0x800));
                        assert_eq!(stack_bounds(tid), Some((lo, lo + 0x800)));
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
}
