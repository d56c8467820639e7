//! Our own tiny Mach-O fixture (tests/fixtures/macho-built, rebuilt by its make.sh): C++ names, inlined frames,
//! dSYM vs. executable symbol table, lookup by UUID. Expected lines agree with llvm-symbolizer on the dSYM.

use std::path::{Path, PathBuf};
use viewer::symbols::{ImageQuery, SymbolStore};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/macho-built").join(rel)
}

const COMPUTE: u64 = 0x1_0000_402c;
const LOAD: u64 = 0x1_0480_0000;

fn uuid() -> report_format::model::ImageId {
    report_format::model::ImageId::Uuid([
        0x4c, 0x4c, 0x44, 0x23, 0x55, 0x55, 0x31, 0x44, 0xa1, 0x83, 0xa5, 0xff, 0xa0, 0x62, 0x1d, 0xc8,
    ])
}

#[test]
fn dsym_gives_cpp_names_lines_and_inlined_frames() {
    let mut store = SymbolStore::only(vec![fixture("")]);
    let file = store.find(&ImageQuery { id: Some(uuid()), ..Default::default() }).unwrap();
    assert!(file.has_dwarf(), "the dSYM is preferred: {:?}", file.identity);
    let addr = LOAD + (COMPUTE - 0x1_0000_0000) + 4;
    let r = viewer::atos(&file, LOAD, &[addr]);
    assert_eq!(
        viewer::format_atos(&r[0]),
        "app::helper(int) + 4 (crashy.cpp:4) [inlined]\napp::Widget::compute(int) + 4 (crashy.cpp:9)\n"
    );
    let main = viewer::atos(&file, LOAD, &[LOAD + 0x4008]);
    assert_eq!(viewer::format_atos(&main[0]), "main + 0 (crashy.cpp:18)\n");
}

#[test]
fn executable_symbol_table_without_dwarf() {
    let mut store = SymbolStore::only(vec![]);
    let file = store.load_path(&fixture("crashy"), Some(&uuid()), None).unwrap();
    assert!(!file.has_dwarf());
    let r = viewer::atos(&file, LOAD, &[LOAD + (COMPUTE - 0x1_0000_0000) + 8, LOAD + 0x4000]);
    assert_eq!(viewer::format_atos(&r[0]), "app::Widget::compute(int) + 8\n");
    assert_eq!(viewer::format_atos(&r[1]), "crash_here + 0\n");
}
