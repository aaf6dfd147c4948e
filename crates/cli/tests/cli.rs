//! kubectl-clusterlink against the fake and the real lab: what `decommission-share` removes,
//! the binary's refusals, and the binary's `doctor` on a hand-made orphan. What `doctor` finds
//! on links the engine reconciled is in cli_doctor.rs.

use bnerd_cloud::{ACCESS_AS_SHARED, ShareNetwork};
use bnerd_clusterlink_cli::share::{ShareError, decommission_share};
use bnerd_testkit::kube_lab::{install_crd, kube_and_lab, kube_client};
use bnerd_testkit::{
    Env, both, lab_env_for, lab_tls_or_skip, operator_os_env, operator_tls_os_env, spec,
};

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
    // A PerCustomer link of the same project does not hold the share back; the Shared one
    // does, and only it is named.
    let mut moved = spec("r2", "10.77.0.0/16", None);
    moved.customer_project_id = Some(project.clone());
    moved.transit_isolation = Some(bnerd_api::TransitIsolation::PerCustomer);
    env.add_link("moved", moved);
    match decommission_share(env.net.as_ref(), &net_id, &project, &env.links, true).await {
        Err(ShareError::StillNeeded { links, .. }) => assert_eq!(links, vec!["pinned"]),
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(env.net.list_rbac_policies(&net_id).await.unwrap().len(), 1);
    env.links
        .retain(|l| l.metadata.name.as_deref() == Some("moved"));

    let dry = decommission_share(env.net.as_ref(), &net_id, &project, &env.links, false)
        .await
        .expect("dry run: the project's links are all PerCustomer");
    assert_eq!(dry.policies.len(), 1);
    assert_eq!(dry.per_customer, vec!["moved"]);
    assert_eq!(env.net.list_rbac_policies(&net_id).await.unwrap().len(), 1);
    let done = decommission_share(env.net.as_ref(), &net_id, &project, &env.links, true)
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
    assert!(again.policies.is_empty() && again.per_customer.is_empty());
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

#[test]
fn binary_errors_as_json_and_usage_exits_2() {
    let bin = env!("CARGO_BIN_EXE_kubectl-clusterlink");
    let out = std::process::Command::new(bin)
        .args(["doctor", "--output", "json"])
        .env_clear()
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.contains("IPSEC_TRANSIT_NETWORK_ID")),
        "{v}"
    );
    // A usage error (clap): 2, naming the bad value.
    let out = std::process::Command::new(bin)
        .args(["doctor", "--output", "yaml"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("yaml"));
    // A transit isolation mode the spec does not have: 2, naming the value and both modes.
    let out = std::process::Command::new(bin)
        .args(["recreate", "l", "--isolation", "percustomer"])
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("\"percustomer\" is not a transit isolation mode (Shared or PerCustomer)"),
        "{err}"
    );
}

/// `recreate`'s refusals through the binary: JSON without --yes (no one to ask) is a usage
/// error, a link that does not exist is refused (exit 1) and nothing is created.
#[tokio::test]
async fn binary_recreate_refusals() {
    let bin = env!("CARGO_BIN_EXE_kubectl-clusterlink");
    let out = std::process::Command::new(bin)
        .args(["recreate", "any", "-o", "json"])
        .env_clear()
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert!(
        v["error"].as_str().is_some_and(|e| e.contains("--yes")),
        "{v}"
    );

    let Some((client, kubeconfig)) = kube_client("binary_recreate_refusals").await else {
        return;
    };
    install_crd(&client).await;
    let name = format!("no-such-link-{}", std::process::id());
    let out = std::process::Command::new(bin)
        .args(["recreate", &name, "--yes", "-o", "json"])
        .env_clear()
        .env("KUBECONFIG", &kubeconfig)
        .output()
        .expect("runs");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["recreated"], false);
    assert!(
        v["refused"]
            .as_str()
            .is_some_and(|e| e.contains(&format!("ClusterLink {name} does not exist"))),
        "{v}"
    );
    let links: kube::Api<bnerd_api::ClusterLink> = kube::Api::all(client);
    assert!(links.get_opt(&name).await.expect("read").is_none());
}

#[test]
fn binary_prints_shell_completion() {
    let bin = env!("CARGO_BIN_EXE_kubectl-clusterlink");
    for (shell, marker) in [
        ("bash", "complete"),
        ("zsh", "#compdef"),
        ("fish", "complete -c"),
    ] {
        let out = std::process::Command::new(bin)
            .args(["completion", shell])
            .env_clear()
            .output()
            .expect("runs");
        assert_eq!(out.status.code(), Some(0), "{shell}");
        let script = String::from_utf8_lossy(&out.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        for sub in ["doctor", "decommission-share", "completion", "output"] {
            assert!(script.contains(sub), "{shell} completion lacks {sub}");
        }
    }
}

/// The plugin binary with the operator's settings for `env`'s fabric on the lab.
fn plugin(
    kubeconfig: &str,
    lab: &std::collections::BTreeMap<String, String>,
    env: &Env,
    command: &str,
    args: &[&str],
) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-clusterlink"))
        .arg(command)
        .args(args)
        .env_clear()
        .env("KUBECONFIG", kubeconfig)
        .envs(operator_os_env(lab))
        .env("IPSEC_GATEWAY_ROUTER_ID", &env.fabric.gateway_router_id)
        .env("IPSEC_TRANSIT_NETWORK_ID", &env.fabric.transit_network_id)
        .output()
        .expect("runs")
}

/// `plan <name>` by the binary: exit 0 (the link would end Ready); its stdout.
fn plan_exits_0(
    kubeconfig: &str,
    lab: &std::collections::BTreeMap<String, String>,
    env: &Env,
    name: &str,
) -> String {
    let out = plugin(kubeconfig, lab, env, "plan", &[name]);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

/// The binary end to end: real apiserver for the links, real lab for the cloud.
#[tokio::test]
async fn doctor_binary_reports_an_orphan_leg() {
    let test = "doctor_binary_reports_an_orphan_leg";
    // The binary lists ClusterLinks, which needs the CRD; whether another test installed it
    // first depends on the order tests happen to run in.
    let Some((_, kubeconfig, lab, env)) = kube_and_lab(test).await else {
        return;
    };
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
    let run_with = |args: &[&str]| plugin(&kubeconfig, &lab, &env, "doctor", args);
    let run = || run_with(&[]);
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
    // The same report as one JSON document, with the same exit code.
    let out = run_with(&["--output", "json"]);
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let problems = v["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["problem"] == true)
        .filter_map(|f| f["text"].as_str())
        .collect::<Vec<_>>();
    assert!(
        problems.iter().any(|t| t.contains(&orphan.id)),
        "{problems:?}"
    );
    assert_eq!(v["problems"].as_u64(), Some(problems.len() as u64));
    env.net.delete_port(&orphan.id).await.unwrap();
    let stdout = String::from_utf8_lossy(&run().stdout).to_string();
    assert!(!stdout.contains(&orphan.id), "{stdout}");
    env.teardown(&[]).await;
}

/// The binary reads the operator's TLS settings: through the lab's HTTPS endpoint with the
/// lab CA as `OS_CACERT` it finds an orphan leg as over plain HTTP; without the CA the cloud
/// could not be checked: it names the refused certificate and what to set (exit 2, not a
/// problem found: nothing was learnt about the fabric).
#[tokio::test]
async fn doctor_binary_through_tls() {
    let test = "doctor_binary_through_tls";
    let Some((client, kubeconfig)) = kube_client(test).await else {
        return;
    };
    let Some((lab, tls)) = lab_tls_or_skip(test) else {
        return;
    };
    install_crd(&client).await;
    let env = lab_env_for(test).await.expect("lab");
    let orphan = env.port_at_ip("10.254.0.9", "clusterlink-long-gone").await;
    env.net
        .set_port_tags(
            &orphan.id,
            &[
                "bnerd-vpn-operator".into(),
                "clusterlink-uid=00000000-dead-4000-8000-000000000001".into(),
                "clusterlink=long-gone".into(),
            ],
        )
        .await
        .unwrap();
    let run = |without: Option<&str>| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-clusterlink"));
        cmd.arg("doctor")
            .env_clear()
            .env("KUBECONFIG", &kubeconfig)
            .envs(operator_tls_os_env(&lab, &tls))
            .env("IPSEC_GATEWAY_ROUTER_ID", &env.fabric.gateway_router_id)
            .env("IPSEC_TRANSIT_NETWORK_ID", &env.fabric.transit_network_id);
        if let Some(k) = without {
            cmd.env_remove(k);
        }
        cmd.output().expect("runs")
    };
    let out = run(None);
    let refused = run(Some("OS_CACERT"));
    env.net.delete_port(&orphan.id).await.unwrap();

    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout
            .lines()
            .any(|l| l.starts_with("PROBLEM port ") && l.contains(&orphan.id)),
        "{stdout}"
    );
    let err = format!(
        "{}{}",
        String::from_utf8_lossy(&refused.stdout),
        String::from_utf8_lossy(&refused.stderr)
    );
    assert_eq!(refused.status.code(), Some(2), "{err}");
    assert!(
        err.contains("UNCHECKED cloud: Keystone could not be reached")
            && err.contains("invalid peer certificate: UnknownIssuer")
            && err.contains("set OS_CACERT or clouds.yaml cacert"),
        "{err}"
    );
    env.teardown(&[]).await;
}

/// With the cloud unreachable (Keystone on a closed loopback port) `doctor` still reports
/// what Kubernetes knows, a link that is not Ready and why, says the cloud checks did not run
/// and why, naming Keystone, and exits 2 ("could not check"), as text and as JSON.
#[tokio::test]
async fn doctor_binary_reports_links_when_the_cloud_is_unreachable() {
    use bnerd_testkit::operator_proc::{kube_lab_exclusive, sweep_leftovers, test_link};
    let test = "doctor_binary_reports_links_when_the_cloud_is_unreachable";
    let Some((client, kubeconfig)) = kube_client(test).await else {
        return;
    };
    install_crd(&client).await;
    // A port nothing listens on: bound, then dropped, so connecting is refused at once.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("loopback port")
        .port();
    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    let name = bnerd_testkit::unique("doctor-offline");
    let links: kube::Api<bnerd_api::ClusterLink> = kube::Api::all(client.clone());
    links
        .create(
            &kube::api::PostParams::default(),
            &test_link(
                &name,
                serde_json::json!({"serviceClusterRouter": "r", "serviceClusterCIDR": "10.93.0.0/16"}),
            ),
        )
        .await
        .expect("create link");
    let now = "2026-01-01T00:00:00Z";
    let status = serde_json::json!({"status": {"conditions": [
        {"type": "Validated", "status": "True", "reason": "Valid", "message": "", "lastTransitionTime": now},
        {"type": "LegAttached", "status": "False", "reason": "EnsureRouterHasPortFailed",
         "message": "router r refused the leg", "lastTransitionTime": now},
        {"type": "Ready", "status": "False", "reason": "NotReady", "message": "", "lastTransitionTime": now},
    ]}});
    links
        .patch_status(
            &name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(&status),
        )
        .await
        .expect("status");
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_kubectl-clusterlink"))
            .arg("doctor")
            .args(args)
            .env_clear()
            .env("KUBECONFIG", &kubeconfig)
            .env("OS_AUTH_URL", format!("http://127.0.0.1:{closed}/v3"))
            .env("OS_USERNAME", "operator")
            .env("OS_PASSWORD", "not-a-real-password")
            .env("OS_PROJECT_NAME", "operator")
            .env("OS_USER_DOMAIN_NAME", "Default")
            .env("OS_PROJECT_DOMAIN_NAME", "Default")
            .env("IPSEC_GATEWAY_ROUTER_ID", "gateway-router")
            .env("IPSEC_TRANSIT_NETWORK_ID", "transit-network")
            .output()
            .expect("runs")
    };
    let text = run(&[]);
    let json = run(&["-o", "json"]);
    links
        .delete(&name, &kube::api::DeleteParams::default())
        .await
        .expect("delete");

    let stdout = String::from_utf8_lossy(&text.stdout);
    let stderr = String::from_utf8_lossy(&text.stderr);
    assert_eq!(text.status.code(), Some(2), "{stdout}\n{stderr}");
    assert!(
        stdout.lines().any(|l| l.starts_with("PROBLEM ")
            && l.contains(&format!("ClusterLink {name}: not Ready"))
            && l.contains("LegAttached=False EnsureRouterHasPortFailed: router r refused the leg")),
        "{stdout}"
    );
    assert!(
        stdout.lines().any(|l| l.starts_with("UNCHECKED ")
            && l.contains("could not be reached")
            && l.contains("Keystone")
            && l.contains("Connection refused")),
        "{stdout}"
    );
    assert!(stderr.contains("Keystone"), "{stderr}");
    assert!(!stdout.contains("not-a-real-password"), "{stdout}");

    assert_eq!(json.status.code(), Some(2));
    let v: serde_json::Value = serde_json::from_slice(&json.stdout).expect("one JSON document");
    assert!(
        v["unchecked"]
            .as_str()
            .is_some_and(|u| u.contains("Keystone") && u.contains("could not be reached")),
        "{v}"
    );
    assert!(
        v["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .any(|f| f["problem"] == true
                && f["text"]
                    .as_str()
                    .is_some_and(|t| t.contains(&format!("ClusterLink {name}: not Ready")))),
        "{v}"
    );
}

/// `doctor` checks each cross-tenant link's share with the customer's own credential: a
/// shared network is visible, an unshared one is a problem naming the one-time command, and
/// an unreadable credential is said so. For a project whose links are all `PerCustomer` it is
/// the other way round: the share is the problem, named with the command that removes it,
/// and once `decommission-share` removed it the project's credential no longer sees the
/// transit network.
async fn doctor_checks_cross_tenant_shares(env: Env) {
    use bnerd_clusterlink_cli::doctor::{CrossTenantLink, CustomerView, share_findings};
    let lab = match &env.fake {
        Some(_) => None,
        None => Some(bnerd_testkit::lab_env().expect("lab.env")),
    };
    let client = |who: &str| -> Box<dyn bnerd_cloud::Neutron> {
        match (&env.fake, &lab) {
            (Some(cloud), _) => Box::new(cloud.client(&who.to_lowercase())),
            (None, Some(lab)) => Box::new(bnerd_testkit::lab_app_cred_client(lab, who)),
            (None, None) => unreachable!("a lab without lab.env"),
        }
    };
    let project = match &lab {
        None => "customer".to_string(),
        Some(lab) => lab["LAB_CUSTOMER_PROJECT_ID"].clone(),
    };
    let net_id = env.fabric.transit_network_id.clone();
    env.net
        .create_rbac_policy(&ShareNetwork {
            network_id: net_id.clone(),
            action: ACCESS_AS_SHARED.into(),
            target_tenant: project.clone(),
        })
        .await
        .expect("share");
    let links = vec![
        CrossTenantLink {
            name: "shared".into(),
            project: project.clone(),
            per_customer: false,
            view: CustomerView::Client(client("CUSTOMER")),
        },
        CrossTenantLink {
            name: "unshared".into(),
            project: "customer2-project".into(),
            per_customer: false,
            view: CustomerView::Client(client("CUSTOMER2")),
        },
        CrossTenantLink {
            name: "no-secret".into(),
            project: "p".into(),
            per_customer: false,
            view: CustomerView::Unreadable("cannot read secret ns/clusterlink-no-secret".into()),
        },
    ];
    let f = share_findings(env.net.as_ref(), &net_id, &links)
        .await
        .expect("checked");
    assert!(!f[0].problem && f[0].text.contains("visible"), "{:?}", f[0]);
    assert!(f[1].problem, "{:?}", f[1]);
    assert!(
        f[1].text.contains(&format!(
            "openstack network rbac create --type network --action access_as_shared --target-project customer2-project {}",
            env.fabric.transit_network_id
        )),
        "{}",
        f[1].text
    );
    assert!(
        !f[2].problem && f[2].text.contains("not checked"),
        "{:?}",
        f[2]
    );

    // The same project once its only link is PerCustomer: the share the operator made is
    // the problem now, and doctor names the command that removes it, not the one that makes
    // it.
    let moved = |view| {
        vec![CrossTenantLink {
            name: "moved".into(),
            project: project.clone(),
            per_customer: true,
            view,
        }]
    };
    let rule = env
        .net
        .list_rbac_policies(&net_id)
        .await
        .expect("rules")
        .into_iter()
        .find(|p| p.target_tenant == project)
        .expect("the share")
        .id;
    let f = share_findings(
        env.net.as_ref(),
        &net_id,
        &moved(CustomerView::Client(client("CUSTOMER"))),
    )
    .await
    .expect("checked");
    assert_eq!(f.len(), 1, "{f:?}");
    assert!(f[0].problem, "{:?}", f[0]);
    for says in [
        format!(
            "project {project} (its ClusterLink(s) moved are all spec.transitIsolation: PerCustomer)"
        ),
        format!("still shared with it (the operator's RBAC rule(s) {rule})"),
        "reach every linked cluster".to_string(),
        format!("kubectl clusterlink decommission-share --project {project}"),
    ] {
        assert!(f[0].text.contains(&says), "{} lacks {says}", f[0].text);
    }
    assert!(!f[0].text.contains("rbac create"), "{}", f[0].text);
    let moved_link = {
        let mut s = spec("r", "10.78.0.0/16", None);
        s.customer_project_id = Some(project.clone());
        s.transit_isolation = Some(bnerd_api::TransitIsolation::PerCustomer);
        bnerd_api::ClusterLink::new("moved", s)
    };
    decommission_share(env.net.as_ref(), &net_id, &project, &[moved_link], true)
        .await
        .expect("a PerCustomer project's share goes");
    let f = share_findings(
        env.net.as_ref(),
        &net_id,
        &moved(CustomerView::Client(client("CUSTOMER"))),
    )
    .await
    .expect("checked");
    assert!(
        !f[0].problem
            && f[0]
                .text
                .ends_with("the transit network is not shared with it"),
        "{:?}",
        f[0]
    );
}
both!(doctor_checks_cross_tenant_shares);

/// `plan` through the binary on the real apiserver and lab: a ClusterLink object no operator
/// has reconciled (by name), and the same as a manifest file with `-o json`; nothing is
/// written to the cloud.
#[tokio::test]
async fn plan_binary_on_the_labs() {
    use bnerd_testkit::operator_proc::{kube_lab_exclusive, sweep_leftovers, test_link};
    let test = "plan_binary_on_the_labs";
    let Some((client, kubeconfig, lab, env)) = kube_and_lab(test).await else {
        return;
    };
    let svc = env.router("plan-bin").await;
    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    let name = bnerd_testkit::unique("plan-link");
    let links: kube::Api<bnerd_api::ClusterLink> = kube::Api::all(client.clone());
    let spec =
        serde_json::json!({"serviceClusterRouter": svc.name, "serviceClusterCIDR": "10.91.0.0/16"});
    links
        .create(
            &kube::api::PostParams::default(),
            &test_link(&name, spec.clone()),
        )
        .await
        .expect("create link");
    let run = |args: &[&str]| plugin(&kubeconfig, &lab, &env, "plan", args);
    let stdout = plan_exits_0(&kubeconfig, &lab, &env, &name);
    for want in [
        format!("plan for ClusterLink {name}"),
        format!(
            "create port clusterlink-{name} on network {}",
            env.fabric.transit_network_id
        ),
        "at 10.254.0.3".to_string(),
        format!("attach port <new port> to router {}", svc.id),
        format!(
            "add route 10.91.0.0/16 via 10.254.0.3 on router {}",
            env.fabric.gateway_router_id
        ),
        "Ready=True".to_string(),
    ] {
        assert!(stdout.contains(&want), "{want:?} not in\n{stdout}");
    }
    // Nothing was written.
    assert!(env.leg_ports().await.is_empty());
    assert!(env.gateway_routes().await.is_empty());

    // The same link as a manifest with a changed CIDR, as JSON.
    let file = std::env::temp_dir().join(format!("{name}.yaml"));
    std::fs::write(
        &file,
        format!(
            "apiVersion: ipsec.bnerd.net/v1alpha1\nkind: ClusterLink\nmetadata:\n  name: {name}\nspec:\n  serviceClusterRouter: {}\n  serviceClusterCIDR: 10.92.0.0/16\n",
            svc.name
        ),
    )
    .expect("manifest");
    let out = run(&[file.to_str().expect("path"), "-o", "json"]);
    let _ = std::fs::remove_file(&file);
    assert_eq!(out.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["ready"], true, "{v}");
    let writes: Vec<&str> = v["writes"]
        .as_array()
        .expect("writes")
        .iter()
        .filter_map(|w| w.as_str())
        .collect();
    assert!(
        writes
            .iter()
            .any(|w| w.contains("add route 10.92.0.0/16 via 10.254.0.3")),
        "{writes:?}"
    );
    // A link that does not exist, and no such file: a usage error.
    let out = run(&["no-such-link-or-file"]);
    assert_eq!(out.status.code(), Some(2));

    links
        .delete(&name, &kube::api::DeleteParams::default())
        .await
        .expect("delete");
    env.teardown(&[]).await;
}

/// A cross-tenant link in the cluster, planned by the binary with a kubeconfig that may read
/// its Secret: the customer's writes on its credential, the address Neutron picks, nothing
/// written. Then the same plan through a kubeconfig that may not read Secrets: the plan stops
/// at CredentialsUnavailable and says why, and what to run it with.
#[tokio::test]
async fn plan_of_a_cross_tenant_link_reads_its_secret_with_the_callers_rights() {
    use bnerd_api::names::{
        ANNOTATION_API_ACCESS, DEFAULT_CREDENTIALS_NAMESPACE, KEY_AC_ID, KEY_AC_SECRET,
    };
    use bnerd_clusterlink_cli::customers::CallerSecrets;
    use bnerd_clusterlink_cli::plan::{CustomerAccess, SECRET_FORBIDDEN, plan};
    use bnerd_testkit::operator_proc::{kube_lab_exclusive, sweep_leftovers, test_link};
    use k8s_openapi::api::core::v1::{Namespace, Secret};
    let test = "plan_of_a_cross_tenant_link_reads_its_secret_with_the_callers_rights";
    let Some((client, kubeconfig, lab, env)) = kube_and_lab(test).await else {
        return;
    };
    let customer = bnerd_testkit::lab_app_cred_client(&lab, "CUSTOMER");
    let svc = {
        use bnerd_cloud::Neutron;
        customer
            .create_router(&bnerd_testkit::unique("plan-ct-bin"))
            .await
            .expect("customer router")
    };
    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    let ns = DEFAULT_CREDENTIALS_NAMESPACE;
    let namespaces: kube::Api<Namespace> = kube::Api::all(client.clone());
    let _ = namespaces
        .create(
            &kube::api::PostParams::default(),
            &serde_json::from_value(serde_json::json!({"metadata": {"name": ns}})).expect("ns"),
        )
        .await;
    let name = bnerd_testkit::unique("plan-ct");
    let secrets: kube::Api<Secret> = kube::Api::namespaced(client.clone(), ns);
    let secret: Secret = serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("clusterlink-{name}")},
        "stringData": {KEY_AC_ID: lab["LAB_CUSTOMER_AC_ID"], KEY_AC_SECRET: lab["LAB_CUSTOMER_AC_SECRET"]},
    }))
    .expect("secret");
    secrets
        .create(&kube::api::PostParams::default(), &secret)
        .await
        .expect("create secret");
    let mut link = test_link(
        &name,
        serde_json::json!({
            "serviceClusterRouter": svc.id, "serviceClusterCIDR": "10.93.0.0/16",
            "credentialsSecretRef": {"name": format!("clusterlink-{name}"), "namespace": ns},
            "customerProjectID": lab["LAB_CUSTOMER_PROJECT_ID"],
        }),
    );
    link.metadata.annotations =
        Some([(ANNOTATION_API_ACCESS.to_string(), "none".to_string())].into());
    let links: kube::Api<bnerd_api::ClusterLink> = kube::Api::all(client.clone());
    let link = links
        .create(&kube::api::PostParams::default(), &link)
        .await
        .expect("create link");

    let stdout = plan_exits_0(&kubeconfig, &lab, &env, &name);
    for want in [
        "operator credential: share network".to_string(),
        "customer credential: create port".to_string(),
        "at an address Neutron picks".to_string(),
        format!(
            "customer credential: attach port <new port> to router {}",
            svc.id
        ),
        "via <the address Neutron picks>".to_string(),
        "CredentialsResolved=True".to_string(),
        "Ready=True".to_string(),
    ] {
        assert!(stdout.contains(&want), "{want:?} not in\n{stdout}");
    }
    assert!(
        !stdout.contains(&lab["LAB_CUSTOMER_AC_SECRET"]),
        "no secret value in the plan"
    );
    assert!(env.leg_ports().await.is_empty(), "plan wrote nothing");

    // A user with no RBAC grants (the admin impersonating it): it may not get the Secret.
    let kc = kube::config::Kubeconfig::read_from(&kubeconfig).expect("kubeconfig");
    let mut cfg = kube::Config::from_custom_kubeconfig(kc, &Default::default())
        .await
        .expect("config");
    cfg.auth_info.impersonate = Some("bnerd-plan-test-nobody".into());
    let caller = kube::Client::try_from(cfg).expect("client");
    let operator = bnerd_testkit::lab_client(&lab, "OPERATOR");
    let source = CallerSecrets {
        kube: caller,
        cloud: &operator,
    };
    let identity = bnerd_engine::OperatorIdentity {
        project_id: lab["LAB_OPERATOR_PROJECT_ID"].clone(),
        auth_url: lab["OS_AUTH_URL"].clone(),
        region: Some(bnerd_testkit::lab_region(&lab)),
    };
    let p = plan(
        env.net.as_ref(),
        &env.fabric,
        &link,
        std::slice::from_ref(&link),
        &[],
        Some(CustomerAccess {
            source: &source,
            operator: &identity,
            namespace: ns,
        }),
    )
    .await
    .expect("plan");
    let c = p
        .conditions
        .iter()
        .find(|c| c.type_ == "CredentialsResolved")
        .expect("CredentialsResolved");
    // As the operator words a Secret it cannot read (the reconcile's own condition).
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "AuthFailed"),
        "{p:?}"
    );
    assert!(
        c.message.contains(SECRET_FORBIDDEN) && c.message.contains("forbidden"),
        "{}",
        c.message
    );
    assert!(
        p.hints
            .iter()
            .any(|h| h.contains("a kubeconfig that may get Secrets")),
        "{p:?}"
    );
    assert!(p.writes.is_empty() && !p.ready, "{p:?}");

    links
        .delete(&name, &kube::api::DeleteParams::default())
        .await
        .expect("delete link");
    secrets
        .delete(
            &format!("clusterlink-{name}"),
            &kube::api::DeleteParams::default(),
        )
        .await
        .expect("delete secret");
    {
        use bnerd_cloud::Neutron;
        customer
            .delete_router(&svc.id)
            .await
            .expect("router removed");
    }
    env.teardown(&[]).await;
}

/// The abandon annotation decides one deletion: on a live link `doctor` shows it as a
/// WARNING (exit unchanged), and `recreate` does not carry it over to the new object, saying
/// so as text and as JSON. Real apiserver for the links, real lab for doctor's cloud checks;
/// no operator runs (the link has no finalizer, so the delete is immediate and Ready never
/// comes: recreate ends "not Ready yet" after --timeout).
#[tokio::test]
async fn recreate_drops_the_abandon_annotation_and_doctor_warns_about_it() {
    use bnerd_api::names::ANNOTATION_ABANDON;
    use bnerd_testkit::operator_proc::{kube_lab_exclusive, sweep_leftovers, test_link};
    let test = "recreate_drops_the_abandon_annotation_and_doctor_warns_about_it";
    let Some((client, kubeconfig, lab, env)) = kube_and_lab(test).await else {
        return;
    };
    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    let name = bnerd_testkit::unique("abandon-live");
    let links: kube::Api<bnerd_api::ClusterLink> = kube::Api::all(client.clone());
    let mut link = test_link(
        &name,
        serde_json::json!({"serviceClusterRouter": "r", "serviceClusterCIDR": "10.94.0.0/16"}),
    );
    link.metadata.annotations = Some(
        [
            (ANNOTATION_ABANDON.to_string(), "true".to_string()),
            ("team/owner".to_string(), "infra".to_string()),
        ]
        .into(),
    );
    let created = links
        .create(&kube::api::PostParams::default(), &link)
        .await
        .expect("create link");
    let set_abandon = || async {
        let p = serde_json::json!({"metadata": {"annotations": {ANNOTATION_ABANDON: "true"}}});
        links
            .patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&p),
            )
            .await
            .expect("annotate");
    };
    let run = |command: &str, args: &[&str]| plugin(&kubeconfig, &lab, &env, command, args);

    // doctor: a WARNING line for this link, naming the command that removes the annotation.
    let out = run("doctor", &[]);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let warning = stdout
        .lines()
        .find(|l| l.starts_with(&format!("WARNING ClusterLink {name}: annotation")))
        .unwrap_or_else(|| panic!("no WARNING for {name}:\n{stdout}"));
    assert!(
        warning.contains("is not being deleted")
            && warning.ends_with(&format!(
                "kubectl annotate clusterlink {name} {ANNOTATION_ABANDON}-"
            )),
        "{warning}"
    );
    assert!(stdout.contains(" warning(s)"), "{stdout}");
    let out = run("doctor", &["-o", "json"]);
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    let finding = v["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| {
            f["text"]
                .as_str()
                .is_some_and(|t| t.starts_with(&format!("ClusterLink {name}: annotation")))
        })
        .cloned()
        .unwrap_or_else(|| panic!("no finding for {name}: {v}"));
    assert_eq!(
        (&finding["warning"], &finding["problem"]),
        (&serde_json::json!(true), &serde_json::json!(false)),
        "{finding}"
    );
    assert!(v["warnings"].as_u64().is_some_and(|n| n >= 1), "{v}");

    // recreate, as text: the plan and the result say the annotation is not carried over.
    let out = run("recreate", &[&name, "--yes", "--timeout", "1"]);
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(
        out.status.code(),
        Some(1),
        "not Ready (no operator): {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!(
            "same spec, labels and annotations but {ANNOTATION_ABANDON}:"
        )) && stdout.contains(&format!(
            "annotation {ANNOTATION_ABANDON} is not carried over"
        )) && stdout.contains(&format!("ClusterLink {name} recreated but not Ready yet")),
        "{stdout}"
    );
    let now = links.get(&name).await.expect("recreated link");
    assert_ne!(now.metadata.uid, created.metadata.uid, "a new object");
    let a = now.metadata.annotations.clone().unwrap_or_default();
    assert!(!a.contains_key(ANNOTATION_ABANDON), "{a:?}");
    assert_eq!(a.get("team/owner").map(String::as_str), Some("infra"));
    assert_eq!(now.spec, created.spec);

    // recreate, as JSON, after someone set it again.
    set_abandon().await;
    let before = links.get(&name).await.expect("link").metadata.uid;
    let out = run(
        "recreate",
        &[&name, "--yes", "--timeout", "1", "-o", "json"],
    );
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("JSON");
    assert_eq!(v["recreated"], true, "{v}");
    assert_eq!(
        v["droppedAnnotations"],
        serde_json::json!([ANNOTATION_ABANDON]),
        "{v}"
    );
    let now = links.get(&name).await.expect("recreated link");
    assert_ne!(now.metadata.uid, before);
    assert!(
        !now.metadata
            .annotations
            .unwrap_or_default()
            .contains_key(ANNOTATION_ABANDON)
    );

    // Without the annotation doctor has nothing to warn about this link.
    let stdout = String::from_utf8_lossy(&run("doctor", &[]).stdout).to_string();
    assert!(
        !stdout.contains(&format!("WARNING ClusterLink {name}:")),
        "{stdout}"
    );
    links
        .delete(&name, &kube::api::DeleteParams::default())
        .await
        .expect("delete");
    env.teardown(&[]).await;
}

/// What others wrote reaches the terminal inert: an orphaned leg on the real lab whose
/// `clusterlink=` name tag (any string its port's owner sets) carries an ESC sequence, a C1
/// CSI, a bidi override and a newline that would forge an `ok` line. `doctor` prints each
/// as an escape on the one PROBLEM line; its JSON carries the tag's text unchanged, with
/// every one of those characters written as a `\u` escape.
#[tokio::test]
async fn doctor_binary_prints_hostile_tags_inert() {
    let test = "doctor_binary_prints_hostile_tags_inert";
    let Some((_, kubeconfig, lab, env)) = kube_and_lab(test).await else {
        return;
    };
    let orphan = env.port_at_ip("10.254.0.11", "clusterlink-hostile").await;
    let hostile = "x\u{1b}[2J\u{9b}31m\u{202e}y\nok      all fine";
    env.net
        .set_port_tags(
            &orphan.id,
            &[
                "bnerd-vpn-operator".into(),
                "clusterlink-uid=00000000-dead-4000-8000-000000000002".into(),
                format!("clusterlink={hostile}"),
            ],
        )
        .await
        .expect("Neutron keeps any tag text");
    let tags = env
        .net
        .list_ports(&bnerd_cloud::PortQuery {
            network_id: Some(env.fabric.transit_network_id.clone()),
            ..Default::default()
        })
        .await
        .expect("ports")
        .into_iter()
        .find(|p| p.id == orphan.id)
        .expect("the orphan")
        .tags;
    assert!(
        tags.contains(&format!("clusterlink={hostile}")),
        "Neutron changed the tag: {tags:?}"
    );
    let text = plugin(&kubeconfig, &lab, &env, "doctor", &[]);
    let json = plugin(&kubeconfig, &lab, &env, "doctor", &["-o", "json"]);
    env.net.delete_port(&orphan.id).await.expect("delete");

    let stdout = String::from_utf8_lossy(&text.stdout).to_string();
    assert_eq!(text.status.code(), Some(1), "{stdout}");
    assert!(
        !stdout.contains(['\u{1b}', '\u{9b}', '\u{202e}']),
        "raw control characters on the terminal: {stdout:?}"
    );
    let line = stdout
        .lines()
        .find(|l| l.contains(&orphan.id))
        .unwrap_or_else(|| panic!("no line for {}: {stdout}", orphan.id));
    assert!(
        line.starts_with("PROBLEM port ")
            && line.contains(r"ClusterLink x\u{1b}[2J\u{9b}31m\u{202e}y\nok      all fine, which no longer exists"),
        "{line}"
    );
    assert!(
        !stdout.lines().any(|l| l.starts_with("ok      all fine")),
        "a forged line: {stdout}"
    );
    let raw = String::from_utf8_lossy(&json.stdout).to_string();
    assert!(
        !raw.contains(['\u{1b}', '\u{9b}', '\u{202e}']) && raw.trim_end().lines().count() == 1,
        "{raw:?}"
    );
    assert!(
        raw.contains(r"\u001b") && raw.contains(r"\u009b") && raw.contains(r"\u202e"),
        "{raw}"
    );
    let v: serde_json::Value = serde_json::from_str(&raw).expect("JSON");
    assert!(
        v["findings"].as_array().expect("findings").iter().any(|f| {
            f["text"].as_str().is_some_and(|t| {
                t.contains(&format!("ClusterLink {hostile}, which no longer exists"))
            })
        }),
        "{v}"
    );
    env.teardown(&[]).await;
}

/// A project moving to `spec.transitIsolation: PerCustomer`, through the binary on the real
/// apiserver and lab (no operator runs: the links have no finalizer, so a delete is
/// immediate and Ready never comes). While the project has a `Shared` link,
/// `decommission-share` refuses naming only it, and `doctor` says the share stays for it;
/// `recreate --isolation PerCustomer` of that last `Shared` link ends with the command that
/// removes the share; `doctor` then calls the share a problem naming `decommission-share`,
/// which now removes it although `PerCustomer` links still name the project.
#[tokio::test]
async fn per_customer_project_loses_its_share_through_the_binary() {
    use bnerd_testkit::operator_proc::{kube_lab_exclusive, sweep_leftovers, test_link};
    let test = "per_customer_project_loses_its_share_through_the_binary";
    let Some((client, kubeconfig, lab, env)) = kube_and_lab(test).await else {
        return;
    };
    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    let project = format!("{:032x}", 0x9c5u128 << 64 | std::process::id() as u128);
    let net_id = env.fabric.transit_network_id.clone();
    let rule = env
        .net
        .create_rbac_policy(&ShareNetwork {
            network_id: net_id.clone(),
            action: ACCESS_AS_SHARED.into(),
            target_tenant: project.clone(),
        })
        .await
        .expect("share");
    let links: kube::Api<bnerd_api::ClusterLink> = kube::Api::all(client.clone());
    let cross = |name: &str, cidr: &str, per_customer: bool| {
        let mut spec = serde_json::json!({
            "serviceClusterRouter": "r",
            "serviceClusterCIDR": cidr,
            "credentialsSecretRef": {"name": format!("clusterlink-{name}"), "namespace": "bnerd-vpn-clusterlinks"},
            "customerProjectID": project,
        });
        if per_customer {
            spec["transitIsolation"] = "PerCustomer".into();
        }
        test_link(name, spec)
    };
    let (shared, moved) = (
        bnerd_testkit::unique("pc-shared"),
        bnerd_testkit::unique("pc-moved"),
    );
    for l in [
        cross(&shared, "10.95.0.0/16", false),
        cross(&moved, "10.96.0.0/16", true),
    ] {
        links
            .create(&kube::api::PostParams::default(), &l)
            .await
            .expect("create link");
    }
    let run = |command: &str, args: &[&str]| {
        let out = plugin(&kubeconfig, &lab, &env, command, args);
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).to_string();
        (out.status.code(), stdout, stderr)
    };
    let line_of = |stdout: &str, start: &str| {
        stdout
            .lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no line starting {start}:\n{stdout}"))
            .to_string()
    };
    let decommission = format!("kubectl clusterlink decommission-share --project {project}");

    // A Shared link still names the project: refused, naming it and not the PerCustomer one.
    let (code, stdout, stderr) = run("decommission-share", &["--project", &project, "--yes"]);
    assert_eq!(code, Some(1), "{stdout}{stderr}");
    let refused = line_of(&stdout, "refused: ");
    assert!(
        refused.contains(&format!("still has Shared ClusterLink(s) {shared} ("))
            && !refused.contains(&moved),
        "{refused}"
    );
    let (_, stdout, _) = run("doctor", &[]);
    let kept = line_of(&stdout, &format!("ok      project {project}: "));
    assert!(
        kept.contains(&format!(
            "its PerCustomer ClusterLink(s) {moved} do not need"
        )) && kept.contains(&format!("its Shared ClusterLink(s) {shared} do")),
        "{kept}"
    );

    // Moving the last Shared link offers the share's removal, at the end, and does not do it.
    let (code, stdout, stderr) = run(
        "recreate",
        &[
            &shared,
            "--isolation",
            "PerCustomer",
            "--yes",
            "--timeout",
            "1",
        ],
    );
    assert_eq!(code, Some(1), "not Ready (no operator): {stdout}{stderr}");
    let last = stdout.lines().last().unwrap_or_default();
    assert!(
        last.starts_with(&format!(
            "ClusterLink {shared} was project {project}'s last Shared link"
        )) && last.ends_with(&format!("{decommission} --yes")),
        "{stdout}"
    );
    assert!(
        links
            .get(&shared)
            .await
            .expect("moved link")
            .spec
            .per_customer(),
        "the link was applied again as PerCustomer"
    );
    let rules = env.net.list_rbac_policies(&net_id).await.expect("rules");
    assert!(rules.iter().any(|p| p.id == rule.id), "recreate removed it");

    // doctor: now the share is the problem, with the command that removes it.
    let (code, stdout, _) = run("doctor", &[]);
    assert_eq!(code, Some(1), "{stdout}");
    let problem = line_of(&stdout, &format!("PROBLEM project {project} "));
    assert!(
        problem.contains("are all spec.transitIsolation: PerCustomer")
            && problem.contains(&format!(
                "still shared with it (the operator's RBAC rule(s) {})",
                rule.id
            ))
            && problem.contains("reach every linked cluster")
            && problem.ends_with(&decommission),
        "{problem}"
    );

    // decommission-share accepts the project: a dry run, then the removal.
    let (code, stdout, stderr) = run("decommission-share", &["--project", &project]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("would delete RBAC policy {}", rule.id))
            && stdout
                .contains("are PerCustomer: their legs stand on the project's customer transit"),
        "{stdout}"
    );
    let (code, stdout, stderr) = run(
        "decommission-share",
        &["--project", &project, "--yes", "-o", "json"],
    );
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).expect("JSON");
    assert_eq!(v["applied"], true, "{v}");
    assert_eq!(v["policies"][0]["id"], rule.id.as_str(), "{v}");
    let mut named: Vec<String> = v["perCustomerLinks"]
        .as_array()
        .expect("perCustomerLinks")
        .iter()
        .filter_map(|n| n.as_str().map(String::from))
        .collect();
    named.sort();
    let mut want = vec![shared.clone(), moved.clone()];
    want.sort();
    assert_eq!(named, want, "{v}");
    let rules = env.net.list_rbac_policies(&net_id).await.expect("rules");
    assert!(
        !rules.iter().any(|p| p.target_tenant == project),
        "{rules:?}"
    );
    let (_, stdout, _) = run("doctor", &[]);
    let fine = line_of(&stdout, &format!("ok      project {project} "));
    assert!(
        fine.contains("no rule of the operator's shares the transit network with it"),
        "{fine}"
    );

    for name in [&shared, &moved] {
        links
            .delete(name, &kube::api::DeleteParams::default())
            .await
            .expect("delete");
    }
    env.teardown(&[]).await;
}
