//! A `PerCustomer` link's steps (docs/design.md, "Per-customer transit"), in the spec's order
//! and with its credential split: the router on the customer's credential, then its
//! project's customer transit and its share on the operator's, the leg on the customer
//! transit on the customer's, and the three routes of its path (the gateway router's via the
//! edge router, the edge router's via the leg, the customer router's back via the edge
//! router); the reverse routes go via the edge router too. Its unwind removes them in reverse
//! and takes the customer transit down with the project's last link.

use bnerd_api::ConditionType;
use bnerd_api::CustomerTransit as CustomerTransitStatus;
use bnerd_api::gateway::ReverseTarget;
use bnerd_cloud::Route;
use ipnet::Ipv4Net;

use super::converge::{Customer, Engine};
use super::customer_transit::{self, CustomerTransit};
use super::leg::{self, Leg};
use super::model::{Action, ActionKind, Input};
use super::ops;
use super::plan::customer_transit::{
    edge_reverse_routes, edge_route, ready_message, return_route, route_call_failed, routes_message,
};
use super::plan::leg::{LegCall, call_failed as leg_call_failed};
use super::plan::reverse_routes::{ReverseCall, call_failed as reverse_call_failed};
use super::plan::unwind::UnwindPlan;
use super::plan::validated::Valid;
use super::plan::{StepFail, reverse_route_of};
use super::report::Report;
use super::unwind::{self as unwinding, Stopped};
use super::{gateway_route, reverse_routes, share};

/// What status says a link uses.
fn status_of(t: &CustomerTransit) -> CustomerTransitStatus {
    CustomerTransitStatus {
        network_id: Some(t.network_id.clone()),
        subnet_id: Some(t.subnet_id.clone()),
        cidr: Some(t.cidr.to_string()),
        edge_router_id: Some(t.edge_router_id.clone()),
        edge_router_transit_ip: Some(t.edge_ip.to_string()),
    }
}

/// Every link's service CIDR (a customer transit overlaps none) and the transit addresses
/// other links claim (the edge leg takes none).
fn taken_by_links(input: &Input<'_>) -> (Vec<Ipv4Net>, Vec<std::net::Ipv4Addr>) {
    let mut taken: Vec<Ipv4Net> = input.peers.iter().filter_map(|p| p.cidr).collect();
    if let Ok(c) = input.spec.service_cluster_cidr.parse() {
        taken.push(c);
    }
    let claimed = input
        .peers
        .iter()
        .flat_map(|p| p.transit_ips.iter().copied())
        .collect();
    (taken, claimed)
}

/// Every step after CredentialsResolved.
pub(crate) async fn converge(
    base: &Engine<'_>,
    c: &Customer<'_>,
    input: &Input<'_>,
    valid: &Valid,
    r: &mut Report,
) {
    r.status.customer_project_id = Some(c.project_id.to_string());
    // The router first: a link whose router cannot be found builds and shares nothing.
    let resolved = match leg::resolve(base, input).await {
        Ok(found) => found,
        Err(f) => {
            r.fail(ConditionType::LegAttached, f);
            return;
        }
    };
    let _building = customer_transit::hold(c.project_id).await;
    let (taken, claimed) = taken_by_links(input);
    let transit = match customer_transit::ensure(
        base,
        c.project_id,
        &taken,
        &claimed,
        &mut r.actions,
    )
    .await
    {
        Ok(t) => t,
        Err(f) => {
            r.fail(ConditionType::TransitNetworkShared, f);
            return;
        }
    };
    r.status.customer_transit = Some(status_of(&transit));
    let e = Engine {
        net: base.net,
        fabric: base.fabric,
        customer: Some(Customer { ..*c }),
        customer_transit: Some(transit.clone()),
    };
    match share::ensure(&e, c, &mut r.actions).await {
        Ok(_) => r.pass(
            ConditionType::TransitNetworkShared,
            ready_message(
                &transit.network_id,
                transit.cidr,
                c.project_id,
                &transit.edge_router_id,
                transit.edge_ip,
            ),
        ),
        Err(f) => {
            r.fail(ConditionType::TransitNetworkShared, f);
            return;
        }
    }
    let leg = match ops::leg_network_ports(&e).await {
        Ok(ports) => {
            leg::ensure(&e, input, valid, resolved.with_ports(ports), &mut r.actions).await
        }
        Err(err) => Err(e.named(leg_call_failed(LegCall::ListPorts, &err), false)),
    };
    let leg = match leg {
        Ok(leg) => leg,
        Err(f) => {
            r.fail(ConditionType::LegAttached, f);
            return;
        }
    };
    super::converge::record_leg(r, &leg, Some(&transit.network_id));

    match routes(&e, input, valid, &leg, &transit, &mut r.actions).await {
        Ok((msg, route)) => {
            r.status.gateway_route = Some(route);
            r.pass(ConditionType::RouteInstalled, msg);
        }
        Err((f, route)) => {
            r.status.gateway_route = route;
            r.fail(ConditionType::RouteInstalled, f);
        }
    }

    let transit_ports = match ops::main_transit_ports(&e).await {
        Ok(p) => p,
        Err(err) => {
            r.fail(
                ConditionType::ReverseRoutesInstalled,
                e.named(
                    reverse_call_failed(
                        ReverseCall::ListTransitPorts,
                        &transit.edge_router_id,
                        &err,
                    ),
                    false,
                ),
            );
            return;
        }
    };
    let rev = reverse_routes::ensure(
        &e,
        input,
        &leg,
        reverse_routes::Hop {
            via: Some(transit.gateway),
            transit_ports: &transit_ports,
        },
    )
    .await;
    let edge = edge_reverse(&e, &transit, &rev.wanted).await;
    r.status.reverse_routes = rev.installed;
    r.gateway_problems = rev.problems;
    match (rev.verdict, edge) {
        (Ok(msg), Ok(())) => r.pass(ConditionType::ReverseRoutesInstalled, msg),
        (Err(f), _) => r.fail(ConditionType::ReverseRoutesInstalled, e.named(f, true)),
        (Ok(_), Err(f)) => r.fail(ConditionType::ReverseRoutesInstalled, e.named(f, false)),
    }
}

type RouteResult =
    Result<(String, bnerd_api::RouteRecord), (StepFail, Option<bnerd_api::RouteRecord>)>;

/// The path's three routes. The gateway router's first: it is where overlapping links and
/// foreign routes are judged (docs/crd-reference.md, "RouteInstalled"), and a link that
/// loses there writes nothing else.
async fn routes(
    e: &Engine<'_>,
    input: &Input<'_>,
    valid: &Valid,
    leg: &Leg,
    transit: &CustomerTransit,
    actions: &mut Vec<Action>,
) -> RouteResult {
    let (msg, record) = gateway_route::ensure(e, input, valid, leg, Some(transit.edge_ip), actions)
        .await
        .map_err(|(f, rec)| (e.named(f, false), rec))?;
    let _ = msg;
    let gateway = super::plan::route_of(&record);
    let keep = || Some(record.clone());

    let edge_id = &transit.edge_router_id;
    let router = e.net.get_router(edge_id).await.map_err(|err| {
        (
            e.named(route_call_failed("reading edge", edge_id, &err), false),
            keep(),
        )
    })?;
    let (remove, add) = edge_route(&router.routes, valid.cidr, leg.ip, transit.cidr);
    if !remove.is_empty() {
        ops::remove_routes(e, e.net, &router, &remove)
            .await
            .map_err(|err| {
                (
                    e.named(
                        route_call_failed("removing old routes from edge", edge_id, &err),
                        false,
                    ),
                    keep(),
                )
            })?;
    }
    let edge = Route::new(valid.cidr.to_string(), leg.ip.to_string());
    if let Some(add) = &add {
        ops::add_routes(e, e.net, &router, std::slice::from_ref(add))
            .await
            .map_err(|err| {
                (
                    e.named(
                        route_call_failed("adding a route to edge", edge_id, &err),
                        false,
                    ),
                    keep(),
                )
            })?;
        actions.push(Action::new(
            ActionKind::RouteInstalled,
            format!(
                "{} via {} on edge router {edge_id}",
                add.destination, add.nexthop
            ),
        ));
    }

    let rid = &leg.router_id;
    let service = ops::router(e.leg_net(), leg.seen.service.as_ref(), rid)
        .await
        .map_err(|err| {
            (
                e.named(route_call_failed("reading", rid, &err), true),
                keep(),
            )
        })?;
    let back = return_route(
        &service.routes,
        e.fabric.transit_subnet,
        transit.gateway,
        rid,
    )
    .map_err(|f| (e.named(f, true), keep()))?;
    if let Some(add) = &back {
        ops::add_routes(e, e.leg_net(), &service, std::slice::from_ref(add))
            .await
            .map_err(|err| {
                (
                    e.named(route_call_failed("adding a route to", rid, &err), true),
                    keep(),
                )
            })?;
        actions.push(Action::new(
            ActionKind::RouteInstalled,
            format!("{} via {} on router {rid}", add.destination, add.nexthop),
        ));
    }
    let back = Route::new(
        e.fabric.transit_subnet.to_string(),
        transit.gateway.to_string(),
    );
    Ok((
        routes_message(
            (&gateway, &e.fabric.gateway_router_id),
            (&edge, edge_id),
            (&back, rid),
        ),
        record,
    ))
}

/// The edge router's reverse routes (operator credential).
async fn edge_reverse(
    e: &Engine<'_>,
    transit: &CustomerTransit,
    wanted: &[bnerd_api::ReverseRoute],
) -> Result<(), StepFail> {
    let edge_id = &transit.edge_router_id;
    let wanted: Vec<Route> = wanted.iter().map(reverse_route_of).collect();
    let router = e
        .net
        .get_router(edge_id)
        .await
        .map_err(|err| reverse_call_failed(ReverseCall::Read, edge_id, &err))?;
    let (remove, add) = edge_reverse_routes(&router.routes, &wanted, e.fabric.transit_subnet);
    if !remove.is_empty() {
        ops::remove_routes(e, e.net, &router, &remove)
            .await
            .map_err(|err| reverse_call_failed(ReverseCall::Remove, edge_id, &err))?;
    }
    if !add.is_empty() {
        ops::add_routes(e, e.net, &router, &add)
            .await
            .map_err(|err| reverse_call_failed(ReverseCall::Add, edge_id, &err))?;
    }
    Ok(())
}

/// Unwind a `PerCustomer` link, its credential resolved (docs/design.md, "The unwind order"):
/// the gateway route first, then the edge router's routes via this link's legs, the customer
/// router's routes via the edge router, the legs, and the customer transit when this was the
/// project's last link.
pub(crate) async fn unwind(
    base: &Engine<'_>,
    c: &Customer<'_>,
    input: &Input<'_>,
    targets: &[ReverseTarget],
) -> Result<UnwindPlan, Stopped> {
    let stop = |fail: StepFail| Stopped {
        fail,
        customer_refused: false,
    };
    let _building = customer_transit::hold(c.project_id).await;
    let Some(transit) = customer_transit::find(base, c.project_id)
        .await
        .map_err(stop)?
    else {
        return unwinding::unwind_rounds(base, input, targets).await;
    };
    let e = Engine {
        net: base.net,
        fabric: base.fabric,
        customer: Some(Customer { ..*c }),
        customer_transit: Some(transit.clone()),
    };
    let mut cut = UnwindPlan::default();
    // The gateway route via the edge router: the one status recorded, and ours by CIDR.
    let gw_id = &e.fabric.gateway_router_id;
    if let Ok(gw) = e.net.get_router(gw_id).await {
        let mine: Vec<Route> = gw
            .routes
            .iter()
            .filter(|r| {
                (r.destination == input.spec.service_cluster_cidr
                    && r.nexthop == transit.edge_ip.to_string())
                    || input
                        .status
                        .gateway_route
                        .as_ref()
                        .is_some_and(|rec| super::plan::route_of(rec) == **r)
            })
            .cloned()
            .collect();
        ops::remove_routes(&e, e.net, &gw, &mine)
            .await
            .map_err(|err| {
                stop(route_call_failed(
                    "removing the route from gateway",
                    gw_id,
                    &err,
                ))
            })?;
        cut.gateway_remove.extend(mine);
    }
    // The link's legs on the customer transit, and what routes via them.
    let ports = ops::leg_network_ports(&e).await.map_err(|err| {
        stop(super::plan::customer_transit::call_failed(
            "listing the customer transit's ports",
            &err,
        ))
    })?;
    let project = e.leg_project(input);
    let own: Vec<_> = ports
        .iter()
        .filter(|p| super::plan::leg::is_own(p, input.uid, project))
        .collect();
    let edge_id = &transit.edge_router_id;
    if !edge_id.is_empty() {
        let router = e
            .net
            .get_router(edge_id)
            .await
            .map_err(|err| stop(route_call_failed("reading edge", edge_id, &err)))?;
        let via_legs: Vec<Route> = router
            .routes
            .iter()
            .filter(|r| own.iter().any(|p| p.has_ip(&r.nexthop)))
            .cloned()
            .collect();
        ops::remove_routes(&e, e.net, &router, &via_legs)
            .await
            .map_err(|err| {
                stop(route_call_failed(
                    "removing routes from edge",
                    edge_id,
                    &err,
                ))
            })?;
    }
    // Neutron refuses a detach while a route of the router points into the leg's subnet:
    // every route of the customer router via the edge router goes first (the edge router
    // is ours; what points there is the customer transit's).
    for rid in own
        .iter()
        .filter(|p| p.is_router_interface())
        .map(|p| &p.device_id)
    {
        let service = match e.leg_net().get_router(rid).await {
            Ok(r) => r,
            Err(err) if err.is_not_found() => continue,
            Err(err) => return Err(stop(e.named(route_call_failed("reading", rid, &err), true))),
        };
        let via: Vec<Route> = service
            .routes
            .iter()
            .filter(|r| r.nexthop == transit.gateway.to_string())
            .cloned()
            .collect();
        ops::remove_routes(&e, e.leg_net(), &service, &via)
            .await
            .map_err(|err| {
                stop(e.named(route_call_failed("removing routes from", rid, &err), true))
            })?;
    }
    let done = unwinding::unwind_rounds(&e, input, targets).await?;
    cut.legs.extend(done.legs);
    let mut actions = vec![];
    customer_transit::take_down(&e, c.project_id, None, &mut actions)
        .await
        .map_err(stop)?;
    Ok(cut)
}
