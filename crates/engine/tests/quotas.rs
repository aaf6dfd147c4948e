//! Neutron's default quotas (docs/operations.md, "Neutron's quotas"), on the fake with
//! `FakeCloud::default_quotas` and on the lab's `defaults` project (lab/openstack/
//! neutron_setup.py sets Neutron's defaults there): the 11th customer project's share, the
//! 11th edge router and the gateway router's 31st route each end in a condition naming the
//! limit and what raises it, retried with backoff, while the links already built stay Ready.
//! (The 31st route on a service router is held by `findings.rs`, on the fake and on the lab.)
//! On the lab they run in one test, one after the other: they fill the same project's quotas.

mod support;

use bnerd_api::{ClusterLink, TransitIsolation};
use bnerd_cloud::fabric::CustomerTransitPool;
use bnerd_cloud::{ACCESS_AS_SHARED, Neutron, Route, ShareNetwork};
use bnerd_cloud_fake::FakeCloud;
use bnerd_engine::Retry;
use bnerd_testkit::crash::Crash;
use bnerd_testkit::{Env, fake_env_with, lab_defaults_env_for, spec, unique};
use support::{CIDR, Stage, new_link, reconcile_with, unwind_with};

/// Fill the operator project's RBAC quota up to `used` policies (shares of a spare network with
/// projects nobody links), as an estate of that many customer projects would.
async fn shares_in_use(net: &dyn Neutron, used: usize) -> String {
    let spare = net.create_network(&unique("spare")).await.unwrap();
    for i in 0..used {
        net.create_rbac_policy(&ShareNetwork {
            network_id: spare.id.clone(),
            action: ACCESS_AS_SHARED.into(),
            // Neutron takes a UUID (or `*`) here, whether or not a project has it.
            target_tenant: format!("{:032x}", 0xe57a7e_u128 << 64 | i as u128),
        })
        .await
        .unwrap();
    }
    spare.id
}

fn condition(link: &ClusterLink, type_: &str) -> (String, String, String) {
    let c = link
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_}"));
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

async fn routers_used(net: &dyn Neutron, project: &str) -> u64 {
    net.quota_details(project)
        .await
        .unwrap()
        .into_iter()
        .find(|q| q.resource == "router")
        .map(|q| q.used)
        .unwrap()
}

async fn customer_ports(stage: &Stage) -> usize {
    stage
        .leg_client()
        .list_ports(&Default::default())
        .await
        .unwrap()
        .len()
}

/// A same-tenant link built first, Ready again after the refusal.
async fn same_tenant_link(stage: &mut Stage) -> String {
    let r = stage.env.router("quota-same").await;
    stage
        .env
        .add_link("quota-same", spec(&r.id, "10.77.0.0/16", None));
    stage.env.reconcile("quota-same").await;
    stage.env.assert_ready("quota-same");
    "quota-same".into()
}

async fn the_eleventh_share(env: Env) {
    let mut stage = Stage::new(env, true).await;
    let same = same_tenant_link(&mut stage).await;
    // Ten customer projects already share a network of the project: the default quota is full.
    let spare = shares_in_use(stage.env.net.as_ref(), 10).await;

    let (a, _) = stage.routers.clone();
    let ports_before = customer_ports(&stage).await;
    let mut link = new_link(&stage, spec(&a, CIDR, None));
    let out = reconcile_with(&stage, &link, &Crash::counting()).await;
    link.status = Some(out.status.clone());
    let (status, reason, message) = condition(&link, "TransitNetworkShared");
    assert_eq!(status, "False", "{message}");
    assert_eq!(reason, "EnsureNetworkSharedFailed", "{message}");
    eprintln!("NOTE TransitNetworkShared: {message}");
    assert!(
        message.contains("409 OverQuota")
            && message.contains("rbac_policy")
            && message.contains("openstack quota set --rbac-policies <n>"),
        "{message}"
    );
    assert_eq!(
        out.retry,
        Retry::Backoff,
        "retried with backoff, not at once"
    );
    // No leg was made in the customer's project for a link whose share was refused.
    assert_eq!(customer_ports(&stage).await, ports_before);
    stage.env.reconcile(&same).await;
    stage.env.assert_ready(&same);
    unwind_with(&stage, &link, &Crash::counting())
        .await
        .unwrap();
    stage.env.delete(&same).await;
    stage.env.net.delete_network(&spare).await.unwrap();
    stage.teardown().await;
}

async fn the_eleventh_edge_router(env: Env) {
    let mut env = env;
    env.fabric.customer_transit = Some(CustomerTransitPool {
        pool: "10.255.128.0/24".parse().unwrap(),
        prefix_len: 28,
    });
    let mut stage = Stage::new(env, true).await;
    let same = same_tenant_link(&mut stage).await;
    // The gateway router, the same-tenant link's router and as many more as make ten of ten.
    let project = stage.env.fabric.operator_project_id.clone();
    let used = routers_used(stage.env.net.as_ref(), &project).await;
    for i in used..10 {
        stage.env.router(&format!("estate-{i}")).await;
    }
    assert_eq!(routers_used(stage.env.net.as_ref(), &project).await, 10);
    let routers_before = stage
        .env
        .net
        .list_routers(&Default::default())
        .await
        .unwrap()
        .len();

    let (a, _) = stage.routers.clone();
    let mut s = spec(&a, CIDR, None);
    s.transit_isolation = Some(TransitIsolation::PerCustomer);
    let mut link = new_link(&stage, s);
    link.metadata.annotations = None;
    let out = reconcile_with(&stage, &link, &Crash::counting()).await;
    link.status = Some(out.status.clone());
    let failed: Vec<(String, String, String)> = out
        .status
        .conditions
        .iter()
        .filter(|c| c.status == "False" && c.type_ != "Ready")
        .map(|c| (c.type_.clone(), c.reason.clone(), c.message.clone()))
        .collect();
    assert!(
        failed.iter().any(|(_, _, m)| m.contains("409 OverQuota")
            && m.contains("['router']")
            && m.contains("openstack quota set --routers <n>")),
        "{failed:#?}"
    );
    assert_eq!(
        out.retry,
        Retry::Backoff,
        "retried with backoff, not at once"
    );
    stage.env.reconcile(&same).await;
    stage.env.assert_ready(&same);
    unwind_with(&stage, &link, &Crash::counting())
        .await
        .unwrap();
    assert_eq!(
        stage
            .env
            .net
            .list_routers(&Default::default())
            .await
            .unwrap()
            .len(),
        routers_before,
        "the refused link left no router behind"
    );
    stage.env.delete(&same).await;
    stage.teardown().await;
}

async fn the_thirty_first_gateway_route(env: Env) {
    let mut env = env;
    // 29 routes already on the gateway router (hand-made ones, or the estate's other links).
    let gw = env.fabric.gateway_router_id.clone();
    let held: Vec<Route> = (0..29)
        .map(|i| Route::new(format!("10.200.{i}.0/24"), "10.254.0.200"))
        .collect();
    env.add_routes(&gw, &held).await.unwrap();
    let (a, b) = (env.router("route-30").await, env.router("route-31").await);
    env.add_link("route-30", spec(&a.id, "10.78.0.0/16", None));
    env.reconcile("route-30").await;
    env.assert_ready("route-30");
    env.add_link("route-31", spec(&b.id, "10.79.0.0/16", None));
    let out = env.reconcile("route-31").await;
    let (status, reason, message) = env.condition("route-31", "RouteInstalled");
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "EnsureRouteFailed"),
        "{message}"
    );
    assert!(
        message.contains("409 OverQuota") && message.contains("router_route"),
        "{message}"
    );
    assert_eq!(
        out.retry,
        Retry::Backoff,
        "retried with backoff, not at once"
    );
    env.reconcile("route-30").await;
    env.assert_ready("route-30");
    env.delete("route-31").await;
    env.delete("route-30").await;
    env.remove_routes(&gw, &held).await.unwrap();
    env.teardown(&[]).await;
}

#[tokio::test]
async fn fake_the_thirty_first_gateway_route_names_the_route_quota() {
    the_thirty_first_gateway_route(fake_env_with(FakeCloud::new().default_quotas()).await).await;
}

#[tokio::test]
async fn fake_the_eleventh_customer_projects_share_names_the_rbac_quota() {
    the_eleventh_share(fake_env_with(FakeCloud::new().default_quotas()).await).await;
}

#[tokio::test]
async fn fake_the_eleventh_edge_router_names_the_router_quota() {
    the_eleventh_edge_router(fake_env_with(FakeCloud::new().default_quotas()).await).await;
}

#[tokio::test]
async fn lab_the_eleventh_share_edge_router_and_31st_route_name_their_limits() {
    const TEST: &str = "lab_the_eleventh_share_edge_router_and_31st_route_name_their_limits";
    let Some((env, lock)) = lab_defaults_env_for(TEST).await else {
        return;
    };
    the_eleventh_share(env).await;
    drop(lock);
    let Some((env, lock)) = lab_defaults_env_for(TEST).await else {
        return;
    };
    the_eleventh_edge_router(env).await;
    drop(lock);
    let Some((env, _lock)) = lab_defaults_env_for(TEST).await else {
        return;
    };
    the_thirty_first_gateway_route(env).await;
}
