//! Ports and their tags: creation with Neutron's address rules, the tag filters and limits,
//! and the refusal to delete a router's interface directly.

use std::collections::HashSet;
use std::net::Ipv4Addr;

use bnerd_cloud::{
    CloudError, CreatePort, FixedIp, MAX_TAGS, Port, PortQuery, Result, Subnet,
    is_router_interface_owner,
};

use bnerd_cloud::refusals;

use crate::faults::Op;
use crate::networks::subnet_net;
use crate::policy::port_not_found;
use crate::world::{FakeNeutron, TAGS_AT_CREATE, api, new_id};

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

/// Neutron's limit on a port's name and description and on one tag (neutron-lib's
/// NAME_MAX_LEN and DESCRIPTION_MAX_LEN, tagging's MAX_TAG_LEN), in characters, not bytes
/// (measured: 255 two-byte characters pass, 256 do not).
const MAX_LEN: usize = 255;

/// neutron-lib's `validate_string` with a length cap, as its message says it.
fn too_long(value: &str) -> Option<String> {
    (value.chars().count() > MAX_LEN)
        .then(|| format!("'{value}' exceeds maximum length of {MAX_LEN}"))
}

/// neutron-lib's `list_of_unique_strings` check: duplicates first (each named once, in the
/// order they recur), then the first string that is too long.
fn tag_list_problem(tags: &[String]) -> Option<String> {
    let mut seen: Vec<&String> = vec![];
    let mut dups: Vec<&str> = vec![];
    for t in tags {
        if seen.contains(&t) {
            if !dups.contains(&t.as_str()) {
                dups.push(t);
            }
        } else {
            seen.push(t);
        }
    }
    if !dups.is_empty() {
        return Some(format!(
            "Duplicate items in the list: '{}'",
            dups.join(", ")
        ));
    }
    tags.iter().find_map(|t| too_long(t))
}

/// A tag call's body or URL failed validation: the tagging extension checks it before it
/// looks for the port (measured: a 256-character tag on a port that does not exist is 400).
fn invalid_tags(path: &str, reason: String) -> CloudError {
    api(
        "PUT",
        path,
        400,
        "InvalidInput",
        format!("Invalid input for operation: {reason}."),
    )
}

impl FakeNeutron {
    pub(crate) async fn port_list(&self, q: &PortQuery) -> Result<Vec<Port>> {
        self.run(Op::ListPorts, "GET", "/ports", |w| {
            let ports = w
                .ports
                .values()
                .filter(|p| self.port_visible(w, p))
                .filter(|p| q.matches(p))
                .cloned()
                .collect();
            crate::world::only_fields("GET", "/ports", ports, &q.fields)
        })
        .await
    }

    pub(crate) async fn port_get(&self, id: &str) -> Result<Port> {
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

    pub(crate) async fn port_create(&self, req: &CreatePort) -> Result<Port> {
        self.run(Op::CreatePort, "POST", "/ports", |w| {
            // The API layer validates attributes before anything is looked up, in the order
            // measured on the lab: name, tags (validated even where they are then dropped),
            // description.
            let invalid = [
                ("name", too_long(&req.name)),
                ("tags", tag_list_problem(&req.tags)),
                ("description", too_long(&req.description)),
            ]
            .into_iter()
            .find_map(|(attr, problem)| problem.map(|p| (attr, p)));
            if let Some((attr, reason)) = invalid {
                return Err(api(
                    "POST",
                    "/ports",
                    400,
                    "HTTPBadRequest",
                    format!("Invalid input for {attr}. Reason: {reason}."),
                ));
            }
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
            // Every address held on the network, gathered once: a /21 transit has 2046 hosts to
            // look through, and the estate bench creates a thousand ports on it.
            let held: HashSet<String> = w
                .ports
                .values()
                .filter(|p| p.network_id == net.id)
                .flat_map(|p| p.fixed_ips.iter().map(|f| f.ip_address.clone()))
                .collect();
            let taken = |ip: &str| held.contains(ip);
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
                    if taken(ip) {
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
                            n.hosts().map(|a| a.to_string()).filter(|a| *a != gw && !taken(a)).collect();
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
            w.check_quota(&self.project_id, "port", "POST", "/ports")?;
            let port = Port {
                id: new_id(),
                name: req.name.clone(),
                network_id: net.id.clone(),
                project_id: self.project_id.clone(),
                device_id: String::new(),
                device_owner: String::new(),
                fixed_ips: vec![FixedIp { subnet_id: subnet.id.clone(), ip_address: ip }],
                description: req.description.clone(),
                tags: if w.has_extension(TAGS_AT_CREATE) { req.tags.clone() } else { vec![] },
                revision_number: 1,
            };
            w.ports.insert(port.id.clone(), port.clone());
            Ok(port)
        })
        .await
    }

    pub(crate) async fn port_add_tag(&self, port_id: &str, tag: &str) -> Result<()> {
        let path = format!("/ports/{port_id}/tags/{tag}");
        self.run(Op::AddPortTag, "PUT", &path, |w| {
            if let Some(reason) = too_long(tag) {
                return Err(invalid_tags(&path, reason));
            }
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

    pub(crate) async fn port_set_tags(&self, port_id: &str, tags: &[String]) -> Result<()> {
        let path = format!("/ports/{port_id}/tags");
        self.run(Op::SetPortTags, "PUT", &path, |w| {
            if let Some(reason) = tag_list_problem(tags) {
                return Err(invalid_tags(&path, reason));
            }
            self.port_for_tags(w, port_id, &path)?;
            if tags.len() > MAX_TAGS {
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

    pub(crate) async fn port_delete(&self, id: &str) -> Result<()> {
        let path = format!("/ports/{id}");
        self.run(Op::DeletePort, "DELETE", &path, |w| {
            let p = w
                .ports
                .get(id)
                .filter(|p| self.port_visible(w, p))
                .ok_or_else(|| port_not_found("DELETE", &path, id))?;
            // Neutron's L3 plugin guards every router interface owner (legacy, HA, DVR), as
            // long as the router still exists.
            if is_router_interface_owner(&p.device_owner) && w.routers.contains_key(&p.device_id) {
                return Err(refusals::service_port_in_use(&path, id, &p.device_owner));
            }
            w.ports.remove(id);
            Ok(())
        })
        .await
    }
}
