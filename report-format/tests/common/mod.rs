//! Shared builders for the report-format tests.
#![allow(dead_code)]

use report_format::model::{
    Exception, FrameTrust, Image, ImageId, Message, Meta, Os, Process, Register, Repeat, Report, ReportId, Thread,
};
use report_format::regs;

/// A realistic arm64 iOS-style report with every kind of section and field.
pub fn sample_report(threads: u32, frames: u32, images: u32) -> Report {
    let mut r = Report {
        format_version: (2, 4),
        meta: Some(Meta {
            report_id: ReportId(*b"\x62\x51\x12\x5f\x09\x19\x48\x79\xb3\x6b\xf5\xf2\xd1\xe6\x90\x2e"),
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
            thread_count: Some(threads),
            image_count: Some(images),
            minimal: false,
            note: None,
            non_fatal: None,
        }),
        exception: Some(Exception {
            mach_type: Some(6),
            mach_codes: vec![1, 0x1_ad98_ab74],
            signal: Some(5),
            si_code: Some(1),
            fault_address: Some(0x1_ad98_ab74),
            crashed_thread: Some(0),
            language: None,
        }),
        threads: Vec::new(),
        images: Vec::new(),
        messages: vec![Message { source: Some("libswiftCore.dylib".into()), text: "Fatal error: boom".into() }],
        user: [("user.id".to_string(), "42".to_string()), ("screen".to_string(), "checkout".to_string())]
            .into_iter()
            .collect(),
    };
    for t in 0..threads {
        let registers = regs::ARM64_NAMES
            .iter()
            .enumerate()
            .filter(|(k, _)| t == 0 || *k < 34) // far and esr only for the crashed thread
            .map(|(k, n)| Register { name: (*n).to_string(), value: 0x1000 * u64::from(t) + k as u64 })
            .collect();
        r.threads.push(Thread {
            index: t,
            id: Some(0x1000 + u64::from(t)),
            name: (t % 3 == 1).then(|| format!("worker-{t}")),
            queue: (t == 0).then(|| "com.apple.main-thread".to_string()),
            crashed: t == 0,
            captured: true,
            not_captured_reason: None,
            register_set: Some("arm64".into()),
            registers,
            // Odd frames fall inside an image with a load address (written relative to it), even ones outside
            // every image (written as absolute addresses).
            frames: (0..frames)
                .map(|f| match (f % 2, images) {
                    (1, 1..) => {
                        let mut i = (t + f) % images;
                        if i % 4 == 3 {
                            i -= 1;
                        }
                        0x1_8000_0000 + u64::from(i) * 0x10_0000 + u64::from(f) * 4
                    }
                    _ => 0x1_0000_0000 + u64::from(t) * 0x10000 + u64::from(f) * 4,
                })
                .collect(),
            // Every kind of trust, so the round trip covers the `tr` bytes.
            frame_trust: (0..frames)
                .map(|f| if f == 0 { FrameTrust::Context } else { FrameTrust::from_byte((f % 5 + 1) as u8) })
                .collect(),
            frames_truncated: false,
            repeats: if t == 1 { vec![Repeat { start: 2, len: 3, count: 1000 }] } else { Vec::new() },
        });
    }
    // Every fourth image is known by name only (as a 2.0 writer stores images nothing points into).
    for i in 0..images {
        let path = format!(
            "/System/Library/PrivateFrameworks/SomeVeryLongFrameworkNameForTesting{i}.framework/SomeVeryLongFrameworkNameForTesting{i}"
        );
        let name = path.rsplit('/').next().unwrap_or_default().to_string();
        if i % 4 == 3 {
            r.images.push(Image { index: i, name, path: Some(path), name_only: true, ..Image::default() });
            continue;
        }
        r.images.push(Image {
            index: i,
            name,
            path: Some(path),
            load_address: 0x1_8000_0000 + u64::from(i) * 0x10_0000,
            size: 0x8_0000,
            slide: Some(0x8_0000),
            id: Some(if i % 2 == 0 {
                ImageId::Uuid([i as u8; 16])
            } else {
                ImageId::BuildId(vec![0xab, i as u8, 0xcd, 0xef, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16])
            }),
            arch: (i == 1).then(|| "arm64e".to_string()),
            name_only: false,
        });
    }
    r
}
