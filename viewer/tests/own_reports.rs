//! Our own reports: rendering (modern, legacy, JSON, Linux), damaged input and never-panic properties.

use proptest::prelude::*;
use report_format::model::{
    Exception, Image, ImageId, LanguageException, Message, Meta, NonFatal, Os, Process, Register, Report, ReportId,
    Thread,
};
use viewer::{Format, Layout};

fn regs(set: &str, values: &[(&str, u64)]) -> (Option<String>, Vec<Register>) {
    (Some(set.to_string()), values.iter().map(|(n, v)| Register { name: n.to_string(), value: *v }).collect())
}

/// An iOS arm64 SIGSEGV report with two threads and two images.
pub fn ios_report() -> Report {
    let mut arm: Vec<(String, u64)> = (0..29).map(|i| (format!("x{i}"), i as u64)).collect();
    arm.extend([
        ("fp".to_string(), 0x16f6290b0),
        ("lr".to_string(), 0x1007da4bc),
        ("sp".to_string(), 0x16f629030),
        ("pc".to_string(), 0x1007da1cc),
        ("cpsr".to_string(), 0x60001000),
        ("far".to_string(), 0x10),
        ("esr".to_string(), 0x92000006),
    ]);
    let arm_refs: Vec<(&str, u64)> = arm.iter().map(|(n, v)| (n.as_str(), *v)).collect();
    let (set, registers) = regs("arm64", &arm_refs);
    Report {
        format_version: (1, 1),
        meta: Some(Meta {
            report_id: ReportId([
                0x62, 0x51, 0x12, 0x5f, 9, 0x19, 0x48, 0x79, 0xb3, 0x6b, 0xf5, 0xf2, 0x1e, 0x69, 0x02, 0x2e,
            ]),
            capture_time_ns: Some(1_659_543_061_245_500_000),
            handler_version: Some("0.1.0".into()),
            arch: Some("arm64".into()),
            hardware_model: Some("iPhone14,2".into()),
            os: Os { name: Some("iPhone OS".into()), version: Some("15.5".into()), build: Some("19F77".into()) },
            process: Process {
                pid: Some(1730),
                parent_pid: Some(1),
                name: Some("iOSCrashingTest".into()),
                path: Some("/private/var/containers/Bundle/Application/X/iOSCrashingTest.app/iOSCrashingTest".into()),
                parent_name: Some("launchd".into()),
                bundle_id: Some("jp.mahdi.iOSCrashingTest".into()),
                short_version: Some("1.0".into()),
                build_version: Some("1".into()),
                launch_time_ns: Some(1_659_543_061_014_700_000),
            },
            thread_count: Some(2),
            image_count: Some(2),
            minimal: false,
            note: None,
            non_fatal: None,
        }),
        exception: Some(Exception {
            mach_type: Some(1),
            mach_codes: vec![1, 0x10],
            signal: Some(11),
            si_code: Some(1),
            fault_address: Some(0x10),
            crashed_thread: Some(0),
            language: None,
        }),
        threads: vec![
            Thread {
                index: 0,
                id: Some(207732),
                queue: Some("com.apple.main-thread".into()),
                crashed: true,
                register_set: set,
                registers,
                frames: vec![0x1007da1cc, 0x1007da4bc, 0x1007da384, 0x1a8e9305c, 0x5],
                ..Thread::default()
            },
            Thread {
                index: 1,
                id: Some(207748),
                name: Some("worker".into()),
                frames: vec![0x1a8e9305c],
                ..Thread::default()
            },
        ],
        images: vec![
            Image {
                index: 0,
                name: "iOSCrashingTest".into(),
                path: Some("/private/var/containers/Bundle/Application/X/iOSCrashingTest.app/iOSCrashingTest".into()),
                load_address: 0x1007d4000,
                size: 0x8000,
                slide: Some(0x7d4000),
                id: Some(ImageId::Uuid([
                    0x82, 0xd1, 0x3d, 0x98, 0x21, 0x9e, 0x30, 0x40, 0xb6, 0x2a, 0x07, 0xa2, 0x97, 0x00, 0x7a, 0x7c,
                ])),
                arch: None,
                name_only: false,
            },
            Image {
                index: 1,
                name: "CoreFoundation".into(),
                path: Some("/System/Library/Frameworks/CoreFoundation.framework/CoreFoundation".into()),
                load_address: 0x1a8e88000,
                size: 0x456000,
                slide: None,
                id: Some(ImageId::Uuid([0x51; 16])),
                arch: Some("arm64e".into()),
                name_only: false,
            },
        ],
        messages: vec![Message { source: Some("libswiftCore.dylib".into()), text: "Fatal error: boom".into() }],
        user: Default::default(),
    }
}

fn linux_report() -> Report {
    let mut r = ios_report();
    let m = r.meta.as_mut().unwrap();
    m.os =
        Os { name: Some("Linux".into()), version: Some("6.1.0-18-amd64".into()), build: Some("#1 SMP Debian".into()) };
    m.arch = Some("x86_64".into());
    m.hardware_model = None;
    m.process.bundle_id = None;
    r.exception = Some(Exception {
        signal: Some(7),
        si_code: Some(2),
        fault_address: Some(0xdead),
        crashed_thread: Some(0),
        ..Exception::default()
    });
    let (set, registers) = regs(
        "x86_64",
        &[("rax", 1), ("rip", 0x1007da1cc), ("rflags", 0x10206), ("trapno", 14), ("err", 6), ("cr2", 0xdead)],
    );
    r.threads[0].register_set = set;
    r.threads[0].registers = registers;
    r.images[0].id = Some(ImageId::BuildId(vec![0xab, 0xcd, 0xef, 0x01, 0x23]));
    r
}

fn render(report: &Report, layout: Layout, format: Format) -> String {
    let bytes = report_format::owned::to_bytes(report).unwrap();
    let mut loaded = viewer::load(&bytes).unwrap();
    viewer::render_loaded(&mut loaded, layout, format, None)
}

/// A hang report (format 2.3 META `nf`) of the Linux report's process: no exception, thread 0 stalled, no thread
/// crashed.
fn hang_report(os: &str) -> Report {
    let mut r = linux_report();
    let m = r.meta.as_mut().unwrap();
    m.os.name = Some(os.into());
    m.non_fatal = Some(NonFatal {
        kind: "hang".into(),
        reason: Some("main thread unresponsive for 2.41 s (threshold 2.00 s)".into()),
        duration_ns: Some(2_412_000_000),
        thread: Some(0),
    });
    r.exception = Some(Exception::default());
    for t in &mut r.threads {
        t.crashed = false;
    }
    r.messages.clear();
    r
}

/// A non-fatal report prints its event where a crash prints its exception (spindump's `Event:` and `Duration:`,
/// then the reason), names the thread it is about as the one that triggered it, and marks no thread crashed.
#[test]
fn a_hang_report_prints_its_event_instead_of_an_exception() {
    let text = render(&hang_report("Linux"), Layout::Modern, Format::Text);
    assert!(
        text.contains(
            "\nEvent:           hang\nDuration:        2.41s\nReason:          main thread unresponsive for 2.41 s (threshold 2.00 s)\n\nTriggered by Thread:  0\n"
        ),
        "{text}"
    );
    assert!(!text.contains("Exception Type"), "{text}");
    assert!(!text.contains("Crashed"), "{text}");
    assert!(!text.contains("Termination Reason"), "{text}");
    insta::assert_snapshot!("linux_hang", text);
    let mac = render(&hang_report("macOS"), Layout::Modern, Format::Text);
    assert!(mac.contains("\nTriggered by Thread:   0  Dispatch queue: com.apple.main-thread\n"), "{mac}");
    assert!(mac.contains("\nEvent:                 hang\nDuration:              2.41s\n"), "{mac}");
    assert!(!mac.contains("Crashed"), "{mac}");
    insta::assert_snapshot!("macos_hang", mac);
    let manual = {
        let mut r = hang_report("Linux");
        r.meta.as_mut().unwrap().non_fatal =
            Some(NonFatal { kind: "app".into(), reason: Some("checkout took too long".into()), ..NonFatal::default() });
        render(&r, Layout::Modern, Format::Text)
    };
    assert!(manual.contains("\nEvent:           app\nReason:          checkout took too long\n"), "{manual}");
    let json = render(&hang_report("Linux"), Layout::Modern, Format::Json);
    let v: serde_json::Value = serde_json::from_str(&json).expect("json");
    assert_eq!(v["crash_log"]["event"]["kind"], "hang", "{json}");
    assert_eq!(v["crash_log"]["event"]["duration"], "2.41s", "{json}");
    assert_eq!(v["report"]["meta"]["non_fatal"]["duration_ns"], 2_412_000_000u64, "{json}");
}

#[test]
fn modern_ios_rendering_snapshot() {
    let text = render(&ios_report(), Layout::Modern, Format::Text);
    // A couple of exact lines independent of the snapshot.
    assert!(text.contains("\nException Type:  EXC_BAD_ACCESS (SIGSEGV)\nException Subtype: KERN_INVALID_ADDRESS at 0x0000000000000010\nException Codes: 0x0000000000000001, 0x0000000000000010\n"));
    assert!(text.contains("Termination Reason: SIGNAL 11 Segmentation fault: 11\n"));
    assert!(text.contains("   far: 0x0000000000000010  esr: 0x92000006 (Data Abort) byte read Translation fault\n"));
    assert!(text.contains("0   iOSCrashingTest               \t       0x1007da1cc 0x1007d4000 + 25036\n"));
    assert!(text.contains("4   ???                           \t               0x5 0x0 + 5\n"));
    assert!(text.ends_with("\nEOF\n\n"));
    insta::assert_snapshot!("ios_modern", text);
}

/// The ios report with three threads where the crashed one is task index 2 and its THREAD section is written first,
/// as the handler writes it (SCHEMA.md §3).
fn crashed_third_written_first() -> Report {
    let mut r = ios_report();
    let mut crashed = r.threads.remove(0);
    crashed.index = 2;
    crashed.queue = None;
    crashed.name = Some("crasher".into());
    let main = Thread {
        index: 0,
        id: Some(207700),
        queue: Some("com.apple.main-thread".into()),
        frames: vec![0x1a8e93000],
        ..Thread::default()
    };
    let worker = r.threads.remove(0);
    r.threads = vec![crashed, main, worker];
    r.exception.as_mut().unwrap().crashed_thread = Some(2);
    r.meta.as_mut().unwrap().thread_count = Some(3);
    r
}

#[test]
fn threads_are_numbered_and_printed_in_task_order_with_the_crashed_one_marked() {
    let report = crashed_third_written_first();
    let bytes = report_format::owned::to_bytes(&report).unwrap();
    let mut loaded = viewer::load(&bytes).unwrap();
    let text = viewer::render_loaded(&mut loaded, Layout::Modern, Format::Text, None);
    assert!(text.contains("\nTriggered by Thread:  2\n"), "{text}");
    let t0 = text.find("Thread 0 name:   Dispatch queue: com.apple.main-thread\nThread 0:\n").expect("thread 0");
    let t1 = text.find("Thread 1 name:  worker\nThread 1:\n").expect("thread 1");
    let t2 = text.find("Thread 2 name:  crasher\nThread 2 Crashed:\n0   iOSCrashingTest").expect("thread 2");
    assert!(t0 < t1 && t1 < t2, "threads out of task order:\n{text}");
    assert!(text.contains("\nThread 2 crashed with ARM Thread State (64-bit):\n"));
    assert!(!text.contains("Thread 0 Crashed"));
    // A model handed over unsorted (not through the decoder) is printed in index order too.
    let direct = viewer::render_report(&report, &[]);
    assert_eq!(direct, text);
    // macOS: `Crashed Thread:` names the task index and, after two spaces as Apple prints it, the thread's name.
    let mut mac = report.clone();
    mac.meta.as_mut().unwrap().os.name = Some("macOS".into());
    let text = viewer::render_report(&mac, &[]);
    assert!(text.contains("\nCrashed Thread:        2  crasher\n"), "{text}");
    let (a, b) = (text.find("\nThread 0::").unwrap(), text.find("\nThread 2 Crashed:: crasher\n").unwrap());
    assert!(a < b);
}

#[test]
fn legacy_rendering_snapshot() {
    let text = render(&ios_report(), Layout::Legacy, Format::Text);
    assert!(text.contains("Version:             1 (1.0)\n"), "legacy prints CFBundleVersion first");
    assert!(text.contains("\t0x00000001007da1cc 0x1007d4000 + 25036\n"));
    assert!(text.contains("Termination Reason: Namespace SIGNAL, Code 0xb\n"));
    insta::assert_snapshot!("ios_legacy", text);
}

#[test]
fn linux_rendering_uses_linux_signal_numbers_and_build_ids() {
    let text = render(&linux_report(), Layout::Modern, Format::Text);
    assert!(text.contains("Exception Type:  SIGBUS (BUS_ADRERR)\n"), "{text}");
    assert!(text.contains("Termination Reason: SIGNAL 7 Bus error: 7\n"));
    assert!(text.contains("OS Version:          Linux 6.1.0-18-amd64 (#1 SMP Debian)\n"));
    assert!(text.contains("Code Type:           X86-64 (Native)\n"));
    assert!(text.contains("<abcdef0123>"));
    assert!(text.contains("Error Code:      0x00000006 (no mapping for user data write)\nTrap Number:     14\n"));
    insta::assert_snapshot!("linux_modern", text);
}

#[test]
fn json_has_stable_keys() {
    let json = render(&ios_report(), Layout::Modern, Format::Json);
    let v: serde_json::Value = serde_json::from_str(&json).unwrap();
    assert_eq!(v["source"], "report");
    assert_eq!(v["report"]["meta"]["process"]["name"], "iOSCrashingTest");
    assert_eq!(v["crash_log"]["exception"]["exception_type"], "EXC_BAD_ACCESS (SIGSEGV)");
    assert_eq!(v["problems"].as_array().unwrap().len(), 0);
    insta::assert_snapshot!("ios_json", json);
}

#[test]
fn truncated_report_renders_intact_parts_and_says_what_is_missing() {
    let bytes = report_format::owned::to_bytes(&ios_report()).unwrap();
    let full = viewer::render_bytes(&bytes).unwrap();
    assert!(!full.contains("Report Damage"));
    // Cut in the middle of the last section (the images): header and threads survive.
    let cut = &bytes[..bytes.len() - 40];
    let mut loaded = viewer::load(cut).unwrap();
    assert!(!loaded.problems().is_empty());
    let text = viewer::render_loaded(&mut loaded, Layout::Modern, Format::Text, None);
    assert!(text.starts_with("\nReport Damage: this report is incomplete"), "{text}");
    assert!(text.contains("truncated") || text.contains("no end marker"), "{text}");
    assert!(text.contains("Process:             iOSCrashingTest [1730]"));
    assert!(text.contains("Thread 0 Crashed:"));
}

#[test]
fn corrupt_section_is_named_with_its_byte_offset() {
    let mut bytes = report_format::owned::to_bytes(&ios_report()).unwrap();
    // Flip a byte inside the first section's payload (after the file header and the section header).
    let decoded = report_format::decode(&bytes).unwrap();
    let first = decoded.sections[0];
    let at = first.offset + 24;
    bytes[at] ^= 0xff;
    let mut loaded = viewer::load(&bytes).unwrap();
    let text = viewer::render_loaded(&mut loaded, Layout::Modern, Format::Text, None);
    let problems = loaded.problems().join("\n");
    assert!(problems.contains(&format!("at byte {}", first.offset)), "{problems}");
    assert!(text.contains(&problems.lines().next().unwrap().to_string()));
    // Threads are in later sections and survive.
    assert!(text.contains("Thread 1 name:  worker"), "{text}");
}

#[test]
fn unknown_input_is_a_one_line_error() {
    let e = viewer::load(b"GIF89a...").unwrap_err();
    let msg = e.to_string();
    assert!(!msg.contains('\n'));
    assert!(msg.contains("expected a crash report") && msg.contains(".ips"), "{msg}");
}

fn all_renderings(bytes: &[u8]) {
    if let Ok(mut l) = viewer::load(bytes) {
        for layout in [Layout::Modern, Layout::Legacy] {
            for format in [Format::Text, Format::Json] {
                let _ = viewer::render_loaded(&mut l, layout, format, None);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        all_renderings(&bytes);
        let mut with_magic = report_format::framing::MAGIC.to_vec();
        with_magic.extend_from_slice(&bytes);
        all_renderings(&with_magic);
    }

    #[test]
    fn truncated_and_mangled_reports_never_panic(cut in 0usize..4096, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8)) {
        let mut bytes = report_format::owned::to_bytes(&ios_report()).unwrap();
        bytes.truncate(cut.min(bytes.len()));
        all_renderings(&bytes);
        let n = bytes.len();
        if n > 0 {
            for (i, x) in flips { bytes[i % n] ^= x; }
        }
        all_renderings(&bytes);
    }

    #[test]
    fn truncated_and_mangled_ips_never_panic(which in 0usize..2, cut in 0usize..30000, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..8)) {
        let path = ["ios15-swift-assert", "macos12-single-target"][which];
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/third_party/macsymbolicator");
        let mut bytes = std::fs::read(dir.join(path).join("report.ips")).unwrap();
        bytes.truncate(cut.min(bytes.len()));
        all_renderings(&bytes);
        let n = bytes.len();
        if n > 0 {
            for (i, x) in flips { bytes[i % n] ^= x; }
        }
        all_renderings(&bytes);
    }
}

#[test]
fn ips_output_round_trips_through_our_ips_reader() {
    let mut mac = ios_report();
    mac.meta.as_mut().unwrap().os = Os { name: Some("macOS".into()), version: Some("14.5".into()), build: None };
    for (what, report) in [
        ("ios", ios_report()),
        ("linux", linux_report()),
        ("macos", mac),
        ("crashed third", crashed_third_written_first()),
    ] {
        let ips = render(&report, Layout::Modern, Format::Ips);
        let (meta, body) = ips.split_once('\n').unwrap();
        assert!(!meta.contains('\n'));
        let meta: serde_json::Value = serde_json::from_str(meta).unwrap();
        assert_eq!(meta["bug_type"], "309", "{what}");
        let body: serde_json::Value = serde_json::from_str(body).unwrap();
        assert!(body["usedImages"].is_array() && body["threads"].is_array() && body["exception"].is_object());
        for layout in [Layout::Modern, Layout::Legacy] {
            let mut back = viewer::load(ips.as_bytes()).unwrap();
            assert!(matches!(back, viewer::Loaded::Ips(_)), "{what}");
            let text = viewer::render_loaded(&mut back, layout, Format::Text, None);
            assert_eq!(text, render(&report, layout, Format::Text), "{what} {layout:?}");
        }
    }
    // The ios report's Application Specific Information lands in `asi`, the crashed thread's registers in
    // `threadState`, the image UUID dashed.
    let ips = render(&ios_report(), Layout::Modern, Format::Ips);
    let body: serde_json::Value = serde_json::from_str(ips.split_once('\n').unwrap().1).unwrap();
    assert_eq!(body["asi"]["iOSCrashingTest"][0], "Fatal error: boom");
    assert_eq!(body["threads"][0]["threadState"]["esr"]["value"], 0x92000006u64);
    assert_eq!(body["usedImages"][0]["uuid"], "82d13d98-219e-3040-b62a-07a297007a7c");
    assert_eq!(body["faultingThread"], 0);
}

/// The ios report as an uncaught `NSException` (SIGABRT), with its throw-site stack and a user key/value.
fn objc_exception_report() -> Report {
    let mut r = ios_report();
    r.exception = Some(Exception {
        signal: Some(6),
        crashed_thread: Some(0),
        language: Some(LanguageException {
            kind: "objc".into(),
            type_name: Some("NSInvalidArgumentException".into()),
            reason: Some("*** -[__NSArrayM insertObject:atIndex:]: object cannot be nil".into()),
            user_info: Some("NSDebugDescription: nil object".into()),
            thread_id: Some(207732),
            backtrace: vec![0x1a8e9305c, 0x1007da4bc, 0x1007da384],
            ..LanguageException::default()
        }),
        ..Exception::default()
    });
    r.messages.clear();
    r.user.insert("screen".into(), "checkout".into());
    r.user.insert("user.id".into(), "42".into());
    r
}

#[test]
fn uncaught_objc_exception_is_shown_as_apple_does() {
    let r = objc_exception_report();
    let text = render(&r, Layout::Modern, Format::Text);
    let want = "Triggered by Thread:  0\n\n\
                Application Specific Information:\n\
                *** Terminating app due to uncaught exception 'NSInvalidArgumentException', reason: '*** -[__NSArrayM insertObject:atIndex:]: object cannot be nil'\n\n\n\
                User Values:\nscreen: checkout\nuser.id: 42\n\n\n\
                Last Exception Backtrace:\n\
                0   CoreFoundation                \t       0x1a8e9305c 0x1a8e88000 + 45148\n\
                1   iOSCrashingTest               \t       0x1007da4bc 0x1007d4000 + 25788\n\
                2   iOSCrashingTest               \t       0x1007da384 0x1007d4000 + 25476\n\n\
                Thread 0 name:   Dispatch queue: com.apple.main-thread\n";
    assert!(text.contains(want), "{text}");
    insta::assert_snapshot!("ios_objc_exception", text);
    let legacy = render(&r, Layout::Legacy, Format::Text);
    assert!(legacy.contains(
        "Last Exception Backtrace:\n0   CoreFoundation                \t0x00000001a8e9305c 0x1a8e88000 + 45148\n"
    ));

    // JSON carries the exception's fields; .ips carries `asi` and `lastExceptionBacktrace`, and reads back.
    let json: serde_json::Value = serde_json::from_str(&render(&r, Layout::Modern, Format::Json)).unwrap();
    assert_eq!(json["crash_log"]["language_exception"]["kind"], "objc");
    assert_eq!(json["crash_log"]["language_exception"]["user_info"], "NSDebugDescription: nil object");
    assert_eq!(json["crash_log"]["last_exception_backtrace"][1]["address"], 0x1007da4bcu64);
    assert_eq!(json["crash_log"]["user_values"][0][0], "screen");
    let ips = render(&r, Layout::Modern, Format::Ips);
    let body: serde_json::Value = serde_json::from_str(ips.split_once('\n').unwrap().1).unwrap();
    assert_eq!(body["lastExceptionBacktrace"][0]["imageIndex"], 1);
    assert_eq!(body["lastExceptionBacktrace"][0]["imageOffset"], 45148);
    assert!(body["asi"].to_string().contains("Terminating app due to uncaught exception 'NSInvalidArgumentException'"));
    let mut back = viewer::load(ips.as_bytes()).unwrap();
    let again = viewer::render_loaded(&mut back, Layout::Modern, Format::Text, None);
    let from_ips = want.replace("User Values:\nscreen: checkout\nuser.id: 42\n\n\n", "");
    assert!(again.contains(&from_ips), "{again}");
}

#[test]
fn cxx_and_rust_lines_follow_their_runtimes_wording() {
    let mut r = linux_report();
    let lx = |kind: &str, t: Option<&str>, reason: &str, loc: Option<&str>| LanguageException {
        kind: kind.into(),
        type_name: t.map(Into::into),
        reason: Some(reason.into()),
        location: loc.map(Into::into),
        ..LanguageException::default()
    };
    r.messages.clear();
    r.exception.as_mut().unwrap().language = Some(lx("c++", Some("St13runtime_error"), "boom", None));
    let text = render(&r, Layout::Modern, Format::Text);
    assert!(text.contains("Application Specific Information:\nterminating due to uncaught exception of type std::runtime_error: boom\n\n\n"), "{text}");
    r.exception.as_mut().unwrap().language = Some(lx("rust", None, "index out of bounds", Some("src/main.rs:3:5")));
    r.messages = vec![Message { source: Some("panic".into()), text: "first panic".into() }];
    let text = render(&r, Layout::Modern, Format::Text);
    assert!(
        text.contains(
            "Application Specific Information:\npanicked at src/main.rs:3:5:\nindex out of bounds\nfirst panic\n\n\n"
        ),
        "{text}"
    );
}

/// Why it crashed in `.ips` output, the way Apple's files carry it: the reasons are `asi` lines under one image's
/// name (the fixtures: `"asi" : {"libsystem_malloc.dylib":["BUG IN CLIENT OF LIBMALLOC: ...", ...]}`), in the order
/// of the text's Application Specific Information, and `exception` keeps only type, signal and codes: Apple's
/// `exception.message` is the Exception Message line (the kernel's description of an `EXC_GUARD` or
/// `EXC_RESOURCE`), which no fixture fills from an abort message, an uncaught exception or a fatal error. The `.ips`
/// reads back to the same text.
#[test]
fn ips_keeps_why_it_crashed_in_asi_and_leaves_exception_message_alone() {
    let mut r = linux_report();
    r.exception.as_mut().unwrap().signal = Some(6);
    r.exception.as_mut().unwrap().language = Some(LanguageException {
        kind: "rust".into(),
        reason: Some("index out of bounds: the len is 3 but the index is 7".into()),
        location: Some("src/orders.rs:41:13".into()),
        ..LanguageException::default()
    });
    r.messages = vec![
        Message { source: Some("panic".into()), text: "an earlier panic".into() },
        Message { source: Some("abort".into()), text: "free(): invalid pointer".into() },
        Message { source: Some("app".into()), text: "saving order 7".into() },
    ];
    let text = render(&r, Layout::Modern, Format::Text);
    let lines = [
        "panicked at src/orders.rs:41:13:\nindex out of bounds: the len is 3 but the index is 7",
        "an earlier panic",
        "free(): invalid pointer",
        "saving order 7",
    ];
    let want = format!("Application Specific Information:\n{}\n\n\n", lines.join("\n"));
    assert!(text.contains(&want), "{text}");
    assert!(!text.contains("Exception Message"), "{text}");

    let ips = render(&r, Layout::Modern, Format::Ips);
    let body: serde_json::Value = serde_json::from_str(ips.split_once('\n').unwrap().1).unwrap();
    let asi = body["asi"].as_object().expect("asi object");
    assert_eq!(asi.len(), 1, "one reporting image: {asi:?}");
    let (_, got) = asi.iter().next().unwrap();
    assert_eq!(got, &serde_json::json!(lines), "asi lines in the text's order");
    let exception = body["exception"].as_object().expect("exception object");
    assert!(!exception.contains_key("message"), "{exception:?}");
    // Linux: the signal is the exception type (no Mach exception to put before it).
    assert_eq!(exception["type"], "SIGABRT");
    let mut back = viewer::load(ips.as_bytes()).unwrap();
    assert_eq!(viewer::render_loaded(&mut back, Layout::Modern, Format::Text, None), text);
}

/// Format 2.0 keeps images nothing points into by path only (`Image::name_only`): Binary Images lists only the
/// images with a load address, and the frames still resolve to theirs.
#[test]
fn name_only_images_are_not_binary_images() {
    let mut r = ios_report();
    r.images.push(Image {
        index: 2,
        name: "libunused.dylib".into(),
        path: Some("/usr/lib/libunused.dylib".into()),
        name_only: true,
        ..Image::default()
    });
    let text = render(&r, Layout::Modern, Format::Text);
    assert!(!text.contains("libunused"), "{text}");
    assert_eq!(text, render(&ios_report(), Layout::Modern, Format::Text));
}

/// The ios report whose crashed thread ran a Swift async function: frame 2 is `main`'s address + 1 found through
/// the async context chain (trust `async`, format 2.2: a resume function is stored as its entry + 1), as the
/// handler's walker stores it; `async_trust` is the trust of frame 2 (another value to compare with).
fn swift_async_report(async_trust: report_format::model::FrameTrust) -> Report {
    use report_format::model::FrameTrust::*;
    let mut r = ios_report();
    r.format_version = (2, 2);
    let t = &mut r.threads[0];
    // pc, lr (a leaf), the async chain's frame (main + 1: 0x1007da344 is `_main`'s entry, link address 0x100006344
    // in the app's symbol table), the executor, the start.
    t.frames = vec![0x1007da1cc, 0x1007da4bc, 0x1007da345, 0x1a8e9305c, 0x5];
    t.frame_trust = vec![Context, LinkRegister, async_trust, Cfi, Cfi];
    r
}

fn fixture_dir(rel: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/third_party/macsymbolicator").join(rel)
}

#[test]
fn swift_async_frames_print_as_apple_prints_any_frame_and_only_json_keeps_the_mark() {
    // Apple's crash reports have no async frames (ReportCrash prints the OS stack; `.ips` frames have no key for
    // them), so an async frame is an ordinary line: the text and the `.ips` output are those of the same stack with
    // the frame found by unwind tables.
    use report_format::model::FrameTrust::{Async, Cfi};
    for format in [Format::Text, Format::Ips] {
        let with_mark = render(&swift_async_report(Async), Layout::Modern, format);
        assert_eq!(with_mark, render(&swift_async_report(Cfi), Layout::Modern, format), "{format:?}");
    }
    let text = render(&swift_async_report(Async), Layout::Modern, Format::Text);
    assert!(text.contains("\n2   iOSCrashingTest               \t       0x1007da345 0x1007d4000 + 25413\n"), "{text}");
    let json: serde_json::Value =
        serde_json::from_str(&render(&swift_async_report(Async), Layout::Modern, Format::Json)).unwrap();
    assert_eq!(json["report"]["format_version"], serde_json::json!([2, 4]));
    assert_eq!(json["report"]["threads"][0]["frame_trust"][2], "async");
    let frames = json["crash_log"]["threads"][0]["frames"].as_array().unwrap();
    let marks: Vec<&str> = frames.iter().map(|f| f["trust"].as_str().unwrap_or("")).collect();
    assert_eq!(marks, ["context", "link_register", "async", "cfi", "cfi"]);
}

#[test]
fn a_swift_async_frame_names_its_resume_function_not_the_function_before_it() {
    // Stored as entry + 1, looked up at address - 1 like every caller: the entry itself. The same entry stored
    // without the + 1 would name the function before `main`.
    use report_format::model::FrameTrust::{Async, Cfi};
    let symbolicated = |r: &Report| {
        let bytes = report_format::owned::to_bytes(r).unwrap();
        let mut loaded = viewer::load(&bytes).unwrap();
        let mut store = viewer::symbols::SymbolStore::only(vec![fixture_dir("ios15-swift-assert")]);
        viewer::render_loaded(&mut loaded, Layout::Modern, Format::Text, Some(&mut store))
    };
    let text = symbolicated(&swift_async_report(Async));
    let line = text.lines().find(|l| l.starts_with("2   ")).unwrap();
    assert!(line.contains("0x1007da345 main + 1 (AppDelegate.swift:"), "{line}");
    let mut raw_entry = swift_async_report(Cfi);
    raw_entry.threads[0].frames[2] = 0x1007da344;
    let text = symbolicated(&raw_entry);
    let line = text.lines().find(|l| l.starts_with("2   ")).unwrap();
    assert!(!line.contains(" main + "), "the entry minus one lies in the function before main: {line}");
    assert!(line.contains("CrashClass"), "`CrashClass.deinit` ends right before main: {line}");
}
