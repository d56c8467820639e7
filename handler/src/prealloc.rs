//! Install-time preparation of everything the crash path uses: leaked buffers, signal stacks, the report directory,
//! spare descriptors, lazy initialisation done ahead of time. These allocate and may lock; nothing here runs after a
//! fault. Shared by both backends (`crate::platform::linux`, `crate::platform::darwin`).

use crate::error::InstallError;
use std::path::Path;

/// A leaked, preallocated slice of `n` copies of `v` for the crash path (install time; never freed).
///
/// # Errors
/// [`InstallError::OutOfMemory`] when the allocation fails.
#[cfg(unix)]
pub(crate) fn leak_slice<T: Clone>(n: usize, v: T) -> Result<&'static mut [T], InstallError> {
    let mut vec = Vec::new();
    vec.try_reserve_exact(n).map_err(|_| InstallError::OutOfMemory)?;
    vec.resize(n, v);
    Ok(Vec::leak(vec))
}

/// Types whose all-zero bit pattern is a valid value (the element types [`leak_zeroed`] accepts).
///
/// # Safety
/// An implementor must be valid when every byte is zero: integers, arrays and tuples of them, no references,
/// no enums without a zero discriminant.
#[allow(unsafe_code)]
pub(crate) unsafe trait Zeroed: Copy {}
// SAFETY: integers: every bit pattern is valid.
#[allow(unsafe_code)]
unsafe impl Zeroed for u8 {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Zeroed for u32 {}
// SAFETY: as above.
#[allow(unsafe_code)]
unsafe impl Zeroed for u64 {}
// SAFETY: `ImageEntry` holds only integers, an integer array and `UnwindSections` (tuples of `u64`); its
// architecture is a `u8` code (0: none), not a reference. All zero is its `Default` (a test checks).
#[allow(unsafe_code)]
unsafe impl Zeroed for crate::crash::images::ImageEntry {}

/// Blocks of at least this many bytes (and at least a page) that [`leak_zeroed`] and [`leak_resident`] hand out are
/// mapped on their own (`mmap`), smaller ones come from the allocator (`alloc_zeroed`).
const MAP_MIN_BYTES: usize = 16 * 1024;

/// Bytes of the zero-filled blocks mapped on their own so far (their lengths rounded up to whole pages), for
/// [`crate::install::preallocated_mapped_bytes`].
#[cfg(unix)]
static MAPPED_BYTES: core::sync::atomic::AtomicUsize = core::sync::atomic::AtomicUsize::new(0);

/// Bytes of the zero-filled blocks [`leak_zeroed`] and [`leak_resident`] mapped on their own since the process
/// started (whole pages; the stacks of [`map_stack`] not included).
#[cfg(unix)]
pub(crate) fn mapped_bytes() -> usize {
    MAPPED_BYTES.load(core::sync::atomic::Ordering::Relaxed)
}

/// A leaked, preallocated slice of `n` zeros for the crash path (install time; never freed), whose pages become
/// resident only when first written: for tables sized for the worst case, of which a crash uses the first entries
/// (the image lists, `config.max_images` entries for the few hundred images a process has). A first touch is a
/// page fault the kernel serves, not an allocation (the same holds for the `MAP_NORESERVE` signal stacks).
///
/// A block of at least [`MAP_MIN_BYTES`] and a page is its own anonymous mapping (on Linux, transparent huge pages
/// refused with `MADV_NOHUGEPAGE`, so a first write makes one page resident, not 2 MiB), whose pages the kernel zeroes
/// on first touch; a smaller one comes from `alloc_zeroed`. Not `calloc` for the large ones: glibc serves a `calloc`
/// from its heap, and clears it with `memset`, whenever the block is below its mmap threshold, which rises from 128 KiB
/// up to 32 MiB each time the process frees a large block. Any application that has freed one had every table written
/// and resident at install: with 300 libraries loaded, about a fifth of `handler::install` went to that `memset` and
/// its page faults (`perf`, BENCHMARKS.md).
///
/// # Errors
/// [`InstallError::OutOfMemory`] when the allocation or the mapping fails.
#[cfg(unix)]
pub(crate) fn leak_zeroed<T: Zeroed>(n: usize) -> Result<&'static mut [T], InstallError> {
    leak_zeroed_as(n, false)
}

/// [`leak_zeroed`] for buffers every crash writes (the report writer's buffers, the fault-proof reader's cache,
/// the directory listing buffer): every page is made resident now, so the crash takes no page fault in them: one
/// byte of each page is written, and on Linux the kernel populates the mapping first, in the same `mmap` call
/// (`MAP_POPULATE`: one system call instead of a page fault per page).
///
/// # Errors
/// [`InstallError::OutOfMemory`] when the allocation or the mapping fails.
#[cfg(unix)]
pub(crate) fn leak_resident<T: Zeroed>(n: usize) -> Result<&'static mut [T], InstallError> {
    leak_zeroed_as(n, true)
}

/// [`leak_zeroed`] (`resident` false) or [`leak_resident`] (true).
#[cfg(unix)]
#[allow(unsafe_code)]
fn leak_zeroed_as<T: Zeroed>(n: usize, resident: bool) -> Result<&'static mut [T], InstallError> {
    let layout = std::alloc::Layout::array::<T>(n).map_err(|_| InstallError::OutOfMemory)?;
    if layout.size() == 0 {
        return Ok(&mut []);
    }
    let page = page_size();
    // Below a page (64 KiB pages on some arm64 Linux kernels) a mapping of its own would waste most of it.
    if layout.size() < MAP_MIN_BYTES.max(page) || layout.align() > page {
        // SAFETY: `layout` has a non-zero size (checked above).
        let p = unsafe { std::alloc::alloc_zeroed(layout) }.cast::<u8>();
        if p.is_null() {
            return Err(InstallError::OutOfMemory);
        }
        if resident {
            // `calloc` skips its `memset` for memory fresh from the kernel, whose pages are then not resident yet.
            // SAFETY: `p` is a fresh allocation of `layout.size()` bytes, which nothing else refers to.
            unsafe { touch_pages(p, layout.size(), page) };
        }
        // SAFETY: `p` is a fresh, never-freed allocation of `n` properly aligned `T`s, all bytes zero, which
        // `Zeroed` guarantees is a valid `T`; nothing else refers to it.
        return Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<T>(), n) });
    }
    let len = layout.size().checked_next_multiple_of(page).ok_or(InstallError::OutOfMemory)?;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | if resident { libc::MAP_POPULATE } else { 0 };
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let flags = libc::MAP_PRIVATE | libc::MAP_ANON;
    // SAFETY: anonymous private mapping with no address hint; the result is checked.
    let p = unsafe { libc::mmap(core::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
    if p == libc::MAP_FAILED {
        return Err(InstallError::OutOfMemory);
    }
    MAPPED_BYTES.fetch_add(len, core::sync::atomic::Ordering::Relaxed);
    if resident {
        // After `MAP_POPULATE` these writes find every page in memory and cost no fault; they make sure of it where
        // it is not honoured (it is a hint: the mapping succeeds either way; qemu-user drops it).
        // SAFETY: `p` is the fresh writable mapping of `len` bytes made above, which nothing else refers to.
        unsafe { touch_pages(p.cast::<u8>(), len, page) };
    } else {
        // Neighbouring anonymous mappings merge; with transparent huge pages set to `always`, a first write (or the
        // kernel's background collapsing) could then make 2 MiB of a mostly empty table resident at once.
        #[cfg(any(target_os = "linux", target_os = "android"))]
        // SAFETY: advice on the mapping made above; no memory is read or written.
        unsafe {
            libc::madvise(p, len, libc::MADV_NOHUGEPAGE);
        }
    }
    // SAFETY: `p` is a fresh, never-unmapped mapping of `len >= n * size_of::<T>()` bytes, page-aligned (so aligned
    // for `T`: `align <= page` checked above), all zero, which `Zeroed` guarantees is a valid `T`; nothing else
    // refers to it.
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<T>(), n) })
}

/// Writes a zero byte into every page of `[p, p + len)` (and its last byte), so that each is really allocated (a
/// read would map the shared zero page) and resident. Install time.
///
/// # Safety
/// `[p, p + len)` is writable memory of the caller's that holds only zeros and that nothing else refers to.
#[cfg(unix)]
#[allow(unsafe_code)]
unsafe fn touch_pages(p: *mut u8, len: usize, page: usize) {
    for off in (0..len).step_by(page.max(1)).chain(len.checked_sub(1)) {
        // SAFETY: `off < len`, inside the caller's writable zeros; a volatile write of the zero already there.
        unsafe { core::ptr::write_volatile(p.add(off), 0) };
    }
}

/// A leaked copy of `b` (install-time text the crash path reads).
#[cfg(unix)]
pub(crate) fn leak_bytes(b: &[u8]) -> &'static [u8] {
    Vec::leak(b.to_vec())
}

/// Creates the report directory (with parents, mode 0700: reports hold memory contents of the app), opens it, and
/// checks that files can be created in it; reserves the first report's file there when `reserve_bytes` is not 0
/// ([`reserve_report_file`]; a failed reservation only means reports are created after the fault); returns the
/// directory descriptor the crash path writes into (report files are created 0600). Install time.
///
/// The check is `faccessat(".", W_OK | X_OK, AT_EACCESS)` (a clear `EACCES` / `EROFS` for the common cases)
/// followed by a real probe: creating `.install-probe-<pid>.tmp` (`O_CREAT | O_EXCL`) and unlinking it. The probe
/// is needed because `faccessat` answers "writable" where creation still fails: for root (which passes every mode
/// check) on a pseudo file system such as `/sys`, on a read-only bind mount seen through some container runtimes,
/// or under an LSM policy. The probe name starts with a dot, so report readers skip it.
///
/// # Errors
/// [`InstallError::ReportDir`] when it cannot be created or opened (a path that is a file, for instance),
/// [`InstallError::ReportDirNotWritable`] when no file can be created in it, [`InstallError::InvalidConfig`] for a
/// path with a NUL byte.
#[cfg(unix)]
#[allow(unsafe_code)]
pub(crate) fn open_report_dir(dir: &Path, reserve_bytes: usize) -> Result<i32, InstallError> {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| InstallError::ReportDir(e.to_string()))?;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| InstallError::InvalidConfig("report_dir contains a NUL byte"))?;
    // SAFETY: `c` is NUL-terminated and outlives the call.
    let fd = unsafe { libc::open(c.as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(InstallError::ReportDir(std::io::Error::last_os_error().to_string()));
    }
    // A reservation made proves that files can be created; without one, the probe does.
    let reserved = reserve_bytes > 0 && reserve_report_file(dir, fd, reserve_bytes).is_ok();
    if let Err(errno) = if reserved { Ok(()) } else { check_writable(fd) } {
        // SAFETY: closing the descriptor opened above.
        unsafe { libc::close(fd) };
        return Err(InstallError::ReportDirNotWritable { path: dir.to_path_buf(), errno });
    }
    Ok(fd)
}

/// Reserves the first report's file in the report directory `dir` (open as `dir_fd`) at install (see
/// `Config::reserved_report_bytes`) and hands it to the crash path (`crash::writer::set_reserved`), locked with an
/// exclusive `flock` for the life of the process (the reporter leaves a locked reservation alone).
///
/// A later launch takes the reservation an earlier process left ([`claim_spare`]): a process that ends without a
/// crash leaves its reservation in place, unused and unlocked, and the next install claims it instead of writing
/// a new one. That file's blocks and inode were committed to the disk long before (the kernel writes dirty data
/// back within about 30 s: `vm.dirty_expire_centisecs`), so the crash's `fdatasync` writes only the report's own
/// blocks; a file created at this launch also carries its block allocation and inode into that `fdatasync`
/// (measured in BENCHMARKS.md, "first launch" against "later launch"). Claiming costs a directory listing, an
/// `open`, a `flock` and a 64 KiB read; creating costs a 64 KiB write.
///
/// Without a spare: creates `.<pid hex>-<time hex>.reserved` (0600, `O_EXCL`), locks it, writes `bytes` zeros so
/// its blocks get allocated (on Linux and 64-bit Android, writeback is started at once with `sync_file_range`,
/// without waiting). No `fsync`: it would cost launch time, and the file system commits the file within seconds
/// anyway. On Linux and Android a crash has one stopped thread `fdatasync` a second descriptor of the file (either
/// kind) while the owner still works ([`hand_over_early_sync`]), which commits a new file's creation by then.
///
/// # Errors
/// The `errno` of the failing call; a created file is then removed and nothing is reserved.
#[cfg(unix)]
#[allow(unsafe_code)]
pub(crate) fn reserve_report_file(dir: &Path, dir_fd: i32, bytes: usize) -> Result<(), i32> {
    let last_errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
    let pid = std::process::id();
    let Ok(pid) = i32::try_from(pid) else { return Err(libc::EINVAL) };
    if let Some((fd, name)) = claim_spare(dir, dir_fd, bytes) {
        if hand_over(fd, pid, &name) {
            return Ok(());
        }
        // SAFETY: closing the descriptor `claim_spare` opened, which nothing else uses; the file stays a spare.
        unsafe { libc::close(fd) };
    }
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let name = format!(".{pid:x}-{:x}.reserved", nanos & u128::from(u64::MAX));
    let c = std::ffi::CString::new(name.clone()).map_err(|_| libc::EINVAL)?;
    let flags = libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
    // SAFETY: `c` is NUL-terminated and outlives the call.
    let fd = unsafe { libc::openat(dir_fd, c.as_ptr(), flags, 0o600 as libc::c_uint) };
    if fd < 0 {
        return Err(last_errno());
    }
    let fail = |e: i32| {
        // SAFETY: closing and removing the file created just above, which nothing else uses.
        unsafe {
            libc::close(fd);
            libc::unlinkat(dir_fd, c.as_ptr(), 0);
        }
        Err(e)
    };
    // SAFETY: `fd` is open; flock has no memory arguments.
    if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return fail(last_errno());
    }
    let zeros = vec![0u8; bytes.min(1 << 20)];
    let mut at = 0usize;
    while at < bytes {
        let n = zeros.len().min(bytes - at);
        let off = libc::off_t::try_from(at).map_err(|_| libc::EFBIG)?;
        // SAFETY: `zeros` holds at least `n` bytes; `fd` is open for writing.
        let w = unsafe { libc::pwrite(fd, zeros.as_ptr().cast(), n, off) };
        match usize::try_from(w) {
            Ok(w) if w > 0 => at += w,
            _ if last_errno() == libc::EINTR => {}
            _ => return fail(if w == 0 { libc::ENOSPC } else { last_errno() }),
        }
    }
    #[cfg(target_os = "linux")]
    // SAFETY: `fd` is open; no memory arguments. Starts writeback of the zeros (block allocation) without waiting.
    unsafe {
        libc::sync_file_range(fd, 0, 0, libc::SYNC_FILE_RANGE_WRITE);
    }
    // The libc crate declares no `sync_file_range` for Android (bionic has it from API 26): the same system call,
    // raw (64-bit targets; 32-bit ARM has `sync_file_range2` instead). 2 is `SYNC_FILE_RANGE_WRITE`
    // (`<linux/fs.h>`).
    #[cfg(all(target_os = "android", target_pointer_width = "64"))]
    // SAFETY: as above; plain integer arguments.
    unsafe {
        libc::syscall(libc::SYS_sync_file_range, fd, 0i64, 0i64, 2u32);
    }
    if !hand_over(fd, pid, &name) {
        return fail(libc::ENAMETOOLONG);
    }
    Ok(())
}

/// Hands the reservation `fd` (`name`, reserved by `pid`) to the crash path (`crash::writer::set_reserved`), with
/// a descriptor for its early sync on Linux and Android ([`hand_over_early_sync`]); `false` when the name is too
/// long (nothing is handed over then).
#[cfg(unix)]
fn hand_over(fd: i32, pid: i32, name: &str) -> bool {
    if !crate::crash::writer::set_reserved(fd, pid, name.as_bytes()) {
        return false;
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    hand_over_early_sync(fd);
    true
}

/// Hands the crash path a descriptor of its own of the reservation `fd` (claimed or created), for its early sync
/// (`crash::writer::set_early_sync`): one `fcntl(F_DUPFD_CLOEXEC)`. Without a descriptor to spare nothing is handed
/// over, and the crash's own `fdatasync` does all the work, as without it.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[allow(unsafe_code)]
fn hand_over_early_sync(fd: i32) {
    // SAFETY: `fd` is open; F_DUPFD_CLOEXEC has no memory arguments.
    let early = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 0) };
    if early >= 0 {
        crate::crash::writer::set_early_sync(early);
    }
}

/// Finds and claims a spare reservation in `dir` (open as `dir_fd`): a `.*.reserved` file (name under 64 bytes)
/// that no live process holds (its `flock` is free), a regular file of exactly `bytes` bytes, owned by this
/// process's effective user, with one link, still in the directory under that name after the lock was taken (the
/// reporter may have removed it between our `open` and our `flock`), and all zeros (never written by a crash).
/// Returns its descriptor (locked, offset 0) and name. Install time; `None` when there is none.
///
/// Races: two processes claiming the same file are ordered by the lock (the loser moves on); the reporter takes
/// the same lock before it deletes or keeps a reservation (`reporter::Store::sweep_reserved`).
#[cfg(unix)]
#[allow(unsafe_code)]
fn claim_spare(dir: &Path, dir_fd: i32, bytes: usize) -> Option<(i32, String)> {
    let entries = std::fs::read_dir(dir).ok()?;
    // The zero check reads in chunks of at most 64 KiB (the default reservation in one read).
    let mut buf = vec![0u8; bytes.clamp(1, 64 * 1024)];
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let reservation = name.starts_with('.') && name.as_bytes().ends_with(crate::crash::writer::RESERVED_SUFFIX);
        if !reservation || name.len() >= 64 {
            continue;
        }
        let Ok(c) = std::ffi::CString::new(name) else { continue };
        let flags = libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW;
        // SAFETY: `c` is NUL-terminated and outlives the call.
        let fd = unsafe { libc::openat(dir_fd, c.as_ptr(), flags) };
        if fd < 0 {
            continue;
        }
        if spare_is_claimable(dir_fd, fd, &c, bytes, &mut buf) {
            return Some((fd, name.to_owned()));
        }
        // SAFETY: closing the descriptor opened above (its lock, if taken, goes with it).
        unsafe { libc::close(fd) };
    }
    None
}

/// [`claim_spare`]'s checks on one open candidate `fd` named `name` in `dir_fd`, of `bytes` bytes wanted; `buf`
/// (not empty) is scratch space for the zero check.
#[cfg(unix)]
#[allow(unsafe_code)]
fn spare_is_claimable(dir_fd: i32, fd: i32, name: &std::ffi::CStr, bytes: usize, buf: &mut [u8]) -> bool {
    // SAFETY: `fd` is open; flock has no memory arguments.
    if unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        return false;
    }
    // SAFETY: all-zero bytes are a valid `stat` (plain integers).
    let (mut open, mut named): (libc::stat, libc::stat) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
    // SAFETY: `fd` is open, `name` is NUL-terminated, and both `stat` buffers are writable and live.
    let stated = unsafe {
        libc::fstat(fd, &mut open) == 0
            && libc::fstatat(dir_fd, name.as_ptr(), &mut named, libc::AT_SYMLINK_NOFOLLOW) == 0
    };
    // SAFETY: `geteuid` has no arguments and cannot fail.
    let euid = unsafe { libc::geteuid() };
    let fits = stated
        && (open.st_mode & libc::S_IFMT) == libc::S_IFREG
        && usize::try_from(open.st_size).is_ok_and(|n| n == bytes)
        && open.st_nlink == 1
        && open.st_uid == euid
        && (open.st_dev, open.st_ino) == (named.st_dev, named.st_ino);
    if !fits {
        return false;
    }
    // All zeros, read a chunk at a time; the first non-zero byte ends the check.
    let mut at = 0usize;
    while at < bytes {
        let Ok(off) = libc::off_t::try_from(at) else { return false };
        let want = buf.len().min(bytes - at);
        // SAFETY: `buf` is writable for `want <= buf.len()` bytes; `fd` is open for reading.
        let r = unsafe { libc::pread(fd, buf.as_mut_ptr().cast(), want, off) };
        match usize::try_from(r) {
            Ok(r) if r > 0 => {
                if buf.get(..r).is_none_or(|got| got.iter().any(|b| *b != 0)) {
                    return false;
                }
                at += r;
            }
            _ if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) => {}
            _ => return false,
        }
    }
    true
}

/// Whether files can be created in directory `dir_fd` (see [`open_report_dir`]); `Err(errno)` when not.
#[cfg(unix)]
#[allow(unsafe_code)]
fn check_writable(dir_fd: i32) -> Result<(), i32> {
    let last_errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
    // bionic's `faccessat` refuses every flag (`EINVAL`; bionic `libc/bionic/faccessat.cpp`: Android runs no
    // set-user-ID code, so the real and effective ids are the same and `AT_EACCESS` would change nothing).
    #[cfg(target_os = "android")]
    let flags = 0;
    #[cfg(not(target_os = "android"))]
    let flags = libc::AT_EACCESS;
    // SAFETY: "." is a NUL-terminated literal; `dir_fd` is an open directory.
    if unsafe { libc::faccessat(dir_fd, c".".as_ptr(), libc::W_OK | libc::X_OK, flags) } != 0 {
        return Err(last_errno());
    }
    let name =
        std::ffi::CString::new(format!(".install-probe-{}.tmp", std::process::id())).map_err(|_| libc::EINVAL)?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC;
    // Two attempts: a probe left by an earlier process with the same pid (killed between create and unlink) is
    // removed once.
    for _ in 0..2 {
        // SAFETY: `name` is NUL-terminated and outlives the call.
        let fd = unsafe { libc::openat(dir_fd, name.as_ptr(), flags, 0o600 as libc::c_uint) };
        if fd >= 0 {
            // SAFETY: closing and unlinking the probe file created just above.
            unsafe {
                libc::close(fd);
                libc::unlinkat(dir_fd, name.as_ptr(), 0);
            }
            return Ok(());
        }
        let e = last_errno();
        if e != libc::EEXIST {
            return Err(e);
        }
        // SAFETY: as above; removing the stale probe.
        unsafe { libc::unlinkat(dir_fd, name.as_ptr(), 0) };
    }
    Err(libc::EEXIST)
}

/// Runs, at install, the one-time lazy initialisation the crash path would otherwise trigger after a fault.
///
/// `crc32fast` (every report section carries its CRC-32) picks its implementation on each `hash` by CPU feature
/// detection through std's `is_x86_feature_detected!` / `is_aarch64_feature_detected!`, whose first use fills a
/// process-wide cache: about 100 µs on x86-64 (`cpuid`), and on arm64 a `getauxval` call, which on musl can take
/// the dynamic loader's lock, or a read of `/proc/self/auxv` where `getauxval` is missing (which allocates). Hashing
/// once here fills that cache, so the writer's first checksum after a fault is plain arithmetic.
///
/// It also reads the read-only data the crash path would otherwise read first after the fault (a page fault each,
/// counted with `perf`): `crc32fast`'s table for short inputs (4 to 15 bytes) and the report file header's bytes.
pub(crate) fn warm_up() {
    core::hint::black_box(crc32fast::hash(core::hint::black_box(b"crash handler warm-up")));
    core::hint::black_box(crc32fast::hash(core::hint::black_box(b"warm-up")));
    core::hint::black_box(report_format::framing::file_header());
}

/// Reserves [`crate::crash::writer::SPARE_FDS`] descriptors (`/dev/null`, read-only, close-on-exec; the root
/// directory where `/dev/null` is missing) that the crash path closes when it runs out of descriptors (`EMFILE`), so
/// the report file and `/proc/self/task` can still be opened. Best effort: a process already out of descriptors
/// at install reserves fewer. A second install replaces the spares of the first.
#[cfg(unix)]
#[allow(unsafe_code)]
pub(crate) fn reserve_spare_fds() {
    for i in 0..crate::crash::writer::SPARE_FDS {
        // SAFETY: NUL-terminated literal paths; the results are checked.
        let fd = unsafe {
            match libc::open(c"/dev/null".as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) {
                fd if fd >= 0 => fd,
                _ => libc::open(c"/".as_ptr(), libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC),
            }
        };
        if fd < 0 {
            return;
        }
        crate::crash::writer::set_spare_fd(i, fd);
    }
}

/// Closes the spare descriptors [`reserve_spare_fds`] reserved (uninstall).
#[cfg(unix)]
pub(crate) fn release_spare_fds() {
    while crate::crash::writer::release_spare_fd() {}
}

/// The page size (`sysconf(_SC_PAGESIZE)`: 4 KiB on x86-64, 4, 16 or 64 KiB on arm64 Linux, 16 KiB on Apple
/// arm64), at least 4096.
#[cfg(unix)]
#[allow(unsafe_code)]
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(page).unwrap_or(4096).max(4096)
}

/// Maps a stack of at least `size` bytes (rounded up to whole pages) with one inaccessible guard page below it, for
/// an alternate signal stack or the crash stack (at install, and on Linux at every thread start in the
/// `pthread_create` wrapper); returns `(base, size)`: the lowest usable address and the usable length in bytes (the
/// top is `base + size`; the mapping starts one [`page_size`] below `base`). Anonymous and private; on Linux also
/// `MAP_NORESERVE` (untouched pages cost no memory) and `MAP_STACK`.
///
/// # Errors
/// [`InstallError::Os`] when `mmap` or `mprotect` fails, [`InstallError::InvalidConfig`] when the size overflows.
#[cfg(unix)]
#[allow(unsafe_code)]
pub(crate) fn map_stack(size: usize) -> Result<(usize, usize), InstallError> {
    let page = page_size();
    let size = size
        .checked_next_multiple_of(page)
        .filter(|s| s.checked_add(page).is_some())
        .ok_or(InstallError::InvalidConfig("stack size overflows"))?;
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | libc::MAP_STACK;
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let flags = libc::MAP_PRIVATE | libc::MAP_ANON;
    let os_err = |what| InstallError::Os { what, errno: std::io::Error::last_os_error().raw_os_error().unwrap_or(0) };
    // SAFETY: anonymous private mapping with no address hint; the result is checked.
    let p = unsafe { libc::mmap(core::ptr::null_mut(), size + page, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
    if p == libc::MAP_FAILED {
        return Err(os_err("mmap of a signal stack"));
    }
    // SAFETY: the first page of our own fresh mapping becomes the guard page.
    if unsafe { libc::mprotect(p, page, libc::PROT_NONE) } != 0 {
        let e = os_err("mprotect of a signal stack's guard page");
        // SAFETY: unmapping the mapping made above, which nothing else refers to yet.
        unsafe { libc::munmap(p, size + page) };
        return Err(e);
    }
    Ok((p as usize + page, size))
}

/// Writes one zero byte into each of the top pages of the stack `[base, base + size)` that hold `bytes` (rounded
/// up to whole pages; all of it when `bytes >= size`), so that they are in memory before a signal frame or the
/// crash owner needs them (see `Config::alt_stack_prefault_bytes`, `Config::crash_stack_prefault_bytes`). For a
/// stack [`map_stack`] just mapped, which nothing uses yet.
///
/// # Safety
/// `[base, base + size)` is a writable mapping of the caller's that holds nothing yet (no live frame, no data).
#[cfg(any(target_os = "linux", target_os = "android"))]
#[allow(unsafe_code)]
pub(crate) unsafe fn prefault_top(base: usize, size: usize, bytes: usize) {
    let page = page_size();
    let len = bytes.min(size).div_ceil(page).saturating_mul(page).min(size);
    let Some(from) = base.checked_add(size).and_then(|top| top.checked_sub(len)) else { return };
    // SAFETY: `[from, from + len)` is the top of `[base, base + size)` (`len <= size`), which the caller owns
    // writable, freshly mapped (all zeros) and unused.
    unsafe { touch_pages(from as *mut u8, len, page) };
}

/// Whether the page holding `addr` is in memory (`mincore(2)`); `None` when it is not mapped. Tests only.
#[cfg(all(test, any(target_os = "linux", target_os = "android")))]
#[allow(unsafe_code)]
pub(crate) fn resident(addr: usize) -> Option<bool> {
    let page = page_size();
    let mut vec = 0u8;
    // SAFETY: one page at a page-aligned address; `vec` receives one byte.
    let r = unsafe { libc::mincore((addr & !(page - 1)) as *mut libc::c_void, page, &mut vec) };
    (r == 0).then_some(vec & 1 == 1)
}

/// Bytes of the writer's section scratch buffer (one section's payload; 64 KiB is ample for a thread of
/// `Config::max_frames` frames with its registers).
pub(crate) const SCRATCH_BYTES: usize = 64 * 1024;
/// Bytes of the file sink's write buffer.
pub(crate) const WRITE_BUF_BYTES: usize = 64 * 1024;
/// Repeat records per thread (recursion compressed by the walker).
pub(crate) const REPEATS: usize = 32;

/// The thread table: `config.max_threads` slots.
///
/// # Errors
/// [`InstallError::OutOfMemory`].
pub(crate) fn thread_table(config: &crate::config::Config) -> Result<crate::crash::threads::ThreadTable, InstallError> {
    use crate::crash::threads::{ThreadSlot, ThreadTable};
    let mut v = Vec::new();
    v.try_reserve_exact(config.max_threads).map_err(|_| InstallError::OutOfMemory)?;
    v.extend((0..config.max_threads).map(|_| ThreadSlot::new()));
    Ok(ThreadTable::new(Vec::leak(v)))
}

/// An empty image list of `config.max_images` entries (and as many 4-byte address-order indices) and
/// `config.image_path_bytes` bytes of paths.
///
/// # Errors
/// [`InstallError::OutOfMemory`].
pub(crate) fn image_list(config: &crate::config::Config) -> Result<crate::crash::images::ImageList, InstallError> {
    use crate::crash::images::{ImageEntry, ImageList};
    Ok(ImageList::from_parts(
        leak_zeroed::<ImageEntry>(config.max_images)?,
        leak_zeroed::<u8>(config.image_path_bytes)?,
        leak_zeroed::<u32>(config.max_images)?,
    ))
}

/// The report writer's buffers: [`SCRATCH_BYTES`] + [`WRITE_BUF_BYTES`] bytes, `config.max_frames` frames and
/// trust bytes, [`REPEATS`] repeat records, one [`crate::unwind::RuleCache`] (62 KiB), and a bitset of
/// `config.max_images` bits (the images a frame or a crashed-thread register points into). The static storage the
/// crash reads first is read now (`crash::user_table::map_in`, `crash::reason::map_in`), so a crash takes no page
/// fault there.
///
/// # Errors
/// [`InstallError::OutOfMemory`].
pub(crate) fn writer_buffers(config: &crate::config::Config) -> Result<crate::crash::capture::Buffers, InstallError> {
    use crate::crash::raw_buf::RawBuf;
    core::hint::black_box(crate::crash::user_table::map_in());
    core::hint::black_box(crate::crash::reason::map_in());
    Ok(crate::crash::capture::Buffers {
        scratch: RawBuf::new(leak_resident::<u8>(SCRATCH_BYTES)?),
        write_buf: RawBuf::new(leak_resident::<u8>(WRITE_BUF_BYTES)?),
        frames: RawBuf::new(leak_resident::<u64>(config.max_frames)?),
        trust: RawBuf::new(leak_resident::<u8>(config.max_frames)?),
        repeats: RawBuf::new(leak_slice(REPEATS, crate::unwind::Repeat::default())?),
        rules: RawBuf::new(leak_slice(1, crate::unwind::RuleCache::EMPTY)?),
        used_images: RawBuf::new(leak_resident::<u64>(config.max_images.div_ceil(64).max(1))?),
    })
}

/// The walkers of stacks on demand ([`crate::ondemand::pool`]): `config.capture_walkers` of them, about 100 KiB
/// each, each with a walk stack (`map_stack`, `WALK_STACK_BYTES`) and a non-blocking pipe of its own where
/// `process_vm_readv` cannot read this process (Linux under
/// qemu-user; see `crate::platform::linux::crash::memory`).
///
/// # Errors
/// [`InstallError::OutOfMemory`].
#[cfg(unix)]
#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(unused_variables))]
#[allow(unsafe_code)]
pub(crate) fn capture_pool(config: &crate::config::Config) -> Result<crate::ondemand::pool::Pool, InstallError> {
    use crate::ondemand::pool::{Entry, Pool};
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let pipes = !crate::platform::linux::crash::memory::process_vm_readv_works();
    let mut v: Vec<Entry> = Vec::new();
    v.try_reserve_exact(config.capture_walkers).map_err(|_| InstallError::OutOfMemory)?;
    for _ in 0..config.capture_walkers {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        let pipe = if pipes { crate::platform::linux::crash::sys::pipe_nonblocking() } else { None };
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let pipe = None;
        let (base, size) = map_stack(crate::ondemand::pool::WALK_STACK_BYTES)?;
        // (Each walker may pass through the installing thread's stack on the way, about 100 KiB.)
        v.push(Entry::new(pipe, (base + size) & !15));
    }
    Ok(Pool::new(Vec::leak(v)))
}

#[cfg(all(test, unix))]
#[allow(unsafe_code)]
mod tests {
    use super::claim_spare;
    use std::fs;
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::io::AsRawFd;

    /// A large zeroed table stays out of memory until written, even after the process freed a large block (which
    /// raises glibc's mmap threshold, after which `calloc` serves such a table from the heap and clears it with
    /// `memset`); a resident buffer is in memory at once, every page of it; both read as zeros.
    #[test]
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn large_tables_stay_out_of_memory_until_written_and_resident_buffers_are_in_memory_at_once() {
        use super::{leak_resident, leak_zeroed, mapped_bytes, page_size, resident};
        let page = page_size();
        // 4 MiB: mapped by glibc (over its 128 KiB threshold) and freed, so the threshold rises to 4 MiB.
        drop(std::hint::black_box(vec![1u8; 4 << 20]));
        let before = mapped_bytes();
        let table = leak_zeroed::<u64>(32 * 1024).expect("table");
        assert!(mapped_bytes() >= before + 256 * 1024, "the table is not counted as mapped");
        let base = table.as_ptr() as usize;
        assert_eq!(base % page, 0, "a mapped table starts on a page");
        for off in (0..table.len() * 8).step_by(page) {
            assert_eq!(resident(base + off), Some(false), "page at +{off} of the table is resident before any write");
        }
        table[1000] = 7;
        assert_eq!(resident(base + 8000), Some(true), "the written page is not resident");
        assert_eq!(resident(base + 8000 + 2 * page), Some(false), "a page beyond the write became resident");
        let buf = leak_resident::<u8>(64 * 1024).expect("buffer");
        let base = buf.as_ptr() as usize;
        for off in (0..buf.len()).step_by(page) {
            assert_eq!(resident(base + off), Some(true), "page at +{off} of the resident buffer is not in memory");
        }
        assert!(buf.iter().all(|b| *b == 0) && table.iter().filter(|w| **w != 0).count() == 1);
        // A block too small to be mapped comes from the allocator, at any offset in its pages: `touch_pages` makes
        // every page it overlaps resident, the first and the last included, and no other.
        let lazy = leak_zeroed::<u8>(8 * page).expect("pages");
        let base = lazy.as_ptr() as usize;
        // SAFETY: a range inside `lazy`, which is writable, all zeros and used by nothing else.
        unsafe { super::touch_pages((base + 2 * page - 10) as *mut u8, page + 20, page) };
        let pages: Vec<bool> = (0..8).map(|i| resident(base + i * page) == Some(true)).collect();
        assert_eq!(pages, [false, true, true, true, false, false, false, false], "pages made resident");
        // Small blocks come from the allocator and are zeros too.
        assert!(leak_zeroed::<u8>(100).expect("small").iter().all(|b| *b == 0));
    }

    /// After the writer's buffers are made, every page of the static storage the crash reads first (the user
    /// table's slots, the exception and panic records, the app reason) is mapped: a crash takes no page fault on
    /// them. The check runs in a process of its own (this test binary, running only this test), because other tests
    /// of this process touch the same statics; under an emulator (no `process_vm_readv`, the test binary cannot be
    /// started again directly) it runs here, where it can pass without `map_in`.
    #[test]
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn the_static_storage_a_crash_reads_first_is_mapped_once_the_buffers_are_made() {
        use crate::crash::{reason, user_table};
        const ALONE: &str = "HANDLER_TEST_STATICS_ALONE";
        const NAME: &str =
            "prealloc::tests::the_static_storage_a_crash_reads_first_is_mapped_once_the_buffers_are_made";
        if std::env::var_os(ALONE).is_none() && crate::platform::linux::crash::memory::process_vm_readv_works() {
            let exe = std::env::current_exe().expect("test binary");
            let out = std::process::Command::new(exe)
                .args(["--exact", NAME, "--test-threads=1"])
                .env(ALONE, "1")
                .output()
                .expect("run the test binary");
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(out.status.success(), "{stdout}\n{}", String::from_utf8_lossy(&out.stderr));
            assert!(stdout.contains("1 passed"), "the check ran: {stdout}");
            return;
        }
        super::writer_buffers(&crate::config::Config::new("/nonexistent")).expect("buffers");
        let statics = user_table::TABLE
            .iter()
            .map(|s| core::ptr::from_ref(s) as usize)
            .chain(
                [&reason::OBJC, &reason::CXX]
                    .into_iter()
                    .chain(reason::PANICS.iter())
                    .map(|r| core::ptr::from_ref(r) as usize),
            )
            .chain([core::ptr::from_ref(&reason::APP_REASON) as usize]);
        for at in statics {
            assert_eq!(super::resident(at), Some(true), "{at:#x}");
        }
    }

    /// What an install finds in a report directory: a spare is claimed only when it is unlocked, of the configured
    /// size, all zeros and still linked; the claim holds its lock, so a second install cannot take it too.
    #[test]
    fn an_unused_unlocked_all_zero_reservation_of_the_right_size_is_claimed_once() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = |n: &str| dir.path().join(n);
        let d = fs::File::open(dir.path()).expect("open dir");
        let claim = || claim_spare(dir.path(), d.as_raw_fd(), 4096);

        fs::write(p(".1-a.reserved"), [0u8; 4095]).expect("write");
        let mut used = vec![0u8; 4096];
        used[4000] = 1;
        fs::write(p(".2-b.reserved"), &used).expect("write");
        fs::write(p("3-c.crashreport"), [0u8; 4096]).expect("write");
        fs::write(p(".4-d.reserved"), [0u8; 4096]).expect("write");
        let held = fs::File::open(p(".4-d.reserved")).expect("open");
        // SAFETY: `held` is open; flock has no memory arguments.
        assert_eq!(unsafe { libc::flock(held.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) }, 0);
        assert_eq!(claim(), None, "wrong size, written into, not a reservation, locked by a live process");

        fs::write(p(".5-e.reserved"), [0u8; 4096]).expect("write");
        let (fd, name) = claim().expect("the spare is claimed");
        assert_eq!(name, ".5-e.reserved");
        // SAFETY: all-zero bytes are a valid `stat` (plain integers).
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: `fd` is open and `st` is writable and live.
        assert_eq!(unsafe { libc::fstat(fd, &mut st) }, 0);
        assert_eq!(st.st_ino, fs::metadata(p(".5-e.reserved")).expect("stat").ino(), "that file, not a copy");
        assert_eq!(claim(), None, "the claim holds the lock: nobody else takes it");
        // SAFETY: the claimed descriptor is ours.
        unsafe { libc::close(fd) };

        drop(held);
        fs::remove_file(p(".5-e.reserved")).expect("rm");
        let (fd, name) = claim().expect("a spare whose process is gone");
        assert_eq!(name, ".4-d.reserved");
        // SAFETY: the claimed descriptor is ours.
        unsafe { libc::close(fd) };
    }

    /// A spare removed between our `open` and our `flock` (the reporter deleting it under its own lock) is not
    /// claimed: the crash would write into a file no longer in the directory.
    #[test]
    fn an_unlinked_reservation_is_not_claimed() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = fs::File::open(dir.path()).expect("open dir");
        fs::write(dir.path().join(".1-a.reserved"), [0u8; 4096]).expect("write");
        let f = fs::File::options().read(true).write(true).open(dir.path().join(".1-a.reserved")).expect("open");
        fs::remove_file(dir.path().join(".1-a.reserved")).expect("rm");
        fs::write(dir.path().join(".1-a.reserved"), [0u8; 4096]).expect("a new file under the same name");
        let c = std::ffi::CString::new(".1-a.reserved").expect("name");
        let mut buf = vec![0u8; 1000];
        assert!(!super::spare_is_claimable(d.as_raw_fd(), f.as_raw_fd(), &c, 4096, &mut buf), "another inode by now");
        let (fd, _) = claim_spare(dir.path(), d.as_raw_fd(), 4096).expect("the new file itself is claimable");
        // SAFETY: the claimed descriptor is ours.
        unsafe { libc::close(fd) };
    }

    /// The zero check reads in chunks: a byte written in a later chunk than the first is found too.
    #[test]
    fn the_zero_check_reads_every_chunk() {
        let dir = tempfile::tempdir().expect("tempdir");
        let d = fs::File::open(dir.path()).expect("open dir");
        let c = std::ffi::CString::new(".1-a.reserved").expect("name");
        let mut bytes = vec![0u8; 4096];
        let check = |bytes: &[u8]| {
            fs::write(dir.path().join(".1-a.reserved"), bytes).expect("write");
            let f = fs::File::options().read(true).write(true).open(dir.path().join(".1-a.reserved")).expect("open");
            super::spare_is_claimable(d.as_raw_fd(), f.as_raw_fd(), &c, 4096, &mut [0u8; 1000])
        };
        assert!(check(&bytes), "all zeros, read in five chunks");
        bytes[4095] = 1;
        assert!(!check(&bytes), "the last byte of the last chunk");
    }
}
