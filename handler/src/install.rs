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

/// Creates the report directory (with parents, mode 0700: reports hold memory contents of the app) and opens it;
/// returns the directory descriptor the crash path writes into (report files are created 0600). Install time.
///
/// # Errors
/// [`InstallError::ReportDir`] when it cannot be created or opened, [`InstallError::InvalidConfig`] for a path with
/// a NUL byte.
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
    Ok(fd)
}

/// Installs the crash handler.
///
/// Allocates everything the crash path needs (thread table of `config.max_threads` slots, one frame buffer of
/// `config.max_frames` frames reused for every thread, the image table filled from `dl_iterate_phdr`, a 64 KiB
/// section buffer and a 64 KiB write buffer, an alternate signal stack of `config.alt_stack_size` bytes for the
/// calling thread, a separate crash stack), opens (creating if needed) the report directory, saves the previous
/// signal actions and installs handlers for SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP and SIGSYS with
/// `SA_SIGINFO | SA_ONSTACK` (plus `SA_NODEFER`, so a fault inside the handler is caught), and for the reserved stop
/// signal. Never panics.
///
/// A second call while installed returns [`InstallError::AlreadyInstalled`] and changes nothing.
///
/// # Errors
/// [`InstallError::AlreadyInstalled`], [`InstallError::InvalidConfig`], [`InstallError::ReportDir`],
/// [`InstallError::OutOfMemory`], [`InstallError::Os`], or [`InstallError::Unsupported`] off Linux and Apple
/// platforms.
///
/// On Apple platforms (type-checked only, see `crate::platform::darwin`) it also registers the Mach exception port
/// and starts the two exception threads; the image table is filled by dyld's add-image callback instead of
/// `dl_iterate_phdr`, so `refresh_images` is not needed there.
pub fn install(config: &Config) -> Result<(), InstallError> {
    #[cfg(target_os = "linux")]
    {
        crate::platform::linux::install(config)
    }
    #[cfg(target_vendor = "apple")]
    {
        crate::platform::darwin::install(config)
    }
    #[cfg(not(any(target_os = "linux", target_vendor = "apple")))]
    {
        let _ = config;
        Err(InstallError::Unsupported)
    }
}

/// Uninstalls the crash handler: restores the signal actions saved at install (the fatal signals and the stop
/// signal), restores the previous alternate signal stack when called on the thread that installed, and closes the
/// report directory. The preallocated buffers are kept (never freed), because another thread may be inside the
/// handler at this moment; a later [`install`] allocates a fresh set.
///
/// # Errors
/// [`InstallError::NotInstalled`] when not installed.
pub fn uninstall() -> Result<(), InstallError> {
    #[cfg(target_os = "linux")]
    {
        crate::platform::linux::uninstall()
    }
    #[cfg(target_vendor = "apple")]
    {
        crate::platform::darwin::uninstall()
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
