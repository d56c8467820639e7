//! `__crash_info`: the `crashreporter_annotations_t` record an image keeps in its `__DATA,__crash_info` section
//! (Swift's `fatalError` text, `abort()` reasons, assertion messages), and a bounded C-string reader to follow its
//! pointers through a fault-proof read callback. Both allocation-free and panic-free (crash-time code).
//!
//! Layout (Apple Libc `include/CrashReporterClient.h`, `CRASHREPORTER_ANNOTATIONS_VERSION` 4 and 5; every field is
//! a `uint64_t`, pointers included, in the image's byte order = little-endian on Apple platforms):
//!
//! | offset | field | |
//! |---|---|---|
//! | 0 | `version` | 4 or 5 |
//! | 8 | `message` | `const char *` |
//! | 16 | `signature_string` | `const char *` |
//! | 24 | `backtrace` | `const char *` |
//! | 32 | `message2` | `const char *` |
//! | 40 | `thread` | thread id |
//! | 48 | `dialog_mode` | |
//! | 56 | `abort_cause` | version 5 only |
//!
//! Pointers are runtime addresses in the crashed process: read them only through the fault-proof reader.

use crate::platform::darwin::crash::macho::bytes::u64_le;

/// Size in bytes of a version-4 record (7 fields).
pub const CRASH_INFO_V4_SIZE: usize = 56;
/// Size in bytes of a version-5 record (8 fields, `abort_cause` added).
pub const CRASH_INFO_V5_SIZE: usize = 64;

/// Why a `__crash_info` buffer was not decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashInfoError {
    /// Shorter than the record its version announces.
    Truncated,
    /// A version this decoder does not know (below 4; or 0, an unused record).
    UnsupportedVersion(u64),
}

/// A decoded `crashreporter_annotations_t`. Pointer fields are 0 when unset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CrashInfo {
    /// `version`.
    pub version: u64,
    /// `message`: pointer to a C string.
    pub message: u64,
    /// `signature_string`: pointer to a C string.
    pub signature_string: u64,
    /// `backtrace`: pointer to a C string.
    pub backtrace: u64,
    /// `message2`: pointer to a C string.
    pub message2: u64,
    /// `thread`.
    pub thread: u64,
    /// `dialog_mode`.
    pub dialog_mode: u64,
    /// `abort_cause` (version ≥ 5, else 0).
    pub abort_cause: u64,
}

/// Which string a [`CrashInfo`] pointer refers to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CrashInfoString {
    /// `message`.
    Message,
    /// `signature_string`.
    Signature,
    /// `backtrace`.
    Backtrace,
    /// `message2`.
    Message2,
}

impl CrashInfo {
    /// The string pointers in the order Apple prints them under "Application Specific Information" (message,
    /// message2, signature, backtrace), 0 when unset.
    pub fn string_pointers(&self) -> [(CrashInfoString, u64); 4] {
        [
            (CrashInfoString::Message, self.message),
            (CrashInfoString::Message2, self.message2),
            (CrashInfoString::Signature, self.signature_string),
            (CrashInfoString::Backtrace, self.backtrace),
        ]
    }
    /// Whether any string pointer is set.
    pub fn has_strings(&self) -> bool {
        self.string_pointers().iter().any(|(_, p)| *p != 0)
    }
}

/// Decodes a `__crash_info` section's bytes. Versions 4 and 5 are decoded; a newer version is decoded by its v5
/// prefix (fields are only ever appended).
pub fn parse(section: &[u8]) -> Result<CrashInfo, CrashInfoError> {
    let version = u64_le(section, 0).ok_or(CrashInfoError::Truncated)?;
    if version < 4 {
        return Err(CrashInfoError::UnsupportedVersion(version));
    }
    let size = if version >= 5 { CRASH_INFO_V5_SIZE } else { CRASH_INFO_V4_SIZE };
    if section.len() < size {
        return Err(CrashInfoError::Truncated);
    }
    let f = |i: usize| u64_le(section, i.saturating_mul(8)).unwrap_or(0);
    Ok(CrashInfo {
        version,
        message: f(1),
        signature_string: f(2),
        backtrace: f(3),
        message2: f(4),
        thread: f(5),
        dialog_mode: f(6),
        abort_cause: if version >= 5 { f(7) } else { 0 },
    })
}

/// Reads at most [`CRASH_INFO_V5_SIZE`] bytes of the record at `addr` (the section's runtime address: link-time
/// `addr` + slide) through `read` into `buf`, then decodes it. `section_size` is the section's size in bytes.
pub fn read<R>(read: &mut R, addr: u64, section_size: u64) -> Result<CrashInfo, CrashInfoError>
where
    R: FnMut(u64, &mut [u8]) -> bool,
{
    let mut buf = [0u8; CRASH_INFO_V5_SIZE];
    let n = usize::try_from(section_size).unwrap_or(usize::MAX).min(CRASH_INFO_V5_SIZE);
    let dst = buf.get_mut(..n).ok_or(CrashInfoError::Truncated)?;
    if n < 8 || !read(addr, dst) {
        return Err(CrashInfoError::Truncated);
    }
    parse(dst)
}

/// Result of [`read_c_string`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CStrRead {
    /// Bytes copied to the output, NUL excluded.
    pub len: usize,
    /// A NUL was found (the whole string was read); false when the output filled up or memory ended first.
    pub complete: bool,
}

/// Read granule: no chunk crosses a 4 KiB boundary, so a string that runs into an unmapped page still yields the
/// part before it (4 KiB divides Apple's 16 KiB pages too).
const GRANULE: u64 = 4096;
/// Largest single read.
const CHUNK: usize = 256;

/// Copies the NUL-terminated string at `addr` into `out` through a fault-proof `read(address, destination)`
/// callback, reading in chunks of at most 256 bytes that never cross a 4 KiB boundary (a failed chunk is retried in
/// halves down to one byte). Stops at the first NUL, when `out` is full, or when a one-byte read fails. `None` if nothing at all could be read (unmapped `addr`, or
/// `addr == 0`). Bytes are returned as they are (Apple's messages are UTF-8; decoding is the reader's business).
pub fn read_c_string<R>(read: &mut R, addr: u64, out: &mut [u8]) -> Option<CStrRead>
where
    R: FnMut(u64, &mut [u8]) -> bool,
{
    if addr == 0 {
        return None;
    }
    let mut len = 0usize;
    let mut chunk = CHUNK;
    loop {
        let cur = addr.checked_add(len as u64)?;
        let room = out.len().saturating_sub(len);
        if room == 0 {
            return Some(CStrRead { len, complete: false });
        }
        let to_boundary = usize::try_from(GRANULE.saturating_sub(cur % GRANULE)).unwrap_or(CHUNK);
        let n = room.min(chunk).min(to_boundary);
        let end = len.saturating_add(n);
        let dst = out.get_mut(len..end)?;
        if !read(cur, dst) {
            // A reader with finer granularity than pages (or a guard at an odd place): retry smaller, down to one
            // byte, before calling the string ended.
            if n > 1 {
                chunk = n / 2;
                continue;
            }
            return if len == 0 { None } else { Some(CStrRead { len, complete: false }) };
        }
        if let Some(nul) = dst.iter().position(|&b| b == 0) {
            return Some(CStrRead { len: len.saturating_add(nul), complete: true });
        }
        len = end;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(version: u64, fields: &[u64]) -> Vec<u8> {
        let mut v = version.to_le_bytes().to_vec();
        for f in fields {
            v.extend_from_slice(&f.to_le_bytes());
        }
        v
    }

    #[test]
    fn decodes_v5_and_v4() {
        let b = record(5, &[0x1000, 0x2000, 0x3000, 0x4000, 0x5000, 6, 7]);
        assert_eq!(b.len(), CRASH_INFO_V5_SIZE);
        let c = parse(&b).unwrap();
        assert_eq!(
            c,
            CrashInfo {
                version: 5,
                message: 0x1000,
                signature_string: 0x2000,
                backtrace: 0x3000,
                message2: 0x4000,
                thread: 0x5000,
                dialog_mode: 6,
                abort_cause: 7
            }
        );
        assert!(c.has_strings());
        assert_eq!(c.string_pointers()[1], (CrashInfoString::Message2, 0x4000));
        assert_eq!(parse(&b[..63]), Err(CrashInfoError::Truncated));

        let b4 = record(4, &[0x1000, 0, 0, 0, 0, 0]);
        assert_eq!(b4.len(), CRASH_INFO_V4_SIZE);
        let c = parse(&b4).unwrap();
        assert_eq!((c.version, c.message, c.abort_cause), (4, 0x1000, 0));
        assert_eq!(parse(&b4[..55]), Err(CrashInfoError::Truncated));
        // Newer versions: decoded by the v5 prefix.
        let b6 = record(6, &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(parse(&b6).unwrap().abort_cause, 7);
    }

    #[test]
    fn refuses_unknown_versions() {
        assert_eq!(parse(&record(0, &[0; 7])), Err(CrashInfoError::UnsupportedVersion(0)));
        assert_eq!(parse(&record(3, &[0; 7])), Err(CrashInfoError::UnsupportedVersion(3)));
        assert_eq!(parse(&[5, 0, 0]), Err(CrashInfoError::Truncated));
        let empty = parse(&record(5, &[0; 7])).unwrap();
        assert!(!empty.has_strings());
    }

    /// A fake address space: `base..base+mem.len()` is mapped.
    fn reader(base: u64, mem: &[u8]) -> impl FnMut(u64, &mut [u8]) -> bool + '_ {
        move |addr, out| {
            let Some(off) = addr.checked_sub(base) else { return false };
            match mem.get(off as usize..off as usize + out.len()) {
                Some(s) => {
                    out.copy_from_slice(s);
                    true
                }
                None => false,
            }
        }
    }

    #[test]
    fn reads_a_string_across_chunks() {
        let base = 0x1_0000_0f00u64; // 256 bytes before a 4 KiB boundary
        let mut mem = vec![b'a'; 1000];
        mem[700] = 0;
        let mut calls = Vec::new();
        let mut r = reader(base, &mem);
        let mut rec = |a: u64, o: &mut [u8]| {
            calls.push((a, o.len()));
            r(a, o)
        };
        let mut out = [0u8; 2048];
        let got = read_c_string(&mut rec, base, &mut out).unwrap();
        assert_eq!(got, CStrRead { len: 700, complete: true });
        assert!(out[..700].iter().all(|&b| b == b'a'));
        for (a, n) in &calls {
            assert_eq!(a / 4096, (a + *n as u64 - 1) / 4096, "chunk crosses a 4 KiB boundary");
            assert!(*n <= 256);
        }
        assert_eq!(calls[0], (base, 256));
    }

    #[test]
    fn stops_at_unmapped_memory_and_at_the_buffer_end() {
        // The string runs into the end of the mapping: the part before it is returned, marked incomplete.
        let base = 0x2000u64;
        let short = b"abc\0";
        let mut rs = reader(0x7000, short);
        let mut buf = [0u8; 64];
        assert_eq!(
            read_c_string(&mut rs, 0x7000, &mut buf),
            Some(CStrRead { len: 3, complete: true }),
            "retry smaller"
        );
        let unterminated = b"abcdefg";
        let mut ru = reader(0x7000, unterminated);
        assert_eq!(read_c_string(&mut ru, 0x7000, &mut buf), Some(CStrRead { len: 7, complete: false }));
        assert_eq!(&buf[..7], b"abcdefg");
        let mem = vec![b'x'; 4096];
        let mut r = reader(base, &mem);
        let mut out = [0u8; 8192];
        assert_eq!(read_c_string(&mut r, base + 4000, &mut out), Some(CStrRead { len: 96, complete: false }));
        // Output smaller than the string.
        let mut small = [0u8; 10];
        assert_eq!(read_c_string(&mut r, base, &mut small), Some(CStrRead { len: 10, complete: false }));
        // Unmapped start, null pointer, empty output.
        assert_eq!(read_c_string(&mut r, 0x10, &mut out), None);
        assert_eq!(read_c_string(&mut r, 0, &mut out), None);
        assert_eq!(read_c_string(&mut r, base, &mut []), Some(CStrRead { len: 0, complete: false }));
        // Empty string.
        let z = [0u8; 16];
        let mut rz = reader(0x9000, &z);
        assert_eq!(read_c_string(&mut rz, 0x9000, &mut out), Some(CStrRead { len: 0, complete: true }));
        // Address near the top of the address space: no overflow.
        let mut never = |_: u64, _: &mut [u8]| true;
        let got = read_c_string(&mut never, u64::MAX - 2, &mut out);
        assert!(got.is_some());
    }

    #[test]
    fn reads_the_record_through_the_callback() {
        let base = 0x1_0000_8000u64;
        let rec = record(5, &[0x1234, 0, 0, 0, 0, 0, 9]);
        let mut r = reader(base, &rec);
        let c = read(&mut r, base, 64).unwrap();
        assert_eq!((c.message, c.abort_cause), (0x1234, 9));
        assert_eq!(read(&mut r, base + 8, 64), Err(CrashInfoError::Truncated), "read fails past the mapping");
        assert_eq!(read(&mut r, base, 4), Err(CrashInfoError::Truncated), "section too small");
        // A v4-sized section holding a v5 header: too short for v5.
        assert_eq!(read(&mut r, base, 56), Err(CrashInfoError::Truncated));
    }
}
