//! Estate scale (docs/performance.md, "Estate scale"): 1000 ClusterLinks and 1000 gateway objects,
//! 25 of them with reverse exposures, on the fake cloud. Prints a table: time, OpenStack reads and
//! writes for the first convergence, a full resync per link (the old way) and batched from a resync
//! snapshot, one gateway change, one changed link, out-of-band drift, and the bench process's
//! memory. The ClusterLink side is driven as the controller drives it (peers from the link cache,
//! status kept as the status patch would, converged links through the snapshot); the apiserver's
//! gateway watch is stood in for by feeding the same watch events to the same tracker and index the
//! controller uses. There is no apiserver and no controller loop here, so apiserver LISTs and idle
//! CPU are not measured here: `tests/estate_binary.rs` counts both on the real binary (the LISTs by
//! the apiserver's own metrics, the CPU from /proc). Last, the gateway screen at 1000 gateways with
//! reverse exposures and the fan-out of 1000 gateway changes (docs/performance.md, "Gateways at
//! scale: the screen and the fan-out").
//!
//! `cargo bench -p bnerd-vpn-operator --bench estate` (ESTATE_LINKS=n for another size).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bnerd_api::gateway::{ReverseTarget, reverse_target};
use bnerd_api::{ClusterLink, ClusterLinkSpec};
use bnerd_cloud::fabric::Fabric;
use bnerd_cloud::{Neutron, PortQuery, Route};
use bnerd_cloud_fake::{FakeCloud, FakeNeutron};
use bnerd_vpn_operator::controller::{link_input, peers_of};
use bnerd_vpn_operator::engine::resync::{Resynced, Snapshots, resync_from};
use bnerd_vpn_operator::engine::{LinkEngine, Outcome};
use bnerd_vpn_operator::gateways::{TargetIndex, TargetTracker};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::watcher::Event;
use serde_json::json;

const GATEWAYS: usize = 1000;
const WITH_REVERSE: usize = 25;
/// A transit subnet with room for 1000 legs (a /24 holds 251).
const TRANSIT: &str = "10.254.0.0/21";

fn rss_kib(field: &str) -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|v| v.parse().ok())
        })
        .unwrap_or(0)
}

struct Estate {
    cloud: FakeCloud,
    net: FakeNeutron,
    fab: Fabric,
    links: Vec<Arc<ClusterLink>>,
}

/// The transit network (one subnet) and the gateway router with its leg, on the fake, as the
/// operator's project.
async fn fabric(cloud: &FakeCloud) -> (FakeNeutron, Fabric) {
    let net = cloud.client("operator");
    let t = net.create_network("vpn-transit").await.unwrap();
    let s = net
        .create_subnet(&t.id, TRANSIT, "10.254.0.1")
        .await
        .unwrap();
    let gw = net.create_router("gw").await.unwrap();
    net.add_router_subnet(&gw.id, &s.id).await.unwrap();
    let fab = Fabric::discover(&net, &t.id, &gw.id).await.unwrap();
    (net, fab)
}

impl Estate {
    async fn new(n: usize, max_routes: usize) -> Self {
        let cloud = FakeCloud::new().max_routes(max_routes);
        let (net, fab) = fabric(&cloud).await;
        // The gateways' own ports hold their portFixedIPs (a next hop must be a gateway port
        // of the operator's project); the legs walk from 10.254.0.3 and never reach them.
        for g in 0..250 {
            net.create_port(&bnerd_cloud::CreatePort {
                network_id: fab.transit_network_id.clone(),
                ip_address: Some(format!("10.254.7.{}", 1 + g)),
                name: format!("gateway-pod-{g}"),
                ..Default::default()
            })
            .await
            .unwrap();
        }
        let mut links = vec![];
        for i in 0..n {
            let r = net.create_router(&format!("svc{i}")).await.unwrap();
            let mut l = ClusterLink::new(
                &format!("l{i}"),
                ClusterLinkSpec {
                    service_cluster_router: r.id.clone(),
                    service_cluster_cidr: format!("10.{}.{}.0/24", 100 + i / 250, i % 250),
                    ..Default::default()
                },
            );
            l.metadata.uid = Some(format!("00000000-0000-4000-8000-{i:012}"));
            l.metadata.generation = Some(1);
            l.metadata.creation_timestamp = Some(Time(
                Timestamp::from_second(1_700_000_000 + i as i64).unwrap(),
            ));
            links.push(Arc::new(l));
        }
        Self {
            cloud,
            net,
            fab,
            links,
        }
    }

    /// The per-link path (what every reconcile did before; what a changed link still does).
    async fn live(&mut self, i: usize, targets: &[ReverseTarget]) -> Outcome {
        let peers = peers_of(&self.links[i], &self.links);
        let l = &self.links[i];
        let status = l.status.clone().unwrap_or_default();
        let input = link_input(l, &status, &peers, targets).unwrap();
        let out = LinkEngine::same_tenant(&self.net, &self.fab)
            .reconcile(&input)
            .await
            .outcome;
        Arc::make_mut(&mut self.links[i]).status = Some(out.status.clone());
        out
    }

    /// What the controller does for a converged link: the window's snapshot, else per link.
    /// Returns whether it fell back.
    async fn batched(&mut self, i: usize, snaps: &Snapshots, targets: &[ReverseTarget]) -> bool {
        let ids = || {
            self.links
                .iter()
                .filter_map(|l| l.status.as_ref()?.service_router_id.clone())
                .collect()
        };
        let snap = snaps.get(&self.net, &self.fab, ids).await.unwrap();
        let peers = peers_of(&self.links[i], &self.links);
        let l = &self.links[i];
        let status = l.status.clone().unwrap_or_default();
        let input = link_input(l, &status, &peers, targets).unwrap();
        match resync_from(&snap, &self.net, &self.fab, None, &input).await {
            Resynced::Done { outcome, .. } => {
                Arc::make_mut(&mut self.links[i]).status = Some(outcome.status);
                false
            }
            Resynced::PerLink(_) => {
                self.live(i, targets).await;
                true
            }
        }
    }

    fn ready(&self) -> usize {
        self.links
            .iter()
            .filter(|l| {
                l.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.type_ == "Ready" && c.status == "True")
                })
            })
            .count()
    }

    fn counts(&self) -> (u64, u64) {
        self.cloud.read_write_counts()
    }
}

/// One row of the table.
struct Row {
    what: String,
    time: Duration,
    reads: u64,
    writes: u64,
    note: String,
}

fn row(rows: &mut Vec<Row>, what: &str, t: Instant, rw: (u64, u64), note: String) {
    rows.push(Row {
        what: what.into(),
        time: t.elapsed(),
        reads: rw.0,
        writes: rw.1,
        note,
    });
}

/// A gateway object as the apiserver would send it; `reverse` gives it an exposure and the
/// status a reverse route needs.
fn gateway(g: usize, reverse: bool) -> (String, Option<ReverseTarget>) {
    let name = format!("gw{g}");
    let obj = json!({
        "metadata": {"name": name, "namespace": format!("tenant{}", g % 40)},
        "spec": {"reverseExposures": if reverse { json!([{"port": 443}]) } else { json!([]) }},
        "status": {"serviceCIDR": format!("100.64.{}.0/24", g % 250), "portFixedIP": format!("10.254.7.{}", 1 + g % 250)},
    });
    let ns = format!("tenant{}", g % 40);
    (
        format!("{ns}/{name}"),
        reverse_target("IPsecGateway", &ns, &name, &obj),
    )
}

async fn over_quota() {
    // An estate whose gateway router was not given more than Neutron's default 30 routes.
    let mut e = Estate::new(31, 30).await;
    for i in 0..31 {
        e.live(i, &[]).await;
    }
    let s = e.links[30].status.clone().unwrap_or_default();
    let c = s
        .conditions
        .iter()
        .find(|c| c.type_ == "RouteInstalled")
        .unwrap();
    println!(
        "\nmax_routes not raised (Neutron default 30), the 31st link: RouteInstalled={} reason={}\n  message: {}",
        c.status, c.reason, c.message
    );
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let n: usize = std::env::var("ESTATE_LINKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default();
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!("machine: nproc={nproc}, {cpu}");
    println!("command: cargo bench -p bnerd-vpn-operator --bench estate");
    println!(
        "estate: {n} links (one service router each, transit {TRANSIT}), {GATEWAYS} gateway objects, {WITH_REVERSE} with reverse exposures; fake cloud with router_route quota raised to {} (neutron.conf [QUOTAS] quota_router_route)\n",
        n + 50
    );
    let rss0 = rss_kib("VmRSS:");
    let mut rows = vec![];

    // The gateway watch, stood in for: the initial list of 1000 objects through the tracker
    // and index the controller uses.
    let t = Instant::now();
    let index = TargetIndex::new();
    let mut tracker = TargetTracker::default();
    tracker.observe(Event::Init);
    for g in 0..GATEWAYS {
        tracker.observe(Event::InitApply(gateway(g, g < WITH_REVERSE)));
    }
    tracker.observe(Event::InitDone);
    index.set("IPsecGateway", tracker.targets());
    index.set("VPNGateway", BTreeMap::new());
    let targets = index.current(Duration::ZERO).await.unwrap();
    assert_eq!(targets.len(), WITH_REVERSE);
    rows.push(Row {
        what: format!("gateway index: initial list of {GATEWAYS} objects"),
        time: t.elapsed(),
        reads: 0,
        writes: 0,
        note: format!("{} targets", targets.len()),
    });

    let mut e = Estate::new(n, n + 50).await;
    let rss_fake = rss_kib("VmRSS:");
    e.cloud.reset_counters();
    let t = Instant::now();
    for i in 0..n {
        e.live(i, &targets).await;
    }
    let ready = e.ready();
    row(
        &mut rows,
        "first convergence (per link)",
        t,
        e.counts(),
        format!("{ready}/{n} Ready"),
    );
    assert_eq!(ready, n, "estate did not converge");
    let gw_routes = e
        .net
        .get_router(&e.fab.gateway_router_id)
        .await
        .unwrap()
        .routes
        .len();

    e.cloud.reset_counters();
    let t = Instant::now();
    for i in 0..n {
        e.live(i, &targets).await;
    }
    let per_link = e.counts();
    row(
        &mut rows,
        "full resync, per link (before)",
        t,
        per_link,
        String::new(),
    );

    // One set of windows, as the controller keeps: the first window also reads every service
    // router's ports (the subnets each is connected to), later ones only those of routers
    // whose revision moved.
    let window = Duration::from_secs(30);
    let snaps = Snapshots::new(window);
    e.cloud.reset_counters();
    let t = Instant::now();
    let mut fell = 0;
    for i in 0..n {
        fell += usize::from(e.batched(i, &snaps, &targets).await);
    }
    let first = e.counts();
    row(
        &mut rows,
        "full resync, batched, first window",
        t,
        first,
        format!("{fell} per-link fallbacks; the service routers' ports read once"),
    );
    assert_eq!(first.1, 0);
    snaps.invalidate().await;
    e.cloud.reset_counters();
    let t = Instant::now();
    let mut fell = 0;
    for i in 0..n {
        fell += usize::from(e.batched(i, &snaps, &targets).await);
    }
    let batched = e.counts();
    row(
        &mut rows,
        "full resync, batched snapshot",
        t,
        batched,
        format!(
            "{fell} per-link fallbacks; 1 read per {} links",
            n as u64 / batched.0.max(1)
        ),
    );
    assert!(batched.0 * 50 <= n as u64, "more than 1 read per 50 links");
    assert_eq!(batched.1, 0);

    // One gateway gains reverse exposures: the watch reports it, every link is re-triggered.
    let (key, target) = gateway(WITH_REVERSE, true);
    assert!(tracker.observe(Event::Apply((key, target))));
    index.set("IPsecGateway", tracker.targets());
    let targets = index.current(Duration::ZERO).await.unwrap();
    snaps.invalidate().await;
    e.cloud.reset_counters();
    let t = Instant::now();
    let mut fell = 0;
    for i in 0..n {
        fell += usize::from(e.batched(i, &snaps, &targets).await);
    }
    let change = e.counts();
    row(
        &mut rows,
        "one gateway gains reverse exposures",
        t,
        change,
        format!("{} routers' route sets changed; {fell} fallbacks", n),
    );
    assert_eq!(
        change.1, n as u64,
        "writes != routers whose route set changed"
    );
    assert!(change.0 <= n as u64, "reads > links");

    // A gateway without exposures changes (a label, its spec): the tracker sees no change.
    let (key, target) = gateway(WITH_REVERSE + 10, false);
    let t = Instant::now();
    let fan = tracker.observe(Event::Apply((key, target)));
    rows.push(Row {
        what: "a gateway without exposures changes".into(),
        time: t.elapsed(),
        reads: 0,
        writes: 0,
        note: format!("fan-out triggered: {fan}"),
    });

    // One link changes (a new CIDR): its own reconcile, at once, on the per-link path.
    let i = n / 2;
    {
        let l = Arc::make_mut(&mut e.links[i]);
        l.spec.service_cluster_cidr = "10.250.0.0/24".into();
        l.metadata.generation = Some(2);
    }
    e.cloud.reset_counters();
    let t = Instant::now();
    e.live(i, &targets).await;
    row(
        &mut rows,
        "one link's spec changes (per link, at once)",
        t,
        e.counts(),
        "route moved: remove + add".into(),
    );

    // Out-of-band drift, found by the next batched resync.
    let victim = e.links[7].status.clone().unwrap_or_default();
    let svc = victim.service_router_id.clone().unwrap();
    let rev = victim.reverse_routes[0].clone();
    e.net
        .remove_extraroutes(&svc, &[Route::new(&rev.service_cidr, &rev.next_hop)])
        .await
        .unwrap();
    let gw_route = e.links[9]
        .status
        .as_ref()
        .and_then(|s| s.gateway_route.clone())
        .unwrap();
    e.net
        .remove_extraroutes(
            &e.fab.gateway_router_id,
            &[Route::new(&gw_route.destination, &gw_route.nexthop)],
        )
        .await
        .unwrap();
    let leg = e.links[11]
        .status
        .as_ref()
        .and_then(|s| s.leg_port_id.clone())
        .unwrap();
    e.net.set_port_tags(&leg, &[]).await.unwrap();
    snaps.invalidate().await;
    e.cloud.reset_counters();
    let t = Instant::now();
    let mut fell = 0;
    for i in 0..n {
        fell += usize::from(e.batched(i, &snaps, &targets).await);
    }
    let drift = e.counts();
    row(
        &mut rows,
        "resync after drift (2 routes, 1 leg's tags)",
        t,
        drift,
        format!(
            "{fell} per-link fallback (the tags); {}/{n} Ready",
            e.ready()
        ),
    );
    assert_eq!(e.ready(), n);
    let legs = e
        .net
        .list_ports(&PortQuery {
            network_id: Some(e.fab.transit_network_id.clone()),
            ..Default::default()
        })
        .await
        .unwrap()
        .len();

    println!(
        "{:<46} {:>10} {:>7} {:>7}  note",
        "what", "time", "reads", "writes"
    );
    for r in &rows {
        println!(
            "{:<46} {:>10} {:>7} {:>7}  {}",
            r.what,
            format!("{:.1?}", r.time),
            r.reads,
            r.writes,
            r.note
        );
    }
    let rss = rss_kib("VmRSS:");
    println!(
        "\ngateway router: {gw_routes} routes; transit network: {legs} ports; per-link resync {} reads vs batched {} ({}x fewer)",
        per_link.0,
        batched.0,
        per_link.0 / batched.0.max(1)
    );
    println!(
        "memory (this bench process, fake cloud included): RSS at start {} MiB, with the fake estate {} MiB, at the end {} MiB, peak {} MiB",
        rss0 / 1024,
        rss_fake / 1024,
        rss / 1024,
        rss_kib("VmHWM:") / 1024
    );
    println!(
        "apiserver LISTs and idle CPU: not measured here (no apiserver, no controller loop); tests/estate_binary.rs measures them on the real binary"
    );
    over_quota().await;
    drift_check(n).await;
    per_customer_resync(n / 10, 10).await;
    gateway_screen(n);
    gateway_fan_out(n);
}

/// The drift check between resyncs (`drift_check::recorded_paths`, `engine::drift_check`):
/// `n` Ready links, 40 % same-tenant, 30 % `Shared` and 30 % `PerCustomer` across `n / 10`
/// customer projects of 3 links each (each project its customer transit and edge router).
/// Every leg is a router interface; the gateway router routes every link. Prints the calls and
/// the time of one check, and that breaking four things sends exactly the links behind them.
/// (The fake's objects are all made by the operator's client: what the check reads does not
/// depend on who owns a leg, only on the operator seeing it; the lab's packet tier reads
/// customers' legs.)
async fn drift_check(n: usize) {
    use bnerd_api::clusterlink::CustomerTransit;
    use bnerd_api::conditions::{Status, set_condition};
    use bnerd_api::{ClusterLinkStatus, ConditionType, Reason, SecretRef, TransitIsolation};
    use bnerd_vpn_operator::drift_check::recorded_paths;
    use bnerd_vpn_operator::engine::drift_check::{READS, check};

    const CHECKS: u32 = 20;
    let cloud = FakeCloud::new().max_routes(2 * n + 10);
    let (net, fab) = fabric(&cloud).await;
    let per_customer_from = n * 7 / 10;
    // The customer projects' transits: network, subnet, edge router with its interface there
    // and its leg on the main transit.
    let projects = (n - per_customer_from).div_ceil(3);
    let mut edges = vec![];
    for k in 0..projects {
        let ct = net.create_network(&format!("ct{k}")).await.unwrap();
        let sub = net
            .create_subnet(
                &ct.id,
                &format!("10.{}.{}.0/24", 200 + k / 250, k % 250),
                &format!("10.{}.{}.1", 200 + k / 250, k % 250),
            )
            .await
            .unwrap();
        let edge = net.create_router(&format!("edge{k}")).await.unwrap();
        net.add_router_subnet(&edge.id, &sub.id).await.unwrap();
        let leg = net
            .create_port(&bnerd_cloud::CreatePort {
                network_id: fab.transit_network_id.clone(),
                name: format!("edge{k}"),
                ..Default::default()
            })
            .await
            .unwrap();
        net.add_router_interface(&edge.id, &leg.id).await.unwrap();
        edges.push((ct, sub, edge, leg));
    }
    let mut links = vec![];
    let mut gateway_routes = vec![];
    let mut edge_routes: BTreeMap<String, Vec<Route>> = BTreeMap::new();
    for i in 0..n {
        let cidr = format!("10.{}.{}.0/24", 100 + i / 250, i % 250);
        let per_customer = i >= per_customer_from;
        let project = (i - per_customer_from.min(i)) / 3;
        let router = net.create_router(&format!("svc{i}")).await.unwrap();
        let network = if per_customer {
            edges[project].0.id.clone()
        } else {
            fab.transit_network_id.clone()
        };
        let leg = net
            .create_port(&bnerd_cloud::CreatePort {
                network_id: network,
                name: format!("leg{i}"),
                ..Default::default()
            })
            .await
            .unwrap();
        net.add_router_interface(&router.id, &leg.id).await.unwrap();
        let ip = leg.first_ip().unwrap_or_default().to_string();
        let cross = i >= n * 4 / 10;
        let mut l = ClusterLink::new(
            &format!("l{i}"),
            ClusterLinkSpec {
                service_cluster_router: router.id.clone(),
                service_cluster_cidr: cidr.clone(),
                credentials_secret_ref: cross.then(|| SecretRef {
                    name: format!("clusterlink-l{i}"),
                    namespace: "bnerd-vpn-clusterlinks".into(),
                }),
                customer_project_id: cross.then(|| format!("{project:032x}")),
                transit_isolation: per_customer.then_some(TransitIsolation::PerCustomer),
                ..Default::default()
            },
        );
        l.metadata.generation = Some(1);
        let mut status = ClusterLinkStatus {
            leg_port_id: Some(leg.id.clone()),
            transit_ip: Some(ip.clone()),
            service_router_id: Some(router.id.clone()),
            ..Default::default()
        };
        let nexthop = if per_customer {
            let (ct, sub, edge, edge_leg) = &edges[project];
            let edge_ip = edge_leg.first_ip().unwrap_or_default().to_string();
            status.customer_transit = Some(CustomerTransit {
                network_id: Some(ct.id.clone()),
                subnet_id: Some(sub.id.clone()),
                cidr: Some(sub.cidr.clone()),
                edge_router_id: Some(edge.id.clone()),
                edge_router_transit_ip: Some(edge_ip.clone()),
            });
            edge_routes
                .entry(edge.id.clone())
                .or_default()
                .push(Route::new(&cidr, &ip));
            edge_ip
        } else {
            ip
        };
        gateway_routes.push(Route::new(&cidr, &nexthop));
        status.gateway_route = Some(bnerd_api::RouteRecord {
            destination: cidr,
            nexthop,
        });
        set_condition(
            &mut status.conditions,
            ConditionType::Ready,
            Status::True,
            Reason::Ready,
            "ready",
            Some(1),
            Timestamp::UNIX_EPOCH,
        );
        l.status = Some(status);
        links.push(Arc::new(l));
    }
    net.add_extraroutes(&fab.gateway_router_id, &gateway_routes)
        .await
        .unwrap();
    for (edge, routes) in &edge_routes {
        net.add_extraroutes(edge, routes).await.unwrap();
    }

    cloud.reset_counters();
    let t0 = Instant::now();
    let mut found = 0;
    for _ in 0..CHECKS {
        let paths = recorded_paths(&links);
        assert_eq!(paths.len(), n);
        found += check(&net, &fab, &paths).await.unwrap().len();
    }
    let per_check = t0.elapsed() / CHECKS;
    let (reads, writes) = cloud.read_write_counts();
    assert_eq!(found, 0, "a whole estate: nothing drifted");
    assert_eq!(
        (reads, writes),
        (READS * u64::from(CHECKS), 0),
        "two reads per check, whatever the estate"
    );

    // Four breaks out of band: a same-tenant link's gateway route, a Shared link's leg, a
    // PerCustomer link's route on its edge router, and another project's edge leg (its three
    // links route via it). The next check names exactly those six links.
    let status = |i: usize| links[i].status.clone().unwrap_or_default();
    net.remove_extraroutes(&fab.gateway_router_id, &[gateway_routes[1].clone()])
        .await
        .unwrap();
    net.remove_router_interface(
        &status(n / 2).service_router_id.unwrap_or_default(),
        &status(n / 2).leg_port_id.unwrap_or_default(),
    )
    .await
    .unwrap();
    let pc = per_customer_from + 4;
    let ct = status(pc).customer_transit.unwrap_or_default();
    net.remove_extraroutes(
        &ct.edge_router_id.unwrap_or_default(),
        &[Route::new(
            &links[pc].spec.service_cluster_cidr,
            status(pc).transit_ip.unwrap_or_default(),
        )],
    )
    .await
    .unwrap();
    let (_, _, edge, edge_leg) = &edges[projects - 1];
    net.remove_router_interface(&edge.id, &edge_leg.id)
        .await
        .unwrap();
    cloud.reset_counters();
    let t1 = Instant::now();
    let drifted = check(&net, &fab, &recorded_paths(&links)).await.unwrap();
    let took = t1.elapsed();
    let mut want: Vec<String> = [1, n / 2, pc]
        .iter()
        .map(|i| format!("l{i}"))
        .chain(
            (per_customer_from..n)
                .filter(|i| (i - per_customer_from) / 3 == projects - 1)
                .map(|i| format!("l{i}")),
        )
        .collect();
    want.sort();
    let mut got: Vec<String> = drifted.iter().map(|d| d.link.clone()).collect();
    got.sort();
    assert_eq!(got, want, "exactly the links behind the four breaks");
    let (reads_after, writes_after) = cloud.read_write_counts();
    assert_eq!((reads_after, writes_after), (READS, 0));

    println!(
        "\ndrift check, {n} Ready links ({} same-tenant, {} Shared, {} PerCustomer in {projects} customer projects), IPSEC_DRIFT_CHECK_INTERVAL default 2 s:",
        n * 4 / 10,
        per_customer_from - n * 4 / 10,
        n - per_customer_from
    );
    println!(
        "  per check: {} reads, {} writes, {per_check:.1?} (mean of {CHECKS} checks, fake cloud in process)",
        reads / u64::from(CHECKS),
        writes
    );
    println!(
        "  after 4 breaks (a gateway route, a leg, an edge route, an edge leg): {reads_after} reads, {took:.1?}, {} links to reconcile: {}",
        drifted.len(),
        got.join(" ")
    );
    println!(
        "  at 2 s: {} reads an hour, whatever the number of links",
        3600 / 2 * READS
    );
}

/// The batched resync of `PerCustomer` links (`engine::resync`): `per_project` links in each of
/// `projects` customer projects, each link with its own Secret and credential, converged; then
/// one link's per-link resync, and two windows of all of them through the door with the
/// window's snapshot offered. Prints the reads of each.
async fn per_customer_resync(projects: usize, per_project: usize) {
    use bnerd_cloud::fabric::CustomerTransitPool;
    use bnerd_testkit::customers::{per_customer_links, reconcile_each};
    use bnerd_vpn_operator::engine::ResyncPath;

    let n = projects * per_project;
    let cloud = FakeCloud::new().max_routes(n + 50);
    let (net, mut fab) = fabric(&cloud).await;
    fab.customer_transit = Some(CustomerTransitPool {
        pool: "10.255.0.0/16".parse().unwrap(),
        prefix_len: 28,
    });
    // One gateway with reverse exposures, its pod's port on the transit.
    net.create_port(&bnerd_cloud::CreatePort {
        network_id: fab.transit_network_id.clone(),
        ip_address: Some("10.254.7.1".into()),
        name: "gateway-pod-0".into(),
        ..Default::default()
    })
    .await
    .unwrap();
    let targets: Vec<ReverseTarget> = gateway(0, true).1.into_iter().collect();
    let (mut links, source) = per_customer_links(&cloud, projects, per_project).await;
    let t = Instant::now();
    reconcile_each(&net, &fab, &source, &mut links, &targets, None).await;
    let converged = t.elapsed();
    assert!(
        links.iter().all(|l| {
            l.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == "Ready" && c.status == "True")
            })
        }),
        "every PerCustomer link Ready after one reconcile"
    );
    cloud.reset_counters();
    reconcile_each(&net, &fab, &source, &mut links[..1], &targets, None).await;
    let (per_link, _) = cloud.read_write_counts();
    let snaps = Snapshots::new(Duration::from_secs(30));
    let mut windows = vec![];
    for _ in 0..2 {
        snaps.invalidate().await;
        cloud.reset_counters();
        let t = Instant::now();
        let paths = reconcile_each(&net, &fab, &source, &mut links, &targets, Some(&snaps)).await;
        let took = t.elapsed();
        let (reads, writes) = cloud.read_write_counts();
        assert!(
            paths.iter().all(|p| *p == Some(ResyncPath::Snapshot)),
            "every converged PerCustomer link resyncs beside the snapshot"
        );
        assert_eq!(writes, 0);
        windows.push((reads, took));
    }
    println!(
        "
PerCustomer resync, {n} links in {projects} customer projects ({per_project} each, one credential per link), one gateway with reverse exposures, converged in {converged:.1?}:"
    );
    println!(
        "  per link (no snapshot): {per_link} reads a link, {} for the estate",
        per_link * n as u64
    );
    for (i, (reads, took)) in windows.iter().enumerate() {
        println!(
            "  batched, {} window: {reads} reads ({:.2} a link, 1 per {:.1} links), 0 writes, {took:.1?}",
            if i == 0 { "first" } else { "later" },
            *reads as f64 / n as f64,
            n as f64 / *reads as f64
        );
    }
}

/// The gateway screen (`engine::plan::reverse_routes::screen`, run on every reconcile of every
/// link) at `GATEWAYS` gateways with reverse exposures and `n` link CIDRs: one /24 each, one in
/// 50 a /25 inside an older gateway's /24 (refused, naming it), each via its own gateway port
/// on a transit that also holds the `n` legs. Prints the mean time of one screen.
fn gateway_screen(n: usize) {
    use bnerd_api::GatewayRef;
    use bnerd_cloud::fabric::CidrPolicy;
    use bnerd_cloud::{FixedIp, Port};
    use bnerd_vpn_operator::engine::plan::reverse_routes::{ScreenView, screen};
    use ipnet::Ipv4Net;
    use std::net::Ipv4Addr;

    const RUNS: u32 = 20;
    let transit: Ipv4Net = TRANSIT.parse().unwrap();
    let base = u32::from(transit.network());
    let port = |id: String, ip: Ipv4Addr, tags: Vec<String>| Port {
        id,
        network_id: "transit".into(),
        project_id: "operator".into(),
        fixed_ips: vec![FixedIp {
            subnet_id: "transit-subnet".into(),
            ip_address: ip.to_string(),
        }],
        tags,
        ..Default::default()
    };
    let links: Vec<Ipv4Net> = (0..n)
        .map(|i| {
            format!("10.{}.{}.0/24", 100 + i / 250, i % 250)
                .parse()
                .unwrap()
        })
        .collect();
    // Legs from .3 up, gateway ports from the transit's upper half (10.254.4.1 up).
    let claimed: Vec<Ipv4Addr> = (0..n as u32)
        .map(|i| Ipv4Addr::from(base + 3 + i))
        .collect();
    let gw_ip = |g: usize| Ipv4Addr::from(base + 1025 + g as u32);
    let mut ports: Vec<Port> = claimed
        .iter()
        .enumerate()
        .map(|(i, ip)| {
            port(
                format!("leg{i}"),
                *ip,
                vec![bnerd_api::names::tag_link_uid(&format!("u{i}"))],
            )
        })
        .collect();
    ports.extend((0..GATEWAYS).map(|g| port(format!("gw{g}"), gw_ip(g), vec![])));
    let targets: Vec<ReverseTarget> = (0..GATEWAYS)
        .map(|g| {
            let cidr = if g % 50 == 49 {
                let older = g - 1;
                format!("100.{}.{}.0/25", 64 + older / 256, older % 256)
            } else {
                format!("100.{}.{}.0/24", 64 + g / 256, g % 256)
            };
            ReverseTarget {
                gateway: GatewayRef {
                    kind: "IPsecGateway".into(),
                    namespace: format!("tenant{}", g % 40),
                    name: format!("gw{g}"),
                },
                service_cidr: cidr,
                port_fixed_ip: gw_ip(g).to_string(),
                uid: None,
                // One second apart, in the order of g: the /25s are the newer.
                created: Some(format!("2026-01-01T00:{:02}:{:02}Z", g / 60, g % 60)),
            }
        })
        .collect();
    let policy = CidrPolicy::default();
    let view = ScreenView {
        transit,
        link_cidrs: &links,
        ports: &ports,
        operator_project: "operator",
        claimed: &claimed,
        policy: &policy,
        pool: None,
    };
    let (routes, refused) = screen(&targets, &view);
    assert_eq!(
        (routes.len(), refused.len()),
        (GATEWAYS - GATEWAYS / 50, GATEWAYS / 50),
        "{:?}",
        refused.first()
    );
    let t = Instant::now();
    for _ in 0..RUNS {
        std::hint::black_box(screen(std::hint::black_box(&targets), &view));
    }
    let per = t.elapsed() / RUNS;
    println!(
        "\ngateway screen, {GATEWAYS} gateways with reverse exposures x {n} link CIDRs ({} transit ports, {n} leg addresses):",
        ports.len()
    );
    println!(
        "  one screen: {per:.2?} (mean of {RUNS}); {} routes, {} refused as overlapping an older gateway",
        routes.len(),
        refused.len()
    );
    println!(
        "  every link screens on its reconcile: {:.2?} of screening per fan-out over {n} links",
        per * n as u32
    );
}

/// The gateway fan-out (`gateways::fan_out`'s window, `gateways::coalesce`): `GATEWAYS`
/// gateways gain reverse exposures, fed through the tracker and index the controller uses,
/// all at once and spread over 10 s. Before the window every change was one fan-out, each a
/// reconcile request for every link. Runs on paused time, so the windows cost no waiting.
fn gateway_fan_out(n: usize) {
    use bnerd_vpn_operator::gateways::{FAN_OUT_WINDOW, coalesce};
    use futures::StreamExt;

    let run = |spread: Duration| -> (usize, Vec<usize>, Duration) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        rt.block_on(async move {
            let (tx, rx) = futures::channel::mpsc::unbounded();
            let mut fan_outs = Box::pin(coalesce(rx, FAN_OUT_WINDOW));
            let cpu = Instant::now();
            let feed = tokio::spawn(async move {
                let index = TargetIndex::new();
                index.set("VPNGateway", BTreeMap::new());
                let mut tracker = TargetTracker::default();
                let mut changes = 0;
                let step = spread / GATEWAYS as u32;
                for g in 0..GATEWAYS {
                    if tracker.observe(Event::Apply(gateway(g, true))) {
                        // As the watch does: the index first, then the trigger.
                        index.set("IPsecGateway", tracker.targets());
                        tx.unbounded_send(()).unwrap();
                        changes += 1;
                    }
                    if !step.is_zero() {
                        tokio::time::sleep(step).await;
                    }
                }
                changes
            });
            let mut windows = vec![];
            while let Some(merged) = fan_outs.next().await {
                windows.push(merged);
                if windows.iter().sum::<usize>() == GATEWAYS {
                    break;
                }
            }
            let changes = feed.await.unwrap();
            (changes, windows, cpu.elapsed())
        })
    };
    println!(
        "\ngateway fan-out, {GATEWAYS} gateways gain reverse exposures, {n} links (window FAN_OUT_WINDOW = {FAN_OUT_WINDOW:?}):"
    );
    for spread in [Duration::ZERO, Duration::from_secs(10)] {
        let (changes, windows, cpu) = std::thread::spawn(move || run(spread)).join().unwrap();
        println!(
            "  changes over {spread:?}: {changes} changes -> {} fan-out(s) ({} link reconcile requests; one fan-out per change: {}); tracker, index and window {cpu:.1?}",
            windows.len(),
            windows.len() * n,
            changes * n
        );
    }
}
