//! `doctor`'s warnings about what the operator routes without bounds: links whose
//! spec.serviceClusterCIDR lies outside the recommended bounds (docs/operations.md, "What
//! the operator routes, and which port is a leg"), and the gateway bounds left unset, naming
//! the gateways outside the recommended ranges. Warnings, not problems: nothing is wrong yet, and the defaults admit what earlier
//! versions admitted.

use bnerd_api::ClusterLink;
use bnerd_api::gateway::ReverseTarget;
use bnerd_cloud::fabric::CidrPolicy;
use ipnet::Ipv4Net;

use crate::finding::Finding;

/// One warning per link outside the recommended bounds for links.
pub fn link_findings(links: &[ClusterLink]) -> Vec<Finding> {
    let rec = CidrPolicy::recommended_for_links();
    links
        .iter()
        .filter_map(|l| {
            let cidr: Ipv4Net = l.spec.service_cluster_cidr.parse().ok()?;
            rec.admits(cidr).err()?;
            Some(Finding::warning(format!(
                "ClusterLink {}: spec.serviceClusterCIDR {cidr} is outside the recommended bounds ({}, prefix /{} or longer); it converges while IPSEC_SERVICE_CIDR_RANGES and IPSEC_SERVICE_CIDR_MIN_PREFIX_LENGTH are unset (the default), but setting the recommended bounds would refuse it: recreate it with a CIDR inside them first, or keep the settings wide enough for it",
                l.metadata.name.as_deref().unwrap_or_default(),
                rec.ranges_text(),
                rec.min_prefix_len
            )))
        })
        .collect()
}

/// While the operator's gateway bounds are unset (`ranges` as the operator is configured),
/// one warning saying who steers the service routers, naming the gateways whose
/// status.serviceCIDR lies outside the recommended ranges.
pub fn gateway_findings(ranges: Option<&str>, targets: &[ReverseTarget]) -> Vec<Finding> {
    if ranges.is_some_and(|r| !r.trim().is_empty()) {
        return vec![];
    }
    let rec = CidrPolicy::recommended_for_links();
    let outside: Vec<String> = targets
        .iter()
        .filter(|t| {
            t.service_cidr
                .parse::<Ipv4Net>()
                .map_or(true, |c| rec.admits(c).is_err())
        })
        .map(|t| {
            format!(
                "{} {}/{} ({})",
                t.gateway.kind,
                t.gateway.namespace,
                t.gateway.name,
                bnerd_api::echo::quoted(&t.service_cidr)
            )
        })
        .collect();
    let which = if outside.is_empty() {
        "no gateway with reverse exposures is outside the recommended ranges".to_string()
    } else {
        format!(
            "gateways outside the recommended ranges ({}): {}",
            rec.ranges_text(),
            outside.join(", ")
        )
    };
    vec![Finding::warning(format!(
        "gateway CIDR bounds are unset (IPSEC_GATEWAY_CIDR_RANGES): every gateway's status.serviceCIDR becomes a route on every service router, so whoever may write the status of IPsecGateway or VPNGateway objects steers them; grant that to the gateway controller only and set the bounds to the ranges your gateways use (chart reverseRoutes.gatewayCIDRRanges); {which}"
    ))]
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnerd_api::{ClusterLinkSpec, GatewayRef};

    fn link(name: &str, cidr: &str) -> ClusterLink {
        ClusterLink::new(
            name,
            ClusterLinkSpec {
                service_cluster_router: "r".into(),
                service_cluster_cidr: cidr.into(),
                ..Default::default()
            },
        )
    }

    fn gw(name: &str, cidr: &str) -> ReverseTarget {
        ReverseTarget {
            gateway: GatewayRef {
                kind: "IPsecGateway".into(),
                namespace: "vpn".into(),
                name: name.into(),
            },
            service_cidr: cidr.into(),
            port_fixed_ip: "10.254.0.10".into(),
            uid: None,
            created: None,
        }
    }

    #[test]
    fn links_outside_the_recommended_bounds_are_warned_about() {
        let f = link_findings(&[
            link("private", "10.251.0.0/16"),
            link("public", "198.51.100.0/24"),
            link("wide", "10.0.0.0/8"),
            link("shared", "100.64.0.0/16"),
        ]);
        assert_eq!(f.len(), 2, "{f:?}");
        assert!(f.iter().all(|f| f.warning && !f.problem));
        assert!(
            f[0].text
                .starts_with("ClusterLink public: spec.serviceClusterCIDR 198.51.100.0/24")
        );
        assert!(f[1].text.starts_with("ClusterLink wide: "));
        assert!(f[1].text.contains("IPSEC_SERVICE_CIDR_RANGES"));
    }

    #[test]
    fn unset_gateway_bounds_are_warned_about_naming_gateways_outside() {
        let targets = [gw("ok", "100.64.1.0/24"), gw("odd", "203.0.113.0/24")];
        let f = gateway_findings(None, &targets);
        assert_eq!(f.len(), 1);
        assert!(f[0].warning);
        assert!(
            f[0].text.contains("IPSEC_GATEWAY_CIDR_RANGES"),
            "{}",
            f[0].text
        );
        assert!(
            f[0].text
                .contains("IPsecGateway vpn/odd (\"203.0.113.0/24\")"),
            "{}",
            f[0].text
        );
        assert!(!f[0].text.contains("vpn/ok"), "{}", f[0].text);
        assert_eq!(gateway_findings(Some(" "), &targets).len(), 1);
        assert!(gateway_findings(Some("100.64.0.0/10"), &targets).is_empty());
    }
}
