//! The drift check between resyncs (docs/design.md, "The drift check"): two reads for the
//! whole estate, side by side — the operator project's routers (the gateway router and every
//! edge router, with their routes) and every router interface the operator can see (which
//! holds every leg, same-tenant or a customer's, and every edge leg) — judged against what each
//! link's status records (`plan::drift_check`). No link costs a read of its own.

use bnerd_cloud::fabric::Fabric;
use bnerd_cloud::{CloudError, Neutron, PortQuery, ROUTER_INTERFACE_OWNERS, RouterQuery};

pub use super::plan::drift_check::{
    Drift, GatewayRouterNotListed, RecordedEdge, RecordedLeg, RecordedPath,
};

/// Reads every check makes when some link has a path recorded (none when no link has).
pub const READS: u64 = 2;

#[derive(Debug, thiserror::Error)]
pub enum DriftCheckError {
    #[error("reading the routers and router interfaces: {0}")]
    Read(#[from] CloudError),
    #[error(transparent)]
    GatewayRouterNotListed(#[from] GatewayRouterNotListed),
}

/// The links among `paths` whose recorded path the cloud no longer shows.
pub async fn check(
    net: &dyn Neutron,
    fabric: &Fabric,
    paths: &[RecordedPath],
) -> Result<Vec<Drift>, DriftCheckError> {
    if paths.is_empty() {
        return Ok(vec![]);
    }
    // Only what the judgement reads: a third of the bytes to send and parse every check.
    let only = |fields: &[&str]| fields.iter().map(|f| f.to_string()).collect();
    let routers = RouterQuery {
        project_id: Some(fabric.operator_project_id.clone()),
        fields: only(&["id", "routes"]),
        ..Default::default()
    };
    let interfaces = PortQuery {
        device_owners: ROUTER_INTERFACE_OWNERS
            .iter()
            .map(|o| o.to_string())
            .collect(),
        fields: only(&["id", "network_id", "device_id", "device_owner", "fixed_ips"]),
        ..Default::default()
    };
    let (routers, interfaces) =
        futures::future::try_join(net.list_routers(&routers), net.list_ports(&interfaces)).await?;
    Ok(super::plan::drift_check::drifted(
        paths,
        &fabric.gateway_router_id,
        &routers,
        &interfaces,
    )?)
}
