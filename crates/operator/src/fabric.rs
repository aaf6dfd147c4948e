//! Facts about the operator's own fabric, checked once at startup: the transit network and
//! its one subnet, the gateway cluster's router, and which Neutron extensions are loaded.

use bnerd_cloud::{CloudError, Neutron, PortQuery};
use ipnet::Ipv4Net;
use thiserror::Error;

/// The extension alias of ML2's `tag_ports_during_bulk_creation` driver.
pub const TAGS_AT_CREATE: &str = "tag-ports-during-bulk-creation";

#[derive(Debug, Clone)]
pub struct Fabric {
    pub transit_network_id: String,
    pub transit_subnet_id: String,
    pub transit_subnet: Ipv4Net,
    pub gateway_router_id: String,
    /// `extraroute-atomic`: routes are added/removed one by one, never by rewriting the table.
    pub extraroute_atomic: bool,
    /// `tag-ports-during-bulk-creation` (an ML2 extension driver): tags in a port's create
    /// body are kept. (`tag-creation` only means `POST /{resource}/{id}/tags` exists.)
    pub tags_at_create: bool,
}

#[derive(Debug, Error)]
pub enum FabricError {
    #[error("transit network {id} (IPSEC_TRANSIT_NETWORK_ID): {source}")]
    Network { id: String, source: CloudError },
    #[error(
        "transit network {0} (IPSEC_TRANSIT_NETWORK_ID) is shared with every project (shared=true); the spec forbids --share, share per customer project instead"
    )]
    SharedNetwork(String),
    #[error(
        "transit network {id} (IPSEC_TRANSIT_NETWORK_ID) must have exactly one subnet, it has {count}"
    )]
    SubnetCount { id: String, count: usize },
    #[error("transit subnet {id}: {message}")]
    Subnet { id: String, message: String },
    #[error("gateway router {id} (IPSEC_GATEWAY_ROUTER_ID): {source}")]
    Router { id: String, source: CloudError },
    #[error(
        "gateway router {router} (IPSEC_GATEWAY_ROUTER_ID) has no interface on the transit network {network}; run `openstack router add subnet <router> <transit subnet>` once"
    )]
    RouterNotOnTransit { router: String, network: String },
    #[error("listing Neutron extensions: {0}")]
    Extensions(CloudError),
}

impl Fabric {
    /// Read and check the fabric (DESIGN 6.7): fail fast, naming the setting.
    pub async fn discover(
        net: &dyn Neutron,
        transit_network_id: &str,
        gateway_router_id: &str,
    ) -> Result<Self, FabricError> {
        let nerr = |source| FabricError::Network {
            id: transit_network_id.into(),
            source,
        };
        let network = net.get_network(transit_network_id).await.map_err(nerr)?;
        if network.shared {
            return Err(FabricError::SharedNetwork(network.id));
        }
        if network.subnets.len() != 1 {
            return Err(FabricError::SubnetCount {
                id: network.id,
                count: network.subnets.len(),
            });
        }
        let subnet_id = network.subnets[0].clone();
        let subnet = net
            .get_subnet(&subnet_id)
            .await
            .map_err(|e| FabricError::Subnet {
                id: subnet_id.clone(),
                message: e.to_string(),
            })?;
        let cidr: Ipv4Net = subnet.cidr.parse().map_err(|_| FabricError::Subnet {
            id: subnet_id.clone(),
            message: format!("{} is not an IPv4 CIDR", subnet.cidr),
        })?;
        let rerr = |source| FabricError::Router {
            id: gateway_router_id.into(),
            source,
        };
        net.get_router(gateway_router_id).await.map_err(rerr)?;
        let q = PortQuery {
            network_id: Some(network.id.clone()),
            device_id: Some(gateway_router_id.into()),
            ..Default::default()
        };
        let legs = net.list_ports(&q).await.map_err(rerr)?;
        if legs.is_empty() {
            return Err(FabricError::RouterNotOnTransit {
                router: gateway_router_id.into(),
                network: network.id,
            });
        }
        let ext = net.extensions().await.map_err(FabricError::Extensions)?;
        Ok(Fabric {
            transit_network_id: network.id,
            transit_subnet_id: subnet_id,
            transit_subnet: cidr,
            gateway_router_id: gateway_router_id.into(),
            extraroute_atomic: ext.iter().any(|e| e == "extraroute-atomic"),
            tags_at_create: ext.iter().any(|e| e == TAGS_AT_CREATE),
        })
    }
}
