//! The public install API: [`install`], [`uninstall`], [`refresh_images`]. Install time: these may allocate and
//! lock; nothing here runs after a fault.

use crate::config::Config;
use std::fmt;
use std::path::Path;

/// Why install, uninstall or refresh failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InstallError {
    /// [`install`] was called while the handler is installed. Call [`uninstall`] first.
    AlreadyInstalled,
    /// [`uninstall`] or [`refresh_images`] was called while the handler is not installed.
    NotInstalled,
    /// A configuration value is out of range; the text names it.
    InvalidConfig(&'static str),
    /// The report directory could not be created or opened.
    ReportDir(String),
    /// The report directory exists but this process cannot create files in it (read-only file system, no write
    /// permission, a pseudo file system such as `/proc` or `/sys`): every report would be lost. Found at install
    /// by `faccessat(W_OK | X_OK)` and by creating and removing a probe file.
    ReportDirNotWritable {
        /// The directory, as configured.
        path: std::path::PathBuf,
        /// The `errno` of the check that failed (`EACCES`, `EROFS`, `ENOENT` on `/proc`, ...).
        errno: i32,
    },
    /// Preallocating the crash-time buffers failed.
    OutOfMemory,
    /// An OS call failed.
    Os {
        /// What was being done.
        what: &'static str,
        /// The `errno` value.
        errno: i32,
    },
    /// This platform has no backend in this crate yet.
    Unsupported,
}

impl fmt::Display for InstallError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InstallError::AlreadyInstalled => write!(f, "the crash handler is already installed"),
            InstallError::NotInstalled => write!(f, "the crash handler is not installed"),
            InstallError::InvalidConfig(what) => write!(f, "invalid configuration: {what}"),
            InstallError::ReportDir(e) => write!(f, "report directory: {e}"),
            InstallError::ReportDirNotWritable { path, errno } => write!(
                f,
                "report directory {} is not writable: {} (errno {errno}); no crash report could be saved",
                path.display(),
                std::io::Error::from_raw_os_error(*errno)
            ),
            InstallError::OutOfMemory => write!(f, "out of memory while preallocating crash buffers"),
            InstallError::Os { what, errno } => write!(f, "{what} failed (errno {errno})"),
            InstallError::Unsupported => write!(f, "no crash handler backend for this platform"),
        }
    }
}

impl std::error::Error for InstallError {}

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

/// A leaked copy of `b` (install-time text the crash path reads).
#[cfg(unix)]
pub(crate) fn leak_bytes(b: &[u8]) -> &'static [u8] {
    Vec::leak(b.to_vec())
}

/// Creates the report directory (with parents, mode 0700: reports hold memory contents of the app), opens it, and
/// checks that files can be created in it; returns the directory descriptor the crash path writes into (report
/// files are created 0600). Install time.
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
pub(crate) fn open_report_dir(dir: &Path) -> Result<i32, InstallError> {
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
    if let Err(errno) = check_writable(fd) {
        // SAFETY: closing the descriptor opened above.
        unsafe { libc::close(fd) };
        return Err(InstallError::ReportDirNotWritable { path: dir.to_path_buf(), errno });
    }
    Ok(fd)
}

/// Whether files can be created in directory `dir_fd` (see [`open_report_dir`]); `Err(errno)` when not.
#[cfg(unix)]
#[allow(unsafe_code)]
fn check_writable(dir_fd: i32) -> Result<(), i32> {
    let last_errno = || std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
    // SAFETY: "." is a NUL-terminated literal; `dir_fd` is an open directory.
    if unsafe { libc::faccessat(dir_fd, c".".as_ptr(), libc::W_OK | libc::X_OK, libc::AT_EACCESS) } != 0 {
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
fn warm_up() {
    core::hint::black_box(crc32fast::hash(core::hint::black_box(b"crash handler warm-up")));
}

/// Reserves [`crate::crash::writer::SPARE_FDS`] descriptors (`/dev/null`, read-only, close-on-exec; the root
/// directory where `/dev/null` is missing) that the crash path closes when it runs out of descriptors (`EMFILE`), so
/// the report file and `/proc/self/task` can still be opened. Best effort: a process already out of descriptors
/// at install reserves fewer. A second install replaces the spares of the first.
#[cfg(unix)]
#[allow(unsafe_code)]
fn reserve_spare_fds() {
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

/// Installs the crash handler.
///
/// Allocates everything the crash path needs (thread table of `config.max_threads` slots, one frame buffer of
/// `config.max_frames` frames reused for every thread, the image table filled from `dl_iterate_phdr`, a 64 KiB
/// section buffer and a 64 KiB write buffer, an alternate signal stack of `config.alt_stack_size` bytes for the
/// calling thread, a separate crash stack), opens (creating if needed) the report directory, saves the previous
/// signal actions, reserves three spare descriptors (closed at crash time when the process is out of descriptors)
/// and installs handlers for SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP and SIGSYS with
/// `SA_SIGINFO | SA_ONSTACK` (plus `SA_NODEFER`, so a fault inside the handler is caught), and for the reserved stop
/// signal. Never panics.
///
/// A second call while installed returns [`InstallError::AlreadyInstalled`] and changes nothing.
///
/// # Errors
/// [`InstallError::AlreadyInstalled`], [`InstallError::InvalidConfig`], [`InstallError::ReportDir`],
/// [`InstallError::ReportDirNotWritable`], [`InstallError::OutOfMemory`], [`InstallError::Os`], or
/// [`InstallError::Unsupported`] off Linux and Apple platforms.
///
/// On Apple platforms (type-checked only, see `crate::platform::darwin`) it also registers the Mach exception port
/// and starts the two exception threads; the image table is filled by dyld's add-image callback instead of
/// `dl_iterate_phdr`, so `refresh_images` is not needed there.
pub fn install(config: &Config) -> Result<(), InstallError> {
    warm_up();
    #[cfg(target_os = "linux")]
    {
        crate::platform::linux::install(config).inspect(|()| reserve_spare_fds())
    }
    #[cfg(target_vendor = "apple")]
    {
        crate::platform::darwin::install(config).inspect(|()| reserve_spare_fds())
    }
    #[cfg(not(any(target_os = "linux", target_vendor = "apple")))]
    {
        let _ = config;
        Err(InstallError::Unsupported)
    }
}

/// Uninstalls the crash handler: restores the signal actions saved at install (the fatal signals and the stop
/// signal), restores the previous alternate signal stack when called on the thread that installed, and closes the
/// report directory and the spare descriptors. The preallocated buffers are kept (never freed), because another thread may be inside the
/// handler at this moment; a later [`install`] allocates a fresh set.
///
/// # Errors
/// [`InstallError::NotInstalled`] when not installed.
pub fn uninstall() -> Result<(), InstallError> {
    #[cfg(target_os = "linux")]
    {
        crate::platform::linux::uninstall().inspect(|()| while crate::crash::writer::release_spare_fd() {})
    }
    #[cfg(target_vendor = "apple")]
    {
        crate::platform::darwin::uninstall().inspect(|()| while crate::crash::writer::release_spare_fd() {})
    }
    #[cfg(not(any(target_os = "linux", target_vendor = "apple")))]
    {
        Err(InstallError::NotInstalled)
    }
}

/// Re-reads the install-time list of loaded images; returns how many images the table now holds. Takes the loader
/// lock (`dl_iterate_phdr`), so never call it from a signal handler. Optional on Linux: a crash reads the loader's
/// link map, which already holds libraries `dlopen`ed later; the install-time list is its fallback.
///
/// # Errors
/// [`InstallError::NotInstalled`] when not installed.
pub fn refresh_images() -> Result<usize, InstallError> {
    #[cfg(target_os = "linux")]
    {
        crate::platform::linux::refresh_images()
    }
    #[cfg(target_vendor = "apple")]
    {
        crate::platform::darwin::refresh_images()
    }
    #[cfg(not(any(target_os = "linux", target_vendor = "apple")))]
    {
        Err(InstallError::NotInstalled)
    }
}

/// Whether the crash handler is installed.
pub fn is_installed() -> bool {
    #[cfg(target_os = "linux")]
    {
        crate::platform::linux::is_installed()
    }
    #[cfg(target_vendor = "apple")]
    {
        crate::platform::darwin::is_installed()
    }
    #[cfg(not(any(target_os = "linux", target_vendor = "apple")))]
    {
        false
    }
}
