//! The peer side of the benchmarks, started by `bench`: the crashing child that attaches EmbarkStudios'
//! `crash-handler` with a `minidumper` client, and the out-of-process `minidumper` server. A separate binary because
//! crash-handler interposes `pthread_create`, which our own crash children must not run with. Linux only.

#[cfg(target_os = "linux")]
#[allow(dead_code)] // shared with `bench`, which uses more of it
#[path = "../linux/sys.rs"]
mod sys;

#[cfg(target_os = "linux")]
#[allow(dead_code)]
#[path = "../linux/workload.rs"]
mod workload;

#[cfg(target_os = "linux")]
#[path = "../linux/peer.rs"]
mod peer;

#[cfg(target_os = "linux")]
fn main() -> std::process::ExitCode {
    peer::main()
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("bench-peer: the benchmarks are Linux-only.");
}
