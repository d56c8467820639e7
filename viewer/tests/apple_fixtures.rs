//! Real Apple data (tests/fixtures/third_party/macsymbolicator, GPL-2.0 test data; see its README):
//! byte-exact rendering of each `report.ips` against Apple's own translation, and symbolication against the
//! atos-symbolicated expectation.

use std::path::{Path, PathBuf};
use viewer::symbols::{DebugFile, ImageQuery, SymbolStore};
use viewer::{Format, Layout};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/third_party/macsymbolicator").join(rel)
}

const FOLDERS: [&str; 2] = ["ios15-swift-assert", "macos12-single-target"];

#[test]
fn every_fixture_renders_byte_for_byte_like_apple() {
    for folder in FOLDERS {
        let ips = std::fs::read(fixture(&format!("{folder}/report.ips"))).unwrap();
        let expected = std::fs::read_to_string(fixture(&format!("{folder}/apple-translation.crash"))).unwrap();
        let got = viewer::render_bytes(&ips).unwrap();
        if got != expected {
            for (i, (g, e)) in got.lines().zip(expected.lines()).enumerate() {
                assert_eq!(g, e, "{folder}: first difference at line {}", i + 1);
            }
            assert_eq!(got.len(), expected.len(), "{folder}: same lines, different length (trailing newlines?)");
        }
    }
}

#[test]
fn symbol_store_without_matching_files_keeps_apple_text() {
    // An empty store: nothing found, output unchanged.
    let dir = tempfile::tempdir().unwrap();
    for folder in FOLDERS {
        let ips = std::fs::read(fixture(&format!("{folder}/report.ips"))).unwrap();
        let expected = std::fs::read_to_string(fixture(&format!("{folder}/apple-translation.crash"))).unwrap();
        let mut loaded = viewer::load(&ips).unwrap();
        let mut store = SymbolStore::only(vec![dir.path().to_path_buf()]);
        let got = viewer::render_loaded(&mut loaded, Layout::Modern, Format::Text, Some(&mut store));
        assert_eq!(got, expected);
    }
}

/// One symbolicated frame of an `expected-symbolicated.crash`: address, function, file, line.
#[derive(Debug)]
struct Expected {
    address: u64,
    function: String,
    file: String,
    line: u64,
}

/// Parses the atos-style frames `0xADDR function (in image) (file:line)` that differ from Apple's translation.
fn expected_frames(folder: &str) -> Vec<Expected> {
    let sym = std::fs::read_to_string(fixture(&format!("{folder}/expected-symbolicated.crash"))).unwrap();
    let plain = std::fs::read_to_string(fixture(&format!("{folder}/apple-translation.crash"))).unwrap();
    let mut out = Vec::new();
    for (s, p) in sym.lines().zip(plain.lines()) {
        if s == p {
            continue;
        }
        let rest = s.split('\t').nth(1).unwrap().trim_start();
        let (addr, rest) = rest.split_once(' ').unwrap();
        let (function, rest) = rest.split_once(" (in ").unwrap();
        let loc = rest.rsplit_once(" (").unwrap().1.trim_end_matches(')');
        let (file, line) = loc.rsplit_once(':').unwrap();
        out.push(Expected {
            address: u64::from_str_radix(addr.trim_start_matches("0x"), 16).unwrap(),
            function: function.to_string(),
            file: file.to_string(),
            line: line.parse().unwrap(),
        });
    }
    out
}

fn dsym_dwarf(folder: &str, name: &str) -> PathBuf {
    fixture(&format!("{folder}/{name}.dSYM/Contents/Resources/DWARF/{name}"))
}

#[test]
fn ios_frames_resolve_like_atos_at_the_exact_address() {
    let expected = expected_frames("ios15-swift-assert");
    assert_eq!(expected.len(), 3, "{expected:?}");
    let mut store = SymbolStore::only(vec![]);
    let uuid = report_format::model::ImageId::Uuid([
        0x82, 0xd1, 0x3d, 0x98, 0x21, 0x9e, 0x30, 0x40, 0xb6, 0x2a, 0x07, 0xa2, 0x97, 0x00, 0x7a, 0x7c,
    ]);
    let file = store
        .load_path(
            &dsym_dwarf("ios15-swift-assert", "iOSCrashingTest.app").with_file_name("iOSCrashingTest"),
            Some(&uuid),
            None,
        )
        .expect("dSYM loads");
    check_atos(&file, 0x1007d4000, &expected);
    // The example: image offset +25476 -> main, AppDelegate.swift:9.
    let r = viewer::atos(&file, 0x1007d4000, &[0x1007d4000 + 25476]);
    assert_eq!(viewer::format_atos(&r[0]), "main + 64 (AppDelegate.swift:9)\n");
}

#[test]
fn macos_frames_resolve_like_atos_from_the_universal_dsym() {
    let expected = expected_frames("macos12-single-target");
    assert_eq!(expected.len(), 2, "{expected:?}");
    let mut store = SymbolStore::only(vec![]);
    // Universal dSYM: the slice is chosen by the x86_64 UUID.
    let uuid = report_format::model::ImageId::Uuid([
        0x01, 0xd2, 0xa9, 0xd5, 0x1f, 0x8a, 0x35, 0xc8, 0x92, 0x28, 0x7c, 0x7c, 0xca, 0x13, 0xc5, 0xfc,
    ]);
    let file = store.load_path(&dsym_dwarf("macos12-single-target", "CrashingTest"), Some(&uuid), None).unwrap();
    assert_eq!(file.identity.arch, "x86_64");
    check_atos(&file, 0x10e30e000, &expected);
}

fn check_atos(file: &DebugFile, load: u64, expected: &[Expected]) {
    let addrs: Vec<u64> = expected.iter().map(|e| e.address).collect();
    for (r, e) in viewer::atos(file, load, &addrs).iter().zip(expected) {
        // atos (without -i) names the out-of-line function and gives the innermost line.
        let outer = r.frames.last().unwrap_or_else(|| panic!("{:#x} unresolved", e.address));
        let inner = r.frames.first().unwrap();
        assert_eq!(outer.name, e.function, "{:#x}", e.address);
        let file_name = inner.file.as_deref().unwrap().rsplit('/').next().unwrap();
        assert_eq!((file_name, inner.line.unwrap()), (e.file.as_str(), e.line), "{:#x}", e.address);
    }
}

#[test]
fn rendered_reports_name_the_same_functions_with_symbols_found_by_uuid() {
    for (folder, image) in [("ios15-swift-assert", "iOSCrashingTest"), ("macos12-single-target", "CrashingTest")] {
        let expected = expected_frames(folder);
        let ips = std::fs::read(fixture(&format!("{folder}/report.ips"))).unwrap();
        let mut loaded = viewer::load(&ips).unwrap();
        // The whole folder is searched; the debug files are found by UUID.
        let mut store = SymbolStore::only(vec![fixture(folder)]);
        let text = viewer::render_loaded(&mut loaded, Layout::Modern, Format::Text, Some(&mut store));
        let log = loaded.log().unwrap();
        assert!(log.symbol_notes.is_empty(), "{:?}", log.symbol_notes);
        for e in &expected {
            let frames: Vec<_> =
                log.threads.iter().flat_map(|t| &t.frames).filter(|f| f.address == e.address && !f.inlined).collect();
            assert!(!frames.is_empty(), "{folder}: {:#x} missing", e.address);
            for f in frames {
                let sym = f.symbol.as_ref().unwrap_or_else(|| panic!("{folder}: {:#x} not symbolicated", e.address));
                assert_eq!(sym.name, e.function, "{folder}: {:#x}", e.address);
            }
        }
        // Apple's layout for a symbolicated frame: `symbol + offset (file:line)`, address printed raw.
        let line = text.lines().find(|l| l.contains(image) && l.contains(" main + ")).unwrap();
        assert!(line.contains(&format!("{:#18x} main + ", expected.last().unwrap().address)), "{line}");
        // Lines other than the app's frames are untouched.
        let plain = std::fs::read_to_string(fixture(&format!("{folder}/apple-translation.crash"))).unwrap();
        let plain_binary_images = plain.split("Binary Images:").nth(1).unwrap();
        assert_eq!(text.split("Binary Images:").nth(1).unwrap(), plain_binary_images);
    }
}

#[test]
fn caller_frames_are_looked_up_at_address_minus_one() {
    // Frame 2 of thread 0 (0x1007da4bc) is a return address: at the exact address the line is
    // <compiler-generated>:0 (atos), at address - 1 (the call) it is AppDelegate.swift:24.
    let folder = "ios15-swift-assert";
    let ips = std::fs::read(fixture(&format!("{folder}/report.ips"))).unwrap();
    let mut loaded = viewer::load(&ips).unwrap();
    let mut store = SymbolStore::only(vec![fixture(folder)]);
    let text = viewer::render_loaded(&mut loaded, Layout::Modern, Format::Text, Some(&mut store));
    let line = text.lines().find(|l| l.contains("0x1007da4bc")).unwrap();
    assert_eq!(
        line,
        "2   iOSCrashingTest               \t       0x1007da4bc specialized static CrashClass.pleaseCrash() + 200 (AppDelegate.swift:24)"
    );
    // Inlined functions at 0x1007da1cc: one line each, innermost first, then the out-of-line function.
    let lines: Vec<&str> = text.lines().filter(|l| l.contains("0x1007da1cc")).collect();
    assert_eq!(lines.len(), 3, "{lines:#?}");
    assert!(lines[0].ends_with("[inlined]") && lines[1].ends_with("[inlined]") && !lines[2].ends_with("[inlined]"));
    assert!(lines[2].contains("@objc ViewController.viewDidLoad() + 64"), "{}", lines[2]);
}

#[test]
fn a_debug_file_with_the_wrong_uuid_is_not_used_and_the_viewer_says_so() {
    // The iOS report's app image wants 82d13d98…; offer only the macOS CrashingTest files renamed as the app.
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(fixture("macos12-single-target/CrashingTest"), dir.path().join("iOSCrashingTest")).unwrap();
    let ips = std::fs::read(fixture("ios15-swift-assert/report.ips")).unwrap();
    let mut loaded = viewer::load(&ips).unwrap();
    let mut store = SymbolStore::only(vec![dir.path().to_path_buf()]);
    let text = viewer::render_loaded(&mut loaded, Layout::Modern, Format::Text, Some(&mut store));
    let expected = std::fs::read_to_string(fixture("ios15-swift-assert/apple-translation.crash")).unwrap();
    assert_eq!(text, expected, "a mismatched file must not symbolicate anything");
    let notes = &loaded.log().unwrap().symbol_notes;
    assert!(
        notes.iter().any(|n| n.contains("iOSCrashingTest")
            && n.contains("82d13d98219e3040b62a07a297007a7c")
            && n.contains("not used")),
        "{notes:?}"
    );
}

#[test]
fn store_finds_thin_macho_by_uuid_and_universal_by_uuid_then_arch() {
    let mut store = SymbolStore::only(vec![fixture("")]);
    let ios = report_format::model::ImageId::Uuid([
        0x82, 0xd1, 0x3d, 0x98, 0x21, 0x9e, 0x30, 0x40, 0xb6, 0x2a, 0x07, 0xa2, 0x97, 0x00, 0x7a, 0x7c,
    ]);
    let f =
        store.find(&ImageQuery { id: Some(ios), name: Some("iOSCrashingTest".into()), ..Default::default() }).unwrap();
    assert!(f.has_dwarf(), "the dSYM (with DWARF) is preferred over the stripped executable: {:?}", f.identity);
    let arm = report_format::model::ImageId::Uuid([
        0x56, 0x2d, 0xb6, 0xc8, 0x8d, 0x3c, 0x3b, 0x67, 0x95, 0x11, 0xf3, 0xc1, 0x08, 0xbd, 0xea, 0xb2,
    ]);
    let f = store.find(&ImageQuery { id: Some(arm), ..Default::default() }).unwrap();
    assert_eq!(f.identity.arch, "arm64");
    assert!(f.identity.object.slice.is_some(), "a slice of a universal file");
    // By architecture when the id is not given.
    let f = store.load_path(&fixture("macos12-single-target/CrashingTest"), None, Some("x86_64")).unwrap();
    assert_eq!(f.identity.arch, "x86_64");
}

/// Every key path of a JSON value with its JSON type (`threads[].frames[].imageOffset: number`), array elements
/// merged.
fn key_types(v: &serde_json::Value, path: &str, out: &mut std::collections::BTreeMap<String, &'static str>) {
    use serde_json::Value;
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                let p = if path.is_empty() { k.clone() } else { format!("{path}.{k}") };
                let t = match x {
                    Value::Null => "null",
                    Value::Bool(_) => "bool",
                    Value::Number(_) => "number",
                    Value::String(_) => "string",
                    Value::Array(_) => "array",
                    Value::Object(_) => "object",
                };
                out.insert(p.clone(), t);
                key_types(x, &p, out);
            }
        }
        Value::Array(items) => {
            for x in items {
                key_types(x, &format!("{path}[]"), out);
            }
        }
        _ => {}
    }
}

fn ips_parts(text: &str) -> (serde_json::Value, serde_json::Value) {
    let (meta, body) = text.split_once('\n').unwrap();
    (serde_json::from_str(meta).unwrap(), serde_json::from_str(body).unwrap())
}

#[test]
fn ips_written_back_renders_like_apple_and_has_apples_keys_and_types() {
    const FOLDERS: [&str; 2] = ["ios15-swift-assert", "macos12-single-target"];
    // Apple's key set: every key path (and its type) of the real .ips files, metadata line and body apart.
    let (mut apple_meta, mut apple_body) = (Default::default(), Default::default());
    for folder in FOLDERS {
        let original = std::fs::read_to_string(fixture(&format!("{folder}/report.ips"))).unwrap();
        let (m, b) = ips_parts(&original);
        key_types(&m, "", &mut apple_meta);
        key_types(&b, "", &mut apple_body);
    }
    for folder in FOLDERS {
        let original = std::fs::read_to_string(fixture(&format!("{folder}/report.ips"))).unwrap();
        let mut loaded = viewer::load(original.as_bytes()).unwrap();
        let ours = viewer::render_loaded(&mut loaded, Layout::Modern, Format::Ips, None);
        // Round trip: our .ips of Apple's report, read back by our .ips path, prints Apple's translation.
        let expected = std::fs::read_to_string(fixture(&format!("{folder}/apple-translation.crash"))).unwrap();
        let mut again = viewer::load(ours.as_bytes()).unwrap();
        assert_eq!(viewer::render_loaded(&mut again, Layout::Modern, Format::Text, None), expected, "{folder}");
        // Every key we write is one Apple writes, with the same JSON type; the keys readers need are there.
        let (our_meta, our_body) = ips_parts(&ours);
        let this_apple = ips_parts(&original);
        for (apple, our, this) in [(&apple_meta, our_meta, this_apple.0), (&apple_body, our_body, this_apple.1)] {
            let (mut o, mut t) = (Default::default(), Default::default());
            key_types(&our, "", &mut o);
            key_types(&this, "", &mut t);
            for (k, ty) in &o {
                assert_eq!(apple.get(k), Some(ty), "{folder}: our key {k} ({ty}) is not Apple's");
            }
            for k in t.keys() {
                // Data our model does not hold (see ips_write.rs): shared cache, trial and store info, absolute
                // times, deployment version, termination flags, extMods warnings, symbols of register values.
                let gap = [
                    "sharedCache",
                    "trialInfo",
                    "storeInfo",
                    "procStartAbsTime",
                    "procExitAbsTime",
                    "deployVersion",
                    "termination.flags",
                    "extMods.warnings",
                ]
                .iter()
                .any(|g| k == g || k.starts_with(&format!("{g}.")))
                    || (k.starts_with("threads[].threadState.")
                        && [".symbol", ".symbolLocation", ".matchesCrashFrame"].iter().any(|s| k.ends_with(s)));
                assert!(gap || o.contains_key(k), "{folder}: Apple's key {k} is not written");
            }
        }
    }
}

#[test]
fn symbolicated_ips_output_keeps_symbols_lines_and_inlined_frames() {
    let folder = "ios15-swift-assert";
    let ips = std::fs::read(fixture(&format!("{folder}/report.ips"))).unwrap();
    let mut loaded = viewer::load(&ips).unwrap();
    let mut store = SymbolStore::only(vec![fixture(folder)]);
    let text = viewer::render_loaded(&mut loaded, Layout::Modern, Format::Text, Some(&mut store));
    let ours = viewer::render_loaded(&mut loaded, Layout::Modern, Format::Ips, None);
    assert!(ours.contains("\"inline\": true"), "inlined frames are marked");
    assert!(ours.contains("\"sourceFile\": \"AppDelegate.swift\""), "source files are kept");
    let mut again = viewer::load(ours.as_bytes()).unwrap();
    assert_eq!(viewer::render_loaded(&mut again, Layout::Modern, Format::Text, None), text);
}
