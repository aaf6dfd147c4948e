//! One reconcile of one ClusterLink against the cloud, and its unwind on delete.
//!
//! Steps run in the spec's order, each owning one condition: Validated → LegAttached →
//! RouteInstalled → ReverseRoutesInstalled, then Ready. Each step observes (reads only), a
//! pure function in `plan` decides (every condition reason is chosen there), the step acts on
//! that decision, and `report` turns the results into conditions. A failing step sets its own
//! condition False and the later ones Unknown; nothing after it touches the cloud.

mod gateway_route;
mod leg;
mod ops;
pub mod plan;
mod report;
mod reverse_routes;
mod unwind;

use std::net::Ipv4Addr;

use bnerd_api::gateway::ReverseTarget;
use bnerd_api::{ClusterLinkSpec, ClusterLinkStatus, ConditionType};
use bnerd_cloud::Neutron;
use bnerd_cloud::fabric::Fabric;
use ipnet::Ipv4Net;

pub use plan::StepFail;
pub use plan::reverse_routes::GatewayProblem;
pub use plan::unwind::UnwindPlan;
pub use report::{Transition, deleting_status, transitions};
pub use unwind::unwind;

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

/// Something the reconcile did to the cloud, worth an Event of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionKind {
    LegPortCreated,
    LegPortAdopted,
    LegAttached,
    LegMoved,
    DuplicateLegRemoved,
    RouteInstalled,
    RouteRemoved,
}

impl ActionKind {
    /// The Event reason.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionKind::LegPortCreated => "LegPortCreated",
            ActionKind::LegPortAdopted => "LegPortAdopted",
            ActionKind::LegAttached => "LegAttached",
            ActionKind::LegMoved => "LegMoved",
            ActionKind::DuplicateLegRemoved => "DuplicateLegRemoved",
            ActionKind::RouteInstalled => "RouteInstalled",
            ActionKind::RouteRemoved => "RouteRemoved",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    pub kind: ActionKind,
    pub note: String,
}

impl Action {
    pub(crate) fn new(kind: ActionKind, note: impl Into<String>) -> Self {
        Self {
            kind,
            note: note.into(),
        }
    }
}

/// The result of one reconcile: the full status to write and what to say about it.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: ClusterLinkStatus,
    pub retry: Retry,
    /// Actions worth an Event beyond condition changes (adoption, creation, removal).
    pub actions: Vec<Action>,
    /// Gateways whose reverse route could not be installed (a Warning Event on each).
    pub gateway_problems: Vec<GatewayProblem>,
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

        let valid = match plan::validated::plan(spec, self.fabric.transit_subnet) {
            Ok(v) => v,
            Err(f) => {
                r.fail(ConditionType::Validated, f);
                return r.finish();
            }
        };
        if spec.credentials_secret_ref.is_some() {
            r.fail(
                ConditionType::Validated,
                plan::validated::cross_tenant_unsupported(),
            );
            return r.finish();
        }
        r.pass(ConditionType::Validated, plan::validated::valid_message());

        let leg = match leg::ensure(self, input, &valid, &mut r.actions).await {
            Ok(leg) => leg,
            Err(f) => {
                r.fail(ConditionType::LegAttached, f);
                return r.finish();
            }
        };
        r.status.leg_port_id = Some(leg.port_id.clone());
        r.status.transit_ip = Some(leg.ip.to_string());
        r.status.service_router_id = Some(leg.router_id.clone());
        r.pass(
            ConditionType::LegAttached,
            format!(
                "leg port {} at {} attached to router {}",
                leg.port_id, leg.ip, leg.router_id
            ),
        );

        match gateway_route::ensure(self, input, &valid, &leg, &mut r.actions).await {
            Ok((msg, route)) => {
                r.status.gateway_route = Some(route);
                r.pass(ConditionType::RouteInstalled, msg);
            }
            Err((f, route)) => {
                r.status.gateway_route = route;
                r.fail(ConditionType::RouteInstalled, f);
            }
        }
        // Reverse routes do not depend on the forward route: a broken one never reads as the
        // forward path being down, and vice versa.
        let rev = reverse_routes::ensure(self, input, &leg).await;
        r.status.reverse_routes = rev.installed;
        r.gateway_problems = rev.problems;
        match rev.verdict {
            Ok(msg) => r.pass(ConditionType::ReverseRoutesInstalled, msg),
            Err(f) => r.fail(ConditionType::ReverseRoutesInstalled, f),
        }
        r.finish()
    }
}
