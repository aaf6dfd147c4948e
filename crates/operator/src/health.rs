//! What `/healthz` and `/readyz` answer, and the one HTTP port that serves them with
//! `/metrics`.
//!
//! Alive means the process and its runtime answer. Ready means this replica can do its job:
//! a standby once it takes part in the leader election; the leader once its caches are synced
//! and the cloud answered at the last check. A Deployment rollout waits for Ready, so a
//! standby has to become Ready or an upgrade would never finish.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use tracing::{debug, info};

use crate::metrics::Metrics;

#[derive(Debug, Default)]
pub struct Health {
    /// The leader election runs (or is disabled): this replica can take over.
    electing: AtomicBool,
    /// This replica leads and reconciles.
    leading: AtomicBool,
    /// The leader's watches have listed everything once.
    synced: AtomicBool,
    /// The cloud answered at the last check (startup, then every fabric check).
    cloud_ok: AtomicBool,
    /// Why not ready, when the cloud is not: shown by `/readyz`.
    cloud_problem: std::sync::Mutex<String>,
    /// What `/readyz` shows besides, without making the replica not ready: what the checks
    /// found about the operator's own credential.
    credential_note: std::sync::Mutex<String>,
    /// The same for a limit of the operator's project that is reached.
    capacity_note: std::sync::Mutex<String>,
    /// The rows the last capacity Warning named, so the next check publishes only a change.
    capacity_warned: std::sync::Mutex<Vec<String>>,
}

impl Health {
    pub fn set_electing(&self, v: bool) {
        self.electing.store(v, Ordering::Release);
    }
    pub fn set_leading(&self, v: bool) {
        self.leading.store(v, Ordering::Release);
        if !v {
            self.synced.store(false, Ordering::Release);
        }
    }
    pub fn set_synced(&self, v: bool) {
        self.synced.store(v, Ordering::Release);
    }
    /// `problem` is the whole reason /readyz gives (the caller knows whether the cloud did
    /// not answer or answered that the fabric is wrong).
    pub fn set_cloud(&self, problem: Option<String>) {
        self.cloud_ok.store(problem.is_none(), Ordering::Release);
        if let Ok(mut p) = self.cloud_problem.lock() {
            *p = problem.unwrap_or_default();
        }
    }

    /// A line `/readyz` adds to its answer (ready or not), or None to drop it. A privileged
    /// operator credential is shown here rather than made a reason to be not ready: a
    /// replica that is never ready would only be restarted in a loop, and a platform engineer
    /// still needs to see it.
    pub fn set_credential_note(&self, line: Option<String>) {
        if let Ok(mut n) = self.credential_note.lock() {
            *n = line.unwrap_or_default();
        }
    }

    /// A line `/readyz` adds when a limit of the operator's project is reached (a replica
    /// that can still reconcile what exists stays ready), or None to drop it.
    pub fn set_capacity_note(&self, line: Option<String>) {
        if let Ok(mut n) = self.capacity_note.lock() {
            *n = line.unwrap_or_default();
        }
    }

    /// Remember what the capacity Warning now names; returns what it named before.
    pub fn swap_capacity_warned(&self, now: Vec<String>) -> Vec<String> {
        self.capacity_warned
            .lock()
            .map(|mut w| std::mem::replace(&mut *w, now))
            .unwrap_or_default()
    }

    /// The lines `/readyz` adds, whatever its status.
    pub fn notes(&self) -> Vec<String> {
        [&self.credential_note, &self.capacity_note]
            .into_iter()
            .filter_map(|n| n.lock().ok().map(|n| n.clone()))
            .filter(|n| !n.is_empty())
            .collect()
    }

    /// None when ready, else why not.
    pub fn not_ready(&self) -> Option<String> {
        if !self.electing.load(Ordering::Acquire) {
            return Some("not yet taking part in the leader election".into());
        }
        if !self.leading.load(Ordering::Acquire) {
            return None;
        }
        if !self.cloud_ok.load(Ordering::Acquire) {
            let why = self
                .cloud_problem
                .lock()
                .map(|p| p.clone())
                .unwrap_or_default();
            if why.is_empty() {
                return Some("OpenStack not checked yet (the startup check is running)".into());
            }
            return Some(why);
        }
        if !self.synced.load(Ordering::Acquire) {
            return Some("caches not synced yet (ClusterLinks, gateway index)".into());
        }
        None
    }
}

/// Bind `addr` (port 0 picks a free one) and serve in the background; returns the address
/// bound, which is logged so a test or a human finds it.
pub async fn serve(
    addr: SocketAddr,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr).await?;
    let bound = listener.local_addr()?;
    info!(address = %bound, "serving /healthz, /readyz and /metrics");
    tokio::spawn(async move {
        loop {
            let (stream, _) = match listener.accept().await {
                Ok(s) => s,
                Err(e) => {
                    debug!(error = %e, "accepting a health/metrics connection failed");
                    continue;
                }
            };
            let (health, metrics) = (health.clone(), metrics.clone());
            tokio::spawn(async move {
                let service = hyper::service::service_fn(move |req| {
                    let answer = answer(&req, &health, &metrics);
                    async move { Ok::<_, Infallible>(answer) }
                });
                if let Err(e) = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await
                {
                    debug!(error = %e, "health/metrics connection ended with an error");
                }
            });
        }
    });
    Ok(bound)
}

fn answer(req: &Request<Incoming>, health: &Health, metrics: &Metrics) -> Response<Full<Bytes>> {
    let text = |status: StatusCode, content_type: &str, body: String| {
        let mut r = Response::new(Full::new(Bytes::from(body)));
        *r.status_mut() = status;
        if let Ok(v) = content_type.parse() {
            r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
        }
        r
    };
    if req.method() != Method::GET && req.method() != Method::HEAD {
        return text(
            StatusCode::METHOD_NOT_ALLOWED,
            "text/plain",
            "GET only\n".into(),
        );
    }
    match req.uri().path() {
        "/healthz" | "/livez" => text(StatusCode::OK, "text/plain", "ok\n".into()),
        "/readyz" => {
            let notes: String = health.notes().iter().map(|n| format!("{n}\n")).collect();
            match health.not_ready() {
                None => text(StatusCode::OK, "text/plain", format!("ok\n{notes}")),
                Some(why) => text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "text/plain",
                    format!("{why}\n{notes}"),
                ),
            }
        }
        "/metrics" => text(
            StatusCode::OK,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
            metrics.encode(),
        ),
        _ => text(StatusCode::NOT_FOUND, "text/plain", "not found\n".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standby_is_ready_and_a_leader_needs_cloud_and_caches() {
        let h = Health::default();
        assert!(h.not_ready().unwrap().contains("leader election"));
        h.set_electing(true);
        assert_eq!(h.not_ready(), None, "a standby can take over");
        h.set_leading(true);
        assert!(h.not_ready().unwrap().contains("not checked yet"));
        h.set_cloud(Some("Keystone: connection refused".into()));
        let why = h.not_ready().unwrap();
        assert!(why.contains("connection refused"), "{why}");
        h.set_cloud(None);
        assert!(h.not_ready().unwrap().contains("caches"));
        h.set_synced(true);
        assert_eq!(h.not_ready(), None);
        h.set_leading(false);
        h.set_leading(true);
        assert!(
            h.not_ready().is_some(),
            "a new term waits for its own caches"
        );
    }

    #[test]
    fn a_credential_note_is_shown_and_never_makes_the_replica_not_ready() {
        let h = Health::default();
        h.set_electing(true);
        h.set_leading(true);
        h.set_cloud(None);
        h.set_synced(true);
        assert!(h.notes().is_empty());
        h.set_credential_note(Some(
            "warning: the operator's own credential is privileged".into(),
        ));
        assert_eq!(h.not_ready(), None);
        assert_eq!(
            h.notes(),
            vec!["warning: the operator's own credential is privileged".to_string()]
        );
        h.set_credential_note(None);
        assert!(h.notes().is_empty());
    }
}
