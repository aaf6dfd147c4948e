//! Reverse routes under a router's route quota. Neutron refuses a whole batch of routes when
//! the router would hold more than its quota allows, and it answers the same way on every
//! retry: so the batch is split, the gateways are tried one at a time, oldest first (the order
//! that already decides overlaps: a newer gateway never takes an older one's place), and the
//! ones that do not fit are named, so every other gateway's route still lands.

use bnerd_api::ReverseRoute;
use bnerd_api::gateway::ReverseTarget;
use bnerd_cloud::{CloudError, NeutronErrorKind};

use super::reverse_routes::{GatewayProblem, age_key};

/// Whether Neutron refused because the router holds as many routes as it may.
pub(crate) fn is_full(e: &CloudError) -> bool {
    e.is(NeutronErrorKind::OverQuota)
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
