//! Networks and subnets: read as the operator reads the transit network, built and torn down
//! as tests and the lab build their fabrics.

use bnerd_cloud::{CreateSubnet, Network, NetworkQuery, Result, Subnet, SubnetQuery};
use ipnet::Ipv4Net;

use crate::faults::Op;
use crate::world::{FakeNeutron, api, new_id};

/// ML2/OVN gives the network's metadata port (made with the network, in `network_create`)
/// the first free address of every new DHCP subnet: `.2` next to a `.1` gateway (measured).
fn metadata_address(w: &mut crate::world::World, s: &Subnet) {
    let Some(net) = subnet_net(s) else { return };
    let taken: Vec<String> = w
        .ports
        .values()
        .filter(|p| p.network_id == s.network_id)
        .flat_map(|p| p.fixed_ips.iter().map(|f| f.ip_address.clone()))
        .chain(s.gateway_ip.clone())
        .collect();
    let Some(free) = net
        .hosts()
        .map(|a| a.to_string())
        .find(|a| !taken.contains(a))
    else {
        return;
    };
    let device_id = format!("ovnmeta-{}", s.network_id);
    if let Some(p) = w.ports.values_mut().find(|p| p.device_id == device_id) {
        p.fixed_ips.push(bnerd_cloud::FixedIp {
            subnet_id: s.id.clone(),
            ip_address: free,
        });
    }
}

/// The metadata port of network `network_id`, owned by the network's project, without an
/// address until a DHCP subnet comes.
fn metadata_port(network_id: &str, owner: &str) -> bnerd_cloud::Port {
    bnerd_cloud::Port {
        id: new_id(),
        network_id: network_id.into(),
        project_id: owner.into(),
        device_id: format!("ovnmeta-{network_id}"),
        device_owner: bnerd_cloud::OWNER_METADATA.into(),
        revision_number: 1,
        ..Default::default()
    }
}

/// A subnet's CIDR; one that does not parse contains nothing, so it never matches.
pub(crate) fn subnet_net(s: &Subnet) -> Option<Ipv4Net> {
    s.cidr.parse().ok()
}

impl FakeNeutron {
    pub(crate) async fn network_get(&self, id: &str) -> Result<Network> {
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

    pub(crate) async fn subnet_get(&self, id: &str) -> Result<Subnet> {
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

    /// Networks the caller may use, as `GET /networks` lists them (shared ones too).
    pub(crate) async fn network_list(&self, q: &NetworkQuery) -> Result<Vec<Network>> {
        self.run(Op::ListNetworks, "GET", "/networks", |w| {
            Ok(w.networks
                .values()
                .filter(|n| self.can_use(w, n) && q.matches(n))
                .map(|n| self.network_view(w, n))
                .collect())
        })
        .await
    }

    /// Subnets the caller owns or whose network it may use.
    pub(crate) async fn subnet_list(&self, q: &SubnetQuery) -> Result<Vec<Subnet>> {
        self.run(Op::ListSubnets, "GET", "/subnets", |w| {
            Ok(w.subnets
                .values()
                .filter(|s| {
                    q.matches(s)
                        && (self.owns(&s.project_id)
                            || w.networks
                                .get(&s.network_id)
                                .is_some_and(|n| self.can_use(w, n)))
                })
                .cloned()
                .collect())
        })
        .await
    }

    pub(crate) async fn network_create(&self, name: &str) -> Result<Network> {
        self.run(Op::CreateNetwork, "POST", "/networks", |w| {
            w.check_quota(&self.project_id, "network", "POST", "/networks")?;
            let n = Network {
                id: new_id(),
                name: name.into(),
                project_id: self.project_id.clone(),
                shared: false,
                subnets: vec![],
            };
            w.networks.insert(n.id.clone(), n.clone());
            if w.ml2_ovn() {
                // ML2/OVN makes the network's metadata port with it (measured on the lab's
                // ML2/OVN Neutron).
                let p = metadata_port(&n.id, &n.project_id);
                w.ports.insert(p.id.clone(), p);
            }
            Ok(n)
        })
        .await
    }

    pub(crate) async fn network_delete(&self, id: &str) -> Result<()> {
        let path = format!("/networks/{id}");
        self.run(Op::DeleteNetwork, "DELETE", &path, |w| {
            if !w.networks.get(id).is_some_and(|n| self.owns(&n.project_id)) {
                return Err(api("DELETE", &path, 404, "NetworkNotFound", format!("Network {id} could not be found.")));
            }
            // Neutron's own ports (ML2/OVN's metadata port) go with the network.
            w.ports.retain(|_, p| !(p.network_id == id && p.device_owner == bnerd_cloud::OWNER_METADATA));
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

    pub(crate) async fn subnet_create(&self, req: &CreateSubnet) -> Result<Subnet> {
        let network_id = req.network_id.as_str();
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
            w.check_quota(&self.project_id, "subnet", "POST", "/subnets")?;
            let s = Subnet {
                id: new_id(),
                network_id: network_id.into(),
                cidr: req.cidr.clone(),
                gateway_ip: Some(req.gateway_ip.clone()),
                project_id: self.project_id.clone(),
            };
            w.subnets.insert(s.id.clone(), s.clone());
            if let Some(n) = w.networks.get_mut(network_id) {
                n.subnets.push(s.id.clone());
            }
            if w.ml2_ovn() && req.dhcp {
                metadata_address(w, &s);
            }
            Ok(s)
        })
        .await
    }
}
