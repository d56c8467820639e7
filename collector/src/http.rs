//! Routes and handlers. Every handler answers bad input with a 4xx and never panics; CPU-heavy work (decoding,
//! symbolication, rendering, unzipping) runs on tokio's blocking pool.
// Helpers return `Result<_, Response>` so a handler can return the error answer as it is; a `Response` is what
// every handler returns anyway, so boxing it would only add an allocation.
#![allow(clippy::result_large_err)]

use crate::analysis::{self, Analysis, Analyzer, RenderFormat};
use crate::auth::{self, RateLimiter};
use crate::db::{DebugFileRow, GroupQuery, GroupRow, ReportRow};
use crate::store::FileStore;
use crate::{pages, Config, Db, Error};
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State as AxState};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use report_format::transport::{CONTENT_TYPE, REPORT_ID_HEADER};
use serde::{Deserialize, Serialize};
use std::io::Read;
use std::path::PathBuf;
use std::sync::Arc;

/// Shared state of one collector process.
pub(crate) struct State {
    pub(crate) config: Config,
    pub(crate) db: Db,
    pub(crate) files: FileStore,
    pub(crate) analyzer: Arc<dyn Analyzer>,
    pub(crate) limiter: RateLimiter,
}

type St = Arc<State>;

async fn log_request(req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let t = std::time::Instant::now();
    let res = next.run(req).await;
    eprintln!("collector: {method} {path} -> {} ({:.1} ms)", res.status().as_u16(), t.elapsed().as_secs_f64() * 1e3);
    res
}

pub(crate) fn router(state: St) -> Router {
    let log = state.config.log_requests;
    let r = Router::new()
        .route("/", get(pages_groups).post(ingest))
        .route("/reports", get(report_ids).post(ingest))
        .route("/api/v1/reports", post(ingest))
        .route("/api/v1/debug-files", post(upload_debug_file))
        .route("/api/v1/groups", get(api_groups))
        .route("/api/v1/groups/{id}", get(api_group))
        .route("/api/v1/reports/{id}", get(api_report))
        .route("/groups", get(pages_groups))
        .route("/groups/{id}", get(page_group))
        .route("/reports/{id}", get(page_report))
        .route("/reports/{id}/download", get(download))
        .fallback(|| async { text(StatusCode::NOT_FOUND, "not found\n") })
        .with_state(state);
    if log {
        r.layer(axum::middleware::from_fn(log_request))
    } else {
        r
    }
}

fn text(status: StatusCode, body: impl Into<String>) -> Response {
    (status, [(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body.into()).into_response()
}

fn json<T: Serialize>(status: StatusCode, v: &T) -> Response {
    match serde_json::to_string_pretty(v) {
        Ok(s) => (status, [(header::CONTENT_TYPE, "application/json")], s + "\n").into_response(),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, format!("cannot serialise: {e}\n")),
    }
}

fn html(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/html; charset=utf-8")], body).into_response()
}

fn internal(e: impl std::fmt::Display) -> Response {
    text(StatusCode::INTERNAL_SERVER_ERROR, format!("internal error: {e}\n"))
}

impl IntoResponse for Error {
    fn into_response(self) -> Response {
        internal(self)
    }
}

/// Checks the bearer token and the rate limit; returns the project and the token hash.
async fn authorize(s: &State, headers: &HeaderMap) -> Result<(String, String), Response> {
    let unauthorized = |why: &str| {
        let mut r = text(StatusCode::UNAUTHORIZED, format!("{why}\n"));
        r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        r
    };
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Err(unauthorized("an ingest token is needed: Authorization: Bearer <token>"));
    };
    let Some(token) = auth::bearer(value.as_bytes()) else {
        return Err(unauthorized("Authorization must be: Bearer <token>"));
    };
    let hash = auth::token_hash(token);
    let project = match s.db.token_project(&hash).await {
        Ok(Some(p)) => p,
        Ok(None) => return Err(unauthorized("unknown or revoked ingest token")),
        Err(e) => return Err(internal(e)),
    };
    if let Err(wait) = s.limiter.check(&hash) {
        let secs = wait.as_secs().max(1);
        let mut r = text(StatusCode::TOO_MANY_REQUESTS, format!("rate limit: retry in {secs} s\n"));
        r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        return Err(r);
    }
    Ok((project, hash))
}

/// Reads a body of at most `limit` bytes; 413 beyond (also when `Content-Length` says so up front).
async fn read_body(headers: &HeaderMap, body: Body, limit: u64) -> Result<Bytes, Response> {
    let too_large = || text(StatusCode::PAYLOAD_TOO_LARGE, format!("body larger than {limit} bytes\n"));
    let declared =
        headers.get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()).and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let limit = usize::try_from(limit).unwrap_or(usize::MAX);
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let mut src: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(x) = src {
            if x.to_string().contains("length limit exceeded") {
                return too_large();
            }
            src = x.source();
        }
        text(StatusCode::BAD_REQUEST, format!("could not read the body: {e}\n"))
    })
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T, Response> {
    tokio::task::spawn_blocking(f).await.map_err(internal)
}

/// The paths of the debug files indexed for any of `ids`.
async fn debug_paths(s: &State, ids: &[String]) -> Result<Vec<PathBuf>, Error> {
    if ids.is_empty() {
        return Ok(Vec::new());
    }
    let rows = s.db.debug_files_for(ids).await?;
    let mut v: Vec<PathBuf> = rows.iter().filter_map(|r| s.files.debug_path(&r.file)).collect();
    v.sort();
    v.dedup();
    Ok(v)
}

/// Analyses report bytes, symbolicating with whatever debug files match the report's images.
async fn analyze_with_symbols(s: &St, bytes: Bytes) -> Result<Result<Analysis, String>, Response> {
    let a = s.analyzer.clone();
    let b = bytes.clone();
    let first = blocking(move || a.analyze(&b, &[])).await?;
    let Ok(first) = first else { return Ok(first) };
    let paths = debug_paths(s, &first.image_ids).await.map_err(internal)?;
    if paths.is_empty() {
        return Ok(Ok(first));
    }
    let a = s.analyzer.clone();
    blocking(move || a.analyze(&bytes, &paths)).await
}

fn stack_text(a: &Analysis) -> String {
    a.crashed_frames
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let sym = f.symbol_text.clone().unwrap_or_else(|| format!("+{:#x}", f.offset));
            format!("{i:<3} {:<30} {sym}{}\n", f.image, if f.in_app { "" } else { "  (system)" })
        })
        .collect()
}

fn group_row(project: &str, a: &Analysis) -> GroupRow {
    let sig = analysis::signature(a);
    GroupRow {
        id: analysis::group_id(project, &sig.text),
        project: project.to_owned(),
        signature: sig.text,
        title: sig.title,
        exception: a.exception.clone().unwrap_or_default(),
        stack: stack_text(a),
    }
}

fn image_ids_field(a: &Analysis) -> String {
    let mut s = String::from(" ");
    for id in &a.image_ids {
        if id.bytes().all(|b| b.is_ascii_hexdigit()) && !id.is_empty() {
            s.push_str(&id.to_ascii_lowercase());
            s.push(' ');
        }
    }
    s
}

async fn ingest(AxState(s): AxState<St>, headers: HeaderMap, body: Body) -> Response {
    let (project, _) = match authorize(&s, &headers).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let ctype = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if ctype.split(';').next().map(str::trim) != Some(CONTENT_TYPE) {
        return text(StatusCode::UNSUPPORTED_MEDIA_TYPE, format!("expected Content-Type: {CONTENT_TYPE}\n"));
    }
    let bytes = match read_body(&headers, body, s.config.max_body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let claimed = match headers.get(REPORT_ID_HEADER) {
        None => None,
        Some(v) => match v.to_str().ok().and_then(analysis::normalize_report_id) {
            Some(id) => Some(id),
            None => return text(StatusCode::BAD_REQUEST, format!("{REPORT_ID_HEADER} is not a UUID\n")),
        },
    };
    let a = match analyze_with_symbols(&s, bytes.clone()).await {
        Ok(Ok(a)) => a,
        Ok(Err(why)) => return text(StatusCode::BAD_REQUEST, format!("not a crash report: {why}\n")),
        Err(r) => return r,
    };
    let id = match (&a.report_id, &claimed) {
        (Some(id), Some(c)) if !id.eq_ignore_ascii_case(c) => {
            return text(StatusCode::BAD_REQUEST, format!("{REPORT_ID_HEADER} does not match the report's id {id}\n"))
        }
        (Some(id), _) => id.to_ascii_uppercase(),
        // A report whose META section is lost: the header's id (checked to be a UUID) keeps resends idempotent.
        (None, Some(c)) => c.clone(),
        (None, None) => {
            return text(StatusCode::BAD_REQUEST, format!("the report has no id and no {REPORT_ID_HEADER} header\n"))
        }
    };
    match s.db.report_exists(&id).await {
        Ok(true) => return text(StatusCode::OK, format!("already stored {id}\n")),
        Ok(false) => {}
        Err(e) => return internal(e),
    }
    let files = s.files.clone();
    let b = bytes.clone();
    let name = match blocking(move || files.write_report(&b)).await {
        Ok(Ok(n)) => n,
        Ok(Err(e)) => return internal(e),
        Err(r) => return r,
    };
    let g = group_row(&project, &a);
    let row = ReportRow {
        id: id.clone(),
        project: project.clone(),
        file: name.clone(),
        size: bytes.len() as i64,
        received_ms: crate::now_ms(),
        captured_ms: a.captured_ms.map(|t| t as i64),
        problems: a.problems.join("\n"),
        group_id: g.id.clone(),
        app_version: a.app_version.clone().unwrap_or_default(),
        os_version: a.os_version.clone().unwrap_or_default(),
        process: a.process.clone().unwrap_or_default(),
        exception: a.exception.clone().unwrap_or_default(),
        image_ids: image_ids_field(&a),
    };
    let stored = async {
        s.db.upsert_group(&g).await?;
        s.db.insert_report(&row).await
    }
    .await;
    match stored {
        Ok(true) if row.damaged() => text(StatusCode::CREATED, format!("stored {id} (damaged: flagged)\n")),
        Ok(true) => text(StatusCode::CREATED, format!("stored {id}\n")),
        Ok(false) => {
            if let Some(p) = s.files.report_path(&name) {
                let _ = std::fs::remove_file(p);
            }
            text(StatusCode::OK, format!("already stored {id}\n"))
        }
        Err(e) => {
            if let Some(p) = s.files.report_path(&name) {
                let _ = std::fs::remove_file(p);
            }
            internal(e)
        }
    }
}

/// Debug-file upload answer.
#[derive(Serialize)]
struct DebugUploadAnswer {
    /// Objects indexed.
    files: Vec<analysis::DebugId>,
    /// Reports whose group was recomputed.
    reanalysed: usize,
    /// Reports that moved to another group.
    regrouped: usize,
}

/// Mach-O (thin, fat, 32/64, both byte orders) or ELF magic.
fn object_magic(b: &[u8]) -> bool {
    matches!(
        b.get(..4),
        Some([0x7f, b'E', b'L', b'F'])
            | Some([0xfe, 0xed, 0xfa, 0xce | 0xcf])
            | Some([0xce | 0xcf, 0xfa, 0xed, 0xfe])
            | Some([0xca, 0xfe, 0xba, 0xbe | 0xbf])
    )
}

/// The objects inside an upload: the body itself, or the Mach-O / ELF members of a zip (entry names are never used).
fn objects_of(bytes: &[u8], limit: u64) -> Result<Vec<Vec<u8>>, String> {
    if object_magic(bytes) {
        return Ok(vec![bytes.to_vec()]);
    }
    if !bytes.starts_with(b"PK\x03\x04") {
        return Err("not a Mach-O, an ELF or a zip archive".into());
    }
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).map_err(|e| format!("bad zip archive: {e}"))?;
    let mut out = Vec::new();
    let mut total = 0u64;
    for i in 0..zip.len().min(100_000) {
        let mut f = zip.by_index(i).map_err(|e| format!("bad zip entry {i}: {e}"))?;
        if !f.is_file() {
            continue;
        }
        let mut head = [0u8; 4];
        let mut v = Vec::new();
        let n = f.read(&mut head).map_err(|e| format!("bad zip entry {i}: {e}"))?;
        if n < 4 || !object_magic(&head) {
            continue;
        }
        v.extend_from_slice(&head);
        // Guards against zip bombs: the unpacked objects together are at most `limit` bytes.
        let room = limit.saturating_sub(total);
        f.by_ref().take(room + 1).read_to_end(&mut v).map_err(|e| format!("bad zip entry {i}: {e}"))?;
        total += v.len() as u64;
        if total > limit {
            return Err(format!("the unpacked archive is larger than {limit} bytes"));
        }
        out.push(v);
    }
    if out.is_empty() {
        return Err("the zip archive holds no Mach-O or ELF file".into());
    }
    Ok(out)
}

async fn upload_debug_file(AxState(s): AxState<St>, headers: HeaderMap, body: Body) -> Response {
    if let Err(r) = authorize(&s, &headers).await {
        return r;
    }
    let bytes = match read_body(&headers, body, s.config.max_debug_file).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let limit = s.config.max_debug_file;
    let files = s.files.clone();
    let analyzer = s.analyzer.clone();
    // Unpack, store each object under a name of ours, identify it; drop what is not a usable object.
    let stored = blocking(move || -> Result<Vec<(String, u64, Vec<analysis::DebugId>)>, String> {
        let objects = objects_of(&bytes, limit)?;
        let mut out = Vec::new();
        for o in objects {
            let name = files.write_debug(&o).map_err(|e| format!("cannot store: {e}"))?;
            let Some(path) = files.debug_path(&name) else { continue };
            let ids = analyzer.identify(&path);
            if ids.is_empty() {
                let _ = std::fs::remove_file(&path);
                continue;
            }
            out.push((name, o.len() as u64, ids));
        }
        if out.is_empty() {
            return Err("no Mach-O or ELF object with a UUID or build ID in the upload".into());
        }
        Ok(out)
    })
    .await;
    let stored = match stored {
        Ok(Ok(v)) => v,
        Ok(Err(why)) => return text(StatusCode::BAD_REQUEST, format!("{why}\n")),
        Err(r) => return r,
    };
    let now = crate::now_ms();
    let mut ids = Vec::new();
    for (name, size, objs) in &stored {
        for d in objs {
            let row = DebugFileRow {
                debug_id: d.id.clone(),
                arch: d.arch.clone(),
                file: name.clone(),
                has_dwarf: d.has_dwarf,
                size: *size as i64,
                uploaded_ms: now,
            };
            if let Err(e) = s.db.upsert_debug_file(&row).await {
                return internal(e);
            }
            ids.push(d.clone());
        }
    }
    let (reanalysed, regrouped) = match regroup(&s, &ids.iter().map(|d| d.id.clone()).collect::<Vec<_>>()).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    json(StatusCode::CREATED, &DebugUploadAnswer { files: ids, reanalysed, regrouped })
}

/// Re-analyses the reports that reference any of `ids` and moves them to their new groups.
/// Returns `(reanalysed, regrouped)`.
async fn regroup(s: &St, ids: &[String]) -> Result<(usize, usize), Response> {
    let mut seen = std::collections::HashSet::new();
    let (mut reanalysed, mut regrouped) = (0, 0);
    for id in ids {
        let rows = s.db.reports_with_image(id).await.map_err(internal)?;
        for r in rows {
            if !seen.insert(r.id.clone()) {
                continue;
            }
            let Some(path) = s.files.report_path(&r.file) else { continue };
            let Ok(bytes) = tokio::fs::read(&path).await else { continue };
            let Ok(Ok(a)) = analyze_with_symbols(s, Bytes::from(bytes)).await else { continue };
            reanalysed += 1;
            let g = group_row(&r.project, &a);
            s.db.upsert_group(&g).await.map_err(internal)?;
            if g.id != r.group_id {
                s.db.move_report(&r, &g.id).await.map_err(internal)?;
                regrouped += 1;
            }
        }
    }
    Ok((reanalysed, regrouped))
}

async fn report_ids(AxState(s): AxState<St>) -> Response {
    match s.db.report_ids().await {
        Ok(v) => text(StatusCode::OK, v.iter().map(|id| format!("{id}\n")).collect::<String>()),
        Err(e) => internal(e),
    }
}

/// Query of the group lists.
#[derive(Deserialize, Default)]
pub(crate) struct GroupsParams {
    pub(crate) sort: Option<String>,
    pub(crate) version: Option<String>,
    pub(crate) project: Option<String>,
    pub(crate) limit: Option<u32>,
    pub(crate) offset: Option<u32>,
}

fn group_query(p: &GroupsParams) -> Result<GroupQuery, Response> {
    let by_last_seen = match p.sort.as_deref() {
        None | Some("") | Some("count") => false,
        Some("last_seen") => true,
        Some(other) => {
            return Err(text(StatusCode::BAD_REQUEST, format!("sort is count or last_seen, not {other:?}\n")))
        }
    };
    Ok(GroupQuery {
        app_version: p.version.clone().filter(|v| !v.is_empty()),
        project: p.project.clone().filter(|v| !v.is_empty()),
        by_last_seen,
        limit: i64::from(p.limit.unwrap_or(100).clamp(1, 1000)),
        offset: i64::from(p.offset.unwrap_or(0)),
    })
}

async fn api_groups(AxState(s): AxState<St>, Query(p): Query<GroupsParams>) -> Response {
    let q = match group_query(&p) {
        Ok(q) => q,
        Err(r) => return r,
    };
    match s.db.groups(&q).await {
        Ok(v) => json(StatusCode::OK, &v),
        Err(e) => internal(e),
    }
}

/// Everything shown about one group.
#[derive(Serialize)]
pub(crate) struct GroupDetail {
    pub(crate) id: String,
    pub(crate) project: String,
    pub(crate) title: String,
    pub(crate) exception: String,
    pub(crate) signature: String,
    pub(crate) stack: String,
    pub(crate) count: i64,
    pub(crate) first_seen_ms: i64,
    pub(crate) last_seen_ms: i64,
    pub(crate) app_versions: Vec<(String, i64)>,
    pub(crate) os_versions: Vec<(String, i64)>,
    pub(crate) reports: Vec<ReportSummary>,
}

/// One report in a list.
#[derive(Serialize)]
pub(crate) struct ReportSummary {
    pub(crate) id: String,
    pub(crate) received_ms: i64,
    pub(crate) captured_ms: Option<i64>,
    pub(crate) app_version: String,
    pub(crate) os_version: String,
    pub(crate) process: String,
    pub(crate) damaged: bool,
}

impl From<&ReportRow> for ReportSummary {
    fn from(r: &ReportRow) -> Self {
        ReportSummary {
            id: r.id.clone(),
            received_ms: r.received_ms,
            captured_ms: r.captured_ms,
            app_version: r.app_version.clone(),
            os_version: r.os_version.clone(),
            process: r.process.clone(),
            damaged: r.damaged(),
        }
    }
}

fn is_group_id(id: &str) -> bool {
    id.len() == 16 && id.bytes().all(|b| b.is_ascii_hexdigit())
}

async fn group_detail(s: &State, id: &str) -> Result<Option<GroupDetail>, Error> {
    if !is_group_id(id) {
        return Ok(None);
    }
    let Some(g) = s.db.group(id).await? else { return Ok(None) };
    let Some((count, first, last)) = s.db.group_counts(id).await? else { return Ok(None) };
    Ok(Some(GroupDetail {
        id: g.id.clone(),
        project: g.project,
        title: g.title,
        exception: g.exception,
        signature: g.signature,
        stack: g.stack,
        count,
        first_seen_ms: first,
        last_seen_ms: last,
        app_versions: s.db.group_versions(id, "app_version").await?,
        os_versions: s.db.group_versions(id, "os_version").await?,
        reports: s.db.group_reports(id, 100).await?.iter().map(ReportSummary::from).collect(),
    }))
}

async fn api_group(AxState(s): AxState<St>, Path(id): Path<String>) -> Response {
    match group_detail(&s, &id).await {
        Ok(Some(g)) => json(StatusCode::OK, &g),
        Ok(None) => text(StatusCode::NOT_FOUND, "no such group\n"),
        Err(e) => internal(e),
    }
}

/// Format parameter of report views.
#[derive(Deserialize, Default)]
struct FormatParam {
    format: Option<String>,
}

/// A stored report's row and bytes.
async fn load_report(s: &State, id: &str) -> Result<(ReportRow, Bytes), Response> {
    let not_found = || text(StatusCode::NOT_FOUND, "no such report\n");
    let Some(id) = analysis::normalize_report_id(id) else { return Err(not_found()) };
    let row = match s.db.report(&id).await {
        Ok(Some(r)) => r,
        Ok(None) => return Err(not_found()),
        Err(e) => return Err(internal(e)),
    };
    let Some(path) = s.files.report_path(&row.file) else { return Err(internal("bad file name in the database")) };
    match tokio::fs::read(&path).await {
        Ok(b) => Ok((row, Bytes::from(b))),
        Err(e) => Err(internal(format!("cannot read the stored report: {e}"))),
    }
}

async fn render(s: &St, bytes: Bytes, image_ids: &str, format: RenderFormat) -> Result<Option<String>, Response> {
    let ids: Vec<String> = image_ids.split_whitespace().map(str::to_owned).collect();
    let paths = debug_paths(s, &ids).await.map_err(internal)?;
    let a = s.analyzer.clone();
    match blocking(move || a.render(&bytes, &paths, format)).await? {
        Ok(t) => Ok(t),
        Err(e) => Err(internal(format!("cannot render the stored report: {e}"))),
    }
}

async fn api_report(AxState(s): AxState<St>, Path(id): Path<String>, Query(p): Query<FormatParam>) -> Response {
    let format = match p.format.as_deref() {
        None | Some("text") => RenderFormat::Text,
        Some("json") => RenderFormat::Json,
        Some(other) => return text(StatusCode::BAD_REQUEST, format!("format is text or json, not {other:?}\n")),
    };
    let (row, bytes) = match load_report(&s, &id).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    match render(&s, bytes, &row.image_ids, format).await {
        Ok(Some(t)) if format == RenderFormat::Json => {
            ([(header::CONTENT_TYPE, "application/json")], t).into_response()
        }
        Ok(Some(t)) => text(StatusCode::OK, t),
        Ok(None) => text(StatusCode::NOT_FOUND, "this format is not available\n"),
        Err(r) => r,
    }
}

async fn download(AxState(s): AxState<St>, Path(id): Path<String>, Query(p): Query<FormatParam>) -> Response {
    let (row, bytes) = match load_report(&s, &id).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let (format, ext, ctype) = match p.format.as_deref() {
        None | Some("crash") => (RenderFormat::Text, "crash", "text/plain; charset=utf-8"),
        Some("ips") => (RenderFormat::Ips, "ips", "application/json"),
        Some("raw") => {
            let disp = format!("attachment; filename=\"{}.crashreport\"", row.id);
            return ([(header::CONTENT_TYPE, CONTENT_TYPE.to_owned()), (header::CONTENT_DISPOSITION, disp)], bytes)
                .into_response();
        }
        Some(other) => return text(StatusCode::BAD_REQUEST, format!("format is crash, ips or raw, not {other:?}\n")),
    };
    match render(&s, bytes, &row.image_ids, format).await {
        Ok(Some(t)) => {
            let disp = format!("attachment; filename=\"{}.{ext}\"", row.id);
            ([(header::CONTENT_TYPE, ctype.to_owned()), (header::CONTENT_DISPOSITION, disp)], t).into_response()
        }
        Ok(None) => text(StatusCode::NOT_FOUND, format!("no .{ext} for this report\n")),
        Err(r) => r,
    }
}

async fn pages_groups(AxState(s): AxState<St>, Query(p): Query<GroupsParams>) -> Response {
    let q = match group_query(&p) {
        Ok(q) => q,
        Err(r) => return r,
    };
    let groups = match s.db.groups(&q).await {
        Ok(v) => v,
        Err(e) => return internal(e),
    };
    let versions = s.db.app_versions().await.unwrap_or_default();
    html(pages::groups(&groups, &versions, &p))
}

async fn page_group(AxState(s): AxState<St>, Path(id): Path<String>) -> Response {
    match group_detail(&s, &id).await {
        Ok(Some(g)) => html(pages::group(&g)),
        Ok(None) => text(StatusCode::NOT_FOUND, "no such group\n"),
        Err(e) => internal(e),
    }
}

async fn page_report(AxState(s): AxState<St>, Path(id): Path<String>) -> Response {
    let (row, bytes) = match load_report(&s, &id).await {
        Ok(x) => x,
        Err(r) => return r,
    };
    let crash = match render(&s, bytes.clone(), &row.image_ids, RenderFormat::Text).await {
        Ok(t) => t.unwrap_or_default(),
        Err(r) => return r,
    };
    let has_ips = matches!(render(&s, bytes, &row.image_ids, RenderFormat::Ips).await, Ok(Some(_)));
    html(pages::report(&row, &crash, has_ips))
}
