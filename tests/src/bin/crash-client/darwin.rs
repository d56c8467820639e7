//! The crash client (macOS): installs the handler, then crashes with one trigger per process, so the Mach
//! exception server and the signal fallback run for real. **Written on Linux and not yet run**: the macOS workflow
//! (`.github/workflows/macos.yml`) runs it through `tests/tests/darwin_crashes.rs` on arm64 and x86_64 runners.
//!
//! Usage: `crash-client <trigger> <report-dir> <unused>` (the third argument keeps the Linux client's command line).
//! Before crashing it prints `PID <pid>`, `FAULT_TID <thread id>` and `FAULT_ADDR <hex>` when known, each flushed.
#![allow(unsafe_code)]

use std::hint::black_box;
use std::io::Write;

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// This thread's system-wide id (`pthread_threadid_np`, what the report's thread ids are).
fn thread_id() -> u64 {
    let mut tid = 0u64;
    // SAFETY: a null pthread_t means the calling thread; `tid` is a valid out-pointer.
    unsafe { libc::pthread_threadid_np(0 as libc::pthread_t, &mut tid) };
    tid
}

#[inline(never)]
fn read_at(addr: usize) -> u64 {
    // SAFETY: deliberately invalid: this read is the crash.
    unsafe { core::ptr::read_volatile(addr as *const u64) }
}

#[inline(never)]
fn null_deref(addr: usize) {
    say(&format!("FAULT_TID {}", thread_id()));
    say(&format!("FAULT_ADDR {addr:x}"));
    black_box(read_at(black_box(addr)));
}

/// arm64: `brk #1` (what a Swift runtime trap is): `EXC_BREAKPOINT`, SIGTRAP. x86_64: `ud2`: `EXC_BAD_INSTRUCTION`,
/// SIGILL (a Swift trap on Intel Macs).
#[inline(never)]
fn trap() {
    say(&format!("FAULT_TID {}", thread_id()));
    // SAFETY: deliberately traps; nothing after it runs.
    #[cfg(target_arch = "aarch64")]
    unsafe {
        core::arch::asm!("brk #1")
    };
    // SAFETY: as above.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        core::arch::asm!("ud2")
    };
}

fn abort() {
    say(&format!("FAULT_TID {}", thread_id()));
    std::process::abort();
}

/// A child that inherited our exception ports crashes first; the parent waits for it and then crashes itself. The
/// exception server must decline the child's exception (not ours) and still report the parent's crash.
fn fork_child_then_parent() {
    // SAFETY: fork in a test client; the child only calls async-signal-safe code until it crashes.
    let child = unsafe { libc::fork() };
    if child == 0 {
        // The child: its own fault, at a different address than the parent's.
        black_box(read_at(black_box(0x8)));
        // SAFETY: not reached; _exit is async-signal-safe.
        unsafe { libc::_exit(5) };
    }
    assert!(child > 0, "fork failed");
    say(&format!("CHILD_PID {child}"));
    let mut status = 0;
    // SAFETY: waits for the child just forked.
    unsafe { libc::waitpid(child, &mut status, 0) };
    say(&format!("CHILD_STATUS {status}"));
    null_deref(0x10);
}

pub fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 4 {
        eprintln!("usage: crash-client <trigger> <report-dir> <unused>");
        std::process::exit(2);
    }
    let (trigger, dir) = (&args[1], std::path::PathBuf::from(&args[2]));
    let mut config = handler::Config::new(&dir);
    config.app_id = "crash-client".into();
    if let Err(e) = handler::install(&config) {
        eprintln!("install failed: {e}");
        std::process::exit(3);
    }
    say(&format!("PID {}", std::process::id()));
    say(&format!("MAIN_TID {}", thread_id()));
    match trigger.as_str() {
        "null_deref" => null_deref(0),
        "trap" => trap(),
        "abort" => abort(),
        "thread_crash" => {
            let t = std::thread::Builder::new().name("crasher".into()).spawn(|| null_deref(0x18)).expect("spawn");
            let _ = t.join();
        }
        "fork_child_then_parent" => fork_child_then_parent(),
        other => {
            eprintln!("unknown trigger {other}");
            std::process::exit(2);
        }
    }
    say("NO_CRASH");
    std::process::exit(4);
}
