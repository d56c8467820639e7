//! getsentry/symbolic's Mach-O fixture (tests/fixtures/third_party/symbolic, MIT; see its README): every symbol
//! table entry resolves to its own name at its own offset, and the dSYM's DWARF functions and inlinees resolve.

use std::path::{Path, PathBuf};
use viewer::symbols::SymbolStore;

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/third_party/symbolic").join(rel)
}

const LOAD: u64 = 0x1_0000_0000;

#[test]
fn every_symbol_table_entry_resolves_to_itself() {
    let text = std::fs::read_to_string(fixture("expected-symbol-table.txt")).unwrap();
    let mut store = SymbolStore::only(vec![]);
    let file = store.load_path(&fixture("crash"), None, None).unwrap();
    assert!(!file.has_dwarf());
    let mut checked = 0;
    for line in text.lines().skip_while(|l| !l.starts_with("---")).skip(1).skip_while(|l| !l.starts_with("---")).skip(1)
    {
        let Some((off, name)) = line.trim().split_once(' ') else { continue };
        let off = u64::from_str_radix(off, 16).unwrap();
        let (start, _, raw) = file.symbol_at(file.image_base + off).unwrap_or_else(|| panic!("{off:#x} {name}"));
        assert_eq!((start - file.image_base, raw.trim_start_matches('_')), (off, name.trim_start_matches('_')));
        let r = viewer::atos(&file, LOAD, &[LOAD + off]);
        let f = &r[0].frames[0];
        assert_eq!(f.offset, Some(0), "{name}");
        assert_eq!(f.name, viewer::demangle::demangle(name), "{off:#x}");
        checked += 1;
    }
    assert_eq!(checked, 195);
}

#[test]
fn dwarf_functions_and_inlinees_from_the_dsym() {
    let text = std::fs::read_to_string(fixture("expected-functions.txt")).unwrap();
    let mut store = SymbolStore::only(vec![fixture("crash.dSYM")]);
    let uuid = report_format::model::ImageId::Uuid([
        0x67, 0xe9, 0x24, 0x7c, 0x81, 0x4e, 0x39, 0x2b, 0xa0, 0x27, 0xdb, 0xde, 0x67, 0x48, 0xfc, 0xbf,
    ]);
    let file = store.find(&viewer::symbols::ImageQuery { id: Some(uuid), ..Default::default() }).unwrap();
    assert!(file.has_dwarf());
    let (mut functions, mut inlinees) = (0, 0);
    let lines: Vec<&str> = text.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        let inlinee = l.starts_with("  > ");
        if !(l.starts_with("> ") || inlinee) {
            continue;
        }
        let body = l.trim_start().trim_start_matches("> ");
        let (addr, rest) = body.split_once(": ").unwrap();
        let name = rest.rsplit_once(" (").unwrap().0;
        let addr = u64::from_str_radix(addr.trim_start_matches("0x"), 16).unwrap();
        // The first line row after the header: "  0xd20: minidump_file_writer.cc:93 (...)".
        let row = lines[i + 1].trim().split_once(": ").unwrap().1;
        let (file_line, _) = row.split_once(' ').unwrap();
        let (src, line) = file_line.rsplit_once(':').unwrap();
        let r = viewer::atos(&file, LOAD, &[LOAD + addr]);
        let frames = &r[0].frames;
        let demangled = viewer::demangle::demangle(name);
        if inlinee {
            let inner = &frames[0];
            assert_eq!(inner.name, demangled, "{addr:#x}");
            assert!(frames.len() >= 2, "{addr:#x}: the inlinee has a caller frame");
            inlinees += 1;
        } else {
            let outer = frames.last().unwrap();
            assert_eq!(outer.name, demangled, "{addr:#x}");
            assert_eq!(outer.offset, Some(0));
            functions += 1;
        }
        // The listing gives each function's own line rows: the innermost frame for an inlinee, the out-of-line
        // function's row (its call site of an inlinee starting here) otherwise.
        let f = if inlinee { &frames[0] } else { frames.last().unwrap() };
        assert!(f.file.as_deref().unwrap().ends_with(src), "{addr:#x}: {:?}", f.file);
        assert_eq!(f.line, Some(line.parse().unwrap()), "{addr:#x}");
    }
    assert_eq!(functions, 10);
    assert!(inlinees >= 2, "{inlinees}");
}

mod hostile_debug_files {
    use proptest::prelude::*;
    use viewer::symbols::{identify, DebugFile};

    fn exercise(bytes: &[u8]) {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, bytes).unwrap();
        for ident in identify(&p) {
            if let Ok(f) = DebugFile::load(ident) {
                for a in [0u64, 0x1_0000_0d20, 0x1_0000_0d41, u64::MAX] {
                    let _ = f.lookup(a, a.wrapping_sub(1));
                }
            }
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        #[test]
        fn truncated_or_flipped_debug_files_never_panic(cut in 0usize..700_000, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..16)) {
            let mut bytes = std::fs::read(super::fixture("crash.dSYM/Contents/Resources/DWARF/crash")).unwrap();
            bytes.truncate(cut.max(4).min(bytes.len()));
            let n = bytes.len();
            for (i, x) in flips {
                // Keep the magic so the parsers are reached.
                let i = 4 + i % (n - 4).max(1);
                if i < n { bytes[i] ^= x; }
            }
            exercise(&bytes);
        }

        #[test]
        fn random_bytes_behind_object_magics_never_panic(magic in 0usize..4, body in proptest::collection::vec(any::<u8>(), 0..4096)) {
            let magics: [&[u8]; 4] = [b"\xcf\xfa\xed\xfe", b"\xca\xfe\xba\xbe", b"\x7fELF", b"\xfe\xed\xfa\xcf"];
            let mut bytes = magics[magic].to_vec();
            bytes.extend_from_slice(&body);
            exercise(&bytes);
        }
    }
}
