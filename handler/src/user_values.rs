//! User key/values that land in the next crash report (the USER section, `report-format/SCHEMA.md` §4.6).
//!
//! Setters run on app threads, at any time after (or before) install: they copy the strings into fixed static
//! storage ([`SLOTS`] pairs, keys up to [`MAX_KEY`] bytes, values up to [`MAX_VALUE`] bytes) under a writer lock,
//! so nothing is allocated at crash time and the crash path never takes that lock (it reads with sequence
//! counters, see `crash/user_table.rs`).

use crate::crash::user_table::TABLE;
pub use crate::crash::user_table::{MAX_KEY, MAX_VALUE, SLOTS};
use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

static WRITER: Mutex<()> = Mutex::new(());

/// Why a key/value was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ValueError {
    /// The key is empty.
    EmptyKey,
    /// The key is longer than [`MAX_KEY`] bytes.
    KeyTooLong,
    /// The value is longer than [`MAX_VALUE`] bytes.
    ValueTooLong,
    /// All [`SLOTS`] slots hold other keys.
    TableFull,
}

impl fmt::Display for ValueError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueError::EmptyKey => write!(f, "the key is empty"),
            ValueError::KeyTooLong => write!(f, "the key is longer than {MAX_KEY} bytes"),
            ValueError::ValueTooLong => write!(f, "the value is longer than {MAX_VALUE} bytes"),
            ValueError::TableFull => write!(f, "all {SLOTS} key/value slots are in use"),
        }
    }
}

impl std::error::Error for ValueError {}

fn key_matches(i: usize, key: &[u8]) -> bool {
    let Some(s) = TABLE.get(i) else { return false };
    s.len_k.load(Ordering::Relaxed) == key.len() && s.key.iter().zip(key).all(|(a, b)| a.load(Ordering::Relaxed) == *b)
}

fn write_slot(i: usize, key: &[u8], value: &[u8]) {
    let Some(s) = TABLE.get(i) else { return };
    s.seq.fetch_add(1, Ordering::AcqRel); // odd: write in progress
    std::sync::atomic::fence(Ordering::Release);
    for (d, b) in s.key.iter().zip(key) {
        d.store(*b, Ordering::Relaxed);
    }
    for (d, b) in s.value.iter().zip(value) {
        d.store(*b, Ordering::Relaxed);
    }
    s.len_k.store(key.len(), Ordering::Relaxed);
    s.len_v.store(value.len(), Ordering::Relaxed);
    s.seq.fetch_add(1, Ordering::Release); // even: consistent
}

/// Sets `key` to `value` (replacing an earlier value of the same key).
///
/// # Errors
/// [`ValueError`] for an empty or too long key, a too long value, or a full table. Nothing changes then.
pub fn set(key: &str, value: &str) -> Result<(), ValueError> {
    let (k, v) = (key.as_bytes(), value.as_bytes());
    if k.is_empty() {
        return Err(ValueError::EmptyKey);
    }
    if k.len() > MAX_KEY {
        return Err(ValueError::KeyTooLong);
    }
    if v.len() > MAX_VALUE {
        return Err(ValueError::ValueTooLong);
    }
    let _w = WRITER.lock().unwrap_or_else(|p| p.into_inner());
    let slot = (0..SLOTS)
        .find(|&i| key_matches(i, k))
        .or_else(|| (0..SLOTS).find(|&i| TABLE.get(i).is_some_and(|s| s.len_k.load(Ordering::Relaxed) == 0)))
        .ok_or(ValueError::TableFull)?;
    write_slot(slot, k, v);
    Ok(())
}

/// Removes `key` (nothing happens when it is not set).
pub fn remove(key: &str) {
    let _w = WRITER.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(i) = (0..SLOTS).find(|&i| key_matches(i, key.as_bytes())) {
        write_slot(i, &[], &[]);
    }
}

/// Removes every key/value.
pub fn clear() {
    let _w = WRITER.lock().unwrap_or_else(|p| p.into_inner());
    for i in 0..SLOTS {
        if TABLE.get(i).is_some_and(|s| s.len_k.load(Ordering::Relaxed) != 0) {
            write_slot(i, &[], &[]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crash::user_table::Snapshot;
    use report_format::encode::KeyValue;

    // One test owns the global table, so the checks run in sequence.
    #[test]
    fn set_replace_remove_snapshot_and_limits() {
        clear();
        set("user.id", "42").expect("set");
        set("screen", "checkout").expect("set");
        set("user.id", "43").expect("replace");
        let mut snap = Box::new(Snapshot::new());
        assert_eq!(snap.take(), 2);
        let mut out = [KeyValue::default(); SLOTS];
        let pairs: Vec<(String, String)> = snap
            .pairs(&mut out)
            .iter()
            .map(|p| (String::from_utf8_lossy(p.key).into_owned(), String::from_utf8_lossy(p.value).into_owned()))
            .collect();
        assert_eq!(pairs, vec![("user.id".into(), "43".into()), ("screen".into(), "checkout".into())]);

        remove("user.id");
        assert_eq!(snap.take(), 1);
        assert_eq!(set("", "x"), Err(ValueError::EmptyKey));
        assert_eq!(set(&"k".repeat(MAX_KEY + 1), "x"), Err(ValueError::KeyTooLong));
        assert_eq!(set("k", &"v".repeat(MAX_VALUE + 1)), Err(ValueError::ValueTooLong));
        set(&"k".repeat(MAX_KEY), &"v".repeat(MAX_VALUE)).expect("limits are inclusive");
        clear();
        for i in 0..SLOTS {
            set(&format!("k{i}"), "v").expect("fills");
        }
        assert_eq!(set("one-more", "v"), Err(ValueError::TableFull));
        set("k3", "replaced").expect("an existing key still updates");
        assert_eq!(snap.take(), SLOTS);

        // A reader racing a writer never sees a torn pair.
        clear();
        std::thread::scope(|s| {
            s.spawn(|| {
                for i in 0..20_000 {
                    let v = if i % 2 == 0 { "aaaaaaaaaaaaaaaa" } else { "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb" };
                    set("race", v).expect("set");
                }
            });
            let mut snap = Box::new(Snapshot::new());
            for _ in 0..20_000 {
                snap.take();
                let mut out = [KeyValue::default(); SLOTS];
                for p in snap.pairs(&mut out) {
                    assert!(p.value == b"aaaaaaaaaaaaaaaa" || p.value == b"bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb");
                }
            }
        });
        clear();
    }
}
