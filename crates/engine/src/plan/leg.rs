//! LegAttached: which router the spec names, which port is this link's leg, and what it takes
//! to make it right (the transit-IP walk, adoption, duplicates, a leg the spec moved).
//!
//! One module although it passes 500 lines: the walk, adoption, duplicates and a moved leg are
//! one decision over the same list of ports (a duplicate changes what the walk may take, a
//! move changes what counts as ours), and more than half of the file is its table of rules.

use std::collections::{BTreeMap, BTreeSet};
use std::net::Ipv4Addr;

use bnerd_api::Reason;
use bnerd_api::RouteRecord;
use bnerd_api::cidr::transit_candidates;
use bnerd_api::echo::quoted;
use bnerd_api::names::{is_managed, leg_owner_uid};
use bnerd_cloud::{CloudError, NeutronErrorKind, Port, Route, Router};
use ipnet::Ipv4Net;

use super::{Peer, StepFail};

/// What the router lookup found for spec.serviceClusterRouter.
#[derive(Debug)]
pub(crate) enum RouterSeen {
    /// The router the leg is attached to, still carrying the ID or name the spec gives.
    Current(Router),
    /// Read by ID.
    ById(Router),
    /// Listed by name (zero, one or many).
    ByName(Vec<Router>),
    /// A read failed: what was being read, and why.
    Failed(String, CloudError),
}

/// spec.serviceClusterRouter is a name or an ID, looked up at each reconcile
/// (docs/crd-reference.md, "Router resolution"): the router the leg sits on settles it while
/// it still answers to that value, so a second router taking the same name later does not
/// unseat a working leg.
pub(crate) fn current_router_settles(router: &Router, value: &str) -> bool {
    router.id == value || router.name == value
}

/// Whether spec.serviceClusterRouter's value may be a router ID (worth a GET before a name
/// lookup).
pub(crate) fn looks_like_id(value: &str) -> bool {
    value.len() == 36 && value.chars().all(|c| c.is_ascii_hexdigit() || c == '-')
}

/// Who looked the router up: the message says whose view "not visible" is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Looker {
    Operator,
    Customer,
}

impl Looker {
    fn credential(self) -> &'static str {
        match self {
            Looker::Operator => "the operator credential",
            Looker::Customer => "the customer credential",
        }
    }
}

/// The router this link's leg belongs on, or LegAttached=False/RouterResolveFailed. Only a
/// router of the project the link builds in (`project`) qualifies: a credential that sees
/// further (an admin operator credential sees every router in the cloud; a customer
/// credential with a custom cross-project role sees other projects') must not put a leg on
/// another project's router.
pub(crate) fn resolve_router(
    value: &str,
    seen: RouterSeen,
    project: Option<&str>,
    looker: Looker,
) -> Result<Router, StepFail> {
    let fail = |m: String| StepFail::terminal(Reason::RouterResolveFailed, m);
    let in_project = |r: &Router| project.is_some_and(|p| !p.is_empty() && r.project_id == p);
    let outside = |r: &Router| {
        fail(format!(
            "spec.serviceClusterRouter {} resolves to router {} of project {}, not of project {}, the one this link builds in; a leg is only put on a router of that project",
            quoted(value),
            r.id,
            if r.project_id.is_empty() {
                "(none)"
            } else {
                r.project_id.as_str()
            },
            project.unwrap_or("(none named)")
        ))
    };
    match seen {
        RouterSeen::Current(r) | RouterSeen::ById(r) if in_project(&r) => Ok(r),
        RouterSeen::Current(r) | RouterSeen::ById(r) => Err(outside(&r)),
        RouterSeen::Failed(what, e) => Err(StepFail::cloud(Reason::RouterResolveFailed, &what, &e)),
        RouterSeen::ByName(found) => {
            let (ours, others): (Vec<Router>, Vec<Router>) =
                found.into_iter().partition(in_project);
            match <[Router; 1]>::try_from(ours) {
                Ok([r]) => Ok(r),
                Err(ours) if ours.is_empty() => Err(match others.first() {
                    Some(r) => outside(r),
                    None => fail(format!(
                        "spec.serviceClusterRouter {}: no router with that name or ID is visible to {}",
                        quoted(value),
                        looker.credential()
                    )),
                }),
                Err(many) => {
                    let ids: Vec<&str> = many.iter().map(|r| r.id.as_str()).collect();
                    Err(fail(format!(
                        "spec.serviceClusterRouter {} is ambiguous: {} routers carry that name ({}); use the router ID",
                        quoted(value),
                        many.len(),
                        ids.join(", ")
                    )))
                }
            }
        }
    }
}

/// "check the port's project before attaching it": Neutron refuses an interface of another
/// project for a member, but an admin credential's attach would succeed and put one
/// project's port on another's router.
pub(crate) fn attach_allowed(port: &Port, router: &Router) -> Result<(), StepFail> {
    if port.project_id == router.project_id {
        return Ok(());
    }
    Err(StepFail::terminal(
        Reason::EnsureRouterHasPortFailed,
        format!(
            "leg port {} belongs to project {}, router {} to project {}: a leg is only attached to a router of its own project",
            port.id, port.project_id, router.id, router.project_id
        ),
    ))
}

/// Everything the leg decision reads.
#[derive(Debug)]
pub(crate) struct LegView<'a> {
    pub uid: &'a str,
    /// The project this link's leg must belong to ([`leg_project`]).
    pub project: Option<&'a str>,
    /// The router resolved from the spec.
    pub router_id: &'a str,
    /// spec.transitIP, validated.
    pub pinned: Option<Ipv4Addr>,
    pub subnet: Ipv4Net,
    /// Every port on the transit network.
    pub ports: &'a [Port],
    pub peers: &'a [Peer],
    /// Addresses a create found taken during this reconcile (someone got there first).
    pub lost_races: &'a BTreeSet<Ipv4Addr>,
    /// A cross-tenant leg: the customer may not ask for an address on a network it does not
    /// own (403), so Neutron picks it.
    pub neutron_picks: bool,
    /// status.transitIP of a cross-tenant leg still bound to it ([`bound_address`]): an
    /// untagged port is adopted only there.
    pub recorded_ip: Option<Ipv4Addr>,
    /// The last reconcile ended in TransitIPMismatch: it stays until a human recreates the
    /// link, without creating (and deleting) a port at every resync.
    pub mismatch_held: bool,
}

/// Why a port of ours has to go before the leg can be right.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum UnwindWhy {
    /// Another port carries this link's UID too (two writers, or a crash at the wrong time).
    Duplicate { kept: String },
    /// spec.serviceClusterRouter now names another router.
    RouterChanged { from: String },
    /// spec.transitIP now pins another address.
    PinnedIpChanged { to: Ipv4Addr },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LegPlan {
    /// Remove these ports of ours (their gateway and reverse routes first), then look again.
    Unwind(Vec<(Port, UnwindWhy)>),
    /// Our port is the leg; `settle` says what it still needs.
    Keep(Port),
    /// An untagged port attached to the target router at the candidate address: take it over.
    Adopt(Port),
    /// Create the leg at this address.
    Create(Ipv4Addr),
    /// Create the leg and let Neutron pick the address (cross-tenant).
    CreateAny,
    Refuse(StepFail),
}

/// The project a link's leg must belong to: the operator's for a same-tenant link, the
/// customer project the link names for a cross-tenant one (the one its credential must
/// authenticate into; status records the same once it resolved). None: a cross-tenant link
/// that names no project, which owns no port.
pub fn leg_project<'a>(
    spec: &'a bnerd_api::ClusterLinkSpec,
    status: &'a bnerd_api::ClusterLinkStatus,
    operator_project: &'a str,
) -> Option<&'a str> {
    if spec.credentials_secret_ref.is_none() {
        return Some(operator_project);
    }
    spec.customer_project_id
        .as_deref()
        .or(status.customer_project_id.as_deref())
        .filter(|p| !p.is_empty())
}

/// What a port on the transit network is to one link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LegMark {
    /// Its leg: it carries the link's UID (tag, or the description marker of a port whose
    /// tags were dropped) and lives in the project the link builds in.
    Own,
    /// It carries the link's UID but lives in another project. Any project the transit network
    /// is shared with can create ports on it and write any description, so the marker alone
    /// proves nothing: such a port is never adopted, kept, unwound or trusted as a next hop,
    /// only reported.
    Forged,
    /// Not marked for this link.
    Other,
}

/// The ownership rule (docs/crd-reference.md, "Which port is a link's leg"): the one
/// statement the reconcile, the unwind, `plan` and `doctor` all apply. Every port it is
/// asked about was listed on the transit network.
pub fn leg_mark(p: &Port, uid: &str, project: Option<&str>) -> LegMark {
    if leg_owner_uid(&p.tags, &p.description) != Some(uid) {
        return LegMark::Other;
    }
    if project.is_some_and(|want| !want.is_empty() && p.project_id == want) {
        LegMark::Own
    } else {
        LegMark::Forged
    }
}

/// Whether this port is one of this link's legs ([`leg_mark`]).
pub(crate) fn is_own(p: &Port, uid: &str, project: Option<&str>) -> bool {
    leg_mark(p, uid, project) == LegMark::Own
}

/// Ports carrying this link's UID in another project than its own (for the Warning).
pub(crate) fn forged<'p>(ports: &'p [Port], uid: &str, project: Option<&str>) -> Vec<&'p Port> {
    ports
        .iter()
        .filter(|p| leg_mark(p, uid, project) == LegMark::Forged)
        .collect()
}

/// The Warning about a port that carries this link's marker in another project.
pub(crate) fn forged_note(p: &Port, project: Option<&str>) -> String {
    format!(
        "port {} at {} on the transit network carries this link's UID but belongs to project {}, not {}: it is not this link's leg and is left alone (not adopted, not removed, never a next hop); whoever made it should remove it",
        p.id,
        p.first_ip().unwrap_or("no address"),
        if p.project_id.is_empty() {
            "(none)"
        } else {
            p.project_id.as_str()
        },
        project.unwrap_or("(no project named)")
    )
}

pub(crate) fn port_ip(p: &Port) -> Option<Ipv4Addr> {
    p.first_ip().and_then(|ip| ip.parse().ok())
}

/// The leg's transit address; a leg without one cannot carry a route.
pub(crate) fn leg_ip(p: &Port) -> Result<Ipv4Addr, StepFail> {
    port_ip(p).ok_or_else(|| {
        StepFail::terminal(
            Reason::EnsureLegPortFailed,
            format!("leg port {} has no IPv4 address", p.id),
        )
    })
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

/// Of several ports carrying our UID, the one to keep: the one attached to the target router,
/// then the one at the pinned address, then the lowest address. The choice ignores status,
/// so two writers with different statuses keep the same port.
fn keeper<'p>(own: &[&'p Port], v: &LegView<'_>) -> Option<&'p Port> {
    own.iter()
        .min_by_key(|p| {
            (
                !p.is_interface_of(v.router_id),
                v.pinned.is_some_and(|ip| port_ip(p) != Some(ip)),
                port_ip(p).map(u32::from).unwrap_or(u32::MAX),
                p.id.clone(),
            )
        })
        .copied()
}

/// The leg decision (docs/design.md, "The transit-IP walk"; docs/design.md, "The leg's
/// identity"; docs/design.md, "Spec changes converge").
pub(crate) fn plan(v: &LegView<'_>) -> LegPlan {
    let own: Vec<&Port> = v
        .ports
        .iter()
        .filter(|p| is_own(p, v.uid, v.project))
        .collect();
    if let Some(keep) = keeper(&own, v) {
        let extras: Vec<(Port, UnwindWhy)> = own
            .iter()
            .filter(|p| p.id != keep.id)
            .map(|p| {
                let why = UnwindWhy::Duplicate {
                    kept: keep.id.clone(),
                };
                ((*p).clone(), why)
            })
            .collect();
        if !extras.is_empty() {
            return LegPlan::Unwind(extras);
        }
        // "a new router moves the leg; a new pinned transitIP rebuilds the leg. Nothing is
        // left behind at the old place."
        if keep.is_router_interface() && keep.device_id != v.router_id {
            let why = UnwindWhy::RouterChanged {
                from: keep.device_id.clone(),
            };
            return LegPlan::Unwind(vec![(keep.clone(), why)]);
        }
        if let Some(to) = v.pinned.filter(|ip| port_ip(keep) != Some(*ip)) {
            return LegPlan::Unwind(vec![(keep.clone(), UnwindWhy::PinnedIpChanged { to })]);
        }
        if let Err(f) = leg_ip(keep) {
            return LegPlan::Refuse(f);
        }
        return LegPlan::Keep(keep.clone());
    }
    allocate(v)
}

/// An unmarked port attached to the link's router is adopted only in the project the link
/// builds in (docs/crd-reference.md, "The adoption rule"): a router only takes interfaces of
/// its own project, so another project's port there is something this link did not expect
/// and must not take over.
fn adoptable(h: &Port, v: &LegView<'_>) -> bool {
    !is_managed(&h.tags)
        && h.is_interface_of(v.router_id)
        && v.project.is_some_and(|want| h.project_id == want)
}

/// The address walk from .3 past every address another link claims or a port holds, unless
/// spec.transitIP pins one (docs/crd-reference.md, "The transit-IP allocation rule"), and the
/// adoption of an unmarked port on the link's router at the candidate address ("The adoption
/// rule"). Candidates are walked lazily: a /8 is 16 M of them.
fn allocate(v: &LegView<'_>) -> LegPlan {
    if v.neutron_picks {
        return allocate_by_neutron(v);
    }
    let unavailable =
        |m: String| LegPlan::Refuse(StepFail::terminal(Reason::TransitIPUnavailable, m));
    let claimed: BTreeMap<Ipv4Addr, &str> = v
        .peers
        .iter()
        .flat_map(|p| p.transit_ips.iter().map(|ip| (*ip, p.name.as_str())))
        .collect();
    let held: BTreeMap<Ipv4Addr, &Port> = v
        .ports
        .iter()
        .flat_map(|p| {
            p.fixed_ips
                .iter()
                .filter_map(|f| f.ip_address.parse().ok())
                .map(move |ip| (ip, p))
        })
        .collect();
    let adoptable = |h: &Port| adoptable(h, v);

    if let Some(ip) = v.pinned {
        if let Some(peer) = claimed.get(&ip) {
            return unavailable(format!(
                "spec.transitIP {ip} is already claimed by ClusterLink {peer}"
            ));
        }
        return match held.get(&ip) {
            Some(h) if adoptable(h) => LegPlan::Adopt((*h).clone()),
            Some(h) => unavailable(format!(
                "spec.transitIP {ip} is held by {}, which this link does not own",
                describe_holder(h)
            )),
            None if v.lost_races.contains(&ip) => unavailable(format!(
                "spec.transitIP {ip} is held by another port, which this link does not own"
            )),
            None => LegPlan::Create(ip),
        };
    }
    let mut skip = spread(v.uid, v.lost_races.len());
    let mut first_free = None;
    for ip in transit_candidates(v.subnet) {
        if claimed.contains_key(&ip) || v.lost_races.contains(&ip) {
            continue;
        }
        match held.get(&ip) {
            Some(h) if adoptable(h) => return LegPlan::Adopt((*h).clone()),
            Some(_) => continue,
            None if skip == 0 => return LegPlan::Create(ip),
            None => {
                skip -= 1;
                first_free.get_or_insert(ip);
            }
        }
    }
    match first_free {
        Some(ip) => LegPlan::Create(ip),
        None => unavailable(format!("no free transit address left in {}", v.subnet)),
    }
}

/// How many free addresses a walk passes over after losing `lost` create races in this
/// reconcile. A burst of links applied at once all walk from .3; without a spread every loser
/// tries the same next address again and n links cost n²/2 failed creates. Each loser instead
/// skips 0..2^lost free addresses (at most 63), picked from its UID, so the walks fan out and
/// the burst settles in a few rounds. A walk that lost nothing takes the lowest free address,
/// as the walk's order has it (docs/crd-reference.md, "The transit-IP allocation rule"); the
/// gaps a burst leaves are the next links' lowest free ones.
fn spread(uid: &str, lost: usize) -> usize {
    if lost == 0 {
        return 0;
    }
    let width = 1u64 << lost.min(6);
    // FNV-1a over the UID and the round: pure, so plan tests and `plan` see the same choice.
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in uid.bytes().chain((lost as u64).to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    (h % width) as usize
}

/// A cross-tenant leg: an untagged port already on the target router is adopted (at the
/// pinned address when one is pinned); otherwise Neutron picks the address, and a pinned one
/// can only adopt.
fn allocate_by_neutron(v: &LegView<'_>) -> LegPlan {
    if v.mismatch_held {
        return LegPlan::Refuse(mismatch_held());
    }
    let adoptable = |h: &&Port| adoptable(h, v);
    // "at the candidate transit IP": a leg recorded at an address is adopted only there, or
    // the gateway route would follow a port to a new address (what TransitIPMismatch is for).
    let at = |p: &&Port| {
        v.pinned.is_none_or(|ip| p.has_ip(&ip.to_string()))
            && v.recorded_ip.is_none_or(|ip| p.has_ip(&ip.to_string()))
    };
    if let Some(h) = v.ports.iter().filter(adoptable).find(at) {
        return LegPlan::Adopt(h.clone());
    }
    match v.pinned {
        Some(ip) => LegPlan::Refuse(StepFail::terminal(
            Reason::TransitIPUnavailable,
            format!(
                "spec.transitIP {ip}: a cross-tenant leg is created by the customer credential, which Neutron does not let choose an address on a network it does not own; spec.transitIP can only adopt an untagged leg already attached to the router there"
            ),
        )),
        None => LegPlan::CreateAny,
    }
}

/// Whether the last reconcile ended in TransitIPMismatch (held until a human recreates the
/// link).
pub(crate) fn mismatch_recorded(
    conditions: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition],
) -> bool {
    bnerd_api::conditions::find(conditions, bnerd_api::ConditionType::LegAttached)
        .is_some_and(|c| c.status == "False" && c.reason == Reason::TransitIPMismatch.as_str())
}

fn mismatch_held() -> StepFail {
    StepFail::terminal(
        Reason::TransitIPMismatch,
        "the leg port stands at another address than status.transitIP; nothing is routed to this link until it is recreated (kubectl clusterlink recreate, or delete and apply it again)",
    )
}

/// A cross-tenant leg back at an address Neutron picked, not its recorded one, is terminal
/// (docs/crd-reference.md, `LegAttached`, reason `TransitIPMismatch`). The old address
/// may be another tenant's by now: the route via it goes at once,
/// the new port is deleted, and no route to the new address is installed.
pub(crate) fn mismatch(recorded: Option<Ipv4Addr>, new: Ipv4Addr) -> Option<StepFail> {
    let old = recorded.filter(|old| *old != new)?;
    Some(StepFail::terminal(
        Reason::TransitIPMismatch,
        format!(
            "the leg port came back at {new}, not at status.transitIP {old} (it vanished out of band and Neutron picked a new address); the gateway route via {old} was removed and the new port deleted; nothing is routed to this link until it is recreated"
        ),
    ))
}

/// The address a cross-tenant leg must come back at (else TransitIPMismatch): status's
/// transitIP, but only while the leg belongs on the router status recorded it on. A leg the
/// spec moved to another router is rebuilt on purpose and may come back anywhere — also when
/// the process died after removing the old leg and before creating the new one, so status
/// still names the old router and address (crash-point finding: a cross-tenant router change
/// stopped before the 12th call was held as TransitIPMismatch for good). Status without a
/// recorded router (written by an older version) keeps binding the address.
pub(crate) fn bound_address(
    transit_ip: Option<&str>,
    recorded_router: Option<&str>,
    router_id: &str,
) -> Option<Ipv4Addr> {
    if recorded_router.is_some_and(|r| r != router_id) {
        return None;
    }
    transit_ip.and_then(|ip| ip.parse().ok())
}

/// The gateway-router routes a TransitIPMismatch takes away: this link's own route via the
/// old address (the destination status recorded, or the link's CIDR), never another route
/// that happens to use the same next hop. The old address is free in Neutron and may be
/// another tenant's leg by now, with that tenant's own route to it.
pub(crate) fn mismatch_routes(
    routes: &[Route],
    old: Ipv4Addr,
    recorded: Option<&RouteRecord>,
    cidr: Ipv4Net,
) -> Vec<Route> {
    let same_net = |d: &str| {
        d.parse::<Ipv4Net>()
            .is_ok_and(|n| n.trunc() == cidr.trunc())
    };
    let recorded_dest = recorded
        .filter(|r| r.nexthop.parse::<Ipv4Addr>().is_ok_and(|n| n == old))
        .and_then(|r| r.destination.parse::<Ipv4Net>().ok());
    routes
        .iter()
        .filter(|r| r.nexthop.parse::<Ipv4Addr>().is_ok_and(|n| n == old))
        .filter(|r| {
            same_net(&r.destination)
                || recorded_dest.is_some_and(|d| {
                    r.destination
                        .parse::<Ipv4Net>()
                        .is_ok_and(|n| n.trunc() == d.trunc())
                })
        })
        .cloned()
        .collect()
}

/// The mismatch verdict when removing the route via the old address failed too.
pub(crate) fn mismatch_route_not_removed(f: StepFail, old: Ipv4Addr, e: &CloudError) -> StepFail {
    StepFail {
        message: format!(
            "{}; also failed to remove the gateway route via {old}: operator credential: {e}",
            f.message
        ),
        retryable: true,
        ..f
    }
}

/// What a chosen leg port still needs: its tags, and its attachment to the target router.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Settle {
    /// The full tag list to set, when ours are missing (Neutron may drop create-body tags).
    pub tags: Option<Vec<String>>,
    pub attach: bool,
}

pub(crate) fn settle(port: &Port, want_tags: &[String], router_id: &str) -> Settle {
    let tags = (!want_tags.iter().all(|t| port.has_tag(t))).then(|| {
        let mut all = port.tags.clone();
        all.extend(want_tags.iter().filter(|t| !port.has_tag(t)).cloned());
        all
    });
    Settle {
        tags,
        attach: !port.is_interface_of(router_id),
    }
}

/// A create lost the race for its address (someone took it between our list and create):
/// look again rather than fail.
pub(crate) fn create_lost_race(e: &CloudError) -> bool {
    e.is(NeutronErrorKind::IpAddressAlreadyAllocated)
}

/// A re-attach after a lost answer finds the port already on the router: that is done.
pub(crate) fn attach_already_done(
    e: &CloudError,
    port_now: Option<&Port>,
    router_id: &str,
) -> bool {
    e.is(NeutronErrorKind::PortInUse) && port_now.is_some_and(|p| p.is_interface_of(router_id))
}

/// The cloud call of the leg step that failed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum LegCall<'a> {
    ListPorts,
    Unwind(&'a Port),
    Create(Ipv4Addr),
    CreateAny,
    Tag(&'a Port),
    Attach(&'a Port, &'a str),
}

/// LegAttached=False for a failed call: EnsureRouterHasPortFailed for the attach, else
/// EnsureLegPortFailed.
pub(crate) fn call_failed(call: LegCall<'_>, e: &CloudError) -> StepFail {
    let (reason, context) = match call {
        LegCall::ListPorts => (
            Reason::EnsureLegPortFailed,
            "listing transit ports".to_string(),
        ),
        LegCall::Unwind(p) => (
            Reason::EnsureLegPortFailed,
            format!("removing leg port {} before rebuilding the leg", p.id),
        ),
        LegCall::CreateAny => (
            Reason::EnsureLegPortFailed,
            "creating leg port (address picked by Neutron)".to_string(),
        ),
        LegCall::Create(ip) => (
            Reason::EnsureLegPortFailed,
            format!("creating leg port at {ip}"),
        ),
        LegCall::Tag(p) => (
            Reason::EnsureLegPortFailed,
            format!("tagging leg port {}", p.id),
        ),
        LegCall::Attach(p, r) => (
            Reason::EnsureRouterHasPortFailed,
            format!("attaching leg port {} to router {r}", p.id),
        ),
    };
    StepFail::cloud(reason, &context, e)
}

/// The leg step went round more often than any spec change needs: someone keeps changing
/// the transit network under us.
pub(crate) fn unsettled(rounds: usize) -> StepFail {
    StepFail {
        reason: Reason::EnsureLegPortFailed,
        message: format!(
            "the transit network kept changing during {rounds} rounds of looking; will look again"
        ),
        retryable: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fixtures::{attached, leg, port, tagged};
    use bnerd_api::names::{TAG_MANAGED, tag_link_uid};
    use bnerd_cloud::{OWNER_ROUTER_INTERFACE_DVR, OWNER_ROUTER_INTERFACE_HA};

    const UID: &str = "uid-1";
    const R: &str = "router-a";

    #[test]
    fn the_recorded_address_binds_a_leg_only_on_its_recorded_router() {
        let ip: Ipv4Addr = "10.254.0.7".parse().unwrap();
        // (rule, status.transitIP, status.serviceRouterID, the address that binds)
        type Row<'a> = (&'a str, Option<&'a str>, Option<&'a str>, Option<Ipv4Addr>);
        let rows: [Row; 5] = [
            (
                "rule: the leg vanished and came back on the same router: the address binds",
                Some("10.254.0.7"),
                Some(R),
                Some(ip),
            ),
            (
                "spec changes converge: the spec moved the leg to another router: it may come back anywhere \
                 (also after a crash between the old leg's removal and the new one's creation)",
                Some("10.254.0.7"),
                Some("router-old"),
                None,
            ),
            (
                "status from before serviceRouterID was recorded: keep binding",
                Some("10.254.0.7"),
                None,
                Some(ip),
            ),
            ("no address recorded", None, Some(R), None),
            (
                "an unreadable recorded address binds nothing",
                Some("x"),
                Some(R),
                None,
            ),
        ];
        for (rule, transit_ip, recorded_router, want) in rows {
            assert_eq!(
                bound_address(transit_ip, recorded_router, R),
                want,
                "{rule}"
            );
        }
    }

    fn ours(p: Port) -> Port {
        tagged(p, &[TAG_MANAGED.into(), tag_link_uid(UID)])
    }

    fn peer(name: &str, ip: &str) -> Peer {
        Peer {
            name: name.into(),
            transit_ips: vec![ip.parse().unwrap()],
            cidr: None,
            route_installed: false,
            created: String::new(),
        }
    }

    struct Case {
        ports: Vec<Port>,
        peers: Vec<Peer>,
        pinned: Option<&'static str>,
        raced: Vec<&'static str>,
        subnet: &'static str,
        neutron_picks: bool,
        mismatch_held: bool,
        project: Option<&'static str>,
        recorded: Option<&'static str>,
    }

    impl Default for Case {
        fn default() -> Self {
            Case {
                ports: vec![],
                peers: vec![],
                pinned: None,
                raced: vec![],
                subnet: "10.254.0.0/24",
                neutron_picks: false,
                mismatch_held: false,
                // The fixtures' ports live in the project "operator".
                project: Some("operator"),
                recorded: None,
            }
        }
    }

    fn run(c: Case) -> LegPlan {
        let lost: BTreeSet<Ipv4Addr> = c.raced.iter().map(|s| s.parse().unwrap()).collect();
        plan(&LegView {
            uid: UID,
            project: c.project,
            router_id: R,
            pinned: c.pinned.map(|s| s.parse().unwrap()),
            subnet: c.subnet.parse().unwrap(),
            ports: &c.ports,
            peers: &c.peers,
            lost_races: &lost,
            neutron_picks: c.neutron_picks,
            recorded_ip: c.recorded.map(|s| s.parse().unwrap()),
            mismatch_held: c.mismatch_held,
        })
    }

    fn create(ip: &str) -> LegPlan {
        LegPlan::Create(ip.parse().unwrap())
    }

    fn refused(p: &LegPlan) -> (Reason, String) {
        match p {
            LegPlan::Refuse(f) => (f.reason, f.message.clone()),
            other => panic!("not a refusal: {other:?}"),
        }
    }

    #[test]
    fn allocates_from_dot_3_skipping_the_network_and_claims() {
        // "starting at the transit subnet's .3 (.1 … and .2 … are skipped by construction)"
        assert_eq!(run(Case::default()), create("10.254.0.3"));
        // "any address already claimed by another ClusterLink … is skipped too"
        let c = Case {
            peers: vec![peer("other", "10.254.0.3")],
            ..Default::default()
        };
        assert_eq!(run(c), create("10.254.0.4"));
        // "… or occupied on the network is skipped too"
        let c = Case {
            ports: vec![port("x", "10.254.0.3"), port("y", "10.254.0.4")],
            ..Default::default()
        };
        assert_eq!(run(c), create("10.254.0.5"));
        // An address lost to a concurrent create during this reconcile is skipped (and the
        // walk spreads over the next two free ones, see below).
        let c = Case {
            raced: vec!["10.254.0.3"],
            ..Default::default()
        };
        let got = run(c);
        assert!(
            [create("10.254.0.4"), create("10.254.0.5")].contains(&got),
            "{got:?}"
        );
    }

    #[test]
    fn walks_that_lost_a_race_spread_out() {
        // No lost race: the lowest free address, whatever the UID.
        for i in 0..50 {
            assert_eq!(spread(&format!("uid-{i}"), 0), 0);
        }
        // After k lost races a walk skips 0..2^k free addresses (capped at 64), and a burst's
        // UIDs use the whole width, so they stop colliding on one address.
        for lost in 1..=8 {
            let width = 1usize << lost.min(6);
            let picks: BTreeSet<usize> = (0..400)
                .map(|i| spread(&format!("uid-{i}"), lost))
                .collect();
            assert!(picks.iter().all(|p| *p < width), "{lost}: {picks:?}");
            assert_eq!(picks.len(), width, "lost {lost}: {picks:?}");
        }
        // Skipped addresses are free ones only: claimed/held addresses do not count, and a
        // walk near the end of the subnet falls back to the first free address it passed.
        let c = Case {
            subnet: "10.254.0.0/29",
            raced: vec!["10.254.0.3"],
            ports: vec![port("x", "10.254.0.4")],
            ..Default::default()
        };
        let got = run(c);
        assert!(
            [create("10.254.0.5"), create("10.254.0.6")].contains(&got),
            "{got:?}"
        );
        let c = Case {
            subnet: "10.254.0.0/29",
            raced: vec!["10.254.0.3", "10.254.0.4", "10.254.0.5"],
            ..Default::default()
        };
        assert_eq!(run(c), create("10.254.0.6"));
    }

    #[test]
    fn the_walk_is_lazy_on_a_huge_subnet() {
        // A /8 has 16 M candidates; the first free one is found without collecting them.
        let c = Case {
            subnet: "10.0.0.0/8",
            ports: vec![port("x", "10.0.0.3")],
            ..Default::default()
        };
        assert_eq!(run(c), create("10.0.0.4"));
    }

    #[test]
    fn pinned_address_rules() {
        // "unless spec.transitIP pins one explicitly": free → create there.
        let c = Case {
            pinned: Some("10.254.0.77"),
            ..Default::default()
        };
        assert_eq!(run(c), create("10.254.0.77"));
        // Pinned and claimed by another link: refused naming it.
        let c = Case {
            pinned: Some("10.254.0.77"),
            peers: vec![peer("pinned", "10.254.0.77")],
            ..Default::default()
        };
        let (r, m) = refused(&run(c));
        assert_eq!(r, Reason::TransitIPUnavailable);
        assert!(m.contains("ClusterLink pinned"), "{m}");
        // Pinned and held by a port we may not adopt: refused naming the holder.
        let c = Case {
            pinned: Some("10.254.0.3"),
            ports: vec![port("stranger", "10.254.0.3")],
            ..Default::default()
        };
        let (r, m) = refused(&run(c));
        assert_eq!(r, Reason::TransitIPUnavailable);
        assert!(
            m.contains("stranger") && m.contains("no device owner"),
            "{m}"
        );
        // Pinned, lost to a concurrent create, holder invisible: refused.
        let c = Case {
            pinned: Some("10.254.0.3"),
            raced: vec!["10.254.0.3"],
            ..Default::default()
        };
        assert_eq!(refused(&run(c)).0, Reason::TransitIPUnavailable);
    }

    #[test]
    fn adoption_rule() {
        // The adoption rule (docs/crd-reference.md, "The adoption rule"), for every kind of
        // router interface.
        for owner in [
            bnerd_cloud::OWNER_ROUTER_INTERFACE,
            OWNER_ROUTER_INTERFACE_HA,
            OWNER_ROUTER_INTERFACE_DVR,
        ] {
            let hand = attached(port("hand", "10.254.0.3"), R, owner);
            let c = Case {
                ports: vec![hand.clone()],
                ..Default::default()
            };
            assert_eq!(run(c), LegPlan::Adopt(hand), "{owner}");
        }
        // Pinned to the hand-made leg's address (it "isn't already sitting at .3").
        let hand = leg("hand", "10.254.0.9", R);
        let c = Case {
            pinned: Some("10.254.0.9"),
            ports: vec![hand.clone()],
            ..Default::default()
        };
        assert_eq!(run(c), LegPlan::Adopt(hand));
        // Attached to another router, or tagged by any link, or an HA heartbeat port: never.
        for p in [
            leg("other-router", "10.254.0.3", "router-b"),
            tagged(leg("tagged", "10.254.0.3", R), &[TAG_MANAGED.into()]),
            attached(port("ha", "10.254.0.3"), R, "network:router_ha_interface"),
        ] {
            let c = Case {
                ports: vec![p.clone()],
                ..Default::default()
            };
            assert_eq!(run(c), create("10.254.0.4"), "{p:?}");
        }
    }

    #[test]
    fn our_port_is_kept_whatever_status_says() {
        // Ownership is proven from the cloud: a port with our UID tag is ours.
        let mine = ours(leg("mine", "10.254.0.7", R));
        let c = Case {
            ports: vec![port("x", "10.254.0.3"), mine.clone()],
            ..Default::default()
        };
        assert_eq!(run(c), LegPlan::Keep(mine));
        // Tags dropped at create: the description marker proves it.
        let mut marked = port("marked", "10.254.0.3");
        marked.description = format!("ClusterLink l leg, {}", tag_link_uid(UID));
        let c = Case {
            ports: vec![marked.clone()],
            ..Default::default()
        };
        assert_eq!(run(c), LegPlan::Keep(marked));
    }

    #[test]
    fn duplicates_keep_one_and_unwind_the_rest() {
        // "Two legs tagged with the same link UID … reconcile keeps one and deletes the extras":
        // the attached one wins, whatever the order or the status.
        let loose = ours(port("loose", "10.254.0.3"));
        let on_router = ours(leg("on-router", "10.254.0.4", R));
        for ports in [
            vec![loose.clone(), on_router.clone()],
            vec![on_router.clone(), loose.clone()],
        ] {
            let c = Case {
                ports,
                ..Default::default()
            };
            let why = UnwindWhy::Duplicate {
                kept: "on-router".into(),
            };
            assert_eq!(run(c), LegPlan::Unwind(vec![(loose.clone(), why)]));
        }
        // Neither attached: the lowest address stays.
        let a = ours(port("a", "10.254.0.3"));
        let b = ours(port("b", "10.254.0.4"));
        let c = Case {
            ports: vec![b.clone(), a],
            ..Default::default()
        };
        assert!(matches!(run(c), LegPlan::Unwind(v) if v.len() == 1 && v[0].0.id == "b"));
    }

    #[test]
    fn spec_changes_move_the_leg() {
        // "a new router moves the leg"
        let mine = ours(leg("mine", "10.254.0.3", "router-old"));
        let c = Case {
            ports: vec![mine.clone()],
            ..Default::default()
        };
        let why = UnwindWhy::RouterChanged {
            from: "router-old".into(),
        };
        assert_eq!(run(c), LegPlan::Unwind(vec![(mine, why)]));
        // "a new pinned transitIP rebuilds the leg"
        let mine = ours(leg("mine", "10.254.0.3", R));
        let c = Case {
            ports: vec![mine.clone()],
            pinned: Some("10.254.0.50"),
            ..Default::default()
        };
        let why = UnwindWhy::PinnedIpChanged {
            to: "10.254.0.50".parse().unwrap(),
        };
        assert_eq!(run(c), LegPlan::Unwind(vec![(mine, why)]));
        // Not attached anywhere: kept and attached where the spec says.
        let loose = ours(port("loose", "10.254.0.3"));
        let c = Case {
            ports: vec![loose.clone()],
            ..Default::default()
        };
        assert_eq!(run(c), LegPlan::Keep(loose));
    }

    fn in_project(mut p: Port, project: &str) -> Port {
        p.project_id = project.into();
        p
    }

    #[test]
    fn a_marker_in_another_project_is_never_the_leg() {
        // Any project the transit network is shared with can create a port on it and write
        // this link's UID into its tags or description: only the project the link builds in
        // makes a marked port its leg.
        let forged = in_project(ours(leg("forged", "10.254.0.3", R)), "customer-x");
        assert_eq!(leg_mark(&forged, UID, Some("operator")), LegMark::Forged);
        assert_eq!(leg_mark(&forged, UID, Some("customer-x")), LegMark::Own);
        assert_eq!(
            leg_mark(&forged, "uid-2", Some("customer-x")),
            LegMark::Other
        );
        // A cross-tenant link naming no project owns nothing.
        assert_eq!(leg_mark(&forged, UID, None), LegMark::Forged);
        let mut by_description = in_project(port("d", "10.254.0.9"), "customer-x");
        by_description.description = format!("mine, {}", tag_link_uid(UID));
        assert_eq!(
            leg_mark(&by_description, UID, Some("operator")),
            LegMark::Forged
        );
        // Not kept (and not unwound as a duplicate): the walk passes over its address.
        let c = Case {
            ports: vec![forged.clone()],
            ..Default::default()
        };
        assert_eq!(run(c), create("10.254.0.4"));
        // Beside our own leg it is no duplicate to remove.
        let mine = ours(leg("mine", "10.254.0.5", R));
        let c = Case {
            ports: vec![forged.clone(), mine.clone()],
            ..Default::default()
        };
        assert_eq!(run(c), LegPlan::Keep(mine));
        // Pinned at its address: refused, naming the holder's project.
        let c = Case {
            ports: vec![forged.clone()],
            pinned: Some("10.254.0.3"),
            ..Default::default()
        };
        let (reason, msg) = refused(&run(c));
        assert_eq!(reason, Reason::TransitIPUnavailable);
        assert!(msg.contains("project customer-x"), "{msg}");
    }

    #[test]
    fn an_untagged_port_of_another_project_is_never_adopted() {
        // Adoption takes over only a port of the link's own project (docs/crd-reference.md,
        // "The adoption rule"): another project's port there is not this link's.
        let foreign = in_project(leg("hand", "10.254.0.3", R), "customer-x");
        let c = Case {
            ports: vec![foreign.clone()],
            ..Default::default()
        };
        assert_eq!(run(c), create("10.254.0.4"));
        let c = Case {
            ports: vec![foreign.clone()],
            neutron_picks: true,
            project: Some("customer-a"),
            ..Default::default()
        };
        assert_eq!(run(c), LegPlan::CreateAny);
    }

    #[test]
    fn a_cross_tenant_leg_is_adopted_only_at_its_recorded_address() {
        // TransitIPMismatch exists so the gateway route never follows a port to a new
        // address: with status.transitIP bound, an untagged port elsewhere is not adopted.
        let elsewhere = leg("hand", "10.254.0.40", R);
        let c = Case {
            neutron_picks: true,
            ports: vec![elsewhere.clone()],
            recorded: Some("10.254.0.7"),
            ..Default::default()
        };
        assert_eq!(run(c), LegPlan::CreateAny);
        let there = leg("hand", "10.254.0.7", R);
        let c = Case {
            neutron_picks: true,
            ports: vec![elsewhere, there.clone()],
            recorded: Some("10.254.0.7"),
            ..Default::default()
        };
        assert_eq!(run(c), LegPlan::Adopt(there));
    }

    #[test]
    fn cross_tenant_legs_get_their_address_from_neutron() {
        // "a non-owner gets 403 for a fixed ip_address": Neutron picks it.
        let c = Case {
            neutron_picks: true,
            peers: vec![peer("other", "10.254.0.3")],
            ..Default::default()
        };
        assert_eq!(run(c), LegPlan::CreateAny);
        // A hand-made leg on the customer's router is still adopted.
        let hand = leg("hand", "10.254.0.40", R);
        let c = Case {
            neutron_picks: true,
            ports: vec![hand.clone()],
            ..Default::default()
        };
        assert_eq!(run(c), LegPlan::Adopt(hand.clone()));
        let c = Case {
            neutron_picks: true,
            pinned: Some("10.254.0.40"),
            ports: vec![hand.clone()],
            ..Default::default()
        };
        assert_eq!(run(c), LegPlan::Adopt(hand));
        // A pinned address with nothing to adopt cannot be created by the customer.
        let c = Case {
            neutron_picks: true,
            pinned: Some("10.254.0.41"),
            ..Default::default()
        };
        assert_eq!(refused(&run(c)).0, Reason::TransitIPUnavailable);
        // "this needs a human, not a retry": a held mismatch creates nothing.
        let c = Case {
            neutron_picks: true,
            mismatch_held: true,
            ..Default::default()
        };
        assert_eq!(refused(&run(c)).0, Reason::TransitIPMismatch);
    }

    #[test]
    fn transit_ip_mismatch() {
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        assert!(
            mismatch(None, ip("10.254.0.9")).is_none(),
            "a first leg has nothing to match"
        );
        assert!(mismatch(Some(ip("10.254.0.9")), ip("10.254.0.9")).is_none());
        let f = mismatch(Some(ip("10.254.0.3")), ip("10.254.0.9")).unwrap();
        assert_eq!((f.reason, f.retryable), (Reason::TransitIPMismatch, false));
        assert!(f.message.contains("10.254.0.3") && f.message.contains("10.254.0.9"));
        let e = CloudError::Timeout {
            method: "PUT".into(),
            path: "/routers/gw/remove_extraroutes".into(),
        };
        let f = mismatch_route_not_removed(f, ip("10.254.0.3"), &e);
        assert!(f.message.contains(
            "also failed to remove the gateway route via 10.254.0.3: operator credential: "
        ));
        assert_eq!(f.reason, Reason::TransitIPMismatch);
    }

    #[test]
    fn a_mismatch_takes_only_this_links_route() {
        let ip = |s: &str| s.parse::<Ipv4Addr>().unwrap();
        let r = |d: &str, n: &str| Route {
            destination: d.into(),
            nexthop: n.into(),
        };
        let routes = vec![
            r("10.239.0.0/16", "10.254.0.3"),
            // Another tenant's leg now holds the old address and routes its own CIDR there.
            r("10.238.0.0/16", "10.254.0.3"),
            r("10.239.0.0/16", "10.254.0.4"),
        ];
        let cidr: Ipv4Net = "10.239.0.0/16".parse().unwrap();
        assert_eq!(
            mismatch_routes(&routes, ip("10.254.0.3"), None, cidr),
            vec![r("10.239.0.0/16", "10.254.0.3")]
        );
        // What status recorded counts too (a CIDR the spec has since changed).
        let rec = RouteRecord {
            destination: "10.238.0.0/16".into(),
            nexthop: "10.254.0.3".into(),
        };
        let other: Ipv4Net = "10.237.0.0/16".parse().unwrap();
        assert_eq!(
            mismatch_routes(&routes, ip("10.254.0.3"), Some(&rec), other),
            vec![r("10.238.0.0/16", "10.254.0.3")]
        );
        // A record via another address names nothing via the old one.
        let rec = RouteRecord {
            destination: "10.238.0.0/16".into(),
            nexthop: "10.254.0.9".into(),
        };
        assert!(mismatch_routes(&routes, ip("10.254.0.3"), Some(&rec), other).is_empty());
    }

    #[test]
    fn router_resolution() {
        let r = |id: &str, name: &str| Router {
            id: id.into(),
            name: name.into(),
            project_id: "operator".into(),
            ..Default::default()
        };
        let foreign = |id: &str, name: &str| Router {
            project_id: "elsewhere".into(),
            ..r(id, name)
        };
        let resolve = |v: &str, seen| resolve_router(v, seen, Some("operator"), Looker::Operator);
        // A name is looked up on every reconcile, never fixed at creation.
        assert_eq!(
            resolve("svc", RouterSeen::ByName(vec![r("1", "svc")]))
                .unwrap()
                .id,
            "1"
        );
        let f = resolve("svc", RouterSeen::ByName(vec![])).unwrap_err();
        assert_eq!(f.reason, Reason::RouterResolveFailed);
        assert!(
            f.message.contains("no router with that name or ID")
                && f.message.contains("visible to the operator credential"),
            "{}",
            f.message
        );
        // Cross-tenant: the lookup used the customer's credential, and says so.
        let f = resolve_router(
            "svc",
            RouterSeen::ByName(vec![]),
            Some("c"),
            Looker::Customer,
        )
        .unwrap_err();
        assert!(
            f.message.contains("visible to the customer credential")
                && !f.message.contains("operator credential"),
            "{}",
            f.message
        );
        let f = resolve(
            "svc",
            RouterSeen::ByName(vec![r("1", "svc"), r("2", "svc")]),
        )
        .unwrap_err();
        assert!(
            f.message.contains("ambiguous") && f.message.contains("1, 2"),
            "{}",
            f.message
        );
        // A router of another project is refused, by ID and by name, naming both projects;
        // beside one of the link's own project it is no candidate at all.
        for seen in [
            RouterSeen::ById(foreign("9", "svc")),
            RouterSeen::Current(foreign("9", "svc")),
            RouterSeen::ByName(vec![foreign("9", "svc")]),
        ] {
            let f = resolve("svc", seen).unwrap_err();
            assert_eq!(f.reason, Reason::RouterResolveFailed);
            assert!(
                f.message.contains("router 9 of project elsewhere")
                    && f.message.contains("not of project operator"),
                "{}",
                f.message
            );
        }
        assert_eq!(
            resolve(
                "svc",
                RouterSeen::ByName(vec![foreign("9", "svc"), r("1", "svc")])
            )
            .unwrap()
            .id,
            "1"
        );
        // A cross-tenant link naming no project resolves nothing.
        assert!(
            resolve_router(
                "svc",
                RouterSeen::ById(r("1", "svc")),
                None,
                Looker::Customer
            )
            .is_err()
        );
        // The attach checks the port's project against the router's.
        let mut p = port("p", "10.254.0.3");
        assert!(attach_allowed(&p, &r("1", "svc")).is_ok());
        p.project_id = "elsewhere".into();
        let f = attach_allowed(&p, &r("1", "svc")).unwrap_err();
        assert_eq!(f.reason, Reason::EnsureRouterHasPortFailed);
        let e = CloudError::Timeout {
            method: "GET".into(),
            path: "/routers".into(),
        };
        let f = resolve("svc", RouterSeen::Failed("looking up".into(), e)).unwrap_err();
        assert!(f.retryable && f.reason == Reason::RouterResolveFailed);
        assert!(current_router_settles(&r("1", "svc"), "svc"));
        assert!(current_router_settles(&r("1", "renamed"), "1"));
        assert!(!current_router_settles(&r("1", "renamed"), "svc"));
        assert!(looks_like_id("8d3f0e5e-0e5e-4e5e-8e5e-0e5e0e5e0e5e"));
        assert!(!looks_like_id("shoot--services--svc01"));
    }

    #[test]
    fn settling_a_leg() {
        let want = vec![TAG_MANAGED.to_string(), tag_link_uid(UID)];
        let p = port("p", "10.254.0.3");
        assert_eq!(
            settle(&p, &want, R),
            Settle {
                tags: Some(want.clone()),
                attach: true
            }
        );
        let p = tagged(
            leg("p", "10.254.0.3", R),
            &["keep-me".into(), TAG_MANAGED.into()],
        );
        let s = settle(&p, &want, R);
        assert_eq!(
            s.tags,
            Some(vec![
                "keep-me".into(),
                TAG_MANAGED.into(),
                tag_link_uid(UID)
            ]),
            "foreign tags are kept"
        );
        assert!(!s.attach);
        let p = tagged(
            attached(port("p", "10.254.0.3"), R, OWNER_ROUTER_INTERFACE_HA),
            &want,
        );
        assert_eq!(
            settle(&p, &want, R),
            Settle {
                tags: None,
                attach: false
            }
        );
    }

    #[test]
    fn failed_calls_pick_the_step_reason() {
        let e = CloudError::Api {
            method: "PUT".into(),
            path: "/x".into(),
            status: 400,
            kind: "BadRequest".into(),
            message: "Router already has a port on subnet s.".into(),
        };
        let p = port("p", "10.254.0.3");
        let f = call_failed(LegCall::Attach(&p, R), &e);
        assert_eq!(f.reason, Reason::EnsureRouterHasPortFailed);
        assert!(f.message.contains("already has a port on subnet"));
        assert!(!f.retryable);
        let f = call_failed(LegCall::Create("10.254.0.3".parse().unwrap()), &e);
        assert_eq!(f.reason, Reason::EnsureLegPortFailed);
        let in_use = CloudError::Api {
            method: "PUT".into(),
            path: "/x".into(),
            status: 409,
            kind: "PortInUse".into(),
            message: String::new(),
        };
        let on = leg("p", "10.254.0.3", R);
        assert!(attach_already_done(&in_use, Some(&on), R));
        assert!(!attach_already_done(&in_use, Some(&p), R));
        assert!(!attach_already_done(&e, Some(&on), R));
    }
}
