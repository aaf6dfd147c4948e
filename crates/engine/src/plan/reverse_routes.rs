//! ReverseRoutesInstalled: a route on the link's service router back to every gateway with
//! reverse exposures — status.serviceCIDR via status.portFixedIP. Gateways live in any
//! namespace and are untrusted input: each target is screened, and one bad gateway never
//! blocks the others.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use bnerd_api::echo::quoted;
use bnerd_api::gateway::ReverseTarget;
use bnerd_api::{GatewayRef, Reason, ReverseRoute};
use bnerd_cloud::{CloudError, Route};
use ipnet::{IpNet, Ipv4Net};

use super::{StepFail, reverse_route_of};

/// A gateway whose reverse route cannot be installed, and why (for the condition message
/// and for a Warning Event on the gateway itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GatewayProblem {
    pub gateway: GatewayRef,
    pub message: String,
    /// Whether trying again soon may help (a cloud hiccup, not a bad object).
    pub retryable: bool,
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

/// Why this target cannot become a route, if it cannot.
fn target_fault(t: &ReverseTarget, transit: Ipv4Net, link_cidrs: &[Ipv4Net]) -> Option<String> {
    let cidr = match t.service_cidr.parse::<IpNet>() {
        Ok(IpNet::V4(n)) => n,
        Ok(IpNet::V6(_)) => {
            return Some(format!(
                "status.serviceCIDR {} is not IPv4; the transit fabric is IPv4",
                t.service_cidr
            ));
        }
        Err(_) => {
            return Some(format!(
                "status.serviceCIDR {} is not a CIDR",
                quoted(&t.service_cidr)
            ));
        }
    };
    if cidr.prefix_len() == 0 {
        return Some(format!(
            "status.serviceCIDR {cidr} would route everything on the service router through the gateway"
        ));
    }
    if cidr.trunc() != cidr {
        return Some(format!("status.serviceCIDR {cidr} has host bits set"));
    }
    if bnerd_api::cidr::overlaps(cidr, transit) {
        return Some(format!(
            "status.serviceCIDR {cidr} overlaps the transit subnet {transit}"
        ));
    }
    if let Some(c) = link_cidrs
        .iter()
        .find(|c| bnerd_api::cidr::overlaps(**c, cidr))
    {
        return Some(format!(
            "status.serviceCIDR {cidr} overlaps the service cluster CIDR {c} of a ClusterLink"
        ));
    }
    let hop: Ipv4Addr = match t.port_fixed_ip.parse() {
        Ok(h) => h,
        Err(_) => {
            return Some(format!(
                "status.portFixedIP {} is not an IPv4 address",
                quoted(&t.port_fixed_ip)
            ));
        }
    };
    if !transit.contains(&hop) || hop == transit.network() || hop == transit.broadcast() {
        return Some(format!(
            "status.portFixedIP {hop} is not a host address of the transit subnet {transit}"
        ));
    }
    None
}

/// Split the estate's targets into the ones to route and the ones refused, each refusal
/// naming its gateway. Two gateways that route one destination via different addresses are
/// both refused ("one nexthop per destination"); identical ones share one route.
pub(crate) fn screen(
    targets: &[ReverseTarget],
    transit: Ipv4Net,
    link_cidrs: &[Ipv4Net],
) -> (Vec<ReverseRoute>, Vec<GatewayProblem>) {
    let mut problems = vec![];
    let mut ok: Vec<&ReverseTarget> = vec![];
    for t in targets {
        match target_fault(t, transit, link_cidrs) {
            Some(message) => problems.push(GatewayProblem {
                gateway: t.gateway.clone(),
                message,
                retryable: false,
            }),
            None => ok.push(t),
        }
    }
    let mut hops: BTreeMap<&str, Vec<&ReverseTarget>> = BTreeMap::new();
    for t in &ok {
        hops.entry(t.service_cidr.as_str()).or_default().push(t);
    }
    let mut routes = vec![];
    for (cidr, ts) in hops {
        let first = ts[0].port_fixed_ip.as_str();
        if ts.iter().all(|t| t.port_fixed_ip == first) {
            routes.extend(ts.iter().map(|t| as_reverse_route(t)));
            continue;
        }
        let names: Vec<String> = ts
            .iter()
            .map(|t| format!("{} via {}", gateway_name(&t.gateway), t.port_fixed_ip))
            .collect();
        for t in ts {
            problems.push(GatewayProblem {
                gateway: t.gateway.clone(),
                message: format!(
                    "status.serviceCIDR {cidr} is claimed with different next hops ({}); one destination takes one next hop",
                    names.join(", ")
                ),
                retryable: false,
            });
        }
    }
    routes.sort();
    (routes, problems)
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
}

pub(crate) fn call_failed(call: ReverseCall, router_id: &str, e: &CloudError) -> StepFail {
    let what = match call {
        ReverseCall::Read => "reading router",
        ReverseCall::Remove => "removing stale reverse routes from router",
        ReverseCall::Add => "adding reverse routes to router",
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
        }
    }

    fn transit() -> Ipv4Net {
        "10.254.0.0/24".parse().unwrap()
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
        let (ok, problems) = screen(&all, transit(), &links);
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
    }

    #[test]
    fn one_next_hop_per_destination() {
        let a = target("a", "a", "100.64.1.0/24", "10.254.0.10");
        let b = target("b", "b", "100.64.1.0/24", "10.254.0.11");
        let (ok, problems) = screen(&[a.clone(), b], transit(), &[]);
        assert!(ok.is_empty());
        assert_eq!(problems.len(), 2);
        assert!(
            problems[0]
                .message
                .contains("IPsecGateway a/a via 10.254.0.10")
        );
        // The same destination via the same address: one route, both gateways recorded.
        let twin = target("c", "c", "100.64.1.0/24", "10.254.0.10");
        let (ok, problems) = screen(&[a, twin], transit(), &[]);
        assert_eq!((ok.len(), problems.len()), (2, 0));
    }

    fn rr(t: &ReverseTarget) -> ReverseRoute {
        as_reverse_route(t)
    }

    #[test]
    fn converging_the_route_set() {
        // "ensures a route on its own spec.serviceClusterRouter for each one's
        // status.serviceCIDR" and prunes what no gateway asks for any more.
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
        let p = GatewayProblem {
            gateway: gw("tenant-x", "all"),
            message: "status.serviceCIDR 0.0.0.0/0 would route everything".into(),
            retryable: false,
        };
        let f = verdict("svc", 1, std::slice::from_ref(&p)).unwrap_err();
        assert_eq!(f.reason, Reason::EnsureReverseRoutesFailed);
        assert!(f.message.contains("IPsecGateway tenant-x/all") && !f.retryable);
        assert!(f.message.starts_with("1 reverse route(s) on router svc"));
    }
}
