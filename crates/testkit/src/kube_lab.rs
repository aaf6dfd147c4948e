//! The real kube-apiserver lab (`lab/kube/up.sh`), for the tests that drive a binary through
//! the Kubernetes API.

use std::time::Duration;

use bnerd_api::ClusterLink;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config, CustomResourceExt};

pub fn kubeconfig_path() -> Option<String> {
    let p = std::env::var("BNERD_KUBECONFIG").ok().or_else(|| {
        let home = std::env::var("HOME").ok()?;
        Some(format!(
            "{home}/.cache/bnerd-vpn-operator/kubelab-run/kubeconfig"
        ))
    })?;
    std::path::Path::new(&p).exists().then_some(p)
}

pub async fn kube_client(test: &str) -> Option<(Client, String)> {
    let Some(path) = kubeconfig_path() else {
        if std::env::var("BNERD_REQUIRE_KUBE").is_ok_and(|v| v == "1") {
            panic!("{test}: BNERD_REQUIRE_KUBE=1 but no kubeconfig; run lab/kube/up.sh");
        }
        crate::report::skipped(test, "no kube-apiserver lab (lab/kube/up.sh)");
        return None;
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let kc = Kubeconfig::read_from(&path).expect("kubeconfig");
    let cfg = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("config");
    Some((Client::try_from(cfg).expect("client"), path))
}

pub async fn install_crd(client: &Client) {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = ClusterLink::crd();
    crds.patch(
        "clusterlinks.ipsec.bnerd.net",
        &PatchParams::apply("e2e").force(),
        &Patch::Apply(&crd),
    )
    .await
    .expect("apply CRD");
    for _ in 0..50 {
        let c = crds.get("clusterlinks.ipsec.bnerd.net").await.expect("crd");
        let est = c
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if est {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("CRD not established");
}

/// The preamble of a test that needs both labs: the apiserver (with the CRD installed) and the
/// OpenStack lab's settings and a fabric of its own; None (the test skips) when either is not
/// configured.
pub async fn kube_and_lab(
    test: &str,
) -> Option<(
    Client,
    String,
    std::collections::BTreeMap<String, String>,
    crate::Env,
)> {
    let (client, kubeconfig) = kube_client(test).await?;
    let lab = crate::lab_or_skip(test)?;
    install_crd(&client).await;
    let env = crate::lab_env_for(test).await.expect("lab");
    Some((client, kubeconfig, lab, env))
}

/// Requests the apiserver has served with this `verb` (LIST, WATCH, ...) on any of these
/// `resources` (plurals), from its own `/metrics` (`apiserver_request_total`, every code and
/// scope summed): what a process did to the apiserver, counted by the apiserver. Only what
/// runs meanwhile counts, so a caller measures under `operator_proc::kube_lab_exclusive`.
pub async fn apiserver_requests(client: &Client, verb: &str, resources: &[&str]) -> u64 {
    let req = http::Request::get("/metrics")
        .body(vec![])
        .expect("a /metrics request");
    let text = client
        .request_text(req)
        .await
        .expect("the apiserver's /metrics (the lab's kubeconfig may read it)");
    let verb = format!("verb=\"{verb}\"");
    text.lines()
        .filter(|l| l.starts_with("apiserver_request_total{") && l.contains(&verb))
        .filter(|l| {
            resources
                .iter()
                .any(|r| l.contains(&format!("resource=\"{r}\"")))
        })
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}
