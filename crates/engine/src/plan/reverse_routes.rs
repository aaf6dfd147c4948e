//! ReverseRoutesInstalled: a route on the link's service router back to every gateway with
//! reverse exposures — status.serviceCIDR via status.portFixedIP. Gateways live in any
//! namespace and are untrusted input: each target is screened, and one bad gateway never
//! blocks the others.

use std::collections::{HashMap, HashSet};
use std::net::Ipv4Addr;

use bnerd_api::echo::quoted;
use bnerd_api::gateway::ReverseTarget;
use bnerd_api::names::{is_managed, leg_owner_uid};
use bnerd_api::{GatewayRef, Reason, ReverseRoute};
use bnerd_cloud::fabric::{CidrPolicy, CidrRefusal};
use bnerd_cloud::{CloudError, Port, Route};
use ipnet::{IpNet, Ipv4Net};

use super::{StepFail, reverse_route_of};

/// A gateway whose reverse route cannot be installed, and why (for the condition message
/// and for a Warning Event on the gateway itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayProblem {
    pub gateway: GatewayRef,
    /// For the link's condition and the operator's log (platform admins read those): may
    /// name ports, projects, routers and other links.
    pub message: String,
    /// For the Warning Event on the gateway, which its namespace's tenant reads: this
    /// gateway's own problem only, never another tenant's CIDR, router, link or project.
    pub note: String,
    /// Whether trying again soon may help (a cloud hiccup, not a bad object).
    pub retryable: bool,
}

impl GatewayProblem {
    /// A problem whose message names nothing but the gateway's own fields.
    fn own(gateway: &GatewayRef, message: String, retryable: bool) -> Self {
        Self {
            gateway: gateway.clone(),
            note: message.clone(),
            message,
            retryable,
        }
    }
}

pub(crate) fn gateway_name(g: &GatewayRef) -> String {
    format!("{} {}/{}", g.kind, g.namespace, g.name)
}

fn as_reverse_route(t: &ReverseTarget) -> ReverseRoute {
    ReverseRoute {
        service_cidr: t.service_cidr.clone(),
        next_hop: t.port_fixed_ip.clone(),
        gateway_ref: t.gateway.clone(),
    }
}

/// What the screen checks every gateway against. Gateways live in any namespace, so their
/// status is untrusted: it steers a route on every service router of the estate.
#[derive(Debug)]
pub struct ScreenView<'a> {
    pub transit: Ipv4Net,
    /// Every link's spec.serviceClusterCIDR (this one's and its peers').
    pub link_cidrs: &'a [Ipv4Net],
    /// Every port on the transit network (the leg step's list).
    pub ports: &'a [Port],
    /// The operator's project: a gateway's transit port is the operator's.
    pub operator_project: &'a str,
    /// Transit addresses links claim (legs): never a gateway's.
    pub claimed: &'a [Ipv4Addr],
    /// The operator's bounds on gateway CIDRs.
    pub policy: &'a CidrPolicy,
    /// The per-customer transit pool, when configured: customer transits are the operator's.
    pub pool: Option<Ipv4Net>,
}

/// What the screen looks up for each target: which link CIDR it overlaps, whether its next hop
/// is a leg address, which transit port holds that hop. Behind a trait so that the screen's
/// indexes can be held to plain scans in a test.
trait Lookups<'a> {
    /// The first of `link_cidrs`, in their order, that overlaps `cidr`.
    fn link_overlapping(&self, cidr: Ipv4Net) -> Option<Ipv4Net>;
    /// Whether a link claims `hop` as a leg address.
    fn claimed(&self, hop: Ipv4Addr) -> bool;
    /// The first transit port, in list order, holding `ip`.
    fn port_holding(&self, ip: &str) -> Option<&'a Port>;
}

/// The view indexed once per screen: with G gateways and L links (and about as many transit
/// ports as both), a scan per target costs G×L, a few million comparisons at 1000 of each on
/// every reconcile of every link; the indexes cost (G + L)·log.
struct Indexed<'a> {
    link_cidrs: &'a [Ipv4Net],
    links: OverlapIndex,
    claimed: HashSet<Ipv4Addr>,
    ports: HashMap<&'a str, &'a Port>,
}

impl<'a> Indexed<'a> {
    fn new(v: &ScreenView<'a>) -> Self {
        let mut links = OverlapIndex::with_room(v.link_cidrs.iter().copied());
        for (rank, c) in v.link_cidrs.iter().enumerate() {
            links.insert(*c, rank);
        }
        let mut ports = HashMap::new();
        for p in v.ports {
            for f in &p.fixed_ips {
                // The first port holding an address answers, as a scan of the list would.
                ports.entry(f.ip_address.as_str()).or_insert(p);
            }
        }
        Self {
            link_cidrs: v.link_cidrs,
            links,
            claimed: v.claimed.iter().copied().collect(),
            ports,
        }
    }
}

impl<'a> Lookups<'a> for Indexed<'a> {
    fn link_overlapping(&self, cidr: Ipv4Net) -> Option<Ipv4Net> {
        self.links
            .first_overlapping(cidr)
            .and_then(|rank| self.link_cidrs.get(rank).copied())
    }

    fn claimed(&self, hop: Ipv4Addr) -> bool {
        self.claimed.contains(&hop)
    }

    fn port_holding(&self, ip: &str) -> Option<&'a Port> {
        self.ports.get(ip).copied()
    }
}

/// Networks with a rank each, answering "the lowest rank among the networks that overlap
/// this one" in O(log n) rather than by a scan. Two IPv4 networks overlap exactly when one
/// contains the other, so the networks overlapping `net` are those that start inside it (a
/// range of start addresses: a min segment tree over the sorted starts) and those that
/// contain it and start before it (its supernets: at most one lookup per prefix length in
/// use).
#[derive(Debug)]
struct OverlapIndex {
    /// The start address of every network that may be inserted, sorted, without repeats:
    /// the leaves of `tree`.
    starts: Vec<u32>,
    /// Segment tree (leaves at `starts.len()..`): the lowest rank of the networks inserted
    /// that start at or under a node; `usize::MAX` for none.
    tree: Vec<usize>,
    /// The lowest rank of each network inserted.
    ranks: HashMap<Ipv4Net, usize>,
    /// Bit p set when a network of prefix length p was inserted.
    lens: u64,
}

impl OverlapIndex {
    /// An empty index with room for networks starting where those of `room` start.
    fn with_room(room: impl Iterator<Item = Ipv4Net>) -> Self {
        let mut starts: Vec<u32> = room.map(|n| u32::from(n.network())).collect();
        starts.sort_unstable();
        starts.dedup();
        Self {
            tree: vec![usize::MAX; 2 * starts.len()],
            starts,
            ranks: HashMap::new(),
            lens: 0,
        }
    }

    /// Add `net` with `rank`; a network already in keeps the lower of its ranks.
    fn insert(&mut self, net: Ipv4Net, rank: usize) {
        let Ok(leaf) = self.starts.binary_search(&u32::from(net.network())) else {
            debug_assert!(false, "{net} is outside the room the index was made with");
            return;
        };
        let kept = self.ranks.entry(net).or_insert(rank);
        *kept = (*kept).min(rank);
        self.lens |= 1 << net.prefix_len();
        let mut i = leaf + self.starts.len();
        while i > 0 && rank < self.tree[i] {
            self.tree[i] = rank;
            i /= 2;
        }
    }

    /// The lowest rank of `net` itself, when it was inserted.
    fn rank_of(&self, net: Ipv4Net) -> Option<usize> {
        self.ranks.get(&net).copied()
    }

    /// The lowest rank among the networks inserted that overlap `net` (itself included).
    fn first_overlapping(&self, net: Ipv4Net) -> Option<usize> {
        let (first, last) = (u32::from(net.network()), u32::from(net.broadcast()));
        let n = self.starts.len();
        let mut lo = self.starts.partition_point(|s| *s < first) + n;
        let mut hi = self.starts.partition_point(|s| *s <= last) + n;
        let mut best = usize::MAX;
        while lo < hi {
            if lo % 2 == 1 {
                best = best.min(self.tree[lo]);
                lo += 1;
            }
            if hi % 2 == 1 {
                hi -= 1;
                best = best.min(self.tree[hi]);
            }
            lo /= 2;
            hi /= 2;
        }
        for len in 0..net.prefix_len() {
            if self.lens & (1 << len) == 0 {
                continue;
            }
            let rank = Ipv4Net::new(net.network(), len)
                .ok()
                .and_then(|s| self.rank_of(s.trunc()));
            if let Some(r) = rank {
                best = best.min(r);
            }
        }
        (best != usize::MAX).then_some(best)
    }
}

/// A refusal: (message for the link, note for the gateway).
type Fault = (String, String);

fn same(m: String) -> Fault {
    (m.clone(), m)
}

/// Why this target's serviceCIDR cannot be routed, if it cannot.
fn cidr_fault<'a>(
    t: &ReverseTarget,
    v: &ScreenView<'a>,
    look: &impl Lookups<'a>,
) -> Result<Ipv4Net, Fault> {
    let cidr = match t.service_cidr.parse::<IpNet>() {
        Ok(IpNet::V4(n)) => n,
        Ok(IpNet::V6(_)) => {
            return Err(same(format!(
                "status.serviceCIDR {} is not IPv4; the transit fabric is IPv4",
                t.service_cidr
            )));
        }
        Err(_) => {
            return Err(same(format!(
                "status.serviceCIDR {} is not a CIDR",
                quoted(&t.service_cidr)
            )));
        }
    };
    if cidr.prefix_len() == 0 {
        return Err(same(format!(
            "status.serviceCIDR {cidr} would route everything on the service router through the gateway"
        )));
    }
    if cidr.trunc() != cidr {
        return Err(same(format!("status.serviceCIDR {cidr} has host bits set")));
    }
    if bnerd_api::cidr::overlaps(cidr, v.transit) {
        return Err(same(format!(
            "status.serviceCIDR {cidr} overlaps the transit subnet {}",
            v.transit
        )));
    }
    match v.policy.admits(cidr) {
        Ok(()) => {}
        Err(CidrRefusal::TooWide) => {
            return Err(same(format!(
                "status.serviceCIDR {cidr} is wider than the operator admits for gateways: its prefix must be /{} or longer (operator setting IPSEC_GATEWAY_CIDR_MIN_PREFIX_LENGTH)",
                v.policy.min_prefix_len
            )));
        }
        Err(CidrRefusal::OutsideRanges) => {
            return Err(same(format!(
                "status.serviceCIDR {cidr} is outside the ranges the operator admits for gateways ({}; operator setting IPSEC_GATEWAY_CIDR_RANGES)",
                v.policy.ranges_text()
            )));
        }
    }
    if let Some(pool) = v.pool.filter(|p| bnerd_api::cidr::overlaps(*p, cidr)) {
        return Err((
            format!(
                "status.serviceCIDR {cidr} overlaps the per-customer transit pool {pool} (operator setting IPSEC_PER_CUSTOMER_TRANSIT_POOL)"
            ),
            format!("status.serviceCIDR {cidr} overlaps the operator's per-customer transit pool"),
        ));
    }
    if let Some(c) = look.link_overlapping(cidr) {
        return Err((
            format!(
                "status.serviceCIDR {cidr} overlaps the service cluster CIDR {c} of a ClusterLink"
            ),
            format!("status.serviceCIDR {cidr} overlaps a service cluster's CIDR"),
        ));
    }
    Ok(cidr)
}

/// Why this target's portFixedIP is no gateway port, if it is none: the next hop must be a
/// port the operator's project holds on the transit network, and no leg, router interface,
/// gateway-router leg (.1) or DHCP address (.2), or any address could steer every service
/// router's traffic for the CIDR to another customer's leg.
fn hop_fault<'a>(
    t: &ReverseTarget,
    v: &ScreenView<'a>,
    look: &impl Lookups<'a>,
) -> Result<(), Fault> {
    let transit = v.transit;
    let Ok(hop) = t.port_fixed_ip.parse::<Ipv4Addr>() else {
        return Err(same(format!(
            "status.portFixedIP {} is not an IPv4 address",
            quoted(&t.port_fixed_ip)
        )));
    };
    if !transit.contains(&hop) || hop == transit.network() || hop == transit.broadcast() {
        return Err(same(format!(
            "status.portFixedIP {hop} is not a host address of the transit subnet {transit}"
        )));
    }
    let base = u32::from(transit.network());
    if u32::from(hop) == base + 1 || u32::from(hop) == base + 2 {
        return Err(same(format!(
            "status.portFixedIP {hop} is the transit subnet's .1 (the gateway router's leg) or .2 (DHCP), never a gateway's port"
        )));
    }
    let not_gateway = format!(
        "status.portFixedIP {hop} is not a gateway port on the transit network (a port of the operator's project that is no router interface and no ClusterLink's leg)"
    );
    if look.claimed(hop) {
        return Err((
            format!("status.portFixedIP {hop} is a ClusterLink's leg address"),
            not_gateway,
        ));
    }
    let text = hop.to_string();
    let Some(p) = look.port_holding(&text) else {
        return Err(same(format!(
            "status.portFixedIP {hop}: no port on the transit network holds that address"
        )));
    };
    if is_managed(&p.tags) || leg_owner_uid(&p.tags, &p.description).is_some() {
        return Err((
            format!(
                "status.portFixedIP {hop} is held by port {}, a ClusterLink's leg",
                p.id
            ),
            not_gateway,
        ));
    }
    if bnerd_api::names::is_edge_leg_name(&p.name) {
        return Err((
            format!(
                "status.portFixedIP {hop} is held by port {}, a customer transit's edge router leg",
                p.id
            ),
            not_gateway,
        ));
    }
    if p.is_router_interface() {
        return Err((
            format!(
                "status.portFixedIP {hop} is held by port {}, an interface of router {}",
                p.id, p.device_id
            ),
            not_gateway,
        ));
    }
    if p.project_id != v.operator_project {
        return Err((
            format!(
                "status.portFixedIP {hop} is held by port {} of project {}, not the operator's project {}",
                p.id, p.project_id, v.operator_project
            ),
            not_gateway,
        ));
    }
    Ok(())
}

/// Older first: creationTimestamp (none counts as newest), then namespace/name.
pub(crate) fn age_key(t: &ReverseTarget) -> (bool, &str, &str, &str, &str) {
    (
        t.created.is_none(),
        t.created.as_deref().unwrap_or(""),
        &t.gateway.namespace,
        &t.gateway.name,
        &t.gateway.kind,
    )
}

/// Split the estate's targets into the ones to route and the ones refused, each refusal
/// naming its gateway. Of two gateways whose serviceCIDRs overlap, the older keeps its
/// routes and the newer is refused naming it ("one next hop per destination", and a newer
/// object can never take an older one's traffic); identical ones share one route.
///
/// O((G + L)·log) for G targets and L links: every gateway's route is screened on every
/// reconcile of every link, so a scan of the kept gateways and of the link CIDRs per target
/// (G² + G×L) would be paid N times per fan-out.
pub fn screen(
    targets: &[ReverseTarget],
    v: &ScreenView<'_>,
) -> (Vec<ReverseRoute>, Vec<GatewayProblem>) {
    let look = Indexed::new(v);
    let mut problems = vec![];
    let mut ok: Vec<(&ReverseTarget, Ipv4Net)> = vec![];
    for t in targets {
        let checked = cidr_fault(t, v, &look).and_then(|c| hop_fault(t, v, &look).map(|()| c));
        match checked {
            Err((message, note)) => problems.push(GatewayProblem {
                gateway: t.gateway.clone(),
                message,
                note,
                retryable: false,
            }),
            Ok(c) => ok.push((t, c)),
        }
    }
    ok.sort_by(|a, b| age_key(a.0).cmp(&age_key(b.0)));
    // Kept gateways, ranked by age (their place in `kept`). Two kept CIDRs never overlap
    // unless they are the same CIDR via the same next hop (twins), so a target whose CIDR is
    // kept already overlaps nothing else: it is a twin of the oldest holder, or refused
    // naming it. Any other target is refused naming the oldest kept CIDR it overlaps.
    let mut kept: Vec<(&ReverseTarget, Ipv4Net)> = vec![];
    let mut index = OverlapIndex::with_room(ok.iter().map(|(_, c)| *c));
    for (t, cidr) in ok {
        let older = match index.rank_of(cidr) {
            Some(i) => kept
                .get(i)
                .filter(|(k, _)| k.port_fixed_ip != t.port_fixed_ip),
            None => index.first_overlapping(cidr).and_then(|i| kept.get(i)),
        };
        match older {
            None => {
                index.insert(cidr, kept.len());
                kept.push((t, cidr));
            }
            Some((k, _)) => problems.push(GatewayProblem::own(
                &t.gateway,
                format!(
                    "status.serviceCIDR {cidr} overlaps the serviceCIDR of an older gateway, {}, which keeps its routes; one destination takes one next hop",
                    gateway_name(&k.gateway)
                ),
                false,
            )),
        }
    }
    let mut routes: Vec<ReverseRoute> = kept.iter().map(|(t, _)| as_reverse_route(t)).collect();
    routes.sort();
    (routes, problems)
}

/// The subnets connected to the service router (its interfaces' subnets): a gateway CIDR
/// overlapping one of them would take traffic for a network the router reaches directly.
pub(crate) fn connected_overlap(
    desired: &[ReverseRoute],
    connected: &[Ipv4Net],
) -> (Vec<ReverseRoute>, Vec<GatewayProblem>) {
    let mut ok = vec![];
    let mut problems = vec![];
    for d in desired {
        let hit = d
            .service_cidr
            .parse::<Ipv4Net>()
            .ok()
            .filter(|c| connected.iter().any(|s| bnerd_api::cidr::overlaps(*s, *c)));
        match hit {
            None => ok.push(d.clone()),
            Some(c) => problems.push(GatewayProblem {
                gateway: d.gateway_ref.clone(),
                message: format!(
                    "status.serviceCIDR {c} overlaps a subnet connected to this link's service router"
                ),
                note: format!(
                    "status.serviceCIDR {c} overlaps a subnet connected to a service cluster's router"
                ),
                retryable: false,
            }),
        }
    }
    (ok, problems)
}

/// Everything the reverse-route decision reads.
#[derive(Debug)]
pub(crate) struct ReverseView<'a> {
    pub router_id: &'a str,
    /// The service router's routes as just read.
    pub routes: &'a [Route],
    /// Screened targets (see [`screen`]).
    pub desired: &'a [ReverseRoute],
    /// status.reverseRoutes: what this link installed.
    pub recorded: &'a [ReverseRoute],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ReversePlan {
    /// Recorded routes no gateway asks for any more.
    pub remove: Vec<Route>,
    /// Already in place.
    pub keep: Vec<ReverseRoute>,
    /// To add, one entry per gateway (the act may batch them, and splits on a refusal).
    pub add: Vec<ReverseRoute>,
    /// The destination is routed elsewhere on this router by someone else.
    pub conflicts: Vec<GatewayProblem>,
}

pub(crate) fn plan(v: &ReverseView<'_>) -> ReversePlan {
    let wanted: Vec<Route> = v.desired.iter().map(reverse_route_of).collect();
    let mut remove: Vec<Route> = v
        .recorded
        .iter()
        .map(reverse_route_of)
        .filter(|r| !wanted.contains(r) && v.routes.contains(r))
        .collect();
    remove.sort();
    remove.dedup();
    let after: Vec<&Route> = v.routes.iter().filter(|r| !remove.contains(r)).collect();
    let mut p = ReversePlan {
        remove,
        keep: vec![],
        add: vec![],
        conflicts: vec![],
    };
    for d in v.desired {
        let want = reverse_route_of(d);
        if after.contains(&&want) {
            p.keep.push(d.clone());
        } else if let Some(other) = after.iter().find(|r| r.destination == want.destination) {
            p.conflicts.push(GatewayProblem {
                gateway: d.gateway_ref.clone(),
                message: format!(
                    "{} is already routed via {} on router {}, which this link does not own",
                    want.destination, other.nexthop, v.router_id
                ),
                note: format!(
                    "status.serviceCIDR {} is already routed elsewhere on a service cluster's router",
                    want.destination
                ),
                retryable: false,
            });
        } else {
            p.add.push(d.clone());
        }
    }
    p
}

/// A failed add for one gateway, as its problem.
pub(crate) fn add_failed(d: &ReverseRoute, router_id: &str, e: &CloudError) -> GatewayProblem {
    GatewayProblem {
        gateway: d.gateway_ref.clone(),
        message: format!(
            "adding {} via {} to router {router_id}: {e}{}",
            d.service_cidr,
            d.next_hop,
            super::quota_hint(e)
        ),
        note: format!(
            "adding the route to status.serviceCIDR {} via {} on a service cluster's router failed{}",
            d.service_cidr,
            d.next_hop,
            if e.is_retryable() {
                "; it is retried"
            } else {
                ""
            }
        ),
        retryable: e.is_retryable(),
    }
}

/// When a batch add was refused for a reason that one gateway's route can cause, try the
/// routes gateway by gateway so the good ones still go in.
pub(crate) fn split_after(e: &CloudError) -> bool {
    !e.is_retryable()
}

/// The condition once the writes are done: True with the count, or False naming every
/// gateway whose route is missing.
pub(crate) fn verdict(
    router_id: &str,
    installed: usize,
    problems: &[GatewayProblem],
) -> Result<String, StepFail> {
    if problems.is_empty() {
        return Ok(if installed == 0 {
            "no gateway in the estate has reverse exposures".into()
        } else {
            format!("{installed} reverse route(s) on router {router_id}")
        });
    }
    let text: Vec<String> = problems
        .iter()
        .map(|p| format!("{}: {}", gateway_name(&p.gateway), p.message))
        .collect();
    Err(StepFail {
        reason: Reason::EnsureReverseRoutesFailed,
        message: format!(
            "{installed} reverse route(s) on router {router_id}; not installed: {}",
            text.join("; ")
        ),
        retryable: problems.iter().any(|p| p.retryable),
    })
}

/// The cloud call of the step that failed before any per-gateway outcome was known.
#[derive(Debug, Clone, Copy)]
pub(crate) enum ReverseCall {
    Read,
    Remove,
    Add,
    /// A `PerCustomer` link's gateways are screened against the transit network's ports,
    /// which its leg step did not list.
    ListTransitPorts,
}

pub(crate) fn call_failed(call: ReverseCall, router_id: &str, e: &CloudError) -> StepFail {
    let what = match call {
        ReverseCall::Read => "reading router",
        ReverseCall::Remove => "removing stale reverse routes from router",
        ReverseCall::Add => "adding reverse routes to router",
        ReverseCall::ListTransitPorts => {
            "listing transit ports to screen the gateways of edge router"
        }
    };
    StepFail::cloud(
        Reason::EnsureReverseRoutesFailed,
        &format!("{what} {router_id}"),
        e,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fixtures::route;

    fn gw(ns: &str, name: &str) -> GatewayRef {
        GatewayRef {
            kind: "IPsecGateway".into(),
            namespace: ns.into(),
            name: name.into(),
        }
    }

    fn target(ns: &str, name: &str, cidr: &str, hop: &str) -> ReverseTarget {
        ReverseTarget {
            gateway: gw(ns, name),
            service_cidr: cidr.into(),
            port_fixed_ip: hop.into(),
            uid: None,
            created: None,
        }
    }

    fn transit() -> Ipv4Net {
        "10.254.0.0/24".parse().unwrap()
    }

    /// A gateway pod's port: the operator's project, no router, no marker.
    fn gw_port(ip: &str) -> Port {
        crate::plan::fixtures::port(&format!("gw-{ip}"), ip)
    }

    fn gw_ports() -> Vec<Port> {
        (10..=13)
            .map(|i| gw_port(&format!("10.254.0.{i}")))
            .collect()
    }

    fn view<'a>(links: &'a [Ipv4Net], ports: &'a [Port], policy: &'a CidrPolicy) -> ScreenView<'a> {
        ScreenView {
            transit: transit(),
            link_cidrs: links,
            ports,
            operator_project: "operator",
            claimed: &[],
            policy,
            pool: None,
        }
    }

    #[test]
    fn a_gateway_cidr_in_the_per_customer_pool_is_refused_naming_the_setting() {
        let ports = gw_ports();
        let policy = CidrPolicy::default();
        let v = ScreenView {
            pool: Some("10.255.0.0/16".parse().unwrap()),
            ..view(&[], &ports, &policy)
        };
        let (ok, refused) = screen(
            &[
                target("a", "in-pool", "10.255.8.0/24", "10.254.0.10"),
                target("a", "fine", "100.64.1.0/24", "10.254.0.11"),
            ],
            &v,
        );
        assert_eq!(ok.len(), 1);
        assert_eq!(refused.len(), 1);
        assert!(
            refused[0]
                .message
                .contains("IPSEC_PER_CUSTOMER_TRANSIT_POOL"),
            "{}",
            refused[0].message
        );
        assert!(!refused[0].note.contains("IPSEC_"), "{}", refused[0].note);
    }

    #[test]
    fn screening_refuses_each_bad_gateway_by_name() {
        let links: Vec<Ipv4Net> = vec!["10.251.0.0/16".parse().unwrap()];
        let good = target("a", "good", "100.64.1.0/24", "10.254.0.10");
        let bad = [
            (
                target("tenant-x", "all", "0.0.0.0/0", "10.254.0.11"),
                "route everything",
            ),
            (target("b", "v6", "fd00::/64", "10.254.0.12"), "not IPv4"),
            (target("b", "junk", "nope", "10.254.0.12"), "not a CIDR"),
            (
                target("b", "host", "100.64.2.1/24", "10.254.0.12"),
                "host bits",
            ),
            (
                target("b", "transit", "10.254.0.0/16", "10.254.0.12"),
                "transit subnet",
            ),
            (
                target("b", "svc", "10.251.4.0/24", "10.254.0.12"),
                "service cluster CIDR",
            ),
            (
                target("b", "far", "100.64.3.0/24", "192.168.1.1"),
                "portFixedIP",
            ),
            (
                target("b", "bcast", "100.64.3.0/24", "10.254.0.255"),
                "portFixedIP",
            ),
            (
                target("b", "name", "100.64.3.0/24", "gw.example"),
                "portFixedIP",
            ),
        ];
        let mut all = vec![good.clone()];
        all.extend(bad.iter().map(|(t, _)| t.clone()));
        let ports = gw_ports();
        let (ok, problems) = screen(&all, &view(&links, &ports, &CidrPolicy::default()));
        assert_eq!(
            ok,
            vec![as_reverse_route(&good)],
            "the good one still goes in"
        );
        assert_eq!(problems.len(), bad.len());
        for (t, word) in &bad {
            let p = problems.iter().find(|p| p.gateway == t.gateway).unwrap();
            assert!(
                p.message.contains(word),
                "{}: {}",
                t.gateway.name,
                p.message
            );
        }
        // The gateway's own Event never names another tenant's CIDR.
        let svc = problems.iter().find(|p| p.gateway.name == "svc").unwrap();
        assert!(!svc.note.contains("10.251.0.0/16"), "{}", svc.note);
    }

    #[test]
    fn a_next_hop_must_be_a_gateway_port_of_the_operators_project() {
        let mut leg = crate::plan::fixtures::leg("leg", "10.254.0.20", "svc-router");
        leg.tags = vec![bnerd_api::names::tag_link_uid("u-other")];
        let hand_leg = crate::plan::fixtures::leg("hand", "10.254.0.21", "svc-router");
        let mut foreign = gw_port("10.254.0.22");
        foreign.project_id = "customer-b".into();
        // An edge router's leg left loose (detached): an operator-project port, no router.
        let mut loose_edge = gw_port("10.254.0.23");
        loose_edge.name = "bnerd-vpn-edge-customer-b-on-transit".into();
        let ports = vec![gw_port("10.254.0.10"), leg, hand_leg, foreign, loose_edge];
        let claimed: Vec<Ipv4Addr> = vec!["10.254.0.30".parse().unwrap()];
        let policy = CidrPolicy::default();
        let v = ScreenView {
            claimed: &claimed,
            ..view(&[], &ports, &policy)
        };
        // (rule, next hop, admitted, words in the link's message)
        let rows: [(&str, &str, bool, &str); 8] = [
            (
                "a gateway port of the operator's project",
                "10.254.0.10",
                true,
                "",
            ),
            ("another link's leg (tagged)", "10.254.0.20", false, "leg"),
            (
                "a router interface (a hand-made leg)",
                "10.254.0.21",
                false,
                "interface of router svc-router",
            ),
            (
                "another project's port",
                "10.254.0.22",
                false,
                "project customer-b",
            ),
            (
                "an address a link claims",
                "10.254.0.30",
                false,
                "leg address",
            ),
            ("no port holds it", "10.254.0.99", false, "no port"),
            (
                "an edge router's leg, even loose",
                "10.254.0.23",
                false,
                "edge router leg",
            ),
            (".1, the gateway router's leg", "10.254.0.1", false, ".1"),
        ];
        for (i, (rule, hop, ok, word)) in rows.iter().enumerate() {
            let t = target("t", &format!("g{i}"), &format!("100.64.{i}.0/24"), hop);
            let (routes, problems) = screen(std::slice::from_ref(&t), &v);
            assert_eq!(routes.len() == 1, *ok, "{rule}: {problems:?}");
            if let Some(p) = problems.first() {
                assert!(p.message.contains(word), "{rule}: {}", p.message);
                // The gateway's Event names no other port, project or router.
                for other in ["customer-b", "svc-router", "port leg", "port hand"] {
                    assert!(!p.note.contains(other), "{rule}: {}", p.note);
                }
            }
        }
        let t = target("t", "dhcp", "100.64.9.0/24", "10.254.0.2");
        assert!(screen(&[t], &v).1[0].message.contains(".2 (DHCP)"));
    }

    #[test]
    fn gateway_cidrs_outside_the_operators_bounds_are_refused() {
        let policy = CidrPolicy {
            ranges: vec!["100.64.0.0/10".parse().unwrap()],
            min_prefix_len: 20,
        };
        let ports = gw_ports();
        let v = view(&[], &ports, &policy);
        let (ok, p) = screen(&[target("a", "in", "100.64.1.0/24", "10.254.0.10")], &v);
        assert_eq!((ok.len(), p.len()), (1, 0));
        let (_, p) = screen(&[target("a", "wide", "100.64.0.0/16", "10.254.0.10")], &v);
        assert!(
            p[0].message
                .contains("IPSEC_GATEWAY_CIDR_MIN_PREFIX_LENGTH"),
            "{}",
            p[0].message
        );
        let (_, p) = screen(&[target("a", "out", "192.168.1.0/24", "10.254.0.10")], &v);
        assert!(
            p[0].message.contains("IPSEC_GATEWAY_CIDR_RANGES"),
            "{}",
            p[0].message
        );
    }

    fn aged(mut t: ReverseTarget, created: &str) -> ReverseTarget {
        t.created = Some(created.into());
        t
    }

    #[test]
    fn of_overlapping_gateways_the_older_keeps_its_routes() {
        let ports = gw_ports();
        let policy = CidrPolicy::default();
        let v = view(&[], &ports, &policy);
        let old = aged(
            target("a", "old", "100.64.1.0/24", "10.254.0.10"),
            "2026-01-01T00:00:00Z",
        );
        // A /25 inside the older /24: refused, naming the older gateway (not its CIDR).
        let inner = aged(
            target("b", "inner", "100.64.1.0/25", "10.254.0.11"),
            "2026-02-01T00:00:00Z",
        );
        let (ok, problems) = screen(&[inner.clone(), old.clone()], &v);
        assert_eq!(ok, vec![as_reverse_route(&old)]);
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].gateway, inner.gateway);
        assert!(
            problems[0].note.contains("IPsecGateway a/old"),
            "{}",
            problems[0].note
        );
        assert!(
            !problems[0].note.contains("100.64.1.0/24"),
            "{}",
            problems[0].note
        );
        // Equal CIDRs via different next hops: the older keeps its route (both used to be
        // refused, which withdrew the legitimate route from every router).
        let rival = aged(
            target("b", "rival", "100.64.1.0/24", "10.254.0.12"),
            "2026-03-01T00:00:00Z",
        );
        let (ok, problems) = screen(&[rival.clone(), old.clone()], &v);
        assert_eq!(ok, vec![as_reverse_route(&old)]);
        assert_eq!(problems[0].gateway, rival.gateway);
        // A wider newer one covering the older one is refused too.
        let wide = aged(
            target("c", "wide", "100.64.0.0/16", "10.254.0.13"),
            "2026-04-01T00:00:00Z",
        );
        let (ok, problems) = screen(&[wide.clone(), old.clone()], &v);
        assert_eq!((ok.len(), problems[0].gateway.clone()), (1, wide.gateway));
        // No timestamp counts as newest.
        let a = target("a", "x", "100.64.5.0/24", "10.254.0.10");
        let b = aged(
            target("z", "y", "100.64.5.0/24", "10.254.0.11"),
            "2026-05-01T00:00:00Z",
        );
        let (ok, _) = screen(&[a, b.clone()], &v);
        assert_eq!(ok, vec![as_reverse_route(&b)]);
        // Same age: namespace/name decides.
        let c = aged(
            target("a", "c", "100.64.6.0/24", "10.254.0.10"),
            "2026-05-01T00:00:00Z",
        );
        let d = aged(
            target("b", "d", "100.64.6.0/24", "10.254.0.11"),
            "2026-05-01T00:00:00Z",
        );
        let (ok, _) = screen(&[d, c.clone()], &v);
        assert_eq!(ok, vec![as_reverse_route(&c)]);
        // The same destination via the same address: one route, both gateways recorded.
        let twin = aged(
            target("c", "c", "100.64.1.0/24", "10.254.0.10"),
            "2026-06-01T00:00:00Z",
        );
        let (ok, problems) = screen(&[old, twin], &v);
        assert_eq!((ok.len(), problems.len()), (2, 0));
    }

    /// The lookups as plain scans of the view, as the screen made them before its indexes.
    struct Scan<'a, 'v>(&'v ScreenView<'a>);

    impl<'a> Lookups<'a> for Scan<'a, '_> {
        fn link_overlapping(&self, cidr: Ipv4Net) -> Option<Ipv4Net> {
            self.0
                .link_cidrs
                .iter()
                .copied()
                .find(|c| bnerd_api::cidr::overlaps(*c, cidr))
        }

        fn claimed(&self, hop: Ipv4Addr) -> bool {
            self.0.claimed.contains(&hop)
        }

        fn port_holding(&self, ip: &str) -> Option<&'a Port> {
            self.0.ports.iter().find(|p| p.has_ip(ip))
        }
    }

    /// The screen written the straightforward way: every target against every link CIDR and
    /// port, then against every gateway kept before it.
    fn reference(
        targets: &[ReverseTarget],
        v: &ScreenView<'_>,
    ) -> (Vec<ReverseRoute>, Vec<GatewayProblem>) {
        let look = Scan(v);
        let mut problems = vec![];
        let mut ok: Vec<(&ReverseTarget, Ipv4Net)> = vec![];
        for t in targets {
            match cidr_fault(t, v, &look).and_then(|c| hop_fault(t, v, &look).map(|()| c)) {
                Err((message, note)) => problems.push(GatewayProblem {
                    gateway: t.gateway.clone(),
                    message,
                    note,
                    retryable: false,
                }),
                Ok(c) => ok.push((t, c)),
            }
        }
        ok.sort_by(|a, b| age_key(a.0).cmp(&age_key(b.0)));
        let mut kept: Vec<(&ReverseTarget, Ipv4Net)> = vec![];
        for (t, cidr) in ok {
            let older = kept.iter().find(|(k, kc)| {
                bnerd_api::cidr::overlaps(*kc, cidr)
                    && !(*kc == cidr && k.port_fixed_ip == t.port_fixed_ip)
            });
            match older {
                None => kept.push((t, cidr)),
                Some((k, _)) => problems.push(GatewayProblem::own(
                    &t.gateway,
                    format!(
                        "status.serviceCIDR {cidr} overlaps the serviceCIDR of an older gateway, {}, which keeps its routes; one destination takes one next hop",
                        gateway_name(&k.gateway)
                    ),
                    false,
                )),
            }
        }
        let mut routes: Vec<ReverseRoute> = kept.iter().map(|(t, _)| as_reverse_route(t)).collect();
        routes.sort();
        (routes, problems)
    }

    /// splitmix64: deterministic pseudo-random numbers without a crate.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }

        /// A network in 100.64.0.0/16 of prefix length `shortest` to /28, crowded so that
        /// many overlap.
        fn net(&mut self, shortest: u8) -> Ipv4Net {
            let len = shortest + self.below(u64::from(29 - shortest)) as u8;
            let addr = Ipv4Addr::from(0x6440_0000 | (self.below(1 << 12) as u32) << 4);
            Ipv4Net::new(addr, len).unwrap().trunc()
        }
    }

    #[test]
    fn the_indexed_screen_decides_as_the_straightforward_one() {
        for seed in 0..20u64 {
            let mut r = Rng(seed);
            // Link CIDRs in the gateways' space, some overlapping each other, some repeated:
            // the first in their order is the one a refusal names.
            let links: Vec<Ipv4Net> = (0..40).map(|_| r.net(22)).collect();
            let mut ports = gw_ports();
            let mut leg = crate::plan::fixtures::leg("leg", "10.254.0.20", "svc-router");
            leg.tags = vec![bnerd_api::names::tag_link_uid("u-other")];
            let mut foreign = gw_port("10.254.0.22");
            foreign.project_id = "customer-b".into();
            // Two ports holding one address: the first in the list answers.
            let mut shadow = gw_port("10.254.0.11");
            shadow.project_id = "customer-c".into();
            ports.extend([leg, foreign, shadow]);
            let claimed: Vec<Ipv4Addr> = vec!["10.254.0.13".parse().unwrap()];
            let policy = CidrPolicy::default();
            let v = ScreenView {
                claimed: &claimed,
                pool: Some("100.64.255.0/24".parse().unwrap()),
                ..view(&links, &ports, &policy)
            };
            let hops = [
                "10.254.0.10",
                "10.254.0.11",
                "10.254.0.12",
                "10.254.0.13",
                "10.254.0.20",
                "10.254.0.22",
                "10.254.0.99",
                "10.254.0.1",
                "nope",
            ];
            let mut targets: Vec<ReverseTarget> = vec![];
            for i in 0..300 {
                let cidr = match r.below(20) {
                    0 => "100.64.1.1/24".to_string(),
                    1 => "10.254.0.0/25".to_string(),
                    2 => "junk".to_string(),
                    _ => r.net(18).to_string(),
                };
                // Most hops good, so that many targets reach the overlap check.
                let hop = if r.below(4) == 0 {
                    hops[r.below(hops.len() as u64) as usize]
                } else {
                    hops[r.below(3) as usize]
                };
                let mut t = target(&format!("ns{}", r.below(5)), &format!("g{i}"), &cidr, hop);
                // Few distinct times: ties are decided by namespace/name.
                if r.below(6) != 0 {
                    t.created = Some(format!("2026-01-0{}T00:00:00Z", 1 + r.below(5)));
                }
                // Some repeat an earlier gateway's CIDR, mostly via its next hop (twins).
                if i > 0 && r.below(8) == 0 {
                    let earlier = &targets[r.below(i) as usize];
                    t.service_cidr = earlier.service_cidr.clone();
                    if r.below(4) != 0 {
                        t.port_fixed_ip = earlier.port_fixed_ip.clone();
                    }
                }
                targets.push(t);
            }
            let got = screen(&targets, &v);
            let want = reference(&targets, &v);
            assert_eq!(got, want, "seed {seed}");
            // The draw exercises every branch: kept routes, twins, refusals of each kind.
            let said = |w: &str| got.1.iter().filter(|p| p.message.contains(w)).count();
            let twins = got
                .0
                .windows(2)
                .filter(|w| w[0].service_cidr == w[1].service_cidr)
                .count();
            assert!(got.0.len() > 10, "seed {seed}: {} kept", got.0.len());
            assert!(twins > 0, "seed {seed}");
            assert!(said("older gateway") > 10, "seed {seed}");
            assert!(said("ClusterLink") > 10, "seed {seed}");
        }
    }

    #[test]
    fn a_cidr_overlapping_a_connected_subnet_is_refused_for_that_router() {
        let d = as_reverse_route(&target("a", "a", "192.168.10.0/24", "10.254.0.10"));
        let e = as_reverse_route(&target("a", "b", "100.64.1.0/24", "10.254.0.10"));
        let connected: Vec<Ipv4Net> = vec!["192.168.0.0/16".parse().unwrap()];
        let (ok, problems) = connected_overlap(&[d.clone(), e.clone()], &connected);
        assert_eq!(ok, vec![e]);
        assert_eq!(problems[0].gateway, d.gateway_ref);
        assert!(!problems[0].note.contains("192.168.0.0/16"));
    }

    fn rr(t: &ReverseTarget) -> ReverseRoute {
        as_reverse_route(t)
    }

    #[test]
    fn converging_the_route_set() {
        // One route per gateway's status.serviceCIDR on the link's own
        // spec.serviceClusterRouter, and what no gateway asks for any more is pruned.
        let keep = rr(&target("a", "keep", "100.64.1.0/24", "10.254.0.10"));
        let new = rr(&target("a", "new", "100.64.2.0/24", "10.254.0.11"));
        let gone = rr(&target("a", "gone", "100.64.3.0/24", "10.254.0.12"));
        let clash = rr(&target("a", "clash", "100.64.4.0/24", "10.254.0.13"));
        let routes = vec![
            reverse_route_of(&keep),
            reverse_route_of(&gone),
            route("100.64.4.0/24", "10.254.0.99"),
            route("0.0.0.0/0", "10.254.0.1"),
        ];
        let p = plan(&ReverseView {
            router_id: "svc",
            routes: &routes,
            desired: &[keep.clone(), new.clone(), clash.clone()],
            recorded: &[keep.clone(), gone.clone()],
        });
        assert_eq!(p.remove, vec![reverse_route_of(&gone)]);
        assert_eq!(p.keep, vec![keep]);
        assert_eq!(p.add, vec![new]);
        assert_eq!(p.conflicts.len(), 1);
        assert_eq!(p.conflicts[0].gateway, clash.gateway_ref);
        assert!(p.conflicts[0].message.contains("10.254.0.99"));
        // A recorded route someone removed is not removed again.
        let p = plan(&ReverseView {
            router_id: "svc",
            routes: &[],
            desired: &[],
            recorded: &[gone],
        });
        assert!(p.remove.is_empty());
    }

    #[test]
    fn verdict_names_every_missing_gateway() {
        assert_eq!(
            verdict("svc", 0, &[]).unwrap(),
            "no gateway in the estate has reverse exposures"
        );
        assert_eq!(
            verdict("svc", 2, &[]).unwrap(),
            "2 reverse route(s) on router svc"
        );
        let p = GatewayProblem::own(
            &gw("tenant-x", "all"),
            "status.serviceCIDR 0.0.0.0/0 would route everything".into(),
            false,
        );
        let f = verdict("svc", 1, std::slice::from_ref(&p)).unwrap_err();
        assert_eq!(f.reason, Reason::EnsureReverseRoutesFailed);
        assert!(f.message.contains("IPsecGateway tenant-x/all") && !f.retryable);
        assert!(f.message.starts_with("1 reverse route(s) on router svc"));
    }
}
