//! A throwaway PostgreSQL cluster for tests and benchmarks: `initdb` into a temporary directory, `pg_ctl start` on
//! a free loopback port with trust authentication, `pg_ctl stop -m immediate` and removal on drop.
//!
//! The server binaries come from Debian's `postgresql` package (`/usr/lib/postgresql/<major>/bin`, the newest
//! major first; `PG_BIN` overrides the directory). PostgreSQL refuses to run as root: when the current user is
//! root, the cluster is created and run as the `postgres` system user the package creates (through `runuser`),
//! in a directory owned by that user; otherwise as the current user.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A running throwaway cluster.
#[derive(Debug)]
pub struct PgCluster {
    dir: PathBuf,
    bin: PathBuf,
    as_postgres: bool,
    /// The loopback port it listens on.
    pub port: u16,
}

/// Why no cluster could be started.
#[derive(Debug)]
pub enum PgError {
    /// No PostgreSQL server binaries on this machine.
    NotInstalled,
    /// A step failed: which, and its output.
    Failed(String),
}

impl std::fmt::Display for PgError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PgError::NotInstalled => {
                write!(
                    f,
                    "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb; apt-get install postgresql)"
                )
            }
            PgError::Failed(s) => write!(f, "{s}"),
        }
    }
}

impl std::error::Error for PgError {}

/// The directory holding `initdb` and `pg_ctl`, when PostgreSQL is installed.
pub fn bin_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("PG_BIN") {
        let d = PathBuf::from(d);
        return d.join("initdb").exists().then_some(d);
    }
    let mut majors: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|e| e.ok())
        .filter_map(|e| Some((e.file_name().to_str()?.parse::<u32>().ok()?, e.path().join("bin"))))
        .filter(|(_, p)| p.join("initdb").exists())
        .collect();
    majors.sort();
    majors.pop().map(|(_, p)| p)
}

fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

impl PgCluster {
    /// Creates and starts a cluster.
    ///
    /// # Errors
    /// [`PgError::NotInstalled`] without PostgreSQL; [`PgError::Failed`] when `initdb` or `pg_ctl` fails.
    pub fn start() -> Result<PgCluster, PgError> {
        let bin = bin_dir().ok_or(PgError::NotInstalled)?;
        let fail = |what: &str, e: &dyn std::fmt::Display| PgError::Failed(format!("{what}: {e}"));
        let base = std::env::temp_dir().join(format!(
            "collector-pg-{}-{}",
            std::process::id(),
            crate::store::random_hex().map_err(|e| fail("random", &e))?
        ));
        std::fs::create_dir_all(&base).map_err(|e| fail("mkdir", &e))?;
        let as_postgres = is_root();
        if as_postgres {
            let st = Command::new("chown").args(["-R", "postgres:postgres"]).arg(&base).status();
            if !st.is_ok_and(|s| s.success()) {
                return Err(PgError::Failed("chown of the cluster directory to postgres failed".into()));
            }
        }
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(|e| fail("free port", &e))?
            .port();
        let c = PgCluster { dir: base, bin, as_postgres, port };
        let data = c.dir.join("data");
        c.run("initdb", &["-D", path(&data), "-A", "trust", "-U", "postgres", "--no-sync", "-E", "UTF8"])?;
        let opts = format!(
            "-k {} -p {} -c listen_addresses=127.0.0.1 -c fsync=off -c max_connections=200",
            path(&c.dir),
            c.port
        );
        let log = c.dir.join("server.log");
        c.run("pg_ctl", &["-D", path(&data), "-o", &opts, "-l", path(&log), "-w", "-t", "60", "start"])?;
        Ok(c)
    }

    fn run(&self, tool: &str, args: &[&str]) -> Result<(), PgError> {
        let exe = self.bin.join(tool);
        let mut cmd = if self.as_postgres {
            let mut c = Command::new("runuser");
            c.args(["-u", "postgres", "--"]).arg(&exe);
            c
        } else {
            Command::new(&exe)
        };
        let out = cmd
            .args(args)
            .current_dir(&self.dir)
            .output()
            .map_err(|e| PgError::Failed(format!("{}: {e}", exe.display())))?;
        if !out.status.success() {
            return Err(PgError::Failed(format!(
                "{tool} failed ({}):\n{}{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(())
    }

    /// A URL for database `db` (see [`PgCluster::create_database`]; `postgres` always exists).
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Creates a database (name: ASCII letters, digits and `_`).
    ///
    /// # Errors
    /// [`PgError::Failed`] for a bad name or when `createdb` fails.
    pub fn create_database(&self, name: &str) -> Result<(), PgError> {
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(PgError::Failed(format!("bad database name {name:?}")));
        }
        let port = self.port.to_string();
        self.run("createdb", &["-h", "127.0.0.1", "-p", &port, "-U", "postgres", name])
    }
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap_or("")
}

impl Drop for PgCluster {
    fn drop(&mut self) {
        let data = self.dir.join("data");
        let _ = self.run("pg_ctl", &["-D", path(&data), "-m", "immediate", "-w", "stop"]);
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
