//! Pure Apple-platform decoding, compiled and tested on every host (nothing here calls Darwin):
//!
//! - [`exc`]: Mach exception types, codes, behaviours and masks with their names, and the exception → signal
//!   mapping in Darwin's signal numbering;
//! - [`msg`]: the `mach_exc` request/reply messages (`#[repr(C, packed(4))]`, 64-bit codes, trailer room),
//!   decoded from and encoded into byte buffers;
//! - [`state`]: `ARM_THREAD_STATE64`/`ARM_EXCEPTION_STATE64` and `x86_THREAD_STATE64`/`x86_EXCEPTION_STATE64` word
//!   arrays → `report_format::regs` value arrays;
//! - [`pac`]: arm64e pointer-authentication stripping by virtual-address width (re-exported from
//!   [`crate::arch::pac`], which the arm64 Linux path uses too);
//! - [`crash_info`]: the `__crash_info` record and a bounded C-string reader over a fault-proof read callback;
//! - [`dyld`]: `dyld_all_image_infos` (where dyld itself is loaded) and `kinfo_proc` (`P_TRACED`) from raw bytes;
//! - [`ports`]: the exception ports saved at install, per exception type, for restoring and ownership checks.
//!
//! Everything here may run at crash time: no allocation, no locks, no panics (the lints below enforce the
//! indexing/unwrap/arithmetic part outside tests), no formatting. The Darwin backend that drives these (Mach
//! exception server, signal fallback, dyld image table) is `crate::platform::darwin`, compiled only for Apple
//! targets.

pub mod crash_info;
pub mod dyld;
pub mod exc;
pub mod msg;
pub mod ports;
pub use crate::arch::pac;
pub mod state;
