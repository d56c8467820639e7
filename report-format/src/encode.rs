//! The crash-time encoder: writes a report section by section, never allocating, locking or panicking.
//!
//! Each section's MessagePack payload is built in a caller-provided scratch buffer with `rmp`'s low-level
//! `encode::write_*` functions, checksummed, and handed with its header to a [`Sink`]: a [`SliceSink`] over a
//! preallocated buffer, or the handler's raw file-descriptor writer. Running out of room is an error value, never a
//! panic. The input types borrow everything (`&[u8]` for text, `&[u64]` for frames), so the handler builds them from
//! its preallocated tables. Field keys and meanings are specified in `report-format/SCHEMA.md`.
//!
//! Signal safety: every function in this module is async-signal-safe provided the [`Sink`] is. It only computes,
//! copies into the scratch buffer, and calls the sink. Text that is not valid UTF-8 is written with each byte of an
//! invalid sequence replaced by `?`, so readers always see valid UTF-8.

use crate::framing::{self, SectionKind, SECTION_HEADER_LEN};
use rmp::encode as mp;

/// Where encoded bytes go. Implementations used after a fault must be async-signal-safe and must not allocate.
pub trait Sink {
    /// Appends all of `bytes`, or fails.
    ///
    /// # Errors
    /// [`SinkError::Full`] when a fixed-size destination has no room; [`SinkError::Os`] with an `errno` value
    /// when a write to a file descriptor failed.
    fn write_all(&mut self, bytes: &[u8]) -> Result<(), SinkError>;
}

/// Why a [`Sink`] refused bytes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SinkError {
    /// The destination buffer is full.
    Full,
    /// An OS call failed with this `errno`.
    Os(i32),
}

/// A [`Sink`] that appends into a fixed buffer. Signal-safe; never allocates.
#[derive(Debug)]
pub struct SliceSink<'a> {
    buf: &'a mut [u8],
    len: usize,
}

impl<'a> SliceSink<'a> {
    /// An empty sink over `buf`.
    pub fn new(buf: &'a mut [u8]) -> Self {
        SliceSink { buf, len: 0 }
    }

    /// Number of bytes written so far.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing has been written.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The bytes written so far.
    pub fn written(&self) -> &[u8] {
        self.buf.get(..self.len).unwrap_or(&[])
    }
}

impl Sink for SliceSink<'_> {
    fn write_all(&mut self, bytes: &[u8]) -> Result<(), SinkError> {
        let end = self.len.checked_add(bytes.len()).ok_or(SinkError::Full)?;
        let dst = self.buf.get_mut(self.len..end).ok_or(SinkError::Full)?;
        dst.copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }
}

/// Launch-time convenience: appends to a growable vector. Allocates; never use it after a fault.
impl Sink for Vec<u8> {
    fn write_all(&mut self, bytes: &[u8]) -> Result<(), SinkError> {
        self.extend_from_slice(bytes);
        Ok(())
    }
}

/// Why encoding stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// One section's payload did not fit the scratch buffer.
    ScratchTooSmall(SectionKind),
    /// The sink refused the bytes.
    Sink(SinkError),
    /// A method was called after [`Encoder::finish`] failed or in the wrong state.
    Finished,
}

impl From<SinkError> for EncodeError {
    fn from(e: SinkError) -> Self {
        EncodeError::Sink(e)
    }
}

/// The operating system the report comes from. Empty text fields are left out of the report.
#[derive(Clone, Copy, Debug, Default)]
pub struct Os<'a> {
    /// OS name as Apple prints it ("iPhone OS", "macOS") or "Linux".
    pub name: &'a [u8],
    /// Version, e.g. "15.5" or the kernel release "6.1.0-18-amd64".
    pub version: &'a [u8],
    /// Build, e.g. "19F77"; on Linux the kernel version string (`uname -v`).
    pub build: &'a [u8],
}

/// The crashed process. Empty text fields and `None` numbers are left out.
#[derive(Clone, Copy, Debug, Default)]
pub struct Process<'a> {
    /// Process id.
    pub pid: Option<u32>,
    /// Parent process id.
    pub parent_pid: Option<u32>,
    /// Process name (executable file name).
    pub name: &'a [u8],
    /// Absolute path of the executable.
    pub path: &'a [u8],
    /// Parent process name.
    pub parent_name: &'a [u8],
    /// Bundle identifier (`CFBundleIdentifier`) or the app id given at install.
    pub bundle_id: &'a [u8],
    /// Marketing version (`CFBundleShortVersionString`).
    pub short_version: &'a [u8],
    /// Build number (`CFBundleVersion`).
    pub build_version: &'a [u8],
    /// Launch time, nanoseconds since the Unix epoch.
    pub launch_time_ns: Option<u64>,
}

/// The META section (kind 1).
#[derive(Clone, Copy, Debug, Default)]
pub struct Meta<'a> {
    /// Random report id (a version-4 UUID's 16 bytes).
    pub report_id: [u8; 16],
    /// Capture time, nanoseconds since the Unix epoch (`CLOCK_REALTIME`).
    pub capture_time_ns: u64,
    /// Version of the handler that wrote the report.
    pub handler_version: &'a [u8],
    /// CPU architecture of the process: "arm64", "arm64e" or "x86_64".
    pub arch: &'a [u8],
    /// Hardware model, e.g. "iPhone14,2"; on Linux the machine (`uname -m`) or DMI product name.
    pub hardware_model: &'a [u8],
    /// The operating system.
    pub os: Os<'a>,
    /// The crashed process.
    pub process: Process<'a>,
    /// Number of threads the handler found (captured or not), so a reader can name missing thread sections.
    pub thread_count: Option<u32>,
    /// Number of images in the image list, so a reader can name missing image sections.
    pub image_count: Option<u32>,
    /// True for a minimal report written after a second fault inside the handler.
    pub minimal: bool,
    /// Free text about how the report was made (why it is minimal, for instance).
    pub note: &'a [u8],
}

/// The EXCEPTION section (kind 2).
#[derive(Clone, Copy, Debug, Default)]
pub struct Exception<'a> {
    /// Mach exception type (`exception_type_t`, XNU `osfmk/mach/exception_types.h`); Apple platforms only.
    pub mach_type: Option<u32>,
    /// Mach exception codes (`mach_exception_data_type_t`, 64-bit); empty when there is no Mach exception.
    pub mach_codes: &'a [i64],
    /// Signal number in the numbering of the crashing OS (Darwin and Linux differ).
    pub signal: Option<i32>,
    /// `si_code` of the signal.
    pub si_code: Option<i32>,
    /// Fault address (`si_addr`, or the Mach `code[1]` for EXC_BAD_ACCESS).
    pub fault_address: Option<u64>,
    /// Index (in the report's thread list) of the crashed thread.
    pub crashed_thread: Option<u32>,
}

/// A run of frames that repeats, left out of the frame array to keep deep recursion whole.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Repeat {
    /// Index in the stored frame array where the repeating run starts.
    pub start: u32,
    /// Length of the run in frames.
    pub len: u32,
    /// How many further times the run occurred on the stack after the stored copy.
    pub count: u32,
}

/// One THREAD section (kind 3).
#[derive(Clone, Copy, Debug, Default)]
pub struct Thread<'a> {
    /// Index of this thread in the report's thread list (0-based, as Apple numbers threads).
    pub index: u32,
    /// Kernel thread id: Linux tid, or the Mach `thread_identifier_info.thread_id`.
    pub id: Option<u64>,
    /// Thread name.
    pub name: &'a [u8],
    /// Dispatch queue label.
    pub queue: &'a [u8],
    /// True for the thread that crashed.
    pub crashed: bool,
    /// False when the thread's state could not be captured; `reason` says why.
    pub captured: bool,
    /// Why the thread was not captured (empty when it was).
    pub reason: &'a [u8],
    /// Register set name (see [`crate::regs`]); empty when no registers were captured.
    pub register_set: &'a [u8],
    /// Register values in the set's order; `None` for values not captured.
    pub registers: &'a [Option<u64>],
    /// Raw frame addresses: frame 0 is the PC, then return addresses, unadjusted.
    pub frames: &'a [u64],
    /// True when the walk stopped at the frame cap, not at the end of the stack.
    pub frames_truncated: bool,
    /// Repeating runs left out of `frames`.
    pub repeats: &'a [Repeat],
    /// How each frame was found, one byte per frame of `frames` (may be shorter, or empty when unknown):
    /// `model::FrameTrust` values (1 context, 2 CFI, 3 frame pointer, 4 scan, 5 link register).
    pub trust: &'a [u8],
}

/// One image (loaded executable or library) inside an IMAGES section (kind 4).
#[derive(Clone, Copy, Debug, Default)]
pub struct Image<'a> {
    /// Absolute path of the image.
    pub path: &'a [u8],
    /// Image name, only when it differs from the last path component.
    pub name: &'a [u8],
    /// Load address: where the Mach-O header or the ELF's first segment is mapped.
    pub load_address: u64,
    /// Size in bytes of the image's text range starting at `load_address` (`__TEXT` vmsize on Apple; the end of the
    /// last executable segment minus `load_address` on Linux).
    pub size: u64,
    /// Slide (Mach-O) or load bias (ELF): runtime address minus link-time address.
    pub slide: Option<i64>,
    /// Identifier bytes: the 16-byte Mach-O `LC_UUID` or the GNU build ID (`NT_GNU_BUILD_ID`).
    pub id: &'a [u8],
    /// What `id` is: [`ID_KIND_UUID`] or [`ID_KIND_BUILD_ID`]; ignored when `id` is empty.
    pub id_kind: u8,
    /// CPU architecture when it differs from the report's ("arm64e", "x86_64").
    pub arch: &'a [u8],
}

/// [`Image::id_kind`] for a Mach-O `LC_UUID`.
pub const ID_KIND_UUID: u8 = 1;
/// [`Image::id_kind`] for a GNU build ID note.
pub const ID_KIND_BUILD_ID: u8 = 2;

/// An application-specific message (Swift `fatalError` text, `abort()` reason, panic message).
#[derive(Clone, Copy, Debug, Default)]
pub struct Message<'a> {
    /// Where it came from: an image name, or a source such as "panic".
    pub source: &'a [u8],
    /// The message text.
    pub text: &'a [u8],
}

/// A user key/value pair set before the crash.
#[derive(Clone, Copy, Debug, Default)]
pub struct KeyValue<'a> {
    /// Key.
    pub key: &'a [u8],
    /// Value.
    pub value: &'a [u8],
}

/// Most images one IMAGES section holds, so one damaged section loses few images.
pub const IMAGES_PER_SECTION: usize = 64;

/// Writes one report: the file header at [`Encoder::begin`], sections in any order, the end marker at
/// [`Encoder::finish`]. Never allocates or panics; async-signal-safe when the sink is.
#[derive(Debug)]
pub struct Encoder<'s, S: Sink> {
    sink: S,
    scratch: &'s mut [u8],
    sections: u32,
    offset: u64,
}

impl<'s, S: Sink> Encoder<'s, S> {
    /// Starts a report: writes the file header to `sink`. `scratch` holds one section's payload at a time; 64 KiB
    /// is ample for threads of 512 frames and image chunks with 1 KiB paths.
    ///
    /// # Errors
    /// [`EncodeError::Sink`] when the sink refuses the header.
    pub fn begin(mut sink: S, scratch: &'s mut [u8]) -> Result<Self, EncodeError> {
        let h = framing::file_header();
        sink.write_all(&h)?;
        Ok(Encoder { sink, scratch, sections: 0, offset: h.len() as u64 })
    }

    /// Bytes written so far, header included.
    pub fn bytes_written(&self) -> u64 {
        self.offset
    }

    /// Writes the META section.
    ///
    /// # Errors
    /// [`EncodeError::ScratchTooSmall`] or [`EncodeError::Sink`].
    pub fn meta(&mut self, m: &Meta<'_>) -> Result<(), EncodeError> {
        let len = {
            let mut w = Cursor::new(self.scratch);
            encode_meta(&mut w, m).map_err(|_| EncodeError::ScratchTooSmall(SectionKind::Meta))?;
            w.pos
        };
        self.emit(SectionKind::Meta, len)
    }

    /// Writes the EXCEPTION section.
    ///
    /// # Errors
    /// [`EncodeError::ScratchTooSmall`] or [`EncodeError::Sink`].
    pub fn exception(&mut self, e: &Exception<'_>) -> Result<(), EncodeError> {
        let len = {
            let mut w = Cursor::new(self.scratch);
            encode_exception(&mut w, e).map_err(|_| EncodeError::ScratchTooSmall(SectionKind::Exception))?;
            w.pos
        };
        self.emit(SectionKind::Exception, len)
    }

    /// Writes one THREAD section. When the frames do not fit the scratch buffer, the frame list is halved until
    /// it does and the section is marked truncated, so a thread is never lost for want of room.
    ///
    /// # Errors
    /// [`EncodeError::ScratchTooSmall`] when even the registers alone do not fit; [`EncodeError::Sink`].
    pub fn thread(&mut self, t: &Thread<'_>) -> Result<(), EncodeError> {
        let mut t = *t;
        loop {
            let res = {
                let mut w = Cursor::new(self.scratch);
                encode_thread(&mut w, &t).map(|()| w.pos)
            };
            match res {
                Ok(len) => return self.emit(SectionKind::Thread, len),
                Err(NoRoom) if !t.frames.is_empty() => {
                    let keep = t.frames.len() / 2;
                    t.frames = t.frames.get(..keep).unwrap_or(&[]);
                    t.trust = t.trust.get(..keep.min(t.trust.len())).unwrap_or(&[]);
                    t.frames_truncated = true;
                    t.repeats = &[];
                }
                Err(NoRoom) => return Err(EncodeError::ScratchTooSmall(SectionKind::Thread)),
            }
        }
    }

    /// Writes the image list as one or more IMAGES sections of at most [`IMAGES_PER_SECTION`] images, each as
    /// many as fit the scratch buffer. `first_index` is the list index of `images[0]`.
    ///
    /// # Errors
    /// [`EncodeError::ScratchTooSmall`] when a single image does not fit; [`EncodeError::Sink`].
    pub fn images(&mut self, first_index: u32, images: &[Image<'_>]) -> Result<(), EncodeError> {
        let mut done = 0usize;
        while done < images.len() {
            let rest = images.get(done..).unwrap_or(&[]);
            let (len, n) = {
                let mut w = Cursor::new(self.scratch);
                let index = first_index.saturating_add(u32::try_from(done).unwrap_or(u32::MAX));
                encode_image_chunk(&mut w, index, rest)
            };
            if n == 0 {
                return Err(EncodeError::ScratchTooSmall(SectionKind::Images));
            }
            self.emit(SectionKind::Images, len)?;
            done += n;
        }
        Ok(())
    }

    /// Writes the MESSAGES section (nothing when `messages` is empty).
    ///
    /// # Errors
    /// [`EncodeError::ScratchTooSmall`] or [`EncodeError::Sink`].
    pub fn messages(&mut self, messages: &[Message<'_>]) -> Result<(), EncodeError> {
        if messages.is_empty() {
            return Ok(());
        }
        let len = {
            let mut w = Cursor::new(self.scratch);
            encode_messages(&mut w, messages).map_err(|_| EncodeError::ScratchTooSmall(SectionKind::Messages))?;
            w.pos
        };
        self.emit(SectionKind::Messages, len)
    }

    /// Writes the USER section (nothing when `pairs` is empty).
    ///
    /// # Errors
    /// [`EncodeError::ScratchTooSmall`] or [`EncodeError::Sink`].
    pub fn user(&mut self, pairs: &[KeyValue<'_>]) -> Result<(), EncodeError> {
        if pairs.is_empty() {
            return Ok(());
        }
        let len = {
            let mut w = Cursor::new(self.scratch);
            encode_user(&mut w, pairs).map_err(|_| EncodeError::ScratchTooSmall(SectionKind::User))?;
            w.pos
        };
        self.emit(SectionKind::User, len)
    }

    /// Writes a section of a kind this version does not define (for tests of forward compatibility and for
    /// experiments); readers that do not know `code` skip it.
    ///
    /// # Errors
    /// [`EncodeError::ScratchTooSmall`] or [`EncodeError::Sink`].
    pub fn raw_section(&mut self, code: u16, payload: &[u8]) -> Result<(), EncodeError> {
        let kind = SectionKind::from_code(code);
        let dst = self.scratch.get_mut(..payload.len()).ok_or(EncodeError::ScratchTooSmall(kind))?;
        dst.copy_from_slice(payload);
        self.emit(kind, payload.len())
    }

    /// Writes the end marker and returns the sink.
    ///
    /// # Errors
    /// [`EncodeError::ScratchTooSmall`] or [`EncodeError::Sink`].
    pub fn finish(mut self) -> Result<S, EncodeError> {
        let end_offset = self.offset;
        let len = {
            let mut w = Cursor::new(self.scratch);
            encode_end(&mut w, self.sections, end_offset)
                .map_err(|_| EncodeError::ScratchTooSmall(SectionKind::End))?;
            w.pos
        };
        self.emit(SectionKind::End, len)?;
        Ok(self.sink)
    }

    fn emit(&mut self, kind: SectionKind, len: usize) -> Result<(), EncodeError> {
        let payload = self.scratch.get(..len).ok_or(EncodeError::ScratchTooSmall(kind))?;
        let header = framing::section_header(kind, payload);
        self.sink.write_all(&header)?;
        self.sink.write_all(payload)?;
        self.offset += (SECTION_HEADER_LEN + len) as u64;
        self.sections = self.sections.saturating_add(1);
        Ok(())
    }
}

// ---------------------------------------------------------------------------------------------------------------
// MessagePack building blocks over a fixed buffer.

/// The scratch buffer ran out of room.
#[derive(Debug, Clone, Copy)]
struct NoRoom;

impl<E: mp::RmpWriteErr> From<mp::ValueWriteError<E>> for NoRoom {
    fn from(_: mp::ValueWriteError<E>) -> Self {
        NoRoom
    }
}

impl From<std::io::Error> for NoRoom {
    fn from(_: std::io::Error) -> Self {
        NoRoom
    }
}

type R = Result<(), NoRoom>;

/// A write position in a fixed buffer. Its `io::Write` error is built from an `ErrorKind`, which does not allocate.
struct Cursor<'b> {
    buf: &'b mut [u8],
    pos: usize,
}

impl<'b> Cursor<'b> {
    fn new(buf: &'b mut [u8]) -> Self {
        Cursor { buf, pos: 0 }
    }

    /// Overwrites one already written byte (used to patch a reserved fixmap/array16 count).
    fn patch(&mut self, at: usize, bytes: &[u8]) -> R {
        let dst = self.buf.get_mut(at..at + bytes.len()).ok_or(NoRoom)?;
        dst.copy_from_slice(bytes);
        Ok(())
    }
}

impl std::io::Write for Cursor<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.write_all(bytes).map(|()| bytes.len())
    }

    fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let end = self.pos.checked_add(bytes.len()).ok_or(std::io::ErrorKind::WriteZero)?;
        let dst = self.buf.get_mut(self.pos..end).ok_or(std::io::ErrorKind::WriteZero)?;
        dst.copy_from_slice(bytes);
        self.pos = end;
        Ok(())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// A map whose entry count is patched in at the end: one reserved fixmap byte, so at most 15 entries.
struct MapW {
    at: usize,
    n: u8,
}

impl MapW {
    fn open(w: &mut Cursor<'_>) -> Result<Self, NoRoom> {
        let at = w.pos;
        mp::write_map_len(w, 0)?;
        Ok(MapW { at, n: 0 })
    }

    fn key(&mut self, w: &mut Cursor<'_>, k: &str) -> R {
        if self.n >= 15 {
            return Err(NoRoom);
        }
        self.n += 1;
        mp::write_str(w, k)?;
        Ok(())
    }

    fn uint(&mut self, w: &mut Cursor<'_>, k: &str, v: u64) -> R {
        self.key(w, k)?;
        mp::write_uint(w, v)?;
        Ok(())
    }

    fn opt_uint(&mut self, w: &mut Cursor<'_>, k: &str, v: Option<u64>) -> R {
        match v {
            Some(v) => self.uint(w, k, v),
            None => Ok(()),
        }
    }

    fn opt_sint(&mut self, w: &mut Cursor<'_>, k: &str, v: Option<i64>) -> R {
        match v {
            Some(v) => {
                self.key(w, k)?;
                mp::write_sint(w, v)?;
                Ok(())
            }
            None => Ok(()),
        }
    }

    fn text(&mut self, w: &mut Cursor<'_>, k: &str, v: &[u8]) -> R {
        if v.is_empty() {
            return Ok(());
        }
        self.key(w, k)?;
        write_text(w, v)
    }

    fn bin(&mut self, w: &mut Cursor<'_>, k: &str, v: &[u8]) -> R {
        if v.is_empty() {
            return Ok(());
        }
        self.key(w, k)?;
        mp::write_bin(w, v)?;
        Ok(())
    }

    fn flag(&mut self, w: &mut Cursor<'_>, k: &str, v: bool) -> R {
        if !v {
            return Ok(());
        }
        self.key(w, k)?;
        mp::write_bool(w, true)?;
        Ok(())
    }

    fn close(self, w: &mut Cursor<'_>) -> R {
        w.patch(self.at, &[0x80 | self.n])
    }
}

/// Writes text as a MessagePack str, replacing each byte of an invalid UTF-8 sequence with `?`.
fn write_text(w: &mut Cursor<'_>, v: &[u8]) -> R {
    let len = u32::try_from(v.len()).map_err(|_| NoRoom)?;
    mp::write_str_len(w, len)?;
    let mut rest = v;
    loop {
        match core::str::from_utf8(rest) {
            Ok(_) => {
                std::io::Write::write_all(w, rest)?;
                return Ok(());
            }
            Err(e) => {
                let good = e.valid_up_to();
                let bad = e.error_len().unwrap_or(rest.len() - good);
                std::io::Write::write_all(w, rest.get(..good).unwrap_or(&[]))?;
                for _ in 0..bad {
                    std::io::Write::write_all(w, b"?")?;
                }
                rest = rest.get(good + bad..).unwrap_or(&[]);
            }
        }
    }
}

fn encode_meta(w: &mut Cursor<'_>, m: &Meta<'_>) -> R {
    let mut map = MapW::open(w)?;
    map.bin(w, "id", &m.report_id)?;
    map.uint(w, "t", m.capture_time_ns)?;
    map.text(w, "v", m.handler_version)?;
    map.text(w, "arch", m.arch)?;
    map.text(w, "hw", m.hardware_model)?;

    map.key(w, "os")?;
    let mut os = MapW::open(w)?;
    os.text(w, "n", m.os.name)?;
    os.text(w, "v", m.os.version)?;
    os.text(w, "b", m.os.build)?;
    os.close(w)?;

    map.key(w, "p")?;
    let p = &m.process;
    let mut pm = MapW::open(w)?;
    pm.opt_uint(w, "pid", p.pid.map(u64::from))?;
    pm.opt_uint(w, "ppid", p.parent_pid.map(u64::from))?;
    pm.text(w, "n", p.name)?;
    pm.text(w, "path", p.path)?;
    pm.text(w, "pn", p.parent_name)?;
    pm.text(w, "id", p.bundle_id)?;
    pm.text(w, "sv", p.short_version)?;
    pm.text(w, "bv", p.build_version)?;
    pm.opt_uint(w, "lt", p.launch_time_ns)?;
    pm.close(w)?;

    map.opt_uint(w, "tc", m.thread_count.map(u64::from))?;
    map.opt_uint(w, "ic", m.image_count.map(u64::from))?;
    map.flag(w, "min", m.minimal)?;
    map.text(w, "note", m.note)?;
    map.close(w)
}

fn encode_exception(w: &mut Cursor<'_>, e: &Exception<'_>) -> R {
    let mut map = MapW::open(w)?;
    map.opt_uint(w, "mt", e.mach_type.map(u64::from))?;
    if !e.mach_codes.is_empty() {
        map.key(w, "mc")?;
        let n = u32::try_from(e.mach_codes.len()).map_err(|_| NoRoom)?;
        mp::write_array_len(w, n)?;
        for c in e.mach_codes {
            mp::write_sint(w, *c)?;
        }
    }
    map.opt_sint(w, "sig", e.signal.map(i64::from))?;
    map.opt_sint(w, "code", e.si_code.map(i64::from))?;
    map.opt_uint(w, "addr", e.fault_address)?;
    map.opt_uint(w, "ct", e.crashed_thread.map(u64::from))?;
    map.close(w)
}

fn encode_thread(w: &mut Cursor<'_>, t: &Thread<'_>) -> R {
    let mut map = MapW::open(w)?;
    map.uint(w, "i", u64::from(t.index))?;
    map.opt_uint(w, "id", t.id)?;
    map.text(w, "n", t.name)?;
    map.text(w, "q", t.queue)?;
    map.flag(w, "c", t.crashed)?;
    if !t.captured {
        map.key(w, "cap")?;
        mp::write_bool(w, false)?;
    }
    map.text(w, "why", t.reason)?;
    if !t.register_set.is_empty() {
        map.text(w, "rs", t.register_set)?;
        map.key(w, "r")?;
        let n = u32::try_from(t.registers.len()).map_err(|_| NoRoom)?;
        mp::write_array_len(w, n)?;
        for r in t.registers {
            match r {
                Some(v) => mp::write_uint(w, *v).map(|_| ())?,
                None => mp::write_nil(w)?,
            }
        }
    }
    map.key(w, "f")?;
    let n = u32::try_from(t.frames.len()).map_err(|_| NoRoom)?;
    mp::write_array_len(w, n)?;
    for f in t.frames {
        mp::write_uint(w, *f)?;
    }
    if !t.trust.is_empty() {
        map.bin(w, "tr", t.trust.get(..t.trust.len().min(t.frames.len())).unwrap_or(&[]))?;
    }
    map.flag(w, "ft", t.frames_truncated)?;
    if !t.repeats.is_empty() {
        map.key(w, "rep")?;
        let n = u32::try_from(t.repeats.len()).map_err(|_| NoRoom)?;
        mp::write_array_len(w, n)?;
        for r in t.repeats {
            mp::write_array_len(w, 3)?;
            mp::write_uint(w, u64::from(r.start))?;
            mp::write_uint(w, u64::from(r.len))?;
            mp::write_uint(w, u64::from(r.count))?;
        }
    }
    map.close(w)
}

fn encode_image(w: &mut Cursor<'_>, img: &Image<'_>) -> R {
    let mut map = MapW::open(w)?;
    map.text(w, "p", img.path)?;
    map.text(w, "n", img.name)?;
    map.uint(w, "b", img.load_address)?;
    map.uint(w, "s", img.size)?;
    map.opt_sint(w, "sl", img.slide)?;
    if !img.id.is_empty() {
        map.bin(w, "id", img.id)?;
        map.uint(w, "k", u64::from(img.id_kind))?;
    }
    map.text(w, "a", img.arch)?;
    map.close(w)
}

/// Encodes as many images as fit (up to [`IMAGES_PER_SECTION`]); returns (payload length, images written).
fn encode_image_chunk(w: &mut Cursor<'_>, first_index: u32, images: &[Image<'_>]) -> (usize, usize) {
    let head = (|| -> Result<usize, NoRoom> {
        let mut map = MapW::open(w)?;
        map.uint(w, "i", u64::from(first_index))?;
        map.key(w, "l")?;
        map.close(w)?;
        // array16 with a count patched below.
        let at = w.pos;
        std::io::Write::write_all(w, &[0xdc, 0, 0])?;
        Ok(at)
    })();
    let Ok(count_at) = head else { return (0, 0) };
    let mut n = 0usize;
    let mut good_len = w.pos;
    for img in images.iter().take(IMAGES_PER_SECTION) {
        if encode_image(w, img).is_err() {
            break;
        }
        n += 1;
        good_len = w.pos;
    }
    let count = u16::try_from(n).unwrap_or(u16::MAX).to_be_bytes();
    if w.patch(count_at + 1, &count).is_err() {
        return (0, 0);
    }
    (good_len, n)
}

fn encode_messages(w: &mut Cursor<'_>, messages: &[Message<'_>]) -> R {
    let mut map = MapW::open(w)?;
    map.key(w, "l")?;
    let n = u32::try_from(messages.len()).map_err(|_| NoRoom)?;
    mp::write_array_len(w, n)?;
    for m in messages {
        let mut mm = MapW::open(w)?;
        mm.text(w, "s", m.source)?;
        mm.key(w, "m")?;
        write_text(w, m.text)?;
        mm.close(w)?;
    }
    map.close(w)
}

fn encode_user(w: &mut Cursor<'_>, pairs: &[KeyValue<'_>]) -> R {
    let mut map = MapW::open(w)?;
    map.key(w, "kv")?;
    let n = u32::try_from(pairs.len()).map_err(|_| NoRoom)?;
    mp::write_map_len(w, n)?;
    for kv in pairs {
        write_text(w, kv.key)?;
        write_text(w, kv.value)?;
    }
    map.close(w)
}

fn encode_end(w: &mut Cursor<'_>, sections: u32, offset: u64) -> R {
    let mut map = MapW::open(w)?;
    map.uint(w, "n", u64::from(sections))?;
    map.uint(w, "o", offset)?;
    map.close(w)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_utf8_is_replaced_not_dropped() {
        let mut buf = [0u8; 64];
        let mut w = Cursor::new(&mut buf);
        write_text(&mut w, b"ab\xffc\xe2\x82").expect("fits");
        let n = w.pos;
        let s: String = rmp_serde::from_slice(&buf[..n]).expect("valid str");
        assert_eq!(s, "ab?c??");
    }

    #[test]
    fn no_room_is_an_error_not_a_panic() {
        let mut scratch = [0u8; 8];
        let mut out = [0u8; 10];
        let r = Encoder::begin(SliceSink::new(&mut out), &mut scratch);
        assert_eq!(r.err(), Some(EncodeError::Sink(SinkError::Full)));

        let mut out = [0u8; 4096];
        let mut enc = Encoder::begin(SliceSink::new(&mut out), &mut scratch).expect("header fits");
        let e = enc.meta(&Meta { handler_version: b"a long version string", ..Meta::default() });
        assert_eq!(e, Err(EncodeError::ScratchTooSmall(SectionKind::Meta)));
    }

    #[test]
    fn thread_frames_halve_until_they_fit() {
        let frames: Vec<u64> = (0..1000).map(|i| 0x1_0000_0000 + i).collect();
        let mut scratch = vec![0u8; 2048];
        let mut enc = Encoder::begin(Vec::new(), &mut scratch).expect("begin");
        enc.thread(&Thread { index: 0, captured: true, frames: &frames, ..Thread::default() }).expect("fits");
        let out = enc.finish().expect("finish");
        let d = crate::decode(&out).expect("decodes");
        let t = &d.report.threads[0];
        assert!(t.frames_truncated);
        assert!(t.frames.len() >= 100 && t.frames.len() < 1000, "{}", t.frames.len());
        assert_eq!(t.frames[..], frames[..t.frames.len()]);
    }

    #[test]
    fn images_split_into_chunks() {
        let imgs: Vec<Image<'_>> = (0..150)
            .map(|i| Image { path: b"/usr/lib/libx.so", load_address: i, size: 1, ..Image::default() })
            .collect();
        let mut scratch = vec![0u8; 65536];
        let mut enc = Encoder::begin(Vec::new(), &mut scratch).expect("begin");
        enc.images(0, &imgs).expect("images");
        let out = enc.finish().expect("finish");
        let d = crate::decode(&out).expect("decodes");
        assert!(d.is_intact(), "{:?}", d.problems);
        assert_eq!(d.sections.iter().filter(|s| s.kind == SectionKind::Images).count(), 3);
        let addrs: Vec<u64> = d.report.images.iter().map(|i| i.load_address).collect();
        assert_eq!(addrs, (0..150).collect::<Vec<u64>>());
    }
}
