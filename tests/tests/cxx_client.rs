//! A standalone C++ program linked against the reporter's static library (`libreporter.a`, through its C API,
//! `reporter/include/crash_reporter.h`) dies of an uncaught C++ exception: the report says which type and, for a
//! `std::exception`, its `what()`; the crashed thread holds the throw site; the viewer prints Apple's libc++abi
//! wording under Application Specific Information.
//!
//! The client is `tests/c/cxx_client.cpp`, built here with `c++ -O1 -g` (`CRASH_TESTS_CXX`; under the emulator
//! `aarch64-linux-gnu-g++`) against [`crash_tests::reporter_staticlib`] (the frame oracle's: built once per target
//! directory into `<target>/oracle-staticlib`, or `ORACLE_STATICLIB`, which scripts/test-arm64.sh sets). Unlike the
//! Rust crash client it counts no allocations (the C API has no crash hook); the crash path's allocation-freedom for
//! C++ exceptions is checked by `tests/crashes.rs` (`uncaught_cxx_*`).
#![cfg(target_os = "linux")]

use crash_tests::{find_in_order, run, symbolicate, Symbolizer};
use report_format::model::Report;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

const SIGABRT: i32 = 6;
/// Generous: the machine is small and shared; a hang still fails.
const LIMIT: Duration = Duration::from_secs(120);

/// The client, compiled once per test process into cargo's per-target scratch directory.
fn client() -> &'static Path {
    static EXE: OnceLock<PathBuf> = OnceLock::new();
    EXE.get_or_init(|| {
        let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
        let lib = crash_tests::reporter_staticlib(tmp.parent().expect("target dir"));
        let dir = tmp.join("cxx-client");
        std::fs::create_dir_all(&dir).expect("client directory");
        let exe = dir.join("cxx-client");
        let cxx = std::env::var("CRASH_TESTS_CXX").unwrap_or_else(|_| {
            if cfg!(target_arch = "aarch64") && crash_tests::runner().is_some() {
                "aarch64-linux-gnu-g++".into()
            } else {
                "c++".into()
            }
        });
        let ws = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root");
        let out = std::process::Command::new(&cxx)
            .args(["-O1", "-g", "-fno-omit-frame-pointer", "-Wall", "-Wextra", "-pthread", "-I"])
            .arg(ws.join("reporter/include"))
            .arg(ws.join("tests/c/cxx_client.cpp"))
            .arg(&lib)
            .args(crash_tests::STATICLIB_NATIVE_LIBS)
            .arg("-o")
            .arg(&exe)
            // A host compiler started from under the emulator must not see the guest's library path.
            .env_remove("LD_LIBRARY_PATH")
            .output()
            .unwrap_or_else(|e| panic!("run {cxx}: {e}"));
        assert!(out.status.success(), "{cxx} failed:\n{}", String::from_utf8_lossy(&out.stderr));
        exe
    })
}

/// Runs `scenario` (its store is `<run dir>/reports`); checks the process died by SIGABRT with exactly one intact
/// report in the store's `pending/` directory, whose crashed thread is the thrower and holds the throw site
/// (`reserve_item` <- `place_order` <- `main`); returns the report and the viewer's text of it.
fn crash(scenario: &str) -> (Report, String) {
    let base = tempfile::tempdir().expect("tempdir");
    let run = run(client(), scenario, base.path(), LIMIT);
    let ctx = format!("scenario {scenario}: stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    assert_eq!(run.signal, Some(SIGABRT), "{ctx}");
    assert!(!run.stdout.contains("NO_CRASH"), "{ctx}");
    // The reporter's store: the handler writes into its `pending/` directory (reporter/src/lib.rs).
    let pending = run.dir.join("reports").join("pending");
    let files: Vec<PathBuf> = std::fs::read_dir(&pending)
        .unwrap_or_else(|e| panic!("{}: {e}; {ctx}", pending.display()))
        .flatten()
        .map(|e| e.path())
        .collect();
    let reports: Vec<&PathBuf> = files.iter().filter(|p| p.extension().is_some_and(|x| x == "crashreport")).collect();
    assert_eq!(reports.len(), 1, "one report in {}, got {files:?}; {ctx}", pending.display());
    assert_eq!(files.len(), 1, "nothing else left in {}: {files:?}; {ctx}", pending.display());
    let bytes = std::fs::read(reports[0]).expect("read report");
    let d = report_format::decode(&bytes).expect("decodes");
    assert!(d.is_intact(), "{:?}; {ctx}", d.problems);
    let r = d.report;
    assert_eq!(r.meta.as_ref().and_then(|m| m.process.bundle_id.as_deref()), Some("cxx-client"), "{ctx}");
    assert_eq!(r.exception.as_ref().and_then(|e| e.signal), Some(SIGABRT), "{ctx}");
    let fault_tid: u64 = run.out_value("FAULT_TID").expect("the client printed its tid").parse().expect("tid");
    let crashed = r.crashed_thread().expect("crashed thread");
    assert_eq!(crashed.id, Some(fault_tid), "{ctx}");
    let exe = std::fs::canonicalize(client()).expect("client path");
    let img = crash_tests::client_image(&r, &exe).unwrap_or_else(|| panic!("client image missing: {:#?}", r.images));
    let names = symbolicate(&Symbolizer::new(&exe), img, crashed);
    if let Err(msg) = find_in_order(&names, &["reserve_item", "place_order", "main"]) {
        panic!("throw site not on the crashed stack: {msg}\nraw frames: {:x?}\n{ctx}", crashed.frames);
    }
    assert_eq!(r.user.get("screen").map(String::as_str), Some("checkout"), "the C API's user value");
    let text = viewer::render_bytes(&bytes).expect("the viewer renders the report");
    (r, text)
}

#[test]
fn uncaught_exception_of_a_type_derived_from_std_runtime_error() {
    let (r, text) = crash("derived");
    let lx = r.exception.as_ref().and_then(|e| e.language.as_ref()).expect("EXCEPTION lx");
    assert_eq!(lx.kind, "c++");
    assert_eq!(lx.type_name.as_deref(), Some("N9inventory10OutOfStockE"));
    assert_eq!(lx.reason.as_deref(), Some("no widgets left in bin 7"));
    assert_eq!(lx.thread_id, r.crashed_thread().and_then(|t| t.id), "the throwing thread is the crashed one");
    let want = "Application Specific Information:\n\
                terminating due to uncaught exception of type inventory::OutOfStock: no widgets left in bin 7\n";
    assert!(text.contains(want), "viewer text lacks\n{want}\nin\n{text}");
    assert!(text.contains("User Values:\nscreen: checkout\n"), "{text}");
}

#[test]
fn uncaught_exception_of_type_int() {
    let (r, text) = crash("int");
    let lx = r.exception.as_ref().and_then(|e| e.language.as_ref()).expect("EXCEPTION lx");
    assert_eq!(lx.kind, "c++");
    assert_eq!(lx.type_name.as_deref(), Some("i"));
    assert_eq!(lx.reason, None, "no what() for a type not derived from std::exception");
    let want = "Application Specific Information:\nterminating due to uncaught exception of type int\n";
    assert!(text.contains(want), "viewer text lacks\n{want}\nin\n{text}");
}
