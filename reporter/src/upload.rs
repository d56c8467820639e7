//! Uploading pending reports: one POST per report (protocol in `report-format/SCHEMA.md` §7), with exponential
//! backoff recorded on disk so it holds across launches.
//!
//! For each pending report, newest first: skip it while its backoff runs; claim it (atomic rename); decode it (a
//! file that is not a report at all, or has lost its report id with its META section, is set aside in
//! `damaged/`, never sent); set it aside as expired when older than the maximum age; POST it. A report with
//! checksum damage is sent too: the collector stores it flagged and the viewer shows what survived. A 2xx deletes
//! the local copy; a permanent 4xx sets it aside; 401 and 403 (a missing, wrong or revoked ingest token: a setting
//! to fix, not a bad report), 408, 429, 5xx, timeouts and refused connections give it back with the next attempt
//! pushed out (`initial × 2^(attempts−1)`, capped).
//!
//! Ingest token: when the upload URL has a user part (`https://TOKEN@collector.example/api/v1/reports`), it is
//! sent as `Authorization: Bearer TOKEN` (and removed from the URL), so apps whose only setting is the URL can
//! authenticate to the collector.

use crate::store::{Aside, Claim, RetryState, Store};
use report_format::transport::{CONTENT_TYPE, REPORT_ID_HEADER};
use std::io;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How and where to upload.
#[derive(Clone, Debug)]
pub struct UploadPolicy {
    /// Collector URL: `https://…`, or `http://` to a loopback address.
    pub url: String,
    /// Whole-request timeout.
    pub timeout: Duration,
    /// Backoff after the first failure; doubled after each further one.
    pub retry_initial: Duration,
    /// Longest backoff.
    pub retry_max: Duration,
    /// Reports captured longer ago than this are set aside in `expired/` instead of sent.
    pub max_age: Duration,
}

impl UploadPolicy {
    /// Defaults: 30 s timeout, backoff 60 s doubling to 6 h, maximum age 30 days.
    pub fn new(url: impl Into<String>) -> Self {
        UploadPolicy {
            url: url.into(),
            timeout: Duration::from_secs(30),
            retry_initial: Duration::from_secs(60),
            retry_max: Duration::from_secs(6 * 3600),
            max_age: Duration::from_secs(30 * 24 * 3600),
        }
    }

    /// The backoff after `attempts` failures.
    pub fn backoff(&self, attempts: u32) -> Duration {
        let factor = 1u32.checked_shl(attempts.saturating_sub(1).min(31)).unwrap_or(u32::MAX);
        self.retry_initial.saturating_mul(factor).min(self.retry_max)
    }
}

/// What the server said about one report.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// 2xx: stored (or already stored).
    Delivered(u16),
    /// A permanent refusal (4xx other than 401, 403, 408 and 429).
    Rejected(u16),
    /// Try again later: 401 or 403 (the token), 408, 429, 5xx or a transport error.
    Retry(String),
}

/// What one upload pass did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Summary {
    /// Reports the server accepted (file names).
    pub delivered: Vec<String>,
    /// Reports kept for a later attempt, with the reason.
    pub kept: Vec<(String, String)>,
    /// Reports set aside (damaged, refused or expired), with the reason.
    pub set_aside: Vec<(String, String)>,
    /// Reports not tried because their backoff has not run out.
    pub waiting: usize,
    /// Reports another process had claimed first.
    pub claimed_elsewhere: usize,
    /// Reports not tried because the deadline passed.
    pub deadline_left: usize,
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Splits the ingest token (the URL's user part) off an upload URL: `(url without it, token)`.
pub fn split_token(url: &str) -> (String, Option<String>) {
    let Some((scheme, rest)) = url.split_once("://") else { return (url.to_owned(), None) };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    match authority.rsplit_once('@') {
        Some((user, host)) if !user.is_empty() => {
            // A `user:password` pair keeps only the user part as the token.
            let token = user.split(':').next().unwrap_or(user).to_owned();
            (format!("{scheme}://{host}{tail}"), Some(token))
        }
        _ => (url.to_owned(), None),
    }
}

/// Sends one report. The token in the URL's user part, if any, goes in `Authorization: Bearer`.
pub fn post(agent: &ureq::Agent, url: &str, report_id: &str, body: &[u8]) -> Outcome {
    let (url, token) = split_token(url);
    let mut req = agent.post(&url).header("Content-Type", CONTENT_TYPE).header(REPORT_ID_HEADER, report_id);
    if let Some(t) = token {
        req = req.header("Authorization", &format!("Bearer {t}"));
    }
    let res = req.send(body);
    match res {
        Ok(resp) => classify(resp.status().as_u16()),
        Err(e) => Outcome::Retry(e.to_string()),
    }
}

/// Maps an HTTP status to an outcome.
pub fn classify(status: u16) -> Outcome {
    match status {
        200..=299 => Outcome::Delivered(status),
        401 | 403 => Outcome::Retry(format!("HTTP {status}: the collector refused the ingest token")),
        408 | 429 => Outcome::Retry(format!("HTTP {status}")),
        400..=499 => Outcome::Rejected(status),
        _ => Outcome::Retry(format!("HTTP {status}")),
    }
}

/// An HTTP agent for the policy: HTTPS through rustls (the platform's TLS on Apple platforms), statuses returned
/// rather than turned into errors.
pub fn agent(policy: &UploadPolicy) -> ureq::Agent {
    let b = ureq::Agent::config_builder().timeout_global(Some(policy.timeout)).http_status_as_error(false);
    #[cfg(target_vendor = "apple")]
    let b = b.tls_config(ureq::tls::TlsConfig::builder().provider(ureq::tls::TlsProvider::NativeTls).build());
    b.build().into()
}

/// Uploads every pending report once (respecting backoff), stopping before `deadline` when one is given.
///
/// # Errors
/// I/O errors listing the store. Errors on single reports are recorded in the [`Summary`] and do not stop the pass.
pub fn upload_pending(store: &Store, policy: &UploadPolicy, deadline: Option<Instant>) -> io::Result<Summary> {
    let agent = agent(policy);
    let mut sum = Summary::default();
    let pending = store.pending()?;
    for (i, r) in pending.iter().enumerate() {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            sum.deadline_left = pending.len() - i;
            break;
        }
        let st = store.retry_state(&r.name);
        if st.next_attempt_ms > now_ms() {
            sum.waiting += 1;
            continue;
        }
        let Some(claim) = store.claim(r)? else {
            sum.claimed_elsewhere += 1;
            continue;
        };
        handle_one(claim, st, policy, &agent, &mut sum)?;
    }
    Ok(sum)
}

fn handle_one(
    claim: Claim,
    mut st: RetryState,
    policy: &UploadPolicy,
    agent: &ureq::Agent,
    sum: &mut Summary,
) -> io::Result<()> {
    let name = claim.name.clone();
    let (bytes, decoded) = match claim.read() {
        Ok(x) => x,
        Err(e) => {
            let why = format!("unreadable: {e}");
            let _ = claim.release();
            sum.kept.push((name, why));
            return Ok(());
        }
    };
    let d = match decoded {
        // Damaged but with its id: the collector stores it flagged, so it is sent.
        Ok(d) if d.report.meta.is_some() => d,
        Ok(d) => {
            let why: Vec<String> = d.problems.iter().map(ToString::to_string).collect();
            let why = format!("damaged report without its report id (META lost), not uploaded:\n{}\n", why.join("\n"));
            claim.set_aside(Aside::Damaged, &why)?;
            sum.set_aside.push((name, why));
            return Ok(());
        }
        Err(e) => {
            let why = format!("not uploaded: {e}\n");
            claim.set_aside(Aside::Damaged, &why)?;
            sum.set_aside.push((name, why));
            return Ok(());
        }
    };
    let meta = d.report.meta.as_ref();
    let captured_ms = meta.and_then(|m| m.capture_time_ns).map(|t| t / 1_000_000).unwrap_or_else(now_ms);
    if now_ms().saturating_sub(captured_ms) > policy.max_age.as_millis() as u64 {
        let why = format!("expired: captured more than {} s ago and never delivered\n", policy.max_age.as_secs());
        claim.set_aside(Aside::Expired, &why)?;
        sum.set_aside.push((name, why));
        return Ok(());
    }
    let id = meta.map(|m| m.report_id.to_string()).unwrap_or_default();
    match post(agent, &policy.url, &id, &bytes) {
        Outcome::Delivered(_) => {
            claim.delivered()?;
            sum.delivered.push(name);
        }
        Outcome::Rejected(status) => {
            let why = format!("refused by the server: HTTP {status}\n");
            claim.set_aside(Aside::Damaged, &why)?;
            sum.set_aside.push((name, why));
        }
        Outcome::Retry(why) => {
            st.attempts = st.attempts.saturating_add(1);
            st.next_attempt_ms = now_ms() + policy.backoff(st.attempts).as_millis() as u64;
            st.last_error = why.clone();
            claim.store_retry(&st)?;
            claim.release()?;
            sum.kept.push((name, why));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses_map_to_outcomes() {
        assert_eq!(classify(201), Outcome::Delivered(201));
        assert_eq!(classify(200), Outcome::Delivered(200));
        assert_eq!(classify(400), Outcome::Rejected(400));
        assert_eq!(classify(413), Outcome::Rejected(413));
        assert!(matches!(classify(429), Outcome::Retry(_)));
        assert!(matches!(classify(401), Outcome::Retry(_)), "a token problem keeps the report");
        assert!(matches!(classify(403), Outcome::Retry(_)));
        assert!(matches!(classify(408), Outcome::Retry(_)));
        assert!(matches!(classify(500), Outcome::Retry(_)));
        assert!(matches!(classify(503), Outcome::Retry(_)));
    }

    #[test]
    fn token_comes_from_the_user_part() {
        assert_eq!(
            split_token("https://crt_abc@c.example/api/v1/reports"),
            ("https://c.example/api/v1/reports".into(), Some("crt_abc".into()))
        );
        assert_eq!(split_token("http://t:x@127.0.0.1:8787/"), ("http://127.0.0.1:8787/".into(), Some("t".into())));
        assert_eq!(split_token("http://127.0.0.1:8787/a@b"), ("http://127.0.0.1:8787/a@b".into(), None));
        assert_eq!(split_token("https://c.example"), ("https://c.example".into(), None));
    }

    #[test]
    fn backoff_doubles_and_caps() {
        let mut p = UploadPolicy::new("http://127.0.0.1:1/");
        p.retry_initial = Duration::from_secs(10);
        p.retry_max = Duration::from_secs(100);
        let b: Vec<u64> = (1..=6).map(|a| p.backoff(a).as_secs()).collect();
        assert_eq!(b, vec![10, 20, 40, 80, 100, 100]);
        assert_eq!(p.backoff(1000).as_secs(), 100);
    }
}
