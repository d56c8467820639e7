//! The Mach-O parser against real files: small ones built by `fixtures/macho/make.sh` with clang + ld64.lld (thin
//! and universal, arm64 and x86_64, executable and dylib), and Apple-built ones from Xcode (copied into
//! `fixtures/third_party/`, see the READMEs there). The oracle is what `llvm-objdump --macho` and
//! `llvm-dwarfdump --uuid` print; their output is committed next to the files, and `live_rebuild_matches_llvm_tools`
//! regenerates everything with the installed toolchain and compares again.

#[path = "fixtures/macho/llvm_oracle.rs"]
mod llvm_oracle;

use std::path::{Path, PathBuf};
use std::process::Command;

use handler::platform::darwin::crash::macho::{self, consts::*, MachO};
use llvm_oracle::{check_file, uuid_string};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures")
}

const BUILT: [&str; 6] = [
    "exe-arm64-ios",
    "exe-x86_64-macos",
    "exe-universal-macos",
    "libcrashy-arm64-ios.dylib",
    "libcrashy-x86_64-macos.dylib",
    "libcrashy-universal-macos.dylib",
];

#[test]
fn built_fixtures_match_committed_llvm_output() {
    let dir = fixtures().join("macho");
    let mut facts = 0;
    for name in BUILT {
        facts += check_file(&dir, name);
    }
    assert!(facts > 150, "only {facts} facts compared");
}

#[test]
fn built_fixtures_specifics() {
    let dir = fixtures().join("macho");
    let exe = std::fs::read(dir.join("exe-arm64-ios")).unwrap();
    let m = MachO::parse(&exe).unwrap();
    assert_eq!(m.filetype, MH_EXECUTE);
    assert_eq!(m.arch_name(), "arm64");
    let b = m.build_version().unwrap();
    assert_eq!((b.platform, b.min_os.major(), b.min_os.minor()), (PLATFORM_IOS, 14, 0));
    let ci = m.crash_info_section().expect("crashy.c defines __DATA,__crash_info");
    assert_eq!(ci.size, 64, "crashreporter_annotations_t v5 is 64 bytes");
    assert_eq!(m.install_name(), None);

    let lib = std::fs::read(dir.join("libcrashy-universal-macos.dylib")).unwrap();
    for (cpu, arch) in [(CPU_TYPE_X86_64, "x86_64"), (CPU_TYPE_ARM64, "arm64")] {
        let m = macho::parse_any(&lib, cpu, None).unwrap();
        assert_eq!(m.filetype, MH_DYLIB);
        assert_eq!(m.arch_name(), arch);
        assert_eq!(m.install_name(), Some(&b"/usr/local/lib/libcrashy.dylib"[..]));
        assert!(m.crash_info_section().is_none());
        let s = m.summary().unwrap();
        assert_eq!(s.text_vmaddr, Some(0), "dylibs link at 0");
        assert!(s.text_section.is_some());
    }
    let ios_lib = std::fs::read(dir.join("libcrashy-arm64-ios.dylib")).unwrap();
    assert_eq!(MachO::parse(&ios_lib).unwrap().install_name(), Some(&b"@rpath/libcrashy.dylib"[..]));
    // A thin file is not a fat file, and parse_any returns it whatever CPU is asked for.
    assert!(macho::Fat::parse(&ios_lib).unwrap().is_none());
    assert_eq!(macho::parse_any(&ios_lib, CPU_TYPE_X86_64, None).unwrap().cputype, CPU_TYPE_ARM64);
}

#[test]
fn apple_built_fixtures_match_committed_llvm_output() {
    let tp = fixtures().join("third_party");
    let n = check_file(&tp.join("macsymbolicator"), "iOSCrashingTest")
        + check_file(&tp.join("macsymbolicator"), "CrashingTest")
        + check_file(&tp.join("symbolic"), "crash");
    assert!(n > 100, "only {n} facts compared");
}

/// Facts from `shared/fixtures/README.md` (independent of LLVM's output).
#[test]
fn apple_built_fixtures_known_values() {
    let tp = fixtures().join("third_party");
    let ios = std::fs::read(tp.join("macsymbolicator/iOSCrashingTest")).unwrap();
    let m = MachO::parse(&ios).unwrap();
    assert_eq!(m.uuid().map(uuid_string).as_deref(), Some("82D13D98-219E-3040-B62A-07A297007A7C"));
    assert_eq!(m.text_vmaddr(), Some(0x1_0000_0000));
    assert_eq!(m.arch_name(), "arm64");
    // Apple's report: image 0x1007d4000, frame 0x1007da384 is main at +25476.
    let slide = m.slide(0x1_007d_4000).unwrap();
    assert_eq!(slide, 0x7d_4000);
    let text = m.section(b"__TEXT", b"__text").unwrap();
    let main_linktime = 0x1_007d_a384 - slide;
    assert!(text.addr <= main_linktime && main_linktime < text.addr + text.size, "main lies in __text");
    let b = m.build_version().unwrap();
    assert_eq!((b.platform, b.min_os.major(), b.min_os.minor()), (PLATFORM_IOS, 14, 3));

    let mac = std::fs::read(tp.join("macsymbolicator/CrashingTest")).unwrap();
    let x86 = macho::parse_any(&mac, CPU_TYPE_X86_64, None).unwrap();
    let arm = macho::parse_any(&mac, CPU_TYPE_ARM64, Some(CPU_SUBTYPE_ARM64_ALL)).unwrap();
    assert_eq!(x86.uuid().map(uuid_string).as_deref(), Some("01D2A9D5-1F8A-35C8-9228-7C7CCA13C5FC"));
    assert_eq!(arm.uuid().map(uuid_string).as_deref(), Some("562DB6C8-8D3C-3B67-9511-F3C108BDEAB2"));
    // Apple's report: image at 0x10e30e000; 0x10e311e45 is +15941 into it.
    assert_eq!(x86.slide(0x1_0e30_e000), Some(0xe30_e000));

    let crash = std::fs::read(tp.join("symbolic/crash")).unwrap();
    let c = MachO::parse(&crash).unwrap();
    assert_eq!(c.uuid().map(uuid_string).as_deref(), Some("67E9247C-814E-392B-A027-DBDE6748FCBF"));
    assert_eq!(c.text_vmaddr(), Some(0x1_0000_0000));
    assert_eq!(c.arch_name(), "x86_64");
}

/// The dSYM companions are Mach-O files too (`MH_DSYM`) with the same UUIDs. They are large, so they are read from
/// the shared fixtures beside the repository (present in CI) instead of being copied.
#[test]
fn dsyms_from_shared_fixtures() {
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/fixtures");
    if !shared.is_dir() {
        println!("note: {} not found; dSYM checks skipped", shared.display());
        return;
    }
    let cases = [
        (
            "apple/ios15-swift-assert/iOSCrashingTest.app.dSYM/Contents/Resources/DWARF/iOSCrashingTest",
            CPU_TYPE_ARM64,
            "82D13D98-219E-3040-B62A-07A297007A7C",
        ),
        (
            "apple/macos12-single-target/CrashingTest.dSYM/Contents/Resources/DWARF/CrashingTest",
            CPU_TYPE_X86_64,
            "01D2A9D5-1F8A-35C8-9228-7C7CCA13C5FC",
        ),
        (
            "apple/macos12-single-target/CrashingTest.dSYM/Contents/Resources/DWARF/CrashingTest",
            CPU_TYPE_ARM64,
            "562DB6C8-8D3C-3B67-9511-F3C108BDEAB2",
        ),
        (
            "macho-symbols/crash.dSYM/Contents/Resources/DWARF/crash",
            CPU_TYPE_X86_64,
            "67E9247C-814E-392B-A027-DBDE6748FCBF",
        ),
    ];
    for (path, cpu, uuid) in cases {
        let data = std::fs::read(shared.join(path)).unwrap();
        let m = macho::parse_any(&data, cpu, None).unwrap();
        assert_eq!(m.filetype, MH_DSYM, "{path}");
        assert_eq!(m.uuid().map(uuid_string).as_deref(), Some(uuid), "{path}");
        assert!(m.segment(b"__DWARF").is_some(), "{path}: has __DWARF");
        m.validate().unwrap();
    }
}

/// Rebuilds the fixtures with the installed clang + ld64.lld into a temporary directory and compares the parser
/// with llvm-objdump/llvm-dwarfdump run now. Skipped with a note when the tools are absent, unless
/// `HANDLER_REQUIRE_LLVM_TOOLS` is set (CI sets it, so there it always runs).
#[test]
fn live_rebuild_matches_llvm_tools() {
    let script = fixtures().join("macho/make.sh");
    let out = std::env::temp_dir().join(format!("handler-macho-live-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let status = Command::new("bash").arg(&script).arg(&out).status().expect("run bash");
    if status.code() == Some(77) {
        let msg = "note: clang/ld64.lld/llvm tools not found; live Mach-O rebuild skipped";
        assert!(
            std::env::var_os("HANDLER_REQUIRE_LLVM_TOOLS").is_none(),
            "{msg} but HANDLER_REQUIRE_LLVM_TOOLS is set"
        );
        println!("{msg}");
        return;
    }
    assert!(status.success(), "make.sh failed: {status}");
    let mut facts = 0;
    for name in BUILT {
        facts += check_file(&out, name);
    }
    assert!(facts > 150);
    // Same toolchain as the committed fixtures: the rebuild must be byte-identical (reproducible UUIDs).
    let committed = fixtures().join("macho");
    let tools = |d: &Path| std::fs::read_to_string(d.join("tools.txt")).unwrap();
    if tools(&out) == tools(&committed) {
        for name in BUILT {
            let a = std::fs::read(out.join(name)).unwrap();
            let b = std::fs::read(committed.join(name)).unwrap();
            assert!(a == b, "{name}: rebuild differs from the committed fixture (not reproducible)");
        }
    } else {
        println!("note: toolchain differs from the one that made the committed fixtures; reproducibility not compared");
    }
    std::fs::remove_dir_all(&out).unwrap();
}
