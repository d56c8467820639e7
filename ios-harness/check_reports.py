#!/usr/bin/env python3
"""Checks the reports the crash matrix produced: one per trigger, each saying what the trigger did.

Usage:
  check_reports.py --viewer PATH --store DIR --symbols DIR --run-id ID [--bundle-id ID] [--out DIR]
                   [--triggers a,b,...]

For every report in the collector's store whose USER key/value `harness.run` is ID, the trigger is read from
`harness.trigger`, and the report is rendered with `viewer --format json --no-auto-symbols --symbols DIR` (so the
trigger functions can only be named through the app's dSYM under DIR, not through the app binary lying at the
path the report records). The Apple crash text is written to --out for people.

Per trigger, what each check proves:
  one report        exactly one report of this run names the trigger: captured once, uploaded once, no duplicate
  intact            viewer found no damage: every section's CRC and the end marker (the handler finished writing)
  process           META names the app, its bundle id and versions (the reporter read Info.plist on device)
  exception         the Mach exception type / signal (and the fault address for the 0xbad writes) are the ones this
                    crash produces on this architecture: the handler saw the real exception, not a later one
  crashed thread    the thread marked crashed is the main thread (index 0) or, for triggers that crash elsewhere,
                    not the main thread, with the expected pthread name / dispatch queue label when recorded
  trigger function  after symbolication with the dSYM, the crashed thread's backtrace contains the trigger
                    function, with a source file from the dSYM's line table: the registers, the stack walk through
                    system frames, the image list (load address, UUID) and symbolication all line up
  frame 0           (the 0xbad writes, stack overflow) the faulting function is frame 0: the pc is the crashed
                    thread's own, not the handler's
  message           the Swift runtime's `__crash_info` message (fatalError, force unwrap, index out of range) is in
                    the report's MESSAGES section (the handler read the __crash_info sections)
  lock holder       (mallocLock) another thread's backtrace contains harness_hold_malloc_lock: the malloc locks
                    were really held by a live thread while the handler ran, and it still produced this report
  hang              (mainThreadHang, a non-fatal report) META nf kind hang lasting past the 2 s threshold, no
                    exception and no crashed thread, the report about thread 0 (main) with harness_trigger_hang on its
                    stack: the run-loop observer and the watchdog saw the stall and captured it
Checks marked "note" are printed but do not fail: fields the schema makes optional, and messages the OS runtime
may or may not leave in __crash_info for exceptions and abort().

Exit status: 0 every selected trigger passed; 1 a check failed; 2 usage or tool error.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

# Darwin numbering (XNU osfmk/mach/exception_types.h, bsd/sys/signal.h).
EXC_BAD_ACCESS, EXC_BAD_INSTRUCTION, EXC_BREAKPOINT, EXC_CRASH = 1, 2, 6, 10
SIGILL, SIGTRAP, SIGABRT, SIGBUS, SIGSEGV = 4, 5, 6, 10, 11

BAD_ADDRESS = 0xBAD  # HARNESS_BAD_ADDRESS in HarnessApp/NativeTriggers.h
PLAIN_THREAD_NAME = "harness.plain-thread"  # HARNESS_PLAIN_THREAD_NAME
CRASH_QUEUE_LABEL = "com.example.crashreporter.harness.crash-queue"  # HARNESS_CRASH_QUEUE_LABEL
PROCESS_NAME = "HarnessApp"
SHORT_VERSION, BUILD_VERSION = "1.0", "1"  # MARKETING_VERSION, CURRENT_PROJECT_VERSION in project.yml


@dataclass
class Expect:
    kind: str  # "swift-trap", "abort", "bad-access" or "hang" (a non-fatal report, format 2.2 META nf)
    thread: str  # "main", "plain-thread" or "queue"
    function: str  # symbol on the crashed thread's backtrace
    source: str  # file the dSYM's line table names for that frame
    message: str | None = None  # required in MESSAGES
    note_message: str | None = None  # looked for in MESSAGES, a note when missing
    address: int | None = None  # required fault address
    other_thread_function: str | None = None  # required on some thread other than the crashed one
    lx: tuple[str, str | None, str | None] | None = None  # required EXCEPTION lx (kind, type, reason or None)
    lx_backtrace_function: str | None = None  # required in the symbolicated Last Exception Backtrace
    frame0: bool = False  # the fault is in the function itself: it must be frame 0 (the crashed thread's pc)


# Trigger names are HarnessTrigger's raw values (Shared/HarnessTrigger.swift).
EXPECTATIONS: dict[str, Expect] = {
    "swiftFatalError": Expect(
        "swift-trap", "main", "harnessTriggerFatalError", "Triggers.swift",
        message="Fatal error: harness: fatalError trigger"),
    "forceUnwrapNil": Expect(
        "swift-trap", "main", "harnessTriggerForceUnwrapNil", "Triggers.swift",
        message="Unexpectedly found nil while unwrapping an Optional value"),
    "arrayIndexOutOfRange": Expect(
        "swift-trap", "main", "harnessTriggerArrayIndexOutOfRange", "Triggers.swift",
        message="Index out of range"),
    "nsException": Expect(
        "abort", "plain-thread", "harness_trigger_nsexception", "ExceptionTriggers.mm",
        lx=("objc", "HarnessException", "harness: uncaught NSException"),
        lx_backtrace_function="harness_trigger_nsexception"),
    "cppException": Expect(
        "abort", "plain-thread", "harness_trigger_cpp_exception", "ExceptionTriggers.mm",
        note_message="harness: uncaught C++ exception",
        # libc++abi's own abort message carries what(); the handler records the type (handler/README.md).
        lx=("c++", "St13runtime_error", None)),
    "abortCall": Expect("abort", "main", "harness_trigger_abort", "NativeTriggers.c", note_message="abort() called"),
    "abortWithReason": Expect(
        "abort", "main", "harness_trigger_abort", "NativeTriggers.c", message="harness: saving the draft"),
    "badPointer": Expect(
        "bad-access", "main", "harness_trigger_bad_pointer", "NativeTriggers.c", address=BAD_ADDRESS, frame0=True),
    "stackOverflow": Expect("bad-access", "main", "harness_stack_overflow_recurse", "NativeTriggers.c", frame0=True),
    "backgroundQueue": Expect(
        "bad-access", "queue", "harness_background_queue_crash", "NativeTriggers.c", address=BAD_ADDRESS,
        frame0=True),
    "mallocLock": Expect(
        "bad-access", "main", "harness_trigger_malloc_lock", "NativeTriggers.c", address=BAD_ADDRESS, frame0=True,
        other_thread_function="harness_hold_malloc_lock"),
    "mainThreadHang": Expect("hang", "main", "harness_trigger_hang", "NativeTriggers.c"),
}


def expected_exception(kind: str, arch: str) -> tuple[set[int | None], set[int | None]]:
    """(allowed Mach exception types, allowed signals) for a kind of crash on an architecture."""
    if kind == "swift-trap":
        # Swift traps are `brk #1` on arm64 and `ud2` on x86_64 (the Intel simulator).
        if arch.startswith("x86_64"):
            return {EXC_BAD_INSTRUCTION}, {SIGILL, None}
        return {EXC_BREAKPOINT}, {SIGTRAP, None}
    if kind == "abort":
        # abort() raises SIGABRT with pthread_kill: a signal, no Mach exception (EXC_CRASH comes only at exit).
        return {None, EXC_CRASH}, {SIGABRT}
    if kind == "bad-access":
        return {EXC_BAD_ACCESS}, {SIGSEGV, SIGBUS, None}
    raise ValueError(kind)


@dataclass
class Result:
    trigger: str
    report_ids: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    passed: list[str] = field(default_factory=list)

    def check(self, ok: bool, name: str, detail: str) -> bool:
        (self.passed if ok else self.failures).append(name if ok else f"{name}: {detail}")
        return ok


def render(viewer: str, report: Path, symbols: list[str], fmt: str) -> tuple[int, str, str]:
    args = [viewer, "render", "--format", fmt, "--no-auto-symbols"]
    for s in symbols:
        args += ["--symbols", s]
    args.append(str(report))
    p = subprocess.run(args, capture_output=True, text=True, check=False)
    return p.returncode, p.stdout, p.stderr


def frame_names(thread: dict) -> list[tuple[str, str]]:
    """(symbol name, source file) of each frame of a crash_log thread."""
    out = []
    for f in thread.get("frames", []):
        sym = f.get("symbol") or {}
        out.append((sym.get("name") or "", sym.get("file") or ""))
    return out


def check_hang(res: Result, exp: Expect, doc: dict) -> None:
    """A non-fatal hang report: META nf kind hang with a duration past the 2 s threshold, no exception, no thread
    crashed, the thread it is about is the main thread, with the trigger function on its stack."""
    report = doc.get("report") or {}
    log = doc.get("crash_log") or {}
    nf = (report.get("meta") or {}).get("non_fatal") or {}
    exc = report.get("exception") or {}
    threads = report.get("threads") or []
    res.check(nf.get("kind") == "hang", "non-fatal hang", f"META nf {nf}")
    res.check((nf.get("duration_ns") or 0) >= 2_000_000_000, "hang duration", f"{nf.get('duration_ns')} ns")
    res.check(exc.get("signal") is None and exc.get("mach_type") is None and not any(t.get("crashed") for t in threads),
              "no exception", f"exception {exc}, crashed {[t.get('index') for t in threads if t.get('crashed')]}")
    res.check(nf.get("thread") == 0, "hung thread is main", f"nf thread {nf.get('thread')}")
    main = next((t for t in log.get("threads") or [] if t.get("index") == 0), None)
    names = frame_names(main) if main else []
    res.check(any(exp.function in n for n, _ in names), "trigger function",
              f"{exp.function} not on the main thread: {', '.join(n or '?' for n, _ in names[:12])}")


def check_report(res: Result, exp: Expect, doc: dict, rc: int, stderr: str, bundle_id: str | None) -> None:
    report = doc.get("report") or {}
    log = doc.get("crash_log") or {}
    meta = report.get("meta") or {}
    proc = meta.get("process") or {}
    exc = report.get("exception") or {}
    threads = report.get("threads") or []
    arch = meta.get("arch") or ""

    problems = doc.get("problems") or []
    res.check(rc == 0 and not problems, "intact", f"viewer exit {rc}, problems {problems} {stderr.strip()}")

    want = (PROCESS_NAME, bundle_id or proc.get("bundle_id"), SHORT_VERSION, BUILD_VERSION)
    got = (proc.get("name"), proc.get("bundle_id"), proc.get("short_version"), proc.get("build_version"))
    res.check(got == want, "process", f"(name, bundle id, version, build) {got}, want {want}")

    if exp.kind == "hang":
        check_hang(res, exp, doc)
        return

    # Exception.
    mach_ok, sig_ok = expected_exception(exp.kind, arch)
    mt, sig, addr = exc.get("mach_type"), exc.get("signal"), exc.get("fault_address")
    exc_text = (log.get("exception") or {}).get("exception_type")
    res.check(mt in mach_ok and sig in sig_ok, "exception",
              f"mach type {mt} signal {sig} ({exc_text}) on {arch or '?'}; want mach type in {sorted(mach_ok, key=str)}"
              f" and signal in {sorted(sig_ok, key=str)}")
    if exp.address is not None:
        res.check(addr == exp.address, "fault address", f"{addr if addr is None else hex(addr)}, want {hex(exp.address)}")

    # Crashed thread: the EXCEPTION section's index and the THREAD flagged crashed must agree.
    ct = exc.get("crashed_thread")
    flagged = [t.get("index") for t in threads if t.get("crashed")]
    crashed = next((t for t in threads if t.get("index") == ct), None)
    if res.check(crashed is not None and flagged == [ct], "crashed thread recorded",
                 f"exception says thread {ct}, threads flagged crashed {flagged}"):
        name, queue = crashed.get("name"), crashed.get("queue")
        if exp.thread == "main":
            res.check(ct == 0, "crashed thread is main", f"thread {ct} (name {name!r}, queue {queue!r})")
            if queue is not None and queue != "com.apple.main-thread":
                res.notes.append(f"main thread's queue label is {queue!r}")
        else:
            res.check(ct != 0, "crashed thread is not main", "thread 0 crashed")
            if exp.thread == "plain-thread":
                if name is None:
                    res.notes.append("crashed thread has no name recorded")
                else:
                    res.check(name == PLAIN_THREAD_NAME, "thread name", f"{name!r}, want {PLAIN_THREAD_NAME!r}")
            if exp.thread == "queue":
                if queue is None:
                    res.notes.append("crashed thread has no dispatch queue label recorded")
                else:
                    res.check(queue == CRASH_QUEUE_LABEL, "queue label", f"{queue!r}, want {CRASH_QUEUE_LABEL!r}")

    # Trigger function on the crashed thread, symbolicated through the dSYM (with a source file).
    log_threads = log.get("threads") or []
    log_crashed = next((t for t in log_threads if t.get("crashed")), None)
    names = frame_names(log_crashed) if log_crashed else []
    hits = [(n, f) for n, f in names if exp.function in n]
    shown = ", ".join(n or "?" for n, _ in names[:12])
    if res.check(bool(hits), "trigger function", f"{exp.function} not on the crashed thread: {shown}"):
        res.check(any(f.endswith(exp.source) for _, f in hits), "source file from dSYM",
                  f"{exp.function} frames name files {sorted({f for _, f in hits})}, want {exp.source}")
    if exp.frame0:
        first = names[0][0] if names else ""
        res.check(exp.function in first, "frame 0", f"frame 0 is {first or '?'}, want {exp.function} (the faulting pc)")
    if exp.function == "harness_stack_overflow_recurse":
        raw = crashed or {}
        res.notes.append(f"stack overflow: {len(raw.get('frames') or [])} frames kept, "
                         f"truncated={raw.get('frames_truncated', False)}, repeats={raw.get('repeats') or []}")

    if exp.other_thread_function:
        others = [t for t in log_threads if not t.get("crashed")]
        holder = [t.get("index") for t in others if any(exp.other_thread_function in n for n, _ in frame_names(t))]
        res.check(bool(holder), "lock holder", f"no other thread has {exp.other_thread_function} on its stack")

    # Messages (__crash_info).
    texts = [m.get("text") or "" for m in report.get("messages") or []]
    if exp.message:
        res.check(any(exp.message in t for t in texts), "message", f"{exp.message!r} not in MESSAGES {texts}")
    if exp.note_message and not any(exp.note_message in t for t in texts):
        res.notes.append(f"{exp.note_message!r} not in MESSAGES {texts}")

    # The uncaught language exception (EXCEPTION lx) and its throw-site stack (Last Exception Backtrace).
    if exp.lx:
        lx = (report.get("exception") or {}).get("language") or {}
        got = (lx.get("kind"), lx.get("type_name"), lx.get("reason") if exp.lx[2] is not None else None)
        res.check(got == exp.lx, "language exception", f"{got}, want {exp.lx}")
    if exp.lx_backtrace_function:
        bt = log.get("last_exception_backtrace") or []
        names = [((f.get("symbol") or {}).get("name") or "") for f in bt]
        res.check(any(exp.lx_backtrace_function in n for n in names), "last exception backtrace",
                  f"{exp.lx_backtrace_function} not in {names}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--viewer", required=True, help="viewer binary")
    ap.add_argument("--store", required=True, type=Path, help="the reports directory of a collector store (viewer serve --store DIR: DIR/reports)")
    ap.add_argument("--symbols", action="append", default=[], help="dSYM or directory searched for dSYMs")
    ap.add_argument("--run-id", required=True, help="harness.run value of this run")
    ap.add_argument("--bundle-id", help="expected bundle id (default: not compared)")
    ap.add_argument("--out", type=Path, help="write <trigger>-<id>.crash (Apple text) and .json here")
    ap.add_argument("--triggers", help="comma-separated subset of triggers that must be present (default: all)")
    a = ap.parse_args()

    if not a.store.is_dir():
        print(f"check_reports: no store directory {a.store}", file=sys.stderr)
        return 2
    if not a.symbols:
        print("check_reports: give --symbols (the app's dSYM or a directory holding it)", file=sys.stderr)
        return 2
    selected = [t for t in (a.triggers.split(",") if a.triggers else EXPECTATIONS) if t]
    unknown = [t for t in selected if t not in EXPECTATIONS]
    if unknown:
        print(f"check_reports: unknown trigger(s) {unknown}; known: {', '.join(EXPECTATIONS)}", file=sys.stderr)
        return 2
    if a.out:
        a.out.mkdir(parents=True, exist_ok=True)

    results = {t: Result(t) for t in selected}
    docs: dict[str, list[tuple[str, dict, int, str]]] = {t: [] for t in selected}
    other_runs = 0
    for path in sorted(a.store.glob("*.crashreport")):
        rc, out, err = render(a.viewer, path, a.symbols, "json")
        if rc not in (0, 3):
            print(f"check_reports: viewer cannot read {path.name} (exit {rc}): {err.strip()}", file=sys.stderr)
            return 2
        doc = json.loads(out)
        user = (doc.get("report") or {}).get("user") or {}
        if user.get("harness.run") != a.run_id:
            other_runs += 1
            continue
        trigger = user.get("harness.trigger")
        rid = path.name.removesuffix(".crashreport")
        if trigger not in EXPECTATIONS:
            print(f"check_reports: {rid}: report of this run with unknown trigger {trigger!r}", file=sys.stderr)
        if trigger not in results:
            continue
        docs[trigger].append((rid, doc, rc, err))
        if a.out:
            (a.out / f"{trigger}-{rid}.json").write_text(out)
            _, text, _ = render(a.viewer, path, a.symbols, "text")
            (a.out / f"{trigger}-{rid}.crash").write_text(text)

    failed = 0
    for t in selected:
        res, found = results[t], docs[t]
        res.report_ids = [rid for rid, *_ in found]
        if res.check(len(found) == 1, "one report", f"{len(found)} reports of this run name {t}: {res.report_ids}"):
            _, doc, rc, err = found[0]
            check_report(res, EXPECTATIONS[t], doc, rc, err, a.bundle_id)
        status = "PASS" if not res.failures else "FAIL"
        failed += status == "FAIL"
        print(f"{status}  {t:<22} {' '.join(res.report_ids) or '(no report)'}")
        for f in res.failures:
            print(f"        FAIL  {f}")
        for n in res.notes:
            print(f"        note  {n}")
        if not res.failures:
            print(f"        ok    {', '.join(res.passed)}")
    if other_runs:
        print(f"({other_runs} report(s) of other runs in the store were ignored)")
    print(f"{len(selected) - failed} of {len(selected)} triggers passed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
