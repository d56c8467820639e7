//! The crash client: installs the handler, then crashes with one trigger per process (see `linux.rs`).
//!
//! The client and the crash matrix run on Linux (x86_64, and arm64 under qemu-user). On Apple targets the crate is
//! only type-checked, and this binary just says so.

#[cfg(target_os = "linux")]
mod linux;

#[cfg(target_os = "linux")]
fn main() {
    linux::main();
}

#[cfg(not(target_os = "linux"))]
fn main() {
    eprintln!("crash-client runs on Linux only; the Apple backend is exercised by ios-harness/");
    std::process::exit(2);
}
