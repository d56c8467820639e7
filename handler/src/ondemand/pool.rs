//! The walkers on-demand captures borrow: each holds what one stack walk needs (the unwinder's row cache, a block
//! cache for the fault-proof reader, a frame buffer, repeat records), preallocated at install
//! (`crate::prealloc::capture_pool`, [`crate::Config::capture_walkers`] of them) and claimed with one
//! compare-and-swap, never a lock. A claim is an ownership token: dropped, it frees the walker; moved into a
//! capture request ([`super::linux`]) it passes to whoever ends the request.
//!
//! A walker keeps its row cache from one capture to the next (that is what makes a repeated stack cheap: every
//! frame is a cache hit, with no table search and no CFI evaluation), and forgets it when the image table changed
//! since ([`Walker::rules_generation`]). Signal-safe.
#![allow(unsafe_code)]

use crate::arch::RegisterValues;
use crate::unwind::{Repeat, RuleCache, WalkOutcome};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicBool, Ordering};

/// Frames one walk stores (after repeat compression); deeper stacks are truncated (flagged).
pub const MAX_FRAMES: usize = 512;
/// Repeat records one walk stores.
pub const REPEATS: usize = 32;
/// Bytes of the stack a walker's walks run on inside the capture signal's handler (mapped at install with a guard
/// page, `MAP_NORESERVE`: only the pages a walk touches cost memory). An optimized walk takes about 13 KiB
/// (`crate::unwind::walk`'s large locals) plus the handler's own frames: 32 KiB. Unoptimized builds keep every
/// temporary in its own stack slot and need between 48 and 64 KiB (a 48 KiB stack overflowed in this crate's
/// debug tests): 128 KiB there.
pub const WALK_STACK_BYTES: usize = if cfg!(debug_assertions) { 128 * 1024 } else { 32 * 1024 };

/// Bytes of a walker's reader block cache: 2 blocks of 4 KiB (`platform::linux::crash::memory::BLOCK`). It only
/// serves walks whose rows are not cached yet (reads of `.eh_frame_hdr` and FDEs), and the stack of a thread
/// whose bounds were not recorded.
pub const BLOCK_CACHE_BYTES: usize = 2 * 4096;

/// What one walk works in.
#[derive(Debug)]
pub struct Walker {
    /// Unwind rows of earlier walks (62 KiB).
    pub rules: RuleCache,
    /// The fast path's recipes, derived from `rules` (12 KiB; `super::fast`).
    pub trace: super::fast::Trace,
    /// [`crate::crash::images::ImageTable::generation`] the rows were found under; another generation clears them.
    pub rules_generation: u64,
    /// Frames of the last walk (raw: frame 0 is the pc, then return addresses; repeats compressed).
    pub frames: [u64; MAX_FRAMES],
    /// How each frame was found (`unwind::trust`).
    pub trust: [u8; MAX_FRAMES],
    /// Repeat records of the last walk.
    pub repeats: [Repeat; REPEATS],
    /// Result of the last walk (`None` before the first one, or when it could not start).
    pub outcome: Option<WalkOutcome>,
    /// Registers the last walk started from.
    pub regs: RegisterValues,
    /// The fault-proof reader's block cache.
    pub blocks: [u8; BLOCK_CACHE_BYTES],
    /// Top (16-aligned) of a stack of [`WALK_STACK_BYTES`] this walker's walks run on inside the Linux capture
    /// signal's handler (0: none, walk on the signal's stack). The signal may arrive on a small alternate stack
    /// (Rust std gives the main thread and its threads one of a few KiB) where the walk's 13 KiB do not fit.
    pub stack_top: usize,
    /// A non-blocking pipe `(read, write)` of this walker's own, for the reader where `process_vm_readv` cannot
    /// read this process (qemu-user; see `platform::linux::crash::memory`). Each walker has its own: the pipe
    /// carries one read at a time.
    pub pipe: Option<(i32, i32)>,
}

impl Walker {
    /// A fresh walker (install time; about 90 KiB).
    pub fn new(pipe: Option<(i32, i32)>, stack_top: usize) -> Walker {
        Walker {
            rules: RuleCache::EMPTY,
            trace: super::fast::Trace::EMPTY,
            rules_generation: 0,
            frames: [0; MAX_FRAMES],
            trust: [0; MAX_FRAMES],
            repeats: [Repeat::default(); REPEATS],
            outcome: None,
            regs: RegisterValues::EMPTY,
            blocks: [0; BLOCK_CACHE_BYTES],
            stack_top,
            pipe,
        }
    }

    /// The stored frames of the last walk (empty when none).
    pub fn frames(&self) -> &[u64] {
        let n = self.outcome.map_or(0, |o| o.frames);
        self.frames.get(..n).unwrap_or(&[])
    }

    /// How each stored frame of the last walk was found.
    pub fn trust(&self) -> &[u8] {
        let n = self.outcome.map_or(0, |o| o.frames);
        self.trust.get(..n).unwrap_or(&[])
    }

    /// The repeat records of the last walk.
    pub fn repeats(&self) -> &[Repeat] {
        let n = self.outcome.map_or(0, |o| o.repeats);
        self.repeats.get(..n).unwrap_or(&[])
    }

    /// Clears the row cache when the image table is not at `generation` any more.
    pub fn sync_rules(&mut self, generation: u64) {
        if self.rules_generation != generation {
            self.rules.clear();
            self.trace.clear();
            self.rules_generation = generation;
        }
    }
}

/// One walker and whether it is taken.
#[derive(Debug)]
pub struct Entry {
    busy: AtomicBool,
    walker: UnsafeCell<Walker>,
}

impl Entry {
    /// A free entry (install time).
    pub fn new(pipe: Option<(i32, i32)>, stack_top: usize) -> Entry {
        Entry { busy: AtomicBool::new(false), walker: UnsafeCell::new(Walker::new(pipe, stack_top)) }
    }
}

/// The preallocated walkers.
#[derive(Debug)]
pub struct Pool {
    entries: &'static [Entry],
}

// SAFETY: an entry's walker is used only by the holder of its claim (`busy` taken with a compare-and-swap, given
// back with a release store), so no two threads use one walker at once.
unsafe impl Sync for Pool {}
// SAFETY: as above; the entries are leaked static storage valid on every thread.
unsafe impl Send for Pool {}

impl Pool {
    /// A pool over leaked entries (install time).
    pub fn new(entries: &'static [Entry]) -> Pool {
        Pool { entries }
    }

    /// How many walkers there are.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is no walker at all.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// A free walker, claimed; `None` when every one is taken. One compare-and-swap per entry tried; signal-safe.
    pub fn claim(&self) -> Option<Claim<'_>> {
        self.entries.iter().enumerate().find_map(|(index, e)| {
            e.busy
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
                // `then`, not `then_some`: a `Claim` built for a failed compare-and-swap would free the entry when
                // dropped.
                .then(|| Claim { entry: e, index })
        })
    }

    /// Takes back the claim of walker `index` that [`Claim::into_index`] gave away.
    ///
    /// # Safety
    /// The caller owns that claim now (it was handed over to it, and nobody else uses or frees the walker).
    pub unsafe fn reclaim(&self, index: usize) -> Option<Claim<'_>> {
        self.entries.get(index).map(|entry| Claim { entry, index })
    }
}

/// The exclusive use of one walker; dropping it frees the walker.
#[derive(Debug)]
pub struct Claim<'p> {
    entry: &'p Entry,
    index: usize,
}

impl Claim<'_> {
    /// The walker.
    pub fn walker(&mut self) -> &mut Walker {
        // SAFETY: this claim holds `busy` for the entry (taken by `Pool::claim`, or handed over and taken back by
        // `Pool::reclaim`), so no other reference to the walker exists while `self` is borrowed mutably.
        unsafe { &mut *self.entry.walker.get() }
    }

    /// Gives the claim away (the walker stays taken) as its index, for [`Pool::reclaim`] by its next owner.
    pub fn into_index(self) -> usize {
        let i = self.index;
        core::mem::forget(self);
        i
    }
}

impl Drop for Claim<'_> {
    fn drop(&mut self) {
        self.entry.busy.store(false, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_are_exclusive_and_freed_on_drop_or_handed_over() {
        let entries: &'static [Entry] = Vec::leak((0..2).map(|_| Entry::new(None, 0)).collect());
        let pool = Pool::new(entries);
        let mut a = pool.claim().expect("first");
        let b = pool.claim().expect("second");
        assert!(pool.claim().is_none(), "both taken");
        assert!(pool.claim().is_none(), "a failed claim frees nothing");
        a.walker().frames[0] = 7;
        drop(b);
        let c = pool.claim().expect("freed by drop");
        let i = c.into_index();
        assert!(pool.claim().is_none(), "handed over: still taken");
        // SAFETY: this test handed the claim over to itself.
        let mut back = unsafe { pool.reclaim(i) }.expect("in range");
        back.walker().frames[1] = 9;
        drop(back);
        drop(a);
        assert!(pool.claim().is_some());
        // SAFETY: an index out of range is refused, not used.
        assert!(unsafe { pool.reclaim(5) }.is_none());
    }
}
