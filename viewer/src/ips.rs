//! Apple's `.ips` crash files (iOS 15+/macOS 12+) mapped into the [`CrashLog`] model.
//!
//! Layout (see `docs/apple-crash-format.md` §3): line 1 is a one-line JSON metadata object with `bug_type`
//! (`"309"` = JSON crash body, `"109"` = legacy text body); the rest of the file is the body. Every key is read
//! leniently: a missing or mistyped value leaves its field empty, so a damaged file still renders its intact parts.
//! A body cut short is repaired by closing the open JSON containers (see [`repair_truncated_json`]) and the loss is
//! recorded in [`CrashLog::problems`].

use crate::crashlog::{
    CrashLog, ExceptionInfo, ExtMods, Flavor, FrameLog, Header, ImageLog, InstructionStream, SymbolInfo, ThreadLog,
    ThreadState,
};
use crate::symbols::parse_image_id;
use serde_json::Value;

/// What an `.ips` file holds.
#[derive(Debug)]
pub enum Ips {
    /// A JSON crash body (bug_type 309), mapped into the model.
    Crash(Box<CrashLog>),
    /// A legacy text body (bug_type 109 and others with a text body): printed as it is.
    Text(String),
}

/// Why a file is not an `.ips` crash.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IpsError {
    /// The first line is not a JSON object.
    NotIps,
    /// The metadata names a bug type this reader does not render, and the body is not text.
    UnsupportedBugType(String),
}

impl std::fmt::Display for IpsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            IpsError::NotIps => write!(f, "not an .ips file: the first line is not a JSON object"),
            IpsError::UnsupportedBugType(t) => {
                write!(f, "unsupported .ips bug_type {t:?}: expected \"309\" (crash) or a text body")
            }
        }
    }
}

impl std::error::Error for IpsError {}

/// True when `bytes` look like an `.ips` file (optional BOM/whitespace, then `{`).
pub fn looks_like_ips(bytes: &[u8]) -> bool {
    let b = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    b.iter().find(|c| !c.is_ascii_whitespace()) == Some(&b'{')
}

/// Parses an `.ips` file.
///
/// # Errors
/// [`IpsError::NotIps`] when the metadata line is not JSON and the whole file is not a crash body either;
/// [`IpsError::UnsupportedBugType`] for a non-crash JSON body.
pub fn parse(bytes: &[u8]) -> Result<Ips, IpsError> {
    let text = String::from_utf8_lossy(bytes);
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    let (first, rest) = match text.find('\n') {
        Some(i) => (&text[..i], &text[i + 1..]),
        None => (text, ""),
    };
    let mut problems = Vec::new();
    let meta: Option<Value> = serde_json::from_str::<Value>(first).ok().filter(Value::is_object);
    let Some(meta) = meta else {
        // Maybe the file is a bare body (no metadata line), possibly pretty-printed from the first byte.
        return match parse_body(text, &mut problems) {
            Some(body) if body.get("threads").is_some() || body.get("usedImages").is_some() => {
                Ok(Ips::Crash(Box::new(map_body(&Value::Null, &body, problems))))
            }
            _ => Err(IpsError::NotIps),
        };
    };
    let bug_type = meta.get("bug_type").map(value_string).unwrap_or_default();
    let body_start = rest.trim_start();
    if body_start.starts_with('{') {
        let body = parse_body(rest, &mut problems).unwrap_or(Value::Null);
        if bug_type != "309" && !bug_type.is_empty() && body.get("threads").is_none() {
            return Err(IpsError::UnsupportedBugType(bug_type));
        }
        Ok(Ips::Crash(Box::new(map_body(&meta, &body, problems))))
    } else if !body_start.is_empty() {
        Ok(Ips::Text(rest.to_string()))
    } else if bug_type == "309" || bug_type.is_empty() {
        problems.push("the .ips file has only its metadata line: the crash body is missing".to_string());
        Ok(Ips::Crash(Box::new(map_body(&meta, &Value::Null, problems))))
    } else {
        Err(IpsError::UnsupportedBugType(bug_type))
    }
}

/// Parses the JSON body; when it is cut short, closes the open containers and notes the loss in `problems`.
fn parse_body(text: &str, problems: &mut Vec<String>) -> Option<Value> {
    // macOS writes a plain-text system profile (`Model: ...`, `Graphics: ...`) after the JSON body; the body is the
    // first JSON value and the text after it is not part of the crash.
    if let Some(Ok(v)) = serde_json::Deserializer::from_str(text).into_iter::<Value>().next() {
        return Some(v);
    }
    match serde_json::from_str::<Value>(text) {
        Ok(v) => Some(v),
        Err(e) => {
            let repaired = repair_truncated_json(text);
            match repaired.and_then(|r| serde_json::from_str::<Value>(&r).ok()) {
                Some(v) => {
                    problems.push(format!(
                        "the .ips body is damaged at line {} column {} ({}); rendering the parts before it",
                        e.line(),
                        e.column(),
                        e
                    ));
                    Some(v)
                }
                None => {
                    problems.push(format!(
                        "the .ips body is not valid JSON at line {} column {} ({}); only the metadata line was used",
                        e.line(),
                        e.column(),
                        e
                    ));
                    None
                }
            }
        }
    }
}

/// Makes a prefix of a JSON document parseable: finds where the last complete value of each open container ends,
/// drops what follows (a half-written key, string or number) and appends the closing brackets. Returns `None` when
/// the text does not start with an object. The result may still fail to parse when the damage is not a cut.
pub fn repair_truncated_json(text: &str) -> Option<String> {
    let start = text.find('{')?;
    let bytes = text.as_bytes();
    // Stack of open containers; for each, the byte offset just after its last complete member (or its opening).
    let mut stack: Vec<(u8, usize)> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    let mut i = start;
    while i < bytes.len() {
        let c = bytes[i];
        if in_string {
            if escaped {
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
            } else if c == b'"' {
                in_string = false;
            }
            i += 1;
            continue;
        }
        match c {
            b'"' => in_string = true,
            b'{' | b'[' => stack.push((c, i + 1)),
            b'}' | b']' => {
                stack.pop();
                if stack.is_empty() {
                    return Some(text[start..=i].to_string());
                }
            }
            b',' => {
                if let Some(top) = stack.last_mut() {
                    top.1 = i;
                }
            }
            _ => {}
        }
        i += 1;
    }
    // Cut at the innermost container's last complete member, then close everything.
    let (_, cut) = *stack.last()?;
    let mut out = text[start..cut].to_string();
    for (open, _) in stack.iter().rev() {
        out.push(if *open == b'{' { '}' } else { ']' });
    }
    Some(out)
}

fn value_string(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn s(v: &Value, key: &str) -> Option<String> {
    match v.get(key)? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

fn u(v: &Value, key: &str) -> Option<u64> {
    num(v.get(key)?)
}

fn num(v: &Value) -> Option<u64> {
    match v {
        Value::Number(n) => n.as_u64().or_else(|| n.as_i64().map(|i| i as u64)),
        Value::String(s) => s.parse().ok(),
        Value::Bool(b) => Some(u64::from(*b)),
        _ => None,
    }
}

fn truthy(v: &Value, key: &str) -> bool {
    match v.get(key) {
        Some(Value::Bool(b)) => *b,
        Some(Value::Number(n)) => n.as_u64().unwrap_or(0) != 0,
        _ => false,
    }
}

/// dyld's `PLATFORM_IOSSIMULATOR`, the `platform` of an iOS Simulator app's `.ips` (`<mach-o/loader.h>`).
const PLATFORM_IOS_SIMULATOR: u64 = 7;

/// Whether the metadata line names an iOS Simulator app.
fn is_simulator(meta: &Value) -> bool {
    u(meta, "platform") == Some(PLATFORM_IOS_SIMULATOR)
}

fn flavor_of(meta: &Value, body: &Value) -> Flavor {
    // A Simulator app runs on macOS (its OS version is the Mac's) but is reported in the iOS layout.
    if is_simulator(meta) {
        return Flavor::Ios;
    }
    let train = body.get("osVersion").and_then(|o| s(o, "train")).or_else(|| s(meta, "os_version"));
    if let Some(Value::Bool(embedded)) = body.get("osVersion").and_then(|o| o.get("isEmbedded")) {
        return if *embedded { Flavor::Ios } else { Flavor::Macos };
    }
    match train {
        Some(t) if t.starts_with("macOS") || t.starts_with("Mac OS") => Flavor::Macos,
        // Our own reports of Linux processes written as .ips (`viewer --format ips`).
        Some(t) if t.starts_with("Linux") => Flavor::Linux,
        Some(_) => Flavor::Ios,
        None => match u(meta, "platform") {
            Some(1) => Flavor::Macos,
            _ => Flavor::Ios,
        },
    }
}

/// Maps a parsed body (and metadata line) into the model. `body` may be `Null` (only the metadata survived).
fn map_body(meta: &Value, body: &Value, problems: Vec<String>) -> CrashLog {
    let mut log = CrashLog::new(flavor_of(meta, body));
    log.simulator = is_simulator(meta);
    log.problems = problems;
    log.header = header(meta, body);
    log.exception = exception(body);
    log.triggered_thread = u(body, "faultingThread").map(|t| t as u32);
    log.kernel_triage = s(body, "ktriageinfo");
    log.vm_region_info = s(body, "vmRegionInfo").or_else(|| s(body, "vmregioninfo"));
    log.asi = asi(body);
    log.asi_backtraces = asi_backtraces(body);
    log.images = images(body);
    if let Some(bt) = body.get("lastExceptionBacktrace").and_then(Value::as_array) {
        // Every entry is a return address (frame 0 is `__exceptionPreprocess + N`, a call's return).
        log.last_exception_backtrace = frames(bt, &log.images);
        for f in &mut log.last_exception_backtrace {
            f.stack_index += 1;
        }
    }
    if let Some(threads) = body.get("threads").and_then(Value::as_array) {
        for (i, t) in threads.iter().enumerate() {
            let index = i as u32;
            let crashed = truthy(t, "triggered");
            let frames =
                t.get("frames").and_then(Value::as_array).map(|fs| frames(fs, &log.images)).unwrap_or_default();
            log.threads.push(ThreadLog {
                index,
                id: u(t, "id"),
                name: s(t, "name"),
                queue: s(t, "queue"),
                crashed,
                frames,
                notes: Vec::new(),
            });
            if crashed && log.crashed_state.is_none() {
                log.crashed_state = t.get("threadState").map(|st| thread_state(index, st));
            }
            if crashed && log.instruction_stream.is_none() {
                log.instruction_stream = instruction_stream(index, t);
            }
        }
    }
    log.ext_mods = body.get("extMods").map(|m| {
        let triple = |k: &str| {
            let o = m.get(k).unwrap_or(&Value::Null);
            [
                u(o, "task_for_pid").unwrap_or(0),
                u(o, "thread_create").unwrap_or(0),
                u(o, "thread_set_state").unwrap_or(0),
            ]
        };
        ExtMods { targeted: triple("targeted"), caller: triple("caller"), system: triple("system") }
    });
    log.vm_summary = s(body, "vmSummary");
    log
}

fn header(meta: &Value, body: &Value) -> Header {
    let bundle = body.get("bundleInfo").unwrap_or(&Value::Null);
    let os = body.get("osVersion").unwrap_or(&Value::Null);
    let os_version = match (s(os, "train"), s(os, "build")) {
        (Some(t), Some(b)) => Some(format!("{t} ({b})")),
        (Some(t), None) => Some(t),
        _ => s(meta, "os_version"),
    };
    Header {
        incident: s(body, "incident").or_else(|| s(meta, "incident_id")),
        crash_reporter_key: s(body, "crashReporterKey"),
        hardware_model: s(body, "modelCode"),
        process_name: s(body, "procName").or_else(|| s(meta, "name")),
        pid: u(body, "pid"),
        path: s(body, "procPath"),
        identifier: s(bundle, "CFBundleIdentifier"),
        short_version: s(bundle, "CFBundleShortVersionString"),
        bundle_version: s(bundle, "CFBundleVersion"),
        code_type: s(body, "cpuType"),
        translated: truthy(body, "translated"),
        role: s(body, "procRole"),
        parent_name: s(body, "parentProc"),
        parent_pid: u(body, "parentPid"),
        responsible_name: s(body, "responsibleProc"),
        responsible_pid: u(body, "responsiblePid"),
        user_id: u(body, "userID"),
        coalition_name: s(body, "coalitionName"),
        coalition_id: u(body, "coalitionID"),
        date_time: s(body, "captureTime"),
        launch_time: s(body, "procLaunch"),
        os_version,
        release_type: s(os, "releaseType"),
        baseband_version: s(body, "basebandVersion"),
        report_version: None,
        uptime_seconds: u(body, "uptime"),
        sip: s(body, "sip"),
        sleep_wake_uuid: s(body, "sleepWakeUUID"),
        wake_time_seconds: u(body, "wakeTime"),
        bridge_os_version: body.get("bridgeVersion").and_then(|b| match (s(b, "train"), s(b, "build")) {
            (Some(t), Some(b)) => Some(format!("{t} ({b})")),
            (t, _) => t,
        }),
        app_item_id: body.get("storeInfo").and_then(|i| s(i, "itemID")),
        app_external_id: body.get("storeInfo").and_then(|i| s(i, "softwareVersionExternalIdentifier")),
        app_store_tools: s(bundle, "DTAppStoreToolsBuild"),
    }
}

fn exception(body: &Value) -> ExceptionInfo {
    let e = body.get("exception").unwrap_or(&Value::Null);
    let term = body.get("termination").unwrap_or(&Value::Null);
    let exception_type = match (s(e, "type"), s(e, "signal")) {
        (Some(t), Some(sig)) => Some(format!("{t} ({sig})")),
        (Some(t), None) => Some(t),
        (None, Some(sig)) => Some(sig),
        (None, None) => None,
    };
    let terminating_process = match (s(term, "byProc"), u(term, "byPid")) {
        (Some(p), Some(pid)) => Some(format!("{p} [{pid}]")),
        (Some(p), None) => Some(p),
        _ => None,
    };
    ExceptionInfo {
        exception_type,
        codes: s(e, "codes"),
        subtype: s(e, "subtype"),
        message: s(e, "message"),
        note: truthy(body, "isCorpse").then(|| "EXC_CORPSE_NOTIFY".to_string()),
        termination_namespace: s(term, "namespace"),
        termination_code: u(term, "code"),
        termination_indicator: s(term, "indicator"),
        termination_lines: ["reasons", "details"]
            .iter()
            .filter_map(|k| term.get(*k).and_then(Value::as_array))
            .flatten()
            .map(value_string)
            .collect(),
        terminating_process,
    }
}

fn asi(body: &Value) -> Vec<String> {
    let mut out = Vec::new();
    match body.get("asi") {
        Some(Value::Object(map)) => {
            for v in map.values() {
                match v {
                    Value::Array(items) => out.extend(items.iter().map(value_string)),
                    other => out.push(value_string(other)),
                }
            }
        }
        Some(Value::Array(items)) => out.extend(items.iter().map(value_string)),
        Some(Value::String(t)) => out.push(t.clone()),
        _ => {}
    }
    out
}

/// `asiBacktraces`: an array of strings, each one backtrace already laid out as text; empty strings are dropped. A
/// single string is taken as one backtrace.
fn asi_backtraces(body: &Value) -> Vec<String> {
    let keep = |t: &str| (!t.is_empty()).then(|| t.to_string());
    match body.get("asiBacktraces") {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).filter_map(keep).collect(),
        Some(Value::String(t)) => keep(t).into_iter().collect(),
        _ => Vec::new(),
    }
}

fn images(body: &Value) -> Vec<ImageLog> {
    let Some(list) = body.get("usedImages").and_then(Value::as_array) else {
        return Vec::new();
    };
    list.iter()
        .map(|im| ImageLog {
            base: u(im, "base").unwrap_or(0),
            size: u(im, "size").unwrap_or(0),
            name: s(im, "name"),
            path: s(im, "path"),
            arch: s(im, "arch"),
            id: s(im, "uuid").and_then(|t| parse_image_id(&t)),
            bundle_id: s(im, "CFBundleIdentifier"),
            short_version: s(im, "CFBundleShortVersionString"),
            slide: None,
        })
        .collect()
}

fn frames(list: &[Value], images: &[ImageLog]) -> Vec<FrameLog> {
    list.iter()
        .enumerate()
        .map(|(i, f)| {
            let image_index = u(f, "imageIndex").map(|x| x as usize).filter(|x| *x < images.len());
            let offset = u(f, "imageOffset").unwrap_or(0);
            let base = image_index.map(|x| images[x].base).unwrap_or(0);
            let symbol = s(f, "symbol").map(|name| SymbolInfo {
                name,
                offset: u(f, "symbolLocation"),
                file: s(f, "sourceFile"),
                line: u(f, "sourceLine"),
                file_verbatim: true,
            });
            FrameLog {
                address: base.wrapping_add(offset),
                image: image_index,
                symbol,
                inlined: truthy(f, "inline"),
                stack_index: i,
                trust: None,
            }
        })
        .collect()
}

fn reg(st: &Value, key: &str) -> Option<u64> {
    st.get(key).and_then(|r| r.get("value")).and_then(num)
}

fn thread_state(thread: u32, st: &Value) -> ThreadState {
    let flavor = s(st, "flavor").unwrap_or_default();
    let mut out = ThreadState { thread, ..ThreadState::default() };
    if flavor.starts_with("ARM_THREAD_STATE64") || st.get("x").is_some() {
        out.register_set = report_format::regs::ARM64.to_string();
        if let Some(xs) = st.get("x").and_then(Value::as_array) {
            for (i, x) in xs.iter().enumerate() {
                if let Some(v) = x.get("value").and_then(num) {
                    out.registers.push((format!("x{i}"), v));
                }
            }
        }
        for name in ["fp", "lr", "sp", "pc", "cpsr", "far", "esr"] {
            if let Some(v) = reg(st, name) {
                out.registers.push((name.to_string(), v));
            }
        }
        out.fault_description = st.get("esr").and_then(|e| s(e, "description"));
    } else if flavor.starts_with("x86_THREAD_STATE") || st.get("rip").is_some() {
        out.register_set = report_format::regs::X86_64.to_string();
        for name in report_format::regs::X86_64_NAMES {
            let key = match name {
                "trapno" => "trap",
                other => other,
            };
            if let Some(v) = reg(st, key) {
                out.registers.push((name.to_string(), v));
            }
        }
        out.fault_description = st.get("trap").and_then(|e| s(e, "description"));
        out.cpu = reg(st, "cpu");
    } else {
        out.register_set = flavor;
        if let Value::Object(map) = st {
            for (k, v) in map {
                if let Some(v) = v.get("value").and_then(num) {
                    out.registers.push((k.clone(), v));
                }
            }
        }
    }
    out
}

fn instruction_stream(thread: u32, t: &Value) -> Option<InstructionStream> {
    let st = t.get("instructionState")?.get("instructionStream")?;
    let bytes: Vec<u8> = st.get("bytes")?.as_array()?.iter().map(|b| num(b).unwrap_or(0).min(255) as u8).collect();
    let offset = u(st, "offset").unwrap_or(0) as usize;
    Some(InstructionStream { thread, bytes, offset })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repair_closes_containers_at_last_complete_member() {
        let r = repair_truncated_json(r#"{"a": [1, 2, {"b": 3}, {"c": "hal"#).unwrap();
        assert_eq!(r, r#"{"a": [1, 2, {"b": 3}, {}]}"#);
        let r = repair_truncated_json(r#"{"a": [1, 2, 3"#).unwrap();
        assert_eq!(r, r#"{"a": [1, 2]}"#);
    }

    #[test]
    fn truncated_body_still_maps_its_header() {
        let ips = "{\"bug_type\":\"309\"}\n{\"procName\":\"X\",\"pid\":7,\"threads\":[{\"frames\":[{\"imageOffset\":1,";
        let Ips::Crash(log) = parse(ips.as_bytes()).unwrap() else { panic!("not a crash") };
        assert_eq!(log.header.process_name.as_deref(), Some("X"));
        assert_eq!(log.header.pid, Some(7));
        assert_eq!(log.problems.len(), 1, "{:?}", log.problems);
    }

    #[test]
    fn system_profile_after_the_body_is_not_damage() {
        // macOS .ips files end with a text system profile after the JSON body.
        let ips =
            "{\"bug_type\":\"309\"}\n{\"procName\":\"X\",\"threads\":[]}\n\nModel: Mac16,11, BootROM 1\nGraphics: M4\n";
        let Ips::Crash(log) = parse(ips.as_bytes()).unwrap() else { panic!("not a crash") };
        assert_eq!(log.header.process_name.as_deref(), Some("X"));
        assert!(log.problems.is_empty(), "{:?}", log.problems);
    }

    #[test]
    fn not_json_is_not_ips() {
        assert_eq!(parse(b"hello\nworld").unwrap_err(), IpsError::NotIps);
    }
}
