//! What the overlay records: the writes a reconcile would make, as a plan names them.

use bnerd_cloud::Route;

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
    CreateNetwork {
        name: String,
    },
    DeleteNetwork {
        network_id: String,
    },
    CreateSubnet {
        network_id: String,
        cidr: String,
        dhcp: bool,
    },
    CreateRouter {
        name: String,
    },
    DeleteRouter {
        router_id: String,
    },
    /// An interface on a subnet, at its gateway address.
    AttachSubnet {
        router_id: String,
        subnet_id: String,
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
            PlannedWrite::CreateNetwork { name } => write!(f, "create network {name}"),
            PlannedWrite::DeleteNetwork { network_id } => {
                write!(f, "delete network {network_id} (and its subnet)")
            }
            PlannedWrite::CreateSubnet {
                network_id,
                cidr,
                dhcp,
            } => {
                write!(f, "create subnet {cidr} on network {network_id}")?;
                match dhcp {
                    true => Ok(()),
                    false => write!(f, " without DHCP"),
                }
            }
            PlannedWrite::CreateRouter { name } => write!(f, "create router {name}"),
            PlannedWrite::DeleteRouter { router_id } => write!(f, "delete router {router_id}"),
            PlannedWrite::AttachSubnet {
                router_id,
                subnet_id,
            } => write!(
                f,
                "attach subnet {subnet_id} to router {router_id} at its gateway address"
            ),
        }
    }
}
