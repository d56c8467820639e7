//! The whole loop on this machine, with embedded defaults: `cargo run -p reporter --example demo`.
//!
//! 1. Starts a collector (the `collector` crate `viewer serve` runs, SQLite in a temporary directory) on a free
//!    loopback port, and creates an ingest token for the project `demo`.
//! 2. Runs the demo app (this same binary, `app` mode): it enables the reporter, sets user key/values, starts named
//!    worker threads, and crashes for real with a null-pointer write at the end of a short call chain.
//! 3. Runs the app again: on launch the reporter finds the pending report and uploads it to the collector (the
//!    token travels as the user part of the upload URL, sent as `Authorization: Bearer`).
//! 4. Uploads this binary as a debug file (what `viewer upload-symbols` does), then fetches the report from the
//!    collector's API, symbolicated on the server, and prints it with the crash group it landed in.
//!
//! `demo app [--crash] DIR URL` is the app mode, used by steps 2 and 3. `DEMO_KEEP=1` keeps the work directory.
#![allow(unsafe_code)] // the demo app crashes on purpose with a null-pointer write

use reporter::{AppInfo, Limits, Reporter};
use std::process::{Command, ExitCode};
use std::time::Duration;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    match args.get(1).map(String::as_str) {
        Some("app") => app(&args[2..]),
        _ => orchestrate(),
    }
}

// ------------------------------------------------------------------------------------------------------------
// The demo app.

fn app(args: &[String]) -> ExitCode {
    let crash = args.first().is_some_and(|a| a == "--crash");
    let rest = if crash { &args[1..] } else { args };
    let (Some(dir), Some(url)) = (rest.first(), rest.get(1)) else {
        eprintln!("usage: demo app [--crash] DIR URL");
        return ExitCode::from(2);
    };
    let limits =
        Limits { retry_initial: Duration::from_secs(1), upload_timeout: Duration::from_secs(10), ..Limits::default() };
    let r = match Reporter::builder(dir)
        .upload_url(url.clone())
        .app_info(AppInfo {
            bundle_id: "com.example.demo".into(),
            short_version: "1.0".into(),
            build_version: "7".into(),
        })
        .limits(limits)
        .enable()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("demo app: {e}");
            return ExitCode::from(1);
        }
    };
    if !crash {
        // Second launch. The first one crashed within seconds of launch, which the reporter treats as a crash
        // loop: it uploaded before enable() returned. Anything else goes out on the background thread.
        let in_enable = r.crash_loop_upload().map_or(0, |s| s.delivered.len());
        let background = match r.wait_for_background_upload(Duration::from_secs(30)) {
            Some(Ok(sum)) => sum.delivered.len(),
            other => {
                eprintln!("demo app: background upload did not finish: {other:?}");
                return ExitCode::from(1);
            }
        };
        println!(
            "demo app: relaunched (crash loop detected: {}); uploaded {in_enable} report(s) before enable() returned \
             and {background} in the background",
            r.crash_loop_detected()
        );
        return if in_enable + background > 0 { ExitCode::SUCCESS } else { ExitCode::from(1) };
    }
    let _ = r.set_value("user.id", "42");
    let _ = r.set_value("screen", "checkout");
    // A few named threads, parked, as in a real app.
    for name in ["network", "db-writer", "image-decoder"] {
        let _ = std::thread::Builder::new().name(name.into()).spawn(|| loop {
            std::thread::park();
        });
    }
    std::thread::sleep(Duration::from_millis(100));
    println!("demo app: crash reporting enabled; crashing now");
    handle_checkout(3)
}

#[inline(never)]
fn handle_checkout(items: u32) -> ExitCode {
    let total = apply_discount(items * 1000);
    ExitCode::from((total % 256) as u8)
}

#[inline(never)]
fn apply_discount(cents: u32) -> u32 {
    parse_coupon(std::hint::black_box("SAVE10")) + cents
}

#[inline(never)]
fn parse_coupon(code: &str) -> u32 {
    let target: *mut u32 = std::hint::black_box(std::ptr::null_mut());
    // SAFETY: none: this write to address 0 is the crash the demo is about (SIGSEGV, SEGV_MAPERR at 0x0).
    unsafe { std::ptr::write_volatile(target, code.len() as u32) };
    0
}

// ------------------------------------------------------------------------------------------------------------
// The orchestrator.

fn orchestrate() -> ExitCode {
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("demo: {e}");
            ExitCode::from(1)
        }
    }
}

fn run() -> Result<(), String> {
    let work = std::env::temp_dir().join(format!("crash-reporter-demo-{}", std::process::id()));
    let reports = work.join("app-reports");
    let store = work.join("collector-store");
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;

    let config = collector::Config::new(&store);
    let analyzer = std::sync::Arc::new(viewer::collector::ViewerAnalyzer::default());
    let server = collector::Running::start(config, analyzer, "127.0.0.1:0", 2).map_err(|e| e.to_string())?;
    let token = server.block_on(server.collector().create_token("demo", "demo app")).map_err(|e| e.to_string())?;
    let base = server.base_url();
    let url = format!("http://{token}@{}/api/v1/reports", server.addr);
    eprintln!("demo: collector listening on {base}, storing into {}", store.display());

    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let first = Command::new(&exe)
        .args(["app", "--crash"])
        .arg(&reports)
        .arg(&url)
        .status()
        .map_err(|e| format!("cannot start the demo app: {e}"))?;
    let signal = std::os::unix::process::ExitStatusExt::signal(&first);
    eprintln!("demo: first launch ended with {first} (signal {signal:?})");
    if signal.is_none() {
        return Err("the demo app was supposed to die by a signal".into());
    }
    let second =
        Command::new(&exe).arg("app").arg(&reports).arg(&url).status().map_err(|e| format!("relaunch: {e}"))?;
    if !second.success() {
        return Err(format!("the relaunched app did not upload the report ({second})"));
    }

    // Debug files: this binary carries its own DWARF; the collector indexes it by build ID.
    let agent = collector::client::agent(Duration::from_secs(60));
    let sent = collector::client::send(&agent, &base, &token, &collector::client::Upload::Object(exe.clone()));
    if sent.status != Some(201) {
        return Err(format!("debug-file upload failed: {:?} {}", sent.status, sent.answer));
    }
    let ids = get(&agent, &format!("{base}/reports"))?;
    let id = ids.lines().next().ok_or("the collector holds no report")?.to_owned();
    let groups = get(&agent, &format!("{base}/api/v1/groups"))?;
    let title = serde_json::from_str::<serde_json::Value>(&groups)
        .ok()
        .and_then(|v| v.get(0)?.get("title")?.as_str().map(str::to_owned))
        .unwrap_or_default();
    eprintln!("demo: the collector holds {} report(s); group: {title}", ids.lines().count());
    eprintln!("demo: pages at {base}/ while it runs; report {id}, symbolicated on the server:\n");
    let text = get(&agent, &format!("{base}/api/v1/reports/{id}?format=text"))?;
    print!("{text}");
    drop(server);
    if std::env::var_os("DEMO_KEEP").is_some() {
        eprintln!("\ndemo: kept {}", work.display());
    } else {
        let _ = std::fs::remove_dir_all(&work);
    }
    Ok(())
}

fn get(agent: &ureq::Agent, url: &str) -> Result<String, String> {
    let mut r = agent.get(url).call().map_err(|e| format!("GET {url}: {e}"))?;
    if r.status() != 200 {
        return Err(format!("GET {url}: HTTP {}", r.status()));
    }
    r.body_mut().read_to_string().map_err(|e| format!("GET {url}: {e}"))
}
