//! Hang detection, live: the crash client's `hang` trigger runs an event loop (heartbeat / idle) with hang
//! detection on (threshold 500 ms), stalls it twice for 1.5 s in two different functions (asleep, busy), once for
//! 250 ms (a slow frame, not a hang), waits 1.5 s idle (not a hang), and exits normally. Exactly one non-fatal
//! `hang` report per stall must be in the report directory, each about the main thread with the function that
//! blocked it on its stack (symbolicated with the client's own DWARF), every thread captured, nothing crashed.
#![cfg(target_os = "linux")]

use crash_tests::{client_image, find_in_order, run, symbolicate, Symbolizer};
use std::path::Path;
use std::time::Duration;

#[test]
fn a_stalled_event_loop_gives_exactly_one_hang_report_per_stall_with_the_blocked_function() {
    let client = Path::new(env!("CARGO_BIN_EXE_crash-client"));
    let base = tempfile::tempdir().expect("tempdir");
    let r = run(client, "hang", base.path(), Duration::from_secs(120));
    let ctx = format!("stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    assert_eq!((r.signal, r.code), (None, Some(0)), "the client exits normally; {ctx}");
    assert_eq!(r.out_value("HANGS"), Some("2"), "{ctx}");
    assert_eq!(r.out_value("REPORT_FAILURES"), Some("0"), "{ctx}");
    let slow: u32 = r.out_value("SLOW_FRAMES").and_then(|v| v.parse().ok()).expect("SLOW_FRAMES");
    // Each long stall passes the slow-frame threshold first; the short one may be seen or not (it lasts 250 ms,
    // the watchdog looks every 75 ms).
    assert!((2..=3).contains(&slow), "slow frames {slow}; {ctx}");
    assert!(r.leftovers.is_empty(), "temporary files left: {:?}", r.leftovers);
    assert_eq!(r.reports.len(), 2, "exactly one report per stall: {:?}; {ctx}", r.reports);
    let main_tid: u64 = r.out_value("MAIN_TID").and_then(|v| v.parse().ok()).expect("MAIN_TID");
    let mut reports: Vec<_> = r
        .reports
        .iter()
        .map(|p| {
            let d = report_format::decode(&std::fs::read(p).expect("read")).expect("decode");
            assert!(d.is_intact(), "{:?}", d.problems);
            d.report
        })
        .collect();
    reports.sort_by_key(|r| r.meta.as_ref().and_then(|m| m.capture_time_ns));
    let sym = Symbolizer::new(client);
    for (report, (blocked, other)) in
        reports.iter().zip([("stall_asleep", "stall_busy"), ("stall_busy", "stall_asleep")])
    {
        let nf = report.meta.as_ref().and_then(|m| m.non_fatal.clone()).expect("non-fatal");
        assert_eq!(nf.kind, "hang");
        let d = nf.duration_ns.expect("duration");
        assert!((500_000_000..1_600_000_000).contains(&d), "stall measured as {d} ns");
        assert!(nf.reason.as_deref().is_some_and(|r| r.starts_with("main thread unresponsive for ")), "{nf:?}");
        let e = report.exception.as_ref().expect("exception section");
        assert_eq!((e.signal, e.crashed_thread), (None, None));
        assert!(report.threads.iter().all(|t| !t.crashed), "{:?}", report.threads);
        // Every thread captured; under qemu-user its own RCU thread (in /proc/self/task, blocking every signal)
        // cannot answer and is listed as not captured, with the reason.
        let emulated = crash_tests::runner().is_some();
        for t in &report.threads {
            let qemu_own = emulated && t.name.as_deref().is_some_and(|n| n.starts_with("qemu"));
            assert!(
                t.captured || (qemu_own && t.not_captured_reason.as_deref().is_some_and(|r| r.contains("in time"))),
                "{t:?}"
            );
        }
        // The watchdog thread and the main thread at least.
        assert!(report.threads.len() >= 2);
        let main = report.threads.iter().find(|t| Some(t.index) == nf.thread).expect("the thread it is about");
        assert_eq!(main.id, Some(main_tid), "the report is about the main thread");
        let image = client_image(report, client).expect("client image");
        let names = symbolicate(&sym, image, main);
        find_in_order(&names, &[blocked, "trigger_hangs", "run_trigger"]).unwrap_or_else(|e| panic!("{blocked}: {e}"));
        assert!(find_in_order(&names, &[other]).is_err(), "{other} is not on the stack of {blocked}'s report");
    }
}
