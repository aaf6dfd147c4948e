//! The real operator binary at (lab-sized) estate scale, against the kube lab and the
//! OpenStack lab: its memory and idle CPU with 50 Ready links and 200 gateway objects, and the
//! OpenStack requests one gateway change costs, read from its own /metrics, and the gateway
//! LISTs it sends the apiserver, counted by the apiserver (its `apiserver_request_total`):
//! the watches' initial lists at start, none per reconcile (the reverse targets come from the
//! watch-fed index). The fake-cloud bench (`benches/estate.rs`) does 1000 links in process,
//! with no apiserver and no controller loop; this is the number for the process a cluster
//! would run. In the lab's `scale` project (router_route quota raised by up.sh).

use std::time::{Duration, Instant};

use bnerd_api::ClusterLink;
use bnerd_api::gateway::GATEWAY_KINDS;
use bnerd_cloud::{Neutron, OpenStack, PortQuery};
use bnerd_testkit::kube_lab::{apiserver_requests, install_crd, kube_client};
use bnerd_testkit::operator_proc::{
    OperatorCommand, TEST_LABEL, http_get, install_gateway_crds, is_ready, kube_lab_exclusive,
    sweep_leftovers, test_link, wait_for,
};
use bnerd_testkit::{env_on, lab_client, lab_or_skip, unique};
use bnerd_vpn_operator::engine::drift_check::READS;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

const LINKS: usize = 50;
const GATEWAYS: usize = 200;
const WITH_REVERSE: usize = 5;

fn gateway(name: &str, g: usize, reverse: bool) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "ipsec.bnerd.net/v1alpha1", "kind": "IPsecGateway",
        "metadata": {"name": name, "namespace": "default", "labels": {TEST_LABEL: "true"}},
        "spec": {"reverseExposures": if reverse { json!([{"port": 443}]) } else { json!([]) }},
        "status": {"serviceCIDR": format!("100.65.{g}.0/24"), "portFixedIP": format!("10.254.0.{}", 200 + g % 50)}
    }))
    .expect("gateway")
}

/// (VmRSS, VmHWM) in KiB and user+system CPU time of a process.
fn proc_stats(pid: u32) -> (u64, u64, Duration) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kib = |field: &str| {
        status
            .lines()
            .find(|l| l.starts_with(field))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let f: Vec<u64> = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .unwrap_or("")
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    let ticks = f.get(11).copied().unwrap_or(0) + f.get(12).copied().unwrap_or(0);
    (
        kib("VmRSS:"),
        kib("VmHWM:"),
        Duration::from_millis(ticks * 10),
    )
}

/// Neutron requests the operator sent so far, from its /metrics.
struct Requests {
    reads: u64,
    /// Writes Neutron answered 2xx.
    writes: u64,
    /// Write attempts that got anything else (an error code, or no answer), by operation and
    /// code: a cloud too loaded to answer makes the client try again.
    failed_writes: std::collections::BTreeMap<String, u64>,
    drift_checks: u64,
}

async fn neutron_requests(addr: &str) -> Requests {
    let (_, text) = http_get(addr, "/metrics").await;
    let (mut r, mut w, mut checks) = (0, 0, 0);
    let mut failed = std::collections::BTreeMap::new();
    let value = |l: &str| {
        l.rsplit_once(' ')
            .and_then(|(_, v)| v.parse::<f64>().ok())
            .unwrap_or(0.0) as u64
    };
    for l in text.lines() {
        if l.starts_with("bnerd_drift_checks_total{") {
            checks += value(l);
            continue;
        }
        let Some(rest) = l.strip_prefix("bnerd_openstack_requests_total{service=\"neutron\",")
        else {
            continue;
        };
        let n = value(l);
        if rest.starts_with("operation=\"GET ") {
            r += n;
        } else if rest.contains("code=\"2") {
            w += n;
        } else {
            let labels = rest.rsplit_once('}').map_or(rest, |(l, _)| l);
            *failed.entry(labels.to_string()).or_insert(0) += n;
        }
    }
    Requests {
        reads: r,
        writes: w,
        failed_writes: failed,
        drift_checks: checks,
    }
}

fn reverse_count(l: &ClusterLink) -> usize {
    l.status.as_ref().map_or(0, |s| s.reverse_routes.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn real_binary_memory_idle_cpu_and_a_gateway_change() {
    let test = "real_binary_memory_idle_cpu_and_a_gateway_change";
    let Some((client, kubeconfig)) = kube_client(test).await else {
        return;
    };
    let Some(lab) = lab_or_skip(test) else {
        return;
    };
    let lab = bnerd_testkit::lab_scale_env(&lab);
    install_crd(&client).await;
    install_gateway_crds(&client).await;
    let net: std::sync::Arc<OpenStack> = std::sync::Arc::new(lab_client(&lab, "SCALE"));
    let env = env_on(net.clone()).await;
    // The gateways' own ports hold their portFixedIPs (a next hop must be a gateway port of
    // the operator's project); removed with the fabric at the end.
    for g in 0..50 {
        env.port_at_ip(
            &format!("10.254.0.{}", 200 + g),
            &format!("gateway-pod-{g}"),
        )
        .await;
    }
    let mut routers = vec![];
    for i in 0..LINKS {
        routers.push(env.router(&format!("bin{i}")).await.id);
    }
    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    // Gateway LISTs the apiserver served; under the lock only this test's operator sends them.
    let plurals: Vec<&str> = GATEWAY_KINDS.iter().map(|(_, p)| *p).collect();
    let gateway_lists = async || apiserver_requests(&client, "LIST", &plurals).await;
    let lists_before = gateway_lists().await;
    let op = OperatorCommand::new(env!("CARGO_BIN_EXE_bnerd-vpn-operator"))
        .lab(
            &kubeconfig,
            &lab,
            &env.fabric.gateway_router_id,
            &env.fabric.transit_network_id,
            "5m",
        )
        .lab_user(&lab, "SCALE")
        .env("RUST_LOG", "warn,bnerd_vpn_operator=info")
        .spawn();
    let pid = op.pid().expect("pid");
    let addr = op.served_address().await;
    // Ready waits for the gateway index, so the watches' initial lists are done.
    wait_for("operator ready", 120, async || {
        (http_get(&addr, "/readyz").await.0 == 200).then_some(())
    })
    .await;
    let lists_ready = gateway_lists().await;

    let gws: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &bnerd_vpn_operator::gateways::resource("IPsecGateway", "ipsecgateways"),
    );
    let prefix = unique("egw");
    for g in 0..GATEWAYS {
        gws.create(
            &PostParams::default(),
            &gateway(&format!("{prefix}-{g}"), g, g < WITH_REVERSE),
        )
        .await
        .expect("gateway");
    }
    let links: Api<ClusterLink> = Api::all(client.clone());
    let names: Vec<String> = (0..LINKS).map(|i| format!("{prefix}-l{i}")).collect();
    let started = Instant::now();
    for (i, (name, r)) in names.iter().zip(&routers).enumerate() {
        links
            .create(
                &PostParams::default(),
                &test_link(
                    name,
                    json!({"serviceClusterRouter": r, "serviceClusterCIDR": format!("10.{}.0.0/16", 100 + i)}),
                ),
            )
            .await
            .expect("link");
    }
    let mine = ListParams::default().labels(&format!("{TEST_LABEL}=true"));
    let all_ready = async |want_reverse: usize| {
        wait_for("every link Ready", 600, async || {
            let l = links.list(&mine).await.ok()?;
            let ours: Vec<&ClusterLink> = l
                .iter()
                .filter(|l| l.metadata.name.as_ref().is_some_and(|n| names.contains(n)))
                .collect();
            (ours.len() == LINKS
                && ours
                    .iter()
                    .all(|l| is_ready(l) && reverse_count(l) == want_reverse))
            .then_some(())
        })
        .await;
    };
    all_ready(WITH_REVERSE).await;
    let converge = started.elapsed();
    let lists_converged = gateway_lists().await;

    // Idle: converged, nothing changes; the next resync is minutes away.
    tokio::time::sleep(Duration::from_secs(5)).await;
    let (_, _, c0) = proc_stats(pid);
    tokio::time::sleep(Duration::from_secs(30)).await;
    let (rss, hwm, c1) = proc_stats(pid);
    let idle = c1.saturating_sub(c0);

    // One gateway gains reverse exposures: every link's router gets one route.
    let before = neutron_requests(&addr).await;
    let started = Instant::now();
    gws.patch(
        &format!("{prefix}-{WITH_REVERSE}"),
        &PatchParams::apply("e2e").force(),
        &Patch::Apply(&gateway(
            &format!("{prefix}-{WITH_REVERSE}"),
            WITH_REVERSE,
            true,
        )),
    )
    .await
    .expect("gateway change");
    all_ready(WITH_REVERSE + 1).await;
    let change = started.elapsed();
    let after = neutron_requests(&addr).await;
    let (reads, writes) = (after.reads - before.reads, after.writes - before.writes);
    let failed_writes: Vec<String> = after
        .failed_writes
        .iter()
        .filter_map(|(k, n)| {
            let was = before.failed_writes.get(k).copied().unwrap_or(0);
            (*n > was).then(|| format!("{k}: {}", n - was))
        })
        .collect();
    // The drift check reads the estate every few seconds whatever else happens: its reads
    // are its own (READS a check), not the change's. A check under way at the second reading
    // has sent its reads but is not counted yet.
    let checks = after.drift_checks - before.drift_checks;
    let check_reads = READS * checks;
    let change_reads = reads.saturating_sub(check_reads);
    let lists_changed = gateway_lists().await;
    let lists = (
        lists_ready.saturating_sub(lists_before),
        lists_converged.saturating_sub(lists_ready),
        lists_changed.saturating_sub(lists_converged),
    );

    println!(
        "real binary, {LINKS} links + {GATEWAYS} gateways ({WITH_REVERSE} with reverse exposures) on the labs: converged in {converge:?}; RSS {} MiB (peak {} MiB); idle CPU {idle:?} over 30 s ({:.2}%); one gateway change: {change_reads} Neutron reads ({reads} with the {checks} drift checks' meanwhile), {writes} writes answered 2xx (attempts that were not: {failed_writes:?}), all links converged in {change:?}; apiserver gateway LISTs: {} at start, {} while {LINKS} links converged, {} during the gateway change",
        rss / 1024,
        hwm / 1024,
        idle.as_secs_f64() / 30.0 * 100.0,
        lists.0,
        lists.1,
        lists.2,
    );
    let rss_ok = rss < 64 * 1024;
    // The CPU time is the operator's own (it converged 50 links: not zero), and idle is idle.
    let cpu_ok = c0 > Duration::ZERO && idle <= Duration::from_millis(300);
    // The count is real (the start's lists are seen) and no reconcile lists gateways.
    let lists_ok = lists.0 >= 1 && lists.1 == 0 && lists.2 == 0;
    let budget_ok = writes == LINKS as u64 && change_reads <= LINKS as u64 + READS;

    // Delete everything while the operator still runs (it unwinds), then the fabric.
    for name in &names {
        let _ = links.delete(name, &DeleteParams::default()).await;
    }
    wait_for("links gone", 300, async || {
        let l = links.list(&mine).await.ok()?;
        (!l.iter()
            .any(|l| l.metadata.name.as_ref().is_some_and(|n| names.contains(n))))
        .then_some(())
    })
    .await;
    for g in 0..GATEWAYS {
        let _ = gws
            .delete(&format!("{prefix}-{g}"), &DeleteParams::default())
            .await;
    }
    op.stop().await;
    let left = net
        .list_ports(&PortQuery {
            network_id: Some(env.fabric.transit_network_id.clone()),
            ..Default::default()
        })
        .await
        .unwrap_or_default();
    let (gateway_pods, left): (Vec<_>, Vec<_>) = left
        .into_iter()
        .partition(|p| p.name.starts_with("gateway-pod-"));
    for p in &gateway_pods {
        let _ = net.delete_port(&p.id).await;
    }
    for p in &left {
        let _ = net.remove_router_interface(&p.device_id, &p.id).await;
    }
    for r in routers.iter().chain([&env.fabric.gateway_router_id]) {
        let _ = net.delete_router(r).await;
    }
    let _ = net.delete_network(&env.fabric.transit_network_id).await;
    assert_eq!(
        left.len(),
        1,
        "only the gateway router's leg is left: {left:?}"
    );
    assert!(rss_ok, "RSS {} KiB over 64 MiB", rss);
    assert!(
        cpu_ok,
        "operator CPU time {c0:?} after converging, {idle:?} idle over 30 s (target ≤ 1 %)"
    );
    assert!(
        lists_ok,
        "apiserver gateway LISTs (start, converge, change): {lists:?}; want ≥ 1, 0, 0"
    );
    assert!(
        budget_ok,
        "gateway change: {change_reads} reads ({reads} with {checks} drift checks), {writes} writes answered 2xx for {LINKS} links (attempts that were not: {failed_writes:?})"
    );
}
