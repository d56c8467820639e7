//! Image snapshot at install time: `dl_iterate_phdr` over the loaded ELF objects, with the GNU build id read from
//! each object's `PT_NOTE` segments in memory.
//!
//! `dl_iterate_phdr` takes the dynamic loader's lock, so it is never called after a fault. Libraries `dlopen`ed
//! after install are added by calling [`crate::refresh_images`] (for example right after a `dlopen`); until then,
//! frames inside them are reported as raw addresses outside every image.
#![allow(unsafe_code)]

use crate::crash::images::{ImageList, ImageRecord};
use crate::unwind::UnwindSections;
use report_format::encode::ID_KIND_BUILD_ID;
use std::ffi::CStr;

/// `NT_GNU_BUILD_ID`. Source: glibc `elf.h`.
pub const NT_GNU_BUILD_ID: u32 = 3;
/// `PT_GNU_EH_FRAME`: the segment holding `.eh_frame_hdr`. Source: glibc `elf.h`.
pub const PT_GNU_EH_FRAME: u32 = 0x6474_e550;

/// Finds the GNU build id in an ELF note area (`Elf64_Nhdr` records: namesz, descsz, type, name, desc, each
/// padded to `align` bytes, 4 or 8). Pure; bounds-checked.
pub fn find_build_id(notes: &[u8], align: usize) -> Option<&[u8]> {
    let align = if align == 8 { 8 } else { 4 };
    let pad = |n: usize| n.div_ceil(align) * align;
    let mut off = 0usize;
    while off + 12 <= notes.len() {
        let word =
            |at: usize| -> Option<usize> { Some(u32::from_ne_bytes(notes.get(at..at + 4)?.try_into().ok()?) as usize) };
        let namesz = word(off)?;
        let descsz = word(off + 4)?;
        let ntype = word(off + 8)? as u32;
        let name_at = off + 12;
        let desc_at = name_at.checked_add(pad(namesz))?;
        let next = desc_at.checked_add(pad(descsz))?;
        if ntype == NT_GNU_BUILD_ID && notes.get(name_at..name_at + namesz) == Some(b"GNU\0") {
            return notes.get(desc_at..desc_at + descsz);
        }
        if next <= off {
            return None;
        }
        off = next;
    }
    None
}

struct Ctx<'a> {
    list: &'a mut ImageList,
    exe_path: &'a [u8],
    first: bool,
}

unsafe extern "C" fn each(info: *mut libc::dl_phdr_info, _size: libc::size_t, data: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `data` is the `&mut Ctx` passed to dl_iterate_phdr below, alive for the whole iteration.
    let ctx = unsafe { &mut *(data as *mut Ctx<'_>) };
    // SAFETY: the loader passes a valid dl_phdr_info for the duration of the callback.
    let Some(info) = (unsafe { info.as_ref() }) else { return 0 };
    let bias = info.dlpi_addr;
    let phdrs: &[libc::Elf64_Phdr] = if info.dlpi_phdr.is_null() {
        &[]
    } else {
        // SAFETY: the loader guarantees `dlpi_phnum` program headers at `dlpi_phdr`.
        unsafe { std::slice::from_raw_parts(info.dlpi_phdr, usize::from(info.dlpi_phnum)) }
    };
    let mut lo = u64::MAX;
    let mut text_end = 0u64;
    let mut build_id: &[u8] = &[];
    let mut unwind = UnwindSections::default();
    for ph in phdrs {
        if ph.p_type == PT_GNU_EH_FRAME {
            unwind.eh_frame_hdr = (bias.wrapping_add(ph.p_vaddr), ph.p_memsz);
        }
        if ph.p_type == libc::PT_LOAD {
            lo = lo.min(ph.p_vaddr & !(ph.p_align.max(1) - 1));
            if ph.p_flags & libc::PF_X != 0 {
                text_end = text_end.max(ph.p_vaddr + ph.p_memsz);
            }
        }
    }
    for ph in phdrs {
        if ph.p_type == libc::PT_NOTE && build_id.is_empty() && ph.p_memsz > 0 {
            // SAFETY: PT_NOTE segments lie inside a loaded PT_LOAD segment of this object, mapped readable for as
            // long as the object is loaded (the loader lock is held during the callback).
            let notes =
                unsafe { std::slice::from_raw_parts(bias.wrapping_add(ph.p_vaddr) as *const u8, ph.p_memsz as usize) };
            if let Some(id) = find_build_id(notes, ph.p_align as usize) {
                build_id = id;
            }
        }
    }
    if lo == u64::MAX {
        return 0;
    }
    let name: &[u8] = if info.dlpi_name.is_null() {
        b""
    } else {
        // SAFETY: `dlpi_name` is a NUL-terminated string owned by the loader.
        unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes()
    };
    let path = if name.is_empty() && ctx.first { ctx.exe_path } else { name };
    ctx.first = false;
    let load = bias.wrapping_add(lo);
    let size = text_end.saturating_sub(lo);
    ctx.list.push_record(&ImageRecord {
        path,
        load_address: load,
        size,
        bias: bias as i64,
        id: build_id,
        id_kind: ID_KIND_BUILD_ID,
        unwind,
        ..ImageRecord::default()
    });
    0
}

/// Fills `list` with the loaded images (the main executable first, named `exe_path`). Install time only.
pub fn snapshot(list: &mut ImageList, exe_path: &[u8]) {
    let mut ctx = Ctx { list, exe_path, first: true };
    // SAFETY: `each` matches the callback signature and only uses `ctx` during the call.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut ctx as *mut Ctx<'_> as *mut libc::c_void) };
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crash::images::ImageEntry;

    fn note(name: &[u8], ty: u32, desc: &[u8]) -> Vec<u8> {
        let mut v = Vec::new();
        v.extend_from_slice(&(name.len() as u32).to_ne_bytes());
        v.extend_from_slice(&(desc.len() as u32).to_ne_bytes());
        v.extend_from_slice(&ty.to_ne_bytes());
        v.extend_from_slice(name);
        v.resize(v.len().div_ceil(4) * 4, 0);
        v.extend_from_slice(desc);
        v.resize(v.len().div_ceil(4) * 4, 0);
        v
    }

    #[test]
    fn build_id_after_other_notes() {
        let id: Vec<u8> = (1..=20).collect();
        let notes = [note(b"GNU\0", 1, &[0; 16]), note(b"Go\0", 4, b"xyz"), note(b"GNU\0", 3, &id)].concat();
        assert_eq!(find_build_id(&notes, 4), Some(&id[..]));
        assert_eq!(find_build_id(&notes[..notes.len() - 4], 4), None);
        assert_eq!(find_build_id(&[0xff; 12], 4), None);
        assert_eq!(find_build_id(&[], 4), None);
    }

    #[test]
    fn snapshot_finds_this_test_binary_and_libc() {
        let mut list = ImageList::from_parts(Vec::leak(vec![ImageEntry::default(); 256]), Vec::leak(vec![0u8; 65536]));
        snapshot(&mut list, b"/proc/self/exe");
        assert!(list.len() >= 2, "{}", list.len());
        assert_eq!(list.path(0), b"/proc/self/exe");
        let here = snapshot_finds_this_test_binary_and_libc as *const () as usize as u64;
        assert_eq!(list.find(here), Some(0));
        let libc_addr = libc::getpid as *const () as usize as u64;
        let i = list.find(libc_addr).expect("libc image");
        assert!(String::from_utf8_lossy(list.path(i)).contains("libc"), "{:?}", String::from_utf8_lossy(list.path(i)));
        assert!(!list.build_id(i).is_empty(), "libc has a build id");
        let hdr = list.entry(i).expect("libc entry").unwind.eh_frame_hdr;
        assert!(hdr.0 != 0 && hdr.1 > 0, "libc has .eh_frame_hdr: {hdr:?}");
        assert_ne!(list.entry(0).expect("exe entry").unwind.eh_frame_hdr.0, 0, "the test binary has .eh_frame_hdr");
    }
}
