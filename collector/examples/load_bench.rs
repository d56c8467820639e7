//! Collector load benchmark (run by `scripts/bench.sh`; prints Markdown tables, progress on stderr):
//!
//! 1. Ingest: reports a second through `POST /api/v1/reports` over loopback HTTP, from concurrent clients, each
//!    report distinct (20 crash signatures), with SQLite and with PostgreSQL (a throwaway cluster,
//!    `collector::pg_cluster`; skipped with a message when PostgreSQL is not installed).
//! 2. Groups page: with N stored reports (100,000 by default; rows inserted directly in the database, spread over
//!    500 groups with a long-tailed distribution and 5 app versions), the latency of `GET /` (the HTML groups
//!    page) and `GET /api/v1/groups`, sequential requests, p50 and p99.
//!
//! `load_bench [--quick] [--reports N] [--stored N] [--clients N] [--requests N]`. `--quick` (CI): 300 reports
//! ingested, 10,000 stored, 50 requests: checks that it runs; figures indicative only. Nothing here asserts a
//! speed; the figures are printed.

use collector::db::{GroupRow, ReportRow};
use collector::{Config, Running};
use report_format::model::{Exception, FrameTrust, Image, ImageId, Meta, Os, Process, Report, ReportId, Thread};
use std::sync::Arc;
use std::time::{Duration, Instant};

struct Opts {
    reports: usize,
    stored: usize,
    clients: usize,
    requests: usize,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts { reports: 3000, stored: 100_000, clients: 8, requests: 300 };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let num = |i: usize| -> Result<usize, String> {
            args.get(i + 1).and_then(|v| v.parse().ok()).ok_or_else(|| format!("{} needs a number", args[i]))
        };
        match args[i].as_str() {
            "--quick" => {
                o = Opts { reports: 300, stored: 10_000, clients: 4, requests: 50 };
                i += 1;
            }
            "--reports" => {
                o.reports = num(i)?;
                i += 2;
            }
            "--stored" => {
                o.stored = num(i)?;
                i += 2;
            }
            "--clients" => {
                o.clients = num(i)?.max(1);
                i += 2;
            }
            "--requests" => {
                o.requests = num(i)?.max(1);
                i += 2;
            }
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

fn report(n: u32) -> Vec<u8> {
    let mut rid = [0u8; 16];
    rid[..4].copy_from_slice(&n.to_be_bytes());
    rid[6] = 0x40;
    let app = 0x5555_0000_0000u64;
    let meta = Meta {
        report_id: ReportId(rid),
        capture_time_ns: Some(1_700_000_000_000_000_000 + u64::from(n)),
        arch: Some("x86_64".into()),
        os: Os { name: Some("Linux".into()), version: Some("6.1.0".into()), build: None },
        process: Process {
            name: Some("app".into()),
            path: Some("/opt/app/bin/app".into()),
            short_version: Some(format!("1.{}", n % 5)),
            build_version: Some("1".into()),
            ..Process::default()
        },
        ..Meta::default()
    };
    let frames: Vec<u64> = (0..24).map(|i| app + 0x1000 * (u64::from(n % 20) + 1) + i * 0x40).collect();
    let thread = Thread {
        index: 0,
        crashed: true,
        captured: true,
        frame_trust: vec![FrameTrust::Context],
        frames,
        ..Thread::default()
    };
    let r = Report {
        format_version: (1, 1),
        meta: Some(meta),
        exception: Some(Exception {
            signal: Some(11),
            si_code: Some(1),
            crashed_thread: Some(0),
            ..Exception::default()
        }),
        threads: vec![thread],
        images: vec![Image {
            name: "app".into(),
            path: Some("/opt/app/bin/app".into()),
            load_address: app,
            size: 0x100_0000,
            id: Some(ImageId::BuildId(vec![0x11; 20])),
            ..Image::default()
        }],
        ..Report::default()
    };
    report_format::owned::to_bytes(&r).unwrap_or_default()
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1000.0)
}

struct IngestResult {
    per_sec: f64,
    p50: Duration,
    p99: Duration,
}

fn ingest(o: &Opts, database: Option<String>, store: &std::path::Path) -> Result<IngestResult, String> {
    let mut c = Config::new(store);
    c.database = database;
    c.rate_per_minute = 0;
    c.max_connections = 16;
    let srv = Running::start(c, Arc::new(viewer::collector::ViewerAnalyzer::default()), "127.0.0.1:0", 2)
        .map_err(|e| e.to_string())?;
    let token = srv.block_on(srv.collector().create_token("bench", "")).map_err(|e| e.to_string())?;
    let bodies: Vec<Vec<u8>> = (0..o.reports as u32).map(report).collect();
    let url = format!("{}/api/v1/reports", srv.base_url());
    let auth = format!("Bearer {token}");
    let next = std::sync::atomic::AtomicUsize::new(0);
    let start = Instant::now();
    let lat: Result<Vec<Vec<Duration>>, String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..o.clients)
            .map(|_| {
                s.spawn(|| {
                    let agent = collector::client::agent(Duration::from_secs(60));
                    let mut v = Vec::new();
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        let Some(b) = bodies.get(i) else { return Ok(v) };
                        let t = Instant::now();
                        let r = agent
                            .post(&url)
                            .header("Authorization", &auth)
                            .header("Content-Type", "application/x-crash-report")
                            .send(&b[..])
                            .map_err(|e| e.to_string())?;
                        if r.status().as_u16() != 201 {
                            return Err(format!("HTTP {}", r.status()));
                        }
                        v.push(t.elapsed());
                    }
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("client thread panicked".into()))).collect()
    });
    let elapsed = start.elapsed();
    let mut all: Vec<Duration> = lat?.into_iter().flatten().collect();
    all.sort();
    let stored = srv.block_on(srv.collector().db().report_count()).map_err(|e| e.to_string())?;
    if stored as usize != o.reports {
        return Err(format!("{stored} reports stored, {} sent", o.reports));
    }
    srv.stop().map_err(|e| e.to_string())?;
    Ok(IngestResult {
        per_sec: o.reports as f64 / elapsed.as_secs_f64(),
        p50: percentile(&all, 0.5),
        p99: percentile(&all, 0.99),
    })
}

/// Fills the database with `n` report rows over 500 groups and measures the groups pages.
fn groups_page(
    o: &Opts,
    database: Option<String>,
    store: &std::path::Path,
) -> Result<[(Duration, Duration); 2], String> {
    let mut c = Config::new(store);
    c.database = database;
    let srv = Running::start(c, Arc::new(viewer::collector::ViewerAnalyzer::default()), "127.0.0.1:0", 2)
        .map_err(|e| e.to_string())?;
    let db = srv.collector().db().clone();
    let fill = Instant::now();
    srv.block_on(async {
        for g in 0..500 {
            db.upsert_group(&GroupRow {
                id: format!("{g:016x}"),
                project: "bench".into(),
                signature: format!("SIGSEGV\napp +{:#x}", g * 16),
                title: format!("SIGSEGV in app +{:#x}", g * 16),
                exception: "SIGSEGV (SEGV_MAPERR)".into(),
                stack: String::new(),
            })
            .await?;
        }
        let mut rows = Vec::with_capacity(5000);
        for i in 0..o.stored {
            // Long tail: group g gets about 1/(g+1) of the reports.
            let x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 40;
            let g = ((500f64).powf(x as f64 / (1u64 << 24) as f64) as u64).saturating_sub(1).min(499);
            rows.push(ReportRow {
                id: format!("{:08X}-0000-4000-8000-{:012X}", i, i),
                project: "bench".into(),
                file: String::new(),
                size: 1000,
                received_ms: 1_700_000_000_000 + i as i64,
                captured_ms: None,
                problems: String::new(),
                group_id: format!("{g:016x}"),
                app_version: format!("1.{} (1)", i % 5),
                os_version: "Linux 6.1.0".into(),
                process: "app".into(),
                exception: "SIGSEGV (SEGV_MAPERR)".into(),
                image_ids: " 1111 ".into(),
            });
            if rows.len() == 5000 {
                db.insert_reports(&rows).await?;
                rows.clear();
            }
        }
        db.insert_reports(&rows).await?;
        Ok::<_, collector::Error>(())
    })
    .map_err(|e| e.to_string())?;
    eprintln!("load_bench: {} rows stored in {:.1} s", o.stored, fill.elapsed().as_secs_f64());
    let agent = collector::client::agent(Duration::from_secs(60));
    let mut out = [(Duration::ZERO, Duration::ZERO); 2];
    for (k, path) in ["/", "/api/v1/groups"].iter().enumerate() {
        let url = format!("{}{path}", srv.base_url());
        let mut v = Vec::new();
        for _ in 0..o.requests {
            let t = Instant::now();
            let mut r = agent.get(&url).call().map_err(|e| e.to_string())?;
            let body = r.body_mut().read_to_string().map_err(|e| e.to_string())?;
            if r.status().as_u16() != 200 || !body.contains("0000000000000000") {
                return Err(format!("GET {path}: HTTP {} without the biggest group", r.status()));
            }
            v.push(t.elapsed());
        }
        v.sort();
        out[k] = (percentile(&v, 0.5), percentile(&v, 0.99));
    }
    srv.stop().map_err(|e| e.to_string())?;
    Ok(out)
}

fn main() -> std::process::ExitCode {
    match run() {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("load_bench: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

fn run() -> Result<(), String> {
    let o = parse()?;
    let tmp = std::env::temp_dir().join(format!("collector-load-{}", std::process::id()));
    let pg = match collector::pg_cluster::PgCluster::start() {
        Ok(pg) => Some(pg),
        Err(collector::pg_cluster::PgError::NotInstalled) => {
            eprintln!("load_bench: PostgreSQL is not installed: its rows are skipped");
            None
        }
        Err(e) => return Err(e.to_string()),
    };
    let mut backends: Vec<(&str, Option<String>, Option<String>)> = vec![("SQLite", None, None)];
    if let Some(pg) = &pg {
        pg.create_database("ingest").map_err(|e| e.to_string())?;
        pg.create_database("pages").map_err(|e| e.to_string())?;
        backends.push(("PostgreSQL", Some(pg.url("ingest")), Some(pg.url("pages"))));
    }
    println!("\n### Collector: ingest over loopback HTTP\n");
    println!(
        "{} distinct reports (~{} bytes each), {} concurrent clients, 2 server worker threads, this machine (2 cores, shared).\n",
        o.reports,
        report(0).len(),
        o.clients
    );
    println!("| database | reports/s | latency p50 (ms) | latency p99 (ms) |\n|---|---|---|---|");
    for (name, db, _) in &backends {
        eprintln!("load_bench: ingest, {name}");
        let r = ingest(&o, db.clone(), &tmp.join(format!("ingest-{name}")))?;
        println!("| {name} | {:.0} | {} | {} |", r.per_sec, ms(r.p50), ms(r.p99));
    }
    println!("\n### Collector: groups page with {} stored reports (500 groups)\n", o.stored);
    println!("{} sequential requests each.\n", o.requests);
    println!("| database | page | p50 (ms) | p99 (ms) |\n|---|---|---|---|");
    for (name, _, db) in &backends {
        eprintln!("load_bench: groups page, {name}");
        let r = groups_page(&o, db.clone(), &tmp.join(format!("pages-{name}")))?;
        println!("| {name} | `GET /` (HTML) | {} | {} |", ms(r[0].0), ms(r[0].1));
        println!("| {name} | `GET /api/v1/groups` | {} | {} |", ms(r[1].0), ms(r[1].1));
    }
    drop(pg);
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(())
}
