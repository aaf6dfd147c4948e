//! One Neutron call: the token on every request, one re-auth on a 401, one retry of a GET on
//! a broken connection, a 429/503's `Retry-After` honoured as the least wait, error answers
//! kept as `CloudError`, and lists followed page by page. What an answer holds (its body up to
//! a cap, its decoding, its error body, a page's `next` link) is `answer`; the HTTP client and
//! what its errors mean is `client`.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::OpenStack;
use super::answer::{BodyError, decode, decode_page, error_body, next_under, read_capped, shown};
use super::client::transport;
use crate::error::{CloudError, Result, error_chain};

/// A list gives up after this many pages: a server whose `next` links never end must not keep
/// a reconcile busy forever. At Neutron's usual page sizes this is far more than any cloud.
pub const MAX_PAGES: usize = 1000;

/// A 429 or 503 whose `Retry-After` asks for at most this long is waited out in the call and
/// sent again (client-go and keystoneauth do the same): the server refused it before doing
/// anything, so even a write is safe to send again. A longer wait is not spent holding a
/// reconcile: the call fails, and until the time the server named this client sends nothing
/// (every call fails at once), so the reconcile's own backoff can never come back sooner.
pub const MAX_INLINE_RETRY_AFTER: Duration = Duration::from_secs(10);

/// At most this many waits in one call, so a server that keeps answering 429 cannot hold it.
const MAX_RETRY_AFTER_WAITS: usize = 2;

/// Where a Neutron request goes: a path under the endpoint, or the `next` link of a page,
/// which the server wrote and is checked before the token goes with it.
enum Target<'a> {
    Path(&'a str),
    Next { href: &'a str, list: &'a str },
}

impl OpenStack {
    /// One Neutron call. A 401 (token revoked or expired early) re-authenticates once.
    pub(super) async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        if_match: Option<String>,
    ) -> Result<Vec<u8>> {
        let (bytes, _) = self
            .request(method, Target::Path(path), body, if_match)
            .await?;
        Ok(bytes)
    }

    /// `call` for any target; also returns the path (relative to the endpoint) it was sent to.
    async fn request(
        &self,
        method: Method,
        target: Target<'_>,
        body: Option<&Value>,
        if_match: Option<String>,
    ) -> Result<(Vec<u8>, String)> {
        let mut forced = false;
        let mut retried_transport = false;
        let mut waits = 0;
        let m = method.as_str();
        loop {
            let path_hint = match target {
                Target::Path(p) => p,
                Target::Next { list, .. } => list,
            };
            self.honour_retry_after(m, path_hint).await?;
            let s = self.session(forced).await?;
            let (url, path) = match target {
                Target::Path(p) => (format!("{}{p}", s.neutron_url), p.to_string()),
                Target::Next { href, list } => {
                    next_under(href, &s.neutron_url).map_err(|message| CloudError::Decode {
                        method: m.into(),
                        path: list.into(),
                        message,
                    })?
                }
            };
            let path = path.as_str();
            let mut req = self
                .http
                .request(method.clone(), url)
                .header("X-Auth-Token", s.token.expose())
                .header("Accept", "application/json");
            if let Some(b) = body {
                req = req.json(b);
            }
            if let Some(m) = &if_match {
                req = req.header("If-Match", m);
            }
            let counter = if method == Method::GET {
                &self.reads
            } else {
                &self.writes
            };
            counter.fetch_add(1, Ordering::Relaxed);
            let started = std::time::Instant::now();
            let sent = req.send().await;
            // Where a reconcile's time goes (RUST_LOG=bnerd_cloud=debug): each request's wait.
            tracing::debug!(
                method = m,
                operation = %neutron_path(path),
                code = sent.as_ref().map(|r| r.status().as_u16()).unwrap_or(0),
                ms = started.elapsed().as_millis() as u64,
                "neutron request"
            );
            self.observed(
                crate::observe::Service::Neutron,
                m,
                &neutron_path(path),
                sent.as_ref().ok().map(|r| r.status().as_u16()),
            );
            let resp = match sent {
                Ok(resp) => resp,
                // A read changes nothing, so a broken connection is worth one more try on a
                // fresh one; a write's outcome is unknown and is left to the reconcile,
                // which looks before it writes again.
                Err(e) if method == Method::GET && !e.is_timeout() && !retried_transport => {
                    tracing::debug!(path, error = %error_chain(&e), "GET failed on the connection; retrying once");
                    retried_transport = true;
                    continue;
                }
                Err(e) => return Err(transport(m, path, e)),
            };
            let status = resp.status();
            let retry_after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, chrono::Utc::now()));
            let bytes = read_capped(resp).await.map_err(|e| match e {
                BodyError::Transport(e) => transport(m, path, e),
                too_large @ BodyError::TooLarge => CloudError::Decode {
                    method: m.into(),
                    path: path.into(),
                    message: too_large.to_string(),
                },
            })?;
            if status == StatusCode::UNAUTHORIZED && !forced {
                forced = true;
                continue;
            }
            let throttled = status == StatusCode::TOO_MANY_REQUESTS
                || status == StatusCode::SERVICE_UNAVAILABLE;
            if let Some(wait) = retry_after.filter(|_| throttled && waits < MAX_RETRY_AFTER_WAITS) {
                self.not_before(wait);
                if wait <= MAX_INLINE_RETRY_AFTER {
                    waits += 1;
                    tracing::debug!(path, code = status.as_u16(), ?wait, "honouring Retry-After");
                    continue;
                }
            }
            if !status.is_success() {
                let (kind, message) = error_body(&bytes);
                return Err(CloudError::Api {
                    method: m.into(),
                    path: path.into(),
                    status: status.as_u16(),
                    kind,
                    message,
                });
            }
            return Ok((bytes, path.to_string()));
        }
    }

    /// A list, every page of it: `limit` when a page size is set, then each `next` link
    /// until a page has none. Each page is one read.
    pub(super) async fn list<T: DeserializeOwned>(&self, path: &str, key: &str) -> Result<Vec<T>> {
        let first = match self.page_size {
            Some(n) if path.contains('?') => format!("{path}&limit={n}"),
            Some(n) => format!("{path}?limit={n}"),
            None => path.to_string(),
        };
        let mut items = Vec::new();
        let mut followed = HashSet::new();
        let mut next: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let target = match &next {
                None => Target::Path(&first),
                Some(href) => Target::Next { href, list: &first },
            };
            let (bytes, page_path) = self.request(Method::GET, target, None, None).await?;
            let (page, link) = decode_page::<T>(&bytes, key, &page_path)?;
            items.extend(page);
            match link {
                None => return Ok(items),
                // Neutron's markers only move forward; a link seen before is a loop.
                Some(href) if !followed.insert(href.clone()) => {
                    return Err(CloudError::Decode {
                        method: "GET".into(),
                        path: page_path,
                        message: format!(
                            "the next link {} points back to a page already read",
                            shown(&href)
                        ),
                    });
                }
                Some(href) => next = Some(href),
            }
        }
        Err(CloudError::Decode {
            method: "GET".into(),
            path: first,
            message: format!("the list did not end within {MAX_PAGES} pages"),
        })
    }

    pub(super) async fn get<T: DeserializeOwned>(&self, path: &str, key: &str) -> Result<T> {
        let bytes = self.call(Method::GET, path, None, None).await?;
        decode(&bytes, key, "GET", path)
    }

    pub(super) async fn send<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: &Value,
        key: &str,
    ) -> Result<T> {
        let m = method.as_str().to_string();
        let bytes = self.call(method, path, Some(body), None).await?;
        decode(&bytes, key, &m, path)
    }
}

impl OpenStack {
    /// Remember that the server asked for no request before `wait` from now.
    fn not_before(&self, wait: Duration) {
        let until = tokio::time::Instant::now() + wait;
        let mut nb = self.not_before.lock().unwrap_or_else(|e| e.into_inner());
        if nb.is_none_or(|t| t < until) {
            *nb = Some(until);
        }
    }

    /// Before a request: wait out a short `Retry-After` the server gave; refuse to send
    /// during a long one (naming when it ends) rather than ask again early.
    async fn honour_retry_after(&self, method: &str, path: &str) -> Result<()> {
        let until = *self.not_before.lock().unwrap_or_else(|e| e.into_inner());
        let Some(until) = until else {
            return Ok(());
        };
        let now = tokio::time::Instant::now();
        if until <= now {
            return Ok(());
        }
        let left = until - now;
        if left <= MAX_INLINE_RETRY_AFTER {
            tokio::time::sleep_until(until).await;
            return Ok(());
        }
        Err(CloudError::Api {
            method: method.into(),
            path: path.into(),
            status: 429,
            kind: "RetryAfter".into(),
            message: format!(
                "not sent: Neutron asked (Retry-After) for no request during the next {} s",
                left.as_secs().max(1)
            ),
        })
    }
}

/// `Retry-After` as seconds or as an HTTP date (RFC 9110 10.2.3); a date in the past is no
/// wait, anything unreadable is ignored.
pub(crate) fn parse_retry_after(v: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    Some(
        (at.with_timezone(&chrono::Utc) - now)
            .to_std()
            .unwrap_or(Duration::ZERO),
    )
}

/// The path as Neutron sees it (under `/v2.0`), so operations read like Neutron's API reference.
fn neutron_path(path: &str) -> String {
    format!("/v2.0{path}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_as_seconds_or_a_date() {
        let now = chrono::DateTime::parse_from_rfc3339("2026-11-30T15:00:00Z")
            .unwrap()
            .with_timezone(&chrono::Utc);
        assert_eq!(parse_retry_after("3", now), Some(Duration::from_secs(3)));
        assert_eq!(
            parse_retry_after(" 120 ", now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(
            parse_retry_after("Mon, 30 Nov 2026 15:00:07 GMT", now),
            Some(Duration::from_secs(7))
        );
        assert_eq!(
            parse_retry_after("Mon, 30 Nov 2026 14:00:00 GMT", now),
            Some(Duration::ZERO),
            "a date in the past is no wait"
        );
        assert_eq!(parse_retry_after("soon", now), None);
        assert_eq!(parse_retry_after("-1", now), None);
    }
}
