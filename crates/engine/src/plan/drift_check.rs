//! The drift check's one decision (docs/design.md, "The drift check"): from two reads for the
//! whole estate — the operator project's routers with their routes, and every router interface
//! the operator can see (its own, and every port on the networks it owns: the transit network
//! and each customer transit) — which links no longer have what their status records:
//!
//! - the gateway route (`status.gatewayRoute`) on the gateway router;
//! - the leg (`status.legPortID`): still listed as an interface of the router status recorded,
//!   at `status.transitIP`. A leg detached, deleted or re-addressed is no longer one (Neutron
//!   deletes a port `router remove port` detaches);
//! - for a `PerCustomer` link, its project's edge leg (an interface of the edge router at
//!   `status.customerTransit.edgeRouterTransitIP`) and the edge router's route to the link's
//!   CIDR via the leg.
//!
//! Each link that drifted is reconciled at once; the others cost nothing. What sits on a
//! service router (the reverse routes, a `PerCustomer` link's return route) needs a read per
//! router, often with a customer's credential: the resync keeps those.

use bnerd_cloud::{Port, Route, Router};

/// What a link's status says it holds on the cloud, as far as the check looks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedPath {
    pub link: String,
    /// `status.gatewayRoute`: the gateway router must hold it.
    pub gateway_route: Route,
    /// The link's leg, when status names its port.
    pub leg: Option<RecordedLeg>,
    /// A `PerCustomer` link's edge router, when status names it.
    pub edge: Option<RecordedEdge>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedLeg {
    pub port_id: String,
    pub ip: String,
    /// The router it must be an interface of (`status.serviceRouterID`; status written by an
    /// older version may lack it, and then any router will do).
    pub router_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedEdge {
    pub router_id: String,
    /// The edge router's address on the main transit (the gateway route's next hop).
    pub transit_ip: String,
    /// The edge router's route to the link's CIDR via its leg.
    pub route: Option<Route>,
}

/// A link that drifted, and what the check saw (for the log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Drift {
    pub link: String,
    pub why: String,
}

/// The reads did not show the gateway router: the answer cannot be judged (a route missing
/// from a router that was not listed is not drift), so nothing is reconciled for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the gateway router {0} is not among the routers of the operator's project; the drift check cannot tell what drifted"
)]
pub struct GatewayRouterNotListed(pub String);

/// Every link of `paths` whose recorded path the reads no longer show, in `paths`' order.
pub fn drifted(
    paths: &[RecordedPath],
    gateway_router_id: &str,
    routers: &[Router],
    interfaces: &[Port],
) -> Result<Vec<Drift>, GatewayRouterNotListed> {
    let gateway = routers
        .iter()
        .find(|r| r.id == gateway_router_id)
        .ok_or_else(|| GatewayRouterNotListed(gateway_router_id.to_string()))?;
    let index = Interfaces::of(interfaces);
    Ok(paths
        .iter()
        .filter_map(|p| {
            let mut why = vec![];
            if let Some(l) = &p.leg {
                why.extend(leg_check(&l.port_id, &l.ip, l.router_id.as_deref(), &index));
            }
            if let Some(e) = &p.edge {
                why.extend(edge_leg_check(&e.router_id, &e.transit_ip, &index));
            }
            if !gateway.routes.contains(&p.gateway_route) {
                why.push(format!(
                    "the gateway router no longer routes {} via {}",
                    p.gateway_route.destination, p.gateway_route.nexthop
                ));
            }
            if let Some(e) = &p.edge {
                why.extend(edge_route_check(e, routers));
            }
            (!why.is_empty()).then(|| Drift {
                link: p.link.clone(),
                why: why.join("; "),
            })
        })
        .collect())
}

/// The interfaces read, by port ID and by address (1000 links: one pass, not a scan a link).
pub struct Interfaces<'a> {
    by_id: std::collections::HashMap<&'a str, &'a Port>,
    by_ip: std::collections::HashMap<&'a str, Vec<&'a Port>>,
}

impl<'a> Interfaces<'a> {
    pub fn of(ports: &'a [Port]) -> Self {
        let mut by_id = std::collections::HashMap::new();
        let mut by_ip: std::collections::HashMap<&str, Vec<&Port>> =
            std::collections::HashMap::new();
        for p in ports {
            by_id.insert(p.id.as_str(), p);
            for f in &p.fixed_ips {
                by_ip.entry(f.ip_address.as_str()).or_default().push(p);
            }
        }
        Self { by_id, by_ip }
    }
}

/// A leg against the interfaces read: None while its port is an interface (of the recorded
/// router) at the recorded address; else why the link must be reconciled now.
pub fn leg_check(
    port_id: &str,
    ip: &str,
    router_id: Option<&str>,
    ifaces: &Interfaces<'_>,
) -> Option<String> {
    let Some(port) = ifaces.by_id.get(port_id) else {
        return Some(format!(
            "leg port {port_id} is no longer a router interface (deleted, or detached); {ip} is free for anyone"
        ));
    };
    if !port.has_ip(ip) {
        let now: Vec<&str> = port
            .fixed_ips
            .iter()
            .map(|f| f.ip_address.as_str())
            .collect();
        return Some(format!(
            "leg port {port_id} no longer holds {ip} (now [{}]); {ip} is free for anyone",
            now.join(", ")
        ));
    }
    match router_id {
        Some(r) if !port.is_interface_of(r) => Some(format!(
            "leg port {port_id} is an interface of router {} now, not of {r}",
            port.device_id
        )),
        _ => None,
    }
}

/// A `PerCustomer` project's edge leg: None while an interface of the edge router holds the
/// gateway route's next hop; else why.
pub fn edge_leg_check(router_id: &str, ip: &str, ifaces: &Interfaces<'_>) -> Option<String> {
    let held = ifaces
        .by_ip
        .get(ip)
        .is_some_and(|ps| ps.iter().any(|p| p.is_interface_of(router_id)));
    (!held).then(|| {
        format!(
            "no interface of edge router {router_id} holds {ip} on the transit network any more; {ip} is free for anyone"
        )
    })
}

fn edge_route_check(e: &RecordedEdge, routers: &[Router]) -> Option<String> {
    let Some(router) = routers.iter().find(|r| r.id == e.router_id) else {
        return Some(format!(
            "edge router {} is gone from the operator's project",
            e.router_id
        ));
    };
    let route = e.route.as_ref()?;
    (!router.routes.contains(route)).then(|| {
        format!(
            "edge router {} no longer routes {} via {}",
            e.router_id, route.destination, route.nexthop
        )
    })
}

#[cfg(test)]
mod tests {
    use bnerd_cloud::FixedIp;

    use super::*;

    const GW: &str = "gw";

    fn iface(id: &str, ip: &str, router: &str) -> Port {
        Port {
            id: id.into(),
            device_id: router.into(),
            device_owner: "network:router_interface".into(),
            fixed_ips: vec![FixedIp {
                subnet_id: "s".into(),
                ip_address: ip.into(),
            }],
            ..Default::default()
        }
    }

    fn router(id: &str, routes: &[Route]) -> Router {
        Router {
            id: id.into(),
            routes: routes.to_vec(),
            ..Default::default()
        }
    }

    fn same_tenant(link: &str, port: &str, ip: &str) -> RecordedPath {
        RecordedPath {
            link: link.into(),
            gateway_route: Route::new("10.251.0.0/16", ip),
            leg: Some(RecordedLeg {
                port_id: port.into(),
                ip: ip.into(),
                router_id: Some("svc".into()),
            }),
            edge: None,
        }
    }

    /// A `PerCustomer` link: its leg `leg` at 10.255.0.5 on router svc, its edge router
    /// `edge-1` at 10.254.0.7.
    fn per_customer(link: &str) -> RecordedPath {
        RecordedPath {
            link: link.into(),
            gateway_route: Route::new("10.252.0.0/16", "10.254.0.7"),
            leg: Some(RecordedLeg {
                port_id: "leg".into(),
                ip: "10.255.0.5".into(),
                router_id: Some("svc".into()),
            }),
            edge: Some(RecordedEdge {
                router_id: "edge-1".into(),
                transit_ip: "10.254.0.7".into(),
                route: Some(Route::new("10.252.0.0/16", "10.255.0.5")),
            }),
        }
    }

    /// One cloud where both links are whole.
    fn whole() -> (Vec<Router>, Vec<Port>) {
        (
            vec![
                router(
                    GW,
                    &[
                        Route::new("10.251.0.0/16", "10.254.0.3"),
                        Route::new("10.252.0.0/16", "10.254.0.7"),
                    ],
                ),
                router("edge-1", &[Route::new("10.252.0.0/16", "10.255.0.5")]),
            ],
            vec![
                iface("p1", "10.254.0.3", "svc"),
                iface("leg", "10.255.0.5", "svc"),
                iface("e1", "10.254.0.7", "edge-1"),
            ],
        )
    }

    #[test]
    fn a_whole_estate_sends_nothing() {
        let (routers, ports) = whole();
        let paths = [same_tenant("st", "p1", "10.254.0.3"), per_customer("pc")];
        assert_eq!(drifted(&paths, GW, &routers, &ports), Ok(vec![]));
    }

    #[test]
    fn table() {
        type Break = fn(&mut Vec<Router>, &mut Vec<Port>);
        let rows: Vec<(&str, Break, &str, &str)> = vec![
            (
                "the gateway route removed",
                |r, _| r[0].routes.retain(|x| x.nexthop != "10.254.0.3"),
                "st",
                "the gateway router no longer routes 10.251.0.0/16 via 10.254.0.3",
            ),
            (
                "the leg deleted (or detached: Neutron deletes it)",
                |_, p| p.retain(|x| x.id != "p1"),
                "st",
                "leg port p1 is no longer a router interface",
            ),
            (
                "the leg re-addressed by the network's owner",
                |_, p| p[0].fixed_ips[0].ip_address = "10.254.0.9".into(),
                "st",
                "leg port p1 no longer holds 10.254.0.3 (now [10.254.0.9])",
            ),
            (
                "the leg moved to another router",
                |_, p| p[0].device_id = "other".into(),
                "st",
                "leg port p1 is an interface of router other now, not of svc",
            ),
            (
                "a PerCustomer leg deleted",
                |_, p| p.retain(|x| x.id != "leg"),
                "pc",
                "leg port leg is no longer a router interface",
            ),
            (
                "the edge leg deleted",
                |_, p| p.retain(|x| x.id != "e1"),
                "pc",
                "no interface of edge router edge-1 holds 10.254.0.7",
            ),
            (
                "the edge route removed",
                |r, _| r[1].routes.clear(),
                "pc",
                "edge router edge-1 no longer routes 10.252.0.0/16 via 10.255.0.5",
            ),
            (
                "the edge router deleted",
                |r, _| {
                    r.pop();
                },
                "pc",
                "edge router edge-1 is gone from the operator's project",
            ),
        ];
        for (rule, brk, link, want) in rows {
            let (mut routers, mut ports) = whole();
            brk(&mut routers, &mut ports);
            let paths = [same_tenant("st", "p1", "10.254.0.3"), per_customer("pc")];
            let got = drifted(&paths, GW, &routers, &ports).expect(rule);
            assert_eq!(got.len(), 1, "{rule}: exactly the one link: {got:?}");
            assert_eq!(got[0].link, link, "{rule}");
            assert!(got[0].why.contains(want), "{rule}: {}", got[0].why);
        }
    }

    /// The same-tenant link `st` (leg `p1` at 10.254.0.3) judged against `routers` and `ports`.
    fn judge_same_tenant_st(routers: &[Router], ports: &[Port]) -> Vec<Drift> {
        drifted(&[same_tenant("st", "p1", "10.254.0.3")], GW, routers, ports).expect("judged")
    }

    #[test]
    fn another_port_at_the_address_does_not_hold_a_leg() {
        let (routers, mut ports) = whole();
        ports.retain(|p| p.id != "p1");
        ports.push(iface("someone-else", "10.254.0.3", "svc"));
        let got = judge_same_tenant_st(&routers, &ports);
        assert_eq!(got.len(), 1);
        // Nor does another router's interface (or a loose port) hold an edge leg's address.
        let (routers, mut ports) = whole();
        ports.retain(|p| p.id != "e1");
        ports.push(iface("e2", "10.254.0.7", "edge-2"));
        let got = drifted(&[per_customer("pc")], GW, &routers, &ports).expect("judged");
        assert!(got[0].why.contains("edge router edge-1"), "{got:?}");
    }

    #[test]
    fn every_break_of_one_link_is_named() {
        let (mut routers, mut ports) = whole();
        routers[0].routes.clear();
        ports.retain(|p| p.id != "p1");
        let got = judge_same_tenant_st(&routers, &ports);
        assert!(
            got[0].why.contains("leg port p1") && got[0].why.contains("gateway router"),
            "{got:?}"
        );
    }

    #[test]
    fn without_the_gateway_router_nothing_is_judged() {
        let (mut routers, ports) = whole();
        routers.remove(0);
        assert_eq!(
            drifted(
                &[same_tenant("st", "p1", "10.254.0.3")],
                GW,
                &routers,
                &ports
            ),
            Err(GatewayRouterNotListed(GW.into()))
        );
    }

    #[test]
    fn a_status_without_the_router_accepts_any_router() {
        let (routers, ports) = whole();
        let mut path = same_tenant("st", "p1", "10.254.0.3");
        if let Some(l) = path.leg.as_mut() {
            l.router_id = None;
        }
        assert_eq!(drifted(&[path], GW, &routers, &ports), Ok(vec![]));
    }
}
