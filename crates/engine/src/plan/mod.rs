//! The rules of the reconcile as pure functions: each takes what a step observed (plus the
//! spec, the status and the other links) and returns what to do and which condition reason
//! follows. No IO, no client, no `&mut` status: every rule the docs state is table-tested here,
//! and every condition reason the engine sets is chosen in this module (or in `report`).

pub mod action;
pub mod capacity;
pub mod credentials;
pub mod customer_transit;
pub mod drift;
pub mod drift_check;
pub mod gateway_route;
pub mod leg;
pub mod resync;
pub mod reverse_routes;
pub(crate) mod route_quota;
pub mod share;
pub mod tenant;
pub mod unwind;
pub mod validated;

use std::net::Ipv4Addr;

use bnerd_api::echo::shell_word;
use bnerd_api::{Reason, ReverseRoute, RouteRecord};
use bnerd_cloud::{CloudError, Route};
use ipnet::Ipv4Net;

/// What another ClusterLink claims, as seen in the informer cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Peer {
    pub name: String,
    pub transit_ips: Vec<Ipv4Addr>,
    pub cidr: Option<Ipv4Net>,
    /// Its gateway route is installed (status proves it).
    pub route_installed: bool,
    /// RFC 3339 creation time, for a stable winner between two overlapping new links.
    pub created: String,
}

/// The one conversion between a route as status records it and as Neutron spells it.
pub(crate) fn route_of(r: &RouteRecord) -> Route {
    Route::new(&r.destination, &r.nexthop)
}

pub(crate) fn record_of(r: &Route) -> RouteRecord {
    RouteRecord {
        destination: r.destination.clone(),
        nexthop: r.nexthop.clone(),
    }
}

/// The command that removes one route from a router, for a person to paste (the openstack
/// CLI's current form; each value one shell word). Every message and report that advises
/// removing a route spells it with this.
pub fn remove_route_command(r: &Route, router: &str) -> String {
    format!(
        "openstack router remove route --route {} {}",
        shell_word(&format!(
            "destination={},gateway={}",
            r.destination, r.nexthop
        )),
        shell_word(router)
    )
}

/// The service-router route a reverse route stands for.
pub(crate) fn reverse_route_of(r: &ReverseRoute) -> Route {
    Route::new(&r.service_cidr, &r.next_hop)
}

/// A step that could not finish: the reason and message of its condition, and whether
/// retrying soon can help.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepFail {
    pub reason: Reason,
    pub message: String,
    pub retryable: bool,
}

impl StepFail {
    pub(crate) fn terminal(reason: Reason, message: impl Into<String>) -> Self {
        Self {
            reason,
            message: message.into(),
            retryable: false,
        }
    }

    /// A cloud call failed: the error's own classification says whether to back off.
    pub(crate) fn cloud(reason: Reason, context: &str, e: &CloudError) -> Self {
        Self {
            reason,
            message: format!("{context}: {e}{}", quota_hint(e)),
            retryable: e.is_retryable(),
        }
    }
}

/// What to tell a human when Neutron refuses for a limit: its own message names neither the
/// limit nor the fix ("Quota exceeded for resources: ['router_route']", "The number of routes
/// exceeds the maximum 30"), and the limits of docs/operations.md, "Neutron's quotas", are met
/// long before anything else on a large estate. Empty for any other error.
pub(crate) fn quota_hint(e: &CloudError) -> String {
    if e.is(bnerd_cloud::NeutronErrorKind::RoutesExhausted) {
        return "; the router holds as many routes as this Neutron allows one (max_routes in \
                the [DEFAULT] section of neutron.conf, 30 by default: a setting of the server, \
                not a project quota): an OpenStack admin raises it and restarts neutron-server"
            .to_string();
    }
    if !e.is(bnerd_cloud::NeutronErrorKind::OverQuota) {
        return String::new();
    }
    let resources = match e {
        CloudError::Api { message, .. } => quota_resources(message),
        _ => vec![],
    };
    let flags: Vec<&str> = resources.iter().filter_map(|r| quota_flag(r)).collect();
    if flags.is_empty() || resources.iter().any(|r| r == "router_route") {
        return "; the router holds as many routes as Neutron allows it (the router_route \
                quota, formerly max_routes: 30 per router by default): an OpenStack admin \
                raises [QUOTAS] quota_router_route in neutron.conf, or the project's \
                router_route quota"
            .to_string();
    }
    format!(
        "; the project's {} quota is used up (counted against the project that owns what \
         is created): an OpenStack admin raises it (openstack quota set {} <project>)",
        resources.join(", "),
        flags
            .iter()
            .map(|f| format!("{f} <n>"))
            .collect::<Vec<_>>()
            .join(" ")
    )
}

/// The resources Neutron names in an `OverQuota` message: `['network', 'port']`.
fn quota_resources(message: &str) -> Vec<String> {
    let Some(list) = message
        .split_once('[')
        .and_then(|(_, rest)| rest.split_once(']'))
        .map(|(list, _)| list)
    else {
        return vec![];
    };
    list.split(',')
        .map(|r| r.trim().trim_matches(|c| c == '\'' || c == '"').to_string())
        .filter(|r| !r.is_empty())
        .collect()
}

/// The `openstack quota set` option of a Neutron quota resource.
pub(crate) fn quota_flag(resource: &str) -> Option<&'static str> {
    Some(match resource {
        "network" => "--networks",
        "subnet" => "--subnets",
        "port" => "--ports",
        "router" => "--routers",
        "rbac_policy" => "--rbac-policies",
        "floatingip" => "--floating-ips",
        "security_group" => "--secgroups",
        "security_group_rule" => "--secgroup-rules",
        _ => return None,
    })
}

#[cfg(test)]
mod quota_hints {
    use super::*;

    fn api(status: u16, kind: &str, message: &str) -> CloudError {
        CloudError::Api {
            method: "PUT".into(),
            path: "/x".into(),
            status,
            kind: kind.into(),
            message: message.into(),
        }
    }

    #[test]
    fn each_limit_names_its_setting_and_how_to_raise_it() {
        // (status, type, Neutron's message, what the hint must name)
        let table: [(u16, &str, &str, &[&str]); 4] = [
            (
                409,
                "OverQuota",
                "Quota exceeded for resources: ['router_route'].",
                &["quota_router_route"],
            ),
            (
                400,
                "RoutesExhausted",
                "Unable to complete operation for r1. The number of routes exceeds the maximum 30.",
                &["max_routes", "not a project quota"],
            ),
            (
                409,
                "OverQuota",
                "Quota exceeded for resources: ['rbac_policy'].",
                &["rbac_policy quota", "--rbac-policies <n>"],
            ),
            (
                409,
                "OverQuota",
                "Quota exceeded for resources: ['network', 'subnet'].",
                &["--networks <n> --subnets <n>"],
            ),
        ];
        for (status, kind, message, names) in table {
            let hint = quota_hint(&api(status, kind, message));
            for name in names {
                assert!(hint.contains(name), "{kind} {message}: {name} in {hint}");
            }
        }
        assert_eq!(quota_hint(&api(409, "PortInUse", "m")), "");
        assert_eq!(quota_hint(&api(400, "BadRequest", "m")), "");
    }
}

#[cfg(test)]
pub(crate) mod fixtures {
    //! Builders shared by the plan tables.

    use bnerd_cloud::{FixedIp, OWNER_ROUTER_INTERFACE, Port, Route};

    pub const SUBNET_ID: &str = "subnet-transit";

    pub fn port(id: &str, ip: &str) -> Port {
        Port {
            id: id.into(),
            network_id: "transit".into(),
            project_id: "operator".into(),
            fixed_ips: vec![FixedIp {
                subnet_id: SUBNET_ID.into(),
                ip_address: ip.into(),
            }],
            ..Default::default()
        }
    }

    pub fn attached(mut p: Port, router: &str, owner: &str) -> Port {
        p.device_id = router.into();
        p.device_owner = owner.into();
        p
    }

    pub fn leg(id: &str, ip: &str, router: &str) -> Port {
        attached(port(id, ip), router, OWNER_ROUTER_INTERFACE)
    }

    pub fn tagged(mut p: Port, tags: &[String]) -> Port {
        p.tags = tags.to_vec();
        p
    }

    pub fn route(d: &str, n: &str) -> Route {
        Route::new(d, n)
    }
}
