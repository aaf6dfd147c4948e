//! The operator's side of every `PerCustomer` project, known ahead for a resync window
//! (docs/design.md, "The resync"). A converged `PerCustomer` link reads its project's customer
//! transit, the transit's subnet, ports and share, the edge router and the edge router's ports:
//! six reads a project, the same for every link of it. A list that holds every object a read
//! can match answers that read exactly (a filter only narrows what the caller may see), so a
//! few lists answer them for every project at once: the operator project's networks and
//! routers, then the customer transits' subnets, ports and shares and the edge routers' ports
//! by repeated filters, as many IDs to a call as the snapshot's router reads
//! (`resync::ROUTER_IDS_PER_CALL`). [`answers`] decides what they
//! answer; a learning overlay finds each answer under the very request its step makes (the
//! steps and this module build their queries with the same functions).

use bnerd_api::names::{customer_transit_project, edge_router_project};
use bnerd_cloud::fabric::Fabric;
use bnerd_cloud::{
    Network, NetworkQuery, Neutron, Port, PortQuery, RbacPolicy, Result, Router, RouterQuery,
    Subnet, SubnetQuery,
};

use crate::overlay::Known;
use crate::queries::{
    edge_routers_query, interfaces_query, network_ports_query, networks_query, subnets_query,
};

/// What the lists hold.
#[derive(Debug, Default)]
pub(crate) struct Lists {
    /// Every network of the operator's project.
    pub networks: Vec<Network>,
    /// Every router of the operator's project.
    pub routers: Vec<Router>,
    /// Every subnet, port and (the operator's own) RBAC policy of the customer transits.
    pub subnets: Vec<Subnet>,
    pub ports: Vec<Port>,
    pub rbac: Vec<RbacPolicy>,
    /// Every port of the edge routers.
    pub edge_ports: Vec<Port>,
}

/// One read answered ahead.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Answer {
    Networks(NetworkQuery, Vec<Network>),
    Subnets(SubnetQuery, Vec<Subnet>),
    Ports(PortQuery, Vec<Port>),
    Routers(RouterQuery, Vec<Router>),
    Rbac(String, Vec<RbacPolicy>),
}

/// The customer transits (network IDs) and edge routers (router IDs) on this fabric's transit
/// network among the operator project's networks and routers.
fn found<'a>(fabric: &Fabric, networks: &'a [Network], routers: &'a [Router]) -> Found<'a> {
    let transit = &fabric.transit_network_id;
    let operator = &fabric.operator_project_id;
    let transits = networks
        .iter()
        .filter(|n| n.project_id == *operator)
        .filter_map(|n| customer_transit_project(transit, &n.name).map(|p| (p, n)))
        .collect();
    let edges = routers
        .iter()
        .filter(|r| r.project_id == *operator)
        .filter_map(|r| edge_router_project(transit, &r.name).map(|p| (p, r)))
        .collect();
    Found { transits, edges }
}

/// The items of a list one read would have listed.
fn kept<T: Clone>(all: &[T], keep: impl Fn(&T) -> bool) -> Vec<T> {
    all.iter().filter(|x| keep(x)).cloned().collect()
}

struct Found<'a> {
    transits: Vec<(&'a str, &'a Network)>,
    edges: Vec<(&'a str, &'a Router)>,
}

/// Pure: every read of a project's customer transit the lists answer exactly, for every
/// project with a customer transit network or an edge router on this transit network.
pub(crate) fn answers(fabric: &Fabric, lists: &Lists) -> Vec<Answer> {
    let Found { transits, edges } = found(fabric, &lists.networks, &lists.routers);
    let mut projects: Vec<&str> = transits
        .iter()
        .map(|(p, _)| *p)
        .chain(edges.iter().map(|(p, _)| *p))
        .collect();
    projects.sort_unstable();
    projects.dedup();
    let mut out = vec![];
    for p in projects {
        let q = networks_query(fabric, p);
        out.push(Answer::Networks(
            q.clone(),
            kept(&lists.networks, |n| q.matches(n)),
        ));
        let q = edge_routers_query(fabric, p);
        out.push(Answer::Routers(
            q.clone(),
            kept(&lists.routers, |r| q.matches(r)),
        ));
    }
    for (_, n) in &transits {
        let q = subnets_query(&n.id);
        out.push(Answer::Subnets(
            q.clone(),
            kept(&lists.subnets, |s| q.matches(s)),
        ));
        let q = network_ports_query(&n.id);
        out.push(Answer::Ports(
            q.clone(),
            kept(&lists.ports, |x| q.matches(x)),
        ));
        let of = kept(&lists.rbac, |r| r.object_id == n.id);
        out.push(Answer::Rbac(n.id.clone(), of));
    }
    for (_, r) in &edges {
        let q = interfaces_query(&r.id);
        out.push(Answer::Ports(
            q.clone(),
            kept(&lists.edge_ports, |x| q.matches(x)),
        ));
    }
    out
}

/// Read the lists [`answers`] needs; the lists and the reads made.
pub(crate) async fn read(
    net: &dyn Neutron,
    fabric: &Fabric,
    ids_per_call: usize,
) -> Result<(Lists, u64)> {
    let operator = Some(fabric.operator_project_id.clone());
    let networks = NetworkQuery {
        project_id: operator.clone(),
        ..Default::default()
    };
    let routers = RouterQuery {
        project_id: operator,
        ..Default::default()
    };
    let (networks, routers) =
        futures::try_join!(net.list_networks(&networks), net.list_routers(&routers))?;
    let mut reads = 2;
    let Found { transits, edges } = found(fabric, &networks, &routers);
    let transit_ids: Vec<String> = transits.iter().map(|(_, n)| n.id.clone()).collect();
    let edge_ids: Vec<String> = edges.iter().map(|(_, r)| r.id.clone()).collect();
    let mut lists = Lists::default();
    for chunk in transit_ids.chunks(ids_per_call) {
        let subnets = SubnetQuery {
            network_ids: chunk.to_vec(),
            ..Default::default()
        };
        let ports = PortQuery {
            network_ids: chunk.to_vec(),
            ..Default::default()
        };
        let (subnets, ports, rbac) = futures::try_join!(
            net.list_subnets(&subnets),
            net.list_ports(&ports),
            net.list_rbac_policies_of(chunk),
        )?;
        lists.subnets.extend(subnets);
        lists.ports.extend(ports);
        lists.rbac.extend(rbac);
        reads += 3;
    }
    for chunk in edge_ids.chunks(ids_per_call) {
        lists.edge_ports.extend(
            net.list_ports(&PortQuery {
                device_ids: chunk.to_vec(),
                ..Default::default()
            })
            .await?,
        );
        reads += 1;
    }
    lists.networks = networks;
    lists.routers = routers;
    Ok((lists, reads))
}

/// Give `known` every answer of the lists.
pub(crate) fn teach(known: &Known, answers: Vec<Answer>) {
    for a in answers {
        match a {
            Answer::Networks(q, v) => known.ahead_networks(&q, v),
            Answer::Subnets(q, v) => known.ahead_subnets(&q, v),
            Answer::Ports(q, v) => known.ahead_ports(&q, v),
            Answer::Routers(q, v) => known.ahead_routers(&q, v),
            Answer::Rbac(id, v) => known.ahead_rbac(&id, v),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnerd_api::names::{customer_transit_name, edge_router_name};

    const OP: &str = "op";

    fn fabric() -> Fabric {
        Fabric {
            transit_network_id: "transit".into(),
            transit_subnet_id: "transit-sub".into(),
            transit_subnet: "10.254.0.0/24".parse().unwrap(),
            gateway_router_id: "gw".into(),
            gateway_routes: 0,
            operator_project_id: OP.into(),
            extraroute_atomic: true,
            revision_if_match: true,
            tags_at_create: false,
            router_subnets_by_cidr: false,
            admission: Default::default(),
            customer_transit: None,
        }
    }

    fn network(id: &str, name: String, project: &str) -> Network {
        Network {
            id: id.into(),
            name,
            project_id: project.into(),
            ..Default::default()
        }
    }

    fn router(id: &str, name: String, project: &str) -> Router {
        Router {
            id: id.into(),
            name,
            project_id: project.into(),
            ..Default::default()
        }
    }

    fn port(id: &str, network: &str, device: &str) -> Port {
        Port {
            id: id.into(),
            network_id: network.into(),
            device_id: device.into(),
            ..Default::default()
        }
    }

    #[test]
    fn every_projects_reads_are_answered_from_the_lists_and_nothing_else_is() {
        let f = fabric();
        let ct = |p: &str| customer_transit_name("transit", p);
        let edge = |p: &str| edge_router_name("transit", p);
        let lists = Lists {
            networks: vec![
                network("transit", "vpn-transit".into(), OP),
                network("na", ct("a"), OP),
                // A second network of A's name (a lost create answer, made again).
                network("na2", ct("a"), OP),
                network("nb", ct("b"), OP),
                // Another gateway fabric's customer transit in the same project.
                network("nx", customer_transit_name("other", "c"), OP),
            ],
            routers: vec![
                router("gw", "gateway".into(), OP),
                router("ea", edge("a"), OP),
            ],
            subnets: vec![Subnet {
                id: "sa".into(),
                network_id: "na".into(),
                ..Default::default()
            }],
            ports: vec![port("pa", "na", "ea"), port("leg", "na", "svc")],
            rbac: vec![RbacPolicy {
                id: "ra".into(),
                object_id: "na".into(),
                ..Default::default()
            }],
            edge_ports: vec![port("pa", "na", "ea"), port("ta", "transit", "ea")],
        };
        let got = answers(&f, &lists);
        let want = vec![
            Answer::Networks(
                networks_query(&f, "a"),
                vec![lists.networks[1].clone(), lists.networks[2].clone()],
            ),
            Answer::Routers(edge_routers_query(&f, "a"), vec![lists.routers[1].clone()]),
            Answer::Networks(networks_query(&f, "b"), vec![lists.networks[3].clone()]),
            // B's edge router is not there yet: that is an answer too.
            Answer::Routers(edge_routers_query(&f, "b"), vec![]),
            Answer::Subnets(subnets_query("na"), lists.subnets.clone()),
            Answer::Ports(network_ports_query("na"), lists.ports.clone()),
            Answer::Rbac("na".into(), lists.rbac.clone()),
            Answer::Subnets(subnets_query("na2"), vec![]),
            Answer::Ports(network_ports_query("na2"), vec![]),
            Answer::Rbac("na2".into(), vec![]),
            Answer::Subnets(subnets_query("nb"), vec![]),
            Answer::Ports(network_ports_query("nb"), vec![]),
            Answer::Rbac("nb".into(), vec![]),
            Answer::Ports(interfaces_query("ea"), lists.edge_ports.clone()),
        ];
        assert_eq!(got, want);
    }

    #[test]
    fn objects_of_another_project_by_a_customer_transits_name_are_not_the_operators() {
        let f = fabric();
        let lists = Lists {
            networks: vec![network("n", customer_transit_name("transit", "a"), "x")],
            routers: vec![router("e", edge_router_name("transit", "a"), "x")],
            ..Default::default()
        };
        assert_eq!(answers(&f, &lists), vec![]);
    }
}
