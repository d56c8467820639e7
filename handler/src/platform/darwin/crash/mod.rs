//! The Apple platform's crash path. Pure decoding and decisions, compiled and tested on every host (nothing in
//! these calls Darwin):
//!
//! - [`exc`]: Mach exception types, codes, behaviours and masks with their names, and the exception → signal
//!   mapping in Darwin's signal numbering;
//! - [`msg`]: the `mach_exc` request/reply messages (`#[repr(C, packed(4))]`, 64-bit codes, trailer room),
//!   decoded from and encoded into byte buffers;
//! - [`state`]: `ARM_THREAD_STATE64`/`ARM_EXCEPTION_STATE64` and `x86_THREAD_STATE64`/`x86_EXCEPTION_STATE64` word
//!   arrays → `report_format::regs` value arrays;
//! - pointer-authentication stripping is [`crate::arch::pac`] (one path, shared with the arm64 Linux path);
//! - [`crash_info`]: the `__crash_info` record and a bounded C-string reader over a fault-proof read callback;
//! - [`dyld`]: `dyld_all_image_infos` (where dyld itself is loaded) and `kinfo_proc` (`P_TRACED`) from raw bytes;
//! - [`ports`]: the exception ports saved at install, per exception type, for restoring and ownership checks;
//! - [`macho`]: Mach-O headers, load commands, segments, `LC_UUID` and fat files from memory or bytes;
//! - [`policy`]: the crash-time decisions: is an exception ours (child-task check), which signals to unblock
//!   before the reply, whether to re-raise a signal, which behaviours to register in which order.
//!
//! The Apple-only half (compiled for `target_vendor = "apple"`, **type-checked only**): `mach` (thin Mach call
//! wrappers and the fault-proof reader), `server` (the exception threads), `signals` (the signal fallback) and the
//! capture backend (`State`, `capture`), re-exported here.
//!
//! Everything here may run at crash time: no allocation, no locks, no panics (the crash-path lints enforce the
//! indexing/unwrap/arithmetic part outside tests), no formatting.

#[cfg(target_vendor = "apple")]
mod backend;
#[cfg(target_vendor = "apple")]
pub use backend::*;
#[cfg(target_vendor = "apple")]
pub mod mach;
#[cfg(target_vendor = "apple")]
pub mod server;
#[cfg(target_vendor = "apple")]
pub mod signals;

pub mod crash_info;
pub mod dyld;
pub mod exc;
pub mod macho;
pub mod msg;
pub mod policy;
pub mod ports;
pub mod state;
