//! The on-disk keys agree everywhere: the crash-time encoder writes exactly the keys of `report_format::keys`, the
//! decoder reads back every field it writes, and SCHEMA.md's tables list exactly those keys and section numbers.
//! (That the decoder's wire structs read exactly these keys is a unit test in `src/decode.rs`.)

use report_format::encode::{self, Encoder, KeyValue, Repeat as EncRepeat, ID_KIND_BUILD_ID, ID_KIND_UUID};
use report_format::framing::{SectionKind, SECTION_HEADER_LEN};
use report_format::keys::{self, section, KeyMap};
use report_format::model::{
    Exception, FrameTrust, Image, ImageId, LanguageException, Message, Meta, NonFatal, Os, Process, Register, Repeat,
    Report, ReportId, Thread,
};
use report_format::regs;
use serde::de::{self as de, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use std::fmt;

const SCHEMA: &str = include_str!("../SCHEMA.md");

const BUILD_ID: [u8; 20] = [0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16];
const UUID: [u8; 16] = [0x82, 0xd1, 0x3d, 0x98, 0x21, 0x9e, 0x30, 0x40, 0xb6, 0x2a, 0x07, 0xa2, 0x97, 0x00, 0x7a, 0x7c];

/// A report in which every field of every section is set to a value other than its default, written with the
/// crash-time encoder. The input structs are spelled out without `..`, so a new field cannot be left out here.
fn encode_every_field() -> Vec<u8> {
    let registers: Vec<Option<u64>> = (0..36).map(|k| if k == 3 { None } else { Some(0x1000 + k) }).collect();
    let mut scratch = vec![0u8; 64 << 10];
    let mut enc = Encoder::begin(Vec::new(), &mut scratch).expect("begin");
    enc.meta(&encode::Meta {
        report_id: *b"\x6b\x5f\x0f\x36\x1a\x2d\x4c\x3e\x9b\x7a\x21\x04\xc8\xd1\x55\x90",
        capture_time_ns: 1_763_700_000_123_456_789,
        handler_version: b"0.1.0",
        arch: b"arm64",
        hardware_model: b"iPhone14,2",
        os: encode::Os { name: b"iPhone OS", version: b"15.5", build: b"19F77" },
        process: encode::Process {
            pid: Some(1730),
            parent_pid: Some(1),
            name: b"Demo",
            path: b"/private/var/containers/Bundle/Application/0A1B/Demo.app/Demo",
            parent_name: b"launchd",
            bundle_id: b"com.example.demo",
            short_version: b"1.2",
            build_version: b"42",
            launch_time_ns: Some(1_763_699_990_000_000_000),
        },
        thread_count: Some(2),
        image_count: Some(3),
        minimal: true,
        note: b"minimal: second fault in the handler",
        non_fatal: Some(encode::NonFatal {
            kind: b"hang",
            reason: b"main thread unresponsive for 2.35 s",
            duration_ns: Some(2_345_000_000),
            thread: Some(1),
        }),
    })
    .expect("meta");
    enc.exception(&encode::Exception {
        mach_type: Some(1),
        mach_codes: &[1, -0x10],
        signal: Some(11),
        si_code: Some(-6),
        fault_address: Some(0x10),
        crashed_thread: Some(0),
        language: Some(encode::LanguageException {
            kind: b"objc",
            type_name: b"NSInvalidArgumentException",
            reason: b"*** -[__NSArrayM insertObject:atIndex:]: object cannot be nil",
            location: b"src/main.rs:3:5",
            user_info: b"NSDebugDescription: nil",
            thread_id: Some(0x2a41),
            backtrace: &[0x1_0000_4f50, 0x1_8e0b_2a40],
        }),
    })
    .expect("exception");
    enc.messages(&[encode::Message { source: b"libswiftCore.dylib", text: b"Fatal error: Unexpectedly found nil" }])
        .expect("messages");
    enc.user(&[KeyValue { key: b"user.id", value: b"42" }]).expect("user");
    enc.thread(&encode::Thread {
        index: 0,
        id: Some(0x2a41),
        name: b"main",
        queue: b"com.apple.main-thread",
        crashed: true,
        captured: false,
        reason: b"registers only: the stack could not be read",
        register_set: regs::ARM64.as_bytes(),
        registers: &registers,
        frames: &[0x1_0000_4f50, 0x1_0000_4e10, 0x1_0000_4d00, 0x1_8e0b_2a40],
        frames_truncated: true,
        repeats: &[EncRepeat { start: 1, len: 2, count: 3 }],
        trust: &[1, 2, 3, 4],
        images: Some(&TwoImages),
    })
    .expect("thread 0");
    enc.thread(&encode::Thread {
        index: 1,
        id: Some(0x2a42),
        name: b"worker",
        queue: b"com.example.work",
        crashed: false,
        captured: true,
        reason: b"",
        register_set: regs::X86_64.as_bytes(),
        registers: &[Some(7)],
        frames: &[0x1000],
        frames_truncated: false,
        repeats: &[],
        trust: &[5],
        images: None,
    })
    .expect("thread 1");
    enc.images(
        0,
        &[
            encode::Image {
                path: b"/private/var/containers/Bundle/Application/0A1B/Demo.app/Demo",
                name: b"Demo main",
                load_address: 0x1_0000_0000,
                size: 0x8000,
                slide: Some(-0x4000),
                id: &UUID,
                id_kind: ID_KIND_UUID,
                arch: b"arm64e",
            },
            encode::Image {
                path: b"/usr/lib/libdemo.so",
                name: b"",
                load_address: 0x7f00_0000_0000,
                size: 0x1234,
                slide: Some(0x1000),
                id: &BUILD_ID,
                id_kind: ID_KIND_BUILD_ID,
                arch: b"",
            },
        ],
    )
    .expect("images");
    enc.image_names([(2, &b"/usr/lib/libz.1.dylib"[..])]).expect("image names");
    enc.finish().expect("finish")
}

/// The two full images of [`encode_every_field`], for writing thread 0's frames relative to them.
#[derive(Debug)]
struct TwoImages;

impl encode::ImageLookup for TwoImages {
    fn image_at(&self, address: u64) -> Option<(u32, u64)> {
        [(0u32, 0x1_0000_0000u64, 0x8000u64), (1, 0x7f00_0000_0000, 0x1234)]
            .into_iter()
            .find(|(_, load, size)| address >= *load && address - load < *size)
            .map(|(i, load, _)| (i, load))
    }
}

/// What [`encode_every_field`] must decode to, spelled out without `..` so that a new model field cannot be left
/// out here either.
fn every_field_expected() -> Report {
    let names = regs::ARM64_NAMES;
    Report {
        format_version: (2, 4),
        meta: Some(Meta {
            report_id: ReportId(*b"\x6b\x5f\x0f\x36\x1a\x2d\x4c\x3e\x9b\x7a\x21\x04\xc8\xd1\x55\x90"),
            capture_time_ns: Some(1_763_700_000_123_456_789),
            handler_version: Some("0.1.0".into()),
            arch: Some("arm64".into()),
            hardware_model: Some("iPhone14,2".into()),
            os: Os { name: Some("iPhone OS".into()), version: Some("15.5".into()), build: Some("19F77".into()) },
            process: Process {
                pid: Some(1730),
                parent_pid: Some(1),
                name: Some("Demo".into()),
                path: Some("/private/var/containers/Bundle/Application/0A1B/Demo.app/Demo".into()),
                parent_name: Some("launchd".into()),
                bundle_id: Some("com.example.demo".into()),
                short_version: Some("1.2".into()),
                build_version: Some("42".into()),
                launch_time_ns: Some(1_763_699_990_000_000_000),
            },
            thread_count: Some(2),
            image_count: Some(3),
            minimal: true,
            note: Some("minimal: second fault in the handler".into()),
            non_fatal: Some(NonFatal {
                kind: "hang".into(),
                reason: Some("main thread unresponsive for 2.35 s".into()),
                duration_ns: Some(2_345_000_000),
                thread: Some(1),
            }),
        }),
        exception: Some(Exception {
            mach_type: Some(1),
            mach_codes: vec![1, -0x10],
            signal: Some(11),
            si_code: Some(-6),
            fault_address: Some(0x10),
            crashed_thread: Some(0),
            language: Some(LanguageException {
                kind: "objc".into(),
                type_name: Some("NSInvalidArgumentException".into()),
                reason: Some("*** -[__NSArrayM insertObject:atIndex:]: object cannot be nil".into()),
                location: Some("src/main.rs:3:5".into()),
                user_info: Some("NSDebugDescription: nil".into()),
                thread_id: Some(0x2a41),
                backtrace: vec![0x1_0000_4f50, 0x1_8e0b_2a40],
            }),
        }),
        threads: vec![
            Thread {
                index: 0,
                id: Some(0x2a41),
                name: Some("main".into()),
                queue: Some("com.apple.main-thread".into()),
                crashed: true,
                captured: false,
                not_captured_reason: Some("registers only: the stack could not be read".into()),
                register_set: Some(regs::ARM64.into()),
                registers: (0..36u64)
                    .filter(|&k| k != 3)
                    .map(|k| Register { name: names[k as usize].into(), value: 0x1000 + k })
                    .collect(),
                frames: vec![0x1_0000_4f50, 0x1_0000_4e10, 0x1_0000_4d00, 0x1_8e0b_2a40],
                frame_trust: vec![FrameTrust::Context, FrameTrust::Cfi, FrameTrust::FramePointer, FrameTrust::Scan],
                frames_truncated: true,
                repeats: vec![Repeat { start: 1, len: 2, count: 3 }],
            },
            Thread {
                index: 1,
                id: Some(0x2a42),
                name: Some("worker".into()),
                queue: Some("com.example.work".into()),
                crashed: false,
                captured: true,
                not_captured_reason: None,
                register_set: Some(regs::X86_64.into()),
                registers: vec![Register { name: "rax".into(), value: 7 }],
                frames: vec![0x1000],
                frame_trust: vec![FrameTrust::LinkRegister],
                frames_truncated: false,
                repeats: Vec::new(),
            },
        ],
        images: vec![
            Image {
                index: 0,
                name: "Demo main".into(),
                path: Some("/private/var/containers/Bundle/Application/0A1B/Demo.app/Demo".into()),
                load_address: 0x1_0000_0000,
                size: 0x8000,
                slide: Some(-0x4000),
                id: Some(ImageId::Uuid(UUID)),
                arch: Some("arm64e".into()),
                name_only: false,
            },
            Image {
                index: 1,
                name: "libdemo.so".into(),
                path: Some("/usr/lib/libdemo.so".into()),
                load_address: 0x7f00_0000_0000,
                size: 0x1234,
                slide: Some(0x1000),
                id: Some(ImageId::BuildId(BUILD_ID.to_vec())),
                arch: None,
                name_only: false,
            },
            Image {
                index: 2,
                name: "libz.1.dylib".into(),
                path: Some("/usr/lib/libz.1.dylib".into()),
                load_address: 0,
                size: 0,
                slide: None,
                id: None,
                arch: None,
                name_only: true,
            },
        ],
        messages: vec![Message {
            source: Some("libswiftCore.dylib".into()),
            text: "Fatal error: Unexpectedly found nil".into(),
        }],
        user: [("user.id".to_string(), "42".to_string())].into_iter().collect(),
    }
}

#[test]
fn every_field_the_encoder_writes_the_decoder_reads_back() {
    let bytes = encode_every_field();
    let d = report_format::decode(&bytes).expect("decodes");
    assert!(d.is_intact(), "{:?}", d.problems);
    let want = every_field_expected();
    // Field by field first, for a readable failure; then the whole report, which covers anything missed.
    assert_eq!(d.report.meta, want.meta);
    assert_eq!(d.report.exception, want.exception);
    assert_eq!(d.report.threads, want.threads);
    assert_eq!(d.report.images, want.images);
    assert_eq!(d.report.messages, want.messages);
    assert_eq!(d.report.user, want.user);
    assert_eq!(d.report, want);
}

// ---- the keys on the wire ----

/// A MessagePack value reduced to its structure: maps keep their keys in the order written.
#[derive(Debug)]
enum Shape {
    Map(Vec<(String, Shape)>),
    Seq(Vec<Shape>),
    Scalar,
}

impl<'de> Deserialize<'de> for Shape {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Shape;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any MessagePack value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Shape, A::Error> {
                let mut entries = Vec::new();
                while let Some((k, v)) = map.next_entry::<String, Shape>()? {
                    entries.push((k, v));
                }
                Ok(Shape::Map(entries))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Shape, A::Error> {
                let mut items = Vec::new();
                while let Some(v) = seq.next_element::<Shape>()? {
                    items.push(v);
                }
                Ok(Shape::Seq(items))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Shape, E> {
                Ok(Shape::Scalar)
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Shape, E> {
                Ok(Shape::Scalar)
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Shape, E> {
                Ok(Shape::Scalar)
            }
            fn visit_str<E: de::Error>(self, _: &str) -> Result<Shape, E> {
                Ok(Shape::Scalar)
            }
            fn visit_bytes<E: de::Error>(self, _: &[u8]) -> Result<Shape, E> {
                Ok(Shape::Scalar)
            }
            fn visit_unit<E: de::Error>(self) -> Result<Shape, E> {
                Ok(Shape::Scalar)
            }
            fn visit_none<E: de::Error>(self) -> Result<Shape, E> {
                Ok(Shape::Scalar)
            }
        }
        d.deserialize_any(V)
    }
}

impl Shape {
    fn keys(&self) -> Vec<&str> {
        match self {
            Shape::Map(entries) => entries.iter().map(|(k, _)| k.as_str()).collect(),
            other => panic!("expected a map, found {other:?}"),
        }
    }
    fn get(&self, key: &str) -> &Shape {
        match self {
            Shape::Map(entries) => &entries.iter().find(|(k, _)| k == key).unwrap_or_else(|| panic!("no {key}")).1,
            other => panic!("expected a map, found {other:?}"),
        }
    }
    fn first(&self) -> &Shape {
        match self {
            Shape::Seq(items) => items.first().expect("an element"),
            other => panic!("expected an array, found {other:?}"),
        }
    }
}

#[test]
fn the_encoder_writes_exactly_the_keys_in_order() {
    let bytes = encode_every_field();
    let d = report_format::decode(&bytes).expect("decodes");
    let payload = |kind: SectionKind| -> Shape {
        let s = d.sections.iter().find(|s| s.kind == kind).expect("section present");
        let at = s.offset + SECTION_HEADER_LEN;
        rmp_serde::from_slice(&bytes[at..at + s.len as usize]).expect("msgpack")
    };
    let meta = payload(SectionKind::Meta);
    let images = payload(SectionKind::Images);
    let image_names = payload(SectionKind::ImageNames);
    let messages = payload(SectionKind::Messages);
    let (exception, thread) = (payload(SectionKind::Exception), payload(SectionKind::Thread));
    let (user, end) = (payload(SectionKind::User), payload(SectionKind::End));
    // Thread 0 sets every THREAD key (the first THREAD section).
    let written: Vec<(&str, Vec<&str>)> = vec![
        ("META", meta.keys()),
        ("OS map", meta.get(keys::meta::OS).keys()),
        ("Process map", meta.get(keys::meta::PROCESS).keys()),
        ("Non-fatal map", meta.get(keys::meta::NON_FATAL).keys()),
        ("EXCEPTION", exception.keys()),
        ("Language exception map", exception.get(keys::exception::LANGUAGE_EXCEPTION).keys()),
        ("THREAD", thread.keys()),
        ("IMAGES", images.keys()),
        ("Image map", images.get(keys::images::LIST).first().keys()),
        ("IMAGE NAMES", image_names.keys()),
        ("MESSAGES", messages.keys()),
        ("Message map", messages.get(keys::messages::LIST).first().keys()),
        ("USER", user.keys()),
        ("END", end.keys()),
    ];
    let names: Vec<&str> = keys::MAPS.iter().map(|m| m.name).collect();
    assert_eq!(written.iter().map(|(n, _)| *n).collect::<Vec<_>>(), names, "every map is checked");
    for (KeyMap { name, keys }, (_, on_wire)) in keys::MAPS.iter().zip(&written) {
        // Keys of 1.x that 2.0 writers no longer write (`keys::READ_ONLY`) are read, never written.
        let writes: Vec<&str> = keys.iter().copied().filter(|k| !keys::READ_ONLY.contains(&(*name, *k))).collect();
        assert_eq!(on_wire, &writes, "{name}: the encoder's keys differ from report_format::keys");
    }
    assert!(!keys::READ_ONLY.is_empty());
    for (map, key) in keys::READ_ONLY {
        assert!(keys::MAPS.iter().any(|m| m.name == *map && m.keys.contains(key)), "{map} {key}");
    }
}

// ---- SCHEMA.md ----

/// One table of SCHEMA.md: the nearest line of text above it (a heading or a caption), its header cells, its rows.
struct Table {
    caption: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

fn cells(line: &str) -> Vec<String> {
    line.trim().trim_start_matches('|').trim_end_matches('|').split('|').map(|c| c.trim().to_string()).collect()
}

fn schema_tables() -> Vec<Table> {
    let mut tables: Vec<Table> = Vec::new();
    let mut caption = String::new();
    let mut in_table = false;
    let mut in_code = false;
    for line in SCHEMA.lines() {
        let t = line.trim();
        if t.starts_with("```") {
            in_code = !in_code;
            continue;
        }
        if in_code {
            continue;
        }
        if t.starts_with('|') {
            let row = cells(t);
            if !in_table {
                tables.push(Table { caption: caption.clone(), header: row, rows: Vec::new() });
                in_table = true;
            } else if !row.iter().all(|c| !c.is_empty() && c.chars().all(|ch| ch == '-' || ch == ':')) {
                tables.last_mut().expect("open table").rows.push(row);
            }
        } else {
            in_table = false;
            if !t.is_empty() {
                caption = t.to_string();
            }
        }
    }
    tables
}

/// The key in a table's first cell: exactly one backticked word.
fn key_cell(cell: &str) -> &str {
    let k = cell.strip_prefix('`').and_then(|c| c.strip_suffix('`')).unwrap_or_else(|| panic!("key cell {cell:?}"));
    assert!(!k.contains('`') && !k.is_empty(), "key cell {cell:?}");
    k
}

#[test]
fn schema_key_tables_list_exactly_the_keys() {
    let tables: Vec<Table> =
        schema_tables().into_iter().filter(|t| t.header.first().is_some_and(|h| h == "key")).collect();
    let captions: Vec<&str> = tables.iter().map(|t| t.caption.as_str()).collect();
    assert_eq!(tables.len(), keys::MAPS.len(), "one key table per map in SCHEMA.md; tables under: {captions:?}");
    for (map, table) in keys::MAPS.iter().zip(&tables) {
        assert!(
            table.caption.contains(map.name),
            "SCHEMA.md's key tables are not in keys::MAPS's order: {:?} where {} was expected",
            table.caption,
            map.name
        );
        // Equal lists: every key of the table is a constant, and every constant is in the table, in the same order.
        let in_schema: Vec<&str> = table.rows.iter().map(|r| key_cell(&r[0])).collect();
        assert_eq!(in_schema, map.keys, "{}: SCHEMA.md and report_format::keys disagree", map.name);
    }
}

#[test]
fn schema_section_table_lists_exactly_the_section_kinds() {
    let tables = schema_tables();
    let kinds = tables
        .iter()
        .find(|t| t.header.first().is_some_and(|h| h == "kind") && t.header.get(1).is_some_and(|h| h == "name"))
        .expect("SCHEMA.md §3 has the table of section kinds");
    let in_schema: Vec<(String, u16)> = kinds
        .rows
        .iter()
        .map(|r| {
            let code = match r[0].strip_prefix("0x") {
                Some(hex) => u16::from_str_radix(hex, 16),
                None => r[0].parse(),
            }
            .unwrap_or_else(|e| panic!("kind {:?}: {e}", r[0]));
            (r[1].clone(), code)
        })
        .collect();
    let in_keys: Vec<(String, u16)> = section::ALL.iter().map(|&(n, c)| (n.to_string(), c)).collect();
    assert_eq!(in_schema, in_keys, "SCHEMA.md §3 and report_format::keys::section disagree");
}

#[test]
fn the_schema_parser_sees_what_it_must() {
    // Guards the two tests above against a parser that silently finds nothing.
    let tables = schema_tables();
    assert!(tables.iter().any(|t| t.caption == "### 4.1 META" && t.rows.len() == 12));
    assert!(tables.iter().any(|t| t.caption.starts_with("Process map") && t.rows.len() == 9));
    assert!(tables.iter().any(|t| t.header.first().is_some_and(|h| h == "offset")), "framing tables");
    assert_eq!(key_cell("`tc`"), "tc");
}
