//! Writes the format-version-1.0 compatibility fixture, `report-format/tests/data/report-v1.0.crashreport`.
//!
//! Run from the workspace root: `cargo run -p report-format --example make_v1_fixture`.
//!
//! The fixture was generated once with format 1.0 and committed; `tests/compat.rs` checks that every later
//! version still decodes it to exactly these values. Do not regenerate it after the format changes: that would
//! defeat its purpose. It uses the crash-time encoder (not `owned::to_bytes`) so the bytes are what a handler writes.

use report_format::encode::{
    Encoder, Exception, Image, KeyValue, Message, Meta, Os, Process, Repeat, Thread, ID_KIND_BUILD_ID, ID_KIND_UUID,
};
use report_format::regs::{index_of, ARM64, ARM64_NAMES};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (major, minor) = (report_format::framing::FORMAT_MAJOR, report_format::framing::FORMAT_MINOR);
    if major != 1 {
        return Err(format!(
            "the encoder now writes format {major}.{minor}: this example only records how the committed format-1.0 \
             fixture was made, and refuses to overwrite it"
        )
        .into());
    }
    let out_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/report-v1.0.crashreport");
    let mut scratch = vec![0u8; 64 << 10];
    let mut enc = Encoder::begin(Vec::new(), &mut scratch).map_err(|e| format!("{e:?}"))?;
    let run = |r: Result<(), report_format::encode::EncodeError>| r.map_err(|e| format!("{e:?}"));
    run(enc.meta(&Meta {
        report_id: *b"\x6b\x5f\x0f\x36\x1a\x2d\x4c\x3e\x9b\x7a\x21\x04\xc8\xd1\x55\x90",
        capture_time_ns: 1_763_700_000_123_456_789,
        handler_version: b"0.1.0",
        arch: b"arm64",
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
            launch_time_ns: Some(1_763_699_990_000_000_000),
        },
        thread_count: Some(2),
        image_count: Some(2),
        minimal: false,
        note: b"",
    }))?;
    run(enc.exception(&Exception {
        mach_type: Some(1),
        mach_codes: &[1, 0x10],
        signal: Some(11),
        si_code: Some(1),
        fault_address: Some(0x10),
        crashed_thread: Some(0),
    }))?;
    run(enc.messages(&[Message { source: b"libswiftCore.dylib", text: b"Fatal error: Unexpectedly found nil" }]))?;
    run(enc.user(&[KeyValue { key: b"user.id", value: b"42" }]))?;
    let mut regs = [None; ARM64_NAMES.len()];
    for (k, r) in regs.iter_mut().enumerate() {
        *r = Some(0x1000 + k as u64);
    }
    let pc = index_of(ARM64, "pc").ok_or("pc")?;
    regs[pc] = Some(0x1_0000_4f50);
    run(enc.thread(&Thread {
        index: 0,
        id: Some(0x2a41),
        name: b"",
        queue: b"com.apple.main-thread",
        crashed: true,
        captured: true,
        reason: b"",
        register_set: ARM64.as_bytes(),
        registers: &regs,
        frames: &[0x1_0000_4f50, 0x1_0000_4e10, 0x1_0000_4d00, 0x1_8e0b_2a40],
        frames_truncated: false,
        repeats: &[Repeat { start: 1, len: 2, count: 3 }],
        trust: &[],
        images: None,
    }))?;
    run(enc.thread(&Thread {
        index: 1,
        id: Some(0x2a42),
        name: b"worker",
        captured: false,
        reason: b"did not answer the stop signal within 100 ms",
        ..Thread::default()
    }))?;
    run(enc.images(
        0,
        &[
            Image {
                path: b"/private/var/containers/Bundle/Application/0A1B/Demo.app/Demo",
                name: b"",
                load_address: 0x1_0000_0000,
                size: 0x8000,
                slide: Some(0),
                id: &[0x82, 0xd1, 0x3d, 0x98, 0x21, 0x9e, 0x30, 0x40, 0xb6, 0x2a, 0x07, 0xa2, 0x97, 0x00, 0x7a, 0x7c],
                id_kind: ID_KIND_UUID,
                arch: b"",
            },
            Image {
                path: b"/usr/lib/libdemo.so",
                name: b"libdemo",
                load_address: 0x7f00_0000_0000,
                size: 0x2_0000,
                slide: Some(0x7f00_0000_0000),
                id: &[0xde, 0xad, 0xbe, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16],
                id_kind: ID_KIND_BUILD_ID,
                arch: b"arm64e",
            },
        ],
    ))?;
    let bytes = enc.finish().map_err(|e| format!("{e:?}"))?;
    std::fs::write(&out_path, &bytes)?;
    println!("wrote {} ({} bytes)", out_path.display(), bytes.len());
    Ok(())
}
