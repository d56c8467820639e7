//! Damaged input: truncation, bit flips and garbage never panic, every intact section is recovered, and the
//! damage is reported with its section and byte offset.

mod common;

use proptest::prelude::*;
use report_format::framing::{SectionKind, FILE_HEADER_LEN};
use report_format::model::Thread;
use report_format::{decode, owned, DecodeError, Decoded, ProblemKind, Report, SectionStatus};
use std::sync::OnceLock;

fn encoded() -> &'static (Report, Vec<u8>, Decoded) {
    static E: OnceLock<(Report, Vec<u8>, Decoded)> = OnceLock::new();
    E.get_or_init(|| {
        let r = common::sample_report(6, 12, 70);
        let b = owned::to_bytes(&r).expect("encodes");
        let d = decode(&b).expect("decodes");
        assert!(d.is_intact());
        (r, b, d)
    })
}

/// `t` is its original `o`, except frames whose image section was lost: those the decoder must name
/// (`FrameImageMissing`) and give address 0, and only frames that did lie inside an image.
fn same_thread(d: &Decoded, t: &Thread, o: &Thread) -> Result<(), TestCaseError> {
    let mut want = o.clone();
    for p in &d.problems {
        if let ProblemKind::FrameImageMissing { thread, frame, image, offset } = p.kind {
            if thread == t.index {
                let f = frame as usize;
                prop_assert!(o.frames[f] != 0, "frame {} named but it was absolute", f);
                prop_assert_eq!(o.frames[f], 0x1_8000_0000 + image * 0x10_0000 + offset);
                want.frames[f] = 0;
            }
        }
    }
    prop_assert_eq!(t, &want);
    Ok(())
}

/// Thread indices whose sections lie wholly inside `range` of the intact file.
fn threads_within(d: &Decoded, keep: impl Fn(usize, usize) -> bool) -> Vec<u32> {
    let mut idx = 0usize;
    let mut out = Vec::new();
    for s in &d.sections {
        let end = s.offset + 20 + s.len as usize;
        if s.kind == SectionKind::Thread {
            if keep(s.offset, end) {
                out.push(d.report.threads[idx].index);
            }
            idx += 1;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn truncation_keeps_every_whole_section(cut in 0usize..20_000) {
        let (orig, bytes, full) = encoded();
        let cut = cut % (bytes.len() + 1);
        let res = decode(&bytes[..cut]);
        if cut < FILE_HEADER_LEN {
            prop_assert_eq!(res, Err(DecodeError::NotAReport));
            return Ok(());
        }
        let d = res.expect("a cut report still decodes");
        let expect = threads_within(full, |_, end| end <= cut);
        let got: Vec<u32> = d.report.threads.iter().map(|t| t.index).collect();
        prop_assert_eq!(&got, &expect);
        for t in &d.report.threads {
            same_thread(&d, t, &orig.threads[t.index as usize])?;
        }
        if cut < bytes.len() {
            prop_assert!(!d.is_intact());
            prop_assert!(d.problems.iter().any(|p| p.kind == ProblemKind::MissingEnd), "{:?}", d.problems);
            // The problem names the byte where the damage starts, inside the file.
            prop_assert!(d.problems.iter().all(|p| p.offset <= cut));
        } else {
            prop_assert!(d.is_intact());
        }
    }

    #[test]
    fn any_single_bit_flip_is_reported_and_loses_only_its_section(bit in 0usize..200_000) {
        let (orig, bytes, full) = encoded();
        let bit = bit % (bytes.len() * 8);
        let byte = bit / 8;
        let mut b = bytes.clone();
        b[byte] ^= 1 << (bit % 8);
        let res = decode(&b);
        if byte < 8 {
            prop_assert_eq!(res, Err(DecodeError::NotAReport));
            return Ok(());
        }
        let d = res.expect("decodes");
        prop_assert!(!d.is_intact(), "flip at byte {} went unnoticed", byte);
        let expect = threads_within(full, |start, end| !(start..end).contains(&byte));
        let got: Vec<u32> = d.report.threads.iter().map(|t| t.index).collect();
        prop_assert_eq!(&got, &expect);
        for t in &d.report.threads {
            same_thread(&d, t, &orig.threads[t.index as usize])?;
        }
        // Images outside the damaged section all survive.
        prop_assert!(d.report.images.len() >= orig.images.len() - 64);
        if let Some(s) = full.sections.iter().find(|s| (s.offset..s.offset + 20 + s.len as usize).contains(&byte)) {
            prop_assert!(d.problems.iter().any(|p| p.offset == s.offset), "no problem at {}: {:?}", s.offset, d.problems);
        }
    }

    #[test]
    fn garbage_never_panics(data in proptest::collection::vec(any::<u8>(), 0..4096), with_magic in any::<bool>()) {
        let mut input = data;
        if with_magic {
            let mut h = report_format::framing::file_header().to_vec();
            h.extend_from_slice(&input);
            input = h;
        }
        let _ = decode(&input);
    }

    #[test]
    fn many_flips_and_a_cut_never_panic_and_never_pass_off_damage(
        flips in proptest::collection::vec(0usize..1_000_000, 1..20),
        cut in 0usize..1_000_000,
    ) {
        let (orig, bytes, _) = encoded();
        let mut b = bytes.clone();
        for f in flips {
            let f = f % (b.len() * 8);
            b[f / 8] ^= 1 << (f % 8);
        }
        b.truncate(cut % (b.len() + 1));
        if let Ok(d) = decode(&b) {
            for t in &d.report.threads {
                if let Some(o) = orig.threads.get(t.index as usize) {
                    same_thread(&d, t, o)?;
                }
            }
        }
    }
}

#[test]
fn a_corrupt_section_header_is_skipped_and_named() {
    let (orig, bytes, full) = encoded();
    let victim = full.sections.iter().find(|s| s.kind == SectionKind::Thread).expect("a thread");
    let mut b = bytes.clone();
    b[victim.offset + 9] ^= 0xff; // the length field
    let d = decode(&b).expect("decodes");
    assert_eq!(d.report.threads.len(), orig.threads.len() - 1);
    let p = &d.problems[0];
    assert_eq!(p.offset, victim.offset);
    assert_eq!(p.kind, ProblemKind::CorruptSectionHeader { skipped: 20 + victim.len as usize });
    assert!(d.problems.iter().any(|p| p.kind == ProblemKind::MissingThread { index: 0 }));
    assert!(d.problems.iter().any(|p| matches!(p.kind, ProblemKind::SectionCount { .. })));
    assert_eq!(
        p.to_string(),
        format!("corrupt section header at byte {}: skipped {} bytes", victim.offset, 20 + victim.len)
    );
    assert!(d.end_found);
}

#[test]
fn a_payload_flip_names_section_and_offset() {
    let (_, bytes, full) = encoded();
    let victim = full.sections.iter().find(|s| s.kind == SectionKind::Images).expect("images");
    let mut b = bytes.clone();
    b[victim.offset + 30] ^= 0x10;
    let d = decode(&b).expect("decodes");
    let p = d.problems.iter().find(|p| p.section == Some(SectionKind::Images)).expect("reported");
    assert_eq!(p.offset, victim.offset);
    assert!(matches!(p.kind, ProblemKind::ChecksumMismatch { .. }));
    assert!(p.to_string().starts_with(&format!("images section at byte {}: checksum mismatch", victim.offset)));
    // The section held every image with a load address (every fourth image is an IMAGE NAMES entry).
    assert!(d.problems.iter().any(|p| p.kind == ProblemKind::MissingImages { from: 0, to: 3 }));
    assert!(d.problems.iter().any(|p| p.kind == ProblemKind::MissingImages { from: 4, to: 7 }));
    assert!(d.report.images.iter().all(|i| i.name_only));
    // Frames into the lost images are named, one problem per frame, and their addresses are unknown (0).
    let t1 = &d.report.threads[1];
    let named: Vec<&report_format::Problem> =
        d.problems.iter().filter(|p| matches!(p.kind, ProblemKind::FrameImageMissing { thread: 1, .. })).collect();
    assert_eq!(named.len(), 6, "{named:?}");
    assert!(matches!(named[0].kind, ProblemKind::FrameImageMissing { thread: 1, frame: 1, image: 2, offset: 4 }));
    assert_eq!(named[0].section, Some(SectionKind::Thread));
    assert_eq!(
        named[0].to_string(),
        "thread 1 frame 1: image 2 is missing (offset 0x4 from its load address); address unknown"
    );
    assert_eq!(t1.frames[1], 0);
    assert_eq!(t1.frames[0], 0x1_0001_0000);
    assert_eq!(
        d.sections.iter().find(|s| s.offset == victim.offset).map(|s| s.status),
        Some(SectionStatus::ChecksumMismatch)
    );
}

#[test]
fn truncation_inside_a_section_says_how_much_is_there() {
    let (_, bytes, full) = encoded();
    let victim = &full.sections[3];
    let cut = victim.offset + 20 + 5;
    let d = decode(&bytes[..cut]).expect("decodes");
    assert!(d
        .problems
        .iter()
        .any(|p| p.offset == victim.offset && p.kind == ProblemKind::Truncated { declared: victim.len, available: 5 }));
}

#[test]
fn non_reports_are_refused_in_one_line() {
    assert_eq!(decode(b"{\"bug_type\":\"309\"}"), Err(DecodeError::NotAReport));
    assert_eq!(decode(b""), Err(DecodeError::NotAReport));
    assert_eq!(
        DecodeError::NotAReport.to_string(),
        "not a crash report: the file does not start with the report magic"
    );
}
