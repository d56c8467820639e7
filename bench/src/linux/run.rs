//! The orchestrator: builds the libraries, crashes the children, runs the probes and the viewer benchmarks, and
//! prints the figures as Markdown tables (progress goes to standard error).

use super::stats::{self, summarize, Summary};
use super::{minidump, probe, sys, viewer_bench, workload};
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

const USAGE: &str = "\
usage: bench [--quick] [--crashes N] [--threads 8,64,256] [--depth 32] [--libs 300] [--idle-secs S]
             [--viewer PATH] [--llvm-symbolizer BIN] [--work DIR]

Prints capture latency (ours vs crash-handler + minidumper), report sizes, install cost, idle cost and viewer
speed as Markdown tables. --quick: fewer crashes and threads and a short idle window (checks that everything runs).
--work DIR keeps the generated libraries and reports there (default: a temporary directory, removed at the end).";

/// Run settings.
#[derive(Clone, Debug)]
struct Options {
    quick: bool,
    crashes: usize,
    threads: Vec<usize>,
    depth: u32,
    libs: usize,
    idle_secs: f64,
    install_runs: usize,
    render_runs: usize,
    atos_runs: usize,
    atos_addresses: usize,
    /// (g): captures per timed batch, and batches.
    stack_iters: usize,
    stack_batches: usize,
    viewer: PathBuf,
    llvm_symbolizer: String,
    work: Option<PathBuf>,
}

impl Options {
    fn parse(args: &[String]) -> Result<Options, String> {
        let quick = args.iter().any(|a| a == "--quick");
        let exe = std::env::current_exe().map_err(|e| e.to_string())?;
        let mut o = Options {
            quick,
            crashes: if quick { 3 } else { 20 },
            threads: if quick { vec![8, 64] } else { vec![8, 64, 256] },
            depth: 32,
            libs: 300,
            idle_secs: if quick { 1.0 } else { 10.0 },
            install_runs: if quick { 3 } else { 20 },
            render_runs: if quick { 2 } else { 10 },
            atos_runs: if quick { 1 } else { 5 },
            atos_addresses: 10_000,
            stack_iters: if quick { 200 } else { 5000 },
            stack_batches: if quick { 3 } else { 9 },
            viewer: exe.with_file_name("viewer"),
            llvm_symbolizer: "llvm-symbolizer".into(),
            work: None,
        };
        let mut it = args.iter();
        while let Some(a) = it.next() {
            let mut val = || it.next().cloned().ok_or_else(|| format!("{a} needs a value"));
            match a.as_str() {
                "--quick" => {}
                "--crashes" => o.crashes = val()?.parse().map_err(|e| format!("--crashes: {e}"))?,
                "--threads" => {
                    o.threads = val()?
                        .split(',')
                        .map(|t| t.trim().parse::<usize>())
                        .collect::<Result<_, _>>()
                        .map_err(|e| format!("--threads: {e}"))?
                }
                "--depth" => o.depth = val()?.parse().map_err(|e| format!("--depth: {e}"))?,
                "--libs" => o.libs = val()?.parse().map_err(|e| format!("--libs: {e}"))?,
                "--idle-secs" => o.idle_secs = val()?.parse().map_err(|e| format!("--idle-secs: {e}"))?,
                "--viewer" => o.viewer = val()?.into(),
                "--llvm-symbolizer" => o.llvm_symbolizer = val()?,
                "--work" => o.work = Some(val()?.into()),
                "-h" | "--help" => return Err(String::new()),
                other => return Err(format!("unknown argument {other:?}")),
            }
        }
        if o.crashes == 0 || o.threads.is_empty() || o.depth == 0 || o.depth > workload::MAX_DEPTH {
            return Err(format!("need --crashes >= 1, some --threads, 1 <= --depth <= {}", workload::MAX_DEPTH));
        }
        Ok(o)
    }
}

fn progress(msg: &str) {
    eprintln!("bench: {msg}");
}

/// Which crash reporter a child runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Ours at an app's first launch: install creates the reserved report file.
    Ours,
    /// Ours at a later launch: an earlier process of the app ended without a crash and left its unused
    /// reservation, which install claims (handler/src/prealloc.rs, `claim_spare`).
    OursLater,
    Peer,
}

/// One crash, measured and checked.
#[derive(Clone, Debug, Default)]
struct CrashSample {
    /// Fault to durable report, ns.
    latency: f64,
    /// Fault to the child reaped by us (waitpid returned), ns.
    reaped: f64,
    /// Report or minidump size.
    bytes: f64,
    /// Ours: "first launch" or "later launch" (see [`Kind`]); the peer: "peer".
    launch: &'static str,
    /// Threads in the report / minidump.
    threads: usize,
    /// Images / modules.
    images: usize,
    /// Smallest, mean and largest stored frame count of the parked threads (ours only).
    min_frames: usize,
    mean_frames: f64,
    max_frames: usize,
    /// Payload bytes of the THREAD sections and of the IMAGES sections (ours only).
    thread_bytes: f64,
    image_bytes: f64,
    /// Ours only, ns each: fault to handler start (signal delivery), start to thread list read (enumerate), to
    /// every thread stopped (stop; the owner prepares the report meanwhile), to every section written (walk + encode +
    /// write), to durable (commit); then the handling thread's CPU time during walk + encode + write (the rest of
    /// that phase is waiting) and during the stop phase (sending stop signals and preparing the report).
    phases: Option<[f64; PHASES]>,
}

/// Phases of our capture, in order, as [`CrashSample::phases`] holds them.
const PHASES: usize = 7;
const PHASE_NAMES: [&str; PHASES] = [
    "signal delivery",
    "enumerate",
    "stop (report prepared meanwhile)",
    "walk + encode + write",
    "commit (reserved file: fdatasync, rename)",
    "walk + encode + write: CPU of the handling thread",
    "stop: CPU of the handling thread (sending, preparing)",
];

struct Peer {
    child: Child,
    socket: PathBuf,
    dumps: PathBuf,
}

impl Peer {
    fn start(peer_exe: &Path, work: &Path) -> Result<Peer, String> {
        let socket = work.join("peer.sock");
        let dumps = work.join("dumps");
        std::fs::create_dir_all(&dumps).map_err(|e| e.to_string())?;
        let _ = std::fs::remove_file(&socket);
        let mut child = Command::new(peer_exe)
            .arg("__peer-server")
            .arg(&socket)
            .arg(&dumps)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start {}: {e}", peer_exe.display()))?;
        let mut line = String::new();
        if let Some(out) = child.stdout.take() {
            let _ = BufReader::new(out).read_line(&mut line);
        }
        if line.trim() != "ready" {
            let _ = child.kill();
            let _ = child.wait();
            return Err("the minidumper server did not start".into());
        }
        Ok(Peer { child, socket, dumps })
    }

    fn stop(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Ctx<'a> {
    o: &'a Options,
    exe: PathBuf,
    peer_exe: PathBuf,
    work: PathBuf,
    libdir: PathBuf,
    counter: std::cell::Cell<usize>,
}

impl Ctx<'_> {
    fn next_id(&self) -> usize {
        let n = self.counter.get();
        self.counter.set(n + 1);
        n
    }

    /// An earlier launch in report directory `dir`: a process that installs the handler and exits without a
    /// crash, leaving its unused reservation there. Then `syncfs` on that file system, standing for the time
    /// between two launches of an app (seconds to days), in which the kernel writes dirty data and metadata back
    /// on its own (`vm.dirty_expire_centisecs`, 30 s by default); untimed.
    fn leave_spare(&self, dir: &Path) -> Result<(), String> {
        run_probe(
            &self.exe,
            "__install",
            &[self.libdir.display().to_string(), "0".into(), dir.display().to_string(), "handler".into()],
        )?;
        let spares = std::fs::read_dir(dir)
            .map_err(|e| e.to_string())?
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().ends_with(".reserved"))
            .count();
        if spares != 1 {
            return Err(format!("the earlier launch left {spares} reservations in {}, expected 1", dir.display()));
        }
        sys::syncfs_dir(dir)
    }

    /// Crashes one child and checks what it left. Ours: exactly one intact report with every thread captured and
    /// the parked threads walked at least `depth` frames deep. Peer: one minidump with every thread.
    fn crash(
        &self,
        kind: Kind,
        threads: usize,
        depth: u32,
        peer: Option<&Peer>,
        keep: Option<&Path>,
    ) -> Result<CrashSample, String> {
        let id = self.next_id();
        let shm = self.work.join(format!("shm-{id}"));
        std::fs::write(&shm, [0u8; sys::SLOTS * 8]).map_err(|e| e.to_string())?;
        let reports = self.work.join(format!("reports-{id}"));
        if kind == Kind::OursLater {
            self.leave_spare(&reports)?;
        }
        let ours = kind != Kind::Peer;
        let mut cmd = Command::new(if ours { &self.exe } else { &self.peer_exe });
        cmd.arg(if ours { "__crash-ours" } else { "__crash-peer" })
            .arg(threads.to_string())
            .arg(depth.to_string())
            .arg(&self.libdir)
            .arg(self.o.libs.to_string())
            .arg(&shm);
        match (kind, peer) {
            (Kind::Ours | Kind::OursLater, _) => cmd.arg(&reports),
            (Kind::Peer, Some(p)) => cmd.arg(&p.socket).arg(p.child.id().to_string()),
            (Kind::Peer, None) => return Err("a peer crash needs the peer server".into()),
        };
        let out = cmd.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped()).output();
        let reaped_at = sys::now_ns();
        let out = out.map_err(|e| format!("cannot start the crash child: {e}"))?;
        let stamps: Vec<u64> = std::fs::read(&shm)
            .map_err(|e| e.to_string())?
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap_or([0; 8])))
            .collect();
        let _ = std::fs::remove_file(&shm);
        let what = format!("{kind:?} crash with {threads} threads");
        if out.status.signal() != Some(libc::SIGSEGV) {
            return Err(format!(
                "{what}: the child ended with {:?}, not SIGSEGV: {}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        let (fault, done) = (stamps[sys::slot::FAULT], stamps[sys::slot::DONE]);
        if fault == 0 || done < fault {
            return Err(format!("{what}: no completion timestamp (stderr: {})", String::from_utf8_lossy(&out.stderr)));
        }
        let mut s = CrashSample {
            launch: match kind {
                Kind::Ours => "first launch",
                Kind::OursLater => "later launch",
                Kind::Peer => "peer",
            },
            latency: (done - fault) as f64,
            reaped: reaped_at.saturating_sub(fault) as f64,
            ..CrashSample::default()
        };
        if ours {
            let marks = [
                fault,
                stamps[sys::slot::START],
                stamps[sys::slot::LISTED],
                stamps[sys::slot::STOPPED],
                stamps[sys::slot::WRITTEN],
                done,
            ];
            // Every mark present and in order, else no phase figures for this crash.
            if marks.windows(2).all(|w| w[0] != 0 && w[1] >= w[0]) {
                let mut p = [0.0; PHASES];
                for (d, w) in p.iter_mut().zip(marks.windows(2)) {
                    *d = (w[1] - w[0]) as f64;
                }
                let (cpu0, cpu1) = (stamps[sys::slot::STOPPED_CPU], stamps[sys::slot::WRITTEN_CPU]);
                p[PHASES - 2] = cpu1.saturating_sub(cpu0) as f64;
                p[PHASES - 1] = cpu0.saturating_sub(stamps[sys::slot::LISTED_CPU]) as f64;
                s.phases = Some(p);
            }
        }
        match kind {
            Kind::Ours | Kind::OursLater => {
                let files: Vec<PathBuf> = std::fs::read_dir(&reports)
                    .map_err(|e| format!("{what}: {e}"))?
                    .flatten()
                    .map(|e| e.path())
                    .collect();
                let [file] = files.as_slice() else {
                    return Err(format!("{what}: expected one report file, found {files:?}"));
                };
                if file.extension().and_then(|e| e.to_str()) != Some("crashreport") {
                    return Err(format!("{what}: unexpected file {}", file.display()));
                }
                let bytes = std::fs::read(file).map_err(|e| e.to_string())?;
                let d = report_format::decode(&bytes).map_err(|e| format!("{what}: {e}"))?;
                // The report itself: a report written into the reserved file keeps that file's zeros after its
                // end section (format 2.4 padding), which the reporter leaves out of the upload.
                s.bytes = (bytes.len() - d.padding) as f64;
                if !d.problems.is_empty() {
                    return Err(format!("{what}: damaged report: {:?}", d.problems));
                }
                let r = &d.report;
                s.threads = r.threads.len();
                s.images = r.images.len();
                let parked: Vec<usize> = r
                    .threads
                    .iter()
                    .filter(|t| t.name.as_deref().is_some_and(|n| n.starts_with("parked-")))
                    .map(|t| t.frames.len() + t.repeats.iter().map(|x| (x.len * x.count) as usize).sum::<usize>())
                    .collect();
                if s.threads != threads + 1 || parked.len() != threads || r.threads.iter().any(|t| !t.captured) {
                    return Err(format!(
                        "{what}: {} threads in the report ({} parked, {} not captured), expected {}",
                        s.threads,
                        parked.len(),
                        r.threads.iter().filter(|t| !t.captured).count(),
                        threads + 1
                    ));
                }
                s.min_frames = parked.iter().copied().min().unwrap_or(0);
                s.max_frames = parked.iter().copied().max().unwrap_or(0);
                let payload = |k: report_format::framing::SectionKind| -> f64 {
                    d.sections.iter().filter(|x| x.kind == k).map(|x| f64::from(x.len)).sum()
                };
                s.thread_bytes = payload(report_format::framing::SectionKind::Thread);
                s.image_bytes = payload(report_format::framing::SectionKind::Images);
                s.mean_frames = parked.iter().sum::<usize>() as f64 / parked.len().max(1) as f64;
                if s.min_frames < depth as usize {
                    return Err(format!("{what}: a parked thread has {} frames, fewer than {depth}", s.min_frames));
                }
                if s.images < self.o.libs {
                    return Err(format!(
                        "{what}: {} images in the report, expected at least {}",
                        s.images, self.o.libs
                    ));
                }
                if let Some(dest) = keep {
                    std::fs::rename(file, dest).map_err(|e| e.to_string())?;
                }
                let _ = std::fs::remove_dir_all(&reports);
            }
            Kind::Peer => {
                let dumps = peer.map(|p| p.dumps.clone()).unwrap_or_default();
                let files: Vec<PathBuf> = std::fs::read_dir(&dumps)
                    .map_err(|e| format!("{what}: {e}"))?
                    .flatten()
                    .map(|e| e.path())
                    .collect();
                let [file] = files.as_slice() else {
                    return Err(format!("{what}: expected one minidump, found {files:?}"));
                };
                let bytes = std::fs::read(file).map_err(|e| e.to_string())?;
                let _ = std::fs::remove_file(file);
                s.bytes = bytes.len() as f64;
                let m = minidump::summarize_minidump(&bytes).ok_or_else(|| format!("{what}: not a minidump"))?;
                s.threads = m.threads as usize;
                s.images = m.modules as usize;
                if s.threads != threads + 1 {
                    return Err(format!("{what}: {} threads in the minidump, expected {}", s.threads, threads + 1));
                }
            }
        }
        Ok(s)
    }
}

fn run_probe(exe: &Path, role: &str, args: &[String]) -> Result<std::collections::BTreeMap<String, String>, String> {
    let out =
        Command::new(exe).arg(role).args(args).stdin(Stdio::null()).output().map_err(|e| format!("{role}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{role} failed ({:?}): {}", out.status, String::from_utf8_lossy(&out.stderr)));
    }
    Ok(probe::parse_kv(&String::from_utf8_lossy(&out.stdout)))
}

fn num(m: &std::collections::BTreeMap<String, String>, k: &str) -> f64 {
    m.get(k).and_then(|v| v.parse::<f64>().ok()).unwrap_or(f64::NAN)
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "met"
    } else {
        "**missed**"
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines().find_map(|l| l.strip_prefix("model name")?.split_once(':').map(|(_, v)| v.trim().to_string()))
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let cores = std::thread::available_parallelism().map_or(0, |p| p.get());
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mem = probe::kb_field("/proc/meminfo", "MemTotal");
    format!("{cpu}, {cores} cores, {:.1} GiB RAM, Linux {}", mem as f64 / (1u64 << 30) as f64, kernel.trim())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split_whitespace()
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs everything and prints the tables. Exit status 1 when a benchmark could not run or a crash was not captured
/// as expected (never because of a figure).
pub fn main(args: &[String]) -> ExitCode {
    let o = match Options::parse(args) {
        Ok(o) => o,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("bench: {e}");
            }
            eprintln!("{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run(&o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(o: &Options) -> Result<(), String> {
    let started = Instant::now();
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let temp = match &o.work {
        Some(_) => None,
        None => Some(tempfile::Builder::new().prefix("bench-").tempdir().map_err(|e| e.to_string())?),
    };
    let work = o.work.clone().unwrap_or_else(|| temp.as_ref().map(|t| t.path().to_path_buf()).unwrap_or_default());
    std::fs::create_dir_all(&work).map_err(|e| e.to_string())?;
    let libdir = work.join("libs");
    let load_start = loadavg();

    progress(&format!("building {} shared libraries with cc in {}", o.libs, libdir.display()));
    let t = Instant::now();
    workload::build_libs(&libdir, o.libs)?;
    let libs_secs = t.elapsed().as_secs_f64();

    let peer_exe = exe.with_file_name("bench-peer");
    let ctx = Ctx {
        o,
        exe: exe.clone(),
        peer_exe: peer_exe.clone(),
        work: work.clone(),
        libdir: libdir.clone(),
        counter: Default::default(),
    };
    let peer = Peer::start(&peer_exe, &work)?;
    let result = run_with_peer(&ctx, &peer);
    let out = result.and_then(|(mut text, samples64)| {
        // (e) idle: ours in a child, the peer's server measured over the same window.
        progress(&format!("idle window of {} s", o.idle_secs));
        let port = std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port());
        let port = port.map_err(|e| e.to_string())?;
        let pid = peer.child.id().to_string();
        let p0 = probe::proc_figures(&pid);
        let t0 = Instant::now();
        let idle = run_probe(
            &exe,
            "__idle",
            &[work.join("idle").display().to_string(), o.idle_secs.to_string(), port.to_string()],
        )?;
        let peer_secs = t0.elapsed().as_secs_f64();
        let p1 = probe::proc_figures(&pid);
        progress(&format!("idle window of {} s with hang detection", o.idle_secs));
        let idle_hangs = run_probe(
            &exe,
            "__idle",
            &[work.join("idle-hangs").display().to_string(), o.idle_secs.to_string(), port.to_string(), "hangs".into()],
        )?;
        text.push_str(&idle_table(
            o,
            &idle,
            &idle_hangs,
            p1.cpu_ticks - p0.cpu_ticks,
            p1.switches - p0.switches,
            peer_secs,
        ));
        Ok((text, samples64))
    });
    peer.stop();
    let (mut text, samples64) = out?;

    text.push_str(&install_table(&ctx)?);
    text.push_str(&viewer_tables(&ctx, &samples64)?);
    text.push_str(&stacks_table(&ctx)?);

    let header = format!(
        "# Benchmark run ({mode})\n\nMachine: {m}. Load average at start: {load_start}, at end: {le}.\n\
         Workload: {libs} generated shared libraries loaded (built with cc in {libs_secs:.1} s), threads parked {d} \
         distinct calls deep, {c} crashes per row and reporter, alternating ours / peer.\n\
         Peer: crash-handler 0.8.1 + minidumper 0.11.0 (out-of-process server) + minidump-writer 0.13.0.\n\n",
        mode = if o.quick { "quick mode: checks that everything runs; figures are indicative only" } else { "full" },
        m = machine(),
        le = loadavg(),
        libs = o.libs,
        d = o.depth,
        c = o.crashes,
    );
    print!("{header}{text}");
    println!("\nTotal benchmark time: {:.1} s.", started.elapsed().as_secs_f64());
    Ok(())
}

/// (a)–(c): crashes. Returns the text and, for the viewer report, the samples of the 64-thread row (or the
/// largest row below it).
fn run_with_peer(ctx: &Ctx, peer: &Peer) -> Result<(String, Vec<CrashSample>), String> {
    let o = ctx.o;
    let mut rows = String::new();
    let mut phase_rows = String::new();
    let mut later_rows = String::new();
    let mut later_phase_rows = String::new();
    let mut verdicts = String::new();
    let mut for_viewer: Vec<CrashSample> = Vec::new();
    for &threads in &o.threads {
        progress(&format!("{} crashes each with {threads} parked threads", o.crashes));
        let (mut ours, mut later, mut theirs) = (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..o.crashes {
            ours.push(ctx.crash(Kind::Ours, threads, o.depth, Some(peer), None)?);
            later.push(ctx.crash(Kind::OursLater, threads, o.depth, Some(peer), None)?);
            theirs.push(ctx.crash(Kind::Peer, threads, o.depth, Some(peer), None)?);
        }
        let f = |v: &[CrashSample], g: fn(&CrashSample) -> f64| summarize(&v.iter().map(g).collect::<Vec<_>>());
        let (ol, tl) = (f(&ours, |s| s.latency), f(&theirs, |s| s.latency));
        let (or, tr) = (f(&ours, |s| s.reaped), f(&theirs, |s| s.reaped));
        let (ob, tb) = (f(&ours, |s| s.bytes), f(&theirs, |s| s.bytes));
        let frames = f(&ours, |s| s.mean_frames);
        let min_frames = ours.iter().map(|s| s.min_frames).min().unwrap_or(0);
        let max_frames = ours.iter().map(|s| s.max_frames).max().unwrap_or(0);
        let (tb_ours, ib_ours) = (f(&ours, |s| s.thread_bytes), f(&ours, |s| s.image_bytes));
        phase_rows.push_str(&phase_row(threads, &ours));
        later_phase_rows.push_str(&phase_row(threads, &later));
        let ll = f(&later, |s| s.latency);
        later_rows.push_str(&format!(
            "| {threads} | {} | {} | {} | {} | {} | {} |\n",
            stats::ms(ll.median),
            stats::ms(ll.max),
            stats::ms(ol.median),
            stats::ms(tl.median),
            stats::ratio(ll.median, tl.median),
            stats::ratio(ll.max, tl.max),
        ));
        rows.push_str(&format!(
            "| {threads} | {ol_med} | {ol_max} | {tl_med} | {tl_max} | {r_med} | {r_max} | {or_med} | {tr_med} | {ob} | {ob_max} | {tb} | {thr} / {img} | {imgs} / {mods} | {min_frames} / {fr:.1} / {max_frames} |\n",
            ol_med = stats::ms(ol.median),
            ol_max = stats::ms(ol.max),
            tl_med = stats::ms(tl.median),
            tl_max = stats::ms(tl.max),
            r_med = stats::ratio(ol.median, tl.median),
            r_max = stats::ratio(ol.max, tl.max),
            or_med = stats::ms(or.median),
            tr_med = stats::ms(tr.median),
            ob = ob.median,
            ob_max = ob.max,
            tb = tb.median,
            imgs = ours[0].images,
            mods = theirs[0].images,
            fr = frames.median,
            thr = tb_ours.median,
            img = ib_ours.median,
        ));
        // Issue 14's targets: fault to durable report, median, per thread count.
        let latency_target_ms = match threads {
            8 => Some(0.6),
            64 => Some(1.4),
            256 => Some(4.8),
            _ => None,
        };
        for (launch, l) in [("first launch", &ol), ("later launch", &ll)] {
            if let Some(t) = latency_target_ms {
                verdicts.push_str(&format!(
                    "| (a) median ≤ {t} ms at {threads} threads, {launch} | median {} ms, max {} ms | {} |\n",
                    stats::ms(l.median),
                    stats::ms(l.max),
                    verdict(l.median <= t * 1e6),
                ));
            }
            verdicts.push_str(&format!(
                "| (b) ≥ 5x faster than the peer, {threads} threads, {launch} (median and max) | peer/ours = {:.2} (median), {:.2} (max) | {} |\n",
                tl.median / l.median,
                tl.max / l.max,
                verdict(tl.median >= 5.0 * l.median && tl.max >= 5.0 * l.max)
            ));
        }
        if threads == 64 {
            // The target's exact shape: 64 threads of 32 stored frames each (parked less deep by the thread
            // start-up frames the walk also finds).
            let extra = min_frames.saturating_sub(o.depth as usize) as u32;
            let d32 = 32u32.saturating_sub(extra).max(1);
            let n = o.crashes.min(5);
            progress(&format!("{n} crashes with 64 threads of 32 frames (parked {d32} deep) for the size target"));
            let mut exact = Vec::new();
            for _ in 0..n {
                exact.push(ctx.crash(Kind::Ours, 64, d32, None, None)?);
            }
            let eb = f(&exact, |s| s.bytes);
            let ef = exact.iter().map(|s| s.min_frames).min().unwrap_or(0);
            let exact_row = format!(
                "| (c) ≤ 24 KiB at 64 threads × 32 frames, {} images: parked {d32} deep, {ef} stored frames per parked thread at the least ({n} crashes) | median {} bytes, max {} bytes | {} |\n",
                o.libs,
                eb.median,
                eb.max,
                verdict(eb.max <= 24576.0),
            );
            verdicts.insert_str(
                0,
                &(format!(
                    "| (c, for reference) 64 threads, {} images: the workload above ({} stored frames per parked thread at the least) | median {} bytes, max {} bytes | - |\n",
                    o.libs,
                    min_frames,
                    ob.median,
                    ob.max,
                ) + &exact_row),
            );
        }
        if threads == 64 || for_viewer.is_empty() {
            for_viewer = ours;
        }
    }
    let mut text = String::from(
        "## (a)–(c) Capture latency and report size\n\n\
         Latency: from the instant before the faulting store (CLOCK_MONOTONIC written to a shared page) to the report \
         durable on disk. Ours: the handler's `BeforeReraise` test hook, which runs after the report was written, \
         made durable and renamed (the first report of a process: written into the file reserved at install, \
         fdatasync'd, renamed; without a reservation: fsync'd, renamed, its directory fsync'd). Peer: crash-handler's callback right after minidumper's \
         `request_dump` returns, i.e. after the server wrote the minidump, fsync'd it, renamed it, fsync'd the \
         directory and acknowledged. \"Reaped\" is from the fault to our `waitpid` returning (the process is gone).\n\n\
         | threads | ours median ms | ours max ms | peer median ms | peer max ms | ours/peer median | ours/peer max | ours reaped median ms | peer reaped median ms | our report bytes median | our report bytes max | minidump bytes median | our THREAD / IMAGES section bytes (median) | images (ours / minidump modules) | frames per parked thread in our reports (min / median of means / max) |\n\
         |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    text.push_str(&rows);
    text.push_str(&format!(
        "\nA later launch (same run, same crashes per row, interleaved): before each crash child, an earlier process \
         installed the handler in the same report directory and exited without a crash, leaving its unused \
         reservation, then `syncfs` stood for the time between two launches (the kernel writes dirty data back \
         within about 30 s on its own); the crash child's install claimed that file, and its report went into it. \
         Ours above is an app's first launch (install creates the reservation, whose block allocation and inode the \
         crash's `fdatasync` then also writes).\n\n\
         | threads | ours later launch median ms | max ms | ours first launch median ms | peer median ms | later/peer median | later/peer max |\n\
         |---|---|---|---|---|---|---|\n{later_rows}"
    ));
    text.push_str(&format!(
        "\nWhere our time goes, per phase (median / max ms over the crashes with every phase mark; marks are the \
         handler's test hooks, CLOCK_MONOTONIC): {}. Walk, encode and write are interleaved per thread, so they are one \
         phase.\n\n| launch | threads | crashes | {} |\n|---|---|---|{}\n{phase_rows}{later_phase_rows}",
        PHASE_NAMES.join(", "),
        PHASE_NAMES.join(" | "),
        "---|".repeat(PHASES),
    ));
    let (floor, floor_gap) = (
        commit_floor(&ctx.work, 65536, o.crashes, Duration::ZERO)?,
        commit_floor(&ctx.work, 65536, o.crashes, FLOOR_GAP)?,
    );
    let (reserved, reserved_gap) = (
        reserved_commit_floor(&ctx.work, 20_000, 65536, o.crashes, Duration::ZERO)?,
        reserved_commit_floor(&ctx.work, 20_000, 65536, o.crashes, FLOOR_GAP)?,
    );
    let cell = |s: &Summary| format!("{} / {}", stats::ms(s.median), stats::ms(s.max));
    text.push_str(&format!(
        "\nDisk floors on this machine (in-process, no crash), {n} times each, median / max ms. A new file (the peer's \
         commit, and ours when no reservation is left): write 65536 bytes to a temporary file, fsync it, rename it, \
         fsync the directory. Our report's commit into its reservation: 20,000 bytes over a 65,536-byte file of zeros \
         written and synced beforehand, fdatasync, rename (the zeros beyond the report stay). Each timed back to back \
         with the previous sync, and after a {gap} ms pause since it, as a crash meets the disk (an app does not sync \
         just before it crashes; on this VM a sync right after another is about 4x cheaper).\n\n\
         | floor | back to back | after {gap} ms |\n|---|---|---|\n\
         | new file: write, fsync, rename, directory fsync | {} | {} |\n\
         | reservation: overwrite, fdatasync, rename | {} | {} |\n",
        cell(&floor),
        cell(&floor_gap),
        cell(&reserved),
        cell(&reserved_gap),
        n = floor.n,
        gap = FLOOR_GAP.as_millis(),
    ));
    text.push_str("\n### Targets (crashes)\n\n| target | figure | verdict |\n|---|---|---|\n");
    text.push_str(&verdicts);
    text.push('\n');
    Ok((text, for_viewer))
}

/// The pause before a timed disk floor: about what separates a crash's commit from the file system's previous
/// sync in an app (much longer in a real one), and enough that a sync is no longer back to back with the last.
const FLOOR_GAP: Duration = Duration::from_millis(200);

/// One row of the phase table: `launch` (first or later) and the median / max of each phase over the crashes
/// of `samples` that have every phase mark (empty when none has).
fn phase_row(threads: usize, samples: &[CrashSample]) -> String {
    let with_phases: Vec<[f64; PHASES]> = samples.iter().filter_map(|s| s.phases).collect();
    if with_phases.is_empty() {
        return String::new();
    }
    let cells: Vec<String> = (0..PHASES)
        .map(|k| {
            let p = summarize(&with_phases.iter().map(|p| p[k]).collect::<Vec<_>>());
            format!("{} / {}", stats::ms(p.median), stats::ms(p.max))
        })
        .collect();
    format!("| {} | {threads} | {} | {} |\n", samples[0].launch, with_phases.len(), cells.join(" | "))
}

/// Times the durable commit both reporters end with: write `size` bytes to a temporary file, fsync, rename, fsync
/// the directory; `gap` (untimed) before each, since the previous sync of this loop (see [`FLOOR_GAP`]).
fn commit_floor(work: &Path, size: usize, runs: usize, gap: Duration) -> Result<Summary, String> {
    use std::io::Write;
    let dir = work.join("floor");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let data = vec![0x5au8; size];
    let mut samples = Vec::new();
    for i in 0..runs {
        let (tmp, fin) = (dir.join(format!(".{i}.tmp")), dir.join(format!("{i}.report")));
        std::thread::sleep(gap);
        let t0 = Instant::now();
        let mut f = std::fs::File::create(&tmp).map_err(|e| e.to_string())?;
        f.write_all(&data).and_then(|_| f.sync_all()).map_err(|e| e.to_string())?;
        drop(f);
        std::fs::rename(&tmp, &fin).map_err(|e| e.to_string())?;
        std::fs::File::open(&dir).and_then(|d| d.sync_all()).map_err(|e| e.to_string())?;
        samples.push(t0.elapsed().as_nanos() as f64);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(summarize(&samples))
}

/// Times the commit of a report written into a reserved file (the handler's `FileKind::Reserved`): a file of
/// `reserved` zero bytes written and synced beforehand (untimed), then, timed, `size` bytes written at offset 0,
/// `fdatasync`, rename; no directory fsync, and the zeros beyond `size` stay (format 2.4 zero padding). `gap`
/// (untimed) between the zeros' sync and the timed part (see [`FLOOR_GAP`]).
fn reserved_commit_floor(
    work: &Path,
    size: usize,
    reserved: usize,
    runs: usize,
    gap: Duration,
) -> Result<Summary, String> {
    use std::io::Write;
    let dir = work.join("floor-reserved");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let data = vec![0x5au8; size];
    let mut samples = Vec::new();
    for i in 0..runs {
        let (res, fin) = (dir.join(format!(".{i}.reserved")), dir.join(format!("{i}.report")));
        let mut f =
            std::fs::File::options().read(true).write(true).create_new(true).open(&res).map_err(|e| e.to_string())?;
        f.write_all(&vec![0u8; reserved]).and_then(|_| f.sync_all()).map_err(|e| e.to_string())?;
        std::fs::File::open(&dir).and_then(|d| d.sync_all()).map_err(|e| e.to_string())?;
        std::thread::sleep(gap);
        let t0 = Instant::now();
        std::os::unix::fs::FileExt::write_all_at(&f, &data, 0).map_err(|e| e.to_string())?;
        f.sync_data().map_err(|e| e.to_string())?; // fdatasync(2) on Linux
        drop(f);
        std::fs::rename(&res, &fin).map_err(|e| e.to_string())?;
        samples.push(t0.elapsed().as_nanos() as f64);
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(summarize(&samples))
}

fn idle_table(
    o: &Options,
    m: &std::collections::BTreeMap<String, String>,
    h: &std::collections::BTreeMap<String, String>,
    peer_ticks: u64,
    peer_sw: u64,
    peer_secs: f64,
) -> String {
    let cpu_us = num(m, "cpu_us");
    let switches = num(m, "switches");
    let hz = num(m, "tick_hz");
    format!(
        "## (e) Idle cost\n\n\
         Ours: a child enables the reporter (`Reporter::builder(dir).upload_url(..).enable()`, upload URL a closed \
         loopback port), waits for the background upload to give up, then sleeps {w} s. CPU time of the whole \
         process from `getrusage(RUSAGE_SELF)` (µs) and `/proc/self/stat` (ticks of 1/{hz} s); context switches \
         summed over `/proc/self/task/*/status` (the measuring thread's own sleep is 1). Peer: the idle minidumper \
         server process over the same window ({ps:.1} s, `/proc/<pid>/stat`, all its threads).\n\n\
         | | window s | CPU | context switches | threads | installed |\n|---|---|---|---|---|---|\n\
         | ours (reporter enabled, idle) | {w} | {cpu_us} µs ({ticks} ticks) | {switches} | {threads} | {inst} |\n\
         | ours + hang detection (`HangConfig::default()`: 2 s threshold, 500 ms slow frames, watchdog period {hp} ms; the watched loop idle) | {w} | {hcpu} µs ({hticks} ticks) | {hsw} | {hthreads} | {hinst} |\n\
         | peer (minidumper server, idle) | {ps:.1} | {pt} ticks ({pms:.0} ms) | {peer_sw} | - | - |\n\n\
         | target | figure | verdict |\n|---|---|---|\n\
         | (e) zero steady-state cost: no thread but the measuring one, no wakeup but its own sleep, 0 CPU ticks | {threads} thread(s), {switches} context switch(es), {ticks} ticks, {cpu_us} µs (getrusage) in {w} s | {v} |\n\
         | (e) hang detection costs one timer wake-up per period and nothing else while nothing stalls: at most {hmax:.0} switches ({w} s / {hp} ms + the measuring sleep, 10% slack), no hang report | {hsw} context switch(es), {hticks} ticks, {hcpu} µs, {hhangs} hang(s), {hslow} slow frame(s) | {hv} |\n\n",
        w = o.idle_secs,
        ticks = num(m, "cpu_ticks"),
        threads = num(m, "threads"),
        inst = m.get("installed").map_or("?", String::as_str),
        ps = peer_secs,
        pt = peer_ticks,
        pms = peer_ticks as f64 * 1000.0 / hz,
        v = verdict(num(m, "cpu_ticks") == 0.0 && switches <= 1.0 && num(m, "threads") == 1.0),
        hp = num(h, "period_ms"),
        hcpu = num(h, "cpu_us"),
        hticks = num(h, "cpu_ticks"),
        hsw = num(h, "switches"),
        hthreads = num(h, "threads"),
        hinst = h.get("installed").map_or("?", String::as_str),
        hhangs = num(h, "hangs"),
        hslow = num(h, "slow_frames"),
        hmax = hang_max_switches(o.idle_secs, num(h, "period_ms")),
        hv = verdict(
            num(h, "switches") <= hang_max_switches(o.idle_secs, num(h, "period_ms"))
                && num(h, "hangs") == 0.0
                && num(h, "slow_frames") == 0.0
        ),
    )
}

/// Context switches hang detection may cost in `secs` seconds at a wake-up every `period_ms`: one per period plus
/// the measuring thread's own sleep, with 10 % slack for timer slack and a period boundary at each end.
fn hang_max_switches(secs: f64, period_ms: f64) -> f64 {
    (secs * 1000.0 / period_ms + 2.0) * 1.1
}

fn install_table(ctx: &Ctx) -> Result<String, String> {
    let o = ctx.o;
    let mut rows = String::new();
    let mut verdicts = String::new();
    for (what, later) in [("handler", false), ("handler", true), ("reporter", false)] {
        let launch = if later { "later launch" } else { "first launch" };
        progress(&format!("{} install probes ({what}, {launch})", o.install_runs));
        let mut runs = Vec::new();
        for _ in 0..o.install_runs {
            let dir = ctx.work.join(format!("install-{}", ctx.next_id()));
            if later {
                ctx.leave_spare(&dir)?;
            }
            let m = run_probe(
                &ctx.exe,
                "__install",
                &[ctx.libdir.display().to_string(), o.libs.to_string(), dir.display().to_string(), what.into()],
            )?;
            let _ = std::fs::remove_dir_all(&dir);
            runs.push(m);
        }
        let f = |k: &str| summarize(&runs.iter().map(|m| num(m, k)).collect::<Vec<_>>());
        let (t, heap, mapped, stacks) = (f("install_ns"), f("heap_live"), f("mapped"), f("stacks"));
        let (maps, rss, anon, images) = (f("maps_delta"), f("rss_delta"), f("anon_delta"), f("images"));
        let label = match (what, later) {
            ("handler", false) => "`handler::install`, first launch (creates the reserved report file)",
            ("handler", true) => "`handler::install`, later launch (claims the reservation an earlier process left)",
            _ => "`Reporter::enable` (no upload URL), first launch",
        };
        rows.push_str(&format!(
            "| {label} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            stats::ms(t.median),
            stats::ms(t.max),
            stats::bytes(heap.max),
            stats::bytes(mapped.max),
            stats::bytes(stacks.max),
            stats::bytes(heap.max + mapped.max + stacks.max),
            stats::bytes(maps.median),
            stats::bytes(rss.median),
            stats::bytes(anon.median),
            images.median
        ));
        if what == "handler" {
            verdicts.push_str(&format!(
                "| (d) install ≤ 2 ms with {} libraries loaded, {launch} | median {} ms, max {} ms | {} |\n",
                o.libs,
                stats::ms(t.median),
                stats::ms(t.max),
                verdict(t.max <= 2e6),
            ));
            if !later {
                verdicts.push_str(&format!(
                    "| (d) ≤ 2 MiB preallocated | {} heap + {} tables + {} stacks | {} |\n",
                    stats::bytes(heap.max),
                    stats::bytes(mapped.max),
                    stats::bytes(stacks.max),
                    verdict(heap.max + mapped.max + stacks.max <= 2.0 * 1024.0 * 1024.0),
                ));
            }
        }
    }
    Ok(format!(
        "## (d) Install cost\n\n\
         Each figure is one fresh process: it `dlopen`s the {libs} libraries, then times one call ({n} processes). \
         A later launch: an earlier process installed the handler in the same report directory and exited, leaving \
         its unused reservation, then `syncfs` (untimed), as for the crashes. \
         Heap: bytes the call left allocated, counted by a counting global allocator (Rust allocations; the handler \
         makes no C allocations). Tables: the zero-filled tables and buffers install maps outside the allocator \
         (`handler::preallocated_mapped_bytes`; the image lists become resident only as far as they are filled, \
         the buffers every crash writes at once). Stacks: the alternate signal stack and the crash stack install \
         `mmap`s (`MAP_NORESERVE`) and the walk stacks of stacks on demand (one per `Config::capture_walkers`), \
         computed from the default `Config` (sizes plus one guard page each); they are virtual until touched. Mapping \
         growth: `/proc/self/maps` after minus before (includes the tables, the stacks and the heap's own `mmap`s \
         for large blocks, so it overlaps the other columns). RSS growth: `VmRSS` after minus before, which also \
         counts the code pages install runs for the first time; anonymous: `RssAnon` after minus before, the memory \
         the call made resident (medians).\n\n\
         | call | median ms | max ms | heap preallocated | tables mapped | stacks mapped | total preallocated | \
         mapping growth | RSS growth | anonymous RSS growth | images in the table |\n\
         |---|---|---|---|---|---|---|---|---|---|---|\n{rows}\n\
         | target | figure | verdict |\n|---|---|---|\n{verdicts}\n",
        libs = o.libs,
        n = o.install_runs,
    ))
}

fn viewer_tables(ctx: &Ctx, samples: &[CrashSample]) -> Result<String, String> {
    let o = ctx.o;
    // A report of 64 parked threads 64 frames deep: deepen the parking by what the 32-deep runs showed beyond the
    // parked calls (thread start-up frames), taken from the shortest walk (some walks run on past the thread's
    // start; see BENCHMARKS.md).
    let min = samples.iter().map(|s| s.min_frames).min().unwrap_or(o.depth as usize);
    let extra = min.saturating_sub(o.depth as usize) as u32;
    let depth = 64u32.saturating_sub(extra).clamp(1, workload::MAX_DEPTH);
    progress(&format!("viewer: crashing 64 threads parked {depth} deep for a 64 x 64 report"));
    let dir = ctx.work.join("viewer");
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let report_path = dir.join("64x64.crashreport");
    let s = ctx.crash(Kind::Ours, 64, depth, None, Some(&report_path))?;
    let report = std::fs::read(&report_path).map_err(|e| e.to_string())?;

    progress(&format!("viewer: {} renders", o.render_runs));
    let mut lib = Vec::new();
    let mut named = 0;
    for _ in 0..o.render_runs {
        let (ns, n) = viewer_bench::render_once(&report, &ctx.exe)?;
        lib.push(ns);
        named = n;
    }
    let warm = summarize(&viewer_bench::render_warm(&report, &ctx.exe, o.render_runs)?);
    let mut cli = Vec::new();
    for _ in 0..o.render_runs {
        cli.push(viewer_bench::render_cli_once(&o.viewer, &report_path, &ctx.exe)?);
    }
    let expected = 64 * depth as usize;
    if named < expected {
        return Err(format!("viewer: only {named} of {expected} parked frames were symbolicated"));
    }
    let (lib, cli) = (summarize(&lib), summarize(&cli));

    progress(&format!("viewer atos vs {}: {} addresses, {} runs", o.llvm_symbolizer, o.atos_addresses, o.atos_runs));
    let (addrs, base) = viewer_bench::sample_addresses(&ctx.exe, o.atos_addresses, 0x9e37_79b9_7f4a_7c15)?;
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let (mut ours_res, mut theirs_res) = (0, 0);
    for _ in 0..o.atos_runs {
        let a = viewer_bench::viewer_atos(&o.viewer, &ctx.exe, base, &addrs)?;
        let b = viewer_bench::llvm_symbolizer(&o.llvm_symbolizer, &ctx.exe, &addrs)?;
        ours.push(a.ns);
        theirs.push(b.ns);
        (ours_res, theirs_res) = (a.resolved, b.resolved);
    }
    let (ours, theirs): (Summary, Summary) = (summarize(&ours), summarize(&theirs));
    let file_size = std::fs::metadata(&ctx.exe).map(|m| m.len()).unwrap_or(0);
    Ok(format!(
        "## (f) Viewer\n\n\
         Render: a real report of 64 parked threads ({minf} to {maxf} frames, {frames:.1} on average; parked {depth} \
         calls deep) \
         plus the crashed main thread, {bytes} bytes, symbolicated against the benchmark binary ({fsize} bytes, \
         line tables) and rendered as Apple crash text. Library: `viewer::load` + a fresh `SymbolStore` + \
         `render_loaded` in this process ({n} runs; the debug file mapped, as the `viewer` command maps it, and parsed \
         every time). Command line: \
         `viewer REPORT --symbols BIN --no-auto-symbols` as a process. {named} parked frames came out named.\n\n\
         | render | median ms | max ms |\n|---|---|---|\n\
         | library, cold (debug file mapped and parsed in each run) | {lm} | {lx} |\n\
         | library, warm (store already holds the debug file and the previous render's answers) | {wm} | {wx} |\n\
         | `viewer` command | {cm} | {cx} |\n\n\
         Batch symbolication: {na} addresses sampled inside function symbols of the benchmark binary (fixed seed), \
         `viewer atos -o BIN -l BASE` against `llvm-symbolizer --obj=BIN` (both with the addresses on standard \
         input, one per line; default options: inlined frames, demangling), wall time of the whole process, {runs} \
         runs each, alternating.\n\n\
         | symbolizer | median ms | max ms | addresses resolved |\n|---|---|---|---|\n\
         | `viewer atos` | {om} | {ox} | {ours_res} |\n| `{llvm}` | {tm} | {tx} | {theirs_res} |\n\n\
         | target | figure | verdict |\n|---|---|---|\n\
         | (f) render 64 x 64 in <= 20 ms in-process, cold | {lm} ms (median) | {vc} |\n\
         | (f) render 64 x 64 in <= 20 ms in-process, warm | {wm} ms (median) | {vw} |\n\
         | (f) batch symbolication at least 2x faster than llvm-symbolizer | viewer/llvm = {ratio} (median) | {v} |\n",
        frames = s.mean_frames,
        minf = s.min_frames,
        maxf = s.max_frames,
        bytes = report.len() - report_format::decode(&report).map_or(0, |d| d.padding),
        fsize = file_size,
        n = o.render_runs,
        lm = stats::ms(lib.median),
        lx = stats::ms(lib.max),
        cm = stats::ms(cli.median),
        cx = stats::ms(cli.max),
        na = addrs.len(),
        runs = o.atos_runs,
        om = stats::ms(ours.median),
        ox = stats::ms(ours.max),
        tm = stats::ms(theirs.median),
        tx = stats::ms(theirs.max),
        llvm = o.llvm_symbolizer,
        ratio = stats::ratio(ours.median, theirs.median),
        v = verdict(ours.median * 2.0 <= theirs.median),
        wm = stats::ms(warm.median),
        wx = stats::ms(warm.max),
        vc = verdict(lib.median <= 20e6),
        vw = verdict(warm.median <= 20e6),
    ))
}

/// (g) Stacks on demand: `bench __stacks` in a child (see `stacks_bench.rs`).
fn stacks_table(ctx: &Ctx) -> Result<String, String> {
    use super::stacks_bench::DEPTHS;
    let o = ctx.o;
    progress(&format!(
        "stacks on demand: {} captures x {} batches per method and depth",
        o.stack_iters, o.stack_batches
    ));
    let dir = ctx.work.join("stacks");
    let m = run_probe(
        &ctx.exe,
        "__stacks",
        &[o.stack_iters.to_string(), o.stack_batches.to_string(), dir.display().to_string()],
    )?;
    let _ = std::fs::remove_dir_all(&dir);
    let unw_missing = m.get("unw").is_none_or(|v| v == "missing");
    let ns = |v: f64| if v.is_nan() { "-".to_string() } else { format!("{v:.0}") };
    let x =
        |a: f64, b: f64| if a.is_nan() || b.is_nan() || b <= 0.0 { "-".to_string() } else { format!("{:.1}", a / b) };
    let mut rows = String::new();
    let mut sym_rows = String::new();
    let mut capture_ok = true;
    let mut sym_ok = true;
    let mut worst_capture = f64::INFINITY;
    let mut worst_sym = f64::INFINITY;
    for d in DEPTHS {
        let g = |k: &str| num(&m, &format!("{d}.{k}"));
        let (ours, glibc, unw) = (g("ours_ns"), g("glibc_ns"), g("unw_ns"));
        let same = match g("unw_same") {
            1.0 => "yes",
            0.0 => "**no**",
            _ => "-",
        };
        rows.push_str(&format!(
            "| {d} | {} | {} | {} | {} | {} | {} | {} | {same} |\n",
            g("frames"),
            ns(ours),
            ns(glibc),
            ns(unw),
            x(glibc, ours),
            x(unw, ours),
            ns(ours / g("frames")),
        ));
        let (so, sf, sg) = (g("sym_ours_ns"), g("sym_ours_fmt_ns"), g("sym_glibc_ns"));
        sym_rows.push_str(&format!(
            "| {d} | {} | {} | {} | {} | {} |\n",
            g("frames"),
            ns(so),
            ns(sf),
            ns(sg),
            x(sg, so),
        ));
        capture_ok &= glibc >= 5.0 * ours;
        sym_ok &= sg >= 20.0 * so;
        worst_capture = worst_capture.min(glibc / ours);
        worst_sym = worst_sym.min(sg / so);
    }
    Ok(format!(
        "## (g) Stacks on demand\n\n\
         The current thread's stack, captured in a child process that installed the handler, at the bottom of a chain \
         of 16 distinct non-inlined functions calling each other round-robin to the given depth (plus the probe's own \
         frames down to `_start`: the frame counts below), the same stack {iters} times per timed batch, {batches} \
         batches, median batch. Time is the capturing thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) per capture, \
         so another process's load on this shared machine does not count. Ours: `handler::stacks::current_stack` \
         (DWARF CFI rows cached per walker, then the fast path's recipes). Theirs: glibc `backtrace(3)` (libgcc's \
         unwinder) and libunwind's `unw_backtrace` ({unw}, `dlopen`ed). Every capture of ours lists the same callers \
         as `backtrace(3)` (checked, else the benchmark fails); libunwind's are compared too. Heap allocations in all \
         of our timed-batch captures: {allocs}. Our first capture in the process (empty caches: `.eh_frame_hdr` \
         searches and CFI evaluation through the fault-proof reader): {cold} ns; glibc's first `backtrace`: \
         {cold_glibc} ns.\n\n\
         | depth | frames | ours ns | `backtrace(3)` ns | `unw_backtrace` ns | backtrace / ours | libunwind / ours | ours ns per frame | libunwind same frames as `backtrace(3)` |\n\
         |---|---|---|---|---|---|---|---|---|\n{rows}\n\
         Symbolicated, the same stack over and over: ours = `current_stack` + `SymbolCache::lookup_return_address` for \
         every frame (image, symbol, offset: borrowed strings; names from the images' `.symtab`/`.dynsym`, resolved \
         once, then one hash lookup per address); ours + formatting = the same, each frame also written into a \
         reused `String` as `image(symbol+0xoff) [addr]`; theirs = `backtrace(3)` + `backtrace_symbols(3)` \
         (`dladdr` per address, one `malloc`ed block of strings) + `free`.\n\n\
         | depth | frames | ours ns | ours + formatting ns | `backtrace` + `backtrace_symbols` ns | theirs / ours |\n\
         |---|---|---|---|---|---|\n{sym_rows}\n\
         | target | figure | verdict |\n|---|---|---|\n\
         | (g) capture at least 5x faster than `backtrace(3)` at 16, 64 and 256 frames | worst ratio {wc:.1}x | {vc} |\n\
         | (g) symbolicated capture at least 20x faster than `backtrace_symbols(3)`, repeated stacks | worst ratio {ws:.1}x | {vs} |\n\n",
        iters = o.stack_iters,
        batches = o.stack_batches,
        unw = if unw_missing { "not installed: rows show -" } else { "libunwind.so.8" },
        allocs = num(&m, "ours_allocs"),
        cold = ns(num(&m, "cold_ns")),
        cold_glibc = ns(num(&m, "cold_glibc_ns")),
        wc = worst_capture,
        ws = worst_sym,
        vc = verdict(capture_ok),
        vs = verdict(sym_ok),
    ))
}
