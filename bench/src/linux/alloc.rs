//! A counting global allocator: the install benchmark reads how many heap bytes `handler::install` leaves
//! allocated (its preallocation). Three relaxed atomic adds per call on top of the system allocator.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

/// The allocator (registered as `#[global_allocator]` in the parent module).
pub struct Counting;

static LIVE: AtomicU64 = AtomicU64::new(0);
static TOTAL: AtomicU64 = AtomicU64::new(0);
static CALLS: AtomicU64 = AtomicU64::new(0);

/// Counters at one instant.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Bytes currently allocated (allocated minus freed).
    pub live: u64,
    /// Bytes ever allocated (reallocations count their new size).
    pub total: u64,
    /// Allocation calls (alloc, alloc_zeroed, realloc).
    pub calls: u64,
}

/// Reads the counters.
pub fn snapshot() -> Snapshot {
    Snapshot {
        live: LIVE.load(Ordering::Relaxed),
        total: TOTAL.load(Ordering::Relaxed),
        calls: CALLS.load(Ordering::Relaxed),
    }
}

fn on_alloc(size: usize) {
    LIVE.fetch_add(size as u64, Ordering::Relaxed);
    TOTAL.fetch_add(size as u64, Ordering::Relaxed);
    CALLS.fetch_add(1, Ordering::Relaxed);
}

// SAFETY: every call is forwarded unchanged to `System`, which upholds the GlobalAlloc contract; the counters
// have no effect on the memory handed out.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours, forwarded.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            on_alloc(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: same contract as ours, forwarded.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            on_alloc(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as ours, forwarded.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as u64, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: same contract as ours, forwarded.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_sub(layout.size() as u64, Ordering::Relaxed);
            on_alloc(new_size);
        }
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kept_allocation_shows_as_live_bytes() {
        // Other test threads may allocate concurrently, so only lower bounds are asserted.
        let before = snapshot();
        let kept: Vec<u8> = Vec::with_capacity(1 << 20);
        let after = snapshot();
        assert!(after.total - before.total >= 1 << 20);
        assert!(after.calls > before.calls);
        assert!(kept.capacity() >= 1 << 20);
        let live_with = snapshot().live;
        drop(kept);
        assert!(live_with >= 1 << 20);
    }
}
