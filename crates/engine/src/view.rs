//! The engine's view of ClusterLink objects: what one link reads of the others (its peers)
//! and of itself. Shared by the operator's controller and `kubectl clusterlink plan`, so both
//! hand the reconcile the same input.

use std::collections::BTreeMap;

use bnerd_api::gateway::ReverseTarget;
use bnerd_api::{ClusterLink, ClusterLinkStatus};

use crate::model::Input;
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
    })
}

static NO_ANNOTATIONS: BTreeMap<String, String> = BTreeMap::new();
