//! Who the fake's Neutron treats as cloud admin, and the privilege probe that tells: `admin`
//! in any letter case, or a role a customised `context_is_admin` names
//! (`FakeCloud::privileged_roles`), as measured on the lab (lab/openstack/up.sh writes
//! `context_is_admin: role:admin or role:net_operator`).

use bnerd_cloud::{Identity, Neutron, Result};
use bnerd_cloud_fake::{FakeCloud, Op};

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

async fn probe_as(cloud: &FakeCloud, roles: &[&str]) -> String {
    let (id, secret) = cloud.application_credential("customer", roles);
    obs(cloud
        .client_with_app_cred(&id, &secret)
        .probe_admin_read()
        .await)
}

#[tokio::test]
async fn the_probe_answers_as_neutron_did_on_the_lab() {
    let cloud = FakeCloud::new();
    assert_eq!(
        obs(cloud.client("customer").probe_admin_read().await),
        "403 AdminRequired"
    );
    assert_eq!(obs(cloud.admin("customer").probe_admin_read().await), "ok");
    for (roles, want) in [
        (&["member"][..], "403 AdminRequired"),
        // Neutron checks context.is_admin, not get_quota (which a project manager passes).
        (&["manager"][..], "403 AdminRequired"),
        (&["admin"][..], "ok"),
        (&["Admin"][..], "ok"),
        // Without a customised policy the custom role is nothing special.
        (&["member", "net_operator"][..], "403 AdminRequired"),
    ] {
        assert_eq!(probe_as(&cloud, roles).await, want, "{roles:?}");
    }
    assert_eq!(cloud.calls().get(&Op::ProbeAdminRead), Some(&7));
    assert_eq!(cloud.read_write_counts().1, 0, "the probe is a read");
}

#[tokio::test]
async fn a_role_the_policy_makes_admin_is_cloud_admin() {
    let cloud = FakeCloud::new().privileged_roles(&["net_operator"]);
    assert_eq!(probe_as(&cloud, &["member", "net_operator"]).await, "ok");
    assert_eq!(probe_as(&cloud, &["member", "NET_OPERATOR"]).await, "ok");
    assert_eq!(probe_as(&cloud, &["member"]).await, "403 AdminRequired");

    // Cloud admin as on the lab: it reads another project's network, a member does not.
    let net = cloud
        .client("operator")
        .create_network("transit")
        .await
        .unwrap();
    let (id, secret) = cloud.application_credential("customer", &["member", "net_operator"]);
    let netop = cloud.client_with_app_cred(&id, &secret);
    assert_eq!(obs(netop.get_network(&net.id).await), "ok");
    assert_eq!(
        obs(cloud.client("customer").get_network(&net.id).await),
        "404 NetworkNotFound"
    );
    // Its token still names only its own roles: nothing but the probe shows the privilege.
    let mut roles = netop.token_info().await.unwrap().roles;
    roles.sort();
    assert_eq!(roles, ["member", "net_operator", "reader"]);
}

#[tokio::test]
async fn an_admin_token_lists_the_roles_keystone_implies() {
    let cloud = FakeCloud::new();
    let (id, secret) = cloud.application_credential("customer", &["admin"]);
    let mut roles = cloud
        .client_with_app_cred(&id, &secret)
        .token_info()
        .await
        .unwrap()
        .roles;
    roles.sort();
    // The lab's customer-admin-ac: admin, manager, member, reader.
    assert_eq!(roles, ["admin", "manager", "member", "reader"]);
}
