//! The macOS 26 layout of Console's translation: the same threads, thread state, Binary Images and summaries as
//! macOS 12-15, under a reordered header (21-column labels, the identifiers after the OS version, `Triggered by
//! Thread:` with the thread's name and queue, `Exception Subtype:`, a comma before the termination indicator).
//!
//! Checked byte for byte against ten Console reports of macOS 26.3.1 (tests/fixtures/third_party/pitchenga) and one
//! of macOS 26.4.1 with a `Last Exception Backtrace` and a triggered thread with a queue but no name
//! (tests/fixtures/third_party/keneth-frequency). Parts those reports do not show (Exception Message/Note, Kernel
//! Triage) follow the macOS 12-15 rules and are unverified.

use super::{
    code_type, field, macos_info_blocks, macos_tail, macos_termination, name_pid, problems_block, version, CrashLog,
};
use std::fmt::Write as _;

/// True when the report comes from macOS 26 or later (`OS Version: macOS 26.x ...`), whose translation this layout
/// reproduces. Earlier macOS versions, and reports without an OS version, keep the macOS 12-15 layout.
pub(super) fn applies(log: &CrashLog) -> bool {
    let Some(os) = log.header.os_version.as_deref() else {
        return false;
    };
    let version = os.strip_prefix("macOS ").unwrap_or("");
    let major = version.split(['.', ' ']).next().and_then(|m| m.parse::<u32>().ok());
    major.is_some_and(|m| m >= 26)
}

/// Prints the whole report in the macOS 26 layout.
pub(super) fn render(log: &CrashLog, out: &mut String) {
    const W: usize = 21;
    // `Sleep/Wake UUID` and `Time Since Wake` keep the wider column of `Time Awake Since Boot:`.
    const WIDE: usize = 23;
    let h = &log.header;
    problems_block(log, out);
    field(out, W, "Process", name_pid(h.process_name.as_deref(), h.pid).as_deref());
    field(out, W, "Path", h.path.as_deref());
    field(out, W, "Identifier", h.identifier.as_deref().or(h.process_name.as_deref()));
    field(out, W, "Version", Some(version(log, false).as_deref().unwrap_or("???")));
    field(out, W, "Code Type", code_type(log).as_deref());
    field(out, W, "Role", h.role.as_deref());
    field(out, W, "Parent Process", name_pid(h.parent_name.as_deref(), h.parent_pid).as_deref());
    let coalition = h.coalition_name.as_deref().map(|n| match h.coalition_id {
        Some(id) => format!("{n} [{id}]"),
        None => n.to_string(),
    });
    field(out, W, "Coalition", coalition.as_deref());
    field(out, W, "Responsible Process", name_pid(h.responsible_name.as_deref(), h.responsible_pid).as_deref());
    field(out, W, "User ID", h.user_id.map(|u| u.to_string()).as_deref());
    out.push('\n');
    field(out, W, "Date/Time", h.date_time.as_deref());
    field(out, W, "Launch Time", h.launch_time.as_deref());
    field(out, W, "Hardware Model", h.hardware_model.as_deref());
    field(out, W, "OS Version", h.os_version.as_deref());
    field(out, W, "Release Type", h.release_type.as_deref());
    out.push('\n');
    field(out, W, "Crash Reporter Key", h.crash_reporter_key.as_deref());
    field(out, W, "Incident Identifier", h.incident.as_deref());
    out.push('\n');
    if h.sleep_wake_uuid.is_some() {
        field(out, WIDE, "Sleep/Wake UUID", h.sleep_wake_uuid.as_deref());
        out.push('\n');
    }
    if let Some(up) = h.uptime_seconds {
        field(out, WIDE, "Time Awake Since Boot", Some(&format!("{up} seconds")));
        field(out, WIDE, "Time Since Wake", h.wake_time_seconds.map(|w| format!("{w} seconds")).as_deref());
        out.push('\n');
    }
    if let Some(sip) = &h.sip {
        let _ = writeln!(out, "System Integrity Protection: {sip}\n");
    }
    if let Some(t) = log.triggered_thread {
        let thread = log.threads.iter().find(|x| x.index == t);
        // The name follows two spaces, the queue a comma: `9  <name>, Dispatch Queue: <q>`, or `9, Dispatch Queue:
        // <q>` for a thread with a queue and no name (keneth-frequency pair, macOS 26.4.1).
        let _ = write!(out, "Triggered by Thread: {t}");
        if let Some(name) = thread.and_then(|x| x.name.as_deref()) {
            let _ = write!(out, "  {name}");
        }
        if let Some(queue) = thread.and_then(|x| x.queue.as_deref()) {
            let _ = write!(out, ", Dispatch Queue: {queue}");
        }
        out.push_str("\n\n");
    }
    let e = &log.exception;
    const EXC: usize = 19;
    if let Some(ev) = &log.event {
        // A non-fatal report: spindump's `Event:` / `Duration:` lines and the reason, in the exception column.
        field(out, EXC, "Event", Some(&ev.kind));
        field(out, EXC, "Duration", ev.duration.as_deref());
        field(out, EXC, "Reason", ev.reason.as_deref());
    }
    field(out, EXC, "Exception Type", e.exception_type.as_deref());
    field(out, EXC, "Exception Subtype", e.subtype.as_deref());
    field(out, EXC, "Exception Codes", e.codes.as_deref());
    field(out, EXC, "Exception Message", e.message.as_deref());
    field(out, EXC, "Exception Note", e.note.as_deref());
    out.push('\n');
    macos_termination(out, log, ", ", W);
    out.push_str("\n\n");
    macos_info_blocks(out, log, 2);
    macos_tail(log, out);
    // macOS 26 ends the VM Region Summary with two empty lines, not three.
    if log.vm_summary.is_some() && out.ends_with("\n\n\n\n") {
        out.pop();
    }
}
