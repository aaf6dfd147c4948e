//! Validated: the spec checked against the transit subnet, before any cloud call.

use std::net::Ipv4Addr;

use bnerd_api::cidr::{check_transit_ip, overlaps, parse_service_cidr};
use bnerd_api::{ClusterLinkSpec, Reason};
use bnerd_cloud::fabric::{CidrPolicy, CidrRefusal};
use ipnet::Ipv4Net;

use super::StepFail;

#[derive(Debug, Clone)]
pub(crate) struct Valid {
    pub cidr: Ipv4Net,
    pub pinned_ip: Option<Ipv4Addr>,
}

/// Validated=False/InvalidSpec with the field named, or what the later steps need.
pub(crate) fn plan(
    spec: &ClusterLinkSpec,
    subnet: Ipv4Net,
    policy: &CidrPolicy,
    pool: Option<Ipv4Net>,
) -> Result<Valid, StepFail> {
    check(spec, subnet)
        .and_then(|v| admitted(v.cidr, policy).map(|()| v))
        .and_then(|v| outside_pool(v.cidr, pool).map(|()| v))
        .map_err(|m| StepFail::terminal(Reason::InvalidSpec, m))
}

/// The per-customer transit pool is the operator's: every customer transit cut from it is
/// routed on the gateway router via its edge router, so a link's CIDR inside it would take
/// (or lose) a customer transit's traffic.
fn outside_pool(cidr: Ipv4Net, pool: Option<Ipv4Net>) -> Result<(), String> {
    match pool {
        Some(pool) if overlaps(cidr, pool) => Err(format!(
            "spec.serviceClusterCIDR {cidr} overlaps the per-customer transit pool {pool} (operator setting IPSEC_PER_CUSTOMER_TRANSIT_POOL, chart perCustomerTransit.pool)"
        )),
        _ => Ok(()),
    }
}

/// The operator's bounds on service CIDRs: a link's CIDR is routed on the gateway router, so
/// one link must not pull large parts of the address space (0.0.0.0/1 and 128.0.0.0/1 on two
/// links would take nearly all of it).
fn admitted(cidr: Ipv4Net, policy: &CidrPolicy) -> Result<(), String> {
    match policy.admits(cidr) {
        Ok(()) => Ok(()),
        Err(CidrRefusal::TooWide) => Err(format!(
            "spec.serviceClusterCIDR {cidr} is wider than the operator admits: its prefix must be /{} or longer (operator setting IPSEC_SERVICE_CIDR_MIN_PREFIX_LENGTH, chart clusterLink.serviceCIDRMinPrefixLength)",
            policy.min_prefix_len
        )),
        Err(CidrRefusal::OutsideRanges) => Err(format!(
            "spec.serviceClusterCIDR {cidr} is outside the ranges the operator admits ({}; operator setting IPSEC_SERVICE_CIDR_RANGES, chart clusterLink.serviceCIDRRanges)",
            policy.ranges_text()
        )),
    }
}

/// Validated=True's message.
pub(crate) fn valid_message() -> &'static str {
    "spec is valid"
}

/// A cross-tenant link handed to [`crate::Engine::reconcile`] without its customer credential,
/// refused before any cloud call: building it on the operator's credential would put the leg in
/// the operator's project. No path of the operator, `plan` or the resync gets here (they send a
/// cross-tenant link through `reconcile_cross_tenant`, or refuse it first); the guard stays
/// while `Engine::reconcile` is public.
pub(crate) fn customer_credential_missing() -> StepFail {
    StepFail::terminal(
        Reason::InvalidSpec,
        "a cross-tenant ClusterLink (spec.credentialsSecretRef) reached the reconcile without its customer credential; nothing was changed",
    )
}

fn check(spec: &ClusterLinkSpec, subnet: Ipv4Net) -> Result<Valid, String> {
    if spec.service_cluster_router.trim().is_empty() {
        return Err(
            "spec.serviceClusterRouter is empty; name the service cluster's router by name or ID"
                .into(),
        );
    }
    let cidr = parse_service_cidr(&spec.service_cluster_cidr)?;
    if overlaps(cidr, subnet) {
        return Err(format!(
            "spec.serviceClusterCIDR {cidr} overlaps the transit subnet {subnet}"
        ));
    }
    let pinned_ip = spec
        .transit_ip
        .as_deref()
        .map(|ip| check_transit_ip(ip, subnet))
        .transpose()?;
    if spec.credentials_secret_ref.is_some() && spec.customer_project_id.is_none() {
        return Err(
            "spec.customerProjectID is required when spec.credentialsSecretRef is set".into(),
        );
    }
    // The pin names an address on the main transit, where a PerCustomer link has no leg: left
    // to the leg step, it would take the working leg away and never build another.
    if spec.per_customer() && pinned_ip.is_some() {
        return Err(
            "spec.transitIP does not apply to a PerCustomer link: its leg stands on its project's customer transit, where Neutron picks the address (status.transitIP); remove spec.transitIP".into(),
        );
    }
    Ok(Valid { cidr, pinned_ip })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnerd_api::SecretRef;

    fn spec(cidr: &str, ip: Option<&str>) -> ClusterLinkSpec {
        ClusterLinkSpec {
            service_cluster_router: "r".into(),
            service_cluster_cidr: cidr.into(),
            transit_ip: ip.map(String::from),
            ..Default::default()
        }
    }

    fn subnet() -> Ipv4Net {
        "10.254.0.0/24".parse().unwrap()
    }

    #[test]
    fn service_cidrs_outside_the_operators_bounds_are_invalid() {
        let policy = CidrPolicy {
            ranges: vec![
                "10.0.0.0/8".parse().unwrap(),
                "100.64.0.0/10".parse().unwrap(),
            ],
            min_prefix_len: 12,
        };
        // (rule, CIDR, admitted, words the message must carry)
        let rows: [(&str, &str, bool, &[&str]); 5] = [
            ("inside a range, long enough", "10.251.0.0/16", true, &[]),
            (
                "a quarter of the address space: too wide",
                "192.0.0.0/2",
                false,
                &["/12 or longer", "IPSEC_SERVICE_CIDR_MIN_PREFIX_LENGTH"],
            ),
            (
                "half of it (0.0.0.0/1 overlaps the transit subnet anyway)",
                "128.0.0.0/1",
                false,
                &["IPSEC_SERVICE_CIDR_MIN_PREFIX_LENGTH"],
            ),
            (
                "public space",
                "11.0.0.0/16",
                false,
                &[
                    "10.0.0.0/8, 100.64.0.0/10",
                    "IPSEC_SERVICE_CIDR_RANGES",
                    "clusterLink.serviceCIDRRanges",
                ],
            ),
            (
                "a whole range is wider than allowed",
                "100.64.0.0/10",
                false,
                &["clusterLink.serviceCIDRMinPrefixLength"],
            ),
        ];
        for (rule, cidr, ok, words) in rows {
            let got = plan(&spec(cidr, None), subnet(), &policy, None);
            assert_eq!(got.is_ok(), ok, "{rule}");
            if let Err(f) = got {
                assert_eq!(f.reason, Reason::InvalidSpec, "{rule}");
                for w in words {
                    assert!(f.message.contains(w), "{rule}: {}", f.message);
                }
            }
        }
        // No bounds: any valid CIDR.
        assert!(
            plan(
                &spec("128.0.0.0/1", None),
                subnet(),
                &CidrPolicy::default(),
                None
            )
            .is_ok()
        );
    }

    #[test]
    fn accepts_and_rejects_naming_the_field() {
        assert!(check(&spec("10.251.0.0/16", Some("10.254.0.3")), subnet()).is_ok());
        let f = plan(
            &spec("10.251.0.0/33", None),
            subnet(),
            &CidrPolicy::default(),
            None,
        )
        .unwrap_err();
        assert_eq!((f.reason, f.retryable), (Reason::InvalidSpec, false));
        for (s, field) in [
            (spec("10.251.0.0/33", None), "spec.serviceClusterCIDR"),
            (spec("10.254.0.0/16", None), "spec.serviceClusterCIDR"),
            (spec("10.251.0.0/16", Some("10.254.0.2")), "spec.transitIP"),
            (spec("10.251.0.0/16", Some("10.254.9.9")), "spec.transitIP"),
        ] {
            assert!(check(&s, subnet()).unwrap_err().contains(field), "{s:?}");
        }
        let mut s = spec("10.251.0.0/16", None);
        s.service_cluster_router = " ".into();
        assert!(
            check(&s, subnet())
                .unwrap_err()
                .contains("spec.serviceClusterRouter")
        );
        s.service_cluster_router = "r".into();
        s.credentials_secret_ref = Some(SecretRef {
            name: "clusterlink-x".into(),
            namespace: "n".into(),
        });
        assert!(
            check(&s, subnet())
                .unwrap_err()
                .contains("spec.customerProjectID is required")
        );
    }

    #[test]
    fn a_per_customer_link_pins_no_transit_ip() {
        let mut s = spec("10.251.0.0/16", Some("10.254.0.9"));
        s.credentials_secret_ref = Some(SecretRef {
            name: "clusterlink-x".into(),
            namespace: "n".into(),
        });
        s.customer_project_id = Some("c".into());
        assert!(check(&s, subnet()).is_ok(), "a Shared link may pin");
        s.transit_isolation = Some(bnerd_api::TransitIsolation::PerCustomer);
        let m = check(&s, subnet()).unwrap_err();
        assert!(
            m.contains("spec.transitIP does not apply to a PerCustomer link"),
            "{m}"
        );
        s.transit_ip = None;
        assert!(check(&s, subnet()).is_ok());
    }

    #[test]
    fn a_link_cidr_in_the_per_customer_pool_is_refused_naming_the_setting() {
        let pool: Ipv4Net = "10.200.0.0/16".parse().unwrap();
        let none = CidrPolicy::default();
        for (cidr, ok) in [
            ("10.200.4.0/24", false),
            ("10.200.0.0/13", false),
            ("10.251.0.0/16", true),
        ] {
            let got = plan(&spec(cidr, None), subnet(), &none, Some(pool));
            assert_eq!(got.is_ok(), ok, "{cidr}");
            if let Err(f) = got {
                assert_eq!(f.reason, Reason::InvalidSpec);
                assert!(
                    f.message.contains("IPSEC_PER_CUSTOMER_TRANSIT_POOL")
                        && f.message.contains("10.200.0.0/16"),
                    "{}",
                    f.message
                );
            }
        }
        // No pool configured: nothing to overlap.
        assert!(plan(&spec("10.200.4.0/24", None), subnet(), &none, None).is_ok());
    }
}
