//! ELF symbolication with programs compiled at test time by gcc (always present): lookup by GNU build ID, DWARF
//! lines with inlined functions, separate debug files in the `.build-id/xx/yyyy.debug` layout, the symbol table when
//! there is no DWARF, a debug file with the wrong build ID refused with a note, and compressed debug sections.

use object::{Object, ObjectSymbol};
use report_format::model::{Exception, Image, ImageId, Meta, Os, Report, Thread};
use std::path::{Path, PathBuf};
use std::process::Command;
use viewer::symbols::SymbolStore;
use viewer::{Format, Layout};

const SOURCE: &str = r#"
static inline __attribute__((always_inline)) int inner(int x) {
    return x * 3 + 1;
}
__attribute__((noinline)) int leaf(int x) {
    return inner(x) + 2;
}
int main(int argc, char **argv) {
    (void)argv;
    return leaf(argc);
}
"#;

const LOAD: u64 = 0x5555_5555_4000;

fn gcc(dir: &Path, name: &str, source: &str, extra: &[&str]) -> PathBuf {
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let out = dir.join(name);
    let st = Command::new("gcc")
        .args(["-g", "-O0", "-fPIE", "-pie", "-Wl,--build-id=sha1"])
        .args(extra)
        .arg("-o")
        .arg(&out)
        .arg(&src)
        .status()
        .expect("gcc runs");
    assert!(st.success());
    out
}

fn build_id(path: &Path) -> Vec<u8> {
    let data = std::fs::read(path).unwrap();
    let f = object::File::parse(&*data).unwrap();
    f.build_id().unwrap().unwrap().to_vec()
}

fn symbol(path: &Path, name: &str) -> u64 {
    let data = std::fs::read(path).unwrap();
    let f = object::File::parse(&*data).unwrap();
    f.symbols().find(|s| s.name() == Ok(name)).map(|s| s.address()).unwrap()
}

/// An address inside `leaf` where `inner` is inlined (found through the library itself, then checked).
fn inlined_address(store: &mut SymbolStore, prog: &Path) -> u64 {
    let file = store.load_path(prog, None, None).unwrap();
    let leaf = symbol(prog, "leaf");
    (leaf..leaf + 64).find(|&a| file.lookup(a, a).len() >= 2).expect("inner is inlined somewhere in leaf")
}

fn report(prog: &Path, id: Vec<u8>, frames: Vec<u64>) -> Vec<u8> {
    let r = Report {
        format_version: (1, 1),
        meta: Some(Meta {
            arch: Some("x86_64".into()),
            os: Os { name: Some("Linux".into()), version: Some("6.1.0".into()), build: None },
            ..Meta::default()
        }),
        exception: Some(Exception {
            signal: Some(11),
            si_code: Some(1),
            fault_address: Some(0),
            crashed_thread: Some(0),
            ..Default::default()
        }),
        threads: vec![Thread { index: 0, crashed: true, frames, ..Thread::default() }],
        images: vec![Image {
            index: 0,
            name: "prog".into(),
            // Not a path on this machine: the debug file must be found by build ID.
            path: Some(format!("/nonexistent{}", prog.display())),
            load_address: LOAD,
            size: 0x10000,
            slide: Some(LOAD as i64),
            id: Some(ImageId::BuildId(id)),
            arch: None,
            name_only: false,
        }],
        ..Report::default()
    };
    report_format::owned::to_bytes(&r).unwrap()
}

fn render(bytes: &[u8], store: &mut SymbolStore) -> (String, Vec<String>) {
    let mut loaded = viewer::load(bytes).unwrap();
    let text = viewer::render_loaded(&mut loaded, Layout::Modern, Format::Text, Some(store));
    (text, loaded.log().unwrap().symbol_notes.clone())
}

#[test]
fn elf_with_dwarf_found_by_build_id_with_inlines() {
    let dir = tempfile::tempdir().unwrap();
    let prog = gcc(dir.path(), "prog", SOURCE, &[]);
    let mut probe_store = SymbolStore::only(vec![]);
    let inl = inlined_address(&mut probe_store, &prog);
    let main = symbol(&prog, "main");
    // Frame 0 inside the inlined code; frame 1 a return address one byte into main (looked up at main + 0).
    let bytes = report(&prog, build_id(&prog), vec![LOAD + inl, LOAD + main + 1]);
    let mut store = SymbolStore::only(vec![dir.path().to_path_buf()]);
    let (text, notes) = render(&bytes, &mut store);
    assert!(notes.is_empty(), "{notes:?}");
    let frames: Vec<&str> = text.lines().filter(|l| l.contains("prog  ")).collect();
    assert_eq!(frames.len(), 3, "{text}");
    // SOURCE starts with a newline: `inner`'s return statement is line 3, `leaf`'s call of it line 6.
    assert!(frames[0].contains(" inner + ") && frames[0].contains("(prog.c:3) [inlined]"), "{}", frames[0]);
    // The caller line of an inlined frame is its call site.
    assert!(frames[1].contains(" leaf + ") && frames[1].contains("(prog.c:6)"), "{}", frames[1]);
    assert!(frames[2].starts_with("2   prog") && frames[2].contains(" main + 1 (prog.c:"), "{}", frames[2]);
    assert!(text.contains(&format!("<{}>", build_id(&prog).iter().map(|b| format!("{b:02x}")).collect::<String>())));
}

/// Compressed debug sections (`-gz`, as Debian's `-dbg` packages ship them) give the same frames as plain ones,
/// and the sections no lookup reads (location lists) are not loaded, so not decompressed.
#[test]
fn compressed_debug_sections_give_the_same_frames_and_location_lists_are_left_out() {
    // Variables that live across calls get location lists at -O2.
    let source = format!(
        "{SOURCE}\n__attribute__((noinline)) int sum(int n) {{\n    int s = 0;\n    for (int i = 0; i < n; i++) \
         s += leaf(i) * i;\n    return s;\n}}\n"
    );
    let dir = tempfile::tempdir().unwrap();
    let plain = gcc(dir.path(), "plain", &source, &["-O2", "-gdwarf-5"]);
    let packed = gcc(dir.path(), "packed", &source, &["-O2", "-gdwarf-5", "-gz=zlib"]);
    let data = std::fs::read(&packed).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let loclists = obj.section_by_name(".debug_loclists").expect("-O2 code has location lists");
    assert!(
        matches!(
            object::ObjectSection::compressed_file_range(&loclists).unwrap().format,
            object::CompressionFormat::Zlib
        ),
        "the sections are compressed"
    );
    let mut store = SymbolStore::only(vec![]);
    let (a, b) = (store.load_path(&plain, None, None).unwrap(), store.load_path(&packed, None, None).unwrap());
    let names = b.dwarf_section_names();
    assert!(names.contains(&".debug_info") && names.contains(&".debug_line"), "{names:?}");
    assert!(!names.contains(&".debug_loclists") && !names.contains(&".debug_loc"), "{names:?}");
    let (sum_a, sum_b) = (symbol(&plain, "sum"), symbol(&packed, "sum"));
    let size = obj.symbols().find(|s| s.name() == Ok("sum")).map(|s| s.size()).expect("sum's size");
    assert!(size >= 16, "sum is {size} bytes");
    let key = |f: &[viewer::crashlog::SymbolInfo]| -> Vec<(String, Option<u64>)> {
        f.iter().map(|s| (s.name.clone(), s.line)).collect()
    };
    for k in 0..size {
        let (fa, fb) = (a.lookup(sum_a + k, sum_a + k), b.lookup(sum_b + k, sum_b + k));
        assert_eq!(key(&fa), key(&fb), "sum + {k}");
        assert!(fb.iter().any(|s| s.name == "sum" && s.line.is_some()), "sum + {k}: {fb:?}");
    }
}

#[test]
fn separate_debug_file_in_build_id_layout_and_stripped_symbol_table() {
    let dir = tempfile::tempdir().unwrap();
    let prog = gcc(dir.path(), "prog", SOURCE, &[]);
    let id = build_id(&prog);
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    let main = symbol(&prog, "main");
    let leaf = symbol(&prog, "leaf");

    let debug_root = dir.path().join("debug");
    let sub = debug_root.join(".build-id").join(&hex[..2]);
    std::fs::create_dir_all(&sub).unwrap();
    let debug_file = sub.join(format!("{}.debug", &hex[2..]));
    let st = Command::new("objcopy").arg("--only-keep-debug").arg(&prog).arg(&debug_file).status().unwrap();
    assert!(st.success());
    let bytes = report(&prog, id.clone(), vec![LOAD + leaf, LOAD + main + 1]);
    let mut store = SymbolStore::only(vec![debug_root]);
    let (text, notes) = render(&bytes, &mut store);
    assert!(notes.is_empty(), "{notes:?}");
    assert!(text.contains(" leaf + 0 (prog.c:"), "{text}");

    // No DWARF: the symbol table still names functions (offsets from the symbol, no file:line).
    let nodwarf = dir.path().join("nodwarf");
    std::fs::create_dir_all(&nodwarf).unwrap();
    let st = Command::new("objcopy").arg("--strip-debug").arg(&prog).arg(nodwarf.join("prog")).status().unwrap();
    assert!(st.success());
    let mut store = SymbolStore::only(vec![nodwarf]);
    let (text, _) = render(&bytes, &mut store);
    assert!(text.contains(" leaf + 0\n"), "{text}");
    assert!(text.contains(" main + 1\n"), "{text}");
}

#[test]
fn wrong_build_id_is_refused_with_a_note() {
    let dir = tempfile::tempdir().unwrap();
    let prog = gcc(dir.path(), "prog", SOURCE, &[]);
    let other_dir = dir.path().join("other");
    std::fs::create_dir_all(&other_dir).unwrap();
    let other = gcc(&other_dir, "prog", &format!("{SOURCE}\nint unused_extra(void) {{ return 42; }}\n"), &[]);
    assert_ne!(build_id(&prog), build_id(&other));
    let main = symbol(&prog, "main");
    let bytes = report(&prog, build_id(&prog), vec![LOAD + main]);
    let mut store = SymbolStore::only(vec![other_dir]);
    let (text, notes) = render(&bytes, &mut store);
    assert!(text.contains(&format!("{LOAD:#x} + {main}")), "unsymbolicated: {text}");
    assert!(notes.iter().any(|n| n.contains("prog") && n.contains("not used")), "{notes:?}");
}

#[test]
fn image_found_at_its_own_path_when_it_exists_here() {
    let dir = tempfile::tempdir().unwrap();
    let prog = gcc(dir.path(), "prog", SOURCE, &[]);
    let leaf = symbol(&prog, "leaf");
    let r = Report {
        format_version: (1, 1),
        meta: Some(Meta { os: Os { name: Some("Linux".into()), ..Os::default() }, ..Meta::default() }),
        threads: vec![Thread { index: 0, crashed: true, frames: vec![LOAD + leaf], ..Thread::default() }],
        images: vec![Image {
            index: 0,
            name: "prog".into(),
            path: Some(prog.display().to_string()),
            load_address: LOAD,
            size: 0x10000,
            slide: None,
            id: Some(ImageId::BuildId(build_id(&prog))),
            arch: None,
            name_only: false,
        }],
        ..Report::default()
    };
    let bytes = report_format::owned::to_bytes(&r).unwrap();
    // No search paths at all: the automatic lookup at the image's path finds it (ids match).
    let (text, notes) = render(&bytes, &mut SymbolStore::new(vec![]));
    assert!(notes.is_empty(), "{notes:?}");
    assert!(text.contains(" leaf + 0 (prog.c:5)"), "{text}");
    // `only` disables the automatic lookup.
    let (text, _) = render(&bytes, &mut SymbolStore::only(vec![]));
    assert!(!text.contains(" leaf + 0"), "{text}");

    // A macOS or iOS report's image path names a file of that Mac or phone: the file at the same path on this
    // Linux host is never read, with or without an id (the id-less case would otherwise match by architecture).
    for os in ["macOS", "iPhone OS"] {
        for id in [Some(ImageId::BuildId(build_id(&prog))), None] {
            let mut apple = r.clone();
            apple.meta.as_mut().unwrap().os.name = Some(os.into());
            apple.images[0].id = id.clone();
            let bytes = report_format::owned::to_bytes(&apple).unwrap();
            let (text, notes) = render(&bytes, &mut SymbolStore::new(vec![]));
            assert!(!text.contains(" leaf + 0"), "{os} {id:?}: {text}");
            assert!(notes.is_empty(), "{notes:?}");
            // Given explicitly as a search path, the same file is used (matched by id).
            if id.is_some() {
                let (text, _) = render(&bytes, &mut SymbolStore::new(vec![prog.clone()]));
                assert!(text.contains(" leaf + 0 (prog.c:5)"), "{text}");
            }
        }
    }
}
