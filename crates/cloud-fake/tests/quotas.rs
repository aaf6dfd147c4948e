//! The fake's project quotas (`FakeCloud::quota`, `FakeCloud::default_quotas`): a create one
//! past the limit is refused `409 OverQuota` naming the resource, as Neutron's API layer
//! refuses it before anything is made, counted against the project that owns what is created;
//! and quota details say what is used of each limit. The lab's own answer to the details call
//! is held by the parity table (crates/cloud-fake/tests/parity.rs).

use bnerd_cloud::{ACCESS_AS_SHARED, Neutron, QuotaUsage, ShareNetwork};
use bnerd_cloud_fake::{FakeCloud, NEUTRON_DEFAULT_QUOTAS};

fn refusal<T: std::fmt::Debug>(r: bnerd_cloud::Result<T>) -> String {
    let e = r.expect_err("refused");
    format!(
        "{} {} {e}",
        e.status().unwrap_or_default(),
        e.kind().unwrap_or("-")
    )
}

fn row<'a>(rows: &'a [QuotaUsage], resource: &str) -> &'a QuotaUsage {
    rows.iter()
        .find(|r| r.resource == resource)
        .unwrap_or_else(|| panic!("no {resource} in {rows:?}"))
}

#[tokio::test]
async fn the_eleventh_router_and_share_are_refused_at_the_default_quotas() {
    let cloud = FakeCloud::new().default_quotas();
    let op = cloud.client("operator");
    let net = op.create_network("transit").await.unwrap();
    for i in 0..10 {
        op.create_router(&format!("r{i}")).await.unwrap();
        op.create_rbac_policy(&ShareNetwork {
            network_id: net.id.clone(),
            action: ACCESS_AS_SHARED.into(),
            target_tenant: format!("customer{i}"),
        })
        .await
        .unwrap();
    }
    let got = refusal(op.create_router("r10").await);
    assert!(
        got.starts_with("409 OverQuota") && got.contains("['router']"),
        "{got}"
    );
    let got = refusal(
        op.create_rbac_policy(&ShareNetwork {
            network_id: net.id.clone(),
            action: ACCESS_AS_SHARED.into(),
            target_tenant: "customer10".into(),
        })
        .await,
    );
    assert!(
        got.starts_with("409 OverQuota") && got.contains("['rbac_policy']"),
        "{got}"
    );
    // Counted per owner: another project has its own ten.
    cloud
        .client("customer")
        .create_router("theirs")
        .await
        .unwrap();

    let details = op.quota_details("operator").await.unwrap();
    assert_eq!(
        (row(&details, "router").used, row(&details, "router").limit),
        (10, Some(10))
    );
    assert_eq!(row(&details, "rbac_policy").used, 10);
    assert_eq!(row(&details, "network").used, 1);
    for (resource, limit) in NEUTRON_DEFAULT_QUOTAS {
        assert_eq!(
            row(&details, resource).limit,
            Some(limit as u64),
            "{resource}"
        );
    }
    // router_route: a limit per router, its usage left at 0 as Neutron 29 leaves it.
    assert_eq!(row(&details, "router_route").used, 0);
    assert_eq!(row(&details, "router_route").limit, Some(30));
    // Another project's details are a cloud admin's to read.
    assert!(refusal(op.quota_details("customer").await).starts_with("403 AdminRequired"));
    assert!(cloud.admin("x").quota_details("customer").await.is_ok());
}

#[tokio::test]
async fn without_quotas_everything_is_unlimited_and_older_neutrons_have_no_router_route() {
    let details = FakeCloud::new()
        .client("operator")
        .quota_details("operator")
        .await
        .unwrap();
    assert!(
        details
            .iter()
            .filter(|r| r.resource != "router_route")
            .all(|r| r.limit.is_none())
    );
    let old = FakeCloud::new()
        .up_to_2026_1()
        .client("operator")
        .quota_details("operator")
        .await
        .unwrap();
    assert!(old.iter().all(|r| r.resource != "router_route"), "{old:?}");
}
