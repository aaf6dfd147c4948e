//! The builder switches that model how clouds differ: hidden extensions and the route quota.

use bnerd_cloud::{CreatePort, Neutron, Result, Route, Router};
use bnerd_cloud_fake::{FakeCloud, FakeNeutron};

fn obs<T>(r: Result<T>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) => format!(
            "{} {}",
            e.status().unwrap_or_default(),
            e.kind().unwrap_or("-")
        ),
    }
}

/// A router with an interface on 10.254.0.0/24 (at .1), so .0/24 nexthops are connected.
async fn fabric(cloud: &FakeCloud) -> (FakeNeutron, Router, String) {
    let op = cloud.client("operator");
    let net = op.create_network("transit").await.unwrap();
    let sub = op
        .create_subnet(&net.id, "10.254.0.0/24", "10.254.0.1")
        .await
        .unwrap();
    let router = op.create_router("gw").await.unwrap();
    op.add_router_subnet(&router.id, &sub.id).await.unwrap();
    (op, router, net.id)
}

fn routes(n: usize) -> Vec<Route> {
    (0..n)
        .map(|i| Route::new(format!("172.16.{i}.0/24"), "10.254.0.20"))
        .collect()
}

#[tokio::test]
async fn every_extension_is_listed_by_default() {
    let (op, _, _) = fabric(&FakeCloud::new()).await;
    let ext = op.extensions().await.unwrap();
    for alias in [
        "extraroute-atomic",
        "revision-if-match",
        "standard-attr-tag",
    ] {
        assert!(
            ext.iter().any(|e| e == alias),
            "{alias} missing from {ext:?}"
        );
    }
}

#[tokio::test]
async fn without_extraroute_atomic_its_actions_are_unknown_urls() {
    let cloud = FakeCloud::new().without_extension("extraroute-atomic");
    let (op, router, _) = fabric(&cloud).await;
    let ext = op.extensions().await.unwrap();
    assert!(!ext.iter().any(|e| e == "extraroute-atomic"), "{ext:?}");
    assert!(ext.iter().any(|e| e == "extraroute"), "{ext:?}");
    let r = routes(1);
    assert_eq!(
        obs(op.add_extraroutes(&router.id, &r).await),
        "404 HTTPNotFound"
    );
    assert_eq!(
        obs(op.remove_extraroutes(&router.id, &r).await),
        "404 HTTPNotFound"
    );
    // The URL is unknown whatever the router: no RouterNotFound.
    assert_eq!(
        obs(op.add_extraroutes("no-such-router", &r).await),
        "404 HTTPNotFound"
    );
    // The whole-table PUT is plain `extraroute` and still works.
    let rev = op.get_router(&router.id).await.unwrap().revision_number;
    assert_eq!(obs(op.set_routes(&router.id, &r, Some(rev)).await), "ok");
    assert_eq!(cloud.router(&router.id).unwrap().routes, r);
}

#[tokio::test]
async fn without_revision_if_match_a_guarded_put_is_refused() {
    let cloud = FakeCloud::new().without_extension("revision-if-match");
    let (op, router, _) = fabric(&cloud).await;
    let ext = op.extensions().await.unwrap();
    assert!(!ext.iter().any(|e| e == "revision-if-match"), "{ext:?}");
    let rev = op.get_router(&router.id).await.unwrap().revision_number;
    let err = op
        .set_routes(&router.id, &routes(1), Some(rev))
        .await
        .unwrap_err();
    assert_eq!(
        (err.status(), err.kind()),
        (Some(400), Some("BadRequest")),
        "{err}"
    );
    assert!(err.to_string().contains("Bad if-match request"), "{err}");
    assert!(cloud.router(&router.id).unwrap().routes.is_empty());
    assert_eq!(obs(op.set_routes(&router.id, &routes(1), None).await), "ok");
}

#[tokio::test]
async fn a_hidden_tags_at_create_extension_drops_create_body_tags() {
    let cloud = FakeCloud::new()
        .honour_create_tags(true)
        .without_extension("tag-ports-during-bulk-creation");
    let (op, _, net) = fabric(&cloud).await;
    let ext = op.extensions().await.unwrap();
    assert!(
        !ext.iter().any(|e| e == "tag-ports-during-bulk-creation"),
        "{ext:?}"
    );
    let p = op
        .create_port(&CreatePort {
            network_id: net,
            tags: vec!["t".into()],
            ..Default::default()
        })
        .await
        .unwrap();
    assert!(p.tags.is_empty(), "{:?}", p.tags);
}

#[tokio::test]
async fn route_quota_defaults_to_30() {
    let (op, router, _) = fabric(&FakeCloud::new()).await;
    assert_eq!(obs(op.add_extraroutes(&router.id, &routes(30)).await), "ok");
    assert_eq!(
        obs(op.add_extraroutes(&router.id, &routes(31)).await),
        "409 OverQuota"
    );
    assert_eq!(
        obs(op.set_routes(&router.id, &routes(31), None).await),
        "409 OverQuota"
    );
}

#[tokio::test]
async fn route_quota_can_be_raised() {
    let (op, router, _) = fabric(&FakeCloud::new().max_routes(40)).await;
    assert_eq!(obs(op.add_extraroutes(&router.id, &routes(40)).await), "ok");
    assert_eq!(
        obs(op.add_extraroutes(&router.id, &routes(41)).await),
        "409 OverQuota"
    );
    assert_eq!(
        obs(op.set_routes(&router.id, &routes(41), None).await),
        "409 OverQuota"
    );
    assert_eq!(
        obs(op.set_routes(&router.id, &routes(35), None).await),
        "ok"
    );
}

/// The evidence of overlapping route writes (which ML2/OVN mis-applies, docs/design.md, "How
/// Neutron backends differ"): two writes on one router under way at once are recorded, one
/// after the other and writes on two routers at once are not.
#[tokio::test]
async fn overlapping_route_writes_on_one_router_are_recorded() {
    use bnerd_cloud_fake::{Fault, Op};
    use std::time::Duration;
    let cloud = FakeCloud::new();
    let (op, router, _) = fabric(&cloud).await;
    let other = op.create_router("other").await.unwrap();
    let slow = || Fault::Latency(Duration::from_millis(30));
    let (a, b) = (routes(2)[..1].to_vec(), routes(2)[1..].to_vec());

    // In turn: nothing recorded.
    op.add_extraroutes(&router.id, &a).await.unwrap();
    op.remove_extraroutes(&router.id, &a).await.unwrap();
    // Two routers at once: nothing recorded.
    cloud.inject(Op::AddExtraroutes, slow(), 1);
    let (x, y) = tokio::join!(
        op.add_extraroutes(&router.id, &a),
        op.set_routes(&other.id, &[], None)
    );
    x.unwrap();
    y.unwrap();
    assert_eq!(cloud.overlapping_route_writes(), Vec::<String>::new());

    // One router, an add while a remove is under way: recorded.
    cloud.inject(Op::RemoveExtraroutes, slow(), 1);
    let (x, y) = tokio::join!(
        op.remove_extraroutes(&router.id, &a),
        op.add_extraroutes(&router.id, &b)
    );
    x.unwrap();
    y.unwrap();
    assert_eq!(cloud.overlapping_route_writes(), vec![router.id.clone()]);
}
