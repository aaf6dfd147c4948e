//! Neutron and Keystone objects, with only the fields the operator reads.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct FixedIp {
    #[serde(default)]
    pub subnet_id: String,
    pub ip_address: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Port {
    pub id: String,
    #[serde(default)]
    pub name: String,
    pub network_id: String,
    #[serde(default)]
    pub project_id: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub device_id: String,
    #[serde(default)]
    pub device_owner: String,
    #[serde(default)]
    pub fixed_ips: Vec<FixedIp>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub revision_number: u64,
}

/// The device_owner Neutron sets on a legacy router's interface port.
pub const OWNER_ROUTER_INTERFACE: &str = "network:router_interface";
/// ... on an L3-HA router's interface port.
pub const OWNER_ROUTER_INTERFACE_HA: &str = "network:ha_router_replicated_interface";
/// ... on a distributed (DVR) router's interface port.
pub const OWNER_ROUTER_INTERFACE_DVR: &str = "network:router_interface_distributed";
/// ... on the port ML2/OVN makes with every network for its metadata service (with
/// `ovn_metadata_enabled`, the usual setting), with or without DHCP on the network's subnets.
pub const OWNER_METADATA: &str = "network:distributed";
/// ... on a DHCP agent's port, made with a subnet that has DHCP on.
pub const OWNER_DHCP: &str = "network:dhcp";
/// Every device_owner Neutron gives a router interface (its ROUTER_INTERFACE_OWNERS). An HA
/// router's heartbeat port (`network:router_ha_interface`) is not among them: it is never a leg.
pub const ROUTER_INTERFACE_OWNERS: [&str; 3] = [
    OWNER_ROUTER_INTERFACE,
    OWNER_ROUTER_INTERFACE_HA,
    OWNER_ROUTER_INTERFACE_DVR,
];

/// Whether a port with this device_owner is a router interface (of any router kind).
pub fn is_router_interface_owner(device_owner: &str) -> bool {
    ROUTER_INTERFACE_OWNERS.contains(&device_owner)
}

impl Port {
    pub fn has_ip(&self, ip: &str) -> bool {
        self.fixed_ips.iter().any(|f| f.ip_address == ip)
    }

    pub fn first_ip(&self) -> Option<&str> {
        self.fixed_ips.first().map(|f| f.ip_address.as_str())
    }

    pub fn has_tag(&self, tag: &str) -> bool {
        self.tags.iter().any(|t| t == tag)
    }

    /// Attached as an interface of some router (legacy, L3-HA or DVR).
    pub fn is_router_interface(&self) -> bool {
        !self.device_id.is_empty() && is_router_interface_owner(&self.device_owner)
    }

    /// Attached as an interface of this router.
    pub fn is_interface_of(&self, router_id: &str) -> bool {
        self.device_id == router_id && self.is_router_interface()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Route {
    pub destination: String,
    pub nexthop: String,
}

impl Route {
    pub fn new(destination: impl Into<String>, nexthop: impl Into<String>) -> Self {
        Self {
            destination: destination.into(),
            nexthop: nexthop.into(),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Router {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub project_id: String,
    #[serde(default)]
    pub routes: Vec<Route>,
    #[serde(default)]
    pub revision_number: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Network {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub project_id: String,
    #[serde(default)]
    pub shared: bool,
    #[serde(default)]
    pub subnets: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Subnet {
    pub id: String,
    pub network_id: String,
    pub cidr: String,
    #[serde(default)]
    pub gateway_ip: Option<String>,
    #[serde(default)]
    pub project_id: String,
}

/// Filters for `GET /ports`; every set field narrows the result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PortQuery {
    pub network_id: Option<String>,
    /// Ports on any of these networks (`?network_id=a&network_id=b…`): the batched resync
    /// lists every customer transit's ports in one call. Set this or `network_id`, not both.
    pub network_ids: Vec<String>,
    /// Ports of any of these devices (`?device_id=a&device_id=b…`), so one call can list the
    /// interfaces of many routers.
    pub device_ids: Vec<String>,
    pub ip_address: Option<String>,
    /// `tags`: ports carrying all of these.
    pub tags: Vec<String>,
    /// `tags-any`: ports carrying at least one of these.
    pub tags_any: Vec<String>,
    /// `not-tags`: leave out ports carrying all of these.
    pub not_tags: Vec<String>,
    /// Ports with any of these device owners (`?device_owner=a&device_owner=b…`): the drift
    /// check lists every router interface the operator can see in one call.
    pub device_owners: Vec<String>,
    /// Only these attributes of each port (`?fields=a&fields=b…`); empty: all. `id` and
    /// `network_id` must be among them (a `Port` needs both).
    pub fields: Vec<String>,
}

impl PortQuery {
    /// Whether Neutron lists `p` for this query: every set field narrows; of the tag filters
    /// `tags` needs all, `tags-any` one, and `not-tags` drops only a port carrying all of its
    /// tags.
    pub fn matches(&self, p: &Port) -> bool {
        self.network_id.as_ref().is_none_or(|n| *n == p.network_id)
            && (self.network_ids.is_empty() || self.network_ids.contains(&p.network_id))
            && (self.device_ids.is_empty() || self.device_ids.contains(&p.device_id))
            && self.ip_address.as_ref().is_none_or(|ip| p.has_ip(ip))
            && self.tags.iter().all(|t| p.has_tag(t))
            && (self.tags_any.is_empty() || self.tags_any.iter().any(|t| p.has_tag(t)))
            && (self.not_tags.is_empty() || !self.not_tags.iter().all(|t| p.has_tag(t)))
            && (self.device_owners.is_empty() || self.device_owners.contains(&p.device_owner))
    }

    /// The network's ports of ML2/OVN's metadata service ([`OWNER_METADATA`]), with only the
    /// fields that tell whether there is one: how `plan` and doctor judge whether a new
    /// network brings a port of Neutron's own.
    pub fn metadata_ports(network_id: &str) -> Self {
        PortQuery {
            network_id: Some(network_id.to_string()),
            device_owners: vec![OWNER_METADATA.into()],
            fields: ["id", "network_id", "device_owner"]
                .map(String::from)
                .to_vec(),
            ..Default::default()
        }
    }
}

/// Filters for `GET /networks`; every set field narrows the result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NetworkQuery {
    pub name: Option<String>,
    pub project_id: Option<String>,
}

impl NetworkQuery {
    /// Whether Neutron lists `n` for this query.
    pub fn matches(&self, n: &Network) -> bool {
        self.name.as_ref().is_none_or(|x| *x == n.name)
            && self.project_id.as_ref().is_none_or(|x| *x == n.project_id)
    }
}

/// Filters for `GET /subnets`; every set field narrows the result.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubnetQuery {
    pub network_id: Option<String>,
    /// Subnets of any of these networks (`?network_id=a&network_id=b…`). Set this or
    /// `network_id`, not both.
    pub network_ids: Vec<String>,
    pub project_id: Option<String>,
    /// Any of these subnets (`?id=a&id=b…`).
    pub ids: Vec<String>,
}

impl SubnetQuery {
    /// Whether Neutron lists `s` for this query.
    pub fn matches(&self, s: &Subnet) -> bool {
        self.network_id.as_ref().is_none_or(|x| *x == s.network_id)
            && (self.network_ids.is_empty() || self.network_ids.contains(&s.network_id))
            && self.project_id.as_ref().is_none_or(|x| *x == s.project_id)
            && (self.ids.is_empty() || self.ids.contains(&s.id))
    }
}

/// Neutron's per-resource tag limit.
pub const MAX_TAGS: usize = 50;

/// Filters for `GET /routers`. Several IDs match any of them (`?id=a&id=b`), so one call
/// can read the gateway router and a service router together.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RouterQuery {
    pub name: Option<String>,
    pub ids: Vec<String>,
    /// Routers of this project (`?project_id=`): the drift check reads the gateway router and
    /// every edge router, the operator's own, in one call.
    pub project_id: Option<String>,
    /// Only these attributes of each router (`?fields=a&fields=b…`); empty: all. `id` must be
    /// among them.
    pub fields: Vec<String>,
}

impl RouterQuery {
    /// Whether Neutron lists `r` for this query (`fields` narrows what is shown, not which).
    pub fn matches(&self, r: &Router) -> bool {
        self.name.as_ref().is_none_or(|n| *n == r.name)
            && (self.ids.is_empty() || self.ids.contains(&r.id))
            && self.project_id.as_ref().is_none_or(|p| *p == r.project_id)
    }
}

/// The RBAC action that lets a project create ports on a network it does not own.
pub const ACCESS_AS_SHARED: &str = "access_as_shared";

/// A Neutron RBAC policy (`/v2.0/rbac-policies`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct RbacPolicy {
    pub id: String,
    pub object_type: String,
    pub object_id: String,
    pub action: String,
    pub target_tenant: String,
    #[serde(default)]
    pub project_id: String,
}

/// `POST /rbac-policies` for a network.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShareNetwork {
    pub network_id: String,
    pub action: String,
    /// A project ID, or `*` for every project (admins only).
    pub target_tenant: String,
}

/// `POST /subnets` (IPv4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateSubnet {
    pub network_id: String,
    pub cidr: String,
    pub gateway_ip: String,
    /// Neutron's default is on: a DHCP server for the subnet (an agent's port under ML2/OVS;
    /// under ML2/OVN, with its metadata service on, an address for the network's metadata
    /// port, the subnet's first free one). A subnet of router interfaces only serves no one.
    pub dhcp: bool,
}

/// `POST /routers`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreateRouter {
    pub name: String,
    /// Create it for another project (admin only).
    pub project_id: Option<String>,
    /// L3-HA router (admin only).
    pub ha: Option<bool>,
    /// Distributed (DVR) router (admin only).
    pub distributed: Option<bool>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CreatePort {
    pub network_id: String,
    pub subnet_id: Option<String>,
    pub ip_address: Option<String>,
    pub name: String,
    pub description: String,
    /// Kept by Neutron only when it lists `tag-ports-during-bulk-creation`.
    pub tags: Vec<String>,
}

/// One line of `GET /quotas/{project}/details`: how much of a resource the project holds
/// against its limit. Neutron names the resources as its quota engine counts them
/// (`network`, `subnet`, `port`, `router`, `rbac_policy`, `router_route`, ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaUsage {
    pub resource: String,
    pub used: u64,
    /// None: unlimited (Neutron's -1).
    pub limit: Option<u64>,
}

/// What a Keystone token says about its credential.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TokenInfo {
    pub project_id: String,
    pub project_name: String,
    pub user_id: String,
    pub roles: Vec<String>,
    pub application_credential_id: Option<String>,
    /// An application credential's `restricted` flag (it cannot create more credentials).
    pub application_credential_restricted: Option<bool>,
}
