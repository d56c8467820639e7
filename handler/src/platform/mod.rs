//! OS backends. Each provides install/uninstall (install time, may allocate) and a `crash/` module with its signal
//! handlers, thread stopping and fault-proof memory reader (crash path). The Apple backend ([`darwin`]) adds the
//! Mach exception server; its pure half (Mach messages, thread states, Mach-O, `__crash_info`, dyld records, the
//! crash-time decisions) is compiled and tested on every host, its FFI half only for Apple targets (type-checked
//! here).

pub mod darwin;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub mod linux;
