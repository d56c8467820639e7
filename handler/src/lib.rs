//! Crash capture: signal handlers (Linux, and the fallback on Apple platforms) and the Mach exception server
//! (Apple platforms).
//!
//! Public API: [`install()`] / [`uninstall()`] / [`refresh_images()`] with a [`Config`]; [`set_first_chance_handler`]
//! for runtimes that recover from faults on purpose; [`test_hooks`] for the
//! crash-test client. Module map:
//!
//! - [`config`], [`error`], [`install`](mod@install) and the private `prealloc` (install time: may allocate and lock);
//! - [`crash`]: the platform-neutral crash-path core: the one crash sequence both backends run
//!   ([`crash::capture`]), thread table, image table, re-entrancy gate, report writer;
//! - [`unwind`]: the pure stack walker (DWARF CFI, frame pointers, a bounded scan) over a
//!   [`unwind::MemoryReader`];
//! - [`arch`]: pure register decoding (x86-64 `gregs`, arm64 `sigcontext`) and PAC stripping;
//! - [`platform`]: OS backends (`platform::linux`: install, image snapshot, and its `crash/` signal handlers);
//! - [`apple`], [`macho`]: pure Apple decoding, tested on every host.
//!
//! Crash-path code lives only in modules whose path contains `/crash/`, `/unwind/` or `/arch/`.

// Pure decoding that runs after a fault (see `crash`).
#[cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::arithmetic_side_effects
    )
)]
pub mod apple;
// Runs after a fault (see `crash`).
#[cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::arithmetic_side_effects
    )
)]
pub mod arch;
pub mod config;
// Runs after a fault: no indexing, unwrapping, panicking or unchecked arithmetic (tests excepted). The same lints
// are on every crash-path module: here, and on `platform::linux::crash` and `platform::darwin::crash`.
#[cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::arithmetic_side_effects
    )
)]
pub mod crash;
pub mod error;
pub mod install;
// Pure Mach-O parsing, also run after a fault (see `crash`).
#[cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::arithmetic_side_effects
    )
)]
pub mod macho;
pub mod platform;
mod prealloc;
// Runs after a fault (see `crash`).
#[cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::arithmetic_side_effects
    )
)]
pub mod unwind;
pub mod user_values;

pub use config::Config;
pub use crash::first_chance::{set_first_chance_handler, FirstChanceHandler};
pub use error::InstallError;
pub use install::{install, is_installed, refresh_images, uninstall};

/// Hooks for the crash-test client (allocation counting, a deliberate fault inside the handler). Not for
/// production use.
pub mod test_hooks {
    pub use crate::crash::hooks::{set_crash_hook, CrashEvent, CrashHook, FAULT_IN_HANDLER};
}
