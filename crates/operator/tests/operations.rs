//! The operator as a platform team runs it: two replicas with one leader, health and metrics
//! scraped from the running binary, JSON logs, a cloud that is down when the pod starts, and
//! a fabric broken by hand after startup. The real binary against the real apiserver
//! (lab/kube) and the real Keystone + Neutron lab.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bnerd_api::ClusterLink;
use bnerd_cloud::PortQuery;
use bnerd_testkit::kube_lab::kube_and_lab;
use bnerd_testkit::operator_proc::{
    OperatorCommand, OperatorProcess, event_about, http_get, is_ready, kube_lab_exclusive, sample,
    sum_of, sweep_leftovers, test_link, wait_for,
};
use bnerd_testkit::{Env, unique};
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

const LEASE_SECS: u64 = 6;

fn operator(
    kubeconfig: &str,
    lab: &BTreeMap<String, String>,
    env: &Env,
    resync: &str,
) -> OperatorCommand {
    OperatorCommand::new(env!("CARGO_BIN_EXE_bnerd-vpn-operator")).lab(
        kubeconfig,
        lab,
        &env.fabric.gateway_router_id,
        &env.fabric.transit_network_id,
        resync,
    )
}

async fn metrics_of(op: &OperatorProcess) -> String {
    let (code, body) = http_get(&op.served_address().await, "/metrics").await;
    assert_eq!(code, 200, "{body}");
    body
}

async fn create_link(api: &Api<ClusterLink>, name: &str, router: &str, cidr: &str) {
    api.create(
        &PostParams::default(),
        &test_link(
            name,
            json!({"serviceClusterRouter": router, "serviceClusterCIDR": cidr}),
        ),
    )
    .await
    .expect("create link");
}

async fn delete_and_wait(api: &Api<ClusterLink>, names: &[&str]) {
    for n in names {
        let _ = api.delete(n, &DeleteParams::default()).await;
    }
    for n in names {
        wait_for("link gone", 60, async || {
            api.get(n).await.is_err().then_some(())
        })
        .await;
    }
}

/// Everything the test needs, or None when the labs are not there (and not required).
#[tokio::test]
async fn two_replicas_one_leader_and_a_takeover() {
    let Some((client, kubeconfig, lab, env)) =
        kube_and_lab("two_replicas_one_leader_and_a_takeover").await
    else {
        return;
    };
    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    let lease = unique("e2e-lease-pair");
    let replica = |pod: &str| {
        operator(&kubeconfig, &lab, &env, "1h")
            .env("IPSEC_LEASE_NAME", &lease)
            .env("IPSEC_LEASE_DURATION", &format!("{LEASE_SECS}s"))
            .env("IPSEC_LOG_FORMAT", "json")
            // The cloud client's request lines name the link only through the reconcile's
            // span: the JSON check below needs some.
            .env("RUST_LOG", "info,bnerd_cloud=debug")
            .env("POD_NAME", pod)
            .env("POD_NAMESPACE", "default")
    };
    let a = replica("operator-a").spawn();
    a.wait_for_log("became the leader", 30).await;
    let b = replica("operator-b").spawn();
    b.wait_for_log("waiting to lead", 30).await;

    let api: Api<ClusterLink> = Api::all(client.clone());
    let first = unique("lead-a");
    let r1 = env.router("shoot--lead-a").await;
    create_link(&api, &first, &r1.id, "10.161.0.0/16").await;
    wait_for("first link Ready", 90, async || {
        api.get(&first).await.ok().filter(is_ready)
    })
    .await;

    // The reconcile writes Ready before it returns and is counted: wait for the count.
    let leader = wait_for("the leader's reconcile counted", 10, async || {
        let m = metrics_of(&a).await;
        (sum_of(&m, "bnerd_reconciles_total", &[r#"result="ok""#]) >= 1.0).then_some(m)
    })
    .await;
    assert_eq!(sample(&leader, "bnerd_leader"), Some(1.0), "{leader}");
    assert!(
        sum_of(
            &leader,
            "bnerd_openstack_requests_total",
            &[r#"service="neutron""#]
        ) > 0.0
    );
    assert_eq!(
        sample(
            &leader,
            &format!(
                r#"bnerd_clusterlink_condition{{clusterlink="{first}",type="Ready",status="True"}}"#
            )
        ),
        Some(1.0),
        "{leader}"
    );
    assert_eq!(sample(&leader, "bnerd_fabric_check_ok"), Some(1.0));

    // The standby reads the Lease and nothing else: not one OpenStack call, and it is Ready
    // (a rollout waits for it).
    let standby = metrics_of(&b).await;
    assert_eq!(sample(&standby, "bnerd_leader"), Some(0.0), "{standby}");
    assert_eq!(
        sum_of(&standby, "bnerd_openstack_requests_total", &[]),
        0.0,
        "{standby}"
    );
    assert_eq!(sum_of(&standby, "bnerd_reconciles_total", &[]), 0.0);
    let addr_b = b.served_address().await;
    assert_eq!(http_get(&addr_b, "/readyz").await.0, 200);
    assert_eq!(http_get(&addr_b, "/healthz").await.0, 200);
    assert_eq!(http_get(&a.served_address().await, "/readyz").await.0, 200);

    // JSON logs: each line about the link names it in the `clusterlink` field; no colour.
    let log_a = a.log_so_far();
    let about: Vec<&str> = log_a.lines().filter(|l| l.contains(&first)).collect();
    assert!(!about.is_empty(), "{log_a}");
    for l in &about {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"));
        // Top level on every line, also those the reconcile's span alone names the link on
        // (the cloud client's): a collector query on `clusterlink` must miss none.
        assert_eq!(v["clusterlink"].as_str(), Some(first.as_str()), "{l}");
    }
    assert!(!log_a.contains('\u{1b}'), "ANSI codes in a log file");

    // kill -9 the leader: the standby takes over once the Lease runs out and converges a new
    // link on its own.
    let killed = Instant::now();
    let _ = a.kill9().await;
    let second = unique("lead-b");
    let r2 = env.router("shoot--lead-b").await;
    create_link(&api, &second, &r2.id, "10.162.0.0/16").await;
    wait_for("second link Ready under the new leader", 60, async || {
        api.get(&second).await.ok().filter(is_ready)
    })
    .await;
    let took = killed.elapsed();
    println!(
        "takeover: second link Ready {:.1} s after kill -9 of the leader (lease {LEASE_SECS} s)",
        took.as_secs_f64()
    );
    assert!(
        took < Duration::from_secs(LEASE_SECS + 20),
        "takeover took {took:?}"
    );
    b.wait_for_log("became the leader", 5).await;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let held = leases.get(&lease).await.expect("lease");
    assert_eq!(
        held.spec.and_then(|s| s.holder_identity).as_deref(),
        Some("operator-b")
    );

    delete_and_wait(&api, &[&first, &second]).await;
    assert!(env.gateway_routes().await.is_empty());
    assert_eq!(env.leg_ports().await, vec![], "leg ports left behind");

    // SIGTERM: a graceful stop releases the Lease at once.
    let (status, log_b) = b.terminate(20).await;
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{log_b}");
    assert!(log_b.contains("released the leader Lease"), "{log_b}");
    let after = leases.get(&lease).await.expect("lease");
    assert_eq!(
        after
            .spec
            .and_then(|s| s.holder_identity)
            .filter(|h| !h.is_empty()),
        None
    );
    env.teardown(&[]).await;
}

#[tokio::test]
async fn a_leader_that_loses_its_lease_stops() {
    let Some((client, kubeconfig, lab, env)) =
        kube_and_lab("a_leader_that_loses_its_lease_stops").await
    else {
        return;
    };
    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    let lease = unique("e2e-lease-lost");
    let mut op = operator(&kubeconfig, &lab, &env, "1h")
        .env("IPSEC_LEASE_NAME", &lease)
        .env("IPSEC_LEASE_DURATION", &format!("{LEASE_SECS}s"))
        .spawn();
    op.wait_for_log("became the leader", 30).await;
    assert!(op.running());
    // Someone else takes the Lease (a replica that believes the old one expired).
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    );
    let steal = json!({"spec": {"holderIdentity": "intruder", "leaseDurationSeconds": 60,
        "acquireTime": now, "renewTime": now}});
    leases
        .patch(&lease, &PatchParams::default(), &Patch::Merge(&steal))
        .await
        .expect("steal the lease");
    let stolen = Instant::now();
    let (status, log) = op.exited(LEASE_SECS * 2).await;
    println!(
        "a leader whose Lease was taken stopped {:.1} s later",
        stolen.elapsed().as_secs_f64()
    );
    assert_eq!(status.and_then(|s| s.code()), Some(1), "{log}");
    assert!(log.contains("lost the leader Lease"), "{log}");
    let _ = leases.delete(&lease, &DeleteParams::default()).await;
    env.teardown(&[]).await;
}

/// Keystone is down when the pod starts: the operator stays up, says why it is not ready,
/// and reconciles as soon as Keystone answers.
#[tokio::test]
async fn a_cloud_down_at_startup_is_waited_for() {
    let Some((client, kubeconfig, lab, env)) =
        kube_and_lab("a_cloud_down_at_startup_is_waited_for").await
    else {
        return;
    };
    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    // A loopback port in front of Keystone that refuses connections until the test opens it.
    let keystone = lab.get("OS_AUTH_URL").cloned().expect("OS_AUTH_URL");
    let upstream = keystone
        .trim_start_matches("http://")
        .split('/')
        .next()
        .expect("host:port")
        .to_string();
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("free port");
        l.local_addr().expect("addr").port()
    };
    let front = keystone.replacen(&upstream, &format!("127.0.0.1:{port}"), 1);
    let op = operator(&kubeconfig, &lab, &env, "1h")
        .env("OS_AUTH_URL", &front)
        .spawn();
    let addr = op.served_address().await;
    op.wait_for_log("startup check failed", 30).await;
    let (code, why) = http_get(&addr, "/readyz").await;
    assert_eq!(code, 503, "{why}");
    assert!(why.contains("OpenStack not reachable"), "{why}");
    // Keystone is what is down: the reason names it, not the transit network setting.
    assert!(
        why.contains("Keystone, for the operator's own token")
            && !why.contains("IPSEC_TRANSIT_NETWORK_ID"),
        "{why}"
    );
    assert_eq!(http_get(&addr, "/healthz").await.0, 200);
    let m = metrics_of(&op).await;
    assert_eq!(sample(&m, "bnerd_fabric_check_ok"), Some(0.0), "{m}");
    assert!(
        sum_of(
            &m,
            "bnerd_openstack_requests_total",
            &[r#"service="keystone""#, r#"code="error""#]
        ) >= 1.0,
        "{m}"
    );

    // Keystone comes back.
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .expect("bind the front port again");
    let forward = tokio::spawn(async move {
        loop {
            let Ok((mut inbound, _)) = listener.accept().await else {
                return;
            };
            let upstream = upstream.clone();
            tokio::spawn(async move {
                if let Ok(mut out) = tokio::net::TcpStream::connect(&upstream).await {
                    let _ = tokio::io::copy_bidirectional(&mut inbound, &mut out).await;
                }
            });
        }
    });
    wait_for("ready once Keystone answers", 90, async || {
        (http_get(&addr, "/readyz").await.0 == 200).then_some(())
    })
    .await;
    let api: Api<ClusterLink> = Api::all(client.clone());
    let name = unique("blip");
    let r = env.router("shoot--blip").await;
    create_link(&api, &name, &r.id, "10.163.0.0/16").await;
    wait_for("Ready after the blip", 90, async || {
        api.get(&name).await.ok().filter(is_ready)
    })
    .await;
    delete_and_wait(&api, &[&name]).await;
    assert_eq!(env.leg_ports().await, vec![], "leg ports left behind");
    let (status, log) = op.terminate(20).await;
    assert_eq!(status.and_then(|s| s.code()), Some(0), "{log}");
    forward.abort();
    env.teardown(&[]).await;
}

/// The fabric checks run again at every resync: the gateway router's transit leg removed by
/// hand is a Warning Event on the operator's pod and `bnerd_fabric_check_ok 0`; put back, a
/// Normal Event and 1.
#[tokio::test]
async fn a_fabric_broken_later_is_reported() {
    let Some((client, kubeconfig, lab, env)) =
        kube_and_lab("a_fabric_broken_later_is_reported").await
    else {
        return;
    };
    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    let pod = unique("operator-fabric");
    // No real Pod behind it: the Events API takes any uid, and the test checks it is carried.
    let pod_uid = format!("{pod}-uid");
    let op = operator(&kubeconfig, &lab, &env, "2s")
        .env("POD_NAME", &pod)
        .env("POD_NAMESPACE", "default")
        .env("POD_UID", &pod_uid)
        .spawn();
    op.wait_for_log("fabric checked", 60).await;
    let gw = &env.fabric.gateway_router_id;
    let leg = env
        .net
        .list_ports(&PortQuery {
            device_ids: vec![gw.clone()],
            network_id: Some(env.fabric.transit_network_id.clone()),
            ..Default::default()
        })
        .await
        .expect("gateway ports");
    let leg = leg.first().expect("the gateway router's transit leg");
    env.net
        .remove_router_interface(gw, &leg.id)
        .await
        .expect("remove the gateway leg");

    let about_pod = async |reason: &str| event_about(&client, "default", &pod, reason).await;
    let failed = wait_for("FabricCheckFailed event", 30, async || {
        about_pod("FabricCheckFailed").await
    })
    .await;
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    // `kubectl describe pod` finds the pod's Events by uid: without it they never show.
    assert_eq!(
        failed.regarding.as_ref().and_then(|r| r.uid.as_deref()),
        Some(pod_uid.as_str())
    );
    let note = failed.note.unwrap_or_default();
    assert!(
        note.contains("has no interface on the transit network"),
        "{note}"
    );
    let m = metrics_of(&op).await;
    assert_eq!(sample(&m, "bnerd_fabric_check_ok"), Some(0.0), "{m}");
    // A fabric set up wrong is not an unreachable cloud: the operator stays ready.
    assert_eq!(http_get(&op.served_address().await, "/readyz").await.0, 200);

    env.net
        .add_router_subnet(gw, &env.fabric.transit_subnet_id)
        .await
        .expect("put the gateway leg back");
    let passed = wait_for("FabricCheckPassed event", 30, async || {
        about_pod("FabricCheckPassed").await
    })
    .await;
    assert_eq!(
        passed.regarding.as_ref().and_then(|r| r.uid.as_deref()),
        Some(pod_uid.as_str())
    );
    assert_eq!(
        sample(&metrics_of(&op).await, "bnerd_fabric_check_ok"),
        Some(1.0)
    );
    let log = op.stop().await;
    let warned = log.matches("FabricCheckFailed").count();
    assert_eq!(warned, 1, "one warning per change, not per check: {log}");
    env.teardown(&[]).await;
}
