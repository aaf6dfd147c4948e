//! The leader's first contact with the cloud, and the fabric checks that follow it.
//!
//! A cloud that does not answer when the pod starts is weather: the operator retries with
//! backoff and reports not ready instead of exiting (a crash loop would only add restarts to
//! the outage). The fabric checks (transit network not shared, one subnet, the gateway
//! router's leg, the extensions) run again at every resync interval: a fabric changed by hand
//! later is reported by an Event and `bnerd_fabric_check_ok`, once per change.
//!
//! Each check also asks what the operator's own credential may do: the role-name check and
//! the privilege probe a customer credential gets (`plan::credentials`). A privileged one is
//! not fatal: it is a Warning Event on the operator's Pod (once per change), a `/readyz` line
//! and `bnerd_operator_credential_privileged`.

use std::sync::Arc;
use std::time::Duration;

use bnerd_api::EventReason;
use bnerd_cloud::fabric::{Fabric, FabricError};
use bnerd_cloud::{Identity, Neutron, OpenStack};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType, Recorder};
use tracing::{info, warn};

use crate::config::Config;
use crate::engine::OperatorIdentity;
use crate::engine::plan::capacity;
use crate::engine::plan::credentials::{OperatorPrivilege, operator_privilege, privileged_role};
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

/// What one check learnt: the fabric, who the operator is, and what its credential may do.
struct Checked {
    fabric: Fabric,
    operator: OperatorIdentity,
    privilege: OperatorPrivilege,
    /// The capacity rows, or why the quota could not be read.
    capacity: Result<Vec<capacity::Row>, String>,
}

async fn check(cloud: &OpenStack, config: &Config) -> Result<Checked, Problem> {
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
    fabric.customer_transit = config.per_customer_transit;
    if let Some(pool) = &fabric.customer_transit {
        pool.clear_of(fabric.transit_subnet).map_err(|e| Problem {
            unreachable: false,
            message: format!("{}: {}", e.setting, e.message),
        })?;
    }
    // The probe only when the names pass, as for a customer credential: one read per check.
    let probe = match privileged_role(&token.roles) {
        Some(_) => None,
        None => Some(cloud.probe_admin_read().await),
    };
    let privilege = operator_privilege(&token.roles, probe.as_ref());
    // One read: the project's own quota details (a member may read its own project's).
    let capacity = cloud
        .quota_details(&token.project_id)
        .await
        .map(|q| capacity::rows(&q, fabric.gateway_routes))
        .map_err(|e| e.to_string());
    let operator = OperatorIdentity {
        project_id: token.project_id,
        auth_url: cloud.auth_config().auth_url.clone(),
        region: cloud.auth_config().region.clone(),
    };
    Ok(Checked {
        fabric,
        operator,
        privilege,
        capacity,
    })
}

/// Where the operator's own Events go (its Pod, else its Lease), when it knows.
pub type EventTarget = (Recorder, ObjectReference);

async fn publish(events: Option<&EventTarget>, type_: EventType, reason: &str, note: &str) {
    if let Some((recorder, reference)) = events {
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

/// The Event a credential finding is worth: a Warning when it turns privileged (or why it
/// is changes), nothing otherwise. Pure, so the once-per-change rule is tested without a
/// cloud.
pub fn privilege_transition(
    before: Option<&OperatorPrivilege>,
    now: &OperatorPrivilege,
) -> Option<(EventType, &'static str, String)> {
    match now {
        OperatorPrivilege::Privileged(why) if before != Some(now) => Some((
            EventType::Warning,
            EventReason::OperatorCredentialPrivileged.as_str(),
            why.clone(),
        )),
        _ => None,
    }
}

/// Report what a check found about the operator's credential: `/readyz`, the metrics, the
/// log and (on a change to privileged) the Event.
async fn report_privilege(
    before: Option<&OperatorPrivilege>,
    now: &OperatorPrivilege,
    health: &Health,
    metrics: &Metrics,
    events: Option<&EventTarget>,
) {
    health.set_credential_note(now.readiness_line());
    metrics.set_operator_credential(
        matches!(now, OperatorPrivilege::Privileged(_)),
        matches!(now, OperatorPrivilege::ProbeUnavailable(_)),
    );
    if before == Some(now) {
        return;
    }
    match now {
        OperatorPrivilege::Member => info!("the operator's own credential is not privileged"),
        OperatorPrivilege::Privileged(why) => warn!(
            reason = EventReason::OperatorCredentialPrivileged.as_str(),
            "{why}"
        ),
        OperatorPrivilege::ProbeUnavailable(why) => warn!("{why}"),
    }
    if let Some((type_, reason, note)) = privilege_transition(before, now) {
        publish(events, type_, reason, &note).await;
    }
}

/// The Warning a capacity reading is worth: one when the rows at 80 % or more of their limit
/// change and some are left (a row that drops below says nothing: the next Warning, if any,
/// lists what is still near). Pure, so the once-per-change rule is tested without a cloud.
pub fn capacity_transition(
    before: &[String],
    now: &[String],
) -> Option<(EventType, &'static str, String)> {
    (now != before && !now.is_empty()).then(|| {
        (
            EventType::Warning,
            EventReason::QuotaNearLimit.as_str(),
            format!(
                "the operator's project is near a limit, links that need more will be refused: {}",
                now.join("; ")
            ),
        )
    })
}

/// Report what a check read of the project's capacity: the gauges, `/readyz` at a reached
/// limit, and the Warning Event on a change.
async fn report_capacity(
    read: &Result<Vec<capacity::Row>, String>,
    project: &str,
    health: &Health,
    metrics: &Metrics,
    events: Option<&EventTarget>,
) {
    let rows = match read {
        Ok(rows) => rows,
        Err(e) => {
            // Not fatal: quotas are what Neutron enforces anyway, this is only the warning.
            warn!("reading the operator project's quota usage failed: {e}");
            return;
        }
    };
    metrics.set_capacity(rows);
    health.set_capacity_note(capacity::readiness_line(rows, project));
    let now = capacity::warnings(rows, project);
    let before = health.swap_capacity_warned(now.clone());
    if let Some((type_, reason, note)) = capacity_transition(&before, &now) {
        warn!(reason, "{note}");
        publish(events, type_, reason, &note).await;
    }
}

/// Check the fabric and learn the operator's project, retrying until both succeed; also
/// what its credential may do (reported, and returned for the later checks to compare).
pub async fn connect(
    cloud: &OpenStack,
    config: &Config,
    health: &Health,
    metrics: &Metrics,
    events: Option<&EventTarget>,
) -> (Fabric, OperatorIdentity, OperatorPrivilege) {
    let mut retry = Duration::from_secs(1);
    loop {
        match check(cloud, config).await {
            Ok(Checked {
                fabric,
                operator,
                privilege,
                capacity,
            }) => {
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
                report_privilege(None, &privilege, health, metrics, events).await;
                report_capacity(&capacity, &operator.project_id, health, metrics, events).await;
                return (fabric, operator, privilege);
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
/// is the fabric the reconciles were given, `privilege` what the startup check found about
/// the operator's credential.
pub async fn watch_fabric(
    cloud: Arc<OpenStack>,
    config: Config,
    start: Fabric,
    privilege: OperatorPrivilege,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    events: Option<EventTarget>,
) {
    let mut last: Option<Problem> = None;
    let mut privilege = privilege;
    loop {
        tokio::time::sleep(config.resync_interval).await;
        let now = match check(&cloud, &config).await {
            Ok(checked) => {
                report_privilege(
                    Some(&privilege),
                    &checked.privilege,
                    &health,
                    &metrics,
                    events.as_ref(),
                )
                .await;
                privilege = checked.privilege;
                report_capacity(
                    &checked.capacity,
                    &checked.operator.project_id,
                    &health,
                    &metrics,
                    events.as_ref(),
                )
                .await;
                changed_since(&start, &checked.fabric).map(|message| Problem {
                    message,
                    unreachable: false,
                })
            }
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
            publish(events.as_ref(), type_, reason, &note).await;
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
    fn one_capacity_warning_per_change_of_what_is_near() {
        let near = vec!["router: 8 of 10 (80 %)".to_string()];
        let nearer = vec!["router: 9 of 10 (90 %)".to_string()];
        assert_eq!(capacity_transition(&[], &[]), None);
        let (type_, reason, note) = capacity_transition(&[], &near).unwrap();
        assert_eq!((type_, reason), (EventType::Warning, "QuotaNearLimit"));
        assert!(note.ends_with("router: 8 of 10 (80 %)"), "{note}");
        assert_eq!(capacity_transition(&near, &near), None, "once per change");
        assert!(capacity_transition(&near, &nearer).is_some());
        assert_eq!(
            capacity_transition(&near, &[]),
            None,
            "room again is no Warning"
        );
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

    #[test]
    fn one_event_per_change_to_a_privileged_operator_credential() {
        let admin = OperatorPrivilege::Privileged("role \"admin\"".into());
        let (t, r, note) = privilege_transition(None, &admin).unwrap();
        assert_eq!((t, r), (EventType::Warning, "OperatorCredentialPrivileged"));
        assert!(note.contains("admin"));
        assert_eq!(privilege_transition(Some(&admin), &admin), None);
        assert_eq!(privilege_transition(None, &OperatorPrivilege::Member), None);
        let unavailable = OperatorPrivilege::ProbeUnavailable("HTTP 404".into());
        assert_eq!(
            privilege_transition(Some(&admin), &unavailable),
            None,
            "a probe that cannot run is no Event"
        );
        assert!(privilege_transition(Some(&unavailable), &admin).is_some());
    }

    fn fabric() -> Fabric {
        Fabric {
            transit_network_id: "n".into(),
            transit_subnet_id: "s".into(),
            transit_subnet: "10.254.0.0/24".parse().unwrap(),
            gateway_router_id: "gw".into(),
            gateway_routes: 0,
            operator_project_id: "op".into(),
            extraroute_atomic: true,
            revision_if_match: true,
            tags_at_create: false,
            router_subnets_by_cidr: false,
            admission: Default::default(),
            customer_transit: None,
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
