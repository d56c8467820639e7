//! Who owns the crash: the first thread to fault. A second fault on the owner's thread is a recursive crash (it
//! writes a minimal report and dies); a fault on any other thread waits, boundedly, for the owner.
//!
//! The owner is in one of two phases: [`CAPTURING`] (stopping threads, writing the report) or [`CHAINING`]
//! (running the previous handler, which may recover the fault; then the owner frees the gate with
//! [`CrashGate::reset`] and the next fault is a new crash). An owner whose thread no longer exists in this process
//! (a `vfork` child that shared our memory and died, a thread that left a previous handler with `longjmp` and
//! exited) is stale; [`CrashGate::take_over`] frees the gate from it.
//!
//! Lock-free (one compare-and-swap); async-signal-safe.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Phase of the owner: capturing the crash (stop the world, walk, write).
pub const CAPTURING: u32 = 0;
/// Phase of the owner: the report is written and the previous handler runs, with our handlers still installed.
pub const CHAINING: u32 = 1;

/// How a thread entered the crash handler.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Entry {
    /// This thread owns the crash.
    First,
    /// The owner faulted again inside the handler; `depth` is 1 for the first recursion.
    Recursive {
        /// Recursion depth (1 = first fault inside the handler).
        depth: u32,
    },
    /// Another thread owns the crash.
    Other {
        /// The owner's thread id.
        owner: u64,
    },
}

/// The crash ownership gate.
#[derive(Debug, Default)]
pub struct CrashGate {
    owner: AtomicU64,
    depth: AtomicU32,
    phase: AtomicU32,
}

impl CrashGate {
    /// A gate nobody owns.
    pub const fn new() -> Self {
        CrashGate { owner: AtomicU64::new(0), depth: AtomicU32::new(0), phase: AtomicU32::new(CAPTURING) }
    }

    /// Enters with thread id `tid` (non-zero).
    pub fn enter(&self, tid: u64) -> Entry {
        match self.owner.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                self.phase.store(CAPTURING, Ordering::Release);
                Entry::First
            }
            Err(t) if t == tid => {
                Entry::Recursive { depth: self.depth.fetch_add(1, Ordering::AcqRel).saturating_add(1) }
            }
            Err(t) => Entry::Other { owner: t },
        }
    }

    /// The owner's thread id, 0 when nobody owns the crash.
    pub fn owner(&self) -> u64 {
        self.owner.load(Ordering::Acquire)
    }

    /// Frees the gate (after a crash the process survived, e.g. a previous handler recovered; and in tests).
    pub fn reset(&self) {
        self.depth.store(0, Ordering::Release);
        self.phase.store(CAPTURING, Ordering::Release);
        self.owner.store(0, Ordering::Release);
    }

    /// The owner's phase ([`CAPTURING`] or [`CHAINING`]).
    pub fn phase(&self) -> u32 {
        self.phase.load(Ordering::Acquire)
    }

    /// Owner: enters `phase`.
    pub fn set_phase(&self, phase: u32) {
        self.phase.store(phase, Ordering::Release);
    }

    /// Frees the gate from the stale owner `stale` (its thread is gone); `false` when someone else owns it now
    /// (then enter again and see).
    pub fn take_over(&self, stale: u64) -> bool {
        if self.owner.compare_exchange(stale, 0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            self.depth.store(0, Ordering::Release);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn first_recursive_other() {
        let g = CrashGate::new();
        assert_eq!(g.enter(7), Entry::First);
        assert_eq!(g.enter(7), Entry::Recursive { depth: 1 });
        assert_eq!(g.enter(7), Entry::Recursive { depth: 2 });
        assert_eq!(g.enter(8), Entry::Other { owner: 7 });
        assert_eq!(g.owner(), 7);
        g.reset();
        assert_eq!(g.enter(8), Entry::First);
    }

    #[test]
    fn phases_and_taking_over_a_stale_owner() {
        let g = CrashGate::new();
        assert_eq!(g.enter(7), Entry::First);
        assert_eq!(g.phase(), CAPTURING);
        g.set_phase(CHAINING);
        assert_eq!(g.phase(), CHAINING);
        // Only the stale owner named can be taken over.
        assert!(!g.take_over(9));
        assert_eq!(g.owner(), 7);
        assert!(g.take_over(7));
        assert_eq!(g.owner(), 0);
        // The next owner starts capturing, at depth 0.
        assert_eq!(g.enter(8), Entry::First);
        assert_eq!(g.phase(), CAPTURING);
        assert_eq!(g.enter(8), Entry::Recursive { depth: 1 });
        g.reset();
        assert_eq!(g.phase(), CAPTURING);
    }

    #[test]
    fn exactly_one_of_many_racing_threads_owns() {
        for _ in 0..20 {
            let g = Arc::new(CrashGate::new());
            let hs: Vec<_> = (1..=8u64)
                .map(|tid| {
                    let g = Arc::clone(&g);
                    std::thread::spawn(move || g.enter(tid))
                })
                .collect();
            let entries: Vec<Entry> = hs.into_iter().map(|h| h.join().expect("join")).collect();
            assert_eq!(entries.iter().filter(|e| **e == Entry::First).count(), 1);
            let owner = g.owner();
            assert!(entries.iter().all(|e| *e == Entry::First || *e == Entry::Other { owner }));
        }
    }
}
