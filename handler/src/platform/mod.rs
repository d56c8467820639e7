//! OS backends. Each provides install/uninstall (install time, may allocate) and a `crash/` module with its signal
//! handlers, thread stopping and fault-proof memory reader (crash path). The Apple backend lives in `crate::apple`
//! and `crate::macho` (pure decoding) plus its own platform module.

#[cfg(target_os = "linux")]
pub mod linux;
