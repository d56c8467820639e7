//! The `.ips` corpus: real crash reports with Apple's own translation of each (tests/fixtures/third_party/*; each
//! folder's README gives provenance and licence). Every `.ips` is rendered as `viewer render FILE` does (no
//! symbolication) and must equal Apple's text byte for byte. Where Apple's file differs from what any renderer could
//! print from the `.ips` alone, the difference is named per pair in [`Tolerated`], with its reason; nothing else is
//! normalised.

use std::path::{Path, PathBuf};

fn third_party(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/third_party").join(rel)
}

/// Where a pair's two texts live.
enum Files {
    /// A raw `.ips` and a separate file with Apple's translation of it.
    Separate { ips: &'static str, apple: &'static str },
}

/// A difference between Apple's file and anything the `.ips` can give, allowed for one pair.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Tolerated {
    /// Xcode's device-log export (Xcode 14) writes the `.ips` metadata line (one line of JSON) before the text and
    /// leaves off the translation's last newline. That line is a copy of the `.ips` header, not part of the
    /// translation: the comparison starts at the newline that ends it (the translation's own first character) and
    /// adds the one final newline back. (The same repository's copy without the metadata line has exactly that
    /// text.)
    XcodeMetadataLine,
}

struct Pair {
    name: &'static str,
    files: Files,
    tolerated: &'static [Tolerated],
}

const PAIRS: &[Pair] = &[
    Pair {
        name: "macsymbolicator/ios15-swift-assert",
        files: Files::Separate { ips: "report.ips", apple: "apple-translation.crash" },
        tolerated: &[],
    },
    Pair {
        name: "macsymbolicator/macos12-single-target",
        files: Files::Separate { ips: "report.ips", apple: "apple-translation.crash" },
        tolerated: &[],
    },
    Pair {
        name: "macsymbolicator/macos12-multi-target",
        files: Files::Separate { ips: "report.ips", apple: "apple-translation.crash" },
        tolerated: &[],
    },
    Pair {
        name: "macsymbolicator/ios16-swift-assert",
        files: Files::Separate { ips: "report.ips", apple: "apple-translation-with-json-header.crash" },
        tolerated: &[Tolerated::XcodeMetadataLine],
    },
];

fn folder(pair: &Pair) -> PathBuf {
    match pair.files {
        Files::Separate { .. } => third_party(pair.name),
    }
}

/// The `.ips` bytes and Apple's text, after the pair's tolerated differences are applied to Apple's side.
fn load(pair: &Pair) -> (Vec<u8>, String) {
    let dir = folder(pair);
    let (ips, mut apple) = match pair.files {
        Files::Separate { ips, apple } => {
            (std::fs::read(dir.join(ips)).unwrap(), std::fs::read_to_string(dir.join(apple)).unwrap())
        }
    };
    if pair.tolerated.contains(&Tolerated::XcodeMetadataLine) {
        // The translation itself starts with a newline, which ends the metadata line in Xcode's file.
        let at = apple.find('\n').unwrap();
        assert!(apple.starts_with("{\"app_name\""), "{}: first line is not the .ips metadata", pair.name);
        apple = format!("{}\n", &apple[at..]);
    }
    (ips, apple)
}

/// The first difference between two texts, as a readable message, or `None` when they are equal.
fn first_difference(got: &str, expected: &str) -> Option<String> {
    if got == expected {
        return None;
    }
    let (g, e): (Vec<&str>, Vec<&str>) = (got.split('\n').collect(), expected.split('\n').collect());
    for (i, (gl, el)) in g.iter().zip(&e).enumerate() {
        if gl != el {
            return Some(format!("line {}:\n  viewer: {gl:?}\n  apple:  {el:?}", i + 1));
        }
    }
    Some(format!("same first {} lines; viewer has {} lines, apple {}", g.len().min(e.len()), g.len(), e.len()))
}

/// Renders one pair and compares it, applying only that pair's tolerated differences.
fn check(pair: &Pair) -> Option<String> {
    let (ips, apple) = load(pair);
    let got = match viewer::render_bytes(&ips) {
        Ok(t) => t,
        Err(e) => return Some(format!("does not load: {e}")),
    };
    first_difference(&got, &apple)
}

#[test]
fn every_corpus_report_renders_like_apples_translation() {
    let failures: Vec<String> = PAIRS.iter().filter_map(|p| check(p).map(|d| format!("{}: {d}", p.name))).collect();
    assert!(failures.is_empty(), "{} of {} pairs differ:\n{}", failures.len(), PAIRS.len(), failures.join("\n"));
}

#[test]
fn the_corpus_has_what_the_readme_promises() {
    // Each pair's files exist and the split of Console's combined files finds both parts.
    assert!(PAIRS.len() >= 4);
    for p in PAIRS {
        let (ips, apple) = load(p);
        assert!(viewer::load(&ips).is_ok(), "{}", p.name);
        assert!(apple.contains("Binary Images:"), "{}", p.name);
    }
}
