//! The leader's first contact with the cloud, and the fabric checks that follow it.
//!
//! A cloud that does not answer when the pod starts is weather: the operator retries with
//! backoff and reports not ready instead of exiting (a crash loop would only add restarts to
//! the outage). The fabric checks (transit network not shared, one subnet, the gateway
//! router's leg, the extensions) run again at every resync interval: a fabric changed by hand
//! later is reported by an Event and `bnerd_fabric_check_ok`, once per change.

use std::sync::Arc;
use std::time::Duration;

use bnerd_api::EventReason;
use bnerd_cloud::fabric::{Fabric, FabricError};
use bnerd_cloud::{Identity, OpenStack};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use tracing::{info, warn};

use crate::config::Config;
use crate::engine::OperatorIdentity;
use crate::health::Health;
use crate::metrics::Metrics;

/// Longest wait between two startup attempts.
pub const MAX_RETRY: Duration = Duration::from_secs(60);

/// What a check found wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub message: String,
    /// The cloud did not answer (as opposed to answering that the fabric is wrong).
    pub unreachable: bool,
}

impl Problem {
    /// What /readyz says: a cloud that did not answer is not a fabric set up wrong.
    pub fn readiness(&self) -> String {
        if self.unreachable {
            format!(
                "OpenStack not reachable at the last check: {}",
                self.message
            )
        } else {
            format!("the startup check failed: {}", self.message)
        }
    }
}

async fn check(cloud: &OpenStack, config: &Config) -> Result<(Fabric, OperatorIdentity), Problem> {
    let mut fabric = Fabric::discover(cloud, &config.transit_network_id, &config.gateway_router_id)
        .await
        .map_err(|e: FabricError| Problem {
            unreachable: e.is_unreachable(),
            message: e.to_string(),
        })?;
    let token = cloud.token_info().await.map_err(|e| Problem {
        unreachable: e.is_retryable(),
        message: format!("operator credential: {e}"),
    })?;
    if token.project_id != fabric.operator_project_id {
        warn!(
            operator_project = %token.project_id,
            transit_network_project = %fabric.operator_project_id,
            "the transit network belongs to another project than the operator credential's; same-tenant legs are the operator project's ports"
        );
    }
    // A same-tenant leg is a port in the project the operator's creates land in.
    fabric.operator_project_id = token.project_id.clone();
    fabric.admission = config.admission.clone();
    let operator = OperatorIdentity {
        project_id: token.project_id,
        auth_url: cloud.auth_config().auth_url.clone(),
        region: cloud.auth_config().region.clone(),
    };
    Ok((fabric, operator))
}

/// Check the fabric and learn the operator's project, retrying until both succeed.
pub async fn connect(
    cloud: &OpenStack,
    config: &Config,
    health: &Health,
    metrics: &Metrics,
) -> (Fabric, OperatorIdentity) {
    let mut retry = Duration::from_secs(1);
    loop {
        match check(cloud, config).await {
            Ok((fabric, operator)) => {
                health.set_cloud(None);
                metrics.set_fabric_ok(true);
                info!(
                    transit_network = %fabric.transit_network_id,
                    subnet = %fabric.transit_subnet,
                    gateway_router = %fabric.gateway_router_id,
                    extraroute_atomic = fabric.extraroute_atomic,
                    revision_if_match = fabric.revision_if_match,
                    tags_at_create = fabric.tags_at_create,
                    "fabric checked"
                );
                return (fabric, operator);
            }
            Err(p) => {
                warn!(retry_in = ?retry, unreachable = p.unreachable, "startup check failed: {}", p.message);
                health.set_cloud(Some(p.readiness()));
                metrics.set_fabric_ok(false);
                tokio::time::sleep(retry).await;
                retry = (retry * 2).min(MAX_RETRY);
            }
        }
    }
}

/// What a fabric check changes: the Event to publish, if any, and the state to remember.
/// Pure, so the once-per-change rule is tested without a cloud.
pub fn fabric_transition(
    before: Option<&Problem>,
    now: Option<&Problem>,
) -> Option<(EventType, &'static str, String)> {
    match (before, now) {
        (None, None) => None,
        (Some(_), None) => Some((
            EventType::Normal,
            EventReason::FabricCheckPassed.as_str(),
            "the transit network, its subnet and the gateway router's leg check out again".into(),
        )),
        (b, Some(p)) if b == Some(p) => None,
        (_, Some(p)) => Some((
            EventType::Warning,
            if p.unreachable {
                EventReason::FabricCheckUnreachable
            } else {
                EventReason::FabricCheckFailed
            }
            .as_str(),
            p.message.clone(),
        )),
    }
}

/// What differs between the fabric the reconciles use (read at startup) and the one found
/// now, if anything. The controller keeps the startup facts for its whole term, so a changed
/// subnet or extension set is a problem to report until the operator is restarted.
pub fn changed_since(start: &Fabric, now: &Fabric) -> Option<String> {
    let mut what = vec![];
    if (&start.transit_subnet_id, start.transit_subnet)
        != (&now.transit_subnet_id, now.transit_subnet)
    {
        what.push(format!(
            "transit subnet {} ({}) is now {} ({})",
            start.transit_subnet_id,
            start.transit_subnet,
            now.transit_subnet_id,
            now.transit_subnet
        ));
    }
    let flags = |f: &Fabric| {
        [
            (bnerd_cloud::fabric::EXTRAROUTE_ATOMIC, f.extraroute_atomic),
            (bnerd_cloud::fabric::REVISION_IF_MATCH, f.revision_if_match),
            (bnerd_cloud::fabric::TAGS_AT_CREATE, f.tags_at_create),
        ]
    };
    for ((name, was), (_, is)) in flags(start).into_iter().zip(flags(now)) {
        if was != is {
            let how = if is { "loaded" } else { "no longer loaded" };
            what.push(format!("Neutron extension {name} is {how}"));
        }
    }
    (!what.is_empty()).then(|| {
        format!(
            "the fabric changed since this operator started: {}; restart it to use the new one (kubectl rollout restart)",
            what.join(", ")
        )
    })
}

/// Re-run the fabric checks every resync interval, forever (the caller drops it). `start`
/// is the fabric the reconciles were given.
pub async fn watch_fabric(
    cloud: Arc<OpenStack>,
    config: Config,
    start: Fabric,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    events: Option<(Recorder, ObjectReference)>,
) {
    let mut last: Option<Problem> = None;
    loop {
        tokio::time::sleep(config.resync_interval).await;
        let now = match check(&cloud, &config).await {
            Ok((fabric, _)) => changed_since(&start, &fabric).map(|message| Problem {
                message,
                unreachable: false,
            }),
            Err(p) => Some(p),
        };
        health.set_cloud(
            now.as_ref()
                .filter(|p| p.unreachable)
                .map(Problem::readiness),
        );
        metrics.set_fabric_ok(now.is_none());
        if let Some((type_, reason, note)) = fabric_transition(last.as_ref(), now.as_ref()) {
            if type_ == EventType::Warning {
                warn!(reason, "fabric check: {note}");
            } else {
                info!(reason, "fabric check: {note}");
            }
            if let Some((recorder, reference)) = &events {
                let ev = Event {
                    type_,
                    reason: reason.into(),
                    note: Some(note.chars().take(1000).collect()),
                    action: "FabricCheck".into(),
                    secondary: None,
                };
                if let Err(e) = recorder.publish(&ev, reference).await {
                    warn!(error = %e, "publishing the fabric check event failed");
                }
            }
        }
        last = now;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(m: &str, unreachable: bool) -> Problem {
        Problem {
            message: m.into(),
            unreachable,
        }
    }

    #[test]
    fn one_event_per_change_of_the_fabric() {
        assert_eq!(fabric_transition(None, None), None);
        let shared = p("transit network n is shared", false);
        let (t, r, note) = fabric_transition(None, Some(&shared)).unwrap();
        assert_eq!((t, r), (EventType::Warning, "FabricCheckFailed"));
        assert!(note.contains("shared"));
        assert_eq!(
            fabric_transition(Some(&shared), Some(&shared)),
            None,
            "the same problem again is not news"
        );
        let down = p("connection refused", true);
        let (_, r, _) = fabric_transition(Some(&shared), Some(&down)).unwrap();
        assert_eq!(r, "FabricCheckUnreachable");
        let (t, r, _) = fabric_transition(Some(&down), None).unwrap();
        assert_eq!((t, r), (EventType::Normal, "FabricCheckPassed"));
    }

    #[test]
    fn readiness_tells_an_unanswered_cloud_from_a_wrong_fabric() {
        let down = p(
            "Keystone, for the operator's own token: connection refused",
            true,
        );
        assert!(
            down.readiness()
                .starts_with("OpenStack not reachable at the last check: Keystone")
        );
        let shared = p("transit network n is shared", false);
        assert_eq!(
            shared.readiness(),
            "the startup check failed: transit network n is shared"
        );
    }

    fn fabric() -> Fabric {
        Fabric {
            transit_network_id: "n".into(),
            transit_subnet_id: "s".into(),
            transit_subnet: "10.254.0.0/24".parse().unwrap(),
            gateway_router_id: "gw".into(),
            operator_project_id: "op".into(),
            extraroute_atomic: true,
            revision_if_match: true,
            tags_at_create: false,
            admission: Default::default(),
        }
    }

    #[test]
    fn a_fabric_changed_under_a_running_operator_is_named() {
        assert_eq!(changed_since(&fabric(), &fabric()), None);
        let mut now = fabric();
        now.transit_subnet_id = "s2".into();
        now.transit_subnet = "10.253.0.0/24".parse().unwrap();
        now.extraroute_atomic = false;
        now.tags_at_create = true;
        let why = changed_since(&fabric(), &now).unwrap();
        assert!(
            why.contains("transit subnet s (10.254.0.0/24) is now s2 (10.253.0.0/24)")
                && why.contains("extraroute-atomic is no longer loaded")
                && why.contains("tag-ports-during-bulk-creation is loaded")
                && !why.contains("revision-if-match")
                && why.contains("restart"),
            "{why}"
        );
    }
}
