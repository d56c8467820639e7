//! What each section holds (the borrowed input types the handler fills from its preallocated tables) and how it
//! is written as a MessagePack payload (SCHEMA.md §4).

use super::msgpack::{leb128_len, Cursor, MapW, NoRoom, R};
use crate::keys;

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
    /// Present for a non-fatal report (format 2.3, SCHEMA.md §4.1.1): the process went on.
    pub non_fatal: Option<NonFatal<'a>>,
}

/// What makes a report non-fatal (META `nf`, format 2.3, SCHEMA.md §4.1.1).
#[derive(Clone, Copy, Debug, Default)]
pub struct NonFatal<'a> {
    /// Why it was made: `hang`, `manual`, `app` ([`NON_FATAL_HANG`], [`NON_FATAL_MANUAL`], [`NON_FATAL_APP`]).
    pub kind: &'a [u8],
    /// The reason in words (empty: none).
    pub reason: &'a [u8],
    /// How long the stall had lasted when the threads were captured, nanoseconds (hangs).
    pub duration_ns: Option<u64>,
    /// Index of the thread the report is about.
    pub thread: Option<u32>,
}

/// [`NonFatal::kind`] of a report the hang watchdog wrote: the main thread made no progress for longer than the
/// threshold.
pub const NON_FATAL_HANG: &[u8] = b"hang";
/// [`NonFatal::kind`] of a report the app asked for without a reason of its own.
pub const NON_FATAL_MANUAL: &[u8] = b"manual";
/// [`NonFatal::kind`] of a report the app asked for with its own reason text.
pub const NON_FATAL_APP: &[u8] = b"app";

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
    /// The uncaught language exception or panic that ended the process (format 2.1, SCHEMA.md §4.2.1).
    pub language: Option<LanguageException<'a>>,
}

/// The uncaught language exception or panic that ended the process: EXCEPTION's `lx` map (format 2.1). Empty text
/// fields and an empty backtrace are left out.
#[derive(Clone, Copy, Debug, Default)]
pub struct LanguageException<'a> {
    /// What raised it: `objc`, `c++` or `rust` ([`LANGUAGE_OBJC`], [`LANGUAGE_CXX`], [`LANGUAGE_RUST`]).
    pub kind: &'a [u8],
    /// Type: the `NSException` name, or the C++ type as `std::type_info::name` gives it (mangled).
    pub type_name: &'a [u8],
    /// Reason: `NSException.reason`, `std::exception::what()`, the panic message.
    pub reason: &'a [u8],
    /// Source location `file:line:column` (Rust panics).
    pub location: &'a [u8],
    /// A bounded part of the `NSException`'s `userInfo`, one `key: value` line each.
    pub user_info: &'a [u8],
    /// Kernel thread id of the thread that threw or panicked.
    pub thread_id: Option<u64>,
    /// The stack where it was thrown: return addresses, innermost first (`callStackReturnAddresses`).
    pub backtrace: &'a [u64],
}

/// [`LanguageException::kind`] of an uncaught Objective-C exception (`NSException`).
pub const LANGUAGE_OBJC: &[u8] = b"objc";
/// [`LanguageException::kind`] of an uncaught C++ exception (or `std::terminate` without one).
pub const LANGUAGE_CXX: &[u8] = b"c++";
/// [`LanguageException::kind`] of a Rust panic.
pub const LANGUAGE_RUST: &[u8] = b"rust";

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

/// Finds the image that holds an address, so that frames are written relative to their image (SCHEMA.md §4.3.2).
///
/// Implementations used after a fault must not allocate, lock or panic: the handler's is a binary search over its
/// preallocated image list that also marks the images it finds as used.
pub trait ImageLookup: core::fmt::Debug {
    /// `(list index, load address)` of the image whose text range holds `address`; `None` when none does (the
    /// frame is then written as an absolute address). The load address must not exceed `address`.
    fn image_at(&self, address: u64) -> Option<(u32, u64)>;
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
    /// `model::FrameTrust` values (1 context, 2 CFI, 3 frame pointer, 4 scan, 5 link register, 6 Swift async
    /// resume function); values above 7 are written as 0 (unknown).
    pub trust: &'a [u8],
    /// Where each frame's image is; `None`: every frame is written as an absolute address.
    pub images: Option<&'a dyn ImageLookup>,
}

/// Positions in the register set `set` (see [`crate::regs`]) of the registers kept for threads other than the
/// crashed one (SCHEMA.md §4.3): pc, sp and fp, and lr on arm64, in ascending order; empty for an unknown set.
/// Signal-safe.
pub fn frame_registers(set: &[u8]) -> &'static [usize] {
    match set {
        // fp (x29), lr (x30), sp, pc.
        b"arm64" => &[29, 30, 31, 32],
        // rbp, rsp, rip.
        b"x86_64" => &[6, 7, 16],
        _ => &[],
    }
}

/// An image with its index in the image list, for [`super::Encoder::indexed_images`].
#[derive(Clone, Copy, Debug, Default)]
pub struct IndexedImage<'a> {
    /// Index of the image in the report's image list (META `ic` counts the list).
    pub index: u32,
    /// The image.
    pub image: Image<'a>,
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

/// Most entries one IMAGE NAMES section holds (SCHEMA.md §4.4.1).
pub const IMAGE_NAMES_PER_SECTION: usize = 128;

pub(super) fn encode_meta(w: &mut Cursor<'_>, m: &Meta<'_>) -> R {
    let mut map = MapW::open(w)?;
    map.bin(w, keys::meta::ID, &m.report_id)?;
    map.uint(w, keys::meta::TIME, m.capture_time_ns)?;
    map.text(w, keys::meta::HANDLER_VERSION, m.handler_version)?;
    map.text(w, keys::meta::ARCH, m.arch)?;
    map.text(w, keys::meta::HARDWARE_MODEL, m.hardware_model)?;

    map.key(w, keys::meta::OS)?;
    let mut os = MapW::open(w)?;
    os.text(w, keys::os::NAME, m.os.name)?;
    os.text(w, keys::os::VERSION, m.os.version)?;
    os.text(w, keys::os::BUILD, m.os.build)?;
    os.close(w)?;

    map.key(w, keys::meta::PROCESS)?;
    let p = &m.process;
    let mut pm = MapW::open(w)?;
    pm.opt_uint(w, keys::process::PID, p.pid.map(u64::from))?;
    pm.opt_uint(w, keys::process::PARENT_PID, p.parent_pid.map(u64::from))?;
    pm.text(w, keys::process::NAME, p.name)?;
    pm.text(w, keys::process::PATH, p.path)?;
    pm.text(w, keys::process::PARENT_NAME, p.parent_name)?;
    pm.text(w, keys::process::BUNDLE_ID, p.bundle_id)?;
    pm.text(w, keys::process::SHORT_VERSION, p.short_version)?;
    pm.text(w, keys::process::BUILD_VERSION, p.build_version)?;
    pm.opt_uint(w, keys::process::LAUNCH_TIME, p.launch_time_ns)?;
    pm.close(w)?;

    map.opt_uint(w, keys::meta::THREAD_COUNT, m.thread_count.map(u64::from))?;
    map.opt_uint(w, keys::meta::IMAGE_COUNT, m.image_count.map(u64::from))?;
    map.flag(w, keys::meta::MINIMAL, m.minimal)?;
    map.text(w, keys::meta::NOTE, m.note)?;
    if let Some(nf) = &m.non_fatal {
        map.key(w, keys::meta::NON_FATAL)?;
        let mut n = MapW::open(w)?;
        n.key(w, keys::non_fatal::KIND)?;
        w.text(nf.kind)?;
        n.text(w, keys::non_fatal::REASON, nf.reason)?;
        n.opt_uint(w, keys::non_fatal::DURATION, nf.duration_ns)?;
        n.opt_uint(w, keys::non_fatal::THREAD, nf.thread.map(u64::from))?;
        n.close(w)?;
    }
    map.close(w)
}

pub(super) fn encode_exception(w: &mut Cursor<'_>, e: &Exception<'_>) -> R {
    let mut map = MapW::open(w)?;
    map.opt_uint(w, keys::exception::MACH_TYPE, e.mach_type.map(u64::from))?;
    if !e.mach_codes.is_empty() {
        map.key(w, keys::exception::MACH_CODES)?;
        w.array_len(e.mach_codes.len())?;
        for c in e.mach_codes {
            w.sint(*c)?;
        }
    }
    map.opt_sint(w, keys::exception::SIGNAL, e.signal.map(i64::from))?;
    map.opt_sint(w, keys::exception::SI_CODE, e.si_code.map(i64::from))?;
    map.opt_uint(w, keys::exception::FAULT_ADDRESS, e.fault_address)?;
    map.opt_uint(w, keys::exception::CRASHED_THREAD, e.crashed_thread.map(u64::from))?;
    if let Some(lx) = &e.language {
        map.key(w, keys::exception::LANGUAGE_EXCEPTION)?;
        let mut m = MapW::open(w)?;
        m.key(w, keys::language_exception::KIND)?;
        w.text(lx.kind)?;
        m.text(w, keys::language_exception::TYPE, lx.type_name)?;
        m.text(w, keys::language_exception::REASON, lx.reason)?;
        m.text(w, keys::language_exception::LOCATION, lx.location)?;
        m.text(w, keys::language_exception::USER_INFO, lx.user_info)?;
        m.opt_uint(w, keys::language_exception::THREAD_ID, lx.thread_id)?;
        if !lx.backtrace.is_empty() {
            m.key(w, keys::language_exception::BACKTRACE)?;
            w.array_len(lx.backtrace.len())?;
            for a in lx.backtrace {
                w.uint(*a)?;
            }
        }
        m.close(w)?;
    }
    map.close(w)
}

pub(super) fn encode_thread(w: &mut Cursor<'_>, t: &Thread<'_>) -> R {
    let mut map = MapW::open(w)?;
    map.uint(w, keys::thread::INDEX, u64::from(t.index))?;
    map.opt_uint(w, keys::thread::ID, t.id)?;
    map.text(w, keys::thread::NAME, t.name)?;
    map.text(w, keys::thread::QUEUE, t.queue)?;
    map.flag(w, keys::thread::CRASHED, t.crashed)?;
    if !t.captured {
        map.key(w, keys::thread::CAPTURED)?;
        w.bool(false)?;
    }
    map.text(w, keys::thread::NOT_CAPTURED_REASON, t.reason)?;
    if !t.register_set.is_empty() {
        map.text(w, keys::thread::REGISTER_SET, t.register_set)?;
        map.key(w, keys::thread::REGISTERS)?;
        w.array_len(t.registers.len())?;
        for r in t.registers {
            match r {
                Some(v) => w.uint(*v)?,
                None => w.nil()?,
            }
        }
    }
    // SCHEMA.md §4.3.2: per frame, LEB128 tag ((image index + 1) << 3 | trust), then LEB128 offset or address.
    map.key(w, keys::thread::FRAMES_RELATIVE)?;
    let mut total = 0usize;
    for (k, f) in t.frames.iter().enumerate() {
        let (tag, value) = frame_code(t, k, *f);
        total = total.saturating_add(leb128_len(tag)).saturating_add(leb128_len(value));
    }
    w.bin_len(total)?;
    for (k, f) in t.frames.iter().enumerate() {
        let (tag, value) = frame_code(t, k, *f);
        w.leb128(tag)?;
        w.leb128(value)?;
    }
    map.flag(w, keys::thread::FRAMES_TRUNCATED, t.frames_truncated)?;
    if !t.repeats.is_empty() {
        map.key(w, keys::thread::REPEATS)?;
        w.array_len(t.repeats.len())?;
        for r in t.repeats {
            w.array_len(3)?;
            w.uint(u64::from(r.start))?;
            w.uint(u64::from(r.len))?;
            w.uint(u64::from(r.count))?;
        }
    }
    map.close(w)
}

/// The tag and value of frame `k` at `address` (SCHEMA.md §4.3.2).
fn frame_code(t: &Thread<'_>, k: usize, address: u64) -> (u64, u64) {
    let trust = t.trust.get(k).copied().filter(|b| *b <= 7).unwrap_or(0);
    let rel = t.images.and_then(|l| l.image_at(address)).and_then(|(index, load)| {
        let offset = address.checked_sub(load)?;
        Some((u64::from(index).saturating_add(1), offset))
    });
    match rel {
        Some((image_plus_one, offset)) => (image_plus_one.saturating_mul(8) | u64::from(trust), offset),
        None => (u64::from(trust), address),
    }
}

fn encode_image(w: &mut Cursor<'_>, index: u32, img: &Image<'_>) -> R {
    let mut map = MapW::open(w)?;
    map.uint(w, keys::image::INDEX, u64::from(index))?;
    map.text(w, keys::image::PATH, img.path)?;
    map.text(w, keys::image::NAME, img.name)?;
    map.uint(w, keys::image::LOAD_ADDRESS, img.load_address)?;
    map.uint(w, keys::image::SIZE, img.size)?;
    map.opt_sint(w, keys::image::SLIDE, img.slide)?;
    if !img.id.is_empty() {
        map.bin(w, keys::image::ID, img.id)?;
        map.uint(w, keys::image::ID_KIND, u64::from(img.id_kind))?;
    }
    map.text(w, keys::image::ARCH, img.arch)?;
    map.close(w)
}

/// Encodes as many images as fit (up to [`IMAGES_PER_SECTION`]) of the `count` that `get` gives (list index and
/// image of each); returns (payload length, images written).
pub(super) fn encode_image_chunk<'i>(
    w: &mut Cursor<'_>,
    count: usize,
    get: impl Fn(usize) -> Option<(u32, Image<'i>)>,
) -> (usize, usize) {
    let Some((first_index, _)) = get(0) else { return (0, 0) };
    let head = (|| -> Result<usize, NoRoom> {
        let mut map = MapW::open(w)?;
        map.uint(w, keys::images::FIRST_INDEX, u64::from(first_index))?;
        map.key(w, keys::images::LIST)?;
        map.close(w)?;
        // The image count is patched in below, when it is known.
        w.reserve_array16()
    })();
    let Ok(count_at) = head else { return (0, 0) };
    let mut n = 0usize;
    let mut good_len = w.pos;
    for k in 0..count.min(IMAGES_PER_SECTION) {
        let Some((index, img)) = get(k) else { break };
        if encode_image(w, index, &img).is_err() {
            break;
        }
        n = n.saturating_add(1);
        good_len = w.pos;
    }
    if w.patch_array16(count_at, n).is_err() {
        return (0, 0);
    }
    (good_len, n)
}

/// One IMAGE NAMES entry: list index and path.
pub(super) type NameEntry<'p> = (u32, &'p [u8]);

/// One IMAGE NAMES section (SCHEMA.md §4.4.1) starting with entry `first`, then entries from `rest` while they
/// fit, ascend and number at most [`IMAGE_NAMES_PER_SECTION`]. Returns the payload length and the entry that did
/// not go in (it starts the next section). [`NoRoom`] when not even `first` fits.
pub(super) fn encode_name_chunk<'p, I: Iterator<Item = NameEntry<'p>>>(
    w: &mut Cursor<'_>,
    first: NameEntry<'p>,
    rest: &mut I,
) -> Result<(usize, Option<NameEntry<'p>>), NoRoom> {
    let mut map = MapW::open(w)?;
    map.uint(w, keys::image_names::FIRST_INDEX, u64::from(first.0))?;
    map.key(w, keys::image_names::LIST)?;
    let bin_at = w.reserve_bin32()?;
    let mut next = first.0;
    let mut prev: &[u8] = &[];
    let mut n = 0usize;
    let mut item = Some(first);
    let mut left = None;
    while let Some((index, path)) = item {
        let Some(skip) = index.checked_sub(next).filter(|_| n < IMAGE_NAMES_PER_SECTION) else {
            left = item;
            break;
        };
        let shared = prev.iter().zip(path).take_while(|(a, b)| a == b).count();
        let suffix = path.get(shared..).unwrap_or(&[]);
        let at = w.pos;
        let written = (|| -> R {
            w.leb128(u64::from(skip))?;
            w.leb128(shared as u64)?;
            w.leb128(suffix.len() as u64)?;
            w.raw(suffix)
        })();
        if written.is_err() {
            if n == 0 {
                return Err(NoRoom);
            }
            w.pos = at;
            left = item;
            break;
        }
        n = n.saturating_add(1);
        next = index.saturating_add(1);
        prev = path;
        item = rest.next();
    }
    w.patch_bin32(bin_at)?;
    map.close(w)?;
    Ok((w.pos, left))
}

pub(super) fn encode_messages(w: &mut Cursor<'_>, messages: &[Message<'_>]) -> R {
    let mut map = MapW::open(w)?;
    map.key(w, keys::messages::LIST)?;
    w.array_len(messages.len())?;
    for m in messages {
        let mut mm = MapW::open(w)?;
        mm.text(w, keys::message::SOURCE, m.source)?;
        mm.key(w, keys::message::TEXT)?;
        w.text(m.text)?;
        mm.close(w)?;
    }
    map.close(w)
}

pub(super) fn encode_user(w: &mut Cursor<'_>, pairs: &[KeyValue<'_>]) -> R {
    let mut map = MapW::open(w)?;
    map.key(w, keys::user::VALUES)?;
    w.map_len(pairs.len())?;
    for kv in pairs {
        w.text(kv.key)?;
        w.text(kv.value)?;
    }
    map.close(w)
}

pub(super) fn encode_end(w: &mut Cursor<'_>, sections: u32, offset: u64) -> R {
    let mut map = MapW::open(w)?;
    map.uint(w, keys::end::SECTION_COUNT, u64::from(sections))?;
    map.uint(w, keys::end::OFFSET, offset)?;
    map.close(w)
}
