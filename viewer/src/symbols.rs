//! Finding and reading debug files, and resolving addresses in them.
//!
//! [`SymbolStore`] finds the debug file of an image by its UUID (Mach-O `LC_UUID`) or GNU build ID among
//! `--symbols` paths (files, or directories searched recursively: dSYM bundles, thin and universal Mach-O, ELF
//! executables and separate ELF debug files including the `.build-id/xx/yyyy.debug` layout), in
//! `/usr/lib/debug/.build-id`, and at the image's own path when it exists on this machine. A file whose id does not
//! match is never used; the store records a note saying so.
//!
//! Identification reads only headers and load commands (through `object::ReadCache`); a file is read (or mapped, in
//! the one-shot commands) and parsed once, on first use, and cached by path and slice ([`DebugFile`]): the symbol
//! table is sorted by address once. Batches ([`DebugFile::lookup_batch`]: a report's frames, `atos`) go through
//! `batch`, which lists the file's units once and reads each unit once for all the batch's addresses in it; single
//! lookups go through an `addr2line::Context` (built on first use), which indexes units and functions lazily and
//! caches them. A [`DebugFile`] is `Send + Sync`; a [`DebugFileCache`] keeps files across stores and threads for a
//! long-running process (the collector). Location lists and macro sections are never loaded: no lookup reads them.

mod batch;

use crate::crashlog::SymbolInfo;
use crate::demangle;
use addr2line::Context;
use gimli::{EndianReader, RunTimeEndian};
use object::read::macho::{FatArch, MachOFatFile32, MachOFatFile64};
use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, ReadCache, ReadRef, SectionKind};
use report_format::model::ImageId;
use std::collections::HashMap;
use std::fs;
use std::ops::Deref;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering as AtomicOrdering};
use std::sync::{Arc, Mutex, OnceLock};

/// The bytes of a debug file: read into memory, or mapped ([`SymbolStore::with_mapped_files`]).
#[derive(Debug)]
enum FileBytes {
    Read(Vec<u8>),
    Mapped(memmap2::Mmap),
}

/// A shared handle on a file's bytes (or on a decompressed section): what the DWARF readers and the symbol table
/// hold, so neither copies the file.
#[derive(Clone, Debug)]
struct Bytes(Arc<FileBytes>);

impl Bytes {
    fn new(v: Vec<u8>) -> Bytes {
        Bytes(Arc::new(FileBytes::Read(v)))
    }
}

impl Deref for Bytes {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &*self.0 {
            FileBytes::Read(v) => v,
            FileBytes::Mapped(m) => m,
        }
    }
}

// SAFETY: the slice `Bytes` derefs to is the heap buffer of a `Vec` or the address range of a mapping, both owned
// by the `Arc` and never moved or freed while it lives: moving a `Bytes` moves only the `Arc` pointer, so the
// address stays valid until the last clone is dropped, as `StableDeref` requires.
#[allow(unsafe_code)]
unsafe impl stable_deref_trait::StableDeref for Bytes {}
// SAFETY: as above: a clone shares the `Arc`, so it derefs to the same slice at the same address.
#[allow(unsafe_code)]
unsafe impl stable_deref_trait::CloneStableDeref for Bytes {}

type Reader = EndianReader<RunTimeEndian, Bytes>;

/// Directory searched for `.build-id/xx/yyyy.debug` files automatically.
pub const SYSTEM_DEBUG_DIR: &str = "/usr/lib/debug";

/// Depth limit of the recursive directory search (guards against symlink loops).
const MAX_DEPTH: usize = 24;

/// Parses an image id written in hex, as reports, `.ips` files, crash text and command lines write it: a UUID with
/// or without dashes (`82D13D98-219E-3040-B62A-07A297007A7C`, `178beeaf85dc35a7b02cb951eba169ce`; any case) gives
/// [`ImageId::Uuid`]; any other even number of hex digits gives [`ImageId::BuildId`] (GNU build IDs are 20 bytes,
/// but any length is kept). `None` for an empty string, an odd number of digits or a non-hex character.
pub fn parse_image_id(text: &str) -> Option<ImageId> {
    let digits = text.bytes().filter(|c| *c != b'-');
    let mut bytes = Vec::with_capacity(text.len() / 2);
    let mut high: Option<u8> = None;
    for c in digits {
        let v = (c as char).to_digit(16)? as u8;
        match high.take() {
            Some(h) => bytes.push(h << 4 | v),
            None => high = Some(v),
        }
    }
    if high.is_some() || bytes.is_empty() {
        return None;
    }
    Some(match <[u8; 16]>::try_from(bytes.as_slice()) {
        Ok(u) => ImageId::Uuid(u),
        Err(_) => ImageId::BuildId(bytes),
    })
}

/// One object inside a file: the whole file, or one slice of a universal (fat) Mach-O.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ObjectRef {
    /// File path.
    pub path: PathBuf,
    /// Byte range of the slice in a universal file: `(offset, size)`; `None` for a thin file.
    pub slice: Option<(u64, u64)>,
}

/// What identifies one object: its id and architecture.
#[derive(Clone, Debug)]
pub struct Identity {
    /// Where it is.
    pub object: ObjectRef,
    /// UUID or build ID.
    pub id: Option<ImageId>,
    /// Architecture name (`arm64`, `arm64e`, `x86_64`, `i386`, `armv7`, ...).
    pub arch: String,
    /// True when the object has DWARF debug info.
    pub has_dwarf: bool,
}

/// Reads the ids and architectures of every object in a file (one per slice of a universal Mach-O) without
/// reading the whole file. Returns an empty list for files that are not Mach-O or ELF.
pub fn identify(path: &Path) -> Vec<Identity> {
    let Ok(file) = fs::File::open(path) else { return Vec::new() };
    let cache = ReadCache::new(file);
    let Ok(magic) = (&cache).read_bytes_at(0, 4) else { return Vec::new() };
    let mut out = Vec::new();
    match magic {
        [0xca, 0xfe, 0xba, 0xbe] => {
            if let Ok(fat) = MachOFatFile32::parse(&cache) {
                for a in fat.arches() {
                    let (off, size) = a.file_range();
                    identify_one(path, &cache, Some((off, size)), &mut out);
                }
            }
        }
        [0xca, 0xfe, 0xba, 0xbf] => {
            if let Ok(fat) = MachOFatFile64::parse(&cache) {
                for a in fat.arches() {
                    let (off, size) = a.file_range();
                    identify_one(path, &cache, Some((off, size)), &mut out);
                }
            }
        }
        [0xfe, 0xed, 0xfa, 0xce | 0xcf] | [0xce | 0xcf, 0xfa, 0xed, 0xfe] | [0x7f, b'E', b'L', b'F'] => {
            identify_one(path, &cache, None, &mut out);
        }
        _ => {}
    }
    out
}

fn identify_one(path: &Path, cache: &ReadCache<fs::File>, slice: Option<(u64, u64)>, out: &mut Vec<Identity>) {
    let parsed = match slice {
        Some((off, size)) => object::File::parse(cache.range(off, size)).map(|f| describe(&f)),
        None => {
            let len = cache.len().unwrap_or(0);
            object::File::parse(cache.range(0, len)).map(|f| describe(&f))
        }
    };
    if let Ok((id, arch, has_dwarf)) = parsed {
        out.push(Identity { object: ObjectRef { path: path.to_path_buf(), slice }, id, arch, has_dwarf });
    }
}

fn describe<'a, R: ReadRef<'a>>(f: &object::File<'a, R>) -> (Option<ImageId>, String, bool) {
    let id = match f.format() {
        object::BinaryFormat::MachO => f.mach_uuid().ok().flatten().map(ImageId::Uuid),
        _ => f.build_id().ok().flatten().map(|b| ImageId::BuildId(b.to_vec())),
    };
    let has_dwarf = f.section_by_name(".debug_info").is_some();
    (id, arch_name(f), has_dwarf)
}

fn arch_name<'a, R: ReadRef<'a>>(f: &object::File<'a, R>) -> String {
    use object::Architecture as A;
    let arm64e = matches!(f.flags(), object::FileFlags::MachO { .. })
        && f.architecture() == A::Aarch64
        && macho_cpusubtype(f) == Some(2);
    match f.architecture() {
        A::Aarch64 if arm64e => "arm64e".into(),
        A::Aarch64 => "arm64".into(),
        A::Aarch64_Ilp32 => "arm64_32".into(),
        A::X86_64 => "x86_64".into(),
        A::I386 => "i386".into(),
        A::Arm => "armv7".into(),
        other => format!("{other:?}").to_lowercase(),
    }
}

fn macho_cpusubtype<'a, R: ReadRef<'a>>(f: &object::File<'a, R>) -> Option<u32> {
    use object::read::macho::MachHeader;
    match f {
        object::File::MachO64(m) => Some(m.macho_header().cpusubtype(m.endian()) & 0x00ff_ffff),
        _ => None,
    }
}

/// A parsed debug file (or slice): symbol table and DWARF, ready for lookups.
///
/// The file is read (or mapped) once into one shared buffer; the DWARF sections and the symbol names are ranges of it (only
/// compressed sections get buffers of their own), so loading copies nothing else.
///
/// `Send` and `Sync`: threads may share one file ([`DebugFileCache`]). Lookups through `addr2line` take turns on
/// the file's context; batches share the listed units and the kept answers.
pub struct DebugFile {
    /// Where it came from.
    pub identity: Identity,
    /// Link-time address of the image start: Mach-O `__TEXT` vmaddr; ELF first `PT_LOAD` vaddr (page-aligned).
    pub image_base: u64,
    /// Function symbols, sorted by address; built on a thread of its own from load on ([`PendingSymbols`]).
    symbols: PendingSymbols,
    /// The DWARF sections present (readers over the shared buffer), to build more contexts for parallel lookups.
    sections: Vec<(gimli::SectionId, Reader)>,
    /// DWARF through `addr2line`, built on first use (`None` before; `Some(None)` when the file has none or it
    /// does not parse). Behind a lock: an `addr2line` context is not `Sync` (it fills its tables as it goes), and
    /// a file may be shared by threads ([`DebugFileCache`]).
    dwarf: Mutex<Option<Option<Context<Reader>>>>,
    /// Set when a DWARF lookup panicked inside a library (corrupt debug info); DWARF is not used again.
    dwarf_broken: AtomicBool,
    /// The units listed for batches (`symbols/batch.rs`), built on the first batch that needs them: `None` inside
    /// when the file has no DWARF or its units cannot be listed.
    units: OnceLock<Option<batch::Units>>,
    /// Answers of [`DebugFile::lookup_batch`] by `(address, probe)`, at most [`KEPT_ANSWERS_MAX`].
    answers: Mutex<HashMap<(u64, u64), Vec<SymbolInfo>>>,
    /// Batches that went unit by unit (tests check which path a batch took).
    unit_batches: AtomicUsize,
    /// [`DebugFile::held_bytes`].
    held: u64,
}

impl std::fmt::Debug for DebugFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DebugFile")
            .field("identity", &self.identity)
            .field("image_base", &self.image_base)
            .field("symbols", &self.symbols().entries.len())
            .field("dwarf", &!self.sections.is_empty())
            .finish()
    }
}

/// Why a debug file could not be loaded.
#[derive(Debug)]
pub enum LoadError {
    /// Reading the file failed.
    Io(std::io::Error),
    /// The bytes are not an object file `object` can parse.
    Parse(String),
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            LoadError::Io(e) => write!(f, "cannot read: {e}"),
            LoadError::Parse(e) => write!(f, "not a usable object file: {e}"),
        }
    }
}

impl std::error::Error for LoadError {}

/// Batches smaller than this are resolved on the calling thread: a second DWARF context costs more than it saves.
const PARALLEL_BATCH_MIN: usize = 2048;

/// How many answers a [`DebugFile`] keeps for later batches: a count, not a byte bound (an answer is its frames,
/// each with a demangled name and a source path: about a quarter to one KiB).
pub const KEPT_ANSWERS_MAX: usize = 65_536;

/// Batches that leave more queries than this to look up are not kept ([`DebugFile::lookup_batch`]): a report's
/// distinct frames are far fewer; a batch this large (`viewer atos`) is not asked again.
const KEPT_BATCH_MAX: usize = 4_096;

/// Batches smaller than this are resolved one address at a time by `addr2line` when it already holds the file's
/// tables (they stay cached for the next lookup); other batches unit by unit (`batch`).
const UNIT_BATCH_MIN: usize = 64;

impl DebugFile {
    /// Reads and parses one object. For a universal file, `identity.object.slice` selects the slice.
    ///
    /// # Errors
    /// [`LoadError::Io`] when the file cannot be read, [`LoadError::Parse`] when it is not a Mach-O/ELF object.
    pub fn load(identity: Identity) -> Result<DebugFile, LoadError> {
        Self::load_with(identity, false)
    }

    /// [`DebugFile::load`], mapping the file into memory instead of reading it: only the pages lookups touch are
    /// read, and nothing is copied. When the file cannot be mapped it is read as [`DebugFile::load`] does.
    ///
    /// A mapped file that another process truncates while it is in use makes the next access to the lost pages
    /// raise SIGBUS, which ends the process; for that reason only the one-shot commands (`viewer REPORT`, `viewer
    /// symbolicate`, `viewer atos`) map, and long-running users (the collector) read.
    ///
    /// # Errors
    /// As [`DebugFile::load`].
    pub fn load_mapped(identity: Identity) -> Result<DebugFile, LoadError> {
        Self::load_with(identity, true)
    }

    fn load_with(identity: Identity, map: bool) -> Result<DebugFile, LoadError> {
        // The parsers are bounds-checked, but corrupt debug info has made library code overflow in debug builds;
        // a panic in a third-party parser must not take the viewer down.
        let path = identity.object.path.clone();
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| Self::load_inner(identity, map))).unwrap_or_else(
            |_| Err(LoadError::Parse(format!("{}: the debug information is corrupt (parser failure)", path.display()))),
        )
    }

    fn load_inner(identity: Identity, map: bool) -> Result<DebugFile, LoadError> {
        // One read (or one mapping) and no copy: the DWARF readers and the symbol names are ranges of this buffer.
        let data = Bytes(Arc::new(file_bytes(&identity.object.path, map)?));
        let bytes: &[u8] = match identity.object.slice {
            Some((off, size)) => usize::try_from(off)
                .ok()
                .zip(usize::try_from(size).ok())
                .and_then(|(o, s)| data.get(o..o.checked_add(s)?))
                .ok_or_else(|| LoadError::Parse("universal slice out of bounds".into()))?,
            None => &data,
        };
        let obj = object::File::parse(bytes).map_err(|e| LoadError::Parse(e.to_string()))?;
        let macho = obj.format() == object::BinaryFormat::MachO;
        let image_base = if macho {
            obj.segments().find(|s| s.name().ok().flatten() == Some("__TEXT")).map(|s| s.address()).unwrap_or(0)
        } else {
            obj.segments().map(|s| s.address()).min().unwrap_or(0) & !0xfff
        };
        let symbols = PendingSymbols::start(&data, range_in(&data, bytes).unwrap_or(0..data.len()), macho);
        let sections =
            if obj.section_by_name(".debug_info").is_some() { dwarf_sections(&obj, &data) } else { Vec::new() };
        // The file's bytes, and the buffers of its decompressed sections.
        let decompressed: usize =
            sections.iter().map(|(_, r)| r.bytes()).filter(|b| range_in(&data, b).is_none()).map(<[u8]>::len).sum();
        let held = (data.len() as u64).saturating_add(decompressed as u64);
        Ok(DebugFile {
            identity,
            image_base,
            symbols,
            sections,
            dwarf: Mutex::new(None),
            dwarf_broken: AtomicBool::new(false),
            units: OnceLock::new(),
            answers: Default::default(),
            unit_batches: AtomicUsize::new(0),
            held,
        })
    }

    /// The symbol table, once its thread has built it.
    fn symbols(&self) -> &SymbolTable {
        self.symbols.get()
    }

    /// The DWARF sections loaded, by name (`.debug_info`, ...): tests check which ones are left out.
    #[doc(hidden)]
    pub fn dwarf_section_names(&self) -> Vec<&'static str> {
        self.sections.iter().map(|(id, _)| id.name()).collect()
    }

    /// Bytes this file holds: its bytes (read, or mapped) and the buffers of its decompressed sections. Not
    /// counted: the unit list, `addr2line`'s tables and the kept answers, which grow with lookups.
    pub fn held_bytes(&self) -> u64 {
        self.held
    }

    /// Number of function symbols indexed.
    pub fn symbol_count(&self) -> usize {
        self.symbols().entries.len()
    }

    /// True when DWARF line information is available.
    pub fn has_dwarf(&self) -> bool {
        self.with_addr2line(|_| ()).is_some()
    }

    /// Runs `f` with the `addr2line` context over this file's DWARF, built on first use; `None` without usable
    /// DWARF. Other users of the context wait meanwhile: `f` must not call back into this file's lookups.
    fn with_addr2line<T>(&self, f: impl FnOnce(&Context<Reader>) -> T) -> Option<T> {
        // Every use of the context is under `catch_unwind`, so a poisoned lock only means a panic elsewhere.
        let mut dwarf = self.dwarf.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let ctx = dwarf.get_or_insert_with(|| {
            if self.sections.is_empty() {
                return None;
            }
            // A panic in the parser (corrupt debug info) leaves the file without DWARF.
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| context(&self.sections))).ok().flatten()
        });
        ctx.as_ref().map(f)
    }

    /// Whether the `addr2line` context exists already (without building it).
    fn addr2line_built(&self) -> bool {
        matches!(*self.dwarf.lock().unwrap_or_else(std::sync::PoisonError::into_inner), Some(Some(_)))
    }

    /// Resolves a link-time address (SVMA). `probe` is where to look (the address, or address - 1 for a return
    /// address); offsets are computed from `address`. Returns the frames at that address, innermost (inlined)
    /// first and the out-of-line function last; empty when nothing covers it.
    pub fn lookup(&self, address: u64, probe: u64) -> Vec<SymbolInfo> {
        let found = match self.dwarf_broken.load(AtomicOrdering::Relaxed) {
            false => self.with_addr2line(|ctx| {
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dwarf_frames(ctx, address, probe)))
            }),
            true => None,
        };
        let out = match found {
            Some(Ok(frames)) => frames,
            Some(Err(_)) => {
                self.dwarf_broken.store(true, AtomicOrdering::Relaxed);
                Vec::new()
            }
            None => Vec::new(),
        };
        self.symbols().finish_lookup(out, address, probe)
    }

    /// [`DebugFile::lookup`] for many `(address, probe)` pairs; the results are in the order of `queries`, and the
    /// same as one [`DebugFile::lookup`] per query, except for an address of live code that the line program of a
    /// unit the linker dropped also covers, when the unit's declared ranges were written as empty: the unit-by-unit
    /// path does not name that dropped code, `addr2line` may (`symbols/batch.rs` says when).
    ///
    /// The batch is resolved unit by unit: the queries are grouped by the compilation unit that covers them and
    /// each unit's line program and DIE tree are read once for all of its queries, the units spread over the cores
    /// (see `symbols/batch.rs`). The list of units is built on the first batch and kept with the file. Two cases
    /// go to `addr2line` instead: fewer than 64 queries left to look up once this file's `addr2line` context
    /// exists (built by an earlier [`DebugFile::lookup`]; it keeps each unit's tables), and the queries the unit
    /// path leaves (odd or corrupt DWARF).
    ///
    /// Answers are kept with the file (at most 65,536, from batches that left at most 4,096 queries to look up)
    /// and a later batch asking the same `(address, probe)` gets them again without a lookup: the reports one
    /// store renders one after another share most of their frames.
    pub fn lookup_batch(&self, queries: &[(u64, u64)]) -> Vec<Vec<SymbolInfo>> {
        let mut out: Vec<Option<Vec<SymbolInfo>>> = {
            let kept = self.answers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            queries.iter().map(|q| kept.get(q).cloned()).collect()
        };
        let missing: Vec<usize> = (0..queries.len()).filter(|&i| out[i].is_none()).collect();
        let asked: Vec<(u64, u64)> = missing.iter().map(|&i| queries[i]).collect();
        let addr2line_ready = self.addr2line_built();
        let got = if asked.is_empty() || (asked.len() < UNIT_BATCH_MIN && addr2line_ready) {
            asked.iter().map(|&(a, p)| self.lookup(a, p)).collect()
        } else {
            self.lookup_batch_units(&asked, cores()).0
        };
        let keep = missing.len() <= KEPT_BATCH_MAX;
        let mut kept = self.answers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for (i, frames) in missing.into_iter().zip(got) {
            if keep && kept.len() < KEPT_ANSWERS_MAX {
                kept.insert(queries[i], frames.clone());
            }
            out[i] = Some(frames);
        }
        out.into_iter().map(Option::unwrap_or_default).collect()
    }

    /// The unit-by-unit path of [`DebugFile::lookup_batch`] whatever the batch size, on up to `threads` threads
    /// (tests compare it with [`DebugFile::lookup_batch_addr2line`]). Also returns how many queries it left to
    /// [`DebugFile::lookup`].
    #[doc(hidden)]
    pub fn lookup_batch_units(&self, queries: &[(u64, u64)], threads: usize) -> (Vec<Vec<SymbolInfo>>, usize) {
        let units = match self.dwarf_broken.load(AtomicOrdering::Relaxed) {
            false => self
                .units
                .get_or_init(|| {
                    // A panic in the parser (corrupt debug info) leaves the file without a unit list.
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        gimli_dwarf(&self.sections).and_then(|d| batch::Units::new(d, threads))
                    }))
                    .ok()
                    .flatten()
                })
                .as_ref(),
            true => None,
        };
        let Some(units) = units else {
            return (self.lookup_batch_addr2line(queries), queries.len());
        };
        self.unit_batches.fetch_add(1, AtomicOrdering::Relaxed);
        let found = batch::lookup(units, self.symbols(), queries, threads);
        let mut left = 0;
        let frames = found
            .into_iter()
            .zip(queries)
            .map(|(frames, &(a, p))| {
                frames.unwrap_or_else(|| {
                    left += 1;
                    self.lookup(a, p)
                })
            })
            .collect();
        (frames, left)
    }

    /// Checks the batch path's line-program decoder against `gimli`'s on every unit of this file: the number of
    /// units compared, or the first difference (tests).
    #[doc(hidden)]
    pub fn check_line_sequences(&self) -> Result<usize, String> {
        let dwarf = gimli_dwarf(&self.sections).ok_or("no DWARF")?;
        batch::check_run_fast(&dwarf)
    }

    /// Checks how the batch path reads unit DIEs when listing units against `gimli`'s `Unit` on every unit of this
    /// file: the number of units compared, or the first difference (tests).
    #[doc(hidden)]
    pub fn check_listed_units(&self) -> Result<usize, String> {
        let dwarf = gimli_dwarf(&self.sections).ok_or("no DWARF")?;
        batch::check_lean_units(&dwarf)
    }

    /// The batch as `addr2line` resolves it, one address at a time (what [`DebugFile::lookup_batch`] did before
    /// the unit-by-unit path; kept as the tests' reference).
    ///
    /// A large batch (2,048 queries or more) on a machine with several cores is sorted by address and split into
    /// one contiguous run per core: the calling thread resolves the first run with this file's DWARF context, and
    /// each other run gets a thread and a context of its own (an `addr2line` context is single-threaded; the file
    /// bytes and the symbol table are shared, not copied). Sorting also makes each run touch few compilation units,
    /// so the units parsed per context stay few. The results are the same as one [`DebugFile::lookup`] per query.
    #[doc(hidden)]
    pub fn lookup_batch_addr2line(&self, queries: &[(u64, u64)]) -> Vec<Vec<SymbolInfo>> {
        self.lookup_batch_on(queries, cores())
    }

    /// [`DebugFile::lookup_batch_addr2line`] as if the machine had `cores` cores (tests split batches on any machine).
    fn lookup_batch_on(&self, queries: &[(u64, u64)], cores: usize) -> Vec<Vec<SymbolInfo>> {
        let parallel = cores >= 2 && queries.len() >= PARALLEL_BATCH_MIN;
        if !parallel || self.dwarf_broken.load(AtomicOrdering::Relaxed) || !self.has_dwarf() {
            return queries.iter().map(|&(a, p)| self.lookup(a, p)).collect();
        }
        let mut order: Vec<usize> = (0..queries.len()).collect();
        order.sort_by_key(|&i| queries[i].1);
        let per = order.len().div_ceil(cores.min(8));
        let mut runs = order.chunks(per);
        let first = runs.next().unwrap_or(&[]);
        let (symbols, sections) = (self.symbols(), self.sections.as_slice());
        // One run: (query index, frames). `None` when the DWARF parser panicked (corrupt debug info).
        let resolve = |ctx: &Context<Reader>, run: &[usize]| -> Option<Vec<(usize, Vec<SymbolInfo>)>> {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                run.iter()
                    .map(|&i| {
                        let (a, p) = queries[i];
                        (i, symbols.finish_lookup(dwarf_frames(ctx, a, p), a, p))
                    })
                    .collect()
            }))
            .ok()
        };
        // This thread's run uses the file's own context (its tables stay for later lookups), under its lock; each
        // other run gets a thread and a context of its own.
        let ran = self.with_addr2line(|ctx| {
            std::thread::scope(|scope| {
                let others: Vec<_> = runs
                    .map(|run| (run, scope.spawn(move || context(sections).and_then(|c| resolve(&c, run)))))
                    .collect();
                let mine = resolve(ctx, first);
                let others: Vec<_> = others.into_iter().map(|(run, h)| (run, h.join().ok().flatten())).collect();
                (mine, others)
            })
        });
        let Some((mine, others)) = ran else {
            return queries.iter().map(|&(a, p)| self.lookup(a, p)).collect();
        };
        if mine.is_none() {
            self.dwarf_broken.store(true, AtomicOrdering::Relaxed);
        }
        let mut out: Vec<Vec<SymbolInfo>> = vec![Vec::new(); queries.len()];
        let mut failed: Vec<&[usize]> = Vec::new();
        for (run, results) in std::iter::once((first, mine)).chain(others) {
            match results {
                Some(v) => v.into_iter().for_each(|(i, frames)| out[i] = frames),
                None => failed.push(run),
            }
        }
        // A run whose DWARF lookups failed gets the symbol table alone, as `lookup` does once DWARF is broken.
        for run in failed {
            for &i in run {
                let (a, p) = queries[i];
                out[i] = self.symbols().finish_lookup(Vec::new(), a, p);
            }
        }
        out
    }

    /// The symbol-table entry covering `addr`: `(start, end, raw name)`.
    pub fn symbol_at(&self, addr: u64) -> Option<(u64, u64, &str)> {
        self.symbols().at(addr)
    }

    /// Demangled display form of a raw symbol-table name (Mach-O's leading `_` removed first).
    pub fn display_name(&self, raw: &str) -> String {
        self.symbols().display_name(raw)
    }
}

/// The DWARF part of [`DebugFile::lookup`]: frames innermost first, names possibly empty.
fn dwarf_frames(ctx: &Context<Reader>, address: u64, probe: u64) -> Vec<SymbolInfo> {
    let mut out = Vec::new();
    if let Ok(mut frames) = ctx.find_frames(probe).skip_all_loads() {
        // The unit holding the frames' DIEs, looked up once for all of them (on the first frame that has a DIE).
        let mut unit = None;
        while let Ok(Some(f)) = frames.next() {
            let name = f.function.as_ref().and_then(|n| n.raw_name().ok()).map(|c| demangle::demangle(&c));
            let start = f.dw_die_offset.and_then(|off| {
                let unit = unit.get_or_insert_with(|| ctx.find_dwarf_and_unit(probe).skip_all_loads()).as_ref()?;
                die_start(unit, probe, off)
            });
            let (file, line) = match &f.location {
                Some(l) => (l.file.map(str::to_string), l.file.map(|_| u64::from(l.line.unwrap_or(0)))),
                None => (None, None),
            };
            out.push(SymbolInfo {
                name: name.unwrap_or_default(),
                offset: start.map(|s| address.wrapping_sub(s)),
                file,
                line,
                file_verbatim: false,
            });
        }
    }
    out
}

/// One function symbol: address range and where its raw name lies in the file's bytes.
#[derive(Clone, Copy, Debug)]
struct Sym {
    start: u64,
    end: u64,
    name_at: usize,
    name_len: usize,
}

/// A file's symbol table being built on a thread of its own while the loading thread goes on (to the DWARF sections,
/// then the first batch's unit listing, which does not need it); the first use waits for it. On the benchmark's
/// binary it takes about 2 ms (20,105 symbols: reading them, their names, sorting), which the listing's serial start
/// leaves a core for.
struct PendingSymbols {
    table: OnceLock<SymbolTable>,
    /// The building thread until the first use joins it.
    building: Mutex<Option<std::thread::JoinHandle<SymbolTable>>>,
    /// The file's bytes and whether it is Mach-O, for an empty table should the building thread panic.
    data: Bytes,
    macho: bool,
}

impl PendingSymbols {
    /// Starts building the table of the object at `range` of `data` (the whole file, or a universal slice). When
    /// no thread can be started, it is built here and now.
    fn start(data: &Bytes, range: std::ops::Range<usize>, macho: bool) -> PendingSymbols {
        // The thread parses the object's headers again (`object::File` borrows the bytes; a few microseconds).
        let build = {
            let data = data.clone();
            move || match data.get(range).map(object::File::parse) {
                Some(Ok(obj)) => SymbolTable::new(&obj, &data, macho),
                _ => SymbolTable::empty(&data, macho),
            }
        };
        let pending = PendingSymbols { table: OnceLock::new(), building: Mutex::new(None), data: data.clone(), macho };
        match std::thread::Builder::new().name("viewer-symbols".into()).spawn(build.clone()) {
            Ok(handle) => *pending.building.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(handle),
            Err(_) => {
                let _ = pending.table.set(build());
            }
        }
        pending
    }

    /// The table: waits for the building thread the first time. A thread that panicked (a parser's panic on a
    /// corrupt file) leaves an empty table, and DWARF lookups still work; no note says so (a panic while loading
    /// the rest of the file fails the load with one). The thread holds the file's bytes until it ends, even if the
    /// file is dropped meanwhile.
    fn get(&self) -> &SymbolTable {
        self.table.get_or_init(|| {
            let handle = self.building.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
            handle.and_then(|h| h.join().ok()).unwrap_or_else(|| SymbolTable::empty(&self.data, self.macho))
        })
    }
}

/// Function symbols sorted by address, their names borrowed from the file's bytes (checked UTF-8 when built).
struct SymbolTable {
    data: Bytes,
    entries: Vec<Sym>,
    /// Is this a Mach-O (symbol names carry a leading `_`)?
    macho: bool,
}

impl SymbolTable {
    fn new(obj: &object::File<'_>, data: &Bytes, macho: bool) -> SymbolTable {
        SymbolTable { data: data.clone(), entries: symbol_table(obj, data), macho }
    }

    /// A table without symbols (the object did not parse, or building the table panicked).
    fn empty(data: &Bytes, macho: bool) -> SymbolTable {
        SymbolTable { data: data.clone(), entries: Vec::new(), macho }
    }

    /// The entry covering `addr`: `(start, end, raw name)`.
    fn at(&self, addr: u64) -> Option<(u64, u64, &str)> {
        let i = self.entries.partition_point(|s| s.start <= addr);
        let s = self.entries.get(i.checked_sub(1)?)?;
        if addr >= s.end {
            return None;
        }
        let name = self.data.get(s.name_at..s.name_at.checked_add(s.name_len)?)?;
        Some((s.start, s.end, std::str::from_utf8(name).ok()?))
    }

    fn display_name(&self, raw: &str) -> String {
        let n = if self.macho { demangle::strip_macho_underscore(raw) } else { raw };
        demangle::demangle(n)
    }

    /// Completes DWARF frames with the symbol table: fills the out-of-line function's missing name or start, drops
    /// nameless frames, and falls back to the symbol alone when DWARF named nothing.
    fn finish_lookup(&self, mut out: Vec<SymbolInfo>, address: u64, probe: u64) -> Vec<SymbolInfo> {
        let sym = self.at(probe);
        if let Some(last) = out.last_mut() {
            if let Some((start, _, raw)) = sym {
                if last.name.is_empty() {
                    last.name = self.display_name(raw);
                }
                if last.offset.is_none() {
                    last.offset = Some(address.wrapping_sub(start));
                }
            }
            out.retain(|s| !s.name.is_empty());
            if !out.is_empty() {
                return out;
            }
        }
        if let Some((start, _, raw)) = sym {
            out = vec![SymbolInfo {
                name: self.display_name(raw),
                offset: Some(address.wrapping_sub(start)),
                file: None,
                line: None,
                file_verbatim: false,
            }];
        }
        out
    }
}

/// The start of the address range of the DIE at `off` in `unit` that holds `probe` (else of its first range).
fn die_start(unit: &gimli::UnitRef<'_, Reader>, probe: u64, off: gimli::UnitOffset<usize>) -> Option<u64> {
    let entry = unit.entry(off).ok()?;
    let mut ranges = unit.die_ranges(&entry).ok()?;
    let mut best = None;
    while let Ok(Some(r)) = ranges.next() {
        if r.begin <= probe && probe < r.end {
            return Some(r.begin);
        }
        if best.is_none() {
            best = Some(r.begin);
        }
    }
    best
}

/// The bytes of the file at `path`: mapped when `map` is set and mapping works, else read.
fn file_bytes(path: &Path, map: bool) -> Result<FileBytes, LoadError> {
    let file = fs::File::open(path).map_err(LoadError::Io)?;
    if map {
        // SAFETY: `Mmap::map` is unsafe because the mapped file may change under us. Reads of a changed page give
        // other bytes, which the bounds-checked parsers treat as any corrupt input; a truncation raises SIGBUS on
        // the next access past the new end, which ends the process. Only one-shot commands map
        // (`DebugFile::load_mapped`), and llvm-symbolizer and atos accept the same for the same speed.
        #[allow(unsafe_code)]
        let mapped = unsafe { memmap2::Mmap::map(&file) };
        if let Ok(m) = mapped {
            return Ok(FileBytes::Mapped(m));
        }
    }
    let mut v = Vec::new();
    std::io::Read::read_to_end(&mut &file, &mut v).map_err(LoadError::Io)?;
    Ok(FileBytes::Read(v))
}

/// Where `part` lies inside `whole`, when it is a sub-slice of it.
fn range_in(whole: &[u8], part: &[u8]) -> Option<std::ops::Range<usize>> {
    let at = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    let end = at.checked_add(part.len())?;
    (end <= whole.len()).then_some(at..end)
}

fn symbol_table(obj: &object::File<'_>, data: &[u8]) -> Vec<Sym> {
    let text_sections: HashMap<object::SectionIndex, (u64, u64)> = obj
        .sections()
        .filter(|s| s.kind() == SectionKind::Text)
        .map(|s| (s.index(), (s.address(), s.address().saturating_add(s.size()))))
        .collect();
    // (start, end, name range, global)
    let mut raw: Vec<(u64, u64, std::ops::Range<usize>, bool)> = Vec::new();
    let push_from = |raw: &mut Vec<(u64, u64, std::ops::Range<usize>, bool)>,
                     syms: &mut dyn Iterator<Item = object::Symbol<'_, '_>>| {
        for s in syms {
            if s.is_undefined() {
                continue;
            }
            let Some(idx) = s.section_index() else { continue };
            let Some(&(sec_start, sec_end)) = text_sections.get(&idx) else { continue };
            let Ok(name) = s.name_bytes() else { continue };
            if name.is_empty() || std::str::from_utf8(name).is_err() {
                continue;
            }
            let Some(name_range) = range_in(data, name) else { continue };
            let addr = s.address();
            // A symbol outside its section's bytes (Mach-O `__mh_execute_header` sits on the header, before
            // `__text`) covers only its own address, so a stripped binary does not name every address after it.
            let end = if s.size() > 0 {
                addr.saturating_add(s.size())
            } else if (sec_start..sec_end).contains(&addr) {
                sec_end
            } else {
                addr.saturating_add(1)
            };
            raw.push((addr, end, name_range, s.is_global()));
        }
    };
    push_from(&mut raw, &mut obj.symbols());
    if raw.is_empty() {
        push_from(&mut raw, &mut obj.dynamic_symbols());
    }
    // Sort by address; at equal addresses prefer global names, then the first seen.
    raw.sort_by(|a, b| a.0.cmp(&b.0).then(b.3.cmp(&a.3)));
    raw.dedup_by(|b, a| a.0 == b.0);
    // A symbol without a size ends where the next one starts.
    let mut out = Vec::with_capacity(raw.len());
    for (i, (start, end, name, _)) in raw.iter().enumerate() {
        let next = raw.get(i + 1).map(|r| r.0).unwrap_or(u64::MAX);
        let end = if end > start { (*end).min(next.max(start.saturating_add(1))) } else { next };
        out.push(Sym { start: *start, end, name_at: name.start, name_len: name.len() });
    }
    out
}

/// DWARF sections no lookup reads (variable locations and macros): left out, so that a compressed one (Debian's
/// `-dbg` packages compress every section) is not decompressed for nothing.
const UNREAD_SECTIONS: [gimli::SectionId; 4] = [
    gimli::SectionId::DebugLoc,
    gimli::SectionId::DebugLocLists,
    gimli::SectionId::DebugMacinfo,
    gimli::SectionId::DebugMacro,
];

/// The DWARF sections of `obj` as readers over `data` (a compressed section is decompressed into a buffer of its
/// own): every section `gimli::Dwarf::load` asks for that the file has, but [`UNREAD_SECTIONS`]. Empty when it has
/// none.
fn dwarf_sections(obj: &object::File<'_>, data: &Bytes) -> Vec<(gimli::SectionId, Reader)> {
    let endian = if obj.is_little_endian() { RunTimeEndian::Little } else { RunTimeEndian::Big };
    let whole = EndianReader::new(data.clone(), endian);
    let mut out = Vec::new();
    // Dwarf::load names the sections it reads; the readers it builds are dropped, the list is kept.
    let _ = gimli::Dwarf::load(|id| -> Result<Reader, gimli::Error> {
        let wanted = !UNREAD_SECTIONS.contains(&id);
        let section = obj.section_by_name(id.name()).filter(|_| wanted);
        let reader = section.and_then(|s| match s.uncompressed_data() {
            Ok(std::borrow::Cow::Borrowed(b)) => Some(match range_in(data, b) {
                Some(r) => whole.range(r),
                None => EndianReader::new(Bytes::new(b.to_vec()), endian),
            }),
            Ok(std::borrow::Cow::Owned(v)) => Some(EndianReader::new(Bytes::new(v), endian)),
            Err(_) => None,
        });
        if let Some(r) = &reader {
            out.push((id, r.clone()));
        }
        Ok(reader.unwrap_or_else(|| EndianReader::new(Bytes::new(Vec::new()), endian)))
    });
    out
}

/// The cores this machine has (1 when unknown).
fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// The DWARF of the given sections (absent ones are empty); `None` without sections.
fn gimli_dwarf(sections: &[(gimli::SectionId, Reader)]) -> Option<gimli::Dwarf<Reader>> {
    let endian = sections.first().map(|(_, r)| gimli::Reader::endian(r))?;
    gimli::Dwarf::load(|id| -> Result<Reader, gimli::Error> {
        Ok(sections
            .iter()
            .find(|(s, _)| *s == id)
            .map(|(_, r)| r.clone())
            .unwrap_or_else(|| EndianReader::new(Bytes::new(Vec::new()), endian)))
    })
    .ok()
}

/// An `addr2line` context over the given sections (absent ones are empty).
fn context(sections: &[(gimli::SectionId, Reader)]) -> Option<Context<Reader>> {
    Context::from_dwarf(gimli_dwarf(sections)?).ok()
}

/// What the store needs to know about an image to find its debug file.
#[derive(Clone, Debug, Default)]
pub struct ImageQuery {
    /// Image name (file name).
    pub name: Option<String>,
    /// Path on the crashed machine.
    pub path: Option<String>,
    /// UUID or build ID.
    pub id: Option<ImageId>,
    /// Architecture, when known.
    pub arch: Option<String>,
    /// True when the image belongs to a report of another OS than the one this runs on (a macOS or iOS report
    /// read on Linux, say): its path names a file of that other machine, so the file at the same path here (a
    /// Linux `/bin/sleep` for a macOS `/bin/sleep`) is never looked at.
    pub other_os: bool,
}

/// Debug files kept across [`SymbolStore`]s, for a long-running process that symbolicates one report after
/// another (the collector): the reports of one build share its debug files, and loading a file and listing its
/// units costs far more than the lookups of one report.
///
/// Files are kept by object (path and universal slice), with the file's length and modification time and whether
/// it was mapped; a file whose length or time changed is loaded again. What the kept files hold is bounded by a
/// budget in bytes, charged for each file its bytes and its decompressed sections ([`DebugFile::held_bytes`]; the
/// unit list, `addr2line`'s tables and the kept answers, at most [`KEPT_ANSWERS_MAX`] a file, come on top), and at
/// most [`KEPT_FILES_MAX`] files are kept; the least recently used go first. A file larger than the whole budget
/// is used but not kept. Shared by threads: the files it hands out are `Sync` (lookups on one file from several
/// threads take turns where they share state).
#[derive(Debug)]
pub struct DebugFileCache {
    /// Bytes kept files may hold, at most ([`DebugFile::held_bytes`]).
    budget: u64,
    state: Mutex<CacheState>,
}

/// Files a [`DebugFileCache`] keeps at most, whatever their sizes: each may also keep up to [`KEPT_ANSWERS_MAX`]
/// answers.
pub const KEPT_FILES_MAX: usize = 64;

/// A file's length in bytes and modification time, when it was loaded.
type Stamp = (u64, Option<std::time::SystemTime>);

#[derive(Debug)]
struct KeptFile {
    object: ObjectRef,
    stamp: Stamp,
    mapped: bool,
    /// The cache's use count at this file's last use.
    last_use: u64,
    file: Arc<DebugFile>,
}

#[derive(Debug, Default)]
struct CacheState {
    files: Vec<KeptFile>,
    /// Uses so far (the clock of `last use`).
    uses: u64,
    /// Files loaded (not found kept).
    loads: usize,
}

impl DebugFileCache {
    /// A cache keeping debug files that hold up to `budget` bytes ([`DebugFile::held_bytes`]).
    pub fn new(budget: u64) -> DebugFileCache {
        DebugFileCache { budget, state: Mutex::new(CacheState::default()) }
    }

    /// How many files it has loaded (each time one was not kept, or had changed); tests and statistics.
    pub fn loads(&self) -> usize {
        self.lock().loads
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, CacheState> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The kept file for `ident`, else the file loaded (read, or mapped with `map`) and kept.
    fn get_or_load(&self, ident: &Identity, map: bool) -> Result<Arc<DebugFile>, LoadError> {
        let meta = fs::metadata(&ident.object.path).map_err(LoadError::Io)?;
        let stamp = (meta.len(), meta.modified().ok());
        {
            let mut st = self.lock();
            st.uses += 1;
            let now = st.uses;
            if let Some(i) = st.files.iter().position(|f| f.object == ident.object && f.mapped == map) {
                if st.files[i].stamp == stamp {
                    st.files[i].last_use = now;
                    return Ok(st.files[i].file.clone());
                }
                st.files.swap_remove(i);
            }
        }
        // Loaded without the lock: another thread may load the same file meanwhile; the first one kept wins.
        let file = Arc::new(DebugFile::load_with(ident.clone(), map)?);
        let mut st = self.lock();
        st.loads += 1;
        if let Some(kept) = st.files.iter().find(|f| f.object == ident.object && f.mapped == map && f.stamp == stamp) {
            return Ok(kept.file.clone());
        }
        // Another thread's copy of an older version of the file goes.
        st.files.retain(|f| !(f.object == ident.object && f.mapped == map));
        let held = file.held_bytes();
        if held <= self.budget {
            while st.files.len() >= KEPT_FILES_MAX
                || st.files.iter().map(|f| f.file.held_bytes()).sum::<u64>() + held > self.budget
            {
                let Some(oldest) = st.files.iter().enumerate().min_by_key(|(_, f)| f.last_use).map(|(i, _)| i) else {
                    break;
                };
                st.files.swap_remove(oldest);
            }
            let last_use = st.uses;
            st.files.push(KeptFile { object: ident.object.clone(), stamp, mapped: map, last_use, file: file.clone() });
        }
        Ok(file)
    }
}

/// Finds debug files and caches them for the whole run (and beyond, with [`SymbolStore::with_cache`]).
#[derive(Default)]
pub struct SymbolStore {
    search_paths: Vec<PathBuf>,
    use_image_paths: bool,
    use_system_dirs: bool,
    /// Map debug files instead of reading them ([`DebugFile::load_mapped`]).
    map_files: bool,
    /// Debug files shared with other stores ([`SymbolStore::with_cache`]).
    shared: Option<Arc<DebugFileCache>>,
    scanned: bool,
    /// Everything identified in the search paths.
    candidates: Vec<Identity>,
    by_id: HashMap<Vec<u8>, Vec<usize>>,
    /// Parsed files, by object (path + slice).
    loaded: HashMap<ObjectRef, Option<Arc<DebugFile>>>,
    /// Resolution per image query (id hex or name), so each image is looked up once.
    resolved: HashMap<String, Option<Arc<DebugFile>>>,
    notes: Vec<String>,
}

impl std::fmt::Debug for SymbolStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SymbolStore")
            .field("search_paths", &self.search_paths)
            .field("candidates", &self.candidates.len())
            .field("loaded", &self.loaded.len())
            .finish()
    }
}

impl SymbolStore {
    /// A store searching `paths` (files or directories), plus the images' own paths and `/usr/lib/debug`.
    pub fn new(paths: Vec<PathBuf>) -> Self {
        SymbolStore { search_paths: paths, use_image_paths: true, use_system_dirs: true, ..Default::default() }
    }

    /// A store that only uses `paths` (no image paths, no system directories): reproducible in tests.
    pub fn only(paths: Vec<PathBuf>) -> Self {
        SymbolStore { search_paths: paths, ..Default::default() }
    }

    /// The same store, mapping the debug files it loads instead of reading them ([`DebugFile::load_mapped`]: faster
    /// for a one-shot command, but a file truncated while in use ends the process with SIGBUS).
    pub fn with_mapped_files(mut self) -> Self {
        self.map_files = true;
        self
    }

    /// The same store, taking its debug files from `cache` (and loading into it the ones it lacks), so that they
    /// outlive this store: for a long-running process, one store per report.
    pub fn with_cache(mut self, cache: Arc<DebugFileCache>) -> Self {
        self.shared = Some(cache);
        self
    }

    /// Notes gathered so far: debug files not used and why, files that failed to parse.
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// Takes the notes gathered so far.
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    fn scan(&mut self) {
        if self.scanned {
            return;
        }
        self.scanned = true;
        let paths = self.search_paths.clone();
        for p in paths {
            if !p.exists() {
                self.notes.push(format!("symbol path {} does not exist", p.display()));
                continue;
            }
            self.walk(&p, 0);
        }
    }

    fn walk(&mut self, p: &Path, depth: usize) {
        if depth > MAX_DEPTH {
            return;
        }
        let Ok(meta) = fs::metadata(p) else { return };
        if meta.is_dir() {
            let Ok(rd) = fs::read_dir(p) else { return };
            let mut entries: Vec<PathBuf> = rd.filter_map(|e| e.ok().map(|e| e.path())).collect();
            entries.sort();
            for e in entries {
                self.walk(&e, depth + 1);
            }
        } else if meta.is_file() {
            for ident in identify(p) {
                let i = self.candidates.len();
                if let Some(id) = &ident.id {
                    self.by_id.entry(id.bytes().to_vec()).or_default().push(i);
                }
                self.candidates.push(ident);
            }
        }
    }

    fn load(&mut self, ident: &Identity) -> Option<Arc<DebugFile>> {
        if let Some(f) = self.loaded.get(&ident.object) {
            return f.clone();
        }
        let loaded = match &self.shared {
            Some(cache) => cache.get_or_load(ident, self.map_files),
            None => DebugFile::load_with(ident.clone(), self.map_files).map(Arc::new),
        };
        let f = match loaded {
            Ok(f) => Some(f),
            Err(e) => {
                self.notes.push(format!("{}: {e}", ident.object.path.display()));
                None
            }
        };
        self.loaded.insert(ident.object.clone(), f.clone());
        f
    }

    /// Loads a specific file (for `atos`), choosing the slice of a universal file by `id`, then `arch`, then the
    /// first slice.
    pub fn load_path(&mut self, path: &Path, id: Option<&ImageId>, arch: Option<&str>) -> Option<Arc<DebugFile>> {
        let idents = identify(path);
        let pick = idents
            .iter()
            .find(|i| id.is_some() && i.id.as_ref() == id)
            .or_else(|| idents.iter().find(|i| arch.is_some() && Some(i.arch.as_str()) == arch))
            .or_else(|| idents.iter().find(|_| id.is_none() && arch.is_none()))
            .cloned();
        match pick {
            Some(i) => self.load(&i),
            None => {
                if idents.is_empty() {
                    self.notes.push(format!("{}: not a Mach-O or ELF file", path.display()));
                } else {
                    self.notes.push(format!("{}: no slice matches the requested UUID/architecture", path.display()));
                }
                None
            }
        }
    }

    /// Finds (once per image) and loads the debug file for an image.
    pub fn find(&mut self, q: &ImageQuery) -> Option<Arc<DebugFile>> {
        let key = match &q.id {
            Some(id) => id.to_hex(),
            None => format!(
                "name:{}:{}",
                q.path.as_deref().or(q.name.as_deref()).unwrap_or(""),
                q.arch.as_deref().unwrap_or("")
            ),
        };
        if let Some(r) = self.resolved.get(&key) {
            return r.clone();
        }
        let r = self.find_uncached(q);
        self.resolved.insert(key, r.clone());
        r
    }

    fn find_uncached(&mut self, q: &ImageQuery) -> Option<Arc<DebugFile>> {
        self.scan();
        let label = q.name.as_deref().unwrap_or("???").to_string();
        if let Some(id) = &q.id {
            let idx: Vec<usize> = self.by_id.get(id.bytes()).cloned().unwrap_or_default();
            // Prefer objects with DWARF (dSYMs, unstripped ELF) over stripped ones.
            let mut ordered: Vec<Identity> = idx.iter().map(|&i| self.candidates[i].clone()).collect();
            ordered.sort_by_key(|i| !i.has_dwarf);
            for ident in ordered {
                if let Some(f) = self.load(&ident) {
                    return Some(f);
                }
            }
            if let ImageId::BuildId(b) = id {
                if self.use_system_dirs && b.len() > 1 {
                    let hex = id.to_hex();
                    let p = Path::new(SYSTEM_DEBUG_DIR)
                        .join(".build-id")
                        .join(&hex[..2])
                        .join(format!("{}.debug", &hex[2..]));
                    if let Some(i) = identify(&p).into_iter().find(|i| i.id.as_ref() == Some(id)) {
                        if let Some(f) = self.load(&i) {
                            return Some(f);
                        }
                    }
                }
            }
        }
        if self.use_image_paths && !q.other_os {
            if let Some(path) = q.path.as_deref().filter(|p| Path::new(p).is_file()) {
                let idents = identify(Path::new(path));
                let hit = idents.iter().find(|i| match &q.id {
                    Some(id) => i.id.as_ref() == Some(id),
                    None => q.arch.as_deref().map(|a| a == i.arch).unwrap_or(true),
                });
                match hit {
                    Some(i) => {
                        let i = i.clone();
                        if let Some(f) = self.load(&i) {
                            return Some(f);
                        }
                    }
                    None => {
                        if let (Some(want), Some(got)) = (&q.id, idents.iter().find_map(|i| i.id.as_ref())) {
                            self.notes.push(format!(
                                "{label}: {path} on this machine has id {} but the report's image has {}; not used",
                                got.to_hex(),
                                want.to_hex()
                            ));
                        }
                    }
                }
            }
        }
        // No id match: explain candidates that carry the image's name but another id.
        let name = q.name.as_deref().unwrap_or("");
        if !name.is_empty() {
            let mut seen = false;
            for c in &self.candidates {
                let fname = c.object.path.file_name().and_then(|f| f.to_str()).unwrap_or("");
                let stem_match = fname == name || fname == format!("{name}.debug");
                if !stem_match {
                    continue;
                }
                let arch_ok = q.arch.as_deref().map(|a| a == c.arch || a.starts_with(&c.arch)).unwrap_or(true);
                match (&q.id, &c.id) {
                    (Some(want), Some(got)) if want != got && (arch_ok || !seen) => {
                        self.notes.push(format!(
                            "{label}: debug file {} ({}) has id {} but the report's image has {}; not used",
                            c.object.path.display(),
                            c.arch,
                            got.to_hex(),
                            want.to_hex()
                        ));
                        seen = true;
                    }
                    (None, _) if q.arch.as_deref().map(|a| a == c.arch).unwrap_or(true) => {
                        let c = c.clone();
                        return self.load(&c);
                    }
                    _ => {}
                }
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn image_ids_in_every_written_form() {
        let u = [0x82, 0xd1, 0x3d, 0x98, 0x21, 0x9e, 0x30, 0x40, 0xb6, 0x2a, 0x07, 0xa2, 0x97, 0x00, 0x7a, 0x7c];
        assert_eq!(parse_image_id("82D13D98-219E-3040-B62A-07A297007A7C"), Some(ImageId::Uuid(u)));
        assert_eq!(parse_image_id("82d13d98219e3040b62a07a297007a7c"), Some(ImageId::Uuid(u)));
        assert_eq!(parse_image_id("abcdef0123"), Some(ImageId::BuildId(vec![0xab, 0xcd, 0xef, 0x01, 0x23])));
        assert_eq!(parse_image_id(""), None);
        assert_eq!(parse_image_id("abc"), None);
        assert_eq!(parse_image_id("zz"), None);
        assert_eq!(parse_image_id("é1"), None);
    }

    /// A mapped debug file (what the `viewer` commands use) resolves every address as the same file read into memory, and
    /// a store set to map loads mapped files.
    #[test]
    fn a_mapped_file_resolves_like_a_read_one() {
        let exe = std::env::current_exe().unwrap();
        let ident = identify(&exe).into_iter().next().expect("the test binary is an object file");
        let read = DebugFile::load(ident.clone()).unwrap();
        let mapped = DebugFile::load_mapped(ident).unwrap();
        assert!(matches!(&*read.symbols().data.0, FileBytes::Read(_)));
        assert!(matches!(&*mapped.symbols().data.0, FileBytes::Mapped(_)));
        assert_eq!(mapped.image_base, read.image_base);
        assert_eq!(mapped.symbol_count(), read.symbol_count());
        assert!(mapped.has_dwarf());
        let mut named = 0;
        for s in read.symbols().entries.iter().step_by(7) {
            let a = s.start + (s.end - s.start) / 2;
            let got = mapped.lookup(a, a);
            assert_eq!(got, read.lookup(a, a), "address {a:#x}");
            named += usize::from(got.iter().any(|f| f.file.is_some()));
        }
        assert!(named > 10, "only {named} addresses had a source line");
        let mut store = SymbolStore::only(vec![]).with_mapped_files();
        let f = store.load_path(&exe, None, None).expect("loads");
        assert!(matches!(&*f.symbols().data.0, FileBytes::Mapped(_)));
    }

    /// A batch large enough to be split over threads gives, query by query and in order, what `lookup` gives.
    /// The test binary itself is the debug file (an ELF with DWARF in test builds).
    #[test]
    fn a_parallel_batch_resolves_like_single_lookups() {
        let exe = std::env::current_exe().unwrap();
        let ident = identify(&exe).into_iter().next().expect("the test binary is an object file");
        let file = DebugFile::load(ident).unwrap();
        assert!(file.has_dwarf(), "test builds carry DWARF");
        let funcs: Vec<(u64, u64)> = file.symbols().entries.iter().map(|s| (s.start, s.end)).collect();
        assert!(funcs.len() > 100);
        // Addresses spread over the whole text (deterministic), a return-address probe for every other one, and
        // two far outside it.
        let mut queries = Vec::new();
        for k in 0..(PARALLEL_BATCH_MIN as u64 + 500) {
            let (start, end) = funcs[(k.wrapping_mul(2_654_435_761) % funcs.len() as u64) as usize];
            let a = start + k % (end - start).max(1);
            queries.push((a, if k % 2 == 0 { a } else { a.saturating_sub(1).max(start) }));
        }
        queries.push((1, 1));
        queries.push((u64::MAX - 1, u64::MAX - 1));
        // Three runs (the calling thread and two more), whatever this machine has.
        let batch = file.lookup_batch_on(&queries, 3);
        assert_eq!(batch.len(), queries.len());
        let mut named = 0;
        for (q, got) in queries.iter().zip(&batch) {
            assert_eq!(*got, file.lookup(q.0, q.1), "query {q:x?}");
            named += usize::from(!got.is_empty());
        }
        assert!(named >= queries.len() - 2, "only {named} of {} queries named a function", queries.len());
    }

    /// A file is loaded once for all the stores sharing a cache, again when its length or time changes, and not
    /// kept when it is larger than the cache's budget.
    #[test]
    fn a_shared_cache_loads_a_file_once_and_again_when_it_changes() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/macho-built/crashy.dSYM/Contents/Resources/DWARF/crashy");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("crashy");
        let bytes = fs::read(&fixture).unwrap();
        fs::write(&path, &bytes).unwrap();
        let cache = Arc::new(DebugFileCache::new(1 << 20));
        let load_from = |cache: &Arc<DebugFileCache>, path: &Path| {
            let mut store = SymbolStore::only(vec![path.to_path_buf()]).with_cache(cache.clone());
            store.load_path(path, None, None).expect("the fixture loads")
        };
        let load = |cache: &Arc<DebugFileCache>| load_from(cache, &path);
        let (a, b) = (load(&cache), load(&cache));
        assert!(Arc::ptr_eq(&a, &b), "the second store got the kept file");
        assert_eq!(cache.loads(), 1);
        // The same object with one more byte: a changed file is loaded again.
        let mut longer = bytes.clone();
        longer.push(0);
        fs::write(&path, &longer).unwrap();
        let c = load(&cache);
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(cache.loads(), 2);
        assert!(Arc::ptr_eq(&c, &load(&cache)));
        assert_eq!(cache.loads(), 2);
        // A budget smaller than the file: used, never kept.
        let small = Arc::new(DebugFileCache::new(longer.len() as u64 - 1));
        let (d, e) = (load(&small), load(&small));
        assert!(!Arc::ptr_eq(&d, &e));
        assert_eq!(small.loads(), 2);
        assert_eq!(d.lookup(0, 0), e.lookup(0, 0));
        // Room for one file: the least recently used one goes.
        let other = dir.path().join("crashy2");
        fs::write(&other, &longer).unwrap();
        let one = Arc::new(DebugFileCache::new(longer.len() as u64 * 3 / 2));
        let first = load(&one);
        let second = load_from(&one, &other);
        assert!(Arc::ptr_eq(&second, &load_from(&one, &other)), "the newer file is kept");
        assert_eq!(one.loads(), 2);
        assert!(!Arc::ptr_eq(&first, &load(&one)), "the older one was let go");
        assert_eq!(one.loads(), 3);
        // A mapped file is not handed to a store that reads, nor the other way round.
        let mut mapping = SymbolStore::only(vec![path.clone()]).with_mapped_files().with_cache(cache.clone());
        let mapped = mapping.load_path(&path, None, None).expect("the fixture maps");
        assert!(!Arc::ptr_eq(&mapped, &c));
        assert_eq!(cache.loads(), 3);
        // At most KEPT_FILES_MAX files, however small.
        let many = Arc::new(DebugFileCache::new(u64::MAX));
        let paths: Vec<PathBuf> = (0..=KEPT_FILES_MAX).map(|i| dir.path().join(format!("copy{i}"))).collect();
        for p in &paths {
            fs::write(p, &bytes).unwrap();
            load_from(&many, p);
        }
        assert_eq!(many.loads(), KEPT_FILES_MAX + 1);
        load_from(&many, &paths[KEPT_FILES_MAX]);
        assert_eq!(many.loads(), KEPT_FILES_MAX + 1, "the newest is kept");
        load_from(&many, &paths[0]);
        assert_eq!(many.loads(), KEPT_FILES_MAX + 2, "the oldest went");
    }

    /// Kept files are shared by the collector's threads.
    #[test]
    fn debug_files_are_send_and_sync() {
        fn shareable<T: Send + Sync>() {}
        shareable::<DebugFile>();
        shareable::<DebugFileCache>();
    }

    /// A small batch on a file `addr2line` has not read yet goes unit by unit and keeps the listed units for the
    /// next batch; once `addr2line` holds the file's tables a small batch goes through them. Both give, query by
    /// query, what `lookup` gives.
    #[test]
    fn a_small_batch_on_a_fresh_file_goes_unit_by_unit_and_keeps_its_answers() {
        let exe = std::env::current_exe().unwrap();
        let ident = identify(&exe).into_iter().next().expect("the test binary is an object file");
        let file = DebugFile::load(ident).unwrap();
        let funcs: Vec<(u64, u64)> = file.symbols().entries.iter().map(|s| (s.start, s.end)).collect();
        let queries: Vec<(u64, u64)> = (0..10u64)
            .map(|k| funcs[(k.wrapping_mul(2_654_435_761) % funcs.len() as u64) as usize])
            .map(|(start, end)| (start + (end - start) / 2, start + (end - start) / 2))
            .collect();
        assert!(file.units.get().is_none() && file.dwarf.lock().unwrap().is_none());
        let first = file.lookup_batch(&queries);
        assert!(matches!(file.units.get(), Some(Some(_))), "the units were listed and kept");
        assert_eq!(file.unit_batches.load(AtomicOrdering::Relaxed), 1, "the batch went unit by unit");
        assert_eq!(file.answers.lock().unwrap().len(), queries.len(), "the answers were kept");
        let single: Vec<Vec<SymbolInfo>> = queries.iter().map(|&(a, p)| file.lookup(a, p)).collect();
        assert_eq!(first, single);
        assert!(first.iter().filter(|f| !f.is_empty()).count() >= 9, "{first:?}");
        // addr2line now holds the tables: new questions in a small batch go through them.
        assert!(file.addr2line_built());
        let shifted: Vec<(u64, u64)> = queries.iter().map(|&(a, p)| (a + 1, p + 1)).collect();
        let expected: Vec<Vec<SymbolInfo>> = shifted.iter().map(|&(a, p)| file.lookup(a, p)).collect();
        assert_eq!(file.lookup_batch(&shifted), expected);
        assert_eq!(file.unit_batches.load(AtomicOrdering::Relaxed), 1, "the small batch went through addr2line");
        assert_eq!(file.answers.lock().unwrap().len(), 2 * queries.len());
        // The first batch again comes from the kept answers, not from a lookup: with DWARF marked broken a lookup
        // would give the symbol table's names alone, without file and line.
        file.dwarf_broken.store(true, AtomicOrdering::Relaxed);
        let k = single.iter().position(|f| f.iter().any(|s| s.line.is_some())).expect("a query with a line");
        assert_ne!(file.lookup(queries[k].0, queries[k].1), single[k], "a lookup now loses the line");
        assert_eq!(file.lookup_batch(&queries), single);
        assert_eq!(file.unit_batches.load(AtomicOrdering::Relaxed), 1, "nothing was looked up");
    }
}
