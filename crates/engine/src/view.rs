//! The engine's view of ClusterLink objects: what one link reads of the others (its peers)
//! and of itself. Shared by the operator's controller and `kubectl clusterlink plan`, so both
//! hand the reconcile the same input.

use std::collections::BTreeMap;

use bnerd_api::gateway::ReverseTarget;
use bnerd_api::{ClusterLink, ClusterLinkStatus, TransitIsolation};

use crate::model::{Input, Shape};
use crate::plan::Peer;

/// What every other link claims (addresses, CIDR, whether its route is in).
pub fn peers_of<'a>(me: &ClusterLink, all: impl IntoIterator<Item = &'a ClusterLink>) -> Vec<Peer> {
    all.into_iter()
        .filter(|l| l.metadata.uid != me.metadata.uid)
        .map(|l| {
            let ips = [
                l.status.as_ref().and_then(|s| s.transit_ip.clone()),
                l.spec.transit_ip.clone(),
            ];
            Peer {
                name: l.metadata.name.clone().unwrap_or_default(),
                transit_ips: ips
                    .into_iter()
                    .flatten()
                    .filter_map(|ip| ip.parse().ok())
                    .collect(),
                cidr: l.spec.service_cluster_cidr.parse().ok(),
                route_installed: l.status.as_ref().is_some_and(|s| s.gateway_route.is_some()),
                created: created_at(l),
            }
        })
        .collect()
}

/// RFC 3339 creation time; the tie-break between two overlapping new links compares it.
pub fn created_at(link: &ClusterLink) -> String {
    link.metadata
        .creation_timestamp
        .as_ref()
        .map(|t| t.0.to_string())
        .unwrap_or_default()
}

/// The reconcile's input for one link; `None` when the object has no UID (not yet created).
pub fn input_of<'a>(
    link: &'a ClusterLink,
    status: &'a ClusterLinkStatus,
    peers: &'a [Peer],
    targets: &'a [ReverseTarget],
) -> Option<Input<'a>> {
    Some(Input {
        name: link.metadata.name.as_deref().unwrap_or_default(),
        uid: link.metadata.uid.as_deref()?,
        generation: link.metadata.generation,
        created: created_at(link),
        spec: &link.spec,
        status,
        peers,
        reverse_targets: targets,
        annotations: link
            .metadata
            .annotations
            .as_ref()
            .unwrap_or(&NO_ANNOTATIONS),
        shape: Shape::of(&link.spec),
    })
}

static NO_ANNOTATIONS: BTreeMap<String, String> = BTreeMap::new();

/// The condition is True for the link's current generation.
pub fn true_at_generation(
    link: &ClusterLink,
    status: &ClusterLinkStatus,
    t: bnerd_api::ConditionType,
) -> bool {
    status.conditions.iter().any(|c| {
        c.type_ == t.as_str()
            && c.status == "True"
            && c.observed_generation == link.metadata.generation
    })
}

/// The service routers the window's shared snapshot reads: every same-tenant link's (a
/// cross-tenant link's router is in its customer's project, read with its own credential).
pub fn same_tenant_routers<'a>(links: impl IntoIterator<Item = &'a ClusterLink>) -> Vec<String> {
    links
        .into_iter()
        .filter(|l| !l.is_cross_tenant())
        .filter_map(|l| l.status.as_ref()?.service_router_id.clone())
        .collect()
}

/// What the drift check looks at (`drift_check`): every link not being deleted whose status
/// records a gateway route, whatever its Ready state (a link that fails at its credential or
/// its share keeps its route on the gateway router, and a freed address may go to another
/// tenant's port), with its leg, and for a `PerCustomer` link its project's edge leg and the
/// edge router's route to it. A link held at `TransitIPMismatch` has no route recorded.
pub fn recorded_paths<'a>(
    links: impl IntoIterator<Item = &'a ClusterLink>,
) -> Vec<crate::drift_check::RecordedPath> {
    use crate::drift_check::{RecordedEdge, RecordedLeg, RecordedPath};
    links
        .into_iter()
        .filter(|l| l.metadata.deletion_timestamp.is_none())
        .filter_map(|l| {
            let status = l.status.as_ref()?;
            let route = status.gateway_route.as_ref()?;
            let leg = match (&status.leg_port_id, &status.transit_ip) {
                (Some(port), Some(ip)) => Some(RecordedLeg {
                    port_id: port.clone(),
                    ip: ip.clone(),
                    router_id: status.service_router_id.clone(),
                }),
                _ => None,
            };
            let edge = match Shape::of(&l.spec) {
                Shape::CrossTenant {
                    isolation: TransitIsolation::PerCustomer,
                    ..
                } => status.customer_transit.as_ref().and_then(|ct| {
                    Some(RecordedEdge {
                        router_id: ct.edge_router_id.clone()?,
                        transit_ip: ct.edge_router_transit_ip.clone()?,
                        route: leg
                            .as_ref()
                            .map(|leg| bnerd_cloud::Route::new(&route.destination, &leg.ip)),
                    })
                }),
                _ => None,
            };
            Some(RecordedPath {
                link: l.metadata.name.clone().unwrap_or_default(),
                gateway_route: crate::plan::route_of(route),
                leg,
                edge,
            })
        })
        .collect()
}
