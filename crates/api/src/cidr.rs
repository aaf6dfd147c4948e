//! Parsing and checks of the addresses a ClusterLink names. Errors name the field.

use std::net::{IpAddr, Ipv4Addr};

use ipnet::{IpNet, Ipv4Net};

use crate::echo::quoted;

/// Parse `spec.serviceClusterCIDR`: an IPv4 network in canonical form (no host bits).
pub fn parse_service_cidr(value: &str) -> Result<Ipv4Net, String> {
    let net: IpNet = value.parse().map_err(|_| {
        format!(
            "spec.serviceClusterCIDR {} is not a CIDR (want e.g. 10.251.0.0/16)",
            quoted(value)
        )
    })?;
    let IpNet::V4(net) = net else {
        return Err(format!(
            "spec.serviceClusterCIDR {} is not IPv4; the transit fabric is IPv4",
            quoted(value)
        ));
    };
    if net.trunc() != net {
        return Err(format!(
            "spec.serviceClusterCIDR {} has host bits set; did you mean {}?",
            quoted(value),
            net.trunc()
        ));
    }
    // ipnet reads "010.001.0.0/16" as 10.1.0.0/16; inet_aton-style tools read the same text
    // as 8.1.0.0/16. Only the one spelling everyone reads alike is taken.
    if net.to_string() != value {
        return Err(format!(
            "spec.serviceClusterCIDR {} is not written canonically (leading zeros read as octal elsewhere); write {net}",
            quoted(value)
        ));
    }
    if net.prefix_len() == 0 {
        return Err(
            "spec.serviceClusterCIDR 0.0.0.0/0 would route everything through one link".into(),
        );
    }
    Ok(net)
}

/// Check `spec.transitIP` against the transit subnet: inside it, and not the network address,
/// `.1` (gateway router leg), `.2` (DHCP port) or the broadcast address.
pub fn check_transit_ip(value: &str, subnet: Ipv4Net) -> Result<Ipv4Addr, String> {
    let ip: IpAddr = value
        .parse()
        .map_err(|_| format!("spec.transitIP {} is not an IP address", quoted(value)))?;
    let IpAddr::V4(ip) = ip else {
        return Err(format!("spec.transitIP {} is not IPv4", quoted(value)));
    };
    if !subnet.contains(&ip) {
        return Err(format!(
            "spec.transitIP {ip} is outside the transit subnet {subnet}"
        ));
    }
    let offset = u32::from(ip) - u32::from(subnet.network());
    let reserved = match offset {
        0 => Some("the network address"),
        1 => Some(".1, the gateway cluster's own router leg"),
        2 => Some(".2, the transit network's DHCP port"),
        _ if ip == subnet.broadcast() => Some("the broadcast address"),
        _ => None,
    };
    match reserved {
        Some(what) => Err(format!(
            "spec.transitIP {ip} is {what} of {subnet}; use .3 or higher"
        )),
        None => Ok(ip),
    }
}

/// Allocation candidates in order: `.3` up to the last host address.
pub fn transit_candidates(subnet: Ipv4Net) -> impl Iterator<Item = Ipv4Addr> {
    let first = u32::from(subnet.network()).saturating_add(3);
    let last = u32::from(subnet.broadcast()).saturating_sub(1);
    (first..=last).map(Ipv4Addr::from)
}

/// Whether two networks share any address.
pub fn overlaps(a: Ipv4Net, b: Ipv4Net) -> bool {
    a.contains(&b.network()) || b.contains(&a.network())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn subnet() -> Ipv4Net {
        "10.254.0.0/24".parse().unwrap()
    }

    #[test]
    fn service_cidr_accepts_canonical_v4() {
        assert_eq!(
            parse_service_cidr("10.251.0.0/16").unwrap().to_string(),
            "10.251.0.0/16"
        );
    }

    #[test]
    fn service_cidr_rejections_name_the_field() {
        for bad in [
            "nope",
            "10.251.0.1/16",
            "fd00::/64",
            "0.0.0.0/0",
            "10.251.0.0",
            "010.251.0.0/16",
            "10.251.00.0/16",
            "10.251.0.0/016",
        ] {
            let err = parse_service_cidr(bad).unwrap_err();
            assert!(err.contains("spec.serviceClusterCIDR"), "{bad}: {err}");
        }
        assert!(
            parse_service_cidr("10.251.0.1/16")
                .unwrap_err()
                .contains("10.251.0.0/16")
        );
    }

    #[test]
    fn transit_ip_reserved_addresses_are_refused() {
        for (ip, word) in [
            ("10.254.0.0", "network address"),
            ("10.254.0.1", ".1"),
            ("10.254.0.2", ".2"),
            ("10.254.0.255", "broadcast"),
            ("10.254.1.3", "outside"),
            ("x", "not an IP"),
        ] {
            let err = check_transit_ip(ip, subnet()).unwrap_err();
            assert!(
                err.contains(word) && err.contains("spec.transitIP"),
                "{ip}: {err}"
            );
        }
        assert_eq!(
            check_transit_ip("10.254.0.3", subnet())
                .unwrap()
                .to_string(),
            "10.254.0.3"
        );
        assert_eq!(
            check_transit_ip("10.254.0.254", subnet())
                .unwrap()
                .to_string(),
            "10.254.0.254"
        );
    }

    #[test]
    fn candidates_start_at_3_and_stop_before_broadcast() {
        let all: Vec<_> = transit_candidates(subnet()).collect();
        assert_eq!(all.first().unwrap().to_string(), "10.254.0.3");
        assert_eq!(all.last().unwrap().to_string(), "10.254.0.254");
        assert_eq!(all.len(), 252);
    }

    #[test]
    fn overlap_is_symmetric() {
        let a: Ipv4Net = "10.0.0.0/8".parse().unwrap();
        let b: Ipv4Net = "10.1.0.0/16".parse().unwrap();
        let c: Ipv4Net = "11.0.0.0/8".parse().unwrap();
        assert!(overlaps(a, b) && overlaps(b, a));
        assert!(!overlaps(a, c));
    }
}
