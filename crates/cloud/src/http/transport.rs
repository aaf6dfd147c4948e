//! One Neutron call: the shared reqwest client, the token on every request, one re-auth on
//! a 401, one retry of a GET on a broken connection, a 429/503's `Retry-After` honoured as
//! the least wait, error bodies kept as `CloudError`, bodies read up to a cap, decoding of
//! the answer, and lists followed page by page.

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::time::Duration;

use reqwest::{Method, StatusCode, Url};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use thiserror::Error;

use super::OpenStack;
use crate::auth::TlsConfig;
use crate::error::{CloudError, Result, error_chain};

/// Servers close idle keep-alive connections (gunicorn after 2 s, Apache after 5 s). A request
/// written into a connection the server is closing at that moment fails with "connection
/// closed before message completed" or a reset, and for a write nobody can tell whether it
/// ran. Never reusing a connection idle longer than this keeps us clear of that race; calls
/// of one reconcile follow each other closely and still share a connection.
pub const POOL_IDLE: Duration = Duration::from_secs(1);

/// No answer (Neutron's or Keystone's) is read past this: the largest list the operator reads
/// is a few thousand ports, well under it, and a server sending without end (broken, or
/// hostile) must not take the operator's memory with it.
pub const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

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

pub(super) fn client(tls: &TlsConfig) -> Result<reqwest::Client> {
    // reqwest is built without a TLS provider of its own so it shares kube's ring provider;
    // installing it twice is harmless, installing a second kind would make kube panic.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let builder_error = |message: String| CloudError::Transport {
        method: "building".into(),
        path: "the HTTP client".into(),
        message,
    };
    let mut builder = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .pool_idle_timeout(POOL_IDLE)
        // A redirect would carry X-Auth-Token (or the credential in a token request) to
        // wherever the server points; OpenStack APIs do not redirect, so a 3xx is an error.
        .redirect(reqwest::redirect::Policy::none());
    if let Some(setting) = &tls.insecure {
        // Once per client, i.e. once per process: siblings share this client.
        tracing::warn!(
            setting = %setting,
            "TLS certificates of Keystone and Neutron are NOT verified: whoever can answer in \
             their place receives the credential and every token"
        );
        if let Some(ca) = &tls.ca {
            tracing::warn!(setting = %ca.setting, "the CA bundle is not used while verification is off");
        }
        builder = builder.tls_danger_accept_invalid_certs(true);
    } else if let Some(ca) = &tls.ca {
        // Merged with the system's roots (rustls-platform-verifier): a private CA for the
        // cloud does not take away the public ones.
        let certs = ca
            .certs
            .iter()
            .map(|c| reqwest::Certificate::from_der(c.as_ref()))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| builder_error(format!("{}: {}", ca.setting, error_chain(&e))))?;
        tracing::info!(setting = %ca.setting, path = %ca.path.display(), certificates = certs.len(), "trusting the CA bundle besides the system's roots");
        builder = builder.tls_certs_merge(certs);
    }
    builder.build().map_err(|e| {
        let mut message = error_chain(&e);
        // rustls-platform-verifier reads the system's roots when the client is built, and
        // refuses to go on with none (an image without a CA bundle), even for http:// URLs.
        if no_system_roots(&e) && tls.ca.is_none() {
            message.push_str(
                " (no CA bundle where the system keeps it, nor in SSL_CERT_FILE/SSL_CERT_DIR; \
                 install one, or set OS_CACERT or clouds.yaml cacert)",
            );
        }
        builder_error(message)
    })
}

fn no_system_roots(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(rustls::Error::General(m)) = err.downcast_ref::<rustls::Error>()
            && m.contains("No CA certificates")
        {
            return true;
        }
        cur = err.source();
    }
    false
}

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

pub(super) fn transport(method: &str, path: &str, e: reqwest::Error) -> CloudError {
    if e.is_timeout() {
        CloudError::Timeout {
            method: method.into(),
            path: path.into(),
        }
    } else {
        let mut message = error_chain(&e);
        match refused_certificate(&e) {
            None => {}
            Some(rustls::CertificateError::UnknownIssuer) => message.push_str(
                " (no trusted CA signed the server's certificate; if a private CA did, set \
                 OS_CACERT or clouds.yaml cacert to that CA's PEM bundle)",
            ),
            Some(
                rustls::CertificateError::NotValidForName
                | rustls::CertificateError::NotValidForNameContext { .. },
            ) => message.push_str(
                " (the server's certificate is for another name: the URL, from OS_AUTH_URL or \
                 the catalog, must name the host as the certificate does)",
            ),
            Some(_) => message.push_str(" (the server's TLS certificate was refused)"),
        }
        CloudError::Transport {
            method: method.into(),
            path: path.into(),
            message,
        }
    }
}

/// Why rustls refused the server's certificate, if that is somewhere down the error's causes.
/// The rustls error sits inside `io::Error`s (two, nested, with reqwest 0.13), whose `source()`
/// skips what they wrap, so each is looked into.
fn refused_certificate<'a>(
    e: &'a (dyn std::error::Error + 'static),
) -> Option<&'a rustls::CertificateError> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        let mut inner: Option<&'a (dyn std::error::Error + 'static)> = Some(err);
        while let Some(i) = inner {
            if let Some(rustls::Error::InvalidCertificate(why)) = i.downcast_ref::<rustls::Error>()
            {
                return Some(why);
            }
            inner = i
                .downcast_ref::<std::io::Error>()
                .and_then(|io| io.get_ref())
                .map(|w| w as &(dyn std::error::Error + 'static));
        }
        cur = err.source();
    }
    None
}

#[derive(Debug, Error)]
pub(super) enum BodyError {
    #[error("response body exceeds {MAX_BODY_BYTES} bytes")]
    TooLarge,
    #[error(transparent)]
    Transport(#[from] reqwest::Error),
}

/// The whole body, refused as soon as it is known to pass `MAX_BODY_BYTES`: from
/// Content-Length before reading, or while reading (chunked or close-delimited bodies).
pub(super) async fn read_capped(mut resp: reqwest::Response) -> Result<Vec<u8>, BodyError> {
    let announced = resp.content_length().unwrap_or(0);
    if announced > MAX_BODY_BYTES as u64 {
        return Err(BodyError::TooLarge);
    }
    let mut out = Vec::with_capacity(announced as usize);
    while let Some(chunk) = resp.chunk().await? {
        if out.len() + chunk.len() > MAX_BODY_BYTES {
            return Err(BodyError::TooLarge);
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// A link, as the server wrote it, shortened for a message.
fn shown(href: &str) -> String {
    shortened(href, 200)
}

/// What a message keeps of text the server wrote (a NeutronError message, a decoding error,
/// which quotes the offending value): an answer can be megabytes up to [`MAX_BODY_BYTES`],
/// and the error ends up in a condition, an Event and the log.
pub(crate) const MAX_SERVER_TEXT_CHARS: usize = 512;

/// `text`, at most `max` characters of it, marked when cut.
pub(crate) fn shortened(text: &str, max: usize) -> String {
    let mut chars = text.chars();
    let mut s: String = chars.by_ref().take(max).collect();
    if chars.next().is_some() {
        s.push_str(&format!("... ({} bytes)", text.len()));
    }
    s
}

/// A typed value from JSON, or what is wrong with it naming the field (`ports[3].fixed_ips:
/// invalid type ...`): serde alone names only the type it wanted. `at` is where `value` sits
/// in the answer (its key; empty for the whole body).
pub(crate) fn typed<T: DeserializeOwned>(value: Value, at: &str) -> Result<T, String> {
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let field = match (at.is_empty(), path.as_str()) {
            (true, p) => p.to_string(),
            (false, ".") => at.to_string(),
            (false, p) if p.starts_with('[') => format!("{at}{p}"),
            (false, p) => format!("{at}.{p}"),
        };
        shortened(
            &format!("{field}: {}", e.into_inner()),
            MAX_SERVER_TEXT_CHARS,
        )
    })
}

/// A JSON body, or why it is none (serde_json's syntax errors name a position, not the input).
pub(crate) fn json_body(bytes: &[u8]) -> Result<Value, String> {
    serde_json::from_slice(bytes).map_err(|e| shortened(&e.to_string(), MAX_SERVER_TEXT_CHARS))
}

/// The URL to send a page's `next` link to and its path relative to `endpoint`, or why it is
/// refused. Only the link's path and query are taken, and sent to our own endpoint: Neutron
/// builds the link from the request's Host header and its own scheme, so behind a proxy that
/// terminates TLS it says `http://` (or the proxy's inner host) for an `https://` endpoint,
/// and scheme, host and port are whatever the server (or the proxy) wrote. The token thus
/// never goes anywhere but the endpoint. The path must lie under the endpoint's path, so a
/// link cannot steer the token to another API behind the same host either.
pub(super) fn next_under(href: &str, endpoint: &str) -> Result<(String, String), String> {
    let refused = || {
        format!(
            "the next link {} is not under the Neutron endpoint's path ({endpoint}); not following it",
            shown(href)
        )
    };
    let base = Url::parse(endpoint)
        .map_err(|e| format!("the Neutron endpoint {endpoint} is not a URL: {e}"))?;
    // Parsing also resolves `..` and `%2e%2e` segments, so the prefix test sees the real path.
    let url = base.join(href).map_err(|_| refused())?;
    let prefix = base.path().trim_end_matches('/');
    let mut path = url
        .path()
        .strip_prefix(prefix)
        .filter(|r| r.is_empty() || r.starts_with('/'))
        .map(str::to_string)
        .ok_or_else(refused)?;
    if let Some(q) = url.query() {
        path.push('?');
        path.push_str(q);
    }
    // `endpoint` is Neutron's base without a trailing slash (session::neutron_base) and
    // `path` is empty or starts with '/', as for every other call.
    Ok((format!("{}{path}", endpoint.trim_end_matches('/')), path))
}

#[derive(Deserialize)]
struct Link {
    rel: String,
    href: String,
}

/// A list page: its items under `key`, and the `next` link of `<key>_links` if any.
fn decode_page<T: DeserializeOwned>(
    bytes: &[u8],
    key: &str,
    path: &str,
) -> Result<(Vec<T>, Option<String>)> {
    let err = |message: String| CloudError::Decode {
        method: "GET".into(),
        path: path.into(),
        message,
    };
    let mut v = json_body(bytes).map_err(err)?;
    let links_key = format!("{key}_links");
    let links: Vec<Link> = match v.get_mut(&links_key).map(Value::take) {
        None | Some(Value::Null) => vec![],
        Some(l) => typed(l, &links_key).map_err(err)?,
    };
    let items = take(&mut v, key).map_err(err)?;
    let next = links.into_iter().find(|l| l.rel == "next").map(|l| l.href);
    Ok((items, next))
}

/// Neutron: `{"NeutronError": {"type", "message"}}`; Keystone: `{"error": {"message", "title"}}`.
pub(super) fn error_body(bytes: &[u8]) -> (String, String) {
    let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    if let Some(e) = v.get("NeutronError") {
        let s = |k: &str| {
            shortened(
                e.get(k).and_then(Value::as_str).unwrap_or_default(),
                MAX_SERVER_TEXT_CHARS,
            )
        };
        return (s("type"), s("message"));
    }
    if let Some(e) = v.get("error") {
        let s = |k: &str| {
            shortened(
                e.get(k).and_then(Value::as_str).unwrap_or_default(),
                MAX_SERVER_TEXT_CHARS,
            )
        };
        return (s("title"), s("message"));
    }
    (
        String::new(),
        String::from_utf8_lossy(bytes).chars().take(200).collect(),
    )
}

pub(super) fn decode<T: DeserializeOwned>(
    bytes: &[u8],
    key: &str,
    method: &str,
    path: &str,
) -> Result<T> {
    let err = |message: String| CloudError::Decode {
        method: method.into(),
        path: path.into(),
        message,
    };
    let mut v = json_body(bytes).map_err(err)?;
    take(&mut v, key).map_err(err)
}

/// The value under `key` (the whole body when `key` is empty), typed.
fn take<T: DeserializeOwned>(v: &mut Value, key: &str) -> Result<T, String> {
    let inner = if key.is_empty() {
        v.take()
    } else {
        v.get_mut(key)
            .map(Value::take)
            .ok_or_else(|| format!("no {key:?} in body"))?
    };
    typed(inner, key)
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

    #[test]
    fn a_wrong_field_is_named_and_a_quoted_value_cut() {
        let body = br#"{"ports": [{"id": "a", "network_id": "n"}, {"id": "b", "network_id": "n", "fixed_ips": [{"ip_address": 5}]}]}"#;
        let e = decode::<Vec<crate::Port>>(body, "ports", "GET", "/ports").unwrap_err();
        assert!(
            e.to_string()
                .contains("ports[1].fixed_ips[0].ip_address: invalid type: integer `5`"),
            "{e}"
        );
        let e = decode::<crate::Network>(br#"{"network": {"name": "x"}}"#, "network", "GET", "/n")
            .unwrap_err();
        assert!(e.to_string().contains("network: missing field `id`"), "{e}");
        // serde quotes a wrong-typed string whole: a megabyte of it stays out of the message.
        let big = format!(
            r#"{{"network": {{"id": "n", "shared": "{}"}}}}"#,
            "y".repeat(1 << 20)
        );
        let e = decode::<crate::Network>(big.as_bytes(), "network", "GET", "/n").unwrap_err();
        let text = e.to_string();
        assert!(
            text.contains("network.shared: invalid type: string"),
            "{text}"
        );
        assert!(
            text.len() < 2 * MAX_SERVER_TEXT_CHARS,
            "{} bytes",
            text.len()
        );
        let (_, m) = error_body(
            format!(
                r#"{{"NeutronError": {{"type": "X", "message": "{}"}}}}"#,
                "m".repeat(1 << 20)
            )
            .as_bytes(),
        );
        assert!(m.ends_with("... (1048576 bytes)") && m.len() < 2 * MAX_SERVER_TEXT_CHARS);
    }

    #[test]
    fn error_bodies() {
        let (k, m) = error_body(
            br#"{"NeutronError": {"type": "PortInUse", "message": "busy", "detail": ""}}"#,
        );
        assert_eq!((k.as_str(), m.as_str()), ("PortInUse", "busy"));
        let (k, m) =
            error_body(br#"{"error": {"code": 401, "title": "Unauthorized", "message": "nope"}}"#);
        assert_eq!((k.as_str(), m.as_str()), ("Unauthorized", "nope"));
    }

    const EP: &str = "http://127.0.0.1:9696/v2.0";

    #[test]
    fn next_links_on_the_endpoint_are_followed() {
        let (url, path) =
            next_under("http://127.0.0.1:9696/v2.0/ports?limit=2&marker=abc", EP).unwrap();
        assert_eq!(url, "http://127.0.0.1:9696/v2.0/ports?limit=2&marker=abc");
        assert_eq!(path, "/ports?limit=2&marker=abc");
        // The default port written out, and a relative link, are the same place.
        let (url, path) = next_under(
            "https://n.example:443/net/v2.0/routers#x",
            "https://n.example/net/v2.0",
        )
        .unwrap();
        assert_eq!(url, "https://n.example/net/v2.0/routers");
        assert_eq!(path, "/routers");
        let (_, path) = next_under("/v2.0/ports?marker=m", EP).unwrap();
        assert_eq!(path, "/ports?marker=m");
    }

    #[test]
    fn next_links_go_to_our_endpoint_whatever_their_origin() {
        // Behind a proxy that terminates TLS, Neutron writes its own scheme and the Host it
        // was sent; another host, port or user info changes nothing either: only the path
        // and query are kept, and they go to the endpoint.
        const TLS: &str = "https://neutron.example:13696/v2.0";
        for href in [
            "http://neutron.example:13696/v2.0/ports?marker=a",
            "http://127.0.0.1:9696/v2.0/ports?marker=a",
            "https://evil.example/v2.0/ports?marker=a",
            "http://user:pw@neutron.example/v2.0/ports?marker=a",
            "//evil.example/v2.0/ports?marker=a#frag",
        ] {
            let (url, path) = next_under(href, TLS).expect(href);
            assert_eq!(
                url, "https://neutron.example:13696/v2.0/ports?marker=a",
                "{href}"
            );
            assert_eq!(path, "/ports?marker=a", "{href}");
        }
    }

    #[test]
    fn next_links_outside_the_endpoint_path_are_refused() {
        for href in [
            "http://127.0.0.1:9696/v2.1/ports",
            "http://127.0.0.1:9696/v2.0evil/ports",
            "http://127.0.0.1:9696/v2.0/../identity/v3",
            "http://127.0.0.1:9696/v2.0/%2e%2e/x",
            "http://evil.example/identity/v3/auth/tokens",
            "ports?marker=a",
        ] {
            let err = next_under(href, EP).expect_err(href);
            assert!(
                err.contains("not under the Neutron endpoint's path"),
                "{href}: {err}"
            );
        }
    }

    #[test]
    fn a_page_yields_its_items_and_next_link() {
        let body = br#"{"ports": [{"id": "a", "network_id": "n"}], "ports_links": [
            {"rel": "previous", "href": "http://h/v2.0/ports?marker=z&page_reverse=True"},
            {"rel": "next", "href": "http://h/v2.0/ports?marker=a"}]}"#;
        let (items, next) = decode_page::<crate::Port>(body, "ports", "/ports").unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(next.as_deref(), Some("http://h/v2.0/ports?marker=a"));
        let last = br#"{"ports": [], "ports_links": [{"rel": "previous", "href": "x"}]}"#;
        let (items, next) = decode_page::<crate::Port>(last, "ports", "/ports").unwrap();
        assert!(items.is_empty() && next.is_none());
        let bad = br#"{"ports": [], "ports_links": {"next": "x"}}"#;
        let err = decode_page::<crate::Port>(bad, "ports", "/ports").unwrap_err();
        assert!(err.to_string().contains("ports_links"), "{err}");
    }
}
