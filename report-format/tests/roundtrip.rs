//! Encoding then decoding gives back exactly what went in.

mod common;

use report_format::framing::SectionKind;
use report_format::{decode, owned, SectionStatus};

#[test]
fn full_report_roundtrips_exactly() {
    let report = common::sample_report(4, 20, 10);
    let bytes = owned::to_bytes(&report).expect("encodes");
    let d = decode(&bytes).expect("decodes");
    assert!(d.is_intact(), "{:?}", d.problems);
    assert_eq!(d.report, report);
    assert!(d.sections.iter().all(|s| s.status == SectionStatus::Ok));
    // META, EXCEPTION, MESSAGES, USER, 4 threads, 1 IMAGES (8 images with an address), 1 IMAGE NAMES (2), END.
    let kinds: Vec<SectionKind> = d.sections.iter().map(|s| s.kind).collect();
    assert_eq!(kinds.len(), 11, "{kinds:?}");
    assert_eq!(kinds[8..10], [SectionKind::Images, SectionKind::ImageNames]);
    assert_eq!(kinds[0], SectionKind::Meta);
    assert_eq!(*kinds.last().expect("end"), SectionKind::End);
}

#[test]
fn named_registers_and_helpers() {
    let report = common::sample_report(2, 3, 2);
    let d = decode(&owned::to_bytes(&report).expect("encodes")).expect("decodes");
    let crashed = d.report.crashed_thread().expect("crashed thread");
    assert_eq!(crashed.index, 0);
    assert_eq!(crashed.register("x0"), Some(0));
    assert_eq!(crashed.register("pc"), Some(32));
    assert_eq!(crashed.register("esr"), Some(35));
    let other = &d.report.threads[1];
    assert_eq!(other.register("far"), None, "values not captured stay absent");
    assert_eq!(d.report.image_for(0x1_8010_0004).map(|i| i.index), Some(1));
    assert_eq!(
        d.report.meta.as_ref().map(|m| m.report_id.to_string()).as_deref(),
        Some("6251125F-0919-4879-B36B-F5F2D1E6902E")
    );
}

#[test]
fn empty_report_is_valid() {
    let report = report_format::Report { format_version: (2, 4), ..Default::default() };
    let bytes = owned::to_bytes(&report).expect("encodes");
    let d = decode(&bytes).expect("decodes");
    assert!(d.is_intact());
    assert_eq!(d.report, report);
}

#[test]
fn image_index_gaps_survive() {
    let mut report = common::sample_report(1, 1, 6);
    report.images.retain(|i| i.index != 3);
    report.meta.as_mut().expect("meta").image_count = None;
    let d = decode(&owned::to_bytes(&report).expect("encodes")).expect("decodes");
    assert!(d.is_intact());
    assert_eq!(d.report.images, report.images);
}

#[test]
fn json_shape_is_stable() {
    let report = common::sample_report(1, 2, 1);
    let v = serde_json::to_value(&report).expect("json");
    assert_eq!(v["meta"]["report_id"], "6251125F-0919-4879-B36B-F5F2D1E6902E");
    assert_eq!(v["meta"]["process"]["bundle_id"], "jp.mahdi.iOSCrashingTest");
    assert_eq!(v["exception"]["mach_codes"][1], 0x1_ad98_ab74u64);
    assert_eq!(v["threads"][0]["registers"][0]["name"], "x0");
    assert_eq!(v["images"][0]["id"]["kind"], "uuid");
    assert_eq!(v["images"][0]["id"]["hex"], "00000000000000000000000000000000");
    assert_eq!(v["user"]["screen"], "checkout");
}

/// LEB128 edges of THREAD `fr` (SCHEMA.md §4.3.2): absolute addresses 0, 127, 128 and u64::MAX, offsets 0, 127,
/// 128 from image 0 (one-byte tag) and from image 20 (two-byte tag), an offset near u64::MAX, every trust value.
#[test]
fn relative_frames_roundtrip_at_the_leb128_edges() {
    use report_format::model::{FrameTrust, Image, Thread};
    let mut report = common::sample_report(1, 0, 0);
    let img = |index: u32, load: u64, size: u64| Image {
        index,
        name: format!("lib{index}"),
        path: Some(format!("/usr/lib/lib{index}")),
        load_address: load,
        size,
        ..Image::default()
    };
    report.images = (0..=20).map(|i| img(i, 0x1000_0000 + u64::from(i) * 0x10_0000, 0x1000)).collect();
    report.images[0] = img(0, 0x10_0000, 0x1000);
    report.images.push(img(21, 1 << 40, u64::MAX - (1 << 40)));
    let frames = vec![
        0,
        127,
        128,
        u64::MAX,
        0x10_0000,
        0x10_0000 + 127,
        0x10_0000 + 128,
        0x1000_0000 + 20 * 0x10_0000,
        0x1000_0000 + 20 * 0x10_0000 + 128,
        u64::MAX - 1,
    ];
    let trust: Vec<FrameTrust> = (0..frames.len()).map(|k| FrameTrust::from_byte((k % 6) as u8 + 1)).collect();
    report.threads =
        vec![Thread { index: 0, crashed: true, frames: frames.clone(), frame_trust: trust, ..Thread::default() }];
    let bytes = owned::to_bytes(&report).expect("encodes");
    let d = decode(&bytes).expect("decodes");
    assert!(d.is_intact(), "{:?}", d.problems);
    assert_eq!(d.report, report);
    // The exact bytes of the first frames: tag, then the absolute address or the offset.
    let fr: &[u8] = &[
        0x01, 0x00, // trust 1, absolute 0
        0x02, 0x7f, // trust 2, absolute 127
        0x03, 0x80, 0x01, // trust 3, absolute 128
        0x04, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01, // trust 4, absolute u64::MAX
        0x0d, 0x00, // image 0: (0 + 1) << 3 | 5, offset 0
        0x0e, 0x7f, // image 0, trust 6 (Swift async, format 2.2), offset 127
        0x09, 0x80, 0x01, // image 0, trust 1, offset 128
        0xaa, 0x01, 0x00, // image 20: (21 << 3) | 2 = 170, offset 0
        0xab, 0x01, 0x80, 0x01, // image 20, trust 3, offset 128
    ];
    assert!(bytes.windows(fr.len()).any(|w| w == fr), "the fr bytes of SCHEMA.md §4.3.2");
}

#[test]
fn swift_async_frames_keep_their_mark_and_trust_7_stays_unknown() {
    use report_format::model::FrameTrust;
    assert_eq!(FrameTrust::from_byte(6), FrameTrust::Async);
    assert_eq!(FrameTrust::Async.to_byte(), 6);
    assert!(!FrameTrust::Async.is_exact_pc(), "stored as resume + 1: looked up at address - 1");
    assert_eq!(FrameTrust::from_byte(7), FrameTrust::Unknown);
    let mut report = common::sample_report(1, 4, 4);
    let t = &mut report.threads[0];
    t.frame_trust = vec![FrameTrust::Context, FrameTrust::LinkRegister, FrameTrust::Async, FrameTrust::Cfi];
    let d = decode(&owned::to_bytes(&report).expect("encodes")).expect("decodes");
    assert_eq!(d.report, report);
    assert_eq!(serde_json::to_value(FrameTrust::Async).expect("json"), "async");
}

#[test]
fn trust_is_kept_and_trailing_unknowns_say_nothing() {
    use report_format::model::FrameTrust;
    let mut report = common::sample_report(1, 4, 4);
    report.threads[0].frame_trust = vec![FrameTrust::Cfi];
    let d = decode(&owned::to_bytes(&report).expect("encodes")).expect("decodes");
    assert_eq!(d.report.threads[0].frame_trust, vec![FrameTrust::Cfi]);
    report.threads[0].frame_trust = Vec::new();
    let d = decode(&owned::to_bytes(&report).expect("encodes")).expect("decodes");
    assert!(d.report.threads[0].frame_trust.is_empty());
    assert_eq!(d.report, report);
}

#[test]
fn name_only_images_keep_index_and_path_and_match_no_address() {
    let report = common::sample_report(1, 2, 12);
    let d = decode(&owned::to_bytes(&report).expect("encodes")).expect("decodes");
    assert!(d.is_intact(), "{:?}", d.problems);
    let names: Vec<(u32, bool)> = d.report.images.iter().map(|i| (i.index, i.name_only)).collect();
    assert_eq!(names, (0..12).map(|i| (i, i % 4 == 3)).collect::<Vec<_>>());
    let im = &d.report.images[3];
    assert_eq!((im.load_address, im.size, im.id.is_none()), (0, 0, true));
    assert!(im.path.as_deref().is_some_and(|p| p.ends_with("SomeVeryLongFrameworkNameForTesting3")));
    assert_eq!(im.name, "SomeVeryLongFrameworkNameForTesting3");
    assert_eq!(d.report.image_for(0).map(|i| i.index), None, "a names-only image has no range");
    let v = serde_json::to_value(&d.report).expect("json");
    assert_eq!(v["images"][3]["name_only"], true);
    assert!(v["images"][0].get("name_only").is_none(), "left out of the JSON when false");
}
