//! The crash workload shared by our handler and the peer: `N` extra threads, each parked `depth` calls deep, 300
//! small shared libraries loaded, then a null store on the main thread. Also builds those libraries.

use super::sys;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

/// The bottom of a parked thread's stack: counts itself ready, then parks until the process dies.
#[inline(never)]
fn park_here(ready: &AtomicUsize, stop: &AtomicBool) -> u32 {
    ready.fetch_add(1, Ordering::AcqRel);
    while !stop.load(Ordering::Acquire) {
        std::thread::park();
    }
    0
}

macro_rules! first {
    ($a:ident $(, $rest:ident)*) => {
        $a
    };
}

/// Distinct functions `level_00 .. level_95`, each calling the next while calls remain: a parked stack of
/// distinct return addresses (a recursion of one function would be stored once with a repeat count, which would
/// flatter our report size).
macro_rules! levels {
    ($f:ident, $($rest:ident),+) => {
        #[inline(never)]
        fn $f(left: u32, ready: &AtomicUsize, stop: &AtomicBool) -> u32 {
            // The addition after the call keeps it a real call (no tail call), so every level keeps its frame.
            if left == 0 {
                park_here(ready, stop) + black_box(1)
            } else {
                first!($($rest),+)(black_box(left - 1), ready, stop) + black_box(1)
            }
        }
        levels!($($rest),+);
    };
    ($f:ident) => {
        #[inline(never)]
        fn $f(_left: u32, ready: &AtomicUsize, stop: &AtomicBool) -> u32 {
            park_here(ready, stop) + black_box(1)
        }
    };
}

levels!(
    level_00, level_01, level_02, level_03, level_04, level_05, level_06, level_07, level_08, level_09, level_10,
    level_11, level_12, level_13, level_14, level_15, level_16, level_17, level_18, level_19, level_20, level_21,
    level_22, level_23, level_24, level_25, level_26, level_27, level_28, level_29, level_30, level_31, level_32,
    level_33, level_34, level_35, level_36, level_37, level_38, level_39, level_40, level_41, level_42, level_43,
    level_44, level_45, level_46, level_47, level_48, level_49, level_50, level_51, level_52, level_53, level_54,
    level_55, level_56, level_57, level_58, level_59, level_60, level_61, level_62, level_63, level_64, level_65,
    level_66, level_67, level_68, level_69, level_70, level_71, level_72, level_73, level_74, level_75, level_76,
    level_77, level_78, level_79, level_80, level_81, level_82, level_83, level_84, level_85, level_86, level_87,
    level_88, level_89, level_90, level_91, level_92, level_93, level_94, level_95
);

/// Deepest parking depth [`park_threads`] supports.
pub const MAX_DEPTH: u32 = 96;

/// Starts `threads` threads, each parked `depth` (1..=[`MAX_DEPTH`]) distinct functions deep below its entry
/// (`level_00` .. then `park_here`), and returns once all are parked.
pub fn park_threads(threads: usize, depth: u32) -> std::io::Result<()> {
    let depth = depth.clamp(1, MAX_DEPTH);
    let ready = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    for i in 0..threads {
        let (r, s) = (ready.clone(), stop.clone());
        std::thread::Builder::new().name(format!("parked-{i}")).spawn(move || level_00(depth - 1, &r, &s))?;
    }
    while ready.load(Ordering::Acquire) < threads {
        std::thread::yield_now();
    }
    // The threads stay parked until the process dies: `stop` is never set.
    std::mem::forget(stop);
    Ok(())
}

/// File name of generated library `i`.
pub fn lib_name(i: usize) -> String {
    format!("libbench{i:03}.so")
}

/// The paths of the `n` generated libraries in `dir`.
pub fn lib_paths(dir: &Path, n: usize) -> Vec<PathBuf> {
    (0..n).map(|i| dir.join(lib_name(i))).collect()
}

/// Builds `n` small distinct shared libraries in `dir` with `cc` (two compilers at a time), unless a previous run
/// left all of them there. Each has its own function and therefore its own GNU build id.
pub fn build_libs(dir: &Path, n: usize) -> Result<(), String> {
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let stamp = dir.join(format!(".complete-{n}"));
    if stamp.exists() {
        return Ok(());
    }
    let next = AtomicUsize::new(0);
    let workers = std::thread::available_parallelism().map_or(2, |p| p.get()).clamp(1, 4);
    let errors: Vec<String> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..workers)
            .map(|_| {
                s.spawn(|| -> Result<(), String> {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        if i >= n {
                            return Ok(());
                        }
                        let src = dir.join(format!("bench{i:03}.c"));
                        let text = format!(
                            "int bench_lib_{i}_value(int x) {{ return x * {m} + {i}; }}\n\
                             const char bench_lib_{i}_name[] = \"bench library {i}\";\n",
                            m = i + 3
                        );
                        std::fs::write(&src, text).map_err(|e| e.to_string())?;
                        let out = Command::new("cc")
                            .args(["-shared", "-fPIC", "-O1", "-Wl,--build-id", "-o"])
                            .arg(dir.join(lib_name(i)))
                            .arg(&src)
                            .output()
                            .map_err(|e| format!("cannot run cc: {e}"))?;
                        if !out.status.success() {
                            return Err(format!("cc failed: {}", String::from_utf8_lossy(&out.stderr)));
                        }
                    }
                })
            })
            .collect();
        handles
            .into_iter()
            .filter_map(|h| h.join().unwrap_or_else(|_| Err("cc worker panicked".into())).err())
            .collect()
    });
    if let Some(e) = errors.into_iter().next() {
        return Err(e);
    }
    std::fs::write(stamp, b"").map_err(|e| e.to_string())
}

/// Arguments shared by both children.
pub struct CrashArgs {
    /// Extra threads to park.
    pub threads: usize,
    /// Calls each parked thread is deep.
    pub depth: u32,
    /// Libraries to `dlopen` before installing.
    pub libs: Vec<PathBuf>,
    /// The shared timestamp file.
    pub shm: PathBuf,
    /// Ours: the report directory. Peer: the minidumper socket path.
    pub target: PathBuf,
    /// Peer only: the server's pid (allowed to ptrace us).
    #[allow(dead_code)] // read by the peer's child (bench-peer) only
    pub server_pid: u32,
}

impl CrashArgs {
    /// `threads depth libdir nlibs shm target [server_pid]`.
    pub fn parse(a: &[String]) -> Result<CrashArgs, String> {
        let get = |i: usize| a.get(i).ok_or_else(|| format!("missing argument {i}"));
        let num = |i: usize| -> Result<u64, String> { get(i)?.parse().map_err(|e| format!("argument {i}: {e}")) };
        Ok(CrashArgs {
            threads: num(0)? as usize,
            depth: num(1)? as u32,
            libs: lib_paths(Path::new(get(2)?), num(3)? as usize),
            shm: get(4)?.into(),
            target: get(5)?.into(),
            server_pid: if a.len() > 6 { num(6)? as u32 } else { 0 },
        })
    }

    /// Maps the shared timestamp page and loads the libraries.
    pub fn prepare(&self) -> Result<(), String> {
        sys::map_shared(&self.shm).map_err(|e| format!("shared page: {e}"))?;
        sys::dlopen_all(&self.libs)
    }
}
