//! Facts about the operator's own fabric, checked once at startup: the transit network and
//! its one subnet, the gateway cluster's router, and which Neutron extensions are loaded.
//! The operator and `kubectl clusterlink doctor` both check it, so it lives with the client.

use ipnet::Ipv4Net;
use thiserror::Error;

use crate::error::CloudError;
use crate::{Neutron, PortQuery};

/// The extension alias of ML2's `tag_ports_during_bulk_creation` driver.
pub const TAGS_AT_CREATE: &str = "tag-ports-during-bulk-creation";
/// `PUT /routers/{id}/add_extraroutes|remove_extraroutes`: one route at a time.
pub const EXTRAROUTE_ATOMIC: &str = "extraroute-atomic";
/// `If-Match: revision_number=N` is honoured (without it Neutron ignores the header).
pub const REVISION_IF_MATCH: &str = "revision-if-match";

#[derive(Debug, Clone)]
pub struct Fabric {
    pub transit_network_id: String,
    pub transit_subnet_id: String,
    pub transit_subnet: Ipv4Net,
    pub gateway_router_id: String,
    /// How many routes the gateway router held when it was read (one per link): what the
    /// capacity check compares with the routes a router may hold.
    pub gateway_routes: usize,
    /// The project a same-tenant link's leg must belong to: the operator credential's own,
    /// where its creates land. `discover` fills in the transit network's owner (the operator
    /// owns the transit network: it creates the per-customer shares, which only the owner
    /// may); the operator replaces it with its token's project at startup.
    pub operator_project_id: String,
    /// `extraroute-atomic`: routes are added/removed one by one, never by rewriting the table.
    pub extraroute_atomic: bool,
    /// `revision-if-match`: a rewrite of the route table is refused (412) when someone else
    /// changed the router since we read it. The fallback when `extraroute_atomic` is false.
    pub revision_if_match: bool,
    /// `tag-ports-during-bulk-creation` (an ML2 extension driver): tags in a port's create
    /// body are kept. (`tag-creation` only means `POST /{resource}/{id}/tags` exists.)
    pub tags_at_create: bool,
    /// `external-gateway-multihoming` (ML2/OVN's L3 plugin): Neutron checks a router's
    /// subnets by CIDR overlap, and words a second interface on one subnet accordingly
    /// ([`crate::refusals::second_router_interface`]).
    pub router_subnets_by_cidr: bool,
    /// Which destinations the operator routes on this fabric (operator settings; `discover`
    /// admits everything, the operator sets them at startup).
    pub admission: Admission,
    /// Where a `PerCustomer` link's customer transit subnets come from (an operator setting;
    /// `None`: the mode is not configured).
    pub customer_transit: Option<CustomerTransitPool>,
}

/// The pool per-customer transit subnets are cut from, and their prefix length
/// (docs/design.md, "Per-customer transit").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CustomerTransitPool {
    pub pool: Ipv4Net,
    pub prefix_len: u8,
}

/// A customer network's prefix length when none is set.
pub const PER_CUSTOMER_DEFAULT_PREFIX_LEN: u8 = 28;

/// The longest prefix a customer network may have: a /29 still holds the edge router's
/// interface, Neutron's DHCP port and the customer router's leg besides the network and
/// broadcast addresses; a /30 does not.
pub const PER_CUSTOMER_MAX_PREFIX_LEN: u8 = 29;

const POOL_SETTING: &str = "IPSEC_PER_CUSTOMER_TRANSIT_POOL (--per-customer-transit-pool)";
const PREFIX_SETTING: &str =
    "IPSEC_PER_CUSTOMER_TRANSIT_PREFIX_LENGTH (--per-customer-transit-prefix-length)";

/// A PerCustomer setting that is wrong: which one (as an operator setting names it), and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSettingError {
    pub setting: &'static str,
    pub message: String,
}

impl CustomerTransitPool {
    /// The pool must lie clear of the main transit subnet: an edge router's two interfaces
    /// would otherwise sit on overlapping subnets, and the gateway router would route a
    /// customer transit's block into its own transit.
    pub fn clear_of(&self, transit: Ipv4Net) -> Result<(), PoolSettingError> {
        if self.pool.contains(&transit.network()) || transit.contains(&self.pool.network()) {
            return Err(PoolSettingError {
                setting: POOL_SETTING,
                message: format!(
                    "{} overlaps the transit subnet {transit}; pick a pool outside it",
                    self.pool
                ),
            });
        }
        Ok(())
    }

    /// The PerCustomer pool and prefix length; None when no pool is set. A blank value counts as
    /// unset, as the chart leaves the variables out rather than empty.
    pub fn from_settings(
        pool: Option<&str>,
        prefix_len: Option<&str>,
    ) -> Result<Option<Self>, PoolSettingError> {
        let pool = pool.map(str::trim).filter(|s| !s.is_empty());
        let prefix_len = prefix_len.map(str::trim).filter(|s| !s.is_empty());
        let Some(pool_text) = pool else {
            return match prefix_len {
                // A prefix length alone is a half-made setup: say so rather than ignore it.
                Some(p) => Err(PoolSettingError {
                    setting: PREFIX_SETTING,
                    message: format!(
                        "{p:?} is set but IPSEC_PER_CUSTOMER_TRANSIT_POOL is not: set the pool too, or unset this"
                    ),
                }),
                None => Ok(None),
            };
        };
        let pool: Ipv4Net = pool_text.parse().map_err(|_| PoolSettingError {
            setting: POOL_SETTING,
            message: format!("{pool_text:?} is not an IPv4 CIDR (e.g. 10.255.0.0/16)"),
        })?;
        if pool.trunc() != pool {
            return Err(PoolSettingError {
                setting: POOL_SETTING,
                message: format!(
                    "{pool_text} has host bits set (did you mean {}?)",
                    pool.trunc()
                ),
            });
        }
        if pool.prefix_len() > PER_CUSTOMER_MAX_PREFIX_LEN {
            return Err(PoolSettingError {
                setting: POOL_SETTING,
                message: format!(
                    "{pool} is smaller than one customer network (at most /{PER_CUSTOMER_MAX_PREFIX_LEN})"
                ),
            });
        }
        let (prefix, given) = match prefix_len {
            Some(p) => {
                let n: u8 = p.parse().map_err(|_| PoolSettingError {
                    setting: PREFIX_SETTING,
                    message: format!(
                        "{p:?} is not a prefix length ({} to {PER_CUSTOMER_MAX_PREFIX_LEN} for the pool {pool})",
                        pool.prefix_len()
                    ),
                })?;
                (n, true)
            }
            None => (PER_CUSTOMER_DEFAULT_PREFIX_LEN, false),
        };
        if prefix < pool.prefix_len() || prefix > PER_CUSTOMER_MAX_PREFIX_LEN {
            return Err(PoolSettingError {
                setting: PREFIX_SETTING,
                message: format!(
                    "{prefix}{} is outside {} to {PER_CUSTOMER_MAX_PREFIX_LEN}: a customer network is cut from the pool {pool} and holds at least a /{PER_CUSTOMER_MAX_PREFIX_LEN}",
                    if given { "" } else { " (the default)" },
                    pool.prefix_len()
                ),
            });
        }
        Ok(Some(Self {
            pool,
            prefix_len: prefix,
        }))
    }
}

/// Which CIDRs the operator installs routes to: the ranges a CIDR must lie in (none: any)
/// and the shortest prefix it may have (0: any). A destination is attacker-chosen text in a
/// gateway's status or a link's spec; these bound how much of the address space one object
/// can pull through the gateway router or into every service router.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CidrPolicy {
    pub ranges: Vec<Ipv4Net>,
    pub min_prefix_len: u8,
}

/// Why a [`CidrPolicy`] refuses a CIDR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CidrRefusal {
    /// Its prefix is shorter than the shortest allowed.
    TooWide,
    /// It lies in none of the ranges.
    OutsideRanges,
}

impl CidrPolicy {
    pub fn admits(&self, cidr: Ipv4Net) -> Result<(), CidrRefusal> {
        if cidr.prefix_len() < self.min_prefix_len {
            return Err(CidrRefusal::TooWide);
        }
        if !self.ranges.is_empty() && !self.ranges.iter().any(|r| r.contains(&cidr)) {
            return Err(CidrRefusal::OutsideRanges);
        }
        Ok(())
    }

    /// The bounds this project recommends for spec.serviceClusterCIDR: the private and
    /// shared-address ranges (RFC 1918, RFC 6598), no prefix shorter than /12. Not the
    /// default: a same-tenant link admitted by an earlier version must keep converging after
    /// an upgrade, so they are a setting to opt into, and `doctor` names links outside them.
    pub fn recommended_for_links() -> Self {
        Self {
            ranges: [
                "10.0.0.0/8",
                "172.16.0.0/12",
                "192.168.0.0/16",
                "100.64.0.0/10",
            ]
            .iter()
            .filter_map(|r| r.parse().ok())
            .collect(),
            min_prefix_len: 12,
        }
    }

    /// The ranges as a person reads them in a message.
    pub fn ranges_text(&self) -> String {
        if self.ranges.is_empty() {
            return "any".into();
        }
        let list: Vec<String> = self.ranges.iter().map(ToString::to_string).collect();
        list.join(", ")
    }
}

/// The operator's settings on what it routes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Admission {
    /// spec.serviceClusterCIDR of every ClusterLink (`IPSEC_SERVICE_CIDR_RANGES`,
    /// `IPSEC_SERVICE_CIDR_MIN_PREFIX_LENGTH`).
    pub service_cidrs: CidrPolicy,
    /// status.serviceCIDR of every gateway with reverse exposures
    /// (`IPSEC_GATEWAY_CIDR_RANGES`, `IPSEC_GATEWAY_CIDR_MIN_PREFIX_LENGTH`).
    pub gateway_cidrs: CidrPolicy,
}

#[derive(Debug, Error)]
pub enum FabricError {
    /// Keystone refused or did not answer: nothing was learnt about the fabric's objects, so
    /// the message must not read as if an ID were wrong.
    #[error(
        "Keystone, for the operator's own token (OS_AUTH_URL or clouds.yaml auth.auth_url): {0}"
    )]
    Keystone(CloudError),
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
    #[error(
        "Neutron has neither the `{EXTRAROUTE_ATOMIC}` nor the `{REVISION_IF_MATCH}` extension loaded: a route change would have to rewrite the gateway router's whole route table unguarded, which can drop a route someone else adds meanwhile; load one of them (`{EXTRAROUTE_ATOMIC}` comes with the L3 router plugin's extraroute support)"
    )]
    NoSafeRouteUpdate,
}

impl FabricError {
    /// The cloud did not answer, or answered with a server error: weather, worth retrying;
    /// not a fabric that is set up wrong.
    pub fn is_unreachable(&self) -> bool {
        match self {
            FabricError::Network { source, .. }
            | FabricError::Router { source, .. }
            | FabricError::Keystone(source)
            | FabricError::Extensions(source) => source.is_retryable(),
            _ => false,
        }
    }
}

/// What the loaded extensions let the operator do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Extensions {
    extraroute_atomic: bool,
    revision_if_match: bool,
    tags_at_create: bool,
    router_subnets_by_cidr: bool,
}

impl Extensions {
    /// None when neither route update leaves foreign routes alone: the operator must not start.
    fn from_aliases(aliases: &[String]) -> Option<Self> {
        let has = |alias: &str| aliases.iter().any(|a| a == alias);
        let ext = Extensions {
            extraroute_atomic: has(EXTRAROUTE_ATOMIC),
            revision_if_match: has(REVISION_IF_MATCH),
            tags_at_create: has(TAGS_AT_CREATE),
            router_subnets_by_cidr: has(crate::refusals::EXTERNAL_GATEWAY_MULTIHOMING),
        };
        (ext.extraroute_atomic || ext.revision_if_match).then_some(ext)
    }
}

/// A failed call as the fabric error about its object, unless Keystone failed it: then no
/// object was looked at, and blaming one would send a person after the wrong setting.
fn keystone_or(source: CloudError, about: impl FnOnce(CloudError) -> FabricError) -> FabricError {
    if source.is_keystone() {
        FabricError::Keystone(source)
    } else {
        about(source)
    }
}

impl Fabric {
    /// Read and check the fabric (docs/design.md, "The startup check"). An error is the first
    /// problem found and names the setting: the operator logs it and shows it on `/readyz`
    /// while it retries, so a human sees what to fix without a crash loop.
    pub async fn discover(
        net: &dyn Neutron,
        transit_network_id: &str,
        gateway_router_id: &str,
    ) -> Result<Self, FabricError> {
        let nerr = |source| {
            keystone_or(source, |source| FabricError::Network {
                id: transit_network_id.into(),
                source,
            })
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
        let subnet = net.get_subnet(&subnet_id).await.map_err(|e| {
            keystone_or(e, |e| FabricError::Subnet {
                id: subnet_id.clone(),
                message: e.to_string(),
            })
        })?;
        let cidr: Ipv4Net = subnet.cidr.parse().map_err(|_| FabricError::Subnet {
            id: subnet_id.clone(),
            message: format!("{} is not an IPv4 CIDR", subnet.cidr),
        })?;
        let rerr = |source| {
            keystone_or(source, |source| FabricError::Router {
                id: gateway_router_id.into(),
                source,
            })
        };
        let gateway = net.get_router(gateway_router_id).await.map_err(rerr)?;
        let q = PortQuery {
            network_id: Some(network.id.clone()),
            device_ids: vec![gateway_router_id.into()],
            ..Default::default()
        };
        let legs = net.list_ports(&q).await.map_err(rerr)?;
        if legs.is_empty() {
            return Err(FabricError::RouterNotOnTransit {
                router: gateway_router_id.into(),
                network: network.id,
            });
        }
        let ext = net
            .extensions()
            .await
            .map_err(|e| keystone_or(e, FabricError::Extensions))?;
        let ext = Extensions::from_aliases(&ext).ok_or(FabricError::NoSafeRouteUpdate)?;
        Ok(Fabric {
            operator_project_id: network.project_id,
            transit_network_id: network.id,
            transit_subnet_id: subnet_id,
            transit_subnet: cidr,
            gateway_router_id: gateway_router_id.into(),
            gateway_routes: gateway.routes.len(),
            extraroute_atomic: ext.extraroute_atomic,
            revision_if_match: ext.revision_if_match,
            tags_at_create: ext.tags_at_create,
            router_subnets_by_cidr: ext.router_subnets_by_cidr,
            admission: Admission::default(),
            customer_transit: None,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_pool_overlapping_the_transit_is_refused_naming_the_setting() {
        let pool = |p: &str| CustomerTransitPool {
            pool: p.parse().unwrap(),
            prefix_len: 28,
        };
        let transit: Ipv4Net = "10.254.0.0/24".parse().unwrap();
        assert!(pool("10.255.0.0/16").clear_of(transit).is_ok());
        for p in ["10.254.0.0/16", "10.254.0.128/25", "10.0.0.0/8"] {
            let e = pool(p).clear_of(transit).unwrap_err();
            assert!(
                e.setting.starts_with("IPSEC_PER_CUSTOMER_TRANSIT_POOL"),
                "{p}"
            );
            assert!(e.message.contains("10.254.0.0/24"), "{p}: {}", e.message);
        }
    }

    use async_trait::async_trait;

    use super::*;
    use crate::error::Result;
    use crate::types::*;

    fn aliases(list: &[&str]) -> Vec<String> {
        list.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn a_cidr_policy_bounds_ranges_and_width() {
        let net = |s: &str| -> Ipv4Net { s.parse().unwrap() };
        let p = CidrPolicy {
            ranges: vec![net("10.0.0.0/8"), net("100.64.0.0/10")],
            min_prefix_len: 12,
        };
        assert_eq!(p.admits(net("10.251.0.0/16")), Ok(()));
        assert_eq!(p.admits(net("100.64.0.0/12")), Ok(()));
        assert_eq!(p.admits(net("10.0.0.0/8")), Err(CidrRefusal::TooWide));
        assert_eq!(p.admits(net("0.0.0.0/1")), Err(CidrRefusal::TooWide));
        assert_eq!(
            p.admits(net("11.0.0.0/16")),
            Err(CidrRefusal::OutsideRanges)
        );
        // Straddling a range's edge is outside it.
        assert_eq!(p.admits(net("100.64.0.0/9")), Err(CidrRefusal::TooWide));
        assert_eq!(
            CidrPolicy {
                min_prefix_len: 0,
                ..p.clone()
            }
            .admits(net("100.0.0.0/8")),
            Err(CidrRefusal::OutsideRanges)
        );
        // Empty: admits all.
        assert_eq!(CidrPolicy::default().admits(net("0.0.0.0/1")), Ok(()));
        assert_eq!(p.ranges_text(), "10.0.0.0/8, 100.64.0.0/10");
        assert_eq!(CidrPolicy::default().ranges_text(), "any");
    }

    #[test]
    fn one_safe_way_to_change_routes_is_enough() {
        let e = Extensions::from_aliases(&aliases(&["router", EXTRAROUTE_ATOMIC])).unwrap();
        assert!(e.extraroute_atomic && !e.revision_if_match && !e.tags_at_create);
        let e = Extensions::from_aliases(&aliases(&[REVISION_IF_MATCH, TAGS_AT_CREATE])).unwrap();
        assert!(!e.extraroute_atomic && e.revision_if_match && e.tags_at_create);
    }

    #[test]
    fn no_safe_way_to_change_routes_refuses() {
        let ext = Extensions::from_aliases(&aliases(&["router", "extraroute", "tag-creation"]));
        assert_eq!(ext, None);
        let text = FabricError::NoSafeRouteUpdate.to_string();
        assert!(
            text.contains("`extraroute-atomic`") && text.contains("`revision-if-match`"),
            "{text}"
        );
    }

    /// A healthy fabric on a Neutron loading only `extensions`.
    struct Stub {
        extensions: Vec<String>,
        network_error: Option<CloudError>,
        /// The transit network as Neutron shows it; None: one subnet, not shared.
        network: Option<Network>,
    }

    fn unused<T>() -> Result<T> {
        Err(CloudError::auth("not used by Fabric::discover"))
    }

    #[async_trait]
    impl Neutron for Stub {
        async fn extensions(&self) -> Result<Vec<String>> {
            Ok(self.extensions.clone())
        }
        async fn get_network(&self, id: &str) -> Result<Network> {
            if let Some(e) = &self.network_error {
                return Err(e.clone());
            }
            if let Some(n) = &self.network {
                return Ok(n.clone());
            }
            Ok(Network {
                id: id.into(),
                subnets: vec!["s".into()],
                ..Default::default()
            })
        }
        async fn get_subnet(&self, id: &str) -> Result<Subnet> {
            Ok(Subnet {
                id: id.into(),
                network_id: "n".into(),
                cidr: "10.254.0.0/24".into(),
                ..Default::default()
            })
        }
        async fn list_ports(&self, _: &PortQuery) -> Result<Vec<Port>> {
            Ok(vec![Port {
                id: "leg".into(),
                network_id: "n".into(),
                device_id: "gw".into(),
                device_owner: OWNER_ROUTER_INTERFACE.into(),
                ..Default::default()
            }])
        }
        async fn get_port(&self, _: &str) -> Result<Port> {
            unused()
        }
        async fn create_port(&self, _: &CreatePort) -> Result<Port> {
            unused()
        }
        async fn add_port_tag(&self, _: &str, _: &str) -> Result<()> {
            unused()
        }
        async fn set_port_tags(&self, _: &str, _: &[String]) -> Result<()> {
            unused()
        }
        async fn delete_port(&self, _: &str) -> Result<()> {
            unused()
        }
        async fn get_router(&self, id: &str) -> Result<Router> {
            Ok(Router {
                id: id.into(),
                ..Default::default()
            })
        }
        async fn list_routers(&self, _: &RouterQuery) -> Result<Vec<Router>> {
            unused()
        }
        async fn add_router_interface(&self, _: &str, _: &str) -> Result<()> {
            unused()
        }
        async fn remove_router_interface(&self, _: &str, _: &str) -> Result<()> {
            unused()
        }
        async fn add_extraroutes(&self, _: &str, _: &[Route]) -> Result<Router> {
            unused()
        }
        async fn remove_extraroutes(&self, _: &str, _: &[Route]) -> Result<Router> {
            unused()
        }
        async fn set_routes(&self, _: &str, _: &[Route], _: Option<u64>) -> Result<Router> {
            unused()
        }
        async fn create_rbac_policy(&self, _: &ShareNetwork) -> Result<RbacPolicy> {
            unused()
        }
        async fn list_rbac_policies(&self, _: &str) -> Result<Vec<RbacPolicy>> {
            unused()
        }
        async fn list_rbac_policies_of(&self, _: &[String]) -> Result<Vec<RbacPolicy>> {
            unused()
        }
        async fn delete_rbac_policy(&self, _: &str) -> Result<()> {
            unused()
        }
        async fn list_networks(&self, _: &NetworkQuery) -> Result<Vec<Network>> {
            unused()
        }
        async fn list_subnets(&self, _: &SubnetQuery) -> Result<Vec<Subnet>> {
            unused()
        }
        async fn create_network(&self, _: &str) -> Result<Network> {
            unused()
        }
        async fn delete_network(&self, _: &str) -> Result<()> {
            unused()
        }
        async fn create_subnet_with(&self, _: &CreateSubnet) -> Result<Subnet> {
            unused()
        }
        async fn create_router_with(&self, _: &CreateRouter) -> Result<Router> {
            unused()
        }
        async fn delete_router(&self, _: &str) -> Result<()> {
            unused()
        }
        async fn add_router_subnet(&self, _: &str, _: &str) -> Result<String> {
            unused()
        }
        async fn probe_admin_read(&self) -> Result<()> {
            unused()
        }
        async fn quota_details(&self, _: &str) -> Result<Vec<crate::QuotaUsage>> {
            unused()
        }
    }

    #[tokio::test]
    async fn discover_refuses_a_neutron_without_safe_route_updates() {
        let bare = Stub {
            extensions: aliases(&["router", "extraroute", "standard-attr-tag"]),
            network_error: None,
            network: None,
        };
        let err = Fabric::discover(&bare, "n", "gw").await.unwrap_err();
        assert!(matches!(err, FabricError::NoSafeRouteUpdate), "{err}");

        let guarded = Stub {
            extensions: aliases(&["router", "extraroute", REVISION_IF_MATCH]),
            network_error: None,
            network: None,
        };
        let f = Fabric::discover(&guarded, "n", "gw").await.unwrap();
        assert!(!f.extraroute_atomic && f.revision_if_match);
        assert_eq!(f.transit_subnet.to_string(), "10.254.0.0/24");
    }

    /// "The operator fails fast, naming the setting, unless the transit network exists, is
    /// not shared to every project (`shared=true` is refused: "never `--share`"), has exactly
    /// one subnet" (docs/design.md, "The startup check"). Both are a fabric set up wrong, not
    /// a cloud that did not answer, and each message names the network, the setting and what
    /// is wrong with it.
    #[tokio::test]
    async fn discover_refuses_a_shared_transit_and_one_without_exactly_one_subnet() {
        let transit = |shared: bool, subnets: &[&str]| Stub {
            extensions: aliases(&[EXTRAROUTE_ATOMIC]),
            network_error: None,
            network: Some(Network {
                id: "n".into(),
                shared,
                subnets: subnets.iter().map(|s| s.to_string()).collect(),
                ..Default::default()
            }),
        };
        assert!(
            Fabric::discover(&transit(false, &["s"]), "n", "gw")
                .await
                .is_ok()
        );

        let err = Fabric::discover(&transit(true, &["s"]), "n", "gw")
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, FabricError::SharedNetwork(_)), "{text}");
        assert!(!err.is_unreachable(), "{text}");
        assert!(
            text.starts_with("transit network n (IPSEC_TRANSIT_NETWORK_ID)")
                && text.contains("shared=true")
                && text.contains("--share"),
            "{text}"
        );

        for subnets in [&["s", "t"][..], &[]] {
            let err = Fabric::discover(&transit(false, subnets), "n", "gw")
                .await
                .unwrap_err();
            let text = err.to_string();
            assert!(
                matches!(err, FabricError::SubnetCount { count, .. } if count == subnets.len()),
                "{text}"
            );
            assert!(!err.is_unreachable(), "{text}");
            assert!(
                text.starts_with("transit network n (IPSEC_TRANSIT_NETWORK_ID)")
                    && text.contains("exactly one subnet")
                    && text.contains(&format!("it has {}", subnets.len())),
                "{text}"
            );
        }
    }

    #[tokio::test]
    async fn keystone_failing_is_not_blamed_on_the_transit_network() {
        let down = |e: CloudError| Stub {
            extensions: aliases(&[EXTRAROUTE_ATOMIC]),
            network_error: Some(e),
            network: None,
        };
        let refused = CloudError::Transport {
            method: "POST".into(),
            path: crate::error::KEYSTONE_TOKENS_PATH.into(),
            message: "Connection refused".into(),
        };
        let err = Fabric::discover(&down(refused), "n", "gw")
            .await
            .unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, FabricError::Keystone(_)), "{text}");
        assert!(err.is_unreachable(), "{text}");
        assert!(
            text.starts_with("Keystone") && !text.contains("IPSEC_TRANSIT_NETWORK_ID"),
            "{text}"
        );

        let rejected = CloudError::Auth {
            status: Some(401),
            message: "Keystone answered HTTP 401 to the token request".into(),
        };
        let err = Fabric::discover(&down(rejected), "n", "gw")
            .await
            .unwrap_err();
        assert!(
            matches!(err, FabricError::Keystone(_)) && !err.is_unreachable(),
            "{err}"
        );

        // Neutron itself not answering is still about the call that failed.
        let neutron = CloudError::Transport {
            method: "GET".into(),
            path: "/v2.0/networks/n".into(),
            message: "Connection refused".into(),
        };
        let err = Fabric::discover(&down(neutron), "n", "gw")
            .await
            .unwrap_err();
        assert!(
            matches!(err, FabricError::Network { .. }) && err.is_unreachable(),
            "{err}"
        );
    }
}
