//! Benchmarks of the crash reporter against the peers: capture latency, report size, install cost, idle cost and
//! viewer speed. Run through `scripts/bench.sh` (see `BENCHMARKS.md` at the repository root for what each figure
//! measures and a real run).
//!
//! The benchmarks crash real child processes with the Linux backend and compare against EmbarkStudios'
//! `crash-handler` with an out-of-process `minidumper` server (`minidump-writer`), so they run on Linux only; on
//! other platforms this binary just says so.

#[cfg(target_os = "linux")]
mod linux;

#[cfg(target_os = "linux")]
fn main() -> std::process::ExitCode {
    linux::main()
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("bench: the benchmarks are Linux-only (they crash real processes with the Linux backend).");
}
