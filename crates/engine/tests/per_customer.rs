//! `PerCustomer` links (docs/design.md, "Per-customer transit"): the first link of a project
//! builds its customer transit (network, subnet from the pool, edge router with its two
//! interfaces, the share to that project only), later links of the project stand on the same
//! one, every route of the path is where the design puts it, and the project's last link
//! takes it all down. A reconcile and an unwind stopped at every call (both kinds) leave
//! nothing the next one does not find and finish; the lab runs a seeded sample.

mod support;

use bnerd_api::names::{customer_transit_name, edge_router_name};
use bnerd_api::{ClusterLink, EventReason, TransitIsolation};
use bnerd_cloud::fabric::CustomerTransitPool;
use bnerd_cloud::{ACCESS_AS_SHARED, NetworkQuery, PortQuery, Route, RouterQuery};
use bnerd_cloud_fake::FakeCloud;
use bnerd_engine::{Retry, events, unwound_events};
use bnerd_testkit::crash::{Crash, Kind, Sample};
use bnerd_testkit::{Env, fake_env_with, lab_env_for, report, spec};
use support::{
    CIDR, Ended, GW_PORT_IP, GW_SERVICE_CIDR, Stage, converge, converge_delete, new_link,
    reconcile_with, unwind_failing, unwind_retry, unwind_with, unwound_with,
};

/// The fake and the lab run of one scenario, as two tests.
macro_rules! fake_and_lab {
    ($scenario:ident, $fake:ident, $lab:ident) => {
        #[tokio::test]
        async fn $fake() {
            $scenario(fake_env_with(FakeCloud::new()).await).await;
        }

        #[tokio::test]
        async fn $lab() {
            let Some(env) = lab_env_for(stringify!($lab)).await else {
                return;
            };
            $scenario(env).await;
        }
    };
}

const POOL: &str = "10.255.128.0/24";
const CIDR_2: &str = "10.62.0.0/16";

fn pool() -> CustomerTransitPool {
    CustomerTransitPool {
        pool: POOL.parse().unwrap(),
        prefix_len: 28,
    }
}

async fn stage(env: Env) -> Stage {
    let mut env = env;
    env.fabric.customer_transit = Some(pool());
    Stage::new(env, true).await
}

fn per_customer_link(stage: &Stage, router: &str, cidr: &str) -> ClusterLink {
    let mut s = spec(router, cidr, None);
    s.transit_isolation = Some(TransitIsolation::PerCustomer);
    let mut l = new_link(stage, s);
    // A PerCustomer link needs no attestation: prove it by carrying none.
    l.metadata.annotations = None;
    l
}

/// What the project's customer transit is in the cloud (as the operator sees it).
struct Fabric {
    networks: Vec<bnerd_cloud::Network>,
    routers: Vec<bnerd_cloud::Router>,
    edge_legs: Vec<bnerd_cloud::Port>,
}

async fn fabric_of(stage: &Stage) -> Fabric {
    let env = &stage.env;
    let project = &stage.side.as_ref().expect("customer").project;
    let networks = env
        .net
        .list_networks(&NetworkQuery {
            name: Some(customer_transit_name(
                &env.fabric.transit_network_id,
                project,
            )),
            project_id: Some(env.fabric.operator_project_id.clone()),
        })
        .await
        .unwrap();
    let routers = env
        .net
        .list_routers(&RouterQuery {
            name: Some(edge_router_name(&env.fabric.transit_network_id, project)),
            ..Default::default()
        })
        .await
        .unwrap();
    let edge_legs = env
        .net
        .list_ports(&PortQuery {
            network_id: Some(env.fabric.transit_network_id.clone()),
            ..Default::default()
        })
        .await
        .unwrap()
        .into_iter()
        .filter(|p| p.name == edge_router_name(&env.fabric.transit_network_id, project))
        .collect();
    Fabric {
        networks,
        routers,
        edge_legs,
    }
}

/// The invariants of Ready `PerCustomer` links of one project (`links` with their routers).
async fn check_ready(stage: &Stage, links: &[&ClusterLink], at: &str) {
    let env = &stage.env;
    let project = stage.side.as_ref().unwrap().project.clone();
    let f = fabric_of(stage).await;
    assert_eq!(f.networks.len(), 1, "{at}: customer transit networks");
    assert_eq!(f.routers.len(), 1, "{at}: edge routers");
    assert_eq!(f.edge_legs.len(), 1, "{at}: edge legs on the transit");
    let anet = &f.networks[0];
    let edge = &f.routers[0];
    let edge_leg = &f.edge_legs[0];
    assert!(
        edge_leg.is_interface_of(&edge.id),
        "{at}: the edge leg is attached"
    );
    let edge_ip = edge_leg.first_ip().unwrap().to_string();
    // Shared with the project, and only with it; the main transit shared with nobody.
    let shares = env.net.list_rbac_policies(&anet.id).await.unwrap();
    assert_eq!(
        shares.len(),
        1,
        "{at}: shares of the customer transit: {shares:?}"
    );
    assert_eq!(
        (shares[0].action.as_str(), shares[0].target_tenant.as_str()),
        (ACCESS_AS_SHARED, project.as_str())
    );
    let transit_shares = env
        .net
        .list_rbac_policies(&env.fabric.transit_network_id)
        .await
        .unwrap();
    assert!(
        transit_shares.iter().all(|p| p.target_tenant != project),
        "{at}: the main transit is shared with the customer: {transit_shares:?}"
    );
    let subnet = env.net.get_subnet(&anet.subnets[0]).await.unwrap();
    let cidr: ipnet::Ipv4Net = subnet.cidr.parse().unwrap();
    assert!(
        pool().pool.contains(&cidr) && cidr.prefix_len() == 28,
        "{at}: {cidr}"
    );
    let gw = subnet.gateway_ip.clone().unwrap();
    let anet_ports = env
        .net
        .list_ports(&PortQuery {
            network_id: Some(anet.id.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    let edge_router = env.net.get_router(&edge.id).await.unwrap();
    let mut want_edge = vec![Route::new(GW_SERVICE_CIDR, GW_PORT_IP)];
    let mut want_gw = vec![];
    for l in links {
        let uid = l.metadata.uid.clone().unwrap();
        let legs = support::own(&anet_ports, &uid);
        assert_eq!(legs.len(), 1, "{at}: legs of {uid} on the customer transit");
        let leg = &legs[0];
        let ip = leg.first_ip().unwrap().to_string();
        let router = &l.spec.service_cluster_router;
        assert!(
            leg.is_interface_of(router),
            "{at}: leg attached to its router"
        );
        assert_eq!(leg.project_id, project, "{at}: the leg is the customer's");
        let cidr = &l.spec.service_cluster_cidr;
        want_gw.push(Route::new(cidr, &edge_ip));
        want_edge.push(Route::new(cidr, &ip));
        let mut service = stage.leg_client().get_router(router).await.unwrap().routes;
        service.sort();
        let mut want = vec![
            Route::new(env.fabric.transit_subnet.to_string(), &gw),
            Route::new(GW_SERVICE_CIDR, &gw),
        ];
        want.sort();
        assert_eq!(
            service, want,
            "{at}: routes of the customer router {router}"
        );
        let st = l.status.clone().unwrap_or_default();
        let ct = st.customer_transit.expect("status.customerTransit");
        assert_eq!(ct.network_id.as_deref(), Some(anet.id.as_str()), "{at}");
        assert_eq!(ct.edge_router_id.as_deref(), Some(edge.id.as_str()), "{at}");
        assert_eq!(
            ct.edge_router_transit_ip.as_deref(),
            Some(edge_ip.as_str()),
            "{at}"
        );
        assert_eq!(ct.cidr.as_deref(), Some(subnet.cidr.as_str()), "{at}");
        assert_eq!(st.transit_ip.as_deref(), Some(ip.as_str()), "{at}");
    }
    let mut got_edge = edge_router.routes.clone();
    got_edge.sort();
    want_edge.sort();
    assert_eq!(got_edge, want_edge, "{at}: edge router routes");
    let mut got_gw = env.gateway_routes().await;
    got_gw.sort();
    want_gw.sort();
    assert_eq!(got_gw, want_gw, "{at}: gateway router routes");
}

/// Nothing of the project's customer transit is left, and the stage is as it started.
async fn check_gone(stage: &Stage, at: &str) {
    let f = fabric_of(stage).await;
    assert!(
        f.networks.is_empty(),
        "{at}: networks left: {:?}",
        f.networks
    );
    assert!(
        f.routers.is_empty(),
        "{at}: edge routers left: {:?}",
        f.routers
    );
    assert!(
        f.edge_legs.is_empty(),
        "{at}: edge legs left: {:?}",
        f.edge_legs
    );
    assert!(
        stage.env.gateway_routes().await.is_empty(),
        "{at}: gateway routes left"
    );
    for r in [&stage.routers.0, &stage.routers.1] {
        let routes = stage.leg_client().get_router(r).await.unwrap().routes;
        assert!(routes.is_empty(), "{at}: routes left on {r}: {routes:?}");
    }
    assert_eq!(
        support::port_ids(&stage.env.ports().await),
        stage.baseline,
        "{at}: the transit network is not back to its first state"
    );
}

async fn two_links_share_one_customer_transit(stage: &Stage) {
    let (a, b) = stage.routers.clone();
    let mut one = per_customer_link(stage, &a, CIDR);
    // The project's first link builds its customer transit, in one reconcile.
    let crash = Crash::counting();
    let out = reconcile_with(stage, &one, &crash).await;
    one.status = Some(out.status.clone());
    assert!(support::ready(&out.status), "{:#?}", out.status.conditions);
    as_the_table_says(&crash, "a project's first link, create", (33, 15));
    let st = one.status.clone().unwrap();
    let attested = st
        .conditions
        .iter()
        .find(|c| c.type_ == "TenantIsolationAttested")
        .expect("TenantIsolationAttested");
    assert_eq!(
        (attested.status.as_str(), attested.reason.as_str()),
        ("True", "StructuralIsolation")
    );
    check_ready(stage, &[&one], "first link").await;
    // One Event names every piece it built, by ID (the Recorder keeps the first note of a
    // series, so five Events of one reason would show the network alone).
    let f = fabric_of(stage).await;
    let anet = &f.networks[0];
    let edge = &f.routers[0];
    let interface = stage
        .env
        .net
        .list_ports(&PortQuery {
            network_id: Some(anet.id.clone()),
            device_ids: vec![edge.id.clone()],
            ..Default::default()
        })
        .await
        .unwrap();
    let mut pieces = vec![anet.id.clone(), anet.subnets[0].clone(), edge.id.clone()];
    pieces.extend(interface.iter().map(|p| p.id.clone()));
    pieces.push(f.edge_legs[0].id.clone());
    assert_eq!(pieces.len(), 5, "{pieces:?}");
    let built = told(&out, EventReason::CustomerTransitBuilt);
    assert_eq!(built.len(), 1, "one CustomerTransitBuilt: {built:?}");
    eprintln!("NOTE CustomerTransitBuilt: {}", built[0]);
    for id in &pieces {
        assert!(built[0].contains(id.as_str()), "{id} not in {}", built[0]);
    }

    let mut two = per_customer_link(stage, &b, CIDR_2);
    let crash = Crash::counting();
    let out = reconcile_with(stage, &two, &crash).await;
    two.status = Some(out.status.clone());
    assert!(support::ready(&out.status), "{:#?}", out.status.conditions);
    assert!(
        told(&out, EventReason::CustomerTransitBuilt).is_empty(),
        "the second link builds nothing"
    );
    as_the_table_says(&crash, "a later link of the same project, create", (26, 7));
    check_ready(stage, &[&one, &two], "second link").await;

    // A resync of a converged link writes nothing.
    let crash = Crash::counting();
    let out = reconcile_with(stage, &one, &crash).await;
    assert_eq!(
        out.status.conditions.len(),
        one.status.as_ref().unwrap().conditions.len()
    );
    assert!(out.actions.is_empty(), "resync acted: {:?}", out.actions);
    as_the_table_says(&crash, "resync of a converged link", (17, 0));

    // Both links in one batched resync window: the operator's side from the window's
    // snapshot and the lists that answer the project's customer transit ahead (on a lab, the
    // real Neutron's repeated filters), the customer's side with each link's own credential.
    // Nothing written, nothing changed.
    let snaps = bnerd_engine::resync::Snapshots::new(std::time::Duration::from_secs(30));
    let crash = Crash::counting();
    for l in [&one, &two] {
        let (out, path) = support::resync_batched(stage, l, &snaps, &crash).await;
        assert_eq!(
            path,
            Some(bnerd_engine::ResyncPath::Snapshot),
            "{:?}",
            l.metadata.name
        );
        assert_eq!(Some(&out.status), l.status.as_ref());
        assert!(out.actions.is_empty(), "resync acted: {:?}", out.actions);
    }
    as_the_table_says(&crash, "batched resync of the project's two links", (19, 0));

    // Drift: the edge router's route and the customer router's way back removed out of
    // band; the next reconcile puts both back and says so.
    let edge_id = transit_of(&one).edge_router_id.expect("edge router");
    let edge = stage.env.net.get_router(&edge_id).await.unwrap();
    let mine: Vec<Route> = edge
        .routes
        .iter()
        .filter(|r| r.destination == CIDR)
        .cloned()
        .collect();
    stage
        .env
        .net
        .remove_extraroutes(&edge_id, &mine)
        .await
        .expect("drift");
    let back: Vec<Route> = stage
        .leg_client()
        .get_router(&a)
        .await
        .unwrap()
        .routes
        .into_iter()
        .filter(|r| r.destination == stage.env.fabric.transit_subnet.to_string())
        .collect();
    stage
        .leg_client()
        .remove_extraroutes(&a, &back)
        .await
        .expect("drift");
    let out = reconcile_with(stage, &one, &Crash::counting()).await;
    assert!(support::ready(&out.status));
    let restored: Vec<String> = out.actions.iter().map(|a| a.note.clone()).collect();
    assert!(
        restored.iter().any(|n| n.contains("on edge router"))
            && restored
                .iter()
                .any(|n| n.contains(&format!("on router {a}"))),
        "{restored:?}"
    );
    check_ready(stage, &[&one, &two], "after drift").await;

    // The first link goes: the customer transit stays for the second.
    let crash = Crash::counting();
    let done = unwound_with(stage, &one, &crash).await.expect("unwind");
    as_the_table_says(
        &crash,
        "delete of a link that is not the project's last",
        (23, 4),
    );
    assert_eq!(
        reasons(&done),
        vec![EventReason::Unwound.as_str()],
        "a link that is not the last takes nothing down"
    );
    check_ready(stage, &[&two], "after the first link's delete").await;
    let crash = Crash::counting();
    let done = unwound_with(stage, &two, &crash).await.expect("unwind");
    as_the_table_says(&crash, "delete of the project's last link", (34, 10));
    check_gone(stage, "after the last link's delete").await;
    // The last link's delete says it took the customer transit down, naming what went,
    // before Unwound.
    assert_eq!(
        reasons(&done),
        vec![
            EventReason::CustomerTransitRemoved.as_str(),
            EventReason::Unwound.as_str()
        ]
    );
    let removed = &unwound_events(&done)[0].note;
    eprintln!("NOTE CustomerTransitRemoved: {removed}");
    for id in &pieces {
        assert!(removed.contains(id.as_str()), "{id} not in {removed}");
    }
    assert!(removed.contains("share "), "{removed}");
}

/// The calls and writes one operation made, held to the table of docs/performance.md ("A
/// `PerCustomer` link"), which states them for the fake and the lab alike: a change in either
/// is a failure until the table (or the engine) is corrected.
fn as_the_table_says(crash: &Crash, operation: &str, table: (usize, usize)) {
    let log = crash.log();
    let writes = log.iter().filter(|c| is_write(c)).count();
    eprintln!(
        "NOTE per-customer {operation}: {} calls, {writes} writes ({log:?})",
        log.len()
    );
    assert_eq!(
        (log.len(), writes),
        table,
        "{operation}: (calls, writes) are not those of docs/performance.md, \"A `PerCustomer` \
         link\"; the calls: {log:?}"
    );
}

/// A call that changes the cloud: all but the reads (as the fake counts them, its
/// `Op::is_read`), named as `Crash` logs them.
fn is_write(call: &str) -> bool {
    !(call.starts_with("get_")
        || call.starts_with("list_")
        || matches!(call, "extensions" | "probe_admin_read" | "token_info"))
}

/// The notes of the Events of `reason` a reconcile's outcome makes (a link still converging).
fn told(out: &bnerd_engine::Outcome, reason: EventReason) -> Vec<String> {
    events(&Default::default(), out, false, "seen")
        .into_iter()
        .filter(|e| e.reason == reason.as_str())
        .map(|e| e.note)
        .collect()
}

/// The reasons of the Events a finished unwind makes, in order.
fn reasons(done: &bnerd_engine::UnwindPlan) -> Vec<String> {
    unwound_events(done).into_iter().map(|e| e.reason).collect()
}

#[tokio::test]
async fn fake_two_links_share_one_customer_transit_and_the_last_takes_it_down() {
    let s = stage(fake_env_with(FakeCloud::new()).await).await;
    two_links_share_one_customer_transit(&s).await;
    s.teardown().await;
}

#[tokio::test]
async fn lab_two_links_share_one_customer_transit_and_the_last_takes_it_down() {
    let Some(env) = lab_env_for("lab_two_links_share_one_customer_transit").await else {
        return;
    };
    let s = stage(env).await;
    two_links_share_one_customer_transit(&s).await;
    s.teardown().await;
}

/// One crash point: a new link's reconcile (`delete`: false) or its unwind, stopped at call
/// `k`; a fresh engine converges; the invariants hold. Whether the run was stopped.
async fn crash_point(stage: &Stage, delete: bool, crash: std::sync::Arc<Crash>, at: &str) -> bool {
    crash_point_ended(stage, delete, crash, at).await.is_none()
}

/// [`crash_point`], saying how the run ended when it was not stopped.
async fn crash_point_ended(
    stage: &Stage,
    delete: bool,
    crash: std::sync::Arc<Crash>,
    at: &str,
) -> Option<Ended> {
    let (a, _) = stage.routers.clone();
    let mut link = per_customer_link(stage, &a, CIDR);
    let ended = if delete {
        converge(stage, &mut link, at).await;
        let done =
            bnerd_testkit::crash::run_until_crash(&crash, unwind_failing(stage, &link, &crash))
                .await;
        done.map(|d| Ended {
            done: d.is_ok(),
            retry: d.as_ref().err().map_or(Retry::Resync, unwind_retry),
        })
    } else {
        let out =
            bnerd_testkit::crash::run_until_crash(&crash, reconcile_with(stage, &link, &crash))
                .await;
        out.map(|out| {
            let ended = Ended {
                done: support::ready(&out.status),
                retry: out.retry,
            };
            link.status = Some(out.status);
            ended
        })
    };
    if !delete {
        converge(stage, &mut link, at).await;
        check_ready(stage, &[&link], at).await;
    }
    converge_delete(stage, &link, at).await;
    check_gone(stage, at).await;
    ended
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_every_crash_point_of_a_per_customer_link() {
    let s = stage(fake_env_with(FakeCloud::new()).await).await;
    let mut total = 0;
    for delete in [false, true] {
        for kind in Kind::ALL {
            for k in 0.. {
                let at = format!(
                    "{} stopped {kind:?} at call {k}",
                    if delete { "delete" } else { "create" }
                );
                if !crash_point(&s, delete, Crash::at(k, kind), &at).await {
                    break;
                }
                total += 1;
            }
        }
    }
    eprintln!("crash points of a PerCustomer link on the fake: {total}");
    report::count("crash_points.fake.per_customer", total);
    assert!(total > 20, "{total}");
    s.teardown().await;
}

/// A create stopped at every call, then the link deleted at once, never converged: whatever
/// the stopped run built (the customer transit, a share, a leg without its attach) goes, also
/// when the link's own side never got a leg (then with no call on the customer's credential).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_a_create_stopped_anywhere_then_deleted_leaves_nothing() {
    let s = stage(fake_env_with(FakeCloud::new()).await).await;
    let (a, _) = s.routers.clone();
    let mut covered = 0;
    for kind in Kind::ALL {
        for k in 0.. {
            let at = format!("create stopped {kind:?} at call {k}, then deleted");
            let link = per_customer_link(&s, &a, CIDR);
            let crash = Crash::at(k, kind);
            let out =
                bnerd_testkit::crash::run_until_crash(&crash, reconcile_with(&s, &link, &crash))
                    .await;
            let mut link = link;
            if let Some(out) = &out {
                link.status = Some(out.status.clone());
            }
            converge_delete(&s, &link, &at).await;
            check_gone(&s, &at).await;
            if out.is_some() {
                break;
            }
            covered += 1;
        }
    }
    eprintln!("PerCustomer creates stopped then deleted on the fake: {covered}");
    assert!(covered > 20, "{covered}");
    s.teardown().await;
}

/// A port the customer made on its customer transit stops the last link's teardown, named;
/// once it is gone, the unwind finishes.
#[tokio::test]
async fn fake_a_customer_port_stops_the_teardown_until_it_goes() {
    let s = stage(fake_env_with(FakeCloud::new()).await).await;
    let (a, _) = s.routers.clone();
    let mut link = per_customer_link(&s, &a, CIDR);
    converge(&s, &mut link, "create").await;
    let anet = transit_of(&link).network_id.expect("customer transit");
    let vm = s
        .leg_client()
        .create_port(&bnerd_cloud::CreatePort {
            network_id: anet.clone(),
            name: "customer-vm".into(),
            ..Default::default()
        })
        .await
        .expect("the customer makes a port on its customer transit");
    let err = unwind_with(&s, &link, &Crash::counting())
        .await
        .expect_err("the teardown stops");
    assert!(
        err.starts_with("Deleting:") && err.contains(&vm.id) && err.contains(&anet),
        "{err}"
    );
    s.leg_client()
        .delete_port(&vm.id)
        .await
        .expect("the customer removes it");
    converge_delete(&s, &link, "after the port went").await;
    check_gone(&s, "after the port went").await;
    s.teardown().await;
}

/// A port carrying a link's UID but not in the customer project is no leg (the ownership
/// rule): it does not keep the customer transit up for ever, it blocks the teardown, named.
/// Blocked by what the customer side holds, the link is held, and the abandon annotation
/// releases it, the customer transit left behind.
#[tokio::test]
async fn fake_a_foreign_marker_blocks_the_teardown_and_the_abandon_annotation_releases() {
    let s = stage(fake_env_with(FakeCloud::new()).await).await;
    let (a, _) = s.routers.clone();
    let mut link = per_customer_link(&s, &a, CIDR);
    converge(&s, &mut link, "create").await;
    let anet = transit_of(&link).network_id.expect("customer transit");
    // Made on the operator's credential: another project than the customer's.
    let forged = s
        .env
        .net
        .create_port(&bnerd_cloud::CreatePort {
            network_id: anet.clone(),
            name: "forged".into(),
            tags: vec![bnerd_api::names::tag_link_uid("another-links-uid")],
            ..Default::default()
        })
        .await
        .expect("a marked port of another project");
    let err = unwind_with(&s, &link, &Crash::counting())
        .await
        .expect_err("the teardown stops");
    assert!(err.contains(&forged.id) && err.contains(&anet), "{err}");
    assert_eq!(
        support::unwind_held(&s, &link).await,
        Some(false),
        "held, not released without the annotation"
    );
    link.metadata.annotations = Some(
        [(
            bnerd_api::names::ANNOTATION_ABANDON.to_string(),
            "true".to_string(),
        )]
        .into(),
    );
    assert_eq!(support::unwind_held(&s, &link).await, Some(true));
    s.env.net.delete_port(&forged.id).await.unwrap();
    converge_delete(&s, &link, "after the port went").await;
    check_gone(&s, "after the port went").await;
    s.teardown().await;
}

/// The pool's block skips a subnet already on the customer's router: Neutron would refuse
/// the leg's attach on an overlapping one.
#[tokio::test]
async fn fake_the_pool_skips_a_subnet_on_the_customers_router() {
    let s = stage(fake_env_with(FakeCloud::new()).await).await;
    let (a, _) = s.routers.clone();
    let net = s.leg_client();
    let own = net.create_network("customer-own").await.unwrap();
    let sub = net
        .create_subnet(&own.id, "10.255.128.0/28", "10.255.128.1")
        .await
        .unwrap();
    net.add_router_subnet(&a, &sub.id).await.unwrap();
    let mut link = per_customer_link(&s, &a, CIDR);
    converge(&s, &mut link, "create").await;
    let cidr = transit_of(&link).cidr;
    assert_eq!(cidr.as_deref(), Some("10.255.128.16/28"));
    converge_delete(&s, &link, "delete").await;
}

/// What `link`'s status records of its customer transit (nothing when it records none).
fn transit_of(link: &ClusterLink) -> bnerd_api::clusterlink::CustomerTransit {
    link.status
        .as_ref()
        .and_then(|st| st.customer_transit.clone())
        .unwrap_or_default()
}

fn gateway(name: &str, cidr: &str, hop: &str) -> bnerd_api::gateway::ReverseTarget {
    bnerd_api::gateway::ReverseTarget {
        gateway: bnerd_api::GatewayRef {
            kind: "IPsecGateway".into(),
            namespace: "vpn".into(),
            name: name.into(),
        },
        service_cidr: cidr.into(),
        port_fixed_ip: hop.into(),
        uid: None,
        created: None,
    }
}

/// A refused gateway is left out of the edge router's reverse routes and stops nothing
/// else: a new gateway still reaches the project, a gone one's route still leaves.
async fn a_refused_gateway_never_freezes_the_edge_router(env: Env) {
    let mut s = stage(env).await;
    let (a, _) = s.routers.clone();
    s.env
        .reverse
        .push(gateway("everything", "0.0.0.0/0", GW_PORT_IP));
    let mut link = per_customer_link(&s, &a, CIDR);
    // Not Ready (a gateway is refused), but every route of the path is in.
    let out = reconcile_with(&s, &link, &Crash::counting()).await;
    link.status = Some(out.status);
    let st = link.status.clone().unwrap();
    let route = st
        .conditions
        .iter()
        .find(|c| c.type_ == "RouteInstalled")
        .unwrap();
    assert_eq!(route.status, "True", "{:#?}", st.conditions);
    let edge = st
        .customer_transit
        .clone()
        .and_then(|c| c.edge_router_id)
        .unwrap();
    let c = st
        .conditions
        .iter()
        .find(|c| c.type_ == "ReverseRoutesInstalled")
        .unwrap();
    assert_eq!(c.status, "False", "{}", c.message);
    assert!(c.message.contains("vpn/everything"), "{}", c.message);
    let edge_routes = |s: &Stage| {
        let net = s.env.net.clone();
        let edge = edge.clone();
        async move {
            let mut r = net.get_router(&edge).await.unwrap().routes;
            r.retain(|r| r.nexthop.starts_with("10.254.0."));
            r.sort();
            r
        }
    };
    assert_eq!(
        edge_routes(&s).await,
        vec![Route::new(GW_SERVICE_CIDR, GW_PORT_IP)]
    );
    // A new gateway arrives and the first one goes, the refused one still there.
    let port = s.env.port_at_ip("10.254.0.251", "gateway-pod-2").await;
    s.env.reverse.retain(|t| t.gateway.name != "gw");
    s.env
        .reverse
        .push(gateway("gw2", "100.64.82.0/24", "10.254.0.251"));
    let out = reconcile_with(&s, &link, &Crash::counting()).await;
    link.status = Some(out.status);
    assert_eq!(
        edge_routes(&s).await,
        vec![Route::new("100.64.82.0/24", "10.254.0.251")],
        "the edge router follows the good gateways despite the refused one"
    );
    s.env.reverse.retain(|t| t.gateway.name != "everything");
    converge(&s, &mut link, "the refused gateway gone").await;
    converge_delete(&s, &link, "delete").await;
    s.env.net.delete_port(&port.id).await.unwrap();
    check_gone(&s, "delete").await;
    s.teardown().await;
}

fake_and_lab!(
    a_refused_gateway_never_freezes_the_edge_router,
    fake_a_refused_gateway_never_freezes_the_edge_router,
    lab_a_refused_gateway_never_freezes_the_edge_router
);

/// A router's routes, read on `net`.
async fn routes_on(net: &dyn bnerd_cloud::Neutron, id: &str) -> Vec<Route> {
    net.get_router(id).await.unwrap().routes
}

/// A `PerCustomer` link's own routes come before gateways' reverse routes: gateways fill the
/// edge router and a service router up to the route quota, then a link's edge route, and its
/// return route, each take the place of the newest gateway's reverse route on that router,
/// which is named as not fitting; the older gateways keep theirs.
async fn a_links_own_routes_take_the_newest_gateways_place(env: Env) {
    // The lab's router_route quota stays at Neutron's default (lab/openstack/README.md); the
    // fake's is lowered, to keep the scenario small.
    let quota = match &env.fake {
        Some(cloud) => {
            let _ = cloud.clone().max_routes(4);
            4
        }
        None => 30,
    };
    let mut s = stage(env).await;
    let (a, b) = s.routers.clone();
    // The stage's gateway is the oldest; one more per route the routers hold besides a link's
    // own, each newer than the one before.
    s.env.reverse[0].created = Some("2026-01-01T00:00:00Z".into());
    let mut ports = vec![];
    for i in 1..quota - 1 {
        let hop = format!("10.254.0.{}", 200 + i);
        ports.push(s.env.port_at_ip(&hop, &format!("gateway-pod-{i}")).await);
        let mut g = gateway(
            &format!("g{i:02}"),
            &format!("100.64.{}.0/24", 100 + i),
            &hop,
        );
        g.created = Some(format!("2026-01-01T00:{i:02}:00Z"));
        s.env.reverse.push(g);
    }
    let newest = s.env.reverse.last().cloned().unwrap();
    let newest_name = format!("vpn/{}", newest.gateway.name);
    let older: Vec<_> = s.env.reverse[..s.env.reverse.len() - 1].to_vec();
    let newest_on_edge = Route::new(&newest.service_cidr, &newest.port_fixed_ip);

    // The project's first link: its edge router and its router hold as many routes as they may.
    let mut one = per_customer_link(&s, &a, CIDR);
    converge(&s, &mut one, "the routers filled").await;
    let ct = one.status.clone().unwrap().customer_transit.unwrap();
    let edge = ct.edge_router_id.clone().unwrap();
    let gw = {
        let cidr: ipnet::Ipv4Net = ct.cidr.clone().unwrap().parse().unwrap();
        cidr.hosts().next().unwrap().to_string()
    };
    let full = routes_on(s.env.net.as_ref(), &edge).await;
    assert_eq!(full.len(), quota, "{full:?}");
    let full = routes_on(s.leg_client(), &a).await;
    assert_eq!(full.len(), quota, "{full:?}");

    // A second link of the project: its edge route takes the newest gateway's place there.
    let mut two = per_customer_link(&s, &b, CIDR_2);
    let out = reconcile_with(&s, &two, &Crash::counting()).await;
    two.status = Some(out.status.clone());
    let condition = |l: &ClusterLink, t: &str| {
        let c = l
            .status
            .as_ref()
            .unwrap()
            .conditions
            .iter()
            .find(|c| c.type_ == t)
            .cloned()
            .unwrap();
        (c.status, c.reason, c.message)
    };
    let (st, _, m) = condition(&two, "RouteInstalled");
    assert_eq!(st, "True", "{m}");
    let leg_two = two.status.clone().unwrap().transit_ip.unwrap();
    let routes = routes_on(s.env.net.as_ref(), &edge).await;
    assert!(routes.contains(&Route::new(CIDR_2, &leg_two)), "{routes:?}");
    assert!(!routes.contains(&newest_on_edge), "{routes:?}");
    for g in &older {
        let r = Route::new(&g.service_cidr, &g.port_fixed_ip);
        assert!(
            routes.contains(&r),
            "an older gateway's route stays: {r:?} in {routes:?}"
        );
    }
    assert_eq!(routes.len(), quota, "{routes:?}");
    let removed = told(&out, EventReason::RouteRemoved);
    assert!(
        removed.len() == 1
            && removed[0].contains(&newest_name)
            && removed[0].contains(&format!("edge router {edge}")),
        "{removed:?}"
    );
    let (st, reason, m) = condition(&two, "ReverseRoutesInstalled");
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "EnsureReverseRoutesFailed"),
        "{m}"
    );
    assert!(
        m.contains(&format!("{newest_name}: {}", newest.service_cidr)),
        "{m}"
    );
    assert!(m.contains("router_route"), "the quota named: {m}");

    // Its router: a route of the customer's own takes the place of the return route, which
    // then takes the newest gateway's place there.
    let back = Route::new(s.env.fabric.transit_subnet.to_string(), &gw);
    let leg_one = one.status.clone().unwrap().transit_ip.unwrap();
    let theirs = Route::new("192.168.77.0/24", &leg_one);
    let mut table = routes_on(s.leg_client(), &b).await;
    assert_eq!(table.len(), quota, "{table:?}");
    table.retain(|r| *r != back);
    table.push(theirs.clone());
    s.leg_client().set_routes(&b, &table, None).await.unwrap();
    let out = reconcile_with(&s, &two, &Crash::counting()).await;
    two.status = Some(out.status.clone());
    let (st, _, m) = condition(&two, "RouteInstalled");
    assert_eq!(st, "True", "{m}");
    let routes = routes_on(s.leg_client(), &b).await;
    assert!(
        routes.contains(&back) && routes.contains(&theirs),
        "{routes:?}"
    );
    assert!(
        !routes.contains(&Route::new(&newest.service_cidr, &gw)),
        "{routes:?}"
    );
    for g in &older {
        let r = Route::new(&g.service_cidr, &gw);
        assert!(
            routes.contains(&r),
            "an older gateway's route stays: {r:?} in {routes:?}"
        );
    }
    let removed = told(&out, EventReason::RouteRemoved);
    assert!(
        removed.len() == 1
            && removed[0].contains(&newest_name)
            && removed[0].contains(&format!("router {b}")),
        "{removed:?}"
    );
    let (st, reason, m) = condition(&two, "ReverseRoutesInstalled");
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "EnsureReverseRoutesFailed"),
        "{m}"
    );
    assert!(
        m.contains(&format!("{newest_name}: {}", newest.service_cidr)),
        "{m}"
    );
    let recorded = two.status.clone().unwrap().reverse_routes;
    assert_eq!(recorded.len(), older.len(), "{recorded:?}");
    assert!(recorded.iter().all(|r| r.gateway_ref != newest.gateway));

    // The first link keeps its own routes, and names the newest gateway too.
    let out = reconcile_with(&s, &one, &Crash::counting()).await;
    one.status = Some(out.status);
    assert_eq!(condition(&one, "RouteInstalled").0, "True");
    let (st, _, m) = condition(&one, "ReverseRoutesInstalled");
    assert_eq!(st, "False", "{m}");
    assert!(m.contains(&newest_name), "{m}");
    assert!(
        routes_on(s.env.net.as_ref(), &edge)
            .await
            .contains(&Route::new(CIDR, &leg_one))
    );

    // Nothing leaks: the customer's route goes by hand, then both links.
    let mut table = routes_on(s.leg_client(), &b).await;
    table.retain(|r| *r != theirs);
    s.leg_client().set_routes(&b, &table, None).await.unwrap();
    converge_delete(&s, &two, "delete the second").await;
    converge_delete(&s, &one, "delete the first").await;
    for p in ports {
        s.env.net.delete_port(&p.id).await.unwrap();
    }
    check_gone(&s, "delete").await;
    s.teardown().await;
}

fake_and_lab!(
    a_links_own_routes_take_the_newest_gateways_place,
    fake_a_links_own_routes_take_the_newest_gateways_place,
    lab_a_links_own_routes_take_the_newest_gateways_place
);

/// A project that still holds a share of the main transit network (an earlier `Shared` link's,
/// or one made by hand) is not isolated: the link says so, naming the rule, and needs the
/// attestation; once the share goes, the isolation is structural again.
async fn a_main_transit_share_undoes_the_isolation(env: Env) {
    let s = stage(env).await;
    let (a, _) = s.routers.clone();
    let project = s.side.as_ref().unwrap().project.clone();
    let mut link = per_customer_link(&s, &a, CIDR);
    converge(&s, &mut link, "create").await;
    let rule = s
        .env
        .net
        .create_rbac_policy(&bnerd_cloud::ShareNetwork {
            network_id: s.env.fabric.transit_network_id.clone(),
            action: ACCESS_AS_SHARED.into(),
            target_tenant: project.clone(),
        })
        .await
        .expect("the main transit shared by hand");
    let isolation = |l: &ClusterLink| {
        let c = l
            .status
            .as_ref()
            .unwrap()
            .conditions
            .iter()
            .find(|c| c.type_ == "TenantIsolationAttested")
            .cloned()
            .unwrap();
        (c.status, c.reason, c.message)
    };
    let out = reconcile_with(&s, &link, &Crash::counting()).await;
    link.status = Some(out.status.clone());
    let (st, reason, m) = isolation(&link);
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("False", "NotAttested"),
        "{m}"
    );
    assert!(
        m.starts_with("not isolated: ") && m.contains(&rule.id),
        "{m}"
    );
    assert!(!support::ready(&out.status));
    // Attested by a platform admin: True/Attested, still naming the share.
    let mut attested = link.clone();
    attested.metadata.annotations = Some(
        [(
            bnerd_api::names::ANNOTATION_API_ACCESS.to_string(),
            "none".to_string(),
        )]
        .into(),
    );
    let out = reconcile_with(&s, &attested, &Crash::counting()).await;
    attested.status = Some(out.status);
    let (st, reason, m) = isolation(&attested);
    assert_eq!((st.as_str(), reason.as_str()), ("True", "Attested"), "{m}");
    assert!(m.contains(&rule.id), "{m}");
    // The share goes: structural again.
    s.env.net.delete_rbac_policy(&rule.id).await.unwrap();
    converge(&s, &mut link, "share removed").await;
    let (st, reason, _) = isolation(&link);
    assert_eq!(
        (st.as_str(), reason.as_str()),
        ("True", "StructuralIsolation")
    );
    converge_delete(&s, &link, "delete").await;
    check_gone(&s, "delete").await;
    s.teardown().await;
}

fake_and_lab!(
    a_main_transit_share_undoes_the_isolation,
    fake_a_main_transit_share_undoes_the_isolation,
    lab_a_main_transit_share_undoes_the_isolation
);

/// A `PerCustomer` link moved to another router: the old router's way back to the transit
/// (via the edge router) goes with its leg, so Neutron lets the leg detach, and the link
/// converges on the new router.
async fn a_per_customer_link_moves_to_another_router(env: Env) {
    let s = stage(env).await;
    let (a, b) = s.routers.clone();
    let mut link = per_customer_link(&s, &a, CIDR);
    converge(&s, &mut link, "create").await;
    check_ready(&s, &[&link], "on router a").await;
    link.spec.service_cluster_router = b.clone();
    link.metadata.generation = Some(2);
    converge(&s, &mut link, "moved to router b").await;
    check_ready(&s, &[&link], "on router b").await;
    let left = s.leg_client().get_router(&a).await.unwrap().routes;
    assert!(left.is_empty(), "routes left on the old router: {left:?}");
    converge_delete(&s, &link, "delete").await;
    check_gone(&s, "delete").await;
    s.teardown().await;
}

fake_and_lab!(
    a_per_customer_link_moves_to_another_router,
    fake_a_per_customer_link_moves_to_another_router,
    lab_a_per_customer_link_moves_to_another_router
);

/// A `PerCustomer` leg deleted out of band and made again at another address (another port of
/// the customer's took the old one) is not `TransitIPMismatch`, as a `Shared` leg would be:
/// the customer transit is shared with this project only, and every route to the leg is the
/// operator's, so the edge router's route follows the new address and the link is Ready again.
async fn a_per_customer_leg_back_elsewhere_is_rerouted(env: Env) {
    let s = stage(env).await;
    let (a, _) = s.routers.clone();
    let mut link = per_customer_link(&s, &a, CIDR);
    converge(&s, &mut link, "create").await;
    check_ready(&s, &[&link], "created").await;
    let st = link.status.clone().unwrap_or_default();
    let (old_port, old_ip) = (st.leg_port_id.unwrap(), st.transit_ip.unwrap());
    let network = st.customer_transit.unwrap().network_id.unwrap();
    // Out of band: the customer router's routes via the edge router removed (Neutron refuses
    // to detach an interface a route needs), the leg detached (Neutron deletes the port), and
    // a port of the customer's at the address it held.
    let routes = s.leg_client().get_router(&a).await.unwrap().routes;
    s.leg_client()
        .remove_extraroutes(&a, &routes)
        .await
        .expect("remove the customer router's routes out of band");
    s.leg_client()
        .remove_router_interface(&a, &old_port)
        .await
        .expect("detach the leg out of band");
    let squatter = s
        .leg_client()
        .create_port(&bnerd_cloud::CreatePort {
            network_id: network.clone(),
            name: "squatter".into(),
            ..Default::default()
        })
        .await
        .expect("a port of the customer's on its customer transit");
    let squatter_ip = squatter.first_ip().unwrap().to_string();
    converge(&s, &mut link, "after the leg was lost").await;
    let st = link.status.clone().unwrap_or_default();
    let new_ip = st.transit_ip.clone().unwrap();
    assert_ne!(
        st.leg_port_id.as_deref(),
        Some(old_port.as_str()),
        "a new leg"
    );
    assert_ne!(new_ip, squatter_ip, "the leg is not the squatter");
    report::note(&format!(
        "PerCustomer leg lost at {old_ip}, the customer's port took {squatter_ip}, the leg came back at {new_ip}: the edge route follows it"
    ));
    let edge = st.customer_transit.unwrap().edge_router_id.unwrap();
    let routes = routes_on(s.env.net.as_ref(), &edge).await;
    assert!(
        routes
            .iter()
            .all(|r| r.nexthop != squatter_ip && r.nexthop != old_ip || old_ip == new_ip),
        "a route via the old address is left on the edge router: {routes:?}"
    );
    s.leg_client()
        .delete_port(&squatter.id)
        .await
        .expect("the customer's port goes");
    check_ready(&s, &[&link], "rerouted").await;
    converge_delete(&s, &link, "delete").await;
    check_gone(&s, "delete").await;
    s.teardown().await;
}

fake_and_lab!(
    a_per_customer_leg_back_elsewhere_is_rerouted,
    fake_a_per_customer_leg_back_elsewhere_is_rerouted,
    lab_a_per_customer_leg_back_elsewhere_is_rerouted
);

/// A deleting link whose Secret is gone is held (CredentialsUnavailable); the operator's
/// credential removes at once what it may (the gateway route, the edge router's route via the
/// leg), and the leg waits. With the Secret back, the unwind finishes and nothing is left.
#[tokio::test]
async fn fake_a_held_link_loses_its_operator_side_at_once() {
    let s = stage(fake_env_with(FakeCloud::new()).await).await;
    let (a, _) = s.routers.clone();
    let mut link = per_customer_link(&s, &a, CIDR);
    converge(&s, &mut link, "create").await;
    let st = link.status.clone().unwrap();
    let leg_ip = st.transit_ip.clone().unwrap();
    let edge = st
        .customer_transit
        .clone()
        .and_then(|c| c.edge_router_id)
        .unwrap();
    let side = s.side.as_ref().unwrap();
    side.secret_gone
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let held = unwind_with(&s, &link, &Crash::counting())
        .await
        .expect_err("held for the credential");
    assert!(held.starts_with("CredentialsUnavailable"), "{held}");
    assert!(
        s.env.gateway_routes().await.is_empty(),
        "the gateway route went first"
    );
    let routes = s.env.net.get_router(&edge).await.unwrap().routes;
    assert!(
        !routes.iter().any(|r| r.nexthop == leg_ip),
        "the edge router still routes via the leg: {routes:?}"
    );
    assert_eq!(
        support::own(
            &s.leg_client()
                .list_ports(&PortQuery::default())
                .await
                .unwrap(),
            link.metadata.uid.as_deref().unwrap()
        )
        .len(),
        1,
        "the leg waits for the credential"
    );
    side.secret_gone
        .store(false, std::sync::atomic::Ordering::Relaxed);
    converge_delete(&s, &link, "the Secret back").await;
    check_gone(&s, "the Secret back").await;
    s.teardown().await;
}

/// A building step's failure names the credential that failed it: the read of the subnets on
/// the customer's router (before a block is cut from the pool) is the customer's, every other
/// call of the customer transit the operator's.
#[tokio::test]
async fn fake_a_failed_read_of_the_customers_router_names_the_customer_credential() {
    let s = stage(fake_env_with(FakeCloud::new()).await).await;
    let (a, _) = s.routers.clone();
    let link = per_customer_link(&s, &a, CIDR);
    let counting = Crash::counting();
    let out = reconcile_with(&s, &link, &counting).await;
    assert!(support::ready(&out.status), "{:#?}", out.status.conditions);
    let mut built = link.clone();
    built.status = Some(out.status);
    converge_delete(&s, &built, "before the faults").await;
    // The calls after the network's create: the pool's subnets are read, then the customer's
    // router (its interface ports, on the customer's credential), then the operator's subnets.
    let log = counting.log();
    let created = log
        .iter()
        .position(|c| *c == "create_network")
        .expect("the network is made");
    let on_router = created
        + log[created..]
            .iter()
            .position(|c| *c == "list_ports")
            .expect("the customer's router is read");
    let operators = on_router + 1;
    assert_eq!(log[operators], "list_subnets", "{log:?}");
    for (k, who) in [
        (
            on_router,
            format!("customer credential (secret {}/", support::NS),
        ),
        (operators, "operator credential: ".to_string()),
    ] {
        let out = reconcile_with(&s, &link, &Crash::fail_at(k, api(503, ""), false)).await;
        let shared = out
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "TransitNetworkShared")
            .expect("TransitNetworkShared");
        assert_eq!(
            (shared.status.as_str(), shared.reason.as_str()),
            ("False", "EnsureNetworkSharedFailed"),
            "call {k}: {}",
            shared.message
        );
        assert!(
            shared.message.starts_with(&who),
            "call {k} ({}): {}",
            log[k],
            shared.message
        );
        let mut failed = link.clone();
        failed.status = Some(out.status.clone());
        converge_delete(&s, &failed, "after the fault").await;
    }
    check_gone(&s, "after the faults").await;
    s.teardown().await;
}

/// `spec.transitIP` names an address on the main transit, where a `PerCustomer` link has no
/// leg: set on a built link it is refused before any cloud call (Validated=False/InvalidSpec),
/// and the leg and the routes stay as they were; removed again, the link is Ready.
#[tokio::test]
async fn fake_a_pinned_transit_ip_is_refused_and_the_leg_stays() {
    let s = stage(fake_env_with(FakeCloud::new()).await).await;
    let (a, _) = s.routers.clone();
    let mut link = per_customer_link(&s, &a, CIDR);
    converge(&s, &mut link, "create").await;
    let before = fabric_of(&s).await;
    let gateway = s.env.gateway_routes().await;
    link.spec.transit_ip = Some(
        s.env
            .fabric
            .transit_subnet
            .hosts()
            .last()
            .expect("a host")
            .to_string(),
    );
    let counting = Crash::counting();
    let out = reconcile_with(&s, &link, &counting).await;
    let validated = out
        .status
        .conditions
        .iter()
        .find(|c| c.type_ == "Validated")
        .expect("Validated");
    assert_eq!(
        (validated.status.as_str(), validated.reason.as_str()),
        ("False", "InvalidSpec"),
        "{}",
        validated.message
    );
    assert!(
        validated.message.contains("spec.transitIP"),
        "{}",
        validated.message
    );
    assert!(out.actions.is_empty(), "{:?}", out.actions);
    link.status = Some(out.status);
    link.spec.transit_ip = None;
    check_ready(&s, &[&link], "refused, the leg stays").await;
    assert_eq!(s.env.gateway_routes().await, gateway);
    assert_eq!(fabric_of(&s).await.edge_legs, before.edge_legs);
    converge(&s, &mut link, "unpinned").await;
    check_ready(&s, &[&link], "unpinned").await;
    converge_delete(&s, &link, "delete").await;
    check_gone(&s, "delete").await;
    s.teardown().await;
}

fn api(status: u16, kind: &str) -> bnerd_cloud::CloudError {
    bnerd_cloud::CloudError::Api {
        method: "PUT".into(),
        path: "/injected".into(),
        status,
        kind: kind.into(),
        message: "injected".into(),
    }
}

/// Every fault at every call of a project's first link's create and of its delete: the run
/// fails there (or commits and loses the answer), a fresh engine converges, and nothing of the
/// customer transit is left after the delete. The faults of `faults.rs`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_each_fault_at_each_call_of_a_per_customer_link() {
    let s = stage(fake_env_with(FakeCloud::new()).await).await;
    let faults = [
        ("500", api(500, "InternalServerError"), false),
        ("503", api(503, "ServiceUnavailable"), false),
        ("429", api(429, "OverLimit"), false),
        (
            "timeout after commit",
            bnerd_cloud::CloudError::Timeout {
                method: "PUT".into(),
                path: "/injected".into(),
            },
            true,
        ),
        ("409 concurrent writer", api(409, "Conflict"), false),
    ];
    let mut covered = 0;
    for delete in [false, true] {
        let what = if delete { "delete" } else { "create" };
        let counting = Crash::counting();
        crash_point(&s, delete, counting.clone(), "unfaulted").await;
        let calls = counting.calls();
        // Runs a retryable fault left failed: what the retry check below looked at.
        let mut checked = 0;
        for (name, error, commit) in &faults {
            for k in 0..calls {
                let at = format!("{what} {name} at call {k}");
                let crash = Crash::fail_at(k, error.clone(), *commit);
                let ended = crash_point_ended(&s, delete, crash, &at).await;
                // Weather is retried soon (backoff, or the fixed 15 s of a credential step),
                // never left to the resync interval; an unwind says so by its failure's
                // `retryable` (support::unwind_retry).
                if let Some(e) = ended.filter(|e| !e.done && error.is_retryable()) {
                    assert_ne!(
                        e.retry,
                        Retry::Resync,
                        "{at}: a retryable fault waits for the resync interval"
                    );
                    checked += 1;
                }
                covered += 1;
            }
        }
        assert!(
            checked > 0,
            "{what}: no retryable fault left a run failed, so no retry was checked"
        );
    }
    eprintln!("faults at every call of a PerCustomer link on the fake: {covered}");
    report::count("faults.per_customer", covered);
    s.teardown().await;
}

/// How many calls a project's first link's create and its delete make, counted on the fake
/// (which answers as the lab does, docs/performance.md "A `PerCustomer` link"): the lab's
/// points are drawn among them without a lab run to count.
async fn calls_on_the_fake() -> [usize; 2] {
    let s = stage(fake_env_with(FakeCloud::new()).await).await;
    let mut calls = [0; 2];
    for (n, delete) in calls.iter_mut().zip([false, true]) {
        let counting = Crash::counting();
        crash_point(&s, delete, counting.clone(), "uncrashed").await;
        *n = counting.calls();
    }
    s.teardown().await;
    calls
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lab_sampled_crash_points_of_a_per_customer_link() {
    let calls = calls_on_the_fake().await;
    // The space counts whether or not a lab runs (as crash_points.rs counts its own): every
    // call of the create and of the delete, both kinds of stop. Its size is a figure of
    // docs/performance.md.
    report::count(
        "crash_points.lab_space.per_customer",
        calls.iter().sum::<usize>() * Kind::ALL.len(),
    );
    let Some(env) = lab_env_for("lab_sampled_crash_points_of_a_per_customer_link").await else {
        return;
    };
    let s = stage(env).await;
    let seed = std::env::var("BNERD_CRASH_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1)
        });
    eprintln!("per-customer lab crash sample: BNERD_CRASH_SEED={seed}");
    let mut sample = Sample::new(seed);
    let mut covered = 0;
    for (delete, calls) in [false, true].into_iter().zip(calls) {
        // A few points among the calls the fake counted.
        for k in sample.distinct(2, calls) {
            let kind = Kind::ALL[(sample.draw() % 2) as usize];
            let what = if delete { "delete" } else { "create" };
            let at = format!("lab {what} stopped {kind:?} at call {k} of {calls}");
            assert!(
                crash_point(&s, delete, Crash::at(k, kind), &at).await,
                "{at}: the lab made fewer calls than the fake; the fake no longer answers as the lab does"
            );
            covered += 1;
        }
    }
    report::count("crash_points.lab.per_customer", covered);
    s.teardown().await;
}

/// A customer transit carries router interfaces only, so its subnet is made without DHCP: on
/// ML2/OVN the network's metadata port stays without an address there (the parity table holds
/// the real ML2/OVN answering so), and a /29 keeps every address but the edge router's for
/// legs.
#[tokio::test]
async fn fake_a_customer_transit_has_no_dhcp_and_ml2_ovn_gives_its_metadata_port_no_address() {
    let s = stage(fake_env_with(FakeCloud::new().ml2_ovn(true)).await).await;
    let (a, _) = s.routers.clone();
    let mut link = per_customer_link(&s, &a, CIDR);
    converge(&s, &mut link, "create").await;
    let anet = transit_of(&link)
        .network_id
        .expect("status.customerTransit.networkID");
    let ports = s
        .env
        .net
        .list_ports(&PortQuery {
            network_id: Some(anet.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    let metadata: Vec<_> = ports
        .iter()
        .filter(|p| bnerd_testkit::is_neutron_owned(p))
        .collect();
    assert_eq!(metadata.len(), 1, "ML2/OVN's metadata port: {ports:?}");
    assert!(metadata[0].fixed_ips.is_empty(), "{:?}", metadata[0]);
    // Every other port there is the edge router's interface or the link's leg.
    let gateway = transit_of(&link)
        .cidr
        .and_then(|c| c.parse::<ipnet::Ipv4Net>().ok())
        .and_then(|c| c.hosts().next())
        .map(|a| a.to_string());
    let leg = link.status.as_ref().and_then(|st| st.transit_ip.clone());
    let mut addresses: Vec<String> = ports
        .iter()
        .filter_map(|p| p.first_ip().map(str::to_string))
        .collect();
    addresses.sort();
    let mut want: Vec<String> = gateway.into_iter().chain(leg).collect();
    want.sort();
    assert_eq!(addresses, want, "{ports:?}");
    converge_delete(&s, &link, "delete").await;
}
