//! Writes the report: a buffered raw file-descriptor [`Sink`], atomic file commit (temporary name, `fsync`,
//! `rename`, `fsync` of the directory), and the section sequence (META, EXCEPTION, MESSAGES, USER, one THREAD per
//! thread walked into one reusable frame buffer and encoded at once, IMAGES for the used images, IMAGE NAMES for the
//! rest, END; format 2.0, `report-format/SCHEMA.md`).
//!
//! Frames are written relative to their image: the encoder asks [`UsedImages`] (a binary search over the image
//! list) for each frame's image, which also marks the image as used in a preallocated bitset. Registers of the
//! crashed thread mark their images too. Threads other than the crashed one keep only pc, sp, fp (and lr on arm64).
//!
//! The first report of a process goes into the file reserved at install ([`take_reserved`]): all zeros and locked
//! then (an earlier process's unused one, or created and filled with zeros), so the crash writes into blocks
//! already allocated, `fdatasync`s once and renames, with no file creation, no `ftruncate` (the zeros after the
//! report stay: format 2.4 zero padding, SCHEMA.md §2) and no directory `fsync` after the fault ([`commit`]). On
//! Linux and Android a thread that answered the stop signal `fdatasync`s the file early, while the owner works
//! ([`set_early_sync`], [`take_early_sync`]).
//!
//! POSIX only (`write`, `fsync`, `fdatasync`, `openat`, `renameat`, `close` are async-signal-safe per
//! POSIX.1-2017 §2.4.3), so Linux and Apple share it. Never allocates, locks or panics.
#![allow(unsafe_code)]

use crate::arch::MAX_REGS;
use crate::crash::images::ImageList;
use crate::crash::stack_bounds::{self, MappedStackReader, StackBounds};
use crate::crash::threads::{ThreadTable, CAPTURED, LEFT};
use crate::crash::user_table::{self, Snapshot};
use crate::unwind::{self, MemoryReader, Repeat, RuleCache, WalkOptions};
use core::cell::Cell;
use core::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, Ordering};
use report_format::encode::{
    frame_registers, EncodeError, Encoder, Exception, ImageLookup, IndexedImage, KeyValue, Message, Meta, Sink,
    SinkError, Thread,
};

/// Suffix of a finished report file name (`<32 hex digits of the report id>.crashreport`).
pub const REPORT_SUFFIX: &[u8] = report_format::framing::FILE_SUFFIX.as_bytes();
/// Prefix of a report still being written (`.<id>.tmp`); readers skip names starting with a dot.
pub const TEMP_PREFIX: &[u8] = b".";
/// Suffix of a report still being written.
pub const TEMP_SUFFIX: &[u8] = b".tmp";
/// Suffix of the report file reserved at install (`.<pid hex>-<time hex>.reserved`, zeros until a crash writes
/// into it; the name is its creator's: a later process that claims it keeps it). The reporter leaves a reservation
/// alone while its process holds the `flock` taken at install; once that process is gone it keeps one unused one
/// as the next install's spare, deletes other unused ones and takes a used one as a report (`reporter::store`).
pub const RESERVED_SUFFIX: &[u8] = b".reserved";

/// A [`Sink`] that buffers into a preallocated buffer and writes to a file descriptor with `write(2)`.
#[derive(Debug)]
pub struct FdSink<'b> {
    fd: i32,
    buf: &'b mut [u8],
    len: usize,
}

impl<'b> FdSink<'b> {
    /// A sink writing to `fd` through `buf` (an empty `buf` writes straight through).
    pub fn new(fd: i32, buf: &'b mut [u8]) -> Self {
        FdSink { fd, buf, len: 0 }
    }

    /// Writes the buffered bytes.
    ///
    /// # Errors
    /// [`SinkError::Os`] with the `errno` of a failed `write`.
    pub fn flush(&mut self) -> Result<(), SinkError> {
        let n = self.len;
        self.len = 0;
        let data = self.buf.get(..n).unwrap_or(&[]);
        write_fully(self.fd, data)
    }
}

/// `write(2)` until all of `data` is written, retrying on `EINTR`.
fn write_fully(fd: i32, mut data: &[u8]) -> Result<(), SinkError> {
    // Bounded: every successful write shrinks `data`; EINTR retries are capped.
    let mut eintr = 0u32;
    while !data.is_empty() {
        // SAFETY: `data` is a valid readable slice for its length; `write` does not retain the pointer.
        let r = unsafe { libc::write(fd, data.as_ptr().cast(), data.len()) };
        if r < 0 {
            let e = errno();
            if e == libc::EINTR && eintr < 1000 {
                eintr = eintr.saturating_add(1);
                continue;
            }
            return Err(SinkError::Os(e));
        }
        if r == 0 {
            return Err(SinkError::Os(libc::EIO));
        }
        data = data.get(r as usize..).unwrap_or(&[]);
    }
    Ok(())
}

/// Where the calling thread's `errno` lives (glibc and musl `__errno_location`, bionic `__errno`): a valid,
/// aligned pointer for the life of the thread. Signal-safe.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub fn errno_location() -> *mut i32 {
    #[cfg(target_os = "linux")]
    // SAFETY: `__errno_location` takes no arguments and cannot fail.
    let p = unsafe { libc::__errno_location() };
    #[cfg(target_os = "android")]
    // SAFETY: `__errno` takes no arguments and cannot fail.
    let p = unsafe { libc::__errno() };
    p
}

/// The calling thread's `errno`. Signal-safe (a thread-local read).
pub fn errno() -> i32 {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    // SAFETY: `errno_location` returns a valid pointer to the calling thread's errno.
    let e = unsafe { *errno_location() };
    #[cfg(target_vendor = "apple")]
    // SAFETY: `__error` returns a valid pointer to the calling thread's errno.
    let e = unsafe { *libc::__error() };
    #[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
    let e = 0;
    e
}

impl Drop for FdSink<'_> {
    /// Flushes what is buffered, so sections encoded before an error still reach the file.
    fn drop(&mut self) {
        let _ = self.flush();
    }
}

impl Sink for FdSink<'_> {
    fn write_all(&mut self, bytes: &[u8]) -> Result<(), SinkError> {
        if bytes.len() > self.buf.len() {
            self.flush()?;
            return write_fully(self.fd, bytes);
        }
        if self.len.saturating_add(bytes.len()) > self.buf.len() {
            self.flush()?;
        }
        let end = self.len.checked_add(bytes.len()).ok_or(SinkError::Full)?;
        let dst = self.buf.get_mut(self.len..end).ok_or(SinkError::Full)?;
        dst.copy_from_slice(bytes);
        self.len = end;
        Ok(())
    }
}

/// Marks 16 random bytes as an RFC 4122 version-4 UUID (version nibble 4, variant bits `10`): report ids.
pub fn set_uuid_v4_bits(id: &mut [u8; 16]) {
    id[6] = (id[6] & 0x0f) | 0x40;
    id[8] = (id[8] & 0x3f) | 0x80;
}

/// File names of one report, NUL-terminated, in fixed buffers.
#[derive(Clone, Copy, Debug)]
pub struct ReportNames {
    temp: [u8; 64],
    fin: [u8; 64],
}

impl ReportNames {
    /// Names for report id `id`: `.<hex>.tmp` and `<hex>.crashreport`.
    pub fn new(id: &[u8; 16]) -> Self {
        let mut hex = [0u8; 32];
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        for (pair, b) in hex.chunks_exact_mut(2).zip(id.iter()) {
            if let (Some(&hi), Some(&lo)) = (DIGITS.get(usize::from(b >> 4)), DIGITS.get(usize::from(b & 15))) {
                pair.copy_from_slice(&[hi, lo]);
            }
        }
        let mut temp = [0u8; 64];
        let mut fin = [0u8; 64];
        concat(&mut temp, &[TEMP_PREFIX, &hex, TEMP_SUFFIX]);
        concat(&mut fin, &[&hex, REPORT_SUFFIX]);
        ReportNames { temp, fin }
    }

    /// Names for report id `id` written into an existing file named `temp` (NUL-terminated), such as the
    /// reservation of [`take_reserved`]; the final name is `<hex>.crashreport` as with [`ReportNames::new`].
    pub fn with_temp(id: &[u8; 16], temp: &[u8; 64]) -> Self {
        ReportNames { temp: *temp, ..ReportNames::new(id) }
    }

    /// The temporary name (NUL-terminated).
    pub fn temp(&self) -> &[u8; 64] {
        &self.temp
    }

    /// The final name (NUL-terminated).
    pub fn final_name(&self) -> &[u8; 64] {
        &self.fin
    }
}

/// Concatenates parts into `out`, leaving at least one trailing NUL.
fn concat(out: &mut [u8; 64], parts: &[&[u8]]) {
    let mut n = 0usize;
    for p in parts {
        for b in p.iter() {
            if n.saturating_add(1) >= out.len() {
                return;
            }
            if let Some(d) = out.get_mut(n) {
                *d = *b;
            }
            n = n.saturating_add(1);
        }
    }
}

/// How many spare descriptors install reserves for the crash path: on Linux `/proc/self/task`, the report file and
/// one `/proc/self/task/<tid>/status` at a time are open together (the task directory stays open through the stop
/// round), plus one for another thread that takes a freed slot between our `close` and our `open` (threads still
/// run while they are being stopped).
pub const SPARE_FDS: usize = 4;

/// Descriptors reserved at install (`/dev/null` opened read-only, close-on-exec); -1: none. The crash path closes
/// one when an `open` fails with `EMFILE` / `ENFILE` and tries again, so a process that ran out of descriptors
/// still gets its report (the way libuv keeps a reserve descriptor for `accept` under `EMFILE`).
static SPARES: [AtomicI32; SPARE_FDS] = [const { AtomicI32::new(-1) }; SPARE_FDS];

/// Install time: hands `fd` to the crash path as spare number `i` (closing the one it replaces, if any). Returns
/// `false` (and closes `fd`) when `i` is out of range.
pub fn set_spare_fd(i: usize, fd: i32) -> bool {
    let Some(slot) = SPARES.get(i) else {
        // SAFETY: closing a descriptor the caller handed over.
        unsafe { libc::close(fd) };
        return false;
    };
    let old = slot.swap(fd, Ordering::AcqRel);
    if old >= 0 {
        // SAFETY: the replaced spare is ours; nobody else uses it.
        unsafe { libc::close(old) };
    }
    true
}

/// Closes one spare descriptor, freeing a slot in the descriptor table; `false` when none is left. Signal-safe
/// (an atomic swap and `close`), and each spare is closed once even when threads race.
pub fn release_spare_fd() -> bool {
    for slot in &SPARES {
        let fd = slot.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: the spare was ours, and the swap made this the only thread holding it.
            unsafe { libc::close(fd) };
            return true;
        }
    }
    false
}

/// The report file reserved at install: its descriptor (-1: none, or taken), the pid that reserved it and its name
/// (NUL-terminated). The name is written before the descriptor is published (release) and read after the
/// descriptor is taken (acquire).
static RESERVED_FD: AtomicI32 = AtomicI32::new(-1);
static RESERVED_PID: AtomicI32 = AtomicI32::new(0);
static RESERVED_NAME: [AtomicU8; 64] = [const { AtomicU8::new(0) }; 64];

/// Install time: hands the crash path the report file reserved in the report directory: `fd` (open for reading and
/// writing at offset 0, its blocks written), created by process `pid` under `name` (at most 63 bytes, no NUL).
/// A reservation already set is replaced and its descriptor closed (its file is the caller's to remove), and so is
/// the descriptor of its early sync ([`set_early_sync`]). Returns `false` (and sets nothing) when the name is too
/// long.
pub fn set_reserved(fd: i32, pid: i32, name: &[u8]) -> bool {
    if name.len() >= RESERVED_NAME.len() || name.contains(&0) {
        return false;
    }
    for (i, slot) in RESERVED_NAME.iter().enumerate() {
        slot.store(name.get(i).copied().unwrap_or(0), Ordering::Relaxed);
    }
    RESERVED_PID.store(pid, Ordering::Relaxed);
    // An early sync belongs to the reservation it was set for.
    set_early_sync(-1);
    let old = RESERVED_FD.swap(fd, Ordering::AcqRel);
    if old >= 0 {
        // SAFETY: the replaced reservation's descriptor is ours; nobody else uses it.
        unsafe { libc::close(old) };
    }
    true
}

/// Takes the report file reserved at install, once: its descriptor (at offset 0) and name (NUL-terminated).
/// `None` when there is none, it was taken already, or `pid` is not the process that reserved it (a child after
/// `fork` shares the descriptor with its parent and must not write into the parent's reservation).
///
/// Signal-safe: atomics only.
pub fn take_reserved(pid: i32) -> Option<(i32, [u8; 64])> {
    if RESERVED_PID.load(Ordering::Relaxed) != pid {
        return None;
    }
    let fd = RESERVED_FD.swap(-1, Ordering::AcqRel);
    if fd < 0 {
        return None;
    }
    Some((fd, reserved_name()))
}

/// The early sync's hand-over ([`set_early_sync`]): a descriptor of its own of the reservation (-1: none, or
/// taken), and whether the owner's [`commit`] has begun (an early sync not begun by then is left out).
struct EarlySync {
    fd: AtomicI32,
    commit_begun: AtomicBool,
}

impl EarlySync {
    const fn new() -> Self {
        EarlySync { fd: AtomicI32::new(-1), commit_begun: AtomicBool::new(false) }
    }

    /// Hands over `fd` (-1: none), closing a descriptor handed over before.
    fn set(&self, fd: i32) {
        if fd >= 0 {
            self.commit_begun.store(false, Ordering::SeqCst);
        }
        let old = self.fd.swap(fd, Ordering::AcqRel);
        if old >= 0 {
            // SAFETY: the replaced descriptor was handed over to us; nobody else uses it.
            unsafe { libc::close(old) };
        }
    }

    /// The descriptor, once, for a crash of process `pid` when `reserving_pid` reserved the file.
    fn take(&self, pid: i32, reserving_pid: i32) -> Option<i32> {
        if pid != reserving_pid || self.fd.load(Ordering::Relaxed) < 0 {
            return None;
        }
        let fd = self.fd.swap(-1, Ordering::AcqRel);
        (fd >= 0).then_some(fd)
    }

    fn wanted(&self) -> bool {
        !self.commit_begun.load(Ordering::SeqCst)
    }

    /// The commit begins: no early sync starts from now on; a descriptor nobody took is closed.
    fn end(&self) {
        self.commit_begun.store(true, Ordering::SeqCst);
        let fd = self.fd.swap(-1, Ordering::AcqRel);
        if fd >= 0 {
            // SAFETY: the swap made the untaken descriptor ours alone.
            unsafe { libc::close(fd) };
        }
    }
}

static EARLY_SYNC: EarlySync = EarlySync::new();

/// Install time, after [`set_reserved`] (Linux and Android): hands the crash path `fd`, a descriptor of its own of
/// the reserved file (a `dup`, never the reservation's, which the owner closes in [`commit`]), for one thread that
/// has already answered the stop signal to `fdatasync` while the owner still stops threads, walks and encodes
/// ([`take_early_sync`]). It takes work off the owner's `fdatasync`, which alone makes the report durable:
/// - a file created at this launch: its inode, directory entry and block allocation, which the file system
///   commits on its own only later (by default ext4's journal within 5 s, its `commit=` mount option; f2fs's
///   checkpoint within 60 s, `DEF_CP_INTERVAL` in the kernel's `fs/f2fs/f2fs.h`), and which the owner's
///   `fdatasync` would otherwise have to commit before its data;
/// - any file: the drive's cache flush after idle, which wakes the storage path (a power-saving drive; on the
///   development VM a sync after 200 ms of idle costs about 4x one right after another: BENCHMARKS.md, disk
///   floors), so the owner's flush usually meets it awake.
///
/// The owner does not wait for it, but it can meet it: where `fsync` holds the inode's lock while it writes (ext4
/// without a journal, as on the development VM; btrfs; FAT), the owner's `write` into the file waits until that
/// part is done; and the process's exit waits for a flush in progress (the thread sleeps uninterruptibly in it).
/// A sync not begun when the owner's [`commit`] begins is left out. A descriptor set before is closed.
pub fn set_early_sync(fd: i32) {
    EARLY_SYNC.set(fd);
}

/// Crash time: takes the descriptor of [`set_early_sync`] for a crash of process `pid`, once (the first caller gets
/// it and must close it). `None` when there is none, it was taken, or `pid` is not the process that reserved the
/// file (a child after `fork` shares the descriptor).
///
/// Signal-safe: atomics only.
pub fn take_early_sync(pid: i32) -> Option<i32> {
    EARLY_SYNC.take(pid, RESERVED_PID.load(Ordering::Relaxed))
}

/// Crash time, on the thread that took the early sync, right before its `fdatasync`: `false` once the owner's
/// [`commit`] has begun (its own `fdatasync` does the work then; a second one would only hold up the process's
/// exit). Signal-safe: one atomic load.
pub fn early_sync_wanted() -> bool {
    EARLY_SYNC.wanted()
}

/// The reservation's name (NUL-terminated: [`set_reserved`] stores 63 bytes at most). Signal-safe: atomic loads.
fn reserved_name() -> [u8; 64] {
    let mut name = [0u8; 64];
    for (d, s) in name.iter_mut().zip(RESERVED_NAME.iter()) {
        *d = s.load(Ordering::Relaxed);
    }
    name
}

/// Uninstall: closes the reservation's descriptor and removes its file from `dir_fd`, unless a crash took it, and
/// closes the descriptor of its early sync ([`set_early_sync`]).
pub fn release_reserved(dir_fd: i32) {
    set_early_sync(-1);
    let fd = RESERVED_FD.swap(-1, Ordering::AcqRel);
    if fd < 0 {
        return;
    }
    let name = reserved_name();
    // SAFETY: `fd` was the reservation's (the swap made it ours alone); `name` is NUL-terminated (63 bytes at most
    // were stored).
    unsafe {
        libc::close(fd);
        libc::unlinkat(dir_fd, name.as_ptr().cast(), 0);
    }
}

/// Runs `open` (an `open`/`openat` returning a descriptor or -1 with `errno`); when it fails for lack of
/// descriptors (`EMFILE`: the process limit, `ENFILE`: the system's), closes a spare ([`release_spare_fd`]) and
/// tries again, at most once per spare. Returns the descriptor or `Err(errno)`. Signal-safe if `open` is.
pub fn open_with_spares(mut open: impl FnMut() -> i32) -> Result<i32, i32> {
    for _ in 0..=SPARE_FDS {
        let fd = open();
        if fd >= 0 {
            return Ok(fd);
        }
        let e = errno();
        if !matches!(e, libc::EMFILE | libc::ENFILE) || !release_spare_fd() {
            return Err(e);
        }
    }
    Err(libc::EMFILE)
}

/// Creates the temporary report file in directory `dir_fd`, open for reading and writing (so [`commit`] can check
/// what reached the file); returns its fd.
///
/// Out of descriptors, it frees a spare reserved at install and tries again ([`open_with_spares`]).
///
/// # Errors
/// The `errno` of `openat`.
pub fn create_temp(dir_fd: i32, names: &ReportNames) -> Result<i32, i32> {
    open_with_spares(|| open_temp(dir_fd, names))
}

/// [`create_temp`] without the spare descriptors: one `openat`, failing with its `errno` (`EMFILE` included). For
/// writers outside the crash path (non-fatal reports), which must leave the spares to a crash that may follow.
///
/// # Errors
/// The `errno` of `openat`.
pub fn create_temp_no_spares(dir_fd: i32, names: &ReportNames) -> Result<i32, i32> {
    let fd = open_temp(dir_fd, names);
    if fd >= 0 {
        Ok(fd)
    } else {
        Err(errno())
    }
}

/// `openat` of the temporary report file (see [`create_temp`]): the descriptor, or -1 with `errno`.
fn open_temp(dir_fd: i32, names: &ReportNames) -> i32 {
    // SAFETY: `names.temp()` is NUL-terminated (`concat` keeps a trailing NUL); `openat` does not retain it.
    unsafe {
        libc::openat(
            dir_fd,
            names.temp().as_ptr().cast(),
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            0o600 as libc::c_uint,
        )
    }
}

/// How a report file came to be, which decides how [`commit`] makes it durable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FileKind {
    /// Created after the fault ([`create_temp`]): `fsync` the file, rename, `fsync` the directory.
    Created,
    /// The reservation of [`take_reserved`]: its blocks and its directory entry were made at install, so
    /// `fdatasync` writes the data alone; the file is renamed with the zeros beyond the report left in place (the
    /// format's zero padding after the end section, SCHEMA.md §2: cutting them cost about 2 ms on ext4) and
    /// without a directory `fsync`. Until the file system commits the rename (seconds), a power loss leaves the
    /// report durable under the reserved name, where the reporter finds it.
    Reserved,
}

/// Makes the report durable and visible, but only a report that says what crashed: `fsync` (`fdatasync` for a
/// reservation) the file, check that it starts with a valid file header followed by intact META and EXCEPTION
/// sections (read back from the file, every header and payload CRC checked), close it, `renameat` it to its final
/// name, and for a [`FileKind::Created`] file `fsync` the directory.
///
/// A file whose head is missing or damaged (the disk filled up, `ENOSPC`, or the file size limit was hit, `EFBIG`,
/// before META and EXCEPTION were written, or `fsync` failed) is **unlinked**: it holds nothing a reader could use,
/// and renamed into place it would pass for a finished report (the reporter would upload an empty crash). Under a
/// full disk, freeing its blocks also helps the next report. A file whose head is durable is committed even when
/// later writes failed: the reader decodes its intact sections and says what is missing.
///
/// Signal-safe: `fsync`, `fdatasync`, `lseek`, `close`, `renameat`, `unlinkat` (POSIX.1-2017 §2.4.3), `pread` (not
/// in that list, which has `read`; on Linux and Apple platforms the same kind of plain system call, taking no
/// lock), and CRC-32 arithmetic on stack buffers of 1 KiB and 256 bytes (crc32fast's CPU feature detection ran at
/// install). The head is read back with one `pread` of its first KiB where the report is of ordinary size.
///
/// # Errors
/// The `errno` of the first call that failed; `EIO` when the head is missing or damaged.
pub fn commit(dir_fd: i32, fd: i32, names: &ReportNames, kind: FileKind) -> Result<(), i32> {
    if kind == FileKind::Reserved {
        // No early sync starts from now on (it would only hold up the exit); an untaken descriptor is closed (a
        // process without other threads: it would otherwise outlive the reservation it was made for).
        EARLY_SYNC.end();
    }
    // SAFETY: plain syscalls on descriptors we own; names are NUL-terminated fixed buffers.
    unsafe {
        // Where the writes ended: the report's length (a reservation's zeros lie beyond it).
        let end = libc::lseek(fd, 0, libc::SEEK_CUR);
        let synced = match kind {
            FileKind::Created => libc::fsync(fd) == 0,
            FileKind::Reserved => sync_data(fd),
        };
        let err = if synced { 0 } else { errno() };
        let head_ok = synced && head_is_intact(fd, u64::try_from(end).unwrap_or(0));
        libc::close(fd);
        if !head_ok {
            libc::unlinkat(dir_fd, names.temp().as_ptr().cast(), 0);
            return Err(if err == 0 { libc::EIO } else { err });
        }
        if libc::renameat(dir_fd, names.temp().as_ptr().cast(), dir_fd, names.final_name().as_ptr().cast()) != 0 {
            let e = errno();
            // A reservation keeps its data under its own name: the reporter takes it from there.
            if kind == FileKind::Created {
                libc::unlinkat(dir_fd, names.temp().as_ptr().cast(), 0);
            }
            return Err(e);
        }
        if kind == FileKind::Created {
            libc::fsync(dir_fd);
        }
    }
    Ok(())
}

/// `fdatasync(fd)` where the OS has it (Linux, Android); `fsync` elsewhere (Apple platforms declare no
/// `fdatasync`, and their `fsync` does not flush the drive's cache either: `F_FULLFSYNC` would, at tens of
/// milliseconds). `true` on success. Signal-safe.
fn sync_data(fd: i32) -> bool {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    // SAFETY: a plain syscall on a descriptor the caller owns.
    let r = unsafe { libc::fdatasync(fd) };
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    // SAFETY: as above.
    let r = unsafe { libc::fsync(fd) };
    r == 0
}

/// Reads back the head of a report file: the first [`HeadReader::WINDOW`] bytes in one `pread`, which hold the
/// file header, META and EXCEPTION of a report of ordinary size, and anything further with a `pread` of its own.
/// Never past `limit` (bytes `limit..` are not the report's: a reservation's zeros). Signal-safe: `pread` and
/// copies into stack buffers.
struct HeadReader {
    fd: i32,
    limit: u64,
    window: [u8; HeadReader::WINDOW],
    /// Bytes of `window` read: 0 until the first read, and when that one failed.
    filled: usize,
    tried: bool,
}

impl HeadReader {
    /// Bytes read ahead from the start of the file.
    const WINDOW: usize = 1024;

    fn new(fd: i32, limit: u64) -> Self {
        HeadReader { fd, limit, window: [0; Self::WINDOW], filled: 0, tried: false }
    }

    /// Fills `buf` with the bytes at `offset`; `false` at the end of the file, past `limit`, or on an error.
    fn read(&mut self, offset: u64, buf: &mut [u8]) -> bool {
        let Some(end) = offset.checked_add(buf.len() as u64).filter(|end| *end <= self.limit) else { return false };
        if !self.tried {
            self.tried = true;
            let want = self.limit.min(Self::WINDOW as u64) as usize;
            if self.window.get_mut(..want).is_some_and(|w| pread_exact(self.fd, 0, w)) {
                self.filled = want;
            }
        }
        if end <= self.filled as u64 {
            // Within the window: both ends are at most `WINDOW`, so the casts are exact.
            if let Some(src) = self.window.get(offset as usize..end as usize) {
                buf.copy_from_slice(src);
                return true;
            }
        }
        pread_exact(self.fd, offset, buf)
    }
}

/// Reads exactly `buf.len()` bytes of `fd` at `offset` (`pread`, retrying short reads and `EINTR`, bounded);
/// `false` at end of file or on an error.
fn pread_exact(fd: i32, offset: u64, buf: &mut [u8]) -> bool {
    let mut done = 0usize;
    // Bounded: each round reads at least one byte or ends; EINTR retries are capped.
    for _ in 0..1000 {
        let Some(rest) = buf.get_mut(done..) else { return false };
        if rest.is_empty() {
            return true;
        }
        let Some(Ok(at)) = offset.checked_add(done as u64).map(libc::off_t::try_from) else { return false };
        // SAFETY: `rest` is valid for writes of its length; `pread` does not retain the pointer.
        let r = unsafe { libc::pread(fd, rest.as_mut_ptr().cast(), rest.len(), at) };
        if r < 0 && errno() == libc::EINTR {
            continue;
        }
        if r <= 0 {
            return false;
        }
        done = done.saturating_add(r as usize);
    }
    false
}

/// Whether `fd` holds a valid file header, then a META section, then an EXCEPTION section, each with a valid
/// header CRC and payload CRC (the sections every report starts with: [`write_report`], [`write_minimal_report`]),
/// all within its first `limit` bytes (the bytes written).
fn head_is_intact(fd: i32, limit: u64) -> bool {
    use report_format::framing::{self, SectionKind};
    let mut head = HeadReader::new(fd, limit);
    let mut fh = [0u8; framing::FILE_HEADER_LEN];
    if !head.read(0, &mut fh) || !framing::parse_file_header(&fh).is_some_and(|h| h.crc_ok) {
        return false;
    }
    let mut off = framing::FILE_HEADER_LEN as u64;
    for want in [SectionKind::Meta, SectionKind::Exception] {
        let mut sh = [0u8; framing::SECTION_HEADER_LEN];
        if !head.read(off, &mut sh) {
            return false;
        }
        let Some(h) = framing::parse_section_header(&sh) else { return false };
        if h.kind != want || h.len > framing::MAX_SECTION_LEN {
            return false;
        }
        off = off.saturating_add(framing::SECTION_HEADER_LEN as u64);
        let mut crc = crc32fast::Hasher::new();
        let mut left = u64::from(h.len);
        let mut chunk = [0u8; 256];
        while left > 0 {
            let n = left.min(chunk.len() as u64) as usize;
            let Some(part) = chunk.get_mut(..n) else { return false };
            if !head.read(off, part) {
                return false;
            }
            crc.update(part);
            off = off.saturating_add(n as u64);
            left = left.saturating_sub(n as u64);
        }
        if crc.finalize() != h.payload_crc {
            return false;
        }
    }
    true
}

/// Preallocated buffers the report writer works in.
#[derive(Debug)]
pub struct WorkBuffers<'a> {
    /// One section's payload (64 KiB is ample).
    pub scratch: &'a mut [u8],
    /// The reusable frame buffer (one thread at a time).
    pub frames: &'a mut [u64],
    /// How each frame was found (`unwind::trust`), index-aligned with `frames` and as long.
    pub trust: &'a mut [u8],
    /// Repeat records for the current thread.
    pub repeats: &'a mut [Repeat],
    /// Unwind rows shared by every walk of the report (cleared when the report starts).
    pub rules: &'a mut RuleCache,
    /// One bit per image of the list (64 a word, bit `i % 64` of word `i / 64`): set for the images a frame or a
    /// crashed-thread register points into (cleared when the report starts). Images past its capacity are never
    /// marked, so they go into IMAGE NAMES.
    pub used_images: &'a mut [u64],
}

/// The encoder's frame-to-image lookup over the crash-time image list ([`ImageList::find`], a binary search),
/// marking every image it finds in a used-image bitset. Allocation-free, lock-free, signal-safe.
#[derive(Debug)]
pub struct UsedImages<'a> {
    list: &'a ImageList,
    used: &'a [Cell<u64>],
}

impl<'a> UsedImages<'a> {
    /// A lookup over `list` marking into `used`, which it clears first (the words that `list` needs).
    pub fn new(list: &'a ImageList, used: &'a mut [u64]) -> Self {
        let words = list.len().div_ceil(64);
        for w in used.iter_mut().take(words) {
            *w = 0;
        }
        UsedImages { list, used: Cell::from_mut(used).as_slice_of_cells() }
    }

    /// Marks the image holding `address`, if any.
    pub fn mark(&self, address: u64) {
        let _ = self.image_at(address);
    }

    /// Whether image `i` is marked.
    pub fn is_used(&self, i: usize) -> bool {
        self.used.get(i / 64).is_some_and(|w| w.get() & (1u64 << (i % 64)) != 0)
    }
}

impl ImageLookup for UsedImages<'_> {
    fn image_at(&self, address: u64) -> Option<(u32, u64)> {
        let i = self.list.find(address)?;
        let e = self.list.entry(i)?;
        let index = u32::try_from(i).ok()?;
        if let Some(w) = self.used.get(i / 64) {
            w.set(w.get() | (1u64 << (i % 64)));
        }
        Some((index, e.load_address))
    }
}

/// Keeps of `regs` (a full register array of set `set`) only the registers kept for threads other than the
/// crashed one ([`frame_registers`]: pc, sp, fp, and lr on arm64), cut after the last kept value. An unknown set
/// keeps everything.
fn frame_registers_only<'r>(set: &[u8], regs: &'r mut [Option<u64>]) -> &'r [Option<u64>] {
    let keep = frame_registers(set);
    if keep.is_empty() {
        return regs;
    }
    let mut len = 0usize;
    for (k, r) in regs.iter_mut().enumerate() {
        if !keep.contains(&k) {
            *r = None;
        } else if r.is_some() {
            len = k.saturating_add(1);
        }
    }
    regs.get(..len).unwrap_or(&[])
}

/// What goes into a full report besides the threads and images.
#[derive(Clone, Copy, Debug)]
pub struct ReportHead<'a> {
    /// META (thread and image counts are filled in by the writer).
    pub meta: Meta<'a>,
    /// EXCEPTION (the crashed thread index is filled in by the writer).
    pub exception: Exception<'a>,
    /// MESSAGES (Apple: `__crash_info` texts such as Swift's `fatalError` message); none: no section.
    pub messages: &'a [Message<'a>],
}

/// Reason text for a thread that went on (its release timeout passed) before its stack was walked.
const LEFT_REASON: &[u8] =
    b"thread stopped waiting for release (release timeout) and went on before its stack was walked";

/// Reason text for a slot still being written when the report was encoded.
const STILL_WRITING: &[u8] = b"thread was still saving its registers when the report was written";

/// Encodes a full report: META, EXCEPTION, MESSAGES, USER, every thread of `table` (each walked with `mem` into
/// `bufs.frames` and encoded at once, frames relative to their images; the crashed thread first, with every
/// register, the others with pc, sp, fp and lr only), IMAGES (the images a frame or a crashed-thread register points
/// into, in full), IMAGE NAMES (the other images' paths), END. Returns the sink.
///
/// # Errors
/// The first [`EncodeError`]; sections written before it stay in the sink and decode on their own.
pub fn write_report<S: Sink, M: MemoryReader>(
    sink: S,
    head: &ReportHead<'_>,
    table: &ThreadTable,
    images: &ImageList,
    mem: &mut M,
    opts: &WalkOptions,
    bufs: &mut WorkBuffers<'_>,
) -> Result<S, EncodeError> {
    let threads = table.used();
    let crashed = threads.iter().position(|s| s.data().is_some_and(|d| d.crashed));
    let mut meta = head.meta;
    meta.thread_count = Some(threads.len() as u32);
    meta.image_count = Some(images.len() as u32);
    let mut exc = head.exception;
    exc.crashed_thread = crashed.map(|i| i as u32);

    bufs.rules.clear();
    let used = UsedImages::new(images, bufs.used_images);
    // The throw-site stack (Apple's Last Exception Backtrace) is symbolicated like the threads: its images are used.
    for a in exc.language.iter().flat_map(|l| l.backtrace) {
        used.mark(*a);
    }
    let mut enc = Encoder::begin(sink, bufs.scratch)?;
    enc.meta(&meta)?;
    enc.exception(&exc)?;
    if !head.messages.is_empty() {
        enc.messages(head.messages)?;
    }
    let mut user = Snapshot::new();
    user.take();
    let mut kv = [KeyValue::default(); user_table::SLOTS];
    enc.user(user.pairs(&mut kv))?;
    // The crashed thread first (SCHEMA.md §3): a write torn by a second fault keeps what matters most.
    let order = crashed.into_iter().chain((0..threads.len()).filter(|i| Some(*i) != crashed));
    for i in order {
        let Some(slot) = threads.get(i) else { continue };
        let mut regs_buf = [None; MAX_REGS];
        let mut t = Thread { index: i as u32, id: Some(slot.tid()), captured: false, ..Thread::default() };
        let mut n_frames = 0usize;
        let mut n_reps = 0usize;
        match slot.data() {
            Some(d) if slot.state() == CAPTURED => {
                t.name = d.name();
                t.queue = d.queue();
                t.crashed = d.crashed;
                t.captured = true;
                t.register_set = d.regs.set;
                let all = d.regs.to_options(&mut regs_buf).len();
                if d.crashed {
                    // Apple's usedImages: images a register of the crashed thread points into are kept in full.
                    for v in regs_buf.iter().take(all).flatten() {
                        used.mark(*v);
                    }
                    t.registers = regs_buf.get(..all).unwrap_or(&[]);
                } else {
                    t.registers = frame_registers_only(d.regs.set, regs_buf.get_mut(..all).unwrap_or(&mut []));
                }
                let out = unwind::WalkBuffers {
                    frames: bufs.frames,
                    trust: bufs.trust,
                    repeats: bufs.repeats,
                    rules: bufs.rules,
                };
                // The stack bounds recorded when the thread started (threads made through the pthread_create
                // wrapper), else the walker probes where the stack ends.
                let mut went_on = false;
                let o = match stack_bounds::stack_bounds(slot.tid()) {
                    Some(b) => {
                        // Plain loads only while the thread is held stopped (`begin_walk`); otherwise every read
                        // goes through the fault-proof reader.
                        let held = table.begin_walk(i);
                        let bounds = StackBounds { mapped: b.mapped && held, ..b };
                        // SAFETY: when `bounds.mapped`, the thread is stopped in its stop handler (or is the
                        // crashed thread, running this handler on another stack) and `begin_walk` holds it so
                        // until `end_walk` below.
                        let mut stack = unsafe { MappedStackReader::new(mem, bounds) };
                        let o = unwind::walk(&d.regs, &mut stack, images, opts, Some((b.lo, b.hi)), out);
                        table.end_walk();
                        went_on = !held && slot.state() == LEFT;
                        o
                    }
                    None => unwind::walk(&d.regs, mem, images, opts, None, out),
                };
                if went_on {
                    // It resumed before the walk could hold it: its registers no longer describe its stack.
                    t.captured = false;
                    t.reason = LEFT_REASON;
                } else {
                    n_frames = o.frames;
                    n_reps = o.repeats;
                    t.frames_truncated = o.truncated;
                }
            }
            Some(d) => {
                t.name = d.name();
                t.reason = if slot.state() == LEFT { LEFT_REASON } else { d.reason };
            }
            None => t.reason = STILL_WRITING,
        }
        t.frames = bufs.frames.get(..n_frames).unwrap_or(&[]);
        t.trust = bufs.trust.get(..n_frames).unwrap_or(&[]);
        t.repeats = bufs.repeats.get(..n_reps).unwrap_or(&[]);
        t.images = Some(&used);
        enc.thread(&t)?;
    }
    write_images(&mut enc, images, &used)?;
    enc.finish()
}

/// Writes the used images in full (IMAGES sections, chunks of 16 borrowed entries built on the stack), then the
/// paths of the others (IMAGE NAMES sections).
fn write_images<S: Sink>(
    enc: &mut Encoder<'_, S>,
    images: &ImageList,
    used: &UsedImages<'_>,
) -> Result<(), EncodeError> {
    const CHUNK: usize = 16;
    let mut i = 0usize;
    while i < images.len() {
        let mut chunk = [IndexedImage::default(); CHUNK];
        let mut n = 0usize;
        while i < images.len() && n < CHUNK {
            if used.is_used(i) {
                if let (Some(img), Some(slot), Ok(index)) = (images.image(i), chunk.get_mut(n), u32::try_from(i)) {
                    *slot = IndexedImage { index, image: img };
                    n = n.saturating_add(1);
                }
            }
            i = i.saturating_add(1);
        }
        if n > 0 {
            enc.indexed_images(chunk.get(..n).unwrap_or(&[]))?;
        }
    }
    enc.image_names(
        (0..images.len()).filter(|&i| !used.is_used(i)).filter_map(|i| Some((u32::try_from(i).ok()?, images.path(i)))),
    )
}

/// Encodes a minimal report after a fault inside the handler: META (marked minimal, with `head.meta.note`),
/// EXCEPTION, the crashed thread with its registers and frame 0 only (relative to its image), and the image list
/// read from the preallocated table: in full the images frame 0 or a register points into (marked in
/// `used_images`, as [`WorkBuffers::used_images`]), the others by path. No walking, no other threads.
///
/// # Errors
/// The first [`EncodeError`].
pub fn write_minimal_report<S: Sink>(
    sink: S,
    head: &ReportHead<'_>,
    crashed_tid: u64,
    regs: &crate::arch::RegisterValues,
    images: &ImageList,
    scratch: &mut [u8],
    used_images: &mut [u64],
) -> Result<S, EncodeError> {
    let mut meta = head.meta;
    meta.minimal = true;
    meta.thread_count = Some(1);
    meta.image_count = Some(images.len() as u32);
    let mut exc = head.exception;
    exc.crashed_thread = Some(0);
    let mut regs_buf = [None; MAX_REGS];
    let pc = regs.walk_start().map(|w| w.pc);
    let frames = [pc.unwrap_or(0)];
    let used = UsedImages::new(images, used_images);
    let registers = regs.to_options(&mut regs_buf);
    for v in registers.iter().flatten() {
        used.mark(*v);
    }
    let t = Thread {
        index: 0,
        id: Some(crashed_tid),
        crashed: true,
        captured: true,
        register_set: regs.set,
        registers,
        frames: if pc.is_some() { &frames } else { &[] },
        images: Some(&used),
        ..Thread::default()
    };
    let mut enc = Encoder::begin(sink, scratch)?;
    enc.meta(&meta)?;
    enc.exception(&exc)?;
    if !head.messages.is_empty() {
        enc.messages(head.messages)?;
    }
    enc.thread(&t)?;
    write_images(&mut enc, images, &used)?;
    enc.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty image list of `n` entries and `path_bytes` bytes of paths (leaked, as install leaks them).
    fn image_list(n: usize, path_bytes: usize) -> ImageList {
        ImageList::from_parts(
            Vec::leak(vec![ImageEntry::default(); n]),
            Vec::leak(vec![0u8; path_bytes]),
            Vec::leak(vec![0u32; n]),
        )
    }
    use crate::arch::x86_64;

    /// The inode `fd` refers to; `None` when it is closed.
    fn inode_of(fd: i32) -> Option<u64> {
        // SAFETY: all-zero bytes are a valid `stat` (plain integers).
        let mut st: libc::stat = unsafe { core::mem::zeroed() };
        // SAFETY: `st` is writable and live; a closed `fd` only makes fstat fail.
        (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_ino)
    }

    /// The early sync's descriptor goes to one caller, only for a crash of the process that reserved the file; a
    /// new hand-over closes the one before; once the commit begins, no sync is wanted and an untaken descriptor is
    /// closed; the next hand-over wants one again. (A local hand-over: `commit` in other tests ends the static one.)
    #[test]
    fn the_early_sync_is_taken_once_by_the_reserving_process_and_ends_with_the_commit() {
        use std::os::fd::IntoRawFd;
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let open = |n: &str| {
            let mut o = std::fs::File::options();
            o.read(true).write(true).create(true).truncate(true);
            o.open(dir.path().join(n)).expect("open").into_raw_fd()
        };
        let ino = |n: &str| std::fs::metadata(dir.path().join(n)).expect("stat").ino();
        let es = EarlySync::new();
        es.set(open("a"));
        assert!(es.wanted());
        assert_eq!(es.take(7, 8), None, "another process (a child after fork)");
        let fd = es.take(7, 7).expect("the reserving process takes it");
        assert_eq!(inode_of(fd), Some(ino("a")));
        assert_eq!(es.take(7, 7), None, "once");
        es.end();
        assert!(!es.wanted(), "not once the commit began");
        // SAFETY: the descriptor is ours since the take.
        unsafe { libc::close(fd) };

        es.set(open("b"));
        assert!(es.wanted(), "a new hand-over");
        let replaced = es.fd.load(Ordering::Acquire);
        es.set(open("c"));
        assert_ne!(inode_of(replaced), Some(ino("b")), "a new hand-over closes the one before");
        let untaken = es.fd.load(Ordering::Acquire);
        assert_eq!(inode_of(untaken), Some(ino("c")));
        es.end();
        assert_ne!(inode_of(untaken), Some(ino("c")), "the commit closes a descriptor nobody took");
        assert_eq!(es.take(7, 7), None);
    }
    use crate::crash::images::ImageEntry;
    use crate::crash::threads::{ThreadSlot, NOT_CAPTURED};
    use std::collections::BTreeMap;

    /// Memory by byte; 8-byte words are stored as their bytes.
    struct Mem(BTreeMap<u64, u8>);
    impl Mem {
        fn words(words: &[(u64, u64)]) -> Mem {
            let mut m = BTreeMap::new();
            for (a, w) in words {
                for (i, b) in w.to_le_bytes().iter().enumerate() {
                    m.insert(a + i as u64, *b);
                }
            }
            Mem(m)
        }
        /// Code bytes ending in a `call rel32` right before `ret`.
        fn call_before(&mut self, ret: u64) {
            for (i, b) in [0x90u8, 0x90, 0x90, 0xE8, 0, 0, 0, 0].iter().enumerate() {
                self.0.insert(ret - 8 + i as u64, *b);
            }
        }
    }
    impl MemoryReader for Mem {
        fn read(&mut self, addr: u64, buf: &mut [u8]) -> bool {
            for (k, c) in buf.iter_mut().enumerate() {
                match self.0.get(&(addr + k as u64)) {
                    Some(b) => *c = *b,
                    None => return false,
                }
            }
            true
        }
    }

    #[test]
    fn names_are_hex_and_nul_terminated() {
        let n = ReportNames::new(&[0xab; 16]);
        let fin = n.final_name();
        let end = fin.iter().position(|b| *b == 0).expect("nul");
        assert_eq!(&fin[..end], format!("{}.crashreport", "ab".repeat(16)).as_bytes());
        let t = n.temp();
        let end = t.iter().position(|b| *b == 0).expect("nul");
        assert_eq!(&t[..end], format!(".{}.tmp", "ab".repeat(16)).as_bytes());
    }

    #[test]
    fn full_report_decodes_intact_with_walked_frames() {
        let slots: &'static [ThreadSlot] = Vec::leak((0..4).map(|_| ThreadSlot::new()).collect());
        let table = ThreadTable::new(slots);
        let mut g = [0u64; 23];
        g[x86_64::greg::RIP] = 0x40_0000;
        g[x86_64::greg::RSP] = 0x7000_0000;
        g[x86_64::greg::RBP] = 0x7000_0010;
        let (_, mut w) = table.add_owned(11).expect("room");
        w.data().regs = x86_64::from_gregs(&g);
        w.data().crashed = true;
        w.data().set_name(b"main");
        w.data().set_queue(b"com.apple.main-thread");
        w.publish(CAPTURED);
        table.add_pending(12);
        assert!(table.expire(1, b"no answer"));
        assert_eq!(table.slot(1).map(|s| s.state()), Some(NOT_CAPTURED));
        table.publish();

        // No unwind tables here: the frame-pointer records are followed, their return addresses after calls.
        let mut mem = Mem::words(&[
            (0x7000_0000, 0),
            (0x7000_0008, 0),
            (0x7000_0010, 0x7000_0020),
            (0x7000_0018, 0x40_1234),
            (0x7000_0020, 0),
            (0x7000_0028, 0x40_5678),
        ]);
        mem.call_before(0x40_1234);
        mem.call_before(0x40_5678);
        let mut images = image_list(4, 256);
        images.push(b"/lib/libunused.so", 0x10_0000, 0x10000, 0, &[0xbb; 20]);
        images.push(b"/bin/app", 0x40_0000, 0x10000, 0, &[0xaa; 20]);
        images.push(b"/lib/libregs.so", 0x50_0000, 0x10000, 0, &[0xcc; 20]);
        // A captured thread that did not crash: only rip, rsp and rbp are kept; rbx, pointing into libregs.so,
        // is dropped and does not make the image used.
        let mut g2 = [0u64; 23];
        g2[x86_64::greg::RIP] = 0x40_0100;
        g2[x86_64::greg::RSP] = 0x7100_0000;
        g2[x86_64::greg::RBP] = 0x7100_0010;
        g2[x86_64::greg::RBX] = 0x50_0040;
        let (_, mut w2) = table.add_owned(13).expect("room");
        w2.data().regs = x86_64::from_gregs(&g2);
        w2.publish(CAPTURED);
        table.publish();
        let mut scratch = vec![0u8; 65536];
        let mut frames = vec![0u64; 512];
        let mut trust = vec![0u8; 512];
        let mut reps = [Repeat::default(); 8];
        let mut rules = Box::new(RuleCache::EMPTY);
        let mut used_images = [u64::MAX; 1];
        let mut bufs = WorkBuffers {
            scratch: &mut scratch,
            frames: &mut frames,
            trust: &mut trust,
            repeats: &mut reps,
            rules: &mut rules,
            used_images: &mut used_images,
        };
        let head = ReportHead {
            meta: Meta { arch: b"x86_64", ..Meta::default() },
            exception: Exception {
                signal: Some(11),
                si_code: Some(1),
                fault_address: Some(0),
                // The throw-site stack: its one address lies in libunused.so, which nothing else points into.
                language: Some(report_format::encode::LanguageException {
                    kind: b"objc",
                    backtrace: &[0x10_0040],
                    ..Default::default()
                }),
                ..Exception::default()
            },
            messages: &[Message { source: b"libswiftCore.dylib", text: b"Fatal error: boom" }],
        };
        let out = write_report(Vec::new(), &head, &table, &images, &mut mem, &WalkOptions::host(), &mut bufs)
            .expect("written");
        let d = report_format::decode(&out).expect("decodes");
        assert!(d.is_intact(), "{:?}", d.problems);
        let r = &d.report;
        let ct = r.crashed_thread().expect("crashed thread");
        assert_eq!(ct.id, Some(11));
        assert_eq!(ct.name.as_deref(), Some("main"));
        assert_eq!(ct.queue.as_deref(), Some("com.apple.main-thread"));
        assert_eq!(r.messages.len(), 1);
        assert_eq!(r.messages[0].text, "Fatal error: boom");
        assert_eq!(ct.frames, vec![0x40_0000, 0x40_1234, 0x40_5678]);
        use report_format::model::FrameTrust;
        assert_eq!(ct.frame_trust, vec![FrameTrust::Context, FrameTrust::FramePointer, FrameTrust::FramePointer]);
        assert_eq!(ct.register("rip"), Some(0x40_0000));
        assert_eq!(ct.registers.len(), 24, "every register of the crashed thread");
        let other = &r.threads[1];
        assert!(!other.captured);
        assert_eq!(other.not_captured_reason.as_deref(), Some("no answer"));
        let third = &r.threads[2];
        let kept: Vec<(&str, u64)> = third.registers.iter().map(|r| (r.name.as_str(), r.value)).collect();
        assert_eq!(kept, vec![("rbp", 0x7100_0010), ("rsp", 0x7100_0000), ("rip", 0x40_0100)]);
        assert_eq!(third.frames[0], 0x40_0100);
        // Used images in full (the app holds every frame, libunused.so the throw-site stack), the others by path
        // only, in list order.
        let imgs: Vec<(u32, &str, bool, u64)> =
            r.images.iter().map(|i| (i.index, i.path.as_deref().unwrap_or(""), i.name_only, i.load_address)).collect();
        assert_eq!(
            imgs,
            vec![
                (0, "/lib/libunused.so", false, 0x10_0000),
                (1, "/bin/app", false, 0x40_0000),
                (2, "/lib/libregs.so", true, 0),
            ]
        );
        let lx = r.exception.as_ref().and_then(|e| e.language.as_ref()).expect("lx");
        assert_eq!((lx.kind.as_str(), lx.backtrace.as_slice()), ("objc", &[0x10_0040u64][..]));
        let kinds: Vec<SectionKind> = d.sections.iter().map(|s| s.kind).collect();
        use report_format::framing::SectionKind;
        assert_eq!(
            kinds,
            vec![
                SectionKind::Meta,
                SectionKind::Exception,
                SectionKind::Messages,
                SectionKind::Thread,
                SectionKind::Thread,
                SectionKind::Thread,
                SectionKind::Images,
                SectionKind::ImageNames,
                SectionKind::End,
            ]
        );
        assert_eq!(r.format_version, (2, 4));
        assert_eq!(r.exception.as_ref().and_then(|e| e.signal), Some(11));
    }

    /// The minimal report follows the same rules: frame 0 relative to its image, that image and those the
    /// registers point into in full, the rest by path.
    #[test]
    fn minimal_report_keeps_used_images_in_full() {
        let mut images = image_list(4, 256);
        images.push(b"/bin/app", 0x40_0000, 0x10000, 0, &[0xaa; 20]);
        images.push(b"/lib/libc.so.6", 0x7f00_0000_0000, 0x10_0000, 0, &[0xbb; 20]);
        images.push(b"/lib/libm.so.6", 0x7f10_0000_0000, 0x10_0000, 0, &[0xcc; 20]);
        let mut g = [0u64; 23];
        g[x86_64::greg::RIP] = 0x40_1234;
        g[x86_64::greg::RDI] = 0x7f00_0000_0100;
        let regs = x86_64::from_gregs(&g);
        let head = ReportHead { meta: Meta::default(), exception: Exception::default(), messages: &[] };
        let mut scratch = vec![0u8; 65536];
        let mut used = [0u64; 1];
        let out = write_minimal_report(Vec::new(), &head, 5, &regs, &images, &mut scratch, &mut used).expect("ok");
        let d = report_format::decode(&out).expect("decodes");
        assert!(d.is_intact(), "{:?}", d.problems);
        assert_eq!(d.report.threads[0].frames, vec![0x40_1234]);
        let only: Vec<bool> = d.report.images.iter().map(|i| i.name_only).collect();
        assert_eq!(only, vec![false, false, true]);
        assert_eq!(d.report.meta.as_ref().and_then(|m| m.image_count), Some(3));
    }

    /// The benchmark's shape: 64 threads parked 32 frames deep, 300 shared libraries, x86_64, through
    /// `write_report` (walking frame-pointer chains) and the real encoder. Format 2.0's target is 24 KiB.
    #[test]
    fn a_64_thread_300_image_report_fits_in_24_kib() {
        const THREADS: usize = 64;
        const DEPTH: u64 = 32;
        const APP: u64 = 0x5555_5555_0000;
        const LIBC: u64 = 0x7f3a_1000_0000;
        let mut images = image_list(512, 64 << 10);
        images.push(b"/opt/bench/bin/crash-bench", APP, 0x20_0000, APP as i64, &[0x11; 20]);
        images.push(b"/usr/lib/x86_64-linux-gnu/libc.so.6", LIBC, 0x16_0000, LIBC as i64, &[0x22; 20]);
        for i in 2..300u64 {
            let path = format!("/tmp/crash-bench/libs/libbench_{i:03}.so");
            let load = 0x7f3b_0000_0000 + i * 0x20_0000;
            assert!(images.push(path.as_bytes(), load, 0x1_0000, load as i64, &[i as u8; 20]));
        }
        let slots: &'static [ThreadSlot] = Vec::leak((0..THREADS).map(|_| ThreadSlot::new()).collect());
        let table = ThreadTable::new(slots);
        let mut mem = Mem(BTreeMap::new());
        for t in 0..THREADS as u64 {
            // Frame 0 in libc (parked in a futex wait), then a frame-pointer chain of return addresses into the
            // app (a recursion of distinct functions), the outermost two in libc (start_thread, clone).
            let stack = 0x7f00_0000_0000 + t * 0x10_0000;
            let mut g = [0u64; 23];
            for (k, v) in g.iter_mut().enumerate() {
                *v = 0x7f3a_2000_0000 + (t << 16) + k as u64 * 0x88;
            }
            g[x86_64::greg::RIP] = LIBC + 0x9_1a2b;
            g[x86_64::greg::RSP] = stack;
            g[x86_64::greg::RBP] = stack + 0x40;
            let mut words: Vec<(u64, u64)> = (0..8).map(|k| (stack + 8 * k, 0)).collect();
            for f in 1..DEPTH {
                let frame = stack + 0x40 * f;
                let next = if f + 1 < DEPTH { frame + 0x40 } else { 0 };
                let ret = if f + 2 >= DEPTH { LIBC + 0x2_9d90 + f * 0x40 } else { APP + 0x1_0000 + f * 0x1c30 + t * 8 };
                words.push((frame, next));
                words.push((frame + 8, ret));
                mem.call_before(ret);
            }
            for (a, w) in words {
                for (i, b) in w.to_le_bytes().iter().enumerate() {
                    mem.0.insert(a + i as u64, *b);
                }
            }
            let (_, mut w) = table.add_owned(1000 + t).expect("room");
            w.data().regs = x86_64::from_gregs(&g);
            w.data().crashed = t == 0;
            w.data().set_name(if t == 0 { &b"main"[..] } else { &b"bench-worker"[..] });
            w.publish(CAPTURED);
        }
        table.publish();
        let mut scratch = vec![0u8; 65536];
        let mut frames = vec![0u64; 512];
        let mut trust = vec![0u8; 512];
        let mut reps = [Repeat::default(); 32];
        let mut rules = Box::new(RuleCache::EMPTY);
        let mut used_images = [0u64; 8];
        let mut bufs = WorkBuffers {
            scratch: &mut scratch,
            frames: &mut frames,
            trust: &mut trust,
            repeats: &mut reps,
            rules: &mut rules,
            used_images: &mut used_images,
        };
        let head = ReportHead {
            meta: Meta {
                arch: b"x86_64",
                hardware_model: b"x86_64",
                handler_version: b"0.1.0",
                os: report_format::encode::Os { name: b"Linux", version: b"6.1.0-18-amd64", build: b"#1 SMP" },
                ..Meta::default()
            },
            exception: Exception { signal: Some(11), si_code: Some(1), fault_address: Some(0), ..Exception::default() },
            messages: &[],
        };
        let out = write_report(Vec::new(), &head, &table, &images, &mut mem, &WalkOptions::host(), &mut bufs)
            .expect("written");
        let d = report_format::decode(&out).expect("decodes");
        assert!(d.is_intact(), "{:?}", d.problems);
        let r = &d.report;
        assert_eq!(r.threads.len(), THREADS);
        assert!(r.threads.iter().all(|t| t.frames.len() == DEPTH as usize), "{:?}", r.threads[1].frames.len());
        assert_eq!(r.threads[5].frames[3], APP + 0x1_0000 + 3 * 0x1c30 + 5 * 8);
        assert_eq!(r.images.len(), 300);
        assert_eq!(r.images.iter().filter(|i| !i.name_only).count(), 2, "the app and libc are used");
        assert_eq!(r.images[299].path.as_deref(), Some("/tmp/crash-bench/libs/libbench_299.so"));
        let payload =
            |k: SectionKind| -> usize { d.sections.iter().filter(|s| s.kind == k).map(|s| 20 + s.len as usize).sum() };
        use report_format::framing::SectionKind;
        println!(
            "64 threads x 32 frames, 300 images: {} bytes (THREAD {}, IMAGES {}, IMAGE NAMES {})",
            out.len(),
            payload(SectionKind::Thread),
            payload(SectionKind::Images),
            payload(SectionKind::ImageNames)
        );
        assert!(out.len() <= 24 * 1024, "{} bytes", out.len());
    }

    /// `commit` renames a file only when its file header, META and EXCEPTION are on disk and intact: every cut of a
    /// real report before the end of EXCEPTION is unlinked, every cut after it is committed, and a flipped byte in
    /// the head is refused; the same for a file reserved at install, whose zeros beyond the report are cut.
    #[test]
    fn commit_requires_the_head_sections() {
        use report_format::framing::{parse_section_header, FILE_HEADER_LEN, SECTION_HEADER_LEN};
        use std::os::unix::ffi::OsStrExt;
        let full = minimal_report(b"some note text");
        let meta = parse_section_header(&full[FILE_HEADER_LEN..]).expect("meta header");
        let exc_at = FILE_HEADER_LEN + SECTION_HEADER_LEN + meta.len as usize;
        let exc = parse_section_header(&full[exc_at..]).expect("exception header");
        let head_end = exc_at + SECTION_HEADER_LEN + exc.len as usize;
        assert!(head_end < full.len());

        let (dir, dir_fd) = open_tempfile_dir("commit");
        let mut damaged = full.clone();
        damaged[FILE_HEADER_LEN + SECTION_HEADER_LEN + 2] ^= 0x40;
        let cases: Vec<(Vec<u8>, bool)> =
            [0, 8, FILE_HEADER_LEN, FILE_HEADER_LEN + 10, exc_at, exc_at + 20, head_end - 1]
                .iter()
                .map(|n| (full[..*n].to_vec(), false))
                .chain([head_end, head_end + 1, full.len()].iter().map(|n| (full[..*n].to_vec(), true)))
                .chain([(damaged, false)])
                .collect();
        for kind in [FileKind::Created, FileKind::Reserved] {
            for (i, (bytes, keep)) in cases.iter().enumerate() {
                let id = [i as u8 + if kind == FileKind::Created { 0 } else { 100 }; 16];
                let (fd, names) = match kind {
                    FileKind::Created => {
                        let names = ReportNames::new(&id);
                        (create_temp(dir_fd, &names).expect("temp"), names)
                    }
                    FileKind::Reserved => {
                        // A reservation as install makes it: 64 KiB of zeros, the offset left at 0.
                        let mut name = [0u8; 64];
                        name[..13].copy_from_slice(format!(".r{i:02}.reserved").as_bytes());
                        let path = dir.join(std::str::from_utf8(&name[..13]).expect("utf8"));
                        std::fs::write(&path, vec![0u8; 65536]).expect("reserve");
                        let c = std::ffi::CString::new(path.as_os_str().as_bytes()).expect("path");
                        // SAFETY: NUL-terminated path.
                        let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
                        assert!(fd >= 0);
                        (fd, ReportNames::with_temp(&id, &name))
                    }
                };
                write_fully(fd, bytes).expect("write");
                let got = commit(dir_fd, fd, &names, kind);
                let fin_len = names.final_name().iter().position(|b| *b == 0).expect("nul");
                let fin = dir.join(std::str::from_utf8(&names.final_name()[..fin_len]).expect("utf8"));
                let ctx = format!("{kind:?} case {i}: {} bytes, head ends at {head_end}", bytes.len());
                assert_eq!(got.is_ok(), *keep, "{ctx}");
                assert_eq!(fin.exists(), *keep, "{ctx}");
                if *keep {
                    // A created file holds the report; a reservation the report, then its zeros (format 2.4 zero
                    // padding, left in place).
                    let mut want = bytes.to_vec();
                    if kind == FileKind::Reserved {
                        want.resize(want.len().max(65536), 0);
                    }
                    assert_eq!(std::fs::read(&fin).expect("read"), want, "{ctx}");
                }
            }
        }
        let left: Vec<_> = std::fs::read_dir(&dir).expect("dir").flatten().map(|e| e.file_name()).collect();
        assert_eq!(left.len(), 6, "only the committed reports remain, no temporary or reserved file: {left:?}");
        // SAFETY: closing our directory descriptor.
        unsafe { libc::close(dir_fd) };
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    /// A head longer than the reader's one-`pread` window (a META of over 3 KiB) is checked as well: whole, it is
    /// committed; cut inside META past the window, or with a byte flipped there, it is refused.
    #[test]
    fn commit_checks_a_head_longer_than_its_read_window() {
        use report_format::framing::{parse_section_header, FILE_HEADER_LEN, SECTION_HEADER_LEN};
        let full = minimal_report(&[b'n'; 3000]);
        let meta = parse_section_header(&full[FILE_HEADER_LEN..]).expect("meta header");
        let meta_end = FILE_HEADER_LEN + SECTION_HEADER_LEN + meta.len as usize;
        assert!(meta_end > 3 * HeadReader::WINDOW, "META reaches past the window: {meta_end}");
        let mut flipped = full.clone();
        flipped[2 * HeadReader::WINDOW] ^= 0x01;
        let (dir, dir_fd) = open_tempfile_dir("commit-long");
        for (i, (bytes, keep)) in
            [(full.clone(), true), (full[..meta_end - 1].to_vec(), false), (flipped, false)].into_iter().enumerate()
        {
            let names = ReportNames::new(&[i as u8 + 1; 16]);
            let fd = create_temp(dir_fd, &names).expect("temp");
            write_fully(fd, &bytes).expect("write");
            assert_eq!(commit(dir_fd, fd, &names, FileKind::Created).is_ok(), keep, "case {i}");
        }
        // SAFETY: closing our directory descriptor.
        unsafe { libc::close(dir_fd) };
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }

    /// A minimal report (META with `note`, EXCEPTION, one thread, one image), encoded in memory.
    fn minimal_report(note: &[u8]) -> Vec<u8> {
        let mut images = image_list(4, 256);
        images.push(b"/bin/app", 0x40_0000, 0x10000, 0, &[0xaa; 20]);
        let head = ReportHead {
            meta: Meta { arch: b"x86_64", note, ..Meta::default() },
            exception: Exception { signal: Some(11), si_code: Some(1), fault_address: Some(0), ..Exception::default() },
            messages: &[],
        };
        let regs = x86_64::from_gregs(&[7u64; 23]);
        let mut scratch = vec![0u8; 65536];
        write_minimal_report(Vec::new(), &head, 5, &regs, &images, &mut scratch, &mut [0u64; 1]).expect("encoded")
    }

    /// A fresh directory (`tempfile_dir`) and a descriptor of it.
    fn open_tempfile_dir(what: &str) -> (std::path::PathBuf, i32) {
        use std::os::unix::ffi::OsStrExt;
        let dir = tempfile_dir(what);
        let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).expect("path");
        // SAFETY: NUL-terminated path.
        let dir_fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
        assert!(dir_fd >= 0);
        (dir, dir_fd)
    }

    fn tempfile_dir(what: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("handler-{what}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("dir");
        dir
    }

    #[test]
    fn fd_sink_writes_through_a_small_buffer() {
        let dir = std::env::temp_dir().join(format!("handler-fdsink-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("out");
        let f = std::fs::File::create(&path).expect("create");
        use std::os::fd::AsRawFd;
        let mut buf = [0u8; 7];
        let mut s = FdSink::new(f.as_raw_fd(), &mut buf);
        s.write_all(b"hello ").expect("w");
        s.write_all(b"world, this is longer than the buffer").expect("w");
        s.write_all(b"!").expect("w");
        s.flush().expect("flush");
        drop(f);
        assert_eq!(std::fs::read(&path).expect("read"), b"hello world, this is longer than the buffer!");
        std::fs::remove_dir_all(&dir).expect("cleanup");
    }
}
