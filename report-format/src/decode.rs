//! The launch-time decoder: recovers every intact section of a report, even a torn or bit-flipped one, and says
//! exactly what is missing or damaged (which section, at which byte offset).
//!
//! Walk: check the file header, then read section headers one after another. A header whose sync bytes or CRC are
//! wrong is skipped by scanning forward for the next valid header (each header carries its own CRC, so a false
//! match is negligible). A payload whose CRC fails is skipped using its (CRC-checked) length. Payloads are decoded
//! with `rmp-serde` into private wire structs whose fields are the short on-disk keys of [`crate::keys`]: unknown keys
//! are ignored, missing keys take their defaults. Nothing here allocates more than a small multiple of the input: every length is checked against
//! the bytes actually present, and serde caps preallocation for declared sequence lengths.
//!
//! Never panics, on any input (property tests and a fuzz target check it).

use crate::framing::{
    self, SectionKind, FILE_HEADER_LEN, FORMAT_MAJOR, MAX_SECTION_LEN, SECTION_HEADER_LEN, SECTION_SYNC,
};
use crate::model::{
    Exception, FrameTrust, Image, ImageId, LanguageException, Message, Meta, NonFatal, Os, Process, Register, Repeat,
    Report, ReportId, Thread,
};
use crate::regs;
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

/// Why a file is not decoded at all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// The input does not start with [`framing::MAGIC`]: it is not a report of this format.
    NotAReport,
    /// The report's major version is newer than this reader's.
    UnsupportedVersion {
        /// Major version found.
        major: u16,
        /// Minor version found.
        minor: u16,
    },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::NotAReport => write!(f, "not a crash report: the file does not start with the report magic"),
            DecodeError::UnsupportedVersion { major, minor } => write!(
                f,
                "report format {major}.{minor} is newer than this reader understands (major version {FORMAT_MAJOR})"
            ),
        }
    }
}

impl std::error::Error for DecodeError {}

/// One thing wrong with a report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// Byte offset in the file where the problem starts.
    pub offset: usize,
    /// The section concerned, when known.
    pub section: Option<SectionKind>,
    /// What is wrong.
    pub kind: ProblemKind,
}

/// What is wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    /// The file header's CRC does not match (the version fields may be wrong).
    FileHeaderChecksum,
    /// Bytes that are not a valid section header; this many bytes were skipped to the next valid header (or the
    /// end of the file).
    CorruptSectionHeader {
        /// Bytes skipped.
        skipped: usize,
    },
    /// The file ends inside a section (or inside a section header).
    Truncated {
        /// Payload bytes the header declared (0 when the header itself is cut).
        declared: u32,
        /// Bytes actually present after the header.
        available: usize,
    },
    /// A section declared more than [`MAX_SECTION_LEN`] bytes.
    TooLarge {
        /// Declared length.
        declared: u32,
    },
    /// The payload's CRC does not match; the section was skipped.
    ChecksumMismatch {
        /// CRC in the header.
        expected: u32,
        /// CRC of the bytes present.
        actual: u32,
    },
    /// The payload's CRC matched but it is not the MessagePack the kind requires.
    BadPayload {
        /// The decoder's message.
        message: String,
    },
    /// A second section of a kind that may occur once; it was ignored.
    Duplicate,
    /// No end marker: the report was cut short or the marker was damaged.
    MissingEnd,
    /// The end marker counts a different number of sections than were found.
    SectionCount {
        /// Sections the writer wrote before the end marker.
        written: u32,
        /// Valid section headers found before it.
        found: u32,
    },
    /// Bytes after the end marker that are not all zero (zero padding is [`Decoded::padding`], not damage).
    TrailingBytes {
        /// How many.
        len: usize,
    },
    /// A thread the META section counts has no intact section.
    MissingThread {
        /// Its index.
        index: u32,
    },
    /// Images the META section counts have no intact section.
    MissingImages {
        /// First missing index.
        from: u32,
        /// One past the last missing index.
        to: u32,
    },
    /// A frame written relative to an image (format 2.0, SCHEMA.md §4.3.2) whose image has no intact IMAGES
    /// entry with a load address; the frame's address is given as 0 (unknown).
    FrameImageMissing {
        /// Index of the thread.
        thread: u32,
        /// Index of the frame in the thread's stored frames.
        frame: u32,
        /// List index of the missing image.
        image: u64,
        /// The frame's offset from that image's load address.
        offset: u64,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = self.section.map(SectionKind::name).unwrap_or("file");
        let at = self.offset;
        match &self.kind {
            ProblemKind::FileHeaderChecksum => write!(f, "file header at byte 0: checksum mismatch"),
            ProblemKind::CorruptSectionHeader { skipped } => {
                write!(f, "corrupt section header at byte {at}: skipped {skipped} bytes")
            }
            ProblemKind::Truncated { declared, available } => write!(
                f,
                "{what} section at byte {at} is truncated: {available} of {declared} payload bytes present"
            ),
            ProblemKind::TooLarge { declared } => {
                write!(f, "{what} section at byte {at} declares an implausible {declared} bytes")
            }
            ProblemKind::ChecksumMismatch { expected, actual } => write!(
                f,
                "{what} section at byte {at}: checksum mismatch (expected {expected:08x}, got {actual:08x}); section skipped"
            ),
            ProblemKind::BadPayload { message } => {
                write!(f, "{what} section at byte {at}: undecodable payload ({message})")
            }
            ProblemKind::Duplicate => write!(f, "{what} section at byte {at} repeats an earlier one; ignored"),
            ProblemKind::MissingEnd => write!(f, "no end marker: the report stops at byte {at}"),
            ProblemKind::SectionCount { written, found } => write!(
                f,
                "end marker at byte {at} counts {written} sections but {found} were found"
            ),
            ProblemKind::TrailingBytes { len } => write!(f, "{len} unexpected bytes after the end marker at byte {at}"),
            ProblemKind::MissingThread { index } => write!(f, "thread {index} is missing"),
            ProblemKind::MissingImages { from, to } => {
                if to - from == 1 {
                    write!(f, "image {from} is missing")
                } else {
                    write!(f, "images {from}..{} are missing", to - 1)
                }
            }
            ProblemKind::FrameImageMissing { thread, frame, image, offset } => write!(
                f,
                "thread {thread} frame {frame}: image {image} is missing (offset {offset:#x} from its load address); \
                 address unknown"
            ),
        }
    }
}

/// How one section fared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SectionStatus {
    /// Checksum matched and the payload decoded.
    Ok,
    /// The payload failed its checksum.
    ChecksumMismatch,
    /// The payload is cut off by the end of the file.
    Truncated,
    /// Checksum matched but the payload did not decode.
    BadPayload,
    /// A kind this reader does not know; skipped by design.
    Unknown,
}

/// One section found in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SectionInfo {
    /// Kind.
    pub kind: SectionKind,
    /// Byte offset of its header.
    pub offset: usize,
    /// Declared payload length.
    pub len: u32,
    /// Outcome.
    pub status: SectionStatus,
}

/// Everything decoded from a file, and what went wrong.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Decoded {
    /// The report, as far as it survived.
    pub report: Report,
    /// Every section header found, in file order.
    pub sections: Vec<SectionInfo>,
    /// Damage, in file order (then missing threads and images).
    pub problems: Vec<Problem>,
    /// Whether a valid end marker was found.
    pub end_found: bool,
    /// Zero bytes after the end section (format 2.4, SCHEMA.md §2: a report written into the file the handler
    /// reserved at install keeps that file's zeros beyond its end). Not damage; 0 when there are none. A reader
    /// that passes the report on (the reporter's upload) cuts them.
    pub padding: usize,
}

impl Decoded {
    /// True when nothing is damaged or missing: every CRC matched, the end marker is there and counts right.
    pub fn is_intact(&self) -> bool {
        self.end_found && self.problems.is_empty()
    }
}

/// Decodes a report, recovering every intact section.
///
/// # Errors
/// [`DecodeError::NotAReport`] when the magic is missing, [`DecodeError::UnsupportedVersion`] for a newer major
/// version. Any damage after the magic is not an error: it is listed in [`Decoded::problems`].
pub fn decode(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    let header = framing::parse_file_header(bytes).ok_or(DecodeError::NotAReport)?;
    let mut out = Decoded::default();
    if header.crc_ok {
        if header.major > FORMAT_MAJOR {
            return Err(DecodeError::UnsupportedVersion { major: header.major, minor: header.minor });
        }
        out.report.format_version = (header.major, header.minor);
    } else {
        // The version bytes cannot be trusted; read the rest as the current major version.
        out.problems.push(Problem { offset: 0, section: None, kind: ProblemKind::FileHeaderChecksum });
        out.report.format_version = (FORMAT_MAJOR, 0);
    }

    let mut st = State::default();
    let mut pos = FILE_HEADER_LEN;
    let mut headers_found: u32 = 0;
    loop {
        let rest = bytes.get(pos..).unwrap_or(&[]);
        if rest.is_empty() {
            out.problems.push(Problem { offset: pos, section: None, kind: ProblemKind::MissingEnd });
            break;
        }
        let Some(h) = framing::parse_section_header(rest) else {
            if rest.len() < SECTION_HEADER_LEN && rest.starts_with(SECTION_SYNC.get(..rest.len().min(4)).unwrap_or(&[]))
            {
                out.problems.push(Problem {
                    offset: pos,
                    section: None,
                    kind: ProblemKind::Truncated { declared: 0, available: rest.len() },
                });
                out.problems.push(Problem { offset: bytes.len(), section: None, kind: ProblemKind::MissingEnd });
                break;
            }
            let skipped = next_header(rest).unwrap_or(rest.len());
            out.problems.push(Problem {
                offset: pos,
                section: None,
                kind: ProblemKind::CorruptSectionHeader { skipped },
            });
            pos += skipped;
            continue;
        };
        headers_found = headers_found.saturating_add(1);
        let body_at = pos + SECTION_HEADER_LEN;
        let available = bytes.len() - body_at;
        let mut info = SectionInfo { kind: h.kind, offset: pos, len: h.len, status: SectionStatus::Ok };
        if h.len > MAX_SECTION_LEN {
            out.problems.push(Problem {
                offset: pos,
                section: Some(h.kind),
                kind: ProblemKind::TooLarge { declared: h.len },
            });
            // The length is CRC-protected, so it was written that way; nothing sane follows.
            break;
        }
        let len = h.len as usize;
        let Some(payload) = bytes.get(body_at..body_at + len) else {
            info.status = SectionStatus::Truncated;
            out.sections.push(info);
            out.problems.push(Problem {
                offset: pos,
                section: Some(h.kind),
                kind: ProblemKind::Truncated { declared: h.len, available },
            });
            out.problems.push(Problem { offset: bytes.len(), section: None, kind: ProblemKind::MissingEnd });
            break;
        };
        let actual = crc32fast::hash(payload);
        if actual != h.payload_crc {
            info.status = SectionStatus::ChecksumMismatch;
            out.sections.push(info);
            out.problems.push(Problem {
                offset: pos,
                section: Some(h.kind),
                kind: ProblemKind::ChecksumMismatch { expected: h.payload_crc, actual },
            });
            pos = body_at + len;
            continue;
        }
        if h.kind == SectionKind::End {
            out.sections.push(info);
            match rmp_serde::from_slice::<WEnd>(payload) {
                Ok(end) => {
                    out.end_found = true;
                    let before = headers_found - 1;
                    if end.n != before {
                        out.problems.push(Problem {
                            offset: pos,
                            section: Some(SectionKind::End),
                            kind: ProblemKind::SectionCount { written: end.n, found: before },
                        });
                    }
                }
                Err(e) => out.problems.push(Problem {
                    offset: pos,
                    section: Some(SectionKind::End),
                    kind: ProblemKind::BadPayload { message: e.to_string() },
                }),
            }
            let tail = bytes.len() - (body_at + len);
            let rest = bytes.get(body_at + len..).unwrap_or(&[]);
            if tail > 0 && rest.iter().all(|b| *b == 0) {
                out.padding = tail;
            } else if tail > 0 {
                out.problems.push(Problem {
                    offset: body_at + len,
                    section: None,
                    kind: ProblemKind::TrailingBytes { len: tail },
                });
            }
            break;
        }
        match st.take(h.kind, payload, pos) {
            Ok(Taken::Stored) => {}
            Ok(Taken::Unknown) => info.status = SectionStatus::Unknown,
            Ok(Taken::Duplicate) => {
                out.problems.push(Problem { offset: pos, section: Some(h.kind), kind: ProblemKind::Duplicate })
            }
            Err(message) => {
                info.status = SectionStatus::BadPayload;
                out.problems.push(Problem {
                    offset: pos,
                    section: Some(h.kind),
                    kind: ProblemKind::BadPayload { message },
                });
            }
        }
        out.sections.push(info);
        pos = body_at + len;
    }

    st.finish(&mut out);
    Ok(out)
}

/// Offset of the next valid section header after the first byte of `rest`.
fn next_header(rest: &[u8]) -> Option<usize> {
    let mut i = 1;
    while i < rest.len() {
        let tail = rest.get(i..)?;
        match tail.iter().position(|&b| b == SECTION_SYNC[0]) {
            Some(j) => {
                let at = i + j;
                if framing::parse_section_header(rest.get(at..)?).is_some() {
                    return Some(at);
                }
                i = at + 1;
            }
            None => return None,
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------------------------
// Collecting sections.

enum Taken {
    Stored,
    Unknown,
    Duplicate,
}

/// One frame of a THREAD `fr` list (SCHEMA.md §4.3.2) before its image is known.
#[derive(Clone, Copy, Debug)]
struct RelFrame {
    /// Image list index + 1; 0: `value` is an absolute address.
    image: u64,
    /// Trust byte, 0..=7.
    trust: u8,
    /// Offset from the image's load address, or the absolute address.
    value: u64,
}

/// A thread's relative frames, resolved once every section is read.
struct PendingFrames {
    thread: u32,
    offset: usize,
    frames: Vec<RelFrame>,
}

#[derive(Default)]
struct State {
    meta: Option<Meta>,
    exception: Option<Exception>,
    threads: BTreeMap<u32, Thread>,
    pending: Vec<PendingFrames>,
    image_chunks: BTreeMap<u32, Vec<Image>>,
    name_chunks: BTreeMap<u32, Vec<Image>>,
    messages: Option<Vec<Message>>,
    user: Option<BTreeMap<String, String>>,
}

impl State {
    fn take(&mut self, kind: SectionKind, payload: &[u8], offset: usize) -> Result<Taken, String> {
        fn de<'a, T: Deserialize<'a>>(p: &'a [u8]) -> Result<T, String> {
            rmp_serde::from_slice(p).map_err(|e| e.to_string())
        }
        match kind {
            SectionKind::Meta => {
                let m: WMeta = de(payload)?;
                if self.meta.is_some() {
                    return Ok(Taken::Duplicate);
                }
                self.meta = Some(m.into_model()?);
            }
            SectionKind::Exception => {
                let e: WException = de(payload)?;
                if self.exception.is_some() {
                    return Ok(Taken::Duplicate);
                }
                self.exception = Some(e.into_model());
            }
            SectionKind::Thread => {
                let t: WThread = de(payload)?;
                if self.threads.contains_key(&t.i) {
                    return Ok(Taken::Duplicate);
                }
                let (t, rel) = t.into_model()?;
                if let Some(frames) = rel {
                    self.pending.push(PendingFrames { thread: t.index, offset, frames });
                }
                self.threads.insert(t.index, t);
            }
            SectionKind::Images => {
                let c: WImages = de(payload)?;
                if self.image_chunks.contains_key(&c.i) {
                    return Ok(Taken::Duplicate);
                }
                let first = c.i;
                // 2.0 images carry their index (`x`); 1.x ones are consecutive from the section's first index.
                let imgs =
                    c.l.into_iter()
                        .enumerate()
                        .map(|(k, w)| {
                            let index = w.x.unwrap_or(first.saturating_add(u32::try_from(k).unwrap_or(u32::MAX)));
                            w.into_model(index)
                        })
                        .collect();
                self.image_chunks.insert(first, imgs);
            }
            SectionKind::ImageNames => {
                let c: WImageNames = de(payload)?;
                if self.name_chunks.contains_key(&c.i) {
                    return Ok(Taken::Duplicate);
                }
                let imgs = parse_image_names(c.i, &c.l.0, payload.len())?;
                self.name_chunks.insert(c.i, imgs);
            }
            SectionKind::Messages => {
                let m: WMessages = de(payload)?;
                if self.messages.is_some() {
                    return Ok(Taken::Duplicate);
                }
                self.messages = Some(m.l.into_iter().map(|m| Message { source: m.s, text: m.m }).collect());
            }
            SectionKind::User => {
                let u: WUser = de(payload)?;
                if self.user.is_some() {
                    return Ok(Taken::Duplicate);
                }
                self.user = Some(u.kv);
            }
            SectionKind::End => {}
            SectionKind::Unknown(_) => return Ok(Taken::Unknown),
        }
        Ok(Taken::Stored)
    }

    fn finish(self, out: &mut Decoded) {
        let r = &mut out.report;
        let (thread_count, image_count) = counts(self.meta.as_ref());
        r.meta = self.meta;
        r.exception = self.exception;
        // Full images first, then names-only entries for indices no full image has (the first of a kind wins).
        let mut images: BTreeMap<u32, Image> = BTreeMap::new();
        for img in self.image_chunks.into_values().chain(self.name_chunks.into_values()).flatten() {
            images.entry(img.index).or_insert(img);
        }
        let mut threads = self.threads;
        for p in self.pending {
            let Some(t) = threads.get_mut(&p.thread) else { continue };
            let mut frames = Vec::with_capacity(p.frames.len());
            let mut trust = Vec::with_capacity(p.frames.len());
            for (k, f) in p.frames.iter().enumerate() {
                let address = if f.image == 0 {
                    f.value
                } else {
                    let img = u32::try_from(f.image - 1).ok().and_then(|i| images.get(&i)).filter(|i| !i.name_only);
                    match img {
                        Some(img) => img.load_address.wrapping_add(f.value),
                        None => {
                            out.problems.push(Problem {
                                offset: p.offset,
                                section: Some(SectionKind::Thread),
                                kind: ProblemKind::FrameImageMissing {
                                    thread: p.thread,
                                    frame: u32::try_from(k).unwrap_or(u32::MAX),
                                    image: f.image - 1,
                                    offset: f.value,
                                },
                            });
                            0
                        }
                    }
                };
                frames.push(address);
                trust.push(FrameTrust::from_byte(f.trust));
            }
            // Trailing unknowns say nothing (model: "shorter when only the first frames say").
            while trust.last() == Some(&FrameTrust::Unknown) {
                trust.pop();
            }
            t.frames = frames;
            t.frame_trust = trust;
        }
        r.threads = threads.into_values().collect();
        r.images = images.into_values().collect();
        r.messages = self.messages.unwrap_or_default();
        r.user = self.user.unwrap_or_default();
        if let Some(n) = thread_count {
            let have: std::collections::BTreeSet<u32> = r.threads.iter().map(|t| t.index).collect();
            for index in (0..n).filter(|i| !have.contains(i)).take(4096) {
                out.problems.push(Problem {
                    offset: 0,
                    section: Some(SectionKind::Thread),
                    kind: ProblemKind::MissingThread { index },
                });
            }
        }
        if let Some(n) = image_count {
            let mut next = 0u32;
            let mut gaps = Vec::new();
            for img in &r.images {
                if img.index >= n {
                    break;
                }
                if img.index > next {
                    gaps.push((next, img.index));
                }
                next = img.index + 1;
            }
            if next < n {
                gaps.push((next, n));
            }
            for (from, to) in gaps {
                out.problems.push(Problem {
                    offset: 0,
                    section: Some(SectionKind::Images),
                    kind: ProblemKind::MissingImages { from, to },
                });
            }
        }
    }
}

/// Reads one unsigned LEB128 number at `*at` (SCHEMA.md §4.3.2), advancing `*at`.
fn leb128(b: &[u8], at: &mut usize) -> Result<u64, String> {
    let mut v = 0u64;
    let mut shift = 0u32;
    loop {
        let byte = *b.get(*at).ok_or_else(|| format!("LEB128 number cut off at byte {at}"))?;
        *at += 1;
        if shift == 63 && byte > 1 {
            return Err(format!("LEB128 number over 64 bits at byte {}", *at - 1));
        }
        v |= u64::from(byte & 0x7f) << shift;
        if byte & 0x80 == 0 {
            return Ok(v);
        }
        shift += 7;
        if shift > 63 {
            return Err(format!("LEB128 number over 64 bits at byte {}", *at - 1));
        }
    }
}

/// The frames of a THREAD `fr` bin (SCHEMA.md §4.3.2).
fn parse_frames(b: &[u8]) -> Result<Vec<RelFrame>, String> {
    let mut out = Vec::new();
    let mut at = 0usize;
    while at < b.len() {
        let tag = leb128(b, &mut at).map_err(|e| format!("fr: {e}"))?;
        let value = leb128(b, &mut at).map_err(|e| format!("fr: {e}"))?;
        out.push(RelFrame { image: tag >> 3, trust: (tag & 7) as u8, value });
    }
    Ok(out)
}

/// The entries of an IMAGE NAMES `l` bin (SCHEMA.md §4.4.1), the first at index `first` or after. The paths it
/// expands to may total at most 64 times the payload plus 64 KiB (front coding of real paths expands far less), so
/// a hostile section cannot make the reader allocate without bound.
fn parse_image_names(first: u32, b: &[u8], payload_len: usize) -> Result<Vec<Image>, String> {
    let budget = payload_len.saturating_mul(64).saturating_add(64 << 10);
    let mut spent = 0usize;
    let mut out = Vec::new();
    let mut next = u64::from(first);
    let mut prev: Vec<u8> = Vec::new();
    let mut at = 0usize;
    while at < b.len() {
        let skip = leb128(b, &mut at).map_err(|e| format!("l: {e}"))?;
        let shared = leb128(b, &mut at).map_err(|e| format!("l: {e}"))?;
        let len = leb128(b, &mut at).map_err(|e| format!("l: {e}"))?;
        let index = next.checked_add(skip).and_then(|i| u32::try_from(i).ok()).ok_or("l: image index over 2^32")?;
        let shared = usize::try_from(shared).ok().filter(|s| *s <= prev.len());
        let shared = shared.ok_or_else(|| format!("l: entry for image {index} shares more than the previous path"))?;
        let end = usize::try_from(len).ok().and_then(|l| at.checked_add(l)).filter(|e| *e <= b.len());
        let end = end.ok_or_else(|| format!("l: entry for image {index} runs past the end"))?;
        spent = spent.saturating_add(shared).saturating_add(end - at);
        if spent > budget {
            return Err("l: the paths expand to more than 64 times the section".into());
        }
        prev.truncate(shared);
        prev.extend_from_slice(&b[at..end]);
        at = end;
        let path = (!prev.is_empty()).then(|| text_lossy(&prev));
        let name =
            path.as_deref().map(|p| p.rsplit('/').next().unwrap_or(p).to_owned()).unwrap_or_else(|| "???".into());
        out.push(Image { index, name, path, name_only: true, ..Image::default() });
        next = u64::from(index) + 1;
    }
    Ok(out)
}

/// Bytes as text, each byte of an invalid UTF-8 sequence replaced by `?` (the encoder's rule, SCHEMA.md §1).
fn text_lossy(mut rest: &[u8]) -> String {
    let mut s = String::with_capacity(rest.len());
    loop {
        match std::str::from_utf8(rest) {
            Ok(ok) => {
                s.push_str(ok);
                return s;
            }
            Err(e) => {
                let good = e.valid_up_to();
                let bad = e.error_len().unwrap_or(rest.len() - good);
                s.push_str(std::str::from_utf8(&rest[..good]).unwrap_or_default());
                s.extend(std::iter::repeat_n('?', bad));
                rest = &rest[good + bad..];
            }
        }
    }
}

fn counts(meta: Option<&Meta>) -> (Option<u32>, Option<u32>) {
    match meta {
        Some(m) => (m.thread_count, m.image_count),
        None => (None, None),
    }
}

// ---------------------------------------------------------------------------------------------------------------
// Wire structs: one per MessagePack map of the format. Their field names are the on-disk keys (serde reads a field
// under its name and needs it as an identifier, so the keys cannot be the `crate::keys` constants here): the test
// `wire_structs_read_exactly_the_keys` below checks that each struct's fields are exactly its map's `crate::keys`
// list, in order. Unknown keys are ignored; missing keys take defaults.

/// Bytes from a MessagePack bin (or an array of small integers).
#[derive(Default, Debug)]
struct Bytes(Vec<u8>);

impl<'de> Deserialize<'de> for Bytes {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = Bytes;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("bytes")
            }
            fn visit_bytes<E: serde::de::Error>(self, v: &[u8]) -> Result<Bytes, E> {
                Ok(Bytes(v.to_vec()))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Bytes, A::Error> {
                let mut v = Vec::new();
                while let Some(b) = seq.next_element::<u8>()? {
                    v.push(b);
                    if v.len() > 4096 {
                        return Err(serde::de::Error::custom("byte array too long"));
                    }
                }
                Ok(Bytes(v))
            }
        }
        d.deserialize_bytes(V)
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WOs {
    n: Option<String>,
    v: Option<String>,
    b: Option<String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WProcess {
    pid: Option<u32>,
    ppid: Option<u32>,
    n: Option<String>,
    path: Option<String>,
    pn: Option<String>,
    id: Option<String>,
    sv: Option<String>,
    bv: Option<String>,
    lt: Option<u64>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WMeta {
    id: Bytes,
    t: Option<u64>,
    v: Option<String>,
    arch: Option<String>,
    hw: Option<String>,
    os: WOs,
    p: WProcess,
    tc: Option<u32>,
    ic: Option<u32>,
    min: bool,
    note: Option<String>,
    nf: Option<WNonFatal>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WNonFatal {
    k: String,
    r: Option<String>,
    d: Option<u64>,
    th: Option<u32>,
}

impl WMeta {
    fn into_model(self) -> Result<Meta, String> {
        let mut id = [0u8; 16];
        if !self.id.0.is_empty() {
            if self.id.0.len() != 16 {
                return Err(format!("report id has {} bytes, expected 16", self.id.0.len()));
            }
            id.copy_from_slice(&self.id.0);
        }
        let p = self.p;
        Ok(Meta {
            report_id: ReportId(id),
            capture_time_ns: self.t,
            handler_version: self.v,
            arch: self.arch,
            hardware_model: self.hw,
            os: Os { name: self.os.n, version: self.os.v, build: self.os.b },
            process: Process {
                pid: p.pid,
                parent_pid: p.ppid,
                name: p.n,
                path: p.path,
                parent_name: p.pn,
                bundle_id: p.id,
                short_version: p.sv,
                build_version: p.bv,
                launch_time_ns: p.lt,
            },
            thread_count: self.tc,
            image_count: self.ic,
            minimal: self.min,
            note: self.note,
            non_fatal: self.nf.map(|n| NonFatal { kind: n.k, reason: n.r, duration_ns: n.d, thread: n.th }),
        })
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WException {
    mt: Option<u32>,
    mc: Vec<i64>,
    sig: Option<i32>,
    code: Option<i32>,
    addr: Option<u64>,
    ct: Option<u32>,
    lx: Option<WLanguageException>,
}

impl WException {
    fn into_model(self) -> Exception {
        Exception {
            mach_type: self.mt,
            mach_codes: self.mc,
            signal: self.sig,
            si_code: self.code,
            fault_address: self.addr,
            crashed_thread: self.ct,
            language: self.lx.map(|l| LanguageException {
                kind: l.k,
                type_name: l.t,
                reason: l.r,
                location: l.loc,
                user_info: l.ui,
                thread_id: l.tid,
                backtrace: l.bt,
            }),
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WLanguageException {
    k: String,
    t: Option<String>,
    r: Option<String>,
    loc: Option<String>,
    ui: Option<String>,
    tid: Option<u64>,
    bt: Vec<u64>,
}

#[derive(Deserialize)]
#[serde(default)]
struct WThread {
    i: u32,
    id: Option<u64>,
    n: Option<String>,
    q: Option<String>,
    c: bool,
    cap: bool,
    why: Option<String>,
    rs: Option<String>,
    r: Vec<Option<u64>>,
    f: Vec<u64>,
    tr: Bytes,
    fr: Bytes,
    ft: bool,
    rep: Vec<(u32, u32, u32)>,
}

impl Default for WThread {
    fn default() -> Self {
        WThread {
            i: 0,
            id: None,
            n: None,
            q: None,
            c: false,
            cap: true,
            why: None,
            rs: None,
            r: Vec::new(),
            f: Vec::new(),
            tr: Bytes(Vec::new()),
            fr: Bytes(Vec::new()),
            ft: false,
            rep: Vec::new(),
        }
    }
}

impl WThread {
    /// The thread, and its 2.0 relative frames (`fr`) to resolve once the images are known; 1.x frames (`f`,
    /// `tr`) are final here.
    fn into_model(self) -> Result<(Thread, Option<Vec<RelFrame>>), String> {
        let rel = if self.fr.0.is_empty() { None } else { Some(parse_frames(&self.fr.0)?) };
        let names = self.rs.as_deref().and_then(regs::names).unwrap_or(&[]);
        let registers = self
            .r
            .iter()
            .enumerate()
            .filter_map(|(k, v)| {
                let value = (*v)?;
                let name = names.get(k).map(|s| (*s).to_owned()).unwrap_or_else(|| format!("r{k}"));
                Some(Register { name, value })
            })
            .collect();
        let t = Thread {
            index: self.i,
            id: self.id,
            name: self.n,
            queue: self.q,
            crashed: self.c,
            captured: self.cap,
            not_captured_reason: self.why,
            register_set: self.rs,
            registers,
            frame_trust: self.tr.0.iter().map(|b| FrameTrust::from_byte(*b)).collect(),
            frames: self.f,
            frames_truncated: self.ft,
            repeats: self.rep.into_iter().map(|(start, len, count)| Repeat { start, len, count }).collect(),
        };
        Ok((t, rel))
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WImage {
    x: Option<u32>,
    p: Option<String>,
    n: Option<String>,
    b: u64,
    s: u64,
    sl: Option<i64>,
    id: Bytes,
    k: u8,
    a: Option<String>,
}

impl WImage {
    fn into_model(self, index: u32) -> Image {
        let name = self
            .n
            .or_else(|| self.p.as_deref().map(|p| p.rsplit('/').next().unwrap_or(p).to_owned()))
            .unwrap_or_else(|| "???".to_owned());
        let id = match (self.k, self.id.0.len()) {
            (_, 0) => None,
            (crate::encode::ID_KIND_UUID, 16) => {
                let mut u = [0u8; 16];
                u.copy_from_slice(&self.id.0);
                Some(ImageId::Uuid(u))
            }
            _ => Some(ImageId::BuildId(self.id.0)),
        };
        Image {
            index,
            name,
            path: self.p,
            load_address: self.b,
            size: self.s,
            slide: self.sl,
            id,
            arch: self.a,
            name_only: false,
        }
    }
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WImages {
    i: u32,
    l: Vec<WImage>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WImageNames {
    i: u32,
    l: Bytes,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WMessage {
    s: Option<String>,
    m: String,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WMessages {
    l: Vec<WMessage>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WUser {
    kv: BTreeMap<String, String>,
}

#[derive(Deserialize, Default)]
#[serde(default)]
struct WEnd {
    n: u32,
    #[allow(dead_code)]
    o: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys;
    use serde::de::{self, DeserializeOwned, Visitor};

    /// The keys a serde-derived wire struct reads: the `fields` list its derived `Deserialize` hands to
    /// `deserialize_struct` (field names, after any renaming), captured by a deserializer that reads nothing.
    fn wire_keys<T: DeserializeOwned>() -> &'static [&'static str] {
        struct Capture(Option<&'static [&'static str]>);
        impl<'de> de::Deserializer<'de> for &mut Capture {
            type Error = de::value::Error;
            fn deserialize_struct<V: Visitor<'de>>(
                self,
                _name: &'static str,
                fields: &'static [&'static str],
                _visitor: V,
            ) -> Result<V::Value, Self::Error> {
                self.0 = Some(fields);
                Err(de::Error::custom("fields captured"))
            }
            fn deserialize_any<V: Visitor<'de>>(self, _visitor: V) -> Result<V::Value, Self::Error> {
                Err(de::Error::custom("not a struct"))
            }
            serde::forward_to_deserialize_any! {
                bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
                unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
            }
        }
        let mut c = Capture(None);
        assert!(T::deserialize(&mut c).is_err());
        c.0.expect("a serde-derived struct")
    }

    #[test]
    fn wire_structs_read_exactly_the_keys() {
        let wire: [(&str, &[&str]); 14] = [
            ("META", wire_keys::<WMeta>()),
            ("OS map", wire_keys::<WOs>()),
            ("Process map", wire_keys::<WProcess>()),
            ("Non-fatal map", wire_keys::<WNonFatal>()),
            ("EXCEPTION", wire_keys::<WException>()),
            ("Language exception map", wire_keys::<WLanguageException>()),
            ("THREAD", wire_keys::<WThread>()),
            ("IMAGES", wire_keys::<WImages>()),
            ("Image map", wire_keys::<WImage>()),
            ("IMAGE NAMES", wire_keys::<WImageNames>()),
            ("MESSAGES", wire_keys::<WMessages>()),
            ("Message map", wire_keys::<WMessage>()),
            ("USER", wire_keys::<WUser>()),
            ("END", wire_keys::<WEnd>()),
        ];
        assert_eq!(wire.len(), keys::MAPS.len(), "a map without a wire struct, or the reverse");
        for (map, (name, fields)) in keys::MAPS.iter().zip(wire) {
            assert_eq!(map.name, name);
            assert_eq!(map.keys, fields, "{name}: the decoder reads other keys than crate::keys lists");
        }
    }
}
