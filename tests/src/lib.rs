//! Crash-test support: run the crash client with one trigger, collect its report, decode it, and symbolicate the
//! crashed thread's frames against the client binary's own debug info (`addr2line`), with the build id read from
//! the file itself (`object`).

#[cfg(target_os = "linux")]
pub mod oracle;

use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};
use report_format::model::{Image, ImageId, Report, Thread};
use std::borrow::Cow;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Everything a crash run produced.
#[derive(Debug)]
pub struct Run {
    /// Trigger name.
    pub trigger: String,
    /// The signal that ended the process (`None` if it exited normally).
    pub signal: Option<i32>,
    /// Exit code when it exited normally.
    pub code: Option<i32>,
    /// Client stdout.
    pub stdout: String,
    /// Client stderr.
    pub stderr: String,
    /// Paths of finished reports (`*.crashreport`).
    pub reports: Vec<PathBuf>,
    /// Other files left in the report directory (temporary files, ...), except the SIGBUS backing file and
    /// [`Run::spares`].
    pub leftovers: Vec<PathBuf>,
    /// Unused reservations left for the next launch: `.*.reserved` files that are still all zeros (a process that
    /// ends without a crash leaves its reservation; `handler::Config::reserved_report_bytes`). One that holds
    /// anything else is in [`Run::leftovers`].
    pub spares: Vec<PathBuf>,
    /// The alloc-count file's `key value` lines.
    pub counts: Vec<(String, u64)>,
    /// Keeps the directory alive.
    pub dir: PathBuf,
}

impl Run {
    /// Value of a `KEY value` line of the client's stdout (first occurrence).
    pub fn out_value(&self, key: &str) -> Option<&str> {
        self.stdout.lines().find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(' ')))
    }

    /// All values of `KEY value` lines of stdout.
    pub fn out_values(&self, key: &str) -> Vec<&str> {
        self.stdout.lines().filter_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(' '))).collect()
    }

    /// A counter the client's crash hook wrote (the last value written: the hook writes its counters again at
    /// every crash it sees, so after a survived fault and a real crash the second set wins).
    pub fn count(&self, key: &str) -> Option<u64> {
        self.counts.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// Every value the hook wrote under `key`, in order.
    pub fn counts_of(&self, key: &str) -> Vec<u64> {
        self.counts.iter().filter(|(k, _)| k == key).map(|(_, v)| *v).collect()
    }
}

/// Runs the crash client at `client` with `trigger` in a fresh directory under `base`; waits at most `limit` for
/// it to die. (Integration tests pass `env!("CARGO_BIN_EXE_crash-client")`.)
///
/// # Panics
/// When the client cannot be started or does not end within `limit` (it is killed then).
pub fn run(client: &Path, trigger: &str, base: &Path, limit: Duration) -> Run {
    let dir = base.join(trigger);
    let reports = dir.join("reports");
    std::fs::create_dir_all(&dir).expect("test dir");
    let counts = dir.join("alloc-counts");
    let out_path = dir.join("stdout");
    let err_path = dir.join("stderr");
    let mut cmd = match runner() {
        Some(words) if !words.is_empty() => {
            let mut c = Command::new(&words[0]);
            c.args(&words[1..]).arg(client);
            c
        }
        _ => Command::new(client),
    };
    let mut child = cmd
        .arg(trigger)
        .arg(&reports)
        .arg(&counts)
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).expect("stdout file"))
        .stderr(std::fs::File::create(&err_path).expect("stderr file"))
        .spawn()
        .expect("spawn crash client");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("crash client `{trigger}` did not end within {limit:?} (hang)");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut found = Vec::new();
    let mut leftovers = Vec::new();
    let mut spares = Vec::new();
    if let Ok(rd) = std::fs::read_dir(&reports) {
        for e in rd.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".crashreport") && !name.starts_with('.') {
                found.push(p);
            } else if name.ends_with(".reserved") && std::fs::read(&p).is_ok_and(|b| b.iter().all(|x| *x == 0)) {
                spares.push(p);
            } else if name != "sigbus-backing-file" {
                leftovers.push(p);
            }
        }
    }
    let counts = std::fs::read_to_string(&counts)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(' ')?;
            Some((k.to_string(), v.parse().ok()?))
        })
        .collect();
    Run {
        trigger: trigger.to_string(),
        signal: status.signal(),
        code: status.code(),
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
        stderr: std::fs::read_to_string(&err_path).unwrap_or_default(),
        reports: found,
        leftovers,
        spares,
        counts,
        dir,
    }
}

/// The command that runs a target binary when the tests themselves run under an emulator: `CRASH_TESTS_RUNNER`,
/// else (on aarch64) Cargo's `CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER` (toolchain.md §2, qemu-user), split
/// on whitespace. A process under qemu-user cannot `exec` another guest binary by itself.
pub fn runner() -> Option<Vec<String>> {
    let var = std::env::var("CRASH_TESTS_RUNNER").ok().or_else(|| {
        if cfg!(target_arch = "aarch64") {
            std::env::var("CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER").ok()
        } else {
            None
        }
    })?;
    Some(var.split_whitespace().map(str::to_string).collect())
}

/// Symbolicates addresses of one ELF file with its own DWARF.
pub struct Symbolizer {
    ctx: addr2line::Context<gimli::EndianRcSlice<gimli::RunTimeEndian>>,
    /// Function symbols of the ELF symbol table: (address, size, name), for code without DWARF (assembly).
    symbols: Vec<(u64, u64, String)>,
    /// GNU build id read from the file.
    pub build_id: Option<Vec<u8>>,
}

impl Symbolizer {
    /// Loads the DWARF of the ELF file at `path`.
    ///
    /// # Panics
    /// When the file cannot be read or parsed.
    pub fn new(path: &Path) -> Symbolizer {
        let data = std::fs::read(path).expect("read binary");
        let file = object::File::parse(&*data).expect("parse binary");
        let endian = if file.is_little_endian() { gimli::RunTimeEndian::Little } else { gimli::RunTimeEndian::Big };
        let load = |id: gimli::SectionId| -> Result<gimli::EndianRcSlice<gimli::RunTimeEndian>, gimli::Error> {
            let bytes: Cow<'_, [u8]> =
                file.section_by_name(id.name()).and_then(|s| s.uncompressed_data().ok()).unwrap_or(Cow::Borrowed(&[]));
            Ok(gimli::EndianRcSlice::new(std::rc::Rc::from(&*bytes), endian))
        };
        let dwarf = gimli::Dwarf::load(load).expect("load dwarf");
        let ctx = addr2line::Context::from_dwarf(dwarf).expect("dwarf context");
        let build_id = file.build_id().ok().flatten().map(<[u8]>::to_vec);
        let symbols = file
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
            .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
            .collect();
        Symbolizer { ctx, symbols, build_id }
    }

    /// Function names (innermost inlined first, then the containing function) at a link-time address, from DWARF;
    /// where DWARF knows no function there (hand-written assembly), the ELF symbol containing the address.
    pub fn names(&self, probe: u64) -> Vec<String> {
        let mut out = Vec::new();
        if let Ok(mut frames) = self.ctx.find_frames(probe).skip_all_loads() {
            while let Ok(Some(f)) = frames.next() {
                if let Some(func) = f.function {
                    if let Ok(name) = func.demangle() {
                        out.push(name.into_owned());
                    }
                }
            }
        }
        if out.is_empty() {
            out.extend(
                self.symbols.iter().filter(|(a, n, _)| probe >= *a && probe - a < *n).map(|(_, _, name)| name.clone()),
            );
        }
        out
    }
}

/// The image of the report whose path is the client binary.
pub fn client_image<'r>(report: &'r Report, client: &Path) -> Option<&'r Image> {
    let client = std::fs::canonicalize(client).ok()?;
    report.images.iter().find(|i| i.path.as_deref().map(Path::new) == Some(client.as_path()))
}

/// Symbolicated names per frame of `thread` (frame 0 uses the PC, later frames the return address - 1); frames
/// outside the client image give an empty list.
pub fn symbolicate(sym: &Symbolizer, image: &Image, thread: &Thread) -> Vec<Vec<String>> {
    let bias = image.slide.unwrap_or(image.load_address as i64);
    thread
        .frames
        .iter()
        .enumerate()
        .map(|(i, &addr)| {
            let in_image = addr >= image.load_address && addr - image.load_address < image.size;
            if !in_image {
                return Vec::new();
            }
            let probe = if i == 0 { addr } else { addr - 1 };
            sym.names((probe as i64 - bias) as u64)
        })
        .collect()
}

/// Whether `wanted` occur, in order, as the last path components of function names in `frames` (innermost
/// first; `"run_trigger"` matches `crash_client::linux::run_trigger`). Returns the
/// frame index where each was found.
pub fn find_in_order(frames: &[Vec<String>], wanted: &[&str]) -> Result<Vec<usize>, String> {
    let mut at = 0usize;
    let mut found = Vec::new();
    for w in wanted {
        let suffix = format!("::{w}");
        let hit = (at..frames.len()).find(|&i| frames[i].iter().any(|n| n == w || n.ends_with(&suffix)));
        match hit {
            Some(i) => {
                found.push(i);
                at = i + 1;
            }
            None => return Err(format!("`{w}` not found (in order) in frames {frames:#?}")),
        }
    }
    Ok(found)
}

/// The image id bytes, if any.
pub fn id_bytes(image: &Image) -> Option<&[u8]> {
    image.id.as_ref().map(ImageId::bytes)
}

/// Builds with `cargo build <args> --locked --target-dir <target_dir>` from the workspace root and returns
/// `target_dir`. For what a test needs and Cargo does not build for it: a staticlib of a dependency, a binary under
/// another profile. Its own target directory, because the running `cargo test` holds the lock of its own while tests
/// run (a build there would wait forever). `what` names the product in messages.
///
/// # Panics
/// When cargo cannot be started or the build fails (with cargo's output).
pub fn cargo_build(what: &str, args: &[&str], target_dir: &Path) -> PathBuf {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("workspace root");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let start = Instant::now();
    let out = Command::new(cargo)
        .arg("build")
        .args(args)
        .arg("--locked")
        .arg("--target-dir")
        .arg(target_dir)
        .current_dir(workspace)
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("CARGO_BUILD_TARGET")
        .output()
        .expect("run cargo");
    assert!(
        out.status.success(),
        "cargo build {} (for {what}) failed:\n{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    eprintln!("{what}: cargo build took {:.1} s", start.elapsed().as_secs_f64());
    target_dir.to_path_buf()
}

/// The reporter's static library (`libreporter.a`, its C ABI: `reporter/include/crash_reporter.h`) for C and C++
/// test clients: `ORACLE_STATICLIB` when set (scripts/test-arm64.sh builds the aarch64 one and sets it; required
/// under an emulator), else built with [`cargo_build`] into `<target>/oracle-staticlib` (`target` is the test's
/// Cargo target directory; the frame oracle's tests and the C++ client share it). 33 s from cold on the 2-core
/// development machine (the reporter's dependencies, rustls and ring included), 0.2 s when up to date.
///
/// # Panics
/// Under an emulator without `ORACLE_STATICLIB`, or when the build fails.
pub fn reporter_staticlib(target: &Path) -> PathBuf {
    if let Some(p) = std::env::var_os("ORACLE_STATICLIB") {
        return PathBuf::from(p);
    }
    assert!(
        runner().is_none(),
        "under an emulator the aarch64 libreporter.a comes from ORACLE_STATICLIB (scripts/test-arm64.sh builds it \
         and sets it)"
    );
    cargo_build("libreporter.a", &["-p", "reporter", "--lib"], &target.join("oracle-staticlib"))
        .join("debug")
        .join("libreporter.a")
}

/// The native libraries a Rust staticlib needs on linux-gnu (`rustc --print native-static-libs`), as linker
/// arguments for C and C++ clients of [`reporter_staticlib`].
pub const STATICLIB_NATIVE_LIBS: &[&str] = &["-lgcc_s", "-lutil", "-lrt", "-lpthread", "-lm", "-ldl", "-lc"];
