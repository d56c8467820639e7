//! The decoded report: owned, launch-time types (they allocate; never use them after a fault).
//!
//! `Serialize` gives the stable JSON shape that `viewer --format json` prints: descriptive snake_case keys, ids as
//! lowercase hex strings. The on-disk keys are the short ones of `SCHEMA.md`; see [`crate::decode()`].

use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt;

/// A whole report as far as it could be decoded. Sections that were lost leave their parts empty or `None`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Report {
    /// Format version the file declared: `(major, minor)`.
    pub format_version: (u16, u16),
    /// Report id, capture time, process, OS, hardware (META section).
    pub meta: Option<Meta>,
    /// The exception (EXCEPTION section).
    pub exception: Option<Exception>,
    /// Threads sorted by index.
    pub threads: Vec<Thread>,
    /// Images sorted by index.
    pub images: Vec<Image>,
    /// Application-specific messages.
    pub messages: Vec<Message>,
    /// User key/values.
    pub user: BTreeMap<String, String>,
}

impl Report {
    /// The crashed thread: the one the exception names, else the one flagged `crashed`.
    pub fn crashed_thread(&self) -> Option<&Thread> {
        let by_index = self
            .exception
            .as_ref()
            .and_then(|e| e.crashed_thread)
            .and_then(|i| self.threads.iter().find(|t| t.index == i));
        by_index.or_else(|| self.threads.iter().find(|t| t.crashed))
    }

    /// The image whose text range `[load_address, load_address + size)` holds `address` (images known by name
    /// only, [`Image::name_only`], have no range and never match).
    pub fn image_for(&self, address: u64) -> Option<&Image> {
        self.images
            .iter()
            .find(|i| !i.name_only && address >= i.load_address && address - i.load_address < i.size.max(1))
    }
}

/// A 16-byte report id, shown as an uppercase dashed UUID like Apple's Incident Identifier.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ReportId(pub [u8; 16]);

impl fmt::Display for ReportId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02X}")?;
        }
        Ok(())
    }
}

impl Serialize for ReportId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

/// META: who crashed, where, when.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Meta {
    /// Report id.
    pub report_id: ReportId,
    /// Capture time, nanoseconds since the Unix epoch.
    pub capture_time_ns: Option<u64>,
    /// Version of the handler that wrote the report.
    pub handler_version: Option<String>,
    /// CPU architecture: "arm64", "arm64e", "x86_64".
    pub arch: Option<String>,
    /// Hardware model.
    pub hardware_model: Option<String>,
    /// Operating system.
    pub os: Os,
    /// The crashed process.
    pub process: Process,
    /// Number of threads the handler found.
    pub thread_count: Option<u32>,
    /// Number of images in the image list.
    pub image_count: Option<u32>,
    /// True for a minimal report written after a second fault inside the handler.
    pub minimal: bool,
    /// How the report was made.
    pub note: Option<String>,
    /// Present for a non-fatal report (format 2.3): the process went on.
    pub non_fatal: Option<NonFatal>,
}

/// What makes a report non-fatal (META `nf`, format 2.3, SCHEMA.md §4.1.1).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NonFatal {
    /// Why it was made: `hang`, `manual`, `app` (readers keep other values as written).
    pub kind: String,
    /// The reason in words.
    pub reason: Option<String>,
    /// How long the stall had lasted when the threads were captured, nanoseconds (hangs).
    pub duration_ns: Option<u64>,
    /// Index of the thread the report is about.
    pub thread: Option<u32>,
}

/// Operating system.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Os {
    /// "iPhone OS", "macOS", "Linux".
    pub name: Option<String>,
    /// Version ("15.5", or the Linux kernel release).
    pub version: Option<String>,
    /// Build ("19F77", or the Linux kernel version string).
    pub build: Option<String>,
}

impl Os {
    /// True when the report comes from an Apple OS (signal numbers use Darwin's numbering).
    pub fn is_apple(&self) -> bool {
        !matches!(self.name.as_deref(), Some("Linux") | Some("Android"))
    }
}

/// The crashed process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Process {
    /// Process id.
    pub pid: Option<u32>,
    /// Parent process id.
    pub parent_pid: Option<u32>,
    /// Executable name.
    pub name: Option<String>,
    /// Executable path.
    pub path: Option<String>,
    /// Parent process name.
    pub parent_name: Option<String>,
    /// Bundle identifier.
    pub bundle_id: Option<String>,
    /// `CFBundleShortVersionString`.
    pub short_version: Option<String>,
    /// `CFBundleVersion`.
    pub build_version: Option<String>,
    /// Launch time, nanoseconds since the Unix epoch.
    pub launch_time_ns: Option<u64>,
}

/// The exception that ended the process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Exception {
    /// Mach exception type (XNU `exception_types.h`).
    pub mach_type: Option<u32>,
    /// Mach exception codes.
    pub mach_codes: Vec<i64>,
    /// Signal number, in the numbering of the OS in [`Meta::os`].
    pub signal: Option<i32>,
    /// `si_code`.
    pub si_code: Option<i32>,
    /// Fault address.
    pub fault_address: Option<u64>,
    /// Index of the crashed thread in the thread list.
    pub crashed_thread: Option<u32>,
    /// The uncaught language exception or panic that ended the process (format 2.1; `None` in older files).
    pub language: Option<LanguageException>,
}

/// The uncaught language exception or panic that ended the process (EXCEPTION `lx`, SCHEMA.md §4.2.1).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LanguageException {
    /// What raised it: `objc`, `c++`, `rust` (other values are kept as written).
    pub kind: String,
    /// Type: the `NSException` name, or the C++ type as `std::type_info::name` gives it (mangled).
    pub type_name: Option<String>,
    /// Reason: `NSException.reason`, `std::exception::what()`, the panic message.
    pub reason: Option<String>,
    /// Source location `file:line:column` (Rust panics).
    pub location: Option<String>,
    /// A bounded part of the `NSException`'s `userInfo`, one `key: value` line each.
    pub user_info: Option<String>,
    /// Kernel thread id of the thread that threw or panicked.
    pub thread_id: Option<u64>,
    /// The stack where it was thrown: raw return addresses, innermost first (empty when not recorded).
    pub backtrace: Vec<u64>,
}

/// One register value with its name.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Register {
    /// Name, e.g. "x0", "pc", "rip".
    pub name: String,
    /// Value.
    pub value: u64,
}

/// How the handler found a frame (`THREAD.tr`, SCHEMA.md §4.3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameTrust {
    /// The thread's saved registers: an exact pc (frame 0, or the interrupted pc after a signal frame), not a
    /// return address.
    Context,
    /// Unwind tables (DWARF CFI, or Apple compact unwind).
    Cfi,
    /// A frame-pointer record.
    FramePointer,
    /// A stack scan: a word that looks like a return address (least trustworthy).
    Scan,
    /// The link register of frame 0 (arm64 leaf function).
    LinkRegister,
    /// A logical caller from a Swift async context chain (format 2.2): the resume function of the caller's async
    /// context, stored as its entry address + 1, so it is looked up like a return address (address − 1). It follows
    /// the frame of the async function whose context it is; the OS stack's frames (the executor) come after the
    /// chain.
    Async,
    /// A value this version does not know.
    Unknown,
}

impl FrameTrust {
    /// The value of one `tr` byte.
    pub fn from_byte(b: u8) -> FrameTrust {
        match b {
            1 => FrameTrust::Context,
            2 => FrameTrust::Cfi,
            3 => FrameTrust::FramePointer,
            4 => FrameTrust::Scan,
            5 => FrameTrust::LinkRegister,
            6 => FrameTrust::Async,
            _ => FrameTrust::Unknown,
        }
    }

    /// The `tr` byte of this value (0 for [`FrameTrust::Unknown`]).
    pub fn to_byte(self) -> u8 {
        match self {
            FrameTrust::Context => 1,
            FrameTrust::Cfi => 2,
            FrameTrust::FramePointer => 3,
            FrameTrust::Scan => 4,
            FrameTrust::LinkRegister => 5,
            FrameTrust::Async => 6,
            FrameTrust::Unknown => 0,
        }
    }

    /// Whether the address is an exact pc (symbolicate it as is) rather than a return address (look up address − 1).
    pub fn is_exact_pc(self) -> bool {
        self == FrameTrust::Context
    }
}

/// A repeating run of frames left out of [`Thread::frames`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Repeat {
    /// Index in `frames` where the run starts.
    pub start: u32,
    /// Run length in frames.
    pub len: u32,
    /// Further occurrences left out.
    pub count: u32,
}

/// One thread.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Thread {
    /// Index in the report's thread list.
    pub index: u32,
    /// Kernel thread id.
    pub id: Option<u64>,
    /// Thread name.
    pub name: Option<String>,
    /// Dispatch queue label.
    pub queue: Option<String>,
    /// True for the crashed thread.
    pub crashed: bool,
    /// False when the thread could not be captured.
    pub captured: bool,
    /// Why it was not captured.
    pub not_captured_reason: Option<String>,
    /// Register set name ("arm64", "x86_64").
    pub register_set: Option<String>,
    /// Captured registers in storage order (values that were not captured are absent).
    pub registers: Vec<Register>,
    /// Raw frame addresses, frame 0 = PC.
    pub frames: Vec<u64>,
    /// How each frame was found, index-aligned with `frames` (empty when the report does not say; shorter when
    /// only the first frames say).
    pub frame_trust: Vec<FrameTrust>,
    /// True when the walk stopped at the frame cap.
    pub frames_truncated: bool,
    /// Runs of frames left out of `frames`.
    pub repeats: Vec<Repeat>,
}

impl Default for Thread {
    fn default() -> Self {
        Thread {
            index: 0,
            id: None,
            name: None,
            queue: None,
            crashed: false,
            captured: true,
            not_captured_reason: None,
            register_set: None,
            registers: Vec::new(),
            frames: Vec::new(),
            frame_trust: Vec::new(),
            frames_truncated: false,
            repeats: Vec::new(),
        }
    }
}

impl Thread {
    /// The frames with every repeat record expanded: each run `frames[start..start + len]` occurs `count` more times
    /// right after its stored copy (SCHEMA.md §4.3 `rep`). Malformed or overlapping records are skipped, so the
    /// frames as stored are still returned.
    pub fn expanded_frames(&self) -> Vec<u64> {
        let mut reps = self.repeats.clone();
        reps.sort_by_key(|r| r.start);
        let n = self.frames.len();
        let mut out = Vec::with_capacity(n);
        let mut next = 0usize;
        for r in &reps {
            let start = r.start as usize;
            let end = start.saturating_add(r.len as usize).min(n);
            if start < next || start > n {
                continue;
            }
            out.extend_from_slice(&self.frames[next..end]);
            for _ in 0..r.count {
                out.extend_from_slice(&self.frames[start..end]);
            }
            next = end;
        }
        out.extend_from_slice(&self.frames[next.min(n)..]);
        out
    }

    /// The value of a named register.
    pub fn register(&self, name: &str) -> Option<u64> {
        self.registers.iter().find(|r| r.name == name).map(|r| r.value)
    }
}

/// How an image identifies its build.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum ImageId {
    /// Mach-O `LC_UUID`.
    Uuid([u8; 16]),
    /// GNU build ID (`NT_GNU_BUILD_ID`), usually 20 bytes.
    BuildId(Vec<u8>),
}

impl ImageId {
    /// The id bytes.
    pub fn bytes(&self) -> &[u8] {
        match self {
            ImageId::Uuid(b) => b,
            ImageId::BuildId(b) => b,
        }
    }

    /// Lowercase hex without dashes: Apple's Binary Images form, and the `.build-id` directory form.
    pub fn to_hex(&self) -> String {
        self.bytes().iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl Serialize for ImageId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(2))?;
        match self {
            ImageId::Uuid(_) => m.serialize_entry("kind", "uuid")?,
            ImageId::BuildId(_) => m.serialize_entry("kind", "build_id")?,
        }
        m.serialize_entry("hex", &self.to_hex())?;
        m.end()
    }
}

/// One image (executable or library).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Image {
    /// Index in the image list.
    pub index: u32,
    /// Image name (last path component unless given).
    pub name: String,
    /// Path.
    pub path: Option<String>,
    /// Load address.
    pub load_address: u64,
    /// Size in bytes of the text range starting at the load address.
    pub size: u64,
    /// Slide / load bias.
    pub slide: Option<i64>,
    /// UUID or build ID.
    pub id: Option<ImageId>,
    /// Architecture, when it differs from the report's.
    pub arch: Option<String>,
    /// True for an image known by its path only (an IMAGE NAMES entry, SCHEMA.md §4.4.1: no frame or register of
    /// the crashed thread pointed into it): `load_address`, `size`, `slide`, `id` and `arch` are unknown (0 and
    /// `None`). Such images are not Binary Images in Apple's sense (they are left out of Apple's `usedImages`).
    /// Left out of the JSON when false.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub name_only: bool,
}

/// An application-specific message.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Message {
    /// Where it came from (image name, "panic", ...).
    pub source: Option<String>,
    /// The text.
    pub text: String,
}
