//! Prints what a ClusterLink costs the cloud: OpenStack calls (reads, writes) to converge
//! one link and to resync a converged one, time to converge N links, and reverse-route
//! fan-out. Counts come from the fake, whose answers the parity test holds to the lab's;
//! with a running lab it also times converge, resync and unwind against real Neutron.
//! A count with a budget (docs/performance.md, "Call budgets (asserted by tests)") is held
//! to it: a run that misses one panics naming it; every other line is a measurement only.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bnerd_api::SecretRef;
use bnerd_api::names::{ANNOTATION_API_ACCESS, DEFAULT_CREDENTIALS_NAMESPACE};
use bnerd_vpn_operator::engine::{
    Checked, CredentialSource, CustomerCloud, CustomerCredential, Customers, LinkEngine,
    OperatorIdentity, Unwound,
};

use bnerd_api::gateway::ReverseTarget;
use bnerd_api::{ClusterLink, ClusterLinkSpec, GatewayRef};
use bnerd_cloud::Neutron;
use bnerd_cloud::fabric::Fabric;
use bnerd_cloud_fake::{FakeCloud, FakeNeutron};
use bnerd_testkit::{lab_client, lab_env, lab_tagged_client, reconcile_one, unique};
use bnerd_vpn_operator::controller::link_input;
use bnerd_vpn_operator::engine::Outcome;

async fn fabric(net: &dyn Neutron) -> Fabric {
    let n = net.create_network("vpn-transit").await.unwrap();
    let s = net
        .create_subnet(&n.id, "10.254.0.0/24", "10.254.0.1")
        .await
        .unwrap();
    let gw = net.create_router("gw").await.unwrap();
    net.add_router_subnet(&gw.id, &s.id).await.unwrap();
    Fabric::discover(net, &n.id, &gw.id).await.unwrap()
}

fn link(name: &str, router: &str, cidr: &str) -> ClusterLink {
    let mut l = ClusterLink::new(
        name,
        ClusterLinkSpec {
            service_cluster_router: router.into(),
            service_cluster_cidr: cidr.into(),
            ..Default::default()
        },
    );
    l.metadata.uid = Some(format!("uid-{name}"));
    l
}

/// Reconcile link `i` and keep its new status, as the controller's status patch would.
async fn run(
    net: &dyn Neutron,
    fabric: &Fabric,
    links: &mut [ClusterLink],
    i: usize,
    reverse: &[ReverseTarget],
) -> Outcome {
    let out = reconcile_one(net, fabric, links, i, reverse).await;
    links[i].status = Some(out.status.clone());
    out
}

async fn calls(by_name: bool, honour_create_tags: bool) {
    let cloud = FakeCloud::new().honour_create_tags(honour_create_tags);
    let net = cloud.client("operator");
    let fab = fabric(&net).await;
    let r = net.create_router("shoot--services--svc01").await.unwrap();
    let mut links = vec![link(
        "svc01",
        if by_name { &r.name } else { &r.id },
        "10.251.0.0/16",
    )];
    cloud.reset_counters();
    run(&net, &fab, &mut links, 0, &[]).await;
    let (cr, cw) = cloud.read_write_counts();
    cloud.reset_counters();
    run(&net, &fab, &mut links, 0, &[]).await;
    let (rr, rw) = cloud.read_write_counts();
    let how = format!(
        "{}, create-body tags {}",
        if by_name {
            "router by name"
        } else {
            "router by ID"
        },
        if honour_create_tags {
            "kept (tag-ports-during-bulk-creation loaded)"
        } else {
            "dropped as in the lab: +1 PUT /ports/{id}/tags"
        }
    );
    // The tag write is the fourth where the create body's tags are dropped.
    let converge_writes = if honour_create_tags { 3 } else { 4 };
    held(
        &format!("converge one link ({how})"),
        cw == converge_writes,
        &format!("writes = {converge_writes}"),
        (cr, cw),
    );
    held(
        &format!("resync converged link ({how})"),
        rw == 0 && rr <= 2,
        "writes = 0, reads <= 2",
        (rr, rw),
    );
    println!("calls/converge one link ({how}): reads={cr} writes={cw}");
    println!("calls/resync converged link ({how}): reads={rr} writes={rw}");
}

/// A count held to its budget (docs/performance.md, "Call budgets (asserted by tests)", where
/// the tests assert the same): missing it fails the bench, naming what and by how much,
/// rather than printing a verdict nothing reads.
fn held(what: &str, ok: bool, budget: &str, (reads, writes): (u64, u64)) {
    assert!(
        ok,
        "calls/{what}: reads={reads} writes={writes}, not within its budget ({budget}; docs/performance.md, \"Call budgets\")"
    );
}

/// A fake estate with `n` service routers and one link per router (not yet reconciled).
async fn estate(
    n: usize,
    cidr: impl Fn(usize) -> String,
) -> (FakeCloud, FakeNeutron, Fabric, Vec<ClusterLink>) {
    let cloud = FakeCloud::new();
    let net = cloud.client("operator");
    let fab = fabric(&net).await;
    let mut links = vec![];
    for i in 0..n {
        let r = net.create_router(&format!("svc{i}")).await.unwrap();
        links.push(link(&format!("l{i}"), &r.id, &cidr(i)));
    }
    (cloud, net, fab, links)
}

async fn converge_many(n: usize) {
    let (cloud, net, fab, mut links) =
        estate(n, |i| format!("10.{}.{}.0/24", 100 + i / 200, i % 200)).await;
    cloud.reset_counters();
    let t = Instant::now();
    for i in 0..n {
        run(&net, &fab, &mut links, i, &[]).await;
    }
    let (r, w) = cloud.read_write_counts();
    println!(
        "converge {n} links (fake, sequential): {:?} total, reads={r} writes={w}",
        t.elapsed()
    );
}

async fn fan_out(n: usize, m: usize) {
    let (cloud, net, fab, mut links) = estate(n, |i| format!("10.{}.0.0/16", 10 + i)).await;
    for i in 0..n {
        run(&net, &fab, &mut links, i, &[]).await;
    }
    // The gateways' own ports hold their portFixedIPs (a next hop must be a gateway port).
    for g in 0..m {
        net.create_port(&bnerd_cloud::CreatePort {
            network_id: fab.transit_network_id.clone(),
            ip_address: Some(format!("10.254.0.{}", 200 + g)),
            name: format!("gateway-pod-{g}"),
            ..Default::default()
        })
        .await
        .unwrap();
    }
    let targets: Vec<ReverseTarget> = (0..m)
        .map(|g| ReverseTarget {
            gateway: GatewayRef {
                kind: "IPsecGateway".into(),
                namespace: "vpn".into(),
                name: format!("gw{g}"),
            },
            service_cidr: format!("100.64.{g}.0/24"),
            port_fixed_ip: format!("10.254.0.{}", 200 + g),
            uid: None,
            created: None,
        })
        .collect();
    cloud.reset_counters();
    let t = Instant::now();
    for i in 0..n {
        run(&net, &fab, &mut links, i, &targets).await;
    }
    let (r, w) = cloud.read_write_counts();
    println!(
        "fan-out {n} links x {m} gateways (first convergence): {:?}, reads={r} writes={w}",
        t.elapsed()
    );
    cloud.reset_counters();
    for i in 0..n {
        run(&net, &fab, &mut links, i, &targets).await;
    }
    let (r, w) = cloud.read_write_counts();
    println!("fan-out {n} links x {m} gateways (resync): reads={r} writes={w}");
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// What one link costs on the real lab, per phase: (reads, writes) counted by the client,
/// and wall time (median of `rounds`).
async fn lab_costs(rounds: usize, tags_at_create: bool) {
    let Some(env) = lab_env() else {
        println!("lab: no lab.env (lab/openstack/up.sh); real-Neutron numbers skipped");
        return;
    };
    let net = if tags_at_create {
        lab_tagged_client(&env)
    } else {
        lab_client(&env, "OPERATOR")
    };
    let fab = Fabric::discover(
        &net,
        &env["LAB_TRANSIT_NETWORK_ID"],
        &env["LAB_GATEWAY_ROUTER_ID"],
    )
    .await
    .expect("lab fabric");
    let (mut conv, mut resync, mut unwind) = (vec![], vec![], vec![]);
    let mut counts = [(0, 0); 3];
    let mut phase = |i: usize, before: (u64, u64), after: (u64, u64)| {
        counts[i] = (after.0 - before.0, after.1 - before.1);
    };
    for round in 0..rounds {
        let r = net.create_router(&unique("bench")).await.unwrap();
        let cidr = format!(
            "10.{}.{round}.{}/26",
            150 + std::process::id() % 50,
            if tags_at_create { 64 } else { 0 }
        );
        let mut links = vec![link(&unique("bench"), &r.id, &cidr)];
        let c0 = net.call_counts();
        let t = Instant::now();
        let out = run(&net, &fab, &mut links, 0, &[]).await;
        conv.push(t.elapsed());
        let c1 = net.call_counts();
        phase(0, c0, c1);
        let ready = out
            .status
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        assert!(ready, "bench link did not converge: {:?}", out.status);
        let t = Instant::now();
        run(&net, &fab, &mut links, 0, &[]).await;
        resync.push(t.elapsed());
        let c2 = net.call_counts();
        phase(1, c1, c2);
        let status = links[0].status.clone().unwrap_or_default();
        let input = link_input(&links[0], &status, &[], &[]).expect("uid");
        let t = Instant::now();
        match LinkEngine::same_tenant(&net, &fab)
            .unwind(&input, &[])
            .await
        {
            Unwound::Done(_) => {}
            other => panic!("unwind: {other:?}"),
        }
        unwind.push(t.elapsed());
        phase(2, c2, net.call_counts());
        net.delete_router(&r.id).await.unwrap();
    }
    let how = if tags_at_create {
        "ML2 with tag_ports_during_bulk_creation"
    } else {
        "ML2 default: create-body tags dropped"
    };
    for (i, (what, times)) in [("converge", conv), ("resync", resync), ("unwind", unwind)]
        .into_iter()
        .enumerate()
    {
        println!(
            "lab/{what} one link (real Neutron, {how}): reads={} writes={}  median {:?} of {rounds}",
            counts[i].0,
            counts[i].1,
            median(times)
        );
    }
}

/// The customer's credential for the cross-tenant rows: one Secret, one cached finding.
struct OneSecret {
    cloud: FakeCloud,
    data: BTreeMap<String, Vec<u8>>,
    checked: Mutex<Option<Checked>>,
}

#[async_trait]
impl CredentialSource for OneSecret {
    async fn secret(&self, _r: &SecretRef) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
        Ok(Some(self.data.clone()))
    }
    fn client(&self, c: &CustomerCredential) -> Arc<dyn CustomerCloud> {
        Arc::new(self.cloud.client_with_app_cred(&c.id, c.secret.expose()))
    }
    fn checked(&self, _c: &CustomerCredential) -> Option<Checked> {
        self.checked.lock().unwrap().clone()
    }
    fn remember(&self, _c: &CustomerCredential, checked: Checked) {
        *self.checked.lock().unwrap() = Some(checked);
    }
}

/// A cross-tenant link: the share, the customer's leg, attach, the gateway route; then a
/// resync (the credential's findings cached for its Secret version).
async fn calls_cross_tenant(honour_create_tags: bool) {
    let cloud = FakeCloud::new().honour_create_tags(honour_create_tags);
    let net = cloud.client("operator");
    let fab = fabric(&net).await;
    let (id, secret) = cloud.application_credential("customer", &["member"]);
    let customer = cloud.client_with_app_cred(&id, &secret);
    let r = customer
        .create_router("shoot--diehl--diehl01")
        .await
        .unwrap();
    let mut l = link("diehl01", &r.id, "10.234.0.0/16");
    l.spec.credentials_secret_ref = Some(SecretRef {
        name: "clusterlink-diehl01".into(),
        namespace: DEFAULT_CREDENTIALS_NAMESPACE.into(),
    });
    l.spec.customer_project_id = Some("customer".into());
    l.metadata.annotations = Some([(ANNOTATION_API_ACCESS.to_string(), "none".to_string())].into());
    let source = OneSecret {
        cloud: cloud.clone(),
        data: [
            ("OS_APPLICATION_CREDENTIAL_ID".to_string(), id.into_bytes()),
            (
                "OS_APPLICATION_CREDENTIAL_SECRET".to_string(),
                secret.into_bytes(),
            ),
        ]
        .into(),
        checked: Mutex::new(None),
    };
    let operator = OperatorIdentity {
        project_id: "operator".into(),
        auth_url: "http://127.0.0.1:5000/v3".into(),
        region: None,
    };
    let once = async |l: &mut ClusterLink| {
        let status = l.status.clone().unwrap_or_default();
        let input = link_input(l, &status, &[], &[]).unwrap();
        let customers = Customers {
            source: &source,
            operator: &operator,
            namespace: DEFAULT_CREDENTIALS_NAMESPACE,
        };
        let out = LinkEngine::new(&net, &fab, customers)
            .reconcile(&input)
            .await
            .outcome;
        l.status = Some(out.status);
    };
    cloud.reset_counters();
    once(&mut l).await;
    let (cr, cw) = cloud.read_write_counts();
    cloud.reset_counters();
    once(&mut l).await;
    let (rr, rw) = cloud.read_write_counts();
    let how = if honour_create_tags {
        "create-body tags kept"
    } else {
        "create-body tags dropped: +1 PUT /ports/{id}/tags"
    };
    held(
        &format!("resync converged cross-tenant link ({how})"),
        rw == 0,
        "writes = 0",
        (rr, rw),
    );
    println!(
        "calls/converge cross-tenant link ({how}; incl. token + privilege probe): reads={cr} writes={cw}"
    );
    println!("calls/resync converged cross-tenant link ({how}): reads={rr} writes={rw}");
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    for (by_name, tags) in [(false, false), (true, false), (false, true)] {
        calls(by_name, tags).await;
    }
    calls_cross_tenant(false).await;
    calls_cross_tenant(true).await;
    converge_many(200).await;
    fan_out(20, 5).await;
    lab_costs(5, false).await;
    lab_costs(5, true).await;
}
