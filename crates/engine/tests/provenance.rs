//! Who may move a route: the provenance of every route input, on the fake and on the real
//! lab. A gateway in any namespace steers a route on every service router, so its status is
//! screened against the transit network itself (docs/crd-reference.md, "Reverse-route
//! screening"); a link's CIDR is bounded by the operator's settings (docs/crd-reference.md,
//! "What the operator routes").

use bnerd_api::GatewayRef;
use bnerd_api::gateway::ReverseTarget;
use bnerd_cloud::Route;
use bnerd_cloud::fabric::CidrPolicy;
use bnerd_testkit::{Env, both, spec};

fn target(ns: &str, name: &str, cidr: &str, hop: &str, created: &str) -> ReverseTarget {
    ReverseTarget {
        gateway: GatewayRef {
            kind: "IPsecGateway".into(),
            namespace: ns.into(),
            name: name.into(),
        },
        service_cidr: cidr.into(),
        port_fixed_ip: hop.into(),
        uid: None,
        created: Some(created.into()),
    }
}

/// A gateway's portFixedIP must be a gateway port of the operator's project (not another
/// link's leg, not an address no port holds), and of two gateways with overlapping
/// serviceCIDRs the older keeps its routes: a newer gateway can neither point every service
/// router at another customer's leg nor take an older gateway's traffic.
async fn gateway_next_hops_and_overlaps_are_screened(mut env: Env) {
    let (peer_router, svc) = (env.router("p4peer").await, env.router("p4").await);
    env.add_link("p4peer", spec(&peer_router.id, "10.228.0.0/16", None));
    env.reconcile("p4peer").await;
    env.assert_ready("p4peer");
    let peer_leg = env.transit_ip("p4peer").unwrap();
    let gw_port = env.port_at_ip("10.254.0.200", "gateway-pod").await;
    env.reverse = vec![
        target(
            "vpn",
            "good",
            "100.64.60.0/24",
            "10.254.0.200",
            "2026-01-01T00:00:00Z",
        ),
        // Every service router would send 100.64.61.0/24 to the other customer's leg.
        target(
            "tenant-x",
            "steal",
            "100.64.61.0/24",
            &peer_leg,
            "2026-01-02T00:00:00Z",
        ),
        // A /25 inside the older gateway's /24, via the same port: still the newer one.
        target(
            "tenant-y",
            "inner",
            "100.64.60.0/25",
            "10.254.0.200",
            "2026-01-03T00:00:00Z",
        ),
        // An address no port holds: whoever gets it next would receive the traffic.
        target(
            "tenant-z",
            "ghost",
            "100.64.62.0/24",
            "10.254.0.201",
            "2026-01-04T00:00:00Z",
        ),
    ];
    env.add_link("p4", spec(&svc.id, "10.229.0.0/16", None));
    let out = env.reconcile("p4").await;
    assert_eq!(env.condition("p4", "RouteInstalled").0, "True");
    assert_eq!(
        env.get_router(&svc.id).await.routes,
        vec![Route::new("100.64.60.0/24", "10.254.0.200")],
        "only the good gateway's route"
    );
    let mut named: Vec<&str> = out
        .gateway_problems
        .iter()
        .map(|p| p.gateway.name.as_str())
        .collect();
    named.sort();
    assert_eq!(named, vec!["ghost", "inner", "steal"]);
    for p in &out.gateway_problems {
        // The gateway's own Event names no other tenant's leg, CIDR, router or link.
        for other in [
            peer_leg.as_str(),
            "10.228.0.0/16",
            "10.229.0.0/16",
            &svc.id,
            &peer_router.id,
            "p4peer",
        ] {
            if p.gateway.name == "steal" && other == peer_leg {
                // Its own status.portFixedIP: its own field, named back to it.
                continue;
            }
            assert!(!p.note.contains(other), "{}: {}", p.gateway.name, p.note);
        }
    }
    let inner = out
        .gateway_problems
        .iter()
        .find(|p| p.gateway.name == "inner")
        .unwrap();
    assert!(
        inner.note.contains("IPsecGateway vpn/good"),
        "{}",
        inner.note
    );
    env.delete("p4").await;
    env.delete("p4peer").await;
    env.net.delete_port(&gw_port.id).await.unwrap();
}
both!(gateway_next_hops_and_overlaps_are_screened);

/// "0.0.0.0/1 plus 128.0.0.0/1 on two links capture nearly all the gateway router's
/// traffic": the operator's bounds refuse a CIDR outside its ranges or wider than its
/// shortest prefix, before any cloud call.
async fn service_cidrs_are_bounded(mut env: Env) {
    let svc = env.router("p5").await;
    env.fabric.admission.service_cidrs = CidrPolicy {
        ranges: vec!["10.0.0.0/8".parse().unwrap()],
        min_prefix_len: 12,
    };
    for (name, cidr, setting) in [
        (
            "p5-half",
            "128.0.0.0/1",
            "IPSEC_SERVICE_CIDR_MIN_PREFIX_LENGTH",
        ),
        ("p5-public", "11.0.0.0/16", "IPSEC_SERVICE_CIDR_RANGES"),
    ] {
        env.add_link(name, spec(&svc.id, cidr, None));
        env.reconcile(name).await;
        let (s, r, m) = env.condition(name, "Validated");
        assert_eq!((s.as_str(), r.as_str()), ("False", "InvalidSpec"), "{m}");
        assert!(m.contains(setting), "{m}");
        assert!(
            env.leg_ports().await.is_empty(),
            "{name}: nothing was built"
        );
        env.delete(name).await;
    }
    env.add_link("p5-ok", spec(&svc.id, "10.230.0.0/16", None));
    env.reconcile("p5-ok").await;
    env.assert_ready("p5-ok");
    env.delete("p5-ok").await;
}
both!(service_cidrs_are_bounded);
