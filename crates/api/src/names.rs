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

/// Tag naming the owning ClusterLink by UID: the identity the reconciler trusts.
pub fn tag_link_uid(uid: &str) -> String {
    format!("clusterlink-uid={uid}")
}

/// Tag naming the owning ClusterLink by name: for humans and `openstack port list --tags`.
pub fn tag_link_name(name: &str) -> String {
    format!("clusterlink={name}")
}

/// Written into a leg port's description at create time, which Neutron always keeps: if the
/// tags are dropped or a crash lands between create and tagging, this still proves whose
/// port it is.
pub fn description_uid_marker(uid: &str) -> String {
    format!("clusterlink-uid={uid}")
}

/// The link UID a port's description marker names, if any.
pub fn uid_in_description(description: &str) -> Option<&str> {
    description
        .rsplit_once("clusterlink-uid=")
        .map(|(_, uid)| uid.trim())
        .filter(|uid| !uid.is_empty())
}

/// The link UID a port's tags name, if any.
pub fn uid_in_tags(tags: &[String]) -> Option<&str> {
    tags.iter().find_map(|t| t.strip_prefix("clusterlink-uid="))
}

/// Human-readable leg port name; never used for identity.
pub fn leg_port_name(link_name: &str) -> String {
    format!("clusterlink-{link_name}")
}

/// The only Secret name a cross-tenant link may reference.
pub fn credentials_secret_name(link_name: &str) -> String {
    format!("clusterlink-{link_name}")
}

/// True when a port's tags say some ClusterLink (any) manages it.
pub fn is_managed(tags: &[String]) -> bool {
    tags.iter().any(|t| {
        t == TAG_MANAGED || t.starts_with("clusterlink-uid=") || t.starts_with("clusterlink=")
    })
}
