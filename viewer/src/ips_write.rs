//! Writes a [`CrashLog`] as an Apple `.ips` crash file (bug_type 309), so that Xcode's Organizer, Console,
//! MacSymbolicator and Apple's `CrashSymbolicator.py` open our reports as their own.
//!
//! Layout (docs/apple-crash-format.md §3, key names and JSON types as in the real `.ips` files of
//! `tests/fixtures/third_party/macsymbolicator/`): line 1 is a one-line JSON metadata object (`app_name`,
//! `timestamp`, `app_version`, `slice_uuid`, `build_version`, `platform`, `bundleID`, `bug_type` `"309"`,
//! `os_version`, `incident_id`, `name`); the rest is the pretty-printed JSON body: header keys (`incident`,
//! `crashReporterKey`, `modelCode`, `procName`, `pid`, `procPath`, `bundleInfo`, `cpuType`, `procRole`,
//! `parentProc`, `parentPid`, `captureTime`, `procLaunch`, `osVersion{train, build, releaseType, isEmbedded}`, `sip`,
//! `sleepWakeUUID`, `wakeTime`, `bridgeVersion{build, train}`, `storeInfo{itemID, softwareVersionExternalIdentifier}`,
//! ...), `exception{type, signal, codes, rawCodes, subtype, message}`, `termination{namespace, code, indicator,
//! reasons, byProc, byPid}` (the model's termination lines, Apple's `reasons` then `details`, all as `reasons`),
//! `faultingThread`, `asi`, `asiBacktraces` (strings, as in Apple's macOS 12 `.ips`), `lastExceptionBacktrace`,
//! `threads[]{triggered, id, name, queue, frames[], threadState, instructionState}`, `usedImages[]{source, arch,
//! base, size, uuid, path, name}`.
//!
//! A frame is `{imageIndex, imageOffset}` (+ `symbol`, `symbolLocation`, `sourceFile`, `sourceLine`, `inline` when
//! symbolicated); a frame outside every image has only `imageOffset` = its address (our `.ips` reader and Apple's
//! placeholder image both print it as `???` / `0x0 + address`).
//!
//! What `.ips` has no key for is not written: our damage list and symbolication notes, thread notes (not captured,
//! repeated frames, truncated), frame trust, image slides. Build IDs (Linux images) are written in `uuid` as plain
//! hex, which our reader takes back; Apple's tools expect UUIDs there.

use crate::crashlog::{CrashLog, Flavor, FrameLog, ThreadState};
use report_format::model::ImageId;
use serde_json::{json, Map, Value};

/// The `.ips` file for `log`: the metadata line, a newline, the pretty-printed body, a newline.
pub fn to_ips(log: &CrashLog) -> String {
    let mut out = serde_json::to_string(&metadata(log)).unwrap_or_else(|_| "{}".into());
    out.push('\n');
    out.push_str(&serde_json::to_string_pretty(&body(log)).unwrap_or_else(|_| "{}".into()));
    out.push('\n');
    out
}

fn put<T: Into<Value>>(m: &mut Map<String, Value>, key: &str, v: Option<T>) {
    if let Some(v) = v {
        m.insert(key.to_string(), v.into());
    }
}

/// `train (build)` split back into its parts (`iPhone OS 15.5`, `19F77`).
fn split_os(os: &str) -> (String, Option<String>) {
    match os.strip_suffix(')').and_then(|s| s.rsplit_once(" (")) {
        Some((train, build)) => (train.to_string(), Some(build.to_string())),
        None => (os.to_string(), None),
    }
}

/// `EXC_BAD_ACCESS (SIGSEGV)` split into type and signal.
fn split_type(t: &str) -> (String, Option<String>) {
    match t.strip_suffix(')').and_then(|s| s.rsplit_once(" (")) {
        Some((ty, sig)) => (ty.to_string(), Some(sig.to_string())),
        None => (t.to_string(), None),
    }
}

/// Apple's `uuid` form: lowercase with dashes for a UUID; plain lowercase hex for a build ID.
fn id_text(id: &ImageId) -> String {
    let hex = id.to_hex();
    match id {
        ImageId::Uuid(_) if hex.len() == 32 => {
            format!("{}-{}-{}-{}-{}", &hex[0..8], &hex[8..12], &hex[12..16], &hex[16..20], &hex[20..32])
        }
        _ => hex,
    }
}

fn platform(log: &CrashLog) -> Option<u64> {
    // `platform` in the metadata line: dyld's platform numbers (1 macOS, 2 iOS, 7 iOS Simulator; `<mach-o/loader.h>`);
    // none for Linux.
    match log.flavor {
        Flavor::Macos => Some(1),
        Flavor::Ios if log.simulator => Some(7),
        Flavor::Ios => Some(2),
        Flavor::Linux => None,
    }
}

fn metadata(log: &CrashLog) -> Value {
    let h = &log.header;
    let mut m = Map::new();
    put(&mut m, "app_name", h.process_name.clone());
    // Apple's metadata timestamp has two fractional digits.
    put(
        &mut m,
        "timestamp",
        h.date_time.as_deref().map(|t| match (t.find('.'), t.rfind(' ')) {
            (Some(dot), Some(sp)) if dot + 3 <= sp => format!("{}{}", &t[..dot + 3], &t[sp..]),
            _ => t.to_string(),
        }),
    );
    // Apple writes empty strings for an executable without a bundle.
    m.insert("app_version".into(), h.short_version.clone().unwrap_or_default().into());
    let main = log.images.iter().find(|i| i.path.is_some() && i.path == h.path);
    put(&mut m, "slice_uuid", main.and_then(|i| i.id.as_ref()).map(id_text));
    m.insert("build_version".into(), h.bundle_version.clone().unwrap_or_default().into());
    put(&mut m, "platform", platform(log));
    put(&mut m, "bundleID", h.identifier.clone());
    // Not shared with the app's developers through Apple; not an Apple (first-party) process.
    m.insert("share_with_app_devs".into(), 0.into());
    m.insert("is_first_party".into(), 0.into());
    m.insert("bug_type".into(), "309".into());
    put(&mut m, "os_version", h.os_version.clone());
    put(&mut m, "incident_id", h.incident.clone());
    put(&mut m, "name", h.process_name.clone());
    Value::Object(m)
}

fn body(log: &CrashLog) -> Value {
    let h = &log.header;
    let e = &log.exception;
    let mut b = Map::new();
    put(&mut b, "uptime", h.uptime_seconds);
    put(&mut b, "procLaunch", h.launch_time.clone());
    put(&mut b, "procRole", h.role.clone());
    b.insert("version".into(), 2.into());
    put(&mut b, "userID", h.user_id);
    put(&mut b, "modelCode", h.hardware_model.clone());
    put(&mut b, "coalitionID", h.coalition_id);
    if let Some(os) = &h.os_version {
        let (train, build) = split_os(os);
        let mut o = Map::new();
        o.insert("train".into(), train.into());
        put(&mut o, "build", build);
        put(&mut o, "releaseType", h.release_type.clone());
        if log.flavor != Flavor::Linux {
            // A Simulator app's OS is the Mac's.
            o.insert("isEmbedded".into(), (log.flavor == Flavor::Ios && !log.simulator).into());
        }
        b.insert("osVersion".into(), Value::Object(o));
    }
    put(&mut b, "captureTime", h.date_time.clone());
    put(&mut b, "incident", h.incident.clone());
    b.insert("bug_type".into(), "309".into());
    put(&mut b, "pid", h.pid);
    put(&mut b, "cpuType", h.code_type.clone());
    if h.translated {
        b.insert("translated".into(), true.into());
    }
    put(&mut b, "procName", h.process_name.clone());
    put(&mut b, "procPath", h.path.clone());
    if h.identifier.is_some() || h.short_version.is_some() || h.bundle_version.is_some() || h.app_store_tools.is_some()
    {
        let mut bi = Map::new();
        put(&mut bi, "CFBundleIdentifier", h.identifier.clone());
        put(&mut bi, "CFBundleShortVersionString", h.short_version.clone());
        put(&mut bi, "CFBundleVersion", h.bundle_version.clone());
        put(&mut bi, "DTAppStoreToolsBuild", h.app_store_tools.clone());
        b.insert("bundleInfo".into(), Value::Object(bi));
    }
    put(&mut b, "parentProc", h.parent_name.clone());
    put(&mut b, "parentPid", h.parent_pid);
    put(&mut b, "coalitionName", h.coalition_name.clone());
    put(&mut b, "crashReporterKey", h.crash_reporter_key.clone());
    put(&mut b, "responsiblePid", h.responsible_pid);
    put(&mut b, "responsibleProc", h.responsible_name.clone());
    put(&mut b, "sip", h.sip.clone());
    put(&mut b, "sleepWakeUUID", h.sleep_wake_uuid.clone());
    put(&mut b, "wakeTime", h.wake_time_seconds);
    if let Some(bridge) = &h.bridge_os_version {
        // `train (build)`, as the text prints it, back into Apple's object.
        let (train, build) = split_os(bridge);
        let mut o = Map::new();
        put(&mut o, "build", build);
        o.insert("train".into(), train.into());
        b.insert("bridgeVersion".into(), Value::Object(o));
    }
    if h.app_item_id.is_some() || h.app_external_id.is_some() {
        let mut o = Map::new();
        put(&mut o, "itemID", h.app_item_id.clone());
        put(&mut o, "softwareVersionExternalIdentifier", h.app_external_id.clone());
        b.insert("storeInfo".into(), Value::Object(o));
    }
    put(&mut b, "basebandVersion", h.baseband_version.clone());
    put(&mut b, "vmRegionInfo", log.vm_region_info.clone());
    // macOS writes the region info twice, the second time under a lowercase key.
    put(&mut b, "vmregioninfo", log.vm_region_info.clone().filter(|_| log.flavor == Flavor::Macos));
    if e.note.as_deref() == Some("EXC_CORPSE_NOTIFY") {
        b.insert("isCorpse".into(), 1.into());
    }
    let mut ex = Map::new();
    if let Some(t) = &e.exception_type {
        let (ty, sig) = split_type(t);
        ex.insert("type".into(), ty.into());
        put(&mut ex, "signal", sig);
    }
    if let Some(c) = &e.codes {
        ex.insert("codes".into(), c.clone().into());
        let raw: Option<Vec<Value>> = c
            .split(", ")
            .map(|x| {
                let h = x.trim().strip_prefix("0x")?;
                u64::from_str_radix(h, 16).ok().map(Value::from)
            })
            .collect();
        put(&mut ex, "rawCodes", raw);
    }
    put(&mut ex, "subtype", e.subtype.clone());
    put(&mut ex, "message", e.message.clone());
    if !ex.is_empty() {
        b.insert("exception".into(), Value::Object(ex));
    }
    let mut term = Map::new();
    put(&mut term, "code", e.termination_code);
    put(&mut term, "namespace", e.termination_namespace.clone());
    put(&mut term, "indicator", e.termination_indicator.clone());
    if !e.termination_lines.is_empty() {
        // The model keeps `reasons` and `details` as one list of lines (printed one after the other); written back
        // as `reasons`, they print the same.
        let lines = e.termination_lines.iter().map(|l| Value::from(l.as_str())).collect();
        term.insert("reasons".into(), Value::Array(lines));
    }
    if let Some(p) = &e.terminating_process {
        match p.strip_suffix(']').and_then(|s| s.rsplit_once(" [")) {
            Some((name, pid)) if pid.parse::<u64>().is_ok() => {
                term.insert("byProc".into(), name.into());
                term.insert("byPid".into(), pid.parse::<u64>().unwrap_or(0).into());
            }
            _ => {
                term.insert("byProc".into(), p.clone().into());
            }
        }
    }
    if !term.is_empty() {
        b.insert("termination".into(), Value::Object(term));
    }
    put(&mut b, "ktriageinfo", log.kernel_triage.clone());
    if let Some(m) = &log.ext_mods {
        let triple = |v: [u64; 3]| json!({"task_for_pid": v[0], "thread_create": v[1], "thread_set_state": v[2]});
        b.insert(
            "extMods".into(),
            json!({"targeted": triple(m.targeted), "caller": triple(m.caller), "system": triple(m.system)}),
        );
    }
    put(&mut b, "faultingThread", log.triggered_thread);
    if !log.asi.is_empty() {
        let source = h.process_name.clone().unwrap_or_else(|| "app".into());
        let mut asi = Map::new();
        asi.insert(source, Value::Array(log.asi.iter().map(|s| Value::from(s.as_str())).collect()));
        b.insert("asi".into(), Value::Object(asi));
    }
    if !log.asi_backtraces.is_empty() {
        b.insert("asiBacktraces".into(), log.asi_backtraces.iter().map(|t| Value::from(t.as_str())).collect());
    }
    if !log.last_exception_backtrace.is_empty() {
        let frames = log.last_exception_backtrace.iter().map(|f| frame(log, f)).collect();
        b.insert("lastExceptionBacktrace".into(), Value::Array(frames));
    }
    b.insert("threads".into(), Value::Array(log.threads.iter().map(|t| thread(log, t)).collect()));
    b.insert(
        "usedImages".into(),
        Value::Array(
            log.images
                .iter()
                .map(|im| {
                    let mut o = Map::new();
                    // "P": the image was loaded in the process (Apple's value for every image in the fixtures).
                    o.insert("source".into(), "P".into());
                    put(&mut o, "arch", im.arch.clone());
                    o.insert("base".into(), im.base.into());
                    o.insert("size".into(), im.size.into());
                    put(&mut o, "uuid", im.id.as_ref().map(id_text));
                    put(&mut o, "path", im.path.clone());
                    put(&mut o, "name", im.name.clone());
                    put(&mut o, "CFBundleIdentifier", im.bundle_id.clone());
                    put(&mut o, "CFBundleShortVersionString", im.short_version.clone());
                    Value::Object(o)
                })
                .collect(),
        ),
    );
    put(&mut b, "vmSummary", log.vm_summary.clone());
    let queue = log.threads.iter().find(|t| t.crashed).and_then(|t| t.queue.clone());
    if let Some(q) = queue {
        b.insert("legacyInfo".into(), json!({"threadTriggered": {"queue": q}}));
    }
    Value::Object(b)
}

fn thread(log: &CrashLog, t: &crate::crashlog::ThreadLog) -> Value {
    let mut o = Map::new();
    if t.crashed {
        o.insert("triggered".into(), true.into());
    }
    put(&mut o, "id", t.id);
    put(&mut o, "name", t.name.clone());
    put(&mut o, "queue", t.queue.clone());
    if t.crashed {
        if let Some(st) = log.crashed_state.as_ref().filter(|s| s.thread == t.index) {
            o.insert("threadState".into(), thread_state(st));
        }
        if let Some(is) = log.instruction_stream.as_ref().filter(|s| s.thread == t.index) {
            o.insert("instructionState".into(), json!({"instructionStream": {"bytes": is.bytes, "offset": is.offset}}));
        }
    }
    o.insert("frames".into(), Value::Array(t.frames.iter().map(|f| frame(log, f)).collect()));
    Value::Object(o)
}

fn frame(log: &CrashLog, f: &FrameLog) -> Value {
    let mut o = Map::new();
    match f.image.and_then(|i| Some((i, log.images.get(i)?))) {
        Some((i, im)) => {
            o.insert("imageOffset".into(), f.address.wrapping_sub(im.base).into());
            o.insert("imageIndex".into(), i.into());
        }
        None => {
            o.insert("imageOffset".into(), f.address.into());
        }
    }
    if let Some(s) = &f.symbol {
        o.insert("symbol".into(), s.name.clone().into());
        put(&mut o, "symbolLocation", s.offset);
        // Apple's `sourceFile` is the file name, as the text prints it (a file read from an `.ips` is kept as it was).
        let file =
            s.file.as_deref().map(|f| if s.file_verbatim { f } else { f.rsplit(['/', '\\']).next().unwrap_or(f) });
        put(&mut o, "sourceFile", file.map(str::to_string));
        put(&mut o, "sourceLine", s.line);
    }
    if f.inlined {
        o.insert("inline".into(), true.into());
    }
    Value::Object(o)
}

fn thread_state(st: &ThreadState) -> Value {
    let mut o = Map::new();
    let get = |n: &str| st.registers.iter().find(|(k, _)| k == n).map(|(_, v)| *v);
    match st.register_set.as_str() {
        report_format::regs::ARM64 => {
            o.insert("flavor".into(), "ARM_THREAD_STATE64".into());
            let xs: Vec<Value> = (0..29).map_while(|i| get(&format!("x{i}"))).map(|v| json!({ "value": v })).collect();
            o.insert("x".into(), Value::Array(xs));
            for name in ["fp", "lr", "sp", "pc", "cpsr", "far", "esr"] {
                if let Some(v) = get(name) {
                    let mut r = json!({ "value": v });
                    if name == "esr" {
                        if let Some(d) = &st.fault_description {
                            r["description"] = d.clone().into();
                        }
                    }
                    o.insert(name.into(), r);
                }
            }
        }
        report_format::regs::X86_64 => {
            o.insert("flavor".into(), "x86_THREAD_STATE".into());
            for (name, v) in &st.registers {
                let key = if name == "trapno" { "trap" } else { name.as_str() };
                let mut r = json!({ "value": v });
                if key == "trap" {
                    if let Some(d) = &st.fault_description {
                        r["description"] = d.clone().into();
                    }
                }
                o.insert(key.into(), r);
            }
            put(&mut o, "cpu", st.cpu.map(|c| json!({ "value": c })));
        }
        other => {
            o.insert("flavor".into(), other.into());
            for (name, v) in &st.registers {
                o.insert(name.clone(), json!({ "value": v }));
            }
        }
    }
    Value::Object(o)
}
