//! The unit-by-unit batch path (`DebugFile::lookup_batch`, `viewer atos`) against `addr2line` one address at a
//! time (`DebugFile::lookup_batch_addr2line`, `viewer atos --via-addr2line`): the same frames (function, offset,
//! file, line, inline chain) for every address of real binaries, and byte-identical `viewer atos` output.
//!
//! Binaries: C programs built here by `cc -g -O2` (four translation units, inline functions from a header in
//! another directory, nested inlining), as DWARF 5 and DWARF 4; this test binary itself (Rust, thousands of units);
//! the Mach-O dSYM fixture built by `tests/fixtures/macho-built/make.sh`.
//!
//! One difference is expected, and checked: code the linker dropped whose ranges were written as empty (`ld.lld`'s
//! `[1, 1)` in DWARF 4 `.debug_ranges`). Such a unit covers no address on the batch path, while `addr2line` takes
//! its line program's sequences (which start at 0) as its ranges (`viewer/src/symbols/batch.rs` says why). Where
//! the two differ, the probe must be below every live function symbol (0, 1 or 0x10 in a Rust binary, where both
//! may name dropped code of different units), or (`dropped_code_is_not_named_for_live_code`) GNU `addr2line` must
//! agree with the batch path.

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use viewer::crashlog::SymbolInfo;
use viewer::symbols::{identify, DebugFile};

/// `inc/util.h`: inline helpers, some calling others (chains two and three deep once inlined).
const HEADER: &str = r#"
static inline int mix(int x, int k) { return (x * 31) ^ (k + (x >> 3)); }
static inline int fold(int x, int n) {
    int s = 0;
    for (int i = 0; i < n; i++) s += mix(x + i, i);
    return s;
}
static inline __attribute__((always_inline)) int twice(int x, int n) { return fold(x, n) + fold(n, x & 7); }
"#;

/// One translation unit: `count` out-of-line functions named `prefix_N`, each with inlined helpers of its own and
/// from the header.
fn unit_source(prefix: &str, count: usize) -> String {
    let mut s = String::from("#include \"util.h\"\nextern volatile int sink;\n");
    for i in 0..count {
        s += &format!(
            "static inline int {prefix}_step{i}(int x) {{ if (x & 1) sink += x; return twice(x, {m}) - x * {i}; }}\n\
             __attribute__((noinline)) int {prefix}_{i}(int x) {{\n\
             \x20   int r = {prefix}_step{i}(x);\n\
             \x20   for (int j = 0; j < (x & 15); j++) r ^= mix(r, j) + {prefix}_step{i}(j);\n\
             \x20   return r;\n\
             }}\n",
            m = i % 5 + 2
        );
    }
    s
}

/// Builds the C program into `dir` with `-g -O2` and the extra flags; returns its path.
fn build_c(dir: &Path, flags: &[&str]) -> PathBuf {
    let inc = dir.join("inc");
    std::fs::create_dir_all(&inc).unwrap();
    std::fs::write(inc.join("util.h"), HEADER).unwrap();
    let mut sources = Vec::new();
    for (prefix, count) in [("alpha", 12), ("beta", 9), ("gamma", 15)] {
        let p = dir.join(format!("{prefix}.c"));
        std::fs::write(&p, unit_source(prefix, count)).unwrap();
        sources.push(p);
    }
    let main = dir.join("main.c");
    let mut m = String::from("volatile int sink;\n");
    let mut calls = String::new();
    for (prefix, count) in [("alpha", 12), ("beta", 9), ("gamma", 15)] {
        for i in 0..count {
            m += &format!("int {prefix}_{i}(int);\n");
            calls += &format!("    t += {prefix}_{i}(argc + {i});\n");
        }
    }
    m +=
        &format!("int main(int argc, char **argv) {{\n    (void)argv;\n    int t = 0;\n{calls}    return t & 1;\n}}\n");
    std::fs::write(&main, m).unwrap();
    sources.push(main);
    let out = dir.join("prog");
    let st = Command::new("cc")
        .args(["-g", "-O2"])
        .args(flags)
        .arg("-I")
        .arg(&inc)
        .arg("-o")
        .arg(&out)
        .args(&sources)
        .status()
        .expect("cc runs");
    assert!(st.success(), "cc failed");
    out
}

fn load(path: &Path) -> DebugFile {
    let ident = identify(path).into_iter().next().expect("an object file");
    let file = DebugFile::load(ident).expect("loads");
    assert!(file.has_dwarf(), "{} has DWARF", path.display());
    file
}

/// The file's sized function symbols, `(address, size)`, sorted.
fn live_functions(path: &Path) -> Vec<(u64, u64)> {
    let data = std::fs::read(path).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let mut funcs: Vec<(u64, u64)> = obj
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0 && s.address() > 0)
        .map(|s| (s.address(), s.size()))
        .collect();
    funcs.sort();
    funcs
}

/// Every address inside the file's sized function symbols (every `step`-th one), plus a few outside any.
fn function_addresses(path: &Path, step: u64, max: usize) -> Vec<u64> {
    let mut out = Vec::new();
    let funcs = live_functions(path);
    // Spread over the whole text when capped: every function, then more offsets per function.
    let per = (max / funcs.len().max(1)).max(1) as u64;
    for (start, size) in funcs {
        let take = (size / step).clamp(1, per);
        let stride = (size / take).max(1);
        out.extend((0..take).map(|k| start + k * stride));
    }
    out.truncate(max);
    out.extend([0, 1, 0x10, u64::MAX - 1]);
    out
}

/// Compares the batch path with addr2line for `addresses` (as both address and probe, and as a return address
/// probed one byte before); returns how many came with an inlined frame and how many with a file name. `live`: the
/// file's function symbols; at most `dropped_max` queries may differ, each with its probe below all of them (where
/// what `addr2line` names is code the linker dropped; see the module's documentation).
fn compare(
    file: &DebugFile,
    live: &[(u64, u64)],
    dropped_max: usize,
    addresses: &[u64],
    threads: usize,
) -> (usize, usize) {
    let lowest = live.first().map_or(0, |f| f.0);
    let mut queries: Vec<(u64, u64)> = addresses.iter().map(|&a| (a, a)).collect();
    queries.extend(addresses.iter().filter(|&&a| a > 0).map(|&a| (a, a - 1)));
    let want = file.lookup_batch_addr2line(&queries);
    let (got, left) = file.lookup_batch_units(&queries, threads);
    assert_eq!(got.len(), queries.len());
    // The batch path answers (nearly) everything itself: the comparison is not addr2line against itself.
    assert!(left * 100 <= queries.len(), "{left} of {} queries were left to addr2line", queries.len());
    let (mut inlined, mut with_file, mut dropped) = (0, 0, 0);
    for (q, (g, w)) in queries.iter().zip(got.iter().zip(&want)) {
        if g != w && q.1 < lowest {
            dropped += 1;
            continue;
        }
        assert_eq!(g, w, "query (address, probe) {q:#x?}");
        inlined += usize::from(g.len() >= 2);
        with_file += usize::from(g.iter().any(|f: &SymbolInfo| f.file.is_some()));
    }
    assert!(dropped <= dropped_max, "{dropped} queries below the functions differ");
    // The default batch entry point gives the batch path's answers.
    assert_eq!(file.lookup_batch(&queries), got);
    (inlined, with_file)
}

/// Whether `address` is inside one of `live` (sorted `(address, size)`).
#[cfg(target_os = "linux")]
fn inside(live: &[(u64, u64)], address: u64) -> bool {
    let i = live.partition_point(|f| f.0 <= address);
    live[..i].iter().rev().take(64).any(|&(start, size)| address - start < size)
}

fn check_c_program(flags: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), flags);
    let file = load(&prog);
    let addresses = function_addresses(&prog, 1, 20_000);
    assert!(addresses.len() > 2000, "only {} addresses", addresses.len());
    let live = live_functions(&prog);
    let (inlined, with_file) = compare(&file, &live, 0, &addresses, 3);
    assert!(inlined > 500, "only {inlined} queries had an inlined frame");
    assert!(with_file > 2000, "only {with_file} queries had a source file");
    // Some inline chains are three deep (twice -> fold -> mix) and name the header in its own directory.
    let deep = addresses.iter().map(|&a| file.lookup(a, a)).find(|f| f.len() >= 4).expect("a chain of 3 inlines");
    assert!(deep.iter().any(|f| f.file.as_deref().is_some_and(|p| p.ends_with("inc/util.h"))), "{deep:?}");
    // A fresh file, so that its units are listed on one thread too (a file keeps the units it listed).
    compare(&load(&prog), &live, 0, &addresses, 1);
}

#[test]
fn c_program_dwarf5_batch_matches_addr2line() {
    check_c_program(&["-gdwarf-5"]);
}

#[test]
fn c_program_dwarf4_batch_matches_addr2line() {
    check_c_program(&["-gdwarf-4"]);
}

#[test]
fn rust_test_binary_batch_matches_addr2line() {
    let exe = std::env::current_exe().unwrap();
    let file = load(&exe);
    let addresses = function_addresses(&exe, 7, 6000);
    // Probes 0, 1 and 0x10 and the bytes before them: what `addr2line` names there is dropped code.
    let (inlined, with_file) = compare(&file, &live_functions(&exe), 6, &addresses, 2);
    // A debug build inlines little (`#[inline(always)]` functions of std and the dependencies). A release build of
    // the test (`cargo test --release`) has fewer functions with line information among the sampled ones (3,670 of
    // 6,000 on the development machine): the floor only has to show that most queries reached a line table.
    assert!(inlined > 20, "only {inlined} queries had an inlined frame");
    let floor = if cfg!(debug_assertions) { 5000 } else { 3000 };
    assert!(with_file > floor, "only {with_file} queries had a source file");
}

#[test]
fn macho_dsym_batch_matches_addr2line() {
    let dwarf = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/macho-built/crashy.dSYM/Contents/Resources/DWARF/crashy");
    let file = load(&dwarf);
    let data = std::fs::read(&dwarf).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    let text = obj.section_by_name("__text").expect("__text");
    let addresses: Vec<u64> = (text.address()..text.address() + text.size()).collect();
    assert!(addresses.len() >= 64, "{} addresses", addresses.len());
    let (_, with_file) = compare(&file, &[(text.address(), text.size())], 0, &addresses, 2);
    assert!(with_file * 10 > addresses.len() * 9, "only {with_file} of {} had a source file", addresses.len());
}

/// The binaries the decoder checks below run on, built into `dir`: the C program as DWARF 5, DWARF 4 and split
/// DWARF 5 (`-gsplit-dwarf`: skeleton units), this test binary (Rust), the Mach-O dSYM fixture, and the file named
/// by `ATOS_BATCH_CHECK_FILE` when set (a release build, say).
fn dwarf_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = vec![
        build_c(&dir.join("v5"), &["-gdwarf-5"]),
        build_c(&dir.join("v4"), &["-gdwarf-4"]),
        build_c(&dir.join("split"), &["-gdwarf-5", "-gsplit-dwarf"]),
        std::env::current_exe().unwrap(),
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/macho-built/crashy.dSYM/Contents/Resources/DWARF/crashy"),
    ];
    files.extend(std::env::var_os("ATOS_BATCH_CHECK_FILE").map(PathBuf::from));
    files
}

/// The batch path's own line-program decoder gives the same rows (address, file, line, end of sequence) as
/// `gimli`'s in every unit of every binary of [`dwarf_files`].
#[test]
fn line_program_decoder_matches_gimli() {
    let dir = tempfile::tempdir().unwrap();
    for f in dwarf_files(dir.path()) {
        let compared = load(&f).check_line_sequences().unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(compared >= 1, "{}: no unit compared", f.display());
    }
}

/// Listing reads each unit DIE itself, without the line program (`symbols/batch.rs`, `lean_unit`): the same values
/// as `gimli::Unit` (bases, `DW_AT_low_pc`, split-DWARF id, where the line program is and its header) in every
/// unit of every binary of [`dwarf_files`].
#[test]
fn listed_units_match_gimli() {
    let dir = tempfile::tempdir().unwrap();
    for f in dwarf_files(dir.path()) {
        let compared = load(&f).check_listed_units().unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        assert!(compared >= 1, "{}: no unit compared", f.display());
    }
}

/// `viewer atos` with the addresses on standard input; returns standard output.
fn run_atos(prog: &Path, addresses: &[u64], extra: &[&str]) -> Vec<u8> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_viewer"))
        .args(["atos", "-o"])
        .arg(prog)
        .args(["-l", "0x0"])
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let input: String = addresses.iter().map(|a| format!("{a:#x}\n")).collect();
    let mut stdin = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || stdin.write_all(input.as_bytes()));
    let out = child.wait_with_output().unwrap();
    feeder.join().unwrap().unwrap();
    assert!(out.status.success());
    out.stdout
}

#[test]
fn viewer_atos_output_is_byte_identical_to_addr2line_s() {
    let dir = tempfile::tempdir().unwrap();
    let prog = build_c(dir.path(), &[]);
    let exe = std::env::current_exe().unwrap();
    // This Rust binary has units whose code the linker dropped (`ld.lld`): `addr2line` names that code for the
    // few addresses below its functions (0, 1, 0x10 here), and the batch path does not; those are left out of the
    // byte comparison (`compare` checks them).
    let lowest = live_functions(&exe).first().map_or(0, |f| f.0);
    let in_exe: Vec<u64> = function_addresses(&exe, 11, 3000).into_iter().filter(|&a| a >= lowest).collect();
    for (file, addresses) in [(&prog, function_addresses(&prog, 1, 8000)), (&exe, in_exe)] {
        assert!(addresses.len() > 2048, "enough addresses to split the formatting over threads");
        let batch = run_atos(file, &addresses, &[]);
        let oracle = run_atos(file, &addresses, &["--via-addr2line"]);
        let text = String::from_utf8(batch.clone()).unwrap();
        assert!(text.lines().count() > addresses.len(), "inline frames give more lines than addresses");
        assert!(text.contains("[inlined]") && (text.contains(".c:") || text.contains(".rs:")), "{}", &text[..500]);
        assert!(batch == oracle, "viewer atos output differs for {}", file.display());
    }
}

/// Whether CI is set (a missing tool is a failure there, a skip elsewhere; as in `tests/tests/oracle.rs`).
#[cfg(target_os = "linux")]
fn ci() -> bool {
    std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "false" && v != "0")
}

/// `lines` lines of volatile arithmetic (about 20 bytes of code each at `-O2`).
#[cfg(target_os = "linux")]
fn long_body(lines: usize) -> String {
    (0..lines)
        .map(|i| format!("    p[{}] = p[{}] * {} + p[{}];\n", i % 50, (i * 7) % 50, i + 3, (i * 13) % 50))
        .collect()
}

/// Code the linker dropped is not named for an address of live code, when its ranges were written as empty.
/// `dropped.c` (two functions of 1,000 lines, called by nothing) and a longer `main` (1,500 lines) in `main.c`,
/// built with `cc -O2 -g -gdwarf-4 -ffunction-sections -pie` and linked by `ld.lld --gc-sections`: `ld.lld` writes
/// the dropped unit's `.debug_ranges` entries as `[1, 1)` and its line program's `DW_LNE_set_address` operands as
/// 0, so its sequences run from 0 over about 20 KiB, and `main` starts inside them and ends after them.
/// `addr2line` lists those sequences as the unit's ranges and, their end coming before the end of `main`'s range,
/// names dropped code for the start of `main`; the batch path names `main`, as GNU `addr2line` (binutils, an
/// independent reader of the same DWARF) and the symbol table do. (With DWARF 5, or without
/// `-ffunction-sections`, `ld.lld` writes the dropped ranges as `[0, size)`: not empty, so both name dropped code
/// there; not covered.)
#[cfg(target_os = "linux")]
#[test]
fn dropped_code_is_not_named_for_live_code() {
    let version =
        |tool: &str| Command::new(tool).arg("--version").output().ok().filter(|o| o.status.success()).map(|o| o.stdout);
    let gnu = version("addr2line").is_some_and(|v| String::from_utf8_lossy(&v).contains("GNU"));
    if version("ld.lld").is_none() || !gnu {
        assert!(!ci(), "ld.lld and GNU addr2line are required under CI: apt-get install lld binutils");
        eprintln!("skipped: ld.lld or GNU addr2line missing");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let dropped = dir.path().join("dropped.c");
    let live = dir.path().join("main.c");
    std::fs::write(
        &dropped,
        format!(
            "int unused0(volatile int *p) {{\n{}    return p[0];\n}}\nint unused1(volatile int *p) {{\n{}    return p[1];\n}}\n",
            long_body(1000),
            long_body(1000)
        ),
    )
    .unwrap();
    std::fs::write(
        &live,
        format!(
            "volatile int v[64];\nint main(void) {{\n    volatile int *p = v;\n{}    return p[2];\n}}\n",
            long_body(1500)
        ),
    )
    .unwrap();
    let prog = dir.path().join("prog");
    let st = Command::new("cc")
        .args(["-O2", "-g", "-gdwarf-4", "-ffunction-sections", "-fPIE", "-pie", "-fuse-ld=lld", "-Wl,--gc-sections"])
        .arg("-o")
        .arg(&prog)
        .args([&live, &dropped])
        .status()
        .expect("cc runs");
    assert!(st.success(), "cc failed");
    let main = live_functions(&prog);
    let data = std::fs::read(&prog).unwrap();
    let obj = object::File::parse(&*data).unwrap();
    assert!(obj.symbols().all(|s| !s.name().unwrap_or("").starts_with("unused")), "the linker kept dropped.c's code");
    let start = obj.symbols().find(|s| s.name() == Ok("main")).map(|s| s.address()).expect("main");
    let probe = start + 16;
    assert!(inside(&main, probe));

    let file = load(&prog);
    let queries = [(probe, probe)];
    let via_addr2line = file.lookup_batch_addr2line(&queries);
    // The case is there: `addr2line` names dropped code (else the layout changed and the test proves nothing).
    assert!(
        via_addr2line[0].iter().any(|f| f.file.as_deref().is_some_and(|p| p.ends_with("dropped.c"))),
        "addr2line no longer lands in the dropped code's line program: {via_addr2line:?}"
    );
    let (got, left) = file.lookup_batch_units(&queries, 1);
    assert_eq!(left, 0);
    let frame = got[0].last().expect("a frame");
    assert_eq!(frame.name, "main", "{got:?}");
    let (ours_file, ours_line) = (frame.file.clone().expect("a file"), frame.line.expect("a line"));
    assert!(ours_file.ends_with("main.c"), "{got:?}");

    // GNU addr2line: `FILE:LINE` of the innermost frame, possibly followed by ` (discriminator N)`.
    let out = Command::new("addr2line").arg("-e").arg(&prog).arg(format!("{probe:#x}")).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let first = text.lines().next().unwrap_or("");
    let gnu = first.split(" (discriminator").next().unwrap_or("");
    assert_eq!(gnu, format!("{ours_file}:{ours_line}"), "GNU addr2line: {text}");
}
