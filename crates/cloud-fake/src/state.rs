//! The fake's world (every project's objects) and per-credential handles on it.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;
use bnerd_cloud::{
    CloudError, CreatePort, CreateRouter, FixedIp, Identity, MAX_TAGS, Network, Neutron,
    NeutronAdmin, OWNER_ROUTER_INTERFACE, Port, PortQuery, RbacPolicy, Result, Route, Router,
    RouterQuery, ShareNetwork, Subnet, TokenInfo,
};
use ipnet::Ipv4Net;

use crate::faults::{Fault, Op, PlannedFault};
use crate::keystone::AppCred;

/// Neutron's default `router_route` quota per router.
pub const MAX_ROUTES: usize = 30;

#[derive(Default)]
pub(crate) struct World {
    pub(crate) networks: BTreeMap<String, Network>,
    pub(crate) subnets: BTreeMap<String, Subnet>,
    pub(crate) ports: BTreeMap<String, Port>,
    pub(crate) routers: BTreeMap<String, Router>,
    pub(crate) rbac: BTreeMap<String, RbacPolicy>,
    pub(crate) app_creds: BTreeMap<String, AppCred>,
    faults: Vec<PlannedFault>,
    calls: BTreeMap<Op, u64>,
    honour_create_tags: bool,
}

/// The shared in-memory cloud. Clone handles with [`FakeCloud::client`].
#[derive(Clone, Default)]
pub struct FakeCloud {
    pub(crate) world: Arc<Mutex<World>>,
}

/// One credential's view of the fake cloud: it sees its own project's objects (and, as a
/// network owner, every port on its networks), as Neutron's policy does for a member.
#[derive(Clone)]
pub struct FakeNeutron {
    pub(crate) world: Arc<Mutex<World>>,
    pub(crate) project_id: String,
    pub(crate) roles: Vec<String>,
    pub(crate) admin: bool,
    /// Set when this handle authenticates with an application credential: every call checks
    /// it is still valid, as Keystone revokes a deleted credential's tokens.
    pub(crate) app_cred: Option<(String, String)>,
}

pub(crate) fn api(
    method: &str,
    path: &str,
    status: u16,
    kind: &str,
    message: String,
) -> CloudError {
    CloudError::Api {
        method: method.into(),
        path: path.into(),
        status,
        kind: kind.into(),
        message,
    }
}

pub(crate) fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

impl FakeCloud {
    pub fn new() -> Self {
        Self::default()
    }

    /// A member credential of `project_id`.
    pub fn client(&self, project_id: &str) -> FakeNeutron {
        FakeNeutron {
            world: self.world.clone(),
            project_id: project_id.into(),
            roles: vec!["member".into(), "reader".into()],
            admin: false,
            app_cred: None,
        }
    }

    /// A cloud-admin credential (sees and may touch everything).
    pub fn admin(&self, project_id: &str) -> FakeNeutron {
        FakeNeutron {
            admin: true,
            roles: vec!["admin".into(), "member".into(), "reader".into()],
            ..self.client(project_id)
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keep `tags` sent in a port's create body and list `tag-ports-during-bulk-creation`, as
    /// Neutron does with ML2's `tag_ports_during_bulk_creation` driver. Off by default, as in
    /// the lab: without the driver the tags are dropped (`tag-creation`, listed either way,
    /// is only `POST /{resource}/{id}/tags`).
    pub fn honour_create_tags(self, on: bool) -> Self {
        self.lock().honour_create_tags = on;
        self
    }

    /// Inject `fault` into the next `times` calls of `op`.
    pub fn inject(&self, op: Op, fault: Fault, times: usize) {
        self.lock().faults.push(PlannedFault {
            op,
            fault,
            remaining: times,
        });
    }

    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// Calls made so far, per operation.
    pub fn calls(&self) -> BTreeMap<Op, u64> {
        self.lock().calls.clone()
    }

    /// (reads, writes) made so far.
    pub fn read_write_counts(&self) -> (u64, u64) {
        let calls = self.calls();
        let reads = calls
            .iter()
            .filter(|(op, _)| op.is_read())
            .map(|(_, n)| n)
            .sum();
        let writes = calls
            .iter()
            .filter(|(op, _)| !op.is_read())
            .map(|(_, n)| n)
            .sum();
        (reads, writes)
    }

    pub fn reset_counters(&self) {
        self.lock().calls.clear();
    }

    /// Every port, as an admin would list them (for assertions).
    pub fn all_ports(&self) -> Vec<Port> {
        self.lock().ports.values().cloned().collect()
    }

    /// A router as an admin would see it (for assertions).
    pub fn router(&self, id: &str) -> Option<Router> {
        self.lock().routers.get(id).cloned()
    }
}

impl FakeNeutron {
    pub(crate) fn lock(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count the call and apply a planned fault. Returns true when the call must report a
    /// timeout after committing.
    async fn enter(&self, op: Op, method: &str, path: &str) -> Result<bool> {
        let fault = {
            let mut w = self.lock();
            *w.calls.entry(op).or_default() += 1;
            if let Some((id, secret)) = &self.app_cred {
                crate::keystone::check_app_cred(&w, id, secret)?;
            }
            let hit = w.faults.iter_mut().find(|f| f.op == op && f.remaining > 0);
            hit.map(|f| {
                f.remaining -= 1;
                f.fault.clone()
            })
        };
        match fault {
            None => Ok(false),
            Some(Fault::Error {
                status,
                kind,
                message,
            }) => Err(api(method, path, status, &kind, message)),
            Some(Fault::Latency(d)) => {
                tokio::time::sleep(d).await;
                Ok(false)
            }
            Some(Fault::CommitThenTimeout) => Ok(true),
        }
    }

    pub(crate) async fn run<T>(
        &self,
        op: Op,
        method: &str,
        path: &str,
        f: impl FnOnce(&mut World) -> Result<T>,
    ) -> Result<T> {
        let timeout_after = self.enter(op, method, path).await?;
        let out = f(&mut self.lock());
        if timeout_after {
            return Err(CloudError::Timeout {
                method: method.into(),
                path: path.into(),
            });
        }
        out
    }

    pub(crate) fn owns(&self, project: &str) -> bool {
        self.admin || project == self.project_id
    }

    /// The caller may use this network: it owns it, or the network is shared with its
    /// project (globally or by an `access_as_shared` RBAC policy).
    pub(crate) fn can_use(&self, w: &World, net: &Network) -> bool {
        self.owns(&net.project_id) || crate::rbac::shared_with(w, net, &self.project_id)
    }

    /// A network as this caller sees it: `shared` is true only for a project it is shared
    /// with, never for the owner of an RBAC-shared network.
    fn network_view(&self, w: &World, net: &Network) -> Network {
        Network {
            shared: net.shared
                || crate::rbac::shared_with_all(w, &net.id)
                || (net.project_id != self.project_id
                    && crate::rbac::shared_with(w, net, &self.project_id)),
            ..net.clone()
        }
    }

    /// Neutron lets only the owner (or an admin) change a port's tags.
    fn port_for_tags(&self, w: &World, port_id: &str, path: &str) -> Result<()> {
        let port = w
            .ports
            .get(port_id)
            .filter(|p| self.port_visible(w, p))
            .ok_or_else(|| port_not_found("PUT", path, port_id))?;
        if !self.owns(&port.project_id) {
            return Err(api(
                "PUT",
                path,
                403,
                "PolicyNotAuthorized",
                "rule:update_port:tags is disallowed by policy".into(),
            ));
        }
        Ok(())
    }

    fn port_visible(&self, w: &World, p: &Port) -> bool {
        self.owns(&p.project_id)
            || w.networks
                .get(&p.network_id)
                .is_some_and(|n| self.owns(&n.project_id))
    }

    fn router_of<'w>(
        &self,
        w: &'w World,
        id: &str,
        method: &str,
        path: &str,
    ) -> Result<&'w Router> {
        w.routers
            .get(id)
            .filter(|r| self.owns(&r.project_id))
            .ok_or_else(|| {
                api(
                    method,
                    path,
                    404,
                    "RouterNotFound",
                    format!("Router {id} could not be found"),
                )
            })
    }
}

fn too_many_tags(path: &str) -> CloudError {
    api(
        "PUT",
        path,
        400,
        "BadRequest",
        format!(
            "Bad ports request: The number of tags exceed the per-resource limit of {MAX_TAGS}."
        ),
    )
}

fn port_not_found(method: &str, path: &str, id: &str) -> CloudError {
    api(
        method,
        path,
        404,
        "PortNotFound",
        format!("Port {id} could not be found."),
    )
}

fn subnet_net(s: &Subnet) -> Option<Ipv4Net> {
    s.cidr.parse().ok()
}

/// Subnets a router has an interface on, with the interface IPs.
fn router_interfaces(w: &World, router_id: &str) -> Vec<(Subnet, String)> {
    w.ports
        .values()
        .filter(|p| p.is_interface_of(router_id))
        .flat_map(|p| {
            p.fixed_ips.iter().filter_map(|f| {
                w.subnets
                    .get(&f.subnet_id)
                    .map(|s| (s.clone(), f.ip_address.clone()))
            })
        })
        .collect()
}

fn py_routes(routes: &[Route]) -> String {
    let items: Vec<String> = routes
        .iter()
        .map(|r| {
            format!(
                "{{'destination': '{}', 'nexthop': '{}'}}",
                r.destination, r.nexthop
            )
        })
        .collect();
    format!("[{}]", items.join(", "))
}

/// Neutron's extraroute validation: valid CIDR, nexthop on a connected subnet, not the
/// router's own address.
fn validate_routes(
    w: &World,
    router_id: &str,
    routes: &[Route],
    method: &str,
    path: &str,
) -> Result<()> {
    let ifaces = router_interfaces(w, router_id);
    for r in routes {
        if r.destination.parse::<ipnet::IpNet>().is_err() {
            // The extraroute-atomic actions parse with netaddr; PUT runs the API validator.
            return Err(if path.ends_with("extraroutes") {
                api(
                    method,
                    path,
                    400,
                    "AddrFormatError",
                    format!("invalid IPNetwork {}", r.destination),
                )
            } else {
                api(
                    method,
                    path,
                    400,
                    "HTTPBadRequest",
                    format!(
                        "Invalid input for routes. Reason: '{}' is not a valid CIDR.",
                        r.destination
                    ),
                )
            });
        }
        let hop: Option<Ipv4Addr> = r.nexthop.parse().ok();
        let connected = hop.is_some_and(|h| {
            ifaces
                .iter()
                .any(|(s, _)| subnet_net(s).is_some_and(|n| n.contains(&h)))
        });
        if !connected {
            return Err(api(
                method,
                path,
                400,
                "InvalidRoutes",
                format!(
                    "Invalid format for routes: {}, the nexthop is not connected with router",
                    py_routes(routes)
                ),
            ));
        }
        if ifaces.iter().any(|(_, ip)| *ip == r.nexthop) {
            return Err(api(
                method,
                path,
                400,
                "InvalidRoutes",
                format!(
                    "Invalid format for routes: {}, the nexthop is used by router",
                    py_routes(routes)
                ),
            ));
        }
    }
    Ok(())
}

fn check_route_quota(_router: &Router, count: usize, method: &str, path: &str) -> Result<()> {
    if count > MAX_ROUTES {
        return Err(api(
            method,
            path,
            409,
            "OverQuota",
            "Quota exceeded for resources: ['router_route'].".into(),
        ));
    }
    Ok(())
}

#[async_trait]
impl Identity for FakeNeutron {
    async fn token_info(&self) -> Result<TokenInfo> {
        self.run(Op::TokenInfo, "POST", "/v3/auth/tokens", |_| {
            Ok(TokenInfo {
                project_id: self.project_id.clone(),
                project_name: self.project_id.clone(),
                user_id: format!("user-of-{}", self.project_id),
                roles: self.roles.clone(),
                application_credential_id: self.app_cred.as_ref().map(|(id, _)| id.clone()),
                // Keystone creates application credentials restricted unless told otherwise.
                application_credential_restricted: self.app_cred.as_ref().map(|_| true),
            })
        })
        .await
    }
}

#[async_trait]
impl Neutron for FakeNeutron {
    async fn extensions(&self) -> Result<Vec<String>> {
        self.run(Op::Extensions, "GET", "/extensions", |w| {
            let mut ext = [
                "extraroute",
                "extraroute-atomic",
                "rbac-policies",
                "revision-if-match",
                "standard-attr-revisions",
                "tag-creation",
                "standard-attr-tag",
            ]
            .map(String::from)
            .to_vec();
            if w.honour_create_tags {
                ext.push("tag-ports-during-bulk-creation".into());
            }
            Ok(ext)
        })
        .await
    }

    async fn get_network(&self, id: &str) -> Result<Network> {
        let path = format!("/networks/{id}");
        self.run(Op::GetNetwork, "GET", &path, |w| {
            w.networks
                .get(id)
                .filter(|n| self.can_use(w, n))
                .map(|n| self.network_view(w, n))
                .ok_or_else(|| {
                    api(
                        "GET",
                        &path,
                        404,
                        "NetworkNotFound",
                        format!("Network {id} could not be found."),
                    )
                })
        })
        .await
    }

    async fn get_subnet(&self, id: &str) -> Result<Subnet> {
        let path = format!("/subnets/{id}");
        self.run(Op::GetSubnet, "GET", &path, |w| {
            w.subnets
                .get(id)
                .filter(|s| {
                    self.owns(&s.project_id)
                        || w.networks
                            .get(&s.network_id)
                            .is_some_and(|n| self.can_use(w, n))
                })
                .cloned()
                .ok_or_else(|| {
                    api(
                        "GET",
                        &path,
                        404,
                        "SubnetNotFound",
                        format!("Subnet {id} could not be found."),
                    )
                })
        })
        .await
    }

    async fn list_ports(&self, q: &PortQuery) -> Result<Vec<Port>> {
        self.run(Op::ListPorts, "GET", "/ports", |w| {
            Ok(w.ports
                .values()
                .filter(|p| self.port_visible(w, p))
                .filter(|p| q.network_id.as_ref().is_none_or(|n| &p.network_id == n))
                .filter(|p| q.device_id.as_ref().is_none_or(|d| &p.device_id == d))
                .filter(|p| q.ip_address.as_ref().is_none_or(|ip| p.has_ip(ip)))
                .filter(|p| q.tags_match(p))
                .cloned()
                .collect())
        })
        .await
    }

    async fn get_port(&self, id: &str) -> Result<Port> {
        let path = format!("/ports/{id}");
        self.run(Op::GetPort, "GET", &path, |w| {
            w.ports
                .get(id)
                .filter(|p| self.port_visible(w, p))
                .cloned()
                .ok_or_else(|| port_not_found("GET", &path, id))
        })
        .await
    }

    async fn create_port(&self, req: &CreatePort) -> Result<Port> {
        self.run(Op::CreatePort, "POST", "/ports", |w| {
            let net = w
                .networks
                .get(&req.network_id)
                .filter(|n| self.can_use(w, n))
                .cloned()
                .ok_or_else(|| {
                    api("POST", "/ports", 404, "NetworkNotFound", format!("Network {} could not be found.", req.network_id))
                })?;
            // Neutron's policy: on a network shared with it, a project may ask for a subnet
            // but not for an address.
            if req.ip_address.is_some() && !self.owns(&net.project_id) {
                return Err(api(
                    "POST",
                    "/ports",
                    403,
                    "PolicyNotAuthorized",
                    "(rule:create_port and (rule:create_port:fixed_ips and (rule:create_port:fixed_ips:subnet_id and rule:create_port:fixed_ips:ip_address))) is disallowed by policy".into(),
                ));
            }
            let subnets: Vec<Subnet> = net
                .subnets
                .iter()
                .filter_map(|s| w.subnets.get(s))
                .filter(|s| req.subnet_id.as_ref().is_none_or(|id| &s.id == id))
                .cloned()
                .collect();
            let taken = |w: &World, ip: &str| w.ports.values().any(|p| p.network_id == net.id && p.has_ip(ip));
            let (subnet, ip) = match &req.ip_address {
                Some(ip) => {
                    let addr: Option<Ipv4Addr> = ip.parse().ok();
                    let subnet = subnets
                        .iter()
                        .find(|s| addr.is_some_and(|a| subnet_net(s).is_some_and(|n| n.contains(&a))))
                        .ok_or_else(|| match req.subnet_id {
                            Some(_) => api(
                                "POST",
                                "/ports",
                                400,
                                "InvalidIpForSubnet",
                                format!("IP address {ip} is not a valid IP for the specified subnet."),
                            ),
                            None => api(
                                "POST",
                                "/ports",
                                400,
                                "InvalidIpForNetwork",
                                format!("IP address {ip} is not a valid IP for any of the subnets on the specified network."),
                            ),
                        })?;
                    if taken(w, ip) {
                        return Err(api(
                            "POST",
                            "/ports",
                            409,
                            "IpAddressAlreadyAllocated",
                            format!("IP address {ip} already allocated in subnet {}", subnet.id),
                        ));
                    }
                    (subnet.clone(), ip.clone())
                }
                None => {
                    // Neutron picks a random free address, so nothing may rely on its order.
                    let mut found = None;
                    for s in &subnets {
                        let Some(n) = subnet_net(s) else { continue };
                        let gw = s.gateway_ip.clone().unwrap_or_default();
                        let free: Vec<String> =
                            n.hosts().map(|a| a.to_string()).filter(|a| *a != gw && !taken(w, a)).collect();
                        if !free.is_empty() {
                            let pick = (uuid::Uuid::new_v4().as_u128() % free.len() as u128) as usize;
                            found = Some((s.clone(), free[pick].clone()));
                            break;
                        }
                    }
                    found.ok_or_else(|| {
                        api("POST", "/ports", 409, "IpAddressGenerationFailure", format!("No more IP addresses available on network {}.", net.id))
                    })?
                }
            };
            let port = Port {
                id: new_id(),
                name: req.name.clone(),
                network_id: net.id.clone(),
                project_id: self.project_id.clone(),
                device_id: String::new(),
                device_owner: String::new(),
                fixed_ips: vec![FixedIp { subnet_id: subnet.id.clone(), ip_address: ip }],
                description: req.description.clone(),
                tags: if w.honour_create_tags { req.tags.clone() } else { vec![] },
                revision_number: 1,
            };
            w.ports.insert(port.id.clone(), port.clone());
            Ok(port)
        })
        .await
    }

    async fn add_port_tag(&self, port_id: &str, tag: &str) -> Result<()> {
        let path = format!("/ports/{port_id}/tags/{tag}");
        self.run(Op::AddPortTag, "PUT", &path, |w| {
            self.port_for_tags(w, port_id, &path)?;
            if w.ports
                .get(port_id)
                .is_some_and(|p| !p.has_tag(tag) && p.tags.len() >= MAX_TAGS)
            {
                return Err(too_many_tags(&path));
            }
            if let Some(p) = w.ports.get_mut(port_id)
                && !p.has_tag(tag)
            {
                p.tags.push(tag.to_string());
                p.revision_number += 1;
            }
            Ok(())
        })
        .await
    }

    async fn set_port_tags(&self, port_id: &str, tags: &[String]) -> Result<()> {
        let path = format!("/ports/{port_id}/tags");
        self.run(Op::SetPortTags, "PUT", &path, |w| {
            self.port_for_tags(w, port_id, &path)?;
            let distinct: std::collections::BTreeSet<&String> = tags.iter().collect();
            if distinct.len() > MAX_TAGS {
                return Err(too_many_tags(&path));
            }
            if let Some(p) = w.ports.get_mut(port_id) {
                p.tags = tags.to_vec();
                p.revision_number += 1;
            }
            Ok(())
        })
        .await
    }

    async fn delete_port(&self, id: &str) -> Result<()> {
        let path = format!("/ports/{id}");
        self.run(Op::DeletePort, "DELETE", &path, |w| {
            let p = w.ports.get(id).filter(|p| self.port_visible(w, p)).ok_or_else(|| port_not_found("DELETE", &path, id))?;
            if p.device_owner.starts_with(OWNER_ROUTER_INTERFACE) {
                return Err(api(
                    "DELETE",
                    &path,
                    409,
                    "ServicePortInUse",
                    format!("Port {id} cannot be deleted directly via the port API: has device owner {}.", p.device_owner),
                ));
            }
            w.ports.remove(id);
            Ok(())
        })
        .await
    }

    async fn get_router(&self, id: &str) -> Result<Router> {
        let path = format!("/routers/{id}");
        self.run(Op::GetRouter, "GET", &path, |w| {
            self.router_of(w, id, "GET", &path).cloned()
        })
        .await
    }

    async fn list_routers(&self, q: &RouterQuery) -> Result<Vec<Router>> {
        self.run(Op::ListRouters, "GET", "/routers", |w| {
            Ok(w.routers
                .values()
                .filter(|r| self.owns(&r.project_id))
                .filter(|r| q.name.as_ref().is_none_or(|n| &r.name == n))
                .filter(|r| q.ids.is_empty() || q.ids.contains(&r.id))
                .cloned()
                .collect())
        })
        .await
    }

    async fn add_router_interface(&self, router_id: &str, port_id: &str) -> Result<()> {
        let path = format!("/routers/{router_id}/add_router_interface");
        let m = "PUT";
        self.run(Op::AddRouterInterface, m, &path, |w| {
            let router = self.router_of(w, router_id, m, &path)?.clone();
            let port = w
                .ports
                .get(port_id)
                .filter(|p| self.port_visible(w, p))
                .cloned()
                .ok_or_else(|| port_not_found(m, &path, port_id))?;
            if !self.admin && port.project_id != router.project_id {
                return Err(api(
                    m,
                    &path,
                    409,
                    "DeviceIDNotOwnedByTenant",
                    format!("The following device_id {router_id} is not owned by your project or matches another project router."),
                ));
            }
            if !port.device_id.is_empty() {
                return Err(api(
                    m,
                    &path,
                    409,
                    "PortInUse",
                    format!(
                        "Unable to complete operation on port {port_id} for network {}. Port already has an attached device {}.",
                        port.network_id, port.device_id
                    ),
                ));
            }
            let on_subnets: Vec<String> = router_interfaces(w, router_id).into_iter().map(|(s, _)| s.id).collect();
            if let Some(f) = port.fixed_ips.iter().find(|f| on_subnets.contains(&f.subnet_id)) {
                return Err(api(
                    m,
                    &path,
                    400,
                    "BadRequest",
                    format!("Bad router request: Router already has a port on subnet {}.", f.subnet_id),
                ));
            }
            if let Some(p) = w.ports.get_mut(port_id) {
                p.device_id = router_id.to_string();
                p.device_owner = OWNER_ROUTER_INTERFACE.to_string();
                p.revision_number += 1;
            }
            if let Some(r) = w.routers.get_mut(router_id) {
                r.revision_number += 1;
            }
            Ok(())
        })
        .await
    }

    async fn remove_router_interface(&self, router_id: &str, port_id: &str) -> Result<()> {
        let path = format!("/routers/{router_id}/remove_router_interface");
        let m = "PUT";
        self.run(Op::RemoveRouterInterface, m, &path, |w| {
            let router = self.router_of(w, router_id, m, &path)?.clone();
            let port = w.ports.get(port_id).filter(|p| p.is_interface_of(router_id)).cloned().ok_or_else(|| {
                api(m, &path, 404, "RouterInterfaceNotFound", format!("Router {router_id} does not have an interface with id {port_id}"))
            })?;
            for f in &port.fixed_ips {
                let Some(net) = w.subnets.get(&f.subnet_id).and_then(subnet_net) else { continue };
                let needed = router.routes.iter().any(|r| r.nexthop.parse::<Ipv4Addr>().is_ok_and(|h| net.contains(&h)));
                if needed {
                    return Err(api(
                        m,
                        &path,
                        409,
                        "RouterInterfaceInUseByRoute",
                        format!(
                            "Router interface for subnet {} on router {router_id} cannot be deleted, as it is required by one or more routes.",
                            f.subnet_id
                        ),
                    ));
                }
            }
            // Neutron deletes an interface port when it is detached.
            w.ports.remove(port_id);
            if let Some(r) = w.routers.get_mut(router_id) {
                r.revision_number += 1;
            }
            Ok(())
        })
        .await
    }

    async fn add_extraroutes(&self, router_id: &str, routes: &[Route]) -> Result<Router> {
        let path = format!("/routers/{router_id}/add_extraroutes");
        self.run(Op::AddExtraroutes, "PUT", &path, |w| {
            let router = self.router_of(w, router_id, "PUT", &path)?.clone();
            validate_routes(w, router_id, routes, "PUT", &path)?;
            let mut next = router.routes.clone();
            for r in routes {
                if !next.contains(r) {
                    next.push(r.clone());
                }
            }
            check_route_quota(&router, next.len(), "PUT", &path)?;
            let r = w
                .routers
                .get_mut(router_id)
                .ok_or_else(|| api("PUT", &path, 404, "RouterNotFound", String::new()))?;
            if next != r.routes {
                r.routes = next;
                r.revision_number += 1;
            }
            Ok(r.clone())
        })
        .await
    }

    async fn remove_extraroutes(&self, router_id: &str, routes: &[Route]) -> Result<Router> {
        let path = format!("/routers/{router_id}/remove_extraroutes");
        self.run(Op::RemoveExtraroutes, "PUT", &path, |w| {
            self.router_of(w, router_id, "PUT", &path)?;
            let r = w
                .routers
                .get_mut(router_id)
                .ok_or_else(|| api("PUT", &path, 404, "RouterNotFound", String::new()))?;
            let before = r.routes.len();
            r.routes.retain(|x| !routes.contains(x));
            if r.routes.len() != before {
                r.revision_number += 1;
            }
            Ok(r.clone())
        })
        .await
    }

    async fn set_routes(
        &self,
        router_id: &str,
        routes: &[Route],
        if_revision: Option<u64>,
    ) -> Result<Router> {
        let path = format!("/routers/{router_id}");
        self.run(Op::SetRoutes, "PUT", &path, |w| {
            let router = self.router_of(w, router_id, "PUT", &path)?.clone();
            if let Some(rev) = if_revision
                && rev != router.revision_number
            {
                return Err(api(
                    "PUT",
                    &path,
                    412,
                    "RevisionNumberConstraintFailed",
                    format!(
                        "Constrained to {rev}, but current revision is {}",
                        router.revision_number
                    ),
                ));
            }
            validate_routes(w, router_id, routes, "PUT", &path)?;
            check_route_quota(&router, routes.len(), "PUT", &path)?;
            let r = w
                .routers
                .get_mut(router_id)
                .ok_or_else(|| api("PUT", &path, 404, "RouterNotFound", String::new()))?;
            r.routes = routes.to_vec();
            r.revision_number += 1;
            Ok(r.clone())
        })
        .await
    }

    async fn create_rbac_policy(&self, req: &ShareNetwork) -> Result<RbacPolicy> {
        self.rbac_create(req).await
    }

    async fn list_rbac_policies(&self, object_id: &str) -> Result<Vec<RbacPolicy>> {
        self.rbac_list(object_id).await
    }

    async fn delete_rbac_policy(&self, id: &str) -> Result<()> {
        self.rbac_delete(id).await
    }
}

#[async_trait]
impl NeutronAdmin for FakeNeutron {
    async fn add_router_subnet(&self, router_id: &str, subnet_id: &str) -> Result<String> {
        let path = format!("/routers/{router_id}/add_router_interface");
        let m = "PUT";
        self.run(Op::AddRouterSubnet, m, &path, |w| {
            let router = self.router_of(w, router_id, m, &path)?.clone();
            let subnet = w.subnets.get(subnet_id).cloned().ok_or_else(|| {
                api(
                    m,
                    &path,
                    404,
                    "SubnetNotFound",
                    format!("Subnet {subnet_id} could not be found."),
                )
            })?;
            if router_interfaces(w, router_id)
                .iter()
                .any(|(s, _)| s.id == subnet_id)
            {
                return Err(api(
                    m,
                    &path,
                    400,
                    "BadRequest",
                    format!("Bad router request: Router already has a port on subnet {subnet_id}."),
                ));
            }
            let gw = subnet.gateway_ip.clone().unwrap_or_default();
            if w.ports
                .values()
                .any(|p| p.has_ip(&gw) && p.network_id == subnet.network_id)
            {
                return Err(api(
                    m,
                    &path,
                    409,
                    "IpAddressAlreadyAllocated",
                    format!("IP address {gw} already allocated in subnet {subnet_id}"),
                ));
            }
            let port = Port {
                id: new_id(),
                name: String::new(),
                description: String::new(),
                network_id: subnet.network_id.clone(),
                project_id: router.project_id.clone(),
                device_id: router_id.to_string(),
                device_owner: OWNER_ROUTER_INTERFACE.to_string(),
                fixed_ips: vec![FixedIp {
                    subnet_id: subnet_id.to_string(),
                    ip_address: gw,
                }],
                tags: vec![],
                revision_number: 1,
            };
            let id = port.id.clone();
            w.ports.insert(id.clone(), port);
            if let Some(r) = w.routers.get_mut(router_id) {
                r.revision_number += 1;
            }
            Ok(id)
        })
        .await
    }

    async fn create_network(&self, name: &str) -> Result<Network> {
        self.run(Op::CreateNetwork, "POST", "/networks", |w| {
            let n = Network {
                id: new_id(),
                name: name.into(),
                project_id: self.project_id.clone(),
                shared: false,
                subnets: vec![],
            };
            w.networks.insert(n.id.clone(), n.clone());
            Ok(n)
        })
        .await
    }

    async fn delete_network(&self, id: &str) -> Result<()> {
        let path = format!("/networks/{id}");
        self.run(Op::DeleteNetwork, "DELETE", &path, |w| {
            if !w.networks.get(id).is_some_and(|n| self.owns(&n.project_id)) {
                return Err(api("DELETE", &path, 404, "NetworkNotFound", format!("Network {id} could not be found.")));
            }
            let in_use: Vec<String> = w.ports.values().filter(|p| p.network_id == id).map(|p| p.id.clone()).collect();
            if !in_use.is_empty() {
                return Err(api(
                    "DELETE",
                    &path,
                    409,
                    "NetworkInUse",
                    format!(
                        "Unable to complete operation on network {id}. There are one or more ports still in use on the network, id for these ports is: {}.",
                        in_use.join(",")
                    ),
                ));
            }
            w.subnets.retain(|_, s| s.network_id != id);
            w.rbac.retain(|_, r| r.object_id != id);
            w.networks.remove(id);
            Ok(())
        })
        .await
    }

    async fn create_subnet(
        &self,
        network_id: &str,
        cidr: &str,
        gateway_ip: &str,
    ) -> Result<Subnet> {
        self.run(Op::CreateSubnet, "POST", "/subnets", |w| {
            if !w
                .networks
                .get(network_id)
                .is_some_and(|n| self.owns(&n.project_id))
            {
                return Err(api(
                    "POST",
                    "/subnets",
                    404,
                    "NetworkNotFound",
                    format!("Network {network_id} could not be found."),
                ));
            }
            let s = Subnet {
                id: new_id(),
                network_id: network_id.into(),
                cidr: cidr.into(),
                gateway_ip: Some(gateway_ip.into()),
                project_id: self.project_id.clone(),
            };
            w.subnets.insert(s.id.clone(), s.clone());
            if let Some(n) = w.networks.get_mut(network_id) {
                n.subnets.push(s.id.clone());
            }
            Ok(s)
        })
        .await
    }

    async fn create_router_with(&self, req: &CreateRouter) -> Result<Router> {
        self.run(Op::CreateRouter, "POST", "/routers", |w| {
            let r = Router {
                id: new_id(),
                name: req.name.clone(),
                project_id: req
                    .project_id
                    .clone()
                    .unwrap_or_else(|| self.project_id.clone()),
                routes: vec![],
                revision_number: 1,
            };
            w.routers.insert(r.id.clone(), r.clone());
            Ok(r)
        })
        .await
    }

    async fn delete_router(&self, id: &str) -> Result<()> {
        let path = format!("/routers/{id}");
        self.run(Op::DeleteRouter, "DELETE", &path, |w| {
            self.router_of(w, id, "DELETE", &path)?;
            let attached: Vec<String> = w
                .ports
                .values()
                .filter(|p| p.device_id == id)
                .map(|p| p.id.clone())
                .collect();
            if !attached.is_empty() {
                return Err(api(
                    "DELETE",
                    &path,
                    409,
                    "RouterInUse",
                    format!(
                        "Router {id} has ports still attached: {}",
                        attached.join(", ")
                    ),
                ));
            }
            w.routers.remove(id);
            Ok(())
        })
        .await
    }
}
