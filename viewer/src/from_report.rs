//! Our own decoded [`Report`] mapped into the [`CrashLog`] model.
//!
//! Exception naming (documented in `viewer/README.md`): on Apple OSes the Mach exception is printed as Apple does
//! (`EXC_BAD_ACCESS (SIGSEGV)`; a signal that arrived without a Mach exception is shown as the exception Apple's
//! ReportCrash would give it, e.g. SIGABRT -> `EXC_CRASH (SIGABRT)`). On Linux the signal itself is the exception
//! type, with the `si_code` name in parentheses: `SIGSEGV (SEGV_MAPERR)`; `Exception Codes:` then holds the raw
//! `si_code` and the fault address. Signal numbers and texts always use the numbering of the OS that crashed.

use crate::crashlog::{
    CrashLog, EventLog, ExceptionInfo, Flavor, FrameLog, Header, ImageLog, LanguageExceptionLog, ThreadLog, ThreadState,
};
use crate::names::{self, SignalOs};
use report_format::model::{Exception, Report};
use report_format::regs;

/// Maps a decoded report (and the decoder's problem list, as display strings) into the model.
pub fn to_crash_log(report: &Report, problems: Vec<String>) -> CrashLog {
    let meta = report.meta.as_ref();
    let os_name = meta.and_then(|m| m.os.name.as_deref());
    let flavor = match os_name {
        Some("Linux") | Some("Android") => Flavor::Linux,
        Some(n) if n.starts_with("macOS") || n.starts_with("Mac OS") || n == "OS X" => Flavor::Macos,
        _ => Flavor::Ios,
    };
    let sig_os = if meta.map(|m| m.os.is_apple()).unwrap_or(true) { SignalOs::Darwin } else { SignalOs::Linux };
    let mut log = CrashLog::new(flavor);
    log.problems = problems;
    if let Some(m) = meta {
        if m.minimal {
            log.problems
                .push("minimal report: the handler faulted while writing and saved only the essentials".to_string());
        }
        let p = &m.process;
        let os_version = m.os.name.as_ref().map(|n| {
            let mut s = n.clone();
            if let Some(v) = &m.os.version {
                s.push(' ');
                s.push_str(v);
            }
            if let Some(b) = &m.os.build {
                s.push_str(&format!(" ({b})"));
            }
            s
        });
        log.header = Header {
            incident: Some(m.report_id.to_string()),
            hardware_model: m.hardware_model.clone(),
            process_name: p.name.clone(),
            pid: p.pid.map(u64::from),
            path: p.path.clone(),
            identifier: p.bundle_id.clone(),
            short_version: p.short_version.clone(),
            bundle_version: p.build_version.clone(),
            code_type: m.arch.as_deref().map(code_type),
            parent_name: p.parent_name.clone(),
            parent_pid: p.parent_pid.map(u64::from),
            date_time: m.capture_time_ns.map(format_time),
            launch_time: p.launch_time_ns.map(format_time),
            os_version,
            ..Header::default()
        };
    }
    if let Some(e) = &report.exception {
        log.exception = exception(e, sig_os);
    }
    log.triggered_thread = report.crashed_thread().map(|t| t.index);
    // A non-fatal report (format 2.3): its event instead of an exception, and the thread it is about (the stalled
    // main thread of a hang) as the one that triggered it; no thread crashed.
    let non_fatal = meta.and_then(|m| m.non_fatal.as_ref());
    if let Some(nf) = non_fatal {
        log.event = Some(EventLog {
            kind: nf.kind.clone(),
            duration: nf.duration_ns.map(|d| format!("{:.2}s", d as f64 / 1e9)),
            reason: nf.reason.clone(),
        });
        log.triggered_thread = nf.thread;
    }
    if let Some(lx) = report.exception.as_ref().and_then(|e| e.language.as_ref()) {
        let l = LanguageExceptionLog {
            kind: lx.kind.clone(),
            type_name: lx.type_name.clone(),
            type_display: lx
                .type_name
                .as_deref()
                .map(|t| if lx.kind == "c++" { demangle_type(t) } else { t.to_string() }),
            reason: lx.reason.clone(),
            location: lx.location.clone(),
            user_info: lx.user_info.clone(),
            thread_id: lx.thread_id,
        };
        log.asi.push(l.asi_line());
        log.language_exception = Some(l);
    }
    for m in &report.messages {
        // libc++abi's own abort message on Apple says what the `lx` line says: keep one.
        if !log.asi.iter().any(|a| a == &m.text || m.text.ends_with(a.as_str())) {
            log.asi.push(m.text.clone());
        }
    }
    log.user_values = report.user.iter().map(|(k, v)| (k.clone(), v.clone())).collect();

    let default_arch = meta.and_then(|m| m.arch.clone());
    // Binary Images lists the images with a load address; format 2.0 keeps the others by name only (SCHEMA.md
    // §4.4.1), as Apple's usedImages leaves out images nothing points into.
    log.images = report
        .images
        .iter()
        .filter(|im| !im.name_only)
        .map(|im| ImageLog {
            base: im.load_address,
            size: im.size,
            name: Some(im.name.clone()).filter(|n| !n.is_empty()),
            path: im.path.clone(),
            arch: im.arch.clone().or_else(|| default_arch.clone()),
            id: im.id.clone(),
            bundle_id: None,
            short_version: None,
            slide: im.slide,
        })
        .collect();
    if let Some(lx) = report.exception.as_ref().and_then(|e| e.language.as_ref()) {
        // Return addresses, every one (Apple's Last Exception Backtrace starts at `__exceptionPreprocess + N`).
        log.last_exception_backtrace = lx
            .backtrace
            .iter()
            .enumerate()
            .map(|(i, &address)| FrameLog {
                address,
                image: log.image_for(address),
                symbol: None,
                inlined: false,
                stack_index: i + 1,
                trust: None,
            })
            .collect();
    }

    // Apple numbers threads in the task's order (main thread first) and prints them in that order; THREAD.i is that
    // index (SCHEMA.md §4.3), whatever order the sections were written in (the handler writes the crashed thread
    // first). The decoder already sorts by index; a hand-built `Report` may not be.
    let mut ordered: Vec<&report_format::model::Thread> = report.threads.iter().collect();
    ordered.sort_by_key(|t| t.index);
    for t in ordered {
        let crashed = non_fatal.is_none() && Some(t.index) == log.triggered_thread;
        let frames = t
            .frames
            .iter()
            .enumerate()
            .map(|(i, &address)| FrameLog {
                address,
                image: log.image_for(address),
                symbol: None,
                inlined: false,
                stack_index: i,
                trust: t.frame_trust.get(i).copied(),
            })
            .collect();
        let mut notes = Vec::new();
        if !t.captured {
            notes.push(match &t.not_captured_reason {
                Some(r) => format!("(thread not captured: {r})"),
                None => "(thread not captured)".to_string(),
            });
        }
        for r in &t.repeats {
            notes.push(format!(
                "(frames {}..{} repeat {} more time{}, left out)",
                r.start,
                r.start.saturating_add(r.len).saturating_sub(1),
                r.count,
                if r.count == 1 { "" } else { "s" }
            ));
        }
        if t.frames_truncated {
            notes.push("(stack truncated at the frame cap)".to_string());
        }
        log.threads.push(ThreadLog {
            index: t.index,
            id: t.id,
            name: t.name.clone(),
            queue: t.queue.clone(),
            crashed,
            frames,
            notes,
        });
        if crashed && !t.registers.is_empty() {
            log.crashed_state = Some(thread_state(t));
        }
    }
    log
}

fn thread_state(t: &report_format::model::Thread) -> ThreadState {
    let set = t.register_set.clone().unwrap_or_default();
    let registers: Vec<(String, u64)> = t.registers.iter().map(|r| (r.name.clone(), r.value)).collect();
    let fault_description = match set.as_str() {
        regs::ARM64 => t.register("esr").and_then(names::arm64_esr_description),
        regs::X86_64 => match (t.register("trapno"), t.register("err")) {
            (Some(trap), Some(err)) => names::x86_page_fault_description(trap, err),
            _ => None,
        },
        _ => None,
    };
    ThreadState { thread: t.index, register_set: set, registers, fault_description, cpu: None }
}

/// Apple's Code Type for an architecture name: `ARM-64`, `X86-64`, `ARM`, `X86`; others uppercased.
pub fn code_type(arch: &str) -> String {
    match arch {
        "arm64" | "arm64e" | "aarch64" | "arm64_32" => "ARM-64".to_string(),
        "x86_64" | "x86_64h" | "amd64" => "X86-64".to_string(),
        a if a.starts_with("armv") || a == "arm" => "ARM".to_string(),
        "i386" | "x86" | "i686" => "X86".to_string(),
        other => other.to_uppercase(),
    }
}

fn hex_codes(codes: &[u64]) -> String {
    codes.iter().map(|c| format!("0x{c:016x}")).collect::<Vec<_>>().join(", ")
}

fn exception(e: &Exception, os: SignalOs) -> ExceptionInfo {
    let mut out = ExceptionInfo::default();
    let sig = e.signal;
    let sig_name = sig.and_then(|s| names::signal_name(os, s));
    if let Some(s) = sig {
        out.termination_namespace = Some("SIGNAL".to_string());
        out.termination_code = Some(s as u32 as u64);
        out.termination_indicator = names::signal_text(os, s).map(|t| format!("{t}: {s}"));
    }
    if os == SignalOs::Linux {
        let code_name = match (sig, e.si_code) {
            (Some(s), Some(c)) => names::si_code_name(os, s, c),
            _ => None,
        };
        out.exception_type = match (sig_name, code_name) {
            (Some(n), Some(c)) => Some(format!("{n} ({c})")),
            (Some(n), None) => Some(n.to_string()),
            (None, _) => sig.map(|s| format!("signal {s}")),
        };
        if e.si_code.is_some() || e.fault_address.is_some() {
            out.codes = Some(hex_codes(&[e.si_code.unwrap_or(0) as i64 as u64, e.fault_address.unwrap_or(0)]));
        }
        if let (Some(c), Some(a)) = (code_name, e.fault_address) {
            out.subtype = Some(format!("{c} at 0x{a:016x}"));
        }
        return out;
    }
    // Apple: a Mach exception, or the one ReportCrash would show for the signal.
    let mach = e.mach_type.or_else(|| sig.map(names::mach_type_for_darwin_signal));
    let mut codes: Vec<u64> = e.mach_codes.iter().map(|c| *c as u64).collect();
    if e.mach_type.is_none() {
        // Synthesize codes from the signal the way ReportCrash does for BSD-signal crashes.
        codes = match (sig, e.si_code) {
            (Some(11), Some(2)) | (Some(10), Some(2)) => vec![2, e.fault_address.unwrap_or(0)],
            (Some(11), _) | (Some(10), _) => vec![1, e.fault_address.unwrap_or(0)],
            (Some(_), _) => vec![0, 0],
            _ => Vec::new(),
        };
    }
    let sig_for_type = sig_name.or_else(|| match (mach, codes.first()) {
        (Some(1), Some(1)) => Some("SIGSEGV"),
        (Some(1), _) => Some("SIGBUS"),
        (Some(2), _) => Some("SIGILL"),
        (Some(3), _) => Some("SIGFPE"),
        (Some(6), _) => Some("SIGTRAP"),
        _ => None,
    });
    let mach_name = mach.map(|m| names::mach_exception_name(m).map(str::to_string).unwrap_or(format!("{m:#x}")));
    out.exception_type = match (mach_name, sig_for_type) {
        (Some(m), Some(s)) => Some(format!("{m} ({s})")),
        (Some(m), None) => Some(m),
        (None, Some(s)) => Some(s.to_string()),
        (None, None) => None,
    };
    if !codes.is_empty() {
        out.codes = Some(hex_codes(&codes));
    }
    if mach == Some(1) {
        if let Some(&c) = codes.first() {
            let addr = codes.get(1).copied().or(e.fault_address).unwrap_or(0);
            out.subtype = Some(format!("{} at 0x{addr:016x}", names::kern_return_name(c as i64)));
        }
    }
    out
}

/// Formats nanoseconds since the Unix epoch as Apple's `2022-08-04 01:11:01.2455 +0000` (UTC; 4 fractional
/// digits, truncated).
pub fn format_time(ns: u64) -> String {
    let secs = ns / 1_000_000_000;
    let frac = (ns % 1_000_000_000) / 100_000;
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}.{frac:04} +0000", rem / 3600, (rem % 3600) / 60, rem % 60)
}

/// A C++ type name as `std::type_info::name()` gives it (`St13runtime_error`, `N3app9BadThingE`, `i`) demangled
/// (`std::runtime_error`, `app::BadThing`, `int`); unchanged when it does not demangle.
pub fn demangle_type(mangled: &str) -> String {
    // `_ZTS<type>` is the mangled name of the type's name string ("typeinfo name for <type>").
    let d = crate::demangle::demangle(&format!("_ZTS{mangled}"));
    match d.strip_prefix("typeinfo name for ") {
        Some(t) if !t.is_empty() => t.to_string(),
        _ => mangled.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_format() {
        // 2022-08-03 16:11:01.2455 UTC.
        assert_eq!(format_time(1_659_543_061_245_500_000), "2022-08-03 16:11:01.2455 +0000");
        assert_eq!(format_time(0), "1970-01-01 00:00:00.0000 +0000");
    }

    #[test]
    fn linux_and_darwin_signals() {
        let e = Exception { signal: Some(7), si_code: Some(2), fault_address: Some(0x10), ..Exception::default() };
        let x = exception(&e, SignalOs::Linux);
        assert_eq!(x.exception_type.as_deref(), Some("SIGBUS (BUS_ADRERR)"));
        assert_eq!(x.termination_indicator.as_deref(), Some("Bus error: 7"));
        let e = Exception { signal: Some(6), ..Exception::default() };
        let x = exception(&e, SignalOs::Darwin);
        assert_eq!(x.exception_type.as_deref(), Some("EXC_CRASH (SIGABRT)"));
        assert_eq!(x.termination_indicator.as_deref(), Some("Abort trap: 6"));
        let e = Exception { mach_type: Some(1), mach_codes: vec![1, 0x10], signal: Some(11), ..Exception::default() };
        let x = exception(&e, SignalOs::Darwin);
        assert_eq!(x.exception_type.as_deref(), Some("EXC_BAD_ACCESS (SIGSEGV)"));
        assert_eq!(x.subtype.as_deref(), Some("KERN_INVALID_ADDRESS at 0x0000000000000010"));
        assert_eq!(x.codes.as_deref(), Some("0x0000000000000001, 0x0000000000000010"));
    }
}
