//! The fatal signals both backends catch, the actions they replaced at install, and the rules for leaving the
//! handler: when a signal must be sent again, and when `si_addr` means something.
//!
//! Crash path (install only fills [`SavedActions`]): `sigaction` and `sigemptyset` are async-signal-safe
//! (POSIX.1-2017 §2.4.3); nothing here allocates, locks or panics.
#![allow(unsafe_code)]

/// The fatal signals the handler catches: those whose default action is to terminate with a core dump
/// (`signal(7)`; Apple: `<sys/signal.h>`), numbered by the target's `libc`.
pub const FATAL_SIGNALS: [i32; 7] =
    [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGABRT, libc::SIGTRAP, libc::SIGSYS];

/// The actions of [`FATAL_SIGNALS`] found at install, in that order. Read at install, before our handlers are
/// set, and never written again: the crash path only reads them (to restore them, or to call a previous handler).
///
/// A handler another thread sets between that read and our `sigaction` is not seen: such a race inside the app
/// has no right answer, and reading first keeps the saved actions immutable once a handler can see them.
#[derive(Clone, Copy)]
pub struct SavedActions {
    actions: [libc::sigaction; 7],
}

impl core::fmt::Debug for SavedActions {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.debug_list().entries(self.actions.iter().map(|a| a.sa_sigaction)).finish()
    }
}

impl SavedActions {
    /// Reads the current action of every fatal signal (install time).
    pub fn read() -> Self {
        // SAFETY: an all-zero sigaction is a valid value (SIG_DFL, empty mask).
        let mut actions: [libc::sigaction; 7] = unsafe { core::mem::zeroed() };
        for (sig, slot) in FATAL_SIGNALS.iter().zip(actions.iter_mut()) {
            *slot = current(*sig).unwrap_or(*slot);
        }
        SavedActions { actions }
    }

    /// The saved action of `sig`; `None` for a signal not in [`FATAL_SIGNALS`].
    pub fn get(&self, sig: i32) -> Option<&libc::sigaction> {
        let i = FATAL_SIGNALS.iter().position(|s| *s == sig)?;
        self.actions.get(i)
    }

    /// The saved action of `sig` when it is a handler function (not `SIG_DFL` or `SIG_IGN`).
    pub fn handler_function(&self, sig: i32) -> Option<&libc::sigaction> {
        self.get(sig).filter(|p| p.sa_sigaction != libc::SIG_DFL && p.sa_sigaction != libc::SIG_IGN)
    }

    /// Puts back the saved action of every fatal signal.
    pub fn restore_all(&self) {
        for (sig, prev) in FATAL_SIGNALS.iter().zip(self.actions.iter()) {
            set(*sig, prev);
        }
    }

    /// Puts back the saved action of `sig` only.
    pub fn restore(&self, sig: i32) {
        if let Some(prev) = self.get(sig) {
            set(sig, prev);
        }
    }
}

/// The current action of `sig` (`sigaction` with a null new action); `None` when the call failed.
pub fn current(sig: i32) -> Option<libc::sigaction> {
    // SAFETY: an all-zero sigaction is a valid out-value; a null new action only queries.
    unsafe {
        let mut cur: libc::sigaction = core::mem::zeroed();
        (libc::sigaction(sig, core::ptr::null(), &mut cur) == 0).then_some(cur)
    }
}

/// Sets `sig`'s action to `act`; `true` on success.
pub fn set(sig: i32, act: &libc::sigaction) -> bool {
    // SAFETY: `act` is a valid sigaction; a null out-pointer is allowed.
    unsafe { libc::sigaction(sig, act, core::ptr::null_mut()) == 0 }
}

/// Sets the default action (`SIG_DFL`, empty mask) for `sig`.
pub fn set_default(sig: i32) {
    // SAFETY: a zeroed sigaction with SIG_DFL and an initialised empty mask is a valid argument.
    unsafe {
        let mut act: libc::sigaction = core::mem::zeroed();
        act.sa_sigaction = libc::SIG_DFL;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(sig, &act, core::ptr::null_mut());
    }
}

/// Whether `sig` must be sent again after the handler returns: signals sent by software (`user_sent`: Linux
/// `si_code <= 0`, Apple `SI_USER`/`SI_QUEUE`/... above `0x10000`) and signals whose instruction is not
/// re-executed on return (`SIGTRAP` after `int3`/`brk`, `SIGSYS`, and `SIGABRT`, which `abort()` sends). A fault
/// (`SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE` from the kernel) faults again on return instead. Pure.
pub fn needs_reraise(sig: i32, user_sent: bool) -> bool {
    user_sent || matches!(sig, libc::SIGTRAP | libc::SIGSYS | libc::SIGABRT)
}

/// Whether `si_addr` is meaningful: a fault raised by the kernel (not `user_sent`) for a signal that sets it
/// (`sigaction(2)`: `SIGSEGV`, `SIGBUS`, `SIGILL`, `SIGFPE`, `SIGTRAP`). Pure.
pub fn has_fault_address(sig: i32, user_sent: bool) -> bool {
    !user_sent && matches!(sig, libc::SIGSEGV | libc::SIGBUS | libc::SIGILL | libc::SIGFPE | libc::SIGTRAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reraise_and_fault_address_rules() {
        assert!(!needs_reraise(libc::SIGSEGV, false));
        assert!(!needs_reraise(libc::SIGFPE, false));
        assert!(needs_reraise(libc::SIGSEGV, true));
        assert!(needs_reraise(libc::SIGABRT, false));
        assert!(needs_reraise(libc::SIGTRAP, false));
        assert!(needs_reraise(libc::SIGSYS, false));
        assert!(has_fault_address(libc::SIGSEGV, false));
        assert!(!has_fault_address(libc::SIGABRT, false));
        assert!(!has_fault_address(libc::SIGSEGV, true));
    }

    #[test]
    fn saved_actions_find_by_signal() {
        let saved = SavedActions::read();
        assert!(saved.get(libc::SIGSEGV).is_some());
        assert!(saved.get(libc::SIGUSR1).is_none());
    }
}
