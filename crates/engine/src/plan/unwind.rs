//! Deleting a ClusterLink takes down all it owns, last-built first: first the gateway-router
//! route, next the leg's attachment to its router, last the leg port, and with them each
//! reverse route the link owns (docs/crd-reference.md, "Deletion"; docs/design.md, "The unwind
//! order"). Ownership comes from the cloud (ports carrying our UID, routes via their
//! addresses), with status as a hint; nothing else is ever touched.
//!
//! Past 500 lines with its tables: every rule of a delete (what is ours, the cross-tenant
//! customer side, refusals only a human can call final, the abandon hatch) is decided here
//! and table-tested next to it, so the unwind's order and its exceptions read in one place.

use bnerd_api::{Reason, ReverseRoute, RouteRecord};
use bnerd_cloud::{CloudError, Port, Route};
use ipnet::Ipv4Net;

use super::action::Action;
use super::leg::is_own;
use super::{StepFail, reverse_route_of, route_of};

/// Everything the delete decision reads.
#[derive(Debug)]
pub(crate) struct UnwindView<'a> {
    pub uid: &'a str,
    /// The project the link's leg must belong to (`leg::leg_project`).
    pub project: Option<&'a str>,
    /// Every port on the transit network.
    pub ports: &'a [Port],
    /// The gateway router's routes (empty when the router is gone).
    pub gateway_routes: &'a [Route],
    /// status.gatewayRoute and status.transitIP: hints.
    pub recorded: Option<&'a RouteRecord>,
    pub recorded_ip: Option<&'a str>,
    pub spec_cidr: &'a str,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UnwindPlan {
    /// Gateway-router routes of ours, removed first: that cuts the data path.
    pub gateway_remove: Vec<Route>,
    /// Every port carrying our UID (duplicates included), to detach and delete.
    pub legs: Vec<Port>,
    /// What a finished unwind took down beyond the link's own legs and routes (a `PerCustomer`
    /// project's customer transit, with its last link): worth an Event of its own, which the
    /// controller publishes before `Unwound`.
    pub actions: Vec<Action>,
}

impl UnwindPlan {
    /// Nothing of the link's is left: the unwind is done.
    pub fn is_empty(&self) -> bool {
        self.gateway_remove.is_empty() && self.legs.is_empty()
    }
}

/// Ready=False/Deleting when every look still finds something of the link's: another writer
/// keeps adding it (retried: it stops once that writer sees the delete).
pub(crate) fn unsettled(rounds: usize) -> StepFail {
    StepFail {
        reason: Reason::Deleting,
        message: format!(
            "unwinding: a leg or route of this link was still there after {rounds} rounds of removal; another writer keeps adding them"
        ),
        retryable: true,
    }
}

pub(crate) fn plan(v: &UnwindView<'_>) -> UnwindPlan {
    let legs: Vec<Port> = v
        .ports
        .iter()
        .filter(|p| is_own(p, v.uid, v.project))
        .cloned()
        .collect();
    let hint = v.recorded_ip.map(|ip| Route::new(v.spec_cidr, ip));
    let gateway_remove = v
        .gateway_routes
        .iter()
        .filter(|r| {
            legs.iter().any(|p| p.has_ip(&r.nexthop))
                || v.recorded.is_some_and(|rec| route_of(rec) == **r)
                || hint.as_ref() == Some(*r)
        })
        .cloned()
        .collect();
    UnwindPlan {
        gateway_remove,
        legs,
        actions: vec![],
    }
}

/// What an abandoned customer side leaves behind, for the Warning Event and the log line: the
/// leg port's ID and its transit IP when they are known, the router, and each reverse route
/// given up (docs/crd-reference.md, "Events", `CustomerResourcesAbandoned`).
pub fn abandoned(status: &bnerd_api::ClusterLinkStatus) -> String {
    let known = |v: &Option<String>| v.clone().unwrap_or_else(|| "unknown".into());
    let reverse: Vec<String> = status
        .reverse_routes
        .iter()
        .map(|r| {
            format!(
                "{} via {} ({} {}/{})",
                r.service_cidr,
                r.next_hop,
                r.gateway_ref.kind,
                r.gateway_ref.namespace,
                r.gateway_ref.name
            )
        })
        .collect();
    // A PerCustomer leg stands on its project's customer transit, which stays as long as it
    // does, with the router's way back to the edge router.
    let transit = status
        .customer_transit
        .as_ref()
        .map(|t| {
            format!(
                "; the leg stands on customer transit network {} (edge router {}), which stays until the leg is removed, as does the route of router {} to the transit network via the edge router",
                known(&t.network_id),
                known(&t.edge_router_id),
                known(&status.service_router_id)
            )
        })
        .unwrap_or_default();
    format!(
        "customer-side resources abandoned (ipsec.bnerd.net/abandon-customer-resources=true), remove them by hand: leg port {} at {} on router {}; reverse routes: {}{transit}",
        known(&status.leg_port_id),
        known(&status.transit_ip),
        known(&status.service_router_id),
        if reverse.is_empty() {
            "none".to_string()
        } else {
            reverse.join(", ")
        }
    )
}

/// What a deleting cross-tenant link does about its customer side, decided after the gateway
/// route is gone and before any call with the customer's credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CustomerUnwind {
    /// No leg in status and none on the transit network: nothing was built on the customer
    /// side (a link never attested, refused at CredentialsResolved, or whose Secret never
    /// existed). Released at once, without a call on the customer's credential: reverse
    /// routes need a leg on the router, so none can be left either.
    NothingBuilt,
    /// A leg exists but the link is not attested: no call may be made with the customer's
    /// credential (docs/crd-reference.md, TenantIsolationAttested: no OpenStack call at all); held (CredentialsUnavailable).
    NotAttested(StepFail),
    /// Resolve the credential and unwind on it.
    Resolve,
}

/// `attested`: the attestation check's result; `leg_in_status`: status.legPortID is set;
/// `legs_in_cloud`: the link's legs the gateway step found on the transit network (by the
/// one ownership rule of `plan::leg`), None when that look failed.
pub fn customer_unwind(
    attested: Result<(), StepFail>,
    leg_in_status: bool,
    legs_in_cloud: Option<usize>,
) -> CustomerUnwind {
    if !leg_in_status && legs_in_cloud == Some(0) {
        return CustomerUnwind::NothingBuilt;
    }
    match attested {
        Ok(()) => CustomerUnwind::Resolve,
        Err(f) => CustomerUnwind::NotAttested(f),
    }
}

/// A customer-side call the cloud refused in a way retrying will not clear on its own: 403
/// (the credential may no longer do it), 404 (gone from its view), 409 (a conflict, such as
/// the router refusing the detach for routes the link does not own). Only a human can tell
/// whether it is for good; the abandon annotation is how they say so.
pub(crate) fn refused_for_good(e: &UnwindError) -> bool {
    match e {
        UnwindError::Blocked { .. } => true,
        UnwindError::Cloud { error, .. } => matches!(error.status(), Some(403 | 404 | 409)),
    }
}

/// Ready=False/Deleting for a customer side that refuses its unwind, with the way out.
pub(crate) fn customer_refused(secret: &str, e: &UnwindError) -> StepFail {
    StepFail {
        reason: Reason::Deleting,
        message: format!(
            "unwinding: customer credential (secret {secret}): {e}; the gateway route is removed and the ClusterLink stays until the customer side can be cleaned up, or a human sets ipsec.bnerd.net/abandon-customer-resources=true"
        ),
        retryable: true,
    }
}

/// Whether a held deletion is released, leaving the customer side behind: only when a human
/// set the annotation to exactly "true" (docs/operations.md, "Delete a link": never set automatically) and the gateway
/// route is gone (the data path is cut first, always).
pub fn may_abandon(annotation: Option<&str>, gateway_gone: bool) -> bool {
    annotation == Some("true") && gateway_gone
}

/// Gateway-router routes via one port of ours (a duplicate, or a leg the spec moved).
pub(crate) fn gateway_routes_via(routes: &[Route], port: &Port) -> Vec<Route> {
    routes
        .iter()
        .filter(|r| port.has_ip(&r.nexthop))
        .cloned()
        .collect()
}

/// Reverse routes to take off a leg's router before detaching it: the ones status recorded
/// and the ones a gateway that passes the screen asks for (status may have been lost) —
/// never any other route. A refused gateway's status may name a route someone else put on
/// the router; that route is not the link's.
///
/// `edge`: a `PerCustomer` leg's customer transit gateway (the edge router's address there).
/// Every route of the router via it is the customer transit's (the way back to the main
/// transit, and the reverse routes), and Neutron refuses the detach while one is left.
pub(crate) fn reverse_to_remove(
    router_routes: &[Route],
    recorded: &[ReverseRoute],
    screened: &[ReverseRoute],
    edge: Option<&str>,
) -> Vec<Route> {
    let ours: Vec<Route> = recorded
        .iter()
        .chain(screened)
        .map(reverse_route_of)
        .collect();
    router_routes
        .iter()
        .filter(|r| ours.contains(r) || edge == Some(r.nexthop.as_str()))
        .cloned()
        .collect()
}

/// Why a leg could not be unwound.
#[derive(Debug, Clone, PartialEq)]
pub enum UnwindError {
    Cloud {
        context: String,
        error: CloudError,
    },
    /// The router refuses the detach for routes this link does not own.
    Blocked {
        message: String,
    },
}

impl std::fmt::Display for UnwindError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnwindError::Cloud { context, error } => write!(f, "{context}: {error}"),
            UnwindError::Blocked { message } => f.write_str(message),
        }
    }
}

impl UnwindError {
    fn retryable(&self) -> bool {
        match self {
            UnwindError::Cloud { error, .. } => error.is_retryable(),
            // A human has to remove the route; looking again soon shows when they did.
            UnwindError::Blocked { .. } => true,
        }
    }
}

/// The message for a detach the router refused (RouterInterfaceInUseByRoute): the routes via
/// the transit network still on the router, each with the command that removes it.
pub(crate) fn detach_blocked(
    port: &Port,
    router_id: &str,
    router_routes: &[Route],
    transit: Ipv4Net,
) -> UnwindError {
    let blocking: Vec<String> = router_routes
        .iter()
        .filter(|r| {
            r.nexthop
                .parse()
                .is_ok_and(|h: std::net::Ipv4Addr| transit.contains(&h))
        })
        .map(|r| {
            format!(
                "{} via {} ({})",
                r.destination,
                r.nexthop,
                super::remove_route_command(r, router_id)
            )
        })
        .collect();
    UnwindError::Blocked {
        message: format!(
            "router {router_id} refuses to detach leg port {}: routes via the transit network that this link does not own still need it: {}",
            port.id,
            if blocking.is_empty() {
                "(none visible to the operator)".to_string()
            } else {
                blocking.join("; ")
            }
        ),
    }
}

/// Ready=False/Deleting while the unwind cannot finish.
pub(crate) fn deleting(e: &UnwindError) -> StepFail {
    StepFail {
        reason: Reason::Deleting,
        message: format!("unwinding: {e}"),
        retryable: e.retryable(),
    }
}

/// A step of a deleting link's unwind that failed for its own reason (the customer transit's
/// look or take-down): Ready=False/Deleting, as retryable as the failure.
pub(crate) fn unwinding(f: StepFail) -> StepFail {
    StepFail {
        reason: Reason::Deleting,
        message: format!("unwinding: {}", f.message),
        ..f
    }
}

/// A leg the reconcile had to remove (duplicate, moved) could not be: LegAttached says so.
pub(crate) fn leg_unwind_failed(e: &UnwindError) -> StepFail {
    StepFail {
        reason: Reason::EnsureLegPortFailed,
        message: format!("removing a leg port of this link: {e}"),
        retryable: e.retryable(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fixtures::{leg, port, route, tagged};
    use bnerd_api::GatewayRef;
    use bnerd_api::names::tag_link_uid;

    #[test]
    fn a_failed_step_of_the_unwind_is_deleting_and_keeps_its_retry() {
        for retryable in [true, false] {
            let f = unwinding(StepFail {
                reason: Reason::EnsureNetworkSharedFailed,
                message: "listing networks: 503".into(),
                retryable,
            });
            assert_eq!(f.reason, Reason::Deleting);
            assert_eq!(f.message, "unwinding: listing networks: 503");
            assert_eq!(f.retryable, retryable);
        }
    }

    #[test]
    fn the_unwind_ends_only_when_a_look_finds_nothing_of_the_link() {
        let uid = "u1";
        let view = |ports: &[Port], routes: &[Route]| {
            plan(&UnwindView {
                uid,
                project: Some("operator"),
                ports,
                gateway_routes: routes,
                recorded: None,
                recorded_ip: Some("10.254.0.3"),
                spec_cidr: "10.251.0.0/16",
            })
            .is_empty()
        };
        let ours = tagged(leg("a", "10.254.0.3", "r1"), &[tag_link_uid(uid)]);
        let theirs = tagged(leg("c", "10.254.0.5", "r2"), &[tag_link_uid("u2")]);
        assert!(
            !view(std::slice::from_ref(&ours), &[]),
            "a leg of ours is left"
        );
        assert!(
            !view(&[], &[route("10.251.0.0/16", "10.254.0.3")]),
            "a writer racing the delete re-added the route via the address status recorded, \
             after the leg went: still ours to remove"
        );
        assert!(
            view(&[theirs], &[route("10.252.0.0/16", "10.254.0.5")]),
            "another link's leg and route are not ours: done"
        );
        let f = unsettled(3);
        assert_eq!(f.reason, Reason::Deleting);
        assert!(
            f.retryable,
            "it stops once the other writer sees the delete"
        );
    }

    #[test]
    fn unwinds_every_port_and_route_the_cloud_proves_ours() {
        let uid = "u1";
        let a = tagged(leg("a", "10.254.0.3", "r1"), &[tag_link_uid(uid)]);
        let b = tagged(port("b", "10.254.0.4"), &[tag_link_uid(uid)]);
        let other = tagged(leg("c", "10.254.0.5", "r2"), &[tag_link_uid("u2")]);
        let routes = vec![
            route("10.251.0.0/16", "10.254.0.3"),
            route("10.250.0.0/16", "10.254.0.4"),
            route("10.252.0.0/16", "10.254.0.5"),
            route("10.253.0.0/16", "10.254.0.6"),
        ];
        let p = plan(&UnwindView {
            uid,
            project: Some("operator"),
            ports: &[a.clone(), b.clone(), other],
            gateway_routes: &routes,
            recorded: None,
            recorded_ip: None,
            spec_cidr: "10.251.0.0/16",
        });
        // Finding 3: both ports tagged with our UID go; finding 2: routes via them go without
        // status; another link's route and an unknown one stay.
        assert_eq!(p.legs, vec![a, b]);
        assert_eq!(p.gateway_remove, routes[..2].to_vec());
    }

    #[test]
    fn a_marked_port_of_another_project_is_never_unwound_nor_its_routes() {
        // A port another project made on the shared transit network, carrying our UID: the
        // operator (the network's owner, whom Neutron lets delete any port on it) must not
        // delete it, and a route via its address is not proven ours by it.
        let uid = "u1";
        let mut forged = tagged(port("forged", "10.254.0.8"), &[tag_link_uid(uid)]);
        forged.project_id = "customer-x".into();
        let routes = vec![route("10.249.0.0/16", "10.254.0.8")];
        let p = plan(&UnwindView {
            uid,
            project: Some("operator"),
            ports: std::slice::from_ref(&forged),
            gateway_routes: &routes,
            recorded: None,
            recorded_ip: None,
            spec_cidr: "10.251.0.0/16",
        });
        assert!(p.is_empty(), "{p:?}");
        // The same port in the link's own project is its leg.
        let p = plan(&UnwindView {
            uid,
            project: Some("customer-x"),
            ports: std::slice::from_ref(&forged),
            gateway_routes: &routes,
            recorded: None,
            recorded_ip: None,
            spec_cidr: "10.251.0.0/16",
        });
        assert_eq!(p.legs, vec![forged]);
        assert_eq!(p.gateway_remove, routes);
    }

    #[test]
    fn status_hints_still_count_when_the_port_is_gone() {
        // The leg vanished; a route via the address status recorded points at nobody we hold.
        let routes = vec![
            route("10.251.0.0/16", "10.254.0.3"),
            route("10.240.0.0/16", "10.254.0.9"),
            route("10.241.0.0/16", "10.254.0.3"),
        ];
        let rec = RouteRecord {
            destination: "10.240.0.0/16".into(),
            nexthop: "10.254.0.9".into(),
        };
        let p = plan(&UnwindView {
            uid: "u1",
            project: Some("operator"),
            ports: &[],
            gateway_routes: &routes,
            recorded: Some(&rec),
            recorded_ip: Some("10.254.0.3"),
            spec_cidr: "10.251.0.0/16",
        });
        assert_eq!(
            p.gateway_remove,
            routes[..2].to_vec(),
            "never 10.241.0.0/16"
        );
    }

    #[test]
    fn reverse_routes_before_the_detach_are_only_ours() {
        // Finding 4: status.reverseRoutes lost; routes matching a current target still go.
        let g = GatewayRef {
            kind: "IPsecGateway".into(),
            namespace: "n".into(),
            name: "g".into(),
        };
        // A gateway that passed the screen (what a lost status still lets us find).
        let t = ReverseRoute {
            service_cidr: "100.64.1.0/24".into(),
            next_hop: "10.254.0.10".into(),
            gateway_ref: g.clone(),
        };
        let rec = ReverseRoute {
            service_cidr: "100.64.2.0/24".into(),
            next_hop: "10.254.0.11".into(),
            gateway_ref: g,
        };
        let on_router = vec![
            route("100.64.1.0/24", "10.254.0.10"),
            route("100.64.2.0/24", "10.254.0.11"),
            route("100.64.9.0/24", "10.254.0.12"),
        ];
        assert_eq!(
            reverse_to_remove(
                &on_router,
                std::slice::from_ref(&rec),
                std::slice::from_ref(&t),
                None
            ),
            on_router[..2].to_vec()
        );
        // A PerCustomer leg's router: whatever goes via the edge router goes too.
        let mut with_back = on_router.clone();
        with_back.push(route("10.254.0.0/24", "10.255.0.1"));
        assert_eq!(
            reverse_to_remove(&with_back, &[rec], &[t], Some("10.255.0.1")),
            vec![
                with_back[0].clone(),
                with_back[1].clone(),
                with_back[3].clone()
            ]
        );
    }

    #[test]
    fn the_abandon_note_names_everything_left() {
        let st = bnerd_api::ClusterLinkStatus {
            leg_port_id: Some("p1".into()),
            transit_ip: Some("10.254.0.9".into()),
            service_router_id: Some("r1".into()),
            reverse_routes: vec![ReverseRoute {
                service_cidr: "100.64.1.0/24".into(),
                next_hop: "10.254.0.10".into(),
                gateway_ref: GatewayRef {
                    kind: "IPsecGateway".into(),
                    namespace: "n".into(),
                    name: "g".into(),
                },
            }],
            ..Default::default()
        };
        let m = abandoned(&st);
        for want in [
            "p1",
            "10.254.0.9",
            "r1",
            "100.64.1.0/24 via 10.254.0.10 (IPsecGateway n/g)",
        ] {
            assert!(m.contains(want), "{want}: {m}");
        }
        assert!(abandoned(&Default::default()).contains("leg port unknown"));
    }

    #[test]
    fn a_refused_detach_names_the_blocking_routes() {
        let p = port("leg", "10.254.0.3");
        let e = detach_blocked(
            &p,
            "r1",
            &[
                route("100.64.9.0/24", "10.254.0.12"),
                route("0.0.0.0/0", "192.168.0.1"),
            ],
            "10.254.0.0/24".parse().unwrap(),
        );
        let f = deleting(&e);
        assert_eq!(f.reason, Reason::Deleting);
        assert!(
            f.message.contains("100.64.9.0/24 via 10.254.0.12"),
            "{}",
            f.message
        );
        assert!(f.message.contains(
            "openstack router remove route --route destination=100.64.9.0/24,gateway=10.254.0.12 r1"
        ));
        assert!(!f.message.contains("192.168.0.1"));
        assert_eq!(leg_unwind_failed(&e).reason, Reason::EnsureLegPortFailed);
    }

    #[test]
    fn the_customer_side_of_a_delete() {
        let not_attested = || Err(StepFail::terminal(Reason::NotAttested, "m"));
        // (rule, attested, leg in status, legs in the cloud, want)
        type Row = (
            &'static str,
            Result<(), StepFail>,
            bool,
            Option<usize>,
            &'static str,
        );
        let rows: Vec<Row> = vec![
            (
                "never attested, nothing built: released at once, no customer call",
                not_attested(),
                false,
                Some(0),
                "NothingBuilt",
            ),
            (
                "refused at CredentialsResolved (or its Secret never existed), nothing built: released",
                Ok(()),
                false,
                Some(0),
                "NothingBuilt",
            ),
            (
                "a leg on the transit network that status lost: resolve and unwind it",
                Ok(()),
                false,
                Some(1),
                "Resolve",
            ),
            (
                "a leg in status: resolve and unwind it",
                Ok(()),
                true,
                Some(0),
                "Resolve",
            ),
            (
                "the look at the transit network failed: nothing is known, resolve",
                Ok(()),
                false,
                None,
                "Resolve",
            ),
            (
                "a leg but no attestation: no customer call, held",
                not_attested(),
                true,
                Some(1),
                "NotAttested",
            ),
        ];
        for (rule, attested, in_status, in_cloud, want) in rows {
            let got = customer_unwind(attested, in_status, in_cloud);
            let name = match got {
                CustomerUnwind::NothingBuilt => "NothingBuilt",
                CustomerUnwind::NotAttested(_) => "NotAttested",
                CustomerUnwind::Resolve => "Resolve",
            };
            assert_eq!(name, want, "{rule}");
        }
    }

    #[test]
    fn refusals_that_only_a_human_can_call_final() {
        let api = |status| UnwindError::Cloud {
            context: "detaching".into(),
            error: CloudError::Api {
                method: "PUT".into(),
                path: "/routers/r/remove_router_interface".into(),
                status,
                kind: "k".into(),
                message: "m".into(),
            },
        };
        for status in [403, 404, 409] {
            assert!(refused_for_good(&api(status)), "{status}");
        }
        for status in [500, 503, 412] {
            assert!(!refused_for_good(&api(status)), "{status}");
        }
        let blocked = UnwindError::Blocked {
            message: "router r refuses to detach".into(),
        };
        assert!(refused_for_good(&blocked));
        let f = customer_refused("ns/clusterlink-a", &blocked);
        assert_eq!(f.reason, Reason::Deleting);
        assert!(
            f.message
                .contains("customer credential (secret ns/clusterlink-a)")
                && f.message.contains("abandon-customer-resources=true"),
            "{}",
            f.message
        );
        // Never set automatically (docs/operations.md, "Delete a link"); the gateway route always goes first.
        assert!(may_abandon(Some("true"), true));
        for (a, gone) in [
            (Some("true"), false),
            (Some("True"), true),
            (Some("yes"), true),
            (None, true),
        ] {
            assert!(!may_abandon(a, gone), "{a:?} {gone}");
        }
    }
}
