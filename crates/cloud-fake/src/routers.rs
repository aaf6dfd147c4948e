//! Routers: interfaces (attach, detach, the subnet rule), extra routes (atomic add/remove and
//! the whole-table PUT with its revision guard), validation and quota, creation and deletion.
//!
//! One module although it passes 500 lines: interfaces and routes constrain each other (a
//! nexthop must lie on a subnet an interface connects, and an interface cannot go while a
//! route needs it), so both sides read the same `router_interfaces` and the router kind that
//! decides an interface's device_owner; split, each half would reach into the other.

use std::net::Ipv4Addr;

use bnerd_cloud::refusals;
use bnerd_cloud::{
    CloudError, CreateRouter, FixedIp, OWNER_ROUTER_INTERFACE, OWNER_ROUTER_INTERFACE_DVR,
    OWNER_ROUTER_INTERFACE_HA, Port, Result, Route, Router, RouterQuery, Subnet,
};

use crate::faults::Op;
use crate::networks::subnet_net;
use crate::policy::port_not_found;
use crate::world::{
    EXTRAROUTE_ATOMIC, FakeNeutron, REVISION_IF_MATCH, RouterKind, World, api, new_id, unknown_url,
};

/// The device_owner Neutron gives this router's interface ports (measured on the lab: an HA
/// router's is `network:ha_router_replicated_interface`, a DVR router's
/// `network:router_interface_distributed`). DVR wins over HA, as in Neutron's
/// `_get_device_owner` (l3_hamode_db defers to l3_dvr_db for a distributed router).
/// With ML2/OVN every interface is `network:router_interface` (measured), HA flag or not.
fn interface_owner(w: &World, router_id: &str) -> &'static str {
    if w.ml2_ovn() {
        return OWNER_ROUTER_INTERFACE;
    }
    match w.router_kinds.get(router_id).copied().unwrap_or_default() {
        RouterKind {
            distributed: true, ..
        } => OWNER_ROUTER_INTERFACE_DVR,
        RouterKind { ha: true, .. } => OWNER_ROUTER_INTERFACE_HA,
        _ => OWNER_ROUTER_INTERFACE,
    }
}

/// Neutron's refusal of an interface on `subnet_id` while the router has interfaces on
/// `on_subnets`: the same subnet, or with ML2/OVN (which checks by CIDR) an overlapping one.
fn second_interface(
    w: &World,
    path: &str,
    subnet_id: &str,
    on_subnets: &[Subnet],
) -> Option<CloudError> {
    use bnerd_cloud::refusals::SubnetRef;
    let new = w.subnets.get(subnet_id)?;
    let by_cidr = w.ml2_ovn();
    let clash = on_subnets.iter().find(|s| {
        s.id == subnet_id
            || (by_cidr
                && match (subnet_net(s), subnet_net(new)) {
                    (Some(a), Some(b)) => a.contains(&b.network()) || b.contains(&a.network()),
                    _ => false,
                })
    })?;
    fn r(s: &Subnet) -> SubnetRef<'_> {
        SubnetRef {
            id: &s.id,
            cidr: &s.cidr,
        }
    }
    Some(refusals::second_router_interface_refused(
        path,
        by_cidr,
        r(new),
        r(clash),
    ))
}

/// Subnets a router has an interface on, with the interface IPs.
fn router_interfaces(w: &World, router_id: &str) -> Vec<(Subnet, String)> {
    w.ports
        .values()
        .filter(|p| p.is_interface_of(router_id))
        .flat_map(|p| {
            p.fixed_ips.iter().filter_map(|f| {
                w.subnets
                    .get(&f.subnet_id)
                    .map(|s| (s.clone(), f.ip_address.clone()))
            })
        })
        .collect()
}

fn py_routes(routes: &[Route]) -> String {
    let items: Vec<String> = routes
        .iter()
        .map(|r| {
            format!(
                "{{'destination': '{}', 'nexthop': '{}'}}",
                r.destination, r.nexthop
            )
        })
        .collect();
    format!("[{}]", items.join(", "))
}

/// Neutron's extraroute validation: valid CIDR, nexthop on a connected subnet, not the
/// router's own address.
fn validate_routes(
    w: &World,
    router_id: &str,
    routes: &[Route],
    method: &str,
    path: &str,
) -> Result<()> {
    let ifaces = router_interfaces(w, router_id);
    for r in routes {
        if r.destination.parse::<ipnet::IpNet>().is_err() {
            // The extraroute-atomic actions parse with netaddr; PUT runs the API validator.
            return Err(if path.ends_with("extraroutes") {
                api(
                    method,
                    path,
                    400,
                    "AddrFormatError",
                    format!("invalid IPNetwork {}", r.destination),
                )
            } else {
                api(
                    method,
                    path,
                    400,
                    "HTTPBadRequest",
                    format!(
                        "Invalid input for routes. Reason: '{}' is not a valid CIDR.",
                        r.destination
                    ),
                )
            });
        }
        let hop: Option<Ipv4Addr> = r.nexthop.parse().ok();
        let connected = hop.is_some_and(|h| {
            ifaces
                .iter()
                .any(|(s, _)| subnet_net(s).is_some_and(|n| n.contains(&h)))
        });
        if !connected {
            return Err(api(
                method,
                path,
                400,
                "InvalidRoutes",
                format!(
                    "Invalid format for routes: {}, the nexthop is not connected with router",
                    py_routes(routes)
                ),
            ));
        }
        if ifaces.iter().any(|(_, ip)| *ip == r.nexthop) {
            return Err(api(
                method,
                path,
                400,
                "InvalidRoutes",
                format!(
                    "Invalid format for routes: {}, the nexthop is used by router",
                    py_routes(routes)
                ),
            ));
        }
    }
    Ok(())
}

/// Neutron 29 counts a router's routes against the `router_route` quota (the per-router
/// limit the deprecated `max_routes` option used to set), also for a whole-table PUT; up to
/// 2026.1 the server's `max_routes` refuses with a 400 of its own.
fn check_route_quota(w: &World, count: usize, method: &str, path: &str) -> Result<()> {
    if count > w.max_routes() && w.up_to_2026_1() {
        let router = path
            .trim_start_matches("/routers/")
            .split('/')
            .next()
            .unwrap_or_default();
        return Err(api(
            method,
            path,
            400,
            "RoutesExhausted",
            format!(
                "Unable to complete operation for {router}. The number of routes exceeds the maximum {}.",
                w.max_routes()
            ),
        ));
    }
    if count > w.max_routes() {
        return Err(api(
            method,
            path,
            409,
            "OverQuota",
            "Quota exceeded for resources: ['router_route'].".into(),
        ));
    }
    Ok(())
}

impl FakeNeutron {
    pub(crate) async fn router_get(&self, id: &str) -> Result<Router> {
        let path = format!("/routers/{id}");
        self.run(Op::GetRouter, "GET", &path, |w| {
            self.router_of(w, id, "GET", &path).cloned()
        })
        .await
    }

    pub(crate) async fn router_list(&self, q: &RouterQuery) -> Result<Vec<Router>> {
        self.run(Op::ListRouters, "GET", "/routers", |w| {
            let routers = w
                .routers
                .values()
                .filter(|r| self.owns(&r.project_id))
                .filter(|r| q.matches(r))
                .cloned()
                .collect();
            crate::world::only_fields("GET", "/routers", routers, &q.fields)
        })
        .await
    }

    pub(crate) async fn router_add_interface(&self, router_id: &str, port_id: &str) -> Result<()> {
        let path = format!("/routers/{router_id}/add_router_interface");
        let m = "PUT";
        self.run(Op::AddRouterInterface, m, &path, |w| {
            let router = self.router_of(w, router_id, m, &path)?.clone();
            let port = w
                .ports
                .get(port_id)
                .filter(|p| self.port_visible(w, p))
                .cloned()
                .ok_or_else(|| port_not_found(m, &path, port_id))?;
            if !self.admin && port.project_id != router.project_id {
                return Err(api(
                    m,
                    &path,
                    409,
                    "DeviceIDNotOwnedByTenant",
                    format!("The following device_id {router_id} is not owned by your project or matches another project router."),
                ));
            }
            if !port.device_id.is_empty() {
                return Err(refusals::port_in_use(&path, port_id, &port.network_id, &port.device_id));
            }
            let on_subnets: Vec<Subnet> = router_interfaces(w, router_id).into_iter().map(|(s, _)| s).collect();
            for f in &port.fixed_ips {
                if let Some(refused) = second_interface(w, &path, &f.subnet_id, &on_subnets) {
                    return Err(refused);
                }
            }
            let owner = interface_owner(w, router_id);
            if let Some(p) = w.ports.get_mut(port_id) {
                p.device_id = router_id.to_string();
                p.device_owner = owner.to_string();
                p.revision_number += 1;
            }
            if let Some(r) = w.routers.get_mut(router_id) {
                r.revision_number += 1;
            }
            Ok(())
        })
        .await
    }

    pub(crate) async fn router_remove_interface(
        &self,
        router_id: &str,
        port_id: &str,
    ) -> Result<()> {
        let path = format!("/routers/{router_id}/remove_router_interface");
        let m = "PUT";
        self.run(Op::RemoveRouterInterface, m, &path, |w| {
            let router = self.router_of(w, router_id, m, &path)?.clone();
            let port = w
                .ports
                .get(port_id)
                .filter(|p| p.is_interface_of(router_id))
                .cloned()
                .ok_or_else(|| refusals::router_interface_not_found(&path, router_id, port_id))?;
            for f in &port.fixed_ips {
                let Some(net) = w.subnets.get(&f.subnet_id).and_then(subnet_net) else {
                    continue;
                };
                let needed = router.routes.iter().any(|r| {
                    r.nexthop
                        .parse::<Ipv4Addr>()
                        .is_ok_and(|h| net.contains(&h))
                });
                if needed {
                    return Err(refusals::router_interface_in_use_by_route(
                        &path,
                        router_id,
                        &f.subnet_id,
                    ));
                }
            }
            // Neutron deletes an interface port when it is detached.
            w.ports.remove(port_id);
            if let Some(r) = w.routers.get_mut(router_id) {
                r.revision_number += 1;
            }
            Ok(())
        })
        .await
    }

    pub(crate) async fn router_add_extraroutes(
        &self,
        router_id: &str,
        routes: &[Route],
    ) -> Result<Router> {
        let path = format!("/routers/{router_id}/add_extraroutes");
        self.route_write(router_id, Op::AddExtraroutes, "PUT", &path, |w| {
            if !w.has_extension(EXTRAROUTE_ATOMIC) {
                return Err(unknown_url("PUT", &path));
            }
            let router = self.router_of(w, router_id, "PUT", &path)?.clone();
            let mut next = router.routes.clone();
            for r in routes {
                if !next.contains(r) {
                    next.push(r.clone());
                }
            }
            // Neutron validates the merged table, so its InvalidRoutes message lists every
            // route the router would have (measured), not only the ones added.
            validate_routes(w, router_id, &next, "PUT", &path)?;
            check_route_quota(w, next.len(), "PUT", &path)?;
            let r = w
                .routers
                .get_mut(router_id)
                .ok_or_else(|| api("PUT", &path, 404, "RouterNotFound", String::new()))?;
            if next != r.routes {
                r.routes = next;
                r.revision_number += 1;
            }
            Ok(r.clone())
        })
        .await
    }

    pub(crate) async fn router_remove_extraroutes(
        &self,
        router_id: &str,
        routes: &[Route],
    ) -> Result<Router> {
        let path = format!("/routers/{router_id}/remove_extraroutes");
        self.route_write(router_id, Op::RemoveExtraroutes, "PUT", &path, |w| {
            if !w.has_extension(EXTRAROUTE_ATOMIC) {
                return Err(unknown_url("PUT", &path));
            }
            self.router_of(w, router_id, "PUT", &path)?;
            let r = w
                .routers
                .get_mut(router_id)
                .ok_or_else(|| api("PUT", &path, 404, "RouterNotFound", String::new()))?;
            let before = r.routes.len();
            r.routes.retain(|x| !routes.contains(x));
            if r.routes.len() != before {
                r.revision_number += 1;
            }
            Ok(r.clone())
        })
        .await
    }

    pub(crate) async fn router_set_routes(
        &self,
        router_id: &str,
        routes: &[Route],
        if_revision: Option<u64>,
    ) -> Result<Router> {
        let path = format!("/routers/{router_id}");
        self.route_write(router_id, Op::SetRoutes, "PUT", &path, |w| {
            // Neutron reads If-Match in a hook that runs before policy and the router lookup,
            // and refuses a revision constraint it cannot enforce rather than ignore it
            // (neutron.api.api_common.ensure_if_match_supported).
            if if_revision.is_some() && !w.has_extension(REVISION_IF_MATCH) {
                return Err(api(
                    "PUT",
                    &path,
                    400,
                    "BadRequest",
                    "Bad if-match request: This server does not support constraining operations based on revision numbers.".into(),
                ));
            }
            let router = self.router_of(w, router_id, "PUT", &path)?.clone();
            if let Some(rev) = if_revision
                && rev != router.revision_number
            {
                return Err(api(
                    "PUT",
                    &path,
                    412,
                    "RevisionNumberConstraintFailed",
                    format!(
                        "Constrained to {rev}, but current revision is {}",
                        router.revision_number
                    ),
                ));
            }
            validate_routes(w, router_id, routes, "PUT", &path)?;
            check_route_quota(w, routes.len(), "PUT", &path)?;
            let r = w
                .routers
                .get_mut(router_id)
                .ok_or_else(|| api("PUT", &path, 404, "RouterNotFound", String::new()))?;
            r.routes = routes.to_vec();
            r.revision_number += 1;
            Ok(r.clone())
        })
        .await
    }

    pub(crate) async fn router_add_subnet(
        &self,
        router_id: &str,
        subnet_id: &str,
    ) -> Result<String> {
        let path = format!("/routers/{router_id}/add_router_interface");
        let m = "PUT";
        self.run(Op::AddRouterSubnet, m, &path, |w| {
            let router = self.router_of(w, router_id, m, &path)?.clone();
            let subnet = w.subnets.get(subnet_id).cloned().ok_or_else(|| {
                api(
                    m,
                    &path,
                    404,
                    "SubnetNotFound",
                    format!("Subnet {subnet_id} could not be found."),
                )
            })?;
            let on_subnets: Vec<Subnet> = router_interfaces(w, router_id)
                .into_iter()
                .map(|(s, _)| s)
                .collect();
            if let Some(refused) = second_interface(w, &path, subnet_id, &on_subnets) {
                return Err(refused);
            }
            let gw = subnet.gateway_ip.clone().unwrap_or_default();
            if w.ports
                .values()
                .any(|p| p.has_ip(&gw) && p.network_id == subnet.network_id)
            {
                return Err(api(
                    m,
                    &path,
                    409,
                    "IpAddressAlreadyAllocated",
                    format!("IP address {gw} already allocated in subnet {subnet_id}"),
                ));
            }
            let port = Port {
                id: new_id(),
                name: String::new(),
                description: String::new(),
                network_id: subnet.network_id.clone(),
                project_id: router.project_id.clone(),
                device_id: router_id.to_string(),
                device_owner: interface_owner(w, router_id).to_string(),
                fixed_ips: vec![FixedIp {
                    subnet_id: subnet_id.to_string(),
                    ip_address: gw,
                }],
                tags: vec![],
                revision_number: 1,
            };
            let id = port.id.clone();
            w.ports.insert(id.clone(), port);
            if let Some(r) = w.routers.get_mut(router_id) {
                r.revision_number += 1;
            }
            Ok(id)
        })
        .await
    }

    pub(crate) async fn router_create(&self, req: &CreateRouter) -> Result<Router> {
        let (m, path) = ("POST", "/routers");
        self.run(Op::CreateRouter, m, path, |w| {
            // Neutron's API layer checks the owner before policy looks at any attribute
            // (measured: a member asking for `ha` in another project gets this 400, not 403).
            if !self.admin && req.project_id.as_ref().is_some_and(|p| *p != self.project_id) {
                return Err(api(
                    m,
                    path,
                    400,
                    "HTTPBadRequest",
                    "Specifying 'project_id' other than the authenticated project in request is not allowed for the current user.".into(),
                ));
            }
            // ML2/OVN loads no `dvr`: `distributed` is an attribute the API does not know, for
            // anyone (measured: 400 before policy).
            if w.ml2_ovn() && req.distributed.is_some() {
                return Err(api(
                    m,
                    path,
                    400,
                    "HTTPBadRequest",
                    "Unrecognized attribute(s) 'distributed'".into(),
                ));
            }
            // `ha` and `distributed` are admin-only attributes: naming one at all is refused,
            // `false` included (measured).
            if !self.admin && (req.ha.is_some() || req.distributed.is_some()) {
                let mut rule = "rule:create_router".to_string();
                for (attr, set) in [("ha", req.ha), ("distributed", req.distributed)] {
                    if set.is_some() {
                        rule = format!("({rule} and rule:create_router:{attr})");
                    }
                }
                return Err(api(
                    m,
                    path,
                    403,
                    "PolicyNotAuthorized",
                    format!("{rule} is disallowed by policy"),
                ));
            }
            let owner = req
                .project_id
                .clone()
                .unwrap_or_else(|| self.project_id.clone());
            w.check_quota(&owner, "router", m, path)?;
            let r = Router {
                id: new_id(),
                name: req.name.clone(),
                project_id: owner,
                routes: vec![],
                revision_number: 1,
            };
            w.routers.insert(r.id.clone(), r.clone());
            let kind = RouterKind {
                ha: req.ha.unwrap_or(false),
                distributed: req.distributed.unwrap_or(false),
            };
            w.router_kinds.insert(r.id.clone(), kind);
            Ok(r)
        })
        .await
    }

    pub(crate) async fn router_delete(&self, id: &str) -> Result<()> {
        let path = format!("/routers/{id}");
        self.run(Op::DeleteRouter, "DELETE", &path, |w| {
            self.router_of(w, id, "DELETE", &path)?;
            let attached: Vec<String> = w
                .ports
                .values()
                .filter(|p| p.device_id == id)
                .map(|p| p.id.clone())
                .collect();
            if !attached.is_empty() {
                return Err(api(
                    "DELETE",
                    &path,
                    409,
                    "RouterInUse",
                    format!(
                        "Router {id} has ports still attached: {}",
                        attached.join(", ")
                    ),
                ));
            }
            w.routers.remove(id);
            w.router_kinds.remove(id);
            Ok(())
        })
        .await
    }
}
