//! The steps only a `PerCustomer` link runs in the one pipeline (docs/design.md, "The
//! pipeline" and "Per-customer transit"), with its credential split: its isolation decided
//! again once the credential resolved, its project's customer transit (built on the
//! operator's credential), the three routes of its path (the gateway router's via the edge
//! router, the edge router's via the leg, the customer router's back via the edge router), the
//! reverse routes via the edge router and the edge router's own, and its unwind, which removes
//! them in reverse and takes the customer transit down with the project's last link.
//!
//! One piece, over the usual size: the reconcile's edge-router steps and the unwind's share the
//! room-making on a full router (`add_own`), the failure wording of each credential, and the
//! one look at the customer transit a delete takes; split, each half would import the other.
use bnerd_api::CustomerTransit as CustomerTransitStatus;
use bnerd_api::ReverseRoute;
use bnerd_api::gateway::ReverseTarget;
use bnerd_api::{ConditionType, SecretRef};
use bnerd_cloud::{CloudError, Neutron, Port, PortQuery, Route, Router};
use ipnet::Ipv4Net;

use super::context::{Customer, Engine, Whose};
use super::customer_transit::{self, CustomerTransit};
use super::leg::{FoundRouter, Leg};
use super::model::{Action, ActionKind, Input};
use super::ops;
use super::plan::customer_transit::{
    edge_reverse_routes, edge_route, ready_message, return_route, route_call_failed, routes_message,
};
use super::plan::reverse_routes::{
    GatewayProblem, ReverseCall, call_failed as reverse_call_failed, gateway_name,
    verdict as reverse_verdict,
};
use super::plan::route_quota;
use super::plan::tenant::{MainTransitShare, per_customer_isolation};
use super::plan::unwind::{
    UnwindError, UnwindPlan, customer_refused, deleting, refused_for_good, unwinding,
};
use super::plan::validated::Valid;
use super::plan::{StepFail, reverse_route_of};
use super::report::Report;
use super::unwind::{self as unwinding, Stopped};
use super::{gateway_route, reverse_routes};

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

/// TenantIsolationAttested of a `PerCustomer` link, decided again once its credential
/// resolved: whether its project still holds a share of the main transit network. A read that
/// fails leaves the condition as the attestation decided it.
pub(crate) async fn isolation(
    base: &Engine<'_>,
    c: &Customer<'_>,
    secret: &SecretRef,
    input: &Input<'_>,
    r: &mut Report,
) {
    let Some(share) = main_transit_share(base, c).await else {
        return;
    };
    match per_customer_isolation(
        &share,
        &base.fabric.transit_network_id,
        c.project_id,
        input
            .annotations
            .get(bnerd_api::names::ANNOTATION_API_ACCESS)
            .map(String::as_str),
        secret,
    ) {
        Ok((reason, msg)) => r.pass_with(ConditionType::TenantIsolationAttested, reason, msg),
        Err(f) => r.fail(ConditionType::TenantIsolationAttested, f),
    }
}

/// The customer-transit step's first half: the project's network, subnet and edge router
/// found or built (the caller holds the project's lock), with `beside` run on the network
/// while its subnet is found or cut. `None` when the footing failed, with
/// TransitNetworkShared saying why; `beside`'s answer whenever it ran.
pub(crate) async fn footing<T, Beside>(
    base: &Engine<'_>,
    c: &Customer<'_>,
    input: &Input<'_>,
    found: &FoundRouter,
    beside: impl FnOnce(customer_transit::NetworkKnown) -> Beside,
    r: &mut Report,
) -> (Option<customer_transit::Footing>, Option<T>)
where
    Beside: std::future::Future<Output = T>,
{
    let (link_cidrs, _) = taken_by_links(input);
    let taken = customer_transit::Taken {
        link_cidrs: &link_cidrs,
        router: (c, found.router_id()),
    };
    match customer_transit::ensure_footing(base, c.project_id, taken, beside).await {
        (Ok(f), aside) => (Some(f), aside),
        (Err(f), aside) => {
            r.fail(ConditionType::TransitNetworkShared, f);
            (None, aside)
        }
    }
}

/// The customer-transit step's second half, run beside the share and the leg: the edge
/// router's interface and its leg on the main transit. The customer transit whole, with the
/// actions that built it; or why not (TransitNetworkShared).
pub(crate) async fn edge(
    base: &Engine<'_>,
    c: &Customer<'_>,
    input: &Input<'_>,
    footing: customer_transit::Footing,
) -> Result<(CustomerTransit, Vec<Action>), StepFail> {
    let (_, claimed) = taken_by_links(input);
    let mut actions = vec![];
    customer_transit::ensure_edge(base, c.project_id, footing, &claimed, &mut actions)
        .await
        .map(|t| (t, actions))
}

/// What status says a link uses, once its customer transit is whole.
pub(crate) fn record_transit(r: &mut Report, t: &CustomerTransit) {
    r.status.customer_transit = Some(status_of(t));
}

/// TransitNetworkShared of a `PerCustomer` link: its customer transit, shared with its project.
pub(crate) fn shared_message(transit: &CustomerTransit, c: &Customer<'_>) -> String {
    ready_message(
        &transit.network_id,
        transit.cidr,
        c.project_id,
        &transit.edge_router_id,
        transit.edge_ip,
    )
}

/// ReverseRoutesInstalled of a `PerCustomer` link: the service router's reverse routes via
/// the edge router, then the edge router's own, from the same screened gateways.
pub(crate) async fn reverse(
    e: &Engine<'_>,
    input: &Input<'_>,
    leg: &Leg,
    transit: &CustomerTransit,
    r: &mut Report,
) {
    let transit_ports = match ops::main_transit_ports(e).await {
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
                    Whose::Operator,
                ),
            );
            return;
        }
    };
    let rev = reverse_routes::ensure(
        e,
        input,
        leg,
        reverse_routes::Hop {
            via: Some(transit.gateway),
            transit_ports: &transit_ports,
        },
    )
    .await;
    r.status.reverse_routes = rev.installed;
    r.gateway_problems = rev.problems;
    // The edge router's reverse routes are the project's one set, from the screened
    // gateways: a link whose own router could not be read or written says nothing about
    // them, so it leaves them be; a refused gateway is only left out of them.
    let Some(wanted) = rev.wanted else {
        if let Err(f) = rev.verdict {
            r.fail(
                ConditionType::ReverseRoutesInstalled,
                e.named(f, Whose::Customer),
            );
        }
        return;
    };
    let edge = edge_reverse(e, transit, &wanted, input.reverse_targets).await;
    match (edge, rev.verdict) {
        (Err(f), _) => r.fail(
            ConditionType::ReverseRoutesInstalled,
            e.named(f, Whose::Operator),
        ),
        (Ok(missing), verdict) if !missing.is_empty() => {
            // Routes that did not fit on the edge router: the link's message says so after
            // what its own router reports, naming each gateway.
            let edge_fail = reverse_verdict(
                &transit.edge_router_id,
                wanted.len() - missing.len(),
                &missing,
            );
            r.gateway_problems.extend(missing);
            let mut f = match edge_fail {
                Err(f) => e.named(f, Whose::Operator),
                Ok(_) => return,
            };
            if let Err(own) = verdict {
                f.message = format!("{}; {}", e.named(own, Whose::Customer).message, f.message);
            }
            r.fail(ConditionType::ReverseRoutesInstalled, f);
        }
        (Ok(_), Ok(msg)) => r.pass(ConditionType::ReverseRoutesInstalled, msg),
        (Ok(_), Err(f)) => r.fail(
            ConditionType::ReverseRoutesInstalled,
            e.named(f, Whose::Customer),
        ),
    }
}

/// Whether the customer project still holds a share of the main transit network: the
/// customer's own look (it sees every rule, an admin's too), then the operator's rules that
/// make it (to name them). `None` when a read failed: the condition stays as it was decided
/// before the look, and the next reconcile looks again.
async fn main_transit_share(base: &Engine<'_>, c: &Customer<'_>) -> Option<MainTransitShare> {
    let transit = &base.fabric.transit_network_id;
    match c.net.get_network(transit).await {
        Ok(_) => {}
        Err(e) if e.is_not_found() => return Some(MainTransitShare::None),
        Err(_) => return None,
    }
    let rules = base
        .net
        .list_rbac_policies(transit)
        .await
        .ok()?
        .into_iter()
        .filter(|p| p.target_tenant == c.project_id && p.action == bnerd_cloud::ACCESS_AS_SHARED)
        .map(|p| p.id)
        .collect();
    Some(MainTransitShare::Visible { rules })
}

/// After LegAttached failed: the edge router's routes via the address status recorded for
/// the leg, when no port of this link holds it any more (it may be handed to another port of
/// the project). Best effort, like the gateway route's withdrawal on a shared transit.
pub(crate) async fn withdraw_orphaned(
    e: &Engine<'_>,
    input: &Input<'_>,
    transit: &CustomerTransit,
    actions: &mut Vec<Action>,
) {
    let Some(recorded) = input.status.transit_ip.as_deref() else {
        return;
    };
    let (Ok(ports), Ok(edge)) = (
        ops::leg_network_ports(e).await,
        e.net.get_router(&transit.edge_router_id).await,
    ) else {
        return;
    };
    let project = e.leg_project(input);
    let held = ports
        .iter()
        .any(|p| super::plan::leg::is_own(p, input.uid, project) && p.has_ip(recorded));
    let via: Vec<Route> = edge
        .routes
        .iter()
        .filter(|r| r.nexthop == recorded)
        .cloned()
        .collect();
    if held || via.is_empty() {
        return;
    }
    if ops::remove_routes(e, e.net, &edge, &via).await.is_ok() {
        actions.push(Action::new(
            ActionKind::RouteRemoved,
            format!(
                "removed the edge router {}'s routes via {recorded}: no leg of this link holds that address any more",
                edge.id
            ),
        ));
    }
}

pub(crate) type RouteResult =
    Result<(String, bnerd_api::RouteRecord), (StepFail, Option<bnerd_api::RouteRecord>)>;

/// The path's three routes. The gateway router's first: it is where overlapping links and
/// foreign routes are judged (docs/crd-reference.md, "RouteInstalled"), and a link that
/// loses there writes nothing else.
pub(crate) async fn routes(
    e: &Engine<'_>,
    input: &Input<'_>,
    valid: &Valid,
    leg: &mut Leg,
    transit: &CustomerTransit,
    actions: &mut Vec<Action>,
) -> RouteResult {
    let (msg, record) = gateway_route::ensure(e, input, valid, leg, Some(transit.edge_ip), actions)
        .await
        .map_err(|(f, rec)| (e.named(f, Whose::Operator), rec))?;
    let _ = msg;
    let gateway = super::plan::route_of(&record);
    let keep = || Some(record.clone());

    // The edge router's route (operator credential) and the customer router's way back
    // (customer credential) are independent: both are written at once, so a leg made again
    // carries packets after one route write's time, not two.
    let edge_id = &transit.edge_router_id;
    let leg_ip = leg.ip;
    let edge_side = async {
        let mut acts = vec![];
        let router = e.net.get_router(edge_id).await.map_err(|err| {
            e.named(
                route_call_failed("reading edge", edge_id, &err),
                Whose::Operator,
            )
        })?;
        let (remove, add) = edge_route(&router.routes, valid.cidr, leg_ip, transit.cidr);
        // A leg back at another address moves its edge route: with If-Match, in one write
        // (the table with the old route swapped for the new), which takes a write's time off
        // the heal. Two writes sent at once instead would be mis-applied by ML2/OVN
        // (`ops::route_write`).
        let swapped = match &add {
            Some(new) if !remove.is_empty() && e.fabric.revision_if_match => {
                ops::swap_routes(e.net, &router, &remove, new)
                    .await
                    .map_err(|err| {
                        e.named(
                            route_call_failed("moving the route on edge", edge_id, &err),
                            Whose::Operator,
                        )
                    })?;
                true
            }
            _ => false,
        };
        if !remove.is_empty() && !swapped {
            ops::remove_routes(e, e.net, &router, &remove)
                .await
                .map_err(|err| {
                    e.named(
                        route_call_failed("removing old routes from edge", edge_id, &err),
                        Whose::Operator,
                    )
                })?;
        }
        if let Some(add) = add.as_ref().filter(|_| !swapped) {
            // The edge router is the operator's own: a gateway's route there is its
            // serviceCIDR via its port on the main transit, as `edge_reverse` puts it. A route
            // via anywhere else (another link's edge route, via its leg) is never taken for
            // one, whatever a gateway's status says.
            let gateways: Vec<ReverseRoute> = input
                .reverse_targets
                .iter()
                .filter(|t| {
                    t.port_fixed_ip
                        .parse::<std::net::Ipv4Addr>()
                        .is_ok_and(|h| e.fabric.transit_subnet.contains(&h))
                })
                .map(|t| ReverseRoute {
                    service_cidr: t.service_cidr.clone(),
                    next_hop: t.port_fixed_ip.clone(),
                    gateway_ref: t.gateway.clone(),
                })
                .collect();
            let room = Room {
                router_name: "edge router",
                ours: &gateways,
                targets: input.reverse_targets,
            };
            add_own(e, e.net, &router, add, room, &mut acts)
                .await
                .map_err(|(what, err)| {
                    e.named(
                        route_call_failed(&format!("{what} edge"), edge_id, &err),
                        Whose::Operator,
                    )
                })?;
        }
        if let Some(add) = &add {
            acts.push(Action::new(
                ActionKind::RouteInstalled,
                format!(
                    "{} via {} on edge router {edge_id}",
                    add.destination, add.nexthop
                ),
            ));
        }
        Ok::<_, StepFail>(acts)
    };
    let rid = &leg.router_id;
    let seen_service = leg.seen.service.as_ref();
    let service_side = async {
        let mut acts = vec![];
        let service = ops::router(e.leg_client(), seen_service, rid)
            .await
            .map_err(|err| e.named(route_call_failed("reading", rid, &err), Whose::Customer))?;
        let back = return_route(
            &service.routes,
            e.fabric.transit_subnet,
            transit.gateway,
            rid,
        )
        .map_err(|f| e.named(f, Whose::Customer))?;
        let mut made_room = false;
        if let Some(add) = &back {
            // On the customer's router, only the reverse routes this link recorded are its
            // own to move aside.
            let room = Room {
                router_name: "router",
                ours: &input.status.reverse_routes,
                targets: input.reverse_targets,
            };
            made_room = add_own(e, e.leg_client(), &service, add, room, &mut acts)
                .await
                .map_err(|(what, err)| {
                    e.named(route_call_failed(what, rid, &err), Whose::Customer)
                })?;
            acts.push(Action::new(
                ActionKind::RouteInstalled,
                format!("{} via {} on router {rid}", add.destination, add.nexthop),
            ));
        }
        Ok::<_, StepFail>((acts, made_room))
    };
    let (edge_done, service_done) = futures::join!(edge_side, service_side);
    // The edge router's outcome first, as when they ran one after the other.
    let edge_acts = edge_done.map_err(|f| (f, keep()))?;
    actions.extend(edge_acts);
    let (service_acts, made_room) = service_done.map_err(|f| (f, keep()))?;
    actions.extend(service_acts);
    if made_room {
        // The leg step's read of the router still holds the route that went: the reverse
        // step reads it again, or it would count that route as in place.
        leg.seen.service = None;
    }
    let edge = Route::new(valid.cidr.to_string(), leg.ip.to_string());
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

/// The reverse routes on a router that may give way to a link's own route there, and how its
/// Event names that router.
struct Room<'a> {
    router_name: &'a str,
    /// The routes the operator put there for gateways: `route_quota::make_room` picks among
    /// those present.
    ours: &'a [ReverseRoute],
    targets: &'a [ReverseTarget],
}

/// Add a link's own route (its edge route or its return route) to `router`. A link's own
/// routes come before the gateways' reverse routes (docs/crd-reference.md,
/// "ReverseRoutesInstalled"): when the router is full, the newest gateway's reverse route of
/// `room.ours` goes, as a `RouteRemoved` action naming it, and the add is tried once more.
/// The reverse step after it then meets the full router and names that gateway as not
/// fitting. With no route of ours there the refusal stands, naming the quota. `Ok` says
/// whether a reverse route went; `Err`, which call failed.
async fn add_own(
    e: &Engine<'_>,
    net: &dyn Neutron,
    router: &Router,
    add: &Route,
    room: Room<'_>,
    actions: &mut Vec<Action>,
) -> Result<bool, (&'static str, CloudError)> {
    const ADDING: &str = "adding a route to";
    let refused = match ops::add_routes(e, net, router, std::slice::from_ref(add)).await {
        Ok(()) => return Ok(false),
        Err(err) if route_quota::is_full(&err) => err,
        Err(err) => return Err((ADDING, err)),
    };
    let Some(gone) = route_quota::make_room(&router.routes, room.ours, room.targets) else {
        return Err((ADDING, refused));
    };
    let route = reverse_route_of(&gone);
    ops::remove_routes(e, net, router, std::slice::from_ref(&route))
        .await
        .map_err(|err| ("removing a gateway's reverse route to make room on", err))?;
    actions.push(Action::new(
        ActionKind::RouteRemoved,
        format!(
            "removed {} via {} ({}'s reverse route) from {} {} to make room for this link's {} via {}: the router holds as many routes as Neutron allows it, and a link's own routes come first",
            route.destination,
            route.nexthop,
            gateway_name(&gone.gateway_ref),
            room.router_name,
            router.id,
            add.destination,
            add.nexthop
        ),
    ));
    let mut left = router.clone();
    left.routes.retain(|r| *r != route);
    ops::add_routes(e, net, &left, std::slice::from_ref(add))
        .await
        .map(|()| true)
        .map_err(|err| (ADDING, err))
}

/// The edge router's reverse routes (operator credential). `Ok` names the gateways whose
/// route did not fit on the edge router (its route quota is full), the oldest kept first.
async fn edge_reverse(
    e: &Engine<'_>,
    transit: &CustomerTransit,
    wanted: &[bnerd_api::ReverseRoute],
    targets: &[ReverseTarget],
) -> Result<Vec<GatewayProblem>, StepFail> {
    let edge_id = &transit.edge_router_id;
    let routes: Vec<Route> = wanted.iter().map(reverse_route_of).collect();
    let router = e
        .net
        .get_router(edge_id)
        .await
        .map_err(|err| reverse_call_failed(ReverseCall::Read, edge_id, &err))?;
    let (remove, add) = edge_reverse_routes(&router.routes, &routes, e.fabric.transit_subnet);
    if !remove.is_empty() {
        ops::remove_routes(e, e.net, &router, &remove)
            .await
            .map_err(|err| reverse_call_failed(ReverseCall::Remove, edge_id, &err))?;
    }
    if add.is_empty() {
        return Ok(vec![]);
    }
    match ops::add_routes(e, e.net, &router, &add).await {
        Ok(()) => Ok(vec![]),
        Err(err) if route_quota::is_full(&err) => {
            // One at a time, the oldest gateways first, until the edge router is full.
            let each: Vec<bnerd_api::ReverseRoute> = wanted
                .iter()
                .filter(|w| add.contains(&reverse_route_of(w)))
                .cloned()
                .collect();
            let mut missing = vec![];
            for (d, added) in reverse_routes::add_each(e, e.net, &router, &each, targets).await {
                match added {
                    Ok(()) => {}
                    Err(err) if route_quota::is_full(&err) => {
                        missing.push(route_quota::did_not_fit(&d, edge_id, &err));
                    }
                    Err(err) => return Err(reverse_call_failed(ReverseCall::Add, edge_id, &err)),
                }
            }
            Ok(missing)
        }
        Err(err) => Err(reverse_call_failed(ReverseCall::Add, edge_id, &err)),
    }
}

/// An unwind's failure on the operator's credential: Ready=False/Deleting.
fn operator_failed<'e>(
    e: &'e Engine<'_>,
    context: String,
) -> impl FnOnce(CloudError) -> Stopped + 'e {
    move |error| Stopped {
        fail: e.named(
            deleting(&UnwindError::Cloud { context, error }),
            Whose::Operator,
        ),
        customer_refused: false,
    }
}

/// An unwind's failure on the customer's credential: one it will keep refusing (403, 404,
/// 409) holds the link for the abandon annotation, as on a `Shared` link.
fn customer_failed<'e>(
    e: &'e Engine<'_>,
    secret: &'e str,
    context: String,
) -> impl FnOnce(CloudError) -> Stopped + 'e {
    move |error| {
        let u = UnwindError::Cloud { context, error };
        if refused_for_good(&u) {
            Stopped {
                fail: customer_refused(secret, &u),
                customer_refused: true,
            }
        } else {
            Stopped {
                fail: e.named(deleting(&u), Whose::Customer),
                customer_refused: false,
            }
        }
    }
}

/// A failure of the customer transit's own steps during an unwind: Ready=False/Deleting.
/// A customer transit that did not go. Blocked by the customer's own ports, the link's own
/// legs and routes are gone already: like a refusal of the customer side, only a human can
/// end that, so the abandon annotation may release the link (the transit stays, named).
fn not_down(n: customer_transit::NotDown) -> Stopped {
    match n {
        customer_transit::NotDown::Blocked(f) => Stopped {
            customer_refused: true,
            ..deleting_fail(f)
        },
        customer_transit::NotDown::Failed(f) => deleting_fail(f),
    }
}

fn deleting_fail(f: StepFail) -> Stopped {
    Stopped {
        fail: unwinding(f),
        customer_refused: false,
    }
}

/// A deleting link's look at its project's customer transit: the transit when it exists, and
/// this link's legs on it (the operator owns that network and sees every port on it).
pub(crate) struct Looked {
    pub transit: Option<CustomerTransit>,
    pub own: Vec<Port>,
}

/// This link's legs on its project's customer transit, and the customer transit itself.
pub(crate) async fn legs(
    base: &Engine<'_>,
    input: &Input<'_>,
    project: &str,
) -> Result<Looked, StepFail> {
    let Some(transit) = customer_transit::find(base, project).await? else {
        return Ok(Looked {
            transit: None,
            own: vec![],
        });
    };
    let ports = base
        .net
        .list_ports(&PortQuery {
            network_id: Some(transit.network_id.clone()),
            ..Default::default()
        })
        .await
        .map_err(|err| {
            super::plan::customer_transit::call_failed("listing the customer transit's ports", &err)
        })?;
    let own = ports
        .into_iter()
        .filter(|p| super::plan::leg::is_own(p, input.uid, Some(project)))
        .collect();
    Ok(Looked {
        transit: Some(transit),
        own,
    })
}

/// A deleting link with nothing on the customer side (no leg of its own anywhere): the
/// operator's part alone, the customer transit taken down when no other link stands on it.
/// No call on the customer's credential. What it took down is in the actions.
pub(crate) async fn release(base: &Engine<'_>, project: &str) -> Result<Vec<Action>, StepFail> {
    let _building = customer_transit::hold(project).await;
    let mut actions = vec![];
    customer_transit::take_down(base, project, None, &mut actions)
        .await
        .map_err(|n| not_down(n).fail)?;
    Ok(actions)
}

/// A deleting link held for its customer's credential: what the operator's credential may
/// still remove, the edge router's routes via this link's legs (best effort: the next look
/// tries again). The leg itself and the routes on the customer's router wait for the
/// credential, or stay behind when a human abandons them.
/// `looked`: the look the unwind already took, if any.
pub(crate) async fn cut_operator_side(
    base: &Engine<'_>,
    input: &Input<'_>,
    project: &str,
    looked: Option<Looked>,
) {
    let looked = match looked {
        Some(l) => l,
        None => match legs(base, input, project).await {
            Ok(l) => l,
            Err(_) => return,
        },
    };
    let Looked {
        transit: Some(transit),
        own,
    } = looked
    else {
        return;
    };
    let Ok(edge) = base.net.get_router(&transit.edge_router_id).await else {
        return;
    };
    let via: Vec<Route> = edge
        .routes
        .iter()
        .filter(|r| own.iter().any(|p| p.has_ip(&r.nexthop)))
        .cloned()
        .collect();
    let _ = ops::remove_routes(base, base.net, &edge, &via).await;
}

/// Unwind a `PerCustomer` link, its credential resolved (docs/design.md, "The unwind order"):
/// the gateway route (the one status recorded; the gateway route first, always, was removed
/// before the credential was resolved), then the edge router's routes via this link's legs,
/// the customer router's routes via the edge router, the legs, and the customer transit when
/// this was the project's last link.
pub(crate) async fn unwind(
    base: &Engine<'_>,
    c: &Customer<'_>,
    looked: Option<Looked>,
    input: &Input<'_>,
    targets: &[ReverseTarget],
) -> Result<UnwindPlan, Stopped> {
    let _building = customer_transit::hold(c.project_id).await;
    // The look that decided the customer side, when there was one: this link's legs cannot
    // change meanwhile (one reconcile per link), and a transit taken down since fails a read
    // below and is looked at afresh by the next round.
    let looked = match looked {
        Some(l) => l,
        None => legs(base, input, c.project_id)
            .await
            .map_err(deleting_fail)?,
    };
    let Looked {
        transit: Some(transit),
        own,
    } = looked
    else {
        // No customer transit with a subnet: no leg can stand there. What a stopped build
        // left of it goes all the same.
        let mut done = unwinding::unwind_rounds(base, input, targets).await?;
        customer_transit::take_down(base, c.project_id, None, &mut done.actions)
            .await
            .map_err(not_down)?;
        return Ok(done);
    };
    let e = base.on_customer_transit(c, transit.clone());
    let mut cut = UnwindPlan::default();
    let edge_id = &transit.edge_router_id;
    if !edge_id.is_empty() {
        let router = e.net.get_router(edge_id).await.map_err(operator_failed(
            &e,
            format!("reading edge router {edge_id}"),
        ))?;
        let via_legs: Vec<Route> = router
            .routes
            .iter()
            .filter(|r| own.iter().any(|p| p.has_ip(&r.nexthop)))
            .cloned()
            .collect();
        ops::remove_routes(&e, e.net, &router, &via_legs)
            .await
            .map_err(operator_failed(
                &e,
                format!("removing routes from edge router {edge_id}"),
            ))?;
        cut.gateway_remove.extend(via_legs);
    }
    // Neutron refuses a detach while a route of the router points into the leg's subnet:
    // every route of the customer router via the edge router goes first (what points there
    // is the customer transit's).
    for rid in own
        .iter()
        .filter(|p| p.is_router_interface())
        .map(|p| &p.device_id)
    {
        let service = match e.leg_client().get_router(rid).await {
            Ok(r) => r,
            Err(err) if err.is_not_found() => continue,
            Err(err) => {
                return Err(customer_failed(
                    &e,
                    c.secret,
                    format!("reading router {rid}"),
                )(err));
            }
        };
        let via: Vec<Route> = service
            .routes
            .iter()
            .filter(|r| r.nexthop == transit.gateway.to_string())
            .cloned()
            .collect();
        ops::remove_routes(&e, e.leg_client(), &service, &via)
            .await
            .map_err(customer_failed(
                &e,
                c.secret,
                format!("removing routes via the edge router from router {rid}"),
            ))?;
    }
    let done = unwinding::unwind_rounds(&e, input, targets).await?;
    cut.legs.extend(done.legs);
    customer_transit::take_down(&e, c.project_id, None, &mut cut.actions)
        .await
        .map_err(not_down)?;
    Ok(cut)
}
