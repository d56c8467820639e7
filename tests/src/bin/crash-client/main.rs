//! The crash client: installs the handler, then crashes with one trigger per process (see `linux.rs`, and
//! `darwin.rs` for macOS).
//!
//! The Linux client and crash matrix run on Linux (x86_64, and arm64 under qemu-user). The macOS client is
//! type-checked here and meant for the macOS workflow (not yet run). On other Apple targets this binary just says
//! it does not run there.

#[cfg(target_os = "macos")]
mod darwin;
#[cfg(target_os = "linux")]
mod linux;

#[cfg(target_os = "linux")]
fn main() {
    linux::main();
}

#[cfg(target_os = "macos")]
fn main() {
    darwin::main();
}

#[cfg(not(any(target_os = "linux", target_os = "macos")))]
fn main() {
    eprintln!("crash-client runs on Linux and macOS only; the iOS backend is exercised by ios-harness/");
    std::process::exit(2);
}
