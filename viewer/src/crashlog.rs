//! The intermediate "crash log" model the renderer prints. Both inputs map into it (our reports in
//! [`crate::from_report`], Apple's `.ips` in [`crate::ips`]), so both get identical rendering rules. Every value is
//! already a display string or a plain number; the renderer only lays them out.
//!
//! `Serialize` gives the JSON of `viewer --format json` (snake_case keys; absent values are `null`).

use report_format::model::{FrameTrust, ImageId};
use serde::Serialize;

/// Which Apple layout to follow.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Flavor {
    /// iOS / iPadOS / tvOS / watchOS: 21-column header labels, `Thread N Crashed:`, `EOF` at the end.
    Ios,
    /// macOS: 23-column labels, `Thread N Crashed::`, bundle id and dashed UUID in Binary Images.
    Macos,
    /// Linux: the iOS layout with signals instead of Mach exceptions (see `viewer/README.md`).
    Linux,
}

impl Flavor {
    /// True when a report of this flavor comes from the kind of OS this program runs on, so the images' paths may
    /// name files of this machine (Linux reports on Linux, macOS reports on macOS; iOS reports only on iOS).
    pub fn is_host_os(self) -> bool {
        match self {
            Flavor::Linux => cfg!(any(target_os = "linux", target_os = "android")),
            Flavor::Macos => cfg!(target_os = "macos"),
            Flavor::Ios => cfg!(any(target_os = "ios", target_os = "tvos", target_os = "watchos")),
        }
    }
}

/// A whole crash log ready to print.
#[derive(Clone, Debug, Serialize)]
pub struct CrashLog {
    /// Layout family.
    pub flavor: Flavor,
    /// An app of the iOS Simulator (the `.ips` metadata's `platform` 7, dyld's `PLATFORM_IOSSIMULATOR`): the iOS
    /// layout, with macOS's thread headers and Binary Images lines (a macOS 15.2 Console translation of such a
    /// report, seen in a repository without a licence). Only with [`Flavor::Ios`].
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub simulator: bool,
    /// Header fields (process, OS, times).
    pub header: Header,
    /// Exception block.
    pub exception: ExceptionInfo,
    /// A non-fatal report's event (our reports' META `nf`, format 2.3): printed where a crash's exception lines
    /// are. `None` for a crash.
    pub event: Option<EventLog>,
    /// Index (in `threads`' numbering) of the thread that crashed.
    pub triggered_thread: Option<u32>,
    /// Application Specific Information lines.
    pub asi: Vec<String>,
    /// The uncaught language exception or panic (our reports' EXCEPTION `lx`; in the text it is an
    /// Application Specific Information line).
    pub language_exception: Option<LanguageExceptionLog>,
    /// Last Exception Backtrace: the frames where the uncaught exception was thrown, innermost first (`.ips`
    /// `lastExceptionBacktrace`; our reports' `lx.bt`). Empty: no such section. Not printed when
    /// [`CrashLog::asi_backtraces`] has entries (Apple prints only those then).
    pub last_exception_backtrace: Vec<FrameLog>,
    /// Application Specific Backtraces (`.ips` `asiBacktraces`, macOS): each entry one backtrace as the OS wrote it,
    /// one frame a line (`0   CoreFoundation   0x00007ff80f9ea6e3 __exceptionPreprocess + 242`), without a final
    /// newline. Printed as `Application Specific Backtrace N:` (N counted from 0) after Application Specific
    /// Information, and then instead of `Last Exception Backtrace:` (macOS 12.7.6 Console translation of an
    /// uncaught Objective-C exception in the corpus, whose `.ips` holds both). Empty: none.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub asi_backtraces: Vec<String>,
    /// User key/values the app set (our reports' USER section), in key order; printed under `User Values:`.
    pub user_values: Vec<(String, String)>,
    /// Kernel Triage text (`.ips` `ktriageinfo`), newline-terminated lines.
    pub kernel_triage: Option<String>,
    /// VM Region Info text (`.ips` `vmRegionInfo`).
    pub vm_region_info: Option<String>,
    /// Threads in report order.
    pub threads: Vec<ThreadLog>,
    /// Register state of the crashed thread.
    pub crashed_state: Option<ThreadState>,
    /// Instruction bytes around the crashed PC (macOS `.ips`).
    pub instruction_stream: Option<InstructionStream>,
    /// Images in report order.
    pub images: Vec<ImageLog>,
    /// External Modification Summary (macOS `.ips` `extMods`).
    pub ext_mods: Option<ExtMods>,
    /// VM Region Summary text (macOS `.ips` `vmSummary`).
    pub vm_summary: Option<String>,
    /// What is damaged or missing in the input, one plain sentence each.
    pub problems: Vec<String>,
    /// Symbolication notes (debug files not used and why).
    pub symbol_notes: Vec<String>,
}

/// Why a non-fatal report was made (the process went on): the lines printed instead of the exception block, after
/// the `Event:` and `Duration:` lines of Apple's hang reports (spindump's `.hang` files).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct EventLog {
    /// `hang`, `manual`, `app` (as the report says).
    pub kind: String,
    /// How long the main thread had made no progress, as spindump prints it: seconds with two decimals and `s`
    /// (`2.41s`); hangs only.
    pub duration: Option<String>,
    /// The reason in words.
    pub reason: Option<String>,
}

/// The uncaught language exception or panic that ended the process.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct LanguageExceptionLog {
    /// `objc`, `c++` or `rust`.
    pub kind: String,
    /// Type as recorded (C++: mangled, `St13runtime_error`; Objective-C: the exception name).
    pub type_name: Option<String>,
    /// Type for display (C++ demangled: `std::runtime_error`).
    pub type_display: Option<String>,
    /// Reason: `NSException.reason`, `what()`, the panic message.
    pub reason: Option<String>,
    /// Source location `file:line:column` (Rust panics).
    pub location: Option<String>,
    /// Bounded `userInfo` text (Objective-C).
    pub user_info: Option<String>,
    /// Kernel thread id of the thread that threw or panicked.
    pub thread_id: Option<u64>,
}

impl LanguageExceptionLog {
    /// The Application Specific Information line: Apple's CoreFoundation wording for Objective-C
    /// (`*** Terminating app due to uncaught exception 'Name', reason: '…'`), libc++abi's for C++
    /// (`terminating due to uncaught exception of type std::runtime_error: …`), std's for a Rust panic
    /// (`panicked at src/main.rs:3:5:` then the message on the next line).
    pub fn asi_line(&self) -> String {
        let reason = self.reason.as_deref().unwrap_or("");
        let ty = self.type_display.as_deref().or(self.type_name.as_deref());
        match self.kind.as_str() {
            "objc" => format!(
                "*** Terminating app due to uncaught exception '{}', reason: '{reason}'",
                ty.unwrap_or("NSException")
            ),
            "c++" => match ty {
                Some(t) if reason.is_empty() => format!("terminating due to uncaught exception of type {t}"),
                Some(t) => format!("terminating due to uncaught exception of type {t}: {reason}"),
                None if reason.is_empty() => "terminating".to_string(),
                None => reason.to_string(),
            },
            "rust" => match &self.location {
                Some(l) => format!("panicked at {l}:\n{reason}"),
                None => format!("panicked:\n{reason}"),
            },
            other => format!("{other} exception: {}{reason}", ty.map(|t| format!("{t}: ")).unwrap_or_default()),
        }
    }
}

/// Header fields; each is omitted from the text when `None`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Header {
    /// Incident Identifier (uppercase dashed UUID).
    pub incident: Option<String>,
    /// CrashReporter Key (iOS) / Anonymous UUID (macOS).
    pub crash_reporter_key: Option<String>,
    /// Hardware Model, e.g. `iPhone14,2`.
    pub hardware_model: Option<String>,
    /// Process name.
    pub process_name: Option<String>,
    /// Process id.
    pub pid: Option<u64>,
    /// Executable path.
    pub path: Option<String>,
    /// Bundle identifier (Identifier line).
    pub identifier: Option<String>,
    /// `CFBundleShortVersionString`.
    pub short_version: Option<String>,
    /// `CFBundleVersion`.
    pub bundle_version: Option<String>,
    /// Code Type without the `(Native)` suffix: `ARM-64`, `X86-64`, `ARM`, `X86`.
    pub code_type: Option<String>,
    /// True when the process ran translated (Rosetta).
    pub translated: bool,
    /// Role, e.g. `Foreground`.
    pub role: Option<String>,
    /// Parent process name.
    pub parent_name: Option<String>,
    /// Parent process id.
    pub parent_pid: Option<u64>,
    /// Responsible process name (macOS).
    pub responsible_name: Option<String>,
    /// Responsible process id (macOS).
    pub responsible_pid: Option<u64>,
    /// User ID (macOS).
    pub user_id: Option<u64>,
    /// Coalition name.
    pub coalition_name: Option<String>,
    /// Coalition id.
    pub coalition_id: Option<u64>,
    /// Date/Time, already formatted (`2022-08-04 01:11:01.2455 +0900`).
    pub date_time: Option<String>,
    /// Launch Time, already formatted.
    pub launch_time: Option<String>,
    /// OS Version, e.g. `iPhone OS 15.5 (19F77)`.
    pub os_version: Option<String>,
    /// Release Type, e.g. `User`.
    pub release_type: Option<String>,
    /// Baseband Version.
    pub baseband_version: Option<String>,
    /// Report Version (`104` iOS, `12` macOS).
    pub report_version: Option<String>,
    /// Time Awake Since Boot in seconds (macOS).
    pub uptime_seconds: Option<u64>,
    /// System Integrity Protection state (macOS).
    pub sip: Option<String>,
    /// Sleep/wake cycle identifier (`.ips` `sleepWakeUUID`, macOS).
    pub sleep_wake_uuid: Option<String>,
    /// Seconds since the last wake from sleep (`.ips` `wakeTime`, macOS).
    pub wake_time_seconds: Option<u64>,
    /// The T2 chip's bridgeOS, `train (build)` (`.ips` `bridgeVersion`, Intel Macs with a T2).
    pub bridge_os_version: Option<String>,
    /// App Store item ID (`.ips` `storeInfo.itemID`; App Store builds only).
    pub app_item_id: Option<String>,
    /// App Store version ID (`.ips` `storeInfo.softwareVersionExternalIdentifier`; App Store builds only).
    pub app_external_id: Option<String>,
    /// Build of the App Store tools that processed the app (`.ips` `bundleInfo.DTAppStoreToolsBuild`; App Store
    /// and TestFlight builds only), printed as iOS's `AppStoreTools:` line.
    pub app_store_tools: Option<String>,
}

/// The exception block.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ExceptionInfo {
    /// Exception Type, complete: `EXC_BAD_ACCESS (SIGSEGV)`, `SIGSEGV (SEGV_MAPERR)` on Linux.
    pub exception_type: Option<String>,
    /// Exception Codes, complete: `0x0000000000000001, 0x00000001ad98ab74`.
    pub codes: Option<String>,
    /// Exception Subtype (readable codes): `KERN_INVALID_ADDRESS at 0x0000000000000001`.
    pub subtype: Option<String>,
    /// Exception Message.
    pub message: Option<String>,
    /// Exception Note, e.g. `EXC_CORPSE_NOTIFY`.
    pub note: Option<String>,
    /// Termination namespace, e.g. `SIGNAL`.
    pub termination_namespace: Option<String>,
    /// Termination code.
    pub termination_code: Option<u64>,
    /// Termination indicator, e.g. `Trace/BPT trap: 5`.
    pub termination_indicator: Option<String>,
    /// Lines printed under `Termination Reason:`: the `.ips` `termination.reasons` then `termination.details`, e.g.
    /// `Library not loaded: ...` and `(terminated at launch; ignore backtrace)` (macOS), or TCC's explanation (iOS).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub termination_lines: Vec<String>,
    /// Terminating Process, complete: `exc handler [1730]`.
    pub terminating_process: Option<String>,
}

/// One thread.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ThreadLog {
    /// Index in the report's thread list (the `N` of `Thread N`).
    pub index: u32,
    /// Kernel thread id (Mach thread id / Linux tid), when known; `.ips` `id`. Not printed in the text.
    pub id: Option<u64>,
    /// Thread name.
    pub name: Option<String>,
    /// Dispatch queue label.
    pub queue: Option<String>,
    /// True for the crashed thread.
    pub crashed: bool,
    /// Frames, one per printed line (inlined frames included).
    pub frames: Vec<FrameLog>,
    /// Extra lines printed after the frames (not captured, truncated, repeats), without indentation.
    pub notes: Vec<String>,
}

/// One printed frame line.
#[derive(Clone, Debug, Default, Serialize)]
pub struct FrameLog {
    /// Raw frame address (the return address for callers).
    pub address: u64,
    /// Index into [`CrashLog::images`], `None` when no image holds the address.
    pub image: Option<usize>,
    /// Symbol, when known.
    pub symbol: Option<SymbolInfo>,
    /// True for a line describing a function inlined at this address (printed before its caller).
    pub inlined: bool,
    /// Position of the frame in the captured stack (0 = the PC). Symbol lookup uses `address - 1` when it is not 0,
    /// unless `trust` says the address is an exact pc.
    pub stack_index: usize,
    /// How the handler found the frame (our reports, format 1.1 and later); `None` when the source does not say.
    /// Swift async frames ([`FrameTrust::Async`], format 2.2) are printed like any other frame (Apple's reports have
    /// none); JSON output keeps this mark.
    pub trust: Option<FrameTrust>,
}

impl FrameLog {
    /// Whether symbol lookup uses `address - 1` (a return address: the call instruction is before it) rather than
    /// the address itself (frame 0, or a pc restored from a signal frame).
    pub fn is_return_address(&self) -> bool {
        self.stack_index > 0 && !self.trust.is_some_and(FrameTrust::is_exact_pc)
    }
}

/// A resolved symbol for a frame.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SymbolInfo {
    /// Demangled function name.
    pub name: String,
    /// Decimal offset of the frame address from the function (or inlined range) start, when known.
    pub offset: Option<u64>,
    /// Source file name as recorded in the debug info (Apple prints the last path component).
    pub file: Option<String>,
    /// True when `file` is already the text Apple prints (an `.ips` frame's `sourceFile`), so it is printed as it is
    /// rather than reduced to its last path component: Apple's translation prints `sourceFile` unchanged, also
    /// `/<compiler-generated>` (macOS 26.4.1 Console report in the corpus). Not part of the JSON output.
    #[serde(skip)]
    pub file_verbatim: bool,
    /// Source line (0 when the line is unknown but the file is).
    pub line: Option<u64>,
}

/// The register block of the crashed thread.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ThreadState {
    /// Thread index the state belongs to.
    pub thread: u32,
    /// Register set: `arm64`, `x86_64` or another name (printed generically).
    pub register_set: String,
    /// Named values in set order (missing ones are not listed).
    pub registers: Vec<(String, u64)>,
    /// Description printed after `esr:` (arm64) / `Error Code:` (x86_64).
    pub fault_description: Option<String>,
    /// Logical CPU (x86_64 `.ips`).
    pub cpu: Option<u64>,
}

/// Instruction bytes around the crashed PC.
#[derive(Clone, Debug, Default, Serialize)]
pub struct InstructionStream {
    /// Thread index.
    pub thread: u32,
    /// The bytes.
    pub bytes: Vec<u8>,
    /// Offset of the PC's instruction in `bytes`.
    pub offset: usize,
}

/// One Binary Images line.
#[derive(Clone, Debug, Default, Serialize)]
pub struct ImageLog {
    /// Load address.
    pub base: u64,
    /// Size in bytes (the inclusive end printed is `base + size - 1`).
    pub size: u64,
    /// Image name.
    pub name: Option<String>,
    /// Path.
    pub path: Option<String>,
    /// Architecture: `arm64`, `arm64e`, `x86_64`.
    pub arch: Option<String>,
    /// UUID or build ID.
    pub id: Option<ImageId>,
    /// Bundle identifier (macOS Binary Images).
    pub bundle_id: Option<String>,
    /// `CFBundleShortVersionString` (macOS Binary Images).
    pub short_version: Option<String>,
    /// Slide / load bias (runtime minus link-time address), when the report has it.
    pub slide: Option<i64>,
}

impl ImageLog {
    /// True when `address` lies in `[base, base + size)`.
    pub fn contains(&self, address: u64) -> bool {
        address >= self.base && address - self.base < self.size
    }
}

/// External Modification Summary counters (macOS).
#[derive(Clone, Debug, Default, Serialize)]
pub struct ExtMods {
    /// Calls made by other processes targeting this process: (task_for_pid, thread_create, thread_set_state).
    pub targeted: [u64; 3],
    /// Calls made by this process.
    pub caller: [u64; 3],
    /// Calls made by all processes on this machine.
    pub system: [u64; 3],
}

impl CrashLog {
    /// An empty log of the given flavor.
    pub fn new(flavor: Flavor) -> Self {
        CrashLog {
            flavor,
            simulator: false,
            header: Header::default(),
            exception: ExceptionInfo::default(),
            event: None,
            triggered_thread: None,
            asi: Vec::new(),
            language_exception: None,
            last_exception_backtrace: Vec::new(),
            asi_backtraces: Vec::new(),
            user_values: Vec::new(),
            kernel_triage: None,
            vm_region_info: None,
            threads: Vec::new(),
            crashed_state: None,
            instruction_stream: None,
            images: Vec::new(),
            ext_mods: None,
            vm_summary: None,
            problems: Vec::new(),
            symbol_notes: Vec::new(),
        }
    }

    /// Index of the image holding `address`: the first whose range contains it.
    pub fn image_for(&self, address: u64) -> Option<usize> {
        self.images.iter().position(|i| i.contains(address))
    }
}
