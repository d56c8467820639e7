//! Image snapshot at install time: `dl_iterate_phdr` over the loaded ELF objects, with the GNU build id read from
//! each object's `PT_NOTE` segments in memory.
//!
//! `dl_iterate_phdr` takes the dynamic loader's lock, so it is never called after a fault. At the crash the owner
//! reads the loader's link map instead (`crash/link_map.rs`), which also holds libraries `dlopen`ed after install;
//! [`link_map_source`] records at install where that list is. The snapshot here is the crash path's fallback (and
//! hint for headers not at `l_addr`); [`crate::refresh_images`] re-takes it.
#![allow(unsafe_code)]

use super::crash::elf::{self, Ehdr, Phdr, PhdrSummary, DT_DEBUG, DT_NULL, DYN_SIZE, EHDR_SIZE, PHDR_SIZE, PT_PHDR};
use super::crash::link_map::LinkMapSource;
use crate::crash::images::{ImageList, ImageRecord};
use report_format::encode::ID_KIND_BUILD_ID;
use std::ffi::CStr;

pub use super::crash::elf::{find_build_id, NT_GNU_BUILD_ID, PT_GNU_EH_FRAME};

/// Decodes one loader-provided program header into the shared [`Phdr`].
fn phdr(ph: &libc::Elf64_Phdr) -> Phdr {
    Phdr { p_type: ph.p_type, p_flags: ph.p_flags, p_vaddr: ph.p_vaddr, p_memsz: ph.p_memsz, p_align: ph.p_align }
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
    let mut summary = PhdrSummary::default();
    for ph in phdrs {
        summary.add(&phdr(ph), bias);
    }
    let mut build_id: &[u8] = &[];
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
    let Some((load, size)) = summary.load_and_size(bias) else { return 0 };
    let name: &[u8] = if info.dlpi_name.is_null() {
        b""
    } else {
        // SAFETY: `dlpi_name` is a NUL-terminated string owned by the loader.
        unsafe { CStr::from_ptr(info.dlpi_name) }.to_bytes()
    };
    let path = if name.is_empty() && ctx.first { ctx.exe_path } else { name };
    ctx.first = false;
    ctx.list.push_record(&ImageRecord {
        path,
        load_address: load,
        size,
        bias: bias as i64,
        id: build_id,
        id_kind: ID_KIND_BUILD_ID,
        unwind: summary.unwind(),
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

/// Most dynamic entries read when looking for `DT_DEBUG` (real objects have a few dozen).
const MAX_DYN_ENTRIES: usize = 4096;

/// Program headers at `addr` (`count` of them), read in place.
///
/// # Safety
/// `addr` must point at `count` program headers mapped readable for the life of the process (the main
/// executable's `AT_PHDR`, the vDSO's).
unsafe fn phdrs_at(addr: u64, count: usize) -> impl Iterator<Item = Phdr> {
    (0..count).filter_map(move |i| {
        let at = addr.checked_add((i * PHDR_SIZE) as u64)?;
        // SAFETY: inside the table the caller vouches for.
        let bytes = unsafe { std::slice::from_raw_parts(at as usize as *const u8, PHDR_SIZE) };
        Phdr::parse(bytes)
    })
}

/// Reads the `DT_DEBUG` entry of the dynamic section at `dynamic`: the loader's `struct r_debug`, or 0.
///
/// # Safety
/// `dynamic` must be the main executable's dynamic section (mapped, `DT_NULL`-terminated).
unsafe fn dt_debug(dynamic: u64) -> u64 {
    for i in 0..MAX_DYN_ENTRIES {
        let Some(at) = dynamic.checked_add((i * DYN_SIZE) as u64) else { return 0 };
        // SAFETY: entries up to DT_NULL lie in the dynamic section the caller vouches for; `Elf64_Dyn` is 8-aligned.
        let (tag, val) = unsafe { (*(at as usize as *const i64), *((at + 8) as usize as *const u64)) };
        match tag {
            DT_NULL => return 0,
            DT_DEBUG => return val,
            _ => {}
        }
    }
    0
}

/// Finds where the loader keeps its link map and the program headers of the objects whose ELF header is not at
/// their `l_addr` (install time; may take the loader lock through `dlsym`).
///
/// `r_debug`: the main executable's `DT_DEBUG` entry, which the loader fills at start-up (glibc, musl, Android's
/// linker); else the `_r_debug` symbol the loader exports (glibc, and static glibc programs); else 0 (the crash
/// path then reports the install snapshot). Main executable: `AT_PHDR`/`AT_PHNUM`, its bias from `PT_PHDR` (0
/// without one, as glibc's `rtld.c` computes it). vDSO: `AT_SYSINFO_EHDR`. Auxiliary vector constants: glibc
/// `elf.h` (through `libc`).
pub fn link_map_source() -> LinkMapSource {
    let mut src = LinkMapSource::default();
    // SAFETY: getauxval has no preconditions; it returns 0 for absent entries.
    let (phdr, phnum, vdso) = unsafe {
        (libc::getauxval(libc::AT_PHDR), libc::getauxval(libc::AT_PHNUM), libc::getauxval(libc::AT_SYSINFO_EHDR))
    };
    if phdr != 0 && phnum > 0 && phnum < u64::from(elf::PN_XNUM) {
        src.main_phdr = phdr;
        src.main_phnum = phnum as u16;
        // SAFETY: the kernel mapped the executable's program headers at AT_PHDR for the life of the process.
        let phdrs = || unsafe { phdrs_at(phdr, phnum as usize) };
        let bias = phdrs().find(|p| p.p_type == PT_PHDR).map_or(0, |p| phdr.wrapping_sub(p.p_vaddr));
        let mut s = PhdrSummary::default();
        phdrs().for_each(|p| s.add(&p, bias));
        if let Some(d) = s.dynamic {
            src.main_dynamic = d;
            // SAFETY: `d` is the main executable's dynamic section (PT_DYNAMIC), mapped for the process's life.
            src.r_debug = unsafe { dt_debug(d) };
        }
    }
    if vdso != 0 {
        // SAFETY: the kernel maps the vDSO image (header, program headers, dynamic section) at AT_SYSINFO_EHDR for
        // the life of the process.
        let e = Ehdr::parse(unsafe { std::slice::from_raw_parts(vdso as usize as *const u8, EHDR_SIZE) });
        if let Some(e) = e {
            src.vdso_ehdr = vdso;
            // SAFETY: as above; the program headers lie inside the vDSO image.
            let phdrs = || unsafe { phdrs_at(vdso.wrapping_add(e.phoff), usize::from(e.phnum)) };
            let mut lo = PhdrSummary::default();
            phdrs().for_each(|p| lo.add(&p, 0));
            // The vDSO's header is at its lowest PT_LOAD: bias = AT_SYSINFO_EHDR - that p_vaddr.
            let bias = lo.lowest_vaddr().map_or(vdso, |v| vdso.wrapping_sub(v));
            let mut s = PhdrSummary::default();
            phdrs().for_each(|p| s.add(&p, bias));
            src.vdso_dynamic = s.dynamic.unwrap_or(0);
        }
    }
    if src.r_debug == 0 {
        // SAFETY: a NUL-terminated symbol name; dlsym may return null.
        let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"_r_debug".as_ptr()) };
        src.r_debug = p as usize as u64;
    }
    src
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crash::images::ImageEntry;

    #[test]
    fn snapshot_finds_this_test_binary_and_libc() {
        let mut list = ImageList::from_parts(
            Vec::leak(vec![ImageEntry::default(); 256]),
            Vec::leak(vec![0u8; 65536]),
            Vec::leak(vec![0u32; 256]),
        );
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
