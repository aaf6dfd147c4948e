//! The operator's Prometheus metrics (prometheus-client), served by `serve` at `/metrics`.
//!
//! Labels are bounded: results, condition types and reasons, OpenStack operations with their
//! identifiers replaced (`bnerd_cloud::observe::operation`), HTTP codes, and link names (one
//! series per condition type and status of each existing link, removed when the link goes).
//! No CIDR, address or cloud ID is ever a label.

use std::sync::Arc;
use std::time::Duration;

use bnerd_cloud::observe::{Call, CallObserver};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FailureLabels {
    pub condition: String,
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub service: &'static str,
    pub operation: String,
    pub code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConditionLabels {
    pub clusterlink: String,
    pub r#type: String,
    pub status: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PathLabel {
    pub path: &'static str,
}

/// How a reconcile ended, as the `result` label.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReconcileResult {
    /// Converged (or unwound); next look at the resync interval.
    Ok,
    /// A condition is not True yet; retried with backoff or after a set delay.
    Retry,
    /// The reconcile itself failed (Kubernetes API, finalizer, an unwind that must be retried).
    Error,
}

impl ReconcileResult {
    fn label(self) -> ResultLabel {
        ResultLabel {
            result: match self {
                ReconcileResult::Ok => "ok",
                ReconcileResult::Retry => "retry",
                ReconcileResult::Error => "error",
            },
        }
    }
}

const STATUSES: [&str; 3] = ["True", "False", "Unknown"];

pub struct Metrics {
    registry: Registry,
    reconciles: Family<ResultLabel, Counter>,
    reconcile_duration: Family<ResultLabel, Histogram>,
    failures: Family<FailureLabels, Counter>,
    openstack: Family<CallLabels, Counter>,
    conditions: Family<ConditionLabels, Gauge>,
    drift_repairs: Family<KindLabel, Counter>,
    resyncs: Family<PathLabel, Counter>,
    reverse_route_failures: Family<ReasonLabel, Counter>,
    probe_unavailable: Counter,
    leader: Gauge,
    fabric_ok: Gauge,
    credential_privileged: Gauge,
    credential_probe_unavailable: Gauge,
    drift_checks: Family<ResultLabel, Counter>,
    drifted: Counter,
    quota_used: Family<ResourceLabel, Gauge>,
    quota_limit: Family<ResourceLabel, Gauge>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResourceLabel {
    pub resource: String,
}

fn duration_histogram() -> Histogram {
    // 10 ms .. ~80 s: a resync is a few reads, a converge a few writes, a slow cloud more.
    Histogram::new(exponential_buckets(0.01, 2.0, 14))
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = Registry::default();
        let reconciles = Family::<ResultLabel, Counter>::default();
        let reconcile_duration =
            Family::<ResultLabel, Histogram>::new_with_constructor(duration_histogram as fn() -> _);
        let failures = Family::<FailureLabels, Counter>::default();
        let openstack = Family::<CallLabels, Counter>::default();
        let conditions = Family::<ConditionLabels, Gauge>::default();
        let drift_repairs = Family::<KindLabel, Counter>::default();
        let resyncs = Family::<PathLabel, Counter>::default();
        let reverse_route_failures = Family::<ReasonLabel, Counter>::default();
        let probe_unavailable = Counter::default();
        let leader = Gauge::default();
        let fabric_ok = Gauge::default();
        let credential_privileged = Gauge::default();
        let credential_probe_unavailable = Gauge::default();
        let drift_checks = Family::<ResultLabel, Counter>::default();
        let drifted = Counter::default();
        let quota_used = Family::<ResourceLabel, Gauge>::default();
        let quota_limit = Family::<ResourceLabel, Gauge>::default();
        registry.register(
            "bnerd_capacity_used",
            "What the operator's project uses of a Neutron quota resource it creates (network, subnet, port, router, rbac_policy), and the routes on the gateway router, at the last fabric check",
            quota_used.clone(),
        );
        registry.register(
            "bnerd_capacity_limit",
            "The limit of each bnerd_capacity_used row (-1: unlimited); for the gateway router's routes the router_route quota, or Neutron's default max_routes where the cloud does not tell",
            quota_limit.clone(),
        );
        registry.register(
            "bnerd_reconciles",
            "ClusterLink reconciles by result (ok, retry, error)",
            reconciles.clone(),
        );
        registry.register(
            "bnerd_reconcile_duration_seconds",
            "Time one ClusterLink reconcile took, by result",
            reconcile_duration.clone(),
        );
        registry.register(
            "bnerd_reconcile_failures",
            "Reconciles that left a condition False, by condition type and reason",
            failures.clone(),
        );
        registry.register(
            "bnerd_openstack_requests",
            "OpenStack API requests sent, by service, operation and HTTP status (error: no answer)",
            openstack.clone(),
        );
        registry.register(
            "bnerd_clusterlink_condition",
            "1 for each ClusterLink's current status of each condition type, 0 for the others",
            conditions.clone(),
        );
        registry.register(
            "bnerd_drift_repairs",
            "Out-of-band changes self-heal repaired on a Ready link, by what was missing",
            drift_repairs.clone(),
        );
        registry.register(
            "bnerd_resyncs",
            "Resyncs of converged links by path: snapshot (no call), replayed (route writes only), per_link (fresh reads)",
            resyncs.clone(),
        );
        registry.register(
            "bnerd_reverse_route_failures",
            "ClusterLinks whose ReverseRoutesInstalled turned False, by reason (Ready is not affected)",
            reverse_route_failures.clone(),
        );
        registry.register(
            "bnerd_privilege_probe_unavailable",
            "Customer credentials admitted on the role-name check alone: the cloud does not serve the privilege probe (404/501)",
            probe_unavailable.clone(),
        );
        registry.register(
            "bnerd_leader",
            "1 while this replica holds the leader lease and reconciles",
            leader.clone(),
        );
        registry.register(
            "bnerd_fabric_check_ok",
            "1 when the last fabric check (transit network, subnet, gateway router leg) passed",
            fabric_ok.clone(),
        );
        registry.register(
            "bnerd_operator_credential_privileged",
            "1 when the last check found the operator's own OpenStack credential privileged (a role named admin, service or advsvc, or the admin-only privilege probe allowed)",
            credential_privileged.clone(),
        );
        registry.register(
            "bnerd_operator_credential_probe_unavailable",
            "1 when the privilege probe on the operator's own credential could not run at the last check (only the role-name check was made)",
            credential_probe_unavailable.clone(),
        );
        registry.register(
            "bnerd_drift_checks",
            "Drift checks between resyncs (two reads for the whole estate each), by result (ok, failed)",
            drift_checks.clone(),
        );
        registry.register(
            "bnerd_drift_links",
            "Links a drift check found without their recorded gateway route, leg, edge leg or edge route",
            drifted.clone(),
        );
        Self {
            registry,
            reconciles,
            reconcile_duration,
            failures,
            openstack,
            conditions,
            drift_repairs,
            resyncs,
            reverse_route_failures,
            probe_unavailable,
            leader,
            fabric_ok,
            credential_privileged,
            credential_probe_unavailable,
            drift_checks,
            drifted,
            quota_used,
            quota_limit,
        }
    }

    /// The OpenMetrics text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Writing into a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }

    pub fn reconciled(&self, result: ReconcileResult, took: Duration) {
        let l = result.label();
        self.reconciles.get_or_create(&l).inc();
        self.reconcile_duration
            .get_or_create(&l)
            .observe(took.as_secs_f64());
    }

    /// A link's conditions after a reconcile: the state gauges, and one failure per False
    /// condition (Ready only summarises the others, so it is not counted again).
    pub fn link_conditions(&self, link: &str, conditions: &[Condition]) {
        // A type the status no longer carries (a cross-tenant spec made same-tenant) would
        // otherwise keep its last value for good.
        for t in bnerd_api::ConditionType::ALL {
            if !conditions.iter().any(|c| c.type_ == t.as_str()) {
                self.forget_type(link, t.as_str());
            }
        }
        for c in conditions {
            for s in STATUSES {
                let labels = ConditionLabels {
                    clusterlink: link.to_string(),
                    r#type: c.type_.clone(),
                    status: s,
                };
                self.conditions
                    .get_or_create(&labels)
                    .set(i64::from(c.status == s));
            }
            if c.status == "False" && c.type_ != bnerd_api::ConditionType::Ready.as_str() {
                self.failures
                    .get_or_create(&FailureLabels {
                        condition: c.type_.clone(),
                        reason: c.reason.clone(),
                    })
                    .inc();
            }
        }
    }

    /// A link that is gone takes its series with it: every condition type it may have had,
    /// not only those of the status at hand (a cross-tenant link's credential conditions, a
    /// spec edited from cross- to same-tenant).
    pub fn forget_link(&self, link: &str) {
        for t in bnerd_api::ConditionType::ALL {
            self.forget_type(link, t.as_str());
        }
    }

    fn forget_type(&self, link: &str, type_: &str) {
        for s in STATUSES {
            self.conditions.remove(&ConditionLabels {
                clusterlink: link.to_string(),
                r#type: type_.to_string(),
                status: s,
            });
        }
    }

    pub fn drift_repaired(&self, kind: &'static str) {
        self.drift_repairs.get_or_create(&KindLabel { kind }).inc();
    }

    /// A converged link's resync went `path`: `snapshot`, `replayed` or `per_link`.
    pub fn resynced(&self, path: &'static str) {
        self.resyncs.get_or_create(&PathLabel { path }).inc();
    }

    /// A link's ReverseRoutesInstalled turned False (once per transition, not per retry).
    pub fn reverse_routes_failed(&self, reason: &str) {
        self.reverse_route_failures
            .get_or_create(&ReasonLabel {
                reason: reason.to_string(),
            })
            .inc();
    }

    /// A customer credential was admitted without the privilege probe (not served here).
    pub fn privilege_probe_unavailable(&self) {
        self.probe_unavailable.inc();
    }

    pub fn set_leader(&self, leader: bool) {
        self.leader.set(i64::from(leader));
    }

    pub fn set_fabric_ok(&self, ok: bool) {
        self.fabric_ok.set(i64::from(ok));
    }

    /// A drift check ran: whether its reads succeeded, and how many links it found drifted.
    pub fn drift_checked(&self, ok: bool, drifted: usize) {
        let result = if ok { "ok" } else { "failed" };
        self.drift_checks
            .get_or_create(&ResultLabel { result })
            .inc();
        self.drifted.inc_by(drifted as u64);
    }

    /// What the last capacity read found, one series per row (bounded: the watched quota
    /// resources and the gateway router's routes).
    pub fn set_capacity(&self, rows: &[crate::engine::plan::capacity::Row]) {
        for r in rows {
            let label = ResourceLabel {
                resource: r.resource.clone(),
            };
            self.quota_used
                .get_or_create(&label)
                .set(i64::try_from(r.used).unwrap_or(i64::MAX));
            self.quota_limit
                .get_or_create(&label)
                .set(r.limit.map_or(-1, |l| i64::try_from(l).unwrap_or(i64::MAX)));
        }
    }

    /// What the last check found about the operator's own credential.
    pub fn set_operator_credential(&self, privileged: bool, probe_unavailable: bool) {
        self.credential_privileged.set(i64::from(privileged));
        self.credential_probe_unavailable
            .set(i64::from(probe_unavailable));
    }
}

/// Feeds `bnerd_openstack_requests_total` from the OpenStack client.
pub struct CloudCalls(pub Arc<Metrics>);

impl CallObserver for CloudCalls {
    fn observe(&self, call: &Call<'_>) {
        self.0
            .openstack
            .get_or_create(&CallLabels {
                service: call.service.as_str(),
                operation: call.operation.to_string(),
                code: call
                    .status
                    .map_or_else(|| "error".to_string(), |c| c.to_string()),
            })
            .inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn condition(type_: &str, status: &str, reason: &str) -> Condition {
        Condition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: "m".into(),
            observed_generation: None,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
        }
    }

    #[test]
    fn conditions_are_one_series_per_status_and_go_with_the_link() {
        let m = Metrics::new();
        let conds = [
            condition("LegAttached", "False", "RouterNotFound"),
            condition("Ready", "False", "NotReady"),
        ];
        m.link_conditions("a", &conds);
        let text = m.encode();
        assert!(
            text.contains(
                r#"bnerd_clusterlink_condition{clusterlink="a",type="LegAttached",status="False"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains(
            r#"bnerd_clusterlink_condition{clusterlink="a",type="LegAttached",status="True"} 0"#
        ));
        assert!(text.contains(
            r#"bnerd_reconcile_failures_total{condition="LegAttached",reason="RouterNotFound"} 1"#
        ));
        assert!(!text.contains(r#"condition="Ready""#), "{text}");
        // A later status with a type the first lacked (a cross-tenant credential that failed) goes too.
        m.link_conditions(
            "a",
            &[condition("CredentialsResolved", "False", "AuthFailed")],
        );
        let text = m.encode();
        assert!(text.contains(r#"clusterlink="a",type="CredentialsResolved""#));
        assert!(
            !text.contains(r#"clusterlink="a",type="LegAttached""#),
            "{text}"
        );
        m.link_conditions("a", &conds);
        m.forget_link("a");
        assert!(!m.encode().contains(r#"clusterlink="a""#));
    }

    #[test]
    fn calls_results_and_flags_are_exposed() {
        let m = Arc::new(Metrics::new());
        let calls = CloudCalls(m.clone());
        calls.observe(&Call {
            service: bnerd_cloud::observe::Service::Neutron,
            operation: "GET /v2.0/ports",
            status: Some(200),
        });
        calls.observe(&Call {
            service: bnerd_cloud::observe::Service::Keystone,
            operation: "POST /v3/auth/tokens",
            status: None,
        });
        m.reconciled(ReconcileResult::Retry, Duration::from_millis(30));
        m.set_leader(true);
        m.set_fabric_ok(false);
        m.set_operator_credential(true, false);
        m.drift_repaired("gateway_route");
        m.resynced("snapshot");
        m.reverse_routes_failed("EnsureReverseRoutesFailed");
        m.privilege_probe_unavailable();
        let text = m.encode();
        for want in [
            r#"bnerd_openstack_requests_total{service="neutron",operation="GET /v2.0/ports",code="200"} 1"#,
            r#"bnerd_openstack_requests_total{service="keystone",operation="POST /v3/auth/tokens",code="error"} 1"#,
            r#"bnerd_reconciles_total{result="retry"} 1"#,
            r#"bnerd_reconcile_duration_seconds_count{result="retry"} 1"#,
            "bnerd_leader 1",
            "bnerd_fabric_check_ok 0",
            "bnerd_operator_credential_privileged 1",
            "bnerd_operator_credential_probe_unavailable 0",
            r#"bnerd_drift_repairs_total{kind="gateway_route"} 1"#,
            r#"bnerd_resyncs_total{path="snapshot"} 1"#,
            r#"bnerd_reverse_route_failures_total{reason="EnsureReverseRoutesFailed"} 1"#,
            "bnerd_privilege_probe_unavailable_total 1",
            "# EOF",
        ] {
            assert!(text.contains(want), "{want} missing from\n{text}");
        }
    }
}
