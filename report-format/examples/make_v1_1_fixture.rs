//! Writes the format-version-1.1 compatibility fixture, `report-format/tests/data/report-v1.1.crashreport`: a
//! realistic multi-thread Linux x86_64 report (crashed thread with full registers and frame trust, two captured
//! workers, one thread that was not captured, five images, a repeat record).
//!
//! Run from the workspace root: `cargo run -p report-format --example make_v1_1_fixture`.
//!
//! Generated once with the format-1.1 encoder and committed; `tests/compat.rs` checks that every later version
//! still decodes it to exactly these values. Do not regenerate it after the format changes (the encoder now writes a
//! newer version; this example only documents how the committed bytes were made).

use report_format::encode::{Encoder, Exception, Image, KeyValue, Message, Meta, Os, Process, Repeat, Thread};
use report_format::regs::{X86_64, X86_64_NAMES};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (major, minor) = (report_format::framing::FORMAT_MAJOR, report_format::framing::FORMAT_MINOR);
    if major != 1 {
        return Err(format!(
            "the encoder now writes format {major}.{minor}: this example only records how the committed format-1.1 \
             fixture was made, and refuses to overwrite it"
        )
        .into());
    }
    let out_path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/report-v1.1.crashreport");
    let mut scratch = vec![0u8; 64 << 10];
    let mut enc = Encoder::begin(Vec::new(), &mut scratch).map_err(|e| format!("{e:?}"))?;
    let run = |r: Result<(), report_format::encode::EncodeError>| r.map_err(|e| format!("{e:?}"));
    run(enc.meta(&Meta {
        report_id: *b"\x1e\x2d\x3c\x4b\x5a\x69\x48\x87\x96\xa5\xb4\xc3\xd2\xe1\xf0\x0f",
        capture_time_ns: 1_763_800_000_000_000_001,
        handler_version: b"0.1.0",
        arch: b"x86_64",
        hardware_model: b"x86_64",
        os: Os { name: b"Linux", version: b"6.1.0-18-amd64", build: b"#1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1" },
        process: Process {
            pid: Some(4242),
            parent_pid: Some(4200),
            name: b"demo-server",
            path: b"/opt/demo/bin/demo-server",
            parent_name: b"bash",
            bundle_id: b"com.example.server",
            short_version: b"",
            build_version: b"",
            launch_time_ns: Some(1_763_799_990_000_000_000),
        },
        thread_count: Some(4),
        image_count: Some(5),
        minimal: false,
        note: b"",
    }))?;
    run(enc.exception(&Exception {
        mach_type: None,
        mach_codes: &[],
        signal: Some(11),
        si_code: Some(1),
        fault_address: Some(0x18),
        crashed_thread: Some(2),
    }))?;
    run(enc.messages(&[Message { source: b"panic", text: b"called `Option::unwrap()` on a `None` value" }]))?;
    run(enc.user(&[KeyValue { key: b"request", value: b"GET /health" }, KeyValue { key: b"shard", value: b"7" }]))?;
    // Crashed thread (index 2) first, as the handler writes it; every register captured.
    let mut regs = [None; X86_64_NAMES.len()];
    for (k, r) in regs.iter_mut().enumerate() {
        *r = Some(0x100 * (k as u64 + 1));
    }
    regs[6] = Some(0x7ffd_1234_5670); // rbp
    regs[7] = Some(0x7ffd_1234_5600); // rsp
    regs[16] = Some(0x5555_5555_6123); // rip
    regs[23] = Some(0x18); // cr2
    run(enc.thread(&Thread {
        index: 2,
        id: Some(4245),
        name: b"worker-2",
        queue: b"",
        crashed: true,
        captured: true,
        reason: b"",
        register_set: X86_64.as_bytes(),
        registers: &regs,
        frames: &[0x5555_5555_6123, 0x5555_5555_7000, 0x5555_5555_7100, 0x7f3a_1002_9d90, 0x7f3a_1012_6a00],
        frames_truncated: false,
        repeats: &[Repeat { start: 1, len: 2, count: 40 }],
        trust: &[1, 2, 2, 3, 4],
        images: None,
    }))?;
    let worker_regs = [None, None, None, None, None, None, Some(0x7f3a_0fff_fe40), Some(0x7f3a_0fff_fe00)];
    run(enc.thread(&Thread {
        index: 0,
        id: Some(4242),
        name: b"demo-server",
        captured: true,
        register_set: X86_64.as_bytes(),
        registers: &worker_regs,
        frames: &[0x7f3a_1009_1a2b, 0x7f3a_1008_0c00, 0x5555_5555_8000],
        trust: &[1, 2, 5],
        ..Thread::default()
    }))?;
    run(enc.thread(&Thread {
        index: 1,
        id: Some(4244),
        name: b"io",
        captured: true,
        register_set: X86_64.as_bytes(),
        registers: &[Some(1), None, Some(3)],
        frames: &[0x7f3a_1009_1a2b, 0x7f3a_2000_0100],
        frames_truncated: true,
        trust: &[1],
        ..Thread::default()
    }))?;
    run(enc.thread(&Thread {
        index: 3,
        id: Some(4246),
        name: b"stuck",
        captured: false,
        reason: b"did not answer the stop signal within 100 ms",
        ..Thread::default()
    }))?;
    let img = |path: &'static [u8], load: u64, size: u64, id: &'static [u8]| Image {
        path,
        load_address: load,
        size,
        slide: Some(load as i64),
        id,
        id_kind: report_format::encode::ID_KIND_BUILD_ID,
        ..Image::default()
    };
    run(enc.images(
        0,
        &[
            img(b"/opt/demo/bin/demo-server", 0x5555_5555_4000, 0x8000, &[0x11; 20]),
            img(b"/usr/lib/x86_64-linux-gnu/libc.so.6", 0x7f3a_1000_0000, 0x16_0000, &[0x22; 20]),
            img(b"/usr/lib/x86_64-linux-gnu/libm.so.6", 0x7f3a_1100_0000, 0x8_0000, &[0x33; 20]),
            img(b"/usr/lib/x86_64-linux-gnu/libgcc_s.so.1", 0x7f3a_2000_0000, 0x1_6000, &[]),
            img(b"/lib64/ld-linux-x86-64.so.2", 0x7f3a_3000_0000, 0x2_7000, &[0x55; 20]),
        ],
    ))?;
    let bytes = enc.finish().map_err(|e| format!("{e:?}"))?;
    std::fs::write(&out_path, &bytes)?;
    println!("wrote {} ({} bytes)", out_path.display(), bytes.len());
    Ok(())
}
