//! The operator binary through the lab's HTTPS endpoint: Keystone at `LAB_TLS_AUTH_URL`,
//! Neutron from the catalog's `LAB_TLS_REGION` (the same Neutron behind a TLS-terminating
//! proxy), the lab CA as `OS_CACERT`. A ClusterLink converges to Ready and unwinds cleanly;
//! without `OS_CACERT` the operator says which certificate it refused and what to set; with
//! `OS_INSECURE=true` it goes through and warns once.

use bnerd_api::ClusterLink;
use bnerd_cloud::Route;
use bnerd_testkit::kube_lab::{install_crd, kube_client};
use bnerd_testkit::operator_proc::{
    OperatorCommand, create_ready, delete_and_wait_gone, kube_lab_exclusive, sweep_leftovers,
};
use bnerd_testkit::{Env, LabTls, lab_env_for, lab_tls_or_skip, operator_tls_os_env, unique};
use kube::api::Api;
use serde_json::json;

/// The cargo-built operator on `env`'s fabric, talking to the cloud through TLS only.
fn operator_through_tls(
    kubeconfig: &str,
    lab: &std::collections::BTreeMap<String, String>,
    tls: &LabTls,
    env: &Env,
) -> OperatorCommand {
    let mut cmd = OperatorCommand::new(env!("CARGO_BIN_EXE_bnerd-vpn-operator")).lab(
        kubeconfig,
        lab,
        &env.fabric.gateway_router_id,
        &env.fabric.transit_network_id,
        "3s",
    );
    for (k, v) in operator_tls_os_env(lab, tls) {
        cmd = cmd.env(k, &v);
    }
    cmd
}

#[tokio::test]
async fn operator_binary_through_tls() {
    let test = "operator_binary_through_tls";
    let Some((client, kubeconfig)) = kube_client(test).await else {
        return;
    };
    let Some((lab, tls)) = lab_tls_or_skip(test) else {
        return;
    };
    install_crd(&client).await;
    // The test's own view of the cloud (fabric, checks) goes the plain way; only the operator
    // goes through TLS.
    let env = lab_env_for(test).await.expect("lab");
    let svc = env.router("shoot--services--tls").await;

    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;

    // Without the lab CA: the operator names the refused certificate and what to set.
    let untrusting = operator_through_tls(&kubeconfig, &lab, &tls, &env)
        .without_env("OS_CACERT")
        .spawn();
    let line = untrusting
        .wait_for_log("set OS_CACERT or clouds.yaml cacert", 60)
        .await;
    assert!(line.contains("UnknownIssuer"), "{line}");
    eprintln!("{test}: without OS_CACERT: {line}");
    let _ = untrusting.stop().await;

    let started = std::time::Instant::now();
    let op = operator_through_tls(&kubeconfig, &lab, &tls, &env).spawn();
    let api: Api<ClusterLink> = Api::all(client.clone());
    let name = unique("tls-link");
    let l = create_ready(
        &api,
        &name,
        json!({"serviceClusterRouter": svc.name, "serviceClusterCIDR": "10.252.0.0/16"}),
        90,
    )
    .await;
    let ready_after = started.elapsed();
    let st = l.status.clone().expect("status");
    let transit_ip = st.transit_ip.clone().expect("transit IP");
    let port = env
        .net
        .get_port(st.leg_port_id.as_deref().expect("port id"))
        .await
        .expect("leg port exists");
    assert!(port.is_interface_of(&svc.id));
    let want = Route::new("10.252.0.0/16", &transit_ip);
    assert!(
        env.get_router(&env.fabric.gateway_router_id)
            .await
            .routes
            .contains(&want)
    );

    delete_and_wait_gone(&api, &name, 60).await;
    let gone_after = started.elapsed();
    assert!(
        env.get_router(&env.fabric.gateway_router_id)
            .await
            .routes
            .is_empty()
    );
    let left = env.leg_ports().await;
    assert!(left.is_empty(), "leaked ports: {left:?}");

    let log = op.stop().await;

    // OS_INSECURE=true (as clouds.yaml `verify: false`): the lab's certificate is taken
    // without its CA, the fabric checks pass through TLS, and the operator warns once, naming
    // the setting. Still under the lock, with no link of this fabric left.
    let insecure = operator_through_tls(&kubeconfig, &lab, &tls, &env)
        .without_env("OS_CACERT")
        .env("OS_INSECURE", "true")
        .spawn();
    insecure.wait_for_log("fabric checked", 60).await;
    let insecure_log = insecure.stop().await;
    let warnings: Vec<&str> = insecure_log
        .lines()
        .filter(|l| l.contains("NOT verified"))
        .collect();
    assert_eq!(warnings.len(), 1, "{insecure_log}");
    assert!(warnings[0].contains("OS_INSECURE=true"), "{insecure_log}");
    assert!(!insecure_log.contains("UnknownIssuer"), "{insecure_log}");

    eprintln!("{test}: Ready after {ready_after:?}, deleted after {gone_after:?}");
    let password = lab
        .get("LAB_OPERATOR_PASSWORD")
        .cloned()
        .unwrap_or_default();
    assert!(!log.contains(&password), "the operator logged its password");
    assert!(
        log.contains("trusting the CA bundle besides the system's roots"),
        "{log}"
    );
    assert!(log.contains("fabric checked"), "{log}");
    assert!(!log.contains("UnknownIssuer"), "{log}");
    env.teardown(&[]).await;
}

/// Where no CA bundle is found (an image built without one), the client cannot be built, even
/// for an http:// cloud: the operator says so and what to do, and never starts half-way.
#[tokio::test]
async fn operator_without_any_ca_bundle_says_so() {
    let op = OperatorCommand::new(env!("CARGO_BIN_EXE_bnerd-vpn-operator"))
        .env("SSL_CERT_FILE", "/nonexistent/ca-certificates.crt")
        .env("SSL_CERT_DIR", "/nonexistent/certs")
        .env("IPSEC_TRANSIT_NETWORK_ID", "n")
        .env("IPSEC_GATEWAY_ROUTER_ID", "r")
        .env("OS_AUTH_URL", "http://127.0.0.1:1/v3")
        .env("OS_USERNAME", "u")
        .env("OS_PASSWORD", "p")
        .env("OS_PROJECT_NAME", "operator")
        .spawn();
    let line = op
        .wait_for_log("No CA certificates were loaded from the system", 30)
        .await;
    assert!(
        line.contains("building the HTTP client")
            && line.contains("install one, or set OS_CACERT or clouds.yaml cacert"),
        "{line}"
    );
    let _ = op.stop().await;
}
