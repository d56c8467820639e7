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
    // META, EXCEPTION, MESSAGES, USER, 4 threads, 1 image chunk, END.
    let kinds: Vec<SectionKind> = d.sections.iter().map(|s| s.kind).collect();
    assert_eq!(kinds.len(), 10, "{kinds:?}");
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
    let report = report_format::Report { format_version: (1, 1), ..Default::default() };
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
