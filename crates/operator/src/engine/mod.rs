//! One reconcile of one ClusterLink against the cloud, and its unwind on delete.
//!
//! Steps run in the spec's order, each owning one condition: Validated → LegAttached →
//! RouteInstalled → ReverseRoutesInstalled, then Ready. A failing step sets its own
//! condition False and the later ones Unknown/Blocked; nothing after it touches the cloud.

mod cleanup;
mod leg;
mod report;
mod routes;
mod validate;

use std::net::Ipv4Addr;

use bnerd_api::gateway::ReverseTarget;
use bnerd_api::{ClusterLinkSpec, ClusterLinkStatus, ConditionType, Reason};
use bnerd_cloud::fabric::Fabric;
use bnerd_cloud::{CloudError, Neutron};
use ipnet::Ipv4Net;

pub use cleanup::cleanup;
pub use report::{Transition, transitions};

/// What another ClusterLink claims, as seen in the informer cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub name: String,
    pub transit_ips: Vec<Ipv4Addr>,
    pub cidr: Option<Ipv4Net>,
    /// Its gateway route is installed (status proves it).
    pub route_installed: bool,
    /// RFC 3339 creation time, for a stable winner between two overlapping new links.
    pub created: String,
}

/// Everything a reconcile reads besides the cloud.
pub struct Input<'a> {
    pub name: &'a str,
    pub uid: &'a str,
    pub generation: Option<i64>,
    pub created: String,
    pub spec: &'a ClusterLinkSpec,
    pub status: &'a ClusterLinkStatus,
    pub peers: &'a [Peer],
    /// Gateways needing a reverse route on this link's service router.
    pub reverse_targets: &'a [ReverseTarget],
}

/// When to look again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Converged or failed terminally: next look at the resync interval.
    Resync,
    /// A transient failure: back off and try again.
    Backoff,
}

/// The result of one reconcile: the full status to write and what to say about it.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: ClusterLinkStatus,
    pub retry: Retry,
    /// Actions worth an Event beyond condition changes (adoption, creation, removal).
    pub actions: Vec<(String, String)>,
}

/// A step that could not finish.
#[derive(Debug, Clone)]
pub(crate) struct StepFail {
    pub reason: Reason,
    pub message: String,
    pub retryable: bool,
}

impl StepFail {
    pub fn terminal(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            retryable: false,
        }
    }

    pub fn cloud(reason: Reason, context: &str, e: &CloudError) -> Self {
        Self {
            reason,
            message: format!("{context}: {e}"),
            retryable: e.is_retryable(),
        }
    }
}

/// The cloud side of the operator: one Neutron credential and the fabric it serves.
pub struct Engine<'a> {
    pub net: &'a dyn Neutron,
    pub fabric: &'a Fabric,
}

impl Engine<'_> {
    /// Converge one link. Never fails: every problem becomes a condition.
    pub async fn reconcile(&self, input: &Input<'_>) -> Outcome {
        let mut r = report::Report::new(input);
        let spec = input.spec;

        let valid = match validate::validate(spec, self.fabric.transit_subnet) {
            Ok(v) => v,
            Err(message) => {
                r.fail(
                    ConditionType::Validated,
                    StepFail::terminal(Reason::InvalidSpec, message),
                );
                return r.finish();
            }
        };
        r.pass(ConditionType::Validated, Reason::Valid, "spec is valid");

        if spec.credentials_secret_ref.is_some() {
            // Cross-tenant links need the customer's credential for every leg-side call;
            // until that path exists, touch nothing rather than build in the wrong project.
            r.fail(
                ConditionType::LegAttached,
                StepFail::terminal(
                    Reason::Blocked,
                    "cross-tenant ClusterLinks (spec.credentialsSecretRef) are not supported by this operator build; nothing was changed",
                ),
            );
            return r.finish();
        }

        let leg = match leg::ensure(self, input, &valid, &mut r).await {
            Ok(leg) => leg,
            Err(f) => {
                r.fail(ConditionType::LegAttached, f);
                return r.finish();
            }
        };
        r.pass(
            ConditionType::LegAttached,
            Reason::Attached,
            format!(
                "leg port {} at {} attached to router {}",
                leg.port_id, leg.ip, leg.router_id
            ),
        );

        match routes::ensure_gateway_route(self, input, &valid, &leg, &mut r).await {
            Ok(msg) => r.pass(ConditionType::RouteInstalled, Reason::Installed, msg),
            Err(f) => r.fail(ConditionType::RouteInstalled, f),
        }
        // Reverse routes do not depend on the forward route: a broken one never reads as the
        // forward path being down, and vice versa.
        match routes::ensure_reverse_routes(self, input, &leg, &mut r).await {
            Ok(msg) => r.pass(
                ConditionType::ReverseRoutesInstalled,
                Reason::Installed,
                msg,
            ),
            Err(f) => r.fail(ConditionType::ReverseRoutesInstalled, f),
        }
        r.finish()
    }
}

/// The leg as it stands after LegAttached passed.
#[derive(Debug, Clone)]
pub(crate) struct Leg {
    pub port_id: String,
    pub ip: Ipv4Addr,
    pub router_id: String,
    /// Routers already read this reconcile (their routes are current).
    pub seen: leg::Seen,
}
