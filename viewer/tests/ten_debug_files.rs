//! A 64-thread x 64-frame report against ten distinct debug files (four real Mach-O ids from
//! tests/fixtures/third_party and six ELF programs compiled with gcc) is symbolicated across all of them. How fast
//! a report this size renders is a benchmark figure (`scripts/bench.sh`, BENCHMARKS.md (f)), not a test.

use report_format::model::{Image, ImageId, Meta, Os, Report, Thread};
use std::path::Path;
use std::process::Command;
use viewer::symbols::SymbolStore;
use viewer::{Format, Layout};

fn uuid(hex: &str) -> ImageId {
    let h: String = hex.chars().filter(|c| *c != '-').collect();
    let mut u = [0u8; 16];
    for (i, b) in u.iter_mut().enumerate() {
        *b = u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap();
    }
    ImageId::Uuid(u)
}

#[test]
fn sixty_four_by_sixty_four_frames_symbolicated_against_ten_debug_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/third_party");
    let dir = tempfile::tempdir().unwrap();
    // (id, __text start, __text size) of each image (llvm-objdump -h); Mach-O __TEXT vmaddr is 0x100000000, ELF
    // PIE base 0.
    let mut images: Vec<(ImageId, u64, u64)> = vec![
        (uuid("82D13D98-219E-3040-B62A-07A297007A7C"), 0x1_0000_60e4, 0x418),
        (uuid("01D2A9D5-1F8A-35C8-9228-7C7CCA13C5FC"), 0x1_0000_3e14, 0x84),
        (uuid("562DB6C8-8D3C-3B67-9511-F3C108BDEAB2"), 0x1_0000_3e14, 0x84),
        (uuid("67E9247C-814E-392B-A027-DBDE6748FCBF"), 0x1_0000_0d20, 0xcf83),
    ];
    for i in 0..6 {
        let src = dir.path().join(format!("p{i}.c"));
        let mut code = String::new();
        for f in 0..40 {
            code.push_str(&format!("int f{f}_{i}(int x) {{ return x * {f} + {i}; }}\n"));
        }
        code.push_str("int main(void) { return 0; }\n");
        std::fs::write(&src, code).unwrap();
        let out = dir.path().join(format!("p{i}"));
        let st = Command::new("gcc").args(["-g", "-O0", "-Wl,--build-id=sha1", "-o"]).arg(&out).arg(&src).status();
        assert!(st.unwrap().success());
        let data = std::fs::read(&out).unwrap();
        let id = {
            use object::Object;
            object::File::parse(&*data).unwrap().build_id().unwrap().unwrap().to_vec()
        };
        images.push((ImageId::BuildId(id), 0x1000, 0x400));
    }
    let mut report = Report {
        format_version: (1, 1),
        meta: Some(Meta {
            arch: Some("arm64".into()),
            os: Os { name: Some("iPhone OS".into()), ..Os::default() },
            ..Meta::default()
        }),
        ..Report::default()
    };
    for (i, (id, text_start, text_size)) in images.iter().enumerate() {
        let load = 0x2_0000_0000 + (i as u64) * 0x100_0000;
        report.images.push(Image {
            index: i as u32,
            name: format!("image{i}"),
            load_address: load,
            size: 0x100_0000,
            slide: Some(load as i64 - base_of(*text_start) as i64),
            id: Some(id.clone()),
            ..Image::default()
        });
        let _ = text_size;
    }
    // Link-time address of the image start: Mach-O __TEXT vmaddr, ELF 0.
    fn base_of(text_start: u64) -> u64 {
        if text_start >= 0x1_0000_0000 {
            0x1_0000_0000
        } else {
            0
        }
    }
    for t in 0..64u32 {
        let frames = (0..64u64)
            .map(|f| {
                let i = ((t as u64 + f) % images.len() as u64) as usize;
                let (_, start, size) = images[i];
                let svma = start + (f * 37 + u64::from(t) * 11) % size;
                report.images[i].load_address + (svma - base_of(start))
            })
            .collect();
        report.threads.push(Thread { index: t, crashed: t == 0, frames, ..Thread::default() });
    }
    let bytes = report_format::owned::to_bytes(&report).unwrap();

    let mut loaded = viewer::load(&bytes).unwrap();
    let mut store = SymbolStore::only(vec![root, dir.path().to_path_buf()]);
    let text = viewer::render_loaded(&mut loaded, Layout::Modern, Format::Text, Some(&mut store));

    let log = loaded.log().unwrap();
    let symbolicated = log.threads.iter().flat_map(|t| &t.frames).filter(|f| f.symbol.is_some()).count();
    assert!(symbolicated >= 64 * 64 / 4, "{symbolicated} frames symbolicated\n{text}");
    // Every one of the ten debug files named frames.
    let mut named_images: Vec<usize> =
        log.threads.iter().flat_map(|t| &t.frames).filter(|f| f.symbol.is_some()).filter_map(|f| f.image).collect();
    named_images.sort_unstable();
    named_images.dedup();
    assert_eq!(named_images.len(), 10, "images with symbolicated frames: {named_images:?}");
}
