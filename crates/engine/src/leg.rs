//! LegAttached, observe and act: read the transit network and the router the spec names,
//! let `plan::leg` decide, carry it out, and look again when the plan removed a port first.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use bnerd_api::ConditionType;
use bnerd_api::echo::quoted;
use bnerd_api::names::{TAG_MANAGED, tag_link_name, tag_link_uid};
use bnerd_cloud::{CloudError, Port, Router, RouterQuery};

use super::context::{Engine, Whose};
use super::model::{Action, ActionKind, Input};
use super::ops;
use super::plan::StepFail;
use super::plan::leg::{
    self as rules, LegCall, LegPlan, LegView, RouterSeen, UnwindWhy, call_failed,
};
use super::plan::unwind::leg_unwind_failed;
use super::plan::validated::Valid;
use super::report::Report;
use super::screen;

/// Neutron limits a tag to 255 characters.
const MAX_TAG: usize = 255;

/// A create that lost its address, a duplicate and a moved leg each cost one more look; more
/// rounds than that means the network keeps changing under us.
const MAX_ROUNDS: usize = 4;

pub(crate) fn link_tags(name: &str, uid: &str) -> Vec<String> {
    let mut name_tag = tag_link_name(name);
    let mut end = name_tag.len().min(MAX_TAG);
    while !name_tag.is_char_boundary(end) {
        end -= 1;
    }
    name_tag.truncate(end);
    vec![TAG_MANAGED.to_string(), tag_link_uid(uid), name_tag]
}

/// Routers read while resolving, handed to the route steps of the same reconcile so a
/// converged link costs one router read, not three.
#[derive(Debug, Clone, Default)]
pub(crate) struct Seen {
    pub gateway_router: Option<Router>,
    pub service: Option<Router>,
}

/// The leg as it stands after LegAttached passed.
#[derive(Debug, Clone)]
pub(crate) struct Leg {
    pub port_id: String,
    pub ip: Ipv4Addr,
    pub router_id: String,
    pub seen: Seen,
    /// The transit network's ports as last listed (the reverse step screens gateway next
    /// hops against them without another read).
    pub ports: Vec<Port>,
}

/// Look up spec.serviceClusterRouter: the router our leg sits on when it still answers to that
/// value (read together with the gateway router in one call), else by ID, else by name.
async fn observe_router(e: &Engine<'_>, value: &str, own: &[&Port]) -> (RouterSeen, Seen) {
    let mut seen = Seen::default();
    let net = e.leg_client();
    let current = own
        .iter()
        .find(|p| p.is_router_interface())
        .map(|p| p.device_id.clone());
    if let Some(current) = current {
        let gw = &e.fabric.gateway_router_id;
        // One credential sees both routers: read them in one call. A customer's router and
        // the operator's gateway router live in different projects.
        let ids = match e.leg_side() {
            Whose::Operator => vec![gw.clone(), current.clone()],
            Whose::Customer => vec![current.clone()],
        };
        let q = RouterQuery {
            ids,
            ..Default::default()
        };
        // On failure fall through to the plain lookups, so a gateway-router problem is
        // reported by the step that owns it (RouteInstalled), not as RouterResolveFailed.
        if let Ok(found) = net.list_routers(&q).await {
            seen.gateway_router = found.iter().find(|r| &r.id == gw).cloned();
            if let Some(r) = found
                .into_iter()
                .find(|r| r.id == current && rules::current_router_settles(r, value))
            {
                seen.service = Some(r.clone());
                return (RouterSeen::Current(r), seen);
            }
        }
    }
    (lookup_router(net, value).await, seen)
}

/// spec.serviceClusterRouter by ID when it looks like one, else by name.
async fn lookup_router(net: &dyn bnerd_cloud::Neutron, value: &str) -> RouterSeen {
    if rules::looks_like_id(value) {
        match net.get_router(value).await {
            Ok(r) => return RouterSeen::ById(r),
            Err(err) if err.is_not_found() => {}
            Err(err) => return RouterSeen::Failed(format!("reading router {value}"), err),
        }
    }
    let q = RouterQuery {
        name: Some(value.to_string()),
        ..Default::default()
    };
    match net.list_routers(&q).await {
        Ok(found) => RouterSeen::ByName(found),
        Err(err) => RouterSeen::Failed(
            format!("looking up spec.serviceClusterRouter {}", quoted(value)),
            err,
        ),
    }
}

/// A same-tenant link without a leg in its status: the transit ports, the router the spec
/// names and the gateway router are read at once rather than one after another. The same
/// three reads the sequential path makes for a new link (the route step would read the
/// gateway router next), so a new link's first reconcile waits for one read, not three (the
/// manual-method bench, docs/performance.md). A leg found on a router after all (status lost
/// after a create) goes the ordinary way, which reads its current router.
async fn observe_new(
    e: &Engine<'_>,
    value: &str,
    uid: &str,
    project: Option<&str>,
) -> Result<(Vec<Port>, RouterSeen, Seen), CloudError> {
    // Started in the sequential path's order, so a cloud that answers at once (the fake)
    // sees the calls in that order and a fault injected at call k hits the same call.
    let (ports, found, gateway) = futures::join!(
        ops::leg_network_ports(e),
        lookup_router(e.net, value),
        e.net.get_router(&e.fabric.gateway_router_id),
    );
    let ports = ports?;
    let own: Vec<&Port> = ports
        .iter()
        .filter(|p| rules::is_own(p, uid, project))
        .collect();
    if own.iter().any(|p| p.is_router_interface()) {
        let (found, seen) = observe_router(e, value, &own).await;
        return Ok((ports, found, seen));
    }
    // A failed gateway read is left to the route step, which reads again and reports it.
    let seen = Seen {
        gateway_router: gateway.ok(),
        service: None,
    };
    Ok((ports, found, seen))
}

fn unwind_action(p: &Port, why: &UnwindWhy) -> Action {
    let ip = p.first_ip().unwrap_or("?");
    match why {
        UnwindWhy::Duplicate { kept } => Action::new(
            ActionKind::DuplicateLegRemoved,
            format!(
                "removed leg port {} at {ip}: port {kept} carries this link's UID too and stays",
                p.id
            ),
        ),
        UnwindWhy::RouterChanged { from } => Action::new(
            ActionKind::LegMoved,
            format!(
                "removed leg port {} at {ip} from router {from}: spec.serviceClusterRouter names another router",
                p.id
            ),
        ),
        UnwindWhy::PinnedIpChanged { to } => Action::new(
            ActionKind::LegMoved,
            format!(
                "removed leg port {} at {ip}: spec.transitIP now pins {to}",
                p.id
            ),
        ),
    }
}

/// A failure of this step on the operator's credential, or on the leg side's (the customer's,
/// cross-tenant); the message names which.
fn operator(f: StepFail) -> (Whose, StepFail) {
    (Whose::Operator, f)
}

fn leg_side(f: StepFail) -> (Whose, StepFail) {
    (Whose::Customer, f)
}

impl FoundRouter {
    /// The same router, with the ports of the network the leg goes on: a `PerCustomer`
    /// link's router is found before its customer transit is.
    pub(crate) fn with_ports(self, ports: Vec<Port>) -> Self {
        Self { ports, ..self }
    }

    /// The router the spec names, as found.
    pub(crate) fn router_id(&self) -> &str {
        &self.router.id
    }
}

/// The router the spec names, and what was read finding it. On a cross-tenant link this
/// comes first: a router that cannot be found fails the link before anything is shared
/// (docs/crd-reference.md, "Router resolution").
pub(crate) struct FoundRouter {
    ports: Vec<Port>,
    router: Router,
    seen: Seen,
}

pub(crate) async fn resolve(e: &Engine<'_>, input: &Input<'_>) -> Result<FoundRouter, StepFail> {
    let value = &input.spec.service_cluster_router;
    let project = e.leg_project(input);
    let found = async {
        let first_look = match e.leg_side() {
            Whose::Operator => input.status.leg_port_id.is_none(),
            Whose::Customer => false,
        };
        let (ports, found, mut seen) = if first_look {
            observe_new(e, value, input.uid, project)
                .await
                .map_err(|err| operator(call_failed(LegCall::ListPorts, &err)))?
        } else {
            let ports = ops::leg_network_ports(e)
                .await
                .map_err(|err| operator(call_failed(LegCall::ListPorts, &err)))?;
            let own: Vec<&Port> = ports
                .iter()
                .filter(|p| rules::is_own(p, input.uid, project))
                .collect();
            let (found, seen) = observe_router(e, value, &own).await;
            (ports, found, seen)
        };
        let looker = match e.leg_side() {
            Whose::Customer => rules::Looker::Customer,
            Whose::Operator => rules::Looker::Operator,
        };
        let router = rules::resolve_router(value, found, project, looker).map_err(leg_side)?;
        // Listed or read whole: its routes serve the reverse step.
        seen.service.get_or_insert_with(|| router.clone());
        Ok(FoundRouter {
            ports,
            router,
            seen,
        })
    }
    .await;
    found.map_err(|(who, f)| e.named(f, who))
}

pub(crate) async fn ensure(
    e: &Engine<'_>,
    input: &Input<'_>,
    valid: &Valid,
    resolved: FoundRouter,
    actions: &mut Vec<Action>,
) -> Result<Leg, StepFail> {
    ensure_leg(e, input, valid, resolved, actions)
        .await
        .map_err(|(who, f)| e.named(f, who))
}

/// A cross-tenant leg that came back at another address: remove the route via the old one,
/// delete the new port, and report TransitIPMismatch.
async fn refuse_mismatch(
    e: &Engine<'_>,
    input: &Input<'_>,
    valid: &Valid,
    port: &Port,
    old: Ipv4Addr,
    f: StepFail,
    actions: &mut Vec<Action>,
) -> (Whose, StepFail) {
    let gw_id = e.leg_router();
    let mut f = f;
    let removed = async {
        let gw = e.net.get_router(gw_id).await?;
        let via = rules::mismatch_routes(
            &gw.routes,
            old,
            input.status.gateway_route.as_ref(),
            valid.cidr,
        );
        ops::remove_routes(e, e.net, &gw, &via).await.map(|()| via)
    };
    // The port it just recreated is not the leg the route was built for: it goes too. The
    // two are apart (the operator's router, the customer's port), so they go at once and the
    // link reaches TransitIPMismatch one call sooner.
    let (removed, deleted) = futures::join!(removed, async {
        ops::gone_is_done(e.leg_client().delete_port(&port.id).await)
    });
    match removed {
        Ok(via) if !via.is_empty() => actions.push(Action::new(
            ActionKind::RouteRemoved,
            format!("removed the gateway route(s) via {old}: the leg no longer holds that address"),
        )),
        Ok(_) => {}
        Err(err) => f = rules::mismatch_route_not_removed(f, old, &err),
    }
    if let Err(err) = deleted {
        f.message = format!(
            "{}; deleting the new port {} failed too: {err}",
            f.message, port.id
        );
        f.retryable = true;
    }
    (Whose::Customer, f)
}

async fn ensure_leg(
    e: &Engine<'_>,
    input: &Input<'_>,
    valid: &Valid,
    resolved: FoundRouter,
    actions: &mut Vec<Action>,
) -> Result<Leg, (Whose, StepFail)> {
    let want_tags = link_tags(input.name, input.uid);
    let mut lost = BTreeSet::new();
    let cross_tenant = match e.leg_side() {
        Whose::Customer => true,
        Whose::Operator => false,
    };
    let FoundRouter {
        ports,
        router,
        seen,
    } = resolved;
    // Only a cross-tenant leg can come back elsewhere: Neutron picks its address. A `Shared`
    // one is bound to its recorded address (TransitIPMismatch): on a network shared with whole
    // projects the old address may be another tenant's by now. A `PerCustomer` one is not: its
    // network is shared with its own project only, and every route to the leg is the
    // operator's (the edge router's follows the new address).
    let bound = cross_tenant && !input.shape.is_per_customer();
    let mut recorded_ip: Option<Ipv4Addr> = if bound {
        rules::bound_address(
            input.status.transit_ip.as_deref(),
            input.status.service_router_id.as_deref(),
            &router.id,
        )
    } else {
        None
    };
    let held = bound && rules::mismatch_recorded(&input.status.conditions);
    let project = e.leg_project(input);
    for p in rules::forged(&ports, input.uid, project) {
        actions.push(Action::new(
            ActionKind::ForeignLegMarker,
            rules::forged_note(p, project),
        ));
    }
    let mut listed = Some(ports);
    let mut next_seen = Some(seen);
    for _ in 0..MAX_ROUNDS {
        let mut ports = match listed.take() {
            Some(p) => p,
            None => ops::leg_network_ports(e)
                .await
                .map_err(|err| operator(call_failed(LegCall::ListPorts, &err)))?,
        };
        let mut seen = next_seen.take().unwrap_or_default();
        let chosen = loop {
            let view = LegView {
                uid: input.uid,
                project,
                recorded_ip,
                router_id: &router.id,
                pinned: valid.pinned_ip,
                subnet: e.leg_network().subnet,
                ports: &ports,
                peers: input.peers,
                lost_races: &lost,
                neutron_picks: cross_tenant,
                mismatch_held: held,
            };
            match rules::plan(&view) {
                LegPlan::Refuse(f) => return Err(leg_side(f)),
                LegPlan::Unwind(list) => {
                    let own: Vec<Ipv4Addr> = list
                        .iter()
                        .filter_map(|(p, _)| p.first_ip()?.parse().ok())
                        .collect();
                    let (screened, _) =
                        screen::screened(e, input, input.reverse_targets, &ports, &own);
                    for (p, why) in &list {
                        let gw = ops::router(e.net, None, e.leg_router())
                            .await
                            .map_err(|err| operator(call_failed(LegCall::Unwind(p), &err)))?;
                        ops::unwind_port(e, p, Some(&gw), &screened, &input.status.reverse_routes)
                            .await
                            .map_err(|u| leg_side(leg_unwind_failed(&u)))?;
                        actions.push(unwind_action(p, why));
                        // A leg moved on purpose may come back anywhere.
                        if !matches!(why, UnwindWhy::Duplicate { .. }) {
                            recorded_ip = None;
                        }
                    }
                    break None;
                }
                LegPlan::Create(ip) => {
                    match ops::create_leg(e, input.name, input.uid, &want_tags, Some(ip)).await {
                        Ok(p) => {
                            actions.push(Action::new(
                                ActionKind::LegPortCreated,
                                format!("created leg port {} at {ip}", p.id),
                            ));
                            break Some(p);
                        }
                        // Someone took the address between our list and the create: the
                        // walk moves on; a pinned address needs a fresh look at its holder.
                        Err(err) if rules::create_lost_race(&err) => {
                            lost.insert(ip);
                            if valid.pinned_ip.is_some() {
                                break None;
                            }
                        }
                        Err(err) => return Err(leg_side(call_failed(LegCall::Create(ip), &err))),
                    }
                    // Others are creating legs right now: one read shows every address they
                    // took since our list, where walking on would spend a failed create on
                    // each of them.
                    ports = ops::leg_network_ports(e)
                        .await
                        .map_err(|err| operator(call_failed(LegCall::ListPorts, &err)))?;
                }
                LegPlan::CreateAny => {
                    let p = ops::create_leg(e, input.name, input.uid, &want_tags, None)
                        .await
                        .map_err(|err| leg_side(call_failed(LegCall::CreateAny, &err)))?;
                    let ip = rules::leg_ip(&p).map_err(leg_side)?;
                    if let Some(f) = rules::mismatch(recorded_ip, ip) {
                        let old = recorded_ip.unwrap_or(ip);
                        return Err(refuse_mismatch(e, input, valid, &p, old, f, actions).await);
                    }
                    actions.push(Action::new(
                        ActionKind::LegPortCreated,
                        format!(
                            "created leg port {} at {ip} (address picked by Neutron)",
                            p.id
                        ),
                    ));
                    break Some(p);
                }
                LegPlan::Adopt(p) => {
                    actions.push(Action::new(
                        ActionKind::LegPortAdopted,
                        format!(
                            "adopted untagged port {} at {} already attached to router {}",
                            p.id,
                            p.first_ip().unwrap_or("?"),
                            p.device_id
                        ),
                    ));
                    break Some(p);
                }
                LegPlan::Keep(p) => break Some(p),
            }
        };
        let Some(mut port) = chosen else {
            // Ports changed: look again. Routes changed on both routers (nothing read stays
            // current); the router the spec names did not.
            continue;
        };
        let settle = rules::settle(&port, &want_tags, &router.id);
        let ip = rules::leg_ip(&port).map_err(leg_side)?;
        if settle.attach {
            rules::attach_allowed(&port, &router).map_err(leg_side)?;
            seen.service = None;
        }
        // The tags go beside the attach, not before it: until they land, the UID marker in
        // the description proves the port ours (docs/design.md, "The ownership rule").
        let tag = async {
            match &settle.tags {
                Some(tags) => Some(e.leg_client().set_port_tags(&port.id, tags).await),
                None => None,
            }
        };
        let attach = async {
            if !settle.attach {
                return Ok(());
            }
            match e
                .leg_client()
                .add_router_interface(&router.id, &port.id)
                .await
            {
                Ok(()) => Ok(()),
                Err(err) => {
                    // A retry after a lost answer finds the port already ours on this router.
                    let now = e.leg_client().get_port(&port.id).await.ok();
                    if rules::attach_already_done(&err, now.as_ref(), &router.id) {
                        Ok(())
                    } else {
                        Err(err)
                    }
                }
            }
        };
        let (tagged, attached) = futures::join!(tag, attach);
        if let Some(tagged) = tagged {
            tagged.map_err(|err| leg_side(call_failed(LegCall::Tag(&port), &err)))?;
        }
        attached.map_err(|err| leg_side(call_failed(LegCall::Attach(&port, &router.id), &err)))?;
        if let Some(tags) = settle.tags {
            port.tags = tags;
        }
        if settle.attach {
            actions.push(Action::new(
                ActionKind::LegAttached,
                format!(
                    "attached leg port {} ({ip}) to router {}",
                    port.id, router.id
                ),
            ));
        }
        return Ok(Leg {
            port_id: port.id,
            ip,
            router_id: router.id.clone(),
            seen,
            ports,
        });
    }
    Err(leg_side(rules::unsettled(MAX_ROUNDS)))
}

/// LegAttached=True and what status records of the leg; `on`: the customer transit network a
/// `PerCustomer` link's leg stands on.
pub(crate) fn record(r: &mut Report, leg: &Leg, on: Option<&str>) {
    r.status.leg_port_id = Some(leg.port_id.clone());
    r.status.transit_ip = Some(leg.ip.to_string());
    r.status.service_router_id = Some(leg.router_id.clone());
    let on = on
        .map(|n| format!(" on customer transit network {n}"))
        .unwrap_or_default();
    r.pass(
        ConditionType::LegAttached,
        format!(
            "leg port {} at {}{on} attached to router {}",
            leg.port_id, leg.ip, leg.router_id
        ),
    );
}
