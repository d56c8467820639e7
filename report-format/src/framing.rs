//! Byte layout of a report file: the file header, section headers and the end marker.
//!
//! All integers in headers are little-endian. Checksums are CRC-32 (IEEE 802.3 polynomial, the one `crc32fast`,
//! zlib and PNG use). The layout is specified in `report-format/SCHEMA.md` §2; this module is its single source.
//!
//! Everything here is pure and allocation-free, so the crash-time encoder may call it.

use crate::keys::section;

/// The 8 magic bytes that open every report: `\x89CRP\r\n\x1a\n`.
///
/// Built like PNG's signature: a high-bit byte catches 7-bit transports, `\r\n` and `\x1a` catch newline and
/// end-of-file translation.
pub const MAGIC: [u8; 8] = *b"\x89CRP\r\n\x1a\n";

/// File-name suffix of a finished report: `<32 lowercase hex digits of the report id>.crashreport`.
pub const FILE_SUFFIX: &str = ".crashreport";

/// Major format version this crate writes and the newest it reads. A reader refuses a newer major version.
///
/// 2.0 (frames relative to their images, compact IMAGE NAMES sections) changed the meaning of THREAD and IMAGES, so
/// a 1.x reader must refuse it, which it does by this rule. This reader still reads every 1.x file.
pub const FORMAT_MAJOR: u16 = 2;
/// Minor format version this crate writes. A reader accepts any minor version of its major version.
///
/// 2.1 added EXCEPTION's `lx` map (the uncaught language exception or panic) and the `abort` and `app` message
/// sources (SCHEMA.md §4.2.1, §4.5); a 2.0 reader ignores them. 2.2 added the frame trust value 6, `async` (a Swift
/// async context's resume function, SCHEMA.md §4.3.2); a 2.0 or 2.1 reader reads those frames as frames of unknown
/// trust. 2.3 added META's `nf` map (a non-fatal report: hang, manual, app; SCHEMA.md §4.1.1); an older 2.x reader
/// ignores it and shows the report as a crash without an exception. 2.4 allows zero padding after the end section
/// (SCHEMA.md §2: the report file reserved at install keeps its zeros beyond the report); an older 2.x reader reads
/// every section and lists the padding as trailing bytes.
pub const FORMAT_MINOR: u16 = 4;

/// Size in bytes of the file header: magic (8), major (2), minor (2), CRC-32 of the first 12 bytes (4).
pub const FILE_HEADER_LEN: usize = 16;

/// The 4 bytes that open every section header. `0xC1` is the one byte MessagePack never uses as a type marker,
/// which makes a false match inside a payload unlikely; the header's own CRC makes it negligible.
pub const SECTION_SYNC: [u8; 4] = [0xC1, b'S', b'E', b'C'];

/// Size in bytes of a section header: sync (4), kind (2), flags (2), payload length (4), payload CRC-32 (4),
/// header CRC-32 over the previous 16 bytes (4).
pub const SECTION_HEADER_LEN: usize = 20;

/// Largest payload a reader accepts for one section, in bytes (16 MiB). A larger declared length is treated as
/// corruption. Writers keep sections far smaller (one thread, or one chunk of images, per section).
pub const MAX_SECTION_LEN: u32 = 16 * 1024 * 1024;

/// What a section holds. The numeric values are part of the format (SCHEMA.md §3), spelled in [`section`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SectionKind {
    /// Report id, capture time, process, OS, hardware, architecture (kind 1).
    Meta,
    /// Exception: Mach type and codes, signal, si_code, fault address, crashed thread (kind 2).
    Exception,
    /// One thread: id, name, queue, registers, raw frames (kind 3). One section per thread.
    Thread,
    /// A run of consecutive images (kind 4). Several sections may hold the image list.
    Images,
    /// Application-specific messages (kind 5).
    Messages,
    /// User key/values set before the crash (kind 6).
    User,
    /// Paths of the images no frame or crashed-thread register points into, front-coded (kind 7, format 2.0).
    ImageNames,
    /// End marker (kind 0xFFFF); its payload counts the sections before it.
    End,
    /// A kind this reader does not know (from a newer minor version); skipped.
    Unknown(u16),
}

impl SectionKind {
    /// The on-disk number of this kind ([`section`]).
    pub const fn code(self) -> u16 {
        match self {
            SectionKind::Meta => section::META,
            SectionKind::Exception => section::EXCEPTION,
            SectionKind::Thread => section::THREAD,
            SectionKind::Images => section::IMAGES,
            SectionKind::Messages => section::MESSAGES,
            SectionKind::User => section::USER,
            SectionKind::ImageNames => section::IMAGE_NAMES,
            SectionKind::End => section::END,
            SectionKind::Unknown(c) => c,
        }
    }

    /// The kind for an on-disk number; numbers this version does not know map to [`SectionKind::Unknown`].
    pub const fn from_code(code: u16) -> Self {
        match code {
            section::META => SectionKind::Meta,
            section::EXCEPTION => SectionKind::Exception,
            section::THREAD => SectionKind::Thread,
            section::IMAGES => SectionKind::Images,
            section::MESSAGES => SectionKind::Messages,
            section::USER => SectionKind::User,
            section::IMAGE_NAMES => SectionKind::ImageNames,
            section::END => SectionKind::End,
            c => SectionKind::Unknown(c),
        }
    }

    /// A short lowercase name for messages ("meta", "thread", ...).
    pub const fn name(self) -> &'static str {
        match self {
            SectionKind::Meta => "meta",
            SectionKind::Exception => "exception",
            SectionKind::Thread => "thread",
            SectionKind::Images => "images",
            SectionKind::Messages => "messages",
            SectionKind::User => "user",
            SectionKind::ImageNames => "image names",
            SectionKind::End => "end",
            SectionKind::Unknown(_) => "unknown",
        }
    }
}

/// The file header for the current version. Signal-safe: pure computation.
pub fn file_header() -> [u8; FILE_HEADER_LEN] {
    let mut h = [0u8; FILE_HEADER_LEN];
    put(&mut h, 0, &MAGIC);
    put(&mut h, 8, &FORMAT_MAJOR.to_le_bytes());
    put(&mut h, 10, &FORMAT_MINOR.to_le_bytes());
    let sum = match h.get(..12) {
        Some(p) => crc32fast::hash(p),
        None => 0,
    };
    put(&mut h, 12, &sum.to_le_bytes());
    h
}

/// A parsed file header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileHeader {
    /// Major format version.
    pub major: u16,
    /// Minor format version.
    pub minor: u16,
    /// Whether the header's CRC-32 matched.
    pub crc_ok: bool,
}

/// Parses the first [`FILE_HEADER_LEN`] bytes. `None` when the input is shorter or the magic does not match.
pub fn parse_file_header(bytes: &[u8]) -> Option<FileHeader> {
    let h = bytes.get(..FILE_HEADER_LEN)?;
    if h.get(..8)? != MAGIC {
        return None;
    }
    let major = u16::from_le_bytes([*h.get(8)?, *h.get(9)?]);
    let minor = u16::from_le_bytes([*h.get(10)?, *h.get(11)?]);
    let stored = u32::from_le_bytes([*h.get(12)?, *h.get(13)?, *h.get(14)?, *h.get(15)?]);
    Some(FileHeader { major, minor, crc_ok: crc32fast::hash(h.get(..12)?) == stored })
}

/// Builds a section header for a payload. Signal-safe: pure computation.
pub fn section_header(kind: SectionKind, payload: &[u8]) -> [u8; SECTION_HEADER_LEN] {
    let len = u32::try_from(payload.len()).unwrap_or(u32::MAX);
    let mut h = [0u8; SECTION_HEADER_LEN];
    put(&mut h, 0, &SECTION_SYNC);
    put(&mut h, 4, &kind.code().to_le_bytes());
    put(&mut h, 6, &0u16.to_le_bytes());
    put(&mut h, 8, &len.to_le_bytes());
    put(&mut h, 12, &crc32fast::hash(payload).to_le_bytes());
    let hcrc = match h.get(..16) {
        Some(p) => crc32fast::hash(p),
        None => 0,
    };
    put(&mut h, 16, &hcrc.to_le_bytes());
    h
}

fn put(dst: &mut [u8], at: usize, src: &[u8]) {
    if let Some(d) = at.checked_add(src.len()).and_then(|end| dst.get_mut(at..end)) {
        d.copy_from_slice(src);
    }
}

/// A parsed section header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SectionHeader {
    /// What the section holds.
    pub kind: SectionKind,
    /// Reserved flags; 0 in versions 1 and 2.
    pub flags: u16,
    /// Payload length in bytes.
    pub len: u32,
    /// CRC-32 of the payload.
    pub payload_crc: u32,
}

/// Parses a section header at the start of `bytes`. `None` when it is too short, the sync bytes are wrong, or
/// the header CRC does not match.
pub fn parse_section_header(bytes: &[u8]) -> Option<SectionHeader> {
    let h = bytes.get(..SECTION_HEADER_LEN)?;
    if h.get(..4)? != SECTION_SYNC {
        return None;
    }
    let u16_at = |i: usize| -> Option<u16> { Some(u16::from_le_bytes(h.get(i..)?.get(..2)?.try_into().ok()?)) };
    let u32_at = |i: usize| -> Option<u32> { Some(u32::from_le_bytes(h.get(i..)?.get(..4)?.try_into().ok()?)) };
    if crc32fast::hash(h.get(..16)?) != u32_at(16)? {
        return None;
    }
    Some(SectionHeader {
        kind: SectionKind::from_code(u16_at(4)?),
        flags: u16_at(6)?,
        len: u32_at(8)?,
        payload_crc: u32_at(12)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_header_roundtrip_and_crc() {
        let h = file_header();
        let p = parse_file_header(&h).expect("parses");
        assert_eq!((p.major, p.minor, p.crc_ok), (FORMAT_MAJOR, FORMAT_MINOR, true));
        let mut bad = h;
        bad[9] ^= 1;
        assert!(!parse_file_header(&bad).expect("magic intact").crc_ok);
        bad[0] ^= 1;
        assert!(parse_file_header(&bad).is_none());
    }

    #[test]
    fn section_header_detects_any_flip() {
        let h = section_header(SectionKind::Thread, b"payload");
        let p = parse_section_header(&h).expect("parses");
        assert_eq!(p.kind, SectionKind::Thread);
        assert_eq!(p.len, 7);
        assert_eq!(p.payload_crc, crc32fast::hash(b"payload"));
        for bit in 0..SECTION_HEADER_LEN * 8 {
            let mut b = h;
            b[bit / 8] ^= 1 << (bit % 8);
            assert!(parse_section_header(&b).is_none(), "flip of bit {bit} went unnoticed");
        }
    }

    #[test]
    fn kind_codes_roundtrip() {
        for c in [1u16, 2, 3, 4, 5, 6, 7, 8, 0xFFFF, 0x1234] {
            assert_eq!(SectionKind::from_code(c).code(), c);
        }
    }

    #[test]
    fn every_named_kind_is_known_by_its_number_and_name() {
        for &(name, code) in section::ALL {
            let kind = SectionKind::from_code(code);
            assert!(!matches!(kind, SectionKind::Unknown(_)), "{name}");
            assert_eq!(kind.name(), name.to_ascii_lowercase());
        }
        assert_eq!(SectionKind::from_code(0), SectionKind::Unknown(0));
    }
}
