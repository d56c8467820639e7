//! Who owns the crash: the first thread to fault. A second fault on the owner's thread is a recursive crash (it
//! writes a minimal report and dies); a fault on any other thread waits, boundedly, for the owner.
//!
//! Lock-free (one compare-and-swap); async-signal-safe.

use core::sync::atomic::{AtomicU32, AtomicU64, Ordering};

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
}

impl CrashGate {
    /// A gate nobody owns.
    pub const fn new() -> Self {
        CrashGate { owner: AtomicU64::new(0), depth: AtomicU32::new(0) }
    }

    /// Enters with thread id `tid` (non-zero).
    pub fn enter(&self, tid: u64) -> Entry {
        match self.owner.compare_exchange(0, tid, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => Entry::First,
            Err(t) if t == tid => Entry::Recursive { depth: self.depth.fetch_add(1, Ordering::AcqRel) + 1 },
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
        self.owner.store(0, Ordering::Release);
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
