//! A `PerCustomer` link's customer transit, observe and act (docs/design.md, "Per-customer
//! transit"): found again by name in the operator's project, or built in order (the network
//! and its subnet beside the edge router; then the router's interface on the subnet beside its
//! leg on the main transit, while the link's share and leg are made); taken down
//! in reverse order once no link of the project stands on it. Every call is on the operator's
//! credential; `plan::customer_transit` decides.
//!
//! One piece, over the usual size: the build and the teardown share the project's lock, the
//! lookup by name with its keeper rule, and the pieces' order, which each reverses the other's.

use std::net::Ipv4Addr;
use std::sync::LazyLock;

use bnerd_api::names::{customer_transit_name, edge_router_name};
use bnerd_cloud::fabric::CustomerTransitPool;
use bnerd_cloud::{
    CreatePort, CreateSubnet, Network, Port, PortQuery, Router, Subnet, SubnetQuery,
};
use ipnet::Ipv4Net;

pub(crate) use super::context::CustomerTransit;
use super::context::{Customer, Engine};
use super::keyed_lock::KeyedLocks;
use super::model::{Action, ActionKind};
use super::ops::{self, gone_is_done};
use super::plan::StepFail;
use super::plan::customer_transit::{
    Teardown, allocate_subnet, blocked, built_note, call_failed, customer_call_failed,
    edge_interfaces, edge_leg_address, keeper, no_edge_address, not_configured, pool_exhausted,
    removed_note, teardown,
};
use super::plan::leg::port_ip;
use super::queries::{edge_routers_query, interfaces_query, networks_query, subnets_query};

/// One lock per customer project: its links build and take down one customer transit, and a
/// reconcile must not take it down while another builds on it.
static BUILDING: LazyLock<KeyedLocks> = LazyLock::new(Default::default);

/// Held while a subnet is cut from the pool: two projects' first links, reconciled side by
/// side, would otherwise both find the same block free (Neutron lets subnets of two networks
/// overlap).
static ALLOCATING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Hold the project's lock until the guard drops.
pub(crate) async fn hold(project: &str) -> tokio::sync::OwnedMutexGuard<()> {
    BUILDING.hold(project).await
}

/// The project's customer transit networks on this transit network (one, or several of one
/// name after a lost create answer), in the operator's project.
async fn networks(e: &Engine<'_>, project: &str) -> Result<Vec<Network>, StepFail> {
    e.net
        .list_networks(&networks_query(e.fabric, project))
        .await
        .map_err(|err| call_failed("listing the customer transit networks", &err))
}

/// The project's customer transit network, found or made (and whether made).
async fn network_of(
    e: &Engine<'_>,
    project: &str,
    name: &str,
) -> Result<(Network, bool), StepFail> {
    if let Some(n) = keeper(networks(e, project).await?, |n| &n.id) {
        return Ok((n, false));
    }
    pool(e)?;
    let n = e
        .net
        .create_network(name)
        .await
        .map_err(|err| call_failed("creating the customer transit network", &err))?;
    Ok((n, true))
}

/// The subnet of a customer transit network, with its CIDR (none: not made yet, or not
/// IPv4).
async fn subnet_of(
    e: &Engine<'_>,
    network_id: &str,
) -> Result<Option<(Subnet, Ipv4Net)>, StepFail> {
    let subnets = e
        .net
        .list_subnets(&subnets_query(network_id))
        .await
        .map_err(|err| call_failed("listing the customer transit's subnets", &err))?;
    Ok(keeper(subnets, |s| &s.id).and_then(|s| s.cidr.parse().ok().map(|c| (s, c))))
}

/// The edge router's address on its subnet: the subnet's gateway.
fn gateway_of(subnet: &Subnet, cidr: Ipv4Net) -> Ipv4Addr {
    subnet
        .gateway_ip
        .as_deref()
        .and_then(|g| g.parse().ok())
        .or_else(|| cidr.hosts().next())
        .unwrap_or(cidr.network())
}

/// The project's edge routers on this transit network, in the operator's project.
async fn edge_routers(e: &Engine<'_>, project: &str) -> Result<Vec<Router>, StepFail> {
    Ok(e.net
        .list_routers(&edge_routers_query(e.fabric, project))
        .await
        .map_err(|err| call_failed("listing the edge routers", &err))?
        .into_iter()
        .filter(|r| r.project_id == e.fabric.operator_project_id)
        .collect())
}

/// A router's interface ports.
async fn interfaces(e: &Engine<'_>, router_id: &str) -> Result<Vec<Port>, StepFail> {
    e.net
        .list_ports(&interfaces_query(router_id))
        .await
        .map_err(|err| call_failed("listing the edge router's interfaces", &err))
}

/// What a new customer transit subnet must not overlap: every link's service CIDR, and the
/// subnets on the router of the link that builds it (Neutron refuses a router interface that
/// overlaps another). Read only when a subnet is cut.
pub(crate) struct Taken<'a> {
    pub link_cidrs: &'a [Ipv4Net],
    /// The customer's side (that router is read with its credential) and the link's router.
    pub router: (&'a Customer<'a>, &'a str),
}

/// What [`ensure_footing`] found or made, and what [`ensure_edge`] still has to: the pieces
/// (each with whether this reconcile made it) for the one Event that names them all.
pub(crate) struct Footing {
    /// The customer transit, its edge leg's address not yet known (unspecified).
    pub transit: CustomerTransit,
    pieces: Vec<(bool, String)>,
    /// The edge router is this reconcile's: it has no interfaces to read yet.
    router_made: bool,
    /// The network is this reconcile's: no port stands on it but what this reconcile makes.
    pub network_made: bool,
}

/// The footing's network, as soon as it is found or made.
pub(crate) struct NetworkKnown {
    pub id: String,
    /// Made by this reconcile (under the project's lock).
    pub made: bool,
}

/// Find or build the project's customer transit in two halves (docs/design.md, "Per-customer
/// transit", "Order"): the footing — network, subnet, edge router — which the link's share and
/// leg need, then the edge router's two interfaces ([`ensure_edge`]), which only the routes
/// need. The caller runs the second beside the share and the leg. The pool is needed only to
/// cut a new subnet: a built customer transit keeps working without it.
pub(crate) async fn ensure_footing<T, Beside>(
    e: &Engine<'_>,
    project: &str,
    taken: Taken<'_>,
    beside: impl FnOnce(NetworkKnown) -> Beside,
) -> (Result<Footing, StepFail>, Option<T>)
where
    Beside: std::future::Future<Output = T>,
{
    let name = customer_transit_name(&e.fabric.transit_network_id, project);
    // The network with its subnet, and beside them the edge router: independent until the
    // edge router's interfaces, which need the subnet (ensure_edge). `beside` (the share)
    // needs only the network: it runs while the subnet is found or cut.
    let network = async {
        let (network, made) = match network_of(e, project, &name).await {
            Ok(found) => found,
            Err(f) => return (Err(f), None),
        };
        let subnet = async {
            // A network this reconcile just made has no subnet yet (the project's lock is
            // held): nothing to read.
            let found = match made {
                true => None,
                false => subnet_of(e, &network.id).await?,
            };
            match found {
                Some((s, cidr)) => Ok::<_, StepFail>((s, cidr, false)),
                None => {
                    let (s, cidr) = cut_subnet(e, &network, &taken).await?;
                    Ok((s, cidr, true))
                }
            }
        };
        let known = NetworkKnown {
            id: network.id.clone(),
            made,
        };
        let (subnet, aside) = futures::join!(subnet, beside(known));
        (subnet.map(|s| ((network, made), s)), Some(aside))
    };
    let router = async {
        let edge_name = edge_router_name(&e.fabric.transit_network_id, project);
        match keeper(edge_routers(e, project).await?, |r| &r.id) {
            Some(r) => Ok::<_, StepFail>((r, false)),
            None => {
                let r = e
                    .net
                    .create_router(&edge_name)
                    .await
                    .map_err(|err| call_failed("creating the edge router", &err))?;
                Ok((r, true))
            }
        }
    };
    let ((network, aside), router) = futures::join!(network, router);
    let footing = network.and_then(|n| router.map(|r| (n, r)));
    let (((network, network_made), (subnet, cidr, subnet_made)), (router, router_made)) =
        match footing {
            Ok(f) => f,
            Err(f) => return (Err(f), aside),
        };
    // Each piece, and whether this reconcile made it: one Event names them all, since the
    // Recorder folds Events of one reason into one series that keeps the first note only.
    let pieces = vec![
        (network_made, format!("network {}", network.id)),
        (subnet_made, format!("subnet {} ({cidr})", subnet.id)),
        (router_made, format!("edge router {}", router.id)),
    ];
    let gateway = gateway_of(&subnet, cidr);
    let footing = Footing {
        transit: CustomerTransit {
            network_id: network.id,
            subnet_id: subnet.id,
            cidr,
            gateway,
            edge_router_id: router.id,
            edge_ip: Ipv4Addr::UNSPECIFIED,
        },
        pieces,
        router_made,
        network_made,
    };
    (Ok(footing), aside)
}

/// The pool customer transits are cut from: needed only to build one (a built customer
/// transit keeps working without it).
fn pool(e: &Engine<'_>) -> Result<CustomerTransitPool, StepFail> {
    e.fabric.customer_transit.ok_or_else(not_configured)
}

/// Cut the customer transit's subnet from the pool: clear of every subnet of the operator's
/// project (the main transit and every other customer transit live there), the links'
/// CIDRs, and the subnets on the customer's router (read side by side).
async fn cut_subnet(
    e: &Engine<'_>,
    network: &Network,
    taken: &Taken<'_>,
) -> Result<(Subnet, Ipv4Net), StepFail> {
    let pool = pool(e)?;
    let _allocating = ALLOCATING.lock().await;
    let (customer, router) = taken.router;
    let connected = async {
        super::ops::connected_subnets(customer.net, e.fabric, router)
            .await
            .map_err(|err| {
                customer_call_failed(
                    customer.secret,
                    "reading the subnets on the customer's router",
                    &err,
                )
            })
    };
    let mine = async {
        e.net
            .list_subnets(&SubnetQuery {
                project_id: Some(e.fabric.operator_project_id.clone()),
                ..Default::default()
            })
            .await
            .map_err(|err| call_failed("listing the operator's subnets", &err))
    };
    let (connected, mine) = futures::join!(connected, mine);
    let (connected, mine) = (connected?, mine?);
    let mut all: Vec<Ipv4Net> = mine.iter().filter_map(|s| s.cidr.parse().ok()).collect();
    all.push(e.fabric.transit_subnet);
    all.extend_from_slice(taken.link_cidrs);
    all.extend(connected);
    let cidr = allocate_subnet(&pool, &all).ok_or_else(|| pool_exhausted(&pool))?;
    let gateway = cidr.hosts().next().unwrap_or(cidr.network());
    // Only router interfaces stand on it: no DHCP server to run, and on ML2/OVN no address
    // for the metadata port (docs/design.md, "Per-customer transit").
    let s = e
        .net
        .create_subnet_with(&CreateSubnet {
            network_id: network.id.clone(),
            cidr: cidr.to_string(),
            gateway_ip: gateway.to_string(),
            dhcp: false,
        })
        .await
        .map_err(|err| call_failed("creating the customer transit's subnet", &err))?;
    Ok((s, cidr))
}

/// The edge router's interface on the customer transit and its leg on the main transit, found
/// or made side by side (independent calls on one router); the customer transit whole, and the
/// note naming every piece. `claimed`: transit addresses other links claim (the edge leg takes
/// none of them).
pub(crate) async fn ensure_edge(
    e: &Engine<'_>,
    project: &str,
    footing: Footing,
    claimed: &[Ipv4Addr],
    actions: &mut Vec<Action>,
) -> Result<CustomerTransit, StepFail> {
    let Footing {
        mut transit,
        mut pieces,
        router_made,
        ..
    } = footing;
    let edge_name = edge_router_name(&e.fabric.transit_network_id, project);
    let router_id = transit.edge_router_id.clone();
    let gateway = transit.gateway;
    let ports = match router_made {
        true => vec![],
        false => interfaces(e, &router_id).await?,
    };
    let ifs = edge_interfaces(
        &ports,
        &router_id,
        &transit.network_id,
        &e.fabric.transit_network_id,
    );
    let interface = async {
        let piece = |port: &str| format!("its interface port {port} at {gateway}");
        match ifs.on_customer_transit {
            Some(p) => Ok((false, piece(&p.id))),
            None => {
                let port = e
                    .net
                    .add_router_subnet(&router_id, &transit.subnet_id)
                    .await
                    .map_err(|err| {
                        call_failed("attaching the customer transit to the edge router", &err)
                    })?;
                Ok::<_, StepFail>((true, piece(&port)))
            }
        }
    };
    let leg = async {
        let piece = |port: &str, ip: Ipv4Addr| format!("its transit leg port {port} at {ip}");
        match ifs
            .on_main_transit
            .and_then(|p| port_ip(p).map(|ip| (p, ip)))
        {
            Some((p, ip)) => Ok(((false, piece(&p.id, ip)), ip)),
            None => {
                let (port, ip) = edge_leg(e, &router_id, &edge_name, claimed).await?;
                Ok::<_, StepFail>(((true, piece(&port, ip)), ip))
            }
        }
    };
    let (interface, leg) = futures::join!(interface, leg);
    pieces.push(interface?);
    let (piece, edge_ip) = leg?;
    pieces.push(piece);
    if let Some(note) = built_note(project, &pieces) {
        actions.push(Action::new(ActionKind::CustomerTransitBuilt, note));
    }
    transit.edge_ip = edge_ip;
    Ok(transit)
}

/// The project's customer transit as it stands, building nothing: `None` without its network
/// and subnet (no leg can stand on it then). A missing edge router (or its leg) leaves
/// `edge_router_id` empty (or `edge_ip` unspecified): an unwind skips what is not there.
pub(crate) async fn find(
    e: &Engine<'_>,
    project: &str,
) -> Result<Option<CustomerTransit>, StepFail> {
    let Some(network) = keeper(networks(e, project).await?, |n| &n.id) else {
        return Ok(None);
    };
    let Some((subnet, cidr)) = subnet_of(e, &network.id).await? else {
        return Ok(None);
    };
    let (edge_router_id, edge_ip) = match keeper(edge_routers(e, project).await?, |r| &r.id) {
        Some(r) => {
            let ports = interfaces(e, &r.id).await?;
            let ip = edge_interfaces(&ports, &r.id, &network.id, &e.fabric.transit_network_id)
                .on_main_transit
                .and_then(port_ip)
                .unwrap_or(Ipv4Addr::UNSPECIFIED);
            (r.id, ip)
        }
        None => (String::new(), Ipv4Addr::UNSPECIFIED),
    };
    Ok(Some(CustomerTransit {
        network_id: network.id,
        subnet_id: subnet.id.clone(),
        cidr,
        gateway: gateway_of(&subnet, cidr),
        edge_router_id,
        edge_ip,
    }))
}

/// The edge router's leg on the main transit: a port of that name left unattached by an
/// earlier run, else a new one at the walk's address; then attached. Its port and address.
async fn edge_leg(
    e: &Engine<'_>,
    router_id: &str,
    name: &str,
    claimed: &[Ipv4Addr],
) -> Result<(String, Ipv4Addr), StepFail> {
    // One address walk at a time: two projects' edge legs would otherwise pick the same one.
    let allocating = ALLOCATING.lock().await;
    let transit = super::ops::main_transit_ports(e)
        .await
        .map_err(|err| call_failed("listing transit ports", &err))?;
    let operator = &e.fabric.operator_project_id;
    let loose = transit
        .iter()
        .filter(|p| p.name == name && p.device_id.is_empty() && p.project_id == *operator)
        .min_by(|a, b| a.id.cmp(&b.id))
        .cloned();
    let port = match loose {
        Some(p) => p,
        None => {
            let occupied: Vec<Ipv4Addr> = transit.iter().filter_map(port_ip).collect();
            let ip = edge_leg_address(e.fabric.transit_subnet, &occupied, claimed)
                .ok_or_else(|| no_edge_address(e.fabric.transit_subnet))?;
            e.net
                .create_port(&CreatePort {
                    network_id: e.fabric.transit_network_id.clone(),
                    subnet_id: Some(e.fabric.transit_subnet_id.clone()),
                    ip_address: Some(ip.to_string()),
                    name: name.to_string(),
                    description:
                        "edge router leg of a customer transit, managed by bnerd-vpn-operator"
                            .into(),
                    tags: vec![],
                })
                .await
                .map_err(|err| call_failed("creating the edge router's transit leg", &err))?
        }
    };
    // The port holds its address now: the next walk sees it, so the attach need not keep
    // other projects waiting.
    drop(allocating);
    e.net
        .add_router_interface(router_id, &port.id)
        .await
        .map_err(|err| call_failed("attaching the edge router's transit leg", &err))?;
    let ip = port_ip(&port).ok_or_else(|| no_edge_address(e.fabric.transit_subnet))?;
    Ok((port.id, ip))
}

/// Why a customer transit did not go.
#[derive(Debug)]
pub(crate) enum NotDown {
    /// Ports the customer made stand on it: only the customer (or a human giving up on them,
    /// with the abandon annotation) can clear that.
    Blocked(StepFail),
    /// A cloud call failed: retried.
    Failed(StepFail),
}

impl From<StepFail> for NotDown {
    fn from(f: StepFail) -> Self {
        NotDown::Failed(f)
    }
}

/// Take the project's customer transit down once nothing but `own_leg` (going, or gone)
/// stands on it: the shares, every route of the edge router, its interfaces, the router, the
/// network with its subnet. Nothing to do when it is already gone or another link's leg stands
/// there; ports the customer made there stop it, named.
pub(crate) async fn take_down(
    e: &Engine<'_>,
    project: &str,
    own_leg: Option<&str>,
    actions: &mut Vec<Action>,
) -> Result<(), NotDown> {
    let operator = &e.fabric.operator_project_id;
    let networks = networks(e, project).await?;
    let edge_name = edge_router_name(&e.fabric.transit_network_id, project);
    let routers = edge_routers(e, project).await?;
    let mut ports = vec![];
    for n in &networks {
        ports.extend(
            e.net
                .list_ports(&PortQuery {
                    network_id: Some(n.id.clone()),
                    ..Default::default()
                })
                .await
                .map_err(|err| call_failed("listing the customer transit's ports", &err))?,
        );
    }
    let edge_ids: Vec<&str> = routers.iter().map(|r| r.id.as_str()).collect();
    let not_edge: Vec<_> = ports
        .iter()
        .filter(|p| !edge_ids.contains(&p.device_id.as_str()))
        .cloned()
        .collect();
    match teardown(&not_edge, project, "", own_leg) {
        Teardown::Keep(_) => return Ok(()),
        Teardown::Blocked(foreign) => {
            let network = networks.first().map(|n| n.id.as_str()).unwrap_or("?");
            return Err(NotDown::Blocked(blocked(network, project, &foreign)));
        }
        Teardown::Go => {}
    }
    // What went, for the one Event that names it all.
    let mut gone: Vec<String> = vec![];
    for n in &networks {
        for policy in e
            .net
            .list_rbac_policies(&n.id)
            .await
            .map_err(|err| call_failed("listing the customer transit's RBAC rules", &err))?
        {
            gone_is_done(e.net.delete_rbac_policy(&policy.id).await)
                .map_err(|err| call_failed("removing the customer transit's share", &err))?;
            gone.push(format!(
                "share {} of network {} with project {}",
                policy.id, n.id, policy.target_tenant
            ));
        }
    }
    // Every route of the gateway router via an edge leg of the project's is the project's
    // (one whose link's status was lost included): it goes before the leg's address is free.
    let mut edge_ips = vec![];
    for r in &routers {
        edge_ips.extend(
            interfaces(e, &r.id)
                .await?
                .iter()
                .filter(|p| p.network_id == e.fabric.transit_network_id)
                .filter_map(|p| p.first_ip().map(str::to_string)),
        );
    }
    if !edge_ips.is_empty() {
        let gw = &e.fabric.gateway_router_id;
        let gateway = e
            .net
            .get_router(gw)
            .await
            .map_err(|err| call_failed("reading the gateway router", &err))?;
        let via: Vec<bnerd_cloud::Route> = gateway
            .routes
            .iter()
            .filter(|r| edge_ips.contains(&r.nexthop))
            .cloned()
            .collect();
        super::ops::remove_routes(e, e.net, &gateway, &via)
            .await
            .map_err(|err| {
                call_failed(
                    "removing the gateway router's routes via the edge router",
                    &err,
                )
            })?;
        gone.extend(
            via.iter()
                .map(|r| format!("gateway route {} via {}", r.destination, r.nexthop)),
        );
    }
    for r in &routers {
        if !r.routes.is_empty() {
            ops::clear_routes(e.net, &r.id)
                .await
                .map_err(|err| call_failed("clearing the edge router's routes", &err))?;
        }
        let ifs = interfaces(e, &r.id).await?;
        // The transit leg first, then the customer transit's interface: the reverse of how
        // they were made.
        let mut ifs: Vec<_> = ifs
            .into_iter()
            .filter(|p| p.is_interface_of(&r.id))
            .collect();
        ifs.sort_by_key(|p| p.network_id != e.fabric.transit_network_id);
        let mut detached = vec![];
        for p in ifs {
            gone_is_done(e.net.remove_router_interface(&r.id, &p.id).await)
                .map_err(|err| call_failed("detaching the edge router", &err))?;
            detached.push(format!("{} at {}", p.id, p.first_ip().unwrap_or("?")));
        }
        gone_is_done(e.net.delete_router(&r.id).await)
            .map_err(|err| call_failed("deleting the edge router", &err))?;
        gone.push(if detached.is_empty() {
            format!("edge router {}", r.id)
        } else {
            format!(
                "edge router {} with its interface ports {}",
                r.id,
                detached.join(", ")
            )
        });
    }
    // A transit leg made but never attached (a run stopped between the two).
    let loose: Vec<_> = super::ops::main_transit_ports(e)
        .await
        .map_err(|err| call_failed("listing transit ports", &err))?
        .into_iter()
        .filter(|p| p.name == edge_name && p.device_id.is_empty() && p.project_id == *operator)
        .collect();
    for p in loose {
        gone_is_done(e.net.delete_port(&p.id).await)
            .map_err(|err| call_failed("deleting the edge router's loose transit leg", &err))?;
        gone.push(format!("loose transit leg port {}", p.id));
    }
    for n in &networks {
        gone_is_done(e.net.delete_network(&n.id).await)
            .map_err(|err| call_failed("deleting the customer transit network", &err))?;
        gone.push(if n.subnets.is_empty() {
            format!("network {}", n.id)
        } else {
            format!("network {} with subnet {}", n.id, n.subnets.join(", "))
        });
    }
    if let Some(note) = removed_note(project, &gone) {
        actions.push(Action::new(ActionKind::CustomerTransitRemoved, note));
    }
    Ok(())
}
