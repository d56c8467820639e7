//! Prints a [`CrashLog`] in Apple's crash text layout, byte for byte as `docs/apple-crash-format.md` describes:
//! modern (iOS 15+/macOS 12+, checked against Apple's own translations of the fixtures) or legacy (iOS <= 14).
//!
//! Pure: no I/O, no symbol lookup (symbols are filled into the model beforehand by [`crate::symbolicate`]).

use crate::crashlog::{CrashLog, Flavor, FrameLog, ImageLog, SymbolInfo, ThreadLog, ThreadState};
use std::fmt::Write as _;

mod macos26;

/// Which era's layout to print.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Layout {
    /// iOS 15+/macOS 12+ (Console / Xcode translation of `.ips`).
    #[default]
    Modern,
    /// iOS <= 14 / macOS <= 11 ReportCrash text.
    Legacy,
}

/// Renders the log as text.
pub fn render(log: &CrashLog, layout: Layout) -> String {
    let mut out = String::with_capacity(16 * 1024 + log.threads.len() * 4096);
    match (log.flavor, layout) {
        (Flavor::Macos, Layout::Modern) if macos26::applies(log) => macos26::render(log, &mut out),
        (Flavor::Macos, Layout::Modern) => render_macos(log, &mut out),
        (_, Layout::Modern) => render_ios(log, &mut out, false),
        (_, Layout::Legacy) => render_ios(log, &mut out, true),
    }
    out
}

/// A header line: label and colon, then spaces to `width` (at least one), then the value.
fn field(out: &mut String, width: usize, label: &str, value: Option<&str>) {
    if let Some(v) = value {
        let l = format!("{label}: ");
        let _ = writeln!(out, "{l:<width$}{v}");
    }
}

fn name_pid(name: Option<&str>, pid: Option<u64>) -> Option<String> {
    match (name, pid) {
        (Some(n), Some(p)) => Some(format!("{n} [{p}]")),
        (Some(n), None) => Some(n.to_string()),
        (None, Some(p)) => Some(format!("??? [{p}]")),
        (None, None) => None,
    }
}

fn code_type(log: &CrashLog) -> Option<String> {
    let h = &log.header;
    h.code_type.as_ref().map(|c| format!("{c} ({})", if h.translated { "Translated" } else { "Native" }))
}

fn version(log: &CrashLog, legacy: bool) -> Option<String> {
    let h = &log.header;
    let (a, b) = if legacy { (&h.bundle_version, &h.short_version) } else { (&h.short_version, &h.bundle_version) };
    match (a, b) {
        (Some(a), Some(b)) => Some(format!("{a} ({b})")),
        (Some(a), None) => Some(a.clone()),
        (None, Some(b)) => Some(format!("??? ({b})")),
        (None, None) => None,
    }
}

fn problems_block(log: &CrashLog, out: &mut String) {
    if log.problems.is_empty() {
        return;
    }
    out.push_str("Report Damage: this report is incomplete; everything below is what survived.\n");
    for p in &log.problems {
        let _ = writeln!(out, "  - {p}");
    }
    out.push('\n');
}

fn render_ios(log: &CrashLog, out: &mut String, legacy: bool) {
    const W: usize = 21;
    let h = &log.header;
    out.push('\n');
    problems_block(log, out);
    field(out, W, "Incident Identifier", h.incident.as_deref());
    field(out, W, "CrashReporter Key", h.crash_reporter_key.as_deref());
    field(out, W, "Hardware Model", h.hardware_model.as_deref());
    field(out, W, "Process", name_pid(h.process_name.as_deref(), h.pid).as_deref());
    field(out, W, "Path", h.path.as_deref());
    field(out, W, "Identifier", h.identifier.as_deref());
    field(out, W, "Version", version(log, legacy).as_deref());
    // iOS 18 and 26 App Store reports (Console translations seen in public repositories without a licence, so
    // not in the corpus; the test that checks it edits a corpus report).
    field(out, W, "AppStoreTools", h.app_store_tools.as_deref());
    field(out, W, "Code Type", code_type(log).as_deref());
    field(out, W, "Role", h.role.as_deref());
    field(out, W, "Parent Process", name_pid(h.parent_name.as_deref(), h.parent_pid).as_deref());
    let coalition = h.coalition_name.as_deref().map(|n| match h.coalition_id {
        Some(id) => format!("{n} [{id}]"),
        None => n.to_string(),
    });
    field(out, W, "Coalition", coalition.as_deref());
    // iOS Simulator apps (the Simulator's trampoline on the Mac); none of the iOS device `.ips` files seen (seven,
    // in the corpus and in unlicensed repositories) has a `responsibleProc`.
    field(out, W, "Responsible Process", name_pid(h.responsible_name.as_deref(), h.responsible_pid).as_deref());
    out.push('\n');
    field(out, W, "Date/Time", h.date_time.as_deref());
    field(out, W, "Launch Time", h.launch_time.as_deref());
    field(out, W, "OS Version", h.os_version.as_deref());
    field(out, W, "Release Type", h.release_type.as_deref());
    field(out, W, "Baseband Version", h.baseband_version.as_deref());
    field(out, W, "Report Version", Some(h.report_version.as_deref().unwrap_or("104")));
    out.push('\n');
    if legacy {
        out.push('\n');
    }

    let e = &log.exception;
    let line = |out: &mut String, label: &str, v: &Option<String>| {
        if let Some(v) = v {
            let _ = writeln!(out, "{label}{v}");
        }
    };
    if let Some(ev) = &log.event {
        // A non-fatal report: spindump's `Event:` / `Duration:` lines, and the reason, where a crash has its
        // exception lines (values in the Exception Type column).
        let _ = writeln!(out, "Event:           {}", ev.kind);
        line(out, "Duration:        ", &ev.duration);
        line(out, "Reason:          ", &ev.reason);
    }
    line(out, "Exception Type:  ", &e.exception_type);
    line(out, "Exception Subtype: ", &e.subtype);
    line(out, "Exception Message: ", &e.message);
    line(out, "Exception Codes: ", &e.codes);
    if let Some(info) = &log.vm_region_info {
        let _ = writeln!(out, "VM Region Info: {info}");
    }
    line(out, "Exception Note:  ", &e.note);
    if legacy {
        if let Some(ind) = &e.termination_indicator {
            let _ = writeln!(out, "Termination Signal: {ind}");
        }
        if let Some(ns) = &e.termination_namespace {
            let code = e.termination_code.map(|c| format!(", Code {c:#x}")).unwrap_or_default();
            let _ = writeln!(out, "Termination Reason: Namespace {ns}{code}");
        }
    } else if let Some(reason) = termination_modern(log) {
        let _ = writeln!(out, "Termination Reason: {reason}");
        // The `.ips` `termination.reasons` and `details`, one a line (an iOS 15 TCC termination in the corpus:
        // `This app has crashed because it attempted to access privacy-sensitive data ...`).
        for l in &e.termination_lines {
            let _ = writeln!(out, "{l}");
        }
    }
    line(out, "Terminating Process: ", &e.terminating_process);
    if let Some(t) = log.triggered_thread {
        if !legacy {
            out.push('\n');
        }
        let _ = writeln!(out, "Triggered by Thread:  {t}");
    }
    out.push('\n');
    let after = if legacy { 1 } else { 2 };
    text_block(out, "Application Specific Information:", &log.asi, after);
    asi_backtraces(out, log, after);
    user_values(out, log, after);
    text_block(out, "Kernel Triage:", log.kernel_triage.as_slice(), 2);
    last_exception_backtrace(out, log, legacy);
    if log.simulator {
        // The Simulator's report: macOS's thread headers and image lines in the iOS layout.
        threads_and_state(out, log, legacy, thread_header_macos);
        binary_images(out, log, image_line_macos);
    } else {
        threads_and_state(out, log, legacy, |out, t| thread_header_ios(out, t, legacy));
        binary_images(out, log, |out, im| image_line_ios(out, im, legacy));
    }
    out.push_str("\nEOF\n\n");
}

/// A titled block of text entries (Application Specific Information, Kernel Triage): the title line, each entry
/// ended by one newline (entries may hold several lines), then `blank_after` empty lines. Nothing when there are no
/// entries. Shared by every layout; only the number of empty lines after it differs.
fn text_block<S: AsRef<str>>(out: &mut String, title: &str, entries: &[S], blank_after: usize) {
    if entries.is_empty() {
        return;
    }
    out.push_str(title);
    out.push('\n');
    for e in entries {
        let e = e.as_ref();
        out.push_str(e);
        if !e.ends_with('\n') {
            out.push('\n');
        }
    }
    for _ in 0..blank_after {
        out.push('\n');
    }
}

/// `User Values:` (not an Apple section; ours, `viewer/README.md`): one `key: value` line per key/value the app
/// set, in key order, then `blank_after` empty lines like Application Specific Information. Nothing when none.
fn user_values(out: &mut String, log: &CrashLog, blank_after: usize) {
    let lines: Vec<String> = log.user_values.iter().map(|(k, v)| format!("{k}: {v}")).collect();
    text_block(out, "User Values:", &lines, blank_after);
}

/// `Application Specific Backtrace N:` (N from 0) for each `.ips` `asiBacktraces` entry, its text as written, then
/// `blank_after` empty lines, as Application Specific Information (macOS 12.7.6 Console translation in the corpus:
/// two). Nothing when there are none.
fn asi_backtraces(out: &mut String, log: &CrashLog, blank_after: usize) {
    for (i, backtrace) in log.asi_backtraces.iter().enumerate() {
        text_block(out, &format!("Application Specific Backtrace {i}:"), std::slice::from_ref(backtrace), blank_after);
    }
}

/// `Last Exception Backtrace:` and its frames in the thread layout, then one empty line (Apple prints it before
/// the threads). Nothing when there is no throw-site stack, and nothing when the report has Application Specific
/// Backtraces: Apple's macOS 12.7.6 translation of an `.ips` with both prints only those (the same stack as text).
/// Other OS versions with both are unverified and follow the same rule.
fn last_exception_backtrace(out: &mut String, log: &CrashLog, legacy: bool) {
    if log.last_exception_backtrace.is_empty() || !log.asi_backtraces.is_empty() {
        return;
    }
    out.push_str("Last Exception Backtrace:\n");
    frame_lines(out, log, &log.last_exception_backtrace, legacy);
    out.push('\n');
}

/// The thread sections (each followed by an empty line), then the crashed thread's register block and instruction
/// stream: the same in every layout but for the thread header line, which `header` writes.
fn threads_and_state(out: &mut String, log: &CrashLog, legacy: bool, header: impl Fn(&mut String, &ThreadLog)) {
    for t in &log.threads {
        header(out, t);
        frames(out, log, t, legacy);
        out.push('\n');
    }
    if let Some(st) = &log.crashed_state {
        out.push('\n');
        registers(out, st);
        out.push('\n');
    }
    if let Some(is) = &log.instruction_stream {
        instruction_stream(out, is);
    }
}

/// `Binary Images:` and one line per image, written by `line` (the layouts differ in the line only).
fn binary_images(out: &mut String, log: &CrashLog, line: impl Fn(&mut String, &ImageLog)) {
    out.push_str("Binary Images:\n");
    for im in &log.images {
        line(out, im);
    }
}

fn termination_modern(log: &CrashLog) -> Option<String> {
    let e = &log.exception;
    let ns = e.termination_namespace.as_deref()?;
    let mut s = ns.to_string();
    if let Some(c) = e.termination_code {
        // The indicator follows the code after a space even when there is none (the iOS 15 TCC termination in the
        // corpus: `Termination Reason: TCC 0 `, with the trailing space).
        let _ = write!(s, " {c} {}", e.termination_indicator.as_deref().unwrap_or(""));
    } else if let Some(ind) = &e.termination_indicator {
        let _ = write!(s, " {ind}");
    }
    Some(s)
}

fn thread_header_ios(out: &mut String, t: &ThreadLog, legacy: bool) {
    let n = t.index;
    match (&t.name, &t.queue) {
        (Some(name), Some(q)) => {
            let _ = writeln!(out, "Thread {n} name:  {name} Dispatch queue: {q}");
        }
        (Some(name), None) => {
            let _ = writeln!(out, "Thread {n} name:  {name}");
        }
        (None, Some(q)) => {
            let sp = if legacy { "  " } else { "   " };
            let _ = writeln!(out, "Thread {n} name:{sp}Dispatch queue: {q}");
        }
        (None, None) => {}
    }
    if t.crashed {
        let _ = writeln!(out, "Thread {n} Crashed:");
    } else {
        let _ = writeln!(out, "Thread {n}:");
    }
}

fn thread_header_macos(out: &mut String, t: &ThreadLog) {
    let n = t.index;
    let crashed = if t.crashed { " Crashed" } else { "" };
    let suffix = thread_suffix_macos(t);
    let colons = if suffix.is_empty() { ":" } else { "::" };
    let _ = writeln!(out, "Thread {n}{crashed}{colons}{suffix}");
}

/// ` <name> Dispatch queue: <q>` as macOS prints after `Thread N::` (empty when neither).
fn thread_suffix_macos(t: &ThreadLog) -> String {
    let mut s = String::new();
    if t.name.is_none() && t.queue.is_none() {
        return s;
    }
    s.push(' ');
    if let Some(name) = &t.name {
        s.push_str(name);
    }
    if let Some(q) = &t.queue {
        let _ = write!(s, " Dispatch queue: {q}");
    }
    s
}

fn basename(p: &str) -> &str {
    p.rsplit(['/', '\\']).next().unwrap_or(p)
}

/// The symbol part of a frame line: `symbol + offset (file:line)` or `0xLOAD + offset`.
pub fn symbol_part(frame: &FrameLog, image: Option<&ImageLog>) -> String {
    match &frame.symbol {
        Some(sym) => symbol_text(sym, frame.inlined),
        // An image the report knows nothing of (no name, no path: the `.ips` entry Apple writes for addresses
        // outside every loaded image, base 0) has no load address to count from: Apple prints `???` (macOS 13.6
        // and 15.5 Console translations in the corpus).
        None if image.is_some_and(|i| i.name.is_none() && i.path.is_none()) => "???".to_string(),
        None => {
            let base = image.map(|i| i.base).unwrap_or(0);
            format!("{base:#x} + {}", frame.address.wrapping_sub(base))
        }
    }
}

fn symbol_text(sym: &SymbolInfo, inlined: bool) -> String {
    let mut s = String::new();
    push_symbol_text(&mut s, sym, inlined);
    s
}

/// Appends what [`symbol_part`] gives for a frame with symbol `sym`: `name + offset (file:line)`, then
/// ` [inlined]` when `inlined`.
pub(crate) fn push_symbol_text(s: &mut String, sym: &SymbolInfo, inlined: bool) {
    s.push_str(&sym.name);
    if let Some(off) = sym.offset {
        let _ = write!(s, " + {off}");
    }
    // Apple prints the location only with a line: an `.ips` frame with `sourceFile` but no `sourceLine` (Swift
    // `<compiler-generated>` code, and `main`) has none in its translation (macOS 12.7.6 Console report in the
    // corpus). Symbolication from DWARF always gives a line (0 when the line table has none, as atos prints).
    if let (Some(file), Some(line)) = (&sym.file, sym.line) {
        let file = if sym.file_verbatim { file } else { basename(file) };
        let _ = write!(s, " ({file}:{line})");
    }
    if inlined {
        s.push_str(" [inlined]");
    }
}

fn frames(out: &mut String, log: &CrashLog, t: &ThreadLog, legacy: bool) {
    frame_lines(out, log, &t.frames, legacy);
    for note in &t.notes {
        let _ = writeln!(out, "    {note}");
    }
}

/// One five-column line per frame.
fn frame_lines(out: &mut String, log: &CrashLog, frames: &[FrameLog], legacy: bool) {
    for (i, f) in frames.iter().enumerate() {
        let image = f.image.and_then(|x| log.images.get(x));
        let name = image.and_then(|im| im.name.as_deref()).unwrap_or("???");
        let sym = symbol_part(f, image);
        if legacy {
            let _ = writeln!(out, "{i:<4}{name:<30}\t0x{:016x} {sym}", f.address);
        } else {
            let _ = writeln!(out, "{i:<4}{name:<30}\t{:#18x} {sym}", f.address);
        }
    }
}

fn cell(out: &mut String, name: &str, v: u64, wide: bool) {
    if wide {
        let _ = write!(out, "{name:>5}: 0x{v:016x}");
    } else {
        let _ = write!(out, "{name:>5}: 0x{v:08x}");
    }
}

fn registers(out: &mut String, st: &ThreadState) {
    let get = |n: &str| st.registers.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
    match st.register_set.as_str() {
        "arm64" => {
            let _ = writeln!(out, "Thread {} crashed with ARM Thread State (64-bit):", st.thread);
            let mut rows: Vec<Vec<&str>> = Vec::new();
            let xs: Vec<String> = (0..29).map(|i| format!("x{i}")).collect();
            let mut row: Vec<&str> = Vec::new();
            for x in xs.iter().take(28) {
                row.push(x);
                if row.len() == 4 {
                    rows.push(std::mem::take(&mut row));
                }
            }
            rows.push(vec![&xs[28], "fp", "lr"]);
            rows.push(vec!["sp", "pc", "cpsr"]);
            rows.push(vec!["far", "esr"]);
            for r in rows {
                let present: Vec<(&str, u64)> = r.iter().filter_map(|n| get(n).map(|v| (*n, v))).collect();
                if present.is_empty() {
                    continue;
                }
                out.push(' ');
                for (n, v) in present {
                    cell(out, n, v, !matches!(n, "cpsr" | "esr"));
                    if n == "esr" {
                        if let Some(d) = &st.fault_description {
                            let _ = write!(out, " {d}");
                        }
                    }
                }
                out.push('\n');
            }
        }
        "x86_64" => {
            let _ = writeln!(out, "Thread {} crashed with X86 Thread State (64-bit):", st.thread);
            let rows: [&[&str]; 5] = [
                &["rax", "rbx", "rcx", "rdx"],
                &["rdi", "rsi", "rbp", "rsp"],
                &["r8", "r9", "r10", "r11"],
                &["r12", "r13", "r14", "r15"],
                &["rip", "rflags", "cr2"],
            ];
            for r in rows {
                let present: Vec<(&str, u64)> = r.iter().filter_map(|n| get(n).map(|v| (*n, v))).collect();
                if present.is_empty() {
                    continue;
                }
                for (n, v) in present {
                    cell(out, if n == "rflags" { "rfl" } else { n }, v, true);
                }
                out.push('\n');
            }
            out.push_str("  \n");
            if let Some(cpu) = st.cpu {
                let _ = writeln!(out, "Logical CPU:     {cpu}");
            }
            if let Some(err) = get("err") {
                // Apple prints `0x%08x %s`: the space stays when the trap has no description.
                let _ = write!(out, "Error Code:      0x{err:08x} ");
                if let Some(d) = &st.fault_description {
                    out.push_str(d);
                }
                out.push('\n');
            }
            if let Some(trap) = get("trapno") {
                let _ = writeln!(out, "Trap Number:     {trap}");
            }
        }
        other => {
            let _ = writeln!(out, "Thread {} crashed with {other} Thread State:", st.thread);
            for chunk in st.registers.chunks(4) {
                for (n, v) in chunk {
                    cell(out, n, *v, true);
                }
                out.push('\n');
            }
        }
    }
}

fn instruction_stream(out: &mut String, is: &crate::crashlog::InstructionStream) {
    let _ = writeln!(out, "Thread {} instruction stream:", is.thread);
    for (row, chunk) in is.bytes.chunks(16).enumerate() {
        let mut line = String::from(" ");
        let mut marked_line = false;
        for (i, b) in chunk.iter().enumerate() {
            let pos = row * 16 + i;
            // The separator before the 9th byte of a row stays `-` even when that byte is the one that
            // crashed: Apple prints `10-0f]0b` there, no `[` (macOS 12.7.6 Console translation in the corpus,
            // stream offset 184). A `]` in that column is covered by no pair and is printed as before.
            let sep = if pos == is.offset {
                marked_line = true;
                if i == 8 {
                    '-'
                } else {
                    '['
                }
            } else if pos > 0 && pos - 1 == is.offset && i > 0 {
                ']'
            } else if i == 8 {
                '-'
            } else {
                ' '
            };
            line.push(sep);
            let _ = write!(line, "{b:02x}");
        }
        if chunk.last().is_some() && row * 16 + chunk.len() - 1 == is.offset {
            line.push(']');
        } else {
            line.push(' ');
        }
        for _ in chunk.len()..16 {
            line.push_str("   ");
        }
        line.push(' ');
        for b in chunk {
            line.push(if (0x20..0x7f).contains(b) { *b as char } else { '.' });
        }
        if marked_line {
            line.push_str("\t<==");
        }
        out.push_str(&line);
        out.push('\n');
    }
    out.push('\n');
}

fn uuid_plain(im: &ImageLog) -> String {
    im.id.as_ref().map(|id| id.to_hex()).unwrap_or_default()
}

fn uuid_dashed(im: &ImageLog) -> String {
    let hex = uuid_plain(im);
    if hex.len() != 32 {
        return hex;
    }
    format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
}

fn image_line_ios(out: &mut String, im: &ImageLog, legacy: bool) {
    let end = im.base.wrapping_add(im.size).wrapping_sub(1);
    let name = im.name.as_deref().unwrap_or("???");
    let arch = im.arch.as_deref().unwrap_or("unknown-arch");
    let path = im.path.as_deref().unwrap_or("???");
    let id = uuid_plain(im);
    if legacy {
        let _ = writeln!(out, "{:#x} - {:#x} {name} {arch}  <{id}> {path}", im.base, end);
    } else {
        let _ = writeln!(out, "{:#18x} - {:#18x} {name} {arch}  <{id}> {path}", im.base, end);
    }
}

fn image_line_macos(out: &mut String, im: &ImageLog) {
    let end = im.base.wrapping_add(im.size).wrapping_sub(1);
    let name = im.bundle_id.as_deref().or(im.name.as_deref()).unwrap_or("???");
    let version = im.short_version.as_deref().unwrap_or("*");
    let path = im.path.as_deref().unwrap_or("???");
    let _ = writeln!(out, "{:#18x} - {:#18x} {name} ({version}) <{}> {path}", im.base, end, uuid_dashed(im));
}

fn render_macos(log: &CrashLog, out: &mut String) {
    const W: usize = 23;
    let h = &log.header;
    out.push('\n');
    problems_block(log, out);
    field(out, W, "Process", name_pid(h.process_name.as_deref(), h.pid).as_deref());
    field(out, W, "Path", h.path.as_deref());
    field(out, W, "Identifier", h.identifier.as_deref().or(h.process_name.as_deref()));
    field(out, W, "Version", Some(version(log, false).as_deref().unwrap_or("???")));
    field(out, W, "App Item ID", h.app_item_id.as_deref());
    field(out, W, "App External ID", h.app_external_id.as_deref());
    field(out, W, "Code Type", code_type(log).as_deref());
    field(out, W, "Parent Process", name_pid(h.parent_name.as_deref(), h.parent_pid).as_deref());
    field(out, W, "Responsible", name_pid(h.responsible_name.as_deref(), h.responsible_pid).as_deref());
    field(out, W, "User ID", h.user_id.map(|u| u.to_string()).as_deref());
    out.push('\n');
    field(out, W, "Date/Time", h.date_time.as_deref());
    field(out, W, "OS Version", h.os_version.as_deref());
    field(out, W, "Report Version", Some(h.report_version.as_deref().unwrap_or("12")));
    field(out, W, "Bridge OS Version", h.bridge_os_version.as_deref());
    field(out, W, "Anonymous UUID", h.crash_reporter_key.as_deref());
    out.push('\n');
    field(out, W, "Sleep/Wake UUID", h.sleep_wake_uuid.as_deref());
    out.push('\n');
    if let Some(up) = h.uptime_seconds {
        let _ = writeln!(out, "Time Awake Since Boot: {up} seconds");
        field(out, W, "Time Since Wake", h.wake_time_seconds.map(|w| format!("{w} seconds")).as_deref());
        out.push('\n');
    }
    if let Some(sip) = &h.sip {
        let _ = writeln!(out, "System Integrity Protection: {sip}\n");
    }
    if let Some(t) = log.triggered_thread {
        // Two spaces before the thread's name and before its queue (`0  CrBrowserMain  Dispatch queue: ...`),
        // unlike the single spaces of the thread's own header line.
        let thread = log.threads.iter().find(|x| x.index == t);
        let mut suffix = String::new();
        if let Some(name) = thread.and_then(|x| x.name.as_deref()) {
            let _ = write!(suffix, "  {name}");
        }
        if let Some(q) = thread.and_then(|x| x.queue.as_deref()) {
            let _ = write!(suffix, "  Dispatch queue: {q}");
        }
        // A non-fatal report has no crashed thread: the thread it is about triggered it.
        let label = if log.event.is_some() { "Triggered by Thread" } else { "Crashed Thread" };
        field(out, W, label, Some(&format!("{t}{suffix}")));
        out.push('\n');
    }
    if let Some(ev) = &log.event {
        // A non-fatal report: spindump's `Event:` / `Duration:` lines and the reason, where a crash has its exception
        // lines.
        field(out, W, "Event", Some(&ev.kind));
        field(out, W, "Duration", ev.duration.as_deref());
        field(out, W, "Reason", ev.reason.as_deref());
    }
    let e = &log.exception;
    field(out, W, "Exception Type", e.exception_type.as_deref());
    field(out, W, "Exception Codes", e.subtype.as_deref());
    field(out, W, "Exception Codes", e.codes.as_deref());
    field(out, W, "Exception Message", e.message.as_deref());
    field(out, W, "Exception Note", e.note.as_deref());
    out.push('\n');
    // Without a `termination` object in the `.ips` there are no termination lines and no empty line after them:
    // Application Specific Information follows the exception block's empty line directly (macOS 12.7.6 Console
    // translation of an `abort()` in the corpus). Non-fatal event reports (no Apple sample) keep the empty line.
    if macos_termination(out, log, " ", W) || log.event.is_some() {
        out.push('\n');
    }
    macos_info_blocks(out, log, 2);
    macos_tail(log, out);
}

/// macOS `Termination Reason:` (`Namespace NS, Code C` then the indicator after `sep`) and `Terminating Process:`,
/// labels padded to `width`: up to macOS 15 a space and 23 columns, from macOS 26 `", "` and 21 columns. Returns
/// whether any line was written.
fn macos_termination(out: &mut String, log: &CrashLog, sep: &str, width: usize) -> bool {
    let e = &log.exception;
    let before = out.len();
    if let Some(ns) = &e.termination_namespace {
        let mut reason = format!("Namespace {ns}");
        if let Some(c) = e.termination_code {
            let _ = write!(reason, ", Code {c}");
        }
        if let Some(ind) = &e.termination_indicator {
            let _ = write!(reason, "{sep}{ind}");
        }
        field(out, width, "Termination Reason", Some(&reason));
        // The `.ips` `termination.reasons`, then `details`, one a line (macOS 14.7 Console translations of a dyld
        // `Library missing` in the corpus: `Library not loaded: ...`, `Referenced from: ...`, `Reason: tried: ...`,
        // `(terminated at launch; ignore backtrace)`). Where `Terminating Process:` goes when both are present is
        // not shown by any pair; it is kept after them.
        for l in &e.termination_lines {
            let _ = writeln!(out, "{l}");
        }
    }
    field(out, width, "Terminating Process", e.terminating_process.as_deref());
    out.len() != before
}

/// macOS Application Specific Information, Application Specific Backtraces, User Values and Kernel Triage (each
/// followed by `blank_after` empty lines: 2 in both layouts, as in Apple's macOS 12.7.6, 15.5 and macOS 26
/// translations in the corpus), then `VM Region Info:`.
fn macos_info_blocks(out: &mut String, log: &CrashLog, blank_after: usize) {
    text_block(out, "Application Specific Information:", &log.asi, blank_after);
    asi_backtraces(out, log, blank_after);
    user_values(out, log, blank_after);
    text_block(out, "Kernel Triage:", log.kernel_triage.as_slice(), blank_after);
    if let Some(info) = &log.vm_region_info {
        let _ = writeln!(out, "VM Region Info: {info}\n");
    }
}

/// Last Exception Backtrace, threads, crashed thread state, Binary Images, External Modification Summary and VM
/// Region Summary: the same in the macOS 12-15 and macOS 26 layouts.
fn macos_tail(log: &CrashLog, out: &mut String) {
    last_exception_backtrace(out, log, false);
    threads_and_state(out, log, false, thread_header_macos);
    // On macOS, the x86_64 state block (ending in `Trap Number:`) is followed by two empty lines when no instruction
    // stream comes after it (macOS 13.6 Console translation in the corpus), one when one does (macOS 12.4).
    if log.instruction_stream.is_none()
        && log.crashed_state.as_ref().is_some_and(|st| st.register_set == report_format::regs::X86_64)
    {
        out.push('\n');
    }
    binary_images(out, log, image_line_macos);
    out.push('\n');
    if let Some(m) = &log.ext_mods {
        out.push_str("External Modification Summary:\n");
        for (title, v) in [
            ("Calls made by other processes targeting this process:", m.targeted),
            ("Calls made by this process:", m.caller),
            ("Calls made by all processes on this machine:", m.system),
        ] {
            let _ = writeln!(
                out,
                "  {title}\n    task_for_pid: {}\n    thread_create: {}\n    thread_set_state: {}",
                v[0], v[1], v[2]
            );
        }
        out.push('\n');
    }
    if let Some(vm) = &log.vm_summary {
        out.push_str("VM Region Summary:\n");
        out.push_str(vm);
        if !vm.ends_with('\n') {
            out.push('\n');
        }
        out.push_str("\n\n\n");
    }
}
