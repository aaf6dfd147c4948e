//! An in-memory Neutron (and the Keystone token facts the operator reads) that answers the way
//! Neutron 29 / Keystone 30 do for every behaviour in docs/design.md, "What Neutron and Keystone
//! do", with call counters and per-call fault injection. The integration suite runs the same
//! parametrised cases against this and the real lab to keep the two in step.
//!
//! Modules build upward without cycles: `world` (objects, handles, call entry) ← `policy`
//! (who sees and may use what) ← one module per resource (`networks`, `ports`, `routers`,
//! `rbac`, `quotas`, `keystone`). This file only maps the port's traits onto them.

mod faults;
mod keystone;
mod networks;
mod policy;
mod ports;
mod quotas;
mod rbac;
mod routers;
mod world;

use async_trait::async_trait;
use bnerd_cloud::{
    CreatePort, CreateRouter, CreateSubnet, Identity, Network, NetworkQuery, Neutron, Port,
    PortQuery, QuotaUsage, RbacPolicy, Result, Route, Router, RouterQuery, ShareNetwork, Subnet,
    SubnetQuery, TokenInfo,
};

pub use faults::{Fault, Op};
pub use world::{FakeCloud, FakeNeutron, NEUTRON_DEFAULT_QUOTAS};

#[async_trait]
impl Identity for FakeNeutron {
    async fn token_info(&self) -> Result<TokenInfo> {
        self.token().await
    }
}

#[async_trait]
impl Neutron for FakeNeutron {
    async fn extensions(&self) -> Result<Vec<String>> {
        self.extension_list().await
    }

    async fn get_network(&self, id: &str) -> Result<Network> {
        self.network_get(id).await
    }

    async fn get_subnet(&self, id: &str) -> Result<Subnet> {
        self.subnet_get(id).await
    }

    async fn list_ports(&self, q: &PortQuery) -> Result<Vec<Port>> {
        self.port_list(q).await
    }

    async fn get_port(&self, id: &str) -> Result<Port> {
        self.port_get(id).await
    }

    async fn create_port(&self, req: &CreatePort) -> Result<Port> {
        self.port_create(req).await
    }

    async fn add_port_tag(&self, port_id: &str, tag: &str) -> Result<()> {
        self.port_add_tag(port_id, tag).await
    }

    async fn set_port_tags(&self, port_id: &str, tags: &[String]) -> Result<()> {
        self.port_set_tags(port_id, tags).await
    }

    async fn delete_port(&self, id: &str) -> Result<()> {
        self.port_delete(id).await
    }

    async fn get_router(&self, id: &str) -> Result<Router> {
        self.router_get(id).await
    }

    async fn list_routers(&self, q: &RouterQuery) -> Result<Vec<Router>> {
        self.router_list(q).await
    }

    async fn add_router_interface(&self, router_id: &str, port_id: &str) -> Result<()> {
        self.router_add_interface(router_id, port_id).await
    }

    async fn remove_router_interface(&self, router_id: &str, port_id: &str) -> Result<()> {
        self.router_remove_interface(router_id, port_id).await
    }

    async fn add_extraroutes(&self, router_id: &str, routes: &[Route]) -> Result<Router> {
        self.router_add_extraroutes(router_id, routes).await
    }

    async fn remove_extraroutes(&self, router_id: &str, routes: &[Route]) -> Result<Router> {
        self.router_remove_extraroutes(router_id, routes).await
    }

    async fn set_routes(
        &self,
        router_id: &str,
        routes: &[Route],
        if_revision: Option<u64>,
    ) -> Result<Router> {
        self.router_set_routes(router_id, routes, if_revision).await
    }

    async fn create_rbac_policy(&self, req: &ShareNetwork) -> Result<RbacPolicy> {
        self.rbac_create(req).await
    }

    async fn list_rbac_policies(&self, object_id: &str) -> Result<Vec<RbacPolicy>> {
        self.rbac_list(&[object_id.to_string()]).await
    }

    async fn list_rbac_policies_of(&self, object_ids: &[String]) -> Result<Vec<RbacPolicy>> {
        if object_ids.is_empty() {
            return Ok(vec![]);
        }
        self.rbac_list(object_ids).await
    }

    async fn delete_rbac_policy(&self, id: &str) -> Result<()> {
        self.rbac_delete(id).await
    }

    async fn probe_admin_read(&self) -> Result<()> {
        self.quota_details_probe().await
    }

    async fn quota_details(&self, project_id: &str) -> Result<Vec<QuotaUsage>> {
        FakeNeutron::quota_details(self, project_id).await
    }

    async fn list_networks(&self, q: &NetworkQuery) -> Result<Vec<Network>> {
        self.network_list(q).await
    }

    async fn list_subnets(&self, q: &SubnetQuery) -> Result<Vec<Subnet>> {
        self.subnet_list(q).await
    }

    async fn create_network(&self, name: &str) -> Result<Network> {
        self.network_create(name).await
    }

    async fn delete_network(&self, id: &str) -> Result<()> {
        self.network_delete(id).await
    }

    async fn create_subnet_with(&self, req: &CreateSubnet) -> Result<Subnet> {
        self.subnet_create(req).await
    }

    async fn create_router_with(&self, req: &CreateRouter) -> Result<Router> {
        self.router_create(req).await
    }

    async fn delete_router(&self, id: &str) -> Result<()> {
        self.router_delete(id).await
    }

    async fn add_router_subnet(&self, router_id: &str, subnet_id: &str) -> Result<String> {
        self.router_add_subnet(router_id, subnet_id).await
    }
}
