//! The OpenStack side of the operator: the port (traits the reconciler talks to), typed
//! errors that keep Neutron's error type, a thin HTTP implementation for the few
//! Keystone and Neutron calls the operator makes, and the startup check of the fabric.

pub mod auth;
pub mod error;
pub mod fabric;
pub mod http;
pub mod observe;
pub mod refusals;
pub mod secret;
pub mod types;

pub use auth::{AuthConfig, AuthMethod, CaBundle, ConfigError, TlsConfig};
pub use error::{CloudError, NeutronErrorKind, Result, error_chain};
pub use http::{MAX_BODY_BYTES, MAX_INLINE_RETRY_AFTER, MAX_PAGES, OpenStack, POOL_IDLE};
pub use secret::SecretString;
pub use types::*;

use async_trait::async_trait;

/// Neutron as the operator uses it. Every method is one HTTP call on the real cloud, except a
/// list the cloud answers in pages (one call per page), so call counts measured on any
/// implementation are the cloud's call counts for lists that fit one page.
#[async_trait]
pub trait Neutron: Send + Sync {
    /// Aliases of the loaded API extensions.
    async fn extensions(&self) -> Result<Vec<String>>;
    async fn get_network(&self, id: &str) -> Result<Network>;
    async fn get_subnet(&self, id: &str) -> Result<Subnet>;
    async fn list_ports(&self, query: &PortQuery) -> Result<Vec<Port>>;
    async fn get_port(&self, id: &str) -> Result<Port>;
    async fn create_port(&self, req: &CreatePort) -> Result<Port>;
    /// `PUT /ports/{id}/tags/{tag}`: adds one tag, idempotent.
    async fn add_port_tag(&self, port_id: &str, tag: &str) -> Result<()>;
    /// `PUT /ports/{id}/tags`: replaces all tags in one call.
    async fn set_port_tags(&self, port_id: &str, tags: &[String]) -> Result<()>;
    async fn delete_port(&self, id: &str) -> Result<()>;
    async fn get_router(&self, id: &str) -> Result<Router>;
    async fn list_routers(&self, query: &RouterQuery) -> Result<Vec<Router>>;
    /// Attach an existing port to a router.
    async fn add_router_interface(&self, router_id: &str, port_id: &str) -> Result<()>;
    /// Detach a port from a router. Neutron deletes the port as part of this.
    async fn remove_router_interface(&self, router_id: &str, port_id: &str) -> Result<()>;
    /// extraroute-atomic: add routes without touching others.
    async fn add_extraroutes(&self, router_id: &str, routes: &[Route]) -> Result<Router>;
    /// extraroute-atomic: remove exactly these routes.
    async fn remove_extraroutes(&self, router_id: &str, routes: &[Route]) -> Result<Router>;
    /// Replace the whole route table, guarded by `If-Match: revision_number=N` when given.
    async fn set_routes(
        &self,
        router_id: &str,
        routes: &[Route],
        if_revision: Option<u64>,
    ) -> Result<Router>;
    /// `POST /rbac-policies` on a network.
    async fn create_rbac_policy(&self, req: &ShareNetwork) -> Result<RbacPolicy>;
    /// `GET /rbac-policies?object_id=`: only the caller's own policies are listed.
    async fn list_rbac_policies(&self, object_id: &str) -> Result<Vec<RbacPolicy>>;
    /// `GET /rbac-policies?object_id=a&object_id=b…`: the caller's own policies on any of
    /// these objects, in one call. None named: none listed, and no call.
    async fn list_rbac_policies_of(&self, object_ids: &[String]) -> Result<Vec<RbacPolicy>>;
    async fn delete_rbac_policy(&self, id: &str) -> Result<()>;
    /// The privilege probe, [`ADMIN_READ_PROBE`]: the quota usage of a project that is not
    /// the caller's. Neutron's quota-details controller answers it only when the request
    /// context is cloud admin (`context.is_admin`, decided by the `context_is_admin` rule), so
    /// it is Ok for `admin` and for any role a customised `context_is_admin` names, and 403
    /// `AdminRequired` for a member (a project `manager` too, measured, where `GET
    /// /quotas/{id}` would answer it 200). A pure read: Neutron counts, writes no usage rows.
    async fn probe_admin_read(&self) -> Result<()>;
    /// `GET /quotas/{project}/details`: limits and usage of the caller's own project (any
    /// project for a cloud admin; 403 `AdminRequired` for another's), sorted by resource.
    async fn quota_details(&self, project_id: &str) -> Result<Vec<QuotaUsage>>;

    // The per-customer fabric (docs/design.md, "Per-customer transit"): the operator builds a
    // small network, its subnet and an edge router per customer project; tests and the lab
    // build whole fabrics with the same calls.
    async fn list_networks(&self, query: &NetworkQuery) -> Result<Vec<Network>>;
    async fn list_subnets(&self, query: &SubnetQuery) -> Result<Vec<Subnet>>;
    async fn create_network(&self, name: &str) -> Result<Network>;
    /// Deletes its subnets too; refused (409 NetworkInUse) while ports other than Neutron's
    /// own are on it.
    async fn delete_network(&self, id: &str) -> Result<()>;
    async fn create_subnet_with(&self, req: &CreateSubnet) -> Result<Subnet>;
    /// A subnet with Neutron's defaults (DHCP on), as an admin's `openstack subnet create`.
    async fn create_subnet(
        &self,
        network_id: &str,
        cidr: &str,
        gateway_ip: &str,
    ) -> Result<Subnet> {
        self.create_subnet_with(&CreateSubnet {
            network_id: network_id.into(),
            cidr: cidr.into(),
            gateway_ip: gateway_ip.into(),
            dhcp: true,
        })
        .await
    }
    /// `POST /routers`; `project_id`, `ha` and `distributed` are sent only when set (the
    /// latter two need an admin, as with `openstack router create --ha|--distributed`).
    async fn create_router_with(&self, req: &CreateRouter) -> Result<Router>;
    async fn create_router(&self, name: &str) -> Result<Router> {
        self.create_router_with(&CreateRouter {
            name: name.into(),
            ..Default::default()
        })
        .await
    }
    async fn delete_router(&self, id: &str) -> Result<()>;
    /// Attach a subnet (Neutron creates the port at the subnet's gateway IP); returns the port ID.
    async fn add_router_subnet(&self, router_id: &str, subnet_id: &str) -> Result<String>;
}

/// The project [`Neutron::probe_admin_read`] asks about. Neutron does not check that it
/// exists, and Keystone never issues it (its project IDs are random UUIDs), so it is never the
/// caller's own project, for which a member is answered 200.
pub const ADMIN_READ_PROBE_PROJECT: &str = "00000000000000000000000000000000";

/// [`Neutron::probe_admin_read`]'s call as condition messages name it.
pub const ADMIN_READ_PROBE: &str = "GET /v2.0/quotas/00000000000000000000000000000000/details";

/// Keystone as the operator uses it: who the current credential is.
#[async_trait]
pub trait Identity: Send + Sync {
    /// The token of the current credential (authenticating if needed).
    async fn token_info(&self) -> Result<TokenInfo>;
}
