//! Renders crash reports as Apple's crash text, with symbolication.
//!
//! Two inputs, one model, one renderer: our own reports (decoded by [`report_format::decode()`]) and Apple's `.ips`
//! files both map into [`crashlog::CrashLog`]; [`symbolicate::symbolicate`] fills frames from debug files found by
//! [`symbols::SymbolStore`]; [`render::render`] prints the modern (iOS 15+/macOS 12+) or legacy layout exactly as
//! `docs/apple-crash-format.md` describes.
//!
//! Entry points for other crates:
//! - [`render_report`]: a decoded [`Report`] to text, no symbol files (reporter tests, the collector).
//! - [`load`] + [`render_loaded`]: any input bytes (our report or `.ips`) to text or JSON, with symbolication.
//!
//! Nothing here panics on any input: damaged reports render their intact parts and list what is missing.

#[cfg(feature = "collector")]
pub mod collector;
pub mod crashlog;
pub mod crashtext;
pub mod demangle;
pub mod from_report;
pub mod ips;
pub mod ips_write;
pub mod names;
pub mod render;
pub mod symbolicate;
pub mod symbols;

use crashlog::CrashLog;
pub use render::Layout;
use report_format::{DecodeError, Decoded, Report};
use serde::Serialize;
pub use symbols::SymbolStore;

/// Why an input cannot be rendered at all.
#[derive(Debug)]
pub enum ViewError {
    /// Neither our report format nor an Apple `.ips` file.
    UnknownFileType,
    /// Starts with our magic but cannot be decoded (e.g. a newer major version).
    Decode(DecodeError),
    /// Looks like JSON but is not an `.ips` crash.
    Ips(ips::IpsError),
}

impl std::fmt::Display for ViewError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ViewError::UnknownFileType => write!(
                f,
                "unknown file type: expected a crash report (starting with the bytes \\x89CRP) or an Apple .ips file (JSON)"
            ),
            ViewError::Decode(e) => write!(f, "{e}"),
            ViewError::Ips(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for ViewError {}

/// An input recognised and parsed.
#[derive(Debug)]
pub enum Loaded {
    /// One of our reports.
    Report {
        /// Everything the decoder recovered.
        decoded: Box<Decoded>,
        /// The model built from it.
        log: Box<CrashLog>,
    },
    /// An `.ips` crash (JSON body).
    Ips(Box<CrashLog>),
    /// An `.ips` file whose body is already crash text (bug_type 109): printed unchanged.
    Text(String),
}

impl Loaded {
    /// The model, when the input has one.
    pub fn log(&self) -> Option<&CrashLog> {
        match self {
            Loaded::Report { log, .. } | Loaded::Ips(log) => Some(log),
            Loaded::Text(_) => None,
        }
    }

    /// What is damaged or missing, one sentence each (empty for an intact input).
    pub fn problems(&self) -> &[String] {
        self.log().map(|l| l.problems.as_slice()).unwrap_or(&[])
    }
}

/// Recognises and parses input bytes: our report (by its magic) or an `.ips` file (JSON).
///
/// # Errors
/// [`ViewError::UnknownFileType`] for anything else, [`ViewError::Decode`] for a report this version cannot read,
/// [`ViewError::Ips`] for JSON that is not an `.ips` crash.
pub fn load(bytes: &[u8]) -> Result<Loaded, ViewError> {
    if bytes.starts_with(&report_format::framing::MAGIC) {
        let decoded = report_format::decode(bytes).map_err(ViewError::Decode)?;
        let problems = decoded.problems.iter().map(ToString::to_string).collect();
        let log = from_report::to_crash_log(&decoded.report, problems);
        return Ok(Loaded::Report { decoded: Box::new(decoded), log: Box::new(log) });
    }
    if ips::looks_like_ips(bytes) {
        return match ips::parse(bytes).map_err(ViewError::Ips)? {
            ips::Ips::Crash(log) => Ok(Loaded::Ips(log)),
            ips::Ips::Text(t) => Ok(Loaded::Text(t)),
        };
    }
    Err(ViewError::UnknownFileType)
}

/// Output format.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Format {
    /// Apple crash text.
    #[default]
    Text,
    /// JSON: see [`render_loaded`].
    Json,
    /// Apple's `.ips` (bug_type 309): see [`ips_write`].
    Ips,
}

/// Renders a loaded input. `store`, when given, symbolicates frames first (its notes end up in the model's
/// `symbol_notes`).
///
/// Text is the Apple layout; `Ips` is Apple's `.ips` file ([`ips_write::to_ips`]). JSON is one object with stable keys: `"source"` (`"report"`, `"ips"` or
/// `"ips_text"`), `"report"` (our decoded report in `report_format`'s JSON shape, or `null`), `"problems"` (strings),
/// `"crash_log"` (the symbolicated [`CrashLog`] model, or `null`) and `"text"` (only for `"ips_text"`).
pub fn render_loaded(loaded: &mut Loaded, layout: Layout, format: Format, store: Option<&mut SymbolStore>) -> String {
    if let (Some(store), Loaded::Report { log, .. } | Loaded::Ips(log)) = (store, &mut *loaded) {
        symbolicate::symbolicate(log, store);
    }
    match format {
        Format::Text => match loaded {
            Loaded::Report { log, .. } | Loaded::Ips(log) => render::render(log, layout),
            Loaded::Text(t) => t.clone(),
        },
        Format::Ips => match loaded {
            Loaded::Report { log, .. } | Loaded::Ips(log) => ips_write::to_ips(log),
            // Legacy text body: an .ips of the text kind (bug_type 109) holding it unchanged.
            Loaded::Text(t) => format!("{{\"bug_type\":\"109\"}}\n{t}"),
        },
        Format::Json => {
            #[derive(Serialize)]
            struct Out<'a> {
                source: &'a str,
                report: Option<&'a Report>,
                problems: &'a [String],
                crash_log: Option<&'a CrashLog>,
                #[serde(skip_serializing_if = "Option::is_none")]
                text: Option<&'a str>,
            }
            let out = match loaded {
                Loaded::Report { decoded, log } => Out {
                    source: "report",
                    report: Some(&decoded.report),
                    problems: &log.problems,
                    crash_log: Some(log),
                    text: None,
                },
                Loaded::Ips(log) => {
                    Out { source: "ips", report: None, problems: &log.problems, crash_log: Some(log), text: None }
                }
                Loaded::Text(t) => {
                    Out { source: "ips_text", report: None, problems: &[], crash_log: None, text: Some(t) }
                }
            };
            let mut s = serde_json::to_string_pretty(&out).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"));
            s.push('\n');
            s
        }
    }
}

/// Renders one of our decoded reports in the modern layout without symbol files (reporter tests, the collector).
/// `problems` are listed at the top as damage (pass `&[]` for an intact report).
pub fn render_report(report: &Report, problems: &[String]) -> String {
    render::render(&from_report::to_crash_log(report, problems.to_vec()), Layout::Modern)
}

/// Decodes and renders report or `.ips` bytes in the modern layout, without symbol files.
///
/// # Errors
/// As [`load`].
pub fn render_bytes(bytes: &[u8]) -> Result<String, ViewError> {
    let mut loaded = load(bytes)?;
    Ok(render_loaded(&mut loaded, Layout::Modern, Format::Text, None))
}

/// One `atos` answer: the frames at an address, innermost first (empty when unresolved).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AtosResult {
    /// The runtime address asked about.
    pub address: u64,
    /// Frames at the address (inlined first); empty when nothing covers it.
    pub frames: Vec<crashlog::SymbolInfo>,
}

/// Resolves runtime addresses against one debug file loaded at `load_address` (the runtime address of the image
/// start: Mach-O header / first ELF segment). Looks up each address exactly as given (like Apple's `atos`).
pub fn atos(file: &symbols::DebugFile, load_address: u64, addresses: &[u64]) -> Vec<AtosResult> {
    let frames = file.lookup_batch(&atos_queries(file, load_address, addresses));
    addresses.iter().zip(frames).map(|(&address, frames)| AtosResult { address, frames }).collect()
}

/// [`atos`]'s queries: each runtime address moved to the debug file's addresses (minus `load_address`, plus the
/// file's image base), looked up exactly as given (the probe is the address itself).
fn atos_queries(file: &symbols::DebugFile, load_address: u64, addresses: &[u64]) -> Vec<(u64, u64)> {
    addresses
        .iter()
        .map(|&address| {
            let svma = address.wrapping_sub(load_address).wrapping_add(file.image_base);
            (svma, svma)
        })
        .collect()
}

/// [`atos`] through `addr2line` one address at a time ([`symbols::DebugFile::lookup_batch_addr2line`]), the
/// reference the tests compare [`atos`] with.
#[doc(hidden)]
pub fn atos_addr2line(file: &symbols::DebugFile, load_address: u64, addresses: &[u64]) -> Vec<AtosResult> {
    let frames = file.lookup_batch_addr2line(&atos_queries(file, load_address, addresses));
    addresses.iter().zip(frames).map(|(&address, frames)| AtosResult { address, frames }).collect()
}

/// Results at or above this count are formatted on several threads by [`format_atos_all`].
const PARALLEL_FORMAT_MIN: usize = 1024;

/// [`format_atos`] of every result, concatenated in order. A large batch (1,024 results or more) is cut into one
/// contiguous run per core (at most 8), each formatted on a thread of its own.
pub fn format_atos_all(results: &[AtosResult]) -> String {
    // About 100 bytes per frame.
    let format_run = |run: &[AtosResult]| -> String {
        let mut out = String::with_capacity(run.iter().map(|r| r.frames.len().max(1) * 100).sum());
        run.iter().for_each(|r| push_atos(&mut out, r));
        out
    };
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(8);
    if threads < 2 || results.len() < PARALLEL_FORMAT_MIN {
        return format_run(results);
    }
    let per = results.len().div_ceil(threads);
    let mut runs = results.chunks(per);
    let first = runs.next().unwrap_or(&[]);
    std::thread::scope(|scope| {
        let others: Vec<_> = runs.map(|run| scope.spawn(move || format_run(run))).collect();
        let mut text = format_run(first);
        for (h, run) in others.into_iter().zip(results.chunks(per).skip(1)) {
            // A formatting thread that panicked is redone here (and panics here if it must).
            text.push_str(&h.join().unwrap_or_else(|_| format_run(run)));
        }
        text
    })
}

/// Formats one [`AtosResult`] as lines: `function + offset (file:line)` per frame, inlined frames marked
/// `[inlined]`; the bare address when unresolved.
pub fn format_atos(r: &AtosResult) -> String {
    let mut out = String::new();
    push_atos(&mut out, r);
    out
}

/// Appends [`format_atos`] of `r` to `out`.
fn push_atos(out: &mut String, r: &AtosResult) {
    if r.frames.is_empty() {
        out.push_str(&format!("{:#x}\n", r.address));
        return;
    }
    let n = r.frames.len();
    for (i, f) in r.frames.iter().enumerate() {
        render::push_symbol_text(out, f, i + 1 < n);
        out.push('\n');
    }
}
