//! The operator watches its project's capacity (docs/operations.md, "Neutron's quotas"): the
//! real binary against the real apiserver and the lab's `defaults` project, whose Neutron
//! quotas are Neutron's defaults. At 8 of 10 routers it publishes the gauges and a Warning
//! Event `QuotaNearLimit` on its Pod naming the quota and the command that raises it; at 10 of
//! 10 a `/readyz` warning line (still 200) and a new Event for the changed rows.

use bnerd_testkit::kube_lab::{install_crd, kube_client};
use bnerd_testkit::lab_defaults_env_for;
use bnerd_testkit::operator_proc::{
    OperatorCommand, event_about, http_get, kube_lab_exclusive, sample, sweep_leftovers, wait_for,
};
use bnerd_testkit::unique;

const REASON: &str = "QuotaNearLimit";
const TEST: &str = "the_operator_warns_at_80_per_cent_of_a_quota_and_says_so_at_a_full_one";

#[tokio::test]
async fn the_operator_warns_at_80_per_cent_of_a_quota_and_says_so_at_a_full_one() {
    let Some((client, kubeconfig)) = kube_client(TEST).await else {
        return;
    };
    let Some((env, _project)) = lab_defaults_env_for(TEST).await else {
        return;
    };
    let lab = bnerd_testkit::lab_env().expect("lab.env");
    install_crd(&client).await;
    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    // The gateway router and seven more: 8 of Neutron's default 10.
    for i in 0..7 {
        env.router(&format!("capacity-{i}")).await;
    }
    let pod = unique("operator-capacity");
    let op = OperatorCommand::new(env!("CARGO_BIN_EXE_bnerd-vpn-operator"))
        .lab(
            &kubeconfig,
            &lab,
            &env.fabric.gateway_router_id,
            &env.fabric.transit_network_id,
            "2s",
        )
        .lab_user(&lab, "DEFAULTS")
        .env("POD_NAME", &pod)
        .env("POD_NAMESPACE", "default")
        .env("POD_UID", &format!("{pod}-uid"))
        .spawn();
    op.wait_for_log("fabric checked", 60).await;
    let project = &lab["LAB_DEFAULTS_PROJECT_ID"];

    let event = wait_for("QuotaNearLimit event", 30, async || {
        event_about(&client, "default", &pod, REASON).await
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains(&format!(
            "router: 8 of 10 (80 %); to raise it: openstack quota set --routers <n> {project}"
        )),
        "{note}"
    );
    let addr = op.served_address().await;
    let metrics = wait_for("the capacity gauges", 30, async || {
        let (_, m) = http_get(&addr, "/metrics").await;
        sample(&m, "bnerd_capacity_used{resource=\"router\"}").map(|_| m)
    })
    .await;
    assert_eq!(
        sample(&metrics, "bnerd_capacity_used{resource=\"router\"}"),
        Some(8.0)
    );
    assert_eq!(
        sample(&metrics, "bnerd_capacity_limit{resource=\"router\"}"),
        Some(10.0)
    );
    assert_eq!(
        sample(&metrics, "bnerd_capacity_limit{resource=\"rbac_policy\"}"),
        Some(10.0)
    );
    assert_eq!(
        sample(
            &metrics,
            "bnerd_capacity_limit{resource=\"routes on the gateway router\"}"
        ),
        Some(30.0),
        "{metrics}"
    );
    let (code, ready) = http_get(&addr, "/readyz").await;
    assert_eq!(
        (code, ready.as_str()),
        (200, "ok\n"),
        "80 % is no /readyz line"
    );

    // Ten of ten: the next fabric check (every 2 s) says so in /readyz, which stays 200.
    env.router("capacity-7").await;
    env.router("capacity-8").await;
    let ready = wait_for("the /readyz warning line", 30, async || {
        let (code, body) = http_get(&addr, "/readyz").await;
        (code == 200 && body.contains("warning: a limit of the operator's project is reached"))
            .then_some(body)
    })
    .await;
    assert!(
        ready.contains(&format!(
            "router: 10 of 10 (100 %); to raise it: openstack quota set --routers <n> {project}"
        )),
        "{ready}"
    );
    let (_, metrics) = http_get(&addr, "/metrics").await;
    assert_eq!(
        sample(&metrics, "bnerd_capacity_used{resource=\"router\"}"),
        Some(10.0)
    );
    drop(op);
    env.teardown(&[]).await;
}
