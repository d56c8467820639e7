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
//! Linux only: natively through ptrace (gdb `run`s the client), or, for a client emulated by qemu-user, through
//! qemu's gdb stub ([`Emulator`], `StubProxy`). gdb 13 with Python (`gdb-multiarch` for the emulated arm64
//! clients) and qemu 7.2 are what it is written and checked against.

use crate::Symbolizer;
use report_format::model::{Image, Report, Thread};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{Read as _, Write as _};
use std::os::unix::net::{UnixListener, UnixStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The gdb Python driver. Settings, then the client is started: natively gdb `run`s it; under qemu-user
/// (`ORACLE_REMOTE` names the socket of [`StubProxy`], in front of the gdb stub of a client that `qemu-aarch64 -g`
/// holds at its first instruction) gdb connects with `target remote` and `continue`s it. At the first stop (the
/// fatal signal, before our handler runs) it writes every thread's frames. Natively it then continues until the
/// process is gone (our handler runs, re-raises, the process dies); under qemu-user it has the proxy release the
/// client and disconnects, and the caller waits for the emulator. Output lines (file named by `ORACLE_GDB_OUT`):
/// `FIRST_STOP <signal name>` or `FIRST_STOP none`; `THREAD <lwp> <1 if gdb's selected thread>`;
/// `FRAME <lwp> <pc hex> <normal|inline|sigtramp|tailcall|...> <name>`; `UNWIND_END <lwp> <gdb's stop reason>`;
/// `REGS <lwp> <orig_rax> <rax>` (x86_64); under qemu-user `HOST_SYSCALL_BEFORE <lwp> <text>`,
/// `HOST_SYSCALL_AFTER <lwp> <text>` (the host's `/proc/<qemu pid>/task/<lwp>/syscall`, read before and after the
/// threads are dumped) and `INSN_BEFORE_PC <lwp> <hex bytes>` (the 4 bytes before frame 0's pc);
/// `EXIT_SIGNAL <n>` / `EXIT_CODE <n>` (native only); `ERROR <text>`.
const GDB_SCRIPT: &str = r#"
import gdb, os, time

out = open(os.environ["ORACLE_GDB_OUT"], "w")
remote = os.environ.get("ORACLE_REMOTE")
qemu_pid = os.environ.get("ORACLE_QEMU_PID")
stops = []

def on_stop(ev):
    if isinstance(ev, gdb.SignalEvent):
        stops.append(ev.stop_signal)
    else:
        stops.append("other:" + type(ev).__name__)

KINDS = {gdb.NORMAL_FRAME: "normal", gdb.INLINE_FRAME: "inline", gdb.SIGTRAMP_FRAME: "sigtramp",
         gdb.TAILCALL_FRAME: "tailcall", gdb.DUMMY_FRAME: "dummy", gdb.ARCH_FRAME: "arch",
         gdb.SENTINEL_FRAME: "sentinel"}

def host_syscall(lwp):
    # The host thread qemu-user runs guest thread `lwp` on (the stub's thread ids are host tids).
    try:
        with open("/proc/%s/task/%d/syscall" % (qemu_pid, lwp)) as f:
            return f.read().strip()
    except OSError as e:
        return "unreadable %s" % e.strerror

def dump():
    inf = gdb.selected_inferior()
    sel = gdb.selected_thread()
    threads = sorted(inf.threads(), key=lambda t: t.ptid[1])
    before = {}
    if remote:
        for th in threads:
            before[th.ptid[1]] = host_syscall(th.ptid[1])
    for th in threads:
        th.switch()
        lwp = th.ptid[1]
        out.write("THREAD %d %d\n" % (lwp, 1 if th.ptid == sel.ptid else 0))
        f = gdb.newest_frame()
        try:
            # x86_64: the system call the thread is in (orig_rax, -1 when none) and its result so far (rax).
            out.write("REGS %d %d %d\n" % (lwp, int(f.read_register("orig_rax")), int(f.read_register("rax"))))
        except (gdb.error, ValueError):
            pass
        if remote:
            out.write("HOST_SYSCALL_BEFORE %d %s\n" % (lwp, before[lwp]))
            try:
                out.write("INSN_BEFORE_PC %d %s\n" % (lwp, bytes(inf.read_memory(f.pc() - 4, 4)).hex()))
            except gdb.error:
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
    if remote:
        # However quick the dump was, the second look is at least 50 ms after the first.
        time.sleep(0.05)
        for th in threads:
            out.write("HOST_SYSCALL_AFTER %d %s\n" % (th.ptid[1], host_syscall(th.ptid[1])))
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
    if remote:
        gdb.execute("set sysroot " + os.environ["ORACLE_SYSROOT"])
        if os.environ.get("ORACLE_SOLIB_PATH"):
            gdb.execute("set solib-search-path " + os.environ["ORACLE_SOLIB_PATH"])
        gdb.execute("target remote " + remote)
        # Connected with the client at its first instruction (not a stop of interest).
        gdb.events.stop.connect(on_stop)
        gdb.execute("continue")
    else:
        gdb.events.stop.connect(on_stop)
        gdb.execute("run")
except gdb.error as e:
    out.write("ERROR run: %s\n" % e)
stopped = bool(stops) and not str(stops[0]).startswith("other:")
if stopped:
    out.write("FIRST_STOP %s\n" % stops[0])
    dump()
else:
    out.write("FIRST_STOP none %s\n" % (stops[0] if stops else ""))
if remote:
    # Hand the client back without gdb (see `StubProxy`): the proxy between gdb and qemu's stub answers this
    # packet itself, resumes the client with the signal it stopped at, and ends the stub's connection.
    if stopped:
        try:
            reply = gdb.execute("maint packet qOracleRelease", to_string=True)
            if 'received: "OK"' not in reply:
                out.write("ERROR release: %s\n" % reply.replace("\n", " "))
        except gdb.error as e:
            out.write("ERROR release: %s\n" % e)
    out.close()
    try:
        gdb.execute("disconnect")
    except gdb.error:
        pass
else:
    # From here on every signal goes straight to the client: our handler runs, re-raises, the process dies.
    # (Stopping again at the re-raised signal and continuing from there races with the dying threads in gdb 13:
    # "Couldn't get registers: No such process", and gdb loses track of the exit.)
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
    /// Under qemu-user: what tells whether the thread was parked (qemu's stub shows no `orig_x0`/syscall number).
    pub emulated: Option<EmulatedStop>,
}

/// A thread at gdb's stop under qemu-user ([`Emulator`]). qemu-user's gdb stub stops only the thread that received
/// the signal; the others go on running guest code, or stay in the system call qemu makes on their behalf on their
/// host thread. Neither register nor stub says which, so two facts are read at the stop:
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EmulatedStop {
    /// The host's `/proc/<qemu pid>/task/<tid>/syscall` of the thread's host thread (the stub's thread ids are host
    /// tids) when gdb's dump began: `<nr> <args...> <sp> <pc>` while it sleeps in a system call, `running` else.
    pub host_before: String,
    /// The same, after every thread was dumped (at least 50 ms later).
    pub host_after: String,
    /// The 4 bytes before the guest pc gdb shows as frame 0 (qemu leaves the pc after `svc #0` while it makes the
    /// call), when gdb could read them.
    pub insn_before_pc: Option<Vec<u8>>,
}

impl EmulatedStop {
    /// Parked: the host thread sat in the same system call (number, arguments, stack and pc) through gdb's whole
    /// stop, and the guest thread's pc is just after a system call instruction: the guest is inside a blocking
    /// call that qemu makes for it. Such a thread is still in that call when our handler's stop signal interrupts
    /// it. A guest thread that runs shows `running` (or another call, or another pc) in one of the reads.
    pub fn parked(&self) -> bool {
        let first = self.host_before.split_whitespace().next().and_then(|n| n.parse::<i64>().ok());
        first.is_some_and(|nr| nr >= 0)
            && self.host_before == self.host_after
            && self.insn_before_pc.as_deref() == Some(SYSCALL_INSN)
    }
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
    ///
    /// Under qemu-user see [`EmulatedStop::parked`] instead.
    pub fn parked(&self) -> bool {
        match &self.emulated {
            Some(e) => e.parked(),
            None => self.syscall_regs.is_some_and(|(nr, ret)| nr >= 0 && RESTART_ERRNOS.contains(&ret)),
        }
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
    /// Whether the client ran under an [`Emulator`].
    pub emulated: bool,
    /// Under an emulator: how `StubProxy`'s release of the client went (`Ok` once the stub delivered the signal
    /// and closed its connection); `None` natively.
    pub release: Option<Result<(), String>>,
}

impl GdbRun {
    /// Value of the first `KEY value` line the client printed.
    pub fn out_value(&self, key: &str) -> Option<&str> {
        self.log.lines().find_map(|l| l.strip_prefix(key).and_then(|r| r.strip_prefix(' ')))
    }
}

/// Where gdb is: `ORACLE_GDB` when set, else `default` on `PATH` (`gdb`; `gdb-multiarch` for an [`Emulator`]'s
/// client); `None` when it cannot run. It must have Python and, when `arch` is given, know that architecture
/// (Debian's plain `gdb` knows only the host's).
pub fn find_gdb(default: &str, arch: Option<&str>) -> Option<PathBuf> {
    let gdb = std::env::var_os("ORACLE_GDB").map_or_else(|| PathBuf::from(default), PathBuf::from);
    let probe = match arch {
        Some(a) => format!("python gdb.execute('set architecture {a}', to_string=True); print(1)"),
        None => "python print(1)".to_string(),
    };
    let ok = Command::new(&gdb)
        .args(["-batch", "-nx", "-ex"])
        .arg(probe)
        // Under qemu-user the tests' environment holds the guest's library path; gdb is a host program.
        .env_remove("LD_LIBRARY_PATH")
        .stdin(Stdio::null())
        .output()
        .is_ok_and(|o| o.status.success() && String::from_utf8_lossy(&o.stdout).trim() == "1");
    ok.then_some(gdb)
}

/// The emulator the clients run under when the tests themselves run under qemu-user (scripts/test-arm64.sh,
/// [`crate::runner`]). gdb cannot ptrace a guest; it debugs the client through qemu's gdb stub instead
/// (`qemu-aarch64 -g <socket>`, `target remote`), with the guest's libraries from the sysroot.
#[derive(Clone, Debug)]
pub struct Emulator {
    /// `qemu-aarch64` and its options; the client's path and arguments follow.
    pub command: Vec<String>,
    /// The guest's library root (`-L`, or `QEMU_LD_PREFIX`): gdb's `sysroot`.
    pub sysroot: PathBuf,
    /// The guest's `LD_LIBRARY_PATH` (`-E LD_LIBRARY_PATH=...`): gdb's `solib-search-path`. The guest's dynamic
    /// loader then names its libraries by their full host paths, which gdb would otherwise look for under the
    /// sysroot a second time.
    pub library_path: Option<String>,
}

impl Emulator {
    /// From a runner command line; `None` when it is empty or names no sysroot.
    pub fn from_runner(command: Vec<String>) -> Option<Emulator> {
        let sysroot = command
            .windows(2)
            .find_map(|w| match w {
                [l, v] if l == "-L" => Some(PathBuf::from(v)),
                _ => None,
            })
            .or_else(|| std::env::var_os("QEMU_LD_PREFIX").map(PathBuf::from))?;
        let library_path = command.windows(2).find_map(|w| match w {
            [e, v] if e == "-E" => v.strip_prefix("LD_LIBRARY_PATH=").map(str::to_string),
            _ => None,
        });
        (!command.is_empty()).then_some(Emulator { command, sysroot, library_path })
    }
}

/// Runs `argv` under `gdb` (see the module docs), with `dir` as scratch space for the driver and its output;
/// waits at most `limit` (then kills gdb and the client, and panics). With an `emulator`, the client runs under it
/// and gdb debugs it through the emulator's gdb stub (see `StubProxy`); the exit is then the emulator's own
/// (qemu-user ends itself with the guest's fatal signal).
///
/// # Panics
/// When gdb or the emulator cannot be started, hangs, or its output cannot be read.
pub fn run_under_gdb(
    gdb: &Path,
    argv: &[&std::ffi::OsStr],
    dir: &Path,
    limit: Duration,
    emulator: Option<&Emulator>,
) -> GdbRun {
    std::fs::create_dir_all(dir).expect("oracle dir");
    let script = dir.join("oracle-driver.py");
    std::fs::write(&script, GDB_SCRIPT).expect("write gdb driver");
    let out = dir.join("gdb-frames.txt");
    let log = dir.join("gdb-log.txt");
    let log_file = std::fs::File::create(&log).expect("log file");
    let mut cmd = Command::new(gdb);
    cmd.args(["-batch", "-nx", "-x"])
        .arg(&script)
        .env("ORACLE_GDB_OUT", &out)
        .env_remove("LD_LIBRARY_PATH")
        .stdin(Stdio::null())
        .stdout(log_file.try_clone().expect("dup"))
        .stderr(log_file)
        .process_group(0);
    let mut run = GdbRun {
        first_stop: None,
        threads: Vec::new(),
        exit_signal: None,
        exit_code: None,
        errors: Vec::new(),
        log: String::new(),
        emulated: emulator.is_some(),
        release: None,
    };
    let start = Instant::now();
    match emulator {
        None => {
            let mut child = cmd.arg("--args").args(argv).spawn().expect("spawn gdb");
            // The client runs in gdb's process group (no terminal, so gdb gives it none of its own).
            if wait_limited(&mut child, start + limit).is_none() {
                kill_group(&mut child);
                panic!(
                    "gdb run of {argv:?} did not end within {limit:?}; log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                );
            }
        }
        Some(emu) => {
            let (program, options) = emu.command.split_first().expect("emulator command");
            let stub = dir.join("qemu-stub.sock");
            let front = dir.join("gdb-proxy.sock");
            let _ = std::fs::remove_file(&stub);
            let _ = std::fs::remove_file(&front);
            let proxy = StubProxy::start(&front, stub.clone(), start + limit);
            let client_log = dir.join("client-log.txt");
            let client_file = std::fs::File::create(&client_log).expect("client log file");
            let mut client = Command::new(program)
                .args(options)
                .arg("-g")
                .arg(&stub)
                .args(argv)
                .stdin(Stdio::null())
                .stdout(client_file.try_clone().expect("dup"))
                .stderr(client_file)
                .process_group(0)
                .spawn()
                .expect("spawn the emulator");
            let mut gdb_child = cmd
                .arg(argv.first().expect("client path"))
                .env("ORACLE_REMOTE", &front)
                .env("ORACLE_SYSROOT", &emu.sysroot)
                .env("ORACLE_SOLIB_PATH", emu.library_path.as_deref().unwrap_or(""))
                .env("ORACLE_QEMU_PID", client.id().to_string())
                .spawn()
                .expect("spawn gdb");
            let read_logs = || {
                format!(
                    "{}\n{}",
                    std::fs::read_to_string(&client_log).unwrap_or_default(),
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            };
            // gdb asks the proxy to release the client, disconnects and exits; the proxy lets the client go on
            // only then.
            if wait_limited(&mut gdb_child, start + limit).is_none() {
                kill_group(&mut gdb_child);
                kill_group(&mut client);
                panic!("gdb (emulated run of {argv:?}) did not end within {limit:?}; logs:\n{}", read_logs());
            }
            proxy.release_client();
            let status = wait_limited(&mut client, start + limit);
            let Some(status) = status else {
                kill_group(&mut client);
                panic!("emulated run of {argv:?} did not end within {limit:?}; logs:\n{}", read_logs());
            };
            run.release = Some(proxy.finish());
            use std::os::unix::process::ExitStatusExt;
            run.exit_signal = status.signal();
            run.exit_code = status.code();
            run.log = std::fs::read_to_string(&client_log).unwrap_or_default();
        }
    }
    run.log.push_str(&std::fs::read_to_string(&log).unwrap_or_default());
    let text = std::fs::read_to_string(&out).unwrap_or_default();
    parse_driver_output(&text, &mut run, emulator.is_some());
    run
}

/// Waits for `child` until `deadline`; `None` when it is still running then.
fn wait_limited(child: &mut std::process::Child, deadline: Instant) -> Option<std::process::ExitStatus> {
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Kills the process group `child` leads (the children here are started with `process_group(0)`), and reaps it.
fn kill_group(child: &mut std::process::Child) {
    let pgid = i32::try_from(child.id()).expect("pid");
    // SAFETY: signals a process group this module created (the child's pid as its id); no memory involved.
    #[allow(unsafe_code)]
    unsafe {
        libc::kill(-pgid, libc::SIGKILL)
    };
    let _ = child.wait();
}

/// Reads the driver's output lines (see [`GDB_SCRIPT`]) into `run`.
fn parse_driver_output(text: &str, run: &mut GdbRun, emulated: bool) {
    fn lwp_of(w: &mut std::str::SplitN<'_, char>) -> u64 {
        w.next().and_then(|v| v.parse().ok()).expect("lwp")
    }
    for line in text.lines() {
        let mut w = line.splitn(5, ' ');
        match w.next() {
            Some("FIRST_STOP") => run.first_stop = w.next().filter(|s| *s != "none").map(str::to_string),
            Some("THREAD") => {
                let lwp = lwp_of(&mut w);
                let selected = w.next() == Some("1");
                run.threads.push(GdbThread {
                    lwp,
                    selected,
                    frames: Vec::new(),
                    unwind_end: String::new(),
                    syscall_regs: None,
                    emulated: emulated.then(EmulatedStop::default),
                });
            }
            Some("FRAME") => {
                let lwp = lwp_of(&mut w);
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
                let lwp = lwp_of(&mut w);
                let why = w.collect::<Vec<_>>().join(" ");
                if let Some(t) = run.threads.iter_mut().find(|t| t.lwp == lwp) {
                    t.unwind_end = why;
                }
            }
            Some("REGS") => {
                let lwp = lwp_of(&mut w);
                let nr = w.next().and_then(|v| v.parse().ok());
                let ret = w.next().and_then(|v| v.parse().ok());
                if let (Some(t), Some(nr), Some(ret)) = (run.threads.iter_mut().find(|t| t.lwp == lwp), nr, ret) {
                    t.syscall_regs = Some((nr, ret));
                }
            }
            Some(tag @ ("HOST_SYSCALL_BEFORE" | "HOST_SYSCALL_AFTER" | "INSN_BEFORE_PC")) => {
                let lwp = lwp_of(&mut w);
                let rest = w.collect::<Vec<_>>().join(" ");
                let Some(e) = run.threads.iter_mut().find(|t| t.lwp == lwp).and_then(|t| t.emulated.as_mut()) else {
                    continue;
                };
                match tag {
                    "HOST_SYSCALL_BEFORE" => e.host_before = rest,
                    "HOST_SYSCALL_AFTER" => e.host_after = rest,
                    _ => {
                        e.insn_before_pc = (0..rest.len() / 2)
                            .map(|i| rest.get(2 * i..2 * i + 2).and_then(|h| u8::from_str_radix(h, 16).ok()))
                            .collect();
                    }
                }
            }
            Some("EXIT_SIGNAL") => run.exit_signal = w.next().and_then(|v| v.parse().ok()),
            Some("EXIT_CODE") => run.exit_code = w.next().and_then(|v| v.parse().ok()),
            Some("ERROR") => run.errors.push(line.to_string()),
            _ => {}
        }
    }
}

/// The packet the driver sends to have [`StubProxy`] release the client (`maint packet qOracleRelease`).
const RELEASE_PACKET: &[u8] = b"qOracleRelease";

/// Sits between gdb and qemu-user's gdb stub and passes the remote protocol through unchanged, except for one
/// packet of the driver's own, `qOracleRelease`, which it answers itself.
///
/// Why: once gdb is connected, qemu-user 7.2's stub takes part in the delivery of every guest signal (each is a
/// stop reported to gdb and a wait for its reply, with every host signal blocked on that host thread), and it
/// serves several threads at once badly. Our handler's stop signals, sent to every thread at once, then arrive
/// late or never (seen: threads given up as "blocking the stop signal", runs of 20 s). A plain gdb `disconnect`
/// at the stop does not help: the stub, waiting for gdb's reply, sees the connection end and resumes the thread
/// *without* its signal (seen: a raised SIGABRT is lost, `abort()` then kills the process with the default
/// action and no report). Ending the connection right after gdb's own `continue` is not enough either: the stub
/// only notices the end at the next signal, and several of our stop signals arrive at once (seen: a thread
/// never got out of the stub).
///
/// So on `qOracleRelease` the proxy sends the stub, in one write, `C<sig>` (continue with the signal of the last
/// stop the stub reported: the fatal one gdb stopped at) followed by `?` (a stop-reason query), and shuts its
/// connection to the stub for writing (it keeps reading and discarding). The stopped thread, still in the stub,
/// reads both: the first sets the signal to deliver and resumes, the second makes the stub send a reply and wait
/// for gdb's acknowledgement, which reads the end of the connection: the stub closes it and from then on serves no
/// debugger. All of this happens in that one thread, before our handler runs; the proxy answers gdb `OK` only
/// once it has seen the stub close the connection. Our handler and its stop signals then run as without a
/// debugger.
struct StubProxy {
    stop: Arc<AtomicBool>,
    go: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<Result<(), String>>,
}

impl StubProxy {
    /// Listens on `front` for gdb; once gdb is there, connects to the stub's socket `stub` (retried until the
    /// emulator has created it, at most until `deadline`).
    fn start(front: &Path, stub: PathBuf, deadline: Instant) -> StubProxy {
        let listener = UnixListener::bind(front).expect("bind the stub proxy's socket");
        listener.set_nonblocking(true).expect("nonblocking listener");
        let stop = Arc::new(AtomicBool::new(false));
        let stop_seen = Arc::clone(&stop);
        let (go, go_seen) = std::sync::mpsc::channel();
        let thread = std::thread::spawn(move || proxy_main(&listener, &stub, &stop_seen, &go_seen, deadline));
        StubProxy { stop, go, thread }
    }

    /// Lets the release gdb asked for go ahead (called once gdb has exited).
    fn release_client(&self) {
        let _ = self.go.send(());
    }

    /// Ends the proxy (both processes are gone by now) and says whether it released the client.
    fn finish(self) -> Result<(), String> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap_or_else(|_| Err("proxy thread panicked".to_string()))
    }
}

/// `$<payload>#<checksum>`.
fn packet(payload: &[u8]) -> Vec<u8> {
    let sum = payload.iter().fold(0u8, |a, b| a.wrapping_add(*b));
    let mut p = Vec::with_capacity(payload.len() + 4);
    p.push(b'$');
    p.extend_from_slice(payload);
    p.extend_from_slice(format!("#{sum:02x}").as_bytes());
    p
}

/// Splits one direction of the remote protocol into packets (`$...#xx`) and the single bytes between them
/// (acknowledgements, interrupts). Packet data never holds a plain `$` or `#` (binary data escapes them).
#[derive(Default)]
struct Framer {
    packet: Vec<u8>,
    checksum_left: Option<u8>,
}

impl Framer {
    /// Feeds one byte; returns what it completes: a whole packet, a byte outside packets, or nothing yet.
    fn push(&mut self, b: u8) -> Option<Vec<u8>> {
        if self.packet.is_empty() {
            if b == b'$' {
                self.packet.push(b);
                return None;
            }
            return Some(vec![b]);
        }
        self.packet.push(b);
        match self.checksum_left {
            None if b == b'#' => {
                self.checksum_left = Some(2);
                None
            }
            None => None,
            Some(1) => {
                self.checksum_left = None;
                Some(std::mem::take(&mut self.packet))
            }
            Some(n) => {
                self.checksum_left = Some(n - 1);
                None
            }
        }
    }
}

/// The signal of a stop reply (`T<sig>...` or `S<sig>`), from a whole packet.
fn stop_signal(packet: &[u8]) -> Option<u8> {
    match packet {
        [b'$', b'T' | b'S', h, l, ..] => u8::from_str_radix(std::str::from_utf8(&[*h, *l]).ok()?, 16).ok(),
        _ => None,
    }
}

fn proxy_main(
    listener: &UnixListener,
    stub: &Path,
    stop: &AtomicBool,
    go: &std::sync::mpsc::Receiver<()>,
    deadline: Instant,
) -> Result<(), String> {
    let gdb = loop {
        match listener.accept() {
            Ok((s, _)) => break s,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if stop.load(Ordering::Relaxed) || Instant::now() > deadline {
                    return Err("gdb never connected".to_string());
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(e) => return Err(format!("accept: {e}")),
        }
    };
    gdb.set_nonblocking(false).map_err(|e| e.to_string())?;
    let qemu = loop {
        match UnixStream::connect(stub) {
            Ok(s) => break s,
            Err(e) => {
                if stop.load(Ordering::Relaxed) || Instant::now() > deadline {
                    return Err(format!("the stub at {} never answered: {e}", stub.display()));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    };
    let last_signal = Arc::new(Mutex::new(None::<u8>));
    let released = Arc::new(AtomicBool::new(false));
    let stub_closed = Arc::new(AtomicBool::new(false));
    // Stub to gdb: passed on until the release, drained after it (the stub must never block writing).
    let upstream = {
        let (mut from_qemu, mut to_gdb) =
            (qemu.try_clone().map_err(|e| e.to_string())?, gdb.try_clone().map_err(|e| e.to_string())?);
        let (last_signal, released, stub_closed) =
            (Arc::clone(&last_signal), Arc::clone(&released), Arc::clone(&stub_closed));
        std::thread::spawn(move || {
            let mut framer = Framer::default();
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = from_qemu.read(&mut buf) {
                let chunk = buf.get(..n).unwrap_or_default();
                for &b in chunk {
                    if let Some(sig) = framer.push(b).as_deref().and_then(stop_signal) {
                        *last_signal.lock().expect("lock") = Some(sig);
                    }
                }
                if !released.load(Ordering::SeqCst) {
                    let _ = to_gdb.write_all(chunk);
                }
            }
            stub_closed.store(true, Ordering::SeqCst);
        })
    };
    // gdb to the stub, packet by packet, looking for the release.
    let (mut from_gdb, mut to_gdb, mut to_qemu) = (gdb.try_clone().map_err(|e| e.to_string())?, gdb, qemu);
    let mut framer = Framer::default();
    let mut buf = [0u8; 4096];
    let mut result = Err("gdb never asked to release the client".to_string());
    while let Ok(n @ 1..) = from_gdb.read(&mut buf) {
        if released.load(Ordering::SeqCst) {
            continue;
        }
        let mut pass = Vec::new();
        for &b in buf.get(..n).unwrap_or_default() {
            let Some(unit) = framer.push(b) else { continue };
            if unit.get(1..unit.len().saturating_sub(3)) != Some(RELEASE_PACKET) {
                pass.extend_from_slice(&unit);
                continue;
            }
            to_qemu.write_all(&pass).map_err(|e| e.to_string())?;
            pass.clear();
            let sig = *last_signal.lock().expect("lock");
            let Some(sig) = sig else {
                let _ = to_gdb.write_all(&[b"+".as_slice(), &packet(b"E01")].concat());
                result = Err("release asked before the stub reported a signal".to_string());
                continue;
            };
            released.store(true, Ordering::SeqCst);
            to_gdb.write_all(&[b"+".as_slice(), &packet(b"OK")].concat()).map_err(|e| e.to_string())?;
            // gdb disconnects and exits now; the client goes on only once gdb is gone, so that our handler does not
            // share the machine's two cores with it.
            go.recv_timeout(deadline.saturating_duration_since(Instant::now()))
                .map_err(|_| "gdb never ended after asking for the release".to_string())?;
            // One write, so the stub reads both packets at once (see `StubProxy`).
            let release = [packet(format!("C{sig:02x}").as_bytes()), packet(b"?")].concat();
            to_qemu.write_all(&release).map_err(|e| e.to_string())?;
            to_qemu.shutdown(std::net::Shutdown::Write).map_err(|e| e.to_string())?;
            let until = Instant::now() + Duration::from_secs(10);
            while !stub_closed.load(Ordering::SeqCst) && Instant::now() < until {
                std::thread::sleep(Duration::from_millis(1));
            }
            result = if stub_closed.load(Ordering::SeqCst) {
                Ok(())
            } else {
                Err("the stub kept its connection after the release".to_string())
            };
            break;
        }
        if !released.load(Ordering::SeqCst) {
            to_qemu.write_all(&pass).map_err(|e| e.to_string())?;
        }
    }
    // Drop gdb's side: gdb may still be connected; the stub side ends when the emulator does.
    drop(from_gdb);
    drop(to_gdb);
    let _ = upstream.join();
    result
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
    /// instruction of the same call. Under qemu-user ([`Emulator`]) the emulator does the same for the guest: gdb
    /// sees the guest pc after `svc #0` while qemu makes the call, and our handler sees it rewound onto the `svc`
    /// (4 bytes) when the stop signal makes qemu restart the call (observed for the futex and the `read` helper,
    /// not for the `clock_nanosleep` one, as natively).
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
    /// Under qemu-user only: a thread of the report that gdb does not list, held by the report as not captured.
    /// qemu-user runs a thread of its own besides the guest's (its RCU thread, started before the guest's first
    /// instruction); our handler lists the process's threads in `/proc/self/task`, which qemu-user passes through
    /// from the host, so it finds that one too, while qemu's gdb stub lists guest threads only. It never runs
    /// guest code and blocks every signal, so our handler gives up on it. A thread gdb does not list that the
    /// report holds as captured is still a failure, and so is any of gdb's threads missing from the report.
    EmulatorThread {
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
        if t.id.is_some_and(|id| gdb_ids.contains(&id)) {
            continue;
        }
        match t.id {
            Some(tid) if gdb.emulated && !t.captured => cmp.tolerated.push(Tolerated::EmulatorThread { tid }),
            _ => cmp.failures.push(format!(
                "report thread {:?} (index {}, captured: {}, {:?}) is not one gdb saw {gdb_ids:?}",
                t.id, t.index, t.captured, t.not_captured_reason
            )),
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
            emulated: None,
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
            emulated: false,
            release: None,
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

    fn is_executable(s: &object::read::Segment<'_, '_>) -> bool {
        use object::ObjectSegment;
        match s.flags() {
            object::SegmentFlags::Elf { p_flags } => p_flags & object::elf::PF_X != 0,
            _ => false,
        }
    }

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
    fn an_emulated_thread_is_parked_only_in_one_unchanged_host_call_right_after_a_system_call_instruction() {
        let blocked = "202 0x5500e213b8 0x189 0x0 0x0 0x0 0xffffffff 0x7fcbd2f665f0 0x5582b31f3536";
        let parked = EmulatedStop {
            host_before: blocked.into(),
            host_after: blocked.into(),
            insn_before_pc: Some(SYSCALL_INSN.to_vec()),
        };
        assert!(parked.parked());
        let moved = EmulatedStop { host_after: "running".into(), ..parked.clone() };
        assert!(!moved.parked());
        let other_call = EmulatedStop { host_after: blocked.replace("0x189", "0x18a"), ..parked.clone() };
        assert!(!other_call.parked());
        let running = EmulatedStop { host_before: "running".into(), host_after: "running".into(), ..parked.clone() };
        assert!(!running.parked());
        let not_in_a_call = EmulatedStop { insn_before_pc: Some(vec![0; SYSCALL_INSN.len()]), ..parked.clone() };
        assert!(!not_in_a_call.parked());
        let unreadable = EmulatedStop { insn_before_pc: None, ..parked.clone() };
        assert!(!unreadable.parked());
        // The emulated view decides, not registers.
        let mut t = gdb_thread(1, false, true, &[(0x10, Normal)]);
        t.emulated = Some(moved);
        assert!(!t.parked());
        t.emulated = Some(parked);
        assert!(t.parked());
    }

    #[test]
    fn the_emulators_own_thread_is_tolerated_only_under_the_emulator_and_only_uncaptured() {
        let g = run(vec![gdb_thread(1, true, false, &[(0x10, Normal)])]);
        let qemu_thread = Thread { captured: false, ..thread(1, 9, false, &[]) };
        let r = report(vec![thread(0, 1, true, &[0x10]), qemu_thread.clone()]);
        assert_eq!(compare(&r, &g, 1).failures.len(), 1, "natively a thread gdb does not know is a failure");
        let g = GdbRun { emulated: true, ..g };
        let c = compare(&r, &g, 1);
        assert!(c.failures.is_empty(), "{:?}", c.failures);
        assert_eq!(c.tolerated, vec![Tolerated::EmulatorThread { tid: 9 }]);
        let captured = Thread { captured: true, ..qemu_thread };
        let c = compare(&report(vec![thread(0, 1, true, &[0x10]), captured]), &g, 1);
        assert_eq!(c.failures.len(), 1, "{:?}", c.failures);
    }

    #[test]
    fn the_emulator_comes_from_the_runner_with_its_sysroot_and_library_path() {
        let words = |s: &str| s.split_whitespace().map(str::to_string).collect::<Vec<_>>();
        let e = Emulator::from_runner(words(
            "qemu-aarch64 -L /usr/aarch64-linux-gnu -E LD_LIBRARY_PATH=/usr/aarch64-linux-gnu/lib -cpu max",
        ))
        .expect("emulator");
        assert_eq!(e.sysroot, Path::new("/usr/aarch64-linux-gnu"));
        assert_eq!(e.library_path.as_deref(), Some("/usr/aarch64-linux-gnu/lib"));
        assert_eq!(e.command.len(), 7);
        let e = Emulator::from_runner(words("qemu-aarch64 -L /sysroot")).expect("emulator");
        assert_eq!(e.library_path, None);
    }

    #[test]
    fn the_proxy_frames_packets_and_reads_stop_replies() {
        assert_eq!(packet(b"OK"), b"$OK#9a");
        assert_eq!(packet(b"?"), b"$?#3f");
        let mut f = Framer::default();
        let out: Vec<Vec<u8>> = b"+$qOracleRelease#00\x03$m10,4#c3".iter().filter_map(|&b| f.push(b)).collect();
        assert_eq!(out, vec![b"+".to_vec(), b"$qOracleRelease#00".to_vec(), vec![3], b"$m10,4#c3".to_vec()]);
        assert_eq!(stop_signal(b"$T0bthread:p01.1234;#00"), Some(11));
        assert_eq!(stop_signal(b"$S06#b9"), Some(6));
        assert_eq!(stop_signal(b"$OK#9a"), None);
        assert_eq!(stop_signal(b"$W00#b7"), None);
    }

    /// The release as the proxy does it, against a stand-in for qemu's stub: gdb's traffic passes both ways; on
    /// `qOracleRelease` gdb gets `OK`, the stub nothing until gdb is gone, then `C<signal>` and `?` at once and the
    /// end of the connection; the release counts as done once the stub closed its side.
    #[test]
    fn the_proxy_passes_gdbs_traffic_then_releases_the_client_with_its_signal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (stub_path, front) = (dir.path().join("stub.sock"), dir.path().join("front.sock"));
        let stub_listener = UnixListener::bind(&stub_path).expect("stub socket");
        let proxy = StubProxy::start(&front, stub_path, Instant::now() + Duration::from_secs(30));
        let mut gdb = UnixStream::connect(&front).expect("connect to the proxy");
        let (mut stub, _) = stub_listener.accept().expect("the proxy connects to the stub");
        let read_some = |s: &mut UnixStream, n: usize| {
            let mut buf = vec![0u8; n];
            s.read_exact(&mut buf).expect("read");
            buf
        };
        // gdb's continue, the stub's stop reply at the fatal signal, gdb's acknowledgement.
        gdb.write_all(b"$c#63").expect("write");
        assert_eq!(read_some(&mut stub, 5), b"$c#63");
        stub.write_all(b"+$T0bthread:p01.7;#00").expect("write");
        assert_eq!(read_some(&mut gdb, 21), b"+$T0bthread:p01.7;#00");
        gdb.write_all(b"+").expect("write");
        assert_eq!(read_some(&mut stub, 1), b"+");
        // The release: answered by the proxy, nothing reaches the stub before gdb is gone.
        gdb.write_all(&packet(RELEASE_PACKET)).expect("write");
        assert_eq!(read_some(&mut gdb, 7), [b"+".as_slice(), &packet(b"OK")].concat());
        drop(gdb);
        stub.set_read_timeout(Some(Duration::from_millis(200))).expect("timeout");
        assert!(stub.read(&mut [0u8; 1]).is_err(), "the stub must hear nothing before the go");
        proxy.release_client();
        stub.set_read_timeout(None).expect("timeout");
        let mut rest = Vec::new();
        stub.read_to_end(&mut rest).expect("read to the end of the connection");
        assert_eq!(rest, [packet(b"C0b"), packet(b"?")].concat());
        // The stub's reply to `?` finds nobody; it closes the connection.
        stub.write_all(b"+$T05thread:p01.7;#00").expect("write");
        drop(stub);
        assert_eq!(proxy.finish(), Ok(()));
    }

    #[test]
    fn driver_lines_of_an_emulated_run_fill_the_emulated_view() {
        let mut r = GdbRun { emulated: true, ..run(Vec::new()) };
        let text = "FIRST_STOP SIGSEGV\nTHREAD 7 0\nHOST_SYSCALL_BEFORE 7 0 0xc 0x1 0x7f 0x55\n\
                    INSN_BEFORE_PC 7 010000d4\nFRAME 7 0x10 normal read\nUNWIND_END 7 outermost\n\
                    HOST_SYSCALL_AFTER 7 0 0xc 0x1 0x7f 0x55\n";
        parse_driver_output(text, &mut r, true);
        let t = r.threads.first().expect("thread");
        let e = t.emulated.as_ref().expect("emulated view");
        assert_eq!(e.host_before, "0 0xc 0x1 0x7f 0x55");
        assert_eq!(e.host_after, e.host_before);
        assert_eq!(e.insn_before_pc.as_deref(), Some(&[0x01, 0x00, 0x00, 0xd4][..]));
        assert_eq!(t.frames.len(), 1);
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
