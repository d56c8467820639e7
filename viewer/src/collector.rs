//! The viewer's side of the collector (`viewer serve`, the `collector` crate): [`ViewerAnalyzer`] decodes,
//! symbolicates and renders reports for it with this crate's own code, and [`list`] lists a directory of report
//! files (`viewer list`).
//!
//! The collector itself (HTTP, database, grouping, debug-file index) is the `collector` crate; it reaches this
//! crate only through the `collector::analysis::Analyzer` trait, so neither crate depends on the other's
//! internals.

use crate::crashlog::{CrashLog, ImageLog};
use crate::names::{signal_name, SignalOs};
use crate::symbols::DebugFileCache;
use crate::{render, symbolicate, Format, Layout, Loaded, SymbolStore};
use collector::analysis::{Analysis, Analyzer, DebugId, Frame, RenderFormat};
use report_format::framing::FILE_SUFFIX;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Default listening address of `viewer serve`.
pub const DEFAULT_ADDR: &str = collector::DEFAULT_ADDR;

/// Bytes of debug files a [`ViewerAnalyzer`] keeps loaded between reports by default (file bytes and decompressed
/// sections, [`crate::symbols::DebugFile::held_bytes`]): 512 MiB.
pub const DEBUG_FILE_CACHE_BYTES: u64 = 512 << 20;

/// The viewer's decoder model, symbolication and Apple-text renderer, for the collector.
///
/// Only our own reports are accepted (an `.ips` file or anything else is refused: the collector ingests what
/// `reporter` uploads). Debug files are used only from the paths the collector passes (no automatic search of this
/// machine's disk). They are read (never mapped: a file truncated under a long-running process must not end it)
/// and kept loaded between reports, up to a budget ([`DebugFileCache`], [`DEBUG_FILE_CACHE_BYTES`] by default):
/// the reports of one build share its debug files, and the collector analyses a report when it comes in and
/// again whenever its page is rendered. Clones share the kept files.
#[derive(Clone, Debug)]
pub struct ViewerAnalyzer {
    files: Arc<DebugFileCache>,
}

impl Default for ViewerAnalyzer {
    fn default() -> Self {
        ViewerAnalyzer::with_cache_budget(DEBUG_FILE_CACHE_BYTES)
    }
}

impl ViewerAnalyzer {
    /// An analyzer keeping up to `bytes` of debug files loaded between reports (0: none kept).
    pub fn with_cache_budget(bytes: u64) -> Self {
        ViewerAnalyzer { files: Arc::new(DebugFileCache::new(bytes)) }
    }

    /// How many debug files it has loaded so far (a file kept from an earlier report is not loaded again).
    pub fn debug_file_loads(&self) -> usize {
        self.files.loads()
    }

    fn load_report(&self, bytes: &[u8], debug_files: &[PathBuf]) -> Result<Loaded, String> {
        if !bytes.starts_with(&report_format::framing::MAGIC) {
            return Err("not a crash report (it does not start with the report magic)".into());
        }
        let mut loaded = crate::load(bytes).map_err(|e| e.to_string())?;
        if !debug_files.is_empty() {
            if let Loaded::Report { log, .. } = &mut loaded {
                let mut store = SymbolStore::only(debug_files.to_vec()).with_cache(self.files.clone());
                symbolicate::symbolicate(log, &mut store);
            }
        }
        Ok(loaded)
    }
}

/// The directory whose images count as the app's: the `.app` bundle holding the executable, else the
/// executable's own directory.
fn app_dir(exe: &str) -> Option<&str> {
    if let Some(i) = exe.find(".app/") {
        return Some(&exe[..i + 5]);
    }
    exe.rfind('/').map(|i| &exe[..i + 1]).filter(|d| *d != "/")
}

/// True when an image belongs to the app: it is the executable, or lies in the app's directory (see [`app_dir`]).
fn in_app(log: &CrashLog, image: &ImageLog, index: usize) -> bool {
    let exe = log.header.path.as_deref();
    match (exe, image.path.as_deref()) {
        (Some(exe), Some(path)) => path == exe || app_dir(exe).is_some_and(|d| path.starts_with(d)),
        // Without paths: the first image is the main executable in both Apple's and our reports.
        _ => index == 0 || (image.name.is_some() && image.name == log.header.process_name),
    }
}

fn analysis_of(loaded: &Loaded) -> Result<Analysis, String> {
    let Loaded::Report { decoded, log } = loaded else { return Err("not one of our crash reports".into()) };
    let meta = decoded.report.meta.as_ref();
    let h = &log.header;
    let app_version = match (&h.short_version, &h.bundle_version) {
        (Some(s), Some(b)) => Some(format!("{s} ({b})")),
        (Some(s), None) => Some(s.clone()),
        (None, Some(b)) => Some(format!("({b})")),
        (None, None) => None,
    };
    // A non-fatal report (format 2.3) groups by its kind (`hang (non-fatal)`) and the stack of the thread it is
    // about (the triggered thread below): hangs blocked in the same place form one group.
    let non_fatal = log.event.as_ref().map(|e| format!("{} (non-fatal)", e.kind));
    let exception = log.exception.exception_type.clone().or(non_fatal).or_else(|| {
        let e = decoded.report.exception.as_ref()?;
        let os = if meta.is_none_or(|m| m.os.is_apple()) { SignalOs::Darwin } else { SignalOs::Linux };
        let sig = e.signal?;
        Some(signal_name(os, sig).map(str::to_owned).unwrap_or_else(|| format!("signal {sig}")))
    });
    let crashed = log.threads.iter().find(|t| t.crashed).or_else(|| {
        let t = log.triggered_thread?;
        log.threads.iter().find(|x| x.index == t)
    });
    let crashed_frames = crashed
        .map(|t| {
            t.frames
                .iter()
                .map(|f| {
                    let image = f.image.and_then(|i| log.images.get(i).map(|im| (i, im)));
                    Frame {
                        image: image
                            .and_then(|(_, im)| im.name.clone().or_else(|| im.path.clone()))
                            .unwrap_or_else(|| "???".into()),
                        image_id: image.and_then(|(_, im)| im.id.as_ref()).map(|id| id.to_hex()),
                        offset: image.map_or(f.address, |(_, im)| f.address.wrapping_sub(im.base)),
                        symbol: f.symbol.as_ref().map(|s| s.name.clone()),
                        symbol_text: f.symbol.as_ref().map(|_| render::symbol_part(f, image.map(|(_, im)| im))),
                        in_app: image.is_some_and(|(i, im)| in_app(log, im, i)),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    let mut image_ids: Vec<String> = log.images.iter().filter_map(|i| i.id.as_ref()).map(|i| i.to_hex()).collect();
    image_ids.sort();
    image_ids.dedup();
    Ok(Analysis {
        report_id: meta.map(|m| m.report_id.to_string()),
        problems: log.problems.clone(),
        process: h.process_name.clone(),
        app_version,
        os_version: h.os_version.clone(),
        exception,
        captured_ms: meta.and_then(|m| m.capture_time_ns).map(|t| t / 1_000_000),
        crashed_frames,
        image_ids,
    })
}

impl Analyzer for ViewerAnalyzer {
    fn analyze(&self, bytes: &[u8], debug_files: &[PathBuf]) -> Result<Analysis, String> {
        analysis_of(&self.load_report(bytes, debug_files)?)
    }

    fn render(&self, bytes: &[u8], debug_files: &[PathBuf], format: RenderFormat) -> Result<Option<String>, String> {
        let mut loaded = self.load_report(bytes, debug_files)?;
        Ok(match format {
            // Already symbolicated by load_report: render without a store.
            RenderFormat::Text => Some(crate::render_loaded(&mut loaded, Layout::Modern, Format::Text, None)),
            RenderFormat::Json => Some(crate::render_loaded(&mut loaded, Layout::Modern, Format::Json, None)),
            RenderFormat::Ips => Some(crate::render_loaded(&mut loaded, Layout::Modern, Format::Ips, None)),
        })
    }

    fn identify(&self, path: &Path) -> Vec<DebugId> {
        crate::symbols::identify(path)
            .into_iter()
            .filter_map(|i| Some(DebugId { id: i.id.as_ref()?.to_hex(), arch: i.arch, has_dwarf: i.has_dwarf }))
            .collect()
    }
}

/// One report file in a directory, for `viewer list`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoredReport {
    /// Report id (uppercase dashed UUID) from the report's META section; the file stem when that is lost.
    pub id: String,
    /// File path.
    pub path: PathBuf,
    /// Size in bytes.
    pub size: u64,
    /// Capture time, ns since the Unix epoch.
    pub capture_time_ns: Option<u64>,
    /// Process name.
    pub process: Option<String>,
    /// One-line summary of the exception, e.g. `SIGSEGV` or `EXC_BAD_ACCESS`.
    pub exception: Option<String>,
}

/// The report files (`*.crashreport`) in a directory, e.g. a collector store's `reports/`, oldest capture first.
/// Files that do not decode are listed with empty fields.
///
/// # Errors
/// I/O errors listing the directory.
pub fn list(dir: &Path) -> io::Result<Vec<StoredReport>> {
    let mut v = Vec::new();
    for e in fs::read_dir(dir)? {
        let e = e?;
        let path = e.path();
        let Some(stem) = path.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(FILE_SUFFIX)) else {
            continue;
        };
        if stem.starts_with('.') {
            continue;
        }
        let bytes = fs::read(&path)?;
        let d = report_format::decode(&bytes).ok();
        let r = d.as_ref().map(|d| &d.report);
        let meta = r.and_then(|r| r.meta.as_ref());
        v.push(StoredReport {
            id: meta.map(|m| m.report_id.to_string()).unwrap_or_else(|| stem.to_owned()),
            size: bytes.len() as u64,
            capture_time_ns: meta.and_then(|m| m.capture_time_ns),
            process: meta.and_then(|m| m.process.name.clone()),
            exception: r.and_then(|r| r.exception.as_ref()).and_then(|e| {
                let os = if meta.is_none_or(|m| m.os.is_apple()) { SignalOs::Darwin } else { SignalOs::Linux };
                let sig = e.signal?;
                Some(signal_name(os, sig).map(str::to_owned).unwrap_or_else(|| format!("signal {sig}")))
            }),
            path,
        });
    }
    v.sort_by(|a, b| a.capture_time_ns.cmp(&b.capture_time_ns).then_with(|| a.id.cmp(&b.id)));
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn app_directories() {
        assert_eq!(
            app_dir("/var/containers/Bundle/Application/X/My.app/My"),
            Some("/var/containers/Bundle/Application/X/My.app/")
        );
        assert_eq!(app_dir("/Applications/My.app/Contents/MacOS/My"), Some("/Applications/My.app/"));
        assert_eq!(app_dir("/home/u/build/crash-client"), Some("/home/u/build/"));
        assert_eq!(app_dir("/crash-client"), None);
    }

    /// A hang report groups as `hang (non-fatal)` with the stalled thread's frames (no thread crashed).
    #[test]
    fn a_non_fatal_report_groups_by_its_kind_and_the_thread_it_is_about() {
        use report_format::model::{Exception, Image, Meta, NonFatal, Report, Thread};
        let report = Report {
            format_version: (2, 3),
            meta: Some(Meta {
                non_fatal: Some(NonFatal { kind: "hang".into(), thread: Some(1), ..NonFatal::default() }),
                ..Meta::default()
            }),
            exception: Some(Exception::default()),
            threads: vec![
                Thread { index: 0, frames: vec![0x1000], ..Thread::default() },
                Thread { index: 1, frames: vec![0x1010, 0x1020], ..Thread::default() },
            ],
            images: vec![Image {
                index: 0,
                path: Some("/opt/app/bin/app".into()),
                name: "app".into(),
                load_address: 0x1000,
                size: 0x100,
                ..Image::default()
            }],
            ..Report::default()
        };
        let bytes = report_format::owned::to_bytes(&report).expect("encodes");
        let a = ViewerAnalyzer::default().analyze(&bytes, &[]).expect("analysis");
        assert_eq!(a.exception.as_deref(), Some("hang (non-fatal)"));
        assert_eq!(a.crashed_frames.len(), 2, "{:?}", a.crashed_frames);
    }

    /// Reports of one build analysed one after another load its debug file once: the analyzer keeps it.
    #[test]
    fn debug_files_are_loaded_once_across_reports() {
        use object::{Object, ObjectSegment, ObjectSymbol};
        use report_format::model::{Exception, Image, Report, Thread};
        let dwarf = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/macho-built/crashy.dSYM/Contents/Resources/DWARF/crashy");
        let ident = crate::symbols::identify(&dwarf).into_iter().next().expect("the dSYM is an object");
        let data = fs::read(&dwarf).unwrap();
        let obj = object::File::parse(&*data).unwrap();
        let text = obj.segments().find(|s| s.name().ok().flatten() == Some("__TEXT")).unwrap();
        let function = obj
            .symbols()
            .filter(|s| s.kind() == object::SymbolKind::Text && s.address() > text.address() && s.size() > 8)
            .min_by_key(|s| s.address())
            .or_else(|| obj.symbols().find(|s| s.kind() == object::SymbolKind::Text && s.address() > 0))
            .expect("a function");
        let report = Report {
            format_version: (2, 3),
            exception: Some(Exception::default()),
            threads: vec![Thread {
                index: 0,
                crashed: true,
                frames: vec![function.address() + 4],
                ..Thread::default()
            }],
            images: vec![Image {
                index: 0,
                name: "crashy".into(),
                path: Some("/Applications/Crashy.app/crashy".into()),
                load_address: text.address(),
                size: text.size(),
                slide: Some(0),
                id: ident.id.clone(),
                arch: Some(ident.arch.clone()),
                ..Image::default()
            }],
            ..Report::default()
        };
        let bytes = report_format::owned::to_bytes(&report).expect("encodes");
        let analyzer = ViewerAnalyzer::default();
        let files = [dwarf.clone()];
        let first = analyzer.analyze(&bytes, &files).expect("analysis");
        assert!(first.crashed_frames[0].symbol.is_some(), "{:?}", first.crashed_frames);
        let text = analyzer.render(&bytes, &files, RenderFormat::Text).expect("renders").expect("text");
        assert_eq!(analyzer.clone().analyze(&bytes, &files).expect("analysis").crashed_frames, first.crashed_frames);
        assert_eq!(analyzer.debug_file_loads(), 1, "one load for three uses, clones included");
        // Without a budget every report loads the file again; the answers are the same.
        let forgetful = ViewerAnalyzer::with_cache_budget(0);
        assert_eq!(forgetful.render(&bytes, &files, RenderFormat::Text).expect("renders"), Some(text));
        assert_eq!(forgetful.analyze(&bytes, &files).expect("analysis").crashed_frames, first.crashed_frames);
        assert_eq!(forgetful.debug_file_loads(), 2);
    }

    #[test]
    fn refuses_what_is_not_a_report() {
        for bytes in [&b""[..], b"hello", b"{\"bug_type\":\"309\"}"] {
            assert!(ViewerAnalyzer::default().analyze(bytes, &[]).is_err(), "{bytes:?}");
            assert!(ViewerAnalyzer::default().render(bytes, &[], RenderFormat::Text).is_err(), "{bytes:?}");
        }
    }
}
