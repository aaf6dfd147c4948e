//! Neutron's refusals that both simulated Neutrons give: the fake (`bnerd-cloud-fake`) and the
//! engine's overlay that `kubectl clusterlink plan` and the batched resync run the reconcile
//! over. The operator passes Neutron's text through, so a plan predicts it word for word only
//! when both say it alike: one spelling each, here (status, type and message as Neutron
//! answers them; the wording that depends on the cloud's L3 plugin takes its flag).

use crate::error::{CloudError, NeutronErrorKind};

/// The extension ML2/OVN's L3 plugin (`ovn-router`) lists. The mixin that brings it
/// (`ExtraGatewaysDbOnlyMixin`) also replaces the router-subnet check: it compares CIDRs and
/// has no "already has a port" wording (docs/design.md, "How Neutron backends differ").
pub const EXTERNAL_GATEWAY_MULTIHOMING: &str = "external-gateway-multihoming";

/// A subnet as a refusal names it.
#[derive(Debug, Clone, Copy)]
pub struct SubnetRef<'a> {
    pub id: &'a str,
    pub cidr: &'a str,
}

/// Neutron's message (400 BadRequest) for a router interface on `new` while the router
/// already has one on `existing` (the same subnet, or, checked by CIDR, an overlapping one).
pub fn second_router_interface(by_cidr: bool, new: SubnetRef, existing: SubnetRef) -> String {
    if by_cidr {
        format!(
            "Bad router request: Cidr {} of subnet {} overlaps with cidr {} of subnet {}.",
            new.cidr, new.id, existing.cidr, existing.id
        )
    } else {
        format!(
            "Bad router request: Router already has a port on subnet {}.",
            existing.id
        )
    }
}

/// [`second_router_interface`] as Neutron answers it: 400 BadRequest on the attach.
pub fn second_router_interface_refused(
    path: &str,
    by_cidr: bool,
    new: SubnetRef,
    existing: SubnetRef,
) -> CloudError {
    refusal(
        "PUT",
        path,
        400,
        "BadRequest",
        second_router_interface(by_cidr, new, existing),
    )
}

/// An object of `kind` (Neutron's resource name, capitalised) that does not exist, or that
/// the caller cannot see (Neutron answers both alike).
fn not_found(kind: &str, method: &str, path: &str, id: &str) -> CloudError {
    refusal(
        method,
        path,
        404,
        &format!("{kind}NotFound"),
        format!("{kind} {id} could not be found."),
    )
}

/// A port that does not exist, or that the caller cannot see.
pub fn port_not_found(method: &str, path: &str, id: &str) -> CloudError {
    not_found("Port", method, path, id)
}

/// A network that does not exist, or that the caller cannot see.
pub fn network_not_found(method: &str, path: &str, id: &str) -> CloudError {
    not_found("Network", method, path, id)
}

/// A subnet that does not exist, or that the caller cannot see.
pub fn subnet_not_found(method: &str, path: &str, id: &str) -> CloudError {
    not_found("Subnet", method, path, id)
}

/// A router that does not exist, or that the caller cannot see (Neutron's message for a
/// router has no full stop).
pub fn router_not_found(method: &str, path: &str, id: &str) -> CloudError {
    refusal(
        method,
        path,
        404,
        "RouterNotFound",
        format!("Router {id} could not be found"),
    )
}

/// An attach of a port that already has a device (`device_id` set).
pub fn port_in_use(path: &str, port_id: &str, network_id: &str, device_id: &str) -> CloudError {
    refusal(
        "PUT",
        path,
        409,
        NeutronErrorKind::PortInUse.as_str(),
        format!(
            "Unable to complete operation on port {port_id} for network {network_id}. Port already has an attached device {device_id}."
        ),
    )
}

/// A detach of a port that is not an interface of the router (or does not exist).
pub fn router_interface_not_found(path: &str, router_id: &str, port_id: &str) -> CloudError {
    refusal(
        "PUT",
        path,
        404,
        "RouterInterfaceNotFound",
        format!("Router {router_id} does not have an interface with id {port_id}"),
    )
}

/// A detach of an interface on `subnet_id` while a route's nexthop lies in that subnet.
pub fn router_interface_in_use_by_route(
    path: &str,
    router_id: &str,
    subnet_id: &str,
) -> CloudError {
    refusal(
        "PUT",
        path,
        409,
        NeutronErrorKind::RouterInterfaceInUseByRoute.as_str(),
        format!(
            "Router interface for subnet {subnet_id} on router {router_id} cannot be deleted, as it is required by one or more routes."
        ),
    )
}

/// A `DELETE /ports/{id}` of a router's interface port while the router exists (the L3
/// plugin guards every interface owner: legacy, HA, DVR).
pub fn service_port_in_use(path: &str, id: &str, device_owner: &str) -> CloudError {
    refusal(
        "DELETE",
        path,
        409,
        "ServicePortInUse",
        format!(
            "Port {id} cannot be deleted directly via the port API: has device owner {device_owner}."
        ),
    )
}

/// Neutron's error answer (a `NeutronError` body: its type and message) as the client reports
/// it. Every refusal above is one; the fake answers each of its own with it too.
pub fn refusal(method: &str, path: &str, status: u16, kind: &str, message: String) -> CloudError {
    CloudError::Api {
        method: method.into(),
        path: path.into(),
        status,
        kind: kind.into(),
        message,
    }
}

/// Whether `message` is Neutron's refusal of a second router interface, in either wording.
pub fn is_second_router_interface(message: &str) -> bool {
    message.contains("Router already has a port on subnet")
        || (message.contains("Bad router request: Cidr") && message.contains("overlaps with cidr"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_wordings_are_recognised() {
        let s = SubnetRef {
            id: "s1",
            cidr: "10.254.0.0/24",
        };
        let plain = second_router_interface(false, s, s);
        let ovn = second_router_interface(true, s, s);
        assert_eq!(
            plain,
            "Bad router request: Router already has a port on subnet s1."
        );
        assert_eq!(
            ovn,
            "Bad router request: Cidr 10.254.0.0/24 of subnet s1 overlaps with cidr 10.254.0.0/24 of subnet s1."
        );
        assert!(is_second_router_interface(&plain) && is_second_router_interface(&ovn));
        assert!(!is_second_router_interface(
            "Bad router request: something else."
        ));
    }
}
