//! The operator as a process, the way the e2e tests run it: a binary (the cargo-built one, or
//! the image's own behind a wrapper such as `image/run-rootfs.sh`), the lab's settings in its
//! environment, stderr kept for the assertions on what it logged.
//!
//! Also the lock, the sweep and the wait that keep tests sharing one apiserver apart.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::time::Duration;

use bnerd_api::ClusterLink;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::operator_os_env;

/// Label on every object an e2e test creates; the sweep removes only these, so a link kept by
/// `KEEP=1 ./demo.sh` (or anyone's) survives a test run.
pub const TEST_LABEL: &str = "test.bnerd.net/e2e";

/// How to start one operator process.
pub struct OperatorCommand {
    program: String,
    args: Vec<String>,
    envs: BTreeMap<String, String>,
}

impl OperatorCommand {
    /// `bin` run directly, with an empty environment but `HOME`.
    pub fn new(bin: &str) -> Self {
        let mut envs = BTreeMap::new();
        envs.insert("HOME".into(), std::env::var("HOME").unwrap_or_default());
        envs.insert("RUST_LOG".into(), "info".into());
        Self {
            program: bin.into(),
            args: Vec::new(),
            envs,
        }
    }

    /// Run `bin` through `wrapper` (e.g. `["image/run-rootfs.sh", "<rootfs>", "--"]`): the
    /// wrapper's program and arguments come first, then `bin` and its arguments.
    pub fn wrapped(mut self, wrapper: &[&str]) -> Self {
        let Some((first, rest)) = wrapper.split_first() else {
            return self;
        };
        let bin = std::mem::replace(&mut self.program, (*first).to_string());
        let mut args: Vec<String> = rest.iter().map(|s| s.to_string()).collect();
        args.push(bin);
        args.append(&mut self.args);
        self.args = args;
        self
    }

    /// The settings every e2e operator gets: the kubeconfig, the lab's operator credential,
    /// the fabric, the resync period, and a lease of its own so tests never wait for the lease
    /// of a process an earlier test killed.
    pub fn lab(
        self,
        kubeconfig: &str,
        lab: &BTreeMap<String, String>,
        gateway_router_id: &str,
        transit_network_id: &str,
        resync: &str,
    ) -> Self {
        let mut c = self
            .env("KUBECONFIG", kubeconfig)
            .env("IPSEC_GATEWAY_ROUTER_ID", gateway_router_id)
            .env("IPSEC_TRANSIT_NETWORK_ID", transit_network_id)
            .env("IPSEC_RESYNC_INTERVAL", resync)
            .env("IPSEC_LEASE_NAME", &crate::unique("e2e-lease"))
            .env("IPSEC_LEASE_NAMESPACE", "default")
            // Port 0: each process binds a free port and logs it; tests that scrape set one.
            .env("IPSEC_METRICS_ADDR", "127.0.0.1:0");
        for (k, v) in operator_os_env(lab) {
            c = c.env(k, &v);
        }
        c
    }

    /// The operator's OpenStack credential: the lab's password user `LAB_<who>_*` of its project.
    pub fn lab_user(self, lab: &BTreeMap<String, String>, who: &str) -> Self {
        let g = |k: &str| {
            lab.get(&format!("LAB_{who}_{k}"))
                .cloned()
                .unwrap_or_else(|| panic!("lab.env lacks LAB_{who}_{k}"))
        };
        self.env("OS_USERNAME", &g("USERNAME"))
            .env("OS_PASSWORD", &g("PASSWORD"))
            .env("OS_PROJECT_NAME", &g("PROJECT_NAME"))
    }

    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.envs.insert(key.into(), value.into());
        self
    }

    pub fn without_env(mut self, key: &str) -> Self {
        self.envs.remove(key);
        self
    }

    pub fn arg(mut self, a: &str) -> Self {
        self.args.push(a.into());
        self
    }

    pub fn spawn(self) -> OperatorProcess {
        let mut child = tokio::process::Command::new(&self.program)
            .args(&self.args)
            .env_clear()
            .envs(&self.envs)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("operator {} starts: {e}", self.program));
        let stderr = child.stderr.take().expect("stderr");
        let (tx, rx) = tokio::sync::watch::channel(String::new());
        let log = tokio::spawn(async move {
            use tokio::io::AsyncBufReadExt;
            let mut lines = tokio::io::BufReader::new(stderr).lines();
            let mut all = String::new();
            while let Ok(Some(l)) = lines.next_line().await {
                all.push_str(&l);
                all.push('\n');
                tx.send_replace(all.clone());
            }
            all
        });
        OperatorProcess {
            child,
            log,
            live_log: rx,
        }
    }
}

/// A running operator; killed when dropped.
pub struct OperatorProcess {
    child: tokio::process::Child,
    log: tokio::task::JoinHandle<String>,
    live_log: tokio::sync::watch::Receiver<String>,
}

/// A test that fails with an operator running shows what the operator said last: the reason
/// a heal or a condition did not come is in its log, which is otherwise lost with the process.
impl Drop for OperatorProcess {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            return;
        }
        let log = self.log_so_far();
        let lines: Vec<&str> = log.lines().collect();
        let from = lines.len().saturating_sub(LOG_LINES_ON_FAILURE);
        eprintln!(
            "---- the operator's last {} log lines ----\n{}\n---- end of the operator's log ----",
            lines.len() - from,
            lines[from..].join("\n")
        );
    }
}

/// How much of a failed test's operator log is printed.
const LOG_LINES_ON_FAILURE: usize = 300;

impl OperatorProcess {
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// What it has written to stderr so far.
    pub fn log_so_far(&self) -> String {
        self.live_log.borrow().clone()
    }

    /// Wait until its stderr contains `needle`, and return that line.
    pub async fn wait_for_log(&self, needle: &str, secs: u64) -> String {
        wait_for(&format!("log line {needle:?}"), secs, async || {
            self.log_so_far()
                .lines()
                .find(|l| l.contains(needle))
                .map(str::to_string)
        })
        .await
    }

    /// The address its health/metrics port is bound to, from its log.
    pub async fn served_address(&self) -> String {
        let line = self.wait_for_log("serving /healthz", 60).await;
        let at = line
            .find("127.0.0.1:")
            .expect("a loopback address in the line");
        line[at..]
            .chars()
            .take_while(|c| c.is_ascii_digit() || *c == '.' || *c == ':')
            .collect()
    }

    /// Whether it is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Wait up to `secs` for it to exit by itself; its exit status and stderr.
    pub async fn exited(mut self, secs: u64) -> (Option<std::process::ExitStatus>, String) {
        let status = tokio::time::timeout(Duration::from_secs(secs), self.child.wait())
            .await
            .ok()
            .and_then(Result::ok);
        if status.is_none() {
            let _ = self.child.kill().await;
        }
        (status, (&mut self.log).await.unwrap_or_default())
    }

    /// SIGKILL, as a node losing the pod would: no lease release, nothing flushed.
    pub async fn kill9(mut self) -> String {
        let _ = self.child.kill().await;
        (&mut self.log).await.unwrap_or_default()
    }

    /// SIGTERM, as the kubelet does, then wait up to `secs` for it to exit; returns the exit
    /// status and its stderr.
    pub async fn terminate(mut self, secs: u64) -> (Option<std::process::ExitStatus>, String) {
        if let Some(pid) = self.child.id() {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &pid.to_string()])
                .status();
        }
        let status = tokio::time::timeout(Duration::from_secs(secs), self.child.wait())
            .await
            .ok()
            .and_then(Result::ok);
        if status.is_none() {
            let _ = self.child.kill().await;
        }
        (status, (&mut self.log).await.unwrap_or_default())
    }

    /// Stop it (SIGKILL) and return everything it logged.
    pub async fn stop(self) -> String {
        self.kill9().await
    }
}

/// Operators started by the e2e tests all watch every ClusterLink of the one apiserver, each
/// with its own transit network: two at once would fight over each other's links, and a
/// running one would put its finalizer on the CEL test's objects. Every test that writes
/// ClusterLinks holds this lock, across test processes too (an flock beside the kubeconfig).
pub async fn kube_lab_exclusive(kubeconfig: &str) -> std::fs::File {
    let dir = std::path::Path::new(kubeconfig)
        .parent()
        .expect("kubeconfig dir")
        .to_path_buf();
    tokio::task::spawn_blocking(move || {
        let f = std::fs::File::create(dir.join("e2e.lock")).expect("lock file");
        f.lock().expect("lock");
        f
    })
    .await
    .expect("lock task")
}

/// A ClusterLink object carrying [`TEST_LABEL`].
pub fn test_link(name: &str, spec: serde_json::Value) -> ClusterLink {
    serde_json::from_value(json!({
        "apiVersion": "ipsec.bnerd.net/v1alpha1", "kind": "ClusterLink",
        "metadata": {"name": name, "labels": {TEST_LABEL: "true"}},
        "spec": spec
    }))
    .expect("link")
}

/// Links and gateways an earlier, failed test run left behind would be reconciled by this
/// run's operator against the wrong fabric: strip their finalizers (no operator runs while
/// the caller holds `kube_lab_exclusive`) and delete them. Only objects carrying
/// [`TEST_LABEL`]: whatever else lives on the apiserver is not the tests' to touch.
pub async fn sweep_leftovers(client: &Client) {
    sweep_leases(client).await;
    let mine = ListParams::default().labels(&format!("{TEST_LABEL}=true"));
    let links: Api<ClusterLink> = Api::all(client.clone());
    for l in links.list(&mine).await.expect("list links") {
        let name = l.metadata.name.clone().unwrap_or_default();
        let strip = json!({"metadata": {"finalizers": null}});
        let _ = links
            .patch(&name, &PatchParams::default(), &Patch::Merge(&strip))
            .await;
        let _ = links.delete(&name, &DeleteParams::default()).await;
    }
    for (kind, plural) in bnerd_api::gateway::GATEWAY_KINDS {
        let ar = bnerd_api::gateway::resource(kind, plural);
        let gws: Api<kube::api::DynamicObject> = Api::all_with(client.clone(), &ar);
        let Ok(list) = gws.list(&mine).await else {
            continue;
        };
        for g in list {
            let ns = g.metadata.namespace.clone().unwrap_or_default();
            let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar);
            let _ = api
                .delete(
                    &g.metadata.name.clone().unwrap_or_default(),
                    &DeleteParams::default(),
                )
                .await;
        }
    }
}

/// One plain HTTP/1.1 GET on loopback: (status, body). Enough for /healthz, /readyz and
/// /metrics, without an HTTP client in the harness.
pub async fn http_get(addr: &str, path: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).await.expect("read");
    let text = String::from_utf8_lossy(&raw).to_string();
    let status = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .expect("status line");
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// The value of one sample in a Prometheus text exposition, by its exact name and labels
/// (`name{a="b"}`), or None when absent.
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics.lines().find_map(|l| {
        let (name, value) = l.rsplit_once(' ')?;
        (name == series).then(|| value.parse().ok())?
    })
}

/// The sum of every sample of a metric whose labels contain all of `having`.
pub fn sum_of(metrics: &str, name: &str, having: &[&str]) -> f64 {
    metrics
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| having.iter().all(|h| l.contains(h)))
        .filter_map(|l| l.rsplit_once(' ')?.1.parse::<f64>().ok())
        .sum()
}

/// The Leases the harness gave earlier operators (`e2e-lease-*` in `default`): released or
/// run out, they are only clutter.
pub async fn sweep_leases(client: &Client) {
    use k8s_openapi::api::coordination::v1::Lease;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    if let Ok(list) = leases.list(&ListParams::default()).await {
        for l in list {
            let name = l.metadata.name.unwrap_or_default();
            if name.starts_with("e2e-lease-") {
                let _ = leases.delete(&name, &DeleteParams::default()).await;
            }
        }
    }
}

/// Poll `f` every 300 ms until it gives a value; fail the test after `secs`.
pub async fn wait_for<T>(what: &str, secs: u64, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = f().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {secs}s waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// The first Event in `namespace` about the object named `name` with `reason`, if any yet.
pub async fn event_about(
    client: &Client,
    namespace: &str,
    name: &str,
    reason: &str,
) -> Option<k8s_openapi::api::events::v1::Event> {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), namespace);
    events
        .list(&ListParams::default())
        .await
        .ok()?
        .items
        .into_iter()
        .find(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
        })
}

/// Minimal VPNGateway/IPsecGateway CRDs (namespaced, schema left open, no status
/// subresource) so a test can write a gateway's status as its own controller would.
pub async fn install_gateway_crds(client: &Client) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for (kind, plural) in bnerd_api::gateway::GATEWAY_KINDS {
        let name = format!("{plural}.ipsec.bnerd.net");
        let crd: CustomResourceDefinition = serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": name},
            "spec": {
                "group": "ipsec.bnerd.net",
                "scope": "Namespaced",
                "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
                "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]
            }
        }))
        .expect("crd");
        crds.patch(
            &name,
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(&crd),
        )
        .await
        .expect("apply gateway CRD");
        wait_for("gateway CRD established", 20, async || {
            let c = crds.get(&name).await.ok()?;
            c.status?
                .conditions?
                .iter()
                .any(|c| c.type_ == "Established" && c.status == "True")
                .then_some(())
        })
        .await;
    }
}

/// Wait until the apiserver no longer has ClusterLink `name` (its finalizer's unwind done).
pub async fn wait_gone(api: &Api<ClusterLink>, name: &str, secs: u64) {
    wait_for("object gone", secs, async || {
        matches!(api.get(name).await, Err(kube::Error::Api(s)) if s.code == 404).then_some(())
    })
    .await;
}

/// Delete ClusterLink `name` and wait until it is gone.
pub async fn delete_and_wait_gone(api: &Api<ClusterLink>, name: &str, secs: u64) {
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    wait_gone(api, name, secs).await;
}

/// Create a test link and wait until it is Ready; the link as it then is.
pub async fn create_ready(
    api: &Api<ClusterLink>,
    name: &str,
    spec: serde_json::Value,
    secs: u64,
) -> ClusterLink {
    api.create(&kube::api::PostParams::default(), &test_link(name, spec))
        .await
        .expect("create link");
    wait_for("Ready=True", secs, async || {
        api.get(name).await.ok().filter(is_ready)
    })
    .await
}

/// Whether the link's Ready condition is True.
pub fn is_ready(l: &ClusterLink) -> bool {
    l.status.as_ref().is_some_and(|s| {
        s.conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True")
    })
}

/// The Secret infra writes for link `link` in the credentials namespace (made if missing):
/// an application credential's ID and secret.
pub async fn put_credentials_secret(client: &Client, link: &str, id: &str, secret: &str) {
    use k8s_openapi::api::core::v1::{Namespace, Secret};
    let ns = bnerd_api::names::DEFAULT_CREDENTIALS_NAMESPACE;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let _ = namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("namespace"),
        )
        .await;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let s: Secret = serde_json::from_value(json!({
        "metadata": {"name": format!("clusterlink-{link}"), "labels": {"bnerd-test": "e2e"}},
        "type": "Opaque",
        "stringData": {
            "OS_APPLICATION_CREDENTIAL_ID": id,
            "OS_APPLICATION_CREDENTIAL_SECRET": secret,
        },
    }))
    .expect("secret");
    secrets
        .create(&PostParams::default(), &s)
        .await
        .expect("create secret");
}

pub async fn delete_credentials_secret(client: &Client, link: &str) {
    use k8s_openapi::api::core::v1::Secret;
    let ns = bnerd_api::names::DEFAULT_CREDENTIALS_NAMESPACE;
    let secrets: Api<Secret> = Api::namespaced(client.clone(), ns);
    let _ = secrets
        .delete(&format!("clusterlink-{link}"), &DeleteParams::default())
        .await;
}

/// A cross-tenant link as infra writes it (hq's Secret with the customer's member credential,
/// the attestation annotation), waited for until Ready.
pub async fn create_cross_tenant(
    client: &Client,
    api: &Api<ClusterLink>,
    lab: &BTreeMap<String, String>,
    name: &str,
    router_id: &str,
    cidr: &str,
) -> ClusterLink {
    create_cross_tenant_as(client, api, lab, "CUSTOMER", name, router_id, cidr).await
}

/// [`create_cross_tenant`] for the lab's customer `who` (`CUSTOMER`, `CUSTOMER2`).
pub async fn create_cross_tenant_as(
    client: &Client,
    api: &Api<ClusterLink>,
    lab: &BTreeMap<String, String>,
    who: &str,
    name: &str,
    router_id: &str,
    cidr: &str,
) -> ClusterLink {
    create_linked_as(client, api, lab, who, (name, router_id, cidr), false).await
}

/// [`create_cross_tenant_as`] with `spec.transitIsolation: PerCustomer` (and no attestation
/// annotation: such a link needs none).
pub async fn create_per_customer_as(
    client: &Client,
    api: &Api<ClusterLink>,
    lab: &BTreeMap<String, String>,
    who: &str,
    name: &str,
    router_id: &str,
    cidr: &str,
) -> ClusterLink {
    create_linked_as(client, api, lab, who, (name, router_id, cidr), true).await
}

async fn create_linked_as(
    client: &Client,
    api: &Api<ClusterLink>,
    lab: &BTreeMap<String, String>,
    who: &str,
    (name, router_id, cidr): (&str, &str, &str),
    per_customer: bool,
) -> ClusterLink {
    let g = |k: &str| lab.get(k).cloned().unwrap_or_default();
    put_credentials_secret(
        client,
        name,
        &g(&format!("LAB_{who}_AC_ID")),
        &g(&format!("LAB_{who}_AC_SECRET")),
    )
    .await;
    let mut l = test_link(
        name,
        json!({
            "serviceClusterRouter": router_id, "serviceClusterCIDR": cidr,
            "credentialsSecretRef": {"name": format!("clusterlink-{name}"), "namespace": bnerd_api::names::DEFAULT_CREDENTIALS_NAMESPACE},
            "customerProjectID": g(&format!("LAB_{who}_PROJECT_ID")),
        }),
    );
    if per_customer {
        l.spec.transit_isolation = Some(bnerd_api::TransitIsolation::PerCustomer);
    } else {
        l.metadata.annotations = Some(
            [(
                bnerd_api::names::ANNOTATION_API_ACCESS.to_string(),
                "none".to_string(),
            )]
            .into(),
        );
    }
    api.create(&PostParams::default(), &l)
        .await
        .expect("create link");
    wait_for("Ready=True", 90, async || {
        api.get(name).await.ok().filter(is_ready)
    })
    .await
}
