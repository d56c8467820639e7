//! Encoding a large report with the crash-time encoder makes zero heap allocations.
//!
//! A counting `#[global_allocator]` counts every allocation made on this test's thread while the encoder runs.
//! All inputs and buffers are built before counting starts, the way the handler preallocates them at install.
//! Counter and switch are thread-local, so tests running in parallel do not see each other's allocations.
#![allow(unsafe_code)] // a global allocator is unsafe to implement

use report_format::encode::{
    Encoder, Exception, Image, ImageLookup, IndexedImage, KeyValue, LanguageException, Message, Meta, NonFatal, Os,
    Process, SliceSink, Thread, ID_KIND_BUILD_ID, ID_KIND_UUID,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static ALLOCS: Cell<usize> = const { Cell::new(0) };
}

fn note() {
    if COUNTING.with(Cell::get) {
        ALLOCS.with(|a| a.set(a.get() + 1));
    }
}

fn allocs() -> usize {
    ALLOCS.with(Cell::get)
}

// SAFETY: every method forwards to the system allocator with the caller's arguments unchanged; counting touches
// only const-initialised thread-locals without destructors, which of which allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note();
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as our caller's.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const THREADS: usize = 256;
const FRAMES: usize = 128;
const IMAGES: usize = 500;

#[test]
fn encoding_a_large_report_allocates_nothing() {
    // Everything the encoder reads or writes is allocated here, before counting.
    // Odd frames inside images 0..64 (written relative to them), even ones outside every image.
    let frames: Vec<Vec<u64>> = (0..THREADS)
        .map(|t| {
            (0..FRAMES)
                .map(|f| match f % 2 {
                    1 => 0x1_8000_0000 + ((t + f) % 64) as u64 * 0x10_0000 + (f * 4) as u64,
                    _ => 0x1_0000_0000 + (t * 0x10000 + f * 4) as u64,
                })
                .collect()
        })
        .collect();
    let trust: Vec<u8> = (0..FRAMES).map(|f| (f % 6) as u8).collect();
    let registers: Vec<Vec<Option<u64>>> =
        (0..THREADS).map(|t| (0..36).map(|k| Some((t * 100 + k) as u64)).collect()).collect();
    let names: Vec<String> = (0..THREADS).map(|t| format!("worker thread number {t}")).collect();
    let paths: Vec<String> = (0..IMAGES)
        .map(|i| format!("/System/Library/Frameworks/{}/Framework{i}.framework/Framework{i}", "Nested/".repeat(20)))
        .collect();
    let ids: Vec<[u8; 20]> = (0..IMAGES).map(|i| [i as u8; 20]).collect();
    let images: Vec<Image<'_>> = (0..IMAGES)
        .map(|i| Image {
            path: paths[i].as_bytes(),
            name: b"",
            load_address: 0x1_8000_0000 + (i as u64) * 0x10_0000,
            size: 0x8_0000,
            slide: Some(0x4000),
            id: if i % 2 == 0 { &ids[i][..16] } else { &ids[i][..] },
            id_kind: if i % 2 == 0 { ID_KIND_UUID } else { ID_KIND_BUILD_ID },
            arch: b"",
        })
        .collect();
    let used: Vec<IndexedImage<'_>> = (0..64).map(|i| IndexedImage { index: i as u32, image: images[i] }).collect();
    let lookup = Lookup(&images);
    let codes = [1i64, 0x1234];
    let codes_bt = [0x1000u64, 0x2000];
    let mut out = vec![0u8; 4 << 20];
    let mut scratch = vec![0u8; 64 << 10];

    COUNTING.with(|c| c.set(true));
    let written = {
        let mut enc = Encoder::begin(SliceSink::new(&mut out), &mut scratch).expect("header");
        enc.meta(&Meta {
            report_id: [7; 16],
            capture_time_ns: 1,
            handler_version: b"0.1.0",
            arch: b"arm64",
            hardware_model: b"iPhone14,2",
            os: Os { name: b"iPhone OS", version: b"15.5", build: b"19F77" },
            process: Process { pid: Some(1), name: b"App", path: b"/App", ..Process::default() },
            thread_count: Some(THREADS as u32),
            image_count: Some(IMAGES as u32),
            minimal: false,
            note: b"",
            non_fatal: Some(NonFatal { kind: b"hang", reason: b"stall", duration_ns: Some(1), thread: Some(0) }),
        })
        .expect("meta");
        enc.exception(&Exception {
            mach_type: Some(1),
            mach_codes: &codes,
            signal: Some(11),
            si_code: Some(1),
            fault_address: Some(0),
            crashed_thread: Some(0),
            language: Some(LanguageException {
                kind: b"c++",
                type_name: b"St13runtime_error",
                reason: b"boom",
                backtrace: &codes_bt,
                ..LanguageException::default()
            }),
        })
        .expect("exception");
        enc.messages(&[Message { source: b"libswiftCore.dylib", text: b"Fatal error" }]).expect("messages");
        enc.user(&[KeyValue { key: b"k", value: b"v" }]).expect("user");
        for t in 0..THREADS {
            enc.thread(&Thread {
                index: t as u32,
                id: Some(t as u64),
                name: names[t].as_bytes(),
                queue: b"",
                crashed: t == 0,
                captured: true,
                reason: b"",
                register_set: b"arm64",
                registers: &registers[t],
                frames: &frames[t],
                frames_truncated: false,
                repeats: &[],
                trust: &trust,
                images: Some(&lookup),
            })
            .expect("thread");
        }
        enc.indexed_images(&used).expect("images");
        enc.image_names(paths.iter().enumerate().skip(64).map(|(i, p)| (i as u32, p.as_bytes()))).expect("names");
        enc.finish().expect("finish").len()
    };
    COUNTING.with(|c| c.set(false));
    assert_eq!(allocs(), 0, "the crash-time encoder allocated");

    // And what it wrote is the whole report.
    let d = report_format::decode(&out[..written]).expect("decodes");
    assert!(d.is_intact(), "{:?}", d.problems);
    assert_eq!(d.report.threads.len(), THREADS);
    assert!(d.report.threads.iter().all(|t| t.frames.len() == FRAMES && t.registers.len() == 36));
    assert_eq!(d.report.images.len(), IMAGES);
    assert_eq!(d.report.images[499].path.as_deref(), Some(paths[499].as_str()));
    assert!(d.report.images[499].name_only && !d.report.images[63].name_only);
    assert_eq!(d.report.threads[3].frames, frames[3]);
    println!("large report: {written} bytes");
}

#[test]
fn the_counter_sees_allocations() {
    // Guards the test above against a counter that can never fire.
    COUNTING.with(|c| c.set(true));
    let v = std::hint::black_box(vec![1u8; 100]);
    COUNTING.with(|c| c.set(false));
    drop(v);
    assert_eq!(allocs(), 1);
}

/// The images by load address (they are built in ascending order): a binary search, as the handler's.
#[derive(Debug)]
struct Lookup<'a>(&'a [Image<'a>]);

impl ImageLookup for Lookup<'_> {
    fn image_at(&self, address: u64) -> Option<(u32, u64)> {
        let at = self.0.partition_point(|i| i.load_address <= address);
        let i = at.checked_sub(1)?;
        let img = self.0.get(i)?;
        (address - img.load_address < img.size).then_some((i as u32, img.load_address))
    }
}
