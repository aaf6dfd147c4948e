//! LegAttached, observe and act: read the transit network and the router the spec names,
//! let `plan::leg` decide, carry it out, and look again when the plan removed a port first.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;

use bnerd_api::names::{TAG_MANAGED, tag_link_name, tag_link_uid};
use bnerd_cloud::{Port, Router, RouterQuery};

use super::model::{Action, ActionKind, Input};
use super::ops::{self, Engine};
use super::plan::StepFail;
use super::plan::leg::{
    self as rules, LegCall, LegPlan, LegView, RouterSeen, UnwindWhy, call_failed,
};
use super::plan::unwind::leg_unwind_failed;
use super::plan::validated::Valid;

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
    pub gateway: Option<Router>,
    pub service: Option<Router>,
}

/// The leg as it stands after LegAttached passed.
#[derive(Debug, Clone)]
pub(crate) struct Leg {
    pub port_id: String,
    pub ip: Ipv4Addr,
    pub router_id: String,
    pub seen: Seen,
}

/// Look up spec.serviceClusterRouter: the router our leg sits on when it still answers to
/// the spec's value (read together with the gateway router in one call), else by ID, else by
/// name.
async fn observe_router(e: &Engine<'_>, value: &str, own: &[&Port]) -> (RouterSeen, Seen) {
    let mut seen = Seen::default();
    let current = own
        .iter()
        .find(|p| p.is_router_interface())
        .map(|p| p.device_id.clone());
    if let Some(current) = current {
        let gw = &e.fabric.gateway_router_id;
        let q = RouterQuery {
            ids: vec![gw.clone(), current.clone()],
            ..Default::default()
        };
        // On failure fall through to the plain lookups, so a gateway-router problem is
        // reported by the step that owns it (RouteInstalled), not as RouterResolveFailed.
        if let Ok(found) = e.net.list_routers(&q).await {
            seen.gateway = found.iter().find(|r| &r.id == gw).cloned();
            if let Some(r) = found
                .into_iter()
                .find(|r| r.id == current && rules::current_router_settles(r, value))
            {
                seen.service = Some(r.clone());
                return (RouterSeen::Current(r), seen);
            }
        }
    }
    if rules::looks_like_id(value) {
        match e.net.get_router(value).await {
            Ok(r) => return (RouterSeen::ById(r), seen),
            Err(err) if err.is_not_found() => {}
            Err(err) => {
                return (
                    RouterSeen::Failed(format!("reading router {value}"), err),
                    seen,
                );
            }
        }
    }
    let q = RouterQuery {
        name: Some(value.to_string()),
        ..Default::default()
    };
    match e.net.list_routers(&q).await {
        Ok(found) => (RouterSeen::ByName(found), seen),
        Err(err) => (
            RouterSeen::Failed(format!("looking up router {value:?}"), err),
            seen,
        ),
    }
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

pub(crate) async fn ensure(
    e: &Engine<'_>,
    input: &Input<'_>,
    valid: &Valid,
    actions: &mut Vec<Action>,
) -> Result<Leg, StepFail> {
    let want_tags = link_tags(input.name, input.uid);
    let mut lost = BTreeSet::new();
    let mut resolved: Option<(Router, Seen)> = None;
    for _ in 0..MAX_ROUNDS {
        let ports = ops::transit_ports(e)
            .await
            .map_err(|err| call_failed(LegCall::ListPorts, &err))?;
        let (router, mut seen) = match resolved.take() {
            Some(r) => r,
            None => {
                let own: Vec<&Port> = ports
                    .iter()
                    .filter(|p| rules::is_own(p, input.uid))
                    .collect();
                let (found, seen) =
                    observe_router(e, &input.spec.service_cluster_router, &own).await;
                let router = rules::resolve_router(&input.spec.service_cluster_router, found)?;
                let mut seen = seen;
                // Listed or read whole: its routes serve the reverse step.
                seen.service.get_or_insert_with(|| router.clone());
                (router, seen)
            }
        };
        let chosen = loop {
            let view = LegView {
                uid: input.uid,
                router_id: &router.id,
                pinned: valid.pinned_ip,
                subnet: e.fabric.transit_subnet,
                ports: &ports,
                peers: input.peers,
                lost_races: &lost,
            };
            match rules::plan(&view) {
                LegPlan::Refuse(f) => return Err(f),
                LegPlan::Unwind(list) => {
                    for (p, why) in &list {
                        let gw = ops::router(e, None, &e.fabric.gateway_router_id)
                            .await
                            .map_err(|err| call_failed(LegCall::Unwind(p), &err))?;
                        ops::unwind_port(
                            e,
                            p,
                            Some(&gw),
                            input.reverse_targets,
                            &input.status.reverse_routes,
                        )
                        .await
                        .map_err(|u| leg_unwind_failed(&u))?;
                        actions.push(unwind_action(p, why));
                    }
                    break None;
                }
                LegPlan::Create(ip) => {
                    match ops::create_leg(e, input.name, input.uid, &want_tags, ip).await {
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
                        Err(err) => return Err(call_failed(LegCall::Create(ip), &err)),
                    }
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
            // Ports changed: look again. Routes changed on both routers; the router the spec
            // names did not.
            resolved = Some((router, Seen::default()));
            continue;
        };
        let settle = rules::settle(&port, &want_tags, &router.id);
        if let Some(tags) = settle.tags {
            e.net
                .set_port_tags(&port.id, &tags)
                .await
                .map_err(|err| call_failed(LegCall::Tag(&port), &err))?;
            port.tags = tags;
        }
        let ip = rules::leg_ip(&port)?;
        if settle.attach {
            seen.service = None;
            if let Err(err) = e.net.add_router_interface(&router.id, &port.id).await {
                // A retry after a lost answer finds the port already ours on this router.
                let now = e.net.get_port(&port.id).await.ok();
                if !rules::attach_already_done(&err, now.as_ref(), &router.id) {
                    return Err(call_failed(LegCall::Attach(&port, &router.id), &err));
                }
            }
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
            router_id: router.id,
            seen,
        });
    }
    Err(rules::unsettled(MAX_ROUNDS))
}
