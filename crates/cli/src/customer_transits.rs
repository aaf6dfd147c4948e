//! `doctor`'s checks of the customer transits `PerCustomer` links use (docs/design.md,
//! "Per-customer transit"): each one in the operator's project on this transit network is
//! shared with its own project only, its edge router routes only to legs of that project's
//! links, and none is left behind without a link; a `PerCustomer` link's leg is looked for on
//! its customer transit, not on the transit network.

use std::net::Ipv4Addr;

use bnerd_api::ClusterLink;
use bnerd_api::echo::shell_word;
use bnerd_api::names::{customer_transit_name, edge_router_name, leg_owner_uid};
use bnerd_cloud::fabric::Fabric;
use bnerd_cloud::{Network, NetworkQuery, Neutron, RouterQuery, SubnetQuery};
use bnerd_engine::plan::remove_route_command;

use crate::finding::Finding;

/// The `PerCustomer` links that are not being deleted, by the project they name.
fn per_customer_links<'a>(links: &'a [ClusterLink], project: &str) -> Vec<&'a ClusterLink> {
    links
        .iter()
        .filter(|l| l.spec.per_customer() && l.metadata.deletion_timestamp.is_none())
        .filter(|l| l.spec.customer_project_id.as_deref() == Some(project))
        .collect()
}

/// The customer project a customer transit network of this transit network is named for.
fn project_of(n: &Network, transit: &str) -> Option<String> {
    let rest = n.name.strip_prefix("bnerd-vpn-customer-")?;
    let project = rest.strip_suffix(&format!("-on-{transit}"))?;
    (customer_transit_name(transit, project) == n.name).then(|| project.to_string())
}

fn read_failed(what: &str, e: &bnerd_cloud::CloudError) -> String {
    format!("{what}: {e}")
}

pub async fn findings(
    net: &dyn Neutron,
    fabric: &Fabric,
    links: &[ClusterLink],
) -> Result<Vec<Finding>, String> {
    let transit = &fabric.transit_network_id;
    let mut out = vec![];
    let networks = net
        .list_networks(&NetworkQuery {
            project_id: Some(fabric.operator_project_id.clone()),
            ..Default::default()
        })
        .await
        .map_err(|e| read_failed("listing the operator's networks", &e))?;
    for n in &networks {
        let Some(project) = project_of(n, transit) else {
            continue;
        };
        let ours = per_customer_links(links, &project);
        let edge = net
            .list_routers(&RouterQuery {
                name: Some(edge_router_name(transit, &project)),
                ..Default::default()
            })
            .await
            .map_err(|e| read_failed("listing the edge routers", &e))?
            .into_iter()
            .find(|r| r.project_id == fabric.operator_project_id);
        if ours.is_empty() {
            out.push(Finding::problem(format!(
                "customer transit network {} of project {project} is left behind: no PerCustomer ClusterLink names that project; the project's next PerCustomer link uses it again, or remove it by hand: {}openstack network delete {}",
                n.id,
                edge.as_ref()
                    .map(|r| format!("(its edge router {} first: clear its routes, remove its ports, delete it) ", r.id))
                    .unwrap_or_default(),
                shell_word(&n.id)
            )));
            continue;
        }
        // A leg whose link is gone (its customer side abandoned): it keeps the customer
        // transit up until the customer removes it.
        let ports = net
            .list_ports(&bnerd_cloud::PortQuery {
                network_id: Some(n.id.clone()),
                ..Default::default()
            })
            .await
            .map_err(|e| read_failed("listing the customer transit's ports", &e))?;
        let live = |uid: &str| links.iter().any(|l| l.metadata.uid.as_deref() == Some(uid));
        for p in &ports {
            let Some(uid) = leg_owner_uid(&p.tags, &p.description) else {
                continue;
            };
            if live(uid) {
                continue;
            }
            out.push(Finding::problem(format!(
                "port {} on customer transit network {} of project {project} is the leg of a ClusterLink that no longer exists (uid {uid}); it keeps the customer transit up: the customer removes it with its own credential ({})",
                p.id,
                n.id,
                if p.device_id.is_empty() {
                    format!("openstack port delete {}", shell_word(&p.id))
                } else {
                    format!(
                        "openstack router remove port {} {}",
                        shell_word(&p.device_id),
                        shell_word(&p.id)
                    )
                }
            )));
        }
        let shares = net
            .list_rbac_policies(&n.id)
            .await
            .map_err(|e| read_failed("listing the customer transit's RBAC rules", &e))?;
        for p in shares.iter().filter(|p| p.target_tenant != project) {
            out.push(Finding::problem(format!(
                "customer transit network {} of project {project} is shared with {}, which is not its customer: remove it: openstack network rbac delete {}",
                n.id,
                shell_word(&p.target_tenant),
                shell_word(&p.id)
            )));
        }
        let Some(edge) = edge else {
            out.push(Finding::ok(format!(
                "customer transit network {} of project {project}: its edge router is missing; the operator builds it at the next reconcile",
                n.id
            )));
            continue;
        };
        let subnets = net
            .list_subnets(&SubnetQuery {
                network_id: Some(n.id.clone()),
                ..Default::default()
            })
            .await
            .map_err(|e| read_failed("listing the customer transit's subnets", &e))?;
        let cidrs: Vec<ipnet::Ipv4Net> =
            subnets.iter().filter_map(|s| s.cidr.parse().ok()).collect();
        let legs: Vec<String> = ours
            .iter()
            .filter_map(|l| l.status.as_ref()?.transit_ip.clone())
            .collect();
        let mut stale = 0;
        for r in &edge.routes {
            let on_customer_transit = r
                .nexthop
                .parse::<Ipv4Addr>()
                .is_ok_and(|h| cidrs.iter().any(|c| c.contains(&h)));
            if on_customer_transit && !legs.contains(&r.nexthop) {
                stale += 1;
                out.push(Finding::problem(format!(
                    "edge router {} route {} via {}: no PerCustomer link of project {project} has its leg there; remove it: {}",
                    edge.id,
                    r.destination,
                    r.nexthop,
                    remove_route_command(r, &edge.id)
                )));
            }
        }
        if stale == 0 {
            out.push(Finding::ok(format!(
                "customer transit network {} of project {project}: shared with that project only, edge router {} routes to its {} link(s)",
                n.id,
                edge.id,
                ours.len()
            )));
        }
    }
    // A PerCustomer link's leg stands on its customer transit.
    for l in links.iter().filter(|l| l.spec.per_customer()) {
        let Some(id) = l.status.as_ref().and_then(|s| s.leg_port_id.as_deref()) else {
            continue;
        };
        if let Err(e) = net.get_port(id).await {
            if !e.is_not_found() {
                return Err(read_failed("reading a PerCustomer link's leg port", &e));
            }
            out.push(Finding::ok(format!(
                "ClusterLink {}: leg port {id} is gone from its customer transit; the operator rebuilds it at its next reconcile",
                l.metadata.name.as_deref().unwrap_or_default()
            )));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_this_transits_customer_transits_are_named_for_a_project() {
        let n = |name: &str| Network {
            name: name.into(),
            ..Default::default()
        };
        let name = customer_transit_name("t1", "p1");
        assert_eq!(project_of(&n(&name), "t1").as_deref(), Some("p1"));
        assert_eq!(
            project_of(&n(&name), "t2"),
            None,
            "another transit network's"
        );
        assert_eq!(project_of(&n("vpn-transit"), "t1"), None);
    }
}
