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

/// Restores the capture signal's previous action and unpublishes the state (captures under way finish with it: it
/// is never freed).
pub fn uninstall(inst: &Installed) {
    // SAFETY: restoring the action saved at install.
    unsafe { libc::sigaction(inst.signal, &inst.previous, core::ptr::null_mut()) };
    ondemand::STATE.store(core::ptr::null_mut(), Ordering::Release);
}
