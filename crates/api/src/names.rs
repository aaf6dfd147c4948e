//! Names fixed by the spec or by the operator's contract with other tools.

/// API group of every CRD this operator owns.
pub const GROUP: &str = "ipsec.bnerd.net";
/// Finalizer that holds a ClusterLink until its cloud resources are unwound.
pub const FINALIZER: &str = "ipsec.bnerd.net/clusterlink-cleanup";
/// Platform-admin attestation required on a cross-tenant link.
pub const ANNOTATION_API_ACCESS: &str = "ipsec.bnerd.net/customer-openstack-api-access";
/// Escape hatch that releases a deleting cross-tenant link without customer-side cleanup.
pub const ANNOTATION_ABANDON: &str = "ipsec.bnerd.net/abandon-customer-resources";
/// Default namespace holding `clusterlink-<name>` Secrets.
pub const DEFAULT_CREDENTIALS_NAMESPACE: &str = "bnerd-vpn-clusterlinks";
/// Field manager used for status server-side apply.
pub const FIELD_MANAGER: &str = "bnerd-vpn-operator";

/// Every port this operator creates or adopts carries this tag, so an operator-wide sweep
/// (or a human) can tell our ports from everyone else's.
pub const TAG_MANAGED: &str = "bnerd-vpn-operator";

const UID_PREFIX: &str = "clusterlink-uid=";
const NAME_PREFIX: &str = "clusterlink=";

/// Tag naming the owning ClusterLink by UID: the identity the reconciler trusts.
pub fn tag_link_uid(uid: &str) -> String {
    format!("{UID_PREFIX}{uid}")
}

/// Tag naming the owning ClusterLink by name: for humans and `openstack port list --tags`.
pub fn tag_link_name(name: &str) -> String {
    format!("{NAME_PREFIX}{name}")
}

/// Written at the end of a leg port's description at create time, which Neutron always
/// keeps: if the tags are dropped or a crash lands between create and tagging, this still
/// proves whose port it is.
pub fn description_uid_marker(uid: &str) -> String {
    format!("{UID_PREFIX}{uid}")
}

/// The ClusterLink (by UID) whose leg this port is (docs/design.md, "The leg's identity"): its UID
/// tag, or for a port with no tags at all, the marker ending its description. The one statement of
/// the rule the reconciler, the unwind and `kubectl clusterlink doctor` all apply.
pub fn leg_owner_uid<'a>(tags: &'a [String], description: &'a str) -> Option<&'a str> {
    match tags.iter().find_map(|t| t.strip_prefix(UID_PREFIX)) {
        Some(uid) => Some(uid),
        None if tags.is_empty() => description
            .rsplit_once(UID_PREFIX)
            .map(|(_, uid)| uid)
            .filter(|uid| !uid.is_empty()),
        None => None,
    }
}

/// The link name a port's tags carry, if any.
pub fn link_name_in_tags(tags: &[String]) -> Option<&str> {
    tags.iter().find_map(|t| t.strip_prefix(NAME_PREFIX))
}

/// Human-readable leg port name; never used for identity.
pub fn leg_port_name(link_name: &str) -> String {
    format!("clusterlink-{link_name}")
}

/// A customer project's per-customer transit network (and its subnet) behind the transit
/// network `transit`. Unlike a leg, these are the operator's own objects in its own project,
/// one per customer project and gateway fabric (one operator project may serve several
/// gateway clusters, each with its transit network): the name is their identity, and the
/// operator finds them again by it (docs/design.md, "Per-customer transit").
pub fn customer_transit_name(transit: &str, project: &str) -> String {
    named(CUSTOMER_TRANSIT_PREFIX, transit, project)
}

/// A customer project's edge router on the transit network `transit`, and its leg port there.
pub fn edge_router_name(transit: &str, project: &str) -> String {
    named(EDGE_PREFIX, transit, project)
}

const EDGE_PREFIX: &str = "bnerd-vpn-edge-";
const CUSTOMER_TRANSIT_PREFIX: &str = "bnerd-vpn-customer-";

/// The project a name from [`customer_transit_name`] on `transit` is for; `None` for any
/// other name. The batched resync finds every customer transit in one list by it.
pub fn customer_transit_project<'a>(transit: &str, name: &'a str) -> Option<&'a str> {
    project_in(name, CUSTOMER_TRANSIT_PREFIX, transit)
}

/// The project a name from [`edge_router_name`] on `transit` is for; `None` for any other.
pub fn edge_router_project<'a>(transit: &str, name: &'a str) -> Option<&'a str> {
    project_in(name, EDGE_PREFIX, transit)
}

// The one spelling of a per-project name and its reading back.
const ON: &str = "-on-";

fn named(prefix: &str, transit: &str, project: &str) -> String {
    format!("{prefix}{project}{ON}{transit}")
}

fn project_in<'a>(name: &'a str, prefix: &str, transit: &str) -> Option<&'a str> {
    name.strip_prefix(prefix)?
        .strip_suffix(transit)?
        .strip_suffix(ON)
        .filter(|p| !p.is_empty())
}

/// Whether a port's name makes it an edge router's leg (attached or left loose by a crash):
/// never a gateway's port.
pub fn is_edge_leg_name(name: &str) -> bool {
    name.starts_with(EDGE_PREFIX)
}

/// The Secret keys of a cross-tenant link's application credential.
pub const KEY_AC_ID: &str = "OS_APPLICATION_CREDENTIAL_ID";
pub const KEY_AC_SECRET: &str = "OS_APPLICATION_CREDENTIAL_SECRET";

/// The only Secret name a cross-tenant link may reference.
pub fn credentials_secret_name(link_name: &str) -> String {
    format!("clusterlink-{link_name}")
}

/// True when a port's tags say some ClusterLink (any) manages it.
pub fn is_managed(tags: &[String]) -> bool {
    tags.iter()
        .any(|t| t == TAG_MANAGED || t.starts_with(UID_PREFIX) || t.starts_with(NAME_PREFIX))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_customer_transits_name_gives_its_project_back_and_no_other_name_does() {
        let (t, p) = ("5f0c-transit", "c0ffee01");
        assert_eq!(
            customer_transit_project(t, &customer_transit_name(t, p)),
            Some(p)
        );
        assert_eq!(edge_router_project(t, &edge_router_name(t, p)), Some(p));
        // Another transit network's, the other kind's, an empty project, a hand-made name.
        assert_eq!(
            customer_transit_project("other", &customer_transit_name(t, p)),
            None
        );
        assert_eq!(customer_transit_project(t, &edge_router_name(t, p)), None);
        assert_eq!(edge_router_project(t, &customer_transit_name(t, p)), None);
        assert_eq!(
            customer_transit_project(t, &customer_transit_name(t, "")),
            None
        );
        assert_eq!(customer_transit_project(t, "vpn-transit"), None);
    }
}
