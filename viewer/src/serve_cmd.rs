//! `viewer serve` (the collector), `viewer serve token create|revoke|list` and `viewer upload-symbols`: argument
//! parsing and printing only; the work is the `collector` crate's, with [`viewer::collector::ViewerAnalyzer`].

use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

const EXIT_OK: u8 = 0;
const EXIT_FAIL: u8 = 1;

pub(crate) const SERVE_HELP: &str = "\
Examples:
  viewer serve                                         127.0.0.1:8787, SQLite in ./collected-reports
  viewer serve token create --project myapp            print a new ingest token for project myapp
  viewer serve --addr 0.0.0.0:8787 --database postgres://crash@db.internal/crash --store /srv/crash

Uploads: POST /api/v1/reports with Authorization: Bearer <token> (201 stored, 200 already stored, 400 not a
report, 401 no or bad token, 413 too large, 415 wrong content type, 429 rate limited). Pages: http://ADDR/";

/// Arguments of `viewer serve`.
#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
pub(crate) struct ServeArgs {
    #[command(subcommand)]
    command: Option<ServeCommand>,
    #[command(flatten)]
    store: StoreArgs,
    /// Address to listen on (port 0 picks a free one; the URL is printed on stdout).
    #[arg(long, default_value = viewer::collector::DEFAULT_ADDR)]
    addr: String,
    /// Largest accepted report, in bytes.
    #[arg(long, default_value_t = report_format::transport::MAX_UPLOAD_BYTES)]
    max_body: u64,
    /// Largest accepted debug-file upload, in bytes.
    #[arg(long, default_value_t = collector::DEFAULT_MAX_DEBUG_FILE)]
    max_debug_file: u64,
    /// Ingest requests a minute per token, on average (0: no limit).
    #[arg(long, default_value_t = 600)]
    rate_limit: u32,
    /// Largest burst of ingest requests per token.
    #[arg(long, default_value_t = 1200)]
    rate_burst: u32,
    /// Worker threads.
    #[arg(long, default_value_t = 4)]
    workers: usize,
}

/// Where the collector keeps its data.
#[derive(Args, Debug)]
struct StoreArgs {
    /// Store root: reports/, debug-files/ and the default SQLite database collector.db (created 0700).
    #[arg(long, default_value = "collected-reports")]
    store: PathBuf,
    /// Database URL: sqlite://PATH or postgres://USER@HOST/DB (default: sqlite://STORE/collector.db).
    #[arg(long)]
    database: Option<String>,
    /// Debug-file root (default: STORE/debug-files).
    #[arg(long)]
    debug_files: Option<PathBuf>,
}

impl StoreArgs {
    fn config(&self) -> collector::Config {
        let mut c = collector::Config::new(&self.store);
        c.database = self.database.clone();
        c.debug_files = self.debug_files.clone();
        c
    }
}

#[derive(Subcommand, Debug)]
enum ServeCommand {
    /// Manage ingest tokens.
    #[command(subcommand)]
    Token(TokenCommand),
}

#[derive(Subcommand, Debug)]
enum TokenCommand {
    /// Create an ingest token for a project and print it (it is shown only once).
    Create {
        /// Project the token uploads into.
        #[arg(long)]
        project: String,
        /// A label to recognise the token by.
        #[arg(long, default_value = "")]
        label: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// Revoke a token by its id (as `token list` prints it).
    Revoke {
        /// Token id.
        id: String,
        #[command(flatten)]
        store: StoreArgs,
    },
    /// List the tokens (ids, projects, labels; never the tokens themselves).
    List {
        #[command(flatten)]
        store: StoreArgs,
    },
}

pub(crate) fn run_serve(a: ServeArgs) -> u8 {
    match a.command {
        Some(ServeCommand::Token(t)) => return run_token(t),
        None => {}
    }
    let mut config = a.store.config();
    config.max_body = a.max_body;
    config.max_debug_file = a.max_debug_file;
    config.rate_per_minute = a.rate_limit;
    config.rate_burst = a.rate_burst;
    config.log_requests = true;
    let running = match collector::Running::start(
        config.clone(),
        Arc::new(viewer::collector::ViewerAnalyzer::default()),
        &a.addr,
        a.workers,
    ) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("viewer serve: {e}");
            return EXIT_FAIL;
        }
    };
    // The first line on stdout is the base URL, so scripts can read it.
    println!("{}/", running.base_url());
    let _ = std::io::Write::flush(&mut std::io::stdout());
    eprintln!("viewer serve: store {}, database {}", config.store.display(), redact(&config.database_url()));
    match running.block_on(running.collector().db().tokens()) {
        Ok(t) if !t.iter().any(|t| t.revoked_ms.is_none()) => eprintln!(
            "viewer serve: no ingest token yet: uploads get 401 until one exists \
             (viewer serve token create --project NAME --store {})",
            config.store.display()
        ),
        _ => {}
    }
    match running.wait() {
        Ok(()) => EXIT_OK,
        Err(e) => {
            eprintln!("viewer serve: {e}");
            EXIT_FAIL
        }
    }
}

/// A database URL without its password.
fn redact(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(s), Some(at)) if at > s => {
            let user = &url[s + 3..at];
            let user = user.split(':').next().unwrap_or("");
            format!("{}{user}:***{}", &url[..s + 3], &url[at..])
        }
        _ => url.to_owned(),
    }
}

fn run_token(t: TokenCommand) -> u8 {
    let r = match t {
        TokenCommand::Create { project, label, store } => {
            collector::admin::create_token(&store.config(), &project, &label).map(|tok| {
                println!("{tok}");
                eprintln!("viewer serve token: created for project {project:?}; it is not shown again");
            })
        }
        TokenCommand::Revoke { id, store } => collector::admin::revoke_token(&store.config(), &id).and_then(|n| {
            if n == 0 {
                return Err(collector::Error::Config(format!("no live token with id {id}")));
            }
            eprintln!("viewer serve token: revoked {n} token{}", if n == 1 { "" } else { "s" });
            Ok(())
        }),
        TokenCommand::List { store } => collector::admin::list_tokens(&store.config()).map(|list| {
            for t in &list {
                let state = match t.revoked_ms {
                    Some(ms) => format!("revoked {}", viewer::from_report::format_time(ms as u64 * 1_000_000)),
                    None => "live".to_owned(),
                };
                println!(
                    "{}  {:<20} {:<20} created {}  {state}",
                    t.id,
                    t.project,
                    t.label,
                    viewer::from_report::format_time(t.created_ms as u64 * 1_000_000)
                );
            }
            println!("{} token{}", list.len(), if list.len() == 1 { "" } else { "s" });
        }),
    };
    match r {
        Ok(()) => EXIT_OK,
        Err(e) => {
            eprintln!("viewer serve token: {e}");
            EXIT_FAIL
        }
    }
}

/// Arguments of `viewer upload-symbols`.
#[derive(Args, Debug)]
pub(crate) struct UploadSymbolsArgs {
    /// dSYM bundles, Mach-O or ELF files, or directories searched for them.
    #[arg(required = true, value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// Collector base URL, e.g. http://127.0.0.1:8787
    #[arg(long)]
    url: String,
    /// Ingest token (default: the CRASH_COLLECTOR_TOKEN environment variable).
    #[arg(long)]
    token: Option<String>,
    /// Whole-request timeout per file, seconds.
    #[arg(long, default_value_t = 600)]
    timeout: u64,
}

pub(crate) fn run_upload_symbols(a: UploadSymbolsArgs) -> u8 {
    let Some(token) = a.token.clone().or_else(|| std::env::var("CRASH_COLLECTOR_TOKEN").ok()) else {
        eprintln!("viewer upload-symbols: give --token or set CRASH_COLLECTOR_TOKEN");
        return 2;
    };
    let uploads = match collector::client::collect(&a.paths) {
        Ok(u) if u.is_empty() => {
            eprintln!("viewer upload-symbols: no debug files found");
            return EXIT_FAIL;
        }
        Ok(u) => u,
        Err(e) => {
            eprintln!("viewer upload-symbols: {e}");
            return EXIT_FAIL;
        }
    };
    let agent = collector::client::agent(Duration::from_secs(a.timeout));
    let mut failed = 0;
    for u in &uploads {
        let sent = collector::client::send(&agent, &a.url, &token, u);
        let ok = sent.status.is_some_and(|s| (200..300).contains(&s));
        let status = sent.status.map_or_else(|| "failed".to_owned(), |s| format!("HTTP {s}"));
        println!("{}: {status}: {}", u.path().display(), sent.answer.trim());
        if !ok {
            failed += 1;
        }
    }
    if failed > 0 {
        eprintln!("viewer upload-symbols: {failed} of {} uploads failed", uploads.len());
        return EXIT_FAIL;
    }
    EXIT_OK
}
