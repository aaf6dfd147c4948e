//! Neutron's words for refusals whose wording depends on the cloud's plugins. The operator
//! passes Neutron's text through; the fake answers with it, and `kubectl clusterlink plan`
//! predicts it for the cloud it talks to. One spelling each, here.

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
