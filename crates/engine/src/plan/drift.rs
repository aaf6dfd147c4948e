//! Drift: what a reconcile of a link that was already Ready had to put back. Every write on
//! such a link repairs something changed out of band (a route removed, the leg detached or
//! its port deleted, the transit network's share withdrawn, a reverse route removed): each
//! becomes one Warning Event naming what was missing, when it was seen and what was restored,
//! and one count on `bnerd_drift_repairs_total{kind}`.

use bnerd_api::{ClusterLinkStatus, EventReason};

use super::action::{Action, ActionKind};

/// The Event reason of every repair.
pub const DRIFT_REPAIRED: EventReason = EventReason::DriftRepaired;

/// What was found missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriftKind {
    /// The gateway route to the link's CIDR was gone from the gateway router.
    GatewayRoute,
    /// The leg port was there but no longer attached to the service router.
    LegDetached,
    /// The leg port itself was gone (Neutron deletes a port detached from its router).
    LegPort,
    /// The transit network was no longer shared with the customer's project.
    TransitShare,
    /// A reverse route recorded in status was gone from the service router.
    ReverseRoute,
}

impl DriftKind {
    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            DriftKind::GatewayRoute => "gateway_route",
            DriftKind::LegDetached => "leg_detached",
            DriftKind::LegPort => "leg_port",
            DriftKind::TransitShare => "transit_share",
            DriftKind::ReverseRoute => "reverse_route",
        }
    }

    /// The Event's action: one Event series per kind of repair on a link.
    pub fn action(self) -> &'static str {
        match self {
            DriftKind::GatewayRoute => "RestoreGatewayRoute",
            DriftKind::LegDetached => "ReattachLeg",
            DriftKind::LegPort => "RecreateLegPort",
            DriftKind::TransitShare => "ShareTransitNetwork",
            DriftKind::ReverseRoute => "RestoreReverseRoutes",
        }
    }

    pub const ALL: [DriftKind; 5] = [
        DriftKind::GatewayRoute,
        DriftKind::LegDetached,
        DriftKind::LegPort,
        DriftKind::TransitShare,
        DriftKind::ReverseRoute,
    ];
}

/// One repair: a Warning Event and a metric count.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    pub kind: DriftKind,
    pub note: String,
}

/// Split a reconcile's actions into the repairs of drift and the rest (Normal Events).
/// `converged`: the link was Ready for its current generation before this reconcile, so
/// nothing was left for it to build and any write put back what someone removed. `before`
/// is the status it had then, which names what was there; `seen` is the reconcile's time.
pub fn classify(
    converged: bool,
    before: &ClusterLinkStatus,
    actions: &[Action],
    seen: &str,
) -> (Vec<Repair>, Vec<Action>) {
    if !converged {
        return (vec![], actions.to_vec());
    }
    let port_created = actions.iter().any(|a| a.kind == ActionKind::LegPortCreated);
    let leg = match (&before.leg_port_id, &before.transit_ip) {
        (Some(id), Some(ip)) => format!("leg port {id} at {ip}"),
        (Some(id), None) => format!("leg port {id}"),
        _ => "the leg port".to_string(),
    };
    let router = before
        .service_router_id
        .as_deref()
        .map(|r| format!("router {r}"))
        .unwrap_or_else(|| "the service router".into());
    let mut repairs: Vec<Repair> = vec![];
    let mut rest = vec![];
    for a in actions {
        let (kind, missing) = match a.kind {
            ActionKind::LegPortCreated => (
                DriftKind::LegPort,
                format!("{leg} was gone (deleted, or detached from {router}, which deletes it)"),
            ),
            // Attaching the port just created is part of that repair, not a second one.
            ActionKind::LegAttached if port_created => {
                if let Some(r) = repairs.iter_mut().find(|r| r.kind == DriftKind::LegPort) {
                    r.note = format!("{}; {}", r.note, a.note);
                }
                continue;
            }
            ActionKind::LegAttached => (
                DriftKind::LegDetached,
                format!("{leg} was no longer attached to {router}"),
            ),
            // A PerCustomer link's path has two routes more (on its edge router, and its
            // router's way back): their notes name their router.
            ActionKind::RouteInstalled
                if a.note.contains(" on edge router ") || a.note.contains(" on router ") =>
            {
                (
                    DriftKind::GatewayRoute,
                    format!("the route {} was gone", a.note),
                )
            }
            ActionKind::RouteInstalled => (
                DriftKind::GatewayRoute,
                match &before.gateway_route {
                    Some(r) => format!(
                        "the gateway route {} via {} was gone from the gateway router",
                        r.destination, r.nexthop
                    ),
                    None => "the gateway route was gone from the gateway router".into(),
                },
            ),
            ActionKind::TransitNetworkShared => (
                DriftKind::TransitShare,
                match &before.customer_project_id {
                    Some(p) => format!("the transit network was no longer shared with project {p}"),
                    None => "the transit network was no longer shared with the customer's project"
                        .into(),
                },
            ),
            ActionKind::ReverseRouteRestored => (
                DriftKind::ReverseRoute,
                format!("reverse routes were gone from {router}"),
            ),
            _ => {
                rest.push(a.clone());
                continue;
            }
        };
        repairs.push(Repair {
            kind,
            note: format!("{missing} (seen {seen}); restored: {}", a.note),
        });
    }
    (repairs, rest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnerd_api::RouteRecord;

    const SEEN: &str = "2026-11-30T18:00:00Z";

    fn before() -> ClusterLinkStatus {
        ClusterLinkStatus {
            leg_port_id: Some("p1".into()),
            transit_ip: Some("10.254.0.3".into()),
            service_router_id: Some("r1".into()),
            customer_project_id: Some("c1".into()),
            gateway_route: Some(RouteRecord {
                destination: "10.251.0.0/16".into(),
                nexthop: "10.254.0.3".into(),
            }),
            ..Default::default()
        }
    }

    fn act(kind: ActionKind, note: &str) -> Action {
        Action::new(kind, note)
    }

    #[test]
    fn a_link_still_converging_repairs_nothing() {
        let actions = vec![
            act(
                ActionKind::LegPortCreated,
                "created leg port p2 at 10.254.0.3",
            ),
            act(ActionKind::RouteInstalled, "added route"),
        ];
        let (repairs, rest) = classify(false, &before(), &actions, SEEN);
        assert!(repairs.is_empty());
        assert_eq!(rest, actions);
    }

    #[test]
    fn each_kind_of_removal_is_one_repair_naming_what_was_missing() {
        let cases = [
            (
                vec![act(
                    ActionKind::RouteInstalled,
                    "added 10.251.0.0/16 via 10.254.0.3",
                )],
                DriftKind::GatewayRoute,
                "the gateway route 10.251.0.0/16 via 10.254.0.3 was gone",
            ),
            (
                vec![act(
                    ActionKind::RouteInstalled,
                    "10.251.0.0/16 via 10.255.0.4 on edge router e1",
                )],
                DriftKind::GatewayRoute,
                "the route 10.251.0.0/16 via 10.255.0.4 on edge router e1 was gone",
            ),
            (
                vec![act(ActionKind::LegAttached, "attached leg port p1")],
                DriftKind::LegDetached,
                "leg port p1 at 10.254.0.3 was no longer attached to router r1",
            ),
            (
                vec![
                    act(
                        ActionKind::LegPortCreated,
                        "created leg port p2 at 10.254.0.3",
                    ),
                    act(ActionKind::LegAttached, "attached leg port p2 to router r1"),
                ],
                DriftKind::LegPort,
                "leg port p1 at 10.254.0.3 was gone",
            ),
            (
                vec![act(
                    ActionKind::TransitNetworkShared,
                    "shared network n with c1",
                )],
                DriftKind::TransitShare,
                "no longer shared with project c1",
            ),
            (
                vec![act(
                    ActionKind::ReverseRouteRestored,
                    "10.96.0.0/12 via 10.254.0.9",
                )],
                DriftKind::ReverseRoute,
                "reverse routes were gone from router r1",
            ),
        ];
        for (actions, kind, missing) in cases {
            let (repairs, rest) = classify(true, &before(), &actions, SEEN);
            assert_eq!(repairs.len(), 1, "{kind:?}: {repairs:?}");
            assert!(rest.is_empty(), "{kind:?}: {rest:?}");
            let r = &repairs[0];
            assert_eq!(r.kind, kind);
            assert!(r.note.contains(missing), "{kind:?}: {}", r.note);
            assert!(r.note.contains(SEEN), "{}", r.note);
            for a in &actions {
                assert!(
                    r.note.contains(&a.note),
                    "{kind:?}: restored part: {}",
                    r.note
                );
            }
        }
    }

    #[test]
    fn other_actions_stay_normal_events() {
        let actions = vec![
            act(ActionKind::RouteRemoved, "removed a stale route"),
            act(ActionKind::RouteInstalled, "added the route"),
            act(ActionKind::DuplicateLegRemoved, "removed a duplicate"),
        ];
        let (repairs, rest) = classify(true, &before(), &actions, SEEN);
        assert_eq!(repairs.len(), 1);
        assert_eq!(
            rest.iter().map(|a| a.kind).collect::<Vec<_>>(),
            vec![ActionKind::RouteRemoved, ActionKind::DuplicateLegRemoved]
        );
    }

    #[test]
    fn metric_labels_and_event_actions_are_distinct() {
        let labels: std::collections::BTreeSet<&str> =
            DriftKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(labels.len(), DriftKind::ALL.len());
        let actions: std::collections::BTreeSet<&str> =
            DriftKind::ALL.iter().map(|k| k.action()).collect();
        assert_eq!(actions.len(), DriftKind::ALL.len());
    }
}
