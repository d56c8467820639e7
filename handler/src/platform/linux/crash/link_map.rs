//! The crash-time image list: every object the dynamic linker has mapped at the moment of the crash, read from its
//! link map (`struct r_debug` → `struct link_map` chain) through the fault-proof [`MemoryReader`].
//!
//! `dl_iterate_phdr` (the install snapshot, `platform/linux/images.rs`) takes the loader lock, so it cannot run
//! after a fault, and a snapshot misses libraries `dlopen`ed later. The link map needs no lock: it is the list the
//! loader maintains for debuggers. Install records where it is ([`LinkMapSource`]: `DT_DEBUG` of the main
//! executable, else the exported `_r_debug`) plus the few objects whose ELF header is not at `l_addr` (the main
//! executable, through `AT_PHDR`; the vDSO, through `AT_SYSINFO_EHDR`). At the crash, [`walk`] follows the chain
//! and, for every object, reads its ELF header and program headers from memory and records exactly what the
//! install snapshot records (the shared rules are `elf::PhdrSummary`): path, load address, text size, load bias,
//! GNU build id, `.eh_frame_hdr`.
//!
//! Structure layouts (64-bit; identical in glibc, musl and Android's linker for the fields read here), glibc
//! `<link.h>`:
//! - `struct r_debug { int r_version; struct link_map *r_map; ElfW(Addr) r_brk; enum r_state; ElfW(Addr)
//!   r_ldbase; }` → offsets 0, 8, 16, 24, 32; glibc ≥ 2.35 `struct r_debug_extended` appends `r_next` at 40
//!   (other link-map namespaces, `dlmopen`), valid when `r_version >= 2`.
//! - `struct link_map { ElfW(Addr) l_addr; char *l_name; ElfW(Dyn) *l_ld; struct link_map *l_next, *l_prev; }`
//!   → offsets 0, 8, 16, 24, 32.
//!
//! Hostile memory is expected (the crash may have been a heap overrun): every read goes through the reader and
//! stops cleanly when it fails; every loop is bounded (list capacity, [`MAX_STEPS`], [`MAX_NAMESPACES`],
//! [`MAX_PHNUM`], [`MAX_SCAN_PAGES`]); an object is accepted only when its program headers agree with the link
//! map (`PT_DYNAMIC` at `l_ld`); a load address seen twice ends the walk (a cycle). A walk while the loader is
//! adding or removing an object (`r_state != RT_CONSISTENT`) keeps the entries that pass these checks.
//!
//! Crash path: no allocation, no lock, no panic, no formatting; signal-safe.
#![allow(unsafe_code)]

use super::elf::{self, Ehdr, Phdr, PhdrSummary, EHDR_SIZE, PHDR_SIZE};
use crate::crash::images::{ImageList, ImageRecord};
use crate::unwind::MemoryReader;
use core::cell::UnsafeCell;
use report_format::encode::ID_KIND_BUILD_ID;

/// Offset of `r_version` (`int`) in `struct r_debug`. Source: glibc `<link.h>`.
pub const R_VERSION: u64 = 0;
/// Offset of `r_map` in `struct r_debug`. Source: glibc `<link.h>`.
pub const R_MAP: u64 = 8;
/// Offset of `r_state` (`enum`, an `int`) in `struct r_debug`. Source: glibc `<link.h>`.
pub const R_STATE: u64 = 24;
/// Offset of `r_next` in glibc ≥ 2.35's `struct r_debug_extended` (read only when `r_version >= 2`). Source:
/// glibc `<link.h>`.
pub const R_NEXT: u64 = 40;
/// `RT_CONSISTENT`: the link map is stable (`RT_ADD` = 1, `RT_DELETE` = 2 while an object is added / removed).
/// Source: glibc `<link.h>`.
pub const RT_CONSISTENT: i32 = 0;
/// Offset of `l_addr` (load bias) in `struct link_map`. Source: glibc `<link.h>`.
pub const L_ADDR: u64 = 0;
/// Offset of `l_name` in `struct link_map`. Source: glibc `<link.h>`.
pub const L_NAME: u64 = 8;
/// Offset of `l_ld` (runtime address of the dynamic section) in `struct link_map`. Source: glibc `<link.h>`.
pub const L_LD: u64 = 16;
/// Offset of `l_next` in `struct link_map`. Source: glibc `<link.h>`.
pub const L_NEXT: u64 = 24;

/// Longest path read, bytes including the NUL (`PATH_MAX`, Linux `<linux/limits.h>`); longer names are dropped.
pub const PATH_BYTES: usize = 4096;
/// Bytes of one `PT_NOTE` segment searched for the build id (the notes of ordinary objects take well under
/// 1 KiB: `.note.gnu.property`, `.note.gnu.build-id`, `.note.ABI-tag`, `.note.package`).
pub const NOTE_BYTES: usize = 2048;
/// Most program headers accepted per object (loaded objects have about 10-15; more means garbage).
pub const MAX_PHNUM: u16 = 512;
/// Most link-map nodes visited per walk, across namespaces (a cycle that never repeats a load address, e.g. of
/// unreadable nodes, still ends).
pub const MAX_STEPS: usize = 8192;
/// Most link-map namespaces followed through `r_next` (glibc's `DL_NNS`, `dl-ns.h`/`ldsodefs.h`: 16).
pub const MAX_NAMESPACES: usize = 16;
/// Most pages probed per walk when looking for an ELF header below `l_ld` (objects whose lowest `PT_LOAD` is not
/// at address 0 and that were not in the install snapshot: prelinked libraries).
pub const MAX_SCAN_PAGES: usize = 4096;
/// The header scan gives up after this many unreadable pages in a row (2 MiB: the `PROT_NONE` gaps the loader
/// leaves between an object's segments are smaller than its largest `p_align`, at most 2 MiB in practice).
pub const MAX_SCAN_GAP_PAGES: usize = 512;
/// Page granularity of the header scan, bytes (the smallest Linux page on x86_64 and arm64).
const PAGE: u64 = 4096;

/// What install learned about where the loader keeps its link map and where the objects whose ELF header is not
/// at `l_addr` keep their program headers. Every field is 0 when unknown. Plain data; recorded once at install.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkMapSource {
    /// Address of the loader's `struct r_debug` (`DT_DEBUG` of the main executable, else `_r_debug`).
    pub r_debug: u64,
    /// Runtime address of the main executable's program headers (`getauxval(AT_PHDR)`).
    pub main_phdr: u64,
    /// Number of the main executable's program headers (`getauxval(AT_PHNUM)`).
    pub main_phnum: u16,
    /// Runtime address of the main executable's dynamic section (its `l_ld`): identifies its link-map entry.
    pub main_dynamic: u64,
    /// Address of the vDSO's ELF header (`getauxval(AT_SYSINFO_EHDR)`).
    pub vdso_ehdr: u64,
    /// Runtime address of the vDSO's dynamic section (its `l_ld`).
    pub vdso_dynamic: u64,
}

/// Why a walk ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WalkEnd {
    /// Every namespace's list ended with a null `l_next`.
    Complete,
    /// No `r_debug` address was found at install.
    NoRDebug,
    /// `r_debug` or a link-map node could not be read, or `r_version` was not valid.
    Unreadable,
    /// A load address came back (a cycle in `l_next`), or [`MAX_STEPS`] nodes were visited.
    Cycle,
    /// The list is full (its capacity is the configured `max_images`).
    Full,
}

/// What one walk found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WalkOutcome {
    /// Why it ended.
    pub end: WalkEnd,
    /// Images added to the list.
    pub images: usize,
    /// Nodes visited whose ELF header could not be found or did not agree with the node.
    pub skipped: usize,
    /// `r_state` was not `RT_CONSISTENT` (the loader was adding or removing an object).
    pub loader_busy: bool,
}

fn read_u64<M: MemoryReader>(mem: &mut M, base: u64, off: u64) -> Option<u64> {
    mem.read_u64(base.checked_add(off)?)
}

fn read_i32<M: MemoryReader>(mem: &mut M, base: u64, off: u64) -> Option<i32> {
    let mut b = [0u8; 4];
    mem.read(base.checked_add(off)?, &mut b).then_some(i32::from_ne_bytes(b))
}

/// Reads the NUL-terminated string at `addr` into `buf`, block by block so that no read crosses into a page it
/// does not need; `None` when unreadable or when no NUL comes within `buf.len()` bytes.
fn read_c_str<'b, M: MemoryReader>(mem: &mut M, addr: u64, buf: &'b mut [u8]) -> Option<&'b [u8]> {
    let mut got = 0usize;
    // Each iteration reads at least one byte (or returns), so `buf.len()` iterations suffice.
    for _ in 0..buf.len() {
        if got >= buf.len() {
            return None;
        }
        let at = addr.checked_add(got as u64)?;
        let to_boundary = PAGE.wrapping_sub(at & (PAGE.wrapping_sub(1)));
        let want = usize::try_from(to_boundary).ok()?.min(buf.len().saturating_sub(got)).min(256);
        let end = got.checked_add(want)?;
        let chunk = buf.get_mut(got..end)?;
        if !mem.read(at, chunk) {
            return None;
        }
        if let Some(nul) = chunk.iter().position(|b| *b == 0) {
            let len = got.checked_add(nul)?;
            return buf.get(..len);
        }
        got = end;
    }
    None
}

/// Where an object's program headers are: runtime address and count.
#[derive(Clone, Copy, Debug)]
struct PhdrTable {
    addr: u64,
    count: u16,
}

/// Summarizes the program headers at `t` for load bias `bias`; `None` when any header is unreadable.
fn summarize<M: MemoryReader>(mem: &mut M, t: PhdrTable, bias: u64) -> Option<PhdrSummary> {
    let mut s = PhdrSummary::default();
    for i in 0..u64::from(t.count.min(MAX_PHNUM)) {
        s.add(&read_phdr(mem, t, i)?, bias);
    }
    Some(s)
}

fn read_phdr<M: MemoryReader>(mem: &mut M, t: PhdrTable, i: u64) -> Option<Phdr> {
    let mut b = [0u8; PHDR_SIZE];
    let at = t.addr.checked_add(i.checked_mul(PHDR_SIZE as u64)?)?;
    if !mem.read(at, &mut b) {
        return None;
    }
    Phdr::parse(&b)
}

/// The program header table of the ELF header at `hdr`, when `hdr` holds a valid ELF-64 header.
fn table_at<M: MemoryReader>(mem: &mut M, hdr: u64) -> Option<PhdrTable> {
    let mut b = [0u8; EHDR_SIZE];
    if hdr == 0 || !mem.read(hdr, &mut b) {
        return None;
    }
    let e = Ehdr::parse(&b)?;
    if e.phnum > MAX_PHNUM {
        return None;
    }
    Some(PhdrTable { addr: hdr.checked_add(e.phoff)?, count: e.phnum })
}

/// Whether the object at header `hdr` (bias `bias`) agrees with a link-map node whose `l_ld` is `ld`: its
/// `PT_DYNAMIC` is at `ld` (or, for a node without a dynamic section, its lowest `PT_LOAD` is at `hdr`).
fn agrees(s: &PhdrSummary, hdr: u64, bias: u64, ld: u64) -> bool {
    if ld != 0 {
        s.dynamic == Some(ld)
    } else {
        s.lowest_vaddr().is_some_and(|lo| bias.wrapping_add(lo) == hdr)
    }
}

/// Tries the ELF header at `hdr` for a node (`bias`, `ld`).
fn try_header<M: MemoryReader>(mem: &mut M, hdr: u64, bias: u64, ld: u64) -> Option<(PhdrTable, PhdrSummary)> {
    let t = table_at(mem, hdr)?;
    let s = summarize(mem, t, bias)?;
    agrees(&s, hdr, bias, ld).then_some((t, s))
}

/// Walk-wide state: budgets and install-time facts.
struct Walker<'a, M: MemoryReader> {
    mem: &'a mut M,
    src: &'a LinkMapSource,
    exe_path: &'a [u8],
    hint: &'a ImageList,
    scan_pages_left: usize,
}

impl<M: MemoryReader> Walker<'_, M> {
    /// Finds the program headers of the node (`bias` = `l_addr`, `ld` = `l_ld`). Returns them, their summary, and
    /// whether the node is the main executable.
    fn locate(&mut self, bias: u64, ld: u64) -> Option<(PhdrTable, PhdrSummary, bool)> {
        // The main executable: its headers are where the kernel said (AT_PHDR); non-PIE executables (bias 0,
        // lowest PT_LOAD far above 0) and PIE ones alike.
        if ld != 0 && ld == self.src.main_dynamic && self.src.main_phdr != 0 {
            let t = PhdrTable { addr: self.src.main_phdr, count: self.src.main_phnum };
            let s = summarize(self.mem, t, bias)?;
            return s.dynamic.is_some_and(|d| d == ld).then_some((t, s, true));
        }
        // The vDSO: its header is at AT_SYSINFO_EHDR (its lowest PT_LOAD need not be at 0 on older kernels).
        if ld != 0 && ld == self.src.vdso_dynamic && self.src.vdso_ehdr != 0 {
            let (t, s) = try_header(self.mem, self.src.vdso_ehdr, bias, ld)?;
            return Some((t, s, false));
        }
        // Most objects: the lowest PT_LOAD has p_vaddr 0, so the header is at l_addr.
        if let Some((t, s)) = try_header(self.mem, bias, bias, ld) {
            return Some((t, s, false));
        }
        // Objects loaded before install: the snapshot knows where their header is.
        for i in 0..self.hint.len() {
            let Some(e) = self.hint.entry(i) else { break };
            if e.bias as u64 == bias && e.load_address != bias {
                if let Some((t, s)) = try_header(self.mem, e.load_address, bias, ld) {
                    return Some((t, s, false));
                }
            }
        }
        // Last resort (bounded per walk): the header is at the start of the object's first page, below l_ld. An
        // object is one contiguous range (gaps between segments included), so the first page going down that
        // starts with the ELF magic is its header or nothing is: the scan stops there either way.
        if ld == 0 {
            return None;
        }
        let mut page = ld & !(PAGE.wrapping_sub(1));
        let mut unreadable_run = 0usize;
        while self.scan_pages_left > 0 && page != 0 && unreadable_run < MAX_SCAN_GAP_PAGES {
            self.scan_pages_left = self.scan_pages_left.saturating_sub(1);
            let mut magic = [0u8; 4];
            if !self.mem.read(page, &mut magic) {
                unreadable_run = unreadable_run.saturating_add(1);
            } else if magic == elf::ELF_MAGIC {
                return try_header(self.mem, page, bias, ld).map(|(t, s)| (t, s, false));
            } else {
                unreadable_run = 0;
            }
            page = page.checked_sub(PAGE)?;
        }
        None
    }

    /// The install snapshot's entry for the node (`bias` = `l_addr`, named `name`) when it is the same object: a
    /// named object whose ELF header is at its load bias (every shared library), with the same bias and path.
    /// (A file replaced on disk and loaded again at the same address under the same name would keep its old
    /// build id; nothing else matches by mistake.)
    fn known(&self, bias: u64, name: &[u8]) -> Option<usize> {
        if name.is_empty() {
            return None;
        }
        let i = self.hint.find(bias)?;
        let e = self.hint.entry(i)?;
        (e.load_address == bias && e.bias as u64 == bias && self.hint.path(i) == name).then_some(i)
    }

    /// The first GNU build id in the object's `PT_NOTE` segments, copied into `out`; the id's length.
    fn build_id(&mut self, t: PhdrTable, bias: u64, out: &mut [u8; crate::crash::images::MAX_ID_LEN]) -> usize {
        let mut notes = [0u8; NOTE_BYTES];
        for i in 0..u64::from(t.count.min(MAX_PHNUM)) {
            let Some(ph) = read_phdr(self.mem, t, i) else { return 0 };
            if ph.p_type != elf::PT_NOTE || ph.p_memsz == 0 {
                continue;
            }
            let len = usize::try_from(ph.p_memsz).unwrap_or(NOTE_BYTES).min(NOTE_BYTES);
            let Some(buf) = notes.get_mut(..len) else { continue };
            if !self.mem.read(bias.wrapping_add(ph.p_vaddr), buf) {
                continue;
            }
            let align = usize::try_from(ph.p_align).unwrap_or(4);
            if let Some(id) = elf::find_build_id(buf, align) {
                let n = id.len().min(out.len());
                if let (Some(d), Some(s)) = (out.get_mut(..n), id.get(..n)) {
                    d.copy_from_slice(s);
                }
                return n;
            }
        }
        0
    }
}

/// Appends `rec` to `out`: `Err(Cycle)` when its load address is already there (a cycle in the list), `Err(Full)`
/// when the list (entries or path bytes) is full.
fn add(out: &mut ImageList, rec: &ImageRecord<'_>) -> Result<(), WalkEnd> {
    if out.has_load_address(rec.load_address) {
        return Err(WalkEnd::Cycle);
    }
    if out.len() >= out.capacity() || !out.push_record(rec) {
        // Out of entries, or of path bytes (then the entries are full in all but name).
        return Err(WalkEnd::Full);
    }
    Ok(())
}

/// What a walk tells the one who logs it ([`Memo`]): each namespace it starts and each node it reads.
pub trait NodeLog {
    /// A namespace's list starts (the first at `r_debug`, the next through `r_next`).
    fn namespace(&mut self);
    /// Node `node` was read: its `l_addr`, `l_name`, `l_ld`, `l_next`.
    fn node(&mut self, node: u64, head: [u64; 4]);
}

impl NodeLog for () {
    fn namespace(&mut self) {}
    fn node(&mut self, _node: u64, _head: [u64; 4]) {}
}

/// Reads the loader's link map into `out` (cleared first). `exe_path` names the main executable (its link-map
/// name is empty); `hint` is the install snapshot, used only to find ELF headers not at `l_addr`.
///
/// Signal-safe, allocation-free, bounded (see the module docs); never faults: memory is read only through `mem`.
pub fn walk<M: MemoryReader>(
    src: &LinkMapSource,
    exe_path: &[u8],
    hint: &ImageList,
    mem: &mut M,
    out: &mut ImageList,
) -> WalkOutcome {
    walk_logged(src, exe_path, hint, mem, out, &mut ())
}

/// [`walk`], telling `log` every namespace and node it reads.
pub fn walk_logged<M: MemoryReader, L: NodeLog>(
    src: &LinkMapSource,
    exe_path: &[u8],
    hint: &ImageList,
    mem: &mut M,
    out: &mut ImageList,
    log: &mut L,
) -> WalkOutcome {
    out.clear();
    let mut o = WalkOutcome { end: WalkEnd::Complete, images: 0, skipped: 0, loader_busy: false };
    if src.r_debug == 0 {
        o.end = WalkEnd::NoRDebug;
        return o;
    }
    let mut w = Walker { mem, src, exe_path, hint, scan_pages_left: MAX_SCAN_PAGES };
    let mut name_buf = [0u8; PATH_BYTES];
    let mut steps = 0usize;
    let mut r_debug = src.r_debug;
    let mut first = true;
    for _ in 0..MAX_NAMESPACES {
        let (Some(version), Some(mut node), Some(state)) =
            (read_i32(w.mem, r_debug, R_VERSION), read_u64(w.mem, r_debug, R_MAP), read_i32(w.mem, r_debug, R_STATE))
        else {
            o.end = WalkEnd::Unreadable;
            return o;
        };
        if version < 1 {
            o.end = WalkEnd::Unreadable;
            return o;
        }
        if state != RT_CONSISTENT {
            o.loader_busy = true;
        }
        log.namespace();
        // Brent's cycle detection over node addresses: a cycle of any length ends the walk within
        // (tail + 2 × cycle length) steps, without memory.
        let (mut tortoise, mut power, mut lam) = (0u64, 1usize, 0usize);
        while node != 0 {
            if steps >= MAX_STEPS || node == tortoise {
                o.end = WalkEnd::Cycle;
                return o;
            }
            if lam == power {
                tortoise = node;
                power = power.saturating_mul(2);
                lam = 0;
            }
            lam = lam.saturating_add(1);
            steps = steps.saturating_add(1);
            let (Some(bias), Some(name_ptr), Some(ld), Some(next)) = (
                read_u64(w.mem, node, L_ADDR),
                read_u64(w.mem, node, L_NAME),
                read_u64(w.mem, node, L_LD),
                read_u64(w.mem, node, L_NEXT),
            ) else {
                o.end = WalkEnd::Unreadable;
                return o;
            };
            log.node(node, [bias, name_ptr, ld, next]);
            let is_first = core::mem::replace(&mut first, false);
            let name: &[u8] =
                if name_ptr == 0 { b"" } else { read_c_str(w.mem, name_ptr, &mut name_buf).unwrap_or(b"") };
            // An object the install snapshot already holds (same path, same load bias, header at the bias) is
            // copied from it: reading its headers and notes again would cost two or three page reads per
            // object, hundreds per crash.
            if let Some(rec) = w.known(bias, name).and_then(|i| w.hint.record(i)) {
                if let Err(end) = add(out, &rec) {
                    o.end = end;
                    return o;
                }
                o.images = o.images.saturating_add(1);
                node = next;
                continue;
            }
            match w.locate(bias, ld) {
                None => o.skipped = o.skipped.saturating_add(1),
                Some((t, s, is_main)) => {
                    let Some((load, size)) = s.load_and_size(bias) else {
                        o.skipped = o.skipped.saturating_add(1);
                        node = next;
                        continue;
                    };
                    // The install snapshot names the first object `exe_path` when its name is empty; the main
                    // executable is also recognized by its dynamic section (musl names it after argv[0]).
                    let path = if is_main || (is_first && name.is_empty()) { w.exe_path } else { name };
                    let mut id = [0u8; crate::crash::images::MAX_ID_LEN];
                    let id_len = w.build_id(t, bias, &mut id);
                    let rec = ImageRecord {
                        path,
                        load_address: load,
                        size,
                        bias: bias as i64,
                        id: id.get(..id_len).unwrap_or(&[]),
                        id_kind: ID_KIND_BUILD_ID,
                        unwind: s.unwind(),
                        ..ImageRecord::default()
                    };
                    if let Err(end) = add(out, &rec) {
                        o.end = end;
                        return o;
                    }
                    o.images = o.images.saturating_add(1);
                }
            }
            node = next;
        }
        if version < 2 {
            break;
        }
        match read_u64(w.mem, r_debug, R_NEXT) {
            Some(0) => break,
            Some(n) if n != src.r_debug && n != r_debug => r_debug = n,
            Some(_) => {
                o.end = WalkEnd::Cycle;
                return o;
            }
            None => {
                o.end = WalkEnd::Unreadable;
                return o;
            }
        }
    }
    o
}

/// META note when the link map could not be read at all.
pub const NOTE_FALLBACK: &[u8] = b"the dynamic linker's link map could not be read at the crash: the images are the \
install-time snapshot (libraries loaded since are missing unless refresh_images was called)";
/// META note when the link map was read in part.
pub const NOTE_PARTIAL: &[u8] = b"the dynamic linker's link map could be read only in part at the crash: images \
it did not reach are taken from the install-time snapshot";
/// META note when the loader was changing the link map at the crash.
pub const NOTE_LOADER_BUSY: &[u8] = b"the dynamic linker was loading or unloading a library at the crash: the \
images are the link-map entries that were readable and consistent";
/// META note when more images were loaded than the list holds.
pub const NOTE_FULL: &[u8] = b"more images were loaded than the image list holds (Config::max_images or \
image_path_bytes): the rest are not in this report";

/// Bytes of a node's head that the walk reads: `l_addr`, `l_name`, `l_ld`, `l_next` (offsets 0..32, glibc
/// `<link.h>`).
const HEAD_BYTES: usize = 32;
/// Nodes whose heads one [`MemoryReader::read_gather`] call reads (the Linux reader: one `writev` into its pipe and
/// one `read` out of it).
const NODES_PER_GATHER: usize = 64;

/// The link map as the install-time walk found it ([`CrashImages::prime`]): every node's address and head
/// (`l_addr`, `l_name`, `l_ld`, `l_next`), in walk order, in storage preallocated at install.
///
/// At the crash, [`Memo::unchanged`] reads `r_debug` and the recorded heads again, 64 nodes per gather, instead
/// of walking (one or two system calls per node, and each new object's headers and notes: about 0.3 ms with 300
/// libraries on the development machine). When every word is as recorded, the objects are the same objects at the
/// same addresses, so the list the install walk built is the list a walk would build now. (An object unloaded and
/// another loaded into the same node, with the same name pointer, load bias and dynamic section address, would pass
/// for the old one: that takes the same file at the same place.) A memo is only kept for a complete walk of one
/// namespace while the loader was idle. Crash path: no allocation, lock or panic.
pub struct Memo {
    nodes: &'static mut [u64],
    heads: &'static mut [u64],
    len: usize,
    namespaces: usize,
    overflow: bool,
    valid: bool,
}

impl Memo {
    /// A memo over preallocated storage: `nodes` holds one address per node, `heads` four words per node (its
    /// capacity in nodes is the smaller of the two).
    pub fn new(nodes: &'static mut [u64], heads: &'static mut [u64]) -> Self {
        Memo { nodes, heads, len: 0, namespaces: 0, overflow: false, valid: false }
    }

    fn reset(&mut self) {
        self.len = 0;
        self.namespaces = 0;
        self.overflow = false;
        self.valid = false;
    }

    /// Whether the link map at `r_debug` still holds exactly the recorded nodes with the recorded heads, the loader
    /// idle and no other namespace. `false` when there is no memo or anything cannot be read. Signal-safe.
    pub fn unchanged<M: MemoryReader>(&self, mem: &mut M, r_debug: u64) -> bool {
        let (Some(nodes), Some(heads)) = (self.nodes.get(..self.len), self.heads.get(..self.len.saturating_mul(4)))
        else {
            return false;
        };
        let Some(&first) = nodes.first() else { return false };
        if !self.valid || r_debug == 0 {
            return false;
        }
        let (Some(version), Some(r_map), Some(state)) =
            (read_i32(mem, r_debug, R_VERSION), read_u64(mem, r_debug, R_MAP), read_i32(mem, r_debug, R_STATE))
        else {
            return false;
        };
        if version < 1 || state != RT_CONSISTENT || r_map != first {
            return false;
        }
        if version >= 2 && read_u64(mem, r_debug, R_NEXT) != Some(0) {
            return false;
        }
        let mut buf = [0u8; NODES_PER_GATHER * HEAD_BYTES];
        for (addrs, want) in nodes.chunks(NODES_PER_GATHER).zip(heads.chunks(NODES_PER_GATHER * 4)) {
            let Some(got) = buf.get_mut(..addrs.len().saturating_mul(HEAD_BYTES)) else { return false };
            if !mem.read_gather(addrs, HEAD_BYTES, got) {
                return false;
            }
            let same = got
                .chunks_exact(8)
                .zip(want)
                .all(|(b, w)| <[u8; 8]>::try_from(b).ok().map(u64::from_ne_bytes) == Some(*w));
            if !same {
                return false;
            }
        }
        true
    }
}

impl NodeLog for Memo {
    fn namespace(&mut self) {
        self.namespaces = self.namespaces.saturating_add(1);
    }

    fn node(&mut self, node: u64, head: [u64; 4]) {
        let at = self.len;
        let slots = self.heads.get_mut(at.saturating_mul(4)..at.saturating_mul(4).saturating_add(4));
        match (self.nodes.get_mut(at), slots) {
            (Some(n), Some(h)) => {
                *n = node;
                for (d, s) in h.iter_mut().zip(head) {
                    *d = s;
                }
                self.len = at.saturating_add(1);
            }
            _ => self.overflow = true,
        }
    }
}

/// The crash-time image list and what install learned to fill it. Owned by the crash owner.
#[derive(Debug)]
pub struct CrashImages {
    /// Where the link map is.
    pub source: LinkMapSource,
    /// The main executable's path (`/proc/self/exe` at install).
    exe_path: &'static [u8],
    list: UnsafeCell<ImageList>,
    memo: UnsafeCell<Memo>,
}

// SAFETY: `list` is written and read only by the crash owner (the thread that won the crash gate, through the
// `unsafe fn collect` contract); the other fields are read-only after install.
unsafe impl Sync for CrashImages {}

impl CrashImages {
    /// Wraps a preallocated list (install time; its capacity bounds every walk) and the storage of its [`Memo`].
    pub fn new(source: LinkMapSource, exe_path: &'static [u8], list: ImageList, memo: Memo) -> Self {
        CrashImages { source, exe_path, list: UnsafeCell::new(list), memo: UnsafeCell::new(memo) }
    }

    /// Install time: walks the link map into the crash-time list with `mem` (`install` is the snapshot, as for
    /// [`CrashImages::collect`]) and keeps the [`Memo`] of it when the walk was complete, of one namespace, with
    /// the loader idle. Returns whether it did. Costs about what the crash-time walk costs (a few hundred
    /// microseconds with 300 libraries), once, at install instead of at the crash.
    ///
    /// # Safety
    /// No crash can be handled meanwhile (install, before the signal handlers that call
    /// [`CrashImages::collect`] are set): exclusive use of the list and the memo.
    pub unsafe fn prime<M: MemoryReader>(&self, mem: &mut M, install: &ImageList) -> bool {
        // SAFETY: exclusive use (the caller's obligation).
        let (list, memo) = unsafe { (&mut *self.list.get(), &mut *self.memo.get()) };
        memo.reset();
        let o = walk_logged(&self.source, self.exe_path, install, mem, list, memo);
        memo.valid = o.end == WalkEnd::Complete
            && !o.loader_busy
            && o.images > 0
            && o.skipped == 0
            && memo.namespaces == 1
            && !memo.overflow
            && memo.len > 0;
        memo.valid
    }

    /// Builds the crash-time list from the link map and returns the list to report with a META note (empty
    /// when there is nothing to say). When the link map cannot be read at all the install snapshot `install`
    /// is returned instead; when it is read in part, the snapshot's images it did not reach are appended.
    ///
    /// # Safety
    /// Only the crash owner calls this (exclusive use of the list), and not again while the returned list is in
    /// use. Signal-safe, allocation-free.
    pub unsafe fn collect<'a, M: MemoryReader>(
        &'a self,
        mem: &mut M,
        install: &'a ImageList,
    ) -> (&'a ImageList, &'static [u8]) {
        // SAFETY: exclusive use by the crash owner (the caller's obligation).
        let (list, memo) = unsafe { (&mut *self.list.get(), &mut *self.memo.get()) };
        // Nothing changed since install: the list primed then is the one a walk would build.
        if memo.unchanged(mem, self.source.r_debug) {
            return (list, b"");
        }
        // The list is rewritten below: the memo no longer describes it.
        memo.valid = false;
        let o = walk(&self.source, self.exe_path, install, mem, list);
        if o.images == 0 {
            return (install, NOTE_FALLBACK);
        }
        let note = match o.end {
            WalkEnd::Complete if o.loader_busy => NOTE_LOADER_BUSY,
            WalkEnd::Complete => b"",
            WalkEnd::Full => NOTE_FULL,
            WalkEnd::NoRDebug | WalkEnd::Unreadable | WalkEnd::Cycle => {
                append_missing(list, install);
                NOTE_PARTIAL
            }
        };
        (list, note)
    }
}

/// Appends the images of `from` whose load address is not in `list` yet (bounded by both lists' lengths).
pub fn append_missing(list: &mut ImageList, from: &ImageList) {
    for i in 0..from.len() {
        let Some(r) = from.record(i) else { break };
        if !list.has_load_address(r.load_address) && !list.push_record(&r) {
            break;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crash::images::ImageEntry;
    use crate::platform::linux::crash::elf::{PF_X, PT_DYNAMIC, PT_GNU_EH_FRAME, PT_LOAD, PT_NOTE};
    use crate::platform::linux::crash::memory::{process_vm_readv_works, PipeUse, ProcessVmReader, BLOCK};
    use crate::platform::linux::images::{link_map_source, snapshot};

    fn list(n: usize) -> ImageList {
        ImageList::from_parts(
            Vec::leak(vec![ImageEntry::default(); n]),
            Vec::leak(vec![0u8; n * 256]),
            Vec::leak(vec![0u32; n]),
        )
    }

    fn memo(n: usize) -> Memo {
        Memo::new(Vec::leak(vec![0u64; n]), Vec::leak(vec![0u64; 4 * n]))
    }

    /// Fields of entry `i` that both lists must agree on.
    fn summary(l: &ImageList, i: usize) -> (String, u64, u64, i64, Vec<u8>, (u64, u64)) {
        let e = l.entry(i).expect("entry");
        (
            String::from_utf8_lossy(l.path(i)).into_owned(),
            e.load_address,
            e.size,
            e.bias,
            l.build_id(i).to_vec(),
            e.unwind.eh_frame_hdr,
        )
    }

    /// A reader as the crash path makes it: with a pipe, for gathers, or for every read where
    /// `process_vm_readv` cannot read the own process (qemu-user).
    fn own_reader(cache: &mut [u8]) -> ProcessVmReader<'_> {
        let pipe = crate::platform::linux::crash::sys::pipe_nonblocking().expect("pipe");
        let what = if process_vm_readv_works() { PipeUse::Gathers } else { PipeUse::Everything };
        // SAFETY: getpid has no preconditions.
        ProcessVmReader::new(unsafe { libc::getpid() }, cache).with_pipe(Some(pipe), what)
    }

    /// The only test that loads a library (tests run in parallel in one process): the link map read through the
    /// real fault-proof reader equals a `dl_iterate_phdr` snapshot, entry by entry, and includes a library loaded
    /// after the install snapshot, which the snapshot lacks.
    #[test]
    fn link_map_equals_dl_iterate_phdr_and_sees_a_later_dlopen() {
        let exe: &'static [u8] = b"/proc/self/exe";
        let src = link_map_source();
        assert_ne!(src.r_debug, 0, "{src:x?}");
        assert_ne!(src.main_dynamic, 0, "the test binary is dynamically linked: {src:x?}");
        assert_ne!(src.main_phdr, 0, "{src:x?}");
        // SAFETY: getauxval has no preconditions.
        assert_eq!(src.vdso_ehdr, unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) });

        // SAFETY: a NUL-terminated name; RTLD_NOLOAD only queries.
        let already = !unsafe { libc::dlopen(c"libm.so.6".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) }.is_null();
        let mut before = list(512);
        snapshot(&mut before, exe);
        // SAFETY: a NUL-terminated library name; the handle is never closed (the library stays for the process).
        let h = unsafe { libc::dlopen(c"libm.so.6".as_ptr(), libc::RTLD_NOW) };
        assert!(!h.is_null(), "dlopen libm.so.6");
        // SAFETY: a NUL-terminated symbol name in a valid handle.
        let cos = unsafe { libc::dlsym(h, c"cos".as_ptr()) } as usize as u64;
        assert_ne!(cos, 0);
        let mut after = list(512);
        snapshot(&mut after, exe);

        let mut cache = vec![0u8; BLOCK];
        let mut mem = own_reader(&mut cache);
        let mut out = list(512);
        let o = walk(&src, exe, &list(1), &mut mem, &mut out);
        assert_eq!(o.end, WalkEnd::Complete, "{o:?}");
        assert_eq!((o.skipped, o.loader_busy), (0, false), "{o:?}");
        assert_eq!(o.images, out.len());
        let got: Vec<_> = (0..out.len()).map(|i| summary(&out, i)).collect();
        let want: Vec<_> = (0..after.len()).map(|i| summary(&after, i)).collect();
        assert_eq!(got, want);
        assert_eq!(out.path(0), exe);
        // The vDSO, where the kernel maps one (qemu-user before 8.1 gives arm64 guests none: AT_SYSINFO_EHDR is 0).
        // SAFETY: getauxval has no preconditions.
        if unsafe { libc::getauxval(libc::AT_SYSINFO_EHDR) } != 0 {
            assert!(got.iter().any(|g| g.0.contains("linux-vdso") || g.0.contains("linux-gate")), "{got:#?}");
        }
        let m = out.find(cos).expect("libm's text holds cos");
        assert!(String::from_utf8_lossy(out.path(m)).contains("libm.so.6"));
        assert!(!out.build_id(m).is_empty(), "libm has a build id");
        assert_ne!(out.entry(m).expect("libm").unwind.eh_frame_hdr.1, 0);
        if !already {
            assert_eq!(before.find(cos), None, "the earlier snapshot lacks libm");
        }

        // Primed at "install" (now): the memo holds, and the crash takes the primed list as it is.
        let ci = CrashImages::new(src, exe, list(512), memo(512));
        // SAFETY: single-threaded use of this CrashImages.
        assert!(unsafe { ci.prime(&mut mem, &after) }, "the real link map is remembered");
        // SAFETY: as above.
        let primed = unsafe { &*ci.memo.get() };
        assert!(primed.unchanged(&mut mem, src.r_debug), "the heads read back (gathered) as the walk recorded them");
        // SAFETY: as above.
        let (l, note) = unsafe { ci.collect(&mut mem, &before) };
        assert_eq!(note, b"");
        assert_eq!((0..l.len()).map(|i| summary(l, i)).collect::<Vec<_>>(), want);

        // Through the owner's entry point: the crash-time list, no note.
        let ci = CrashImages::new(src, exe, list(512), memo(64));
        // SAFETY: single-threaded use of this CrashImages.
        let (l, note) = unsafe { ci.collect(&mut mem, &before) };
        assert_eq!(note, b"");
        assert!(l.find(cos).is_some());
        assert_eq!(l.len(), after.len());
        // No r_debug: the install snapshot, said so.
        let ci = CrashImages::new(LinkMapSource { r_debug: 0, ..src }, exe, list(512), memo(64));
        // SAFETY: as above.
        let (l, note) = unsafe { ci.collect(&mut mem, &before) };
        assert!(core::ptr::eq(l, &before));
        assert_eq!(note, NOTE_FALLBACK);
    }

    // -----------------------------------------------------------------------------------------------------------
    // Synthetic memory.

    /// Readable 4 KiB pages (like real mappings, readability is per page); everything else is unmapped.
    #[derive(Default)]
    struct Fake {
        pages: std::collections::BTreeMap<u64, Box<[u8; 4096]>>,
        reads: usize,
    }

    impl MemoryReader for Fake {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
            self.reads += 1;
            for (i, b) in buf.iter_mut().enumerate() {
                let Some(a) = addr.checked_add(i as u64) else { return false };
                match self.pages.get(&(a & !4095)) {
                    Some(p) => *b = p[(a & 4095) as usize],
                    None => return false,
                }
            }
            true
        }
    }

    impl Fake {
        /// Writes `bytes` at `base`, mapping the pages they touch.
        fn map(&mut self, base: u64, bytes: Vec<u8>) {
            for (i, b) in bytes.into_iter().enumerate() {
                let a = base + i as u64;
                self.pages.entry(a & !4095).or_insert_with(|| Box::new([0; 4096]))[(a & 4095) as usize] = b;
            }
        }
        fn unmap(&mut self, page: u64) {
            self.pages.remove(&page);
        }
        fn u64s(&mut self, base: u64, words: &[u64]) {
            self.map(base, words.iter().flat_map(|w| w.to_ne_bytes()).collect());
        }
        /// `struct r_debug` (version, r_map, r_brk, state, r_ldbase, r_next).
        fn r_debug(&mut self, at: u64, version: u64, map: u64, state: u64, next: u64) {
            self.u64s(at, &[version, map, 0, state, 0, next]);
        }
        /// `struct link_map` (l_addr, l_name, l_ld, l_next, l_prev).
        fn node(&mut self, at: u64, addr: u64, name: u64, ld: u64, next: u64) {
            self.u64s(at, &[addr, name, ld, next, 0]);
        }
        fn name(&mut self, at: u64, s: &str) {
            self.map(at, [s.as_bytes(), b"\0"].concat());
        }
    }

    fn ph(p_type: u32, p_flags: u32, p_vaddr: u64, p_memsz: u64, p_align: u64) -> [u8; PHDR_SIZE] {
        let mut b = [0u8; PHDR_SIZE];
        b[0..4].copy_from_slice(&p_type.to_ne_bytes());
        b[4..8].copy_from_slice(&p_flags.to_ne_bytes());
        b[16..24].copy_from_slice(&p_vaddr.to_ne_bytes());
        b[40..48].copy_from_slice(&p_memsz.to_ne_bytes());
        b[48..56].copy_from_slice(&p_align.to_ne_bytes());
        b
    }

    /// An ELF object image whose lowest PT_LOAD is at `lo` (link time): header, program headers, a build id note
    /// at lo + 0x400 (`id`), .eh_frame_hdr at lo + 0x800, text to lo + 0x2000, dynamic section at lo + 0x2800.
    /// Returns the bytes (to map at bias + lo).
    fn object(lo: u64, id: &[u8]) -> Vec<u8> {
        object_with_dynamic(lo, id, 0x2800)
    }

    /// [`object`] with the dynamic section at `lo + dynamic` instead (not mapped when beyond the image).
    fn object_with_dynamic(lo: u64, id: &[u8], dynamic: u64) -> Vec<u8> {
        let mut img = vec![0u8; 0x3000];
        img[..4].copy_from_slice(&elf::ELF_MAGIC);
        img[4] = elf::ELFCLASS64;
        img[32..40].copy_from_slice(&64u64.to_ne_bytes());
        img[54..56].copy_from_slice(&(PHDR_SIZE as u16).to_ne_bytes());
        let phdrs = [
            ph(PT_LOAD, 4 | PF_X, lo, 0x2000, 0x1000),
            ph(PT_LOAD, 6, lo + 0x2000, 0x1000, 0x1000),
            ph(PT_DYNAMIC, 6, lo + dynamic, 0x100, 8),
            ph(PT_NOTE, 4, lo + 0x400, 12 + 4 + id.len() as u64, 4),
            ph(PT_GNU_EH_FRAME, 4, lo + 0x800, 0x40, 4),
        ];
        img[56..58].copy_from_slice(&(phdrs.len() as u16).to_ne_bytes());
        for (i, p) in phdrs.iter().enumerate() {
            img[64 + i * PHDR_SIZE..][..PHDR_SIZE].copy_from_slice(p);
        }
        let mut note = Vec::new();
        note.extend_from_slice(&4u32.to_ne_bytes());
        note.extend_from_slice(&(id.len() as u32).to_ne_bytes());
        note.extend_from_slice(&elf::NT_GNU_BUILD_ID.to_ne_bytes());
        note.extend_from_slice(b"GNU\0");
        note.extend_from_slice(id);
        img[0x400..0x400 + note.len()].copy_from_slice(&note);
        img
    }

    const R: u64 = 0x10_0000;
    const NODES: u64 = 0x20_0000;
    const NAMES: u64 = 0x30_0000;

    /// A process with a non-PIE main executable at 0x400000 (bias 0, found through AT_PHDR), a library at
    /// 0x7f00_0000_0000 (lowest PT_LOAD 0), a prelinked library (lowest PT_LOAD 0x5000_0000, bias 0x1000_0000,
    /// found by the scan below l_ld) and a vDSO (found through AT_SYSINFO_EHDR).
    fn process() -> (Fake, LinkMapSource) {
        let mut m = Fake::default();
        m.map(0x40_0000, object(0x40_0000, &[0xaa; 20]));
        m.map(0x7f00_0000_0000, object(0, &[0xbb; 20]));
        m.map(0x6000_0000, object(0x5000_0000, &[0xcc; 16]));
        m.map(0x7fff_0000_0000, object(0, &[0xdd; 8]));
        m.r_debug(R, 1, NODES, 0, 0);
        m.node(NODES, 0, NAMES, 0x40_2800, NODES + 0x1000);
        m.node(NODES + 0x1000, 0x7f00_0000_0000, NAMES + 0x10, 0x7f00_0000_2800, NODES + 0x2000);
        m.node(NODES + 0x2000, 0x1000_0000, NAMES + 0x30, 0x6000_2800, NODES + 0x3000);
        m.node(NODES + 0x3000, 0x7fff_0000_0000, NAMES + 0x50, 0x7fff_0000_2800, 0);
        m.name(NAMES, "");
        m.name(NAMES + 0x10, "/lib/libfoo.so.1");
        m.name(NAMES + 0x30, "/lib/libprelinked.so");
        m.name(NAMES + 0x50, "linux-vdso.so.1");
        let src = LinkMapSource {
            r_debug: R,
            main_phdr: 0x40_0040,
            main_phnum: 5,
            main_dynamic: 0x40_2800,
            vdso_ehdr: 0x7fff_0000_0000,
            vdso_dynamic: 0x7fff_0000_2800,
        };
        (m, src)
    }

    #[test]
    fn synthetic_process_every_kind_of_object() {
        let (mut m, src) = process();
        let mut out = list(8);
        let o = walk(&src, b"/bin/app", &list(1), &mut m, &mut out);
        assert_eq!(o, WalkOutcome { end: WalkEnd::Complete, images: 4, skipped: 0, loader_busy: false });
        let got: Vec<_> = (0..out.len()).map(|i| summary(&out, i)).collect();
        assert_eq!(
            got,
            vec![
                ("/bin/app".into(), 0x40_0000, 0x2000, 0, vec![0xaa; 20], (0x40_0800, 0x40)),
                (
                    "/lib/libfoo.so.1".into(),
                    0x7f00_0000_0000,
                    0x2000,
                    0x7f00_0000_0000,
                    vec![0xbb; 20],
                    (0x7f00_0000_0800, 0x40)
                ),
                ("/lib/libprelinked.so".into(), 0x6000_0000, 0x2000, 0x1000_0000, vec![0xcc; 16], (0x6000_0800, 0x40)),
                (
                    "linux-vdso.so.1".into(),
                    0x7fff_0000_0000,
                    0x2000,
                    0x7fff_0000_0000,
                    vec![0xdd; 8],
                    (0x7fff_0000_0800, 0x40)
                ),
            ]
        );
        // The prelinked library's header is found through the install snapshot too, without a scan.
        let mut hint = list(4);
        assert!(hint.push(b"/lib/libprelinked.so", 0x6000_0000, 0x2000, 0x1000_0000, &[]));
        let (mut m, src) = process();
        let o = walk(&src, b"/bin/app", &hint, &mut m, &mut out);
        assert_eq!((o.end, o.images), (WalkEnd::Complete, 4));
        // Without AT_PHDR the non-PIE main executable cannot be located (its header is not at l_addr = 0, and the
        // scan below l_ld finds it).
        let (mut m, src) = process();
        let o = walk(&LinkMapSource { main_phdr: 0, ..src }, b"/bin/app", &list(1), &mut m, &mut out);
        assert_eq!((o.end, o.images), (WalkEnd::Complete, 4));
        assert_eq!(out.path(0), b"/bin/app", "still the first entry with an empty name");
    }

    #[test]
    fn a_non_pie_main_executable_is_found_through_at_phdr() {
        // Its dynamic section lies 64 MiB above its header: too far for the header scan, so only AT_PHDR finds it.
        let (mut m, src) = process();
        m.map(0x40_0000, object_with_dynamic(0x40_0000, &[0xaa; 20], 0x400_0000));
        m.node(NODES, 0, NAMES, 0x440_0000, NODES + 0x1000);
        let src = LinkMapSource { main_dynamic: 0x440_0000, ..src };
        let mut out = list(8);
        let o = walk(&src, b"/bin/app", &list(1), &mut m, &mut out);
        assert_eq!((o.end, o.images, o.skipped), (WalkEnd::Complete, 4, 0));
        assert_eq!(summary(&out, 0), ("/bin/app".into(), 0x40_0000, 0x2000, 0, vec![0xaa; 20], (0x40_0800, 0x40)));
        let o = walk(&LinkMapSource { main_phdr: 0, ..src }, b"/bin/app", &list(1), &mut m, &mut out);
        assert_eq!((o.images, o.skipped), (3, 1));
        assert_eq!(out.path(0), b"/lib/libfoo.so.1");
    }

    #[test]
    fn namespaces_and_loader_busy() {
        let (mut m, src) = process();
        // Version 2 with a second namespace holding one more library, while the loader is adding a node whose
        // segments are not mapped yet.
        m.r_debug(R, 2, NODES, 1, R + 0x100);
        m.r_debug(R + 0x100, 2, NODES + 0x4000, 0, 0);
        m.node(NODES + 0x4000, 0x7e00_0000_0000, NAMES + 0x70, 0x7e00_0000_2800, NODES + 0x5000);
        m.node(NODES + 0x5000, 0x7d00_0000_0000, NAMES + 0x90, 0x2800, 0);
        m.map(0x7e00_0000_0000, object(0, &[0xee; 20]));
        m.name(NAMES + 0x70, "/lib/libns.so");
        m.name(NAMES + 0x90, "/lib/half-loaded.so");
        let mut out = list(8);
        let o = walk(&src, b"/bin/app", &list(1), &mut m, &mut out);
        assert_eq!(o, WalkOutcome { end: WalkEnd::Complete, images: 5, skipped: 1, loader_busy: true });
        assert_eq!(out.path(4), b"/lib/libns.so");
        // r_next pointing back is a cycle.
        m.r_debug(R + 0x100, 2, NODES + 0x4000, 0, R);
        let o = walk(&src, b"/bin/app", &list(1), &mut m, &mut out);
        assert_eq!((o.end, o.images), (WalkEnd::Cycle, 5));
    }

    #[test]
    fn hostile_link_maps_end_cleanly() {
        // A cycle back to the first library.
        let (mut m, src) = process();
        m.node(NODES + 0x3000, 0x7fff_0000_0000, NAMES + 0x50, 0x7fff_0000_2800, NODES + 0x1000);
        let mut out = list(8);
        let o = walk(&src, b"/bin/app", &list(1), &mut m, &mut out);
        assert_eq!((o.end, o.images), (WalkEnd::Cycle, 4));

        // Cycles of nodes whose header is never found (no load address repeats): a self-loop, and a tail of 3
        // into a loop of 5. Found by the node addresses; header scans stay within their budget.
        let mut m = Fake::default();
        m.r_debug(R, 1, NODES, 0, 0);
        m.node(NODES, 0x1234_5000, 0, 0x9999_9000, NODES);
        m.map(0x9990_0000, vec![0u8; 0x10_0000]);
        let src = LinkMapSource { r_debug: R, ..LinkMapSource::default() };
        let o = walk(&src, b"", &list(1), &mut m, &mut out);
        assert_eq!(o, WalkOutcome { end: WalkEnd::Cycle, images: 0, skipped: 2, loader_busy: false });
        for k in 0..8u64 {
            let next = if k == 7 { NODES + 0x3000 } else { NODES + (k + 1) * 0x1000 };
            m.node(NODES + k * 0x1000, 0x1234_5000 + k, 0, 0x9999_9000 + k * 8, next);
        }
        let before = m.reads;
        let o = walk(&src, b"", &list(1), &mut m, &mut out);
        assert_eq!(o.end, WalkEnd::Cycle);
        assert!(o.skipped <= 3 + 2 * 5 + 1, "{o:?}");
        assert!(m.reads - before < 64 * 8 + MAX_SCAN_PAGES, "reads bounded: {}", m.reads - before);

        // A garbage l_next: the entries before it are kept.
        let (mut m, src) = process();
        m.node(NODES + 0x1000, 0x7f00_0000_0000, NAMES + 0x10, 0x7f00_0000_2800, 0xdead_beef_0000);
        let o = walk(&src, b"/bin/app", &list(1), &mut m, &mut out);
        assert_eq!((o.end, o.images), (WalkEnd::Unreadable, 2));

        // An unterminated name (runs into unmapped memory) and one longer than PATH_MAX: recorded without a path.
        let (mut m, src) = process();
        m.map(0x5100_0000_0000 - 0x20, vec![b'a'; 0x20]);
        m.node(NODES + 0x1000, 0x7f00_0000_0000, 0x5100_0000_0000 - 0x20, 0x7f00_0000_2800, NODES + 0x2000);
        m.map(0x5000_0000_0000, vec![b'b'; PATH_BYTES * 3]);
        m.node(NODES + 0x2000, 0x1000_0000, 0x5000_0000_0000, 0x6000_2800, NODES + 0x3000);
        let o = walk(&src, b"/bin/app", &list(1), &mut m, &mut out);
        assert_eq!((o.end, o.images), (WalkEnd::Complete, 4));
        assert_eq!((out.path(1), out.path(2)), (&b""[..], &b""[..]));
        assert_eq!(out.build_id(1), &[0xbb; 20]);

        // Garbage ELF headers: a huge e_phnum, e_phoff pointing nowhere, no PT_DYNAMIC match.
        let (mut m, src) = process();
        m.map(0x7f00_0000_0000 + 56, (MAX_PHNUM + 1).to_ne_bytes().to_vec());
        let o = walk(&src, b"/bin/app", &list(1), &mut m, &mut out);
        assert_eq!((o.end, o.images, o.skipped), (WalkEnd::Complete, 3, 1));
        m.map(0x7f00_0000_0000 + 56, 5u16.to_ne_bytes().to_vec());
        m.map(0x7f00_0000_0000 + 32, u64::MAX.to_ne_bytes().to_vec());
        let o = walk(&src, b"/bin/app", &list(1), &mut m, &mut out);
        assert_eq!((o.images, o.skipped), (3, 1));

        // Unreadable or garbage r_debug.
        let o = walk(&LinkMapSource { r_debug: 0x77, ..src }, b"", &list(1), &mut m, &mut out);
        assert_eq!((o.end, o.images), (WalkEnd::Unreadable, 0));
        let mut m = Fake::default();
        m.r_debug(R, 0, NODES, 0, 0);
        let o = walk(&src, b"", &list(1), &mut m, &mut out);
        assert_eq!(o.end, WalkEnd::Unreadable, "r_version 0");
        let o = walk(&LinkMapSource::default(), b"", &list(1), &mut m, &mut out);
        assert_eq!(o.end, WalkEnd::NoRDebug);
    }

    #[test]
    fn a_full_list_stops_and_partial_walks_add_the_snapshot() {
        let (mut m, src) = process();
        let mut out = list(2);
        let o = walk(&src, b"/bin/app", &list(1), &mut m, &mut out);
        assert_eq!((o.end, o.images), (WalkEnd::Full, 2));
        let ci = CrashImages::new(src, b"/bin/app", list(2), memo(64));
        let empty = list(1);
        // SAFETY: single-threaded use.
        let (l, note) = unsafe { ci.collect(&mut m, &empty) };
        assert_eq!((l.len(), note), (2, NOTE_FULL));

        // A walk that breaks after two images: the snapshot's other images are appended, once.
        let (mut m, src) = process();
        m.unmap(NODES + 0x2000);
        let mut snap = list(4);
        // At libfoo's address, an object the snapshot knows under another name (so it is not copied from the
        // snapshot, see the next test): the link map's entry replaces it.
        assert!(snap.push(b"/lib/libfoo-renamed.so.1", 0x7f00_0000_0000, 0x2000, 0x7f00_0000_0000, &[]));
        assert!(snap.push(b"/lib/libold.so", 0x7a00_0000_0000, 0x1000, 0x7a00_0000_0000, &[1]));
        let ci = CrashImages::new(src, b"/bin/app", list(8), memo(64));
        // SAFETY: single-threaded use.
        let (l, note) = unsafe { ci.collect(&mut m, &snap) };
        assert_eq!(note, NOTE_PARTIAL);
        let paths: Vec<_> = (0..l.len()).map(|i| l.path(i).to_vec()).collect();
        assert_eq!(paths, [&b"/bin/app"[..], b"/lib/libfoo.so.1", b"/lib/libold.so"]);
        assert_eq!(l.build_id(1), &[0xbb; 20], "the link map's entry wins");
    }

    /// An object the install snapshot holds under the same path and load bias is copied from it: its headers and
    /// notes are not read again (here they are unmapped, and the snapshot's build id is what the list gets).
    #[test]
    fn objects_in_the_snapshot_are_copied_without_reading_their_headers() {
        let (mut m, src) = process();
        m.unmap(0x7f00_0000_0000);
        let mut snap = list(4);
        assert!(snap.push(b"/lib/libfoo.so.1", 0x7f00_0000_0000, 0x2000, 0x7f00_0000_0000, &[7; 20]));
        let mut out = list(8);
        let o = walk(&src, b"/bin/app", &snap, &mut m, &mut out);
        assert_eq!(o.skipped, 0, "{o:?}");
        let i = (0..out.len()).find(|&i| out.path(i) == b"/lib/libfoo.so.1").expect("libfoo in the list");
        assert_eq!(out.build_id(i), &[7; 20]);
        assert_eq!(out.entry(i).map(|e| (e.load_address, e.size)), Some((0x7f00_0000_0000, 0x2000)));
        // Without the snapshot the unmapped object cannot be read, and is skipped.
        let mut out = list(8);
        let o = walk(&src, b"/bin/app", &list(1), &mut m, &mut out);
        assert_eq!(o.skipped, 1, "{o:?}");
        assert!(!(0..out.len()).any(|i| out.path(i) == b"/lib/libfoo.so.1"));
    }

    /// A memo taken at install makes the crash skip the walk while the link map is as it was (here the objects'
    /// headers are unmapped after priming: a walk could not read them, yet the list is complete), and any change
    /// the walk would see makes it walk again: a node's head, the loader busy, another namespace, a longer list.
    #[test]
    fn an_unchanged_link_map_is_not_walked_again_and_any_change_is_seen() {
        let (mut m, src) = process();
        let ci = CrashImages::new(src, b"/bin/app", list(8), memo(8));
        // SAFETY: single-threaded use.
        assert!(unsafe { ci.prime(&mut m, &list(1)) }, "a complete walk of one namespace is remembered");
        for page in [0x7f00_0000_0000, 0x6000_0000, 0x7fff_0000_0000] {
            m.unmap(page);
        }
        let reads = m.reads;
        let snap = list(1);
        // SAFETY: as above.
        let (l, note) = unsafe { ci.collect(&mut m, &snap) };
        assert_eq!((l.len(), note), (4, &b""[..]), "the primed list, without a walk");
        assert_eq!(m.reads - reads, 3 + 4, "r_debug's three words and the four heads, one read each (Fake)");

        type Change = (&'static str, fn(&mut Fake));
        let changes: [Change; 4] = [
            ("a node's load bias", |m| {
                m.node(NODES + 0x1000, 0x7e00_0000_0000, NAMES + 0x10, 0x7f00_0000_2800, NODES + 0x2000)
            }),
            ("a library appended", |m| {
                m.node(NODES + 0x3000, 0x7fff_0000_0000, NAMES + 0x50, 0x7fff_0000_2800, NODES + 0x4000)
            }),
            ("the loader busy", |m| m.r_debug(R, 1, NODES, 1, 0)),
            ("another namespace", |m| m.r_debug(R, 2, NODES, 0, R + 0x100)),
        ];
        for (what, change) in changes {
            let (mut m, src) = process();
            let ci = CrashImages::new(src, b"/bin/app", list(8), memo(8));
            // SAFETY: single-threaded use.
            assert!(unsafe { ci.prime(&mut m, &list(1)) });
            change(&mut m);
            // SAFETY: as above.
            assert!(!unsafe { &*ci.memo.get() }.unchanged(&mut m, src.r_debug), "{what}");
        }
        // No room for every node: no memo (the crash walks).
        let (mut m, src) = process();
        let ci = CrashImages::new(src, b"/bin/app", list(8), memo(3));
        // SAFETY: as above.
        assert!(!unsafe { ci.prime(&mut m, &list(1)) });
    }

    #[test]
    fn random_memory_never_panics() {
        // Regions of pseudo-random words, many of which point into the regions: every walk ends.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = move || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let bases = [0x1000_0000u64, 0x2000_0000, 0x3000_0000];
        for round in 0..300 {
            let mut m = Fake::default();
            for &b in &bases {
                let words: Vec<u64> = (0..512)
                    .map(|_| {
                        let r = next();
                        match r % 4 {
                            0 => bases[(r >> 8) as usize % 3] + (r >> 16) % 4096,
                            1 => r % 8,
                            _ => r,
                        }
                    })
                    .collect();
                m.u64s(b, &words);
            }
            if round % 3 == 0 {
                // Plant valid ELF headers with random program headers.
                let mut obj = object(0, &[1; 20]);
                for byte in obj.iter_mut().skip(64).take(5 * PHDR_SIZE) {
                    if next() % 5 == 0 {
                        *byte = next() as u8;
                    }
                }
                m.map(0x4000_0000, obj);
            }
            let src = LinkMapSource {
                r_debug: bases[round % 3] + next() % 4096,
                main_phdr: 0x4000_0040,
                main_phnum: (next() % 8) as u16,
                main_dynamic: next() % 3 * 0x1000_0000,
                vdso_ehdr: 0x4000_0000,
                vdso_dynamic: next(),
            };
            let mut out = list(16);
            let o = walk(&src, b"/x", &list(1), &mut m, &mut out);
            assert!(o.images <= 16 && o.images == out.len(), "{o:?}");
        }
    }

    #[test]
    fn names_are_read_page_by_page() {
        let mut m = Fake::default();
        let mut buf = [0u8; PATH_BYTES];
        // Across a page boundary.
        m.map(0x1000 - 5, b"/lib/libacross.so\0".to_vec());
        assert_eq!(read_c_str(&mut m, 0x1000 - 5, &mut buf), Some(&b"/lib/libacross.so"[..]));
        // Ending just before an unmapped page: no read may touch that page.
        m.map(0x3000 - 4, b"abc\0".to_vec());
        assert_eq!(read_c_str(&mut m, 0x3000 - 4, &mut buf), Some(&b"abc"[..]));
        // Running into it, or longer than the buffer.
        m.map(0x5000 - 3, b"xyz".to_vec());
        assert_eq!(read_c_str(&mut m, 0x5000 - 3, &mut buf), None);
        m.map(0x10_0000, vec![b'q'; 3 * 4096]);
        assert_eq!(read_c_str(&mut m, 0x10_0000, &mut buf[..100]), None);
        assert_eq!(read_c_str(&mut m, u64::MAX - 1, &mut buf), None);
    }
}
