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
    /// One file as Console saves it on macOS 12+: a `Translated Report (Full Report Below)` banner, Apple's
    /// translation, then `Full Report` and the `.ips` it was made from.
    FullReport(&'static str),
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
    /// The file was committed from an editor that strips trailing spaces (no line of it ends with a space, also
    /// where Apple's text has one and the `.ips` strings still hold them). Lines are compared without trailing
    /// spaces on both sides; everything else stays exact.
    TrailingSpacesStripped,
    /// LLVM's lldb test input (`multithread-test.crash`, kept with its `.ips` for lldb's crashlog tests) starts at
    /// `Process:`: the empty first line that Apple's translation has (every other pair, and Console's own files)
    /// is not in the file. The comparison adds that one newline back in front. LLVM's other hand edits were made to
    /// both files alike and need nothing here: the `bogus.dylib` image and the placeholder image (base 0, size 0)
    /// added to `usedImages` and to Binary Images, and the user's folder replaced by `/Users/USER/*/` in both.
    LldbTestEdits,
    /// SYM's expected converter output (an iOS 15 TCC crash): the three frames of the app's own image (`Demo`,
    /// not symbolicated) are laid out with a 27-column name and a 22-column address, where every other frame line
    /// of every pair has Apple's `%-30s\t%#18llx`: rewritten by some later pass (see the pair's README). Those
    /// lines, and only those, are given Apple's layout back before comparing; nothing but their spaces changes.
    AppFramesRelaidOut,
}

struct Pair {
    name: &'static str,
    files: Files,
    tolerated: &'static [Tolerated],
}

const BANNER: &str = "-------------------------------------\nTranslated Report (Full Report Below)\n-------------------------------------\n";
const FULL: &str = "-----------\nFull Report\n-----------\n\n";

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
    pitchenga("macos26-sigsegv-thread0-e4e83ee"),
    pitchenga("macos26-sigsegv-thread9-af1ab22"),
    pitchenga("macos26-sigsegv-thread6-d2f2514"),
    pitchenga("macos26-sigtrap-thread0-12e4228"),
    pitchenga("macos26-sigsegv-thread0-6dce115"),
    pitchenga("macos26-sigsegv-thread0-9f98011"),
    pitchenga("macos26-sigsegv-thread0-50b1dca"),
    pitchenga("macos26-sigsegv-thread0-8391929"),
    pitchenga("macos26-sigsegv-thread0-2f82d36"),
    pitchenga("macos26-sigsegv-thread0-548f697"),
    Pair {
        name: "smart-inbox-janitor/macos15-sigabrt-7aae72b",
        files: Files::FullReport("3-failed-ui-start.pl"),
        tolerated: &[],
    },
    Pair { name: "redlemon/macos12-sigill-5425aa8", files: Files::FullReport("crashreport.md"), tolerated: &[] },
    Pair {
        name: "redlemon/macos12-sigsegv-thread14-b9d137c",
        files: Files::FullReport("crashreport.md"),
        tolerated: &[Tolerated::TrailingSpacesStripped],
    },
    Pair { name: "redlemon/macos12-sigill-assert-8f72725", files: Files::FullReport("crashreport.md"), tolerated: &[] },
    Pair { name: "redlemon/macos12-sigsegv-gap-ac71470", files: Files::FullReport("crashreport.md"), tolerated: &[] },
    Pair { name: "redlemon/macos12-sigill-array-5aa4f1c", files: Files::FullReport("crashreport.md"), tolerated: &[] },
    Pair {
        name: "redlemon/macos12-sigabrt-thread18-0ab0ea5",
        files: Files::FullReport("crashreport.md"),
        tolerated: &[],
    },
    Pair {
        name: "keneth-frequency/macos26-sigabrt-leb-fcb1ce3",
        files: Files::FullReport("debugging_19_4_01.md"),
        tolerated: &[],
    },
    Pair {
        name: "image-optimizer/macos14-dyld-libvips-4cd6bce",
        files: Files::FullReport("upstream-README.md"),
        tolerated: &[],
    },
    Pair {
        name: "image-optimizer/macos14-dyld-libraw-f9f070e",
        files: Files::FullReport("upstream-README.md"),
        tolerated: &[],
    },
    Pair {
        name: "llvm/macos13-sigsegv-thread2-45d17e2",
        files: Files::Separate { ips: "multithread-test.ips", apple: "multithread-test.crash" },
        tolerated: &[Tolerated::LldbTestEdits],
    },
    Pair { name: "nabu/macos15-sigabrt-2ef299c", files: Files::FullReport("error-msg.md"), tolerated: &[] },
    Pair {
        name: "sym/ios15-tcc-sigabrt-4904a8a",
        files: Files::Separate { ips: "AppleJson.ips", apple: "AppleConverted.log" },
        tolerated: &[Tolerated::AppFramesRelaidOut],
    },
    Pair { name: "redlemon/macos12-sigabrt-objc-4fac150", files: Files::FullReport("crashreport.md"), tolerated: &[] },
];

const fn pitchenga(folder: &'static str) -> Pair {
    // `name` is only the folder; `folder` prefixes `pitchenga/`.
    Pair { name: folder, files: Files::FullReport("crash.txt"), tolerated: &[Tolerated::TrailingSpacesStripped] }
}

fn folder(pair: &Pair) -> PathBuf {
    match pair.files {
        Files::FullReport("crash.txt") if pair.name.starts_with("macos26-") => third_party("pitchenga").join(pair.name),
        _ => third_party(pair.name),
    }
}

/// The `.ips` bytes and Apple's text, after the pair's tolerated differences are applied to Apple's side.
fn load(pair: &Pair) -> (Vec<u8>, String) {
    let dir = folder(pair);
    let (ips, mut apple) = match pair.files {
        Files::Separate { ips, apple } => {
            (std::fs::read(dir.join(ips)).unwrap(), std::fs::read_to_string(dir.join(apple)).unwrap())
        }
        Files::FullReport(file) => {
            let all = std::fs::read_to_string(dir.join(file)).unwrap();
            // Some files start with the developer's own console lines pasted above Console's banner; they are not
            // part of the report and are skipped with it.
            let (_, rest) =
                all.split_once(BANNER).unwrap_or_else(|| panic!("{}: no Translated Report banner", pair.name));
            let (text, ips) = rest.split_once(FULL).unwrap_or_else(|| panic!("{}: no Full Report part", pair.name));
            // The rest is the `.ips` as macOS stored it (JSON body, then a text system profile) and Console's final
            // newline.
            (ips.as_bytes().to_vec(), text.to_string())
        }
    };
    if pair.tolerated.contains(&Tolerated::TrailingSpacesStripped) {
        // The reason must hold: not one line of Apple's side ends with a space.
        assert!(
            !apple.split('\n').any(|l| l.ends_with(' ')),
            "{}: has trailing spaces; tolerance not needed",
            pair.name
        );
    }
    if pair.tolerated.contains(&Tolerated::LldbTestEdits) {
        // The reason must hold: the file starts with the first header line, not with Apple's empty line.
        assert!(apple.starts_with("Process:"), "{}: starts with an empty line; tolerance not needed", pair.name);
        apple.insert(0, '\n');
    }
    if pair.tolerated.contains(&Tolerated::XcodeMetadataLine) {
        // The translation itself starts with a newline, which ends the metadata line in Xcode's file.
        let at = apple.find('\n').unwrap();
        assert!(apple.starts_with("{\"app_name\""), "{}: first line is not the .ips metadata", pair.name);
        apple = format!("{}\n", &apple[at..]);
    }
    if pair.tolerated.contains(&Tolerated::AppFramesRelaidOut) {
        let before = apple.clone();
        apple = relay_app_frames(&apple, "Demo");
        // The reason must hold: exactly the three app frames were laid out otherwise, and only their spaces move.
        let changed: Vec<(&str, &str)> = before.split('\n').zip(apple.split('\n')).filter(|(a, b)| a != b).collect();
        assert_eq!(changed.len(), 3, "{}: {changed:?}", pair.name);
        for (a, b) in changed {
            assert_eq!(a.replace(' ', ""), b.replace(' ', ""), "{}", pair.name);
        }
    }
    (ips, apple)
}

/// Frame lines of image `name` laid out as `%-4d%-27s\t%#22llx ...` given Apple's `%-4d%-30s\t%#18llx ...`; other
/// lines unchanged.
fn relay_app_frames(text: &str, name: &str) -> String {
    let relaid = |line: &str| -> Option<String> {
        let (index, rest) = line.split_at_checked(4)?;
        let (image, rest) = rest.split_once('\t')?;
        if !index.trim_end().chars().all(|c| c.is_ascii_digit()) || image.trim_end() != name || image.len() != 27 {
            return None;
        }
        let (address, tail) = rest.trim_start().split_once(' ')?;
        (rest.len() - rest.trim_start().len() + address.len() == 22)
            .then(|| format!("{index}{:<30}\t{address:>18} {tail}", image.trim_end()))
    };
    text.split('\n').map(|l| relaid(l).unwrap_or_else(|| l.to_string())).collect::<Vec<_>>().join("\n")
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

fn without_trailing_spaces(s: &str) -> String {
    s.split('\n').map(str::trim_end).collect::<Vec<_>>().join("\n")
}

/// Renders one pair and compares it, applying only that pair's tolerated differences.
fn check(pair: &Pair) -> Option<String> {
    let (ips, apple) = load(pair);
    let got = match viewer::render_bytes(&ips) {
        Ok(t) => t,
        Err(e) => return Some(format!("does not load: {e}")),
    };
    if pair.tolerated.contains(&Tolerated::TrailingSpacesStripped) {
        first_difference(&without_trailing_spaces(&got), &apple)
    } else {
        first_difference(&got, &apple)
    }
}

#[test]
fn every_corpus_report_renders_like_apples_translation() {
    let failures: Vec<String> = PAIRS.iter().filter_map(|p| check(p).map(|d| format!("{}: {d}", p.name))).collect();
    assert!(failures.is_empty(), "{} of {} pairs differ:\n{}", failures.len(), PAIRS.len(), failures.join("\n"));
}

#[test]
fn the_corpus_has_what_the_readme_promises() {
    // Each pair's files exist and the split of Console's combined files finds both parts.
    assert!(PAIRS.len() >= 28);
    for p in PAIRS {
        let (ips, apple) = load(p);
        assert!(viewer::load(&ips).is_ok(), "{}", p.name);
        assert!(apple.contains("Binary Images:"), "{}", p.name);
    }
}

#[test]
fn trailing_space_tolerance_only_touches_line_ends() {
    // The one normalisation that touches Apple's side must not hide any other difference.
    assert_eq!(without_trailing_spaces("a  \n b \n\n--->  \n"), "a\n b\n\n--->\n");
    assert!(first_difference(&without_trailing_spaces("x 1\n"), "x  1\n").is_some());
    assert!(first_difference("a\n", "a\n\n").is_some());
}

#[test]
fn macos_12_to_15_print_sleep_wake_and_time_since_wake_when_the_ips_has_them() {
    // The layout with `sleepWakeUUID`/`wakeTime` (pairs `llvm/macos13-*`, `nabu/macos15-*` and two RedLemon macOS
    // 12.7.6 pairs): the UUID between two empty lines after `Anonymous UUID:`, and `Time Since Wake:` right under
    // `Time Awake Since Boot:`. Checked here on an edited copy of a report without them.
    let ips = std::fs::read_to_string(third_party("macsymbolicator/macos12-single-target/report.ips")).unwrap();
    let ips = ips.replacen(
        "\"uptime\" :",
        "\"sleepWakeUUID\" : \"7B2A0D73-8966-4B8D-98E9-CC6EC1B44967\",\n  \"wakeTime\" : 214,\n  \"uptime\" :",
        1,
    );
    let text = viewer::render_bytes(ips.as_bytes()).unwrap();
    let plain =
        viewer::render_bytes(&std::fs::read(third_party("macsymbolicator/macos12-single-target/report.ips")).unwrap())
            .unwrap();
    let uuid = plain.lines().find(|l| l.starts_with("Anonymous UUID:")).unwrap();
    let awake = plain.lines().find(|l| l.starts_with("Time Awake Since Boot:")).unwrap();
    let expected = format!(
        "{uuid}\n\nSleep/Wake UUID:       7B2A0D73-8966-4B8D-98E9-CC6EC1B44967\n\n{awake}\nTime Since Wake:       214 seconds\n\n"
    );
    assert!(text.contains(&expected), "{text}");
    // Without them, the block is unchanged (two empty lines, as in Apple's macOS 12 translations).
    assert!(plain.contains(&format!("{uuid}\n\n\n{awake}\n\n")), "{plain}");
}

/// Renders `macsymbolicator/macos12-single-target/report.ips` with `edit` applied to its JSON body.
fn render_single_target_with(edit: impl Fn(&str) -> String) -> String {
    let ips = std::fs::read_to_string(third_party("macsymbolicator/macos12-single-target/report.ips")).unwrap();
    viewer::render_bytes(edit(&ips).as_bytes()).unwrap()
}

#[test]
fn macos_12_to_15_app_store_and_bridge_os_lines() {
    // Apple's macOS 14-15 translations of App Store apps and of Intel Macs with a T2 (Console reports seen in public
    // repositories without a licence, so not in the corpus) print `App Item ID:`/`App External ID:` under `Version:`
    // (from `storeInfo`) and `Bridge OS Version: <train> (<build>)` under `Report Version:` (from `bridgeVersion`).
    let text = render_single_target_with(|ips| {
        ips.replacen(
            "\"uptime\" :",
            "\"storeInfo\" : {\"itemID\":\"1488888843\",\"softwareVersionExternalIdentifier\":\"867475105\"},\n  \
             \"bridgeVersion\" : {\"build\":\"23P1072\",\"train\":\"10.1\"},\n  \"uptime\" :",
            1,
        )
    });
    let lines: Vec<&str> = text.lines().collect();
    let at = |prefix: &str| lines.iter().position(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("{prefix}"));
    assert_eq!(lines[at("Version:") + 1], "App Item ID:           1488888843");
    assert_eq!(lines[at("Version:") + 2], "App External ID:       867475105");
    assert!(lines[at("Version:") + 3].starts_with("Code Type:"));
    assert_eq!(lines[at("Report Version:") + 1], "Bridge OS Version:     10.1 (23P1072)");
    assert!(lines[at("Report Version:") + 2].starts_with("Anonymous UUID:"));
}

#[test]
fn macos_12_to_15_crashed_thread_names_the_thread_with_two_spaces() {
    // Apple (macOS 15.6/15.7 Console reports, as above): `Crashed Thread:        0  CrBrowserMain  Dispatch queue:
    // com.apple.main-thread`, while the thread's own header keeps single spaces.
    let text = render_single_target_with(|ips| {
        ips.replacen(
            "\"queue\":\"com.apple.main-thread\"",
            "\"name\":\"CrBrowserMain\",\"queue\":\"com.apple.main-thread\"",
            1,
        )
    });
    assert!(
        text.contains("Crashed Thread:        0  CrBrowserMain  Dispatch queue: com.apple.main-thread\n"),
        "{text}"
    );
    assert!(text.contains("Thread 0 Crashed:: CrBrowserMain Dispatch queue: com.apple.main-thread\n"), "{text}");
}

#[test]
fn macos_x86_64_without_an_instruction_stream_has_two_empty_lines_before_binary_images() {
    // Apple's macOS 13.6 Console translation of an x86_64 crash without an instruction stream (a public repository
    // without a licence, so not in the corpus) has two empty lines between `Trap Number:` and `Binary Images:`;
    // the macOS 12.4 pair, which has a stream, one after the stream.
    let with_stream = render_single_target_with(|ips| ips.to_string());
    assert!(with_stream.contains("Trap Number:     14\n\nThread 0 instruction stream:\n"), "{with_stream}");
    let text = render_single_target_with(|ips| ips.replacen("\"instructionStream\"", "\"instructionStreamGone\"", 1));
    assert!(!text.contains("instruction stream:"), "{text}");
    assert!(text.contains("Trap Number:     14\n\n\nBinary Images:\n"), "{text}");
}

/// The `.ips` and Apple's text of the RedLemon uncaught-exception pair (macOS 12.7.6): its `.ips` holds both
/// `asiBacktraces` and `lastExceptionBacktrace`.
fn objc_exception_pair() -> (String, String) {
    let pair = PAIRS.iter().find(|p| p.name == "redlemon/macos12-sigabrt-objc-4fac150").unwrap();
    let (ips, apple) = load(pair);
    (String::from_utf8(ips).unwrap(), apple)
}

#[test]
fn application_specific_backtraces_replace_the_last_exception_backtrace() {
    let (ips, apple) = objc_exception_pair();
    assert!(ips.contains("\"asiBacktraces\"") && ips.contains("\"lastExceptionBacktrace\""));
    // Apple: the backtrace text right after Application Specific Information, two empty lines after each, and no
    // `Last Exception Backtrace:` although the `.ips` has one.
    assert!(apple.contains("abort() called\n\n\nApplication Specific Backtrace 0:\n0   CoreFoundation "), "{apple}");
    assert!(apple.contains("_ZL23completeTaskWithClosurePN5swift12AsyncContextEPNS_10SwiftErrorE + 1\n\n\nThread 0::"));
    assert!(!apple.contains("Last Exception Backtrace"));
    let text = viewer::render_bytes(ips.as_bytes()).unwrap();
    assert_eq!(first_difference(&text, &apple), None);
    // Without `asiBacktraces` the throw-site frames come back as `Last Exception Backtrace:`.
    let without = ips.replacen("\"asiBacktraces\"", "\"asiBacktracesGone\"", 1);
    let text = viewer::render_bytes(without.as_bytes()).unwrap();
    assert!(!text.contains("Application Specific Backtrace"), "{text}");
    assert!(text.contains("\n\n\nLast Exception Backtrace:\n0   CoreFoundation "), "{text}");
    // Several backtraces: one titled block each, numbered from 0 in `.ips` order.
    let two = ips.replacen("\"asiBacktraces\" : [", "\"asiBacktraces\" : [\"0   second  0x1 f + 1\",", 1);
    let text = viewer::render_bytes(two.as_bytes()).unwrap();
    assert!(
        text.contains(
            "Application Specific Backtrace 0:\n0   second  0x1 f + 1\n\n\nApplication Specific Backtrace 1:\n0   CoreFoundation "
        ),
        "{text}"
    );
}

#[test]
fn ips_written_back_renders_like_apple_for_every_pair() {
    // `--format ips` of each pair's `.ips`, read back, prints what the original prints (Apple's text, as above).
    let mut failures = Vec::new();
    for p in PAIRS {
        let (ips, _) = load(p);
        let original = viewer::render_bytes(&ips).unwrap();
        let mut loaded = viewer::load(&ips).unwrap();
        let ours = viewer::render_loaded(&mut loaded, viewer::Layout::Modern, viewer::Format::Ips, None);
        let mut again = viewer::load(ours.as_bytes()).unwrap();
        let text = viewer::render_loaded(&mut again, viewer::Layout::Modern, viewer::Format::Text, None);
        if let Some(d) = first_difference(&text, &original) {
            failures.push(format!("{}: {d}", p.name));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    // The uncaught-exception pair keeps its one `asiBacktraces` entry.
    let (ips, _) = objc_exception_pair();
    let mut loaded = viewer::load(ips.as_bytes()).unwrap();
    let ours = viewer::render_loaded(&mut loaded, viewer::Layout::Modern, viewer::Format::Ips, None);
    let body: serde_json::Value = serde_json::from_str(ours.split_once('\n').unwrap().1).unwrap();
    assert_eq!(body["asiBacktraces"].as_array().map(Vec::len), Some(1));
}

#[test]
fn app_frame_relayout_only_moves_spaces_of_that_image() {
    let odd = "42  Demo                       \t           0x100f4c4b4 0x100e88000 + 804020";
    let apple = "42  Demo                          \t       0x100f4c4b4 0x100e88000 + 804020";
    assert_eq!(relay_app_frames(odd, "Demo"), apple);
    // Apple's own layout, another image, or another width: unchanged.
    assert_eq!(relay_app_frames(apple, "Demo"), apple);
    assert_eq!(relay_app_frames(odd, "Other"), odd);
    let wider = "42  Demo                       \t            0x100f4c4b4 0x100e88000 + 804020";
    assert_eq!(relay_app_frames(wider, "Demo"), wider);
}

#[test]
fn ios_app_store_builds_print_the_app_store_tools_build_under_version() {
    // Apple's iOS 18.5 and 26.3 Console translations of App Store apps (repositories without a licence, so not in
    // the corpus; four such pairs render byte for byte) print `AppStoreTools:` under `Version:`, from the `.ips`
    // `bundleInfo.DTAppStoreToolsBuild`.
    let ips = std::fs::read_to_string(third_party("macsymbolicator/ios15-swift-assert/report.ips")).unwrap();
    let edited =
        ips.replacen("\"CFBundleVersion\":\"1\",", "\"CFBundleVersion\":\"1\",\"DTAppStoreToolsBuild\":\"16F3\",", 1);
    assert_ne!(edited, ips);
    let text = viewer::render_bytes(edited.as_bytes()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let at = lines.iter().position(|l| l.starts_with("Version:")).unwrap();
    assert_eq!(lines[at + 1], "AppStoreTools:       16F3");
    assert!(lines[at + 2].starts_with("Code Type:"));
    // Written back as `.ips` (`--format ips`), the build stays.
    let mut loaded = viewer::load(edited.as_bytes()).unwrap();
    let ours = viewer::render_loaded(&mut loaded, viewer::Layout::Modern, viewer::Format::Ips, None);
    let body: serde_json::Value = serde_json::from_str(ours.split_once('\n').unwrap().1).unwrap();
    assert_eq!(body["bundleInfo"]["DTAppStoreToolsBuild"], "16F3");
    assert_eq!(viewer::render_bytes(ours.as_bytes()).unwrap(), text);
}

#[test]
fn ios_simulator_reports_take_macos_thread_headers_and_image_lines_in_the_ios_layout() {
    // A macOS 15.2 Console translation of an iOS Simulator app's report (`platform` 7; a repository without a
    // licence, so not in the corpus; that pair renders byte for byte): the iOS header with `Responsible Process:`
    // after `Coalition:`, macOS's `Thread N::  Dispatch queue: ...` headers and Binary Images lines (bundle id,
    // version, dashed UUID), `EOF` at the end. Checked here on an edited copy of a corpus `.ips`.
    let ips = std::fs::read_to_string(third_party("macsymbolicator/ios15-swift-assert/report.ips")).unwrap();
    let edited = ips.replacen("\"platform\":2,", "\"platform\":7,", 1).replacen(
        "\"uptime\" :",
        "\"responsibleProc\" : \"SimulatorTrampoline\",\n  \"responsiblePid\" : 1047,\n  \"uptime\" :",
        1,
    );
    assert_eq!(edited.matches("SimulatorTrampoline").count(), 1);
    assert!(edited.contains("\"platform\":7,"));
    let device = viewer::render_bytes(ips.as_bytes()).unwrap();
    let text = viewer::render_bytes(edited.as_bytes()).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    let at = |prefix: &str| lines.iter().position(|l| l.starts_with(prefix)).unwrap_or_else(|| panic!("{prefix}"));
    assert_eq!(lines[at("Coalition:") + 1], "Responsible Process: SimulatorTrampoline [1047]");
    assert!(lines.contains(&"Thread 0 Crashed::  Dispatch queue: com.apple.main-thread"), "{text}");
    assert!(!text.contains("Thread 0 name:"));
    let images = at("Binary Images:");
    assert_eq!(
        lines[images + 1],
        "       0x1ad951000 -        0x1ade67fff libswiftCore.dylib (*) <178beeaf-85dc-35a7-b02c-b951eba169ce> \
         /usr/lib/swift/libswiftCore.dylib"
    );
    assert!(text.ends_with("\nEOF\n\n"));
    // The device report keeps the iOS lines.
    assert!(device.contains("Thread 0 name:   Dispatch queue: com.apple.main-thread\nThread 0 Crashed:\n"));
    assert!(!device.contains("Responsible Process:"));
    // Written back as `.ips` (`--format ips`), it is still a Simulator report.
    let mut loaded = viewer::load(edited.as_bytes()).unwrap();
    let ours = viewer::render_loaded(&mut loaded, viewer::Layout::Modern, viewer::Format::Ips, None);
    let meta: serde_json::Value = serde_json::from_str(ours.lines().next().unwrap()).unwrap();
    assert_eq!(meta["platform"], 7);
    assert_eq!(viewer::render_bytes(ours.as_bytes()).unwrap(), text);
}
