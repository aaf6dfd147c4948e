//! kubectl-clusterlink against the fake and the real lab: what `doctor` finds and what
//! `decommission-share` removes, and the binary's refusals.

#[path = "../../operator/tests/common/mod.rs"]
mod common;

use bnerd_cloud::{ACCESS_AS_SHARED, Route, ShareNetwork};
use bnerd_clusterlink_cli::doctor::{Finding, diagnose};
use bnerd_clusterlink_cli::share::{ShareError, decommission_share};
use common::{Env, spec, unique};

async fn findings(env: &Env) -> Vec<Finding> {
    diagnose(
        env.net.as_ref(),
        &env.fabric.transit_network_id,
        &env.fabric.gateway_router_id,
        &env.links,
    )
    .await
    .expect("diagnose")
}

fn problems(f: &[Finding]) -> Vec<String> {
    f.iter()
        .filter(|f| f.problem)
        .map(|f| f.text.clone())
        .collect()
}

async fn doctor_finds_what_is_wrong(mut env: Env) {
    let a = env.router("doc-a").await;
    env.add_link("healthy", spec(&a.id, "10.71.0.0/16", None));
    env.reconcile("healthy").await;
    let f = findings(&env).await;
    assert!(problems(&f).is_empty(), "{f:?}");
    assert!(
        f.iter()
            .any(|f| f.text.starts_with("ClusterLink healthy: Ready")),
        "{f:?}"
    );

    // A link whose object vanished without its unwind (finalizer stripped by hand).
    let b = env.router("doc-b").await;
    env.add_link("gone", spec(&b.id, "10.72.0.0/16", None));
    env.reconcile("gone").await;
    let gone_port = env.leg_port_id("gone");
    env.links
        .retain(|l| l.metadata.name.as_deref() != Some("gone"));
    // A route to an address nobody holds, and a hand-made one via an untagged port.
    let gw = env.fabric.gateway_router_id.clone();
    let dead = Route::new("10.73.0.0/16", "10.254.0.200");
    env.net
        .add_extraroutes(&gw, std::slice::from_ref(&dead))
        .await
        .unwrap();
    let hand = env.port_at_ip("10.254.0.201", &unique("hand")).await;
    let manual = Route::new("10.74.0.0/16", "10.254.0.201");
    env.net
        .add_extraroutes(&gw, std::slice::from_ref(&manual))
        .await
        .unwrap();
    env.add_link("broken", spec(&a.id, "10.75.0.1/16", None));
    env.reconcile("broken").await;

    let f = findings(&env).await;
    let p = problems(&f);
    assert_eq!(p.len(), 4, "{p:#?}");
    assert!(
        p.iter().any(|t| t.contains(&gone_port)
            && t.contains("ClusterLink gone, which no longer exists")
            && t.contains(&format!(
                "openstack router remove port {} {gone_port}",
                b.id
            ))),
        "{p:#?}"
    );
    assert!(
        p.iter()
            .any(|t| t.contains("route 10.72.0.0/16 via 10.254.0.4")
                && t.contains(&gone_port)
                && t.contains("remove the route first")),
        "{p:#?}"
    );
    assert!(
        p.iter()
            .any(|t| t.contains("route 10.73.0.0/16 via 10.254.0.200: no port holds")),
        "{p:#?}"
    );
    assert!(
        p.iter()
            .any(|t| t.starts_with("ClusterLink broken: not Ready, Validated=False InvalidSpec")),
        "{p:#?}"
    );
    assert!(
        f.iter().any(|f| !f.problem
            && f.text.contains("10.74.0.0/16 via 10.254.0.201")
            && f.text.contains("hand-made")),
        "{f:?}"
    );

    // Following the hints makes the cloud problems go away.
    env.net
        .remove_extraroutes(
            &gw,
            &[dead, manual, Route::new("10.72.0.0/16", "10.254.0.4")],
        )
        .await
        .unwrap();
    env.net
        .remove_router_interface(&b.id, &gone_port)
        .await
        .unwrap();
    env.net.delete_port(&hand.id).await.unwrap();
    env.delete("broken").await;
    let f = findings(&env).await;
    assert!(problems(&f).is_empty(), "{f:#?}");
    env.delete("healthy").await;
}
both!(doctor_finds_what_is_wrong);

async fn share_goes_only_when_no_link_needs_it(mut env: Env) {
    let project = format!("{:032x}", 0xdecu128 << 64 | std::process::id() as u128);
    let net_id = env.fabric.transit_network_id.clone();
    env.net
        .create_rbac_policy(&ShareNetwork {
            network_id: net_id.clone(),
            action: ACCESS_AS_SHARED.into(),
            target_tenant: project.clone(),
        })
        .await
        .expect("share");
    let mut pinned = spec("r", "10.76.0.0/16", None);
    pinned.customer_project_id = Some(project.clone());
    env.add_link("pinned", pinned);
    match decommission_share(env.net.as_ref(), &net_id, &project, &env.links, true).await {
        Err(ShareError::StillNeeded { links, .. }) => assert_eq!(links, vec!["pinned"]),
        other => panic!("expected a refusal, got {other:?}"),
    }
    env.links.clear();

    let dry = decommission_share(env.net.as_ref(), &net_id, &project, &[], false)
        .await
        .expect("dry run");
    assert_eq!(dry.len(), 1);
    assert_eq!(env.net.list_rbac_policies(&net_id).await.unwrap().len(), 1);
    let done = decommission_share(env.net.as_ref(), &net_id, &project, &[], true)
        .await
        .expect("delete");
    assert_eq!(done, dry);
    assert!(
        env.net
            .list_rbac_policies(&net_id)
            .await
            .unwrap()
            .is_empty()
    );
    let again = decommission_share(env.net.as_ref(), &net_id, &project, &[], true)
        .await
        .expect("nothing left");
    assert!(again.is_empty());
}
both!(share_goes_only_when_no_link_needs_it);

#[test]
fn binary_names_a_missing_setting() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-clusterlink"))
        .arg("doctor")
        .env_clear()
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("IPSEC_TRANSIT_NETWORK_ID (--transit-network-id) is not set"),
        "{err}"
    );
}

/// The binary end to end: real apiserver for the links, real lab for the cloud.
#[tokio::test]
async fn doctor_binary_reports_an_orphan_leg() {
    let test = "doctor_binary_reports_an_orphan_leg";
    let kubeconfig = std::env::var("BNERD_KUBECONFIG").unwrap_or_else(|_| {
        format!(
            "{}/.cache/bnerd-vpn-operator/kubelab-run/kubeconfig",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    if !std::path::Path::new(&kubeconfig).exists() {
        if std::env::var("BNERD_REQUIRE_KUBE").is_ok_and(|v| v == "1") {
            panic!("{test}: BNERD_REQUIRE_KUBE=1 but no kubeconfig; run lab/kube/up.sh");
        }
        eprintln!("SKIPPED {test}: no kube-apiserver lab");
        return;
    }
    let Some(lab) = common::lab_or_skip(test) else {
        return;
    };
    let env = common::lab_env_for(test).await.expect("lab");
    let orphan = env.port_at_ip("10.254.0.9", "clusterlink-long-gone").await;
    env.net
        .set_port_tags(
            &orphan.id,
            &[
                "bnerd-vpn-operator".into(),
                "clusterlink-uid=00000000-dead-4000-8000-000000000000".into(),
                "clusterlink=long-gone".into(),
            ],
        )
        .await
        .unwrap();
    let g = |k: &str| lab.get(k).cloned().unwrap_or_default();
    let run = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-clusterlink"))
            .arg("doctor")
            .env_clear()
            .env("KUBECONFIG", &kubeconfig)
            .envs(common::operator_os_env(&lab))
            .env("IPSEC_GATEWAY_ROUTER_ID", &env.fabric.gateway_router_id)
            .env("IPSEC_TRANSIT_NETWORK_ID", &env.fabric.transit_network_id)
            .output()
            .expect("runs")
    };
    let out = run();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("PROBLEM port ")
            && l.contains(&orphan.id)
            && l.contains("ClusterLink long-gone, which no longer exists")
            && l.contains(&format!("openstack port delete {}", orphan.id))),
        "{stdout}"
    );
    assert!(!stdout.contains(&g("LAB_OPERATOR_PASSWORD")));
    env.net.delete_port(&orphan.id).await.unwrap();
    let stdout = String::from_utf8_lossy(&run().stdout).to_string();
    assert!(!stdout.contains(&orphan.id), "{stdout}");
}
