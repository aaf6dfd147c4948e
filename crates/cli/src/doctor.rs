//! `doctor`: links that are not Ready, leg ports whose ClusterLink is gone, and gateway
//! routes that point at an address no port holds (or at a leg nobody owns any more).

use std::net::Ipv4Addr;

use bnerd_api::ClusterLink;
use bnerd_api::ConditionType;
use bnerd_api::conditions::{find, is_true};
use bnerd_api::names::{leg_owner_uid, link_name_in_tags};
use bnerd_cloud::fabric::Fabric;
use bnerd_cloud::{CloudError, Neutron, Port, PortQuery, Route};

/// One line of the report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    pub problem: bool,
    pub text: String,
}

impl Finding {
    fn ok(text: String) -> Self {
        Self {
            problem: false,
            text,
        }
    }

    fn problem(text: String) -> Self {
        Self {
            problem: true,
            text,
        }
    }
}

fn link_health(l: &ClusterLink) -> Finding {
    let name = l.metadata.name.clone().unwrap_or_default();
    let Some(status) = &l.status else {
        return Finding::problem(format!(
            "ClusterLink {name}: no status yet; is the operator running?"
        ));
    };
    let conditions = &status.conditions;
    if is_true(conditions, ConditionType::Ready) {
        return Finding::ok(format!(
            "ClusterLink {name}: Ready, {} on router {}",
            status.transit_ip.as_deref().unwrap_or("?"),
            status.service_router_id.as_deref().unwrap_or("?")
        ));
    }
    // The first step (in the reconcile's order) that is not True is where it stopped.
    let stuck = ConditionType::ALL
        .iter()
        .filter_map(|t| find(conditions, *t))
        .find(|c| c.status != "True");
    Finding::problem(match stuck {
        Some(c) => format!(
            "ClusterLink {name}: not Ready, {}={} {}: {}",
            c.type_, c.status, c.reason, c.message
        ),
        None => format!("ClusterLink {name}: not Ready, no conditions yet"),
    })
}

fn ip_of(p: &Port) -> &str {
    p.first_ip().unwrap_or("no address")
}

fn remove_port_hint(p: &Port) -> String {
    if p.device_id.is_empty() {
        format!("openstack port delete {}", p.id)
    } else {
        format!("openstack router remove port {} {}", p.device_id, p.id)
    }
}

/// Check the fabric, every link, and the cloud side against the links.
pub async fn diagnose(
    net: &dyn Neutron,
    network_id: &str,
    gateway_router_id: &str,
    links: &[ClusterLink],
) -> Result<Vec<Finding>, CloudError> {
    let mut out = vec![];
    let fabric = match Fabric::discover(net, network_id, gateway_router_id).await {
        Ok(f) => {
            out.push(Finding::ok(format!(
                "fabric: transit network {} ({}), gateway router {} has its leg",
                f.transit_network_id, f.transit_subnet, f.gateway_router_id
            )));
            f
        }
        Err(e) => {
            out.push(Finding::problem(format!("fabric: {e}")));
            return Ok(out);
        }
    };
    out.extend(links.iter().map(link_health));

    let ports = net
        .list_ports(&PortQuery {
            network_id: Some(fabric.transit_network_id.clone()),
            ..Default::default()
        })
        .await?;
    let live = |uid: &str| links.iter().any(|l| l.metadata.uid.as_deref() == Some(uid));
    let orphan = |p: &Port| leg_owner_uid(&p.tags, &p.description).is_some_and(|uid| !live(uid));
    for p in ports.iter().filter(|p| orphan(p)) {
        let who = link_name_in_tags(&p.tags)
            .map(|n| format!("ClusterLink {n}"))
            .unwrap_or_else(|| {
                format!(
                    "ClusterLink uid {}",
                    leg_owner_uid(&p.tags, &p.description).unwrap_or("?")
                )
            });
        out.push(Finding::problem(format!(
            "port {} at {} is the leg of {who}, which no longer exists; remove it: {}",
            p.id,
            ip_of(p),
            remove_port_hint(p)
        )));
    }
    for l in links {
        let Some(id) = l.status.as_ref().and_then(|s| s.leg_port_id.as_deref()) else {
            continue;
        };
        if !ports.iter().any(|p| p.id == id) {
            out.push(Finding::ok(format!(
                "ClusterLink {}: leg port {id} is gone from the transit network; the operator rebuilds it at its next reconcile",
                l.metadata.name.as_deref().unwrap_or_default()
            )));
        }
    }

    let gw = net.get_router(&fabric.gateway_router_id).await?;
    for r in &gw.routes {
        let Ok(hop) = r.nexthop.parse::<Ipv4Addr>() else {
            continue;
        };
        if !fabric.transit_subnet.contains(&hop) {
            continue;
        }
        let recorded = links.iter().any(|l| {
            l.status
                .as_ref()
                .and_then(|s| s.gateway_route.as_ref())
                .is_some_and(|g| Route::new(&g.destination, &g.nexthop) == *r)
        });
        out.push(match ports.iter().find(|p| p.has_ip(&r.nexthop)) {
            None => Finding::problem(format!(
                "gateway router route {} via {}: no port holds {}, so the traffic goes nowhere and whoever gets that address next receives it; remove it: openstack router remove route --route destination={},gateway={} {}",
                r.destination, r.nexthop, r.nexthop, r.destination, r.nexthop, gw.id
            )),
            Some(p) if orphan(p) => Finding::problem(format!(
                "gateway router route {} via {}: that address is the leg port {} of a ClusterLink that no longer exists; remove the route first: openstack router remove route --route destination={},gateway={} {}",
                r.destination, r.nexthop, p.id, r.destination, r.nexthop, gw.id
            )),
            Some(_) if recorded => Finding::ok(format!(
                "gateway router route {} via {}",
                r.destination, r.nexthop
            )),
            Some(p) => Finding::ok(format!(
                "gateway router route {} via {} (port {}) is not recorded by any ClusterLink: hand-made, left alone",
                r.destination, r.nexthop, p.id
            )),
        });
    }
    Ok(out)
}

/// What the doctor could get of a cross-tenant link's customer credential.
pub enum CustomerView {
    /// A client on the customer's application credential (at the operator's own endpoint).
    Client(Box<dyn Neutron>),
    /// Why it could not: the Secret is not readable with the current kubeconfig, or lacks
    /// the application-credential keys.
    Unreadable(String),
}

/// A cross-tenant link to check: its name, its customer project, its credential.
pub struct CrossTenantLink {
    pub name: String,
    pub project: String,
    pub view: CustomerView,
}

/// Whether each cross-tenant link's customer can see the transit network (the share the
/// operator re-ensures at every reconcile), checked with the customer's own credential where
/// the doctor can read it.
pub async fn share_findings(network_id: &str, links: &[CrossTenantLink]) -> Vec<Finding> {
    let mut out = vec![];
    for l in links {
        let (name, project) = (&l.name, &l.project);
        out.push(match &l.view {
            CustomerView::Unreadable(why) => Finding::ok(format!(
                "ClusterLink {name}: share with project {project} not checked: {why}"
            )),
            CustomerView::Client(net) => match net.get_network(network_id).await {
                Ok(_) => Finding::ok(format!(
                    "ClusterLink {name}: the transit network is visible to project {project} (shared)"
                )),
                Err(e) if e.is_not_found() => Finding::problem(format!(
                    "ClusterLink {name}: the transit network {network_id} is not visible to project {project}; the operator shares it at the link's next reconcile, or an OpenStack admin runs once: openstack network rbac create --type network --action access_as_shared --target-project {project} {network_id}"
                )),
                Err(e) => Finding::problem(format!(
                    "ClusterLink {name}: checking the share with project {project} with the customer credential failed: {e}"
                )),
            },
        });
    }
    out
}
