//! Install time of stacks on demand on Linux (`crate::ondemand`): the walkers, the state, and the handler of the
//! capture signal (`crate::ondemand::linux::capture_handler`). These allocate and call `sigaction`; nothing here
//! runs in a signal handler.
#![allow(unsafe_code)]

use crate::config::Config;
use crate::crash::images::ImageTable;
use crate::error::InstallError;
use crate::ondemand::{self, State};
use core::sync::atomic::Ordering;

/// What [`install`] replaced, for [`uninstall`].
pub struct Installed {
    signal: i32,
    previous: libc::sigaction,
}

// SAFETY: `previous` holds plain values (a handler address, a mask) handed back to `sigaction` only.
unsafe impl Send for Installed {}

/// The capture signal `config` asks for (`SIGRTMAX() - 5` by default).
///
/// # Errors
/// [`InstallError::InvalidConfig`] when it is not a real-time signal or is the stop signal.
pub fn capture_signal(config: &Config, stop_signal: i32) -> Result<i32, InstallError> {
    let sig = config.capture_signal.unwrap_or_else(|| libc::SIGRTMAX() - 5);
    if sig < libc::SIGRTMIN() || sig > libc::SIGRTMAX() {
        return Err(InstallError::InvalidConfig("capture_signal is not a real-time signal"));
    }
    if sig == stop_signal {
        return Err(InstallError::InvalidConfig("capture_signal is the stop signal"));
    }
    Ok(sig)
}

/// Allocates the walkers, publishes the state and installs the capture signal's handler
/// (`SA_SIGINFO | SA_ONSTACK | SA_RESTART`, every signal but the fatal ones blocked while it runs).
///
/// # Errors
/// [`InstallError::OutOfMemory`].
pub fn install(
    config: &Config,
    crash_core: &'static crate::crash::capture::Core,
    images: &'static ImageTable,
    signal: i32,
) -> Result<Installed, InstallError> {
    let state: &'static State = Box::leak(Box::new(State {
        pool: crate::prealloc::capture_pool(config)?,
        images,
        opts: crate::unwind::WalkOptions::host(),
        pid: crate::platform::linux::crash::sys::getpid(),
        dir_fd: crash_core.dir_fd,
        text: &crash_core.text,
        signal,
    }));
    ondemand::STATE.store(core::ptr::from_ref(state).cast_mut(), Ordering::Release);
    // SAFETY: plain `sigaction` with valid in/out pointers; the handler has the SA_SIGINFO signature.
    let previous = unsafe {
        let mut act: libc::sigaction = core::mem::zeroed();
        act.sa_sigaction = ondemand::linux::capture_handler as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
        act.sa_mask = crate::platform::linux::crash::handler_mask();
        let mut old: libc::sigaction = core::mem::zeroed();
        libc::sigaction(signal, &act, &mut old);
        old
    };
    Ok(Installed { signal, previous })
}

/// Unpublishes the state (captures under way finish with it: it is never freed) and takes the capture signal's
/// handler away. Capture signals may still be queued for threads that block it, or in flight: the signal's
/// previous action is restored only when it was a handler of the application's (which then gets them); when it
/// was the default action (for a real-time signal: terminate the process) or `SIG_IGN`, the signal is set to
/// `SIG_IGN` instead, which also discards the copies still queued (POSIX `sigaction`: setting `SIG_IGN` for a
/// pending signal discards it).
pub fn uninstall(inst: &Installed) {
    ondemand::STATE.store(core::ptr::null_mut(), Ordering::Release);
    let previous = inst.previous.sa_sigaction;
    // SAFETY: plain `sigaction` with valid pointers: the action saved at install, or SIG_IGN with an empty mask.
    unsafe {
        if previous == libc::SIG_DFL || previous == libc::SIG_IGN {
            let mut ignore: libc::sigaction = core::mem::zeroed();
            ignore.sa_sigaction = libc::SIG_IGN;
            libc::sigaction(inst.signal, &ignore, core::ptr::null_mut());
        } else {
            libc::sigaction(inst.signal, &inst.previous, core::ptr::null_mut());
        }
    }
}
