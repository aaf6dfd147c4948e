//! Reverse routes under a router's route quota. Neutron refuses a whole batch of routes when
//! the router would hold more than its quota allows, and it answers the same way on every
//! retry: so the batch is split, the gateways are tried one at a time, oldest first (the order
//! that already decides overlaps: a newer gateway never takes an older one's place), and the
//! ones that do not fit are named, so every other gateway's route still lands.

use bnerd_api::ReverseRoute;
use bnerd_api::gateway::ReverseTarget;
use bnerd_cloud::{CloudError, NeutronErrorKind, Route};

use super::reverse_route_of;
use super::reverse_routes::{GatewayProblem, age_key};

/// Whether Neutron refused because the router holds as many routes as it may: 409 `OverQuota`
/// (the `router_route` quota, from 2026.2) or 400 `RoutesExhausted` (`max_routes`, up to
/// 2026.1; docs/design.md, "How Neutron releases differ").
pub(crate) fn is_full(e: &CloudError) -> bool {
    e.is(NeutronErrorKind::OverQuota) || e.is(NeutronErrorKind::RoutesExhausted)
}

/// The routes to add, the oldest gateway's first; a route whose gateway is not among the
/// targets (none should be) goes last.
pub(crate) fn oldest_first(add: &mut [ReverseRoute], targets: &[ReverseTarget]) {
    let rank = |d: &ReverseRoute| {
        targets
            .iter()
            .filter(|t| t.gateway == d.gateway_ref)
            .map(age_key)
            .min()
    };
    add.sort_by(|a, b| match (rank(a), rank(b)) {
        (Some(x), Some(y)) => x.cmp(&y),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.cmp(b),
    });
}

/// The reverse route that gives way when a `PerCustomer` link's own route (its edge route or
/// its return route) does not fit on a full router: of `ours`, the routes the operator put
/// there for gateways, the newest gateway's among those present in `routes`, newest as
/// [`oldest_first`] orders them (a route whose gateway is among no target, a gateway gone,
/// gives way before any). A link's own routes come before the gateways' routes back to it
/// (docs/crd-reference.md, "ReverseRoutesInstalled"): without them the link carries nothing,
/// and the gateway that gave way is then named as not fitting, as a newer gateway is when the
/// router fills up. `None` when no route of ours is on the router.
pub(crate) fn make_room(
    routes: &[Route],
    ours: &[ReverseRoute],
    targets: &[ReverseTarget],
) -> Option<ReverseRoute> {
    let mut present: Vec<ReverseRoute> = ours
        .iter()
        .filter(|d| routes.contains(&reverse_route_of(d)))
        .cloned()
        .collect();
    // Sorted first, so that two routes of one gateway rank the same whatever order `ours`
    // came in (`oldest_first` keeps the order of equals).
    present.sort();
    present.dedup();
    oldest_first(&mut present, targets);
    present.pop()
}

/// A gateway whose route did not fit on the router: retried with backoff (a route may go,
/// or the quota be raised), naming the quota and how to raise it.
pub(crate) fn did_not_fit(d: &ReverseRoute, router_id: &str, e: &CloudError) -> GatewayProblem {
    GatewayProblem {
        gateway: d.gateway_ref.clone(),
        message: format!(
            "{} via {} does not fit on router {router_id}, which holds as many routes as Neutron allows it (older gateways' routes come first): {e}{}",
            d.service_cidr,
            d.next_hop,
            super::quota_hint(e)
        ),
        note: format!(
            "the route to status.serviceCIDR {} does not fit on a service cluster's router (its route quota is full); it is retried",
            d.service_cidr
        ),
        retryable: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnerd_api::GatewayRef;

    fn gw(name: &str) -> GatewayRef {
        GatewayRef {
            kind: "IPsecGateway".into(),
            namespace: "vpn".into(),
            name: name.into(),
        }
    }

    fn target(name: &str, created: Option<&str>) -> ReverseTarget {
        ReverseTarget {
            gateway: gw(name),
            service_cidr: "100.64.1.0/24".into(),
            port_fixed_ip: "10.254.0.10".into(),
            uid: None,
            created: created.map(String::from),
        }
    }

    fn route(name: &str, cidr: &str) -> ReverseRoute {
        ReverseRoute {
            service_cidr: cidr.into(),
            next_hop: "10.254.0.10".into(),
            gateway_ref: gw(name),
        }
    }

    #[test]
    fn the_oldest_gateways_go_first() {
        let targets = [
            target("new", Some("2026-03-01T00:00:00Z")),
            target("old", Some("2025-01-01T00:00:00Z")),
            target("undated", None),
        ];
        let mut add = vec![
            route("undated", "100.64.1.0/24"),
            route("stray", "100.64.9.0/24"),
            route("new", "100.64.2.0/24"),
            route("old", "100.64.3.0/24"),
        ];
        oldest_first(&mut add, &targets);
        let order: Vec<&str> = add.iter().map(|d| d.gateway_ref.name.as_str()).collect();
        assert_eq!(order, ["old", "new", "undated", "stray"]);
    }

    /// `make_room` over a table: targets as (namespace/name, creationTimestamp), the routes
    /// of ours as (namespace/name, serviceCIDR), the CIDRs on the router (each via the one
    /// hop every route here uses), and the gateway whose route gives way.
    #[test]
    fn the_newest_gateways_route_on_the_router_gives_way() {
        const OLD: Option<&str> = Some("2025-01-01T00:00:00Z");
        const MID: Option<&str> = Some("2025-06-01T00:00:00Z");
        const NEW: Option<&str> = Some("2026-03-01T00:00:00Z");
        type Case<'a> = (
            &'a str,
            &'a [(&'a str, Option<&'a str>)],
            &'a [(&'a str, &'a str)],
            &'a [&'a str],
            Option<&'a str>,
        );
        let dated: &[(&str, Option<&str>)] =
            &[("vpn/old", OLD), ("vpn/new", NEW), ("vpn/mid", MID)];
        let three: &[(&str, &str)] = &[
            ("vpn/mid", "100.64.2.0/24"),
            ("vpn/new", "100.64.3.0/24"),
            ("vpn/old", "100.64.1.0/24"),
        ];
        let cases: &[Case] = &[
            (
                "the newest first",
                dated,
                three,
                &["100.64.1.0/24", "100.64.2.0/24", "100.64.3.0/24"],
                Some("vpn/new"),
            ),
            (
                "only a route on the router",
                dated,
                three,
                &["100.64.1.0/24", "100.64.2.0/24"],
                Some("vpn/mid"),
            ),
            (
                "a route of someone else's on the router is never ours",
                dated,
                &[("vpn/old", "100.64.1.0/24")],
                &["100.64.1.0/24", "100.64.3.0/24"],
                Some("vpn/old"),
            ),
            ("none on the router", dated, three, &["10.60.0.0/16"], None),
            ("none of ours", dated, &[], &["100.64.1.0/24"], None),
            (
                "no creationTimestamp counts as newest",
                &[("vpn/old", OLD), ("vpn/undated", None)],
                &[
                    ("vpn/undated", "100.64.1.0/24"),
                    ("vpn/old", "100.64.2.0/24"),
                ],
                &["100.64.1.0/24", "100.64.2.0/24"],
                Some("vpn/undated"),
            ),
            (
                "a gateway gone gives way before any",
                &[("vpn/new", NEW)],
                &[("vpn/gone", "100.64.1.0/24"), ("vpn/new", "100.64.2.0/24")],
                &["100.64.1.0/24", "100.64.2.0/24"],
                Some("vpn/gone"),
            ),
            (
                "a tie goes by name",
                &[("vpn/b", MID), ("vpn/a", MID)],
                &[("vpn/b", "100.64.1.0/24"), ("vpn/a", "100.64.2.0/24")],
                &["100.64.1.0/24", "100.64.2.0/24"],
                Some("vpn/b"),
            ),
            (
                "a tie goes by namespace before name",
                &[("x/a", MID), ("vpn/z", MID)],
                &[("vpn/z", "100.64.1.0/24"), ("x/a", "100.64.2.0/24")],
                &["100.64.1.0/24", "100.64.2.0/24"],
                Some("x/a"),
            ),
        ];
        let gateway = |at: &str| {
            let (namespace, name) = at.split_once('/').unwrap();
            GatewayRef {
                kind: "IPsecGateway".into(),
                namespace: namespace.into(),
                name: name.into(),
            }
        };
        for (what, targets, ours, on_router, want) in cases {
            let targets: Vec<ReverseTarget> = targets
                .iter()
                .map(|(at, created)| ReverseTarget {
                    gateway: gateway(at),
                    ..target("", *created)
                })
                .collect();
            let ours: Vec<ReverseRoute> = ours
                .iter()
                .map(|(at, cidr)| ReverseRoute {
                    gateway_ref: gateway(at),
                    ..route("", cidr)
                })
                .collect();
            let routes: Vec<Route> = on_router
                .iter()
                .map(|c| Route::new(*c, "10.254.0.10"))
                .collect();
            let got = make_room(&routes, &ours, &targets);
            let got = got.map(|d| format!("{}/{}", d.gateway_ref.namespace, d.gateway_ref.name));
            assert_eq!(got.as_deref(), *want, "{what}");
            if let Some(d) = make_room(&routes, &ours, &targets) {
                assert!(
                    routes.contains(&reverse_route_of(&d)),
                    "{what}: on the router"
                );
            }
        }
    }

    #[test]
    fn a_route_that_does_not_fit_names_the_quota_and_is_retried() {
        let e = CloudError::Api {
            method: "PUT".into(),
            path: "/routers/r1/add_extraroutes".into(),
            status: 409,
            kind: "OverQuota".into(),
            message: "Quota exceeded for resources: ['router_route'].".into(),
        };
        assert!(is_full(&e));
        let p = did_not_fit(&route("g", "100.64.2.0/24"), "r1", &e);
        assert!(p.retryable);
        assert!(p.message.contains("router r1") && p.message.contains("router_route"));
        assert!(
            !p.note.contains("r1"),
            "the gateway's Event names no router: {}",
            p.note
        );
        let other = CloudError::Api {
            method: "PUT".into(),
            path: "/routers/r1/add_extraroutes".into(),
            status: 400,
            kind: "InvalidRoutes".into(),
            message: "Invalid format for routes".into(),
        };
        assert!(!is_full(&other));
    }
}
