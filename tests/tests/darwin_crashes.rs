//! The crash matrix on macOS: the crash client (`src/bin/crash-client/darwin.rs`) crashes one way per process and
//! the report is checked against what the Mach exception server must record: the Mach exception type and codes,
//! the Darwin signal, the fault address, the crashed thread, and how the process died.
//!
//! **Written on Linux and not yet run**: it is type-checked here (`scripts/check-apple.sh` for aarch64-apple-darwin
//! and x86_64-apple-darwin) and runs in `.github/workflows/macos.yml` on an arm64 and an x86_64 runner.
#![cfg(target_os = "macos")]

use crash_tests::{run, Run};
use report_format::model::Report;
use std::path::Path;
use std::time::Duration;

// Darwin numbers (bsd/sys/signal.h, osfmk/mach/exception_types.h), not Linux's.
const SIGILL: i32 = 4;
const SIGTRAP: i32 = 5;
const SIGABRT: i32 = 6;
const SIGSEGV: i32 = 11;
const EXC_BAD_ACCESS: u32 = 1;
const EXC_BAD_INSTRUCTION: u32 = 2;
const EXC_BREAKPOINT: u32 = 6;
const KERN_INVALID_ADDRESS: i64 = 1;

const LIMIT: Duration = Duration::from_secs(60);

fn client() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_crash-client"))
}

fn crash(trigger: &str) -> (Run, tempfile::TempDir) {
    let base = tempfile::tempdir().expect("temp dir");
    let r = run(client(), trigger, base.path(), LIMIT);
    (r, base)
}

fn decode(path: &Path) -> Report {
    let bytes = std::fs::read(path).expect("read report");
    let d = report_format::decode(&bytes).expect("decodes");
    assert!(d.is_intact(), "{}: report damaged: {:?}", path.display(), d.problems);
    d.report
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s, 16).expect("hex")
}

/// The only report of `r`, checked for the parts every trigger shares.
fn only_report(r: &Run) -> Report {
    assert_eq!(
        r.reports.len(),
        1,
        "{}: reports {:?}\nstdout:\n{}\nstderr:\n{}",
        r.trigger,
        r.reports,
        r.stdout,
        r.stderr
    );
    assert!(r.leftovers.is_empty(), "{}: leftovers {:?}", r.trigger, r.leftovers);
    let report = decode(&r.reports[0]);
    let meta = report.meta.as_ref().expect("meta");
    assert!(meta.os.is_apple(), "{}: os {:?}", r.trigger, meta.os.name);
    assert_eq!(meta.process.pid.map(|p| p.to_string()).as_deref(), r.out_value("PID"), "{}", r.trigger);
    report
}

fn crashed_thread_id(report: &Report) -> Option<u64> {
    report.threads.iter().find(|t| t.crashed).and_then(|t| t.id)
}

#[test]
fn null_deref_is_exc_bad_access_then_sigsegv() {
    let (r, _keep) = crash("null_deref");
    assert_eq!(r.signal, Some(SIGSEGV), "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    let report = only_report(&r);
    let e = report.exception.as_ref().expect("exception");
    assert_eq!(e.mach_type, Some(EXC_BAD_ACCESS));
    assert_eq!(e.mach_codes.first(), Some(&KERN_INVALID_ADDRESS));
    assert_eq!(e.mach_codes.get(1), Some(&0));
    assert_eq!(e.signal, Some(SIGSEGV));
    assert_eq!(e.fault_address, Some(0));
    assert_eq!(crashed_thread_id(&report).map(|t| t.to_string()).as_deref(), r.out_value("FAULT_TID"));
}

#[test]
fn trap_keeps_apples_exception_at_the_trap() {
    // arm64: the `brk` re-executes with the default action after our report (no pthread_kill re-raise), so the
    // process dies by SIGTRAP from EXC_BREAKPOINT at the trap. x86_64: `ud2` is EXC_BAD_INSTRUCTION, SIGILL.
    let (r, _keep) = crash("trap");
    let (exc, sig) =
        if cfg!(target_arch = "aarch64") { (EXC_BREAKPOINT, SIGTRAP) } else { (EXC_BAD_INSTRUCTION, SIGILL) };
    assert_eq!(r.signal, Some(sig), "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    let report = only_report(&r);
    let e = report.exception.as_ref().expect("exception");
    assert_eq!(e.mach_type, Some(exc));
    assert_eq!(e.signal, Some(sig));
    assert_eq!(crashed_thread_id(&report).map(|t| t.to_string()).as_deref(), r.out_value("FAULT_TID"));
}

#[test]
fn abort_is_reported_by_the_signal_fallback() {
    let (r, _keep) = crash("abort");
    assert_eq!(r.signal, Some(SIGABRT), "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    let report = only_report(&r);
    let e = report.exception.as_ref().expect("exception");
    assert_eq!(e.mach_type, None, "abort() raises no Mach exception before SIGABRT");
    assert_eq!(e.signal, Some(SIGABRT));
    assert_eq!(crashed_thread_id(&report).map(|t| t.to_string()).as_deref(), r.out_value("FAULT_TID"));
}

#[test]
fn a_crash_on_a_spawned_thread_names_that_thread() {
    let (r, _keep) = crash("thread_crash");
    assert_eq!(r.signal, Some(SIGSEGV), "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    let report = only_report(&r);
    let e = report.exception.as_ref().expect("exception");
    assert_eq!(e.fault_address, Some(hex(r.out_value("FAULT_ADDR").expect("FAULT_ADDR"))));
    let t = report.threads.iter().find(|t| t.crashed).expect("crashed thread");
    assert_eq!(t.name.as_deref(), Some("crasher"));
    assert_eq!(t.id.map(|t| t.to_string()).as_deref(), r.out_value("FAULT_TID"));
    assert!(report.threads.len() >= 2, "the main thread is there too");
}

#[test]
fn a_forked_childs_crash_is_not_taken_for_ours() {
    // The child inherits our exception ports and crashes first; the server must decline it (issue: it used to dump
    // the parent with a made-up crashed thread and then miss the parent's own crash).
    let (r, _keep) = crash("fork_child_then_parent");
    assert_eq!(r.signal, Some(SIGSEGV), "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    let status: i32 = r.out_value("CHILD_STATUS").expect("CHILD_STATUS").parse().expect("status");
    assert_ne!(status & 0x7f, 0, "the child died by a signal");
    let parent = r.out_value("PID").expect("PID");
    let child = r.out_value("CHILD_PID").expect("CHILD_PID");
    let reports: Vec<Report> = r.reports.iter().map(|p| decode(p)).collect();
    let pid_of = |rep: &Report| rep.meta.as_ref().and_then(|m| m.process.pid).map(|p| p.to_string());
    let ours: Vec<&Report> = reports.iter().filter(|rep| pid_of(rep).as_deref() == Some(parent)).collect();
    assert_eq!(ours.len(), 1, "exactly one report of the parent: {:?}", reports.iter().map(pid_of).collect::<Vec<_>>());
    let e = ours[0].exception.as_ref().expect("exception");
    assert_eq!(e.fault_address, Some(0x10), "the parent's own fault, not the child's (0x8)");
    assert_eq!(crashed_thread_id(ours[0]).map(|t| t.to_string()).as_deref(), r.out_value("FAULT_TID"));
    // The child may write its own report through its inherited signal handler (its own process, its own pid).
    for rep in reports.iter().filter(|rep| pid_of(rep).as_deref() == Some(child)) {
        assert_eq!(rep.exception.as_ref().and_then(|e| e.fault_address), Some(0x8));
    }
    assert!(reports.iter().all(|rep| pid_of(rep).as_deref() == Some(parent) || pid_of(rep).as_deref() == Some(child)));
}
