//! What the collector needs to know about a report, and the grouping signature computed from it.
//!
//! The collector does not decode, symbolicate or render reports itself: an [`Analyzer`] does (the `viewer`
//! crate's `viewer::collector::ViewerAnalyzer` in `viewer serve`, which uses the viewer's own decoder model,
//! symbolication and Apple-text renderer). The collector stores, indexes and groups what it returns.
//!
//! # The grouping signature
//!
//! Reports with the same signature, in the same project, form one crash group. The signature is text, one item per
//! line:
//!
//! 1. the exception type as the report's Apple text prints it (`EXC_BAD_ACCESS (SIGSEGV)`, or on Linux
//!    `SIGSEGV (SEGV_MAPERR)`), without the faulting address (which varies from run to run);
//! 2. then up to [`SIGNATURE_FRAMES`] frames of the crashed thread, innermost first, taken only from frames inside
//!    app images ([`Frame::in_app`]); when the crashed thread has no frame in an app image, its innermost frames in
//!    any image are used instead. Each frame is `<image> <function>` when the frame is symbolicated (function name
//!    without the offset, so rebuilding with other code around it does not split the group), otherwise
//!    `<image> +0x<offset>` with the offset of the address from the image's load address (stable across runs
//!    despite ASLR, as long as the binary is the same);
//! 3. a report whose crashed thread has no frames at all (damaged) ends with the line `(no stack)`.
//!
//! The group id is the first 16 hex digits of SHA-256 over `<project>\n<signature>`.
//!
//! Because symbolicated frames name functions and unsymbolicated ones name offsets, a group changes when debug
//! files for its images arrive; the collector re-analyses the reports that reference those images then
//! (regrouping).

use serde::Serialize;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// How many frames of the crashed thread the signature uses.
pub const SIGNATURE_FRAMES: usize = 3;

/// One frame of the crashed thread, innermost first.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Frame {
    /// Image name (last path component), `???` when no image holds the address.
    pub image: String,
    /// The image's UUID or build ID, lowercase hex without dashes, when the report has it.
    pub image_id: Option<String>,
    /// Address minus the image's load address, bytes.
    pub offset: u64,
    /// Function name when symbolicated (demangled, without the `+ offset`).
    pub symbol: Option<String>,
    /// The frame's line as the Apple text would print its symbol part (function + offset, file:line), when
    /// symbolicated.
    pub symbol_text: Option<String>,
    /// True when the image belongs to the app (the main executable, or inside the app bundle / its directory),
    /// as opposed to a system library.
    pub in_app: bool,
}

/// What an [`Analyzer`] found in one report.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Analysis {
    /// Report id, uppercase dashed UUID, when the report's META section survived.
    pub report_id: Option<String>,
    /// What is damaged or missing, one sentence each; empty for an intact report.
    pub problems: Vec<String>,
    /// Process name.
    pub process: Option<String>,
    /// App version as `short (build)`, e.g. `1.0 (7)`.
    pub app_version: Option<String>,
    /// OS version as the Apple text prints it.
    pub os_version: Option<String>,
    /// Exception type as the Apple text prints it, e.g. `SIGSEGV (SEGV_MAPERR)`.
    pub exception: Option<String>,
    /// Capture time, ms since the Unix epoch.
    pub captured_ms: Option<u64>,
    /// The crashed thread's frames, innermost first (inlined frames included, one entry each).
    pub crashed_frames: Vec<Frame>,
    /// UUIDs / build IDs of every image in the report, lowercase hex without dashes.
    pub image_ids: Vec<String>,
}

/// Formats the collector can ask an [`Analyzer`] to render.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RenderFormat {
    /// Apple crash text (the `.crash` download).
    Text,
    /// JSON (the viewer's `--format json` shape).
    Json,
    /// An Apple `.ips` file, when the analyzer can write one.
    Ips,
}

/// One object found in a debug file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct DebugId {
    /// UUID (Mach-O) or build ID (ELF), lowercase hex without dashes.
    pub id: String,
    /// Architecture name (`arm64`, `x86_64`, ...).
    pub arch: String,
    /// True when the object has DWARF debug info (otherwise only its symbol table can name functions).
    pub has_dwarf: bool,
}

/// Decodes, symbolicates and renders reports for the collector.
///
/// Implementations must never panic on any input: the bytes come from the network.
pub trait Analyzer: Send + Sync + 'static {
    /// Analyses report bytes, symbolicating with the given debug files (paths of Mach-O / ELF files the
    /// collector stored; may be empty).
    ///
    /// # Errors
    /// A sentence saying why the bytes are not a report at all (a damaged report is not an error: it comes back
    /// with [`Analysis::problems`]).
    fn analyze(&self, bytes: &[u8], debug_files: &[PathBuf]) -> Result<Analysis, String>;

    /// Renders report bytes, symbolicated with the given debug files. `Ok(None)` when this analyzer cannot
    /// produce the format (e.g. no `.ips` writer).
    ///
    /// # Errors
    /// As [`Analyzer::analyze`].
    fn render(&self, bytes: &[u8], debug_files: &[PathBuf], format: RenderFormat) -> Result<Option<String>, String>;

    /// The objects in a debug file (one per slice of a universal Mach-O); empty when it is neither Mach-O nor ELF.
    fn identify(&self, path: &Path) -> Vec<DebugId>;
}

/// A report's grouping signature (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// The signature text, one item per line.
    pub text: String,
    /// A one-line title for lists: the exception type and the first signature frame.
    pub title: String,
}

/// One frame as the signature writes it.
pub fn frame_key(f: &Frame) -> String {
    match &f.symbol {
        Some(s) => format!("{} {}", f.image, s),
        None => format!("{} +{:#x}", f.image, f.offset),
    }
}

/// Computes the signature of an analysis (rules in the module docs).
pub fn signature(a: &Analysis) -> Signature {
    let exception = a.exception.clone().unwrap_or_else(|| "unknown exception".into());
    let mut frames: Vec<&Frame> = a.crashed_frames.iter().filter(|f| f.in_app).take(SIGNATURE_FRAMES).collect();
    if frames.is_empty() {
        frames = a.crashed_frames.iter().take(SIGNATURE_FRAMES).collect();
    }
    let mut text = exception.clone();
    for f in &frames {
        text.push('\n');
        text.push_str(&frame_key(f));
    }
    if frames.is_empty() {
        text.push_str("\n(no stack)");
    }
    let title = match frames.first() {
        Some(f) => format!("{exception} in {}", frame_key(f)),
        None => exception,
    };
    Signature { text, title }
}

/// The group id of a signature in a project: 16 lowercase hex digits (see the module docs).
pub fn group_id(project: &str, signature: &str) -> String {
    let mut h = Sha256::new();
    h.update(project.as_bytes());
    h.update(b"\n");
    h.update(signature.as_bytes());
    hex(&h.finalize()[..8])
}

/// Lowercase hex of bytes.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Normalises a report id to the uppercase dashed UUID form (`8-4-4-4-12` hex digits); `None` for anything else.
pub fn normalize_report_id(s: &str) -> Option<String> {
    let s = s.trim();
    let groups: Vec<&str> = s.split('-').collect();
    let lens: Vec<usize> = groups.iter().map(|g| g.len()).collect();
    if lens != [8, 4, 4, 4, 12] || !groups.iter().all(|g| g.bytes().all(|b| b.is_ascii_hexdigit())) {
        return None;
    }
    Some(s.to_ascii_uppercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(image: &str, offset: u64, symbol: Option<&str>, in_app: bool) -> Frame {
        Frame { image: image.into(), offset, symbol: symbol.map(Into::into), in_app, ..Default::default() }
    }

    #[test]
    fn signature_uses_top_app_frames_and_falls_back_to_any() {
        let mut a = Analysis {
            exception: Some("SIGSEGV (SEGV_MAPERR)".into()),
            crashed_frames: vec![
                frame("libc.so.6", 0x1000, Some("memcpy"), false),
                frame("app", 0x20, None, true),
                frame("app", 0x30, Some("main"), true),
                frame("app", 0x40, Some("start"), true),
                frame("app", 0x50, Some("unused"), true),
            ],
            ..Default::default()
        };
        let s = signature(&a);
        assert_eq!(s.text, "SIGSEGV (SEGV_MAPERR)\napp +0x20\napp main\napp start");
        assert_eq!(s.title, "SIGSEGV (SEGV_MAPERR) in app +0x20");
        for f in &mut a.crashed_frames {
            f.in_app = false;
        }
        assert_eq!(signature(&a).text, "SIGSEGV (SEGV_MAPERR)\nlibc.so.6 memcpy\napp +0x20\napp main");
        a.crashed_frames.clear();
        assert_eq!(signature(&a).text, "SIGSEGV (SEGV_MAPERR)\n(no stack)");
    }

    #[test]
    fn group_ids_depend_on_project_and_signature() {
        let a = group_id("p", "x");
        assert_eq!(a.len(), 16);
        assert_ne!(a, group_id("q", "x"));
        assert_ne!(a, group_id("p", "y"));
        assert_eq!(a, group_id("p", "x"));
    }

    #[test]
    fn report_ids_are_checked() {
        assert_eq!(
            normalize_report_id("0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0").as_deref(),
            Some("0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0")
        );
        for bad in ["", "../../etc/passwd", "0f1e2d3c4b5a69788796a5b4c3d2e1f0", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1fg"]
        {
            assert_eq!(normalize_report_id(bad), None, "{bad}");
        }
    }
}
