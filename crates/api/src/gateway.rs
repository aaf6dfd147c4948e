//! What the reverse-route step needs to know about a VPNGateway/IPsecGateway, read from
//! the object's JSON so the operator does not depend on those CRDs' full types.

use serde_json::Value;

use crate::clusterlink::GatewayRef;

/// Kinds whose reverse exposures need a route on every linked service router.
pub const GATEWAY_KINDS: &[(&str, &str)] = &[
    ("IPsecGateway", "ipsecgateways"),
    ("VPNGateway", "vpngateways"),
];

/// The API resource of a gateway kind (both live in our group, v1alpha1).
pub fn resource(kind: &str, plural: &str) -> kube::api::ApiResource {
    kube::api::ApiResource {
        group: crate::names::GROUP.into(),
        version: "v1alpha1".into(),
        api_version: format!("{}/v1alpha1", crate::names::GROUP),
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// One gateway that needs a reverse route: `service_cidr` via `port_fixed_ip`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReverseTarget {
    pub gateway: GatewayRef,
    pub service_cidr: String,
    pub port_fixed_ip: String,
    /// The gateway object's `metadata.uid`: Events about the gateway must carry it, as
    /// `kubectl describe` finds an object's Events by uid. `None` for an object without one
    /// (built by hand, not read from the apiserver).
    pub uid: Option<String>,
    /// The gateway object's `metadata.creationTimestamp` (RFC 3339, as the apiserver writes
    /// it: one format, so the text orders by time): of two gateways whose serviceCIDRs
    /// overlap, the older keeps its routes. `None` (built by hand) counts as newest.
    pub created: Option<String>,
}

/// A status field longer than this is no CIDR or address (those take at most 43 bytes):
/// the index keeps a short stand-in instead, which the screen refuses naming the field.
pub const MAX_STATUS_FIELD_BYTES: usize = 64;

/// A status field as the screen sees it: `None` while the gateway has not filled it in (absent
/// or null); the text when it is a string of sensible size; otherwise a stand-in that is no
/// CIDR or address, so the gateway is refused naming the field instead of silently skipped,
/// and the index (one entry per gateway of the estate) stays small whatever the object holds.
fn status_field(obj: &Value, pointer: &str) -> Option<String> {
    match obj.pointer(pointer)? {
        Value::Null => None,
        Value::String(s) if s.len() <= MAX_STATUS_FIELD_BYTES => Some(s.clone()),
        Value::String(s) => {
            let head: String = s.chars().take(32).collect();
            Some(format!("{head}... ({} bytes)", s.len()))
        }
        other => {
            let kind = match other {
                Value::Bool(_) => "a boolean",
                Value::Number(_) => "a number",
                Value::Array(_) => "a list",
                _ => "an object",
            };
            Some(format!("(not a string but {kind})"))
        }
    }
}

/// A gateway needs a reverse route once it has at least one `spec.reverseExposures` entry and
/// its status reports both `serviceCIDR` and `portFixedIP`. Deleting gateways need none.
pub fn reverse_target(
    kind: &str,
    namespace: &str,
    name: &str,
    obj: &Value,
) -> Option<ReverseTarget> {
    if obj
        .pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
    {
        return None;
    }
    let exposures = obj.pointer("/spec/reverseExposures")?.as_array()?;
    if exposures.is_empty() {
        return None;
    }
    let service_cidr = status_field(obj, "/status/serviceCIDR")?;
    let port_fixed_ip = status_field(obj, "/status/portFixedIP")?;
    Some(ReverseTarget {
        gateway: GatewayRef {
            kind: kind.into(),
            namespace: namespace.into(),
            name: name.into(),
        },
        service_cidr,
        port_fixed_ip,
        uid: obj
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .map(str::to_owned),
        created: obj
            .pointer("/metadata/creationTimestamp")
            .and_then(Value::as_str)
            .filter(|s| s.len() <= MAX_STATUS_FIELD_BYTES)
            .map(str::to_owned),
    })
}

/// One gateway object as a reverse target, if it has reverse exposures.
pub fn target_of(kind: &str, obj: &kube::api::DynamicObject) -> Option<ReverseTarget> {
    let v = serde_json::to_value(obj).ok()?;
    reverse_target(
        kind,
        &obj.metadata.namespace.clone().unwrap_or_default(),
        &obj.metadata.name.clone().unwrap_or_default(),
        &v,
    )
}

/// Every gateway with reverse exposures, either kind, any namespace, by two LISTs. A kind
/// whose CRD is not installed simply contributes none. The operator reads [`TargetIndex`]
/// instead; this is for one-shot callers (tests, tools).
pub async fn reverse_targets(client: &kube::Client) -> Result<Vec<ReverseTarget>, kube::Error> {
    let mut out = vec![];
    for (kind, plural) in GATEWAY_KINDS {
        let api: kube::api::Api<kube::api::DynamicObject> =
            kube::api::Api::all_with(client.clone(), &resource(kind, plural));
        let list = match api.list(&kube::api::ListParams::default()).await {
            Ok(l) => l,
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => return Err(e),
        };
        out.extend(list.iter().filter_map(|o| target_of(kind, o)));
    }
    out.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn only_gateways_with_exposures_and_status_count() {
        let full = json!({"spec": {"reverseExposures": [{"port": 80}]}, "status": {"serviceCIDR": "100.64.1.0/24", "portFixedIP": "10.254.0.10"}});
        let t = reverse_target("IPsecGateway", "ns", "gw", &full).unwrap();
        assert_eq!(
            (t.service_cidr.as_str(), t.port_fixed_ip.as_str()),
            ("100.64.1.0/24", "10.254.0.10")
        );
        assert!(
            reverse_target(
                "IPsecGateway",
                "ns",
                "gw",
                &json!({"spec": {"reverseExposures": []}, "status": full["status"]})
            )
            .is_none()
        );
        assert!(
            reverse_target(
                "IPsecGateway",
                "ns",
                "gw",
                &json!({"spec": full["spec"], "status": {}})
            )
            .is_none()
        );
        // Wrong types and oversized values still make a target, which the screen refuses
        // naming the field; the index entry stays small.
        let odd = json!({"spec": full["spec"], "status": {"serviceCIDR": 42, "portFixedIP": "1".repeat(1 << 20)}});
        let t = reverse_target("IPsecGateway", "ns", "gw", &odd).unwrap();
        assert_eq!(t.service_cidr, "(not a string but a number)");
        assert!(
            t.port_fixed_ip.len() < 2 * MAX_STATUS_FIELD_BYTES,
            "{}",
            t.port_fixed_ip
        );
        assert!(t.port_fixed_ip.ends_with("... (1048576 bytes)"));
        // The object's uid travels with the target (Events about the gateway need it).
        assert_eq!(t.uid, None);
        let mut with_uid = full.clone();
        with_uid["metadata"] = json!({"uid": "6f1c0e9a-0000-4000-8000-000000000001"});
        let t = reverse_target("IPsecGateway", "ns", "gw", &with_uid).unwrap();
        assert_eq!(
            t.uid.as_deref(),
            Some("6f1c0e9a-0000-4000-8000-000000000001")
        );
        assert_eq!(t.created, None);
        with_uid["metadata"]["creationTimestamp"] = json!("2026-11-30T10:00:00Z");
        let t = reverse_target("IPsecGateway", "ns", "gw", &with_uid).unwrap();
        assert_eq!(t.created.as_deref(), Some("2026-11-30T10:00:00Z"));
        let null = json!({"spec": full["spec"], "status": {"serviceCIDR": null, "portFixedIP": "10.254.0.10"}});
        assert!(reverse_target("IPsecGateway", "ns", "gw", &null).is_none());
        let mut deleting = full.clone();
        deleting["metadata"] = json!({"deletionTimestamp": "2026-01-01T00:00:00Z"});
        assert!(reverse_target("IPsecGateway", "ns", "gw", &deleting).is_none());
    }
}
