//! The preallocated image table: path, load address, text range, load bias and build id of every loaded image.
//!
//! Filled at install time (and on explicit refresh) by the platform's snapshot code, read at crash time. Two lists
//! are kept: a refresh writes the inactive one and then flips `active` (release), so a crash that reads the active
//! list never sees a half-written entry. Refreshes must be serialized by the caller (the install module holds a
//! lock for that; no lock is ever taken here). A crash racing two back-to-back refreshes could read a list being
//! rewritten; the other threads are stopped during a crash, so that needs a refresh on a thread that ignored the
//! stop signal.
//!
//! Readers that run while the process goes on (on-demand stack captures, `crate::ondemand`) read through
//! [`ImageTable::read`], which counts them per list: an update waits (bounded) until nobody reads the list it is
//! about to rewrite, so a capture racing two refreshes in a row never sees a list being written. The non-fatal
//! writer holds a list for a whole report (seconds) through [`ImageTable::read_held`], which an update waits for
//! without a bound.
//!
//! Reading is allocation-free, lock-free and async-signal-safe.
#![allow(unsafe_code)]

use crate::unwind::{CodeMap, Module, UnwindSections};
use core::cell::UnsafeCell;
use core::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use report_format::encode::{Image, ID_KIND_BUILD_ID};

/// Everything [`ImageList::push_record`] stores about one image (borrowed; the list copies it).
#[derive(Clone, Copy, Debug, Default)]
pub struct ImageRecord<'a> {
    /// Absolute path (copied into the path arena).
    pub path: &'a [u8],
    /// Where the Mach-O header / the ELF's first segment is mapped.
    pub load_address: u64,
    /// Bytes of the text range from `load_address` (`__TEXT` vmsize on Apple).
    pub size: u64,
    /// Slide (Mach-O) or load bias (ELF), bytes.
    pub bias: i64,
    /// Identifier bytes: 16-byte `LC_UUID` or GNU build id (at most [`MAX_ID_LEN`] kept).
    pub id: &'a [u8],
    /// `report_format::encode::ID_KIND_UUID` or `ID_KIND_BUILD_ID`.
    pub id_kind: u8,
    /// CPU architecture name when known (`b"arm64e"`, from `crate::platform::darwin::crash::macho::arch_name`); static text.
    pub arch: &'static [u8],
    /// Runtime address and size in bytes of the image's `__DATA,__crash_info` section (Apple); `(0, 0)` if none.
    pub crash_info: (u64, u64),
    /// Where the image's unwind tables are mapped (all absent when unknown).
    pub unwind: UnwindSections,
}

/// The architecture names an [`ImageEntry`] can hold, by code (code 0: none). Every name
/// `crate::platform::darwin::crash::macho::arch_name` returns is here (a test checks); a record with another name
/// keeps none. An entry stores the code, not a reference, so that an all-zero entry is a valid empty one and the
/// lists can be allocated zeroed at install (`crate::prealloc::leak_zeroed`).
pub const ARCH_NAMES: [&[u8]; 7] = [b"", b"arm64", b"arm64e", b"arm64_32", b"x86_64", b"x86_64h", b"unknown"];

/// The code of `name` in [`ARCH_NAMES`]; 0 when it is not there. Signal-safe.
fn arch_code(name: &[u8]) -> u8 {
    ARCH_NAMES.iter().position(|n| *n == name).and_then(|i| u8::try_from(i).ok()).unwrap_or(0)
}

/// Longest build id kept, in bytes (GNU build ids are 20 bytes with SHA-1, 16 with MD5/UUID; 32 allows SHA-256).
pub const MAX_ID_LEN: usize = 32;

/// One image.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ImageEntry {
    /// Where the image's first segment (ELF header / Mach-O header) is mapped.
    pub load_address: u64,
    /// Bytes from `load_address` to the end of the last executable segment.
    pub size: u64,
    /// Load bias (ELF) or slide (Mach-O): runtime minus link-time address.
    pub bias: i64,
    path_off: u32,
    path_len: u32,
    id: [u8; MAX_ID_LEN],
    id_len: u8,
    /// `report_format::encode::ID_KIND_*` of `id`.
    pub id_kind: u8,
    /// CPU architecture: index into [`ARCH_NAMES`] ([`ImageEntry::arch`] gives the name).
    arch: u8,
    /// Runtime address of the image's `__crash_info` section (Apple); 0 when it has none.
    pub crash_info_addr: u64,
    /// Size in bytes of the `__crash_info` section.
    pub crash_info_size: u64,
    /// Where the image's unwind tables are mapped, read by the unwinder through the fault-proof reader.
    pub unwind: UnwindSections,
}

impl ImageEntry {
    /// CPU architecture name (static text; empty when unknown). Signal-safe.
    pub fn arch(&self) -> &'static [u8] {
        ARCH_NAMES.get(usize::from(self.arch)).copied().unwrap_or(b"")
    }
}

/// A fixed-capacity image list over preallocated storage.
///
/// Entries keep the order they were added in (the report lists them so: the executable first, then the loader's
/// order); a second array keeps their indices sorted by load address, so [`ImageList::find`] is a binary search
/// (O(log n): the unwinder asks it for every candidate return address, thousands of times per crash with hundreds
/// of images). Each push inserts its index there (a shift of 4-byte indices, not of entries).
#[derive(Debug)]
pub struct ImageList {
    entries: &'static mut [ImageEntry],
    count: usize,
    arena: &'static mut [u8],
    arena_len: usize,
    /// Indices of `entries[..count]` by ascending load address.
    by_address: &'static mut [u32],
    /// Images that did not fit (entries or path bytes).
    pub dropped: usize,
    /// Index of the image [`ImageList::find`] found last (`usize::MAX`: none): consecutive frames of a stack, and
    /// the walk and the encoder asking about the same frame, mostly fall in the same image. Only a hint: readers on
    /// several threads may overwrite each other's (relaxed atomic), and a hit is checked against the entry.
    last: AtomicUsize,
}

impl ImageList {
    /// A list over preallocated storage (install time): `entries` and `by_address` of the same length (the
    /// capacity; the shorter one bounds it), `arena` for the path bytes.
    pub fn from_parts(
        entries: &'static mut [ImageEntry],
        arena: &'static mut [u8],
        by_address: &'static mut [u32],
    ) -> Self {
        ImageList { entries, count: 0, arena, arena_len: 0, by_address, dropped: 0, last: AtomicUsize::new(usize::MAX) }
    }

    /// Empties the list.
    pub fn clear(&mut self) {
        self.count = 0;
        self.arena_len = 0;
        self.dropped = 0;
        self.last.store(usize::MAX, Ordering::Relaxed);
    }

    /// Appends an image with a GNU build id (ELF); `false` (and `dropped` + 1) when entries or path bytes ran out.
    pub fn push(&mut self, path: &[u8], load_address: u64, size: u64, bias: i64, build_id: &[u8]) -> bool {
        self.push_record(&ImageRecord {
            path,
            load_address,
            size,
            bias,
            id: build_id,
            id_kind: ID_KIND_BUILD_ID,
            ..ImageRecord::default()
        })
    }

    /// Appends an image; `false` (and `dropped` + 1) when entries or path bytes ran out.
    pub fn push_record(&mut self, r: &ImageRecord<'_>) -> bool {
        let start = self.arena_len;
        let Some(end) = start.checked_add(r.path.len()) else { return self.drop_one() };
        let index = self.count;
        let (Ok(index32), true) = (u32::try_from(index), index < self.by_address.len()) else {
            return self.drop_one();
        };
        let (Some(dst), Some(e)) = (self.arena.get_mut(start..end), self.entries.get_mut(index)) else {
            return self.drop_one();
        };
        dst.copy_from_slice(r.path);
        let mut id = [0u8; MAX_ID_LEN];
        let id_len = r.id.len().min(MAX_ID_LEN);
        if let (Some(d), Some(s)) = (id.get_mut(..id_len), r.id.get(..id_len)) {
            d.copy_from_slice(s);
        }
        *e = ImageEntry {
            load_address: r.load_address,
            size: r.size,
            bias: r.bias,
            path_off: start as u32,
            path_len: r.path.len() as u32,
            id,
            id_len: id_len as u8,
            id_kind: if id_len > 0 { r.id_kind } else { 0 },
            arch: arch_code(r.arch),
            crash_info_addr: r.crash_info.0,
            crash_info_size: r.crash_info.1,
            unwind: r.unwind,
        };
        self.arena_len = end;
        // Insert the index where its load address sorts (after equal addresses: stable).
        let entries = &*self.entries;
        let load = r.load_address;
        let sorted = self.by_address.get_mut(..index).unwrap_or(&mut []);
        let at = sorted.partition_point(|&j| entries.get(j as usize).is_some_and(|o| o.load_address <= load));
        if let Some(tail) = self.by_address.get_mut(at..=index) {
            tail.rotate_right(1);
            if let Some(first) = tail.first_mut() {
                *first = index32;
            }
        }
        self.count = index.saturating_add(1);
        true
    }

    fn drop_one(&mut self) -> bool {
        self.dropped = self.dropped.saturating_add(1);
        false
    }

    /// Most entries the list can hold (its preallocated storage).
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// Entry `i` as a borrowed record (path and id point into this list), e.g. to copy it into another list.
    pub fn record(&self, i: usize) -> Option<ImageRecord<'_>> {
        let e = self.entry(i)?;
        Some(ImageRecord {
            path: self.path(i),
            load_address: e.load_address,
            size: e.size,
            bias: e.bias,
            id: self.build_id(i),
            id_kind: e.id_kind,
            arch: e.arch(),
            crash_info: (e.crash_info_addr, e.crash_info_size),
            unwind: e.unwind,
        })
    }

    /// Number of images.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether the list is empty.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Entry `i`.
    pub fn entry(&self, i: usize) -> Option<&ImageEntry> {
        self.entries.get(..self.count)?.get(i)
    }

    /// Path bytes of entry `i`.
    pub fn path(&self, i: usize) -> &[u8] {
        match self.entry(i) {
            Some(e) => {
                let s = e.path_off as usize;
                self.arena.get(s..s.saturating_add(e.path_len as usize)).unwrap_or(&[])
            }
            None => &[],
        }
    }

    /// Build id bytes of entry `i`.
    pub fn build_id(&self, i: usize) -> &[u8] {
        self.entry(i).and_then(|e| e.id.get(..usize::from(e.id_len))).unwrap_or(&[])
    }

    /// Entry `i` as the encoder's borrowed image.
    pub fn image(&self, i: usize) -> Option<Image<'_>> {
        let e = self.entry(i)?;
        Some(Image {
            path: self.path(i),
            name: b"",
            load_address: e.load_address,
            size: e.size,
            slide: Some(e.bias),
            id: self.build_id(i),
            id_kind: e.id_kind,
            arch: e.arch(),
        })
    }

    /// Index of the image whose text range `[load_address, load_address + size)` holds `addr` (a zero size
    /// counts as one byte). The image found last first; else a binary search over the load-address order: the
    /// image with the highest load address at or below `addr` is the only candidate (text ranges of loaded images
    /// do not overlap). Signal-safe.
    pub fn find(&self, addr: u64) -> Option<usize> {
        let entries = self.entries.get(..self.count)?;
        let holds = |e: &ImageEntry| addr.checked_sub(e.load_address).is_some_and(|d| d < e.size.max(1));
        let last = self.last.load(Ordering::Relaxed);
        if entries.get(last).is_some_and(holds) {
            return Some(last);
        }
        let sorted = self.by_address.get(..self.count)?;
        let at = sorted.partition_point(|&j| entries.get(j as usize).is_some_and(|e| e.load_address <= addr));
        let i = *sorted.get(at.checked_sub(1)?)? as usize;
        let found = entries.get(i).is_some_and(holds).then_some(i)?;
        self.last.store(found, Ordering::Relaxed);
        Some(found)
    }

    /// Whether an image of the list has exactly this load address (binary search; allocation-free, signal-safe).
    pub fn has_load_address(&self, load_address: u64) -> bool {
        let (Some(sorted), Some(entries)) = (self.by_address.get(..self.count), self.entries.get(..self.count)) else {
            return false;
        };
        let at = sorted.partition_point(|&j| entries.get(j as usize).is_some_and(|e| e.load_address <= load_address));
        // The last entry at or below the address: when any has this load address, that one does.
        at.checked_sub(1)
            .and_then(|k| sorted.get(k))
            .and_then(|&j| entries.get(j as usize))
            .is_some_and(|e| e.load_address == load_address)
    }
}

impl CodeMap for ImageList {
    /// The image whose text range holds `addr` (binary search; allocation-free, signal-safe).
    fn module_for(&self, addr: u64) -> Option<Module> {
        let e = self.entry(self.find(addr)?)?;
        Some(Module { start: e.load_address, end: e.load_address.saturating_add(e.size), unwind: e.unwind })
    }
}

/// Two image lists and the index of the active one.
#[derive(Debug)]
pub struct ImageTable {
    lists: [UnsafeCell<ImageList>; 2],
    active: AtomicUsize,
    /// Readers inside each list through [`ImageTable::read`].
    readers: [AtomicUsize; 2],
    /// Readers inside each list through [`ImageTable::read_held`] (waited for without a bound).
    held: [AtomicUsize; 2],
    /// Updates so far ([`ImageTable::generation`]).
    generation: AtomicU64,
}

/// How long [`ImageTable::update`] waits for the readers of the list it is about to rewrite, in polls of
/// [`READER_POLL_NS`] (about 1 s; 0.2 s in this crate's unit tests). A reader holds a list for one stack walk (microseconds); one that never lets go
/// (a thread stopped by a debugger in the middle of a walk) is waited for this long, then the update goes on.
const READER_POLLS: u32 = if cfg!(test) { 4_000 } else { 20_000 };
/// Sleep between two polls of [`ImageTable::update`]'s wait, in nanoseconds.
const READER_POLL_NS: u64 = 50_000;

/// A counted read of the active image list ([`ImageTable::read`], [`ImageTable::read_held`]); the list stays
/// unchanged until this is dropped.
#[derive(Debug)]
pub struct ImageRead<'a> {
    table: &'a ImageTable,
    index: usize,
    /// The counters it is counted in (`readers` or `held`).
    counts: &'a [AtomicUsize; 2],
}

impl core::ops::Deref for ImageRead<'_> {
    type Target = ImageList;
    fn deref(&self) -> &ImageList {
        let cell = self.table.lists.get(self.index).unwrap_or(&self.table.lists[0]);
        // SAFETY: this reader is counted in `readers[index]`, so `update` does not write this list until the count
        // drops (see `ImageTable::read`); the list is never written while read.
        unsafe { &*cell.get() }
    }
}

impl Drop for ImageRead<'_> {
    fn drop(&mut self) {
        if let Some(r) = self.counts.get(self.index) {
            r.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

// SAFETY: the crash path only reads the active list; writers (serialized by the caller of `update`) only write the
// inactive one and publish it with a release store, so no list is read while written (see the module docs for the
// one documented race that needs two refreshes during one crash).
unsafe impl Sync for ImageTable {}

impl ImageTable {
    /// A table over two preallocated lists (install time).
    pub fn new(a: ImageList, b: ImageList) -> Self {
        ImageTable {
            lists: [UnsafeCell::new(a), UnsafeCell::new(b)],
            active: AtomicUsize::new(0),
            readers: [AtomicUsize::new(0), AtomicUsize::new(0)],
            held: [AtomicUsize::new(0), AtomicUsize::new(0)],
            generation: AtomicU64::new(0),
        }
    }

    /// How many updates the table has had: caches keyed by image addresses (the on-demand walkers' unwind rows)
    /// start over when it changes. Signal-safe.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::SeqCst)
    }

    /// The active list, counted as read until the returned guard is dropped: [`ImageTable::update`] does not
    /// rewrite it meanwhile (it waits, bounded, for the count to drop). For readers that run while the process goes
    /// on; lock-free, allocation-free, signal-safe (two atomic increments; retried when an update flips the active
    /// list between the load and the count, at most 16 times, then read uncounted as [`ImageTable::current`]).
    pub fn read(&self) -> ImageRead<'_> {
        self.read_counted(&self.readers)
    }

    /// [`ImageTable::read`] for a reader that holds the list long (the non-fatal writer: every thread's capture
    /// and the report's writing, up to seconds) and must not see it rewritten meanwhile: [`ImageTable::update`]
    /// waits for these without a bound (it waits for [`ImageTable::read`]'s readers about 1 s, then goes on).
    /// Not for a thread that may be stopped while it holds the list (a signal handler of a stopped thread): an
    /// update would wait as long. Lock-free, allocation-free.
    pub fn read_held(&self) -> ImageRead<'_> {
        self.read_counted(&self.held)
    }

    fn read_counted<'a>(&'a self, counts: &'a [AtomicUsize; 2]) -> ImageRead<'a> {
        let mut index = 0usize;
        for _ in 0..16 {
            index = self.active.load(Ordering::SeqCst) & 1;
            let Some(r) = counts.get(index) else { break };
            r.fetch_add(1, Ordering::SeqCst);
            // Proof sketch (every access SeqCst): an update waits for the count of list `next` to be 0 after it
            // read `active` and before it writes list `next`. A reader counted in `next` before that check holds
            // the update off; one counted after it reloads `active` after the flip that made `next` inactive, and
            // retries.
            if self.active.load(Ordering::SeqCst) & 1 == index {
                return ImageRead { table: self, index, counts };
            }
            r.fetch_sub(1, Ordering::SeqCst);
        }
        // An update on every try (never in practice): count the reader where it stands, as `current` would read.
        if let Some(r) = counts.get(index) {
            r.fetch_add(1, Ordering::SeqCst);
        }
        ImageRead { table: self, index, counts }
    }

    /// The active list. Signal-safe.
    pub fn current(&self) -> &ImageList {
        let i = self.active.load(Ordering::Acquire) & 1;
        // SAFETY: the active list is never written (writers use the inactive one), see the `Sync` impl.
        unsafe { &*self.lists.get(i).unwrap_or(&self.lists[0]).get() }
    }

    /// Rebuilds the inactive list with `fill` and makes it active.
    ///
    /// # Safety
    /// Calls must be serialized (no two `update`s at once); not for the crash path.
    pub unsafe fn update(&self, fill: impl FnOnce(&mut ImageList)) {
        let next = (self.active.load(Ordering::SeqCst) & 1) ^ 1;
        // Long readers of the list about to be rewritten (`read_held`): wait until they are gone, however long.
        while self.held.get(next).is_some_and(|r| r.load(Ordering::SeqCst) != 0) {
            std::thread::sleep(core::time::Duration::from_millis(1));
        }
        // Counted readers of the list about to be rewritten (see `read`): wait until they are gone, bounded.
        for _ in 0..READER_POLLS {
            if self.readers.get(next).is_none_or(|r| r.load(Ordering::SeqCst) == 0) {
                break;
            }
            std::thread::sleep(core::time::Duration::from_nanos(READER_POLL_NS));
        }
        // SAFETY: the caller serializes updates and readers only read the active list, so the inactive list is
        // exclusively ours until the release store below.
        let list = unsafe { &mut *self.lists.get(next).unwrap_or(&self.lists[0]).get() };
        list.clear();
        fill(list);
        self.generation.fetch_add(1, Ordering::SeqCst);
        self.active.store(next, Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An all-zero entry (how install allocates the lists) is the empty default entry, and every architecture name
    /// the Mach-O reader gives survives the round trip through its code.
    #[test]
    fn a_zeroed_entry_is_the_default_and_arch_names_round_trip() {
        let zeroed = crate::prealloc::leak_zeroed::<ImageEntry>(3).expect("alloc");
        assert!(zeroed.iter().all(|e| *e == ImageEntry::default()));
        assert_eq!(zeroed[0].arch(), b"");
        use crate::platform::darwin::crash::macho::{self, consts::*};
        let types = [
            (CPU_TYPE_ARM64, CPU_SUBTYPE_ARM64E),
            (CPU_TYPE_ARM64, 0),
            (CPU_TYPE_ARM64_32, 0),
            (CPU_TYPE_X86_64, CPU_SUBTYPE_X86_64_H),
            (CPU_TYPE_X86_64, 3),
            (7, 3),
        ];
        let mut l = list(8, 256);
        for (i, (t, s)) in types.into_iter().enumerate() {
            let name = macho::arch_name(t, s).as_bytes();
            assert!(l.push_record(&ImageRecord {
                path: b"/x",
                load_address: 0x1000 * (i as u64 + 1),
                arch: name,
                ..ImageRecord::default()
            }));
            let e = l.entry(i).expect("entry");
            assert_eq!(e.arch(), name);
            assert_eq!(l.record(i).expect("record").arch, name);
        }
        assert_eq!(arch_code(b"sparc"), 0, "a name not in the table keeps none");
    }

    fn list(entries: usize, arena: usize) -> ImageList {
        ImageList::from_parts(
            Vec::leak(vec![ImageEntry::default(); entries]),
            Vec::leak(vec![0u8; arena]),
            Vec::leak(vec![0u32; entries]),
        )
    }

    #[test]
    fn find_is_a_search_by_address_whatever_the_push_order() {
        // Pushed out of address order, with a gap, a zero-size image and an image at address 0.
        let mut l = list(8, 256);
        let images = [(0x9000u64, 0x100u64), (0x1000, 0x800), (0x5000, 0), (0, 0x10), (0x7000, 0x1000)];
        for (k, (load, size)) in images.iter().enumerate() {
            assert!(l.push(format!("/lib/{k}").as_bytes(), *load, *size, 0, &[]));
        }
        // Every address agrees with a linear scan (the definition).
        let linear = |a: u64| {
            (0..l.len()).find(|&i| {
                let e = l.entry(i).expect("entry");
                a.checked_sub(e.load_address).is_some_and(|d| d < e.size.max(1))
            })
        };
        for a in (0..0xa000u64).step_by(0x10).chain([0x7ff, 0x17ff, 0x1800, 0x5000, 0x5001, 0x90ff, 0x9100, u64::MAX]) {
            assert_eq!(l.find(a), linear(a), "address {a:#x}");
        }
        // The image found last is tried first: alternating between images, and into gaps right after a hit, never
        // answers with the previous image.
        for (a, b) in [(0x1010u64, 0x7010u64), (0x7ff0, 0x8000), (0x17f0, 0x1800), (0x9000, 0x8fff), (0x5000, 0x5001)] {
            for x in [a, b, a, b] {
                assert_eq!(l.find(x), linear(x), "address {x:#x} after a hit");
            }
        }
        assert_eq!(l.find(0x9050), Some(0), "indices are push order");
        assert_eq!(l.find(0x5000), Some(2));
        assert_eq!(l.find(0x8), Some(3));
        // Order survives a clear and a refill.
        l.clear();
        assert_eq!(l.find(0x9050), None);
        assert!(l.push(b"/x", 0x9000, 0x100, 0, &[]));
        assert_eq!(l.find(0x9050), Some(0));
    }

    #[test]
    fn push_find_and_overflow() {
        let mut l = list(2, 32);
        assert!(l.push(b"/bin/app", 0x1000, 0x500, 0x1000, &[1, 2, 3]));
        assert!(l.push(b"/lib/libc.so.6", 0x7000, 0x100, 0x7000, &[]));
        assert!(!l.push(b"/lib/x", 0, 1, 0, &[]));
        assert_eq!(l.dropped, 1);
        assert_eq!(l.len(), 2);
        assert_eq!(l.path(0), b"/bin/app");
        assert_eq!(l.build_id(0), &[1, 2, 3]);
        assert_eq!(l.find(0x14ff), Some(0));
        assert_eq!(l.find(0x1500), None);
        assert_eq!(l.find(0x7050), Some(1));
        let img = l.image(0).expect("image");
        assert_eq!((img.load_address, img.size, img.slide, img.id_kind), (0x1000, 0x500, Some(0x1000), 2));
        assert_eq!(l.image(1).expect("image").id_kind, 0);
        // Path arena overflow.
        let mut l = list(4, 8);
        assert!(!l.push(b"/a/very/long/path", 0, 1, 0, &[]));
        assert!(l.is_empty());
    }

    #[test]
    fn records_keep_uuid_kind_arch_and_crash_info() {
        let mut l = list(2, 64);
        let uuid = [0x11u8; 16];
        assert!(l.push_record(&ImageRecord {
            path: b"/usr/lib/dyld",
            load_address: 0x1_0000_0000,
            size: 0x8_0000,
            bias: 0x4000,
            id: &uuid,
            id_kind: report_format::encode::ID_KIND_UUID,
            arch: b"arm64e",
            crash_info: (0x1_0007_0000, 64),
            ..ImageRecord::default()
        }));
        let e = *l.entry(0).expect("entry");
        assert_eq!((e.crash_info_addr, e.crash_info_size), (0x1_0007_0000, 64));
        let img = l.image(0).expect("image");
        assert_eq!((img.id, img.id_kind, img.arch), (&uuid[..], report_format::encode::ID_KIND_UUID, &b"arm64e"[..]));
        assert_eq!(img.path, b"/usr/lib/dyld");
    }

    #[test]
    fn records_copy_between_lists() {
        let mut a = list(2, 64);
        let unwind = UnwindSections { eh_frame_hdr: (0x1234, 0x40), ..UnwindSections::default() };
        assert!(a.push_record(&ImageRecord {
            path: b"/lib/libz.so.1",
            load_address: 0x7000,
            size: 0x300,
            bias: 0x7000,
            id: &[9, 8, 7],
            id_kind: ID_KIND_BUILD_ID,
            unwind,
            ..ImageRecord::default()
        }));
        assert_eq!(a.capacity(), 2);
        assert!(a.record(1).is_none());
        let mut b = list(1, 64);
        assert!(b.push_record(&a.record(0).expect("record")));
        assert_eq!(b.entry(0).copied(), a.entry(0).map(|e| ImageEntry { path_off: 0, ..*e }));
        assert_eq!((b.path(0), b.build_id(0)), (&b"/lib/libz.so.1"[..], &[9u8, 8, 7][..]));
        assert_eq!(b.entry(0).expect("entry").unwind, unwind);
    }

    /// An update never rewrites a list a counted reader holds: it waits until the reader lets go.
    #[test]
    fn updates_wait_for_counted_readers_of_the_list_they_rewrite() {
        use std::sync::atomic::AtomicBool;
        let t: &'static ImageTable = Box::leak(Box::new(ImageTable::new(list(4, 64), list(4, 64))));
        // SAFETY: updates are serialized (one thread at a time below).
        unsafe { t.update(|l| assert!(l.push(b"/first", 1, 1, 0, &[]))) };
        let g0 = t.generation();
        let guard = t.read();
        assert_eq!(guard.path(0), b"/first");
        let second_done: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
        let h = std::thread::spawn(move || {
            // The inactive list: no reader, written at once.
            // SAFETY: the only updating thread.
            unsafe { t.update(|l| assert!(l.push(b"/second", 2, 1, 0, &[]))) };
            // The list the guard holds: waits for it.
            // SAFETY: as above.
            unsafe { t.update(|l| assert!(l.push(b"/third", 3, 1, 0, &[]))) };
            second_done.store(true, Ordering::SeqCst);
        });
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(!second_done.load(Ordering::SeqCst), "the update went ahead under a reader");
        assert_eq!(guard.path(0), b"/first", "the held list is unchanged");
        assert_eq!(t.current().path(0), b"/second");
        drop(guard);
        h.join().expect("updater");
        assert!(second_done.load(Ordering::SeqCst));
        assert_eq!(t.read().path(0), b"/third");
        assert_eq!(t.generation(), g0 + 2);
    }

    /// A long reader (`read_held`, the non-fatal writer) is waited for past the bound of `read`'s readers: the
    /// list it holds is not rewritten under it however long it takes. The bound is measured first (an update
    /// under a `read` guard goes ahead after it), then a held read is kept twice as long.
    #[test]
    fn updates_wait_for_held_readers_without_a_bound() {
        use std::sync::atomic::AtomicBool;
        use std::time::{Duration, Instant};
        /// Holds `guard` (a read of the list the second update rewrites) for at most `hold`; how long the two
        /// updates took, or `None` when they had not finished by then.
        fn hold_against_updates(t: &'static ImageTable, held: bool, hold: Duration) -> Option<Duration> {
            // SAFETY: updates are serialized (one thread at a time here).
            unsafe { t.update(|l| assert!(l.push(b"/first", 1, 1, 0, &[]))) };
            let guard = if held { t.read_held() } else { t.read() };
            let done: &'static AtomicBool = Box::leak(Box::new(AtomicBool::new(false)));
            let t0 = Instant::now();
            let h = std::thread::spawn(move || {
                // SAFETY: the only updating thread.
                unsafe { t.update(|l| assert!(l.push(b"/second", 2, 1, 0, &[]))) };
                // SAFETY: as above. The list the guard holds.
                unsafe { t.update(|l| assert!(l.push(b"/third", 3, 1, 0, &[]))) };
                done.store(true, Ordering::SeqCst);
                t0.elapsed()
            });
            while !done.load(Ordering::SeqCst) && t0.elapsed() < hold {
                std::thread::sleep(Duration::from_millis(5));
            }
            let finished = done.load(Ordering::SeqCst);
            if !finished {
                assert_eq!(guard.path(0), b"/first", "the held list is unchanged");
            }
            drop(guard);
            let took = h.join().expect("updater");
            finished.then_some(took)
        }
        let t: &'static ImageTable = Box::leak(Box::new(ImageTable::new(list(4, 64), list(4, 64))));
        let bound = hold_against_updates(t, false, Duration::from_secs(30)).expect("a read is waited for, bounded");
        assert_eq!(
            hold_against_updates(t, true, bound * 2 + Duration::from_millis(100)),
            None,
            "the update rewrote a held list (a read's bound: {bound:?})"
        );
        assert_eq!(t.read().path(0), b"/third");
    }

    #[test]
    fn update_flips_lists() {
        let t = ImageTable::new(list(4, 64), list(4, 64));
        assert!(t.current().is_empty());
        // SAFETY: single-threaded test, updates are serialized.
        unsafe { t.update(|l| assert!(l.push(b"/a", 1, 1, 0, &[]))) };
        assert_eq!(t.current().path(0), b"/a");
        // SAFETY: as above.
        unsafe { t.update(|l| assert!(l.push(b"/b", 2, 1, 0, &[]))) };
        assert_eq!(t.current().len(), 1);
        assert_eq!(t.current().path(0), b"/b");
    }
}
