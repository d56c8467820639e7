//! The crash-time encoder's exact output bytes, pinned.
//!
//! Each named case drives one path of the encoder (every field set, every field absent, integer and length
//! boundaries of the MessagePack encodings, invalid UTF-8, frame halving, image chunking, running out of room) and
//! its bytes must equal the committed file `tests/data/encoder/<case>.crashreport`. A seeded pseudo-random sweep of
//! many more reports is pinned by the CRC-32 and length of all its output. Together they prove that a change to
//! the encoder's code (a refactoring) leaves the bytes it writes unchanged.
//!
//! The format itself must not change silently: when it changes on purpose (a new minor version), regenerate with
//! `REPORT_FORMAT_BLESS=1 cargo test -p report-format --test encoder_bytes` and update the sweep constants from the
//! failure message.

use report_format::encode::{
    EncodeError, Encoder, Exception, Image, KeyValue, LanguageException, Message, Meta, NonFatal, Os, Process, Repeat,
    SinkError, SliceSink, Thread, ID_KIND_BUILD_ID, ID_KIND_UUID, NON_FATAL_HANG,
};
use report_format::framing::SectionKind;
use std::path::PathBuf;

fn golden_path(case: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/encoder").join(format!("{case}.crashreport"))
}

/// Compares `bytes` with the committed file of `case` (or writes it when blessing).
fn check(case: &str, bytes: &[u8]) {
    let path = golden_path(case);
    if std::env::var_os("REPORT_FORMAT_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(&path, bytes).expect("write golden file");
        return;
    }
    let want = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    if want != bytes {
        let at = want.iter().zip(bytes).position(|(a, b)| a != b).unwrap_or(want.len().min(bytes.len()));
        panic!(
            "case {case}: the encoder's bytes changed: {} bytes now, {} committed, first difference at byte {at}",
            bytes.len(),
            want.len()
        );
    }
}

fn meta_all<'a>() -> Meta<'a> {
    Meta {
        report_id: *b"\x62\x51\x12\x5f\x09\x19\x48\x79\xb3\x6b\xf5\xf2\xd1\xe6\x90\x2e",
        capture_time_ns: 1_659_543_061_245_500_000,
        handler_version: b"0.1.0",
        arch: b"arm64e",
        hardware_model: b"iPhone14,2",
        os: Os { name: b"iPhone OS", version: b"15.5", build: b"19F77" },
        process: Process {
            pid: Some(1730),
            parent_pid: Some(1),
            name: b"Demo",
            path: b"/private/var/containers/Bundle/Application/0A1B/Demo.app/Demo",
            parent_name: b"launchd",
            bundle_id: b"com.example.demo",
            short_version: b"1.2",
            build_version: b"42",
            launch_time_ns: Some(1_659_543_061_014_700_000),
        },
        thread_count: Some(3),
        image_count: Some(4),
        minimal: true,
        note: b"minimal: second fault in the handler",
        non_fatal: Some(NonFatal {
            kind: NON_FATAL_HANG,
            reason: b"main thread unresponsive",
            duration_ns: Some(2_345_000_000),
            thread: Some(0),
        }),
    }
}

/// Every section, every field of every section set, plus an unknown raw section.
fn every_field() -> Vec<u8> {
    let mut scratch = vec![0u8; 64 << 10];
    let mut enc = Encoder::begin(Vec::new(), &mut scratch).expect("begin");
    enc.meta(&meta_all()).expect("meta");
    enc.exception(&Exception {
        mach_type: Some(1),
        mach_codes: &[1, 0x1_ad98_ab74, -1, i64::MIN],
        signal: Some(11),
        si_code: Some(-6),
        fault_address: Some(0x1_ad98_ab74),
        crashed_thread: Some(0),
        language: Some(LanguageException {
            kind: b"rust",
            type_name: b"",
            reason: b"index out of bounds: the len is 3 but the index is 7",
            location: b"src/main.rs:12:5",
            user_info: b"",
            thread_id: Some(42),
            backtrace: &[0x1_0000_4f50, u64::MAX],
        }),
    })
    .expect("exception");
    enc.messages(&[
        Message { source: b"libswiftCore.dylib", text: b"Fatal error: Unexpectedly found nil" },
        Message { source: b"", text: b"no source" },
        Message { source: b"panic", text: b"" },
    ])
    .expect("messages");
    enc.user(&[KeyValue { key: b"user.id", value: b"42" }, KeyValue { key: b"", value: b"" }]).expect("user");
    let regs: Vec<Option<u64>> = (0..36u64).map(|k| if k % 7 == 3 { None } else { Some(k * 0x1111) }).collect();
    let frames: Vec<u64> = (0..12).map(|f| 0x1_0000_4000 + f * 0x10).collect();
    enc.thread(&Thread {
        index: 0,
        id: Some(0x2a41),
        name: b"main",
        queue: b"com.apple.main-thread",
        crashed: true,
        captured: true,
        reason: b"",
        register_set: b"arm64",
        registers: &regs,
        frames: &frames,
        frames_truncated: true,
        repeats: &[Repeat { start: 2, len: 3, count: 1000 }, Repeat { start: 0, len: 1, count: 0 }],
        trust: &[1, 2, 3, 4, 5, 0, 200],
        images: Some(&Img17),
    })
    .expect("thread 0");
    // Trust longer than the frames: only one byte per frame is written.
    enc.thread(&Thread {
        index: 1,
        id: None,
        captured: true,
        register_set: b"x86_64",
        registers: &[Some(1), None],
        frames: &[0xdead_beef, 0],
        trust: &[1, 3, 3, 3],
        ..Thread::default()
    })
    .expect("thread 1");
    enc.thread(&Thread {
        index: 2,
        id: Some(7),
        name: b"worker",
        captured: false,
        reason: b"did not answer the stop signal within 100 ms",
        ..Thread::default()
    })
    .expect("thread 2");
    let uuid = [0x82u8; 16];
    let build_id: Vec<u8> = (0..20).collect();
    enc.images(
        0,
        &[
            Image {
                path: b"/usr/lib/dyld",
                name: b"",
                load_address: 0x1_0000_0000,
                size: 0x8000,
                slide: Some(0),
                id: &uuid,
                id_kind: ID_KIND_UUID,
                arch: b"",
            },
            Image {
                path: b"/usr/lib/libdemo.so",
                name: b"libdemo",
                load_address: 0x7f00_0000_0000,
                size: 0x1234,
                slide: Some(-0x1000),
                id: &build_id,
                id_kind: ID_KIND_BUILD_ID,
                arch: b"arm64e",
            },
            Image { path: b"", name: b"[vdso]", load_address: 0, size: 0, slide: None, id: b"", id_kind: 9, arch: b"" },
        ],
    )
    .expect("images");
    enc.images(3, &[Image { path: b"/a", load_address: u64::MAX, size: u64::MAX, ..Image::default() }])
        .expect("image 3");
    // Names only: shared prefixes, an index gap, an empty path, a repeated index (starts a new section).
    enc.image_names([
        (4u32, &b"/usr/lib/system/libsystem_c.dylib"[..]),
        (5, b"/usr/lib/system/libsystem_kernel.dylib"),
        (9, b"/usr/lib/libobjc.A.dylib"),
        (10, b""),
        (10, b"/x"),
    ])
    .expect("image names");
    enc.raw_section(0x1234, &[0x81, 0xa1, b'x', 0x01]).expect("raw");
    enc.raw_section(0, &[]).expect("empty raw");
    enc.finish().expect("finish")
}

/// Nothing but the header and the end marker; then defaults for every section (all optional keys left out).
fn nothing_set() -> Vec<u8> {
    let mut out = {
        let mut scratch = [0u8; 64];
        Encoder::begin(Vec::new(), &mut scratch).expect("begin").finish().expect("finish")
    };
    let mut scratch = vec![0u8; 4096];
    let mut enc = Encoder::begin(Vec::new(), &mut scratch).expect("begin");
    enc.meta(&Meta::default()).expect("meta");
    enc.exception(&Exception::default()).expect("exception");
    enc.messages(&[]).expect("no messages: no section");
    enc.user(&[]).expect("no user values: no section");
    enc.messages(&[Message::default()]).expect("one empty message");
    enc.thread(&Thread::default()).expect("thread");
    enc.images(0, &[]).expect("no images: no section");
    enc.images(0, &[Image::default()]).expect("one empty image");
    out.extend_from_slice(&enc.finish().expect("finish"));
    out
}

/// Integers at every MessagePack width boundary and text at every length-prefix boundary.
fn boundaries() -> Vec<u8> {
    const U: [u64; 12] = [0, 1, 127, 128, 255, 256, 65535, 65536, 0xffff_ffff, 0x1_0000_0000, u64::MAX - 1, u64::MAX];
    const I: [i64; 16] = [
        0,
        -1,
        -32,
        -33,
        -128,
        -129,
        -32768,
        -32769,
        i32::MIN as i64,
        i32::MIN as i64 - 1,
        i64::MIN,
        127,
        128,
        32767,
        32768,
        i64::MAX,
    ];
    let texts: Vec<Vec<u8>> = [0usize, 1, 31, 32, 255, 256, 65535, 65536].iter().map(|&n| vec![b'a'; n]).collect();
    let bins: Vec<Vec<u8>> = [1usize, 255, 256, 65535, 65536].iter().map(|&n| vec![0xab; n]).collect();
    let mut scratch = vec![0u8; 1 << 20];
    let mut enc = Encoder::begin(Vec::new(), &mut scratch).expect("begin");
    for (k, &u) in U.iter().enumerate() {
        let u32v = u32::try_from(u).ok();
        let text = &texts[k % texts.len()];
        enc.meta(&Meta {
            capture_time_ns: u,
            handler_version: text,
            thread_count: u32v,
            image_count: u32v,
            process: Process { launch_time_ns: Some(u), pid: u32v, ..Process::default() },
            ..Meta::default()
        })
        .expect("meta");
        enc.images(u32v.unwrap_or(0), &[Image { load_address: u, size: u, path: text, ..Image::default() }])
            .expect("image");
    }
    for &i in &I {
        let i32v = i32::try_from(i).ok();
        enc.exception(&Exception {
            mach_codes: &[i],
            signal: i32v,
            si_code: i32v,
            fault_address: Some(i as u64),
            ..Exception::default()
        })
        .expect("exception");
        enc.images(0, &[Image { slide: Some(i), ..Image::default() }]).expect("image");
    }
    for (k, t) in texts.iter().enumerate() {
        enc.messages(&[Message { source: t, text: t }]).expect("message");
        let bin = &bins[k % bins.len()];
        enc.images(0, &[Image { id: bin, id_kind: ID_KIND_BUILD_ID, ..Image::default() }]).expect("image");
    }
    // Array lengths at the fixarray/array16/array32 boundaries.
    let frames: Vec<u64> = (0..65536).collect();
    for n in [15usize, 16, 65535, 65536] {
        let regs: Vec<Option<u64>> = vec![Some(1); n.min(300)];
        enc.thread(&Thread {
            index: n as u32,
            register_set: b"arm64",
            registers: &regs,
            frames: &frames[..n],
            captured: true,
            ..Thread::default()
        })
        .expect("thread");
    }
    let kv: Vec<KeyValue<'_>> = (0..16).map(|_| KeyValue { key: b"k", value: b"v" }).collect();
    enc.user(&kv[..15]).expect("fixmap user");
    enc.user(&kv).expect("map16 user");
    enc.finish().expect("finish")
}

/// Text that is not valid UTF-8 in every text field.
fn invalid_utf8() -> Vec<u8> {
    let bad: &[u8] = b"ab\xffc\xe2\x82 \xc0\x80 \xed\xa0\x80 ok \xf0\x9f\x98\x80 \xf0\x9f\x98";
    let mut scratch = vec![0u8; 4096];
    let mut enc = Encoder::begin(Vec::new(), &mut scratch).expect("begin");
    enc.meta(&Meta {
        handler_version: bad,
        arch: bad,
        hardware_model: bad,
        os: Os { name: bad, version: bad, build: bad },
        process: Process {
            name: bad,
            path: bad,
            parent_name: bad,
            bundle_id: bad,
            short_version: bad,
            build_version: bad,
            ..Process::default()
        },
        note: bad,
        ..Meta::default()
    })
    .expect("meta");
    enc.messages(&[Message { source: bad, text: bad }]).expect("messages");
    enc.user(&[KeyValue { key: bad, value: bad }]).expect("user");
    enc.thread(&Thread { name: bad, queue: bad, reason: bad, register_set: bad, ..Thread::default() }).expect("thread");
    enc.images(0, &[Image { path: bad, name: bad, arch: bad, ..Image::default() }]).expect("images");
    enc.finish().expect("finish")
}

/// A thread too large for the scratch buffer (frames halved, trust cut, repeats dropped) and image lists split by
/// the 64-image cap and by the scratch size.
fn halving_and_chunks() -> Vec<u8> {
    let frames: Vec<u64> = (0..1000).map(|i| 0x1_0000_0000 + i * 8).collect();
    let trust: Vec<u8> = (0..1000).map(|i| (i % 5 + 1) as u8).collect();
    let paths: Vec<String> = (0..150).map(|i| format!("/usr/lib/lib{i}.so")).collect();
    let images: Vec<Image<'_>> = paths
        .iter()
        .enumerate()
        .map(|(i, p)| Image { path: p.as_bytes(), load_address: i as u64 * 0x1000, size: 0x1000, ..Image::default() })
        .collect();
    let mut out = Vec::new();
    for scratch_len in [2048usize, 300, 64 << 10] {
        let mut scratch = vec![0u8; scratch_len];
        let mut enc = Encoder::begin(Vec::new(), &mut scratch).expect("begin");
        enc.thread(&Thread {
            index: 0,
            captured: true,
            register_set: b"arm64",
            registers: &[Some(1); 36],
            frames: &frames,
            trust: &trust,
            repeats: &[Repeat { start: 1, len: 2, count: 3 }],
            ..Thread::default()
        })
        .expect("thread fits after halving");
        enc.images(10, &images).expect("images");
        out.extend_from_slice(&enc.finish().expect("finish"));
    }
    out
}

/// Running out of room: the bytes written before each error, and the errors themselves, are part of the behaviour.
fn out_of_room() -> Vec<u8> {
    let mut out = Vec::new();
    let note = |e: EncodeError| {
        let tag: &[u8] = match e {
            EncodeError::ScratchTooSmall(k) => match k {
                SectionKind::Meta => b"<scratch:meta>",
                SectionKind::Exception => b"<scratch:exception>",
                SectionKind::Thread => b"<scratch:thread>",
                SectionKind::Images => b"<scratch:images>",
                SectionKind::Messages => b"<scratch:messages>",
                SectionKind::User => b"<scratch:user>",
                SectionKind::ImageNames => b"<scratch:image-names>",
                SectionKind::End => b"<scratch:end>",
                SectionKind::Unknown(_) => b"<scratch:unknown>",
            },
            EncodeError::Sink(SinkError::Full) => b"<sink:full>",
            EncodeError::Sink(SinkError::Os(_)) => b"<sink:os>",
            EncodeError::Finished => b"<finished>",
        };
        tag.to_vec()
    };
    // Scratch sizes from nothing up: each section fails, then fits.
    for scratch_len in (0..200).chain((200..420).step_by(4)) {
        let mut scratch = vec![0u8; scratch_len];
        let mut enc = Encoder::begin(Vec::new(), &mut scratch).expect("begin");
        let m = meta_all();
        let results = [
            enc.meta(&m),
            enc.exception(&Exception { mach_codes: &[1, 2, 3], signal: Some(11), ..Exception::default() }),
            enc.messages(&[Message { source: b"src", text: b"a message of some length" }]),
            enc.user(&[KeyValue { key: b"key", value: b"value" }]),
            enc.thread(&Thread { index: 1, register_set: b"arm64", registers: &[Some(1); 36], ..Thread::default() }),
            enc.thread(&Thread { index: 2, frames: &[1, 2, 3, 4, 5, 6, 7, 8], ..Thread::default() }),
            enc.images(0, &[Image { path: b"/usr/lib/libc.so.6", ..Image::default() }; 3]),
            enc.raw_section(9, &[0xc0; 40]),
        ];
        for r in results {
            if let Err(e) = r {
                out.extend_from_slice(&note(e));
            }
        }
        out.extend_from_slice(&(enc.bytes_written()).to_le_bytes());
        match enc.finish() {
            Ok(bytes) => out.extend_from_slice(&bytes),
            Err(e) => out.extend_from_slice(&note(e)),
        }
    }
    // A fixed-size sink that fills up: what is written before the error stays written.
    for sink_len in (0..400).step_by(7) {
        let mut buf = vec![0u8; sink_len];
        let mut scratch = vec![0u8; 4096];
        let sink = SliceSink::new(&mut buf);
        match Encoder::begin(sink, &mut scratch) {
            Err(e) => out.extend_from_slice(&note(e)),
            Ok(mut enc) => {
                let r = enc.meta(&meta_all()).and_then(|()| enc.thread(&Thread { index: 0, ..Thread::default() }));
                if let Err(e) = r {
                    out.extend_from_slice(&note(e));
                }
                out.extend_from_slice(&(enc.bytes_written()).to_le_bytes());
                match enc.finish() {
                    Ok(sink) => out.extend_from_slice(sink.written()),
                    Err(e) => out.extend_from_slice(&note(e)),
                }
            }
        }
        out.extend_from_slice(&buf);
    }
    out
}

#[test]
fn every_field_bytes_are_unchanged() {
    check("every_field", &every_field());
}

#[test]
fn nothing_set_bytes_are_unchanged() {
    check("nothing_set", &nothing_set());
}

#[test]
fn boundary_bytes_are_unchanged() {
    // Large (about 700 KB: a 65536-byte string and frame arrays past 65535 entries), so pinned by checksum.
    let bytes = boundaries();
    assert_eq!((bytes.len(), crc32(&bytes)), BOUNDARIES, "the encoder's bytes changed");
}

#[test]
fn invalid_utf8_bytes_are_unchanged() {
    check("invalid_utf8", &invalid_utf8());
}

#[test]
fn halving_and_chunking_bytes_are_unchanged() {
    check("halving_and_chunks", &halving_and_chunks());
}

#[test]
fn out_of_room_bytes_are_unchanged() {
    check("out_of_room", &out_of_room());
}

/// (length, CRC-32) of [`boundaries`].
const BOUNDARIES: (usize, u32) = (1_154_933, 3_285_914_920);

/// (reports, total length, CRC-32 of all of them) of [`random_sweep`].
const SWEEP: (usize, usize, u32) = (400, 4_279_340, 3_427_371_334);

#[test]
fn random_sweep_bytes_are_unchanged() {
    let (n, bytes) = random_sweep();
    assert_eq!((n, bytes.len(), crc32(&bytes)), SWEEP, "the encoder's bytes changed");
}

/// CRC-32/ISO-HDLC (the format's own checksum), computed here bit by bit so the pin does not depend on the crate's
/// checksum code.
fn crc32(bytes: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 == 1 { (crc >> 1) ^ 0xEDB8_8320 } else { crc >> 1 };
        }
    }
    !crc
}

/// SplitMix64: a small deterministic generator, so the sweep is the same on every machine.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, one_in: u64) -> bool {
        self.below(one_in) == 0
    }
    /// A number of any magnitude (small ones more often).
    fn num(&mut self) -> u64 {
        let bits = self.below(65) as u32;
        if bits == 0 {
            0
        } else {
            self.next() >> (64 - bits)
        }
    }
    fn opt_u64(&mut self) -> Option<u64> {
        (!self.chance(3)).then(|| self.num())
    }
    fn opt_u32(&mut self) -> Option<u32> {
        (!self.chance(3)).then(|| self.num() as u32)
    }
    fn opt_i64(&mut self) -> Option<i64> {
        (!self.chance(3)).then(|| self.num() as i64)
    }
    /// Text: often empty, sometimes long, sometimes not UTF-8.
    fn text(&mut self) -> Vec<u8> {
        const POOL: &[u8] = b"abcXYZ019 /._-\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80\xff\xc0\x80\xed\xa0\x80";
        let len = match self.below(10) {
            0..=3 => 0,
            4..=8 => self.below(40),
            _ => self.below(400),
        };
        (0..len).map(|_| POOL[self.below(POOL.len() as u64) as usize]).collect()
    }
    fn bytes(&mut self, max: u64) -> Vec<u8> {
        let len = self.below(max + 1);
        (0..len).map(|_| self.next() as u8).collect()
    }
}

/// Owned storage for one random report; the encoder's borrowed inputs are built from it.
struct Owned {
    text: Vec<Vec<u8>>,
    nums: Vec<Option<u64>>,
    codes: Vec<i64>,
    threads: Vec<OwnedThread>,
    ids: Vec<Vec<u8>>,
}

/// Owned storage for one random thread: registers, frames, trust bytes, repeats.
struct OwnedThread(Vec<Option<u64>>, Vec<u64>, Vec<u8>, Vec<Repeat>);

fn random_sweep() -> (usize, Vec<u8>) {
    const REPORTS: usize = 400;
    let mut rng = Rng(0x005e_ed0f_c7a5_4e90);
    let mut all = Vec::new();
    for _ in 0..REPORTS {
        let o = Owned {
            text: (0..40).map(|_| rng.text()).collect(),
            nums: (0..20).map(|_| rng.opt_u64()).collect(),
            codes: (0..rng.below(4)).map(|_| rng.num() as i64).collect(),
            threads: (0..rng.below(6))
                .map(|_| {
                    let regs = (0..rng.below(40)).map(|_| rng.opt_u64()).collect();
                    let frames: Vec<u64> = (0..rng.below(300)).map(|_| rng.num()).collect();
                    let trust = rng.bytes(frames.len() as u64 + 3);
                    let reps = (0..rng.below(3))
                        .map(|_| Repeat { start: rng.num() as u32, len: rng.num() as u32, count: rng.num() as u32 })
                        .collect();
                    OwnedThread(regs, frames, trust, reps)
                })
                .collect(),
            ids: (0..rng.below(100)).map(|_| rng.bytes(24)).collect(),
        };
        let t = |k: usize| o.text[k].as_slice();
        let mut report_id = [0u8; 16];
        report_id.iter_mut().for_each(|b| *b = rng.next() as u8);
        let meta = Meta {
            report_id,
            capture_time_ns: rng.num(),
            handler_version: t(0),
            arch: t(1),
            hardware_model: t(2),
            os: Os { name: t(3), version: t(4), build: t(5) },
            process: Process {
                pid: rng.opt_u32(),
                parent_pid: rng.opt_u32(),
                name: t(6),
                path: t(7),
                parent_name: t(8),
                bundle_id: t(9),
                short_version: t(10),
                build_version: t(11),
                launch_time_ns: o.nums[0],
            },
            thread_count: rng.opt_u32(),
            image_count: rng.opt_u32(),
            minimal: rng.chance(2),
            note: t(12),
            non_fatal: None,
        };
        let exception = Exception {
            mach_type: rng.opt_u32(),
            mach_codes: &o.codes,
            signal: rng.opt_i64().map(|v| v as i32),
            si_code: rng.opt_i64().map(|v| v as i32),
            fault_address: o.nums[1],
            crashed_thread: rng.opt_u32(),
            language: None,
        };
        let messages: Vec<Message<'_>> =
            (0..rng.below(4) as usize).map(|k| Message { source: t(13 + k), text: t(17 + k) }).collect();
        let user: Vec<KeyValue<'_>> =
            (0..rng.below(4) as usize).map(|k| KeyValue { key: t(21 + k), value: t(25 + k) }).collect();
        let images: Vec<Image<'_>> = o
            .ids
            .iter()
            .enumerate()
            .map(|(k, id)| Image {
                path: t(29 + k % 5),
                name: t(34 + k % 3),
                load_address: rng.num(),
                size: rng.num(),
                slide: rng.opt_i64(),
                id,
                id_kind: rng.below(4) as u8,
                arch: t(37 + k % 3),
            })
            .collect();
        let scratch_len = [256usize, 1024, 4096, 64 << 10][rng.below(4) as usize];
        let mut scratch = vec![0u8; scratch_len];
        let mut enc = Encoder::begin(Vec::new(), &mut scratch).expect("begin");
        let mut results = vec![enc.meta(&meta), enc.exception(&exception), enc.messages(&messages), enc.user(&user)];
        for (k, OwnedThread(regs, frames, trust, reps)) in o.threads.iter().enumerate() {
            results.push(enc.thread(&Thread {
                index: k as u32,
                id: o.nums[2 + k],
                name: t(k),
                queue: t(k + 1),
                crashed: rng.chance(3),
                captured: !rng.chance(4),
                reason: t(k + 2),
                register_set: if rng.chance(3) { b"" } else { t(k + 3) },
                registers: regs,
                frames,
                frames_truncated: rng.chance(4),
                repeats: reps,
                trust,
                images: if k % 2 == 0 { Some(&Img17) } else { None },
            }));
        }
        results.push(enc.images(rng.num() as u32, &images));
        results.push(enc.image_names(images.iter().enumerate().map(|(k, i)| ((k * 3) as u32, i.path))));
        for r in results {
            // The error kind is part of the pinned output.
            all.extend_from_slice(format!("{:?}", r.err()).as_bytes());
        }
        match enc.finish() {
            Ok(bytes) => all.extend_from_slice(&bytes),
            Err(e) => all.extend_from_slice(format!("{e:?}").as_bytes()),
        }
    }
    (REPORTS, all)
}

/// An image lookup with one image, index 17 (a two-byte tag), at 0x1_0000_0000, 1 MiB long.
#[derive(Debug)]
struct Img17;

impl report_format::encode::ImageLookup for Img17 {
    fn image_at(&self, address: u64) -> Option<(u32, u64)> {
        (0x1_0000_0000..0x1_0010_0000).contains(&address).then_some((17, 0x1_0000_0000))
    }
}
