//! A `Neutron` that reads the real cloud and only records writes: `kubectl clusterlink plan`
//! runs the very reconcile the operator runs over it, so a plan and the reconcile after it
//! cannot disagree. Each recorded write is answered as Neutron would answer it (a port at the
//! address asked for, a router with the routes added, a refused second interface on one
//! subnet), and later reads see it, so the steps go on to the end as they would for real.

use std::collections::BTreeMap;
use std::sync::Mutex;

use async_trait::async_trait;
use bnerd_cloud::refusals::{self, SubnetRef};
use bnerd_cloud::{
    CloudError, CreatePort, FixedIp, Network, Neutron, Port, PortQuery, RbacPolicy, Result, Route,
    Router, RouterQuery, ShareNetwork, Subnet,
};

/// One write the reconcile would make, in its order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlannedWrite {
    CreatePort {
        network_id: String,
        ip_address: Option<String>,
        name: String,
    },
    TagPort {
        port_id: String,
        tags: Vec<String>,
    },
    DeletePort {
        port_id: String,
    },
    Attach {
        router_id: String,
        port_id: String,
    },
    Detach {
        router_id: String,
        port_id: String,
    },
    AddRoutes {
        router_id: String,
        routes: Vec<Route>,
    },
    RemoveRoutes {
        router_id: String,
        routes: Vec<Route>,
    },
    SetRoutes {
        router_id: String,
        routes: Vec<Route>,
    },
    Share {
        network_id: String,
        project: String,
    },
    Unshare {
        policy_id: String,
    },
}

impl std::fmt::Display for PlannedWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let routes = |rs: &[Route]| {
            rs.iter()
                .map(|r| format!("{} via {}", r.destination, r.nexthop))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self {
            PlannedWrite::CreatePort {
                network_id,
                ip_address,
                name,
            } => write!(
                f,
                "create port {name} on network {network_id} at {}",
                ip_address.as_deref().unwrap_or("an address Neutron picks")
            ),
            PlannedWrite::TagPort { port_id, tags } => {
                write!(f, "tag port {port_id}: {}", tags.join(", "))
            }
            PlannedWrite::DeletePort { port_id } => write!(f, "delete port {port_id}"),
            PlannedWrite::Attach { router_id, port_id } => {
                write!(f, "attach port {port_id} to router {router_id}")
            }
            PlannedWrite::Detach { router_id, port_id } => {
                write!(
                    f,
                    "detach port {port_id} from router {router_id} (deletes it)"
                )
            }
            PlannedWrite::AddRoutes {
                router_id,
                routes: r,
            } => {
                write!(f, "add route {} on router {router_id}", routes(r))
            }
            PlannedWrite::RemoveRoutes {
                router_id,
                routes: r,
            } => {
                write!(f, "remove route {} from router {router_id}", routes(r))
            }
            PlannedWrite::SetRoutes {
                router_id,
                routes: r,
            } => {
                write!(f, "set the routes of router {router_id} to [{}]", routes(r))
            }
            PlannedWrite::Share {
                network_id,
                project,
            } => write!(f, "share network {network_id} with project {project}"),
            PlannedWrite::Unshare { policy_id } => write!(f, "delete RBAC policy {policy_id}"),
        }
    }
}

#[derive(Default)]
struct Overlay {
    /// Ports as the recorded writes leave them; `None`: deleted.
    ports: BTreeMap<String, Option<Port>>,
    routers: BTreeMap<String, Router>,
    writes: Vec<PlannedWrite>,
    created: usize,
    /// Tap: the ports this run created, by their cloud ID, as a plan names them.
    names: BTreeMap<String, String>,
}

pub struct Recording<'a> {
    inner: &'a dyn Neutron,
    overlay: Mutex<Overlay>,
    /// Writes go to the cloud too, and are recorded as a plan would name them: what a test
    /// compares a plan with.
    tap: bool,
    /// The project a planned port lands in: the credential's, as Neutron would set it (the
    /// reconcile checks a port's project before attaching it).
    project: String,
    /// Neutron words its refusals as a cloud with this L3 plugin does (`Fabric`'s flag).
    router_subnets_by_cidr: bool,
}

/// The id a planned port goes by until Neutron gives it one.
pub const PLANNED_PORT: &str = "<new port>";

impl<'a> Recording<'a> {
    pub fn new(inner: &'a dyn Neutron) -> Self {
        Self {
            inner,
            overlay: Mutex::new(Overlay::default()),
            tap: false,
            project: String::new(),
            router_subnets_by_cidr: false,
        }
    }

    /// Refusals worded as the cloud of `fabric` words them.
    pub fn worded_for(self, fabric: &bnerd_cloud::fabric::Fabric) -> Self {
        Self {
            router_subnets_by_cidr: fabric.router_subnets_by_cidr,
            ..self
        }
    }

    /// Planned ports are created in this project (the credential's own).
    pub fn creating_in(self, project: &str) -> Self {
        Self {
            project: project.to_string(),
            ..self
        }
    }

    /// Writes reach the cloud, and are recorded with the ports this run created named as a
    /// plan names them, so the two lists compare equal when the plan was right.
    pub fn tap(inner: &'a dyn Neutron) -> Self {
        Self {
            tap: true,
            ..Self::new(inner)
        }
    }

    /// The name a port goes by in the recorded writes.
    fn called(&self, id: &str) -> String {
        self.with(|o| o.names.get(id).cloned().unwrap_or_else(|| id.to_string()))
    }

    /// The writes recorded so far, in order.
    pub fn writes(&self) -> Vec<PlannedWrite> {
        self.with(|o| o.writes.clone())
    }

    fn with<T>(&self, f: impl FnOnce(&mut Overlay) -> T) -> T {
        let mut g = self.overlay.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    fn note(&self, w: PlannedWrite) {
        self.with(|o| o.writes.push(w));
    }

    async fn port_now(&self, id: &str) -> Result<Port> {
        match self.with(|o| o.ports.get(id).cloned()) {
            Some(Some(p)) => Ok(p),
            Some(None) => Err(not_found("GET", &format!("/ports/{id}"), "PortNotFound")),
            None => self.inner.get_port(id).await,
        }
    }

    async fn router_now(&self, id: &str) -> Result<Router> {
        match self.with(|o| o.routers.get(id).cloned()) {
            Some(r) => Ok(r),
            None => self.inner.get_router(id).await,
        }
    }

    fn keep_router(&self, r: Router) -> Router {
        self.with(|o| o.routers.insert(r.id.clone(), r.clone()));
        r
    }
}

fn not_found(method: &str, path: &str, kind: &str) -> CloudError {
    CloudError::Api {
        method: method.into(),
        path: path.into(),
        status: 404,
        kind: kind.into(),
        message: "not found (planned)".into(),
    }
}

fn matches(p: &Port, q: &PortQuery) -> bool {
    q.network_id.as_ref().is_none_or(|n| *n == p.network_id)
        && q.device_id.as_ref().is_none_or(|d| *d == p.device_id)
        && q.ip_address.as_ref().is_none_or(|ip| p.has_ip(ip))
        && q.tags.iter().all(|t| p.has_tag(t))
        && (q.tags_any.is_empty() || q.tags_any.iter().any(|t| p.has_tag(t)))
        && (q.not_tags.is_empty() || !q.not_tags.iter().all(|t| p.has_tag(t)))
}

#[async_trait]
impl Neutron for Recording<'_> {
    async fn extensions(&self) -> Result<Vec<String>> {
        self.inner.extensions().await
    }

    async fn get_network(&self, id: &str) -> Result<Network> {
        self.inner.get_network(id).await
    }

    async fn get_subnet(&self, id: &str) -> Result<Subnet> {
        self.inner.get_subnet(id).await
    }

    async fn list_ports(&self, query: &PortQuery) -> Result<Vec<Port>> {
        let real = self.inner.list_ports(query).await?;
        Ok(self.with(|o| {
            let mut out: Vec<Port> = real
                .into_iter()
                .filter_map(|p| match o.ports.get(&p.id) {
                    Some(Some(now)) => matches(now, query).then(|| now.clone()),
                    Some(None) => None,
                    None => Some(p),
                })
                .collect();
            for p in o.ports.values().flatten() {
                if p.id.starts_with(PLANNED_PORT) && matches(p, query) {
                    out.push(p.clone());
                }
            }
            out
        }))
    }

    async fn get_port(&self, id: &str) -> Result<Port> {
        self.port_now(id).await
    }

    async fn create_port(&self, req: &CreatePort) -> Result<Port> {
        if self.tap {
            let port = self.inner.create_port(req).await?;
            self.note(PlannedWrite::CreatePort {
                network_id: req.network_id.clone(),
                ip_address: req.ip_address.clone(),
                name: req.name.clone(),
            });
            self.with(|o| {
                o.created += 1;
                let called = if o.created == 1 {
                    PLANNED_PORT.to_string()
                } else {
                    format!("{PLANNED_PORT} {}", o.created)
                };
                o.names.insert(port.id.clone(), called);
            });
            return Ok(port);
        }
        self.note(PlannedWrite::CreatePort {
            network_id: req.network_id.clone(),
            ip_address: req.ip_address.clone(),
            name: req.name.clone(),
        });
        Ok(self.with(|o| {
            o.created += 1;
            let id = if o.created == 1 {
                PLANNED_PORT.to_string()
            } else {
                format!("{PLANNED_PORT} {}", o.created)
            };
            let port = Port {
                id: id.clone(),
                name: req.name.clone(),
                network_id: req.network_id.clone(),
                description: req.description.clone(),
                fixed_ips: req
                    .ip_address
                    .iter()
                    .map(|ip| FixedIp {
                        subnet_id: req.subnet_id.clone().unwrap_or_default(),
                        ip_address: ip.clone(),
                    })
                    .collect(),
                tags: req.tags.clone(),
                project_id: self.project.clone(),
                ..Default::default()
            };
            o.ports.insert(id, Some(port.clone()));
            port
        }))
    }

    async fn add_port_tag(&self, port_id: &str, tag: &str) -> Result<()> {
        if self.tap {
            let done = self.inner.add_port_tag(port_id, tag).await;
            if done.is_ok() {
                self.note(PlannedWrite::TagPort {
                    port_id: self.called(port_id),
                    tags: vec![tag.to_string()],
                });
            }
            return done;
        }
        let mut p = self.port_now(port_id).await?;
        if !p.has_tag(tag) {
            p.tags.push(tag.to_string());
        }
        self.note(PlannedWrite::TagPort {
            port_id: port_id.into(),
            tags: vec![tag.to_string()],
        });
        self.with(|o| o.ports.insert(port_id.into(), Some(p)));
        Ok(())
    }

    async fn set_port_tags(&self, port_id: &str, tags: &[String]) -> Result<()> {
        if self.tap {
            let done = self.inner.set_port_tags(port_id, tags).await;
            if done.is_ok() {
                self.note(PlannedWrite::TagPort {
                    port_id: self.called(port_id),
                    tags: tags.to_vec(),
                });
            }
            return done;
        }
        let mut p = self.port_now(port_id).await?;
        p.tags = tags.to_vec();
        self.note(PlannedWrite::TagPort {
            port_id: port_id.into(),
            tags: tags.to_vec(),
        });
        self.with(|o| o.ports.insert(port_id.into(), Some(p)));
        Ok(())
    }

    async fn delete_port(&self, id: &str) -> Result<()> {
        if self.tap {
            let done = self.inner.delete_port(id).await;
            if done.is_ok() {
                self.note(PlannedWrite::DeletePort {
                    port_id: self.called(id),
                });
            }
            return done;
        }
        self.port_now(id).await?;
        self.note(PlannedWrite::DeletePort { port_id: id.into() });
        self.with(|o| o.ports.insert(id.into(), None));
        Ok(())
    }

    async fn get_router(&self, id: &str) -> Result<Router> {
        self.router_now(id).await
    }

    async fn list_routers(&self, query: &RouterQuery) -> Result<Vec<Router>> {
        let real = self.inner.list_routers(query).await?;
        Ok(self.with(|o| {
            real.into_iter()
                .map(|r| o.routers.get(&r.id).cloned().unwrap_or(r))
                .collect()
        }))
    }

    async fn add_router_interface(&self, router_id: &str, port_id: &str) -> Result<()> {
        if self.tap {
            let done = self.inner.add_router_interface(router_id, port_id).await;
            if done.is_ok() {
                self.note(PlannedWrite::Attach {
                    router_id: router_id.into(),
                    port_id: self.called(port_id),
                });
            }
            return done;
        }
        let mut port = self.port_now(port_id).await?;
        // Neutron's refusal of a second interface on one subnet, as it words it.
        let on_network = self
            .list_ports(&PortQuery {
                network_id: Some(port.network_id.clone()),
                device_id: Some(router_id.into()),
                ..Default::default()
            })
            .await?;
        if let Some(other) = on_network
            .iter()
            .find(|p| p.id != port.id && p.is_router_interface())
        {
            let subnet_of = |p: &Port| {
                p.fixed_ips
                    .first()
                    .map(|f| f.subnet_id.clone())
                    .unwrap_or_default()
            };
            let (new_id, old_id) = (subnet_of(&port), subnet_of(other));
            // The CIDR wording needs both subnets' CIDRs: two reads, on this refusal only.
            let (new_cidr, old_cidr) = if self.router_subnets_by_cidr {
                (
                    self.inner.get_subnet(&new_id).await?.cidr,
                    self.inner.get_subnet(&old_id).await?.cidr,
                )
            } else {
                Default::default()
            };
            return Err(CloudError::Api {
                method: "PUT".into(),
                path: format!("/routers/{router_id}/add_router_interface"),
                status: 400,
                kind: "BadRequest".into(),
                message: refusals::second_router_interface(
                    self.router_subnets_by_cidr,
                    SubnetRef {
                        id: &new_id,
                        cidr: &new_cidr,
                    },
                    SubnetRef {
                        id: &old_id,
                        cidr: &old_cidr,
                    },
                ),
            });
        }
        self.note(PlannedWrite::Attach {
            router_id: router_id.into(),
            port_id: port_id.into(),
        });
        port.device_id = router_id.into();
        port.device_owner = "network:router_interface".into();
        self.with(|o| o.ports.insert(port_id.into(), Some(port)));
        Ok(())
    }

    async fn remove_router_interface(&self, router_id: &str, port_id: &str) -> Result<()> {
        if self.tap {
            let done = self.inner.remove_router_interface(router_id, port_id).await;
            if done.is_ok() {
                self.note(PlannedWrite::Detach {
                    router_id: router_id.into(),
                    port_id: self.called(port_id),
                });
            }
            return done;
        }
        self.port_now(port_id).await?;
        self.note(PlannedWrite::Detach {
            router_id: router_id.into(),
            port_id: port_id.into(),
        });
        self.with(|o| o.ports.insert(port_id.into(), None));
        Ok(())
    }

    async fn add_extraroutes(&self, router_id: &str, routes: &[Route]) -> Result<Router> {
        if self.tap {
            let done = self.inner.add_extraroutes(router_id, routes).await;
            if done.is_ok() {
                self.note(PlannedWrite::AddRoutes {
                    router_id: router_id.into(),
                    routes: routes.to_vec(),
                });
            }
            return done;
        }
        let mut r = self.router_now(router_id).await?;
        self.note(PlannedWrite::AddRoutes {
            router_id: router_id.into(),
            routes: routes.to_vec(),
        });
        for route in routes {
            if !r.routes.contains(route) {
                r.routes.push(route.clone());
            }
        }
        r.revision_number += 1;
        Ok(self.keep_router(r))
    }

    async fn remove_extraroutes(&self, router_id: &str, routes: &[Route]) -> Result<Router> {
        if self.tap {
            let done = self.inner.remove_extraroutes(router_id, routes).await;
            if done.is_ok() {
                self.note(PlannedWrite::RemoveRoutes {
                    router_id: router_id.into(),
                    routes: routes.to_vec(),
                });
            }
            return done;
        }
        let mut r = self.router_now(router_id).await?;
        self.note(PlannedWrite::RemoveRoutes {
            router_id: router_id.into(),
            routes: routes.to_vec(),
        });
        r.routes.retain(|x| !routes.contains(x));
        r.revision_number += 1;
        Ok(self.keep_router(r))
    }

    async fn set_routes(
        &self,
        router_id: &str,
        routes: &[Route],
        _if_revision: Option<u64>,
    ) -> Result<Router> {
        if self.tap {
            let done = self.inner.set_routes(router_id, routes, _if_revision).await;
            if done.is_ok() {
                self.note(PlannedWrite::SetRoutes {
                    router_id: router_id.into(),
                    routes: routes.to_vec(),
                });
            }
            return done;
        }
        let mut r = self.router_now(router_id).await?;
        self.note(PlannedWrite::SetRoutes {
            router_id: router_id.into(),
            routes: routes.to_vec(),
        });
        r.routes = routes.to_vec();
        r.revision_number += 1;
        Ok(self.keep_router(r))
    }

    async fn create_rbac_policy(&self, req: &ShareNetwork) -> Result<RbacPolicy> {
        if self.tap {
            let done = self.inner.create_rbac_policy(req).await;
            if done.is_ok() {
                self.note(PlannedWrite::Share {
                    network_id: req.network_id.clone(),
                    project: req.target_tenant.clone(),
                });
            }
            return done;
        }
        self.note(PlannedWrite::Share {
            network_id: req.network_id.clone(),
            project: req.target_tenant.clone(),
        });
        Ok(RbacPolicy {
            id: "<new RBAC policy>".into(),
            object_type: "network".into(),
            object_id: req.network_id.clone(),
            action: req.action.clone(),
            target_tenant: req.target_tenant.clone(),
            project_id: String::new(),
        })
    }

    async fn list_rbac_policies(&self, object_id: &str) -> Result<Vec<RbacPolicy>> {
        self.inner.list_rbac_policies(object_id).await
    }

    async fn delete_rbac_policy(&self, id: &str) -> Result<()> {
        if self.tap {
            let done = self.inner.delete_rbac_policy(id).await;
            if done.is_ok() {
                self.note(PlannedWrite::Unshare {
                    policy_id: id.into(),
                });
            }
            return done;
        }
        self.note(PlannedWrite::Unshare {
            policy_id: id.into(),
        });
        Ok(())
    }

    async fn probe_admin_read(&self) -> Result<()> {
        self.inner.probe_admin_read().await
    }
}
