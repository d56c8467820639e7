//! The Darwin image table, filled at install and kept current by dyld's add/remove-image callbacks (install time:
//! these run when an image is loaded or unloaded, never after a fault, so they may allocate and lock).
//!
//! Each image is read from memory with the bounds-checked Mach-O parser
//! (`crate::platform::darwin::crash::macho::read_header` over `vm_read_overwrite`): load address (the header), slide,
//! `__TEXT` size, `LC_UUID`, CPU type, and the runtime addresses of `__DATA,__crash_info` and of the unwind tables
//! `__TEXT,__unwind_info` and `__TEXT,__eh_frame` (registered here, from the add-image callback, for the shared
//! unwinder's compact-unwind source). The path comes from `dladdr`. dyld itself, which the callbacks never report,
//! is added from `task_info(TASK_DYLD_INFO)` → `dyld_all_image_infos.dyldImageLoadAddress`.
//!
//! The records live in a `Vec` behind a mutex; every change rebuilds the inactive half of the crash path's
//! double-buffered [`ImageTable`] and flips it (release), so the crash path never sees a half-written entry. The
//! callbacks for the images already loaded arrive inside `_dyld_register_func_for_add_image`; they are batched and
//! published once. **Type-checked only.**
#![allow(unsafe_code)]

use super::crash::mach::TaskReader;
use super::crash::macho;
use super::ffi;
use crate::crash::images::{ImageRecord, ImageTable};
use crate::platform::darwin::crash::dyld::{
    parse_all_image_infos, ALL_IMAGE_INFOS_PREFIX, TASK_DYLD_ALL_IMAGE_INFO_64,
};
use crate::unwind::UnwindSections;
use mach2::kern_return::KERN_SUCCESS;
use mach2::loader::mach_header;
use mach2::message::mach_msg_type_number_t;
use mach2::task::task_info;
use mach2::task_info::{task_dyld_info, TASK_DYLD_INFO, TASK_DYLD_INFO_COUNT};
use report_format::encode::ID_KIND_UUID;
use std::sync::Mutex;

/// One image as recorded at load time (owned).
#[derive(Clone, Debug)]
struct Owned {
    path: Vec<u8>,
    header: u64,
    size: u64,
    slide: i64,
    uuid: Option<[u8; 16]>,
    arch: &'static [u8],
    crash_info: (u64, u64),
    /// Runtime `__TEXT,__unwind_info` and `__TEXT,__eh_frame` (compact unwind, with DWARF for the functions it
    /// cannot describe), for the shared unwinder.
    unwind: UnwindSections,
}

struct Source {
    table: &'static ImageTable,
    records: Vec<Owned>,
    batching: bool,
}

static SOURCE: Mutex<Option<Source>> = Mutex::new(None);

/// Path of dyld (it is not in the add-image callbacks' list).
const DYLD_PATH: &[u8] = b"/usr/lib/dyld";

/// Reads the image whose Mach-O header is at `header` (`None` when it is not a readable 64-bit Mach-O).
fn read_image(header: u64, slide: Option<i64>, path: &[u8]) -> Option<Owned> {
    let reader = TaskReader::new();
    let mut read = |a: u64, b: &mut [u8]| reader.read_into(a, b);
    let mut head = [0u8; 32];
    if !read(header, &mut head) {
        return None;
    }
    let sizeofcmds = u32::from_le_bytes(head.get(20..24)?.try_into().ok()?) as usize;
    let mut buf = vec![0u8; 32usize.checked_add(sizeofcmds)?];
    let m = macho::read_header(&mut read, header, &mut buf).ok()?;
    let summary = m.summary().ok()?;
    let slide = slide.or_else(|| m.slide(header).map(|s| s as i64))?;
    let runtime = |sect: Option<(u64, u64)>| {
        sect.map(|(addr, size)| ((addr as i64).wrapping_add(slide) as u64, size)).unwrap_or((0, 0))
    };
    let crash_info = runtime(summary.crash_info);
    let unwind = UnwindSections {
        compact: runtime(summary.unwind_info),
        eh_frame: runtime(summary.eh_frame),
        ..UnwindSections::default()
    };
    Some(Owned {
        path: path.to_vec(),
        header,
        size: summary.text_size.unwrap_or(0),
        slide,
        uuid: summary.uuid,
        arch: macho::arch_name(summary.cputype, summary.cpusubtype).as_bytes(),
        crash_info,
        unwind,
    })
}

/// `dladdr(header).dli_fname`, copied.
fn path_of(mh: *const mach_header) -> Vec<u8> {
    // SAFETY: an all-zero Dl_info is a valid out-value (null pointers).
    let mut info: libc::Dl_info = unsafe { core::mem::zeroed() };
    // SAFETY: `mh` is an image header dyld just reported; dladdr only reads its own tables.
    if unsafe { libc::dladdr(mh.cast(), &mut info) } == 0 || info.dli_fname.is_null() {
        return Vec::new();
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by dyld, valid while the image is loaded.
    unsafe { std::ffi::CStr::from_ptr(info.dli_fname) }.to_bytes().to_vec()
}

/// Rebuilds the crash path's table from `records`.
fn publish(src: &Source) {
    // SAFETY: updates are serialized by the SOURCE mutex, held by every caller.
    unsafe {
        src.table.update(|list| {
            for r in &src.records {
                let _ = list.push_record(&ImageRecord {
                    path: &r.path,
                    load_address: r.header,
                    size: r.size,
                    bias: r.slide,
                    id: r.uuid.as_ref().map_or(&[][..], |u| &u[..]),
                    id_kind: ID_KIND_UUID,
                    arch: r.arch,
                    crash_info: r.crash_info,
                    unwind: r.unwind,
                });
            }
        })
    };
}

extern "C" fn on_add(mh: *const mach_header, slide: isize) {
    let path = path_of(mh);
    let Some(rec) = read_image(mh as u64, Some(slide as i64), &path) else { return };
    let mut g = SOURCE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(src) = g.as_mut() {
        if !src.records.iter().any(|r| r.header == rec.header) {
            src.records.push(rec);
        }
        if !src.batching {
            publish(src);
        }
    }
}

extern "C" fn on_remove(mh: *const mach_header, _slide: isize) {
    let mut g = SOURCE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(src) = g.as_mut() {
        src.records.retain(|r| r.header != mh as u64);
        if !src.batching {
            publish(src);
        }
    }
}

/// dyld's own image, from `TASK_DYLD_INFO`.
fn dyld_image() -> Option<Owned> {
    // SAFETY: an all-zero task_dyld_info is a valid out-value.
    let mut info: task_dyld_info = unsafe { core::mem::zeroed() };
    let mut count: mach_msg_type_number_t = TASK_DYLD_INFO_COUNT;
    // SAFETY: `info` is writable for `count` integers, as task_info requires for TASK_DYLD_INFO.
    let kr = unsafe {
        task_info(super::crash::mach::task(), TASK_DYLD_INFO, (&mut info as *mut task_dyld_info).cast(), &mut count)
    };
    if kr != KERN_SUCCESS || info.all_image_info_format != TASK_DYLD_ALL_IMAGE_INFO_64 {
        return None;
    }
    let mut b = [0u8; ALL_IMAGE_INFOS_PREFIX];
    if !TaskReader::new().read_into(info.all_image_info_addr, &mut b) {
        return None;
    }
    let dyld = parse_all_image_infos(&b)?.dyld_load_address?;
    read_image(dyld, None, DYLD_PATH)
}

/// Starts tracking images into `table`: registers the dyld callbacks (once per process: they cannot be
/// unregistered; a later install reuses them with the new table) and publishes the current list. Returns how many
/// images the table holds.
pub fn start(table: &'static ImageTable) -> usize {
    let first = {
        let mut g = SOURCE.lock().unwrap_or_else(|e| e.into_inner());
        let first = g.is_none();
        let records = match g.take() {
            Some(old) => old.records,
            None => dyld_image().into_iter().collect(),
        };
        *g = Some(Source { table, records, batching: true });
        first
    };
    if first {
        // SAFETY: registering plain `extern "C"` functions with the signature dyld expects.
        unsafe {
            ffi::_dyld_register_func_for_add_image(on_add);
            ffi::_dyld_register_func_for_remove_image(on_remove);
        }
    }
    let mut g = SOURCE.lock().unwrap_or_else(|e| e.into_inner());
    match g.as_mut() {
        Some(src) => {
            src.batching = false;
            publish(src);
            src.records.len()
        }
        None => 0,
    }
}

/// Republishes the table (the callbacks keep it current; this only re-reads nothing and flips once more).
pub fn refresh() -> usize {
    let g = SOURCE.lock().unwrap_or_else(|e| e.into_inner());
    match g.as_ref() {
        Some(src) => {
            publish(src);
            src.records.len()
        }
        None => 0,
    }
}
