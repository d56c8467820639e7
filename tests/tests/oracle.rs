//! The frame oracle: every crash below runs under `gdb`, which stops at the fatal signal before our handler runs,
//! records every thread's backtrace (DWARF CFI, full debug info), then lets the signal through; our handler's
//! report must hold the same frames, frame by frame, for every thread (`crash_tests::oracle`, which also names
//! the few differences it accepts and why).
//!
//! Clients:
//! - `tests/c/oracle_client.c`, compiled here with `cc -O2 -g`, once with `-fno-omit-frame-pointer` and once with
//!   `-fomit-frame-pointer`, linked against the reporter's static library through its C ABI
//!   (`reporter/include/crash_reporter.h`). Three helper threads are blocked in `pthread_cond_wait`, `nanosleep`
//!   and `read` on a pipe in every scenario, so threads other than the crashed one are compared too.
//! - the Rust crash client (`src/bin/crash-client`) with a few representative triggers.
//!
//! `libreporter.a`: Cargo builds no staticlib for a dependency, so this test runs
//! `cargo build -p reporter --lib --locked` itself, with its own `--target-dir` (`<target>/oracle-staticlib`): the
//! running `cargo test` holds the lock of its own target directory while tests run, so a build there would wait
//! forever. Measured on the 2-core development machine: 33 s from cold (the reporter's dependencies, rustls and ring
//! included), 0.2 s when up to date. `ORACLE_STATICLIB=<path to libreporter.a>` skips the build.
//!
//! gdb: `gdb` on `PATH` (or `ORACLE_GDB`). When it is missing the test prints why and passes, unless `CI` is set:
//! then a missing gdb is a failure (.ci/run installs it). `libc6-dbg` is optional: it only gives gdb (and the
//! failure listings) names for glibc's internal functions; gdb unwinds glibc from its `.eh_frame` either way.
//!
//! These tests are strict on purpose: the frames must be exactly gdb's. They fail while the handler's unwinder
//! cannot follow frameless code or invents frames past a chain's end; they are the acceptance test of the DWARF CFI
//! unwinder (issue 13).
//!
//! arm64 is not covered yet: the suite runs under qemu-user there, where no gdb can ptrace the guest. The way to
//! add it: start the client as `qemu-aarch64 -L /usr/aarch64-linux-gnu -g <port> <client> ...`, and run
//! `gdb-multiarch` (Debian package) with `set sysroot /usr/aarch64-linux-gnu` and `target remote :<port>` in
//! place of `run`; qemu's gdb stub reports every guest thread (by host tid) and every guest signal, and gdb
//! unwinds aarch64 code with its CFI (checked by hand with gdb-multiarch 13.1 and qemu 7.2: 0.4 s for a
//! two-thread program). Still open there: telling parked threads apart (no `orig_rax`; qemu-user's stub lets the
//! other threads run while one is stopped) and an aarch64 `libreporter.a` (built like scripts/test-arm64.sh does).
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use crash_tests::oracle::{compare, find_gdb, run_under_gdb, FrameKind, GdbRun, GdbThread, Tolerated};
use report_format::model::Report;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Generous: the machine is small and shared; a hang still fails.
const LIMIT: Duration = Duration::from_secs(120);

const SIGABRT: i32 = 6;
const SIGSEGV: i32 = 11;

fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root")
}

/// gdb, or `None` (with the reason printed) when the oracle cannot run here and that is allowed.
///
/// # Panics
/// When gdb is missing and `CI` is set.
fn gdb() -> Option<PathBuf> {
    static GDB: OnceLock<Option<PathBuf>> = OnceLock::new();
    GDB.get_or_init(|| {
        let found = find_gdb();
        if found.is_none() {
            let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0");
            assert!(!ci, "gdb (with Python) is required under CI for the frame oracle: apt-get install gdb");
            eprintln!("SKIPPED: the frame oracle needs gdb with Python on PATH (or ORACLE_GDB); none found");
        }
        found
    })
    .clone()
}

/// `libreporter.a` (see the module docs).
fn staticlib() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        if let Some(p) = std::env::var_os("ORACLE_STATICLIB") {
            return PathBuf::from(p);
        }
        let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("target dir").join("oracle-staticlib");
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let start = Instant::now();
        let out = Command::new(cargo)
            .args(["build", "-p", "reporter", "--lib", "--locked", "--target-dir"])
            .arg(&target)
            .current_dir(workspace())
            .env_remove("CARGO_TARGET_DIR")
            .env_remove("CARGO_BUILD_TARGET")
            .output()
            .expect("run cargo");
        assert!(
            out.status.success(),
            "cargo build -p reporter (for libreporter.a) failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!("libreporter.a: cargo build took {:.1} s", start.elapsed().as_secs_f64());
        target.join("debug").join("libreporter.a")
    })
}

/// Frame pointer variant of the C client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fp {
    /// `-fno-omit-frame-pointer` (the leaf stays frameless, see the C source).
    With,
    /// `-fomit-frame-pointer`: GCC's `-O2` default on x86_64.
    Without,
}

/// The C client, compiled once per variant per test process.
fn c_client(fp: Fp) -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    static WITH: OnceLock<PathBuf> = OnceLock::new();
    static WITHOUT: OnceLock<PathBuf> = OnceLock::new();
    let cell = if fp == Fp::With { &WITH } else { &WITHOUT };
    cell.get_or_init(|| {
        let lib = staticlib();
        let dir = DIR.get_or_init(|| tempfile::tempdir().expect("tempdir"));
        let (flag, name) = match fp {
            Fp::With => ("-fno-omit-frame-pointer", "oracle-client-fp"),
            Fp::Without => ("-fomit-frame-pointer", "oracle-client-nofp"),
        };
        let exe = dir.path().join(name);
        let cc = std::env::var_os("CC").unwrap_or_else(|| "cc".into());
        let ws = workspace();
        let out = Command::new(cc)
            .args(["-O2", "-g", flag, "-Wall", "-Wextra", "-pthread", "-I"])
            .arg(ws.join("reporter/include"))
            .arg(ws.join("tests/c/oracle_client.c"))
            .arg(lib)
            // The native libraries a Rust staticlib needs on linux-gnu (`rustc --print native-static-libs`).
            .args(["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl", "-lc", "-o"])
            .arg(&exe)
            .output()
            .expect("run cc");
        assert!(out.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&out.stderr));
        // The variants are what they claim: `leaf` never sets up a frame (so its caller is only in the return
        // address on the stack), `middle` does exactly when frame pointers are on.
        assert!(!pushes_rbp(&exe, "leaf"), "leaf() must be frameless ({fp:?})");
        assert_eq!(pushes_rbp(&exe, "middle"), fp == Fp::With, "middle() frame pointer ({fp:?})");
        exe
    })
}

/// Whether function `name` of the ELF file `exe` starts with `push %rbp` (after an optional `endbr64`).
fn pushes_rbp(exe: &Path, name: &str) -> bool {
    use object::{Object, ObjectSection, ObjectSymbol};
    let data = std::fs::read(exe).expect("read client");
    let file = object::File::parse(&*data).expect("parse client");
    let sym = file.symbols().find(|s| s.name() == Ok(name)).unwrap_or_else(|| panic!("no symbol {name}"));
    let text = file.section_by_name(".text").expect(".text");
    let bytes = text.data_range(sym.address(), 8).ok().flatten().expect("function bytes");
    let bytes = bytes.strip_prefix(&[0xf3, 0x0f, 0x1e, 0xfa][..]).unwrap_or(bytes); // endbr64
    bytes.first() == Some(&0x55) // push %rbp
}

/// One run under gdb: the client's argv (report directory included), where its report lands.
struct Case<'a> {
    what: String,
    argv: Vec<&'a OsStr>,
    report_dir: PathBuf,
    /// Signal gdb must stop at first (the report's signal too).
    signal: i32,
    signal_name: &'static str,
    /// Signals the process may die of (the handler re-raises the signal, or a previous handler it chains to, like
    /// Rust std's stack overflow handler, aborts).
    exit_signals: &'static [i32],
    /// Whether every thread but the crashed one must be parked in a system call at gdb's stop (compared, none
    /// skipped; see `Tolerated::NotParked`).
    all_parked: bool,
    /// Function names gdb must show, in this order and adjacent, among the crashed thread's physical frames
    /// (checks the scenario itself: a compiler that inlined or tail-called one of them would make the case
    /// meaningless). Matched as the last path components of gdb's names.
    gdb_chain: &'static [&'static str],
    /// Threads gdb must see, at least.
    min_threads: usize,
}

fn physical(t: &GdbThread) -> Vec<&str> {
    t.frames.iter().filter(|f| f.kind == FrameKind::Normal || f.kind == FrameKind::Sigtramp).map(|f| &*f.name).collect()
}

fn name_is(name: &str, want: &str) -> bool {
    // gdb prints Rust generics after the path (`f<T>`) and C names plain.
    let base = name.split('<').next().unwrap_or(name);
    base == want || base.ends_with(&format!("::{want}"))
}

fn adjacent_in(names: &[&str], chain: &[&str]) -> bool {
    chain.is_empty() || names.windows(chain.len()).any(|w| w.iter().zip(chain).all(|(n, c)| name_is(n, c)))
}

fn decode_one(dir: &Path, ctx: &str) -> Report {
    let reports: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| {
                    let n = p.file_name().unwrap_or_default().to_string_lossy();
                    n.ends_with(".crashreport") && !n.starts_with('.')
                })
                .collect()
        })
        .unwrap_or_default();
    assert_eq!(reports.len(), 1, "exactly one report expected in {}, got {reports:?}; {ctx}", dir.display());
    let bytes = std::fs::read(&reports[0]).expect("read report");
    let d = report_format::decode(&bytes).expect("report decodes");
    assert!(d.is_intact(), "report damaged: {:?}; {ctx}", d.problems);
    d.report
}

fn check(gdb: &Path, case: &Case, scratch: &Path) {
    let start = Instant::now();
    let run: GdbRun = run_under_gdb(gdb, &case.argv, scratch, LIMIT);
    let ctx = format!("{}: gdb driver errors {:?}; gdb and client output:\n{}", case.what, run.errors, run.log);
    assert_eq!(run.first_stop.as_deref(), Some(case.signal_name), "gdb's first stop; {ctx}");
    assert!(
        run.exit_signal.is_some_and(|s| case.exit_signals.contains(&s)),
        "the client must die of one of {:?}, got signal {:?}, code {:?}; {ctx}",
        case.exit_signals,
        run.exit_signal,
        run.exit_code
    );
    assert!(run.threads.len() >= case.min_threads, "gdb saw {} threads; {ctx}", run.threads.len());
    let selected: Vec<&GdbThread> = run.threads.iter().filter(|t| t.selected).collect();
    assert_eq!(selected.len(), 1, "{ctx}");
    let fault_tid = selected[0].lwp;
    let printed: u64 = run.out_value("FAULT_TID").expect("client printed FAULT_TID").parse().expect("tid");
    assert_eq!(printed, fault_tid, "gdb stopped on the thread that faults; {ctx}");
    let names = physical(selected[0]);
    assert!(
        adjacent_in(&names, case.gdb_chain),
        "{}: the scenario is not what it should be: gdb's physical frames {names:#?} lack {:?} (adjacent); {ctx}",
        case.what,
        case.gdb_chain
    );
    for t in &run.threads {
        assert!(!t.frames.is_empty(), "gdb has no frames for thread {}; {ctx}", t.lwp);
        // gdb's own unwind reached a frame the CFI marks as the outermost (`_start`, `clone3`): the oracle's chain
        // is complete, not cut short by an unwinding problem of gdb's.
        assert_eq!(t.unwind_end, "outermost", "gdb's unwind of thread {} ended early; {ctx}", t.lwp);
    }

    let report = decode_one(&case.report_dir, &ctx);
    let crashed = report.crashed_thread().expect("crashed thread");
    assert_eq!(crashed.id, Some(fault_tid), "the report's crashed thread; {ctx}");
    assert_eq!(report.exception.as_ref().and_then(|e| e.signal), Some(case.signal), "{ctx}");

    let cmp = compare(&report, &run, fault_tid);
    if case.all_parked {
        let skipped: Vec<_> = cmp.tolerated.iter().filter(|t| matches!(t, Tolerated::NotParked { .. })).collect();
        assert!(skipped.is_empty(), "{}: threads not parked at gdb's stop: {skipped:?}; {ctx}", case.what);
    }
    eprintln!(
        "{}: {} threads compared in {:.2} s; tolerated: {:?}",
        case.what,
        run.threads.len(),
        start.elapsed().as_secs_f64(),
        cmp.tolerated
    );
    assert!(
        cmp.failures.is_empty(),
        "{}: the report's frames differ from gdb's:\n{}",
        case.what,
        cmp.failures.join("\n")
    );
}

fn c_case(scenario: &str, fp: Fp) {
    let Some(gdb) = gdb() else { return };
    let exe = c_client(fp);
    let base = tempfile::tempdir().expect("tempdir");
    let root = base.path().join("reports");
    // The reporter keeps finished reports in `<dir>/pending` (reporter/src/store.rs).
    let report_dir = root.join("pending");
    let (signal, signal_name, chain): (i32, &str, &'static [&'static str]) = match scenario {
        "leaf" => (SIGSEGV, "SIGSEGV", &["leaf", "middle", "top", "main"]),
        "memcpy" => (SIGSEGV, "SIGSEGV", &["copy_in", "do_copy", "main"]),
        "abort" => (SIGABRT, "SIGABRT", &["fail_hard", "do_abort", "main"]),
        "assert" => (SIGABRT, "SIGABRT", &["check_value", "do_assert", "main"]),
        // Threads created after install start in the handler's `pthread_create` wrapper
        // (handler::platform::linux::threads), which gives them an alternate signal stack. (glibc's `start_thread`
        // follows; it is not named here: gdb names glibc's internal functions only with `libc6-dbg`, which no CI
        // step installs and which does not exist for the arm64 cross glibc. The frames are compared by address
        // regardless.)
        "thread" => (SIGSEGV, "SIGSEGV", &["crash_on_thread", "worker_step", "worker_main", "trampoline"]),
        other => panic!("unknown scenario {other}"),
    };
    let case = Case {
        what: format!("C {scenario} ({fp:?} frame pointers)"),
        argv: vec![exe.as_os_str(), OsStr::new(scenario), root.as_os_str()],
        report_dir,
        signal,
        signal_name,
        exit_signals: if signal == SIGABRT { &[SIGABRT] } else { &[SIGSEGV] },
        all_parked: true,
        gdb_chain: chain,
        // main + three helpers (+ the crashing thread in `thread`).
        min_threads: if scenario == "thread" { 5 } else { 4 },
    };
    check(&gdb, &case, &base.path().join("gdb"));
}

/// `all_parked`: see [`Case::all_parked`].
fn rust_case(
    trigger: &str,
    signal: i32,
    signal_name: &'static str,
    exit_signals: &'static [i32],
    all_parked: bool,
    chain: &'static [&'static str],
) {
    let Some(gdb) = gdb() else { return };
    let client = Path::new(env!("CARGO_BIN_EXE_crash-client"));
    let base = tempfile::tempdir().expect("tempdir");
    let report_dir = base.path().join("reports");
    let counts = base.path().join("alloc-counts");
    let case = Case {
        what: format!("Rust crash-client {trigger}"),
        argv: vec![client.as_os_str(), OsStr::new(trigger), report_dir.as_os_str(), counts.as_os_str()],
        report_dir: report_dir.clone(),
        signal,
        signal_name,
        exit_signals,
        all_parked,
        gdb_chain: chain,
        min_threads: 1,
    };
    check(&gdb, &case, &base.path().join("gdb"));
}

#[test]
fn c_leaf_with_fp() {
    c_case("leaf", Fp::With);
}

#[test]
fn c_leaf_without_fp() {
    c_case("leaf", Fp::Without);
}

#[test]
fn c_memcpy_with_fp() {
    c_case("memcpy", Fp::With);
}

#[test]
fn c_memcpy_without_fp() {
    c_case("memcpy", Fp::Without);
}

#[test]
fn c_abort_with_fp() {
    c_case("abort", Fp::With);
}

#[test]
fn c_abort_without_fp() {
    c_case("abort", Fp::Without);
}

#[test]
fn c_assert_with_fp() {
    c_case("assert", Fp::With);
}

#[test]
fn c_assert_without_fp() {
    c_case("assert", Fp::Without);
}

#[test]
fn c_thread_with_fp() {
    c_case("thread", Fp::With);
}

#[test]
fn c_thread_without_fp() {
    c_case("thread", Fp::Without);
}

#[test]
fn rust_null_deref() {
    rust_case("null_deref", SIGSEGV, "SIGSEGV", &[SIGSEGV], true, &["read_at", "trigger_null_deref", "run_trigger"]);
}

#[test]
fn rust_thread_crash() {
    // The main thread may still be returning from `clone3` when the new thread faults (not parked: skipped).
    rust_case(
        "thread_crash",
        SIGSEGV,
        "SIGSEGV",
        &[SIGSEGV],
        false,
        &["read_at", "trigger_null_deref", "thread_body_crash"],
    );
}

#[test]
fn rust_abort() {
    rust_case("abort", SIGABRT, "SIGABRT", &[SIGABRT], true, &["call_abort", "trigger_abort", "run_trigger"]);
}

#[test]
fn rust_panic() {
    rust_case("panic", SIGABRT, "SIGABRT", &[SIGABRT], true, &["trigger_panic", "run_trigger"]);
}

#[test]
fn rust_stack_overflow_thread() {
    // Rust std's stack overflow handler (chained by ours) aborts after our report: SIGABRT is a fine end too.
    rust_case("stack_overflow_thread", SIGSEGV, "SIGSEGV", &[SIGSEGV, SIGABRT], false, &["recurse", "recurse"]);
}
