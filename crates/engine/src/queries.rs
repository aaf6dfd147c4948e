//! The reads of the operator's side a converged `PerCustomer` link makes each resync, spelled
//! once: the steps make them, and the batched resync answers exactly these ahead for every
//! project (`crate::ahead`), found under the very request a step makes. A leaf.

use bnerd_api::names::{customer_transit_name, edge_router_name};
use bnerd_cloud::fabric::Fabric;
use bnerd_cloud::{NetworkQuery, PortQuery, RouterQuery, SubnetQuery};

/// The project's customer transit networks: by name, in the operator's project.
pub(crate) fn networks_query(fabric: &Fabric, project: &str) -> NetworkQuery {
    NetworkQuery {
        name: Some(customer_transit_name(&fabric.transit_network_id, project)),
        project_id: Some(fabric.operator_project_id.clone()),
    }
}

/// A customer transit network's subnets.
pub(crate) fn subnets_query(network_id: &str) -> SubnetQuery {
    SubnetQuery {
        network_id: Some(network_id.to_string()),
        ..Default::default()
    }
}

/// The project's edge routers: by name, in the operator's project.
pub(crate) fn edge_routers_query(fabric: &Fabric, project: &str) -> RouterQuery {
    RouterQuery {
        name: Some(edge_router_name(&fabric.transit_network_id, project)),
        project_id: Some(fabric.operator_project_id.clone()),
        ..Default::default()
    }
}

/// Every port of a router.
pub(crate) fn interfaces_query(router_id: &str) -> PortQuery {
    PortQuery {
        device_ids: vec![router_id.to_string()],
        ..Default::default()
    }
}

/// Every port on one network (the operator owns the transits, so it sees every port on them).
pub(crate) fn network_ports_query(network_id: &str) -> PortQuery {
    PortQuery {
        network_id: Some(network_id.to_string()),
        ..Default::default()
    }
}
