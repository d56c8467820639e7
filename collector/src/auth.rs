//! Ingest tokens and the per-token rate limit.
//!
//! A token is `crt_` followed by 64 random hex digits (256 bits from the OS). The database keeps only its
//! SHA-256; the token is shown once, when created. Requests carry it as `Authorization: Bearer <token>`; a
//! `reporter` whose upload URL has the token as its user part (`https://TOKEN@host/api/v1/reports`) sends it that
//! way.
//!
//! The rate limit is a token bucket per ingest token, in memory in each collector process: `per_minute`
//! requests a minute on average, bursts of up to `burst`. With several processes behind a load balancer each
//! process applies it separately.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Prefix of every token.
pub const TOKEN_PREFIX: &str = "crt_";

/// A new random token.
///
/// # Errors
/// When the OS has no random source.
pub fn new_token() -> std::io::Result<String> {
    Ok(format!("{TOKEN_PREFIX}{}{}", crate::store::random_hex()?, crate::store::random_hex()?))
}

/// SHA-256 of a token, lowercase hex (what the database stores).
pub fn token_hash(token: &str) -> String {
    crate::analysis::hex(&Sha256::digest(token.as_bytes()))
}

/// The bearer token of an `Authorization` header value, when it has the right shape.
pub fn bearer(value: &[u8]) -> Option<&str> {
    let s = std::str::from_utf8(value).ok()?.trim();
    let (scheme, token) = s.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let token = token.trim();
    let ok = token.len() <= 256 && !token.is_empty() && token.bytes().all(|b| b.is_ascii_graphic());
    ok.then_some(token)
}

/// Token buckets by key.
#[derive(Debug)]
pub struct RateLimiter {
    per_minute: u32,
    burst: u32,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RateLimiter {
    /// `per_minute` requests a minute on average per key, bursts up to `burst`. `per_minute == 0` disables it.
    pub fn new(per_minute: u32, burst: u32) -> RateLimiter {
        RateLimiter { per_minute, burst: burst.max(1), buckets: Mutex::new(HashMap::new()) }
    }

    /// Takes one request from `key`'s bucket at time `now`. `Err(wait)` when empty: the time until one is there.
    pub fn check_at(&self, key: &str, now: Instant) -> Result<(), Duration> {
        if self.per_minute == 0 {
            return Ok(());
        }
        let rate = f64::from(self.per_minute) / 60.0;
        let burst = f64::from(self.burst);
        let mut map = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        if map.len() > 100_000 {
            map.retain(|_, (_, t)| now.duration_since(*t) < Duration::from_secs(3600));
        }
        let (level, last) = map.entry(key.to_owned()).or_insert((burst, now));
        *level = (*level + now.saturating_duration_since(*last).as_secs_f64() * rate).min(burst);
        *last = now;
        if *level >= 1.0 {
            *level -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - *level) / rate))
        }
    }

    /// [`RateLimiter::check_at`] now.
    pub fn check(&self, key: &str) -> Result<(), Duration> {
        self.check_at(key, Instant::now())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_and_hashed() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert_ne!(a, b);
        assert!(a.starts_with(TOKEN_PREFIX) && a.len() == 4 + 64);
        assert_eq!(token_hash(&a).len(), 64);
        assert_ne!(token_hash(&a), token_hash(&b));
    }

    #[test]
    fn bearer_header_parsing() {
        assert_eq!(bearer(b"Bearer abc"), Some("abc"));
        assert_eq!(bearer(b"bearer  abc "), Some("abc"));
        assert_eq!(bearer(b"Basic abc"), None);
        assert_eq!(bearer(b"Bearer"), None);
        assert_eq!(bearer(b"Bearer \xff\xfe"), None);
        assert_eq!(bearer(b"Bearer a b"), None);
    }

    #[test]
    fn bucket_allows_burst_then_refills() {
        let r = RateLimiter::new(60, 3);
        let t = Instant::now();
        for _ in 0..3 {
            assert_eq!(r.check_at("k", t), Ok(()));
        }
        let wait = r.check_at("k", t).unwrap_err();
        assert!(wait <= Duration::from_secs(1) && wait > Duration::ZERO, "{wait:?}");
        assert_eq!(r.check_at("other", t), Ok(()), "buckets are per key");
        assert_eq!(r.check_at("k", t + Duration::from_millis(1001)), Ok(()));
        assert!(RateLimiter::new(0, 1).check_at("k", t).is_ok());
    }
}
