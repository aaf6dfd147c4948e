//! Message texts the parity table does not compare (it compares status and type), as
//! measured on the lab (Neutron 29): operators read them in conditions and events.

use bnerd_cloud::{CloudError, CreatePort, CreateRouter, Neutron};
use bnerd_cloud_fake::FakeCloud;

fn message(e: CloudError) -> String {
    match e {
        CloudError::Api { message, .. } => message,
        other => panic!("not an API error: {other}"),
    }
}

#[tokio::test]
async fn field_and_tag_limits() {
    let cloud = FakeCloud::new();
    let op = cloud.client("operator");
    let net = op.create_network("n").await.unwrap();
    op.create_subnet(&net.id, "10.254.0.0/24", "10.254.0.1")
        .await
        .unwrap();
    let long = "d".repeat(256);
    let e = op
        .create_port(&CreatePort {
            network_id: "no-such-network".into(),
            name: long.clone(),
            description: long.clone(),
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(
        message(e),
        format!("Invalid input for name. Reason: '{long}' exceeds maximum length of 255.")
    );
    let p = op
        .create_port(&CreatePort {
            network_id: net.id.clone(),
            ..Default::default()
        })
        .await
        .unwrap();
    let e = op.add_port_tag("no-such-port", &long).await.unwrap_err();
    assert_eq!(
        message(e),
        format!("Invalid input for operation: '{long}' exceeds maximum length of 255.")
    );
    let e = op
        .set_port_tags(&p.id, &["a".into(), "b".into(), "a".into(), "b".into()])
        .await
        .unwrap_err();
    assert_eq!(
        message(e),
        "Invalid input for operation: Duplicate items in the list: 'a, b'."
    );
}

#[tokio::test]
async fn router_attributes_a_member_may_not_set() {
    let cloud = FakeCloud::new();
    let op = cloud.client("operator");
    let req = |ha, distributed| CreateRouter {
        name: "r".into(),
        ha,
        distributed,
        ..Default::default()
    };
    let e = op.create_router_with(&req(Some(false), None)).await;
    assert_eq!(
        message(e.unwrap_err()),
        "(rule:create_router and rule:create_router:ha) is disallowed by policy"
    );
    let e = op.create_router_with(&req(None, Some(true))).await;
    assert_eq!(
        message(e.unwrap_err()),
        "(rule:create_router and rule:create_router:distributed) is disallowed by policy"
    );
    let e = op.create_router_with(&req(Some(true), Some(true))).await;
    assert_eq!(
        message(e.unwrap_err()),
        "((rule:create_router and rule:create_router:ha) and rule:create_router:distributed) is disallowed by policy"
    );
    let e = op
        .create_router_with(&CreateRouter {
            project_id: Some("customer".into()),
            ..req(Some(true), None)
        })
        .await;
    assert_eq!(
        message(e.unwrap_err()),
        "Specifying 'project_id' other than the authenticated project in request is not allowed for the current user."
    );
    // Its own project is fine to name.
    let own = CreateRouter {
        project_id: Some("operator".into()),
        ..req(None, None)
    };
    assert!(op.create_router_with(&own).await.is_ok());
}

#[tokio::test]
async fn invalid_routes_name_the_whole_merged_table() {
    let cloud = FakeCloud::new();
    let op = cloud.client("operator");
    let net = op.create_network("n").await.unwrap();
    let sub = op
        .create_subnet(&net.id, "10.254.0.0/24", "10.254.0.1")
        .await
        .unwrap();
    let router = op.create_router("r").await.unwrap();
    op.add_router_subnet(&router.id, &sub.id).await.unwrap();
    let kept = bnerd_cloud::Route::new("192.168.101.0/24", "10.254.0.11");
    op.add_extraroutes(&router.id, std::slice::from_ref(&kept))
        .await
        .unwrap();
    let own = bnerd_cloud::Route::new("192.168.102.0/24", "10.254.0.1");
    let e = op.add_extraroutes(&router.id, &[own]).await.unwrap_err();
    assert_eq!(
        message(e),
        "Invalid format for routes: [{'destination': '192.168.101.0/24', 'nexthop': '10.254.0.11'}, {'destination': '192.168.102.0/24', 'nexthop': '10.254.0.1'}], the nexthop is used by router"
    );
}
