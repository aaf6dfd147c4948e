//! Who sees and may use what, as Neutron's default policy decides it for a member (an admin
//! sees and may touch everything). One place for it, so every call hides and refuses alike.

use bnerd_cloud::{ACCESS_AS_SHARED, CloudError, Network, Port, Result, Router};

use crate::world::{FakeNeutron, World, api};

/// The network is shared with `project` (globally, or by an `access_as_shared` policy).
pub(crate) fn shared_with(w: &World, net: &Network, project: &str) -> bool {
    net.shared || grants(w, &net.id, project, None)
}

/// An admin shared the network with every project (`target_tenant="*"`): Neutron then calls
/// it shared in every view, the owner's included.
pub(crate) fn shared_with_all(w: &World, network_id: &str) -> bool {
    w.rbac.values().any(|r| {
        r.object_id == network_id && r.action == ACCESS_AS_SHARED && r.target_tenant == "*"
    })
}

/// Some policy other than `except` lets `project` use the network.
pub(crate) fn grants(w: &World, network_id: &str, project: &str, except: Option<&str>) -> bool {
    w.rbac.values().any(|r| {
        r.object_id == network_id
            && r.action == ACCESS_AS_SHARED
            && (r.target_tenant == project || r.target_tenant == "*")
            && except != Some(r.id.as_str())
    })
}

/// Neutron's `context_is_admin`: `role:admin`, or a role the cloud's customised policy adds.
/// oslo.policy matches role names ignoring case, so `Admin` is admin too.
pub(crate) fn is_cloud_admin(w: &World, roles: &[String]) -> bool {
    roles
        .iter()
        .any(|r| r.eq_ignore_ascii_case("admin") || w.privileged_role(r))
}

/// Neutron's answer for a port the caller cannot see: the same as for one that does not exist.
pub(crate) fn port_not_found(method: &str, path: &str, id: &str) -> CloudError {
    bnerd_cloud::refusals::port_not_found(method, path, id)
}

impl FakeNeutron {
    pub(crate) fn owns(&self, project: &str) -> bool {
        self.admin || project == self.project_id
    }

    /// The caller may use this network: it owns it, or the network is shared with its
    /// project (globally or by an `access_as_shared` RBAC policy).
    pub(crate) fn can_use(&self, w: &World, net: &Network) -> bool {
        self.owns(&net.project_id) || shared_with(w, net, &self.project_id)
    }

    /// A network as this caller sees it: `shared` is true only for a project it is shared
    /// with, never for the owner of an RBAC-shared network.
    pub(crate) fn network_view(&self, w: &World, net: &Network) -> Network {
        Network {
            shared: net.shared
                || shared_with_all(w, &net.id)
                || (net.project_id != self.project_id && shared_with(w, net, &self.project_id)),
            ..net.clone()
        }
    }

    /// Neutron lets only the owner (or an admin) change a port's tags. Its tagging
    /// controller reads the port before policy, so a port the caller cannot see is refused
    /// (403), not hidden (measured). A port that does not exist at all makes Neutron 29 fail
    /// with a 500 (KeyError in tagging.py's `_get_policy_action`); the fake answers 404.
    pub(crate) fn port_for_tags(&self, w: &World, port_id: &str, path: &str) -> Result<()> {
        let port = w
            .ports
            .get(port_id)
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

    pub(crate) fn port_visible(&self, w: &World, p: &Port) -> bool {
        self.owns(&p.project_id)
            || w.networks
                .get(&p.network_id)
                .is_some_and(|n| self.owns(&n.project_id))
    }

    pub(crate) fn router_of<'w>(
        &self,
        w: &'w World,
        id: &str,
        method: &str,
        path: &str,
    ) -> Result<&'w Router> {
        w.routers
            .get(id)
            .filter(|r| self.owns(&r.project_id))
            .ok_or_else(|| bnerd_cloud::refusals::router_not_found(method, path, id))
    }
}
