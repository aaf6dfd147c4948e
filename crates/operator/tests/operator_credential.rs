//! The operator's own credential gets the privilege checks a customer credential gets (the
//! role names and the admin-only probe), at startup and at every fabric check. A privileged
//! one is not fatal: the operator runs and stays ready, and says so on its Pod (a Warning
//! Event), in `/readyz` and in a metric. The real binary against the real apiserver
//! (lab/kube) and the real Keystone + Neutron lab, once with the lab's admin user of the
//! operator project and once with its member user.

use std::collections::BTreeMap;

use bnerd_testkit::kube_lab::kube_and_lab;
use bnerd_testkit::operator_proc::{
    OperatorCommand, OperatorProcess, event_about, http_get, kube_lab_exclusive, sample, sum_of,
    sweep_leftovers, wait_for,
};
use bnerd_testkit::{Env, unique};

const REASON: &str = "OperatorCredentialPrivileged";

/// An operator on the lab's fabric as `pod`, re-checking the fabric every 2 s, with the
/// operator project's user `LAB_<who>_*`.
fn operator(
    kubeconfig: &str,
    lab: &BTreeMap<String, String>,
    env: &Env,
    who: &str,
    pod: &str,
) -> OperatorProcess {
    OperatorCommand::new(env!("CARGO_BIN_EXE_bnerd-vpn-operator"))
        .lab(
            kubeconfig,
            lab,
            &env.fabric.gateway_router_id,
            &env.fabric.transit_network_id,
            "2s",
        )
        .lab_user(lab, who)
        .env("POD_NAME", pod)
        .env("POD_NAMESPACE", "default")
        .env("POD_UID", &format!("{pod}-uid"))
        .spawn()
}

/// `/readyz` once it answers 200 (caches synced), and `/metrics` then.
async fn ready_and_metrics(op: &OperatorProcess) -> (String, String) {
    let addr = op.served_address().await;
    let ready = wait_for("/readyz 200", 90, async || {
        let (code, body) = http_get(&addr, "/readyz").await;
        (code == 200).then_some(body)
    })
    .await;
    let (code, metrics) = http_get(&addr, "/metrics").await;
    assert_eq!(code, 200, "{metrics}");
    (ready, metrics)
}

#[tokio::test]
async fn a_privileged_operator_credential_is_reported_not_fatal() {
    let Some((client, kubeconfig, lab, env)) =
        kube_and_lab("a_privileged_operator_credential_is_reported_not_fatal").await
    else {
        return;
    };
    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    // Neither reconciles anything (no link exists while the lock is held), so both can run
    // at once, each with a lease of its own.
    let admin_pod = unique("operator-admin");
    let member_pod = unique("operator-member");
    let admin = operator(&kubeconfig, &lab, &env, "OPERATOR_ADMIN", &admin_pod);
    let member = operator(&kubeconfig, &lab, &env, "OPERATOR", &member_pod);
    admin.wait_for_log("fabric checked", 60).await;
    member.wait_for_log("fabric checked", 60).await;

    // The admin user of the operator project: a Warning Event on its Pod naming the role and
    // why it matters, a /readyz line (still 200), the gauge at 1.
    let event = wait_for("OperatorCredentialPrivileged event", 30, async || {
        event_about(&client, "default", &admin_pod, REASON).await
    })
    .await;
    assert_eq!(event.type_.as_deref(), Some("Warning"));
    assert_eq!(
        event.regarding.as_ref().and_then(|r| r.uid.as_deref()),
        Some(format!("{admin_pod}-uid").as_str())
    );
    let note = event.note.unwrap_or_default();
    assert!(
        note.contains("role \"admin\"") && note.contains("every project"),
        "{note}"
    );
    let (ready, metrics) = ready_and_metrics(&admin).await;
    assert!(
        ready.starts_with("ok\n")
            && ready.contains("warning: the operator's own OpenStack credential is privileged"),
        "{ready}"
    );
    assert_eq!(
        sample(&metrics, "bnerd_operator_credential_privileged"),
        Some(1.0),
        "{metrics}"
    );

    // The member user: the names pass, Neutron refuses the probe (403): nothing to report.
    let (ready, metrics) = ready_and_metrics(&member).await;
    assert_eq!(ready, "ok\n");
    assert_eq!(
        sample(&metrics, "bnerd_operator_credential_privileged"),
        Some(0.0),
        "{metrics}"
    );
    assert_eq!(
        sample(&metrics, "bnerd_operator_credential_probe_unavailable"),
        Some(0.0),
        "the lab's Neutron answers the probe: {metrics}"
    );

    // Several fabric checks later (every 2 s): the member's probe was sent at each, the
    // admin still has one warning, the member none.
    let probes = |m: &str| {
        sum_of(
            m,
            "bnerd_openstack_requests_total",
            &["quotas/{probe}", "403"],
        )
    };
    wait_for(
        "the member's probe at two fabric re-checks",
        30,
        async || {
            let (_, m) = ready_and_metrics(&member).await;
            (probes(&m) >= 3.0).then_some(())
        },
    )
    .await;
    assert!(
        event_about(&client, "default", &member_pod, REASON)
            .await
            .is_none()
    );
    let (ready, metrics) = ready_and_metrics(&admin).await;
    assert!(ready.contains("warning:"), "{ready}");
    assert_eq!(
        sum_of(
            &metrics,
            "bnerd_openstack_requests_total",
            &["quotas/{probe}"]
        ),
        0.0,
        "the role name decides, no probe: {metrics}"
    );
    let admin_log = admin.stop().await;
    let member_log = member.stop().await;
    assert_eq!(
        admin_log.matches(REASON).count(),
        1,
        "one warning per change, not per check: {admin_log}"
    );
    assert!(!member_log.contains(REASON), "{member_log}");
    assert!(!member_log.contains("privilege probe"), "{member_log}");
    env.teardown(&[]).await;
}
