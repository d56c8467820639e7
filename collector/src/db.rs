//! The database: SQLite (one file, the default) or PostgreSQL, through `sqlx`'s `Any` driver, so both run the
//! same queries and the same migrations.
//!
//! The SQL is written once for both: `$N` placeholders (SQLite reads `$N` as numbered parameters too), `TEXT` and
//! `BIGINT` columns only (booleans are `BIGINT` 0/1), `INSERT ... ON CONFLICT` for idempotent writes. Report bytes
//! and debug files are not in the database: they are files under the store root, named by the collector, and
//! the database holds their names.
//!
//! Schema (migrations 1 and 2, [`MIGRATIONS`]):
//!
//! | table | one row per | key |
//! |---|---|---|
//! | `tokens` | ingest token (only its SHA-256 is stored) | `hash` |
//! | `reports` | stored report: project, file name, size, times, damage, group, versions, exception, image ids | `id` (report id) |
//! | `groups` | crash group: project, signature, title, exception, the crashed stack of its newest report | `id` |
//! | `group_stats` | (group, app version): report count, first and last seen | `(group_id, app_version)` |
//! | `debug_files` | object in an uploaded debug file (one per universal slice) | `(debug_id, arch)` |
//!
//! `group_stats` is what the groups page reads (a few rows per group instead of every report). It changes in the
//! same transaction as `reports`: an ingest adds one to its row (`count = count + 1`, atomic with several
//! collector processes on one PostgreSQL); moving a report to another group recomputes both rows from `reports`.

use crate::Error;
use sqlx::any::{AnyPoolOptions, AnyRow};
use sqlx::migrate::{Migration, MigrationSource, MigrationType, Migrator};
use sqlx::{AnyPool, Executor, Row};
use std::borrow::Cow;
use std::path::Path;
use std::time::Duration;

/// The migrations, in order: `(version, description, SQL)`. The same SQL runs on SQLite and PostgreSQL.
pub const MIGRATIONS: &[(i64, &str, &str)] = &[
    (1, "initial schema", include_str!("../migrations/0001_init.sql")),
    (2, "group stats", include_str!("../migrations/0002_group_stats.sql")),
];

#[derive(Debug)]
struct Embedded;

impl MigrationSource<'static> for Embedded {
    fn resolve(
        self,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<Vec<Migration>, Box<dyn std::error::Error + Send + Sync>>>
                + Send
                + 'static,
        >,
    > {
        Box::pin(async {
            Ok(MIGRATIONS
                .iter()
                .map(|(v, d, sql)| {
                    Migration::new(*v, Cow::Borrowed(*d), MigrationType::Simple, Cow::Borrowed(*sql), false)
                })
                .collect())
        })
    }
}

/// Which database server is behind a [`Db`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// SQLite file.
    Sqlite,
    /// PostgreSQL server.
    Postgres,
}

/// A connection pool with the collector's queries.
#[derive(Clone, Debug)]
pub struct Db {
    pool: AnyPool,
    backend: Backend,
}

/// One ingest token as listed (the token itself is never stored).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TokenInfo {
    /// Short id: the first 12 hex digits of the token's SHA-256 (what `token revoke` takes).
    pub id: String,
    /// Project the token uploads into.
    pub project: String,
    /// Free-text label.
    pub label: String,
    /// Creation time, ms since the Unix epoch.
    pub created_ms: i64,
    /// Revocation time, ms since the Unix epoch, when revoked.
    pub revoked_ms: Option<i64>,
}

/// One stored report's row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReportRow {
    /// Report id, uppercase dashed UUID.
    pub id: String,
    /// Project.
    pub project: String,
    /// File name under the store's `reports/` directory (chosen by the collector).
    pub file: String,
    /// Size in bytes.
    pub size: i64,
    /// When the collector received it, ms since the Unix epoch.
    pub received_ms: i64,
    /// Capture time, ms since the Unix epoch.
    pub captured_ms: Option<i64>,
    /// What is damaged, one sentence per line; empty when intact.
    pub problems: String,
    /// Crash group id.
    pub group_id: String,
    /// App version, `short (build)`; empty when unknown.
    pub app_version: String,
    /// OS version; empty when unknown.
    pub os_version: String,
    /// Process name; empty when unknown.
    pub process: String,
    /// Exception type; empty when unknown.
    pub exception: String,
    /// Image ids in the report, space-separated lowercase hex (`" id1 id2 "`, with the outer spaces, so
    /// `LIKE '% id %'` finds one).
    pub image_ids: String,
}

impl ReportRow {
    /// True when the report arrived damaged.
    pub fn damaged(&self) -> bool {
        !self.problems.is_empty()
    }
}

/// A crash group's row.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GroupRow {
    /// Group id (16 hex digits).
    pub id: String,
    /// Project.
    pub project: String,
    /// Signature text.
    pub signature: String,
    /// One-line title.
    pub title: String,
    /// Exception type.
    pub exception: String,
    /// The crashed thread's frames of the newest report analysed into this group, one per line.
    pub stack: String,
}

/// A group with its counts (over the reports matching a [`GroupQuery`]).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct GroupSummary {
    /// Group id.
    pub id: String,
    /// Project.
    pub project: String,
    /// Title.
    pub title: String,
    /// Exception type.
    pub exception: String,
    /// Number of reports.
    pub count: i64,
    /// First report received, ms since the Unix epoch.
    pub first_seen_ms: i64,
    /// Last report received, ms since the Unix epoch.
    pub last_seen_ms: i64,
}

/// How to list groups.
#[derive(Clone, Debug, Default)]
pub struct GroupQuery {
    /// Only reports of this app version (exact `short (build)` text).
    pub app_version: Option<String>,
    /// Only this project.
    pub project: Option<String>,
    /// Sort by last seen (newest first) instead of count (largest first).
    pub by_last_seen: bool,
    /// At most this many groups.
    pub limit: i64,
    /// Skip this many.
    pub offset: i64,
}

/// One stored debug-file object.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct DebugFileRow {
    /// UUID / build ID, lowercase hex.
    pub debug_id: String,
    /// Architecture.
    pub arch: String,
    /// File name under the debug-file root (chosen by the collector).
    pub file: String,
    /// True when it has DWARF.
    pub has_dwarf: bool,
    /// Size of the file in bytes.
    pub size: i64,
    /// Upload time, ms since the Unix epoch.
    pub uploaded_ms: i64,
}

fn report_from(r: &AnyRow) -> Result<ReportRow, sqlx::Error> {
    Ok(ReportRow {
        id: r.try_get("id")?,
        project: r.try_get("project")?,
        file: r.try_get("file")?,
        size: r.try_get("size")?,
        received_ms: r.try_get("received_ms")?,
        captured_ms: r.try_get("captured_ms")?,
        problems: r.try_get("problems")?,
        group_id: r.try_get("group_id")?,
        app_version: r.try_get("app_version")?,
        os_version: r.try_get("os_version")?,
        process: r.try_get("process")?,
        exception: r.try_get("exception")?,
        image_ids: r.try_get("image_ids")?,
    })
}

const REPORT_COLUMNS: &str = "id, project, file, size, received_ms, captured_ms, problems, group_id, app_version, \
                              os_version, process, exception, image_ids";

impl Db {
    /// Connects to `url` (`sqlite://PATH` or `postgres://...`) and runs the migrations. A SQLite file is created
    /// mode 0600 (its directory 0700) when missing, and opened in WAL mode with a 5 s busy timeout.
    ///
    /// # Errors
    /// [`Error::Config`] for another URL scheme, [`Error::Io`] creating the SQLite file, [`Error::Db`] connecting,
    /// [`Error::Migrate`] when the migrations fail.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Db, Error> {
        sqlx::any::install_default_drivers();
        let backend = if let Some(path) = url.strip_prefix("sqlite://") {
            let path = path.split('?').next().unwrap_or(path);
            if path != ":memory:" {
                create_private_file(Path::new(path))?;
            }
            Backend::Sqlite
        } else if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            Backend::Postgres
        } else {
            return Err(Error::Config(format!(
                "unsupported database URL {url:?}: use sqlite://PATH or postgres://..."
            )));
        };
        let opts = AnyPoolOptions::new()
            .max_connections(max_connections.max(1))
            .acquire_timeout(Duration::from_secs(30))
            .after_connect(move |conn, _| {
                Box::pin(async move {
                    if backend == Backend::Sqlite {
                        conn.execute("PRAGMA journal_mode = WAL").await?;
                        conn.execute("PRAGMA busy_timeout = 5000").await?;
                        conn.execute("PRAGMA synchronous = NORMAL").await?;
                    }
                    Ok(())
                })
            });
        let pool = opts.connect(url).await.map_err(Error::Db)?;
        let migrator = Migrator::new(Embedded).await.map_err(Error::Migrate)?;
        migrator.run(&pool).await.map_err(Error::Migrate)?;
        Ok(Db { pool, backend })
    }

    /// The backend.
    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// Closes the pool.
    pub async fn close(&self) {
        self.pool.close().await;
    }

    // ---------------------------------------------------------------------------------------------------------
    // Tokens.

    /// Stores a token's hash for `project`.
    ///
    /// # Errors
    /// Database errors.
    pub async fn insert_token(&self, hash: &str, project: &str, label: &str, now_ms: i64) -> Result<(), Error> {
        sqlx::query("INSERT INTO tokens (hash, project, label, created_ms) VALUES ($1, $2, $3, $4)")
            .bind(hash)
            .bind(project)
            .bind(label)
            .bind(now_ms)
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Revokes every live token whose short id (hash prefix) is `id`. Returns how many were revoked.
    ///
    /// # Errors
    /// Database errors.
    pub async fn revoke_token(&self, id: &str, now_ms: i64) -> Result<u64, Error> {
        let id = id.to_ascii_lowercase();
        if id.len() < 8 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Ok(0);
        }
        let r = sqlx::query("UPDATE tokens SET revoked_ms = $1 WHERE hash LIKE $2 AND revoked_ms IS NULL")
            .bind(now_ms)
            .bind(format!("{id}%"))
            .execute(&self.pool)
            .await?;
        Ok(r.rows_affected())
    }

    /// Every token, oldest first.
    ///
    /// # Errors
    /// Database errors.
    pub async fn tokens(&self) -> Result<Vec<TokenInfo>, Error> {
        let rows =
            sqlx::query("SELECT hash, project, label, created_ms, revoked_ms FROM tokens ORDER BY created_ms, hash")
                .fetch_all(&self.pool)
                .await?;
        let mut v = Vec::new();
        for r in rows {
            let hash: String = r.try_get("hash")?;
            v.push(TokenInfo {
                id: hash.chars().take(12).collect(),
                project: r.try_get("project")?,
                label: r.try_get("label")?,
                created_ms: r.try_get("created_ms")?,
                revoked_ms: r.try_get("revoked_ms")?,
            });
        }
        Ok(v)
    }

    /// The project of a live token, by the token's SHA-256 (hex).
    ///
    /// # Errors
    /// Database errors.
    pub async fn token_project(&self, hash: &str) -> Result<Option<String>, Error> {
        let r = sqlx::query("SELECT project FROM tokens WHERE hash = $1 AND revoked_ms IS NULL")
            .bind(hash)
            .fetch_optional(&self.pool)
            .await?;
        Ok(match r {
            Some(r) => Some(r.try_get("project")?),
            None => None,
        })
    }

    // ---------------------------------------------------------------------------------------------------------
    // Reports and groups.

    /// True when a report with this id is stored.
    ///
    /// # Errors
    /// Database errors.
    pub async fn report_exists(&self, id: &str) -> Result<bool, Error> {
        Ok(sqlx::query("SELECT 1 AS one FROM reports WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?
            .is_some())
    }

    /// Stores a report row unless its id is present, and counts it in `group_stats`, in one transaction.
    /// `Ok(true)` when this call stored it.
    ///
    /// # Errors
    /// Database errors.
    pub async fn insert_report(&self, r: &ReportRow) -> Result<bool, Error> {
        let mut tx = self.pool.begin().await?;
        let stored = insert_one(&mut tx, r).await?;
        tx.commit().await?;
        Ok(stored)
    }

    /// Stores many report rows in one transaction (ids already present are skipped); returns how many were
    /// stored. For imports and the load benchmark.
    ///
    /// # Errors
    /// Database errors (nothing is stored then).
    pub async fn insert_reports(&self, rows: &[ReportRow]) -> Result<u64, Error> {
        let mut tx = self.pool.begin().await?;
        let mut n = 0;
        for r in rows {
            n += u64::from(insert_one(&mut tx, r).await?);
        }
        tx.commit().await?;
        Ok(n)
    }

    /// Creates a group, or refreshes its title and stack (the signature of an id never changes).
    ///
    /// # Errors
    /// Database errors.
    pub async fn upsert_group(&self, g: &GroupRow) -> Result<(), Error> {
        sqlx::query(
            "INSERT INTO groups (id, project, signature, title, exception, stack) VALUES ($1, $2, $3, $4, $5, $6) \
             ON CONFLICT (id) DO UPDATE SET title = excluded.title, stack = excluded.stack",
        )
        .bind(&g.id)
        .bind(&g.project)
        .bind(&g.signature)
        .bind(&g.title)
        .bind(&g.exception)
        .bind(&g.stack)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// Moves a report to another group, recomputing the `group_stats` rows of both groups for its app version
    /// from `reports`, in one transaction.
    ///
    /// # Errors
    /// Database errors.
    pub async fn move_report(&self, r: &ReportRow, group_id: &str) -> Result<(), Error> {
        let mut tx = self.pool.begin().await?;
        sqlx::query("UPDATE reports SET group_id = $1 WHERE id = $2")
            .bind(group_id)
            .bind(&r.id)
            .execute(&mut *tx)
            .await?;
        for g in [r.group_id.as_str(), group_id] {
            sqlx::query("DELETE FROM group_stats WHERE group_id = $1 AND app_version = $2")
                .bind(g)
                .bind(&r.app_version)
                .execute(&mut *tx)
                .await?;
            sqlx::query(
                "INSERT INTO group_stats (group_id, app_version, project, count, first_seen_ms, last_seen_ms) \
                 SELECT group_id, app_version, MIN(project), COUNT(*), MIN(received_ms), MAX(received_ms) \
                 FROM reports WHERE group_id = $1 AND app_version = $2 GROUP BY group_id, app_version",
            )
            .bind(g)
            .bind(&r.app_version)
            .execute(&mut *tx)
            .await?;
        }
        tx.commit().await?;
        Ok(())
    }

    /// One report.
    ///
    /// # Errors
    /// Database errors.
    pub async fn report(&self, id: &str) -> Result<Option<ReportRow>, Error> {
        let q = format!("SELECT {REPORT_COLUMNS} FROM reports WHERE id = $1");
        match sqlx::query(&q).bind(id).fetch_optional(&self.pool).await? {
            Some(r) => Ok(Some(report_from(&r)?)),
            None => Ok(None),
        }
    }

    /// Every stored report id, oldest capture first (receipt time when the capture time is lost), then by id.
    ///
    /// # Errors
    /// Database errors.
    pub async fn report_ids(&self) -> Result<Vec<String>, Error> {
        let rows = sqlx::query("SELECT id FROM reports ORDER BY COALESCE(captured_ms, received_ms), id")
            .fetch_all(&self.pool)
            .await?;
        rows.iter().map(|r| r.try_get("id").map_err(Error::Db)).collect()
    }

    /// Number of stored reports.
    ///
    /// # Errors
    /// Database errors.
    pub async fn report_count(&self) -> Result<i64, Error> {
        Ok(sqlx::query("SELECT COUNT(*) AS n FROM reports").fetch_one(&self.pool).await?.try_get("n")?)
    }

    /// The newest reports of a group, newest first.
    ///
    /// # Errors
    /// Database errors.
    pub async fn group_reports(&self, group_id: &str, limit: i64) -> Result<Vec<ReportRow>, Error> {
        let q = format!(
            "SELECT {REPORT_COLUMNS} FROM reports WHERE group_id = $1 ORDER BY received_ms DESC, id DESC LIMIT $2"
        );
        let rows = sqlx::query(&q).bind(group_id).bind(limit).fetch_all(&self.pool).await?;
        rows.iter().map(|r| report_from(r).map_err(Error::Db)).collect()
    }

    /// Reports that reference an image id.
    ///
    /// # Errors
    /// Database errors.
    pub async fn reports_with_image(&self, debug_id: &str) -> Result<Vec<ReportRow>, Error> {
        let q = format!("SELECT {REPORT_COLUMNS} FROM reports WHERE image_ids LIKE $1 ORDER BY received_ms");
        let rows = sqlx::query(&q).bind(format!("% {debug_id} %")).fetch_all(&self.pool).await?;
        rows.iter().map(|r| report_from(r).map_err(Error::Db)).collect()
    }

    /// Groups with their counts over the matching reports. Groups without matching reports are not listed.
    ///
    /// # Errors
    /// Database errors.
    pub async fn groups(&self, q: &GroupQuery) -> Result<Vec<GroupSummary>, Error> {
        let order = if q.by_last_seen { "last_seen DESC, g.id" } else { "n DESC, last_seen DESC, g.id" };
        let sql = format!(
            "SELECT g.id AS id, g.project AS project, g.title AS title, g.exception AS exception, \
                    CAST(SUM(s.count) AS BIGINT) AS n, MIN(s.first_seen_ms) AS first_seen, \
                    MAX(s.last_seen_ms) AS last_seen \
             FROM group_stats s JOIN groups g ON g.id = s.group_id \
             WHERE ($1 = '' OR s.app_version = $1) AND ($2 = '' OR s.project = $2) AND s.count > 0 \
             GROUP BY g.id, g.project, g.title, g.exception ORDER BY {order} LIMIT $3 OFFSET $4"
        );
        let rows = sqlx::query(&sql)
            .bind(q.app_version.clone().unwrap_or_default())
            .bind(q.project.clone().unwrap_or_default())
            .bind(q.limit)
            .bind(q.offset)
            .fetch_all(&self.pool)
            .await?;
        let mut v = Vec::new();
        for r in rows {
            v.push(GroupSummary {
                id: r.try_get("id")?,
                project: r.try_get("project")?,
                title: r.try_get("title")?,
                exception: r.try_get("exception")?,
                count: r.try_get("n")?,
                first_seen_ms: r.try_get("first_seen")?,
                last_seen_ms: r.try_get("last_seen")?,
            });
        }
        Ok(v)
    }

    /// A group's row.
    ///
    /// # Errors
    /// Database errors.
    pub async fn group(&self, id: &str) -> Result<Option<GroupRow>, Error> {
        let r = sqlx::query("SELECT id, project, signature, title, exception, stack FROM groups WHERE id = $1")
            .bind(id)
            .fetch_optional(&self.pool)
            .await?;
        let Some(r) = r else { return Ok(None) };
        Ok(Some(GroupRow {
            id: r.try_get("id")?,
            project: r.try_get("project")?,
            signature: r.try_get("signature")?,
            title: r.try_get("title")?,
            exception: r.try_get("exception")?,
            stack: r.try_get("stack")?,
        }))
    }

    /// A group's count, first and last seen over all its reports; `None` when it has none.
    ///
    /// # Errors
    /// Database errors.
    pub async fn group_counts(&self, id: &str) -> Result<Option<(i64, i64, i64)>, Error> {
        let r = sqlx::query(
            "SELECT CAST(COALESCE(SUM(count), 0) AS BIGINT) AS n, MIN(first_seen_ms) AS f, MAX(last_seen_ms) AS l \
             FROM group_stats WHERE group_id = $1",
        )
        .bind(id)
        .fetch_one(&self.pool)
        .await?;
        let n: i64 = r.try_get("n")?;
        if n == 0 {
            return Ok(None);
        }
        Ok(Some((n, r.try_get("f")?, r.try_get("l")?)))
    }

    /// `(version, count)` of a group's reports by app version (`column == "app_version"`) or OS version
    /// (`"os_version"`), largest first.
    ///
    /// # Errors
    /// Database errors; [`Error::Config`] for another column name.
    pub async fn group_versions(&self, id: &str, column: &str) -> Result<Vec<(String, i64)>, Error> {
        if column != "app_version" && column != "os_version" {
            return Err(Error::Config(format!("not a version column: {column}")));
        }
        let q = if column == "app_version" {
            "SELECT app_version AS v, count AS n FROM group_stats WHERE group_id = $1 AND count > 0 \
             ORDER BY n DESC, v"
                .to_owned()
        } else {
            format!(
                "SELECT {column} AS v, COUNT(*) AS n FROM reports WHERE group_id = $1 GROUP BY {column} \
                 ORDER BY n DESC, v"
            )
        };
        let rows = sqlx::query(&q).bind(id).fetch_all(&self.pool).await?;
        let mut v = Vec::new();
        for r in rows {
            v.push((r.try_get("v")?, r.try_get("n")?));
        }
        Ok(v)
    }

    /// Every app version with reports, newest report first.
    ///
    /// # Errors
    /// Database errors.
    pub async fn app_versions(&self) -> Result<Vec<String>, Error> {
        let rows = sqlx::query(
            "SELECT app_version AS v, MAX(last_seen_ms) AS l FROM group_stats WHERE count > 0 GROUP BY app_version \
             ORDER BY l DESC, v",
        )
        .fetch_all(&self.pool)
        .await?;
        rows.iter().map(|r| r.try_get("v").map_err(Error::Db)).collect()
    }

    // ---------------------------------------------------------------------------------------------------------
    // Debug files.

    /// Indexes one debug-file object (a newer upload of the same id and architecture replaces the older).
    ///
    /// # Errors
    /// Database errors.
    pub async fn upsert_debug_file(&self, d: &DebugFileRow) -> Result<(), Error> {
        sqlx::query(
            "INSERT INTO debug_files (debug_id, arch, file, has_dwarf, size, uploaded_ms) \
             VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (debug_id, arch) DO UPDATE SET file = excluded.file, \
             has_dwarf = excluded.has_dwarf, size = excluded.size, uploaded_ms = excluded.uploaded_ms",
        )
        .bind(&d.debug_id)
        .bind(&d.arch)
        .bind(&d.file)
        .bind(i64::from(d.has_dwarf))
        .bind(d.size)
        .bind(d.uploaded_ms)
        .execute(&self.pool)
        .await?;
        Ok(())
    }

    /// The debug-file objects indexed under any of `ids`.
    ///
    /// # Errors
    /// Database errors.
    pub async fn debug_files_for(&self, ids: &[String]) -> Result<Vec<DebugFileRow>, Error> {
        let mut out = Vec::new();
        for id in ids {
            let rows = sqlx::query(
                "SELECT debug_id, arch, file, has_dwarf, size, uploaded_ms FROM debug_files WHERE debug_id = $1",
            )
            .bind(id)
            .fetch_all(&self.pool)
            .await?;
            for r in rows {
                out.push(DebugFileRow {
                    debug_id: r.try_get("debug_id")?,
                    arch: r.try_get("arch")?,
                    file: r.try_get("file")?,
                    has_dwarf: r.try_get::<i64, _>("has_dwarf")? != 0,
                    size: r.try_get("size")?,
                    uploaded_ms: r.try_get("uploaded_ms")?,
                });
            }
        }
        Ok(out)
    }
}

/// Inserts one report row (unless its id is present) and counts it in `group_stats`. `Ok(true)` when stored.
async fn insert_one(tx: &mut sqlx::Transaction<'_, sqlx::Any>, r: &ReportRow) -> Result<bool, Error> {
    let q = format!(
        "INSERT INTO reports ({REPORT_COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13) \
         ON CONFLICT (id) DO NOTHING"
    );
    let res = sqlx::query(&q)
        .bind(&r.id)
        .bind(&r.project)
        .bind(&r.file)
        .bind(r.size)
        .bind(r.received_ms)
        .bind(r.captured_ms)
        .bind(&r.problems)
        .bind(&r.group_id)
        .bind(&r.app_version)
        .bind(&r.os_version)
        .bind(&r.process)
        .bind(&r.exception)
        .bind(&r.image_ids)
        .execute(&mut **tx)
        .await?;
    if res.rows_affected() != 1 {
        return Ok(false);
    }
    sqlx::query(
        "INSERT INTO group_stats (group_id, app_version, project, count, first_seen_ms, last_seen_ms) \
         VALUES ($1, $2, $3, 1, $4, $4) ON CONFLICT (group_id, app_version) DO UPDATE SET \
         count = group_stats.count + 1, \
         first_seen_ms = CASE WHEN excluded.first_seen_ms < group_stats.first_seen_ms \
                         THEN excluded.first_seen_ms ELSE group_stats.first_seen_ms END, \
         last_seen_ms = CASE WHEN excluded.last_seen_ms > group_stats.last_seen_ms \
                        THEN excluded.last_seen_ms ELSE group_stats.last_seen_ms END",
    )
    .bind(&r.group_id)
    .bind(&r.app_version)
    .bind(&r.project)
    .bind(r.received_ms)
    .execute(&mut **tx)
    .await?;
    Ok(true)
}

/// Creates `path` mode 0600 (and its directory 0700) unless it exists.
fn create_private_file(path: &Path) -> std::io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        crate::store::create_private_dir(dir)?;
    }
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(false);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut o, 0o600);
    o.open(path).map(drop)
}
