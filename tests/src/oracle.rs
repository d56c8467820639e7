//! An independent oracle for stack frames: run a crash client under `gdb`, let gdb stop at the fatal signal
//! *before* our handler runs, dump every thread's backtrace (gdb unwinds with DWARF CFI and full debug info), then
//! let the signal through so our handler writes its report; compare the report's frames with gdb's, frame by
//! frame, for every thread.
//!
//! What is compared: raw addresses. Frame 0 is the PC, frame k > 0 the return address; gdb's `frame.pc()` for an
//! outer frame is that same return address. Threads are matched by LWP id (gdb) == thread id (report). Every
//! difference the comparison accepts is one of the [`Tolerated`] cases, each with its reason; anything else fails.
//!
//! gdb runs the client with `set backtrace past-main on` and `past-entry on`, so its chains go on to the real
//! ends (`_start`, `clone3`) rather than stopping at `main`; our report must end where gdb's ends.
//!
//! Linux only (ptrace). gdb 13 with Python is what it is written and checked against.

use crate::Symbolizer;
use report_format::model::{Image, Report, Thread};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The gdb Python driver. Settings, then `run`; at the first stop (the fatal signal, before our handler runs) it
/// writes every thread's frames, then continues until the process is gone (our handler runs, re-raises, the
/// process dies). Output lines (file named by `ORACLE_GDB_OUT`):
/// `FIRST_STOP <signal name>` or `FIRST_STOP none`; `THREAD <lwp> <1 if gdb's selected thread>`;
/// `FRAME <lwp> <pc hex> <normal|inline|sigtramp|tailcall|...> <name>`; `UNWIND_END <lwp> <gdb's stop reason>`;
/// `REGS <lwp> <orig_rax> <rax>` (x86_64); `EXIT_SIGNAL <n>` / `EXIT_CODE <n>`; `ERROR <text>`.
const GDB_SCRIPT: &str = r#"
import gdb, os

out = open(os.environ["ORACLE_GDB_OUT"], "w")
stops = []

def on_stop(ev):
    if isinstance(ev, gdb.SignalEvent):
        stops.append(ev.stop_signal)
    else:
        stops.append("other:" + type(ev).__name__)

gdb.events.stop.connect(on_stop)

KINDS = {gdb.NORMAL_FRAME: "normal", gdb.INLINE_FRAME: "inline", gdb.SIGTRAMP_FRAME: "sigtramp",
         gdb.TAILCALL_FRAME: "tailcall", gdb.DUMMY_FRAME: "dummy", gdb.ARCH_FRAME: "arch",
         gdb.SENTINEL_FRAME: "sentinel"}

def dump():
    inf = gdb.selected_inferior()
    sel = gdb.selected_thread()
    for th in sorted(inf.threads(), key=lambda t: t.ptid[1]):
        th.switch()
        lwp = th.ptid[1]
        out.write("THREAD %d %d\n" % (lwp, 1 if th.ptid == sel.ptid else 0))
        f = gdb.newest_frame()
        try:
            # x86_64: the system call the thread is in (orig_rax, -1 when none) and its result so far (rax).
            out.write("REGS %d %d %d\n" % (lwp, int(f.read_register("orig_rax")), int(f.read_register("rax"))))
        except (gdb.error, ValueError):
            pass
        n = 0
        last = f
        while f is not None and n < 4096:
            out.write("FRAME %d %#x %s %s\n" % (lwp, f.pc(), KINDS.get(f.type(), str(f.type())), f.name() or "??"))
            last = f
            try:
                f = f.older()
            except gdb.error as e:
                out.write("ERROR thread %d frame %d: %s\n" % (lwp, n, e))
                break
            n += 1
        out.write("UNWIND_END %d %s\n" % (lwp, gdb.frame_stop_reason_string(last.unwind_stop_reason())))
    sel.switch()

for c in ["set pagination off", "set confirm off", "set startup-with-shell off",
          "set disable-randomization off", "set backtrace past-main on", "set backtrace past-entry on",
          "set backtrace limit unlimited", "set print thread-events off"]:
    gdb.execute(c)
try:
    gdb.execute("set debuginfod enabled off")
except gdb.error:
    pass
# Signals that must reach the client without stopping gdb: our handler's stop signal (SIGRTMAX-4 by default, any
# real-time signal if configured), glibc's internal SIGRTMIN ones, and ordinary asynchronous ones.
gdb.execute("handle SIGPIPE SIGALRM SIGCHLD SIGUSR1 SIGUSR2 SIGWINCH SIGPROF SIGURG nostop noprint pass")
gdb.execute("handle " + " ".join("SIG%d" % n for n in range(32, 65)) + " nostop noprint pass")

try:
    gdb.execute("run")
except gdb.error as e:
    out.write("ERROR run: %s\n" % e)
if stops and not str(stops[0]).startswith("other:"):
    out.write("FIRST_STOP %s\n" % stops[0])
    dump()
else:
    out.write("FIRST_STOP none %s\n" % (stops[0] if stops else ""))
# From here on every signal goes straight to the client: our handler runs, re-raises, the process dies. (Stopping
# again at the re-raised signal and continuing from there races with the dying threads in gdb 13: "Couldn't get
# registers: No such process", and gdb loses track of the exit.)
gdb.execute("handle all nostop noprint pass")
for attempt in range(4):
    if gdb.selected_inferior().pid == 0:
        break
    try:
        gdb.execute("continue")
    except gdb.error as e:
        out.write("ERROR continue: %s\n" % e)
if gdb.selected_inferior().pid != 0:
    out.write("ERROR still alive after 4 continues\n")
    gdb.execute("kill")
sig = gdb.convenience_variable("_exitsignal")
code = gdb.convenience_variable("_exitcode")
if sig is not None:
    out.write("EXIT_SIGNAL %d\n" % int(sig))
elif code is not None:
    out.write("EXIT_CODE %d\n" % int(code))
out.close()
"#;

/// How gdb classified a frame (`gdb.Frame.type()`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FrameKind {
    /// An ordinary frame.
    Normal,
    /// A function inlined into the next (outer) frame: same pc as the physical frame it lives in.
    Inline,
    /// A signal trampoline frame (`__restore_rt`).
    Sigtramp,
    /// A frame gdb reconstructed from DWARF call-site information for a tail call: it has no return address on
    /// the stack.
    Tailcall,
    /// Any other kind, by gdb's number or name.
    Other(String),
}

/// One frame as gdb saw it.
#[derive(Clone, Debug)]
pub struct GdbFrame {
    /// `frame.pc()`: the PC for frame 0, the return address for outer frames (the caller's resume address).
    pub pc: u64,
    /// Frame type.
    pub kind: FrameKind,
    /// gdb's function name (`??` when unknown).
    pub name: String,
}

/// One thread as gdb saw it at the fatal signal.
#[derive(Clone, Debug)]
pub struct GdbThread {
    /// Kernel thread id.
    pub lwp: u64,
    /// gdb's selected thread at the stop: the one that received the signal.
    pub selected: bool,
    /// Frames, innermost first, every kind included.
    pub frames: Vec<GdbFrame>,
    /// Why gdb's unwind stopped (`gdb.frame_stop_reason_string`).
    pub unwind_end: String,
    /// x86_64 `(orig_rax, rax)` at the stop: the system call the thread was in (-1 when none) and its result.
    pub syscall_regs: Option<(i64, i64)>,
}

/// `-ERESTARTSYS`, `-ERESTARTNOINTR`, `-ERESTARTNOHAND`, `-ERESTART_RESTARTBLOCK` (Linux
/// include/linux/errno.h): what a blocking system call interrupted by a stop holds as its result until the kernel
/// restarts it.
const RESTART_ERRNOS: [i64; 4] = [-512, -513, -514, -516];

impl GdbThread {
    /// Whether the thread was parked at gdb's stop: interrupted inside a blocking system call that the kernel
    /// restarts when it resumes. Such a thread is still in the same call when our handler stops it a moment later,
    /// so its frames must be the same (but see [`Tolerated::SyscallRestart`]). Any other thread was running and may
    /// have moved on by then.
    pub fn parked(&self) -> bool {
        self.syscall_regs.is_some_and(|(nr, ret)| nr >= 0 && RESTART_ERRNOS.contains(&ret))
    }
}

/// Everything one run under gdb produced.
#[derive(Debug)]
pub struct GdbRun {
    /// Signal name of gdb's first stop (`SIGSEGV`, ...), `None` when the client never stopped on a signal.
    pub first_stop: Option<String>,
    /// Threads at the first stop, by LWP id.
    pub threads: Vec<GdbThread>,
    /// Signal that ended the client (`$_exitsignal`).
    pub exit_signal: Option<i32>,
    /// Exit code when it exited normally (`$_exitcode`).
    pub exit_code: Option<i32>,
    /// `ERROR` lines of the driver.
    pub errors: Vec<String>,
    /// gdb's and the client's combined stdout and stderr.
    pub log: String,
}

impl GdbRun {
    /// Value of the first `KEY value` line the client printed.
    pub fn out_value(&self, key: &str) -> Option<&str> {
        self.log.lines().find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(' ')))
    }
}

/// Where gdb is: `ORACLE_GDB` when set, else `gdb` on `PATH`; `None` when it cannot run.
pub fn find_gdb() -> Option<PathBuf> {
    let gdb = std::env::var_os("ORACLE_GDB").map_or_else(|| PathBuf::from("gdb"), PathBuf::from);
    let ok = Command::new(&gdb)
        .args(["-batch", "-nx", "-ex", "python print(1)"])
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "1");
    ok.then_some(gdb)
}

/// Runs `argv` under `gdb` (see the module docs), with `dir` as scratch space for the driver and its output;
/// waits at most `limit` (then kills gdb's process group, the client included, and panics).
///
/// # Panics
/// When gdb cannot be started, hangs, or its output cannot be read.
pub fn run_under_gdb(gdb: &Path, argv: &[&std::ffi::OsStr], dir: &Path, limit: Duration) -> GdbRun {
    std::fs::create_dir_all(dir).expect("oracle dir");
    let script = dir.join("oracle-driver.py");
    std::fs::write(&script, GDB_SCRIPT).expect("write gdb driver");
    let out = dir.join("gdb-frames.txt");
    let log = dir.join("gdb-log.txt");
    let log_file = std::fs::File::create(&log).expect("log file");
    let mut child = Command::new(gdb)
        .arg("-batch")
        .arg("-nx")
        .arg("-x")
        .arg(&script)
        .arg("--args")
        .args(argv)
        .env("ORACLE_GDB_OUT", &out)
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("dup"))
        .stderr(log_file)
        .process_group(0)
        .spawn()
        .expect("spawn gdb");
    let start = Instant::now();
    loop {
        if child.try_wait().expect("wait gdb").is_some() {
            break;
        }
        if start.elapsed() > limit {
            // The client runs in gdb's process group (no terminal, so gdb gives it none of its own).
            let pgid = i32::try_from(child.id()).expect("pid");
            // SAFETY: signals the process group this function created (gdb's pid as its id); no memory involved.
            #[allow(unsafe_code)]
            unsafe {
                libc::kill(-pgid, libc::SIGKILL)
            };
            let _ = child.wait();
            panic!(
                "gdb run of {argv:?} did not end within {limit:?}; log:\n{}",
                std::fs::read_to_string(&log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    let mut run = GdbRun {
        first_stop: None,
        threads: Vec::new(),
        exit_signal: None,
        exit_code: None,
        errors: Vec::new(),
        log: std::fs::read_to_string(&log).unwrap_or_default(),
    };
    for line in text.lines() {
        let mut w = line.splitn(5, ' ');
        match w.next() {
            Some("FIRST_STOP") => run.first_stop = w.next().filter(|s| *s != "none").map(str::to_string),
            Some("THREAD") => {
                let lwp = w.next().and_then(|v| v.parse().ok()).expect("lwp");
                let selected = w.next() == Some("1");
                run.threads.push(GdbThread {
                    lwp,
                    selected,
                    frames: Vec::new(),
                    unwind_end: String::new(),
                    syscall_regs: None,
                });
            }
            Some("FRAME") => {
                let lwp: u64 = w.next().and_then(|v| v.parse().ok()).expect("lwp");
                let pc = w.next().and_then(|v| u64::from_str_radix(v.trim_start_matches("0x"), 16).ok()).expect("pc");
                let kind = match w.next().unwrap_or("") {
                    "normal" => FrameKind::Normal,
                    "inline" => FrameKind::Inline,
                    "sigtramp" => FrameKind::Sigtramp,
                    "tailcall" => FrameKind::Tailcall,
                    other => FrameKind::Other(other.to_string()),
                };
                let name = w.collect::<Vec<_>>().join(" ");
                let t = run.threads.iter_mut().find(|t| t.lwp == lwp).expect("FRAME after its THREAD");
                t.frames.push(GdbFrame { pc, kind, name });
            }
            Some("UNWIND_END") => {
                let lwp: u64 = w.next().and_then(|v| v.parse().ok()).expect("lwp");
                let why = w.collect::<Vec<_>>().join(" ");
                if let Some(t) = run.threads.iter_mut().find(|t| t.lwp == lwp) {
                    t.unwind_end = why;
                }
            }
            Some("REGS") => {
                let lwp: u64 = w.next().and_then(|v| v.parse().ok()).expect("lwp");
                let nr = w.next().and_then(|v| v.parse().ok());
                let ret = w.next().and_then(|v| v.parse().ok());
                if let (Some(t), Some(nr), Some(ret)) = (run.threads.iter_mut().find(|t| t.lwp == lwp), nr, ret) {
                    t.syscall_regs = Some((nr, ret));
                }
            }
            Some("EXIT_SIGNAL") => run.exit_signal = w.next().and_then(|v| v.parse().ok()),
            Some("EXIT_CODE") => run.exit_code = w.next().and_then(|v| v.parse().ok()),
            Some("ERROR") => run.errors.push(line.to_string()),
            _ => {}
        }
    }
    run
}

/// A difference between gdb's frames and the report's that the comparison accepts, with its reason. Every
/// accepted difference in a comparison is listed in [`Comparison::tolerated`]; nothing else is accepted.
///
/// Deliberately *not* tolerated (decided from what gdb 13 shows for these clients):
/// - the last frame: gdb's chains end at `_start` (main thread, with `backtrace past-main`/`past-entry` on) and
///   at `clone3` (other threads), where glibc's CFI marks the outermost frame (gdb reports `outermost`); an
///   unwinder reading the same CFI stops at the same frame, so a frame more or less there is a difference;
/// - signal trampoline frames (`SIGTRAMP_FRAME`, marked `[sigtramp]` in listings): gdb stops before our handler
///   runs, so no thread of these clients is inside a signal handler; if one were, its trampoline frame is a real
///   frame (the return address into `__restore_rt`) that our report must hold too.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Tolerated {
    /// gdb's `INLINE_FRAME` entries are dropped before comparing: an inlined call has no frame of its own, it
    /// shares the pc of the physical frame that contains it (listed right after it); our report holds physical
    /// frames only and the viewer expands inlining from DWARF.
    InlineFrames {
        /// Thread id.
        tid: u64,
        /// How many gdb listed.
        count: usize,
    },
    /// gdb's `TAILCALL_FRAME` entries are dropped: gdb reconstructs them from DWARF call-site information
    /// (`DW_TAG_call_site`) for functions that left by a tail jump; they have no return address on the stack, so
    /// no stack unwinder can produce them (gdb's own `bt` without debug info does not show them either).
    TailcallFrames {
        /// Thread id.
        tid: u64,
        /// How many gdb listed.
        count: usize,
    },
    /// Frame 0 of a parked thread (see [`GdbThread::parked`]) is one system call instruction before gdb's, and the
    /// instruction there is the system call instruction. At gdb's stop (ptrace, inside `get_signal`) the
    /// interrupted call still holds its `-ERESTART*` result and the pc after the instruction. When our handler's
    /// stop signal later interrupts the (restarted) call, the kernel's `handle_signal` (arch/x86/kernel/signal.c)
    /// first rewinds the pc onto the instruction (`regs->ip -= 2`) for `-ERESTARTSYS` with `SA_RESTART` and for
    /// `-ERESTARTNOINTR`, so the call runs again after the handler, and only then builds the signal frame: the
    /// context our handler reads holds the rewound pc. (A call that ends in `-EINTR` instead, such as
    /// `clock_nanosleep`'s `-ERESTART_RESTARTBLOCK`, is not rewound, and the pcs are equal.) Both name the same
    /// instruction of the same call.
    SyscallRestart {
        /// Thread id.
        tid: u64,
    },
    /// A thread other than the crashed one was running at gdb's stop (not parked in a system call), so it may
    /// have moved on before our handler stopped it a moment later: its frames are not compared. The C clients
    /// park every other thread before crashing and insist that nothing is skipped; only a client that cannot
    /// arrange that (the Rust crash client's `thread_crash`, whose main thread may still be returning from
    /// `clone3`) can have one.
    NotParked {
        /// Thread id.
        tid: u64,
    },
}

/// The result of comparing one report with gdb's view.
#[derive(Debug, Default)]
pub struct Comparison {
    /// Differences accepted, with their reasons.
    pub tolerated: Vec<Tolerated>,
    /// Human-readable failures (empty: the report agrees with gdb).
    pub failures: Vec<String>,
}

/// Symbol lookup for the failure messages: per image of the report, its file's DWARF and symbols (or those of
/// its separate debug file under `/usr/lib/debug/.build-id/`, as Debian's `libc6-dbg` installs them), falling
/// back to the dynamic symbol table.
pub struct Names<'r> {
    images: &'r [Image],
    loaded: HashMap<u32, Option<ImageNames>>,
}

/// One image's DWARF and symbols, and its dynamic symbols as `(address, size, name)`.
type ImageNames = (Symbolizer, Vec<(u64, u64, String)>);

impl<'r> Names<'r> {
    /// Names for addresses of the report's images.
    pub fn new(report: &'r Report) -> Names<'r> {
        Names { images: &report.images, loaded: HashMap::new() }
    }

    /// `function` (or `image+0xoffset`, or `?`) for `addr`; `probe_before` looks up `addr - 1` (a return
    /// address: the call instruction precedes it).
    pub fn name(&mut self, addr: u64, probe_before: bool) -> String {
        self.function(addr, probe_before).unwrap_or_else(|| {
            match self.images.iter().find(|i| addr >= i.load_address && addr - i.load_address < i.size) {
                Some(image) => format!("{}+{:#x}", image.name, addr - image.load_address),
                None => "?".to_string(),
            }
        })
    }

    /// The function containing `addr` (or `addr - 1` with `probe_before`), if known.
    pub fn function(&mut self, addr: u64, probe_before: bool) -> Option<String> {
        let image = self.images.iter().find(|i| addr >= i.load_address && addr - i.load_address < i.size)?;
        let bias = image.slide.unwrap_or(image.load_address as i64);
        let link = (addr as i64 - bias) as u64;
        let probe = if probe_before { link.saturating_sub(1) } else { link };
        let (sym, dynsyms) = self.loaded.entry(image.index).or_insert_with(|| load_names(image)).as_ref()?;
        if let Some(n) = sym.names(probe).last() {
            return Some(n.clone());
        }
        dynsyms.iter().find(|(a, n, _)| probe >= *a && probe - a < *n).map(|(_, _, name)| name.clone())
    }
}

fn load_names(image: &Image) -> Option<ImageNames> {
    use object::{Object, ObjectSymbol};
    let path = image.path.as_deref()?;
    let data = std::fs::read(path).ok()?;
    let file = object::File::parse(&*data).ok()?;
    let dynsyms = file
        .dynamic_symbols()
        .filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0)
        .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
        .collect();
    let debug = file.build_id().ok().flatten().and_then(|id| {
        let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
        let p = PathBuf::from(format!("/usr/lib/debug/.build-id/{}/{}.debug", hex.get(..2)?, hex.get(2..)?));
        p.exists().then_some(p)
    });
    let sym = std::panic::catch_unwind(|| Symbolizer::new(debug.as_deref().unwrap_or(Path::new(path)))).ok()?;
    Some((sym, dynsyms))
}

/// Length of the system call instruction whose pc the kernel rewinds on a restart, and its bytes
/// (x86_64 `syscall` = `0f 05`; arm64 `svc #0` = `01 00 00 d4`).
#[cfg(target_arch = "x86_64")]
const SYSCALL_INSN: &[u8] = &[0x0f, 0x05];
#[cfg(target_arch = "aarch64")]
const SYSCALL_INSN: &[u8] = &[0x01, 0x00, 0x00, 0xd4];

/// Whether the bytes at `addr` in the report's image file are the system call instruction.
fn is_syscall_insn(images: &[Image], addr: u64) -> bool {
    use object::{Object, ObjectSegment};
    let Some(image) = images.iter().find(|i| addr >= i.load_address && addr - i.load_address < i.size) else {
        return false;
    };
    let Some(data) = image.path.as_deref().and_then(|p| std::fs::read(p).ok()) else { return false };
    let Ok(file) = object::File::parse(&*data) else { return false };
    let bias = image.slide.unwrap_or(image.load_address as i64);
    let link = (addr as i64 - bias) as u64;
    file.segments().any(|s| {
        link >= s.address()
            && link - s.address() < s.size()
            && s.data_range(link, SYSCALL_INSN.len() as u64).ok().flatten() == Some(SYSCALL_INSN)
    })
}

/// Compares every thread of `report` with gdb's view of the same process at the fatal signal (see the module
/// docs). `fault_tid` is the thread that received the fatal signal.
pub fn compare(report: &Report, gdb: &GdbRun, fault_tid: u64) -> Comparison {
    let mut cmp = Comparison::default();
    let mut names = Names::new(report);
    let gdb_ids: Vec<u64> = gdb.threads.iter().map(|t| t.lwp).collect();
    for t in &report.threads {
        if !t.id.is_some_and(|id| gdb_ids.contains(&id)) {
            cmp.failures.push(format!("report thread {:?} (index {}) is not one gdb saw {gdb_ids:?}", t.id, t.index));
        }
    }
    for g in &gdb.threads {
        let Some(ours) = report.threads.iter().find(|t| t.id == Some(g.lwp)) else {
            cmp.failures.push(format!("thread {} (gdb) is missing from the report", g.lwp));
            continue;
        };
        if !ours.captured {
            cmp.failures.push(format!("thread {} not captured: {:?}", g.lwp, ours.not_captured_reason));
            continue;
        }
        if ours.frames_truncated {
            cmp.failures.push(format!("thread {}: report stopped at the frame cap", g.lwp));
        }
        let crashed = g.lwp == fault_tid;
        if crashed && !ours.crashed {
            cmp.failures.push(format!("thread {} received the fatal signal but is not marked crashed", g.lwp));
        }
        if !crashed && !g.parked() {
            cmp.tolerated.push(Tolerated::NotParked { tid: g.lwp });
            continue;
        }
        let inline = g.frames.iter().filter(|f| f.kind == FrameKind::Inline).count();
        let tail = g.frames.iter().filter(|f| f.kind == FrameKind::Tailcall).count();
        if inline > 0 {
            cmp.tolerated.push(Tolerated::InlineFrames { tid: g.lwp, count: inline });
        }
        if tail > 0 {
            cmp.tolerated.push(Tolerated::TailcallFrames { tid: g.lwp, count: tail });
        }
        let want: Vec<&GdbFrame> =
            g.frames.iter().filter(|f| !matches!(f.kind, FrameKind::Inline | FrameKind::Tailcall)).collect();
        let mut got = ours.expanded_frames();
        if !crashed {
            if let (Some(&ours0), Some(theirs0)) = (got.first(), want.first()) {
                if ours0 != theirs0.pc
                    && ours0.checked_add(SYSCALL_INSN.len() as u64) == Some(theirs0.pc)
                    && is_syscall_insn(&report.images, ours0)
                {
                    cmp.tolerated.push(Tolerated::SyscallRestart { tid: g.lwp });
                    got[0] = theirs0.pc;
                }
            }
        }
        let same = got.len() == want.len() && got.iter().zip(&want).all(|(a, b)| *a == b.pc);
        if !same {
            cmp.failures.push(table(g, ours, &want, &got, crashed, &mut names));
        }
    }
    cmp
}

/// A side-by-side listing of one thread's frames, the first difference marked; long runs of equal frames away
/// from any difference are elided.
fn table(g: &GdbThread, ours: &Thread, want: &[&GdbFrame], got: &[u64], crashed: bool, names: &mut Names) -> String {
    let rows = want.len().max(got.len());
    let equal = |i: usize| want.get(i).map(|f| f.pc) == got.get(i).copied();
    let first_diff = (0..rows).find(|&i| !equal(i)).unwrap_or(0);
    let mut s = format!(
        "thread {}{} ({:?}): frames differ from gdb's at #{first_diff} (gdb {} frames, report {}{}; gdb's unwind \
         ended: {})\n",
        g.lwp,
        if crashed { " (crashed)" } else { "" },
        ours.name.as_deref().unwrap_or(""),
        want.len(),
        got.len(),
        if ours.repeats.is_empty() { String::new() } else { format!(", repeats {:?}", ours.repeats) },
        g.unwind_end,
    );
    let _ = writeln!(s, "     {:<52} | report", "gdb");
    const CONTEXT: usize = 3;
    let near_diff = |i: usize| (i.saturating_sub(CONTEXT)..=(i + CONTEXT).min(rows)).any(|j| j < rows && !equal(j));
    let mut elided = 0usize;
    for i in 0..rows {
        if i >= CONTEXT && i + CONTEXT < rows && !near_diff(i) {
            elided += 1;
            continue;
        }
        if elided > 0 {
            let _ = writeln!(s, "     ... {elided} equal frames ...");
            elided = 0;
        }
        let left = want.get(i).map_or_else(String::new, |f| {
            let mark = if f.kind == FrameKind::Sigtramp { " [sigtramp]" } else { "" };
            format!("{:#x} {}{mark}", f.pc, f.name)
        });
        let right = got.get(i).map_or_else(String::new, |&a| {
            let name = names.name(a, i > 0);
            // A "return address" that is a function's first byte is most likely a function pointer picked up
            // from the stack: say whose.
            match (i > 0, names.function(a, true), names.function(a, false)) {
                (true, before, Some(at)) if before.as_ref() != Some(&at) => {
                    format!("{a:#x} {name} (address itself: {at})")
                }
                _ => format!("{a:#x} {name}"),
            }
        });
        let mark = if equal(i) { "  " } else { "!=" };
        let _ = writeln!(s, "  {mark} {i:>2} {left:<48} | {right}");
    }
    if elided > 0 {
        let _ = writeln!(s, "     ... {elided} equal frames ...");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use report_format::model::Repeat;

    fn gdb_thread(lwp: u64, selected: bool, parked: bool, frames: &[(u64, FrameKind)]) -> GdbThread {
        GdbThread {
            lwp,
            selected,
            frames: frames
                .iter()
                .map(|(pc, kind)| GdbFrame { pc: *pc, kind: kind.clone(), name: "f".into() })
                .collect(),
            unwind_end: "outermost".into(),
            syscall_regs: Some(if parked { (202, -512) } else { (-1, 0) }),
        }
    }

    fn run(threads: Vec<GdbThread>) -> GdbRun {
        GdbRun {
            first_stop: Some("SIGSEGV".into()),
            threads,
            exit_signal: Some(11),
            exit_code: None,
            errors: Vec::new(),
            log: String::new(),
        }
    }

    fn thread(index: u32, id: u64, crashed: bool, frames: &[u64]) -> Thread {
        Thread { index, id: Some(id), crashed, frames: frames.to_vec(), ..Thread::default() }
    }

    fn report(threads: Vec<Thread>) -> Report {
        Report { threads, ..Report::default() }
    }

    use FrameKind::{Inline, Normal, Tailcall};

    #[test]
    fn identical_frames_pass_and_virtual_frames_are_named() {
        let g = run(vec![
            gdb_thread(1, true, false, &[(0x10, Inline), (0x10, Normal), (0x20, Tailcall), (0x30, Normal)]),
            gdb_thread(2, false, true, &[(0x40, Normal), (0x50, Normal)]),
        ]);
        let r = report(vec![thread(0, 1, true, &[0x10, 0x30]), thread(1, 2, false, &[0x40, 0x50])]);
        let c = compare(&r, &g, 1);
        assert!(c.failures.is_empty(), "{:?}", c.failures);
        assert_eq!(
            c.tolerated,
            vec![Tolerated::InlineFrames { tid: 1, count: 1 }, Tolerated::TailcallFrames { tid: 1, count: 1 }]
        );
    }

    #[test]
    fn invented_missing_and_wrong_frames_fail() {
        let g = run(vec![gdb_thread(1, true, false, &[(0x10, Normal), (0x20, Normal), (0x30, Normal)])]);
        for frames in [&[0x10, 0x20, 0x30, 0x99][..], &[0x10, 0x30], &[0x10, 0x21, 0x30], &[0x10, 0x20]] {
            let c = compare(&report(vec![thread(0, 1, true, frames)]), &g, 1);
            assert_eq!(c.failures.len(), 1, "{frames:x?} must differ");
            assert!(c.failures[0].contains("frames differ"), "{}", c.failures[0]);
        }
    }

    #[test]
    fn threads_must_match_one_to_one() {
        let g = run(vec![gdb_thread(1, true, false, &[(0x10, Normal)]), gdb_thread(2, false, true, &[(0x40, Normal)])]);
        // Thread 2 missing from the report, thread 3 unknown to gdb.
        let r = report(vec![thread(0, 1, true, &[0x10]), thread(1, 3, false, &[0x40])]);
        let c = compare(&r, &g, 1);
        assert_eq!(c.failures.len(), 2, "{:?}", c.failures);
        // The crashed thread must be flagged as such.
        let c = compare(&report(vec![thread(0, 1, false, &[0x10])]), &run(vec![g.threads[0].clone()]), 1);
        assert_eq!(c.failures.len(), 1, "{:?}", c.failures);
    }

    #[test]
    fn running_threads_are_skipped_by_name_and_parked_ones_compared() {
        let g = run(vec![
            gdb_thread(1, true, false, &[(0x10, Normal)]),
            gdb_thread(2, false, false, &[(0x40, Normal)]),
            gdb_thread(3, false, true, &[(0x60, Normal)]),
        ]);
        let r =
            report(vec![thread(0, 1, true, &[0x10]), thread(1, 2, false, &[0x77]), thread(2, 3, false, &[0x60, 0x61])]);
        let c = compare(&r, &g, 1);
        assert_eq!(c.tolerated, vec![Tolerated::NotParked { tid: 2 }]);
        assert_eq!(c.failures.len(), 1, "{:?}", c.failures);
        assert!(c.failures[0].starts_with("thread 3"), "{}", c.failures[0]);
    }

    #[test]
    fn a_pc_off_by_the_syscall_length_is_accepted_only_at_a_syscall_instruction() {
        let len = SYSCALL_INSN.len() as u64;
        let g = run(vec![
            gdb_thread(1, true, false, &[(0x10, Normal)]),
            gdb_thread(2, false, true, &[(0x40 + len, Normal)]),
        ]);
        // No image holds 0x40, so nothing proves a system call instruction there: a difference.
        let c = compare(&report(vec![thread(0, 1, true, &[0x10]), thread(1, 2, false, &[0x40])]), &g, 1);
        assert_eq!(c.failures.len(), 1, "{:?}", c.failures);
        // Never for the crashed thread.
        let g = run(vec![gdb_thread(1, true, true, &[(0x10 + len, Normal)])]);
        let c = compare(&report(vec![thread(0, 1, true, &[0x10])]), &g, 1);
        assert_eq!(c.failures.len(), 1, "{:?}", c.failures);
    }

    // x86_64 only: the oracle runs there (arm64 runs under qemu-user, whose /proc/self/maps is emulated).
    #[cfg(target_arch = "x86_64")]
    /// A real system call instruction: one in this process's libc, with a made-up load address.
    fn libc_syscall() -> (Image, u64) {
        use object::{Object, ObjectSegment};
        let maps = std::fs::read_to_string("/proc/self/maps").expect("maps");
        let path = maps
            .lines()
            .filter_map(|l| l.split_whitespace().nth(5))
            .find(|p| p.contains("/libc.so"))
            .expect("libc mapped")
            .to_string();
        let data = std::fs::read(&path).expect("read libc");
        let file = object::File::parse(&*data).expect("parse libc");
        let link = file
            .segments()
            .find_map(|s| {
                let bytes = s.data().ok()?;
                let at = bytes.windows(SYSCALL_INSN.len()).position(|w| w == SYSCALL_INSN)?;
                is_executable(&s).then_some(s.address() + at as u64)
            })
            .expect("a system call instruction in libc");
        let base = 0x7000_0000_0000u64;
        let image =
            Image { path: Some(path), load_address: base, size: 1 << 40, slide: Some(base as i64), ..Image::default() };
        (image, base + link)
    }

    // x86_64 only: the oracle runs there (arm64 runs under qemu-user, whose /proc/self/maps is emulated).
    #[cfg(target_arch = "x86_64")]
    fn is_executable(s: &object::read::Segment<'_, '_>) -> bool {
        use object::ObjectSegment;
        match s.flags() {
            object::SegmentFlags::Elf { p_flags } => p_flags & object::elf::PF_X != 0,
            _ => false,
        }
    }

    // x86_64 only: the oracle runs there (arm64 runs under qemu-user, whose /proc/self/maps is emulated).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_pc_one_syscall_instruction_before_gdbs_is_accepted_for_a_parked_thread() {
        let (image, pc) = libc_syscall();
        let len = SYSCALL_INSN.len() as u64;
        let g = run(vec![
            gdb_thread(1, true, false, &[(0x10, Normal)]),
            gdb_thread(2, false, true, &[(pc + len, Normal), (0x50, Normal)]),
        ]);
        let mut r = report(vec![thread(0, 1, true, &[0x10]), thread(1, 2, false, &[pc, 0x50])]);
        r.images = vec![image];
        let c = compare(&r, &g, 1);
        assert!(c.failures.is_empty(), "{:?}", c.failures);
        assert_eq!(c.tolerated, vec![Tolerated::SyscallRestart { tid: 2 }]);
        // One byte off is not the rewind.
        r.threads[1].frames[0] = pc + 1;
        assert_eq!(compare(&r, &g, 1).failures.len(), 1);
    }

    #[test]
    fn repeats_expand_after_their_stored_copy() {
        let mut t = thread(0, 1, true, &[1, 2, 3, 4, 5]);
        t.repeats = vec![Repeat { start: 1, len: 2, count: 2 }, Repeat { start: 4, len: 1, count: 1 }];
        assert_eq!(t.expanded_frames(), vec![1, 2, 3, 2, 3, 2, 3, 4, 5, 5]);
        t.repeats.clear();
        assert_eq!(t.expanded_frames(), vec![1, 2, 3, 4, 5]);
    }
}
