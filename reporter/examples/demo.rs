//! The whole loop on this machine, with embedded defaults: `cargo run -p reporter --example demo`.
//!
//! 1. Starts a collector (`viewer serve`'s library) on a free loopback port, storing into a temporary directory.
//! 2. Runs the demo app (this same binary, `app` mode): it enables the reporter, sets user key/values, starts named
//!    worker threads, and crashes for real with a null-pointer write at the end of a short call chain.
//! 3. Runs the app again: on launch the reporter finds the pending report and uploads it to the collector.
//! 4. Renders the report the collector stored with `viewer`'s library, symbolicated against this binary's own
//!    debug info, and prints it.
//!
//! `demo app [--crash] DIR URL` is the app mode, used by steps 2 and 3. `DEMO_KEEP=1` keeps the work directory.
#![allow(unsafe_code)] // the demo app crashes on purpose with a null-pointer write

use reporter::{AppInfo, Limits, Reporter};
use std::path::{Path, PathBuf};
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

    let collector = viewer::collector::Collector::bind("127.0.0.1:0", &store).map_err(|e| e.to_string())?;
    let addr = collector.local_addr().ok_or("collector has no address")?;
    let url = format!("http://{addr}/reports");
    let stop = collector.stop_flag();
    let server = std::thread::spawn(move || collector.serve(2, |line| eprintln!("collector: {line}")));
    eprintln!("demo: collector listening on {url}, storing into {}", store.display());

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
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    let _ = server.join();
    if !second.success() {
        return Err(format!("the relaunched app did not upload the report ({second})"));
    }

    let stored = viewer::collector::list(&store).map_err(|e| e.to_string())?;
    let report = stored.first().ok_or("the collector holds no report")?;
    eprintln!("demo: the collector holds {} report(s); rendering {}\n", stored.len(), report.id);
    let text = render(&report.path)?;
    print!("{text}");
    if std::env::var_os("DEMO_KEEP").is_some() {
        eprintln!("\ndemo: kept {}", work.display());
    } else {
        let _ = std::fs::remove_dir_all(&work);
    }
    Ok(())
}

fn render(path: &Path) -> Result<String, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut loaded = viewer::load(&bytes).map_err(|e| e.to_string())?;
    let exe: PathBuf = std::env::current_exe().map_err(|e| e.to_string())?;
    let mut symbols = viewer::SymbolStore::new(vec![exe]);
    Ok(viewer::render_loaded(&mut loaded, viewer::Layout::Modern, viewer::Format::Text, Some(&mut symbols)))
}
