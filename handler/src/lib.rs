//! Crash capture: signal handlers (Linux, and the fallback on Apple platforms) and the Mach exception server
//! (Apple platforms).
//!
//! Public API: [`install()`] / [`uninstall()`] / [`refresh_images()`] with a [`Config`]; [`set_first_chance_handler`]
//! for runtimes that recover from faults on purpose; [`stacks::current_stack`] / [`stacks::thread_stack`] for
//! stacks on demand; [`test_hooks`] for the crash-test client. Module map:
//!
//! - [`config`], [`error`], [`install`](mod@install) and the private `prealloc` (install time: may allocate and lock);
//! - [`crash`]: the platform-neutral crash-path core: the one crash sequence both backends run
//!   ([`crash::capture`]), thread table, image table, re-entrancy gate, report writer;
//! - [`unwind`]: the pure stack walker (DWARF CFI, frame pointers, a bounded scan) over a
//!   [`unwind::MemoryReader`];
//! - [`arch`]: pure register decoding (x86-64 `gregs`, arm64 `sigcontext`) and PAC stripping;
//! - [`platform`]: OS backends (`platform::linux`: install, image snapshot, and its `crash/` signal handlers;
//!   [`platform::darwin`]: the Apple platform's one home: its pure decoding (Mach messages, thread states, Mach-O,
//!   `__crash_info`, dyld records) compiled and tested on every host, its FFI half compiled for Apple targets only).
//!
//! - [`stacks`]: stacks on demand (the current thread's, or another thread's) with the crash path's unwinder, and
//!   [`ondemand`], the signal-safe half they run on (the Linux capture signal's handler walks there);
//!   [`symbols`]: on-device symbolication of such stacks;
//! - [`nonfatal`]: non-fatal reports (every thread, written while the process goes on), and [`hangs`], the hang
//!   watchdog that writes one per stall.
//!
//! Crash-path code lives only in modules whose path contains `/crash/`, `/unwind/`, `/arch/` or `/ondemand/`.

/// Declares a module that runs after a fault, with the no-panic lints denied on it (tests excepted): no indexing,
/// no `unwrap`/`expect`, no `panic!`, no unchecked arithmetic. The one place that lint set is written; every
/// crash-path module is declared through it (here, and `crash` in `platform::linux` and `platform::darwin`).
macro_rules! crash_path_mod {
    ($vis:vis mod $name:ident;) => {
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
        $vis mod $name;
    };
}

crash_path_mod! { pub mod arch; }
pub mod config;
crash_path_mod! { pub mod crash; }
pub mod error;
pub mod hangs;
pub mod install;
mod language;
pub mod nonfatal;
crash_path_mod! { pub mod ondemand; }
pub mod platform;
mod prealloc;
pub mod stacks;
pub mod symbols;
crash_path_mod! { pub mod unwind; }
pub mod user_values;

pub use config::Config;
pub use crash::first_chance::{set_first_chance_handler, FirstChanceHandler};
pub use error::InstallError;
pub use install::{install, is_installed, preallocated_mapped_bytes, refresh_images, uninstall};
pub use language::set_crash_reason;

/// Hooks for the crash-test client (allocation counting, a deliberate fault inside the handler). Not for
/// production use.
pub mod test_hooks {
    pub use crate::crash::hooks::{set_crash_hook, CrashEvent, CrashHook, FAULT_IN_HANDLER};
}
