//! The user key/value table: fixed-size static storage that app threads write (through
//! [`crate::user_values`]) and the crash path reads without locks or allocation.
//!
//! Each slot is guarded by a sequence counter (a seqlock): a writer makes it odd, stores the bytes, makes it even.
//! The crash path copies a slot and keeps the copy only when the counter was even and unchanged across the copy,
//! retrying a bounded number of times. Bytes are `AtomicU8`, so a read racing a write is defined behaviour (it is
//! just discarded); there is no `unsafe` here. Signal-safe: atomics and copies only.

use core::sync::atomic::{AtomicU32, AtomicU8, AtomicUsize, Ordering};
use report_format::encode::KeyValue;

/// Number of key/value pairs the table holds.
pub const SLOTS: usize = 64;
/// Longest key, in bytes.
pub const MAX_KEY: usize = 64;
/// Longest value, in bytes.
pub const MAX_VALUE: usize = 256;
/// Reads of one slot the crash path tries before giving up on it (a writer was interrupted mid-write).
const READ_TRIES: u32 = 8;

/// One slot. `len_k == 0` means empty.
pub(crate) struct Slot {
    pub(crate) seq: AtomicU32,
    pub(crate) len_k: AtomicUsize,
    pub(crate) len_v: AtomicUsize,
    pub(crate) key: [AtomicU8; MAX_KEY],
    pub(crate) value: [AtomicU8; MAX_VALUE],
}

impl Slot {
    const fn new() -> Self {
        Slot {
            seq: AtomicU32::new(0),
            len_k: AtomicUsize::new(0),
            len_v: AtomicUsize::new(0),
            key: [const { AtomicU8::new(0) }; MAX_KEY],
            value: [const { AtomicU8::new(0) }; MAX_VALUE],
        }
    }
}

/// The table (about 21 KiB of static storage; nothing is allocated).
pub(crate) static TABLE: [Slot; SLOTS] = [const { Slot::new() }; SLOTS];

/// Reads every slot's sequence word once (install time), so that the crash's first read of the table takes no page
/// fault: static storage nobody touched yet is mapped at its first access (a read maps the shared zero page, so
/// this costs no memory). Returns a value only so the reads are not optimized away.
pub(crate) fn map_in() -> u32 {
    TABLE.iter().fold(0, |a, s| a ^ s.seq.load(Ordering::Relaxed))
}

/// A crash-time copy of the table, kept on the crash owner's stack.
pub struct Snapshot {
    keys: [[u8; MAX_KEY]; SLOTS],
    values: [[u8; MAX_VALUE]; SLOTS],
    lens: [(usize, usize); SLOTS],
    n: usize,
}

impl Snapshot {
    /// An empty snapshot.
    pub const fn new() -> Self {
        Snapshot { keys: [[0; MAX_KEY]; SLOTS], values: [[0; MAX_VALUE]; SLOTS], lens: [(0, 0); SLOTS], n: 0 }
    }

    /// Copies every consistent, non-empty slot. Returns how many pairs were copied. Signal-safe; bounded work.
    pub fn take(&mut self) -> usize {
        self.n = 0;
        for slot in TABLE.iter() {
            let Some(dst) = self.lens.get_mut(self.n) else { break };
            let (Some(k), Some(v)) = (self.keys.get_mut(self.n), self.values.get_mut(self.n)) else { break };
            for _ in 0..READ_TRIES {
                let s1 = slot.seq.load(Ordering::Acquire);
                if s1 % 2 == 1 {
                    continue;
                }
                let lk = slot.len_k.load(Ordering::Relaxed).min(MAX_KEY);
                let lv = slot.len_v.load(Ordering::Relaxed).min(MAX_VALUE);
                for (d, s) in k.iter_mut().zip(slot.key.iter()).take(lk) {
                    *d = s.load(Ordering::Relaxed);
                }
                for (d, s) in v.iter_mut().zip(slot.value.iter()).take(lv) {
                    *d = s.load(Ordering::Relaxed);
                }
                core::sync::atomic::fence(Ordering::Acquire);
                if slot.seq.load(Ordering::Relaxed) == s1 {
                    if lk > 0 {
                        *dst = (lk, lv);
                        self.n = self.n.saturating_add(1);
                    }
                    break;
                }
            }
        }
        self.n
    }

    /// The pairs as encoder input; `out` must have room for [`SLOTS`] entries. Returns the filled prefix.
    pub fn pairs<'a>(&'a self, out: &'a mut [KeyValue<'a>; SLOTS]) -> &'a [KeyValue<'a>] {
        let mut i = 0;
        for ((k, v), (lk, lv)) in self.keys.iter().zip(self.values.iter()).zip(self.lens.iter()).take(self.n) {
            if let Some(o) = out.get_mut(i) {
                *o = KeyValue { key: k.get(..*lk).unwrap_or(&[]), value: v.get(..*lv).unwrap_or(&[]) };
                i = i.saturating_add(1);
            }
        }
        out.get(..i).unwrap_or(&[])
    }
}

impl Default for Snapshot {
    fn default() -> Self {
        Self::new()
    }
}
