//! [`InstallError`]: why install, uninstall or refresh failed. Install time only.

use std::fmt;

/// Why install, uninstall or refresh failed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum InstallError {
    /// [`install`](crate::install()) was called while the handler is installed. Call [`uninstall`](crate::uninstall()) first.
    AlreadyInstalled,
    /// [`uninstall`](crate::uninstall()) or [`refresh_images`](crate::refresh_images()) was called while the handler is not installed.
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
