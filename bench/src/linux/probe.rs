//! Child processes that measure install cost and idle cost, and `/proc` readers shared with the parent. Children
//! print `key=value` lines on standard output.

use super::{alloc, sys, workload};
use std::collections::BTreeMap;
use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Sum of the sizes of every mapping in `/proc/self/maps`, in bytes.
pub fn mapped_bytes() -> u64 {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    maps.lines()
        .filter_map(|l| {
            let range = l.split_whitespace().next()?;
            let (a, b) = range.split_once('-')?;
            Some(u64::from_str_radix(b, 16).ok()? - u64::from_str_radix(a, 16).ok()?)
        })
        .sum()
}

/// A `kB` field of `/proc/self/status` (`VmRSS`, `VmSize`), in bytes.
pub fn status_kb(field: &str) -> u64 {
    kb_field("/proc/self/status", field)
}

/// A `kB` field (`Name: 123 kB`) of a `/proc` file such as `/proc/meminfo`, in bytes (0 when missing).
pub fn kb_field(path: &str, field: &str) -> u64 {
    let s = std::fs::read_to_string(path).unwrap_or_default();
    s.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':')?.trim().strip_suffix("kB")?.trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// CPU time (user + system, clock ticks, from `/proc/<pid>/stat`), context switches summed over every thread
/// (`/proc/<pid>/task/*/status`), and the number of threads of process `pid` (`"self"` for this one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ProcFigures {
    /// utime + stime in clock ticks.
    pub cpu_ticks: u64,
    /// Voluntary + involuntary context switches, all threads.
    pub switches: u64,
    /// Live threads.
    pub threads: u64,
}

/// Parses utime + stime (fields 14 and 15) out of a `/proc/<pid>/stat` line.
pub fn stat_cpu_ticks(stat: &str) -> Option<u64> {
    // The command name (field 2) may contain spaces and parentheses: fields are counted after the last ')'.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Reads [`ProcFigures`] of `pid`.
pub fn proc_figures(pid: &str) -> ProcFigures {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let mut fig = ProcFigures { cpu_ticks: stat_cpu_ticks(&stat).unwrap_or(0), ..ProcFigures::default() };
    if let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) {
        for t in tasks.flatten() {
            fig.threads += 1;
            let s = std::fs::read_to_string(t.path().join("status")).unwrap_or_default();
            for l in s.lines() {
                if let Some(v) =
                    l.strip_prefix("voluntary_ctxt_switches:").or_else(|| l.strip_prefix("nonvoluntary_ctxt_switches:"))
                {
                    fig.switches += v.trim().parse::<u64>().unwrap_or(0);
                }
            }
        }
    }
    fig
}

/// Parses `key=value` lines.
pub fn parse_kv(text: &str) -> BTreeMap<String, String> {
    text.lines().filter_map(|l| l.split_once('=')).map(|(k, v)| (k.trim().to_string(), v.trim().to_string())).collect()
}

/// Install probe: `libdir nlibs reportdir handler|reporter`. Loads the libraries, then times one `handler::install`
/// (default `Config`) or one `reporter::Reporter::builder(dir).enable()` (no upload URL, so no upload thread),
/// and prints the time, the heap bytes it left allocated (counting allocator), the zero-filled tables it mapped
/// outside the allocator (`handler::preallocated_mapped_bytes`), the mapping growth, and the growth of the RSS and of
/// its anonymous part (`VmRSS`, `RssAnon`).
pub fn install_main(a: &[String]) -> ExitCode {
    let (Some(libdir), Some(n), Some(dir), Some(what)) = (a.first(), a.get(1), a.get(2), a.get(3)) else {
        eprintln!("bench install probe: usage: LIBDIR NLIBS REPORTDIR handler|reporter");
        return ExitCode::from(2);
    };
    let n: usize = n.parse().unwrap_or(0);
    if let Err(e) = sys::dlopen_all(&workload::lib_paths(Path::new(libdir), n)) {
        eprintln!("bench install probe: {e}");
        return ExitCode::from(3);
    }
    let config = handler::Config::new(dir);
    let (maps0, rss0, anon0) = (mapped_bytes(), status_kb("VmRSS"), status_kb("RssAnon"));
    let a0 = alloc::snapshot();
    let mapped0 = handler::preallocated_mapped_bytes();
    let t0 = Instant::now();
    let result = match what.as_str() {
        "handler" => handler::install(&config).map_err(|e| e.to_string()).map(|_| None),
        _ => reporter::Reporter::builder(dir).enable().map_err(|e| e.to_string()).map(Some),
    };
    let elapsed = t0.elapsed();
    let a1 = alloc::snapshot();
    let mapped1 = handler::preallocated_mapped_bytes();
    let (maps1, rss1, anon1) = (mapped_bytes(), status_kb("VmRSS"), status_kb("RssAnon"));
    let _reporter = match result {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bench install probe: {e}");
            return ExitCode::from(3);
        }
    };
    let images = handler::refresh_images().unwrap_or(0);
    println!("install_ns={}", elapsed.as_nanos());
    println!("heap_live={}", a1.live.saturating_sub(a0.live));
    println!("heap_total={}", a1.total - a0.total);
    println!("heap_calls={}", a1.calls - a0.calls);
    println!("mapped={}", mapped1.saturating_sub(mapped0));
    println!("maps_delta={}", maps1.saturating_sub(maps0));
    println!("rss_delta={}", rss1.saturating_sub(rss0));
    println!("anon_delta={}", anon1.saturating_sub(anon0));
    // The stacks install maps (`map_stack` in handler/src/prealloc.rs: size rounded to pages plus one guard page
    // each), computed from the Config: the alternate signal stack, the crash stack, and one walk stack per walker of
    // stacks on demand (handler::ondemand::pool::WALK_STACK_BYTES).
    let page = 4096;
    let walk = handler::ondemand::pool::WALK_STACK_BYTES.div_ceil(page) * page + page;
    let stacks = config.alt_stack_size.div_ceil(page) * page
        + config.crash_stack_size.div_ceil(page) * page
        + 2 * page
        + config.capture_walkers * walk;
    println!("stacks={stacks}");
    println!("images={images}");
    ExitCode::SUCCESS
}

/// Idle probe: `reportdir seconds closed_port [hangs]`. Enables the reporter with an upload URL to a closed loopback
/// port, waits for the background upload to give up, then measures CPU time and context switches over the window.
/// With `hangs`, hang detection runs too (default `HangConfig`, the measuring thread watched and marked idle, as
/// an event loop waiting for its next event is): the watchdog's own wake-ups are then in the figures.
pub fn idle_main(a: &[String]) -> ExitCode {
    let (Some(dir), Some(secs), Some(port)) = (a.first(), a.get(1), a.get(2)) else {
        eprintln!("bench idle probe: usage: REPORTDIR SECONDS PORT");
        return ExitCode::from(2);
    };
    let secs: f64 = secs.parse().unwrap_or(10.0);
    let r = match reporter::Reporter::builder(dir).upload_url(format!("http://127.0.0.1:{port}/upload")).enable() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("bench idle probe: {e}");
            return ExitCode::from(3);
        }
    };
    let upload_done = r.wait_for_background_upload(Duration::from_secs(10)).is_some();
    let hangs = a.get(3).is_some_and(|v| v == "hangs");
    if hangs {
        if let Err(e) = r.start_hang_detection(&reporter::HangConfig::default()) {
            eprintln!("bench idle probe: {e}");
            return ExitCode::from(3);
        }
        reporter::idle();
        println!("period_ms={}", reporter::HangConfig::default().effective_period().as_millis());
    }
    std::thread::sleep(Duration::from_millis(100));
    // The /proc reads cost CPU themselves, so they stay outside the getrusage pair.
    let f0 = proc_figures("self");
    let (cpu0, _) = sys::rusage_self();
    std::thread::sleep(Duration::from_secs_f64(secs));
    let (cpu1, _) = sys::rusage_self();
    let f1 = proc_figures("self");
    println!("installed={}", handler::is_installed());
    println!("upload_done={upload_done}");
    println!("window_s={secs}");
    println!("cpu_us={}", cpu1 - cpu0);
    println!("cpu_ticks={}", f1.cpu_ticks - f0.cpu_ticks);
    println!("tick_hz={}", sys::clock_ticks());
    // The measuring thread's own sleep is one voluntary switch.
    println!("switches={}", f1.switches.saturating_sub(f0.switches));
    println!("threads={}", f1.threads);
    if hangs {
        let st = handler::hangs::stats();
        println!("hangs={}", st.hangs);
        println!("slow_frames={}", st.slow_frames);
    }
    ExitCode::SUCCESS
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_line_with_a_tricky_command_name() {
        let line = "1234 (a) b (c)) S 1 1234 1234 0 -1 4194304 100 0 0 0 250 17 0 0 20 0 3 0 5 0 0";
        assert_eq!(stat_cpu_ticks(line), Some(267));
        assert_eq!(stat_cpu_ticks("garbage"), None);
    }

    #[test]
    fn own_process_figures_are_plausible() {
        let f = proc_figures("self");
        assert!(f.threads >= 1);
        assert!(status_kb("VmRSS") > 0);
        assert!(mapped_bytes() > 0);
    }

    #[test]
    fn key_value_lines() {
        let kv = parse_kv("a=1\nnoise\nb = x=y\n");
        assert_eq!(kv.get("a").map(String::as_str), Some("1"));
        assert_eq!(kv.get("b").map(String::as_str), Some("x=y"));
        assert_eq!(kv.len(), 2);
    }
}
