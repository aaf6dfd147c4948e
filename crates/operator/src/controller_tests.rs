//! The controller's own paths against a mock apiserver (a `tower_test` service behind the kube
//! client, as kube-rs's controller-rs tests its reconciler), with the engine on the fake cloud:
//! the finalizer comes first and the same pass builds the link, a deleting link lets go of its
//! finalizer (and only its own) once unwound, a status patch answered 409 publishes nothing,
//! and a new link's Events follow the engine's `events` in order.

use std::sync::{Arc, Mutex};

use bnerd_api::names::FINALIZER;
use bnerd_api::{ClusterLink, ClusterLinkSpec};
use bnerd_cloud_fake::FakeCloud;
use clap::Parser;
use http::{Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use kube::runtime::events::{Recorder, Reporter};

use super::*;
use crate::backoff::Backoff;
use crate::config::Args;
use crate::customers::CustomerClients;
use crate::engine::resync::{Snapshots, resync_window};
use crate::gateways::TargetIndex;

/// One request the mock apiserver saw.
#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    body: serde_json::Value,
    /// The cloud's (reads, writes) when the request arrived.
    cloud_calls: (u64, u64),
}

/// A kube client whose apiserver answers a status patch with `status_code` and everything
/// else as the apiserver would (the object back, an Event created), recording every request.
fn mock_apiserver(status_code: StatusCode, cloud: &FakeCloud) -> (Client, Arc<Mutex<Vec<Seen>>>) {
    let cloud = cloud.clone();
    let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let log = seen.clone();
    tokio::spawn(async move {
        while let Some((req, send)) = handle.next_request().await {
            let method = req.method().to_string();
            let path = req.uri().path().to_string();
            let bytes = req.into_body().collect_bytes().await.unwrap_or_default();
            let body: serde_json::Value =
                serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
            log.lock().unwrap().push(Seen {
                method: method.clone(),
                path: path.clone(),
                body: body.clone(),
                cloud_calls: cloud.read_write_counts(),
            });
            let (code, answer) = if path.ends_with("/status") {
                if status_code == StatusCode::OK {
                    (StatusCode::OK, object_answer(&path, &body))
                } else {
                    (
                        status_code,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "message": "the object has been modified", "reason": "Conflict", "code": status_code.as_u16()}),
                    )
                }
            } else if path.starts_with("/apis/events.k8s.io/") {
                (StatusCode::CREATED, body.clone())
            } else {
                (StatusCode::OK, object_answer(&path, &body))
            };
            let resp = Response::builder()
                .status(code)
                .body(Body::from(serde_json::to_vec(&answer).unwrap()))
                .unwrap();
            send.send_response(resp);
        }
    });
    (Client::new(service, "default"), seen)
}

/// The link as the apiserver would return it after a patch (with the finalizer).
fn object_answer(path: &str, _body: &serde_json::Value) -> serde_json::Value {
    let name = path
        .trim_end_matches("/status")
        .rsplit('/')
        .next()
        .unwrap_or_default()
        .to_string();
    serde_json::to_value(link(&name, true)).unwrap()
}

fn link(name: &str, finalizer: bool) -> ClusterLink {
    let mut l = ClusterLink::new(
        name,
        ClusterLinkSpec {
            service_cluster_router: "svc".into(),
            service_cluster_cidr: "10.251.0.0/16".into(),
            ..Default::default()
        },
    );
    l.metadata.uid = Some("0f0f0f0f-0000-4000-8000-000000000001".into());
    l.metadata.generation = Some(1);
    l.metadata.resource_version = Some("1".into());
    if finalizer {
        l.metadata.finalizers = Some(vec![FINALIZER.to_string()]);
    }
    l
}

/// A Context on the fake cloud (a fresh fabric, a service router named `svc`) and `client`.
async fn context(client: Client, cloud: FakeCloud) -> (Arc<Context>, FakeCloud) {
    let env = bnerd_testkit::fake_env_with(cloud.clone()).await;
    env.net.create_router("svc").await.expect("router");
    let config = Config::try_from(
        Args::try_parse_from([
            "op",
            "--gateway-router-id",
            &env.fabric.gateway_router_id,
            "--transit-network-id",
            &env.fabric.transit_network_id,
        ])
        .expect("args"),
    )
    .expect("config");
    let operator_cloud = Arc::new(
        OpenStack::new(bnerd_cloud::AuthConfig {
            auth_url: "http://127.0.0.1:9/v3".into(),
            region: None,
            interface: "public".into(),
            method: bnerd_cloud::AuthMethod::ApplicationCredential {
                id: "unused".into(),
                secret: bnerd_cloud::SecretString::new(String::from("unused")),
            },
            tls: Default::default(),
        })
        .expect("client"),
    );
    let targets = TargetIndex::new();
    for (kind, _) in bnerd_api::gateway::GATEWAY_KINDS {
        targets.set(kind, Default::default());
    }
    let (links, _writer) = kube::runtime::reflector::store();
    let ctx = Context {
        recorder: Recorder::new(client.clone(), Reporter::from("bnerd-vpn-operator-test")),
        client,
        net: env.net.clone(),
        operator: OperatorIdentity {
            project_id: "operator".into(),
            auth_url: "http://127.0.0.1:9/v3".into(),
            region: None,
        },
        customers: CustomerClients::new(operator_cloud),
        fabric: env.fabric.clone(),
        snapshots: Snapshots::new(resync_window(config.resync_interval)),
        drifted: Default::default(),
        config,
        backoff: Backoff::default(),
        links,
        targets,
        metrics: Arc::new(Metrics::new()),
        gateway_warnings: Default::default(),
    };
    (Arc::new(ctx), cloud)
}

#[tokio::test]
async fn the_finalizer_comes_first_and_the_same_pass_builds_the_link() {
    let cloud = FakeCloud::new();
    let (client, seen) = mock_apiserver(StatusCode::OK, &cloud);
    let (ctx, cloud) = context(client, cloud).await;
    cloud.reset_counters();
    let done = reconcile(Arc::new(link("fin", false)), ctx).await;
    assert!(done.is_ok(), "{done:?}");
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen[0].method, "PATCH");
    assert!(
        seen[0].path.ends_with("/clusterlinks/fin"),
        "{}",
        seen[0].path
    );
    assert!(
        seen[0].body.to_string().contains(FINALIZER),
        "{}",
        seen[0].body
    );
    assert_eq!(
        seen[0].cloud_calls,
        (0, 0),
        "no cloud call before the finalizer is in place"
    );
    // The same pass goes on with the object the patch returned: the leg, its attach and the
    // gateway route, then the status (not a second round through the watch).
    let (_, writes) = cloud.read_write_counts();
    assert!(
        writes >= 3,
        "the link was built in the same pass: {writes} writes"
    );
    assert!(
        seen[1..]
            .iter()
            .any(|s| s.path.ends_with("/clusterlinks/fin/status")),
        "the status was written in the same pass: {seen:#?}"
    );
    assert!(
        !seen[1..]
            .iter()
            .any(|s| s.path.ends_with("/clusterlinks/fin")),
        "the finalizer is patched once: {seen:#?}"
    );
}

#[tokio::test]
async fn a_status_patch_refused_with_409_publishes_nothing_and_fails_the_reconcile() {
    let cloud = FakeCloud::new();
    let (client, seen) = mock_apiserver(StatusCode::CONFLICT, &cloud);
    let (ctx, _cloud) = context(client, cloud).await;
    let done = reconcile(Arc::new(link("conflict", true)), ctx).await;
    let err = done.expect_err("a refused status write fails the reconcile (it is retried)");
    assert!(
        err.to_string().contains("409") || format!("{err:?}").contains("409"),
        "{err:?}"
    );
    let seen = seen.lock().unwrap().clone();
    assert!(
        seen.iter()
            .any(|s| s.path.ends_with("/clusterlinks/conflict/status")),
        "{seen:#?}"
    );
    assert!(
        !seen
            .iter()
            .any(|s| s.path.starts_with("/apis/events.k8s.io/")),
        "no Event for a status that was not written: {seen:#?}"
    );
}

#[tokio::test]
async fn a_new_links_events_follow_the_engines_events_in_order() {
    let cloud = FakeCloud::new();
    let (client, seen) = mock_apiserver(StatusCode::OK, &cloud);
    let (ctx, _cloud) = context(client, cloud).await;
    let done = reconcile(Arc::new(link("evlink", true)), ctx).await;
    assert!(done.is_ok(), "{done:?}");
    let seen = seen.lock().unwrap().clone();
    let status = seen
        .iter()
        .position(|s| s.path.ends_with("/clusterlinks/evlink/status"))
        .expect("the status was written");
    let events: Vec<(String, String)> = seen
        .iter()
        .filter(|s| s.path.starts_with("/apis/events.k8s.io/"))
        .map(|s| {
            (
                s.body["reason"].as_str().unwrap_or_default().to_string(),
                s.body["action"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let first_event = seen
        .iter()
        .position(|s| s.path.starts_with("/apis/events.k8s.io/"))
        .expect("Events were published");
    assert!(
        status < first_event,
        "the status is written before any Event: {seen:#?}"
    );
    // The engine's own list for a new link: every condition's transition (its type as the
    // action), then the leg port it created.
    for want in [
        ("Valid", "Validated"),
        ("Attached", "LegAttached"),
        ("Installed", "RouteInstalled"),
        ("Installed", "ReverseRoutesInstalled"),
        ("Ready", "Ready"),
    ] {
        assert!(
            events.contains(&(want.0.to_string(), want.1.to_string())),
            "missing {want:?} in {events:?}"
        );
    }
    let transitions: Vec<&(String, String)> =
        events.iter().filter(|(_, a)| a != "Reconcile").collect();
    assert_eq!(transitions.len(), 5, "{events:?}");
    assert!(
        events
            .iter()
            .any(|(r, a)| r == EventReason::LegPortCreated.as_str() && a == "Reconcile"),
        "the created leg port is told: {events:?}"
    );
}

#[tokio::test]
async fn a_deleting_link_is_unwound_then_lets_go_of_its_own_finalizer_only() {
    let cloud = FakeCloud::new();
    let (client, seen) = mock_apiserver(StatusCode::OK, &cloud);
    let (ctx, cloud) = context(client, cloud).await;
    // Build it first, then delete it with another controller's finalizer before ours.
    let built = reconcile(Arc::new(link("gone", true)), ctx.clone()).await;
    assert!(built.is_ok(), "{built:?}");
    let status = seen
        .lock()
        .unwrap()
        .iter()
        .rev()
        .find(|s| s.path.ends_with("/clusterlinks/gone/status"))
        .map(|s| s.body["status"].clone())
        .expect("status written");
    let mut deleting = link("gone", false);
    deleting.metadata.finalizers = Some(vec!["other.example/keep".into(), FINALIZER.into()]);
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
    );
    deleting.status = Some(serde_json::from_value(status).expect("status"));
    seen.lock().unwrap().clear();
    cloud.reset_counters();
    let done = reconcile(Arc::new(deleting), ctx).await;
    assert!(done.is_ok(), "{done:?}");
    assert!(
        cloud
            .all_ports()
            .iter()
            .all(|p| p.device_owner != "network:router_interface"
                || !p.tags.iter().any(|t| t.starts_with("clusterlink-uid="))),
        "the leg is gone before the finalizer"
    );
    let seen = seen.lock().unwrap().clone();
    let release = seen
        .iter()
        .find(|s| s.method == "PATCH" && s.path.ends_with("/clusterlinks/gone"))
        .expect("the finalizer is removed");
    assert!(
        release.cloud_calls.1 >= 2,
        "the finalizer goes only after the unwind's writes (route, detach): {:?}",
        release.cloud_calls
    );
    assert_eq!(
        release.body,
        serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers/1", "value": FINALIZER},
            {"op": "remove", "path": "/metadata/finalizers/1"},
        ])
    );
}

/// A deleting `PerCustomer` link that never got a leg, the last of its project, takes the
/// customer transit it built down (no call on the customer's credential), and the controller
/// tells it: one `CustomerTransitRemoved` naming what went, then `Unwound`.
#[tokio::test]
async fn the_last_per_customer_links_delete_tells_the_customer_transit_went() {
    use bnerd_api::names::{customer_transit_name, edge_router_name};
    use bnerd_cloud::{CreatePort, NetworkQuery, ShareNetwork};

    let cloud = FakeCloud::new();
    let (client, seen) = mock_apiserver(StatusCode::OK, &cloud);
    let (ctx, _cloud) = context(client, cloud).await;
    let project = "0123456789abcdef0123456789abcdef";
    let transit = ctx.fabric.transit_network_id.clone();
    // The project's customer transit as a first reconcile builds it before the leg step.
    let net = ctx.net.as_ref();
    let anet = net
        .create_network(&customer_transit_name(&transit, project))
        .await
        .expect("network");
    let subnet = net
        .create_subnet_with(&bnerd_cloud::CreateSubnet {
            network_id: anet.id.clone(),
            cidr: "10.255.128.0/28".into(),
            gateway_ip: "10.255.128.1".into(),
            dhcp: false,
        })
        .await
        .expect("subnet");
    let edge_name = edge_router_name(&transit, project);
    let edge = net.create_router(&edge_name).await.expect("edge router");
    net.add_router_subnet(&edge.id, &subnet.id)
        .await
        .expect("interface");
    let leg = net
        .create_port(&CreatePort {
            network_id: transit.clone(),
            subnet_id: Some(ctx.fabric.transit_subnet_id.clone()),
            ip_address: Some("10.254.0.9".into()),
            name: edge_name,
            description: String::new(),
            tags: vec![],
        })
        .await
        .expect("edge leg");
    net.add_router_interface(&edge.id, &leg.id)
        .await
        .expect("attach");
    net.create_rbac_policy(&ShareNetwork {
        network_id: anet.id.clone(),
        action: bnerd_cloud::ACCESS_AS_SHARED.into(),
        target_tenant: project.into(),
    })
    .await
    .expect("share");

    let mut deleting = link("pc", true);
    deleting.spec.credentials_secret_ref = Some(bnerd_api::SecretRef {
        name: "clusterlink-pc".into(),
        namespace: ctx.config.credentials_namespace.clone(),
    });
    deleting.spec.customer_project_id = Some(project.into());
    deleting.spec.transit_isolation = Some(bnerd_api::TransitIsolation::PerCustomer);
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
    );
    deleting.status = Some(ClusterLinkStatus {
        customer_project_id: Some(project.into()),
        ..Default::default()
    });
    let done = reconcile(Arc::new(deleting), ctx.clone()).await;
    assert!(done.is_ok(), "{done:?}");

    let left = ctx
        .net
        .list_networks(&NetworkQuery {
            name: Some(anet.name.clone()),
            project_id: None,
        })
        .await
        .expect("list");
    assert!(left.is_empty(), "the customer transit went: {left:?}");
    let seen = seen.lock().unwrap().clone();
    let events: Vec<(String, String)> = seen
        .iter()
        .filter(|s| s.path.starts_with("/apis/events.k8s.io/"))
        .map(|s| {
            (
                s.body["reason"].as_str().unwrap_or_default().to_string(),
                s.body["note"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    let reasons: Vec<&str> = events.iter().map(|(r, _)| r.as_str()).collect();
    assert_eq!(
        reasons,
        vec![
            EventReason::CustomerTransitRemoved.as_str(),
            EventReason::Unwound.as_str()
        ],
        "{events:#?}"
    );
    for id in [&anet.id, &subnet.id, &edge.id, &leg.id] {
        assert!(events[0].1.contains(id.as_str()), "{id} in {}", events[0].1);
    }
}
