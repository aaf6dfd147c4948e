//! The batched resync's one decision: after a link's steps ran against a resync snapshot
//! (`engine::resync`), is what they saw and wanted good enough to stand for a live reconcile?
//!
//! - Nothing missing and nothing to write: the link is converged; its outcome stands.
//! - Only route additions and removals on routers the snapshot holds, with extraroute-atomic:
//!   replay them on the cloud in order. They name exact routes and are idempotent, so a
//!   snapshot a few seconds old decides them as well as a fresh read would (a route someone
//!   else added meanwhile is neither replaced nor removed by them). This is what a gateway
//!   change costs every link: one write per router whose route set changed, no read.
//! - Anything else — a read the snapshot cannot answer (a router it does not hold, a port
//!   query other than the transit network's), or any other write (a port to create, tag,
//!   attach or delete, a whole-table PUT) — falls back to the per-link path, which reads
//!   afresh and repairs. Such a write was never made: the dry run only recorded it.
//!
//! And the short check of cross-tenant legs between resyncs ([`leg_check`]): a leg port gone
//! from the transit network, or no longer at the address status recorded, has freed an
//! address the gateway router still routes to, and another tenant may be handed it. The link
//! is reconciled at once, which ends in the TransitIPMismatch handling (docs/crd-reference.md,
//! "LegAttached": the route via the old address removed) unless the leg comes back where it
//! was.

use bnerd_cloud::{Port, Route};

/// One call the steps made against the snapshot that it could not just answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Noted {
    /// A read outside the snapshot (what was asked).
    Miss(String),
    /// `add_extraroutes` on a router the snapshot holds.
    AddRoutes { router: String, routes: Vec<Route> },
    /// `remove_extraroutes` on a router the snapshot holds.
    RemoveRoutes { router: String, routes: Vec<Route> },
    /// Any other write (what it was).
    OtherWrite(String),
}

/// A route write to make on the cloud, in the order the steps asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteWrite {
    Add { router: String, routes: Vec<Route> },
    Remove { router: String, routes: Vec<Route> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResyncPlan {
    /// Converged as the snapshot shows it: no call at all.
    Converged,
    /// Converged once these route writes are made.
    Replay(Vec<RouteWrite>),
    /// Reconcile this link on its own, reading afresh; why (for the log).
    PerLink(String),
}

pub fn plan(noted: &[Noted]) -> ResyncPlan {
    let mut writes = vec![];
    for n in noted {
        match n {
            Noted::Miss(what) => {
                return ResyncPlan::PerLink(format!("not in the snapshot: {what}"));
            }
            Noted::OtherWrite(what) => {
                return ResyncPlan::PerLink(format!("needs {what}"));
            }
            Noted::AddRoutes { router, routes } => writes.push(RouteWrite::Add {
                router: router.clone(),
                routes: routes.clone(),
            }),
            Noted::RemoveRoutes { router, routes } => writes.push(RouteWrite::Remove {
                router: router.clone(),
                routes: routes.clone(),
            }),
        }
    }
    if writes.is_empty() {
        ResyncPlan::Converged
    } else {
        ResyncPlan::Replay(writes)
    }
}

/// A converged cross-tenant link's leg against one read of the transit network's ports:
/// None while the port status names still holds the address status names; else why the
/// link must be reconciled now (for the log).
pub fn leg_check(port_id: &str, transit_ip: &str, ports: &[Port]) -> Option<String> {
    let Some(port) = ports.iter().find(|p| p.id == port_id) else {
        return Some(format!(
            "leg port {port_id} is gone from the transit network; {transit_ip} is free for anyone"
        ));
    };
    if port.has_ip(transit_ip) {
        return None;
    }
    let now: Vec<&str> = port
        .fixed_ips
        .iter()
        .map(|f| f.ip_address.as_str())
        .collect();
    Some(format!(
        "leg port {port_id} no longer holds {transit_ip} (now [{}]); {transit_ip} is free for anyone",
        now.join(", ")
    ))
}

/// A `PerCustomer` project's edge leg against one read of the transit network's ports: None
/// while an interface of the edge router holds the gateway route's next hop; else why.
pub fn edge_leg_check(router_id: &str, transit_ip: &str, ports: &[Port]) -> Option<String> {
    if ports
        .iter()
        .any(|p| p.has_ip(transit_ip) && p.is_interface_of(router_id))
    {
        return None;
    }
    Some(format!(
        "no interface of edge router {router_id} holds {transit_ip} on the transit network any more; {transit_ip} is free for anyone"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fixtures::route;

    #[test]
    fn a_cross_tenant_leg_is_checked_by_its_port_and_address() {
        let port = |id: &str, ip: &str| Port {
            id: id.into(),
            fixed_ips: vec![bnerd_cloud::FixedIp {
                subnet_id: "s".into(),
                ip_address: ip.into(),
            }],
            ..Default::default()
        };
        let ports = vec![port("p1", "10.254.0.7"), port("p2", "10.254.0.9")];
        let rows: Vec<(&str, &str, &str, Option<&str>)> = vec![
            (
                "the leg as status recorded it: nothing to do",
                "p1",
                "10.254.0.7",
                None,
            ),
            (
                "the port is gone (deleted out of band, or detached: Neutron deletes it)",
                "p3",
                "10.254.0.7",
                Some("leg port p3 is gone from the transit network; 10.254.0.7 is free"),
            ),
            (
                "the port is at another address (fixed IPs changed by a network owner)",
                "p2",
                "10.254.0.7",
                Some("leg port p2 no longer holds 10.254.0.7 (now [10.254.0.9])"),
            ),
            (
                "another port holding the old address does not make it the leg",
                "p3",
                "10.254.0.9",
                Some("leg port p3 is gone"),
            ),
        ];
        for (rule, id, ip, want) in rows {
            let got = leg_check(id, ip, &ports);
            match (want, &got) {
                (None, None) => {}
                (Some(text), Some(why)) => assert!(why.contains(text), "{rule}: {why}"),
                _ => panic!("{rule}: got {got:?}"),
            }
        }
    }

    #[test]
    fn an_edge_leg_is_checked_by_its_router_and_address() {
        let iface = |id: &str, ip: &str, router: &str| Port {
            id: id.into(),
            device_id: router.into(),
            device_owner: "network:router_interface".into(),
            fixed_ips: vec![bnerd_cloud::FixedIp {
                subnet_id: "s".into(),
                ip_address: ip.into(),
            }],
            ..Default::default()
        };
        let loose = Port {
            device_id: String::new(),
            device_owner: String::new(),
            ..iface("loose", "10.254.0.8", "")
        };
        let ports = vec![iface("e1", "10.254.0.7", "edge-1"), loose];
        assert_eq!(edge_leg_check("edge-1", "10.254.0.7", &ports), None);
        // Another router's interface, or a loose port, at the address does not hold it.
        for (router, ip) in [("edge-2", "10.254.0.7"), ("edge-1", "10.254.0.8")] {
            let why = edge_leg_check(router, ip, &ports).expect(router);
            assert!(why.contains(&format!("edge router {router}")), "{why}");
        }
    }

    fn add(r: &str) -> Noted {
        Noted::AddRoutes {
            router: r.into(),
            routes: vec![route("100.64.0.0/24", "10.254.0.200")],
        }
    }

    fn remove(r: &str) -> Noted {
        Noted::RemoveRoutes {
            router: r.into(),
            routes: vec![route("100.64.9.0/24", "10.254.0.209")],
        }
    }

    #[test]
    fn table() {
        let rows: Vec<(&str, Vec<Noted>, ResyncPlan)> = vec![
            (
                "a converged link costs nothing",
                vec![],
                ResyncPlan::Converged,
            ),
            (
                "a gateway change: the new reverse route is replayed, no read",
                vec![add("svc")],
                ResyncPlan::Replay(vec![RouteWrite::Add {
                    router: "svc".into(),
                    routes: vec![route("100.64.0.0/24", "10.254.0.200")],
                }]),
            ),
            (
                "stale routes go before new ones, in the steps' order",
                vec![remove("gw"), add("svc")],
                ResyncPlan::Replay(vec![
                    RouteWrite::Remove {
                        router: "gw".into(),
                        routes: vec![route("100.64.9.0/24", "10.254.0.209")],
                    },
                    RouteWrite::Add {
                        router: "svc".into(),
                        routes: vec![route("100.64.0.0/24", "10.254.0.200")],
                    },
                ]),
            ),
            (
                "a router the snapshot does not hold: per link",
                vec![Noted::Miss("router r9".into())],
                ResyncPlan::PerLink("not in the snapshot: router r9".into()),
            ),
            (
                "a leg port to recreate (deleted out of band): per link, nothing replayed",
                vec![add("gw"), Noted::OtherWrite("POST /ports".into())],
                ResyncPlan::PerLink("needs POST /ports".into()),
            ),
            (
                "a miss after a route write: per link, the write is not replayed",
                vec![add("svc"), Noted::Miss("GET /ports/p1".into())],
                ResyncPlan::PerLink("not in the snapshot: GET /ports/p1".into()),
            ),
        ];
        for (rule, noted, want) in rows {
            assert_eq!(plan(&noted), want, "{rule}");
        }
    }
}
