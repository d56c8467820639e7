//! The crash collector served by `viewer serve`: receives reports from `reporter` over HTTP, stores each once by
//! id, groups them by a crash signature, stores debug files and symbolicates reports with them, and serves
//! server-rendered pages and a JSON API.
//!
//! Stack: `axum` on `tokio` (HTTP), `sqlx` (database: SQLite by default, PostgreSQL with a `postgres://` URL; the
//! same queries and migrations for both, see [`db`]). Decoding, symbolication and rendering come from an
//! [`analysis::Analyzer`] (the viewer's, in `viewer serve`); grouping is [`analysis::signature`].
//!
//! Endpoints (all answers to bad input are 4xx; every path component on disk is chosen by the collector):
//!
//! | method and path | what |
//! |---|---|
//! | `POST /api/v1/reports` (also `POST /` and `POST /reports`, the paths older apps use) | ingest one report; protocol `report-format/SCHEMA.md` §7 plus `Authorization: Bearer <token>`: 201 stored, 200 already stored, 400 not a report, 401 no or bad token, 413 too large, 415 wrong content type, 429 rate limited |
//! | `POST /api/v1/debug-files` | a Mach-O, an ELF or a zipped dSYM bundle (bearer token); 201 with the ids indexed (JSON) |
//! | `GET /api/v1/groups?sort=count\|last_seen&version=V&project=P` | groups with counts (JSON) |
//! | `GET /api/v1/groups/{id}` | one group: signature, stack, counts, versions, newest reports (JSON) |
//! | `GET /api/v1/reports/{id}?format=text\|json` | one report rendered (symbolicated) |
//! | `GET /`, `GET /groups/{id}`, `GET /reports/{id}` | the same as HTML pages |
//! | `GET /reports/{id}/download?format=crash\|ips\|raw` | downloads |
//! | `GET /reports` | stored report ids, one per line, oldest capture first (for test harnesses) |
//!
//! [`pg_cluster`] starts a throwaway PostgreSQL server for the tests and the load benchmark.

pub mod analysis;
pub mod auth;
pub mod client;
pub mod db;
mod http;
mod pages;
pub mod pg_cluster;
pub mod store;

use analysis::Analyzer;
use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

pub use db::Db;

/// Default listening address.
pub const DEFAULT_ADDR: &str = "127.0.0.1:8787";
/// Default largest debug-file upload, bytes (1 GiB).
pub const DEFAULT_MAX_DEBUG_FILE: u64 = 1 << 30;

/// Everything that can go wrong running the collector.
#[derive(Debug)]
pub enum Error {
    /// A file or socket operation.
    Io(std::io::Error),
    /// A database operation.
    Db(sqlx::Error),
    /// Running the migrations.
    Migrate(sqlx::migrate::MigrateError),
    /// A bad setting.
    Config(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io(e) => write!(f, "{e}"),
            Error::Db(e) => write!(f, "database: {e}"),
            Error::Migrate(e) => write!(f, "database migration: {e}"),
            Error::Config(e) => write!(f, "{e}"),
        }
    }
}

impl std::error::Error for Error {}

impl From<std::io::Error> for Error {
    fn from(e: std::io::Error) -> Self {
        Error::Io(e)
    }
}

impl From<sqlx::Error> for Error {
    fn from(e: sqlx::Error) -> Self {
        Error::Db(e)
    }
}

/// Settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Store root: `reports/`, the default debug-file root `debug-files/` and the default SQLite file
    /// `collector.db` live here (directories created 0700, files 0600).
    pub store: PathBuf,
    /// Database URL: `sqlite://PATH` or `postgres://USER@HOST/DB`; `None` is `sqlite://<store>/collector.db`.
    pub database: Option<String>,
    /// Debug-file root; `None` is `<store>/debug-files`.
    pub debug_files: Option<PathBuf>,
    /// Largest report body, bytes.
    pub max_body: u64,
    /// Largest debug-file body, bytes.
    pub max_debug_file: u64,
    /// Ingest requests a minute per token, on average (0: no limit).
    pub rate_per_minute: u32,
    /// Largest burst per token.
    pub rate_burst: u32,
    /// Database connections.
    pub max_connections: u32,
    /// Print one line per request on stderr (`METHOD PATH -> STATUS, ms`).
    pub log_requests: bool,
}

impl Config {
    /// Defaults for a store root: SQLite in it, 16 MiB reports, 1 GiB debug files, 600 reports a minute per token
    /// with bursts of 1200, 8 connections, no request log.
    pub fn new(store: impl Into<PathBuf>) -> Config {
        Config {
            store: store.into(),
            database: None,
            debug_files: None,
            max_body: report_format::transport::MAX_UPLOAD_BYTES,
            max_debug_file: DEFAULT_MAX_DEBUG_FILE,
            rate_per_minute: 600,
            rate_burst: 1200,
            max_connections: 8,
            log_requests: false,
        }
    }

    /// The database URL in effect.
    pub fn database_url(&self) -> String {
        match &self.database {
            Some(u) => u.clone(),
            None => format!("sqlite://{}", self.store.join("collector.db").display()),
        }
    }
}

/// A collector ready to serve.
#[derive(Clone)]
pub struct Collector {
    state: Arc<http::State>,
}

impl std::fmt::Debug for Collector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Collector").field("store", &self.state.config.store).finish_non_exhaustive()
    }
}

impl Collector {
    /// Creates the store directories, connects to the database and runs the migrations.
    ///
    /// # Errors
    /// [`Error`] from any of these steps.
    pub async fn open(config: Config, analyzer: Arc<dyn Analyzer>) -> Result<Collector, Error> {
        store::create_private_dir(&config.store)?;
        let debug_root = config.debug_files.clone().unwrap_or_else(|| config.store.join("debug-files"));
        let files = store::FileStore::open(&config.store, &debug_root)?;
        let db = Db::connect(&config.database_url(), config.max_connections).await?;
        let limiter = auth::RateLimiter::new(config.rate_per_minute, config.rate_burst);
        Ok(Collector { state: Arc::new(http::State { config, db, files, analyzer, limiter }) })
    }

    /// The database.
    pub fn db(&self) -> &Db {
        &self.state.db
    }

    /// The HTTP routes (for serving, or for driving in-process).
    pub fn router(&self) -> axum::Router {
        http::router(self.state.clone())
    }

    /// Serves on `listener` until `shutdown` completes.
    ///
    /// # Errors
    /// I/O errors of the listener.
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        axum::serve(listener, self.router()).with_graceful_shutdown(shutdown).await
    }

    /// Creates an ingest token for `project` and returns it (shown once; only its hash is stored).
    ///
    /// # Errors
    /// Database errors; [`Error::Config`] for an empty project name.
    pub async fn create_token(&self, project: &str, label: &str) -> Result<String, Error> {
        create_token(&self.state.db, project, label).await
    }
}

/// Creates an ingest token in `db` (see [`Collector::create_token`]).
///
/// # Errors
/// As [`Collector::create_token`].
pub async fn create_token(db: &Db, project: &str, label: &str) -> Result<String, Error> {
    let project = project.trim();
    if project.is_empty() || project.len() > 200 {
        return Err(Error::Config("a project name is 1 to 200 characters".into()));
    }
    let token = auth::new_token()?;
    db.insert_token(&auth::token_hash(&token), project, label, now_ms()).await?;
    Ok(token)
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as i64).unwrap_or(0)
}

/// A collector running on its own thread and runtime (for the demo, tests and benchmarks, which are not async).
#[derive(Debug)]
pub struct Running {
    /// The bound address.
    pub addr: SocketAddr,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
    collector: Collector,
    runtime: Arc<tokio::runtime::Runtime>,
}

impl Running {
    /// Opens a collector with `config` and serves it on `addr` (`127.0.0.1:0` picks a free port) on a new
    /// multi-threaded runtime with `workers` threads.
    ///
    /// # Errors
    /// [`Error`] opening the collector or binding.
    pub fn start(config: Config, analyzer: Arc<dyn Analyzer>, addr: &str, workers: usize) -> Result<Running, Error> {
        let runtime =
            Arc::new(tokio::runtime::Builder::new_multi_thread().worker_threads(workers.max(1)).enable_all().build()?);
        let (collector, listener) = runtime.block_on(async {
            let c = Collector::open(config, analyzer).await?;
            let l = tokio::net::TcpListener::bind(addr).await?;
            Ok::<_, Error>((c, l))
        })?;
        let addr = listener.local_addr()?;
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let c = collector.clone();
        let rt = runtime.clone();
        let thread = std::thread::spawn(move || {
            rt.block_on(c.serve(listener, async move {
                let _ = rx.await;
            }))
        });
        Ok(Running { addr, stop: Some(tx), thread: Some(thread), collector, runtime })
    }

    /// `http://ADDR` without a trailing slash.
    pub fn base_url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Runs a future on the collector's runtime (e.g. database queries from a test).
    pub fn block_on<F: Future>(&self, f: F) -> F::Output {
        self.runtime.block_on(f)
    }

    /// The collector.
    pub fn collector(&self) -> &Collector {
        &self.collector
    }

    /// Blocks until the server stops (it runs until the process ends unless [`Running::stop`] is called from
    /// elsewhere; `viewer serve` uses this).
    ///
    /// # Errors
    /// The server's I/O error, if it failed.
    pub fn wait(mut self) -> std::io::Result<()> {
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(std::io::Error::other("the server thread panicked")),
            None => Ok(()),
        }
    }

    /// Stops serving and waits for the server thread.
    ///
    /// # Errors
    /// The server's I/O error, if it failed.
    pub fn stop(mut self) -> std::io::Result<()> {
        self.shutdown()
    }

    fn shutdown(&mut self) -> std::io::Result<()> {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        match self.thread.take().map(|t| t.join()) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(std::io::Error::other("the server thread panicked")),
            None => Ok(()),
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.shutdown();
    }
}

/// Token administration without a running server (`viewer serve token ...`): each call opens the database named
/// by the config (running the migrations), does one thing and closes it.
pub mod admin {
    use super::{Config, Db, Error};

    fn run<T>(config: &Config, f: impl AsyncFnOnce(&Db) -> Result<T, Error>) -> Result<T, Error> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
        rt.block_on(async {
            super::store::create_private_dir(&config.store)?;
            let db = Db::connect(&config.database_url(), 1).await?;
            let r = f(&db).await;
            db.close().await;
            r
        })
    }

    /// Creates a token for `project`; returns the token (shown once).
    ///
    /// # Errors
    /// Database errors; [`Error::Config`] for an empty project name.
    pub fn create_token(config: &Config, project: &str, label: &str) -> Result<String, Error> {
        run(config, async |db| super::create_token(db, project, label).await)
    }

    /// Revokes the tokens whose short id is `id` (at least 8 hex digits); returns how many.
    ///
    /// # Errors
    /// Database errors.
    pub fn revoke_token(config: &Config, id: &str) -> Result<u64, Error> {
        run(config, async |db| db.revoke_token(id, super::now_ms()).await)
    }

    /// Every token.
    ///
    /// # Errors
    /// Database errors.
    pub fn list_tokens(config: &Config) -> Result<Vec<super::db::TokenInfo>, Error> {
        run(config, async |db| db.tokens().await)
    }
}
