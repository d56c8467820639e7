//! The public install API: [`install`], [`uninstall`], [`refresh_images`]. Install time: these may allocate and
//! lock; nothing here runs after a fault. The preparation itself is in `crate::prealloc`, the backends in
//! `crate::platform`.

use crate::config::Config;
use crate::error::InstallError;

/// Installs the crash handler.
///
/// Allocates everything the crash path needs (thread table of `config.max_threads` slots, one frame buffer of
/// `config.max_frames` frames reused for every thread, the image table filled from `dl_iterate_phdr`, a 64 KiB
/// section buffer and a 64 KiB write buffer, an alternate signal stack of `config.alt_stack_size` bytes for the
/// calling thread, a separate crash stack), opens (creating if needed) the report directory, saves the previous
/// signal actions, reserves four spare descriptors (`crash::writer::SPARE_FDS`; closed at crash time when the
/// process is out of descriptors) and installs handlers for SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT, SIGTRAP and
/// SIGSYS with `SA_SIGINFO | SA_ONSTACK` (plus `SA_NODEFER`, so a fault inside the handler is caught), and for the
/// reserved stop signal. Never panics.
///
/// Once per process it also installs the handlers that record why the process is about to die (see
/// `handler/README.md`, "Why it crashed"): a panic hook and, when the process has a C++ runtime, a
/// `std::set_terminate` handler, each chained in front of the previous one (a hook set later replaces ours unless
/// it chains), and on Apple platforms an `NSSetUncaughtExceptionHandler` handler. They stay after [`uninstall`].
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
    crate::prealloc::warm_up();
    crate::language::install();
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        crate::platform::linux::install(config).inspect(|()| crate::prealloc::reserve_spare_fds())
    }
    #[cfg(target_vendor = "apple")]
    {
        crate::platform::darwin::install(config).inspect(|()| crate::prealloc::reserve_spare_fds())
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
    {
        let _ = config;
        Err(InstallError::Unsupported)
    }
}

/// Uninstalls the crash handler: stops the hang watchdog ([`crate::hangs::stop`]), restores the signal actions
/// saved at install (the fatal signals and the stop signal; the capture signal of stacks on demand is set to
/// `SIG_IGN` unless an application handler was there before, so a capture signal still queued cannot kill the
/// process), restores the previous alternate signal stack when called on the thread that installed, and closes
/// the report directory (once no non-fatal report is being written; left open if one does not finish in 10 s)
/// and the spare descriptors. The preallocated buffers are kept (never freed), because another thread may be inside the
/// handler at this moment; a later [`install`] allocates a fresh set.
///
/// # Errors
/// [`InstallError::NotInstalled`] when not installed.
pub fn uninstall() -> Result<(), InstallError> {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        crate::platform::linux::uninstall().inspect(|()| crate::prealloc::release_spare_fds())
    }
    #[cfg(target_vendor = "apple")]
    {
        crate::platform::darwin::uninstall().inspect(|()| crate::prealloc::release_spare_fds())
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
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
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        crate::platform::linux::refresh_images()
    }
    #[cfg(target_vendor = "apple")]
    {
        crate::platform::darwin::refresh_images()
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
    {
        Err(InstallError::NotInstalled)
    }
}

/// Bytes of the zero-filled tables and buffers the handler mapped on its own at install (anonymous `mmap`s outside
/// the allocator, whole pages), since the process started: what a heap count leaves out of the handler's
/// preallocation. The signal and crash stacks are not included (their sizes follow from the [`Config`]). Of these
/// bytes only the pages written so far are resident: the buffers every crash writes are made resident at install,
/// the tables sized for the worst case (the image lists) only as far as they are filled. 0 before the first
/// install; an uninstall keeps them (they are never freed). Any thread, any time; signal-safe (one atomic load).
pub fn preallocated_mapped_bytes() -> usize {
    #[cfg(unix)]
    {
        crate::prealloc::mapped_bytes()
    }
    #[cfg(not(unix))]
    {
        0
    }
}

/// Whether the crash handler is installed.
pub fn is_installed() -> bool {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        crate::platform::linux::is_installed()
    }
    #[cfg(target_vendor = "apple")]
    {
        crate::platform::darwin::is_installed()
    }
    #[cfg(not(any(target_os = "linux", target_os = "android", target_vendor = "apple")))]
    {
        false
    }
}
