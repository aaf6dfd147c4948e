//! A `PerCustomer` link's customer transit (docs/design.md, "Per-customer transit"): per
//! customer project, a small network cut from the operator's pool and shared with that project
//! only, and an edge router with an interface on it (its gateway address) and a leg on the
//! main transit. The rules: which subnet the pool gives, which address the edge leg takes,
//! which of several same-named objects is the one, and when the last link may take it all
//! down.

use std::net::Ipv4Addr;

use bnerd_api::Reason;
use bnerd_api::cidr::overlaps;
use bnerd_api::names::leg_owner_uid;
use bnerd_cloud::fabric::CustomerTransitPool;
use bnerd_cloud::{CloudError, Port, Route};
use ipnet::Ipv4Net;

use super::StepFail;
use super::share::Credential;

/// The first subnet of the pool's prefix length that overlaps nothing `taken` holds (the main
/// transit, every link's service CIDR, every other customer transit, every subnet of the
/// operator's project). The pool is walked in address order, so a freed subnet is the next
/// one given.
pub(crate) fn allocate_subnet(pool: &CustomerTransitPool, taken: &[Ipv4Net]) -> Option<Ipv4Net> {
    pool.pool
        .subnets(pool.prefix_len)
        .ok()?
        .find(|candidate| !taken.iter().any(|t| overlaps(*t, *candidate)))
}

/// The edge leg's address on the main transit: the lowest free one from `.3`, as a
/// same-tenant leg's walk takes it (`.1` is the gateway router's, `.2` the DHCP port's), past
/// every address a port holds or another link claims.
pub(crate) fn edge_leg_address(
    transit: Ipv4Net,
    occupied: &[Ipv4Addr],
    claimed: &[Ipv4Addr],
) -> Option<Ipv4Addr> {
    transit
        .hosts()
        .skip(2)
        .find(|a| !occupied.contains(a) && !claimed.contains(a))
}

/// Of several objects of one name (a create whose answer was lost, then made again), the one
/// to keep: the lowest ID, whoever reads them.
pub(crate) fn keeper<T>(found: Vec<T>, id: impl Fn(&T) -> &str) -> Option<T> {
    found.into_iter().min_by(|a, b| id(a).cmp(id(b)))
}

/// What the customer transit's interfaces on its edge router say: the interface on the
/// customer transit's subnet and the leg on the main transit, by port.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct EdgeInterfaces<'p> {
    pub on_customer_transit: Option<&'p Port>,
    pub on_main_transit: Option<&'p Port>,
}

pub(crate) fn edge_interfaces<'p>(
    ports: &'p [Port],
    edge_router: &str,
    customer_network: &str,
    main_network: &str,
) -> EdgeInterfaces<'p> {
    let of = |network: &str| {
        ports
            .iter()
            .find(|p| p.is_interface_of(edge_router) && p.network_id == network)
    };
    EdgeInterfaces {
        on_customer_transit: of(customer_network),
        on_main_transit: of(main_network),
    }
}

/// Whether the customer transit may go, once a link's own leg is gone.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Teardown {
    /// Other links' legs still stand on it (their ports).
    Keep(Vec<String>),
    /// Ports nobody of ours made stand on it: Neutron refuses to delete the network (or
    /// the share) while they do.
    Blocked(Vec<String>),
    /// Nothing but the edge router's interface and Neutron's own ports: take it down.
    Go,
}

/// `ports`: every port on the customer transit; `project`: the customer project it serves;
/// `own_leg`: this link's leg, about to go (or gone). A port carrying a link's UID (tag or
/// description marker) in the customer project is a link's leg, attached or not: the transit
/// stays for it (the ownership rule every other teardown follows: the UID alone proves
/// nothing, a marker in another project is anyone's). A port Neutron made for itself (DHCP, metadata: a
/// `network:` owner that is no router interface) goes with the network. Anything else (a VM,
/// a loose port, a router the customer attached on its own) is the customer's: Neutron would
/// refuse the network's delete while it stands, so it is named.
pub(crate) fn teardown(
    ports: &[Port],
    project: &str,
    edge_router: &str,
    own_leg: Option<&str>,
) -> Teardown {
    let others: Vec<&Port> = ports
        .iter()
        .filter(|p| Some(p.id.as_str()) != own_leg && !p.is_interface_of(edge_router))
        .collect();
    let is_leg =
        |p: &Port| p.project_id == project && leg_owner_uid(&p.tags, &p.description).is_some();
    let legs: Vec<String> = others
        .iter()
        .filter(|p| is_leg(p))
        .map(|p| p.id.clone())
        .collect();
    if !legs.is_empty() {
        return Teardown::Keep(legs);
    }
    let neutrons = |p: &Port| p.device_owner.starts_with("network:") && !p.is_router_interface();
    let foreign: Vec<String> = others
        .iter()
        .filter(|p| !neutrons(p))
        .map(|p| p.id.clone())
        .collect();
    if foreign.is_empty() {
        Teardown::Go
    } else {
        Teardown::Blocked(foreign)
    }
}

/// The message of a teardown that ports of the customer block.
/// Ready=False/Deleting while ports this operator did not make stand on the customer transit
/// of a deleting link's project: retried, the transit stays until a human removes them.
pub(crate) fn blocked(network: &str, project: &str, ports: &[String]) -> StepFail {
    StepFail {
        reason: bnerd_api::Reason::Deleting,
        message: blocked_message(network, project, ports),
        retryable: true,
    }
}

fn blocked_message(network: &str, project: &str, ports: &[String]) -> String {
    format!(
        "{}the customer transit network {network} of project {project} still holds ports this operator did not make ({}); delete them (openstack port delete) and the unwind goes on",
        Credential::Operator.prefix(),
        ports.join(", ")
    )
}

/// TransitNetworkShared=False when the operator has no pool for customer transits.
pub(crate) fn not_configured() -> StepFail {
    StepFail::terminal(
        Reason::CustomerTransitNotConfigured,
        format!(
            "{}spec.transitIsolation is PerCustomer but this operator has no pool for customer transit networks: set IPSEC_PER_CUSTOMER_TRANSIT_POOL (chart value perCustomerTransit.pool)",
            Credential::Operator.prefix()
        ),
    )
}

/// TransitNetworkShared=False when the pool has no subnet left.
pub(crate) fn pool_exhausted(pool: &CustomerTransitPool) -> StepFail {
    StepFail::terminal(
        Reason::CustomerTransitPoolExhausted,
        format!(
            "{}the pool {} has no /{} left that overlaps neither the transit network, a link's service CIDR nor another customer transit; widen IPSEC_PER_CUSTOMER_TRANSIT_POOL",
            Credential::Operator.prefix(),
            pool.pool,
            pool.prefix_len
        ),
    )
}

/// TransitNetworkShared=False when the main transit has no address left for the edge leg.
pub(crate) fn no_edge_address(transit: Ipv4Net) -> StepFail {
    StepFail::terminal(
        Reason::TransitIPUnavailable,
        format!(
            "{}the transit subnet {transit} has no free address for the edge router's leg",
            Credential::Operator.prefix()
        ),
    )
}

/// A call building or reading the customer transit failed.
pub(crate) fn call_failed(what: &str, e: &CloudError) -> StepFail {
    StepFail::cloud(
        Reason::EnsureNetworkSharedFailed,
        &format!("{}{what}", Credential::Operator.prefix()),
        e,
    )
}

/// A call on the customer's credential while the customer transit is built (reading the
/// subnets on the customer's router) failed: the message names that credential, not the
/// operator's, so the human knows whose Secret or quota to look at.
pub(crate) fn customer_call_failed(secret: &str, what: &str, e: &CloudError) -> StepFail {
    StepFail::cloud(
        Reason::EnsureNetworkSharedFailed,
        &format!("{}{what}", Credential::Customer(secret).prefix()),
        e,
    )
}

/// The note of the one `CustomerTransitBuilt` Event: every piece of the project's customer
/// transit with its ID, those this reconcile made first; `None` when it made none. `pieces`:
/// (made now, the piece) in build order.
pub(crate) fn built_note(project: &str, pieces: &[(bool, String)]) -> Option<String> {
    let list = |made: bool| {
        pieces
            .iter()
            .filter(|(m, _)| *m == made)
            .map(|(_, p)| p.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let made = list(true);
    if made.is_empty() {
        return None;
    }
    let found = list(false);
    Some(if found.is_empty() {
        format!("built the customer transit of project {project}: {made}")
    } else {
        format!("built the customer transit of project {project}: {made}; already there: {found}")
    })
}

/// The note of the one `CustomerTransitRemoved` Event: what the teardown removed, with IDs;
/// `None` when there was nothing left to remove.
pub(crate) fn removed_note(project: &str, gone: &[String]) -> Option<String> {
    (!gone.is_empty()).then(|| {
        format!(
            "took down the customer transit of project {project}: {}",
            gone.join("; ")
        )
    })
}

/// TransitNetworkShared=True's message for a `PerCustomer` link.
pub(crate) fn ready_message(
    network: &str,
    cidr: Ipv4Net,
    project: &str,
    edge_router: &str,
    edge_ip: Ipv4Addr,
) -> String {
    format!(
        "customer transit network {network} ({cidr}) shared with project {project} only; edge router {edge_router} at {edge_ip} on the transit network"
    )
}

/// The edge router's route to the link's service CIDR via its leg, and the routes of this
/// link the edge router holds no more reason for: one via the leg's address to another CIDR
/// (spec.serviceClusterCIDR changed), or to this CIDR via another address on the customer transit
/// (the leg moved). Another link's routes are never touched: each leg has its own address.
pub(crate) fn edge_route(
    routes: &[Route],
    cidr: Ipv4Net,
    leg_ip: Ipv4Addr,
    customer_transit: Ipv4Net,
) -> (Vec<Route>, Option<Route>) {
    let want = Route::new(cidr.to_string(), leg_ip.to_string());
    let remove = routes
        .iter()
        .filter(|r| **r != want)
        .filter(|r| {
            r.nexthop == want.nexthop
                || (r.destination == want.destination
                    && r.nexthop
                        .parse::<Ipv4Addr>()
                        .is_ok_and(|h| customer_transit.contains(&h)))
        })
        .cloned()
        .collect();
    let add = (!routes.contains(&want)).then_some(want);
    (remove, add)
}

/// The customer router's route back to the main transit via the edge router (the replies to
/// the gateway's pods): added when missing; another next hop for the transit is someone
/// else's, never replaced.
pub(crate) fn return_route(
    routes: &[Route],
    transit: Ipv4Net,
    gateway: Ipv4Addr,
    router_id: &str,
) -> Result<Option<Route>, StepFail> {
    let want = Route::new(transit.to_string(), gateway.to_string());
    if routes.contains(&want) {
        return Ok(None);
    }
    if let Some(f) = routes.iter().find(|r| r.destination == want.destination) {
        return Err(StepFail::terminal(
            Reason::RouteConflict,
            format!(
                "router {router_id} already routes {} via {}, which this link does not own; the customer transit needs {} via {}",
                f.destination, f.nexthop, want.destination, want.nexthop
            ),
        ));
    }
    Ok(Some(want))
}

/// The edge router's reverse routes: each gateway's, via its port on the main transit (the
/// customer router sends them all to the edge router). One set for every link of the
/// project, so a route via the main transit that no gateway asks for any more goes.
pub(crate) fn edge_reverse_routes(
    routes: &[Route],
    wanted: &[Route],
    main_transit: Ipv4Net,
) -> (Vec<Route>, Vec<Route>) {
    let remove = routes
        .iter()
        .filter(|r| !wanted.contains(r))
        .filter(|r| {
            r.nexthop
                .parse::<Ipv4Addr>()
                .is_ok_and(|h| main_transit.contains(&h))
        })
        .cloned()
        .collect();
    let mut add: Vec<Route> = wanted
        .iter()
        .filter(|w| !routes.contains(w))
        .cloned()
        .collect();
    add.sort();
    add.dedup();
    (remove, add)
}

/// RouteInstalled=True's message for a `PerCustomer` link: the three routes of its path.
pub(crate) fn routes_message(
    gateway: (&Route, &str),
    edge: (&Route, &str),
    back: (&Route, &str),
) -> String {
    let one = |(r, id): (&Route, &str), what: &str| {
        format!("{} via {} on {what} {id}", r.destination, r.nexthop)
    };
    format!(
        "{}; {}; {}",
        one(gateway, "gateway router"),
        one(edge, "edge router"),
        one(back, "router")
    )
}

/// A call of the route step on the edge router or the customer router failed.
pub(crate) fn route_call_failed(what: &str, router_id: &str, e: &CloudError) -> StepFail {
    StepFail::cloud(
        Reason::EnsureRouteFailed,
        &format!("{what} router {router_id}"),
        e,
    )
}

#[cfg(test)]
mod tests {
    use bnerd_cloud::{FixedIp, OWNER_ROUTER_INTERFACE};

    use super::*;

    fn pool(p: &str, len: u8) -> CustomerTransitPool {
        CustomerTransitPool {
            pool: p.parse().unwrap(),
            prefix_len: len,
        }
    }

    fn nets(v: &[&str]) -> Vec<Ipv4Net> {
        v.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn the_pool_gives_the_first_subnet_nothing_overlaps() {
        let p = pool("10.255.0.0/24", 28);
        assert_eq!(
            allocate_subnet(&p, &[]),
            Some("10.255.0.0/28".parse().unwrap())
        );
        // Another customer's, a link's CIDR inside the pool, and a wide one that covers two.
        let taken = nets(&["10.255.0.0/28", "10.255.0.16/29", "10.255.0.32/27"]);
        assert_eq!(
            allocate_subnet(&p, &taken),
            Some("10.255.0.64/28".parse().unwrap())
        );
        // A taken range that holds the whole pool leaves nothing.
        assert_eq!(allocate_subnet(&p, &nets(&["10.0.0.0/8"])), None);
        // A freed subnet is the next one given.
        let taken = nets(&["10.255.0.16/28"]);
        assert_eq!(
            allocate_subnet(&p, &taken),
            Some("10.255.0.0/28".parse().unwrap())
        );
    }

    #[test]
    fn a_full_pool_is_exhausted_at_its_last_subnet() {
        let p = pool("10.255.0.0/26", 28);
        let mut taken = vec![];
        for _ in 0..4 {
            let s = allocate_subnet(&p, &taken).unwrap();
            assert!(p.pool.contains(&s) && s.prefix_len() == 28);
            taken.push(s);
        }
        assert_eq!(allocate_subnet(&p, &taken), None);
        assert!(
            pool_exhausted(&p)
                .message
                .contains("the pool 10.255.0.0/26 has no /28 left")
        );
    }

    /// A /20 pool of /28 blocks, 256 projects: every block given once, none overlapping a
    /// link's CIDR that sits in the pool, then exhausted.
    #[test]
    fn a_pool_of_256_blocks_gives_each_once() {
        let p = pool("10.255.0.0/20", 28);
        let link: Ipv4Net = "10.255.8.0/24".parse().unwrap();
        let mut taken = vec![link];
        while let Some(s) = allocate_subnet(&p, &taken) {
            assert!(!taken.iter().any(|t| overlaps(*t, s)), "{s}");
            taken.push(s);
        }
        // 256 blocks, less the 16 the link's /24 covers.
        assert_eq!(taken.len() - 1, 240);
    }

    #[test]
    fn the_edge_leg_takes_the_lowest_free_address_from_3() {
        let t: Ipv4Net = "10.254.0.0/24".parse().unwrap();
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert_eq!(edge_leg_address(t, &[], &[]), Some(ip("10.254.0.3")));
        assert_eq!(
            edge_leg_address(t, &[ip("10.254.0.3")], &[ip("10.254.0.4")]),
            Some(ip("10.254.0.5"))
        );
        let all: Vec<Ipv4Addr> = t.hosts().collect();
        assert_eq!(edge_leg_address(t, &all, &[]), None);
    }

    #[test]
    fn the_lowest_id_is_kept() {
        let v = vec!["b", "a", "c"];
        assert_eq!(keeper(v, |s| s), Some("a"));
        assert_eq!(keeper(Vec::<&str>::new(), |s| s), None);
    }

    fn port(id: &str, network: &str, device: &str, owner: &str) -> Port {
        Port {
            id: id.into(),
            network_id: network.into(),
            device_id: device.into(),
            device_owner: owner.into(),
            project_id: "p".into(),
            fixed_ips: vec![FixedIp {
                subnet_id: "s".into(),
                ip_address: "10.255.0.4".into(),
            }],
            ..Default::default()
        }
    }

    #[test]
    fn the_edge_routers_interfaces_are_found_by_network() {
        let ports = vec![
            port("a", "anet", "edge", OWNER_ROUTER_INTERFACE),
            port("t", "transit", "edge", OWNER_ROUTER_INTERFACE),
            port("x", "anet", "other", OWNER_ROUTER_INTERFACE),
        ];
        let i = edge_interfaces(&ports, "edge", "anet", "transit");
        assert_eq!(i.on_customer_transit.map(|p| p.id.as_str()), Some("a"));
        assert_eq!(i.on_main_transit.map(|p| p.id.as_str()), Some("t"));
        let i = edge_interfaces(&ports[2..], "edge", "anet", "transit");
        assert_eq!(i, EdgeInterfaces::default());
    }

    #[test]
    fn the_last_link_takes_the_customer_transit_down() {
        let marked = |mut p: Port, uid: &str| {
            p.tags = vec![bnerd_api::names::tag_link_uid(uid)];
            p
        };
        let edge = port("e", "anet", "edge", OWNER_ROUTER_INTERFACE);
        let dhcp = port("d", "anet", "dhcp", "network:dhcp");
        let meta = port("m", "anet", "ovnmeta-anet", "network:distributed");
        let own = marked(port("own", "anet", "r1", OWNER_ROUTER_INTERFACE), "u1");
        let other = marked(port("leg2", "anet", "r2", OWNER_ROUTER_INTERFACE), "u2");
        // Another link's leg whose attach failed: still a leg.
        let loose_leg = marked(port("leg3", "anet", "", ""), "u3");
        let vm = port("vm", "anet", "instance-1", "compute:nova");
        let unbound = port("loose", "anet", "", "");
        // A router the customer attached itself: not a leg of ours.
        let own_router = port("cr", "anet", "customer-router", OWNER_ROUTER_INTERFACE);
        // Only our own leg (going) and Neutron's ports: down.
        let ports = vec![edge.clone(), dhcp.clone(), meta.clone(), own.clone()];
        assert_eq!(teardown(&ports, "p", "edge", Some("own")), Teardown::Go);
        // Another link's leg, attached or not: kept, whatever else stands there.
        let ports = vec![edge.clone(), own.clone(), other, vm.clone()];
        assert_eq!(
            teardown(&ports, "p", "edge", Some("own")),
            Teardown::Keep(vec!["leg2".into()])
        );
        let ports = vec![edge.clone(), loose_leg];
        assert_eq!(
            teardown(&ports, "p", "edge", None),
            Teardown::Keep(vec!["leg3".into()])
        );
        // A VM, a loose port or a router of the customer: Neutron would refuse, so say which.
        let ports = vec![edge, dhcp, meta, own, vm, unbound, own_router];
        assert_eq!(
            teardown(&ports, "p", "edge", Some("own")),
            Teardown::Blocked(vec!["vm".into(), "loose".into(), "cr".into()])
        );
        // A port carrying a link's UID in another project is no leg: it blocks, named.
        let forged = Port {
            project_id: "other".into(),
            ..marked(port("forged", "anet", "", ""), "u4")
        };
        let ports = vec![port("e", "anet", "edge", OWNER_ROUTER_INTERFACE), forged];
        assert_eq!(
            teardown(&ports, "p", "edge", None),
            Teardown::Blocked(vec!["forged".into()])
        );
        let f = blocked("anet", "p", &["vm".into()]);
        assert_eq!((f.reason, f.retryable), (bnerd_api::Reason::Deleting, true));
        assert!(f.message.starts_with(
            "operator credential: the customer transit network anet of project p still holds ports"
        ));
    }

    fn r(d: &str, n: &str) -> Route {
        Route::new(d, n)
    }

    #[test]
    fn the_edge_route_moves_with_the_leg_and_leaves_other_links_alone() {
        let anet: Ipv4Net = "10.255.0.0/28".parse().unwrap();
        let cidr: Ipv4Net = "10.251.0.0/16".parse().unwrap();
        let leg: Ipv4Addr = "10.255.0.4".parse().unwrap();
        let other = r("10.252.0.0/16", "10.255.0.5");
        let (rm, add) = edge_route(std::slice::from_ref(&other), cidr, leg, anet);
        assert_eq!((rm, add), (vec![], Some(r("10.251.0.0/16", "10.255.0.4"))));
        // Converged: nothing.
        let want = r("10.251.0.0/16", "10.255.0.4");
        assert_eq!(
            edge_route(&[want.clone(), other.clone()], cidr, leg, anet),
            (vec![], None)
        );
        // The leg moved (.6 was its old address) and the CIDR changed (.4 routed another).
        let moved = r("10.251.0.0/16", "10.255.0.6");
        let old_cidr = r("10.250.0.0/16", "10.255.0.4");
        let reverse = r("100.64.0.0/24", "10.254.0.10");
        let (rm, add) = edge_route(
            &[moved.clone(), old_cidr.clone(), other, reverse],
            cidr,
            leg,
            anet,
        );
        assert_eq!(rm, vec![moved, old_cidr]);
        assert_eq!(add, Some(want));
    }

    #[test]
    fn the_return_route_is_added_once_and_never_replaces_anothers() {
        let t: Ipv4Net = "10.254.0.0/24".parse().unwrap();
        let gw: Ipv4Addr = "10.255.0.1".parse().unwrap();
        assert_eq!(
            return_route(&[], t, gw, "svc"),
            Ok(Some(r("10.254.0.0/24", "10.255.0.1")))
        );
        assert_eq!(
            return_route(&[r("10.254.0.0/24", "10.255.0.1")], t, gw, "svc"),
            Ok(None)
        );
        let f = return_route(&[r("10.254.0.0/24", "192.168.0.9")], t, gw, "svc").unwrap_err();
        assert_eq!(f.reason, Reason::RouteConflict);
        assert!(
            f.message
                .contains("router svc already routes 10.254.0.0/24 via 192.168.0.9"),
            "{}",
            f.message
        );
    }

    #[test]
    fn the_edge_router_carries_exactly_the_gateways_reverse_routes() {
        let t: Ipv4Net = "10.254.0.0/24".parse().unwrap();
        let a = r("100.64.0.0/24", "10.254.0.10");
        let b = r("100.64.1.0/24", "10.254.0.11");
        let gone = r("100.64.9.0/24", "10.254.0.19");
        let fwd = r("10.251.0.0/16", "10.255.0.4");
        let (rm, add) = edge_reverse_routes(
            &[a.clone(), gone.clone(), fwd],
            &[a.clone(), b.clone(), b.clone()],
            t,
        );
        assert_eq!(rm, vec![gone]);
        assert_eq!(add, vec![b]);
    }

    #[test]
    fn one_note_names_every_piece_of_the_customer_transit() {
        let pieces = |made: [bool; 5]| -> Vec<(bool, String)> {
            [
                "network n1",
                "subnet s1 (10.255.0.0/28)",
                "edge router r1",
                "its interface port i1 at 10.255.0.1",
                "its transit leg port l1 at 10.254.0.4",
            ]
            .iter()
            .zip(made)
            .map(|(p, m)| (m, p.to_string()))
            .collect()
        };
        assert_eq!(
            built_note("p", &pieces([true; 5])).as_deref(),
            Some(
                "built the customer transit of project p: network n1, subnet s1 (10.255.0.0/28), edge router r1, its interface port i1 at 10.255.0.1, its transit leg port l1 at 10.254.0.4"
            )
        );
        // A build a stopped run left half done: what this one made, then what was there.
        assert_eq!(
            built_note("p", &pieces([false, false, true, true, true])).as_deref(),
            Some(
                "built the customer transit of project p: edge router r1, its interface port i1 at 10.255.0.1, its transit leg port l1 at 10.254.0.4; already there: network n1, subnet s1 (10.255.0.0/28)"
            )
        );
        assert_eq!(built_note("p", &pieces([false; 5])), None);
        assert_eq!(removed_note("p", &[]), None);
        assert_eq!(
            removed_note(
                "p",
                &["edge router r1".into(), "network n1 with subnet s1".into()]
            )
            .as_deref(),
            Some(
                "took down the customer transit of project p: edge router r1; network n1 with subnet s1"
            )
        );
    }

    #[test]
    fn a_call_on_the_customers_credential_names_it() {
        let e = CloudError::Api {
            method: "GET".into(),
            path: "/ports".into(),
            status: 503,
            kind: String::new(),
            message: "m".into(),
        };
        let f = customer_call_failed(
            "ns/clusterlink-x",
            "reading the subnets on the customer's router",
            &e,
        );
        assert_eq!(f.reason, Reason::EnsureNetworkSharedFailed);
        assert!(
            f.message
                .starts_with("customer credential (secret ns/clusterlink-x): reading the subnets"),
            "{}",
            f.message
        );
        assert!(
            call_failed("listing", &e)
                .message
                .starts_with("operator credential: ")
        );
    }
}
