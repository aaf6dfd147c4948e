//! The same-tenant ClusterLink lifecycle, against the fake and the real lab.
//!
//! One file although it passes 500 lines: the lifecycle read top to bottom (create, adopt,
//! heal, delete, concurrency, bad input, spec changes), every scenario on the same harness.

use bnerd_api::names::{TAG_MANAGED, tag_link_uid};
use bnerd_cloud::{CreatePort, Route};
use bnerd_testkit::crash::{Crash, Crashing};
use bnerd_testkit::{Env, both, reconcile_one, spec, unique};

async fn new_link_is_ready(mut env: Env) {
    let svc = env.router("shoot--services--svc01").await;
    env.add_link("svc01-link", spec(&svc.name, "10.251.0.0/16", None));
    env.reconcile("svc01-link").await;
    env.assert_ready("svc01-link");
    assert_eq!(env.transit_ip("svc01-link").as_deref(), Some("10.254.0.3"));
    let port = env.port_at("10.254.0.3").await.expect("leg at .3");
    let uid = env.link("svc01-link").metadata.uid.clone().unwrap();
    assert!(
        port.has_tag(&tag_link_uid(&uid)) && port.has_tag(TAG_MANAGED),
        "{:?}",
        port.tags
    );
    assert!(port.is_interface_of(&svc.id));
    let gw = env.get_router(&env.fabric.gateway_router_id).await;
    assert_eq!(gw.routes, vec![Route::new("10.251.0.0/16", "10.254.0.3")]);
    for c in [
        "Validated",
        "LegAttached",
        "RouteInstalled",
        "ReverseRoutesInstalled",
        "Ready",
    ] {
        assert_eq!(env.condition("svc01-link", c).0, "True", "{c}");
    }
    assert_eq!(
        env.link("svc01-link")
            .status
            .as_ref()
            .unwrap()
            .observed_generation,
        Some(1)
    );
    // A second reconcile changes nothing.
    let before = env.link("svc01-link").status.clone();
    env.reconcile("svc01-link").await;
    assert_eq!(
        env.link("svc01-link").status.as_ref().unwrap().leg_port_id,
        before.unwrap().leg_port_id
    );
    assert_eq!(env.ports().await.len(), 2, "gateway leg + our leg");
}
both!(new_link_is_ready);

async fn allocation_skips_and_pins(mut env: Env) {
    let (a, b, c, d) = (
        env.router("a").await,
        env.router("b").await,
        env.router("c").await,
        env.router("d").await,
    );
    // An unrelated port at .3 (not ours, not attached to the link's router): skipped.
    let stranger = env.port_at_ip("10.254.0.3", "someone-else").await;
    env.add_link("one", spec(&a.id, "10.1.0.0/16", None));
    env.reconcile("one").await;
    assert_eq!(
        env.transit_ip("one").as_deref(),
        Some("10.254.0.4"),
        "{:?}",
        env.link("one").status
    );
    env.add_link("two", spec(&b.name, "10.2.0.0/16", None));
    env.reconcile("two").await;
    assert_eq!(env.transit_ip("two").as_deref(), Some("10.254.0.5"));
    env.assert_ready("two");
    // Pinned and free: honoured.
    env.add_link("pinned", spec(&c.name, "10.3.0.0/16", Some("10.254.0.77")));
    env.reconcile("pinned").await;
    assert_eq!(
        env.transit_ip("pinned").as_deref(),
        Some("10.254.0.77"),
        "{:?}",
        env.link("pinned").status
    );
    env.assert_ready("pinned");
    // Pinned and held by someone else: refused, naming the holder; nothing created.
    let ports_before = env.ports().await.len();
    env.add_link("blocked", spec(&d.name, "10.4.0.0/16", Some("10.254.0.3")));
    env.reconcile("blocked").await;
    let (s, reason, msg) = env.condition("blocked", "LegAttached");
    assert_eq!(
        (s.as_str(), reason.as_str()),
        ("False", "TransitIPUnavailable")
    );
    assert!(
        msg.contains(&stranger.id),
        "message names the holder: {msg}"
    );
    assert_eq!(env.condition("blocked", "RouteInstalled").1, "Blocked");
    assert_eq!(env.condition("blocked", "Ready").0, "False");
    assert_eq!(env.ports().await.len(), ports_before);
    // Pinned to an address another link claims: refused, naming that link.
    env.add_link("dup", spec(&d.name, "10.5.0.0/16", Some("10.254.0.77")));
    env.reconcile("dup").await;
    let (_, reason, msg) = env.condition("dup", "LegAttached");
    assert_eq!(reason, "TransitIPUnavailable");
    assert!(msg.contains("ClusterLink pinned"), "{msg}");
}
both!(allocation_skips_and_pins);

async fn adopts_hand_made_leg(mut env: Env) {
    // The reference deployment: a hand-made, untagged leg at .3 on svc01's router and a
    // hand-made route on the gateway router.
    let svc = env.router("shoot--services--svc01").await;
    let leg = env.port_at_ip("10.254.0.3", "vpn-transit-svc01-leg").await;
    env.net
        .add_router_interface(&svc.id, &leg.id)
        .await
        .unwrap();
    env.add_routes(
        &env.fabric.gateway_router_id,
        &[Route::new("10.251.0.0/16", "10.254.0.3")],
    )
    .await
    .unwrap();
    let gw_before = env.get_router(&env.fabric.gateway_router_id).await;

    env.add_link(
        "svc01-link",
        spec(&svc.name, "10.251.0.0/16", Some("10.254.0.3")),
    );
    let out = env.reconcile("svc01-link").await;
    env.assert_ready("svc01-link");
    assert!(
        out.actions
            .iter()
            .any(|a| a.kind == bnerd_engine::ActionKind::LegPortAdopted),
        "{:?}",
        out.actions
    );
    let st = env.link("svc01-link").status.clone().unwrap();
    assert_eq!(
        st.leg_port_id.as_deref(),
        Some(leg.id.as_str()),
        "adopted, not duplicated"
    );
    assert_eq!(
        env.ports().await.len(),
        2,
        "gateway leg + the adopted leg, no second port"
    );
    let uid = env.link("svc01-link").metadata.uid.clone().unwrap();
    assert!(
        env.net
            .get_port(&leg.id)
            .await
            .unwrap()
            .has_tag(&tag_link_uid(&uid))
    );
    let gw_after = env.get_router(&env.fabric.gateway_router_id).await;
    assert_eq!(gw_after.routes, gw_before.routes, "route unchanged");
    assert_eq!(
        gw_after.revision_number, gw_before.revision_number,
        "gateway router not written"
    );

    env.delete("svc01-link").await;
    assert!(
        env.net.get_port(&leg.id).await.unwrap_err().is_not_found(),
        "adopted port deleted with the link"
    );
    assert!(
        env.get_router(&env.fabric.gateway_router_id)
            .await
            .routes
            .is_empty()
    );
}
both!(adopts_hand_made_leg);

async fn heals_out_of_band_changes(mut env: Env) {
    let svc = env.router("svc").await;
    env.add_link("heal", spec(&svc.id, "10.9.0.0/16", None));
    env.reconcile("heal").await;
    env.assert_ready("heal");
    let want = Route::new("10.9.0.0/16", "10.254.0.3");

    // Someone removes the route.
    env.remove_routes(&env.fabric.gateway_router_id, std::slice::from_ref(&want))
        .await
        .unwrap();
    env.reconcile("heal").await;
    assert!(
        env.get_router(&env.fabric.gateway_router_id)
            .await
            .routes
            .contains(&want)
    );
    env.assert_ready("heal");

    // Someone detaches the leg (Neutron deletes the port with it): rebuilt at the same address.
    let old = env.leg_port_id("heal");
    env.net
        .remove_router_interface(&svc.id, &old)
        .await
        .unwrap();
    assert!(env.net.get_port(&old).await.unwrap_err().is_not_found());
    env.reconcile("heal").await;
    env.assert_ready("heal");
    let new = env.link("heal").status.clone().unwrap();
    assert_ne!(new.leg_port_id.as_deref(), Some(old.as_str()));
    assert_eq!(new.transit_ip.as_deref(), Some("10.254.0.3"));
    let p = env.port_at("10.254.0.3").await.unwrap();
    assert!(p.is_interface_of(&svc.id));

    // A crash right after the create (no tags, not attached, not in status): the port is
    // found by the UID marker in its description, tagged and attached; no second port.
    let svc2 = env.router("svc2").await;
    env.add_link("loose", spec(&svc2.id, "10.8.0.0/16", None));
    let uid = env.link("loose").metadata.uid.clone().unwrap();
    let loose = env
        .net
        .create_port(&CreatePort {
            network_id: env.fabric.transit_network_id.clone(),
            ip_address: Some("10.254.0.4".into()),
            name: "clusterlink-loose".into(),
            description: format!(
                "ClusterLink loose leg, managed by bnerd-vpn-operator, clusterlink-uid={uid}"
            ),
            ..Default::default()
        })
        .await
        .unwrap();
    env.reconcile("loose").await;
    env.assert_ready("loose");
    assert_eq!(
        env.link("loose")
            .status
            .clone()
            .unwrap()
            .leg_port_id
            .as_deref(),
        Some(loose.id.as_str())
    );
    let p = env.net.get_port(&loose.id).await.unwrap();
    assert!(p.is_interface_of(&svc2.id));
    assert!(
        p.has_tag(&tag_link_uid(&uid)) && p.has_tag(TAG_MANAGED),
        "{:?}",
        p.tags
    );
    assert_eq!(env.ports().await.len(), 3, "gateway leg + two legs");
}
both!(heals_out_of_band_changes);

async fn delete_touches_only_its_own(mut env: Env) {
    let svc = env.router("svc").await;
    // A foreign interface on the service router (another subnet) and a foreign route on the
    // gateway router (via a transit address that is not ours).
    let other = env.net.create_network(&unique("other")).await.unwrap();
    let other_subnet = env
        .net
        .create_subnet(&other.id, "192.168.77.0/24", "192.168.77.1")
        .await
        .unwrap();
    let foreign_if = env
        .net
        .add_router_subnet(&svc.id, &other_subnet.id)
        .await
        .unwrap();
    let foreign_route = Route::new("172.20.0.0/16", "10.254.0.200");
    env.add_routes(
        &env.fabric.gateway_router_id,
        std::slice::from_ref(&foreign_route),
    )
    .await
    .unwrap();

    env.add_link("gone", spec(&svc.name, "10.7.0.0/16", None));
    env.reconcile("gone").await;
    env.assert_ready("gone");
    let leg = env.leg_port_id("gone");

    env.delete("gone").await;
    assert!(
        env.net.get_port(&leg).await.unwrap_err().is_not_found(),
        "leg port gone"
    );
    let gw = env.get_router(&env.fabric.gateway_router_id).await;
    assert_eq!(gw.routes, vec![foreign_route], "only our route removed");
    let fi = env
        .net
        .get_port(&foreign_if)
        .await
        .expect("foreign interface kept");
    assert!(fi.is_interface_of(&svc.id));
    // A second unwind of a gone link is a no-op.
    env.add_link("gone", spec(&svc.name, "10.7.0.0/16", None));
    env.delete("gone").await;
    // Cleanup of the foreign fixtures (lab hygiene).
    env.net
        .remove_router_interface(&svc.id, &foreign_if)
        .await
        .unwrap();
    env.net.delete_network(&other.id).await.unwrap();
}
both!(delete_touches_only_its_own);

async fn ten_links_concurrently(mut env: Env) {
    let mut routers = vec![];
    for i in 0..10 {
        let r = env.router(&format!("svc{i}")).await;
        env.add_link(
            &format!("l{i}"),
            spec(&r.id, &format!("10.{}.0.0/16", 100 + i), None),
        );
        routers.push(r);
    }
    // Every reconcile sees the same (empty) claims, as ten workers with a cold cache would:
    // Neutron's 409 on a taken address is the only arbiter.
    let links = env.links.clone();
    // On the fake, each gateway-route write takes a while, so ten links' writes would overlap
    // on the one gateway router unless the engine sends them one at a time.
    if let Some(fake) = &env.fake {
        let slow = bnerd_cloud_fake::Fault::Latency(std::time::Duration::from_millis(20));
        fake.inject(bnerd_cloud_fake::Op::AddExtraroutes, slow, 10);
    }
    let mut tasks = vec![];
    for i in 0..10 {
        let net = env.net.clone();
        let fabric = env.fabric.clone();
        let links = links.clone();
        tasks.push(tokio::spawn(async move {
            reconcile_one(net.as_ref(), &fabric, &links, i, &[]).await
        }));
    }
    let mut ips = std::collections::BTreeSet::new();
    for (i, t) in tasks.into_iter().enumerate() {
        let out = t.await.unwrap();
        let ready = out
            .status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        assert!(ready, "link {i}: {:?}", out.status.conditions);
        ips.insert(out.status.transit_ip.clone().unwrap());
        env.links[i].status = Some(out.status);
    }
    assert_eq!(ips.len(), 10, "ten distinct transit IPs: {ips:?}");
    if let Some(fake) = &env.fake {
        assert_eq!(
            fake.overlapping_route_writes(),
            Vec::<String>::new(),
            "route writes on one router, one at a time"
        );
    }
    let gw = env.get_router(&env.fabric.gateway_router_id).await;
    assert_eq!(gw.routes.len(), 10, "ten routes: {:?}", gw.routes);
    for l in &env.links {
        let st = l.status.as_ref().unwrap();
        let r = st.gateway_route.as_ref().unwrap();
        assert!(gw.routes.contains(&Route::new(&r.destination, &r.nexthop)));
    }
    let ours = env
        .ports()
        .await
        .into_iter()
        .filter(|p| p.has_tag(TAG_MANAGED))
        .count();
    assert_eq!(ours, 10, "no leaked extra ports");
}
both!(ten_links_concurrently);

async fn bad_input_is_named(mut env: Env) {
    let svc = env.router("svc").await;
    env.add_link("badcidr", spec(&svc.id, "10.1.0.1/16", None));
    env.reconcile("badcidr").await;
    let (s, r, m) = env.condition("badcidr", "Validated");
    assert_eq!((s.as_str(), r.as_str()), ("False", "InvalidSpec"));
    assert!(m.contains("spec.serviceClusterCIDR"), "{m}");
    assert_eq!(env.condition("badcidr", "LegAttached").1, "Blocked");

    env.add_link("dhcp", spec(&svc.id, "10.1.0.0/16", Some("10.254.0.2")));
    env.reconcile("dhcp").await;
    assert!(
        env.condition("dhcp", "Validated")
            .2
            .contains("spec.transitIP")
    );

    env.add_link("noroute", spec("no-such-router", "10.1.0.0/16", None));
    env.reconcile("noroute").await;
    let (_, r, m) = env.condition("noroute", "LegAttached");
    assert_eq!(r, "RouterResolveFailed");
    assert!(m.contains("no-such-router"), "{m}");

    // Two routers with one name: ambiguous.
    let name = unique("twin");
    env.router_named(&name).await;
    env.router_named(&name).await;
    env.add_link("twin", spec(&name, "10.1.0.0/16", None));
    env.reconcile("twin").await;
    let (_, r, m) = env.condition("twin", "LegAttached");
    assert_eq!(r, "RouterResolveFailed");
    assert!(m.contains("ambiguous"), "{m}");
    // None of these created a port.
    assert_eq!(env.ports().await.len(), 1);

    // Second link on the same router: its own port, but the attach fails (one interface per subnet).
    env.add_link("first", spec(&svc.id, "10.11.0.0/16", None));
    env.reconcile("first").await;
    env.assert_ready("first");
    env.add_link("second", spec(&svc.id, "10.12.0.0/16", None));
    env.reconcile("second").await;
    let (s, r, m) = env.condition("second", "LegAttached");
    assert_eq!(
        (s.as_str(), r.as_str()),
        ("False", "EnsureRouterHasPortFailed")
    );
    assert!(bnerd_cloud::refusals::is_second_router_interface(&m), "{m}");
    env.delete("second").await;
    assert_eq!(
        env.ports().await.len(),
        2,
        "the failed link's port is gone with it"
    );

    // A foreign route for our CIDR on the gateway router: never replaced.
    let svc3 = env.router("svc3").await;
    env.add_routes(
        &env.fabric.gateway_router_id,
        &[Route::new("10.13.0.0/16", "10.254.0.250")],
    )
    .await
    .unwrap();
    env.add_link("clash", spec(&svc3.id, "10.13.0.0/16", None));
    env.reconcile("clash").await;
    let (_, r, m) = env.condition("clash", "RouteInstalled");
    assert_eq!(r, "RouteConflict");
    assert!(m.contains("10.254.0.250"), "{m}");

    // Overlapping CIDRs of two links: the one holding the route wins.
    let svc4 = env.router("svc4").await;
    env.add_link("overlap", spec(&svc4.id, "10.11.128.0/17", None));
    env.reconcile("overlap").await;
    let (_, r, m) = env.condition("overlap", "RouteInstalled");
    assert_eq!(r, "CIDROverlap");
    assert!(m.contains("first"), "{m}");
}
both!(bad_input_is_named);

async fn spec_changes_converge(mut env: Env) {
    let (a, b) = (env.router("a").await, env.router("b").await);
    env.add_link("mover", spec(&a.id, "10.20.0.0/16", None));
    env.reconcile("mover").await;
    env.assert_ready("mover");
    // New CIDR: old route removed, new one installed.
    env.links[0].spec.service_cluster_cidr = "10.21.0.0/16".into();
    env.reconcile("mover").await;
    env.assert_ready("mover");
    let gw = env.get_router(&env.fabric.gateway_router_id).await;
    assert_eq!(gw.routes, vec![Route::new("10.21.0.0/16", "10.254.0.3")]);
    // New router: the leg moves.
    env.links[0].spec.service_cluster_router = b.id.clone();
    env.reconcile("mover").await;
    env.assert_ready("mover");
    let p = env
        .port_at(env.transit_ip("mover").as_deref().unwrap())
        .await
        .unwrap();
    assert!(p.is_interface_of(&b.id));
    assert_eq!(env.ports().await.len(), 2, "nothing left at the old router");
    // New pinned IP: rebuilt there, route follows.
    env.links[0].spec.transit_ip = Some("10.254.0.50".into());
    env.reconcile("mover").await;
    env.assert_ready("mover");
    assert_eq!(env.transit_ip("mover").as_deref(), Some("10.254.0.50"));
    let gw = env.get_router(&env.fabric.gateway_router_id).await;
    assert_eq!(gw.routes, vec![Route::new("10.21.0.0/16", "10.254.0.50")]);
    assert_eq!(env.ports().await.len(), 2);
}
both!(spec_changes_converge);

/// A link that names its router keeps its leg when a second router takes the same name
/// later (the leg's router still carries the name); a new link by that name is ambiguous.
async fn named_router_stays_put(mut env: Env) {
    let svc = env.router("named").await;
    env.add_link("named", spec(&svc.name, "10.31.0.0/16", None));
    env.reconcile("named").await;
    env.assert_ready("named");
    let leg = env
        .link("named")
        .status
        .as_ref()
        .unwrap()
        .leg_port_id
        .clone();

    let twin = env.router_named(&svc.name).await;
    let out = env.reconcile("named").await;
    env.assert_ready("named");
    assert!(out.actions.is_empty(), "{:?}", out.actions);
    assert_eq!(env.link("named").status.as_ref().unwrap().leg_port_id, leg);

    env.add_link("late", spec(&svc.name, "10.32.0.0/16", None));
    env.reconcile("late").await;
    let (_, r, m) = env.condition("late", "LegAttached");
    assert_eq!(r, "RouterResolveFailed");
    assert!(m.contains("ambiguous") && m.contains(&twin.id), "{m}");
    env.delete("late").await;
    env.delete("named").await;
    assert_eq!(env.ports().await.len(), 1, "only the gateway's leg is left");
}
both!(named_router_stays_put);

/// "The order leg port → attach → gateway route is fixed: a route never points at an
/// address no attached leg of ours holds" (docs/design.md, "A same-tenant link"). The
/// reconcile of a new link runs through the crash harness's wrapper, which stops nowhere and
/// logs every call as it is made: the leg port is created, then attached to the service
/// router, and only then is the gateway route written (`add_extraroutes`, or the whole-table
/// `set_routes` without `extraroute-atomic`). No gateway has reverse exposures here, so the
/// gateway route is the only route this reconcile writes.
async fn the_route_follows_the_attached_leg(mut env: Env) {
    let svc = env.router("order").await;
    env.add_link("order", spec(&svc.id, "10.41.0.0/16", None));
    let crash = Crash::counting();
    let net = Crashing::new(env.net.clone(), crash.clone());
    let out = reconcile_one(&net, &env.fabric, &env.links, 0, &env.reverse).await;
    env.links[0].status = Some(out.status);
    env.assert_ready("order");
    let log = crash.log();
    let at = |names: &[&str]| {
        log.iter()
            .position(|c| names.contains(c))
            .unwrap_or_else(|| panic!("no {names:?} in {log:?}"))
    };
    let create = at(&["create_port"]);
    let attach = at(&["add_router_interface"]);
    let route = at(&["add_extraroutes", "set_routes"]);
    assert!(
        create < attach && attach < route,
        "leg port, attach, then the gateway route: {log:?}"
    );
    let ip = env.transit_ip("order").expect("transit ip");
    assert_eq!(
        env.gateway_routes().await,
        vec![Route::new("10.41.0.0/16", &ip)]
    );
    env.delete("order").await;
    assert!(env.leg_ports().await.is_empty());
}
both!(the_route_follows_the_attached_leg);
