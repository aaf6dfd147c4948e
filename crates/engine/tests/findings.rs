//! The correctness holes found when the engine was read and tried on the lab, one
//! scenario per finding, each on the fake and on the real lab. Every one of these failed on
//! the engine before the plan refactor.
//!
//! One file although it passes 500 lines: one scenario per finding of the same review, each
//! short, sharing the fixtures at the top (tagged duplicate ports, gateways, admin routers).

use bnerd_testkit::both;

use std::sync::Arc;

use bnerd_api::ReverseRoute;
use bnerd_api::gateway::ReverseTarget;
use bnerd_api::names::{TAG_MANAGED, tag_link_name, tag_link_uid};
use bnerd_api::{ClusterLink, GatewayRef};
use bnerd_cloud::{CreatePort, CreateRouter, Neutron, Route, Router};
use bnerd_cloud_fake::{Fault, Op};
use bnerd_engine::resync::{Resynced, Snapshots, resync_from};
use bnerd_testkit::{Env, spec};
use bnerd_testkit::{link_input, unwind_same_tenant};

/// A port carrying a link's tags, as a second operator process (or a crash) leaves it.
async fn tagged_port(env: &Env, link: &ClusterLink, ip: &str) -> bnerd_cloud::Port {
    let name = link.metadata.name.clone().unwrap();
    let uid = link.metadata.uid.clone().unwrap();
    let p = env.port_at_ip(ip, &format!("clusterlink-{name}")).await;
    let tags = vec![TAG_MANAGED.into(), tag_link_uid(&uid), tag_link_name(&name)];
    env.net.set_port_tags(&p.id, &tags).await.unwrap();
    env.net.get_port(&p.id).await.unwrap()
}

/// Finding 1: every path that changes the leg's address moves the gateway route in one
/// reconcile, with no RouteConflict from our own stale route.
async fn leg_address_changes_move_the_route(mut env: Env) {
    let (a, b) = (env.router("f1a").await, env.router("f1b").await);
    let cidr = "10.41.0.0/16";
    env.add_link("f1", spec(&a.id, cidr, None));
    env.reconcile("f1").await;
    env.assert_ready("f1");
    assert_eq!(
        env.gateway_routes().await,
        vec![Route::new(cidr, "10.254.0.3")]
    );

    // The leg vanished out of band (detached: Neutron deletes it) and someone squatted its
    // address at once: the new leg lands elsewhere, the route via the squatter must go.
    let old = env.leg_port_id("f1");
    env.net.remove_router_interface(&a.id, &old).await.unwrap();
    let squatter = env.port_at_ip("10.254.0.3", "squatter").await;
    env.reconcile("f1").await;
    env.assert_ready("f1");
    let ip = env.transit_ip("f1").unwrap();
    assert_ne!(ip, "10.254.0.3");
    assert_eq!(env.gateway_routes().await, vec![Route::new(cidr, &ip)]);

    // The pinned address changes.
    env.links[0].spec.transit_ip = Some("10.254.0.60".into());
    env.reconcile("f1").await;
    env.assert_ready("f1");
    assert_eq!(
        env.gateway_routes().await,
        vec![Route::new(cidr, "10.254.0.60")]
    );

    // The router changes, and the old address is taken meanwhile.
    env.links[0].spec.transit_ip = None;
    env.links[0].spec.service_cluster_router = b.id.clone();
    env.reconcile("f1").await;
    env.assert_ready("f1");
    let ip = env.transit_ip("f1").unwrap();
    assert_eq!(env.gateway_routes().await, vec![Route::new(cidr, &ip)]);
    assert_eq!(
        env.ports().await.len(),
        3,
        "gateway leg, squatter, our one leg"
    );

    env.delete("f1").await;
    assert!(env.gateway_routes().await.is_empty());
    env.net.delete_port(&squatter.id).await.unwrap();
}
both!(leg_address_changes_move_the_route);

/// When the leg cannot be rebuilt, the route via its old address does not stay behind: it
/// would send the link's traffic to whoever holds that address now.
async fn no_route_survives_its_leg(mut env: Env) {
    let svc = env.router("f1b").await;
    env.add_link("f1b", spec(&svc.id, "10.52.0.0/16", Some("10.254.0.20")));
    env.reconcile("f1b").await;
    env.assert_ready("f1b");
    // The leg vanishes and a stranger takes its pinned address.
    let old = env.leg_port_id("f1b");
    env.net
        .remove_router_interface(&svc.id, &old)
        .await
        .unwrap();
    let stranger = env.port_at_ip("10.254.0.20", "stranger").await;
    let out = env.reconcile("f1b").await;
    let (s, r, m) = env.condition("f1b", "LegAttached");
    assert_eq!((s.as_str(), r.as_str()), ("False", "TransitIPUnavailable"));
    assert!(m.contains(&stranger.id), "{m}");
    assert!(
        env.gateway_routes().await.is_empty(),
        "no route to the stranger's port"
    );
    assert!(
        env.link("f1b")
            .status
            .as_ref()
            .unwrap()
            .gateway_route
            .is_none()
    );
    assert!(
        out.actions
            .iter()
            .any(|a| a.kind == bnerd_engine::ActionKind::RouteRemoved),
        "{:?}",
        out.actions
    );
    env.delete("f1b").await;
    env.net.delete_port(&stranger.id).await.unwrap();
    assert_eq!(env.ports().await.len(), 1);
}
both!(no_route_survives_its_leg);

/// Finding 2: the gateway route is ours by its nexthop (our tagged port's address), not only
/// by status: a lost status patch never leaks the route, on a CIDR change or on delete.
async fn route_ownership_survives_a_lost_status(mut env: Env) {
    let svc = env.router("f2").await;
    env.add_link("f2", spec(&svc.id, "10.42.0.0/16", None));
    env.reconcile("f2").await;
    env.assert_ready("f2");
    let ip = env.transit_ip("f2").unwrap();

    // The patch that recorded the route was lost, then the CIDR changed.
    env.links[0].status.as_mut().unwrap().gateway_route = None;
    env.links[0].spec.service_cluster_cidr = "10.43.0.0/16".into();
    env.reconcile("f2").await;
    env.assert_ready("f2");
    assert_eq!(
        env.gateway_routes().await,
        vec![Route::new("10.43.0.0/16", &ip)],
        "the old route via our leg is gone"
    );

    // Everything in status lost, then the CIDR changed and the link is deleted at once.
    env.links[0].status = None;
    env.links[0].spec.service_cluster_cidr = "10.44.0.0/16".into();
    env.delete("f2").await;
    assert!(
        env.gateway_routes().await.is_empty(),
        "nothing via {ip} left"
    );
    assert_eq!(env.ports().await.len(), 1, "only the gateway's own leg");
}
both!(route_ownership_survives_a_lost_status);

/// Finding 3: every port tagged with the link's UID is the link's: reconcile keeps one and
/// removes the others (and their routes), delete removes them all.
async fn duplicate_legs_are_removed(mut env: Env) {
    let svc = env.router("f3").await;
    env.add_link("f3", spec(&svc.id, "10.45.0.0/16", None));
    env.reconcile("f3").await;
    env.assert_ready("f3");
    let kept = env.leg_port_id("f3");

    // A second writer made another leg and routed the CIDR via it too.
    let link = env.link("f3").clone();
    let extra = tagged_port(&env, &link, "10.254.0.9").await;
    env.add_routes(
        &env.fabric.gateway_router_id,
        &[Route::new("10.45.0.0/16", "10.254.0.9")],
    )
    .await
    .unwrap();
    let out = env.reconcile("f3").await;
    env.assert_ready("f3");
    assert!(
        out.actions
            .iter()
            .any(|a| a.kind == bnerd_engine::ActionKind::DuplicateLegRemoved),
        "{:?}",
        out.actions
    );
    assert_eq!(env.leg_port_id("f3"), kept, "the attached leg stays");
    assert!(
        env.net
            .get_port(&extra.id)
            .await
            .unwrap_err()
            .is_not_found()
    );
    assert_eq!(
        env.gateway_routes().await,
        vec![Route::new("10.45.0.0/16", "10.254.0.3")]
    );

    // Another duplicate appears; the link is deleted before any reconcile sees it.
    let extra = tagged_port(&env, &link, "10.254.0.10").await;
    env.delete("f3").await;
    assert!(
        env.net
            .get_port(&extra.id)
            .await
            .unwrap_err()
            .is_not_found()
    );
    assert_eq!(env.ports().await.len(), 1, "no leg of ours left");
}
both!(duplicate_legs_are_removed);

fn gateway(ns: &str, name: &str) -> GatewayRef {
    GatewayRef {
        kind: "IPsecGateway".into(),
        namespace: ns.into(),
        name: name.into(),
    }
}

fn target(ns: &str, name: &str, cidr: &str, hop: &str) -> ReverseTarget {
    ReverseTarget {
        gateway: gateway(ns, name),
        service_cidr: cidr.into(),
        port_fixed_ip: hop.into(),
        uid: None,
        created: None,
    }
}

/// Finding 4: with status.reverseRoutes lost, delete still removes the reverse routes of the
/// current targets before the detach (never any other route), and a route that still blocks
/// the detach is named.
async fn unwind_removes_reverse_routes_without_status(mut env: Env) {
    let svc = env.router("f4").await;
    // The gateway's own port holds its portFixedIP (a next hop must be a gateway port).
    let gw_port = env.port_at_ip("10.254.0.10", "gateway-pod").await;
    env.reverse = vec![target("gw", "g1", "100.64.41.0/24", "10.254.0.10")];
    env.add_link("f4", spec(&svc.id, "10.46.0.0/16", None));
    env.reconcile("f4").await;
    env.assert_ready("f4");
    assert_eq!(
        env.get_router(&svc.id).await.routes,
        vec![Route::new("100.64.41.0/24", "10.254.0.10")]
    );
    env.links[0].status.as_mut().unwrap().reverse_routes = vec![];

    // Someone's own route via the transit network on the service router: not ours.
    let theirs = Route::new("100.64.99.0/24", "10.254.0.99");
    env.add_routes(&svc.id, std::slice::from_ref(&theirs))
        .await
        .unwrap();
    let l = env.link("f4").clone();
    let status = l.status.clone().unwrap_or_default();
    let input = link_input(&l, &status, &[], &env.reverse).unwrap();
    let f = unwind_same_tenant(env.net.as_ref(), &env.fabric, &input, &env.reverse)
        .await
        .unwrap_err();
    assert_eq!(f.reason.as_str(), "Deleting");
    assert!(
        f.message.contains("100.64.99.0/24 via 10.254.0.99"),
        "the blocking route is named: {}",
        f.message
    );
    assert_eq!(
        env.get_router(&svc.id).await.routes,
        vec![theirs.clone()],
        "our reverse route went, theirs stayed"
    );
    assert!(
        env.gateway_routes().await.is_empty(),
        "the data path is cut first"
    );

    // Its owner removes it: the unwind finishes.
    env.remove_routes(&svc.id, std::slice::from_ref(&theirs))
        .await
        .unwrap();
    env.delete("f4").await;
    env.net.delete_port(&gw_port.id).await.unwrap();
    assert_eq!(env.ports().await.len(), 1);
}
both!(unwind_removes_reverse_routes_without_status);

/// A gateway the screen refuses names a route someone else put on a service router: the
/// link never installed it, so no delete of the link removes it (status lost or not).
async fn a_refused_gateway_never_names_a_route_for_removal(mut env: Env) {
    let svc = env.router("own").await;
    env.add_link("own", spec(&svc.id, "10.48.0.0/16", None));
    env.reconcile("own").await;
    env.assert_ready("own");
    // Someone's route via the transit network; a gateway whose status copies it is refused
    // (no gateway port holds 10.254.0.99), so the link never installed or recorded it.
    let theirs = Route::new("100.64.98.0/24", "10.254.0.99");
    env.add_routes(&svc.id, std::slice::from_ref(&theirs))
        .await
        .unwrap();
    env.reverse = vec![target(
        "tenant-z",
        "copycat",
        "100.64.98.0/24",
        "10.254.0.99",
    )];
    env.reconcile("own").await;
    let (s, _, m) = env.condition("own", "ReverseRoutesInstalled");
    assert_eq!(s, "False", "{m}");
    assert!(m.contains("tenant-z/copycat"), "{m}");
    assert!(
        env.link("own")
            .status
            .as_ref()
            .unwrap()
            .reverse_routes
            .is_empty()
    );
    let l = env.link("own").clone();
    let status = l.status.clone().unwrap_or_default();
    let input = link_input(&l, &status, &[], &env.reverse).unwrap();
    let f = unwind_same_tenant(env.net.as_ref(), &env.fabric, &input, &env.reverse)
        .await
        .unwrap_err();
    assert!(
        f.message.contains("100.64.98.0/24 via 10.254.0.99"),
        "the route in the way is named, not removed: {}",
        f.message
    );
    assert_eq!(env.get_router(&svc.id).await.routes, vec![theirs.clone()]);
    env.remove_routes(&svc.id, std::slice::from_ref(&theirs))
        .await
        .unwrap();
    env.delete("own").await;
    assert_eq!(env.ports().await.len(), 1);
}
both!(a_refused_gateway_never_names_a_route_for_removal);

/// A service router holds at most Neutron's route quota (30 by default): with more gateways
/// than that, the oldest gateways' routes go in, the ones that do not fit are named with the
/// quota, and a slot freed by a gateway that goes is taken by the next oldest.
async fn gateways_beyond_the_route_quota_are_named_the_oldest_fit(env: Env) {
    gateways_beyond_the_route_limit(env, "router_route").await;
}
both!(gateways_beyond_the_route_quota_are_named_the_oldest_fit);

/// Neutron up to 2026.1 refuses the router's 31st route with `400 RoutesExhausted` (the
/// server's `max_routes`), not `409 OverQuota`: the same verdicts, retried with backoff, and
/// the message names `max_routes` (docs/design.md, "How Neutron releases differ").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_router_full_by_max_routes_is_full_too() {
    let cloud = bnerd_cloud_fake::FakeCloud::new().up_to_2026_1();
    let env = bnerd_testkit::fake_env_with(cloud).await;
    gateways_beyond_the_route_limit(env, "max_routes").await;
}

/// The same on the lab's Neutron 2025.1 (lab/openstack/older.sh), which answers so itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lab_2025_1_a_router_full_by_max_routes_is_full_too() {
    let Some(env) =
        bnerd_testkit::lab_2025_1_env_for("lab_2025_1_a_router_full_by_max_routes_is_full_too")
            .await
    else {
        return;
    };
    let cleanup = env.cleanup();
    gateways_beyond_the_route_limit(env, "max_routes").await;
    cleanup.teardown(&[]).await;
}

/// The 30 oldest gateways' routes on the router, the rest named with `limit` and retried.
async fn gateways_beyond_the_route_limit(mut env: Env, limit: &str) {
    const GATEWAYS: usize = 32;
    let svc = env.router("quota").await;
    let mut ports = vec![];
    let mut targets = vec![];
    for i in 0..GATEWAYS {
        let hop = format!("10.254.0.{}", 200 + i);
        ports.push(env.port_at_ip(&hop, &format!("gateway-pod-{i}")).await);
        let mut t = target(
            "vpn",
            &format!("g{i:02}"),
            &format!("100.64.{i}.0/24"),
            &hop,
        );
        // The later the index, the newer the gateway.
        t.created = Some(format!("2026-01-01T00:{i:02}:00Z"));
        targets.push(t);
    }
    // Listed newest first: the order gateways arrive in must not matter.
    targets.reverse();
    env.reverse = targets.clone();
    env.add_link("quota", spec(&svc.id, "10.49.0.0/16", None));
    let out = env.reconcile("quota").await;
    assert_eq!(env.condition("quota", "RouteInstalled").0, "True");
    let (s, r, m) = env.condition("quota", "ReverseRoutesInstalled");
    assert_eq!(
        (s.as_str(), r.as_str()),
        ("False", "EnsureReverseRoutesFailed"),
        "{m}"
    );
    assert_eq!(
        out.retry,
        bnerd_engine::Retry::Backoff,
        "retried with backoff"
    );
    let routes = env.get_router(&svc.id).await.routes;
    assert_eq!(routes.len(), 30, "{routes:?}");
    for i in 0..30 {
        assert!(
            routes.contains(&Route::new(
                format!("100.64.{i}.0/24"),
                format!("10.254.0.{}", 200 + i)
            )),
            "the 30 oldest gateways' routes: g{i:02} missing"
        );
    }
    for late in ["vpn/g30", "vpn/g31"] {
        assert!(m.contains(&format!("{late}: 100.64.")), "{late} named: {m}");
    }
    assert!(m.contains(limit), "the limit named ({limit}): {m}");
    assert_eq!(
        env.link("quota")
            .status
            .as_ref()
            .unwrap()
            .reverse_routes
            .len(),
        30
    );
    // The oldest gateway goes: its slot is the next oldest's.
    env.reverse.retain(|t| t.gateway.name != "g00");
    env.reconcile("quota").await;
    let routes = env.get_router(&svc.id).await.routes;
    assert!(routes.contains(&Route::new("100.64.30.0/24", "10.254.0.230")));
    assert!(!routes.contains(&Route::new("100.64.0.0/24", "10.254.0.200")));
    let (_, _, m) = env.condition("quota", "ReverseRoutesInstalled");
    assert!(m.contains("vpn/g31") && !m.contains("vpn/g30"), "{m}");
    env.reverse.clear();
    env.reconcile("quota").await;
    env.assert_ready("quota");
    env.delete("quota").await;
    for p in ports {
        env.net.delete_port(&p.id).await.unwrap();
    }
    assert_eq!(env.ports().await.len(), 1);
}

/// Finding 5: reverse targets from any namespace are screened and added per gateway; one bad
/// gateway never blocks the others and is named.
async fn bad_gateways_never_block_good_ones(mut env: Env) {
    let svc = env.router("f5").await;
    let gw_ports = [
        env.port_at_ip("10.254.0.11", "gateway-pod-good").await,
        env.port_at_ip("10.254.0.12", "gateway-pod-late").await,
    ];
    env.reverse = vec![
        target("tenant-x", "everything", "0.0.0.0/0", "10.254.0.10"),
        target("tenant-y", "far", "100.64.52.0/24", "192.168.9.9"),
        target("ok", "good", "100.64.51.0/24", "10.254.0.11"),
    ];
    env.add_link("f5", spec(&svc.id, "10.47.0.0/16", None));
    let out = env.reconcile("f5").await;
    assert_eq!(env.condition("f5", "RouteInstalled").0, "True");
    let (s, r, m) = env.condition("f5", "ReverseRoutesInstalled");
    assert_eq!(
        (s.as_str(), r.as_str()),
        ("False", "EnsureReverseRoutesFailed")
    );
    assert!(m.contains("IPsecGateway tenant-x/everything"), "{m}");
    assert!(m.contains("IPsecGateway tenant-y/far"), "{m}");
    // A gateway's reverse route failing leaves the link's own path judged on its own
    // (docs/crd-reference.md, ReverseRoutesInstalled): Ready stays True, its message names
    // the failure.
    let (s, r, m) = env.condition("f5", "Ready");
    assert_eq!((s.as_str(), r.as_str()), ("True", "Ready"), "{m}");
    assert!(
        m.contains("ReverseRoutesInstalled is False (EnsureReverseRoutesFailed)"),
        "{m}"
    );
    assert_eq!(
        env.get_router(&svc.id).await.routes,
        vec![Route::new("100.64.51.0/24", "10.254.0.11")],
        "no default route, the good gateway's route is in"
    );
    let named: Vec<&str> = out
        .gateway_problems
        .iter()
        .map(|p| p.gateway.name.as_str())
        .collect();
    assert_eq!(
        named,
        vec!["everything", "far"],
        "each bad gateway gets its Event"
    );
    let st = env.link("f5").status.clone().unwrap();
    assert_eq!(
        st.reverse_routes,
        vec![ReverseRoute {
            service_cidr: "100.64.51.0/24".into(),
            next_hop: "10.254.0.11".into(),
            gateway_ref: gateway("ok", "good"),
        }]
    );

    // A gateway whose next hop is this link's own leg address is named too (the screen
    // refuses it before Neutron would), and the others still go in.
    env.reverse = vec![
        target("ok", "good", "100.64.51.0/24", "10.254.0.11"),
        target("ok", "self", "100.64.53.0/24", "10.254.0.3"),
        target("ok", "late", "100.64.54.0/24", "10.254.0.12"),
    ];
    env.reconcile("f5").await;
    let (_, r, m) = env.condition("f5", "ReverseRoutesInstalled");
    assert_eq!(r, "EnsureReverseRoutesFailed");
    assert!(
        m.contains("IPsecGateway ok/self") && m.contains("leg address"),
        "{m}"
    );
    let mut routes = env.get_router(&svc.id).await.routes;
    routes.sort();
    assert_eq!(
        routes,
        vec![
            Route::new("100.64.51.0/24", "10.254.0.11"),
            Route::new("100.64.54.0/24", "10.254.0.12"),
        ]
    );
    env.delete("f5").await;
    assert!(env.get_router(&svc.id).await.routes.is_empty());
    for p in gw_ports {
        env.net.delete_port(&p.id).await.unwrap();
    }
}
both!(bad_gateways_never_block_good_ones);

/// An admin handle on the same cloud and the operator's project, to make routers the
/// operator cannot (L3-HA, DVR).
fn admin_of(env: &Env) -> (Arc<dyn Neutron>, String) {
    match &env.fake {
        Some(cloud) => (Arc::new(cloud.admin("admin")), "operator".into()),
        None => {
            let lab = bnerd_testkit::lab_env().expect("lab.env");
            let project = lab["LAB_OPERATOR_PROJECT_ID"].clone();
            (Arc::new(bnerd_testkit::lab_client(&lab, "ADMIN")), project)
        }
    }
}

async fn admin_router(env: &Env, ha: Option<bool>, distributed: Option<bool>) -> Router {
    let (admin, project) = admin_of(env);
    admin
        .create_router_with(&CreateRouter {
            name: bnerd_testkit::unique("f6"),
            project_id: Some(project),
            ha,
            distributed,
        })
        .await
        .expect("admin creates the router")
}

/// Finding 6: legs on L3-HA and DVR routers are recognised as attached (no re-attach and
/// 409 at every resync), adopted, and unwound.
async fn ha_and_dvr_routers(mut env: Env) {
    // The lab and lab_tags_at_create variants (and parity's table) take turns: see the lock.
    let _turn = bnerd_testkit::ha_routers_exclusive().await;
    // ML2/OVN has no DVR routers (no `dvr`; `distributed` is refused as unknown): its own
    // routers are distributed in OVN, and their interfaces are plain ones.
    let ovn = env
        .net
        .extensions()
        .await
        .unwrap()
        .iter()
        .any(|e| e == bnerd_cloud::refusals::EXTERNAL_GATEWAY_MULTIHOMING);
    for (i, (ha, dvr)) in [(Some(true), None), (None, Some(true))]
        .into_iter()
        .enumerate()
        .filter(|(_, (_, dvr))| !(ovn && dvr.is_some()))
    {
        let r = admin_router(&env, ha, dvr).await;
        let name = format!("f6-{i}");
        env.add_link(&name, spec(&r.id, &format!("10.{}.0.0/16", 48 + i), None));
        env.reconcile(&name).await;
        env.assert_ready(&name);
        let leg = env.net.get_port(&env.leg_port_id(&name)).await.unwrap();
        assert!(leg.is_interface_of(&r.id), "{}", leg.device_owner);
        let out = env.reconcile(&name).await;
        env.assert_ready(&name);
        assert!(
            out.actions.is_empty(),
            "resync writes nothing: {:?}",
            out.actions
        );
        env.delete(&name).await;
        assert!(env.net.get_port(&leg.id).await.unwrap_err().is_not_found());
        let (admin, _) = admin_of(&env);
        admin.delete_router(&r.id).await.unwrap();
    }
    // A hand-made leg on an HA router is adopted.
    let r = admin_router(&env, Some(true), None).await;
    let hand = env.port_at_ip("10.254.0.3", "hand-made-leg").await;
    env.net.add_router_interface(&r.id, &hand.id).await.unwrap();
    env.add_link("f6-adopt", spec(&r.id, "10.50.0.0/16", Some("10.254.0.3")));
    env.reconcile("f6-adopt").await;
    env.assert_ready("f6-adopt");
    assert_eq!(env.leg_port_id("f6-adopt"), hand.id);
    env.delete("f6-adopt").await;
    assert_eq!(env.ports().await.len(), 1);
    let (admin, _) = admin_of(&env);
    admin.delete_router(&r.id).await.unwrap();
}
both!(ha_and_dvr_routers);

/// Finding 7: a link name at Kubernetes' limit (253) still fits Neutron's 255-character
/// port name and description.
async fn a_long_link_name_converges(mut env: Env) {
    let svc = env.router("f7").await;
    let name = "l".repeat(253);
    env.add_link(&name, spec(&svc.id, "10.51.0.0/16", None));
    env.reconcile(&name).await;
    env.assert_ready(&name);
    let leg = env.net.get_port(&env.leg_port_id(&name)).await.unwrap();
    assert!(leg.description.len() <= 255 && leg.name.len() <= 255);
    env.delete(&name).await;
    assert_eq!(env.ports().await.len(), 1);
}
both!(a_long_link_name_converges);

/// Finding 9: two operator processes reconciling the same links at once (a rolling upgrade
/// without leader election) leave no leaked port and no route to an address the link does
/// not hold, once they have run and after delete.
async fn two_writers_leak_nothing(mut env: Env) {
    let mut routers = vec![];
    for i in 0..4 {
        let r = env.router(&format!("f9-{i}")).await;
        env.add_link(
            &format!("f9-{i}"),
            spec(&r.id, &format!("10.{}.0.0/16", 60 + i), None),
        );
        routers.push(r);
    }
    // On the fake every call is instant: hold each list a moment so both writers look before
    // either writes, as they do against a real cloud.
    if let Some(cloud) = &env.fake {
        let hold = Fault::Latency(std::time::Duration::from_millis(20));
        cloud.inject(Op::ListPorts, hold, 8);
    }
    for _round in 0..3 {
        let snapshot = env.links.clone();
        let mut tasks = vec![];
        for writer in 0..2 {
            for i in 0..snapshot.len() {
                let (net, fabric, links) = (env.net.clone(), env.fabric.clone(), snapshot.clone());
                tasks.push(tokio::spawn(async move {
                    let out =
                        bnerd_testkit::reconcile_one(net.as_ref(), &fabric, &links, i, &[]).await;
                    (writer, i, out)
                }));
            }
        }
        // The apiserver keeps whichever status patch lands last.
        for t in tasks {
            let (_, i, out) = t.await.unwrap();
            env.links[i].status = Some(out.status);
        }
    }
    for i in 0..4 {
        env.reconcile(&format!("f9-{i}")).await;
        env.assert_ready(&format!("f9-{i}"));
    }
    let ports = env.ports().await;
    assert_eq!(ports.len(), 5, "one leg per link: {ports:#?}");
    let gw = env.gateway_routes().await;
    assert_eq!(gw.len(), 4, "{gw:?}");
    for r in &gw {
        assert!(
            ports.iter().any(|p| p.has_ip(&r.nexthop)),
            "route to nowhere: {r:?}"
        );
    }
    // Both delete at once.
    let engine_links = env.links.clone();
    let mut tasks = vec![];
    for _writer in 0..2 {
        for l in &engine_links {
            let (net, fabric, l) = (env.net.clone(), env.fabric.clone(), l.clone());
            tasks.push(tokio::spawn(async move {
                let status = l.status.clone().unwrap_or_default();
                let input = link_input(&l, &status, &[], &[]).unwrap();
                unwind_same_tenant(net.as_ref(), &fabric, &input, &[]).await
            }));
        }
    }
    for t in tasks {
        // One writer may find the other mid-way; a second pass must finish.
        let _ = t.await.unwrap();
    }
    while let Some(name) = env.links.first().and_then(|l| l.metadata.name.clone()) {
        env.delete(&name).await;
    }
    assert_eq!(env.ports().await.len(), 1, "no leaked port");
    assert!(env.gateway_routes().await.is_empty(), "no leaked route");
}
both!(two_writers_leak_nothing);

/// The call budgets (docs/performance.md, "Call budgets (asserted by tests)"): converging a link
/// costs 3 writes where Neutron keeps create-body tags (4 where it drops them), a resync of a
/// converged link 0 writes and at most 2 reads.
#[tokio::test]
async fn call_budgets_on_the_fake() {
    for keep_tags in [true, false] {
        let cloud = bnerd_cloud_fake::FakeCloud::new().honour_create_tags(keep_tags);
        let mut env = bnerd_testkit::fake_env_with(cloud.clone()).await;
        let svc = env.router("budget").await;
        env.add_link("b", spec(&svc.name, "10.55.0.0/16", None));
        cloud.reset_counters();
        env.reconcile("b").await;
        env.assert_ready("b");
        let (_, writes) = cloud.read_write_counts();
        assert_eq!(writes, if keep_tags { 3 } else { 4 }, "converge writes");
        cloud.reset_counters();
        env.reconcile("b").await;
        let (reads, writes) = cloud.read_write_counts();
        assert_eq!(writes, 0, "resync writes");
        assert!(reads <= 2, "resync reads: {reads}");
    }
}

#[tokio::test]
async fn call_budgets_on_the_lab() {
    let Some(lab) = bnerd_testkit::lab_or_skip("call_budgets_on_the_lab") else {
        return;
    };
    for keep_tags in [true, false] {
        let client = Arc::new(if keep_tags {
            bnerd_testkit::lab_tagged_client(&lab)
        } else {
            bnerd_testkit::lab_client(&lab, "OPERATOR")
        });
        let mut env = bnerd_testkit::env_on(client.clone()).await;
        let svc = env.router("budget").await;
        env.add_link("b", spec(&svc.name, "10.56.0.0/16", None));
        let c0 = client.call_counts();
        env.reconcile("b").await;
        env.assert_ready("b");
        let c1 = client.call_counts();
        assert_eq!(
            c1.1 - c0.1,
            if keep_tags { 3 } else { 4 },
            "converge writes"
        );
        env.reconcile("b").await;
        let c2 = client.call_counts();
        assert_eq!(c2.1 - c1.1, 0, "resync writes");
        assert!(c2.0 - c1.0 <= 2, "resync reads: {}", c2.0 - c1.0);
        env.delete("b").await;
        env.teardown(&[]).await;
    }
}

/// A crash between create and tag with tags dropped leaves a port with only the description
/// marker; it is ours and is found again (no second port).
#[tokio::test]
async fn untagged_marker_port_is_found_without_a_second_create() {
    let mut env = bnerd_testkit::fake_env().await;
    let svc = env.router("m").await;
    env.add_link("m", spec(&svc.id, "10.57.0.0/16", None));
    let uid = env.link("m").metadata.uid.clone().unwrap();
    env.net
        .create_port(&CreatePort {
            network_id: env.fabric.transit_network_id.clone(),
            ip_address: Some("10.254.0.7".into()),
            name: "clusterlink-m".into(),
            description: format!("ClusterLink m leg, clusterlink-uid={uid}"),
            ..Default::default()
        })
        .await
        .unwrap();
    env.reconcile("m").await;
    env.assert_ready("m");
    assert_eq!(env.transit_ip("m").as_deref(), Some("10.254.0.7"));
    assert_eq!(env.ports().await.len(), 2);
}

/// A subnet of the service router's own, made and attached for a test; what to remove after.
async fn own_subnet(env: &Env, router_id: &str, cidr: &str) -> (String, String) {
    let n = env
        .net
        .create_network(&bnerd_testkit::unique("svc-subnet"))
        .await
        .unwrap();
    let first = cidr
        .parse::<ipnet::Ipv4Net>()
        .unwrap()
        .hosts()
        .next()
        .unwrap();
    let s = env
        .net
        .create_subnet(&n.id, cidr, &first.to_string())
        .await
        .unwrap();
    let port = env.net.add_router_subnet(router_id, &s.id).await.unwrap();
    (n.id, port)
}

/// One link's resync through the batched path, as the controller runs a converged link:
/// the writes it replayed, or `None` when it went down the per-link path (only a cloud with
/// no `extraroute-atomic` sends a route write there).
async fn batched(env: &mut Env, snaps: &Snapshots, name: &str) -> Option<usize> {
    let ids: Vec<String> = env
        .links
        .iter()
        .filter_map(|l| l.status.as_ref()?.service_router_id.clone())
        .collect();
    let snap = snaps
        .get(env.net.as_ref(), &env.fabric, || ids)
        .await
        .expect("snapshot");
    let all: Vec<Arc<ClusterLink>> = env.links.iter().cloned().map(Arc::new).collect();
    let i = env
        .links
        .iter()
        .position(|l| l.metadata.name.as_deref() == Some(name))
        .unwrap();
    let l = env.links[i].clone();
    let status = l.status.clone().unwrap_or_default();
    let peers = bnerd_testkit::peers_of(&l, &all);
    let input = link_input(&l, &status, &peers, &env.reverse).unwrap();
    match resync_from(&snap, env.net.as_ref(), &env.fabric, None, &input).await {
        Resynced::Done { outcome, writes } => {
            env.links[i].status = Some(outcome.status);
            Some(writes)
        }
        Resynced::PerLink(why) => {
            assert!(
                why.contains("set the routes"),
                "the batched resync fell back: {why}"
            );
            env.reconcile(name).await;
            None
        }
    }
}

/// A gateway CIDR overlapping a subnet of the service router's own is refused on that router
/// wherever its route would be written or kept: on the batched resync as on the link's own
/// reconcile, and for a route already in place once the router gains such a subnet.
async fn the_connected_subnet_screen_holds_wherever_a_route_is_written_or_kept(mut env: Env) {
    let svc = env.router("connected").await;
    let mut made = vec![own_subnet(&env, &svc.id, "192.168.50.0/24").await];
    let mut gw_ports = vec![];
    for (i, ip) in ["10.254.0.201", "10.254.0.202", "10.254.0.203"]
        .iter()
        .enumerate()
    {
        gw_ports.push(env.port_at_ip(ip, &format!("gateway-pod-{i}")).await);
    }
    let good = target("vpn", "good", "100.64.1.0/24", "10.254.0.201");
    env.reverse = vec![good.clone()];
    env.add_link("c", spec(&svc.id, "10.51.0.0/16", None));
    env.reconcile("c").await;
    env.assert_ready("c");
    let snaps = Snapshots::new(std::time::Duration::from_secs(3600));

    // A new gateway inside the router's own subnet, met first by the batched resync.
    let inside = Route::new("192.168.50.128/25", "10.254.0.202");
    env.reverse
        .push(target("vpn", "inside", "192.168.50.128/25", "10.254.0.202"));
    assert_eq!(
        batched(&mut env, &snaps, "c").await,
        Some(0),
        "nothing written"
    );
    let (s, r, m) = env.condition("c", "ReverseRoutesInstalled");
    assert_eq!(
        (s.as_str(), r.as_str()),
        ("False", "EnsureReverseRoutesFailed")
    );
    assert!(
        m.contains("vpn/inside") && m.contains("connected to this link's service router"),
        "{m}"
    );
    let now = env.get_router(&svc.id).await.routes;
    assert!(!now.contains(&inside), "{now:?}");
    env.reverse.retain(|t| t.gateway.name != "inside");
    env.reconcile("c").await;
    env.assert_ready("c");

    // A gateway's route goes in on the batched path; then the router gains a subnet that
    // covers it: the next window takes the route out again and names the gateway.
    let later = Route::new("192.168.60.0/24", "10.254.0.203");
    env.reverse
        .push(target("vpn", "later", "192.168.60.0/24", "10.254.0.203"));
    snaps.invalidate().await;
    assert!(matches!(
        batched(&mut env, &snaps, "c").await,
        Some(1) | None
    ));
    assert!(env.get_router(&svc.id).await.routes.contains(&later));
    env.assert_ready("c");
    made.push(own_subnet(&env, &svc.id, "192.168.60.0/24").await);
    snaps.invalidate().await;
    assert!(matches!(
        batched(&mut env, &snaps, "c").await,
        Some(1) | None
    ));
    let now = env.get_router(&svc.id).await.routes;
    assert!(!now.contains(&later), "{now:?}");
    let (s, _, m) = env.condition("c", "ReverseRoutesInstalled");
    assert_eq!(s, "False", "{m}");
    assert!(m.contains("vpn/later"), "{m}");

    // The same on the link's own reconcile: the subnet goes, the route comes back; the
    // subnet returns, the route goes.
    let (n60, p60) = made.pop().unwrap();
    env.net
        .remove_router_interface(&svc.id, &p60)
        .await
        .unwrap();
    env.reconcile("c").await;
    env.assert_ready("c");
    assert!(env.get_router(&svc.id).await.routes.contains(&later));
    let (_, p60) = {
        let port = env
            .net
            .add_router_subnet(&svc.id, &subnet_of(&env, &n60).await)
            .await;
        (n60.clone(), port.unwrap())
    };
    made.push((n60, p60));
    env.reconcile("c").await;
    let now = env.get_router(&svc.id).await.routes;
    assert!(!now.contains(&later), "{now:?}");
    assert!(now.contains(&Route::new("100.64.1.0/24", "10.254.0.201")));
    let (s, _, m) = env.condition("c", "ReverseRoutesInstalled");
    assert!(s == "False" && m.contains("vpn/later"), "{m}");

    env.reverse.clear();
    env.delete("c").await;
    for (network, port) in made {
        env.net
            .remove_router_interface(&svc.id, &port)
            .await
            .unwrap();
        env.net.delete_network(&network).await.unwrap();
    }
    for p in gw_ports {
        env.net.delete_port(&p.id).await.unwrap();
    }
    assert_eq!(env.ports().await.len(), 1);
}
both!(the_connected_subnet_screen_holds_wherever_a_route_is_written_or_kept);

async fn subnet_of(env: &Env, network_id: &str) -> String {
    env.net.get_network(network_id).await.unwrap().subnets[0].clone()
}
