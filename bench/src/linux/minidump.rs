//! Reads the two counts we check out of a minidump written by the peer.

/// What the parts of a minidump we check say.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MinidumpSummary {
    /// Threads in the thread list stream.
    pub threads: u32,
    /// Modules in the module list stream.
    pub modules: u32,
}

/// Reads the thread and module counts of a minidump (header `MDMP`, stream directory, ThreadListStream = 3,
/// ModuleListStream = 4). `None` when it is not a minidump or a stream is out of bounds.
pub fn summarize_minidump(b: &[u8]) -> Option<MinidumpSummary> {
    let u32_at = |o: usize| -> Option<u32> { Some(u32::from_le_bytes(b.get(o..o + 4)?.try_into().ok()?)) };
    if b.get(0..4)? != b"MDMP" {
        return None;
    }
    let streams = u32_at(8)? as usize;
    let dir = u32_at(12)? as usize;
    let mut s = MinidumpSummary::default();
    for i in 0..streams {
        let e = dir + i * 12;
        let (kind, rva) = (u32_at(e)?, u32_at(e + 8)? as usize);
        match kind {
            3 => s.threads = u32_at(rva)?,
            4 => s.modules = u32_at(rva)?,
            _ => {}
        }
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put(b: &mut Vec<u8>, at: usize, v: u32) {
        if b.len() < at + 4 {
            b.resize(at + 4, 0);
        }
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
    }

    #[test]
    fn reads_thread_and_module_counts_from_the_stream_directory() {
        let mut b = b"MDMP".to_vec();
        put(&mut b, 4, 0xa793);
        put(&mut b, 8, 3); // streams
        put(&mut b, 12, 32); // directory rva
                             // (type, size, rva) x 3: an unrelated stream, threads at 100, modules at 200.
        for (i, (t, rva)) in [(7u32, 90u32), (3, 100), (4, 200)].into_iter().enumerate() {
            put(&mut b, 32 + i * 12, t);
            put(&mut b, 32 + i * 12 + 4, 4);
            put(&mut b, 32 + i * 12 + 8, rva);
        }
        put(&mut b, 100, 65);
        put(&mut b, 200, 312);
        assert_eq!(summarize_minidump(&b), Some(MinidumpSummary { threads: 65, modules: 312 }));
        // A stream pointing past the end is refused, not misread.
        put(&mut b, 32 + 12 + 8, 10_000);
        assert_eq!(summarize_minidump(&b), None);
        assert_eq!(summarize_minidump(b"ELF\0"), None);
    }
}
