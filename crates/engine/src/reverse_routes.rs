//! ReverseRoutesInstalled, observe and act: screen the estate's gateways, read the service
//! router (or take the leg step's read) and the subnets it is connected to, let
//! `plan::reverse_routes` decide, then remove the stale routes and add the missing ones — in
//! one call, split per gateway when refused.

use bnerd_api::ReverseRoute;
use bnerd_cloud::Route;

use super::context::Engine;
use super::leg::Leg;
use super::model::Input;
use super::ops;
use super::plan::StepFail;
use super::plan::reverse_route_of;
use super::plan::reverse_routes::{
    GatewayProblem, ReverseCall, ReverseView, add_failed, call_failed, connected_overlap, plan,
    split_after, verdict,
};
use super::plan::route_quota;
use super::screen;

/// What the step leaves behind: the routes to record, the condition, and the gateways that
/// deserve a Warning Event of their own.
pub(crate) struct ReverseOutcome {
    pub installed: Vec<ReverseRoute>,
    /// Routes status recorded that were gone from the router and are back (drift).
    pub restored: Vec<ReverseRoute>,
    pub verdict: Result<String, StepFail>,
    pub problems: Vec<GatewayProblem>,
    /// The routes the screened gateways ask for, each via its gateway port (a `PerCustomer`
    /// link's edge router carries these); `None` when a cloud call failed before the
    /// service router's routes were settled. Refused gateways are left out, never the cause
    /// of `None`: one refused gateway must not freeze the others anywhere.
    pub wanted: Option<Vec<ReverseRoute>>,
}

/// Where the service router's reverse routes point, and what the gateways are screened
/// against.
pub(crate) struct Hop<'a> {
    /// A `PerCustomer` link's edge router address on the customer transit: every reverse
    /// route of the service router goes there (the edge router carries them on). `None`: to
    /// each gateway port itself.
    pub via: Option<std::net::Ipv4Addr>,
    /// Every port on the main transit network (a gateway port must be one of them).
    pub transit_ports: &'a [bnerd_cloud::Port],
}

pub(crate) async fn ensure(
    e: &Engine<'_>,
    input: &Input<'_>,
    leg: &Leg,
    hop: Hop<'_>,
) -> ReverseOutcome {
    let (desired, mut problems) = screen::screened(
        e,
        input,
        input.reverse_targets,
        hop.transit_ports,
        &[leg.ip],
    );
    let wanted = desired.clone();
    let desired: Vec<ReverseRoute> = match hop.via {
        Some(via) => desired
            .into_iter()
            .map(|d| ReverseRoute {
                next_hop: via.to_string(),
                ..d
            })
            .collect(),
        None => desired,
    };
    let recorded = &input.status.reverse_routes;
    if desired.is_empty() && recorded.is_empty() {
        return ReverseOutcome {
            installed: vec![],
            restored: vec![],
            verdict: verdict(&leg.router_id, 0, &problems),
            problems,
            wanted: Some(wanted),
        };
    }
    let fail = |f: StepFail, installed: Vec<ReverseRoute>| ReverseOutcome {
        installed,
        restored: vec![],
        verdict: Err(f),
        problems: vec![],
        wanted: None,
    };
    let rid = &leg.router_id;
    let router = match ops::router(e.leg_client(), leg.seen.service.as_ref(), rid).await {
        Ok(r) => r,
        Err(err) => return fail(call_failed(ReverseCall::Read, rid, &err), recorded.clone()),
    };
    // A route is screened against the router's own subnets whenever it is wanted, kept as
    // much as added: an interface attached since the route went in turns it into one that
    // takes part of that subnet's traffic, and it goes like any other route no longer wanted.
    let desired = if desired.is_empty() {
        desired
    } else {
        match ops::connected_subnets(e.leg_client(), e.fabric, rid).await {
            Ok(connected) => {
                let (ok, refused) = connected_overlap(&desired, &connected);
                problems.extend(refused);
                ok
            }
            Err(err) => {
                return fail(call_failed(ReverseCall::Read, rid, &err), recorded.clone());
            }
        }
    };
    let p = plan(&ReverseView {
        router_id: rid,
        routes: &router.routes,
        desired: &desired,
        recorded,
    });
    if let Err(err) = ops::remove_routes(e, e.leg_client(), &router, &p.remove).await {
        return fail(
            call_failed(ReverseCall::Remove, rid, &err),
            recorded.clone(),
        );
    }
    let mut installed = p.keep.clone();
    problems.extend(p.conflicts.iter().cloned());
    if !p.add.is_empty() {
        let mut batch: Vec<Route> = p.add.iter().map(reverse_route_of).collect();
        batch.sort();
        batch.dedup();
        match ops::add_routes(e, e.leg_client(), &router, &batch).await {
            Ok(()) => installed.extend(p.add.iter().cloned()),
            Err(err) if split_after(&err) || route_quota::is_full(&err) => {
                // One gateway's route can make Neutron refuse the whole batch, and so does a
                // router with too little room for all of them: give each its own call, the
                // oldest gateways first, so the others still go in and every refusal names
                // its gateway.
                let each =
                    add_each(e, e.leg_client(), &router, &p.add, input.reverse_targets).await;
                for (d, added) in each {
                    match added {
                        Ok(()) => installed.push(d),
                        Err(err) if route_quota::is_full(&err) => {
                            problems.push(route_quota::did_not_fit(&d, rid, &err));
                        }
                        Err(err) => problems.push(add_failed(&d, rid, &err)),
                    }
                }
            }
            Err(err) => {
                installed.sort();
                return fail(call_failed(ReverseCall::Add, rid, &err), installed);
            }
        }
    }
    installed.sort();
    let restored = p
        .add
        .iter()
        .filter(|d| recorded.contains(d) && installed.contains(d))
        .cloned()
        .collect();
    ReverseOutcome {
        verdict: verdict(rid, installed.len(), &problems),
        installed,
        restored,
        problems,
        wanted: Some(wanted),
    }
}

/// Add reverse routes one call each, the oldest gateways' first, and say how each went. Once
/// Neutron answers that the router is full, a newer gateway's route cannot fit either: the
/// rest get that answer without a call.
pub(crate) async fn add_each(
    e: &Engine<'_>,
    net: &dyn bnerd_cloud::Neutron,
    router: &bnerd_cloud::Router,
    routes: &[ReverseRoute],
    targets: &[bnerd_api::gateway::ReverseTarget],
) -> Vec<(ReverseRoute, Result<(), bnerd_cloud::CloudError>)> {
    let mut each = routes.to_vec();
    route_quota::oldest_first(&mut each, targets);
    let mut full: Option<bnerd_cloud::CloudError> = None;
    let mut out = Vec::with_capacity(each.len());
    for d in each {
        let added = match &full {
            Some(err) => Err(err.clone()),
            None => ops::add_routes(e, net, router, &[reverse_route_of(&d)]).await,
        };
        if let Err(err) = &added
            && route_quota::is_full(err)
        {
            full = Some(err.clone());
        }
        out.push((d, added));
    }
    out
}
