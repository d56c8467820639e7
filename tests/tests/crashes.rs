//! The crash matrix: one client process per trigger, each checked end to end (exit signal, exactly one intact
//! report, crashed thread, exception, threads, symbolicated frames, the client image and its build id, and zero
//! allocations after the fault).
#![cfg(target_os = "linux")] // the crash client runs on Linux; Apple targets only type-check this crate

use crash_tests::{client_image, find_in_order, run, symbolicate, Run, Symbolizer};
use report_format::model::Report;
use std::path::Path;
use std::time::Duration;

const SIGILL: i32 = 4;
#[cfg(target_arch = "aarch64")]
const SIGTRAP: i32 = 5;
const SIGABRT: i32 = 6;
const SIGBUS: i32 = 7;
const SIGFPE: i32 = 8;
const SIGSEGV: i32 = 11;
// si_code values: Linux include/uapi/asm-generic/siginfo.h.
const SEGV_MAPERR: i32 = 1;
const SEGV_ACCERR: i32 = 2;
const BUS_ADRERR: i32 = 2;
const ILL_ILLOPN: i32 = 2;
#[cfg(target_arch = "x86_64")]
const FPE_INTDIV: i32 = 1;
const SI_TKILL: i32 = -6;
#[cfg(target_arch = "aarch64")]
const TRAP_BRKPT: i32 = 1;

/// Generous: the machine is small and shared; a hang still fails.
const LIMIT: Duration = Duration::from_secs(120);

/// The crash client: `CRASH_TESTS_CLIENT` when set (scripts/test-arm64.sh's pointer-authentication pass points it
/// at a client built with `-Zbranch-protection=pac-ret`), else the one Cargo built with this test.
fn client() -> &'static Path {
    static CLIENT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        std::env::var_os("CRASH_TESTS_CLIENT").map_or_else(|| env!("CARGO_BIN_EXE_crash-client").into(), Into::into)
    })
}

/// What one trigger must produce.
struct Expect {
    trigger: &'static str,
    exit_signal: &'static [i32],
    signal: i32,
    si_code: Option<i32>,
    /// The fault address is the one the client printed (`FAULT_ADDR`), or the PC (`pc`), or absent.
    addr: Addr,
    /// Function names that must appear in order in the crashed thread's frames (innermost first).
    frames: &'static [&'static str],
    /// Function names that must each appear in exactly one frame of the crashed thread (arm64: the caller of the
    /// crashing function is found once, whether it is in LR only or also in a frame record).
    once: &'static [&'static str],
    /// Whether threads other than the crash thread may allocate during the crash (a thread allocating in a loop
    /// can be between allocations when the crash starts, before it is stopped).
    others_allocate: bool,
    /// A minimal report is expected (fault inside the handler).
    minimal: bool,
    /// Times the crash hook saw a crash start and end (more than one when a fault was survived first).
    crashes: u64,
    /// Finished reports expected (`*.crashreport`); the one checked is the crash hook's last crash's.
    reports: usize,
    /// Reports of survived faults kept aside as `*.recovered` (never uploaded as crashes).
    kept_aside: usize,
    /// How long the client may run.
    limit: Duration,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Addr {
    Printed,
    Pc,
    None,
    /// Present, value not checked (a stack overflow's guard-page address).
    Any,
}

/// File-name suffix of a report whose fault the process survived (the handler's naming).
const RECOVERED_SUFFIX: &str = ".recovered";

fn decode_file(path: &Path) -> Report {
    let bytes = std::fs::read(path).expect("read report");
    let d = report_format::decode(&bytes).expect("decodes");
    assert!(d.is_intact(), "{}: report damaged: {:?}", path.display(), d.problems);
    d.report
}

/// The reports of a run: the expected number of finished ones, kept-aside ones, no other files; returns the
/// finished report of the last crash (the one whose crashed thread is the hook's last `handler_tid`) and the
/// kept-aside ones and the other finished ones.
fn decode(run: &Run, e: &Expect) -> (Report, Vec<Report>, Vec<Report>) {
    assert_eq!(
        run.reports.len(),
        e.reports,
        "{}: {} finished report(s) expected, got {:?}\n{}",
        run.trigger,
        e.reports,
        run.reports,
        run.stderr
    );
    let (aside, stray): (Vec<_>, Vec<_>) = run.leftovers.iter().partition(|p| {
        p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(RECOVERED_SUFFIX) && !n.starts_with('.'))
    });
    assert!(stray.is_empty(), "{}: stray files {:?}", run.trigger, stray);
    assert_eq!(aside.len(), e.kept_aside, "{}: kept-aside reports {:?}", run.trigger, aside);
    let aside = aside.iter().map(|p| decode_file(p)).collect();
    let mut reports: Vec<Report> = run.reports.iter().map(|p| decode_file(p)).collect();
    let last = run.count("handler_tid");
    let i = if reports.len() == 1 {
        0
    } else {
        reports
            .iter()
            .position(|r| r.crashed_thread().and_then(|t| t.id) == last)
            .unwrap_or_else(|| panic!("{}: no report of the last crash (thread {last:?})", run.trigger))
    };
    let last = reports.swap_remove(i);
    (last, aside, reports)
}

/// Triggers where two threads fault at once: either may own the crash.
const TWO_FAULTERS: &[&str] = &["two_threads", "two_signals"];

/// What a checked run left: the run, the last crash's report, the kept-aside reports, the other finished reports.
type Checked = (Run, Report, Vec<Report>, Vec<Report>);

fn check(e: &Expect) -> Checked {
    let base = tempfile::tempdir().expect("tempdir");
    check_in(e, base.path())
}

/// Runs `e` in `base` (the client's run directory is `base/<trigger>`), checks it, and returns what it left.
fn check_in(e: &Expect, base: &Path) -> Checked {
    check_client(client(), e, base)
}

/// [`check_in`] with the crash client at `client` (a build of the same source).
fn check_client(client: &Path, e: &Expect, base: &Path) -> Checked {
    let run = run(client, e.trigger, base, e.limit);
    let ctx = format!("trigger {}: stdout:\n{}\nstderr:\n{}", e.trigger, run.stdout, run.stderr);
    assert!(
        e.exit_signal.contains(&run.signal.unwrap_or(0)),
        "exit {:?}/{:?}, want {:?}; {ctx}",
        run.signal,
        run.code,
        e.exit_signal
    );
    assert!(!run.stdout.contains("NO_CRASH"), "{ctx}");

    // Zero allocations after the fault: the hook saw the crash start and end exactly once.
    assert_eq!(run.count("starts"), Some(e.crashes), "crash hook start; {ctx}");
    assert_eq!(run.count("ends"), Some(e.crashes), "crash hook end; {ctx}");
    assert_eq!(run.count("crash_thread_allocs"), Some(0), "allocations by the crash thread; {ctx}");
    if !e.others_allocate {
        assert_eq!(run.count("all_allocs"), Some(0), "allocations by any thread; {ctx}");
        assert_eq!(run.count("c_allocs"), Some(0), "malloc calls; {ctx}");
    }

    let (r, aside, others) = decode(&run, e);
    let meta = r.meta.as_ref().expect("meta");
    assert_eq!(meta.minimal, e.minimal, "{ctx}");
    assert_eq!(meta.os.name.as_deref(), Some("Linux"));
    assert_eq!(meta.process.bundle_id.as_deref(), Some("crash-client"));
    let exc = r.exception.as_ref().expect("exception");
    // `signal` 0: whichever thread owned the crash decides, and the process must die by that same signal.
    let want_signal = if e.signal == 0 { run.signal.unwrap_or(-1) } else { e.signal };
    assert_eq!(exc.signal, Some(want_signal), "{ctx}");
    if let Some(code) = e.si_code {
        assert_eq!(exc.si_code, Some(code), "{ctx}");
    }

    // The crashed thread is the one that faulted.
    let fault_tid: u64 = run.out_value("FAULT_TID").expect("client printed its tid").parse().expect("tid");
    let crashed = r.crashed_thread().expect("crashed thread");
    assert!(crashed.crashed);
    // Apple's numbering: threads in the task's order, the main thread (tid = pid) first, the crashed thread at its
    // own place (it is written first, but not numbered first).
    assert_eq!(exc.crashed_thread, Some(crashed.index), "{ctx}");
    let pid = meta.process.pid.map(u64::from);
    if let Some(main) = r.threads.iter().find(|t| t.id.is_some() && t.id == pid) {
        assert_eq!(main.index, 0, "the main thread is Thread 0; {ctx}");
    }
    if !TWO_FAULTERS.contains(&e.trigger) {
        assert_eq!(run.count("handler_tid"), Some(fault_tid), "{ctx}");
        assert_eq!(crashed.id, Some(fault_tid), "{ctx}");
    } else {
        // Either faulting thread may own the crash; the report must name the one that did.
        let faulters: Vec<u64> = run.out_values("FAULT_TID").iter().map(|t| t.parse().expect("tid")).collect();
        let owner = run.count("handler_tid").expect("handler tid");
        assert!(faulters.contains(&owner), "{ctx}");
        assert_eq!(crashed.id, Some(owner), "{ctx}");
        // The other faulting thread is in the report too, captured.
        let other = faulters.iter().find(|t| **t != owner);
        if let Some(other) = other {
            let t = r.threads.iter().find(|t| t.id == Some(*other)).expect("second faulter present");
            assert!(t.captured || t.not_captured_reason.is_some(), "{ctx}");
        }
    }
    assert!(crashed.captured && !crashed.frames.is_empty(), "{ctx}");
    let pc = crashed.register(if cfg!(target_arch = "aarch64") { "pc" } else { "rip" });
    assert_eq!(pc, crashed.frames.first().copied(), "frame 0 is the pc");
    #[cfg(target_arch = "aarch64")]
    check_arm64_registers(crashed, &ctx);

    match e.addr {
        Addr::Printed => {
            let want = u64::from_str_radix(run.out_value("FAULT_ADDR").expect("printed address"), 16).expect("hex");
            assert_eq!(exc.fault_address, Some(want), "{ctx}");
        }
        Addr::Pc => assert_eq!(exc.fault_address, pc, "{ctx}"),
        Addr::None => assert_eq!(exc.fault_address, None, "{ctx}"),
        Addr::Any => assert!(exc.fault_address.is_some(), "{ctx}"),
    }

    // Every live thread the client made is in the report, captured with frames or not captured with a reason.
    if !e.minimal {
        assert_eq!(meta.thread_count, Some(r.threads.len() as u32));
        for t in &r.threads {
            if t.captured {
                assert!(!t.frames.is_empty(), "thread {:?} captured without frames; {ctx}", t.id);
                assert!(t.register_set.is_some());
            } else {
                assert!(t.not_captured_reason.as_deref().is_some_and(|s| !s.is_empty()), "{ctx}");
            }
        }
        let main_tid: u64 = run.out_value("MAIN_TID").expect("main tid").parse().expect("tid");
        let mut live: Vec<u64> = run.out_values("THREAD").iter().map(|t| t.parse().expect("tid")).collect();
        live.push(main_tid);
        for tid in live {
            assert!(r.threads.iter().any(|t| t.id == Some(tid)), "thread {tid} missing; {ctx}");
        }
        if e.trigger == "threads200" {
            assert!(r.threads.len() >= 201, "{}", r.threads.len());
            let named = r.threads.iter().filter(|t| t.name.as_deref().is_some_and(|n| n.starts_with("idle-"))).count();
            assert_eq!(named, 200, "thread names");
        }
    } else {
        assert_eq!(r.threads.len(), 1);
        assert!(meta.note.as_deref().is_some_and(|n| n.contains("faulted")));
    }

    // The client binary is in the image list with the build id read from the file itself.
    let img = client_image(&r, client).unwrap_or_else(|| panic!("client image missing: {:#?}", r.images));
    let sym = &Symbolizer::new(client);
    let file_id = sym.build_id.clone().expect("the client binary has a GNU build id");
    assert_eq!(crash_tests::id_bytes(img), Some(&file_id[..]), "build id");

    // Frames: the trigger function and its callers, in order.
    if !e.frames.is_empty() {
        let names = symbolicate(sym, img, crashed);
        if let Err(msg) = find_in_order(&names, e.frames) {
            panic!("{msg}\nraw frames: {:x?}\n{ctx}", crashed.frames);
        }
        for w in e.once {
            let n = names.iter().filter(|f| find_in_order(std::slice::from_ref(*f), &[w]).is_ok()).count();
            assert_eq!(n, 1, "`{w}` must appear in exactly one frame: {names:#?}\nraw frames: {:x?}", crashed.frames);
        }
    }
    (run, r, aside, others)
}

/// The full arm64 register set of the crashed thread: x0-x28, fp, lr, sp, pc, cpsr and the fault address register.
#[cfg(target_arch = "aarch64")]
fn check_arm64_registers(t: &report_format::model::Thread, ctx: &str) {
    assert_eq!(t.register_set.as_deref(), Some("arm64"), "{ctx}");
    let names = (0..=28).map(|i| format!("x{i}")).chain(["fp", "lr", "sp", "pc", "cpsr", "far"].map(String::from));
    for name in names {
        assert!(t.register(&name).is_some(), "register {name} missing from the crashed thread: {:?}", t.registers);
    }
    assert_eq!(t.register("sp").map(|sp| sp % 16), Some(0), "sp is 16-byte aligned at a fault");
    // fp holds a frame record address on the stack (the walk starts there): above sp.
    assert!(t.register("fp") >= t.register("sp"), "fp below sp: {:?}", t.registers);
}

macro_rules! crash_test {
    ($name:ident, $e:expr) => {
        #[test]
        fn $name() {
            let _ = check(&$e);
        }
    };
}

const MAIN_CALLERS: &[&str] = &["run_trigger", "main"];

fn with_main(first: &'static [&'static str]) -> &'static [&'static str] {
    Box::leak([first, MAIN_CALLERS].concat().into_boxed_slice())
}

crash_test!(
    null_deref,
    Expect {
        trigger: "null_deref",
        exit_signal: &[SIGSEGV],
        signal: SIGSEGV,
        si_code: Some(SEGV_MAPERR),
        addr: Addr::Printed,
        frames: with_main(&["read_at", "trigger_null_deref"]),
        // read_at has a frame record: on arm64 LR equals its saved return address and must not add a frame.
        once: &["trigger_null_deref"],
        others_allocate: false,
        minimal: false,
        crashes: 1,
        reports: 1,
        kept_aside: 0,
        limit: LIMIT,
    }
);

/// The defaults most triggers share: a SIGSEGV null read on the thread that prints FAULT_TID.
const NULL_READ: Expect = Expect {
    trigger: "",
    exit_signal: &[SIGSEGV],
    signal: SIGSEGV,
    si_code: Some(SEGV_MAPERR),
    addr: Addr::Printed,
    frames: &[],
    once: &[],
    others_allocate: false,
    minimal: false,
    crashes: 1,
    reports: 1,
    kept_aside: 0,
    limit: LIMIT,
};

crash_test!(
    ro_write,
    Expect {
        trigger: "ro_write",
        si_code: Some(SEGV_ACCERR),
        frames: with_main(&["write_at", "trigger_ro_write"]),
        ..NULL_READ
    }
);

crash_test!(
    sigbus_past_end_of_file,
    Expect {
        trigger: "sigbus",
        exit_signal: &[SIGBUS],
        signal: SIGBUS,
        si_code: Some(BUS_ADRERR),
        frames: with_main(&["read_at", "trigger_sigbus"]),
        ..NULL_READ
    }
);

crash_test!(
    sigill,
    Expect {
        trigger: "sigill",
        exit_signal: &[SIGILL],
        signal: SIGILL,
        si_code: if cfg!(target_arch = "x86_64") { Some(ILL_ILLOPN) } else { None },
        addr: Addr::Pc,
        frames: with_main(&["trigger_sigill"]),
        ..NULL_READ
    }
);

#[cfg(target_arch = "x86_64")]
crash_test!(
    sigfpe_integer_divide_by_zero,
    Expect {
        trigger: "sigfpe",
        exit_signal: &[SIGFPE],
        signal: SIGFPE,
        si_code: Some(FPE_INTDIV),
        addr: Addr::Pc,
        frames: with_main(&["trigger_sigfpe"]),
        ..NULL_READ
    }
);

// arm64 integer division by zero does not trap; the client raises SIGFPE instead.
#[cfg(not(target_arch = "x86_64"))]
crash_test!(
    sigfpe_raised,
    Expect {
        trigger: "sigfpe",
        exit_signal: &[SIGFPE],
        signal: SIGFPE,
        si_code: Some(SI_TKILL),
        addr: Addr::None,
        ..NULL_READ
    }
);

crash_test!(
    abort,
    Expect {
        trigger: "abort",
        exit_signal: &[SIGABRT],
        signal: SIGABRT,
        si_code: Some(SI_TKILL),
        addr: Addr::None,
        frames: with_main(&["trigger_abort"]),
        ..NULL_READ
    }
);

// ---------------------------------------------------------------------------------------------------------------
// Why it crashed (issue 16): the panic, the uncaught C++ exception, the C library's abort message and the app's
// reason are in the decoded report and in the viewer's text; recording them allocated nothing after the fault
// (`check` asserts zero allocations for each of these runs).

/// The viewer's Apple-layout text of the run's one report (unsymbolicated).
fn viewer_text(run: &Run) -> String {
    let bytes = std::fs::read(&run.reports[0]).expect("read report");
    viewer::render_bytes(&bytes).expect("the viewer renders the report")
}

/// [`check`], plus the viewer's text of the report (read before the run directory goes away).
fn check_with_text(e: &Expect) -> (Run, Report, String) {
    let base = tempfile::tempdir().expect("tempdir");
    let (run, r, _, _) = check_in(e, base.path());
    let text = viewer_text(&run);
    (run, r, text)
}

#[test]
fn rust_panic_with_abort() {
    let (run, r, text) = check_with_text(&Expect {
        trigger: "panic",
        exit_signal: &[SIGABRT],
        signal: SIGABRT,
        si_code: Some(SI_TKILL),
        addr: Addr::None,
        frames: with_main(&["trigger_panic"]),
        ..NULL_READ
    });
    let at = run.out_value("PANIC_AT").expect("the client printed the panic's location");
    let lx = r.exception.as_ref().and_then(|e| e.language.as_ref()).expect("EXCEPTION lx");
    assert_eq!(lx.kind, "rust");
    assert_eq!(lx.reason.as_deref(), Some("deliberate panic from the crash client"));
    assert_eq!(lx.location.as_deref(), Some(at));
    assert_eq!(lx.thread_id, r.crashed_thread().and_then(|t| t.id), "the panicking thread is the crashed one");
    assert_eq!(lx.type_name, None);
    let want = format!(
        "Triggered by Thread:  {}\n\nApplication Specific Information:\npanicked at {at}:\n\
         deliberate panic from the crash client\n\n\n",
        r.crashed_thread().expect("crashed").index
    );
    assert!(text.contains(&want), "viewer text lacks\n{want}\nin\n{text}");
}

/// The crash client built the way users build a `panic = "abort"` app: the `panic-abort` profile (root
/// Cargo.toml: `inherits = "dev"`, `panic = "abort"`), so the `panic_abort` runtime, not a hook, ends a panic.
/// `CRASH_TESTS_PANIC_ABORT_CLIENT` when set (scripts/test-arm64.sh builds the aarch64 one and sets it; required
/// under the emulator), else `cargo build --profile panic-abort -p crash-tests --bin crash-client` into
/// `<target>/panic-abort-client` ([`crash_tests::cargo_build`]: the running `cargo test` holds its own target
/// directory's lock). Its dependencies build once per target directory (about a minute from cold on 2 cores).
fn panic_abort_client() -> &'static Path {
    static CLIENT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    CLIENT.get_or_init(|| {
        if let Some(p) = std::env::var_os("CRASH_TESTS_PANIC_ABORT_CLIENT") {
            return p.into();
        }
        assert!(
            crash_tests::runner().is_none(),
            "under the emulator the panic = \"abort\" client comes from CRASH_TESTS_PANIC_ABORT_CLIENT \
             (scripts/test-arm64.sh builds it and sets it)"
        );
        let target = Path::new(env!("CARGO_TARGET_TMPDIR")).parent().expect("target dir").join("panic-abort-client");
        crash_tests::cargo_build(
            "the panic = \"abort\" crash client",
            &["--profile", "panic-abort", "-p", "crash-tests", "--bin", "crash-client"],
            &target,
        )
        .join("panic-abort")
        .join("crash-client")
    })
}

/// The panic cases: SIGABRT (`SI_TKILL`: `abort(3)` raises it), zero allocations after the fault, the trigger
/// function on the crashed thread's stack.
const PANIC: Expect =
    Expect { exit_signal: &[SIGABRT], signal: SIGABRT, si_code: Some(SI_TKILL), addr: Addr::None, ..NULL_READ };

/// Runs a panic trigger with `client`; returns the run, its report and the viewer's text. Checks the build really
/// is the one wanted (`PANIC_STRATEGY`, which the client prints from `cfg!(panic)`).
fn panic_case(client: &Path, strategy: &str, e: &Expect) -> (Run, Report, String) {
    let base = tempfile::tempdir().expect("tempdir");
    let (run, r, _, _) = check_client(client, e, base.path());
    assert_eq!(run.out_value("PANIC_STRATEGY"), Some(strategy), "{}: the client's build", client.display());
    let text = viewer_text(&run);
    (run, r, text)
}

/// A real `panic = "abort"` build: the panic hook chain ran (the handler's hook recorded the message and location)
/// and the `panic_abort` runtime aborted; the report and the viewer's text carry the panic as in the imitated case.
#[test]
fn rust_panic_in_a_panic_abort_build() {
    let (run, r, text) = panic_case(
        panic_abort_client(),
        "abort",
        &Expect { trigger: "panic", frames: with_main(&["trigger_panic"]), ..PANIC },
    );
    let at = run.out_value("PANIC_AT").expect("the client printed the panic's location");
    let lx = r.exception.as_ref().and_then(|e| e.language.as_ref()).expect("EXCEPTION lx");
    assert_eq!(lx.kind, "rust");
    assert_eq!(lx.reason.as_deref(), Some("deliberate panic from the crash client"));
    assert_eq!(lx.location.as_deref(), Some(at));
    assert_eq!(lx.thread_id, r.crashed_thread().and_then(|t| t.id), "the panicking thread is the crashed one");
    assert!(r.messages.iter().all(|m| m.source.as_deref() != Some("panic")), "one panic, no earlier one");
    let want = format!(
        "Triggered by Thread:  {}\n\nApplication Specific Information:\npanicked at {at}:\n\
         deliberate panic from the crash client\n\n\n",
        r.crashed_thread().expect("crashed").index
    );
    assert!(text.contains(&want), "viewer text lacks\n{want}\nin\n{text}");
}

/// `panic = "abort"`: a panic in an `extern "C"` function aborts at once, with the panic's own message.
#[test]
fn rust_panic_in_an_extern_c_function_in_a_panic_abort_build() {
    let (run, r, text) = panic_case(
        panic_abort_client(),
        "abort",
        &Expect {
            trigger: "panic_extern_c",
            frames: with_main(&["panics_in_c_abi", "trigger_panic_extern_c"]),
            ..PANIC
        },
    );
    let at = run.out_value("PANIC_AT").expect("the client printed the panic's location");
    let lx = r.exception.as_ref().and_then(|e| e.language.as_ref()).expect("EXCEPTION lx");
    assert_eq!(lx.kind, "rust");
    assert_eq!(lx.reason.as_deref(), Some("deliberate panic in an extern \"C\" function"));
    assert_eq!(lx.location.as_deref(), Some(at));
    let want =
        format!("Application Specific Information:\npanicked at {at}:\ndeliberate panic in an extern \"C\" function\n");
    assert!(text.contains(&want), "viewer text lacks\n{want}\nin\n{text}");
}

/// `panic = "unwind"` (the ordinary build, no hook imitating abort): the panic unwinds to the `extern "C"`
/// boundary, where the runtime raises a second panic that cannot unwind and aborts. The report's language
/// exception is that newest panic of the thread (std's message, a location in core); the original panic's message
/// (without its location) is the `panic` message (handler/README.md, "Which panic"); the viewer prints both.
#[test]
fn rust_panic_in_an_extern_c_function_cannot_unwind() {
    let (_, r, text) = panic_case(
        client(),
        "unwind",
        &Expect { trigger: "panic_extern_c", frames: with_main(&["trigger_panic_extern_c"]), ..PANIC },
    );
    let lx = r.exception.as_ref().and_then(|e| e.language.as_ref()).expect("EXCEPTION lx");
    assert_eq!(lx.kind, "rust");
    assert_eq!(lx.reason.as_deref(), Some("panic in a function that cannot unwind"));
    assert!(lx.location.as_deref().is_some_and(|l| l.contains("core/src/panicking.rs:")), "{:?}", lx.location);
    assert_eq!(lx.thread_id, r.crashed_thread().and_then(|t| t.id));
    let first = r.messages.iter().find(|m| m.source.as_deref() == Some("panic")).expect("the original panic");
    assert_eq!(first.text, "deliberate panic in an extern \"C\" function", "its message (the location is not kept)");
    assert!(text.contains("Application Specific Information:\npanicked at "), "{text}");
    assert!(text.contains("panic in a function that cannot unwind\n"), "{text}");
    assert!(text.contains(&first.text), "viewer text lacks the original panic {:?}\n{text}", first.text);
}

#[test]
fn failed_c_assert_keeps_the_c_library_message() {
    let (_, r, text) = check_with_text(&Expect {
        trigger: "c_assert",
        exit_signal: &[SIGABRT],
        signal: SIGABRT,
        si_code: Some(SI_TKILL),
        addr: Addr::None,
        frames: with_main(&["trigger_c_assert"]),
        ..NULL_READ
    });
    // glibc's text (assert/assert.c): "<program>: <file>:<line>: <function>: Assertion `<expr>' failed."
    let want = "crash-client: widgets.c:42: widget_open: Assertion `widget != NULL' failed.";
    let m = r.messages.iter().find(|m| m.source.as_deref() == Some("abort")).expect("abort message");
    assert_eq!(m.text, want);
    assert!(r.exception.as_ref().is_some_and(|e| e.language.is_none()), "no language exception");
    assert!(text.contains(&format!("Application Specific Information:\n{want}\n")), "{text}");
}

#[test]
fn abort_with_the_apps_reason_and_user_values() {
    let (_, r, text) = check_with_text(&Expect {
        trigger: "app_reason",
        exit_signal: &[SIGABRT],
        signal: SIGABRT,
        si_code: Some(SI_TKILL),
        addr: Addr::None,
        frames: with_main(&["call_abort", "trigger_app_reason"]),
        ..NULL_READ
    });
    let m = r.messages.iter().find(|m| m.source.as_deref() == Some("app")).expect("app reason");
    assert_eq!(m.text, "saving document 42 to disk");
    assert!(r.messages.iter().all(|m| m.source.as_deref() != Some("abort")), "plain abort() leaves no C message");
    assert_eq!(r.user.get("screen").map(String::as_str), Some("editor"));
    let want = "Application Specific Information:\nsaving document 42 to disk\n\n\nUser Values:\nscreen: editor\n\n\n";
    assert!(text.contains(want), "viewer text lacks\n{want}\nin\n{text}");
}

/// Builds tests/c/cxx_throw.cpp into `<run dir>/libcxxthrow.so`; returns its path.
fn build_cxx_library(run_dir: &Path) -> std::path::PathBuf {
    std::fs::create_dir_all(run_dir).expect("run dir");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("c/cxx_throw.cpp");
    let lib = run_dir.join("libcxxthrow.so");
    let cxx = compiler("CRASH_TESTS_CXX", "aarch64-linux-gnu-g++", "c++");
    build_shared_library(&cxx, &["-O1", "-pthread"], &src, &lib);
    lib
}

/// An uncaught C++ exception thrown on a thread of a C++ library: the terminate handler recorded its type and,
/// for a `std::exception`, `what()`; the crashed thread is the thrower, its stack still holds the throw site.
fn cxx_case(trigger: &'static str, throw_fn: &str) -> (Report, String) {
    let base = tempfile::tempdir().expect("tempdir");
    let lib = build_cxx_library(&base.path().join(trigger));
    let (run, r, _, _) = check_in(
        &Expect {
            trigger,
            exit_signal: &[SIGABRT],
            signal: SIGABRT,
            si_code: Some(SI_TKILL),
            addr: Addr::None,
            ..NULL_READ
        },
        base.path(),
    );
    let lib = std::fs::canonicalize(&lib).expect("library path");
    let img = r
        .images
        .iter()
        .find(|i| i.path.as_deref().map(Path::new) == Some(lib.as_path()))
        .unwrap_or_else(|| panic!("{} missing from the image list", lib.display()));
    let names = symbolicate(&Symbolizer::new(&lib), img, r.crashed_thread().expect("crashed thread"));
    assert!(find_in_order(&names, &[throw_fn, "thrower"]).is_ok(), "throw site not on the crashed stack: {names:#?}");
    let text = viewer_text(&run);
    (r, text)
}

#[test]
fn uncaught_cxx_runtime_error() {
    let (r, text) = cxx_case("cxx_runtime_error", "cxx_throw_runtime_error");
    let lx = r.exception.as_ref().and_then(|e| e.language.as_ref()).expect("EXCEPTION lx");
    assert_eq!(lx.kind, "c++");
    assert_eq!(lx.type_name.as_deref(), Some("St13runtime_error"));
    assert_eq!(lx.reason.as_deref(), Some("the widget registry is empty"));
    assert_eq!(lx.thread_id, r.crashed_thread().and_then(|t| t.id));
    let want = "Application Specific Information:\n\
                terminating due to uncaught exception of type std::runtime_error: the widget registry is empty\n";
    assert!(text.contains(want), "viewer text lacks\n{want}\nin\n{text}");
}

#[test]
fn uncaught_cxx_exception_of_a_non_std_type() {
    let (r, text) = cxx_case("cxx_non_std", "cxx_throw_non_std");
    let lx = r.exception.as_ref().and_then(|e| e.language.as_ref()).expect("EXCEPTION lx");
    assert_eq!(lx.kind, "c++");
    assert_eq!(lx.type_name.as_deref(), Some("N9crashtest14NotAnExceptionE"));
    assert_eq!(lx.reason, None, "no what() for a type not derived from std::exception");
    let want =
        "Application Specific Information:\nterminating due to uncaught exception of type crashtest::NotAnException\n";
    assert!(text.contains(want), "viewer text lacks\n{want}\nin\n{text}");
}

// The previous SIGSEGV handler is Rust std's stack-overflow reporter: after our report it prints "has overflowed
// its stack" and aborts, so the process may end with SIGABRT (chaining to earlier handlers is the design).
crash_test!(
    stack_overflow_main_thread,
    Expect {
        trigger: "stack_overflow_main",
        exit_signal: &[SIGSEGV, SIGABRT],
        si_code: None,
        addr: Addr::Any,
        frames: with_main(&["recurse", "trigger_stack_overflow"]),
        ..NULL_READ
    }
);

crash_test!(
    stack_overflow_spawned_thread,
    Expect {
        trigger: "stack_overflow_thread",
        exit_signal: &[SIGSEGV, SIGABRT],
        si_code: None,
        addr: Addr::Any,
        frames: &["recurse", "trigger_stack_overflow", "thread_body_overflow"],
        ..NULL_READ
    }
);

// A stack overflow on a thread made with raw `pthread_create` (a C or C++ thread, or any thread of a host that
// loads us as a library): the kernel can deliver SIGSEGV only on an alternate signal stack, which the handler's
// `pthread_create` wrapper gives every new thread. std's SIGSEGV handler, which runs after ours, does not know the
// thread and restores the default action, so the process dies by SIGSEGV.
crash_test!(
    stack_overflow_pthread_create_thread,
    Expect {
        trigger: "stack_overflow_pthread",
        exit_signal: &[SIGSEGV, SIGABRT],
        si_code: None,
        addr: Addr::Any,
        frames: &["recurse", "trigger_stack_overflow", "thread_body_overflow"],
        ..NULL_READ
    }
);

crash_test!(
    spawned_rust_thread,
    Expect { trigger: "thread_crash", frames: &["read_at", "trigger_null_deref", "thread_body_crash"], ..NULL_READ }
);

crash_test!(
    pthread_create_thread,
    Expect {
        trigger: "pthread_crash",
        frames: &["read_at", "trigger_null_deref", "thread_body_crash", "pthread_entry",],
        ..NULL_READ
    }
);

crash_test!(
    two_hundred_live_threads,
    Expect { trigger: "threads200", frames: with_main(&["read_at", "trigger_null_deref"]), ..NULL_READ }
);

crash_test!(
    while_another_thread_allocates,
    Expect {
        trigger: "alloc_loop",
        frames: with_main(&["read_at", "trigger_null_deref"]),
        others_allocate: true,
        ..NULL_READ
    }
);

// Out of file descriptors (EMFILE) when the crash comes: the report file and /proc/self/task still open (the
// handler reserved spare descriptors at install and frees them at crash time).
crash_test!(
    out_of_file_descriptors,
    Expect { trigger: "emfile", frames: with_main(&["read_at", "trigger_null_deref"]), ..NULL_READ }
);

crash_test!(
    fault_inside_the_handler_leaves_a_minimal_report,
    Expect { trigger: "handler_fault", frames: &["read_at"], minimal: true, ..NULL_READ }
);

// Both threads print (allocating) right before they fault, so one may still be allocating when the other's crash
// starts; the crash thread itself must not allocate.
crash_test!(
    two_threads_fault_together,
    Expect {
        trigger: "two_threads",
        others_allocate: true,
        frames: &["read_at", "trigger_null_deref", "thread_body_crash"],
        ..NULL_READ
    }
);

// arm64: `brk #1` (what Rust's `intrinsics::abort` and Swift's traps compile to) is a SIGTRAP with TRAP_BRKPT at
// the brk instruction; the handler re-sends SIGTRAP after the report.
#[cfg(target_arch = "aarch64")]
crash_test!(
    brk_is_sigtrap,
    Expect {
        trigger: "brk",
        exit_signal: &[SIGTRAP],
        signal: SIGTRAP,
        si_code: Some(TRAP_BRKPT),
        addr: Addr::Pc,
        frames: with_main(&["trigger_brk"]),
        once: &["trigger_brk"],
        ..NULL_READ
    }
);

// arm64: a crash in a leaf with no frame record (hand-written assembly). Its caller is only in LR: it must appear
// once, as frame 1, not be lost (no LR) or doubled.
#[cfg(target_arch = "aarch64")]
crash_test!(
    leaf_function_without_frame_record,
    Expect {
        trigger: "leaf",
        frames: with_main(&["crash_client_leaf_load", "trigger_leaf"]),
        once: &["crash_client_leaf_load", "trigger_leaf", "run_trigger"],
        ..NULL_READ
    }
);

/// The first report of a process is written into the file the handler reserved at install (the same inode): no
/// file is created after the fault, nothing of the reservation is left behind, and the file holds the report,
/// intact, followed by the reservation's zeros (format 2.4 zero padding, not cut after the fault).
#[test]
fn the_first_report_is_written_into_the_file_reserved_at_install() {
    use std::os::unix::fs::MetadataExt;
    let base = tempfile::tempdir().expect("tempdir");
    let run = run(client(), "null_deref", base.path(), LIMIT);
    let ctx = format!("stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    let reserved: Vec<u64> =
        run.stdout.lines().filter_map(|l| l.strip_prefix("RESERVED ")).filter_map(|n| n.parse().ok()).collect();
    assert_eq!(reserved.len(), 1, "one reservation after install; {ctx}");
    assert_eq!(run.signal, Some(SIGSEGV), "{ctx}");
    assert_eq!(run.count("all_allocs"), Some(0), "{ctx}");
    assert_eq!(run.reports.len(), 1, "{ctx}");
    assert!(run.leftovers.is_empty(), "files left: {:?}; {ctx}", run.leftovers);
    let ino = std::fs::metadata(&run.reports[0]).expect("report").ino();
    assert_eq!(ino, reserved[0], "the report is the reserved file, renamed; {ctx}");
    let d = report_format::decode(&std::fs::read(&run.reports[0]).expect("read")).expect("decodes");
    assert!(d.is_intact(), "{:?}; {ctx}", d.problems);
    assert!(d.padding > 0, "the zeros beyond the report are left in place; {ctx}");
}

/// A process that ends without a crash leaves its reservation (unused, unlocked, all zeros), and the next launch's
/// install claims it instead of creating one: that launch's report is written into the earlier process's file
/// (same inode), and nothing is left but the report.
#[test]
fn a_later_launch_writes_its_report_into_the_reservation_an_earlier_process_left() {
    use std::os::unix::fs::MetadataExt;
    let base = tempfile::tempdir().expect("tempdir");
    let first = run(client(), "refresh_images", base.path(), LIMIT);
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    assert!(first.leftovers.is_empty(), "{:?}", first.leftovers);
    assert_eq!(first.spares.len(), 1, "an ended process leaves its unused reservation, all zeros");
    let spare_ino = std::fs::metadata(&first.spares[0]).expect("spare").ino();
    // The next launch, in the same report directory.
    std::fs::create_dir_all(base.path().join("null_deref")).expect("dir");
    std::fs::rename(first.dir.join("reports"), base.path().join("null_deref/reports")).expect("move");
    let run = run(client(), "null_deref", base.path(), LIMIT);
    let ctx = format!("stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    let reserved: Vec<u64> =
        run.stdout.lines().filter_map(|l| l.strip_prefix("RESERVED ")).filter_map(|n| n.parse().ok()).collect();
    assert_eq!(reserved, vec![spare_ino], "install claimed the spare and created no other; {ctx}");
    assert_eq!(run.signal, Some(SIGSEGV), "{ctx}");
    assert_eq!(run.count("all_allocs"), Some(0), "{ctx}");
    assert_eq!(run.reports.len(), 1, "{ctx}");
    assert!(run.leftovers.is_empty() && run.spares.is_empty(), "left: {:?} {:?}; {ctx}", run.leftovers, run.spares);
    assert_eq!(std::fs::metadata(&run.reports[0]).expect("report").ino(), spare_ino, "{ctx}");
    let d = report_format::decode(&std::fs::read(&run.reports[0]).expect("read")).expect("decodes");
    assert!(d.is_intact(), "{:?}; {ctx}", d.problems);
}

/// The reserved file was synced early, once, by one of the two parked threads (stopped, not the crashed thread,
/// which writes the report), and the report is that file, intact, written without an allocation.
fn assert_synced_early_by_a_parked_thread(run: &Run, reserved_ino: u64) {
    use std::os::unix::fs::MetadataExt;
    let ctx = format!("stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    assert_eq!(run.signal, Some(SIGSEGV), "{ctx}");
    assert_eq!(run.count("all_allocs"), Some(0), "{ctx}");
    assert_eq!(run.count("early_syncs"), Some(1), "one early sync; {ctx}");
    let parked: Vec<u64> =
        run.stdout.lines().filter_map(|l| l.strip_prefix("THREAD ")).filter_map(|t| t.parse().ok()).collect();
    assert_eq!(parked.len(), 2, "{ctx}");
    let tid = run.count("early_sync_tid").expect("tid");
    assert!(parked.contains(&tid), "made by a stopped thread ({tid}), not the owner; {ctx}");
    assert_eq!(run.reports.len(), 1, "{ctx}");
    assert_eq!(std::fs::metadata(&run.reports[0]).expect("report").ino(), reserved_ino, "{ctx}");
    let d = report_format::decode(&std::fs::read(&run.reports[0]).expect("read")).expect("decodes");
    assert!(d.is_intact(), "{:?}; {ctx}", d.problems);
}

/// A reservation created at this launch (its inode, directory entry and blocks not yet committed by the file
/// system) is synced early by a stopped thread while the crashed thread goes on.
#[test]
fn a_stopped_thread_syncs_the_reservation_created_at_this_launch_early() {
    let base = tempfile::tempdir().expect("tempdir");
    let run = run(client(), "parked", base.path(), LIMIT);
    let reserved: Vec<u64> =
        run.stdout.lines().filter_map(|l| l.strip_prefix("RESERVED ")).filter_map(|n| n.parse().ok()).collect();
    assert_eq!(reserved.len(), 1, "stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    assert_synced_early_by_a_parked_thread(&run, reserved[0]);
}

/// A reservation an earlier launch left (committed long ago) is synced early too: nothing of it is dirty, so the
/// early `fdatasync` only flushes the drive's cache, ahead of the crash's own.
#[test]
fn a_stopped_thread_syncs_the_reservation_an_earlier_launch_left_early() {
    use std::os::unix::fs::MetadataExt;
    let base = tempfile::tempdir().expect("tempdir");
    let first = run(client(), "refresh_images", base.path(), LIMIT);
    assert_eq!(first.code, Some(0), "{}", first.stderr);
    assert_eq!(first.spares.len(), 1, "an ended process leaves its unused reservation");
    let spare_ino = std::fs::metadata(&first.spares[0]).expect("spare").ino();
    std::fs::create_dir_all(base.path().join("parked")).expect("dir");
    std::fs::rename(first.dir.join("reports"), base.path().join("parked/reports")).expect("move");
    let run = run(client(), "parked", base.path(), LIMIT);
    assert!(run.spares.is_empty(), "the spare was claimed: {:?}", run.spares);
    assert_synced_early_by_a_parked_thread(&run, spare_ino);
}

/// A disk that fills up (here: `RLIMIT_FSIZE` of 24 bytes, lowered by the crash hook, so writes fail with `EFBIG`;
/// the limit applies to every write past it, so inside the reserved file too) before the head sections (file
/// header, META, EXCEPTION) are on disk: no file is committed as a report, and the file is removed (a headerless
/// file would be taken for a finished report). The process still dies by its signal, without allocating.
#[test]
fn disk_full_before_the_head_is_written_commits_nothing() {
    let base = tempfile::tempdir().expect("tempdir");
    let run = run(client(), "disk_full_in_head", base.path(), LIMIT);
    let ctx = format!("stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    assert_eq!(run.signal, Some(SIGSEGV), "{ctx}");
    assert_eq!(run.count("starts"), Some(1), "{ctx}");
    assert_eq!(run.count("ends"), Some(1), "{ctx}");
    assert_eq!(run.count("all_allocs"), Some(0), "{ctx}");
    assert!(run.reports.is_empty(), "a report without its head was committed: {:?}; {ctx}", run.reports);
    assert!(run.leftovers.is_empty(), "temporary files left: {:?}; {ctx}", run.leftovers);
}

/// The disk fills up after the head sections (4 KiB: head, user values, part of the threads): the file is
/// committed, torn, and its head decodes (the exception is there), so the crash is not lost.
#[test]
fn disk_full_after_the_head_commits_a_torn_report() {
    let base = tempfile::tempdir().expect("tempdir");
    let run = run(client(), "disk_full_after_head", base.path(), LIMIT);
    let ctx = format!("stdout:\n{}\nstderr:\n{}", run.stdout, run.stderr);
    assert_eq!(run.signal, Some(SIGSEGV), "{ctx}");
    assert_eq!(run.count("all_allocs"), Some(0), "{ctx}");
    assert_eq!(run.reports.len(), 1, "{ctx}");
    assert!(run.leftovers.is_empty(), "{:?}", run.leftovers);
    let bytes = std::fs::read(&run.reports[0]).expect("read");
    // The report went into the 64 KiB file reserved at install: the write stopped at the limit, and the
    // reservation's zeros follow (they are left in place, format 2.4).
    assert_eq!(bytes.len(), 65536, "the reserved file");
    assert!(bytes[4096..].iter().all(|b| *b == 0), "nothing written past the limit");
    let d = report_format::decode(&bytes).expect("decodes");
    assert!(!d.is_intact() && !d.end_found, "torn on purpose");
    assert!(d.report.meta.is_some(), "{:?}", d.problems);
    assert_eq!(d.report.exception.as_ref().and_then(|e| e.signal), Some(SIGSEGV));
}

/// The compiler for a test's shared library: `$env_var` when set, else the aarch64 cross compiler `cross` when the
/// tests run under an emulator (scripts/test-arm64.sh), else `native`. C: `CRASH_TESTS_CC`, `aarch64-linux-gnu-gcc`,
/// `cc`; C++: `CRASH_TESTS_CXX`, `aarch64-linux-gnu-g++`, `c++`.
fn compiler(env_var: &str, cross: &str, native: &str) -> String {
    std::env::var(env_var).unwrap_or_else(|_| {
        if cfg!(target_arch = "aarch64") && crash_tests::runner().is_some() {
            cross.into()
        } else {
            native.into()
        }
    })
}

/// Compiles `src` into the shared library `lib` with `compiler` and `flags` (plus `-shared -fPIC -g` and a SHA-1
/// build id); panics with the compiler's output when it fails.
fn build_shared_library(compiler: &str, flags: &[&str], src: &Path, lib: &Path) {
    let out = std::process::Command::new(compiler)
        .args(["-shared", "-fPIC", "-g", "-Wl,--build-id=sha1"])
        .args(flags)
        .arg("-o")
        .arg(lib)
        .arg(src)
        .output()
        .unwrap_or_else(|e| panic!("run {compiler}: {e}"));
    assert!(out.status.success(), "{compiler} failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// A library `dlopen`ed after install (the install snapshot cannot know it; `refresh_images` is never called)
/// and a crash inside it: the report's image list holds the library, with the build id read from the file, and
/// the crashing pc lies in its text range; the client's frames below it are found.
#[test]
fn crash_inside_a_library_dlopened_after_install() {
    let base = tempfile::tempdir().expect("tempdir");
    let run_dir = base.path().join("dlopen");
    std::fs::create_dir_all(&run_dir).expect("run dir");
    let src = run_dir.join("crashme.c");
    std::fs::write(
        &src,
        "__attribute__((noinline)) void crashme_inner(volatile int *p) { *p = 42; }\n\
         void crashme_write(volatile int *p) { crashme_inner(p); }\n",
    )
    .expect("write C source");
    let lib = run_dir.join("libcrashme.so");
    let cc = compiler("CRASH_TESTS_CC", "aarch64-linux-gnu-gcc", "cc");
    build_shared_library(&cc, &["-O0", "-fno-omit-frame-pointer"], &src, &lib);

    let (_, r, _, _) = check_in(
        &Expect {
            trigger: "dlopen",
            // Frames 0 and 1 are in the library; the client's frames follow.
            frames: with_main(&["trigger_dlopen"]),
            ..NULL_READ
        },
        base.path(),
    );
    let lib = std::fs::canonicalize(&lib).expect("library path");
    let img = r
        .images
        .iter()
        .find(|i| i.path.as_deref().map(Path::new) == Some(lib.as_path()))
        .unwrap_or_else(|| panic!("{} missing from the image list: {:#?}", lib.display(), r.images));
    let data = std::fs::read(&lib).expect("read library");
    let file = object::read::File::parse(&*data).expect("parse library");
    let file_id = object::Object::build_id(&file).expect("notes").map(<[u8]>::to_vec);
    assert!(file_id.is_some(), "the library has a build id");
    assert_eq!(crash_tests::id_bytes(img).map(<[u8]>::to_vec), file_id, "build id");
    let crashed = r.crashed_thread().expect("crashed thread");
    let pc = crashed.frames.first().copied().expect("frame 0");
    assert!(pc >= img.load_address && pc - img.load_address < img.size, "pc {pc:#x} outside {img:#x?}");
    let note = r.meta.as_ref().and_then(|m| m.note.clone()).unwrap_or_default();
    assert!(!note.contains("link map"), "the link map was read: {note}");
}

// ---------------------------------------------------------------------------------------------------------------
// Faults survived, and signals around the crash (issue 13).

/// Whether the client runs under qemu-user (scripts/test-arm64.sh), and a test depends on something the emulator
/// does not reproduce: prints why and returns true, so the test ends without checking.
fn emulator_lacks(what: &str) -> bool {
    if crash_tests::runner().is_some() {
        eprintln!("not checked under the emulator: {what}");
        return true;
    }
    false
}

/// A hang fails in this time, not in [`LIMIT`].
const HANG_LIMIT: Duration = Duration::from_secs(30);

// A sampling profiler's SIGPROF/SIGALRM timers (50 µs, `SA_ONSTACK`) keep firing during the crash: no handler but
// the fatal ones may run on our stacks, or the live signal frame is overwritten (seen here: the process spins
// forever, or dies by the wrong signal in about a third of the runs). Several runs, to see it.
#[test]
fn profiler_timer_during_the_crash() {
    for _ in 0..6 {
        let _ = check(&Expect {
            trigger: "profiler_timer",
            frames: with_main(&["read_at", "trigger_null_deref"]),
            limit: HANG_LIMIT,
            ..NULL_READ
        });
    }
}

// A fault the first-chance handler recovers writes nothing and stops nobody; the real crash that follows is
// reported once.
#[test]
fn first_chance_handler_recovers_a_fault_then_a_real_crash_is_reported() {
    let (run, ..) = check(&Expect {
        trigger: "first_chance",
        frames: with_main(&["read_at", "trigger_null_deref", "trigger_recovered_then_real"]),
        limit: HANG_LIMIT,
        ..NULL_READ
    });
    assert!(run.stdout.contains("RECOVERED "), "{}", run.stdout);
}

// A previous SIGSEGV handler (a runtime's, installed before ours) recovers one fault; our report of it is kept
// aside as `<id>.recovered`, our handlers stay installed, and the real crash that follows gets its own report.
#[test]
fn previous_handler_recovers_a_fault_then_a_real_crash_is_reported() {
    let (run, r, aside, _) = check(&Expect {
        trigger: "recovering_prev",
        frames: with_main(&["read_at", "trigger_null_deref", "trigger_recovered_then_real"]),
        crashes: 2,
        kept_aside: 1,
        limit: HANG_LIMIT,
        ..NULL_READ
    });
    let page = run.out_value("RECOVERED").and_then(|v| v.split(' ').nth(1)).expect("recovered page");
    let page = u64::from_str_radix(page, 16).expect("hex");
    assert_eq!(aside[0].exception.as_ref().and_then(|x| x.fault_address), Some(page), "the survived fault");
    assert_eq!(r.exception.as_ref().and_then(|x| x.fault_address), Some(0), "the real crash");
}

// SIGSEGV sent to the crashing thread (`si_code` SI_TKILL) while it handles the crash is not a fault in the
// handler: the report stays a full one.
crash_test!(
    asynchronous_fatal_signal_during_the_crash,
    Expect {
        trigger: "async_segv",
        frames: with_main(&["read_at", "trigger_null_deref"]),
        limit: HANG_LIMIT,
        ..NULL_READ
    }
);

// A thread blocking every signal is found (`SigBlk`) and given up on in milliseconds, with the reason.
#[test]
fn thread_blocking_all_signals_is_expired_quickly() {
    if emulator_lacks(
        "/proc/<pid>/task/<tid>/status SigBlk shows qemu-user's host thread mask in host signal numbers (a guest \
         blocking every signal reads fffffff87ffbfabf there), not the guest's blocked signals",
    ) {
        return;
    }
    let (run, r, ..) = check(&Expect {
        trigger: "blocked_thread",
        frames: with_main(&["read_at", "trigger_null_deref"]),
        limit: HANG_LIMIT,
        ..NULL_READ
    });
    let blocker: u64 = run.out_value("BLOCKER").expect("blocker tid").parse().expect("tid");
    let t = r.threads.iter().find(|t| t.id == Some(blocker)).expect("blocking thread in the report");
    assert!(!t.captured, "{t:?}");
    let why = t.not_captured_reason.as_deref().unwrap_or("");
    assert!(why.contains("blocks the stop signal"), "{why}");
    let us = run.count("crash_us").expect("crash time");
    assert!(us < 50_000, "crash took {us} µs (the full stop timeout is 1 s)");
}

// Two threads fault at once with different signals (SIGSEGV, SIGILL): the owner's signal is in the report and
// ends the process. Run several times: which thread wins varies.
#[test]
fn two_threads_with_different_signals_exit_with_the_owners() {
    for _ in 0..4 {
        let (run, r, ..) = check(&Expect {
            trigger: "two_signals",
            exit_signal: &[SIGSEGV, SIGILL],
            signal: 0,
            si_code: None,
            addr: Addr::Any,
            others_allocate: true,
            limit: HANG_LIMIT,
            ..NULL_READ
        });
        let crashed = r.crashed_thread().expect("crashed");
        let want = match crashed.name.as_deref() {
            Some("sigill") => SIGILL,
            Some("sigsegv") => SIGSEGV,
            other => panic!("crashed thread {other:?}"),
        };
        assert_eq!(run.signal, Some(want), "exit signal of the owner ({:?})", crashed.name);
    }
}

// A thread keeps creating threads during the crash (it blocks signals, so it is not stopped): threads that
// started after the first stop round (the client's hook waits for one) are in the report, captured (the thread
// list is read again after the stop).
#[test]
fn threads_created_during_the_crash_are_in_the_report() {
    if emulator_lacks(
        "under qemu-user no thread started during the crash was seen in the report (cause not found; the case \
         passes natively)",
    ) {
        return;
    }
    let (run, r, ..) = check(&Expect {
        trigger: "spawner",
        frames: with_main(&["read_at", "trigger_null_deref"]),
        others_allocate: true,
        limit: HANG_LIMIT,
        ..NULL_READ
    });
    let late = run.counts_of("late_tid");
    assert!(!late.is_empty(), "no thread started during the crash; {}", run.stdout);
    let found: Vec<&report_format::model::Thread> =
        r.threads.iter().filter(|t| t.id.is_some_and(|id| late.contains(&id))).collect();
    assert!(!found.is_empty(), "none of the threads created during the crash {late:?} is in the report");
    assert!(found.iter().any(|t| t.captured), "{found:?}");
}

// A `vfork` child (sharing the handler's memory) crashes and gets its report; the parent crashes afterwards and
// gets its own: the child left nothing owned behind.
#[test]
fn crash_in_a_vfork_child_leaves_the_parent_armed() {
    if emulator_lacks("qemu-user runs vfork as fork: the child does not share the parent's memory or crash gate") {
        return;
    }
    let (run, r, _, others) = check(&Expect {
        trigger: "vfork_crash",
        frames: with_main(&["read_at", "trigger_null_deref", "trigger_vfork_child_then_parent"]),
        crashes: 2,
        reports: 2,
        limit: HANG_LIMIT,
        ..NULL_READ
    });
    let child: u32 = run.out_value("CHILD").and_then(|v| v.split(' ').next()).expect("child").parse().expect("pid");
    assert_ne!(r.meta.as_ref().and_then(|m| m.process.pid), Some(child));
    let c = others.iter().find(|x| x.meta.as_ref().and_then(|m| m.process.pid) == Some(child)).expect("child's");
    assert_eq!(c.exception.as_ref().and_then(|x| x.signal), Some(SIGSEGV));
}
