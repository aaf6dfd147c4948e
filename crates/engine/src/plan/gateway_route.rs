//! RouteInstalled: the gateway router's route to spec.serviceClusterCIDR via the leg.

use std::net::Ipv4Addr;

use bnerd_api::cidr::overlaps;
use bnerd_api::{Reason, RouteRecord};
use bnerd_cloud::{CloudError, Route};
use ipnet::Ipv4Net;

use super::{Peer, StepFail, route_of};

/// Everything the route decision reads.
#[derive(Debug)]
pub(crate) struct RouteView<'a> {
    pub name: &'a str,
    /// RFC 3339 creation time (tie-break between overlapping new links).
    pub created: &'a str,
    pub gateway_router_id: &'a str,
    /// The gateway router's routes as just read.
    pub routes: &'a [Route],
    pub cidr: Ipv4Net,
    /// The route's next hop: the address of this link's leg (the port carrying our UID tag),
    /// or a `PerCustomer` link's edge router leg.
    pub leg_ip: Ipv4Addr,
    /// The next hop is shared by every link of one customer project (the edge router's leg):
    /// a route via it is ours only for our CIDR.
    pub shared_next_hop: bool,
    /// status.gateway_route: a hint only (a lost status patch must not leak a route).
    pub recorded: Option<&'a RouteRecord>,
    pub peers: &'a [Peer],
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RoutePlan {
    /// Routes of ours to remove first (an old CIDR, an old address, a lost overlap).
    pub remove: Vec<Route>,
    pub add: Option<Route>,
    /// The route installed once the writes are done, or why there is none.
    pub verdict: Result<Route, StepFail>,
}

/// Whether a route on the gateway router is provably this link's: its nexthop is the address
/// of the port carrying our UID tag, or status recorded it (docs/design.md, "The ownership
/// rule": status records it too, but status can be lost).
fn is_ours(r: &Route, v: &RouteView<'_>) -> bool {
    // Via a shared next hop, another link of the project may route the same CIDR there
    // (it then loses the overlap, but its route looks like ours): only status proves ours.
    let via_ours = !v.shared_next_hop && r.nexthop == v.leg_ip.to_string();
    via_ours || v.recorded.is_some_and(|rec| route_of(rec) == *r)
}

/// The overlapping link that outranks this one for the same addresses: an installed route
/// wins, then the older link, then the name (docs/design.md, "A route the link does not own").
fn overlap_winner<'p>(v: &RouteView<'p>, we_installed: bool) -> Option<&'p Peer> {
    let me = (!we_installed, v.created, v.name);
    v.peers.iter().find(|p| {
        p.cidr.is_some_and(|c| overlaps(c, v.cidr))
            && (!p.route_installed, p.created.as_str(), p.name.as_str()) < me
    })
}

pub(crate) fn plan(v: &RouteView<'_>) -> RoutePlan {
    let want = Route::new(v.cidr.to_string(), v.leg_ip.to_string());
    let ours: Vec<Route> = v.routes.iter().filter(|r| is_ours(r, v)).cloned().collect();
    // A route equal to ours via a shared next hop may be another link's: only status says
    // this link installed it.
    let installed = (!v.shared_next_hop && v.routes.contains(&want)) || v.recorded.is_some();

    // "The same for overlapping serviceClusterCIDR of two links": the loser gives up its own
    // copy of the route too.
    if let Some(peer) = overlap_winner(v, installed) {
        return RoutePlan {
            remove: ours,
            add: None,
            verdict: Err(StepFail::terminal(
                Reason::CIDROverlap,
                format!(
                    "spec.serviceClusterCIDR {} overlaps the CIDR of ClusterLink {}, which holds the route",
                    v.cidr, peer.name
                ),
            )),
        };
    }
    // "a new CIDR moves the route (old one removed first …)"; so does a new leg address.
    let remove: Vec<Route> = ours.into_iter().filter(|r| *r != want).collect();
    // A conflict is judged on the table as it stands after our own removals: a stale route of
    // ours for the same destination is not someone else's.
    let foreign = v
        .routes
        .iter()
        .filter(|r| !remove.contains(r))
        .find(|r| r.destination == want.destination && r.nexthop != want.nexthop);
    if let Some(f) = foreign {
        // "A route … for the same destination with a nexthop we do not own is never replaced
        // and never joined (that would silently split traffic)".
        return RoutePlan {
            remove,
            add: None,
            verdict: Err(StepFail::terminal(
                Reason::RouteConflict,
                format!(
                    "gateway router {} already routes {} via {}, which this link does not own; remove that route or change spec.serviceClusterCIDR",
                    v.gateway_router_id, f.destination, f.nexthop
                ),
            )),
        };
    }
    RoutePlan {
        remove,
        add: (!v.routes.contains(&want)).then(|| want.clone()),
        verdict: Ok(want),
    }
}

/// When LegAttached failed: the routes of ours whose next hop no port of ours holds any more
/// (the leg vanished, and its address may already be someone else's). Removing a route only
/// takes reach away; a route left in place would carry this link's traffic to whichever port
/// holds that address now.
pub(crate) fn orphaned(
    routes: &[Route],
    recorded: Option<&RouteRecord>,
    own_ips: &[String],
) -> Vec<Route> {
    routes
        .iter()
        .filter(|r| recorded.is_some_and(|rec| route_of(rec) == **r))
        .filter(|r| !own_ips.contains(&r.nexthop))
        .cloned()
        .collect()
}

/// RouteInstalled=True's message.
pub(crate) fn installed_message(r: &Route, gateway_router_id: &str) -> String {
    format!(
        "{} via {} on gateway router {gateway_router_id}",
        r.destination, r.nexthop
    )
}

/// The cloud call of the route step that failed.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RouteCall {
    Read,
    Remove,
    Add,
}

pub(crate) fn call_failed(call: RouteCall, gateway_router_id: &str, e: &CloudError) -> StepFail {
    let what = match call {
        RouteCall::Read => "reading",
        RouteCall::Remove => "removing old route from",
        RouteCall::Add => "adding route to",
    };
    StepFail::cloud(
        Reason::EnsureRouteFailed,
        &format!("{what} gateway router {gateway_router_id}"),
        e,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fixtures::route;

    struct Case {
        routes: Vec<Route>,
        cidr: &'static str,
        leg_ip: &'static str,
        recorded: Option<Route>,
        peers: Vec<Peer>,
        shared_next_hop: bool,
    }

    impl Default for Case {
        fn default() -> Self {
            Case {
                routes: vec![],
                cidr: "10.251.0.0/16",
                leg_ip: "10.254.0.3",
                recorded: None,
                peers: vec![],
                shared_next_hop: false,
            }
        }
    }

    fn run(c: &Case) -> RoutePlan {
        let rec = c.recorded.as_ref().map(|r| RouteRecord {
            destination: r.destination.clone(),
            nexthop: r.nexthop.clone(),
        });
        plan(&RouteView {
            name: "me",
            created: "2026-01-02T00:00:00Z",
            gateway_router_id: "gw",
            routes: &c.routes,
            cidr: c.cidr.parse().unwrap(),
            leg_ip: c.leg_ip.parse().unwrap(),
            recorded: rec.as_ref(),
            peers: &c.peers,
            shared_next_hop: c.shared_next_hop,
        })
    }

    fn want() -> Route {
        route("10.251.0.0/16", "10.254.0.3")
    }

    #[test]
    fn adds_the_route_once() {
        // The gateway router gets spec.serviceClusterCIDR via the leg's transit IP, once.
        let p = run(&Case::default());
        assert_eq!((p.remove.len(), p.add.clone()), (0, Some(want())));
        assert_eq!(p.verdict, Ok(want()));
        // Already there (installed, or hand-made and adopted with the leg): no write.
        let p = run(&Case {
            routes: vec![want()],
            ..Default::default()
        });
        assert_eq!((p.remove.len(), p.add), (0, None));
    }

    #[test]
    fn a_route_via_our_leg_is_ours_even_when_status_lost_it() {
        // "A route whose nexthop is the address of a port carrying this link's UID tag is
        // provably ours": the CIDR changed and status.gatewayRoute was lost.
        let old = route("10.250.0.0/16", "10.254.0.3");
        let p = run(&Case {
            routes: vec![old.clone(), route("10.99.0.0/16", "10.254.0.9")],
            ..Default::default()
        });
        assert_eq!(p.remove, vec![old]);
        assert_eq!(p.add, Some(want()));
    }

    #[test]
    fn moving_the_leg_address_moves_the_route_without_a_conflict() {
        // Finding 1: the stale route for the same destination via our old address is removed,
        // and is not read as a foreign route (pinned IP changed, leg vanished, address
        // squatted, router changed all end here with a new leg address).
        let old = route("10.251.0.0/16", "10.254.0.3");
        let p = run(&Case {
            routes: vec![old.clone()],
            leg_ip: "10.254.0.4",
            recorded: Some(old.clone()),
            ..Default::default()
        });
        assert_eq!(p.remove, vec![old]);
        assert_eq!(p.add, Some(route("10.251.0.0/16", "10.254.0.4")));
        assert!(p.verdict.is_ok(), "{:?}", p.verdict);
    }

    #[test]
    fn via_a_shared_edge_router_only_our_cidr_is_ours() {
        // Two PerCustomer links of one project route via the same edge router leg: the other
        // link's route is never taken for a stale one of ours.
        let other = route("10.252.0.0/16", "10.254.0.3");
        let p = run(&Case {
            routes: vec![other.clone()],
            shared_next_hop: true,
            ..Default::default()
        });
        assert_eq!(p.remove, vec![]);
        assert_eq!(p.add, Some(want()));
        // Without the flag the same table would lose the other link's route.
        let p = run(&Case {
            routes: vec![other.clone()],
            ..Default::default()
        });
        assert_eq!(p.remove, vec![other.clone()]);
        // Another link of the project with the same CIDR holds the route (status says so):
        // this one loses the overlap and removes nothing.
        let theirs = route("10.251.0.0/16", "10.254.0.3");
        let p = run(&Case {
            routes: vec![theirs],
            shared_next_hop: true,
            peers: vec![Peer {
                name: "older".into(),
                transit_ips: vec![],
                cidr: Some("10.251.0.0/16".parse().unwrap()),
                route_installed: true,
                created: "2026-01-01T00:00:00Z".into(),
            }],
            ..Default::default()
        });
        assert_eq!(p.remove, vec![]);
        assert_eq!(p.verdict.unwrap_err().reason, Reason::CIDROverlap);
        // A CIDR change still moves our own route: status recorded it.
        let old = route("10.250.0.0/16", "10.254.0.3");
        let p = run(&Case {
            routes: vec![other, old.clone()],
            recorded: Some(old.clone()),
            shared_next_hop: true,
            ..Default::default()
        });
        assert_eq!(p.remove, vec![old]);
        assert_eq!(p.add, Some(want()));
    }

    #[test]
    fn a_foreign_route_for_our_destination_is_never_replaced() {
        let foreign = route("10.251.0.0/16", "10.254.0.250");
        let p = run(&Case {
            routes: vec![foreign.clone()],
            ..Default::default()
        });
        assert_eq!((p.remove.len(), p.add), (0, None));
        let f = p.verdict.unwrap_err();
        assert_eq!(f.reason, Reason::RouteConflict);
        assert!(f.message.contains("10.254.0.250"), "{}", f.message);
        // Ours via an old address goes even so; the foreign one stays.
        let old = route("10.251.0.0/16", "10.254.0.9");
        let p = run(&Case {
            routes: vec![foreign, old.clone()],
            recorded: Some(old.clone()),
            ..Default::default()
        });
        assert_eq!(p.remove, vec![old]);
        assert_eq!(p.verdict.unwrap_err().reason, Reason::RouteConflict);
    }

    #[test]
    fn overlapping_links_one_wins() {
        let peer = |installed: bool, created: &str| Peer {
            name: "first".into(),
            transit_ips: vec![],
            cidr: Some("10.251.128.0/17".parse().unwrap()),
            route_installed: installed,
            created: created.into(),
        };
        // Both hold a route, the peer is older: we lose, and give up our own copy.
        let p = run(&Case {
            routes: vec![want()],
            recorded: Some(want()),
            peers: vec![peer(true, "2026-01-01T00:00:00Z")],
            ..Default::default()
        });
        assert_eq!(p.remove, vec![want()]);
        let f = p.verdict.unwrap_err();
        assert_eq!(f.reason, Reason::CIDROverlap);
        assert!(f.message.contains("ClusterLink first"));
        // The peer holds the route and we do not: we lose even though we are older.
        let p = run(&Case {
            peers: vec![peer(true, "2026-01-03T00:00:00Z")],
            ..Default::default()
        });
        assert_eq!(p.verdict.unwrap_err().reason, Reason::CIDROverlap);
        // Neither installed: the older link wins.
        let p = run(&Case {
            peers: vec![peer(false, "2026-01-01T00:00:00Z")],
            ..Default::default()
        });
        assert_eq!(p.verdict.unwrap_err().reason, Reason::CIDROverlap);
        let p = run(&Case {
            peers: vec![peer(false, "2026-01-09T00:00:00Z")],
            ..Default::default()
        });
        assert!(p.verdict.is_ok());
        // We hold it: we win even against an older link.
        let p = run(&Case {
            routes: vec![want()],
            peers: vec![peer(false, "2026-01-01T00:00:00Z")],
            ..Default::default()
        });
        assert!(p.verdict.is_ok());
    }

    #[test]
    fn a_route_via_an_address_we_no_longer_hold_is_withdrawn() {
        // "no route left pointing at an address we do not hold": the leg vanished and the
        // leg step could not rebuild it (its pinned address is taken, say).
        let rec = RouteRecord {
            destination: "10.251.0.0/16".into(),
            nexthop: "10.254.0.3".into(),
        };
        let routes = vec![want(), route("10.99.0.0/16", "10.254.0.3")];
        assert_eq!(orphaned(&routes, Some(&rec), &[]), vec![want()]);
        // Still held by our port: kept (the leg step failed for another reason).
        assert!(orphaned(&routes, Some(&rec), &["10.254.0.3".into()]).is_empty());
        // Nothing recorded: nothing to withdraw (a route via an address we do not hold is
        // not provably ours).
        assert!(orphaned(&routes, None, &[]).is_empty());
    }

    #[test]
    fn failed_calls_are_ensure_route_failed() {
        let e = CloudError::Api {
            method: "PUT".into(),
            path: "/x".into(),
            status: 409,
            kind: "OverQuota".into(),
            message: "Quota exceeded for resources: ['router_route'].".into(),
        };
        let f = call_failed(RouteCall::Add, "gw", &e);
        assert_eq!(f.reason, Reason::EnsureRouteFailed);
        assert!(f.retryable && f.message.contains("adding route to gateway router gw"));
        // Neutron's own text names neither the limit nor the fix; the condition does.
        assert!(
            f.message.contains("router_route quota")
                && f.message.contains("30 per router")
                && f.message.contains("quota_router_route"),
            "{}",
            f.message
        );
    }
}
