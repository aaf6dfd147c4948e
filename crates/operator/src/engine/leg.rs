//! LegAttached: find, create or adopt the leg port, and attach it to the service router.

use std::net::Ipv4Addr;

use bnerd_api::Reason;
use bnerd_api::cidr::transit_candidates;
use bnerd_api::names::{
    TAG_MANAGED, description_uid_marker, is_managed, leg_owner_uid, leg_port_name, tag_link_name,
    tag_link_uid,
};
use bnerd_cloud::{
    CloudError, CreatePort, OWNER_ROUTER_INTERFACE, Port, PortQuery, Router, RouterQuery,
};

use super::report::Report;
use super::validate::Valid;
use super::{Engine, Input, Leg, StepFail};

/// Neutron limits a tag to 255 characters.
const MAX_TAG: usize = 255;

pub(crate) fn link_tags(name: &str, uid: &str) -> Vec<String> {
    let mut name_tag = tag_link_name(name);
    name_tag.truncate(MAX_TAG);
    vec![TAG_MANAGED.to_string(), tag_link_uid(uid), name_tag]
}

fn is_own(p: &Port, uid: &str) -> bool {
    leg_owner_uid(&p.tags, &p.description) == Some(uid)
}

fn looks_like_uuid(s: &str) -> bool {
    s.len() == 36 && s.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}

pub(crate) fn port_ip(p: &Port) -> Option<Ipv4Addr> {
    p.first_ip().and_then(|ip| ip.parse().ok())
}

fn describe_holder(p: &Port) -> String {
    let owner = if p.device_owner.is_empty() {
        "no device owner".to_string()
    } else {
        format!("device_owner {}", p.device_owner)
    };
    let device = if p.device_id.is_empty() {
        String::new()
    } else {
        format!(", device {}", p.device_id)
    };
    format!("port {} ({owner}{device}, project {})", p.id, p.project_id)
}

/// The port this link owns, by status first (one GET), else by its owner marks among the
/// network's ports (returned too: the allocator needs them anyway).
pub(crate) async fn find_own(
    e: &Engine<'_>,
    input: &Input<'_>,
) -> Result<(Option<Port>, Option<Vec<Port>>), CloudError> {
    if let Some(id) = &input.status.leg_port_id {
        match e.net.get_port(id).await {
            Ok(p) if is_own(&p, input.uid) => return Ok((Some(p), None)),
            Ok(_) => {}
            Err(err) if err.is_not_found() => {}
            Err(err) => return Err(err),
        }
    }
    let q = PortQuery {
        network_id: Some(e.fabric.transit_network_id.clone()),
        ..Default::default()
    };
    let ports = e.net.list_ports(&q).await?;
    let mut mine: Vec<&Port> = ports.iter().filter(|p| is_own(p, input.uid)).collect();
    // Two tagged ports can only come from a crash between create and status; keep the one
    // status names, else the lowest address.
    mine.sort_by_key(|p| {
        (
            Some(p.id.as_str()) != input.status.leg_port_id.as_deref(),
            port_ip(p),
        )
    });
    Ok((mine.first().map(|p| (*p).clone()), Some(ports)))
}

/// Routers read while resolving, handed to the route steps of the same reconcile so a
/// converged link costs one router read, not three.
#[derive(Debug, Clone, Default)]
pub(crate) struct Seen {
    pub gateway: Option<Router>,
    pub service: Option<Router>,
}

/// Resolve spec.serviceClusterRouter by ID or name, at every reconcile.
///
/// When the leg is already an interface of some router, that router and the gateway router
/// are read in one `GET /routers?id=&id=`; if it is still the router the spec names (same ID,
/// or same name), that settles it. A second router taking the same name later does not unseat
/// a working leg; a rename, or a spec naming another router, falls through to a full lookup
/// (where an ambiguous name is an error).
async fn resolve_router(
    e: &Engine<'_>,
    value: &str,
    hint: Option<&Port>,
) -> Result<(String, Seen), StepFail> {
    let fail = |m: String| StepFail::terminal(Reason::RouterResolveFailed, m);
    let mut seen = Seen::default();
    let attached_to = hint
        .filter(|p| !p.device_id.is_empty() && p.device_owner.starts_with(OWNER_ROUTER_INTERFACE))
        .map(|p| p.device_id.clone());
    if let Some(current) = attached_to {
        let gw = &e.fabric.gateway_router_id;
        let q = RouterQuery {
            ids: vec![gw.clone(), current.clone()],
            ..Default::default()
        };
        // On failure fall through to the plain lookups, so a gateway-router problem is
        // reported by the step that owns it (RouteInstalled), not as RouterResolveFailed.
        if let Ok(found) = e.net.list_routers(&q).await {
            seen.gateway = found.iter().find(|r| &r.id == gw).cloned();
            if let Some(s) = found
                .into_iter()
                .find(|r| r.id == current && (r.id == value || r.name == value))
            {
                seen.service = Some(s);
                return Ok((current, seen));
            }
        }
    }
    if looks_like_uuid(value) {
        match e.net.get_router(value).await {
            Ok(r) => return Ok((r.id, seen)),
            Err(err) if err.is_not_found() => {}
            Err(err) => {
                return Err(StepFail::cloud(
                    Reason::RouterResolveFailed,
                    &format!("reading router {value}"),
                    &err,
                ));
            }
        }
    }
    let q = RouterQuery {
        name: Some(value.to_string()),
        ..Default::default()
    };
    let found = e.net.list_routers(&q).await.map_err(|err| {
        StepFail::cloud(
            Reason::RouterResolveFailed,
            &format!("looking up router {value:?}"),
            &err,
        )
    })?;
    match found.as_slice() {
        [] => Err(fail(format!(
            "spec.serviceClusterRouter {value:?}: no router with that name or ID is visible to the operator credential"
        ))),
        [r] => Ok((r.id.clone(), seen)),
        many => {
            let ids: Vec<&str> = many.iter().map(|r| r.id.as_str()).collect();
            Err(fail(format!(
                "spec.serviceClusterRouter {value:?} is ambiguous: {} routers carry that name ({}); use the router ID",
                many.len(),
                ids.join(", ")
            )))
        }
    }
}

pub(crate) async fn ensure(
    e: &Engine<'_>,
    input: &Input<'_>,
    valid: &Valid,
    r: &mut Report,
) -> Result<Leg, StepFail> {
    let (mut own, mut listed) = find_own(e, input).await.map_err(|err| {
        StepFail::cloud(Reason::EnsureLegPortFailed, "finding the leg port", &err)
    })?;
    let (router_id, mut seen) =
        resolve_router(e, &input.spec.service_cluster_router, own.as_ref()).await?;

    // The spec moved the leg (another router, another pinned IP): unwind the old one first so
    // nothing is left behind at the old place (DESIGN 6.6).
    if let Some(p) = &own {
        let wrong_router = !p.device_id.is_empty() && p.device_id != router_id;
        let wrong_ip = valid.pinned_ip.is_some_and(|ip| port_ip(p) != Some(ip));
        if wrong_router || wrong_ip {
            super::cleanup::unwind_leg(e, input, p, r).await?;
            r.action(
                "LegMoved",
                format!("removed leg port {} to rebuild it per the new spec", p.id),
            );
            own = None;
            listed = None;
            // The unwind changed both routers' routes.
            seen = Seen::default();
        }
    }

    let mut port = match own {
        Some(p) => p,
        None => allocate(e, input, valid, &router_id, listed, r).await?,
    };
    ensure_tags(e, input, &mut port).await?;
    let ip = port_ip(&port).ok_or_else(|| {
        StepFail::terminal(
            Reason::EnsureLegPortFailed,
            format!("leg port {} has no IPv4 address", port.id),
        )
    })?;
    r.status.leg_port_id = Some(port.id.clone());
    r.status.transit_ip = Some(ip.to_string());

    if !port.is_interface_of(&router_id) {
        seen.service = None;
        if let Err(err) = e.net.add_router_interface(&router_id, &port.id).await {
            // A retry after a lost answer finds the port already ours on this router.
            let done = err.is_kind("PortInUse")
                && e.net.get_port(&port.id).await.is_ok_and(|p| {
                    let ok = p.is_interface_of(&router_id);
                    port = p;
                    ok
                });
            if !done {
                return Err(StepFail::cloud(
                    Reason::EnsureRouterHasPortFailed,
                    &format!("attaching leg port {} to router {router_id}", port.id),
                    &err,
                ));
            }
        }
        r.action(
            "LegAttached",
            format!("attached leg port {} ({ip}) to router {router_id}", port.id),
        );
    }
    r.status.service_router_id = Some(router_id.clone());
    Ok(Leg {
        port_id: port.id,
        ip,
        router_id,
        seen,
    })
}

/// The transit-IP walk (DESIGN 6.1): .3 upward (or only the pinned address), skipping
/// addresses other links claim; free → create, untagged interface of our router → adopt.
async fn allocate(
    e: &Engine<'_>,
    input: &Input<'_>,
    valid: &Valid,
    router_id: &str,
    listed: Option<Vec<Port>>,
    r: &mut Report,
) -> Result<Port, StepFail> {
    let mut ports = match listed {
        Some(p) => p,
        None => {
            let q = PortQuery {
                network_id: Some(e.fabric.transit_network_id.clone()),
                ..Default::default()
            };
            e.net.list_ports(&q).await.map_err(|err| {
                StepFail::cloud(Reason::EnsureLegPortFailed, "listing transit ports", &err)
            })?
        }
    };
    let unavailable = |m: String| StepFail::terminal(Reason::TransitIPUnavailable, m);
    let candidates: Vec<Ipv4Addr> = match valid.pinned_ip {
        Some(ip) => vec![ip],
        None => transit_candidates(e.fabric.transit_subnet).collect(),
    };
    let pinned = valid.pinned_ip.is_some();
    for ip in candidates {
        if let Some(peer) = input.peers.iter().find(|p| p.transit_ips.contains(&ip)) {
            if pinned {
                return Err(unavailable(format!(
                    "spec.transitIP {ip} is already claimed by ClusterLink {}",
                    peer.name
                )));
            }
            continue;
        }
        let ip_s = ip.to_string();
        match ports.iter().find(|p| p.has_ip(&ip_s)) {
            Some(h) if !is_managed(&h.tags) && h.is_interface_of(router_id) => {
                return adopt(e, input, h.clone(), r).await;
            }
            Some(h) if pinned => {
                return Err(unavailable(format!(
                    "spec.transitIP {ip} is held by {}, which this link does not own",
                    describe_holder(h)
                )));
            }
            Some(_) => continue,
            None => {}
        }
        match create(e, input, &ip_s).await {
            Ok(p) => {
                r.action(
                    "LegPortCreated",
                    format!("created leg port {} at {ip}", p.id),
                );
                return Ok(p);
            }
            // Someone (another link, another reconcile) took it between our list and create.
            Err(err) if err.is_kind("IpAddressAlreadyAllocated") => {
                if pinned {
                    let q = PortQuery {
                        network_id: Some(e.fabric.transit_network_id.clone()),
                        ip_address: Some(ip_s.clone()),
                        ..Default::default()
                    };
                    ports = e.net.list_ports(&q).await.unwrap_or_default();
                    let holder = ports
                        .first()
                        .map(describe_holder)
                        .unwrap_or_else(|| "another port".into());
                    if let Some(h) = ports
                        .first()
                        .filter(|h| !is_managed(&h.tags) && h.is_interface_of(router_id))
                    {
                        return adopt(e, input, h.clone(), r).await;
                    }
                    return Err(unavailable(format!(
                        "spec.transitIP {ip} is held by {holder}, which this link does not own"
                    )));
                }
                continue;
            }
            Err(err) => {
                return Err(StepFail::cloud(
                    Reason::EnsureLegPortFailed,
                    &format!("creating leg port at {ip}"),
                    &err,
                ));
            }
        }
    }
    Err(unavailable(format!(
        "no free transit address left in {}",
        e.fabric.transit_subnet
    )))
}

async fn create(e: &Engine<'_>, input: &Input<'_>, ip: &str) -> Result<Port, CloudError> {
    let tags = link_tags(input.name, input.uid);
    let req = CreatePort {
        network_id: e.fabric.transit_network_id.clone(),
        subnet_id: Some(e.fabric.transit_subnet_id.clone()),
        ip_address: Some(ip.to_string()),
        name: leg_port_name(input.name),
        description: format!(
            "ClusterLink {} leg, managed by bnerd-vpn-operator, {}",
            input.name,
            description_uid_marker(input.uid)
        ),
        // Sent when listed; whether they stuck is checked after (ensure_tags).
        tags: if e.fabric.tags_at_create {
            tags
        } else {
            vec![]
        },
    };
    e.net.create_port(&req).await
}

/// Without ML2's `tag_ports_during_bulk_creation` driver (the lab's and most clouds' setup)
/// Neutron drops tags from a port's create body: set them in one call if they are missing,
/// whatever the extension list claimed.
async fn ensure_tags(e: &Engine<'_>, input: &Input<'_>, port: &mut Port) -> Result<(), StepFail> {
    let want = link_tags(input.name, input.uid);
    if want.iter().all(|t| port.has_tag(t)) {
        return Ok(());
    }
    let mut all = port.tags.clone();
    all.extend(want.into_iter().filter(|t| !port.has_tag(t)));
    e.net.set_port_tags(&port.id, &all).await.map_err(|err| {
        StepFail::cloud(
            Reason::EnsureLegPortFailed,
            &format!("tagging leg port {}", port.id),
            &err,
        )
    })?;
    port.tags = all;
    Ok(())
}

/// Take over a hand-made leg: tag it so every later reconcile (and the unwind) finds it.
async fn adopt(
    e: &Engine<'_>,
    input: &Input<'_>,
    mut port: Port,
    r: &mut Report,
) -> Result<Port, StepFail> {
    ensure_tags(e, input, &mut port).await?;
    r.action(
        "LegPortAdopted",
        format!(
            "adopted untagged port {} at {} already attached to router {}",
            port.id,
            port.first_ip().unwrap_or("?"),
            port.device_id
        ),
    );
    Ok(port)
}
