//! OS backends. Each provides install/uninstall (install time, may allocate) and a `crash/` module with its signal
//! handlers, thread stopping and fault-proof memory reader (crash path). The Apple backend (`darwin`, Apple targets
//! only, type-checked here) adds the Mach exception server; its pure decoding lives in `crate::apple` and
//! `crate::macho`, tested on every host.

#[cfg(target_vendor = "apple")]
pub mod darwin;
#[cfg(target_os = "linux")]
pub mod linux;
