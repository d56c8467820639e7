//! Darwin (iOS, macOS, ...) backend: compiled only for `target_vendor = "apple"`. **Type-checked only**: nothing in
//! this module has run on Apple hardware; it is built by `scripts/check-apple.sh` with clippy for
//! aarch64-apple-ios, aarch64-apple-ios-sim, x86_64-apple-ios, aarch64-apple-darwin and x86_64-apple-darwin.
//!
//! Theory of operation (the full backend lands with the shared crash core, issue 7): an exception server thread
//! receives `mach_exc` requests ([`crate::apple::msg`]) on a port registered with
//! `EXCEPTION_STATE_IDENTITY_PROTECTED | MACH_EXCEPTION_CODES` (fallback `EXCEPTION_DEFAULT | MACH_EXCEPTION_CODES`),
//! suspends the other threads (`task_threads` + `thread_suspend`), reads their registers (`thread_get_state`,
//! converted by [`crate::apple::state`]) and memory (`mach_vm_read_overwrite` only), writes the report, then
//! restores the previous exception ports and replies `KERN_FAILURE` so the next handler and ReportCrash still see
//! the exception. This first slice only holds a few real Mach calls so the Apple type-check covers real Darwin code.

#![allow(unsafe_code)]

mod ffi_check;

pub use ffi_check::{count_threads, ThreadCountError};
