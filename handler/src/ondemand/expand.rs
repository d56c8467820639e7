//! Stored frames and repeat records (the unwinder's compression of deep recursion) turned back into the flat list
//! of return addresses a caller asked for. Pure; signal-safe.

use crate::unwind::Repeat;

/// Writes the frames `frames` with `repeats` expanded (a run stored once at `start` and repeated `count` more
/// times, `report_format` SCHEMA.md §4.3) into `out`, leaving out the first `skip` expanded frames. Returns how many
/// were written and whether some did not fit (or a repeat record was inconsistent).
pub fn expand(frames: &[u64], repeats: &[Repeat], skip: usize, out: &mut [u64]) -> (usize, bool) {
    let mut seen = 0usize;
    let mut n = 0usize;
    let mut i = 0usize;
    let mut emit = |v: u64, seen: &mut usize, n: &mut usize| -> bool {
        if *seen < skip {
            *seen = seen.saturating_add(1);
            return true;
        }
        match out.get_mut(*n) {
            Some(slot) => {
                *slot = v;
                *n = n.saturating_add(1);
                true
            }
            None => false,
        }
    };
    while i < frames.len() {
        match repeats.iter().find(|r| r.start as usize == i && r.len > 0) {
            Some(r) => {
                let len = r.len as usize;
                let Some(run) = i.checked_add(len).and_then(|end| frames.get(i..end)) else {
                    return (n, true);
                };
                for _ in 0..=r.count {
                    for v in run {
                        if !emit(*v, &mut seen, &mut n) {
                            return (n, true);
                        }
                    }
                }
                i = i.saturating_add(len);
            }
            None => {
                let Some(v) = frames.get(i) else { break };
                if !emit(*v, &mut seen, &mut n) {
                    return (n, true);
                }
                i = i.saturating_add(1);
            }
        }
    }
    (n, false)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_are_repeated_after_their_stored_copy() {
        let frames = [1, 2, 3, 4, 5];
        let reps = [Repeat { start: 1, len: 2, count: 2 }, Repeat { start: 4, len: 1, count: 1 }];
        let mut out = [0u64; 16];
        assert_eq!(expand(&frames, &reps, 0, &mut out), (10, false));
        assert_eq!(&out[..10], &[1, 2, 3, 2, 3, 2, 3, 4, 5, 5]);
        assert_eq!(expand(&frames, &reps, 1, &mut out), (9, false));
        assert_eq!(&out[..9], &[2, 3, 2, 3, 2, 3, 4, 5, 5]);
        let mut short = [0u64; 4];
        assert_eq!(expand(&frames, &reps, 0, &mut short), (4, true));
        assert_eq!(short, [1, 2, 3, 2]);
        assert_eq!(expand(&frames, &[], 2, &mut out), (3, false));
        assert_eq!(&out[..3], &[3, 4, 5]);
        // A record pointing past the frames ends the list there, flagged.
        let bad = [Repeat { start: 3, len: 9, count: 1 }];
        assert_eq!(expand(&frames, &bad, 0, &mut out), (3, true));
        assert_eq!(expand(&frames, &[], 9, &mut out), (0, false));
    }
}
