//! The crash matrix on macOS: the crash client (`src/bin/crash-client/darwin.rs`) crashes one way per process and
//! the report is checked against what the Mach exception server (or, where no Mach exception comes first, the
//! signal fallback) must record: how the process died, exactly one intact report, the Mach exception type and
//! codes, the Darwin signal, the fault address, the crashed thread, every live thread, the client image with its
//! UUID read from the file, the trigger function and its callers in order (symbolicated against the client's own
//! Mach-O symbol table), zero Rust heap allocations between crash start and re-raise, and the viewer's
//! `Exception Type:` line.
//!
//! **Written on Linux and not yet run**: it is type-checked here (`scripts/check-apple.sh aarch64-apple-darwin
//! x86_64-apple-darwin`) and is meant to run in `.github/workflows/macos.yml` on an arm64 and an x86_64 runner.
//! Every expectation below comes from reading XNU and the handler's code, not from a run; the first run on a Mac
//! may well correct some of them.
//!
//! The Linux matrix (`tests/crashes.rs`) triggers that are **not** ported, and why:
//! - `vfork_crash`: the fork case here (`a_forked_childs_crash_is_not_taken_for_ours`) covers the Darwin bug
//!   (inherited exception ports, issue 15 bug 3); a `vfork` child on Darwin shares the parent's memory like on
//!   Linux, but the test's raw-syscall `vfork` block has no Darwin equivalent worth the risk.
//! - `recovering_prev` (a previous signal handler recovers a fault): on Darwin the Mach exception comes before any
//!   signal handler, so the recovered fault is reported and the ports are handed back (handler/README.md, "Faults
//!   a runtime recovers from"); the supported way, a first-chance hook, is `first_chance` below.
//! - `async_segv` (SIGSEGV sent to the owner while it handles): on the Mach path the owner is the handler's
//!   exception thread, not a signal handler on the faulting thread; nothing to send it.
//! - `spawner` (threads created during the crash, by a thread that blocks the stop signal): `thread_suspend` ignores
//!   signal masks, so that creator would be suspended like every other thread; `blocked_thread` below checks that.
//! - `disk_full_after_head`, the reserved report file, `uninstall_then_segv` and `refresh_images`: report-writer
//!   and install behaviour shared with Linux and tested there; only `disk_full_in_head` is repeated here.
//! - `panic_extern_c` and the `panic = "abort"` build: the panic machinery is platform-neutral (tested on Linux);
//!   `panic` below checks the Darwin path once.
//! - `hang` (`tests/hangs.rs`): not a crash; the Darwin run-loop observer is a separate piece.
#![cfg(target_os = "macos")]

use crash_tests::{find_in_order, run, Run};
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use report_format::model::{Image, Report, Thread};
use std::borrow::Cow;
use std::path::Path;
use std::time::Duration;

// Darwin signal numbers (bsd/sys/signal.h), not Linux's: SIGBUS is 10.
const SIGILL: i32 = 4;
const SIGTRAP: i32 = 5;
const SIGABRT: i32 = 6;
const SIGFPE: i32 = 8;
const SIGBUS: i32 = 10;
const SIGSEGV: i32 = 11;
// si_code (bsd/sys/signal.h).
const SEGV_MAPERR: i32 = 1;
#[cfg(target_arch = "aarch64")]
const SI_USER: i32 = 0x10001;
// Mach exception types (osfmk/mach/exception_types.h) and codes (osfmk/mach/kern_return.h,
// osfmk/mach/i386/exception.h, osfmk/mach/arm/exception.h).
const EXC_BAD_ACCESS: u32 = 1;
const EXC_BAD_INSTRUCTION: u32 = 2;
#[cfg(target_arch = "x86_64")]
const EXC_ARITHMETIC: u32 = 3;
const EXC_BREAKPOINT: u32 = 6;
const KERN_INVALID_ADDRESS: i64 = 1;
const KERN_PROTECTION_FAILURE: i64 = 2;
/// `EXC_I386_INVOP` (x86_64) and `EXC_ARM_UNDEFINED` (arm64) are both 1.
const EXC_UNDEFINED_INSTRUCTION: i64 = 1;
#[cfg(target_arch = "x86_64")]
const EXC_I386_DIV: i64 = 1;
#[cfg(target_arch = "x86_64")]
const EXC_I386_BPT: i64 = 2;
#[cfg(target_arch = "x86_64")]
const EXC_I386_GPFLT: i64 = 13;
#[cfg(target_arch = "aarch64")]
const EXC_ARM_BREAKPOINT: i64 = 1;

/// The client's wild address (`WILD_ADDR` in the client).
const WILD_ADDR: u64 = 0x4141_4141_4000;

/// Generous: a hosted runner is small; a hang still fails.
const LIMIT: Duration = Duration::from_secs(120);

fn client() -> &'static Path {
    Path::new(env!("CARGO_BIN_EXE_crash-client"))
}

/// The Mach exception a report must carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mach {
    /// None: the signal fallback reported a signal no Mach exception preceded (`abort()`, `raise()`, or every
    /// fault while a first-chance hook is set).
    None,
    /// This type and this first code.
    Code(u32, i64),
    /// This type, codes not checked.
    Type(u32),
    /// Not checked by [`check`] (two faulters: the caller checks the owner's).
    Unchecked,
    /// A stack guard: `EXC_BAD_ACCESS` with `KERN_PROTECTION_FAILURE` (the guard page is mapped `VM_PROT_NONE`)
    /// or `KERN_INVALID_ADDRESS` (an unmapped gap), and the signal the handler derives from that code.
    StackGuard,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Addr {
    /// The one the client printed (`FAULT_ADDR`).
    Printed,
    /// Absent (the handler records an address for `EXC_BAD_ACCESS` and kernel-generated signals only).
    None,
    /// Present and not 0 (a stack guard's address).
    Any,
    /// Not checked.
    Unchecked,
}

/// What one trigger must produce.
struct Expect {
    trigger: &'static str,
    /// Signals the process may die by.
    exit_signal: &'static [i32],
    /// The report's signal; 0: the one the Mach code implies ([`Mach::StackGuard`]) or, with two faulters, the
    /// crashed thread's.
    signal: i32,
    mach: Mach,
    addr: Addr,
    /// Function names that must appear in order in the crashed thread's frames (innermost first).
    frames: &'static [&'static str],
    /// Function names that must each appear in exactly one frame of the crashed thread.
    once: &'static [&'static str],
    /// The viewer's `Exception Type:` value (None: not checked).
    exc_text: Option<&'static str>,
    /// Whether threads other than the crash thread may allocate during the crash.
    others_allocate: bool,
    /// A minimal report is expected (fault inside the handler).
    minimal: bool,
    /// Finished reports expected (`*.crashreport`).
    reports: usize,
}

/// The defaults most triggers share: a null read on the thread that prints FAULT_TID.
const NULL_READ: Expect = Expect {
    trigger: "",
    exit_signal: &[SIGSEGV],
    signal: SIGSEGV,
    mach: Mach::Code(EXC_BAD_ACCESS, KERN_INVALID_ADDRESS),
    addr: Addr::Printed,
    frames: &[],
    once: &[],
    exc_text: Some("EXC_BAD_ACCESS (SIGSEGV)"),
    others_allocate: false,
    minimal: false,
    reports: 1,
};

/// `abort(3)` and everything that ends in it: SIGABRT with no Mach exception before it (the signal fallback
/// reports it), which Apple's tools show as `EXC_CRASH (SIGABRT)`.
const ABORT: Expect = Expect {
    exit_signal: &[SIGABRT],
    signal: SIGABRT,
    mach: Mach::None,
    addr: Addr::None,
    exc_text: Some("EXC_CRASH (SIGABRT)"),
    ..NULL_READ
};

/// Triggers where two threads fault at once: either may own the crash.
const TWO_FAULTERS: &[&str] = &["two_threads", "two_signals"];

const MAIN_CALLERS: &[&str] = &["run_trigger", "main"];

fn with_main(first: &'static [&'static str]) -> &'static [&'static str] {
    Box::leak([first, MAIN_CALLERS].concat().into_boxed_slice())
}

// ---------------------------------------------------------------------------------------------------------------
// Symbolication against the client's Mach-O symbol table. Rust on macOS leaves the DWARF in the object files (no
// dSYM is made by `cargo test`), so names come from LC_SYMTAB: the nearest function symbol at or below the address.

/// Function symbols of one Mach-O file, its UUID and `__TEXT,__text` range.
struct MachoSymbols {
    /// (link-time address, demangled name), sorted by address.
    syms: Vec<(u64, String)>,
    uuid: Option<[u8; 16]>,
    text: (u64, u64),
}

impl MachoSymbols {
    fn new(path: &Path) -> MachoSymbols {
        let data = std::fs::read(path).expect("read binary");
        let file = object::File::parse(&*data).expect("parse Mach-O");
        let mut syms: Vec<(u64, String)> = file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.is_definition())
            .filter_map(|s| {
                let raw = s.name().ok()?;
                let raw = raw.strip_prefix('_').unwrap_or(raw);
                // Assembler-local labels (`ltmp0`, `l_...`) share addresses with real functions.
                if raw.starts_with("ltmp") || raw.starts_with("l_") || raw.starts_with('L') {
                    return None;
                }
                Some((s.address(), addr2line::demangle_auto(Cow::Borrowed(raw), None).into_owned()))
            })
            .collect();
        syms.sort();
        let text = file.section_by_name("__text").map(|s| (s.address(), s.address() + s.size())).unwrap_or((0, 0));
        MachoSymbols { syms, uuid: file.mach_uuid().ok().flatten(), text }
    }

    /// The function containing the link-time address `probe` (empty outside `__text`).
    fn names(&self, probe: u64) -> Vec<String> {
        if probe < self.text.0 || probe >= self.text.1 {
            return Vec::new();
        }
        let i = self.syms.partition_point(|(a, _)| *a <= probe);
        i.checked_sub(1).map(|i| vec![self.syms[i].1.clone()]).unwrap_or_default()
    }
}

/// Whether two paths name the same file (dyld's path may differ from ours by symlinks: /var -> /private/var).
fn same_file(a: &Path, b: &Path) -> bool {
    match (std::fs::canonicalize(a), std::fs::canonicalize(b)) {
        (Ok(a), Ok(b)) => a == b,
        _ => a == b,
    }
}

/// The report's image whose path is `path`.
fn image_of<'r>(report: &'r Report, path: &Path) -> Option<&'r Image> {
    report.images.iter().find(|i| i.path.as_deref().is_some_and(|p| same_file(Path::new(p), path)))
}

/// Symbolicated names per frame of `thread` (frame 0 uses the pc, later frames the return address - 1); frames
/// outside `image` give an empty list.
fn symbolicate(sym: &MachoSymbols, image: &Image, thread: &Thread) -> Vec<Vec<String>> {
    let slide = image.slide.unwrap_or(0);
    thread
        .frames
        .iter()
        .enumerate()
        .map(|(i, &addr)| {
            if addr < image.load_address || addr - image.load_address >= image.size {
                return Vec::new();
            }
            let probe = if i == 0 { addr } else { addr - 1 };
            sym.names((probe as i64 - slide) as u64)
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------------------------
// The check.

fn decode_file(path: &Path) -> Report {
    let bytes = std::fs::read(path).expect("read report");
    let d = report_format::decode(&bytes).expect("decodes");
    assert!(d.is_intact(), "{}: report damaged: {:?}", path.display(), d.problems);
    d.report
}

fn hex(s: &str) -> u64 {
    u64::from_str_radix(s, 16).expect("hex")
}

/// The viewer's Apple-layout text of a report file.
fn viewer_text(path: &Path) -> String {
    let bytes = std::fs::read(path).expect("read report");
    viewer::render_bytes(&bytes).expect("the viewer renders the report")
}

/// What a checked run left: the run, its report, the viewer's text (empty when no report was expected).
type Checked = (Run, Option<Report>, String);

fn check(e: &Expect) -> Checked {
    let base = tempfile::tempdir().expect("tempdir");
    check_in(e, base.path())
}

/// Runs `e` in `base` (the client's run directory is `base/<trigger>`), checks it, and returns what it left.
fn check_in(e: &Expect, base: &Path) -> Checked {
    let run = run(client(), e.trigger, base, LIMIT);
    let ctx = format!("trigger {}: stdout:\n{}\nstderr:\n{}", e.trigger, run.stdout, run.stderr);
    assert!(
        e.exit_signal.contains(&run.signal.unwrap_or(0)),
        "exit {:?}/{:?}, want {:?}; {ctx}",
        run.signal,
        run.code,
        e.exit_signal
    );
    assert!(!run.stdout.contains("NO_CRASH"), "{ctx}");

    // Zero allocations after the fault (Rust's allocator; see the client). A minimal report's capture faulted
    // before its end.
    if !e.minimal {
        assert_eq!(run.count("starts"), Some(1), "crash hook start; {ctx}");
        assert_eq!(run.count("ends"), Some(1), "crash hook end; {ctx}");
        assert_eq!(run.count("crash_thread_allocs"), Some(0), "allocations by the crashed thread; {ctx}");
        if !e.others_allocate {
            assert_eq!(run.count("all_allocs"), Some(0), "allocations by any thread; {ctx}");
        }
    }

    assert_eq!(run.reports.len(), e.reports, "finished reports {:?}; {ctx}", run.reports);
    assert!(run.leftovers.is_empty(), "files left: {:?}; {ctx}", run.leftovers);
    if e.reports == 0 {
        return (run, None, String::new());
    }
    let r = decode_file(&run.reports[0]);
    let text = viewer_text(&run.reports[0]);
    let meta = r.meta.as_ref().expect("meta");
    assert!(meta.os.is_apple(), "os {:?}; {ctx}", meta.os.name);
    assert_eq!(meta.minimal, e.minimal, "{ctx}");
    assert_eq!(meta.process.bundle_id.as_deref(), Some("crash-client"));
    assert_eq!(meta.process.pid.map(|p| p.to_string()).as_deref(), run.out_value("PID"), "{ctx}");

    // The exception.
    let exc = r.exception.as_ref().expect("exception");
    match e.mach {
        Mach::None => assert_eq!(exc.mach_type, None, "no Mach exception precedes this signal; {ctx}"),
        Mach::Code(t, c) => {
            assert_eq!(exc.mach_type, Some(t), "{ctx}");
            assert_eq!(exc.mach_codes.first(), Some(&c), "codes {:x?}; {ctx}", exc.mach_codes);
        }
        Mach::Type(t) => assert_eq!(exc.mach_type, Some(t), "{ctx}"),
        Mach::Unchecked => {}
        Mach::StackGuard => {
            assert_eq!(exc.mach_type, Some(EXC_BAD_ACCESS), "{ctx}");
            let code = exc.mach_codes.first().copied();
            assert!(matches!(code, Some(KERN_PROTECTION_FAILURE | KERN_INVALID_ADDRESS)), "code {code:?}; {ctx}");
        }
    }
    let want_signal = match (e.signal, e.mach) {
        (0, Mach::StackGuard) => {
            if exc.mach_codes.first() == Some(&KERN_INVALID_ADDRESS) {
                SIGSEGV
            } else {
                SIGBUS
            }
        }
        (0, _) => exc.signal.unwrap_or(-1),
        (s, _) => s,
    };
    assert_eq!(exc.signal, Some(want_signal), "{ctx}");

    // The crashed thread is the one that faulted.
    let crashed = r.crashed_thread().expect("crashed thread");
    assert!(crashed.crashed);
    assert_eq!(exc.crashed_thread, Some(crashed.index), "{ctx}");
    let main_tid: u64 = run.out_value("MAIN_TID").expect("main tid").parse().expect("tid");
    if let Some(main) = r.threads.iter().find(|t| t.id == Some(main_tid)) {
        assert_eq!(main.index, 0, "the main thread is Thread 0 (task_threads order); {ctx}");
    }
    if !TWO_FAULTERS.contains(&e.trigger) {
        let fault_tid: u64 = run.out_value("FAULT_TID").expect("client printed its tid").parse().expect("tid");
        assert_eq!(crashed.id, Some(fault_tid), "{ctx}");
        if !e.minimal {
            assert_eq!(run.count("handler_tid"), Some(fault_tid), "{ctx}");
        }
    } else {
        let faulters: Vec<u64> = run.out_values("THREAD").iter().map(|t| t.parse().expect("tid")).collect();
        let owner = crashed.id.expect("crashed thread id");
        assert!(faulters.contains(&owner), "{ctx}");
        assert_eq!(run.count("handler_tid"), Some(owner), "{ctx}");
    }
    assert!(crashed.captured && !crashed.frames.is_empty(), "{ctx}");
    let pc = crashed.register(if cfg!(target_arch = "aarch64") { "pc" } else { "rip" });
    assert_eq!(pc, crashed.frames.first().copied(), "frame 0 is the pc; {ctx}");
    #[cfg(target_arch = "aarch64")]
    if e.mach != Mach::None {
        // The crashed thread's exception state (far/esr) comes with the Mach path's thread state.
        for name in
            (0..=28).map(|i| format!("x{i}")).chain(["fp", "lr", "sp", "pc", "cpsr", "far", "esr"].map(String::from))
        {
            assert!(crashed.register(&name).is_some(), "register {name} missing: {:?}; {ctx}", crashed.registers);
        }
    }

    match e.addr {
        Addr::Printed => {
            let want = hex(run.out_value("FAULT_ADDR").expect("printed address"));
            assert_eq!(exc.fault_address, Some(want), "{ctx}");
        }
        Addr::None => assert_eq!(exc.fault_address, None, "{ctx}"),
        Addr::Any => assert!(exc.fault_address.is_some_and(|a| a != 0), "{ctx}"),
        Addr::Unchecked => {}
    }

    // Every live thread the client made is in the report, captured with frames or not captured with a reason.
    if !e.minimal {
        assert_eq!(meta.thread_count, Some(r.threads.len() as u32), "{ctx}");
        for t in &r.threads {
            if t.captured {
                assert!(!t.frames.is_empty(), "thread {:?} captured without frames; {ctx}", t.id);
                assert!(t.register_set.is_some());
            } else {
                assert!(t.not_captured_reason.as_deref().is_some_and(|s| !s.is_empty()), "{ctx}");
            }
        }
        let mut live: Vec<u64> = run.out_values("THREAD").iter().map(|t| t.parse().expect("tid")).collect();
        live.push(main_tid);
        for tid in live {
            assert!(r.threads.iter().any(|t| t.id == Some(tid)), "thread {tid} missing; {ctx}");
        }
    } else {
        assert_eq!(r.threads.len(), 1, "{ctx}");
        assert!(meta.note.as_deref().is_some_and(|n| n.contains("faulted")), "{ctx}");
    }

    // The client binary is in the image list with the UUID read from the file itself.
    let img = image_of(&r, client()).unwrap_or_else(|| panic!("client image missing: {:#?}", r.images));
    let sym = MachoSymbols::new(client());
    let uuid = sym.uuid.expect("the client binary has an LC_UUID");
    assert_eq!(crash_tests::id_bytes(img), Some(&uuid[..]), "UUID");

    // Frames: the trigger function and its callers, in order.
    if !e.frames.is_empty() {
        let names = symbolicate(&sym, img, crashed);
        if let Err(msg) = find_in_order(&names, e.frames) {
            panic!("{msg}\nraw frames: {:x?}\n{ctx}", crashed.frames);
        }
        for w in e.once {
            let n = names.iter().filter(|f| find_in_order(std::slice::from_ref(*f), &[w]).is_ok()).count();
            assert_eq!(n, 1, "`{w}` must appear in exactly one frame: {names:#?}\nraw frames: {:x?}", crashed.frames);
        }
    }

    if let Some(t) = e.exc_text {
        let want = format!("Exception Type:  {t}\n");
        assert!(text.contains(&want), "viewer text lacks {want:?}:\n{text}");
    }
    (run, Some(r), text)
}

macro_rules! crash_test {
    ($name:ident, $e:expr) => {
        #[test]
        fn $name() {
            let _ = check(&$e);
        }
    };
}

// ---------------------------------------------------------------------------------------------------------------
// Memory faults.

crash_test!(
    null_deref_is_exc_bad_access_kern_invalid_address,
    Expect {
        trigger: "null_deref",
        frames: with_main(&["read_at", "trigger_null_deref"]),
        once: &["trigger_null_deref"],
        ..NULL_READ
    }
);

#[test]
fn wild_read_is_exc_bad_access_at_the_address() {
    let (_, r, _) =
        check(&Expect { trigger: "wild_read", frames: with_main(&["read_at", "trigger_wild_read"]), ..NULL_READ });
    let e = r.and_then(|r| r.exception).expect("exception");
    // The subcode is the address (and so is the report's fault address, checked against FAULT_ADDR).
    assert_eq!(e.mach_codes.get(1).map(|a| *a as u64), Some(WILD_ADDR), "codes {:x?}", e.mach_codes);
}

// x86_64: a non-canonical address is a general-protection fault, not a page fault: EXC_I386_GPFLT, SIGSEGV, and
// the kernel knows no address (arm64 has no such case: every 64-bit address translates or faults with its address).
#[cfg(target_arch = "x86_64")]
crash_test!(
    noncanonical_read_is_a_general_protection_fault,
    Expect {
        trigger: "noncanonical_read",
        mach: Mach::Code(EXC_BAD_ACCESS, EXC_I386_GPFLT),
        addr: Addr::Unchecked,
        frames: with_main(&["read_at", "trigger_noncanonical_read"]),
        ..NULL_READ
    }
);

// Darwin: a protection failure is SIGBUS, not Linux's SIGSEGV (bsd/uxkern/ux_exception.c).
crash_test!(
    write_to_a_read_only_page_is_kern_protection_failure_and_sigbus,
    Expect {
        trigger: "ro_write",
        exit_signal: &[SIGBUS],
        signal: SIGBUS,
        mach: Mach::Code(EXC_BAD_ACCESS, KERN_PROTECTION_FAILURE),
        frames: with_main(&["write_at", "trigger_ro_write"]),
        exc_text: Some("EXC_BAD_ACCESS (SIGBUS)"),
        ..NULL_READ
    }
);

// A file mapping read past the file's end: the pager's error (KERN_MEMORY_ERROR by our reading of
// osfmk/vm/vm_fault.c; only the type and the signal are asserted).
crash_test!(
    read_past_the_end_of_a_mapped_file_is_sigbus,
    Expect {
        trigger: "sigbus",
        exit_signal: &[SIGBUS],
        signal: SIGBUS,
        mach: Mach::Type(EXC_BAD_ACCESS),
        frames: with_main(&["read_at", "trigger_sigbus"]),
        exc_text: Some("EXC_BAD_ACCESS (SIGBUS)"),
        ..NULL_READ
    }
);

// ---------------------------------------------------------------------------------------------------------------
// Instructions and arithmetic.

crash_test!(
    undefined_instruction_is_exc_bad_instruction,
    Expect {
        trigger: "sigill",
        exit_signal: &[SIGILL],
        signal: SIGILL,
        mach: Mach::Code(EXC_BAD_INSTRUCTION, EXC_UNDEFINED_INSTRUCTION),
        addr: Addr::None,
        frames: with_main(&["trigger_sigill"]),
        exc_text: Some("EXC_BAD_INSTRUCTION (SIGILL)"),
        ..NULL_READ
    }
);

// A Swift runtime trap. arm64: `brk #1` re-executes with the default action after our report (no pthread_kill
// re-raise), so the process dies by SIGTRAP from EXC_BREAKPOINT at the trap and Apple's own log shows the same
// (issue 15 bug 5). x86_64: Swift traps with `ud2`: EXC_BAD_INSTRUCTION, SIGILL.
#[cfg(target_arch = "aarch64")]
crash_test!(
    swift_trap_brk_is_exc_breakpoint,
    Expect {
        trigger: "trap",
        exit_signal: &[SIGTRAP],
        signal: SIGTRAP,
        mach: Mach::Code(EXC_BREAKPOINT, EXC_ARM_BREAKPOINT),
        addr: Addr::None,
        frames: with_main(&["trigger_trap"]),
        once: &["trigger_trap"],
        exc_text: Some("EXC_BREAKPOINT (SIGTRAP)"),
        ..NULL_READ
    }
);

#[cfg(target_arch = "x86_64")]
crash_test!(
    swift_trap_ud2_is_exc_bad_instruction,
    Expect {
        trigger: "trap",
        exit_signal: &[SIGILL],
        signal: SIGILL,
        mach: Mach::Code(EXC_BAD_INSTRUCTION, EXC_UNDEFINED_INSTRUCTION),
        addr: Addr::None,
        frames: with_main(&["trigger_trap"]),
        exc_text: Some("EXC_BAD_INSTRUCTION (SIGILL)"),
        ..NULL_READ
    }
);

// x86_64 `int3`: EXC_BREAKPOINT / EXC_I386_BPT; the pc is past the instruction, so the handler re-raises SIGTRAP.
#[cfg(target_arch = "x86_64")]
crash_test!(
    int3_is_exc_breakpoint_and_is_reraised,
    Expect {
        trigger: "int3",
        exit_signal: &[SIGTRAP],
        signal: SIGTRAP,
        mach: Mach::Code(EXC_BREAKPOINT, EXC_I386_BPT),
        addr: Addr::None,
        frames: with_main(&["trigger_int3"]),
        exc_text: Some("EXC_BREAKPOINT (SIGTRAP)"),
        ..NULL_READ
    }
);

// arm64: a crash in a leaf with no frame record and no unwind entry (hand-written assembly). Its caller is only in
// LR: it must appear once, as frame 1, not be lost or doubled.
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

// x86_64: integer division by zero traps: EXC_ARITHMETIC / EXC_I386_DIV, SIGFPE. (arm64 has no EXC_ARITHMETIC for
// it: the division gives 0.)
#[cfg(target_arch = "x86_64")]
crash_test!(
    integer_divide_by_zero_is_exc_arithmetic,
    Expect {
        trigger: "sigfpe",
        exit_signal: &[SIGFPE],
        signal: SIGFPE,
        mach: Mach::Code(EXC_ARITHMETIC, EXC_I386_DIV),
        addr: Addr::None,
        frames: with_main(&["trigger_sigfpe"]),
        exc_text: Some("EXC_ARITHMETIC (SIGFPE)"),
        ..NULL_READ
    }
);

// arm64: the client raises SIGFPE (SI_USER): no Mach exception, the signal fallback reports it and re-raises.
#[cfg(target_arch = "aarch64")]
#[test]
fn raised_sigfpe_is_reported_by_the_signal_fallback() {
    let (_, r, _) = check(&Expect {
        trigger: "sigfpe",
        exit_signal: &[SIGFPE],
        signal: SIGFPE,
        mach: Mach::None,
        addr: Addr::None,
        frames: with_main(&["trigger_sigfpe"]),
        exc_text: Some("EXC_ARITHMETIC (SIGFPE)"),
        ..NULL_READ
    });
    let e = r.and_then(|r| r.exception).expect("exception");
    assert_eq!(e.si_code, Some(SI_USER));
}

// ---------------------------------------------------------------------------------------------------------------
// abort() and why it crashed.

crash_test!(
    abort_is_exc_crash_sigabrt,
    Expect { trigger: "abort", frames: with_main(&["call_abort", "trigger_abort"]), ..ABORT }
);

#[test]
fn failed_c_assert_keeps_libsystem_cs_message() {
    let (_, r, text) = check(&Expect { trigger: "c_assert", frames: with_main(&["trigger_c_assert"]), ..ABORT });
    let r = r.expect("report");
    // libsystem_c's __assert_rtn leaves "Assertion failed: (<expr>), function <f>, file <file>, line <n>." in its
    // __crash_info (the text Apple's crash logs show under Application Specific Information).
    let m = r
        .messages
        .iter()
        .find(|m| m.text.contains("widget != NULL"))
        .unwrap_or_else(|| panic!("no assertion message: {:?}", r.messages));
    assert!(m.text.contains("widget_open") && m.text.contains("widgets.c"), "{:?}", m.text);
    assert!(text.contains("Application Specific Information:\n"), "{text}");
    assert!(text.contains(&m.text), "{text}");
}

#[test]
fn abort_with_the_apps_reason_and_user_values() {
    let (_, r, text) =
        check(&Expect { trigger: "app_reason", frames: with_main(&["call_abort", "trigger_app_reason"]), ..ABORT });
    let r = r.expect("report");
    let m = r.messages.iter().find(|m| m.source.as_deref() == Some("app")).expect("app reason");
    assert_eq!(m.text, "saving document 42 to disk");
    assert_eq!(r.user.get("screen").map(String::as_str), Some("editor"));
    assert!(text.contains("saving document 42 to disk"), "{text}");
    assert!(text.contains("User Values:\nscreen: editor\n"), "{text}");
}

#[test]
fn rust_panic_with_abort() {
    let (run, r, text) = check(&Expect { trigger: "panic", frames: with_main(&["trigger_panic"]), ..ABORT });
    let r = r.expect("report");
    let at = run.out_value("PANIC_AT").expect("the client printed the panic's location");
    let lx = r.exception.as_ref().and_then(|e| e.language.as_ref()).expect("EXCEPTION lx");
    assert_eq!(lx.kind, "rust");
    assert_eq!(lx.reason.as_deref(), Some("deliberate panic from the crash client"));
    assert_eq!(lx.location.as_deref(), Some(at));
    assert_eq!(lx.thread_id, r.crashed_thread().and_then(|t| t.id), "the panicking thread is the crashed one");
    let want = format!("panicked at {at}:\ndeliberate panic from the crash client\n");
    assert!(text.contains(&want), "viewer text lacks\n{want}\nin\n{text}");
}

/// The C++ library of the `cxx_*` triggers (the Linux one, tests/c/cxx_throw.cpp, prints its thread id with
/// Linux's `gettid`): a thread that throws an exception nothing catches.
const CXX_SOURCE: &str = r#"
#include <pthread.h>
#include <stdexcept>
#include <stdint.h>
#include <stdio.h>
namespace crashtest { struct NotAnException { int code; }; }
extern "C" {
__attribute__((noinline)) void cxx_throw_runtime_error(void) { throw std::runtime_error("the widget registry is empty"); }
__attribute__((noinline)) void cxx_throw_non_std(void) { throw crashtest::NotAnException{42}; }
__attribute__((noinline)) void *thrower(void *arg) {
    uint64_t tid = 0;
    pthread_threadid_np(nullptr, &tid);
    printf("FAULT_TID %llu\n", (unsigned long long)tid);
    fflush(stdout);
    if (arg != nullptr) cxx_throw_runtime_error(); else cxx_throw_non_std();
    return nullptr;
}
void cxx_throw_in_thread(int std_exception) {
    pthread_t t;
    pthread_create(&t, nullptr, thrower, std_exception ? (void *)1 : nullptr);
    pthread_join(t, nullptr);
}
}
"#;

/// Compiles `source` (written to `dir/<name>`) into the dynamic library `lib` with `compiler`.
fn build_dylib(compiler: &str, flags: &[&str], dir: &Path, name: &str, source: &str, lib: &Path) {
    std::fs::create_dir_all(dir).expect("dir");
    let src = dir.join(name);
    std::fs::write(&src, source).expect("write source");
    let out = std::process::Command::new(compiler)
        .args(["-dynamiclib", "-g"])
        .args(flags)
        .arg("-o")
        .arg(lib)
        .arg(&src)
        .output()
        .unwrap_or_else(|e| panic!("run {compiler}: {e}"));
    assert!(out.status.success(), "{compiler} failed: {}", String::from_utf8_lossy(&out.stderr));
}

/// An uncaught C++ exception on a thread of a C++ library: the terminate handler recorded its type and, for a
/// `std::exception`, `what()`; the crashed thread is the thrower, its stack still holds the throw site.
fn cxx_case(trigger: &'static str, throw_fn: &str) -> (Report, String) {
    let base = tempfile::tempdir().expect("tempdir");
    let lib = base.path().join("libcxxthrow.dylib");
    build_dylib("c++", &["-O1", "-std=c++17"], &base.path().join("src"), "cxx_throw.cpp", CXX_SOURCE, &lib);
    let (_, r, text) = check_in(&Expect { trigger, ..ABORT }, base.path());
    let r = r.expect("report");
    let img = image_of(&r, &lib).unwrap_or_else(|| panic!("{} missing from the image list", lib.display()));
    let sym = MachoSymbols::new(&lib);
    assert_eq!(crash_tests::id_bytes(img), sym.uuid.as_ref().map(|u| &u[..]), "the library's UUID");
    let names = symbolicate(&sym, img, r.crashed_thread().expect("crashed thread"));
    assert!(find_in_order(&names, &[throw_fn, "thrower"]).is_ok(), "throw site not on the crashed stack: {names:#?}");
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
    assert!(text.contains("std::runtime_error: the widget registry is empty"), "{text}");
}

#[test]
fn uncaught_cxx_exception_of_a_non_std_type() {
    let (r, _) = cxx_case("cxx_non_std", "cxx_throw_non_std");
    let lx = r.exception.as_ref().and_then(|e| e.language.as_ref()).expect("EXCEPTION lx");
    assert_eq!(lx.kind, "c++");
    assert_eq!(lx.type_name.as_deref(), Some("N9crashtest14NotAnExceptionE"));
    assert_eq!(lx.reason, None, "no what() for a type not derived from std::exception");
}

/// A library `dlopen`ed after install: the dyld add-image callback registered it, so it is in the report with
/// its UUID and the crashing pc lies in it.
#[test]
fn crash_inside_a_library_dlopened_after_install() {
    let base = tempfile::tempdir().expect("tempdir");
    let lib = base.path().join("libcrashme.dylib");
    build_dylib(
        "cc",
        &["-O0", "-fno-omit-frame-pointer"],
        &base.path().join("src"),
        "crashme.c",
        "__attribute__((noinline)) void crashme_inner(volatile int *p) { *p = 42; }\n\
         void crashme_write(volatile int *p) { crashme_inner(p); }\n",
        &lib,
    );
    let (_, r, _) =
        check_in(&Expect { trigger: "dlopen", frames: with_main(&["trigger_dlopen"]), ..NULL_READ }, base.path());
    let r = r.expect("report");
    let img =
        image_of(&r, &lib).unwrap_or_else(|| panic!("{} missing from the image list: {:#?}", lib.display(), r.images));
    let sym = MachoSymbols::new(&lib);
    assert_eq!(crash_tests::id_bytes(img), sym.uuid.as_ref().map(|u| &u[..]), "the library's UUID");
    let crashed = r.crashed_thread().expect("crashed thread");
    let pc = crashed.frames.first().copied().expect("frame 0");
    assert!(pc >= img.load_address && pc - img.load_address < img.size, "pc {pc:#x} outside {img:#x?}");
    let names = symbolicate(&sym, img, crashed);
    assert!(find_in_order(&names, &["crashme_inner", "crashme_write"]).is_ok(), "{names:#?}");
}

// ---------------------------------------------------------------------------------------------------------------
// Stack overflows. The Mach exception is handled on the handler's exception thread, so no alternate signal stack is
// needed on the overflowing thread (unlike Linux). After our report the previous signal handler, Rust std's
// stack-overflow reporter, may print and abort: the process ends by SIGSEGV, SIGBUS or SIGABRT.

const STACK_OVERFLOW: Expect = Expect {
    exit_signal: &[SIGSEGV, SIGBUS, SIGABRT],
    signal: 0,
    mach: Mach::StackGuard,
    addr: Addr::Any,
    exc_text: None,
    ..NULL_READ
};

crash_test!(
    stack_overflow_main_thread,
    Expect {
        trigger: "stack_overflow_main",
        frames: with_main(&["recurse", "trigger_stack_overflow"]),
        ..STACK_OVERFLOW
    }
);

crash_test!(
    stack_overflow_spawned_thread,
    Expect {
        trigger: "stack_overflow_thread",
        frames: &["recurse", "trigger_stack_overflow", "thread_body_overflow"],
        ..STACK_OVERFLOW
    }
);

// A raw `pthread_create` thread: nobody gave it an alternate signal stack, which the Mach path does not need.
crash_test!(
    stack_overflow_pthread_create_thread,
    Expect {
        trigger: "stack_overflow_pthread",
        frames: &["recurse", "trigger_stack_overflow", "thread_body_overflow"],
        ..STACK_OVERFLOW
    }
);

// ---------------------------------------------------------------------------------------------------------------
// Threads.

#[test]
fn a_crash_on_a_spawned_thread_names_that_thread() {
    let (_, r, _) = check(&Expect {
        trigger: "thread_crash",
        frames: &["read_at", "trigger_null_deref", "thread_body_crash"],
        ..NULL_READ
    });
    let r = r.expect("report");
    assert_eq!(r.crashed_thread().and_then(|t| t.name.as_deref()), Some("crasher"));
    assert!(r.threads.len() >= 2, "the main thread is there too");
}

crash_test!(
    pthread_create_thread,
    Expect {
        trigger: "pthread_crash",
        frames: &["read_at", "trigger_null_deref", "thread_body_crash", "pthread_entry"],
        ..NULL_READ
    }
);

#[test]
fn two_hundred_live_threads() {
    let (_, r, _) =
        check(&Expect { trigger: "threads200", frames: with_main(&["read_at", "trigger_null_deref"]), ..NULL_READ });
    let r = r.expect("report");
    assert!(r.threads.len() >= 201, "{}", r.threads.len());
    let named = r.threads.iter().filter(|t| t.name.as_deref().is_some_and(|n| n.starts_with("idle-"))).count();
    assert_eq!(named, 200, "thread names");
}

crash_test!(
    while_another_thread_allocates,
    Expect {
        trigger: "alloc_loop",
        frames: with_main(&["read_at", "trigger_null_deref"]),
        others_allocate: true,
        ..NULL_READ
    }
);

// Both threads print (allocating) right before they fault; either may own the crash.
crash_test!(
    two_threads_fault_together,
    Expect {
        trigger: "two_threads",
        others_allocate: true,
        frames: &["read_at", "trigger_null_deref", "thread_body_crash"],
        ..NULL_READ
    }
);

// Two threads fault at once with different exceptions: the report names one owner, with its own exception. Unlike
// Linux the exit signal is not required to be the owner's: the other thread's exception is answered with
// KERN_FAILURE too and its signal may end the process first.
#[test]
fn two_threads_with_different_exceptions() {
    for _ in 0..4 {
        let (_, r, _) = check(&Expect {
            trigger: "two_signals",
            exit_signal: &[SIGSEGV, SIGILL],
            signal: 0,
            mach: Mach::Unchecked,
            addr: Addr::Unchecked,
            exc_text: None,
            others_allocate: true,
            ..NULL_READ
        });
        let r = r.expect("report");
        let e = r.exception.as_ref().expect("exception");
        let crashed = r.crashed_thread().expect("crashed");
        let (mach, sig) = match crashed.name.as_deref() {
            Some("sigill") => (EXC_BAD_INSTRUCTION, SIGILL),
            Some("sigsegv") => (EXC_BAD_ACCESS, SIGSEGV),
            other => panic!("crashed thread {other:?}"),
        };
        assert_eq!((e.mach_type, e.signal), (Some(mach), Some(sig)), "the owner's own exception");
    }
}

// A thread blocking every signal: on Linux it cannot be stopped and is given up on; `thread_suspend` ignores signal
// masks, so on Darwin it is captured like any other thread.
#[test]
fn thread_blocking_all_signals_is_captured() {
    let (run, r, _) = check(&Expect {
        trigger: "blocked_thread",
        frames: with_main(&["read_at", "trigger_null_deref"]),
        ..NULL_READ
    });
    let r = r.expect("report");
    let blocker: u64 = run.out_value("BLOCKER").expect("blocker tid").parse().expect("tid");
    let t = r.threads.iter().find(|t| t.id == Some(blocker)).expect("blocking thread in the report");
    assert!(t.captured && !t.frames.is_empty(), "{t:?}");
}

// ---------------------------------------------------------------------------------------------------------------
// Around the crash.

// Out of file descriptors when the crash comes: the handler's spare descriptors (shared prealloc) let it write.
crash_test!(
    out_of_file_descriptors,
    Expect { trigger: "emfile", frames: with_main(&["read_at", "trigger_null_deref"]), ..NULL_READ }
);

// A disk that fills up before the head sections are written (RLIMIT_FSIZE 24 bytes from the crash hook): nothing
// is committed, nothing is left behind, the process still dies by its signal.
crash_test!(
    disk_full_before_the_head_commits_nothing,
    Expect { trigger: "disk_full_in_head", reports: 0, ..NULL_READ }
);

// The handler faults on purpose while capturing (on the Mach path: on the primary exception thread; the secondary
// takes over): a minimal report of the original crash.
crash_test!(
    fault_inside_the_handler_leaves_a_minimal_report,
    Expect { trigger: "handler_fault", frames: &["read_at"], minimal: true, ..NULL_READ }
);

// A sampling profiler's SIGPROF/SIGALRM timers (50 µs) keep firing during the crash.
#[test]
fn profiler_timer_during_the_crash() {
    for _ in 0..3 {
        let _ = check(&Expect {
            trigger: "profiler_timer",
            frames: with_main(&["read_at", "trigger_null_deref"]),
            ..NULL_READ
        });
    }
}

// With a first-chance hook set the exception server declines every fault: the guard-page fault reaches the hook as
// a signal and is recovered (no report); the real crash that follows is reported once, by the signal fallback
// (so without a Mach exception, with the kernel's si_code and address).
#[test]
fn first_chance_handler_recovers_a_fault_then_a_real_crash_is_reported() {
    let (run, r, _) = check(&Expect {
        trigger: "first_chance",
        mach: Mach::None,
        frames: with_main(&["read_at", "trigger_null_deref", "trigger_recovered_then_real"]),
        ..NULL_READ
    });
    assert!(run.stdout.contains("RECOVERED "), "{}", run.stdout);
    let e = r.and_then(|r| r.exception).expect("exception");
    assert_eq!(e.si_code, Some(SEGV_MAPERR));
}

// ---------------------------------------------------------------------------------------------------------------
// A forked child's crash (issue 15 bug 3).

#[test]
fn a_forked_childs_crash_is_not_taken_for_ours() {
    // The child inherits our exception ports and crashes first; the server must decline it (it used to dump the
    // parent with a made-up crashed thread and then miss the parent's own crash). The child's and the parent's
    // crash hooks share the count file, so the counts are not checked here.
    let base = tempfile::tempdir().expect("tempdir");
    let r = run(client(), "fork_child_then_parent", base.path(), LIMIT);
    assert_eq!(r.signal, Some(SIGSEGV), "stdout:\n{}\nstderr:\n{}", r.stdout, r.stderr);
    let status: i32 = r.out_value("CHILD_STATUS").expect("CHILD_STATUS").parse().expect("status");
    assert_ne!(status & 0x7f, 0, "the child died by a signal");
    let parent = r.out_value("PID").expect("PID");
    let child = r.out_value("CHILD_PID").expect("CHILD_PID");
    let reports: Vec<Report> = r.reports.iter().map(|p| decode_file(p)).collect();
    let pid_of = |rep: &Report| rep.meta.as_ref().and_then(|m| m.process.pid).map(|p| p.to_string());
    let ours: Vec<&Report> = reports.iter().filter(|rep| pid_of(rep).as_deref() == Some(parent)).collect();
    assert_eq!(ours.len(), 1, "exactly one report of the parent: {:?}", reports.iter().map(pid_of).collect::<Vec<_>>());
    let e = ours[0].exception.as_ref().expect("exception");
    assert_eq!(e.mach_type, Some(EXC_BAD_ACCESS), "the parent's crash went through the Mach path");
    assert_eq!(e.fault_address, Some(0x10), "the parent's own fault, not the child's (0x8)");
    let fault_tid = r.out_value("FAULT_TID");
    assert_eq!(ours[0].crashed_thread().and_then(|t| t.id).map(|t| t.to_string()).as_deref(), fault_tid);
    // The child may write its own report through its inherited signal handler (its own process, its own pid).
    for rep in reports.iter().filter(|rep| pid_of(rep).as_deref() == Some(child)) {
        assert_eq!(rep.exception.as_ref().and_then(|e| e.fault_address), Some(0x8));
    }
    assert!(reports.iter().all(|rep| pid_of(rep).as_deref() == Some(parent) || pid_of(rep).as_deref() == Some(child)));
}
