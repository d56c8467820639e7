//! Compatibility: the committed format-1.0 and 1.1 reports must decode to exactly these values in every later version.
//! See `tests/data/README.md`.

use report_format::model::ImageId;
use report_format::{decode, Decoded};

fn v1() -> Decoded {
    let bytes = include_bytes!("data/report-v1.0.crashreport");
    decode(bytes).expect("format 1.0 decodes")
}

#[test]
fn v1_0_fixture_is_intact() {
    let d = v1();
    assert!(d.is_intact(), "{:?}", d.problems);
    assert_eq!(d.report.format_version, (1, 0));
    assert_eq!(d.sections.len(), 8);
}

#[test]
fn v1_0_meta_and_exception() {
    let r = v1().report;
    let m = r.meta.expect("meta");
    assert_eq!(m.report_id.to_string(), "6B5F0F36-1A2D-4C3E-9B7A-2104C8D15590");
    assert_eq!(m.capture_time_ns, Some(1_763_700_000_123_456_789));
    assert_eq!(m.handler_version.as_deref(), Some("0.1.0"));
    assert_eq!(m.arch.as_deref(), Some("arm64"));
    assert_eq!(m.hardware_model.as_deref(), Some("iPhone14,2"));
    assert_eq!(
        (m.os.name.as_deref(), m.os.version.as_deref(), m.os.build.as_deref()),
        (Some("iPhone OS"), Some("15.5"), Some("19F77"))
    );
    let p = &m.process;
    assert_eq!((p.pid, p.parent_pid), (Some(1730), Some(1)));
    assert_eq!(p.name.as_deref(), Some("Demo"));
    assert_eq!(p.path.as_deref(), Some("/private/var/containers/Bundle/Application/0A1B/Demo.app/Demo"));
    assert_eq!(p.parent_name.as_deref(), Some("launchd"));
    assert_eq!(p.bundle_id.as_deref(), Some("com.example.demo"));
    assert_eq!((p.short_version.as_deref(), p.build_version.as_deref()), (Some("1.2"), Some("42")));
    assert_eq!(p.launch_time_ns, Some(1_763_699_990_000_000_000));
    assert_eq!((m.thread_count, m.image_count, m.minimal, m.note), (Some(2), Some(2), false, None));

    let e = r.exception.expect("exception");
    assert_eq!(e.mach_type, Some(1));
    assert_eq!(e.mach_codes, vec![1, 0x10]);
    assert_eq!((e.signal, e.si_code, e.fault_address, e.crashed_thread), (Some(11), Some(1), Some(0x10), Some(0)));
    assert_eq!(r.messages.len(), 1);
    assert_eq!(r.messages[0].source.as_deref(), Some("libswiftCore.dylib"));
    assert_eq!(r.messages[0].text, "Fatal error: Unexpectedly found nil");
    assert_eq!(r.user.get("user.id").map(String::as_str), Some("42"));
}

#[test]
fn v1_0_threads() {
    let r = v1().report;
    assert_eq!(r.threads.len(), 2);
    let t0 = &r.threads[0];
    assert!(t0.crashed && t0.captured);
    assert_eq!(t0.id, Some(0x2a41));
    assert_eq!(t0.queue.as_deref(), Some("com.apple.main-thread"));
    assert_eq!(t0.register_set.as_deref(), Some("arm64"));
    assert_eq!(t0.registers.len(), 36);
    assert_eq!(t0.register("x0"), Some(0x1000));
    assert_eq!(t0.register("fp"), Some(0x1000 + 29));
    assert_eq!(t0.register("pc"), Some(0x1_0000_4f50));
    assert_eq!(t0.register("esr"), Some(0x1000 + 35));
    assert_eq!(t0.frames, vec![0x1_0000_4f50, 0x1_0000_4e10, 0x1_0000_4d00, 0x1_8e0b_2a40]);
    assert_eq!((t0.repeats[0].start, t0.repeats[0].len, t0.repeats[0].count), (1, 2, 3));
    let t1 = &r.threads[1];
    assert!(!t1.captured && !t1.crashed);
    assert_eq!(t1.name.as_deref(), Some("worker"));
    assert_eq!(t1.not_captured_reason.as_deref(), Some("did not answer the stop signal within 100 ms"));
    assert!(t1.registers.is_empty() && t1.frames.is_empty());
}

#[test]
fn v1_0_images() {
    let r = v1().report;
    assert_eq!(r.images.len(), 2);
    let a = &r.images[0];
    assert_eq!(
        (a.index, a.name.as_str(), a.load_address, a.size, a.slide),
        (0, "Demo", 0x1_0000_0000, 0x8000, Some(0))
    );
    assert_eq!(a.id.as_ref().map(ImageId::to_hex).as_deref(), Some("82d13d98219e3040b62a07a297007a7c"));
    assert!(matches!(a.id, Some(ImageId::Uuid(_))));
    assert_eq!(a.arch, None);
    let b = &r.images[1];
    assert_eq!((b.name.as_str(), b.path.as_deref()), ("libdemo", Some("/usr/lib/libdemo.so")));
    assert_eq!(b.id.as_ref().map(ImageId::to_hex).as_deref(), Some("deadbeef0102030405060708090a0b0c0d0e0f10"));
    assert!(matches!(b.id, Some(ImageId::BuildId(_))));
    assert_eq!(b.arch.as_deref(), Some("arm64e"));
    assert_eq!(r.image_for(0x1_0000_4f50).map(|i| i.name.as_str()), Some("Demo"));
}

// ---- format 1.1 (`data/report-v1.1.crashreport`, made by the former `examples/make_v1_1_fixture.rs`, see `data/README.md`) ----

fn v1_1() -> Decoded {
    let bytes = include_bytes!("data/report-v1.1.crashreport");
    decode(bytes).expect("format 1.1 decodes")
}

#[test]
fn v1_1_fixture_is_intact() {
    let d = v1_1();
    assert!(d.is_intact(), "{:?}", d.problems);
    assert_eq!(d.report.format_version, (1, 1));
    assert_eq!(d.sections.len(), 10);
    let m = d.report.meta.as_ref().expect("meta");
    assert_eq!(m.report_id.to_string(), "1E2D3C4B-5A69-4887-96A5-B4C3D2E1F00F");
    assert_eq!((m.thread_count, m.image_count), (Some(4), Some(5)));
    assert_eq!(m.os.name.as_deref(), Some("Linux"));
    assert_eq!(m.process.path.as_deref(), Some("/opt/demo/bin/demo-server"));
    let e = d.report.exception.as_ref().expect("exception");
    assert_eq!((e.signal, e.si_code, e.fault_address, e.crashed_thread), (Some(11), Some(1), Some(0x18), Some(2)));
    assert_eq!(d.report.messages[0].text, "called `Option::unwrap()` on a `None` value");
    assert_eq!(d.report.user.len(), 2);
}

#[test]
fn v1_1_threads_keep_frames_trust_and_registers() {
    use report_format::model::FrameTrust::*;
    let r = v1_1().report;
    assert_eq!(r.threads.iter().map(|t| t.index).collect::<Vec<_>>(), vec![0, 1, 2, 3]);
    let c = r.crashed_thread().expect("crashed");
    assert_eq!((c.index, c.id, c.name.as_deref()), (2, Some(4245), Some("worker-2")));
    assert_eq!(c.registers.len(), 24);
    assert_eq!(
        (c.register("rip"), c.register("rsp"), c.register("rbp")),
        (Some(0x5555_5555_6123), Some(0x7ffd_1234_5600), Some(0x7ffd_1234_5670))
    );
    assert_eq!(c.register("rax"), Some(0x100));
    assert_eq!(c.register("cr2"), Some(0x18));
    assert_eq!(
        c.frames,
        vec![0x5555_5555_6123, 0x5555_5555_7000, 0x5555_5555_7100, 0x7f3a_1002_9d90, 0x7f3a_1012_6a00]
    );
    assert_eq!(c.frame_trust, vec![Context, Cfi, Cfi, FramePointer, Scan]);
    assert_eq!((c.repeats[0].start, c.repeats[0].len, c.repeats[0].count), (1, 2, 40));
    let t0 = &r.threads[0];
    assert_eq!(
        t0.registers.iter().map(|r| (r.name.as_str(), r.value)).collect::<Vec<_>>(),
        vec![("rbp", 0x7f3a_0fff_fe40), ("rsp", 0x7f3a_0fff_fe00)]
    );
    assert_eq!(t0.frames, vec![0x7f3a_1009_1a2b, 0x7f3a_1008_0c00, 0x5555_5555_8000]);
    assert_eq!(t0.frame_trust, vec![Context, Cfi, LinkRegister]);
    let t1 = &r.threads[1];
    assert_eq!(t1.frames, vec![0x7f3a_1009_1a2b, 0x7f3a_2000_0100]);
    assert_eq!(t1.frame_trust, vec![Context], "a shorter tr stays shorter");
    assert!(t1.frames_truncated);
    assert_eq!(t1.registers.iter().map(|r| r.name.as_str()).collect::<Vec<_>>(), vec!["rax", "rcx"]);
    let t3 = &r.threads[3];
    assert!(!t3.captured);
    assert_eq!(t3.not_captured_reason.as_deref(), Some("did not answer the stop signal within 100 ms"));
    assert!(t3.frames.is_empty() && t3.frame_trust.is_empty() && t3.registers.is_empty());
}

#[test]
fn v1_1_images() {
    let r = v1_1().report;
    assert_eq!(r.images.len(), 5);
    let names: Vec<&str> = r.images.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(names, vec!["demo-server", "libc.so.6", "libm.so.6", "libgcc_s.so.1", "ld-linux-x86-64.so.2"]);
    let libc = &r.images[1];
    assert_eq!(
        (libc.index, libc.load_address, libc.size, libc.slide),
        (1, 0x7f3a_1000_0000, 0x16_0000, Some(0x7f3a_1000_0000))
    );
    assert_eq!(libc.id.as_ref().map(ImageId::to_hex).as_deref(), Some("2222222222222222222222222222222222222222"));
    assert_eq!(r.images[3].id, None);
    assert_eq!(r.image_for(0x7f3a_1002_9d90).map(|i| i.index), Some(1));
    assert_eq!(r.image_for(0x5555_5555_6123).map(|i| i.index), Some(0));
}

// ---- format 2.0 (`data/report-v2.0.crashreport`: the 2.0 encoder's every-field case, see `data/README.md`) ----

#[test]
fn v2_0_fixture_reads_without_the_2_1_fields() {
    let d = report_format::decode(include_bytes!("data/report-v2.0.crashreport")).expect("a 2.0 file decodes");
    // The case's frames name an image index it leaves out on purpose: those are its only problems.
    assert!(d.problems.iter().all(|p| format!("{p:?}").contains("FrameImageMissing")), "{:?}", d.problems);
    let r = d.report;
    assert_eq!(r.format_version, (2, 0));
    let e = r.exception.expect("exception");
    assert_eq!((e.signal, e.si_code, e.crashed_thread), (Some(11), Some(-6), Some(0)));
    assert_eq!(e.language, None, "2.0 has no lx");
    assert_eq!(r.messages[0].text, "Fatal error: Unexpectedly found nil");
    assert!(!r.threads.is_empty() && !r.images.is_empty());
}

// ---- format 2.1 (`data/report-v2.1.crashreport`: the 2.1 encoder's every-field case, see `data/README.md`) ----

#[test]
fn v2_1_fixture_reads_with_its_language_exception_and_trust() {
    use report_format::model::FrameTrust::*;
    let d = report_format::decode(include_bytes!("data/report-v2.1.crashreport")).expect("a 2.1 file decodes");
    // The case's frames name an image index it leaves out on purpose: those are its only problems.
    assert!(d.problems.iter().all(|p| format!("{p:?}").contains("FrameImageMissing")), "{:?}", d.problems);
    let r = d.report;
    assert_eq!(r.format_version, (2, 1));
    let e = r.exception.expect("exception");
    assert_eq!((e.signal, e.si_code, e.crashed_thread), (Some(11), Some(-6), Some(0)));
    let lx = e.language.expect("2.1 has lx");
    assert_eq!(lx.kind, "rust");
    assert_eq!(lx.location.as_deref(), Some("src/main.rs:12:5"));
    assert_eq!(lx.backtrace, vec![0x1_0000_4f50, u64::MAX]);
    let t0 = r.threads.iter().find(|t| t.index == 0).expect("thread 0");
    // Written from the trust bytes [1, 2, 3, 4, 5, 0, 200]: 200 is no value (written as 0); trailing unknowns say
    // nothing.
    assert_eq!(t0.frame_trust, vec![Context, Cfi, FramePointer, Scan, LinkRegister]);
    assert!(t0.frames_truncated);
}

// ---- format 2.2 (`data/report-v2.2.crashreport`: the 2.2 encoder's every-field case, see `data/README.md`) ----

#[test]
fn v2_2_fixture_reads_as_a_crash_with_its_trust() {
    use report_format::model::FrameTrust::*;
    let d = report_format::decode(include_bytes!("data/report-v2.2.crashreport")).expect("a 2.2 file decodes");
    // The case's frames name an image index it leaves out on purpose: those are its only problems.
    assert!(d.problems.iter().all(|p| format!("{p:?}").contains("FrameImageMissing")), "{:?}", d.problems);
    let r = d.report;
    assert_eq!(r.format_version, (2, 2));
    let meta = r.meta.expect("meta");
    assert_eq!(meta.non_fatal, None, "2.2 has no nf: every 2.2 report is a crash");
    let e = r.exception.expect("exception");
    assert_eq!((e.signal, e.si_code, e.crashed_thread), (Some(11), Some(-6), Some(0)));
    assert_eq!(e.language.expect("lx").kind, "rust");
    let t0 = r.threads.iter().find(|t| t.index == 0).expect("thread 0");
    assert_eq!(t0.frame_trust, vec![Context, Cfi, FramePointer, Scan, LinkRegister]);
    assert!(t0.frames_truncated);
}

// ---- format 2.3 (`data/report-v2.3.crashreport`: the 2.3 encoder's every-field case, see `data/README.md`) ----

#[test]
fn v2_3_fixture_reads_as_before_the_padding_rule() {
    let bytes = include_bytes!("data/report-v2.3.crashreport");
    let d = report_format::decode(bytes).expect("a 2.3 file decodes");
    assert!(d.problems.iter().all(|p| format!("{p:?}").contains("FrameImageMissing")), "{:?}", d.problems);
    assert!(d.end_found);
    assert_eq!(d.padding, 0);
    let r = d.report;
    assert_eq!(r.format_version, (2, 3));
    let e = r.exception.expect("exception");
    assert_eq!((e.signal, e.si_code, e.crashed_thread), (Some(11), Some(-6), Some(0)));
    assert_eq!(e.language.expect("lx").kind, "rust");
}

// ---- format 2.4: zero padding after the end section ----

/// Zeros after the end section are padding (a report written into the reserved file), not damage: the same
/// sections, the same problems, and `padding` counts them. Anything else after the end is still reported.
#[test]
fn zero_padding_after_the_end_is_not_damage_but_other_bytes_are() {
    let bytes = include_bytes!("data/report-v2.3.crashreport").to_vec();
    let plain = report_format::decode(&bytes).expect("decodes");
    let mut padded = bytes.clone();
    padded.resize(65_536, 0);
    let d = report_format::decode(&padded).expect("padded decodes");
    assert_eq!(d.padding, 65_536 - bytes.len());
    assert_eq!((d.report, d.problems, d.sections, d.end_found), (plain.report, plain.problems, plain.sections, true));

    let mut junk = padded.clone();
    junk[60_000] = 1;
    let d = report_format::decode(&junk).expect("decodes");
    assert_eq!(d.padding, 0);
    assert!(
        d.problems.iter().any(
            |p| matches!(p.kind, report_format::ProblemKind::TrailingBytes { len } if len == 65_536 - bytes.len())
        ),
        "{:?}",
        d.problems
    );
}
