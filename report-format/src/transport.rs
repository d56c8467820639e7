//! The upload protocol between `reporter` (client) and the collector (`viewer serve`). SCHEMA.md §7.
//!
//! One report per request: `POST <upload URL>` with the report file's bytes unchanged as the body, the ingest token
//! (the upload URL's user part) in `Authorization: Bearer`. Answers and what the client does with each: SCHEMA.md §7.

/// `Content-Type` of an upload.
pub const CONTENT_TYPE: &str = "application/x-crash-report";
/// Request header carrying the report id (uppercase dashed UUID), so a resend is stored once.
pub const REPORT_ID_HEADER: &str = "X-Report-Id";
/// Largest body a collector accepts by default, in bytes (16 MiB).
pub const MAX_UPLOAD_BYTES: u64 = 16 * 1024 * 1024;
