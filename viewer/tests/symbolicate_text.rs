//! `viewer symbolicate`: Apple crash text symbolicated in place (crashtext.rs). Oracle: Apple's own translation of
//! each fixture's `.ips` (MacSymbolicator's test data) with the symbols its atos-based tool printed, and our `.ips`
//! path on the same file; every line but the rewritten frames must stay byte for byte.

use proptest::prelude::*;
use std::path::{Path, PathBuf};
use viewer::crashtext::symbolicate_text;
use viewer::symbols::SymbolStore;
use viewer::{Format, Layout};

const FOLDERS: [(&str, &str); 2] =
    [("ios15-swift-assert", "iOSCrashingTest"), ("macos12-single-target", "CrashingTest")];

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/third_party/macsymbolicator").join(rel)
}

fn read(rel: &str) -> Vec<u8> {
    std::fs::read(fixture(rel)).unwrap()
}

fn store(folder: &str) -> SymbolStore {
    SymbolStore::only(vec![fixture(folder)])
}

/// `(address, function)` pairs of the frames the oracle (`expected-symbolicated.crash`) symbolicated.
fn oracle(folder: &str) -> Vec<(String, String)> {
    let sym = String::from_utf8(read(&format!("{folder}/expected-symbolicated.crash"))).unwrap();
    let plain = String::from_utf8(read(&format!("{folder}/apple-translation.crash"))).unwrap();
    sym.lines()
        .zip(plain.lines())
        .filter(|(s, p)| s != p)
        .map(|(s, _)| {
            let rest = s.split('\t').nth(1).unwrap().trim_start();
            let (addr, rest) = rest.split_once(' ').unwrap();
            (addr.to_string(), rest.split_once(" (in ").unwrap().0.to_string())
        })
        .collect()
}

/// The frame lines of `text` at `address`, without their index column.
fn lines_at(text: &str, address: &str) -> Vec<String> {
    text.lines()
        .filter(|l| l.contains(&format!(" {address} ")) && l.starts_with(|c: char| c.is_ascii_digit()))
        .map(|l| l.trim_start_matches(|c: char| c.is_ascii_digit()).to_string())
        .collect()
}

#[test]
fn apple_translations_symbolicate_like_the_oracle_and_keep_every_other_line() {
    for (folder, image) in FOLDERS {
        let input = read(&format!("{folder}/apple-translation.crash"));
        let r = symbolicate_text(&input, &mut store(folder));
        assert!(r.notes.is_empty(), "{:?}", r.notes);
        let expected = oracle(folder);
        assert_eq!((r.unsymbolicated, r.symbolicated), (expected.len(), expected.len()), "{folder}");
        let out = String::from_utf8(r.text).unwrap();
        // Each oracle frame: the out-of-line function (the last line at the address) is the oracle's.
        for (addr, function) in &expected {
            let lines = lines_at(&out, addr);
            let last = lines.last().unwrap_or_else(|| panic!("{folder}: {addr} missing"));
            assert!(last.contains(&format!("{addr} {function} + ")), "{folder}: {last}");
        }
        // Every line of the input that is not a rewritten frame is in the output, in order, unchanged.
        let input = String::from_utf8(input).unwrap();
        let kept_in: Vec<&str> =
            input.lines().filter(|l| !expected.iter().any(|(a, _)| l.contains(&format!("{a} 0x")))).collect();
        let kept_out: Vec<&str> = out
            .lines()
            .filter(|l| !(l.contains(image) && expected.iter().any(|(a, _)| l.contains(&format!(" {a} ")))))
            .collect();
        assert_eq!(kept_in, kept_out, "{folder}");
        // The rewritten lines are exactly what the .ips path prints for the same frames (inlined ones included).
        let mut loaded = viewer::load(&read(&format!("{folder}/report.ips"))).unwrap();
        let rendered = viewer::render_loaded(&mut loaded, Layout::Modern, Format::Text, Some(&mut store(folder)));
        for (addr, _) in &expected {
            assert_eq!(lines_at(&out, addr), lines_at(&rendered, addr), "{folder} {addr}");
        }
    }
}

#[test]
fn xcode_json_header_crlf_and_legacy_image_plus_offset_forms() {
    let folder = "ios15-swift-assert";
    let input = read(&format!("{folder}/apple-translation.crash"));
    let plain = symbolicate_text(&input, &mut store(folder)).text;

    // Xcode's first line is passed through; the rest is symbolicated the same.
    let header = b"{\"app_name\":\"iOSCrashingTest\",\"timestamp\":\"2022-08-04 01:11:01.00 +0900\",\"bug_type\":\"109\",\"os_version\":\"iPhone OS 15.5 (19F77)\"}\n";
    let with_header = [&header[..], &input].concat();
    assert_eq!(symbolicate_text(&with_header, &mut store(folder)).text, [&header[..], &plain].concat());

    // CRLF endings are kept, the inlined lines get them too.
    let crlf = String::from_utf8(input.clone()).unwrap().replace('\n', "\r\n");
    let out = symbolicate_text(crlf.as_bytes(), &mut store(folder)).text;
    assert_eq!(String::from_utf8(out).unwrap(), String::from_utf8(plain.clone()).unwrap().replace('\n', "\r\n"));

    // Legacy `IMAGE + offset` symbol parts, `+`-marked Binary Images line, zero-padded addresses.
    let legacy = String::from_utf8(input.clone()).unwrap().replace("0x1007d4000 + ", "iOSCrashingTest + ").replace(
        "       0x1007d4000 -        0x1007dbfff iOSCrashingTest",
        "0x1007d4000 - 0x1007dbfff +iOSCrashingTest",
    );
    assert!(legacy.contains("+iOSCrashingTest arm64"), "fixture changed?");
    let out = String::from_utf8(symbolicate_text(legacy.as_bytes(), &mut store(folder)).text).unwrap();
    for (addr, function) in oracle(folder) {
        assert!(lines_at(&out, &addr).last().unwrap().contains(&format!(" {function} + ")), "{addr}");
    }
}

#[test]
fn legacy_layout_text_symbolicates_like_the_legacy_rendering() {
    // The macOS fixture has no inlined frames, so the legacy text symbolicated in place equals the legacy
    // rendering of the .ips with the same symbols, byte for byte.
    let folder = "macos12-single-target";
    let mut loaded = viewer::load(&read(&format!("{folder}/report.ips"))).unwrap();
    let unsym = viewer::render_loaded(&mut loaded, Layout::Legacy, Format::Text, None);
    let mut loaded = viewer::load(&read(&format!("{folder}/report.ips"))).unwrap();
    let sym = viewer::render_loaded(&mut loaded, Layout::Legacy, Format::Text, Some(&mut store(folder)));
    assert_ne!(unsym, sym);
    let out = symbolicate_text(unsym.as_bytes(), &mut store(folder));
    assert_eq!(String::from_utf8(out.text).unwrap(), sym);
}

#[test]
fn bad_lines_pass_through_and_never_fail_the_file() {
    let folder = "ios15-swift-assert";
    let input = String::from_utf8(read(&format!("{folder}/apple-translation.crash"))).unwrap();
    let junk = "7   NoSuchImage                   \t       0x900000000 0x900000000 + 12\n\
                8   iOSCrashingTest\t0xZZ 0x1007d4000 + 1\n\
                99999999 x 0x1 0x1 + 1\n";
    let mut bytes = input.replacen("Thread 1:\n", &format!("Thread 1:\n{junk}"), 1).into_bytes();
    bytes.extend_from_slice(b"\xff\xfe not utf-8 0x1007da384 0x1007d4000 + 25476\n");
    let r = symbolicate_text(&bytes, &mut store(folder));
    let out = r.text;
    assert!(String::from_utf8_lossy(&out).contains(junk), "junk lines changed");
    assert!(out.ends_with(b"\xff\xfe not utf-8 0x1007da384 0x1007d4000 + 25476\n"));
    assert_eq!(r.symbolicated, 3);
}

#[test]
fn an_image_with_another_uuid_is_not_used_and_said_so() {
    let folder = "ios15-swift-assert";
    let input = String::from_utf8(read(&format!("{folder}/apple-translation.crash"))).unwrap();
    let other = input.replace("<82d13d98219e3040b62a07a297007a7c>", "<82d13d98219e3040b62a07a297007a7d>");
    assert_ne!(other, input);
    let r = symbolicate_text(other.as_bytes(), &mut store(folder));
    assert_eq!(r.symbolicated, 0);
    assert_eq!(r.text, other.as_bytes());
    assert!(r.notes.iter().any(|n| n.contains("not used")), "{:?}", r.notes);
}

fn fixture_text() -> &'static [u8] {
    static TEXT: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    TEXT.get_or_init(|| read("ios15-swift-assert/apple-translation.crash"))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Without debug files nothing changes, whatever the bytes.
    #[test]
    fn random_bytes_pass_through(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        let r = symbolicate_text(&bytes, &mut SymbolStore::only(vec![]));
        prop_assert_eq!(r.text, bytes);
    }

    /// Cut and bit-flipped crash text with the real dSYM: never panics, and every line that is not a frame of
    /// the app image comes out as it went in.
    #[test]
    fn mangled_crash_text_never_panics(cut in 0usize..20000, flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..12)) {
        let text = fixture_text();
        let mut bytes = text[..cut.min(text.len())].to_vec();
        for (at, v) in flips {
            if !bytes.is_empty() {
                let n = bytes.len();
                bytes[at % n] = v;
            }
        }
        let r = symbolicate_text(&bytes, &mut store("ios15-swift-assert"));
        let out = String::from_utf8_lossy(&r.text).into_owned();
        let input = String::from_utf8_lossy(&bytes).into_owned();
        let rewritten = |l: &&str| l.contains(" + ") && l.starts_with(|c: char| c.is_ascii_digit());
        let a: Vec<&str> = input.lines().filter(|l| !rewritten(l)).collect();
        let b: Vec<&str> = out.lines().filter(|l| !rewritten(l)).collect();
        prop_assert_eq!(a, b);
    }
}
