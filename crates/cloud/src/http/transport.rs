//! One Neutron call: the shared reqwest client, the token on every request, one re-auth on
//! a 401, one retry of a GET on a broken connection, error bodies kept as `CloudError`, and
//! decoding of the answer.

use std::sync::atomic::Ordering;
use std::time::Duration;

use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::OpenStack;
use crate::error::{CloudError, Result};

/// Servers close idle keep-alive connections (gunicorn after 2 s, Apache after 5 s). A request
/// written into a connection the server is closing at that moment fails with "connection
/// closed before message completed" or a reset, and for a write nobody can tell whether it
/// ran. Never reusing a connection idle longer than this keeps us clear of that race; calls
/// of one reconcile follow each other closely and still share a connection.
pub const POOL_IDLE: Duration = Duration::from_secs(1);

pub(super) fn client() -> Result<reqwest::Client> {
    // reqwest is built without a TLS provider of its own so it shares kube's ring provider;
    // installing it twice is harmless, installing a second kind would make kube panic.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(30))
        .pool_idle_timeout(POOL_IDLE)
        .build()
        .map_err(|e| CloudError::Transport {
            method: "-".into(),
            path: "-".into(),
            message: e.to_string(),
        })
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
        let mut forced = false;
        let mut retried_transport = false;
        loop {
            let s = self.session(forced).await?;
            let mut req = self
                .http
                .request(method.clone(), format!("{}{path}", s.neutron_url))
                .header("X-Auth-Token", s.token.expose())
                .header("Accept", "application/json");
            if let Some(b) = body {
                req = req.json(b);
            }
            if let Some(m) = &if_match {
                req = req.header("If-Match", m);
            }
            let m = method.as_str();
            let counter = if method == Method::GET {
                &self.reads
            } else {
                &self.writes
            };
            counter.fetch_add(1, Ordering::Relaxed);
            let resp = match req.send().await {
                Ok(resp) => resp,
                // A read changes nothing, so a broken connection is worth one more try on a
                // fresh one; a write's outcome is unknown and is left to the reconcile,
                // which looks before it writes again.
                Err(e) if method == Method::GET && !e.is_timeout() && !retried_transport => {
                    tracing::debug!(path, error = %crate::error::error_chain(&e), "GET failed on the connection; retrying once");
                    retried_transport = true;
                    continue;
                }
                Err(e) => return Err(transport(m, path, e)),
            };
            let status = resp.status();
            let bytes = resp.bytes().await.map_err(|e| transport(m, path, e))?;
            if status == StatusCode::UNAUTHORIZED && !forced {
                forced = true;
                continue;
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
            return Ok(bytes.to_vec());
        }
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

pub(super) fn transport(method: &str, path: &str, e: reqwest::Error) -> CloudError {
    if e.is_timeout() {
        CloudError::Timeout {
            method: method.into(),
            path: path.into(),
        }
    } else {
        CloudError::Transport {
            method: method.into(),
            path: path.into(),
            message: crate::error::error_chain(&e),
        }
    }
}

/// Neutron: `{"NeutronError": {"type", "message"}}`; Keystone: `{"error": {"message", "title"}}`.
pub(super) fn error_body(bytes: &[u8]) -> (String, String) {
    let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    if let Some(e) = v.get("NeutronError") {
        let s = |k: &str| {
            e.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
        };
        return (s("type"), s("message"));
    }
    if let Some(e) = v.get("error") {
        let s = |k: &str| {
            e.get(k)
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string()
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
    let mut v: Value = serde_json::from_slice(bytes).map_err(|e| err(e.to_string()))?;
    let inner = if key.is_empty() {
        v
    } else {
        v.get_mut(key)
            .map(Value::take)
            .ok_or_else(|| err(format!("no {key:?} in body")))?
    };
    serde_json::from_value(inner).map_err(|e| err(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
