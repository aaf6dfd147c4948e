//! Estate scale (docs/performance.md, "Estate scale"): the call budgets of the batched resync and
//! of a gateway change, asserted (the `estate` bench prints the same at 1000 links), and 50 links
//! applied at once on one transit subnet of the real lab, then deleted at once.

use std::collections::BTreeSet;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bnerd_api::gateway::ReverseTarget;
use bnerd_api::names::tag_link_uid;
use bnerd_api::{ClusterLink, GatewayRef};
use bnerd_cloud::fabric::CustomerTransitPool;
use bnerd_cloud::{Neutron, OpenStack, PortQuery, Route};
use bnerd_cloud_fake::{FakeCloud, Op};
use bnerd_engine::ResyncPath;
use bnerd_engine::resync::{Resynced, Snapshots, resync_from};
use bnerd_testkit::customers::{per_customer_links, reconcile_each};
use bnerd_testkit::report;
use bnerd_testkit::{
    Env, env_on, fake_env_with, lab_client, lab_or_skip, reconcile_one, reconcile_same_tenant,
    spec, unwind_same_tenant,
};
use bnerd_testkit::{link_input, peers_of};
use futures::{FutureExt, StreamExt, stream};

fn target(g: usize) -> ReverseTarget {
    ReverseTarget {
        gateway: GatewayRef {
            kind: "IPsecGateway".into(),
            namespace: "vpn".into(),
            name: format!("gw{g}"),
        },
        service_cidr: format!("100.64.{g}.0/24"),
        port_fixed_ip: format!("10.254.0.{}", 240 + g),
        uid: None,
        created: None,
    }
}

fn ready(l: &ClusterLink) -> bool {
    l.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

/// Every link through the batched path, as the controller resyncs a converged estate.
/// Returns how many fell back to the per-link path.
async fn resync_all(env: &mut Env, snaps: &Snapshots, targets: &[ReverseTarget]) -> usize {
    let all: Vec<Arc<ClusterLink>> = env.links.iter().cloned().map(Arc::new).collect();
    let ids: Vec<String> = env
        .links
        .iter()
        .filter_map(|l| l.status.as_ref()?.service_router_id.clone())
        .collect();
    let mut fell = 0;
    for i in 0..env.links.len() {
        let snap = snaps
            .get(env.net.as_ref(), &env.fabric, || ids.clone())
            .await
            .expect("snapshot");
        let l = env.links[i].clone();
        let status = l.status.clone().unwrap_or_default();
        let peers = peers_of(&l, &all);
        let input = link_input(&l, &status, &peers, targets).unwrap();
        let status = match resync_from(&snap, env.net.as_ref(), &env.fabric, None, &input).await {
            Resynced::Done { outcome, .. } => outcome.status,
            Resynced::PerLink(_) => {
                fell += 1;
                let peers = peers_of(&l, &all);
                let input = link_input(&l, &status, &peers, targets).unwrap();
                reconcile_same_tenant(env.net.as_ref(), &env.fabric, &input)
                    .await
                    .status
            }
        };
        env.links[i].status = Some(status);
    }
    fell
}

/// The estate's call budgets (docs/performance.md, "Call budgets (asserted by tests)") on the fake
/// (whose call counts the parity table holds to the lab's): a converged estate's resync reads at
/// most once per 50 links and writes nothing; a gateway change writes once per router whose route
/// set changed and reads at most once per link; a changed link still converges on its own at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_resync_and_gateway_change_budgets() {
    const N: usize = 200;
    let cloud = FakeCloud::new().max_routes(N + 10);
    let mut env = fake_env_with(cloud.clone()).await;
    // The gateways' own ports hold their portFixedIPs (a next hop must be a gateway port).
    for g in 0..4 {
        env.port_at_ip(
            &format!("10.254.0.{}", 240 + g),
            &format!("gateway-pod-{g}"),
        )
        .await;
    }
    let targets: Vec<ReverseTarget> = (0..3).map(target).collect();
    for i in 0..N {
        let r = env.router(&format!("svc{i}")).await;
        env.add_link(
            &format!("l{i}"),
            spec(
                &r.id,
                &format!("10.{}.{}.0/24", 100 + i / 200, i % 200),
                None,
            ),
        );
    }
    // A /24 holds 251 legs: this estate fits.
    env.reverse = targets.clone();
    for i in 0..N {
        let name = format!("l{i}");
        env.reconcile(&name).await;
        env.assert_ready(&name);
    }

    // One set of windows, as the controller keeps: the first reads every service router's
    // ports once (for the subnets each is connected to); later windows only those of routers
    // whose revision moved.
    let snaps = Snapshots::new(Duration::from_secs(30));
    cloud.reset_counters();
    assert_eq!(resync_all(&mut env, &snaps, &targets).await, 0);
    let (reads, writes) = cloud.read_write_counts();
    assert_eq!(writes, 0, "a converged estate's resync writes nothing");
    let chunks = N.div_ceil(bnerd_engine::resync::ROUTER_IDS_PER_CALL) as u64;
    assert_eq!(reads, 1 + 2 * chunks, "the first window");
    snaps.invalidate().await;
    cloud.reset_counters();
    let fell = resync_all(&mut env, &snaps, &targets).await;
    let (reads, writes) = cloud.read_write_counts();
    assert_eq!(fell, 0);
    assert_eq!(writes, 0, "a converged estate's resync writes nothing");
    assert!(
        reads * 50 <= N as u64,
        "{reads} reads for {N} links: more than one per 50"
    );
    assert!(env.links.iter().all(ready));

    // A fourth gateway gains reverse exposures: one route on every service router.
    let targets: Vec<ReverseTarget> = (0..4).map(target).collect();
    env.reverse = targets.clone();
    snaps.invalidate().await;
    cloud.reset_counters();
    let fell = resync_all(&mut env, &snaps, &targets).await;
    let (reads, writes) = cloud.read_write_counts();
    assert_eq!(fell, 0);
    assert_eq!(writes, N as u64, "writes = routers whose route set changed");
    assert!(reads <= N as u64, "{reads} reads > {N} links");
    for l in &env.links {
        assert_eq!(l.status.as_ref().unwrap().reverse_routes.len(), 4);
    }

    // Drift: a leg's tags stripped by hand. Its link falls back to the per-link path, which
    // repairs it; every other link stays on the snapshot.
    let leg = env.leg_port_id("l5");
    env.net.set_port_tags(&leg, &[]).await.unwrap();
    snaps.invalidate().await;
    cloud.reset_counters();
    let fell = resync_all(&mut env, &snaps, &targets).await;
    assert_eq!(fell, 1);
    let port = env.net.get_port(&leg).await.unwrap();
    let uid = env.link("l5").metadata.uid.clone().unwrap();
    assert!(port.has_tag(&tag_link_uid(&uid)), "tags not repaired");

    // One link's CIDR changes: its own reconcile moves the route at once (no snapshot).
    env.links[9].spec.service_cluster_cidr = "10.250.0.0/24".into();
    env.links[9].metadata.generation = Some(2);
    cloud.reset_counters();
    env.reconcile("l9").await;
    env.assert_ready("l9");
    let (reads, writes) = cloud.read_write_counts();
    // The transit's ports, the routers, the service router's ports (its subnets: the
    // transit's alone here, no read).
    assert!(reads <= 3, "changed link: {reads} reads");
    assert_eq!(writes, 2, "changed link: remove the old route, add the new");
}

/// The scale project's credential.
fn scale_client(env: &std::collections::BTreeMap<String, String>) -> OpenStack {
    lab_client(&bnerd_testkit::lab_scale_env(env), "SCALE")
}

const LINKS: usize = 50;

/// 50 links applied at once on one transit subnet get 50 distinct
/// addresses and 50 routes on the gateway router, nothing lost or leaked; a batched resync
/// of them costs 2 reads; all 50 deleted at once leave the router's route table and the
/// transit network as they were. Runs in the lab's `scale` project, whose router_route quota
/// up.sh raises (the operator project keeps Neutron's default 30).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_links_at_once_on_the_lab() {
    let Some(lab) = lab_or_skip("fifty_links_at_once_on_the_lab") else {
        return;
    };
    let client = Arc::new(scale_client(&lab));
    let env = env_on(client.clone()).await;
    let routers = stream::iter(0..LINKS)
        .map(|i| {
            let net = env.net.clone();
            async move {
                net.create_router(&bnerd_testkit::unique(&format!("scale{i}")))
                    .await
                    .expect("router")
            }
        })
        .buffered(8)
        .collect::<Vec<_>>()
        .await;
    let router_ids: Vec<String> = routers.iter().map(|r| r.id.clone()).collect();
    let net = env.net.clone();
    let fabric = env.fabric.clone();
    let body = AssertUnwindSafe(fifty(env, client.clone(), router_ids.clone()));
    let result = body.catch_unwind().await;
    // The test's fabric goes whatever happened: the lab stays up between runs.
    teardown(net.as_ref(), &fabric, &router_ids).await;
    if let Err(p) = result {
        std::panic::resume_unwind(p);
    }
}

async fn fifty(mut env: Env, client: Arc<OpenStack>, routers: Vec<String>) {
    let first_routes = env.gateway_routes().await;
    let first_ports: BTreeSet<String> = env.ports().await.into_iter().map(|p| p.id).collect();
    for (i, r) in routers.iter().enumerate() {
        env.add_link(
            &format!("c{i}"),
            spec(r, &format!("10.{}.0.0/16", 100 + i), None),
        );
    }

    // Applied at once: every link's reconcile starts together, each seeing the others as the
    // informer cache does (claims appear as their status is written); links still not Ready
    // go again, as the controller requeues them.
    let links = Arc::new(std::sync::Mutex::new(env.links.clone()));
    let started = Instant::now();
    let mut rounds = 0;
    loop {
        rounds += 1;
        let todo: Vec<usize> = (0..LINKS)
            .filter(|i| !ready(&links.lock().unwrap()[*i]))
            .collect();
        if todo.is_empty() || rounds > 4 {
            break;
        }
        if rounds > 1 {
            // Why a link needed another round (a retryable failure, as the controller's
            // backoff would see it).
            for i in &todo {
                let l = &links.lock().unwrap()[*i];
                let why: Vec<String> = l
                    .status
                    .iter()
                    .flat_map(|s| &s.conditions)
                    .filter(|c| c.status != "True" && c.type_ != "Ready")
                    .map(|c| format!("{} {}: {}", c.type_, c.reason, c.message))
                    .collect();
                eprintln!("round {rounds}: {:?} again: {why:?}", l.metadata.name);
            }
        }
        stream::iter(todo)
            .map(|i| {
                let links = links.clone();
                let net = env.net.clone();
                let fabric = env.fabric.clone();
                async move {
                    let now = links.lock().unwrap().clone();
                    let out = reconcile_one(net.as_ref(), &fabric, &now, i, &[]).await;
                    links.lock().unwrap()[i].status = Some(out.status);
                }
            })
            .buffer_unordered(LINKS)
            .collect::<Vec<()>>()
            .await;
    }
    env.links = links.lock().unwrap().clone();
    let converge = started.elapsed();
    let rounds = rounds - 1;
    let (converge_reads, converge_writes) = client.call_counts();
    for l in &env.links {
        assert!(ready(l), "{:?} not Ready: {:?}", l.metadata.name, l.status);
    }

    // 50 distinct addresses, 50 routes, each via the leg of its own link.
    let ips: BTreeSet<String> = env
        .links
        .iter()
        .map(|l| l.status.as_ref().unwrap().transit_ip.clone().unwrap())
        .collect();
    assert_eq!(ips.len(), LINKS, "addresses not distinct: {ips:?}");
    assert!(!ips.contains("10.254.0.1") && !ips.contains("10.254.0.2"));
    let want: BTreeSet<Route> = env
        .links
        .iter()
        .map(|l| {
            let s = l.status.as_ref().unwrap();
            Route::new(
                &l.spec.service_cluster_cidr,
                s.transit_ip.as_deref().unwrap(),
            )
        })
        .chain(first_routes.iter().cloned())
        .collect();
    let got: BTreeSet<Route> = env.gateway_routes().await.into_iter().collect();
    assert_eq!(got, want, "gateway router routes");
    // Nothing leaked: the transit network holds its first ports and one leg per link, each
    // tagged with its link's UID and attached to its link's router.
    let ports = env.ports().await;
    assert_eq!(ports.len(), first_ports.len() + LINKS, "ports: {ports:?}");
    for l in &env.links {
        let s = l.status.as_ref().unwrap();
        let uid = l.metadata.uid.clone().unwrap();
        let leg = ports
            .iter()
            .find(|p| Some(&p.id) == s.leg_port_id.as_ref())
            .expect("leg port");
        assert!(leg.has_tag(&tag_link_uid(&uid)));
        assert!(leg.is_interface_of(s.service_router_id.as_deref().unwrap()));
    }

    // The batched resync of the converged 50: one port list, one router list, and in the
    // first window one list of the service routers' ports (the later windows keep them while
    // no router's revision moves).
    let snaps = Snapshots::new(Duration::from_secs(30));
    let (r0, w0) = client.call_counts();
    assert_eq!(resync_all(&mut env, &snaps, &[]).await, 0);
    let (r1, w1) = client.call_counts();
    assert_eq!((r1 - r0, w1 - w0), (3, 0), "first window of {LINKS} links");
    snaps.invalidate().await;
    let (r0, w0) = client.call_counts();
    let started = Instant::now();
    let fell = resync_all(&mut env, &snaps, &[]).await;
    let resync = started.elapsed();
    let (r1, w1) = client.call_counts();
    assert_eq!(fell, 0);
    assert_eq!(
        (r1 - r0, w1 - w0),
        (2, 0),
        "batched resync of {LINKS} links"
    );

    // All 50 deleted at once; a retryable failure (a timeout on a loaded lab) goes again, as
    // the controller's backoff would retry it.
    let started = Instant::now();
    let net = env.net.clone();
    let fabric = env.fabric.clone();
    let mut left = env.links.clone();
    for round in 1..=4 {
        let failed: Vec<(ClusterLink, String)> = stream::iter(left.clone())
            .map(|l| {
                let net = net.clone();
                let fabric = fabric.clone();
                async move {
                    let status = l.status.clone().unwrap_or_default();
                    let input = link_input(&l, &status, &[], &[]).unwrap();
                    match unwind_same_tenant(net.as_ref(), &fabric, &input, &[]).await {
                        Ok(_) => None,
                        Err(f) if f.retryable => Some((l.clone(), f.message)),
                        Err(f) => panic!("unwind {:?}: {f:?}", l.metadata.name),
                    }
                }
            })
            .buffer_unordered(LINKS)
            .filter_map(std::future::ready)
            .collect()
            .await;
        for (l, why) in &failed {
            eprintln!("delete round {round}: {:?} again: {why}", l.metadata.name);
        }
        left = failed.into_iter().map(|(l, _)| l).collect();
        if left.is_empty() {
            break;
        }
    }
    assert!(left.is_empty(), "{} links not unwound", left.len());
    let delete = started.elapsed();
    assert_eq!(env.gateway_routes().await, first_routes);
    let now: BTreeSet<String> = env.ports().await.into_iter().map(|p| p.id).collect();
    assert_eq!(
        now, first_ports,
        "transit network not back to its first state"
    );
    println!(
        "lab, {LINKS} links at once: converged in {converge:?} ({rounds} round(s), {converge_reads} reads and {converge_writes} writes incl. the test's fixtures and lost address races), batched resync {resync:?} (2 reads), deleted in {delete:?}"
    );
}

async fn teardown(net: &dyn Neutron, fabric: &bnerd_cloud::fabric::Fabric, routers: &[String]) {
    // Whatever a failed run left: legs first (detach deletes them), then routes, routers,
    // the gateway router's own leg and the network.
    let ports = net
        .list_ports(&PortQuery {
            network_id: Some(fabric.transit_network_id.clone()),
            ..Default::default()
        })
        .await
        .unwrap_or_default();
    for r in routers.iter().chain([&fabric.gateway_router_id]) {
        let _ = net.set_routes(r, &[], None).await;
    }
    for p in &ports {
        if p.is_router_interface() {
            let _ = net.remove_router_interface(&p.device_id, &p.id).await;
        } else {
            let _ = net.delete_port(&p.id).await;
        }
    }
    for r in routers.iter().chain([&fabric.gateway_router_id]) {
        let _ = net.delete_router(r).await;
    }
    let _ = net.delete_network(&fabric.transit_network_id).await;
}

/// `PerCustomer` links take part in the batched resync: each runs its ordinary steps with the
/// operator's side answered by the window's snapshot (the transit's ports, the gateway router)
/// and, for what it does not hold, by one read a window of each request (the first link of a
/// project reads its customer transit, edge router and share for the others), while the
/// customer's side is read with the link's own credential, as a live reconcile reads it. A
/// converged estate writes nothing; an edge route removed by hand is replayed from the window;
/// a route missing on a customer's router goes to the per-link path, which repairs it with
/// that credential.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_customer_links_resync_beside_the_snapshot() {
    const PROJECTS: usize = 10;
    const PER_PROJECT: usize = 5;
    const N: usize = PROJECTS * PER_PROJECT;
    let cloud = FakeCloud::new().max_routes(N + 10);
    let mut env = fake_env_with(cloud.clone()).await;
    env.fabric.customer_transit = Some(CustomerTransitPool {
        pool: "10.255.0.0/16".parse().unwrap(),
        prefix_len: 28,
    });
    env.port_at_ip("10.254.0.240", "gateway-pod-0").await;
    let targets = vec![target(0)];
    let (mut links, source) = per_customer_links(&cloud, PROJECTS, PER_PROJECT).await;
    let (net, fabric) = (env.net.as_ref(), &env.fabric);
    reconcile_each(net, fabric, &source, &mut links, &targets, None).await;
    for l in &links {
        let s = l.status.as_ref().unwrap();
        assert!(
            ready(l),
            "{}: {:#?}",
            l.metadata.name.as_deref().unwrap(),
            s.conditions
        );
    }

    // The per-link resync of one converged link, for comparison.
    cloud.reset_counters();
    reconcile_each(net, fabric, &source, &mut links[..1], &targets, None).await;
    let (per_link, w) = cloud.read_write_counts();
    assert_eq!(w, 0);
    let per_link_calls = cloud.calls();

    // A window: every link resynced beside one snapshot, nothing written. The first window
    // also reads each customer router's interfaces (and the subnet of the one on the customer
    // transit); later ones only where a router's revision moved.
    let before: Vec<_> = links.iter().map(|l| l.status.clone()).collect();
    let snaps = Snapshots::new(Duration::from_secs(30));
    cloud.reset_counters();
    reconcile_each(net, fabric, &source, &mut links, &targets, Some(&snaps)).await;
    let (first, _) = cloud.read_write_counts();
    snaps.invalidate().await;
    cloud.reset_counters();
    let paths = reconcile_each(net, fabric, &source, &mut links, &targets, Some(&snaps)).await;
    let (reads, writes) = cloud.read_write_counts();
    let calls = cloud.calls();
    assert!(
        paths.iter().all(|p| *p == Some(ResyncPath::Snapshot)),
        "{paths:?}"
    );
    assert_eq!(writes, 0, "a converged estate's resync writes nothing");
    let now: Vec<_> = links.iter().map(|l| l.status.clone()).collect();
    assert_eq!(now, before, "the snapshot decides as the per-link path did");
    report::note(&format!(
        "PerCustomer resync: {N} links in {PROJECTS} projects: batched {reads} reads ({:.1} a link; first window {first}) \
         against {per_link} a link on the per-link path ({per_link_calls:?}); calls {calls:?}",
        reads as f64 / N as f64
    ));
    // Customer side, each link with its own credential: its router (the credential proves
    // itself) and whether its project sees the main transit. Operator side: the snapshot's
    // two reads, then six for every project's customer transit at once (the operator
    // project's networks and routers; the customer transits' subnets, ports and shares, the
    // edge routers' ports), none a project.
    assert_eq!(
        reads,
        2 + 6 + (N * 2) as u64,
        "{reads} reads for {N} links in {PROJECTS} projects: {calls:?}"
    );
    for (op, n) in [
        (Op::ListNetworks, 1),
        (Op::ListSubnets, 1),
        (Op::ListRbacPolicies, 1),
        (Op::ListRouters, 2),
        (Op::ListPorts, 3),
    ] {
        assert_eq!(calls.get(&op).copied().unwrap_or(0), n, "{op:?}: {calls:?}");
    }
    assert_eq!(
        first,
        reads + (N + PROJECTS) as u64,
        "the first window: + each router's interfaces, each customer transit's subnet"
    );
    assert!(
        reads * 4 <= per_link * N as u64,
        "{reads} reads: more than a quarter of the per-link path's {}",
        per_link * N as u64
    );

    // Drift on each side. An edge route (the operator's) removed by hand is replayed from
    // the window; a return route on a customer's router sends that link to the per-link
    // path, which restores it with the link's credential. Every other link costs nothing.
    let status = |i: usize| links[i].status.clone().unwrap();
    let (edge_link, customer_link) = (16, 37);
    let edge = status(edge_link)
        .customer_transit
        .unwrap()
        .edge_router_id
        .unwrap();
    let edge_route = Route::new(
        &links[edge_link].spec.service_cluster_cidr,
        status(edge_link).transit_ip.as_deref().unwrap(),
    );
    net.remove_extraroutes(&edge, std::slice::from_ref(&edge_route))
        .await
        .unwrap();
    let router = links[customer_link].spec.service_cluster_router.clone();
    let (id, secret) = source.of(links[customer_link].metadata.name.as_deref().unwrap());
    let customer = cloud.client_with_app_cred(id, secret);
    let back: Vec<Route> = customer
        .get_router(&router)
        .await
        .unwrap()
        .routes
        .into_iter()
        .filter(|r| r.destination == fabric.transit_subnet.to_string())
        .collect();
    assert_eq!(back.len(), 1, "the customer router's return route");
    customer.remove_extraroutes(&router, &back).await.unwrap();
    snaps.invalidate().await;
    let paths = reconcile_each(net, fabric, &source, &mut links, &targets, Some(&snaps)).await;
    for (i, p) in paths.iter().enumerate() {
        match i {
            _ if i == edge_link => assert_eq!(*p, Some(ResyncPath::Replayed(1)), "edge route"),
            _ if i == customer_link => assert!(
                matches!(p, Some(ResyncPath::PerLink(why)) if why.contains("customer's credential")),
                "return route: {p:?}"
            ),
            _ => assert_eq!(*p, Some(ResyncPath::Snapshot), "link {i}"),
        }
    }
    assert!(
        net.get_router(&edge)
            .await
            .unwrap()
            .routes
            .contains(&edge_route)
    );
    let routes = customer.get_router(&router).await.unwrap().routes;
    assert!(
        routes.contains(&back[0]),
        "return route restored: {routes:?}"
    );
    assert!(links.iter().all(ready));
}
