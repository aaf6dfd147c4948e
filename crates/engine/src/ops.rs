//! The cloud operations every step shares: reading the transit network and routers, adding
//! and removing routes without touching anyone else's, and unwinding one leg port. A leaf:
//! it decides nothing the spec rules on (the plans do), it only carries decisions out.

use std::sync::LazyLock;

use bnerd_api::ReverseRoute;
use bnerd_api::names::{description_uid_marker, leg_port_name};
use bnerd_cloud::{
    CloudError, CreatePort, Neutron, NeutronErrorKind, Port, PortQuery, Route, Router,
};

use super::context::Engine;
use super::keyed_lock::KeyedLocks;
use super::plan::unwind::{UnwindError, detach_blocked, gateway_routes_via, reverse_to_remove};
use super::queries::network_ports_query;

/// Retries of a read-modify-write of a route table when another writer got in between.
const IF_MATCH_RETRIES: usize = 3;

/// Neutron's limit on a port's name and description.
const MAX_PORT_TEXT: usize = 255;

/// Every port on the network the link's legs stand on: the transit network, or a
/// `PerCustomer` link's customer transit (the operator owns both, so it sees every port).
pub(crate) async fn leg_network_ports(e: &Engine<'_>) -> Result<Vec<Port>, CloudError> {
    e.net
        .list_ports(&network_ports_query(e.leg_network().network_id))
        .await
}

/// Every port on the main transit network.
pub(crate) async fn main_transit_ports(e: &Engine<'_>) -> Result<Vec<Port>, CloudError> {
    e.net
        .list_ports(&network_ports_query(&e.fabric.transit_network_id))
        .await
}

/// The IPv4 subnets a router is connected to: its interface ports' subnets. The transit
/// subnet is the fabric's (no read); each other subnet costs one.
pub(crate) async fn connected_subnets(
    net: &dyn Neutron,
    fabric: &bnerd_cloud::fabric::Fabric,
    router_id: &str,
) -> Result<Vec<ipnet::Ipv4Net>, CloudError> {
    let q = PortQuery {
        device_ids: vec![router_id.to_string()],
        ..Default::default()
    };
    let mut ids: Vec<String> = net
        .list_ports(&q)
        .await?
        .iter()
        .filter(|p| p.is_router_interface())
        .flat_map(|p| p.fixed_ips.iter().map(|f| f.subnet_id.clone()))
        .collect();
    ids.sort();
    ids.dedup();
    let mut out = vec![];
    for id in ids {
        if id == fabric.transit_subnet_id {
            out.push(fabric.transit_subnet);
        } else if let Ok(c) = net.get_subnet(&id).await?.cidr.parse() {
            out.push(c);
        }
    }
    Ok(out)
}

/// The router as this reconcile already read it, else read now.
pub(crate) async fn router(
    net: &dyn Neutron,
    seen: Option<&Router>,
    id: &str,
) -> Result<Router, CloudError> {
    match seen {
        Some(r) => Ok(r.clone()),
        None => net.get_router(id).await,
    }
}

/// Cut `s` to at most `max` bytes on a character boundary.
fn bounded(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// The leg's description: the link's name for humans (cut to fit) and, always whole at the
/// end, the UID marker that proves ownership when Neutron drops the tags.
pub(crate) fn leg_description(name: &str, uid: &str) -> String {
    let marker = description_uid_marker(uid);
    let tail = format!(" leg, managed by bnerd-vpn-operator, {marker}");
    let room = MAX_PORT_TEXT.saturating_sub(tail.len() + "ClusterLink ".len());
    format!("ClusterLink {}{tail}", bounded(name, room))
}

/// Create the leg port at `ip`, tags in the body where Neutron keeps them.
pub(crate) async fn create_leg(
    e: &Engine<'_>,
    name: &str,
    uid: &str,
    tags: &[String],
    ip: Option<std::net::Ipv4Addr>,
) -> Result<Port, CloudError> {
    let req = CreatePort {
        network_id: e.leg_network().network_id.to_string(),
        subnet_id: Some(e.leg_network().subnet_id.to_string()),
        ip_address: ip.map(|ip| ip.to_string()),
        name: bounded(&leg_port_name(name), MAX_PORT_TEXT).to_string(),
        description: leg_description(name, uid),
        // Sent when listed; whether they stuck is checked after (plan::leg::settle).
        tags: if e.fabric.tags_at_create {
            tags.to_vec()
        } else {
            vec![]
        },
    };
    e.leg_client().create_port(&req).await
}

/// One route write at a time per router from this process. ML2/OVN turns a route write into a
/// change of OVN's static routes worked out apart from Neutron's own transaction: two writes on
/// one router at once (two links' gateway routes, an edge route moved while another is added)
/// leave OVN routing by a table Neutron no longer shows (docs/design.md, "How Neutron backends
/// differ"). Every route write of the engine holds its router's lock for that one call.
static ROUTE_WRITES: LazyLock<KeyedLocks> = LazyLock::new(Default::default);

/// Hold `router_id`'s route-write lock until the guard drops.
async fn route_write(router_id: &str) -> tokio::sync::OwnedMutexGuard<()> {
    ROUTE_WRITES.hold(router_id).await
}

/// `add_extraroutes` (`add`) or `remove_extraroutes` of exactly `routes`, in turn with every
/// other route write on the router; the router as Neutron answers.
pub(crate) async fn extraroutes(
    net: &dyn Neutron,
    router_id: &str,
    routes: &[Route],
    add: bool,
) -> Result<Router, CloudError> {
    let _one = route_write(router_id).await;
    if add {
        net.add_extraroutes(router_id, routes).await
    } else {
        net.remove_extraroutes(router_id, routes).await
    }
}

/// Empty a router's route table (one `PUT`), in turn with every other route write on it.
pub(crate) async fn clear_routes(net: &dyn Neutron, router_id: &str) -> Result<Router, CloudError> {
    let _one = route_write(router_id).await;
    net.set_routes(router_id, &[], None).await
}

/// Add routes without touching anyone else's: extraroute-atomic when loaded, else a
/// GET + PUT guarded by If-Match on the revision, retried on a lost race.
pub(crate) async fn add_routes(
    e: &Engine<'_>,
    net: &dyn Neutron,
    router: &Router,
    add: &[Route],
) -> Result<(), CloudError> {
    let _one = route_write(&router.id).await;
    if e.fabric.extraroute_atomic {
        return net.add_extraroutes(&router.id, add).await.map(|_| ());
    }
    edit_table(net, router, |routes| {
        for a in add {
            if !routes.contains(a) {
                routes.push(a.clone());
            }
        }
    })
    .await
}

/// Swap `remove` for `add` in one write: the route table as `router` was read with the one
/// change, `PUT` with If-Match on its revision (re-read and redone if someone wrote first).
/// The caller checked the cloud honours If-Match.
pub(crate) async fn swap_routes(
    net: &dyn Neutron,
    router: &Router,
    remove: &[Route],
    add: &Route,
) -> Result<(), CloudError> {
    let _one = route_write(&router.id).await;
    edit_table(net, router, |routes| {
        routes.retain(|r| !remove.contains(r));
        if !routes.contains(add) {
            routes.push(add.clone());
        }
    })
    .await
}

/// Remove exactly these routes; a router that is gone has none left.
pub(crate) async fn remove_routes(
    e: &Engine<'_>,
    net: &dyn Neutron,
    router: &Router,
    remove: &[Route],
) -> Result<(), CloudError> {
    if remove.is_empty() {
        return Ok(());
    }
    let _one = route_write(&router.id).await;
    let res = if e.fabric.extraroute_atomic {
        net.remove_extraroutes(&router.id, remove).await.map(|_| ())
    } else {
        edit_table(net, router, |routes| routes.retain(|r| !remove.contains(r))).await
    };
    gone_is_done(res)
}

async fn edit_table(
    net: &dyn Neutron,
    router: &Router,
    edit: impl Fn(&mut Vec<Route>),
) -> Result<(), CloudError> {
    let mut current = router.clone();
    let mut attempt = 0;
    loop {
        let mut next = current.routes.clone();
        edit(&mut next);
        if next == current.routes {
            return Ok(());
        }
        match net
            .set_routes(&current.id, &next, Some(current.revision_number))
            .await
        {
            Ok(_) => return Ok(()),
            Err(err) if err.status() == Some(412) && attempt < IF_MATCH_RETRIES => {
                attempt += 1;
                current = net.get_router(&current.id).await?;
            }
            Err(err) => return Err(err),
        }
    }
}

/// Gone already counts as done.
pub(crate) fn gone_is_done(r: Result<(), CloudError>) -> Result<(), CloudError> {
    match r {
        Err(e) if e.is_not_found() => Ok(()),
        other => other,
    }
}

fn cloud(context: String) -> impl FnOnce(CloudError) -> UnwindError {
    move |error| UnwindError::Cloud { context, error }
}

/// Unwind one leg port of this link, in the unwind order: the gateway-router routes via its
/// address (when `gateway` is given; the delete removes them in one go before), the reverse
/// routes on its router, the attachment (Neutron deletes the port with it), then the port.
pub(crate) async fn unwind_port(
    e: &Engine<'_>,
    port: &Port,
    gateway_router: Option<&Router>,
    screened: &[ReverseRoute],
    recorded_reverse: &[ReverseRoute],
) -> Result<(), UnwindError> {
    if let Some(gw) = gateway_router {
        let via = gateway_routes_via(&gw.routes, port);
        remove_routes(e, e.net, gw, &via)
            .await
            .map_err(cloud(format!(
                "removing routes via {} from gateway router {}",
                port.first_ip().unwrap_or("?"),
                gw.id
            )))?;
    }
    let leg = e.leg_client();
    if port.is_router_interface() {
        let rid = &port.device_id;
        let mut reverse = vec![];
        // Without a gateway asking for one and none recorded, no reverse route can be ours.
        let edge = e.customer_transit().map(|t| t.gateway.to_string());
        let may_have_reverse =
            !screened.is_empty() || !recorded_reverse.is_empty() || edge.is_some();
        if may_have_reverse {
            match leg.get_router(rid).await {
                Ok(router) => {
                    reverse = reverse_to_remove(
                        &router.routes,
                        recorded_reverse,
                        screened,
                        edge.as_deref(),
                    );
                    remove_routes(e, leg, &router, &reverse)
                        .await
                        .map_err(cloud(format!("removing reverse routes from router {rid}")))?;
                }
                Err(err) if err.is_not_found() => {}
                Err(err) => return Err(cloud(format!("reading router {rid}"))(err)),
            }
        }
        match leg.remove_router_interface(rid, &port.id).await {
            // Neutron deletes an interface port with its detach.
            Ok(()) => return Ok(()),
            Err(err) if err.is_not_found() => {}
            Err(err) if err.is(NeutronErrorKind::RouterInterfaceInUseByRoute) => {
                let routes = match leg.get_router(rid).await {
                    Ok(r) => r.routes,
                    Err(_) => vec![],
                };
                let left: Vec<Route> = routes
                    .into_iter()
                    .filter(|r| !reverse.contains(r))
                    .collect();
                return Err(detach_blocked(port, rid, &left, e.leg_network().subnet));
            }
            Err(err) => {
                return Err(cloud(format!(
                    "detaching leg port {} from router {rid}",
                    port.id
                ))(err));
            }
        }
    }
    gone_is_done(leg.delete_port(&port.id).await)
        .map_err(cloud(format!("deleting leg port {}", port.id)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnerd_api::names::leg_owner_uid;

    #[test]
    fn a_long_name_never_pushes_the_description_past_neutrons_limit() {
        // Finding 7: a link name over ~155 characters made the description exceed 255 and the
        // create fail forever. The marker stays whole, so ownership is still provable.
        let uid = "0b5a2f4e-1111-4222-8333-444455556666";
        for len in [1, 100, 155, 200, 253] {
            let name = "n".repeat(len);
            let d = leg_description(&name, uid);
            assert!(d.len() <= MAX_PORT_TEXT, "{len}: {}", d.len());
            assert_eq!(leg_owner_uid(&[], &d), Some(uid), "{len}");
        }
        assert!(leg_description("svc01-link", uid).starts_with("ClusterLink svc01-link leg"));
        assert_eq!(bounded("ééé", 3), "é");
    }
}
