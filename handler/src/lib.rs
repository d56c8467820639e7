//! Crash capture: signal handlers (Linux, and the fallback on Apple platforms) and the Mach exception server
//! (Apple platforms).

pub mod apple;
pub mod macho;
