//! The Apple platform (iOS, macOS, tvOS, watchOS, visionOS), in one home.
//!
//! - [`crash`] (crash path, no-panic lints): the pure decoding and decisions, compiled and tested on **every host**
//!   (Mach exception types and messages, thread states, PAC-aware register decoding, Mach-O, `__crash_info`, dyld
//!   records, saved exception ports, the child-task check, the re-raise table, the behaviour fallback order), plus,
//!   on Apple targets only, the Mach exception server, the signal fallback and the Darwin capture backend;
//! - `images` and `install` (Apple targets only): dyld's image callbacks and install/uninstall.
//!
//! **Type-checked only.** Nothing under `target_vendor = "apple"` has run on Apple hardware: it is built and linted
//! with `clippy -D warnings` for aarch64-apple-ios, aarch64-apple-ios-sim, x86_64-apple-ios, aarch64-apple-darwin
//! and x86_64-apple-darwin by `scripts/check-apple.sh`, and the reporter's static library for the three iOS targets
//! is compiled to machine code. The theory of operation is in `install.rs` (the module docs of the Apple-only
//! half).
#![cfg_attr(target_vendor = "apple", allow(unsafe_code))]

// Runs after a fault: the crash-path lints.
crash_path_mod! { pub mod crash; }
#[cfg(target_vendor = "apple")]
pub(crate) mod ffi;
#[cfg(target_vendor = "apple")]
pub mod images;
#[cfg(target_vendor = "apple")]
mod install;
#[cfg(target_vendor = "apple")]
pub(crate) mod objc_exception;
#[cfg(target_vendor = "apple")]
pub mod runloop;

#[cfg(target_vendor = "apple")]
pub use install::{install, is_installed, refresh_images, uninstall};
