//! Linux benchmarks. The same binary is the orchestrator (`bench [--quick] ...`, see [`run`]) and the child
//! processes of our side (`bench __crash-ours ...`, `__install`, `__idle`); the peer's crash child and its
//! minidumper server are the `bench-peer` binary (`src/bin/bench-peer.rs`, module `peer.rs`).

mod alloc;
mod child;
mod minidump;
mod probe;
mod run;
mod stacks_bench;
mod stats;
mod sys;
mod viewer_bench;
mod workload;

use std::process::ExitCode;

#[global_allocator]
static ALLOCATOR: alloc::Counting = alloc::Counting;

/// Dispatches to the orchestrator or to a child role.
pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let rest = args.get(1..).unwrap_or(&[]);
    match args.first().map(String::as_str) {
        Some("__crash-ours") => match workload::CrashArgs::parse(rest) {
            Ok(a) => child::crash_ours(&a),
            Err(e) => {
                eprintln!("bench __crash-ours: {e}");
                ExitCode::from(2)
            }
        },
        Some("__install") => probe::install_main(rest),
        Some("__idle") => probe::idle_main(rest),
        Some("__stacks") => stacks_bench::child_main(rest),
        _ => run::main(&args),
    }
}
