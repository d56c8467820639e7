//! The versioning rules of SCHEMA.md §5 and hostile inputs that try to make the decoder allocate.
#![allow(unsafe_code)] // a global allocator is unsafe to implement

use report_format::encode::{Encoder, Thread};
use report_format::framing::{self, SectionKind};
use report_format::keys;
use report_format::{decode, DecodeError, ProblemKind, SectionStatus};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

// ---- allocation accounting (bytes requested on this thread while measuring) ----

struct Measuring;
thread_local! {
    static ON: Cell<bool> = const { Cell::new(false) };
    static BYTES: Cell<usize> = const { Cell::new(0) };
    static LARGEST: Cell<usize> = const { Cell::new(0) };
}
fn note(size: usize) {
    if ON.with(Cell::get) {
        BYTES.with(|b| b.set(b.get() + size));
        LARGEST.with(|l| l.set(l.get().max(size)));
    }
}
// SAFETY: forwards to the system allocator unchanged; accounting touches only const-initialised thread-locals
// without destructors, which never allocate.
unsafe impl GlobalAlloc for Measuring {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note(layout.size());
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note(new_size);
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}
#[global_allocator]
static GLOBAL: Measuring = Measuring;

/// (total bytes requested, largest single request) while decoding `input`.
fn measure_decode(input: &[u8]) -> (usize, usize, Result<report_format::Decoded, DecodeError>) {
    BYTES.with(|b| b.set(0));
    LARGEST.with(|l| l.set(0));
    ON.with(|o| o.set(true));
    let r = decode(input);
    ON.with(|o| o.set(false));
    (BYTES.with(Cell::get), LARGEST.with(Cell::get), r)
}

// ---- helpers ----

fn report_with_raw(sections: &[(u16, Vec<u8>)]) -> Vec<u8> {
    let mut scratch = vec![0u8; 1 << 16];
    let mut enc = Encoder::begin(Vec::new(), &mut scratch).expect("begin");
    for (code, payload) in sections {
        enc.raw_section(*code, payload).expect("raw");
    }
    enc.finish().expect("finish")
}

/// Writes one map value into a msgpack buffer.
type Field<'a> = (&'a str, &'a dyn Fn(&mut Vec<u8>));

fn mp_map(entries: &[Field<'_>]) -> Vec<u8> {
    let mut v = Vec::new();
    rmp::encode::write_map_len(&mut v, entries.len() as u32).expect("vec");
    for (k, f) in entries {
        rmp::encode::write_str(&mut v, k).expect("vec");
        f(&mut v);
    }
    v
}

// ---- versioning ----

#[test]
fn newer_minor_version_is_read() {
    let mut b = report_with_raw(&[]);
    b[10] = 7; // minor
    let crc = crc32fast::hash(&b[..12]).to_le_bytes();
    b[12..16].copy_from_slice(&crc);
    let d = decode(&b).expect("a newer minor version decodes");
    assert_eq!(d.report.format_version, (2, 7));
    assert!(d.is_intact());
}

#[test]
fn newer_major_version_is_refused() {
    let mut b = report_with_raw(&[]);
    b[8] = 3; // major
    b[10] = 0; // minor
    let crc = crc32fast::hash(&b[..12]).to_le_bytes();
    b[12..16].copy_from_slice(&crc);
    let e = decode(&b).expect_err("refused");
    assert_eq!(e, DecodeError::UnsupportedVersion { major: 3, minor: 0 });
    assert!(e.to_string().contains("report format 3.0 is newer"));
    assert!(e.to_string().contains("(major version 2)"));
}

#[test]
fn unknown_sections_and_keys_are_skipped_missing_keys_default() {
    let thread = mp_map(&[
        (keys::thread::INDEX, &|v| {
            rmp::encode::write_uint(v, 3).expect("vec");
        }),
        ("future_key", &|v| {
            rmp::encode::write_array_len(v, 2).expect("vec");
            rmp::encode::write_str(v, "x").expect("vec");
            rmp::encode::write_nil(v).expect("vec");
        }),
    ]);
    let b = report_with_raw(&[(0x4242, b"\x01\x02opaque".to_vec()), (SectionKind::Thread.code(), thread)]);
    let d = decode(&b).expect("decodes");
    assert!(d.is_intact(), "{:?}", d.problems);
    assert_eq!(d.sections[0].status, SectionStatus::Unknown);
    let t = &d.report.threads[0];
    assert_eq!(t.index, 3);
    assert!(t.captured, "missing `cap` defaults to captured");
    assert!(t.frames.is_empty() && t.name.is_none() && !t.crashed);
}

#[test]
fn payload_of_the_wrong_shape_is_a_named_problem() {
    let mut v = Vec::new();
    rmp::encode::write_str(&mut v, "not a map").expect("vec");
    let b = report_with_raw(&[(SectionKind::Exception.code(), v)]);
    let d = decode(&b).expect("decodes");
    let p = &d.problems[0];
    assert_eq!(p.section, Some(SectionKind::Exception));
    assert!(matches!(p.kind, ProblemKind::BadPayload { .. }));
    assert!(p.to_string().starts_with("exception section at byte 16: undecodable payload"));
}

#[test]
fn duplicate_meta_is_ignored_and_reported() {
    let meta = |pid: u64| {
        mp_map(&[(keys::meta::PROCESS, &move |v: &mut Vec<u8>| {
            rmp::encode::write_map_len(v, 1).expect("vec");
            rmp::encode::write_str(v, keys::process::PID).expect("vec");
            rmp::encode::write_uint(v, pid).expect("vec");
        })])
    };
    let b = report_with_raw(&[(keys::section::META, meta(10)), (keys::section::META, meta(20))]);
    let d = decode(&b).expect("decodes");
    assert_eq!(d.report.meta.as_ref().and_then(|m| m.process.pid), Some(10));
    assert_eq!(d.problems[0].kind, ProblemKind::Duplicate);
}

// ---- hostile lengths ----

#[test]
fn a_huge_declared_array_does_not_allocate_gigabytes() {
    // A CRC-valid thread section whose frame array claims 4 billion entries.
    let mut payload = Vec::new();
    rmp::encode::write_map_len(&mut payload, 2).expect("vec");
    rmp::encode::write_str(&mut payload, keys::thread::INDEX).expect("vec");
    rmp::encode::write_uint(&mut payload, 0).expect("vec");
    rmp::encode::write_str(&mut payload, keys::thread::FRAMES).expect("vec");
    payload.extend_from_slice(&[0xdd, 0xff, 0xff, 0xff, 0xff, 0x01, 0x02]);
    let b = report_with_raw(&[(SectionKind::Thread.code(), payload)]);
    let (total, largest, r) = measure_decode(&b);
    let d = r.expect("decodes");
    assert!(d.problems.iter().any(|p| matches!(p.kind, ProblemKind::BadPayload { .. })), "{:?}", d.problems);
    assert!(largest < 2 << 20, "largest allocation {largest} bytes");
    assert!(total < 8 << 20, "total {total} bytes");
}

#[test]
fn huge_declared_strings_and_maps_are_bounded_by_the_input() {
    for hostile in [
        vec![0x81, 0xa1, b'n', 0xdb, 0xff, 0xff, 0xff, 0xf0, b'a'], // str32 of ~4 GiB
        vec![0x81, 0xa2, b'i', b'd', 0xc6, 0x7f, 0xff, 0xff, 0xff], // bin32 of 2 GiB
        vec![0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, b'x', 0x01],       // map32 with 4 billion entries
    ] {
        let b = report_with_raw(&[(SectionKind::Thread.code(), hostile.clone())]);
        let (total, largest, r) = measure_decode(&b);
        assert!(r.is_ok());
        assert!(largest < 2 << 20 && total < 8 << 20, "{hostile:02x?}: largest {largest}, total {total}");
    }
}

#[test]
fn an_implausible_section_length_is_refused() {
    let mut b = framing::file_header().to_vec();
    let payload = vec![0u8; 4];
    let mut h = framing::section_header(SectionKind::Thread, &payload);
    h[8..12].copy_from_slice(&0xffff_fff0u32.to_le_bytes());
    let crc = crc32fast::hash(&h[..16]).to_le_bytes();
    h[16..20].copy_from_slice(&crc);
    b.extend_from_slice(&h);
    b.extend_from_slice(&payload);
    let (_, largest, r) = measure_decode(&b);
    let d = r.expect("decodes");
    assert_eq!(d.problems[0].kind, ProblemKind::TooLarge { declared: 0xffff_fff0 });
    assert!(largest < 1 << 20);
}

#[test]
fn the_encoder_thread_api_is_what_the_decoder_reads() {
    let regs = [Some(1u64), None, Some(3)];
    let mut scratch = vec![0u8; 4096];
    let mut enc = Encoder::begin(Vec::new(), &mut scratch).expect("begin");
    enc.thread(&Thread {
        index: 9,
        id: Some(77),
        name: b"t\xffname",
        register_set: b"x86_64",
        registers: &regs,
        frames: &[5, 6],
        captured: false,
        reason: b"did not answer the stop signal within 50 ms",
        ..Thread::default()
    })
    .expect("thread");
    let d = decode(&enc.finish().expect("finish")).expect("decodes");
    let t = &d.report.threads[0];
    assert_eq!((t.index, t.id, t.name.as_deref()), (9, Some(77), Some("t?name")));
    assert_eq!(t.register("rax"), Some(1));
    assert_eq!(t.register("rbx"), None);
    assert_eq!(t.register("rcx"), Some(3));
    assert!(!t.captured);
    assert_eq!(t.not_captured_reason.as_deref(), Some("did not answer the stop signal within 50 ms"));
}

// ---- format 2.0: relative frames and IMAGE NAMES ----

fn thread_with_fr(fr: &[u8]) -> Vec<u8> {
    let fr = fr.to_vec();
    mp_map(&[
        (keys::thread::INDEX, &|v| {
            rmp::encode::write_uint(v, 0).expect("vec");
        }),
        (keys::thread::FRAMES_RELATIVE, &move |v| {
            rmp::encode::write_bin(v, &fr).expect("vec");
        }),
    ])
}

fn names_section(first: u64, l: &[u8]) -> Vec<u8> {
    let l = l.to_vec();
    mp_map(&[
        (keys::image_names::FIRST_INDEX, &move |v| {
            rmp::encode::write_uint(v, first).expect("vec");
        }),
        (keys::image_names::LIST, &move |v| {
            rmp::encode::write_bin(v, &l).expect("vec");
        }),
    ])
}

#[test]
fn malformed_relative_frames_are_a_named_problem() {
    for (fr, why) in [
        (&[0x09, 0x80][..], "cut off"), // offset cut off
        (&[0x01][..], "cut off"),       // no value
        (&[0x00, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02][..], "over 64 bits"), // 65 bits
        (&[0x00, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x00][..], "over 64 bits"),
    ] {
        let d = decode(&report_with_raw(&[(SectionKind::Thread.code(), thread_with_fr(fr))])).expect("decodes");
        let p = d.problems.iter().find(|p| matches!(p.kind, ProblemKind::BadPayload { .. })).expect("named");
        assert!(p.to_string().contains(why), "{fr:02x?}: {p}");
        assert!(d.report.threads.is_empty());
    }
}

#[test]
fn a_frame_into_an_image_that_is_not_there_is_named_and_zero() {
    // Image 5 (tag (6 << 3) | 3), offset 0x10; tag 2^42 (image 2^39 - 1: past u32); one absolute frame.
    let fr = [0x33, 0x10, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0x05, 0x00, 0x2a];
    let names = names_section(5, &[0x00, 0x00, 0x02, b'/', b'a']); // image 5 known by name only
    let b = report_with_raw(&[(SectionKind::Thread.code(), thread_with_fr(&fr)), (keys::section::IMAGE_NAMES, names)]);
    let d = decode(&b).expect("decodes");
    let t = &d.report.threads[0];
    assert_eq!(t.frames, vec![0, 0, 0x2a]);
    let missing: Vec<&ProblemKind> =
        d.problems.iter().map(|p| &p.kind).filter(|k| matches!(k, ProblemKind::FrameImageMissing { .. })).collect();
    assert_eq!(
        missing,
        vec![
            &ProblemKind::FrameImageMissing { thread: 0, frame: 0, image: 5, offset: 0x10 },
            &ProblemKind::FrameImageMissing { thread: 0, frame: 1, image: (1 << 39) - 1, offset: 5 },
        ]
    );
    assert_eq!(d.report.images[0].path.as_deref(), Some("/a"));
}

#[test]
fn malformed_image_names_are_a_named_problem() {
    for (l, why) in [
        (&[0x00, 0x01, 0x01, b'a'][..], "shares more"), // first entry cannot share
        (&[0x00, 0x00, 0x05, b'a'][..], "runs past"),
        (&[0x00, 0x00][..], "cut off"),
        (&[0x80, 0x80, 0x80, 0x80, 0x10, 0x00, 0x00][..], "over 2^32"),
    ] {
        let b = report_with_raw(&[(keys::section::IMAGE_NAMES, names_section(0, l))]);
        let d = decode(&b).expect("decodes");
        let p = d.problems.iter().find(|p| matches!(p.kind, ProblemKind::BadPayload { .. })).expect("named");
        assert!(p.to_string().contains(why), "{l:02x?}: {p}");
        assert!(d.report.images.is_empty());
    }
}

#[test]
fn an_image_names_bomb_does_not_allocate_without_bound() {
    // One 4000-byte path, then 12 000 entries that each repeat it whole (4 bytes each): 48 MB if expanded.
    let mut l = vec![0x00, 0x00];
    let mut len = [0u8; 10];
    let n = {
        let mut v = 4_000u64;
        let mut k = 0;
        loop {
            let b = (v & 0x7f) as u8;
            v >>= 7;
            len[k] = if v == 0 { b } else { b | 0x80 };
            k += 1;
            if v == 0 {
                break k;
            }
        }
    };
    l.extend_from_slice(&len[..n]);
    l.extend(std::iter::repeat_n(b'a', 4_000));
    for _ in 0..12_000 {
        l.extend_from_slice(&[0x00, 0xa0, 0x1f, 0x00]); // skip 0, shared 4000, length 0
    }
    let b = report_with_raw(&[(keys::section::IMAGE_NAMES, names_section(0, &l))]);
    let (total, _, r) = measure_decode(&b);
    let d = r.expect("decodes");
    assert!(d.problems.iter().any(|p| p.to_string().contains("expand to more than 64 times")), "{:?}", d.problems);
    assert!(total < 64 * b.len() + (16 << 20), "total {total} bytes for a {} byte file", b.len());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 300, ..Default::default() })]

    /// Arbitrary `fr` and IMAGE NAMES bytes never make the decoder panic.
    #[test]
    fn arbitrary_relative_frames_and_names_never_panic(
        fr in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
        l in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
        first in 0u64..=u64::from(u32::MAX),
    ) {
        let b = report_with_raw(&[
            (SectionKind::Thread.code(), thread_with_fr(&fr)),
            (keys::section::IMAGE_NAMES, names_section(first, &l)),
        ]);
        let d = decode(&b).expect("decodes");
        for t in &d.report.threads {
            proptest::prop_assert!(t.frame_trust.len() <= t.frames.len());
        }
    }
}
