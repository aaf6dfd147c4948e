//! One harness, two clouds: every scenario runs against the in-memory fake and against
//! the real Keystone + Neutron lab (`lab/openstack/up.sh`), with the same assertions.
//!
//! A crate, and a dev-dependency only, so that the engine's, the operator's and the CLI's
//! tests and the operator's benches share it without including each other's files. It drives
//! the engine (as the CLI does) and never the operator, so no test of the CLI builds the
//! operator.
//!
//! One file past 500 lines: the lab lookups (which lab, which region, which client), the `Env`
//! built on them and the `both!` macro that runs a scenario on each cloud are one fixture, read
//! together whenever a test is written, and at the crate root every suite names them by a short
//! path. What stands on its own is a module: crash points, hostile input, the data plane, the
//! operator process, the Kubernetes lab, the test report.

pub mod cloud_cpu;
pub mod crash;
pub mod customers;
pub mod dataplane;
pub mod hostile;
pub mod kube_lab;
pub mod operator_proc;
pub mod report;

// `both!` expands in the caller's crate, which need not depend on the fake itself.
#[doc(hidden)]
pub use bnerd_cloud_fake;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bnerd_api::gateway::ReverseTarget;
use bnerd_api::{ClusterLink, ClusterLinkSpec};
use bnerd_cloud::fabric::Fabric;
use bnerd_cloud::{
    AuthConfig, AuthMethod, CloudError, CreatePort, Neutron, OpenStack, Port, PortQuery, Route,
    Router, SecretString, TlsConfig,
};
use bnerd_cloud_fake::FakeCloud;
use bnerd_engine::{Input, LinkEngine, Outcome, Peer, StepFail, UnwindPlan, Unwound};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

pub const SUBNET: &str = "10.254.0.0/24";

/// Settings of a running lab, from `$LAB/run/lab.env`.
pub fn lab_env() -> Option<BTreeMap<String, String>> {
    let path = std::env::var("BNERD_LAB_ENV").ok().or_else(|| {
        let home = std::env::var("HOME").ok()?;
        let p = format!("{home}/.cache/bnerd-vpn-operator/oslab/run/lab.env");
        std::path::Path::new(&p).exists().then_some(p)
    })?;
    let text = std::fs::read_to_string(&path).ok()?;
    Some(
        text.lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.trim().to_string(), v.trim().trim_matches('"').to_string()))
            .collect(),
    )
}

/// Whether the lab tier must run (CI sets BNERD_REQUIRE_LAB=1 so a missing lab fails loudly).
pub fn lab_or_skip(test: &str) -> Option<BTreeMap<String, String>> {
    match lab_env() {
        Some(env) => Some(env),
        None if std::env::var("BNERD_REQUIRE_LAB").is_ok_and(|v| v == "1") => {
            panic!("{test}: BNERD_REQUIRE_LAB=1 but no lab.env found; run lab/openstack/up.sh")
        }
        None => {
            report::skipped(test, "no OpenStack lab running (lab/openstack/up.sh)");
            None
        }
    }
}

/// The region a lab client and an operator name: `LAB_REGION` of an env from [`on_ovn`], else
/// RegionOne (the API-only Neutron).
pub fn lab_region(env: &BTreeMap<String, String>) -> String {
    env.get("LAB_REGION")
        .cloned()
        .unwrap_or_else(|| "RegionOne".into())
}

/// lab.env as seen on the lab's ML2/OVN Neutron (`lab/openstack/ovn.sh`): every client and
/// operator made from it names region `LAB_OVN_REGION`, and the demo fabric's IDs are that
/// Neutron's. The same Keystone, identities and application credentials.
pub fn on_ovn(mut env: BTreeMap<String, String>) -> BTreeMap<String, String> {
    let g = |env: &BTreeMap<String, String>, k: &str| {
        env.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("lab.env lacks {k}; rerun lab/openstack/up.sh"))
    };
    let region = g(&env, "LAB_OVN_REGION");
    env.insert("LAB_REGION".into(), region);
    for k in [
        "TRANSIT_NETWORK_ID",
        "TRANSIT_SUBNET_ID",
        "GATEWAY_ROUTER_ID",
        "GATEWAY_ROUTER_PORT_ID",
        "SVC01_ROUTER_ID",
    ] {
        let v = g(&env, &format!("LAB_OVN_{k}"));
        env.insert(format!("LAB_{k}"), v);
    }
    let url = g(&env, "LAB_NEUTRON_OVN_URL");
    env.insert("LAB_NEUTRON_URL".into(), url);
    env
}

/// [`lab_or_skip`] on the ML2/OVN Neutron ([`on_ovn`]).
pub fn ovn_lab_or_skip(test: &str) -> Option<BTreeMap<String, String>> {
    lab_or_skip(test).map(on_ovn)
}

/// lab.env pointed at the lab's older Neutron (lab/openstack/older.sh, release 2025.1): the same
/// identities in its region. It has no fabric of the lab's own.
pub fn on_2025_1(mut env: BTreeMap<String, String>) -> BTreeMap<String, String> {
    let region = env
        .get("LAB_2025_REGION")
        .cloned()
        .unwrap_or_else(|| panic!("lab.env lacks LAB_2025_REGION; rerun lab/openstack/up.sh"));
    env.insert("LAB_REGION".into(), region);
    let url = env["LAB_NEUTRON_2025_URL"].clone();
    env.insert("LAB_NEUTRON_URL".into(), url);
    env
}

/// [`lab_env_for`] on the lab's older Neutron (release 2025.1): a fresh fabric there.
pub async fn lab_2025_1_env_for(test: &str) -> Option<Env> {
    let env = on_2025_1(lab_or_skip(test)?);
    let net: Arc<dyn Neutron> = Arc::new(lab_client(&env, "OPERATOR"));
    Some(build(net, None).await)
}

/// [`lab_env_for`] on the ML2/OVN Neutron: a fresh fabric there.
pub async fn ovn_env_for(test: &str) -> Option<Env> {
    let env = ovn_lab_or_skip(test)?;
    let net: Arc<dyn Neutron> = Arc::new(lab_client(&env, "OPERATOR"));
    Some(build(net, None).await)
}

pub fn lab_client(env: &BTreeMap<String, String>, who: &str) -> OpenStack {
    let auth = lab_password_auth(env, who);
    OpenStack::new(auth).expect("client")
}

/// lab.env with the scale project's credential (`LAB_SCALE_*`), taken from the lab's
/// keystone.json when an older up.sh rewrote lab.env without it.
pub fn lab_scale_env(lab: &BTreeMap<String, String>) -> BTreeMap<String, String> {
    let mut env = lab.clone();
    if !env.contains_key("LAB_SCALE_USERNAME") {
        let path = format!("{}/run/keystone.json", env["LAB_DIR"]);
        let ks: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).expect("keystone.json"))
                .expect("keystone.json");
        let pw = ks["users"]["scale"]["password"]
            .as_str()
            .expect("no scale user in keystone.json: run lab/openstack/up.sh from this tree");
        env.insert("LAB_SCALE_USERNAME".into(), "scale".into());
        env.insert("LAB_SCALE_PASSWORD".into(), pw.into());
        env.insert("LAB_SCALE_PROJECT_NAME".into(), "scale".into());
    }
    env
}

/// The password credential `LAB_<who>_*` on the lab's plain endpoint, in [`lab_region`].
fn lab_password_auth(env: &BTreeMap<String, String>, who: &str) -> AuthConfig {
    let g = |k: &str| {
        env.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("lab.env lacks {k}"))
    };
    let method = AuthMethod::Password {
        username: g(&format!("LAB_{who}_USERNAME")),
        password: SecretString::new(g(&format!("LAB_{who}_PASSWORD"))),
        user_domain_name: "Default".into(),
        project_id: None,
        project_name: Some(g(&format!("LAB_{who}_PROJECT_NAME"))),
        project_domain_name: "Default".into(),
    };
    AuthConfig {
        auth_url: g("OS_AUTH_URL"),
        region: Some(lab_region(env)),
        interface: "public".into(),
        method,
        tls: Default::default(),
    }
}

/// The lab's HTTPS endpoint (`lab/openstack/up.sh`'s TLS-terminating proxy): Keystone at
/// `auth_url`, Neutron listed in Keystone's catalog under `region`, both with certificates of
/// the lab's own CA, `cacert`.
#[derive(Debug, Clone)]
pub struct LabTls {
    pub auth_url: String,
    pub region: String,
    pub neutron_url: String,
    pub cacert: String,
}

/// The lab and its HTTPS endpoint. A lab.env without `LAB_TLS_*` (written by an up.sh older
/// than the proxy) fails the test under `BNERD_REQUIRE_LAB=1`, as a missing lab does.
pub fn lab_tls_or_skip(test: &str) -> Option<(BTreeMap<String, String>, LabTls)> {
    let env = lab_or_skip(test)?;
    let g = |k: &str| env.get(k).cloned().filter(|v| !v.is_empty());
    let tls = match (
        g("LAB_TLS_AUTH_URL"),
        g("LAB_TLS_REGION"),
        g("LAB_TLS_NEUTRON_URL"),
        g("LAB_TLS_CACERT"),
    ) {
        (Some(auth_url), Some(region), Some(neutron_url), Some(cacert)) => LabTls {
            auth_url,
            region,
            neutron_url,
            cacert,
        },
        _ if std::env::var("BNERD_REQUIRE_LAB").is_ok_and(|v| v == "1") => panic!(
            "{test}: BNERD_REQUIRE_LAB=1 but lab.env lacks LAB_TLS_*: rerun lab/openstack/up.sh from a tree that has the TLS proxy"
        ),
        _ => {
            report::skipped(
                test,
                "the lab has no HTTPS endpoint (lab.env lacks LAB_TLS_*)",
            );
            return None;
        }
    };
    Some((env, tls))
}

/// `lab_client` through the HTTPS endpoint: Keystone over TLS, and Neutron as the catalog
/// lists it in the TLS region, trusting the lab CA as `OS_CACERT` would.
pub fn lab_tls_client(env: &BTreeMap<String, String>, tls: &LabTls, who: &str) -> OpenStack {
    let mut auth = lab_password_auth(env, who);
    auth.auth_url = tls.auth_url.clone();
    auth.region = Some(tls.region.clone());
    auth.tls = TlsConfig::with_ca_file("LAB_TLS_CACERT", &tls.cacert).expect("the lab CA");
    OpenStack::new(auth).expect("client")
}

/// `operator_os_env` through the HTTPS endpoint, as a binary reads it.
pub fn operator_tls_os_env(
    env: &BTreeMap<String, String>,
    tls: &LabTls,
) -> Vec<(&'static str, String)> {
    let mut vars: Vec<(&'static str, String)> = operator_os_env(env)
        .into_iter()
        .filter(|(k, _)| *k != "OS_AUTH_URL" && *k != "OS_REGION_NAME")
        .collect();
    vars.push(("OS_AUTH_URL", tls.auth_url.clone()));
    vars.push(("OS_REGION_NAME", tls.region.clone()));
    vars.push(("OS_CACERT", tls.cacert.clone()));
    vars
}

/// A client on the lab's application credential `LAB_<who>_AC_*`.
pub fn lab_app_cred_client(env: &BTreeMap<String, String>, who: &str) -> OpenStack {
    let g = |k: &str| {
        env.get(k)
            .cloned()
            .unwrap_or_else(|| panic!("lab.env lacks {k}"))
    };
    let auth = AuthConfig {
        auth_url: g("OS_AUTH_URL"),
        region: Some(lab_region(env)),
        interface: "public".into(),
        method: AuthMethod::ApplicationCredential {
            id: g(&format!("LAB_{who}_AC_ID")),
            secret: SecretString::new(g(&format!("LAB_{who}_AC_SECRET"))),
        },
        tls: Default::default(),
    };
    OpenStack::new(auth).expect("client")
}

/// The operator's OpenStack credential from lab.env, as the `OS_*` variables a binary reads.
pub fn operator_os_env(env: &BTreeMap<String, String>) -> Vec<(&'static str, String)> {
    let g = |k: &str| env.get(k).cloned().unwrap_or_default();
    vec![
        ("OS_AUTH_URL", g("OS_AUTH_URL")),
        ("OS_REGION_NAME", lab_region(env)),
        ("OS_USERNAME", g("LAB_OPERATOR_USERNAME")),
        ("OS_PASSWORD", g("LAB_OPERATOR_PASSWORD")),
        ("OS_PROJECT_NAME", g("LAB_OPERATOR_PROJECT_NAME")),
        ("OS_USER_DOMAIN_NAME", "Default".into()),
        ("OS_PROJECT_DOMAIN_NAME", "Default".into()),
    ]
}

static SEQ: AtomicU64 = AtomicU64::new(0);

/// Neutron makes a project's "HA network tenant <id>" with an L3-HA router and deletes it with
/// any HA router's delete while no port uses it (always so without L3 agents, as on the lab).
/// Two tests making and deleting HA routers in one project at once race on that network: a
/// create that found it while the other's delete removes it is answered 500 (IntegrityError on
/// subnets.network_id) or 409. Tests that make HA routers hold this lock (a file lock, so it
/// holds across test binaries and processes) from the create to the delete.
pub async fn ha_routers_exclusive() -> std::fs::File {
    tokio::task::spawn_blocking(|| {
        let f = std::fs::File::create(std::env::temp_dir().join("bnerd-lab-ha-routers.lock"))
            .expect("lock file");
        f.lock().expect("lock");
        f
    })
    .await
    .expect("lock task")
}

pub fn unique(prefix: &str) -> String {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_micros())
        .unwrap_or(0);
    format!(
        "{prefix}-{}-{}",
        t % 100_000_000,
        SEQ.fetch_add(1, Ordering::Relaxed)
    )
}

/// A port Neutron makes for itself on a network: ML2/OVN's metadata port, a DHCP agent's port.
pub fn is_neutron_owned(p: &Port) -> bool {
    [bnerd_cloud::OWNER_METADATA, bnerd_cloud::OWNER_DHCP].contains(&p.device_owner.as_str())
}

/// A fresh transit network (10.254.0.0/24, gateway .1) and gateway router, per test, so
/// tests on the shared lab never see each other's addresses.
pub struct Env {
    pub net: Arc<dyn Neutron>,
    pub fabric: Fabric,
    pub fake: Option<FakeCloud>,
    pub links: Vec<ClusterLink>,
    pub reverse: Vec<ReverseTarget>,
    /// Routers made through [`Env::router`], removed by [`Env::teardown`]; shared with the
    /// [`Cleanup`] handles taken before a scenario consumes the Env.
    made_routers: Arc<std::sync::Mutex<Vec<String>>>,
}

/// What [`Env::teardown`] needs, taken before a scenario consumes its Env (the `both!`
/// scenarios take it by value), so the lab fabric is removed when the scenario returns.
pub struct Cleanup {
    net: Arc<dyn Neutron>,
    transit_network_id: String,
    gateway_router_id: String,
    made_routers: Arc<std::sync::Mutex<Vec<String>>>,
}

impl Cleanup {
    /// Remove the fabric from the cloud: every port left on its transit network (detached
    /// first), the routers made through [`Env::router`] and the gateway router (routes
    /// cleared), and the network. A lab that stays up does not grow run after run.
    /// Best effort: whatever a test already removed counts as done. Ports of other projects
    /// on the network (a customer's leg) are removed through `others`, the clients that own
    /// them; routers of those projects are the test's to remove.
    pub async fn teardown(self, others: &[&dyn bnerd_cloud::Neutron]) {
        let ports = self
            .net
            .list_ports(&PortQuery {
                network_id: Some(self.transit_network_id.clone()),
                ..Default::default()
            })
            .await
            .unwrap_or_default();
        let mut routers = self
            .made_routers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        routers.push(self.gateway_router_id.clone());
        // Routes first: Neutron refuses a detach while a route's nexthop needs it.
        for id in &routers {
            let _ = self.net.set_routes(id, &[], None).await;
        }
        for p in &ports {
            let clients = std::iter::once(self.net.as_ref() as &dyn bnerd_cloud::Neutron)
                .chain(others.iter().copied());
            for c in clients {
                if p.is_router_interface() {
                    let _ = c.set_routes(&p.device_id, &[], None).await;
                    if c.remove_router_interface(&p.device_id, &p.id).await.is_ok() {
                        break;
                    }
                }
                if c.delete_port(&p.id).await.is_ok() {
                    break;
                }
            }
        }
        for id in &routers {
            let _ = self.net.delete_router(id).await;
        }
        let _ = self.net.delete_network(&self.transit_network_id).await;
    }
}

pub async fn fake_env() -> Env {
    fake_env_with(FakeCloud::new()).await
}

pub async fn fake_env_with(cloud: FakeCloud) -> Env {
    let net: Arc<dyn Neutron> = Arc::new(cloud.client("operator"));
    build(net, Some(cloud)).await
}

pub async fn lab_env_for(test: &str) -> Option<Env> {
    let env = lab_or_skip(test)?;
    let net: Arc<dyn Neutron> = Arc::new(lab_client(&env, "OPERATOR"));
    Some(build(net, None).await)
}

/// The operator's credential on the lab's second Neutron API (same database), whose ML2
/// loads `tag_ports_during_bulk_creation`: tags in a port's create body are kept.
pub fn lab_tagged_client(env: &BTreeMap<String, String>) -> OpenStack {
    let url = env
        .get("LAB_NEUTRON_TAGGED_URL")
        .cloned()
        .unwrap_or_else(|| {
            panic!("lab.env lacks LAB_NEUTRON_TAGGED_URL; rerun lab/openstack/up.sh")
        });
    lab_client(env, "OPERATOR").with_neutron_url(url)
}

pub async fn lab_tagged_env_for(test: &str) -> Option<Env> {
    let env = lab_or_skip(test)?;
    let net: Arc<dyn Neutron> = Arc::new(lab_tagged_client(&env));
    Some(build(net, None).await)
}

/// A fresh fabric in the lab's `defaults` project, whose Neutron quotas are Neutron's
/// defaults (lab/openstack/neutron_setup.py), with that project's member credential; and the
/// project to itself while the returned lock is held (a test counts what the project uses,
/// so two at once, from any test binary, would count each other's).
pub async fn lab_defaults_env_for(test: &str) -> Option<(Env, std::fs::File)> {
    let env = lab_or_skip(test)?;
    assert!(
        env.contains_key("LAB_DEFAULTS_USERNAME"),
        "lab.env lacks LAB_DEFAULTS_*: rerun lab/openstack/up.sh from this tree"
    );
    let path = format!("{}/run/defaults-project.lock", env["LAB_DIR"]);
    let lock = tokio::task::spawn_blocking(move || {
        let f = std::fs::File::create(path).expect("lock file");
        f.lock().expect("lock");
        f
    })
    .await
    .expect("lock task");
    let net: Arc<dyn Neutron> = Arc::new(lab_client(&env, "DEFAULTS"));
    Some((build(net, None).await, lock))
}

/// A fresh fabric on the lab through this client (to count its calls, say).
pub async fn env_on(net: Arc<dyn Neutron>) -> Env {
    build(net, None).await
}

async fn build(net: Arc<dyn Neutron>, fake: Option<FakeCloud>) -> Env {
    let n = net
        .create_network(&unique("vpn-transit"))
        .await
        .expect("network");
    let s = net
        .create_subnet(&n.id, SUBNET, "10.254.0.1")
        .await
        .expect("subnet");
    let gw = net
        .create_router(&unique("gw"))
        .await
        .expect("gateway router");
    net.add_router_subnet(&gw.id, &s.id)
        .await
        .expect("gateway leg");
    let fabric = Fabric::discover(net.as_ref(), &n.id, &gw.id)
        .await
        .expect("fabric");
    Env {
        net,
        fabric,
        fake,
        links: vec![],
        reverse: vec![],
        made_routers: Arc::default(),
    }
}

impl Env {
    pub async fn router(&self, name: &str) -> Router {
        self.router_named(&unique(name)).await
    }

    /// A router with exactly this name (two of them make an ambiguous name), removed by
    /// [`Env::teardown`] like [`Env::router`]'s.
    pub async fn router_named(&self, name: &str) -> Router {
        let r = self.net.create_router(name).await.expect("router");
        self.made_routers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(r.id.clone());
        r
    }

    /// A handle that removes this Env's fabric later, see [`Cleanup::teardown`].
    pub fn cleanup(&self) -> Cleanup {
        Cleanup {
            net: self.net.clone(),
            transit_network_id: self.fabric.transit_network_id.clone(),
            gateway_router_id: self.fabric.gateway_router_id.clone(),
            made_routers: self.made_routers.clone(),
        }
    }

    /// Remove this Env's fabric from the cloud, see [`Cleanup::teardown`].
    pub async fn teardown(self, others: &[&dyn bnerd_cloud::Neutron]) {
        self.cleanup().teardown(others).await;
    }

    pub async fn get_router(&self, id: &str) -> Router {
        self.net.get_router(id).await.expect("get router")
    }

    /// Add routes by hand (a fixture: someone else's route, a hand-made one), the way this
    /// cloud allows: extraroute-atomic, or a whole-table PUT guarded by the revision.
    pub async fn add_routes(&self, router_id: &str, routes: &[Route]) -> Result<(), CloudError> {
        if self.fabric.extraroute_atomic {
            return self
                .net
                .add_extraroutes(router_id, routes)
                .await
                .map(|_| ());
        }
        let r = self.net.get_router(router_id).await?;
        let mut next = r.routes.clone();
        next.extend(routes.iter().filter(|x| !r.routes.contains(x)).cloned());
        self.net
            .set_routes(router_id, &next, Some(r.revision_number))
            .await
            .map(|_| ())
    }

    /// Remove routes by hand (an out-of-band change), the way this cloud allows.
    pub async fn remove_routes(&self, router_id: &str, routes: &[Route]) -> Result<(), CloudError> {
        if self.fabric.extraroute_atomic {
            return self
                .net
                .remove_extraroutes(router_id, routes)
                .await
                .map(|_| ());
        }
        let r = self.net.get_router(router_id).await?;
        let next: Vec<Route> = r
            .routes
            .iter()
            .filter(|x| !routes.contains(x))
            .cloned()
            .collect();
        self.net
            .set_routes(router_id, &next, Some(r.revision_number))
            .await
            .map(|_| ())
    }

    /// A plain port on the transit network at `ip` (someone else's, or a hand-made leg).
    pub async fn port_at_ip(&self, ip: &str, name: &str) -> Port {
        self.net
            .create_port(&CreatePort {
                network_id: self.fabric.transit_network_id.clone(),
                ip_address: Some(ip.into()),
                name: name.into(),
                ..Default::default()
            })
            .await
            .expect("port")
    }

    /// Ports on the transit network, but Neutron's own ([`is_neutron_owned`]: ML2/OVN's
    /// metadata port), which no operator or test makes or removes.
    pub async fn ports(&self) -> Vec<Port> {
        let q = PortQuery {
            network_id: Some(self.fabric.transit_network_id.clone()),
            ..Default::default()
        };
        let all = self.net.list_ports(&q).await.expect("ports");
        all.into_iter().filter(|p| !is_neutron_owned(p)).collect()
    }

    /// Ports on the transit network besides the gateway router's own leg (and Neutron's own,
    /// as [`Env::ports`]): what a clean unwind leaves none of.
    pub async fn leg_ports(&self) -> Vec<Port> {
        self.ports()
            .await
            .into_iter()
            .filter(|p| p.device_id != self.fabric.gateway_router_id)
            .collect()
    }

    pub async fn port_at(&self, ip: &str) -> Option<Port> {
        self.ports().await.into_iter().find(|p| p.has_ip(ip))
    }

    /// Add a ClusterLink object (as the apiserver would hold it).
    pub fn add_link(&mut self, name: &str, spec: ClusterLinkSpec) {
        let mut l = ClusterLink::new(name, spec);
        l.metadata.uid = Some(uuid_like(name));
        l.metadata.generation = Some(1);
        let secs = 1_700_000_000 + self.links.len() as i64;
        l.metadata.creation_timestamp = Some(Time(Timestamp::from_second(secs).expect("ts")));
        self.links.push(l);
    }

    pub fn link(&self, name: &str) -> &ClusterLink {
        self.links
            .iter()
            .find(|l| l.metadata.name.as_deref() == Some(name))
            .expect("link")
    }

    /// The link's Ready condition is True; else the failure shows every condition.
    #[track_caller]
    pub fn assert_ready(&self, name: &str) {
        let conditions = self.link(name).status.as_ref().map(|s| &s.conditions);
        assert_eq!(
            self.condition(name, "Ready").0,
            "True",
            "{name} is not Ready: {conditions:?}"
        );
    }

    /// The gateway router's routes now.
    pub async fn gateway_routes(&self) -> Vec<Route> {
        self.get_router(&self.fabric.gateway_router_id).await.routes
    }

    pub fn condition(&self, name: &str, type_: &str) -> (String, String, String) {
        let s = self.link(name).status.clone().unwrap_or_default();
        let c = s
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .unwrap_or_else(|| panic!("{name} has no {type_}"));
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    pub fn leg_port_id(&self, name: &str) -> String {
        self.link(name)
            .status
            .as_ref()
            .and_then(|s| s.leg_port_id.clone())
            .unwrap_or_else(|| panic!("{name} has no leg port in status"))
    }

    pub fn transit_ip(&self, name: &str) -> Option<String> {
        self.link(name)
            .status
            .as_ref()
            .and_then(|s| s.transit_ip.clone())
    }
}

impl Env {
    fn idx(&self, name: &str) -> usize {
        self.links
            .iter()
            .position(|l| l.metadata.name.as_deref() == Some(name))
            .expect("link")
    }

    /// One reconcile, with peers from the current objects; stores the status.
    pub async fn reconcile(&mut self, name: &str) -> Outcome {
        let i = self.idx(name);
        let out = reconcile_one(
            self.net.as_ref(),
            &self.fabric,
            &self.links,
            i,
            &self.reverse,
        )
        .await;
        self.links[i].status = Some(out.status.clone());
        out
    }

    /// Delete: run the unwind and drop the object.
    pub async fn delete(&mut self, name: &str) {
        let i = self.idx(name);
        let l = self.links[i].clone();
        let status = l.status.clone().unwrap_or_default();
        let input = link_input(&l, &status, &[], &self.reverse).expect("uid");
        unwind_same_tenant(self.net.as_ref(), &self.fabric, &input, &self.reverse)
            .await
            .unwrap_or_else(|f| panic!("unwind of {name}: {f:?}"));
        self.links.remove(i);
    }
}

/// The engine's view of a link, as the controller builds it (None: the object has no uid).
pub fn link_input<'a>(
    link: &'a ClusterLink,
    status: &'a bnerd_api::ClusterLinkStatus,
    peers: &'a [Peer],
    targets: &'a [ReverseTarget],
) -> Option<Input<'a>> {
    bnerd_engine::view::input_of(link, status, peers, targets)
}

/// A link's peers among `all`, as the controller finds them.
pub fn peers_of(me: &ClusterLink, all: &[Arc<ClusterLink>]) -> Vec<Peer> {
    bnerd_engine::view::peers_of(me, all.iter().map(|l| l.as_ref()))
}

pub async fn reconcile_one(
    net: &dyn Neutron,
    fabric: &Fabric,
    links: &[ClusterLink],
    i: usize,
    reverse: &[ReverseTarget],
) -> Outcome {
    let all: Vec<Arc<ClusterLink>> = links.iter().cloned().map(Arc::new).collect();
    let l = &links[i];
    let peers = peers_of(l, &all);
    let status = l.status.clone().unwrap_or_default();
    let input = link_input(l, &status, &peers, reverse).expect("uid");
    reconcile_same_tenant(net, fabric, &input).await
}

/// A reconcile through the engine's door, for an engine made for same-tenant links.
pub async fn reconcile_same_tenant(
    net: &dyn Neutron,
    fabric: &Fabric,
    input: &Input<'_>,
) -> Outcome {
    LinkEngine::same_tenant(net, fabric)
        .reconcile(input)
        .await
        .outcome
}

/// An unwind through the engine's door, for an engine made for same-tenant links: what it
/// removed, or the failure that stopped it. Such an engine never holds a link for a
/// customer's credential.
pub async fn unwind_same_tenant(
    net: &dyn Neutron,
    fabric: &Fabric,
    input: &Input<'_>,
    targets: &[ReverseTarget],
) -> Result<UnwindPlan, StepFail> {
    match LinkEngine::same_tenant(net, fabric)
        .unwind(input, targets)
        .await
    {
        Unwound::Done(done) => Ok(done),
        Unwound::Stuck(f) => Err(f),
        Unwound::Held(held) => panic!("a same-tenant engine held a link: {:?}", held.fail),
    }
}

fn uuid_like(name: &str) -> String {
    let mut h: u64 = 1469598103934665603;
    for b in name.bytes().chain(unique("u").bytes()) {
        h = (h ^ b as u64).wrapping_mul(1099511628211);
    }
    format!(
        "{:08x}-0000-4000-8000-{:012x}",
        h >> 32,
        h & 0xffff_ffff_ffff
    )
}

pub fn spec(router: &str, cidr: &str, ip: Option<&str>) -> ClusterLinkSpec {
    ClusterLinkSpec {
        service_cluster_router: router.into(),
        service_cluster_cidr: cidr.into(),
        transit_ip: ip.map(String::from),
        ..Default::default()
    }
}

/// Run a scenario on the fake and on the lab.
#[macro_export]
macro_rules! both {
    ($name:ident) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fake() {
                let env = $crate::fake_env().await;
                super::$name(env).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn lab() {
                if let Some(env) = $crate::lab_env_for(concat!(stringify!($name), "::lab")).await {
                    let cleanup = env.cleanup();
                    super::$name(env).await;
                    cleanup.teardown(&[]).await;
                }
            }

            /// The same on a fake that answers as ML2/OVN does (metadata port at .2, plain
            /// router interfaces, the CIDR wording of a refused second interface).
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fake_ml2_ovn() {
                let cloud = $crate::bnerd_cloud_fake::FakeCloud::new().ml2_ovn(true);
                super::$name($crate::fake_env_with(cloud).await).await;
            }

            /// The same on a cloud that keeps tags sent at port creation.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fake_tags_at_create() {
                let cloud = $crate::bnerd_cloud_fake::FakeCloud::new().honour_create_tags(true);
                super::$name($crate::fake_env_with(cloud).await).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn lab_tags_at_create() {
                let test = concat!(stringify!($name), "::lab_tags_at_create");
                if let Some(env) = $crate::lab_tagged_env_for(test).await {
                    let cleanup = env.cleanup();
                    super::$name(env).await;
                    cleanup.teardown(&[]).await;
                }
            }

            /// The same on a cloud without `extraroute-atomic`: every route change goes
            /// through the whole-table PUT guarded by If-Match on the router's revision.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fake_if_match_routes() {
                let cloud = $crate::bnerd_cloud_fake::FakeCloud::new()
                    .without_extension("extraroute-atomic");
                let env = $crate::fake_env_with(cloud).await;
                assert!(
                    !env.fabric.extraroute_atomic && env.fabric.revision_if_match,
                    "the fallback path must be the one under test"
                );
                super::$name(env).await;
            }
        }
    };
}
