//! `kubectl clusterlink plan` predicts the reconcile: for each case the plan is made, then the
//! reconcile runs for real through a tap that records its writes the way a plan names them,
//! and the two lists (and the conditions) must be equal. On the fake and on the real lab.
//! Here rather than in the CLI crate, as cli_doctor.rs: the harness drives the engine.

use bnerd_cloud::{Route, RouterQuery};
use bnerd_clusterlink_cli::plan::{Plan, plan};
use bnerd_engine::Engine;
use bnerd_engine::overlay::{Overlay, PlannedWrite};
use bnerd_engine::view::{input_of, peers_of};
use bnerd_testkit::{Env, both, spec};

/// Plan `name`, then reconcile it for real through a tap; both write lists and conditions.
async fn plan_then_apply(env: &mut Env, name: &str) -> (Plan, Vec<PlannedWrite>) {
    let link = env.link(name).clone();
    let planned = plan(
        env.net.as_ref(),
        &env.fabric,
        &link,
        &env.links,
        &env.reverse,
    )
    .await
    .expect("plan");
    let status = link.status.clone().unwrap_or_default();
    let peers = peers_of(&link, env.links.iter());
    let input = input_of(&link, &status, &peers, &env.reverse).expect("uid");
    let tap = Overlay::tap(env.net.as_ref());
    let out = Engine::same_tenant(&tap, &env.fabric)
        .reconcile(&input)
        .await;
    let i = env
        .links
        .iter()
        .position(|l| l.metadata.name.as_deref() == Some(name))
        .expect("link");
    let applied_conditions: Vec<(String, String, String)> = out
        .status
        .conditions
        .iter()
        .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
        .collect();
    let mut planned_conditions: Vec<(String, String, String)> = planned
        .conditions
        .iter()
        .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
        .collect();
    let mut applied_sorted = applied_conditions.clone();
    planned_conditions.sort();
    applied_sorted.sort();
    assert_eq!(planned_conditions, applied_sorted, "{name}: conditions");
    env.links[i].status = Some(out.status);
    (planned, tap.writes())
}

/// Plan and apply link `name`, whose attach Neutron refuses: the same writes, not Ready,
/// EnsureRouterHasPortFailed, and a hint containing `hint`.
async fn refused_attach(env: &mut Env, name: &str, hint: &str) -> Plan {
    let (p, applied) = plan_then_apply(env, name).await;
    assert_eq!(kinds(&p.writes), kinds(&applied), "{name}");
    assert!(!p.ready);
    assert!(
        p.conditions
            .iter()
            .any(|c| c.reason == "EnsureRouterHasPortFailed"),
        "{p:?}"
    );
    assert!(p.hints.iter().any(|h| h.contains(hint)), "{hint}: {p:?}");
    // Neutron's words, as the cloud behind `env` says them (the two backends differ).
    let message = |conditions: Vec<(String, String)>| {
        conditions
            .into_iter()
            .find(|(reason, _)| reason == "EnsureRouterHasPortFailed")
            .map(|(_, m)| m)
            .unwrap_or_default()
    };
    let planned = message(
        p.conditions
            .iter()
            .map(|c| (c.reason.clone(), c.message.clone()))
            .collect(),
    );
    let applied = message(
        env.link(name)
            .status
            .clone()
            .unwrap_or_default()
            .conditions
            .into_iter()
            .map(|c| (c.reason, c.message))
            .collect(),
    );
    let words = |m: &str| {
        m.find("Bad router request:")
            .map(|i| m[i..].split(". ").next().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    assert!(
        !words(&applied).is_empty() && words(&planned) == words(&applied),
        "{name}: the plan words Neutron's refusal as the cloud does\nplanned: {planned}\napplied: {applied}"
    );
    p
}

fn kinds(ws: &[PlannedWrite]) -> Vec<String> {
    ws.iter().map(|w| w.to_string()).collect()
}

async fn plan_predicts_the_reconcile(mut env: Env) {
    // Create: the lowest free address, attach, the gateway route.
    let a = env.router("plan-a").await;
    env.add_link("create", spec(&a.id, "10.81.0.0/16", None));
    let (p, applied) = plan_then_apply(&mut env, "create").await;
    assert_eq!(kinds(&p.writes), kinds(&applied), "create");
    assert!(p.ready);
    let text = kinds(&p.writes).join("\n");
    assert!(text.contains("at 10.254.0.3"), "{text}");
    // Added alone, or (without extraroute-atomic) as the router's whole new table.
    assert!(text.contains("10.81.0.0/16 via 10.254.0.3"), "{text}");
    // A converged link plans nothing.
    let (p, applied) = plan_then_apply(&mut env, "create").await;
    assert!(p.writes.is_empty() && applied.is_empty(), "{p:?}");

    // Adopt: an untagged port already attached at the pinned address is taken over.
    let b = env.router("plan-b").await;
    let hand = env.port_at_ip("10.254.0.20", "hand-made").await;
    env.net.add_router_interface(&b.id, &hand.id).await.unwrap();
    env.add_link("adopt", spec(&b.id, "10.82.0.0/16", Some("10.254.0.20")));
    let (p, applied) = plan_then_apply(&mut env, "adopt").await;
    assert_eq!(kinds(&p.writes), kinds(&applied), "adopt");
    assert!(p.ready);
    assert!(
        !p.writes
            .iter()
            .any(|w| matches!(w, PlannedWrite::CreatePort { .. })),
        "adopting creates no port: {p:?}"
    );

    // A hand-made leg at another address on the router: the attach is refused, and the
    // plan says which address to pin.
    let c = env.router("plan-c").await;
    let other = env.port_at_ip("10.254.0.30", "hand-made-2").await;
    env.net
        .add_router_interface(&c.id, &other.id)
        .await
        .unwrap();
    env.add_link("refused", spec(&c.id, "10.83.0.0/16", None));
    refused_attach(&mut env, "refused", "pin spec.transitIP: 10.254.0.30").await;

    // A second link on a router that another link already holds: the attach is refused too,
    // but that leg is the other link's, so pinning its address would only be refused as
    // claimed; the hint names the link holding the router instead.
    env.add_link("second", spec(&a.id, "10.85.0.0/16", None));
    let holder = format!("router {} is already linked by ClusterLink create", a.id);
    let p = refused_attach(&mut env, "second", &holder).await;
    assert!(
        !p.hints.iter().any(|h| h.contains("pin spec.transitIP")),
        "{p:?}"
    );

    // A foreign route for the same CIDR on the gateway router: RouteConflict, nothing routed.
    let d = env.router("plan-d").await;
    let mut table = env.get_router(&env.fabric.gateway_router_id).await.routes;
    table.push(Route::new("10.84.0.0/16", "10.254.0.99"));
    env.net
        .set_routes(&env.fabric.gateway_router_id, &table, None)
        .await
        .unwrap();
    env.add_link("foreign", spec(&d.id, "10.84.0.0/16", None));
    let (p, applied) = plan_then_apply(&mut env, "foreign").await;
    assert_eq!(kinds(&p.writes), kinds(&applied), "foreign route");
    assert!(
        p.conditions.iter().any(|c| c.reason == "RouteConflict"),
        "{p:?}"
    );

    // Overlap with a Ready link's CIDR: CIDROverlap.
    let e = env.router("plan-e").await;
    env.add_link("overlap", spec(&e.id, "10.81.128.0/17", None));
    let (p, applied) = plan_then_apply(&mut env, "overlap").await;
    assert_eq!(kinds(&p.writes), kinds(&applied), "overlap");
    assert!(
        p.conditions.iter().any(|c| c.reason == "CIDROverlap"),
        "{p:?}"
    );

    // A duplicate leg (a second port with the link's UID): the plan removes the same one.
    let uid = env.link("create").metadata.uid.clone().unwrap();
    let dup = env.port_at_ip("10.254.0.50", "dup").await;
    env.net
        .set_port_tags(
            &dup.id,
            &[
                "bnerd-vpn-operator".into(),
                format!("clusterlink-uid={uid}"),
                "clusterlink=create".into(),
            ],
        )
        .await
        .unwrap();
    let (p, applied) = plan_then_apply(&mut env, "create").await;
    assert_eq!(kinds(&p.writes), kinds(&applied), "duplicate leg");
    assert!(
        p.writes
            .iter()
            .any(|w| matches!(w, PlannedWrite::DeletePort { port_id } if *port_id == dup.id)),
        "{p:?}"
    );

    // The routers stay findable by name for the plan as for the reconcile.
    let found = env
        .net
        .list_routers(&RouterQuery {
            name: Some(a.name.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    for name in ["create", "adopt", "refused", "second", "foreign", "overlap"] {
        env.delete(name).await;
    }
}
both!(plan_predicts_the_reconcile);

/// The same on the lab's ML2/OVN Neutron, whose L3 plugin words the refused attach otherwise
/// (`both!` runs it on a fake that answers as ML2/OVN does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_predicts_the_reconcile_on_the_ml2_ovn_lab() {
    let Some(env) =
        bnerd_testkit::ovn_env_for("plan_predicts_the_reconcile_on_the_ml2_ovn_lab").await
    else {
        return;
    };
    let cleanup = env.cleanup();
    plan_predicts_the_reconcile(env).await;
    cleanup.teardown(&[]).await;
}
