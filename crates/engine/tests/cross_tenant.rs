//! The cross-tenant data path of the engine (docs/design.md, "A cross-tenant link"): the leg lives
//! in the customer's project with an address Neutron picks, the gateway route stays on the
//! operator's credential, reverse routes go on the customer's router, failures name the credential,
//! and a leg that comes back elsewhere is TransitIPMismatch, and the transit network is shared with
//! the customer's project (TransitNetworkShared) after the router is found and before the leg. A
//! reconcile and a delete go through the engine's door (`LinkEngine`), which resolves the
//! credential from the link's Secret as the controller's does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use bnerd_api::gateway::ReverseTarget;
use bnerd_api::names::{ANNOTATION_API_ACCESS, TAG_MANAGED, tag_link_uid};
use bnerd_api::{ClusterLinkSpec, GatewayRef, SecretRef};
use bnerd_cloud::{
    ACCESS_AS_SHARED, AuthConfig, AuthMethod, CreatePort, Neutron, OpenStack, Port, Route,
    ShareNetwork,
};
use bnerd_cloud_fake::FakeCloud;
use bnerd_engine::resync::Snapshots;
use bnerd_engine::{
    ActionKind, Batch, Checked, CredentialSource, CustomerCloud, CustomerCredential, Customers,
    Held, LinkEngine, OperatorIdentity, Outcome, ResyncPath, Retry, StepFail, UnwindPlan, Unwound,
    may_abandon,
};
use bnerd_testkit::{Env, both, spec, unique};
use bnerd_testkit::{link_input, peers_of};

const NS: &str = "bnerd-vpn-clusterlinks";

/// Where the customer's clients come from: the fake cloud, or the lab at the operator's own
/// Keystone endpoint (on the API that keeps create-body tags when the env uses it).
enum Backend {
    Fake(FakeCloud),
    Lab {
        lab: BTreeMap<String, String>,
        neutron_url: Option<String>,
    },
}

/// A Secret's data.
type SecretData = BTreeMap<String, Vec<u8>>;

/// The controller's part, as a test stand-in: Secrets in a map, counted reads and clients.
struct Source {
    backend: Backend,
    /// By (namespace, name).
    secrets: Mutex<BTreeMap<(String, String), SecretData>>,
    reads: AtomicUsize,
    clients: AtomicUsize,
    /// What was found out per application credential (the controller keys it by Secret
    /// version).
    checked: Mutex<BTreeMap<String, Checked>>,
}

#[async_trait]
impl CredentialSource for Source {
    async fn secret(&self, r: &SecretRef) -> Result<Option<SecretData>, String> {
        self.reads.fetch_add(1, Ordering::Relaxed);
        let map = self.secrets.lock().unwrap();
        Ok(map.get(&(r.namespace.clone(), r.name.clone())).cloned())
    }

    fn client(&self, c: &CustomerCredential) -> Arc<dyn CustomerCloud> {
        self.clients.fetch_add(1, Ordering::Relaxed);
        self.backend.clients(c).1
    }

    fn checked(&self, c: &CustomerCredential) -> Option<Checked> {
        self.checked.lock().unwrap().get(&c.id).cloned()
    }

    fn remember(&self, c: &CustomerCredential, checked: Checked) {
        self.checked.lock().unwrap().insert(c.id.clone(), checked);
    }
}

impl Backend {
    /// A client on this application credential (the test fixtures also create routers
    /// with it, so it keeps the lab-only calls).
    fn clients(&self, c: &CustomerCredential) -> (Arc<dyn Neutron>, Arc<dyn CustomerCloud>) {
        match self {
            Backend::Fake(cloud) => {
                let client = Arc::new(cloud.client_with_app_cred(&c.id, c.secret.expose()));
                (client.clone(), client)
            }
            Backend::Lab { lab, neutron_url } => {
                let client = OpenStack::new(AuthConfig {
                    auth_url: lab["OS_AUTH_URL"].clone(),
                    region: Some("RegionOne".into()),
                    interface: "public".into(),
                    method: AuthMethod::ApplicationCredential {
                        id: c.id.clone(),
                        secret: c.secret.clone(),
                    },
                    tls: Default::default(),
                })
                .expect("client");
                let client = Arc::new(match neutron_url {
                    Some(u) => client.with_neutron_url(u.clone()),
                    None => client,
                });
                (client.clone(), client)
            }
        }
    }
}

/// The customer's side of a test: its credentials as Secrets, its project, a client.
struct Side {
    source: Source,
    operator: OperatorIdentity,
    project: String,
    net: Arc<dyn Neutron>,
    /// (id, secret) of the customer's member application credential.
    member: (String, String),
}

impl Side {
    /// How the engine reaches this customer's credential, as the controller hands it over.
    fn customers(&self) -> Customers<'_> {
        Customers {
            source: &self.source,
            operator: &self.operator,
            namespace: NS,
        }
    }

    /// Write `clusterlink-<link>` with these keys.
    fn put_secret(&self, link: &str, pairs: &[(&str, &str)]) {
        let data = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.as_bytes().to_vec()))
            .collect();
        self.source
            .secrets
            .lock()
            .unwrap()
            .insert((NS.into(), format!("clusterlink-{link}")), data);
    }

    /// The member credential, as hq writes it.
    fn put_member_secret(&self, link: &str) {
        let (id, secret) = self.member.clone();
        self.put_secret(
            link,
            &[
                ("OS_APPLICATION_CREDENTIAL_ID", &id),
                ("OS_APPLICATION_CREDENTIAL_SECRET", &secret),
            ],
        );
    }

    /// An application credential by its lab.env name, or made in the fake.
    fn app_cred(&self, lab_key: &str, fake_project: &str, roles: &[&str]) -> (String, String) {
        match &self.source.backend {
            Backend::Fake(cloud) => cloud.application_credential(fake_project, roles),
            Backend::Lab { lab, .. } => (
                lab[&format!("LAB_{lab_key}_AC_ID")].clone(),
                lab[&format!("LAB_{lab_key}_AC_SECRET")].clone(),
            ),
        }
    }
}

async fn customer_side(env: &Env) -> Side {
    let (backend, operator, project) = match &env.fake {
        Some(cloud) => (
            Backend::Fake(cloud.clone()),
            OperatorIdentity {
                project_id: "operator".into(),
                auth_url: "http://127.0.0.1:5000/v3".into(),
                region: Some("RegionOne".into()),
            },
            "customer".to_string(),
        ),
        None => {
            let lab = bnerd_testkit::lab_env().expect("lab.env");
            let operator = OperatorIdentity {
                project_id: lab["LAB_OPERATOR_PROJECT_ID"].clone(),
                auth_url: lab["OS_AUTH_URL"].clone(),
                region: Some("RegionOne".into()),
            };
            let project = lab["LAB_CUSTOMER_PROJECT_ID"].clone();
            let neutron_url = env
                .fabric
                .tags_at_create
                .then(|| lab["LAB_NEUTRON_TAGGED_URL"].clone());
            (Backend::Lab { lab, neutron_url }, operator, project)
        }
    };
    let source = Source {
        backend,
        secrets: Mutex::new(BTreeMap::new()),
        reads: AtomicUsize::new(0),
        clients: AtomicUsize::new(0),
        checked: Mutex::new(BTreeMap::new()),
    };
    let mut side = Side {
        source,
        operator,
        project: project.clone(),
        net: Arc::new(FakeCloud::new().client("nobody")),
        member: (String::new(), String::new()),
    };
    side.member = side.app_cred("CUSTOMER", "customer", &["member"]);
    let (id, secret) = side.member.clone();
    side.net = side
        .source
        .backend
        .clients(&CustomerCredential {
            id,
            secret: bnerd_cloud::SecretString::new(secret),
        })
        .0;
    side
}

/// A cloud admin on the same cloud (for a share made by hand).
fn admin_of(env: &Env) -> Arc<dyn Neutron> {
    match &env.fake {
        Some(cloud) => Arc::new(cloud.admin("admin")),
        None => {
            let lab = bnerd_testkit::lab_env().expect("lab.env");
            Arc::new(bnerd_testkit::lab_client(&lab, "ADMIN"))
        }
    }
}

/// The operator's own rules sharing the transit network with `project`.
async fn own_shares(env: &Env, project: &str) -> usize {
    env.net
        .list_rbac_policies(&env.fabric.transit_network_id)
        .await
        .unwrap()
        .iter()
        .filter(|p| p.target_tenant == project && p.action == ACCESS_AS_SHARED)
        .count()
}

fn cross(name: &str, router: &str, cidr: &str, project: &str) -> ClusterLinkSpec {
    ClusterLinkSpec {
        credentials_secret_ref: Some(SecretRef {
            name: format!("clusterlink-{name}"),
            namespace: NS.into(),
        }),
        customer_project_id: Some(project.into()),
        ..spec(router, cidr, None)
    }
}

fn idx(env: &Env, name: &str) -> usize {
    env.links
        .iter()
        .position(|l| l.metadata.name.as_deref() == Some(name))
        .expect("link")
}

/// Add a cross-tenant link as infra writes it: the attestation annotation next to the spec,
/// and hq's Secret with the customer's member credential.
fn add(env: &mut Env, side: &Side, name: &str, router: &str, cidr: &str) {
    env.add_link(name, cross(name, router, cidr, &side.project));
    let i = idx(env, name);
    env.links[i].metadata.annotations =
        Some([(ANNOTATION_API_ACCESS.to_string(), "none".to_string())].into());
    side.put_member_secret(name);
}

async fn reconcile(env: &mut Env, name: &str, side: &Side) -> Outcome {
    let i = idx(env, name);
    let all: Vec<Arc<_>> = env.links.iter().cloned().map(Arc::new).collect();
    let l = env.links[i].clone();
    let peers = peers_of(&l, &all);
    let status = l.status.clone().unwrap_or_default();
    let input = link_input(&l, &status, &peers, &env.reverse).expect("uid");
    let out = LinkEngine::new(env.net.as_ref(), &env.fabric, side.customers())
        .reconcile(&input)
        .await
        .outcome;
    env.links[i].status = Some(out.status.clone());
    out
}

/// Delete with the customer's working credential (the controller resolves it the same way).
async fn delete(env: &mut Env, name: &str, side: &Side) {
    let i = idx(env, name);
    let l = env.links[i].clone();
    let status = l.status.clone().unwrap_or_default();
    let input = link_input(&l, &status, &[], &env.reverse).expect("uid");
    match LinkEngine::new(env.net.as_ref(), &env.fabric, side.customers())
        .unwind(&input, &env.reverse)
        .await
    {
        Unwound::Done(_) => {}
        other => panic!("unwind of {name}: {other:?}"),
    }
    env.links.remove(i);
}

/// "The happy path is Ready with share, leg (customer-owned, Neutron-picked address),
/// attachment, gateway route and reverse routes"; delete leaves nothing but the share.
async fn cross_tenant_link_is_ready(mut env: Env) {
    let side = customer_side(&env).await;
    let router = side.net.create_router(&unique("diehl01")).await.unwrap();
    env.reverse = vec![ReverseTarget {
        gateway: GatewayRef {
            kind: "IPsecGateway".into(),
            namespace: "vpn".into(),
            name: "gw".into(),
        },
        service_cidr: "100.64.81.0/24".into(),
        port_fixed_ip: "10.254.0.250".into(),
        uid: None,
        created: None,
    }];
    // The gateway's own port holds its portFixedIP, so Neutron cannot pick it for the leg.
    let gateway_port = env.port_at_ip("10.254.0.250", "gateway-pod").await;
    add(&mut env, &side, "diehl01", &router.name, "10.234.0.0/16");
    reconcile(&mut env, "diehl01", &side).await;
    env.assert_ready("diehl01");
    let (s, r, _) = env.condition("diehl01", "TransitNetworkShared");
    assert_eq!((s.as_str(), r.as_str()), ("True", "Shared"));
    assert_eq!(own_shares(&env, &side.project).await, 1);
    let st = env.link("diehl01").status.clone().unwrap();
    assert_eq!(
        st.customer_project_id.as_deref(),
        Some(side.project.as_str())
    );
    let ip = st.transit_ip.clone().unwrap();
    let leg = env.port_at(&ip).await.expect("the operator sees the leg");
    assert_eq!(
        leg.project_id, side.project,
        "the leg is the customer's port"
    );
    assert!(leg.is_interface_of(&router.id));
    assert_eq!(
        env.gateway_routes().await,
        vec![Route::new("10.234.0.0/16", &ip)]
    );
    assert_eq!(
        side.net.get_router(&router.id).await.unwrap().routes,
        vec![Route::new("100.64.81.0/24", "10.254.0.250")]
    );
    // A second link in the same project, on its own router, shares the one rule.
    let other = side.net.create_router(&unique("diehl02")).await.unwrap();
    add(&mut env, &side, "diehl02", &other.id, "10.233.0.0/16");
    reconcile(&mut env, "diehl02", &side).await;
    env.assert_ready("diehl02");
    assert_eq!(
        own_shares(&env, &side.project).await,
        1,
        "one RBAC rule per project"
    );
    delete(&mut env, "diehl02", &side).await;
    side.net.delete_router(&other.id).await.unwrap();

    // A resync of a converged link writes nothing.
    if let Some(cloud) = &env.fake {
        cloud.reset_counters();
    }
    let out = reconcile(&mut env, "diehl01", &side).await;
    assert!(out.actions.is_empty(), "{:?}", out.actions);
    if let Some(cloud) = &env.fake {
        let (reads, writes) = cloud.read_write_counts();
        assert_eq!(writes, 0, "resync writes");
        // The transit ports, the routers, the service router's ports (the connected-subnet
        // screen of its reverse route), and the share.
        assert!(reads <= 5, "resync reads: {reads}");
    }

    // The same resync in a batched window, as the controller runs a converged link: the
    // operator's side (the transit's ports, the gateway router) from the window's snapshot,
    // the customer's side read with the link's credential. Nothing written, nothing changed.
    let snaps = Snapshots::new(std::time::Duration::from_secs(30));
    let i = idx(&env, "diehl01");
    let l = env.links[i].clone();
    let status = l.status.clone().unwrap_or_default();
    let input = link_input(&l, &status, &[], &env.reverse).expect("uid");
    let no_routers = Vec::new;
    let done = LinkEngine::new(env.net.as_ref(), &env.fabric, side.customers())
        .with_batch(Some(Batch {
            snapshots: &snaps,
            routers: &no_routers,
        }))
        .reconcile(&input)
        .await;
    assert_eq!(done.resync, Some(ResyncPath::Snapshot));
    assert_eq!(done.outcome.status, status);
    assert!(
        done.outcome.actions.is_empty(),
        "{:?}",
        done.outcome.actions
    );

    delete(&mut env, "diehl01", &side).await;
    assert!(env.gateway_routes().await.is_empty());
    assert!(
        side.net
            .get_router(&router.id)
            .await
            .unwrap()
            .routes
            .is_empty()
    );
    assert_eq!(
        env.ports().await.len(),
        2,
        "only the gateway router's leg and the gateway's port"
    );
    env.net.delete_port(&gateway_port.id).await.unwrap();
    // Deleting the link leaves the RBAC share in place (docs/crd-reference.md, "Deletion").
    let shares = env
        .net
        .list_rbac_policies(&env.fabric.transit_network_id)
        .await
        .unwrap();
    assert!(shares.iter().any(|p| p.target_tenant == side.project));
    side.net.delete_router(&router.id).await.unwrap();
}
both!(cross_tenant_link_is_ready);

/// One ClusterLink per customer router: a second link on the same serviceClusterRouter
/// creates a leg port of its own, which the router then refuses to take
/// (docs/crd-reference.md, "LegAttached", `EnsureRouterHasPortFailed`); failures name the
/// credential that failed.
async fn failures_name_the_credential(mut env: Env) {
    let side = customer_side(&env).await;
    // Someone's port, reserved before any leg exists so Neutron never picks its address
    // for one; a route via it below is foreign.
    let foreign = env.port_at_ip("10.254.0.251", "someone").await;
    // A link whose serviceClusterRouter the customer project does not have
    // (LegAttached=False/RouterResolveFailed) shares nothing.
    add(&mut env, &side, "blind", "no-such-router", "10.237.0.0/16");
    reconcile(&mut env, "blind", &side).await;
    let (_, r, m) = env.condition("blind", "LegAttached");
    assert_eq!(r, "RouterResolveFailed");
    assert!(m.starts_with("customer credential (secret "), "{m}");
    // The lookup used the customer's credential, and the message says so.
    assert!(
        m.contains("visible to the customer credential") && !m.contains("operator credential"),
        "{m}"
    );
    assert_eq!(own_shares(&env, &side.project).await, 0, "nothing shared");
    assert_eq!(env.condition("blind", "TransitNetworkShared").0, "Unknown");
    assert_eq!(
        env.link("blind")
            .status
            .as_ref()
            .unwrap()
            .customer_project_id
            .as_deref(),
        Some(side.project.as_str()),
        "status.customerProjectID is written as soon as the credential resolves"
    );
    delete(&mut env, "blind", &side).await;

    let router = side.net.create_router(&unique("one-router")).await.unwrap();
    add(&mut env, &side, "first", &router.id, "10.235.0.0/16");
    reconcile(&mut env, "first", &side).await;
    env.assert_ready("first");
    add(&mut env, &side, "second", &router.id, "10.236.0.0/16");
    reconcile(&mut env, "second", &side).await;
    let (s, r, m) = env.condition("second", "LegAttached");
    assert_eq!(
        (s.as_str(), r.as_str()),
        ("False", "EnsureRouterHasPortFailed")
    );
    assert!(
        m.starts_with(&format!(
            "customer credential (secret {NS}/clusterlink-second): "
        )),
        "{m}"
    );
    assert!(bnerd_cloud::refusals::is_second_router_interface(&m), "{m}");
    // The share was made before the attach failed: the decommission listing
    // (status.customerProjectID) must find this link.
    assert_eq!(env.condition("second", "TransitNetworkShared").1, "Shared");
    assert_eq!(
        env.link("second")
            .status
            .as_ref()
            .unwrap()
            .customer_project_id
            .as_deref(),
        Some(side.project.as_str()),
        "a link stuck before its first attach is pinned to the project it shared with"
    );
    delete(&mut env, "second", &side).await;

    // A foreign route for the CIDR on the gateway router: the operator's side fails.
    env.add_routes(
        &env.fabric.gateway_router_id.clone(),
        &[Route::new("10.238.0.0/16", "10.254.0.251")],
    )
    .await
    .unwrap();
    let other = side.net.create_router(&unique("other")).await.unwrap();
    add(&mut env, &side, "clash", &other.id, "10.238.0.0/16");
    reconcile(&mut env, "clash", &side).await;
    let (_, r, m) = env.condition("clash", "RouteInstalled");
    assert_eq!(r, "RouteConflict");
    assert!(m.starts_with("operator credential: "), "{m}");
    delete(&mut env, "clash", &side).await;
    delete(&mut env, "first", &side).await;
    env.net.delete_port(&foreign.id).await.unwrap();
    assert_eq!(env.ports().await.len(), 1);
    side.net.delete_router(&router.id).await.unwrap();
    side.net.delete_router(&other.id).await.unwrap();
}
both!(failures_name_the_credential);

/// A cross-tenant leg back at another address than `status.transitIP` is terminal
/// (docs/crd-reference.md, `LegAttached`, reason `TransitIPMismatch`): the route via the old address goes at once, the new port is deleted,
/// nothing is routed to the new address, and later resyncs write nothing.
async fn transit_ip_mismatch_is_terminal(mut env: Env) {
    let side = customer_side(&env).await;
    let router = side.net.create_router(&unique("mm")).await.unwrap();
    add(&mut env, &side, "mm", &router.id, "10.239.0.0/16");
    reconcile(&mut env, "mm", &side).await;
    env.assert_ready("mm");
    let old = env.transit_ip("mm").unwrap();
    // The leg vanishes out of band and its address is taken before the next reconcile.
    let leg = env.leg_port_id("mm");
    side.net
        .remove_router_interface(&router.id, &leg)
        .await
        .unwrap();
    let squatter = env.port_at_ip(&old, "squatter").await;
    // The squatter is another tenant's leg, routed its own CIDR: that route is not ours.
    let foreign = Route {
        destination: "10.238.0.0/16".into(),
        nexthop: old.clone(),
    };
    let gw = env.fabric.gateway_router_id.clone();
    env.add_routes(&gw, std::slice::from_ref(&foreign))
        .await
        .unwrap();
    let out = reconcile(&mut env, "mm", &side).await;
    let (s, r, m) = env.condition("mm", "LegAttached");
    assert_eq!(
        (s.as_str(), r.as_str()),
        ("False", "TransitIPMismatch"),
        "{m}"
    );
    assert!(
        m.starts_with(&format!(
            "customer credential (secret {NS}/clusterlink-mm): "
        )),
        "{m}"
    );
    assert!(m.contains(&old), "{m}");
    assert_eq!(
        env.gateway_routes().await,
        vec![foreign.clone()],
        "this link's route via the old address went, the squatter's own route stayed"
    );
    assert_eq!(
        env.ports().await.len(),
        2,
        "the gateway's leg and the squatter: the recreated port is gone"
    );
    assert_eq!(env.condition("mm", "Ready").0, "False");
    assert!(
        out.actions
            .iter()
            .any(|a| a.kind == bnerd_engine::ActionKind::RouteRemoved),
        "{:?}",
        out.actions
    );
    // No retry loop: three more resyncs create nothing and write nothing.
    if let Some(cloud) = &env.fake {
        cloud.reset_counters();
    }
    for _ in 0..3 {
        reconcile(&mut env, "mm", &side).await;
        assert_eq!(env.condition("mm", "LegAttached").1, "TransitIPMismatch");
    }
    if let Some(cloud) = &env.fake {
        assert_eq!(cloud.read_write_counts().1, 0, "writes over three resyncs");
    }
    assert_eq!(env.ports().await.len(), 2);
    delete(&mut env, "mm", &side).await;
    assert_eq!(
        env.gateway_routes().await,
        vec![foreign.clone()],
        "the unwind leaves the squatter's route too"
    );
    env.remove_routes(&gw, &[foreign]).await.unwrap();
    env.net.delete_port(&squatter.id).await.unwrap();
    side.net.delete_router(&router.id).await.unwrap();
}
both!(transit_ip_mismatch_is_terminal);

/// A changed `spec.transitIP` on a cross-tenant link: the customer's credential cannot choose
/// an address on the operator's network, so the leg at the old address is removed and no leg
/// comes at the new one (LegAttached=False/TransitIPUnavailable), the gateway route going
/// with the old leg; status.transitIP keeps the old address, which a leg made without the pin
/// must come back at (TransitIPMismatch otherwise). Recreated without the pin, it is Ready.
async fn a_changed_transit_ip_removes_a_cross_tenant_leg(mut env: Env) {
    let side = customer_side(&env).await;
    let router = side.net.create_router(&unique("pin")).await.unwrap();
    add(&mut env, &side, "pin", &router.id, "10.234.0.0/16");
    reconcile(&mut env, "pin", &side).await;
    env.assert_ready("pin");
    let old = env.transit_ip("pin").unwrap();
    let new = env
        .fabric
        .transit_subnet
        .hosts()
        .map(|h| h.to_string())
        .rfind(|h| *h != old)
        .unwrap();
    let i = idx(&env, "pin");
    env.links[i].spec.transit_ip = Some(new.clone());
    let out = reconcile(&mut env, "pin", &side).await;
    assert!(
        out.actions.iter().any(|a| a.kind == ActionKind::LegMoved),
        "{:?}",
        out.actions
    );
    let (s, r, m) = env.condition("pin", "LegAttached");
    assert_eq!(
        (s.as_str(), r.as_str()),
        ("False", "TransitIPUnavailable"),
        "{m}"
    );
    assert!(m.contains(&new), "{m}");
    assert_eq!(env.condition("pin", "Ready").0, "False");
    let legs = env.leg_ports().await;
    assert!(legs.is_empty(), "the old leg went: {legs:?}");
    assert!(
        env.gateway_routes().await.is_empty(),
        "no route to the freed address"
    );
    assert_eq!(env.transit_ip("pin").as_deref(), Some(old.as_str()));
    // Resyncs change nothing more.
    let out = reconcile(&mut env, "pin", &side).await;
    assert_eq!(
        env.condition("pin", "LegAttached").1,
        "TransitIPUnavailable"
    );
    assert!(out.actions.is_empty(), "{:?}", out.actions);
    // Dropping the pin builds a leg where Neutron picks, which must be status.transitIP.
    env.links[i].spec.transit_ip = None;
    reconcile(&mut env, "pin", &side).await;
    let (_, r, m) = env.condition("pin", "LegAttached");
    if env.leg_ports().await.iter().all(|p| !p.has_ip(&old)) {
        assert_eq!(r, "TransitIPMismatch", "{m}");
    }
    // The way out: the link recreated without the pin.
    delete(&mut env, "pin", &side).await;
    assert!(env.gateway_routes().await.is_empty());
    assert!(env.leg_ports().await.is_empty());
    add(&mut env, &side, "pin", &router.id, "10.234.0.0/16");
    reconcile(&mut env, "pin", &side).await;
    env.assert_ready("pin");
    delete(&mut env, "pin", &side).await;
    side.net.delete_router(&router.id).await.unwrap();
}
both!(a_changed_transit_ip_removes_a_cross_tenant_leg);

/// A link that fails before its leg step keeps its gateway route; once no leg of the link
/// holds the route's next hop (the leg vanished, its address is free for anyone), the route
/// is withdrawn on the operator's credential: after the Secret went (CredentialsResolved)
/// and after the spec turned invalid (Validated). While the leg still holds it, it stays.
async fn a_failing_link_withdraws_a_route_to_a_freed_leg(mut env: Env) {
    let side = customer_side(&env).await;
    let router = side.net.create_router(&unique("orph")).await.unwrap();
    add(&mut env, &side, "orph", &router.id, "10.236.0.0/16");
    reconcile(&mut env, "orph", &side).await;
    env.assert_ready("orph");
    let ip = env.transit_ip("orph").unwrap();
    let route = Route::new("10.236.0.0/16", &ip);
    // The Secret goes: CredentialsResolved fails, the leg is still there, the route stays.
    side.source.secrets.lock().unwrap().clear();
    reconcile(&mut env, "orph", &side).await;
    assert_eq!(
        env.condition("orph", "CredentialsResolved").1,
        "SecretNotFound"
    );
    assert_eq!(env.gateway_routes().await, vec![route.clone()]);
    // The leg vanishes out of band: the next reconcile, failing at the same step, withdraws
    // the route to the freed address.
    let leg = env.leg_port_id("orph");
    side.net
        .remove_router_interface(&router.id, &leg)
        .await
        .unwrap();
    let out = reconcile(&mut env, "orph", &side).await;
    assert_eq!(
        env.condition("orph", "CredentialsResolved").1,
        "SecretNotFound"
    );
    assert!(
        env.gateway_routes().await.is_empty(),
        "no route to an address no leg of the link holds"
    );
    assert!(
        out.actions
            .iter()
            .any(|a| a.kind == bnerd_engine::ActionKind::RouteRemoved),
        "{:?}",
        out.actions
    );
    assert!(out.status.gateway_route.is_none(), "status forgets it");
    side.put_member_secret("orph");
    delete(&mut env, "orph", &side).await;
    side.net.delete_router(&router.id).await.unwrap();

    // Same-tenant: the spec turns invalid after the leg vanished.
    let svc = env.router("orph-st").await;
    env.add_link("orph-st", spec(&svc.id, "10.235.0.0/16", None));
    env.reconcile("orph-st").await;
    env.assert_ready("orph-st");
    let leg = env.leg_port_id("orph-st");
    env.net
        .remove_router_interface(&svc.id, &leg)
        .await
        .unwrap();
    let i = idx(&env, "orph-st");
    env.links[i].spec.service_cluster_cidr = "10.235.0.1/16".into();
    env.reconcile("orph-st").await;
    assert_eq!(env.condition("orph-st", "Validated").1, "InvalidSpec");
    assert!(env.gateway_routes().await.is_empty());
    env.delete("orph-st").await;
    assert!(env.leg_ports().await.is_empty());
}
both!(a_failing_link_withdraws_a_route_to_a_freed_leg);

/// An RBAC rule someone else made (an admin, by hand) is invisible to the operator's list, so
/// its create collides (409 DuplicateRbacPolicy); that is no error (docs/crd-reference.md,
/// "TransitNetworkShared"): the customer sees the network, so it is Shared.
async fn a_hand_made_share_ends_shared(mut env: Env) {
    let side = customer_side(&env).await;
    let admin = admin_of(&env);
    let rule = admin
        .create_rbac_policy(&ShareNetwork {
            network_id: env.fabric.transit_network_id.clone(),
            action: ACCESS_AS_SHARED.into(),
            target_tenant: side.project.clone(),
        })
        .await
        .expect("the admin shares by hand");
    let router = side.net.create_router(&unique("hand")).await.unwrap();
    add(&mut env, &side, "hand", &router.id, "10.232.0.0/16");
    reconcile(&mut env, "hand", &side).await;
    env.assert_ready("hand");
    assert_eq!(env.condition("hand", "TransitNetworkShared").1, "Shared");
    assert_eq!(
        own_shares(&env, &side.project).await,
        0,
        "the admin's rule serves"
    );
    delete(&mut env, "hand", &side).await;
    side.net.delete_router(&router.id).await.unwrap();
    // The admin's quota of RBAC rules is small (10): a lab that stays up must not fill it.
    admin.delete_rbac_policy(&rule.id).await.unwrap();
}
both!(a_hand_made_share_ends_shared);

/// When the operator's credential may not create the RBAC rule, the link is
/// TransitNetworkShared=False/TransitNetworkNotShared and the message carries the command an
/// OpenStack admin runs once in its place; no leg is created.
#[tokio::test]
async fn a_refused_share_names_the_command() {
    let cloud = bnerd_cloud_fake::FakeCloud::new();
    let mut env = bnerd_testkit::fake_env_with(cloud.clone()).await;
    let side = customer_side(&env).await;
    let router = side.net.create_router("refused").await.unwrap();
    cloud.inject(
        bnerd_cloud_fake::Op::CreateRbacPolicy,
        bnerd_cloud_fake::Fault::Error {
            status: 403,
            kind: "PolicyNotAuthorized".into(),
            message: "create_rbac_policy is disallowed by policy".into(),
        },
        1,
    );
    add(&mut env, &side, "refused", &router.id, "10.231.0.0/16");
    reconcile(&mut env, "refused", &side).await;
    let (s, r, m) = env.condition("refused", "TransitNetworkShared");
    assert_eq!(
        (s.as_str(), r.as_str()),
        ("False", "TransitNetworkNotShared")
    );
    let command = format!(
        "openstack network rbac create --type network --action access_as_shared --target-project {} {}",
        side.project, env.fabric.transit_network_id
    );
    assert!(m.contains(&command), "{m}");
    assert!(m.starts_with("operator credential: "), "{m}");
    assert_eq!(env.condition("refused", "LegAttached").0, "Unknown");
    assert_eq!(env.ports().await.len(), 1, "no leg without the share");
}

/// One expected refusal of the credential gates.
struct Gate {
    condition: &'static str,
    reason: &'static str,
    /// A text the message must contain.
    says: String,
    /// Its look-again (docs/crd-reference.md, "CredentialsResolved").
    retry: Retry,
    /// The Secret may not even be read (its ref is refused first).
    secret_read: bool,
    /// No client may be built: no OpenStack call, not even to authenticate.
    client_built: bool,
}

/// Reconcile a link that must stop at a gate, and check nothing was shared or created.
async fn refused(env: &mut Env, side: &Side, name: &str, want: Gate) {
    let reads = side.source.reads.load(Ordering::Relaxed);
    let clients = side.source.clients.load(Ordering::Relaxed);
    let ports = env.ports().await.len();
    let out = reconcile(env, name, side).await;
    let (s, r, m) = env.condition(name, want.condition);
    assert_eq!(
        (s.as_str(), r.as_str()),
        ("False", want.reason),
        "{name}: {m}"
    );
    assert!(m.contains(&want.says), "{name}: {m}");
    assert_eq!(out.retry, want.retry, "{name}");
    assert_eq!(
        side.source.reads.load(Ordering::Relaxed) > reads,
        want.secret_read,
        "{name}: Secret read"
    );
    assert_eq!(
        side.source.clients.load(Ordering::Relaxed) > clients,
        want.client_built,
        "{name}: OpenStack client built"
    );
    assert_eq!(env.condition(name, "TransitNetworkShared").0, "Unknown");
    assert_eq!(env.condition(name, "Ready").0, "False");
    assert_eq!(
        own_shares(env, &side.project).await,
        0,
        "{name}: nothing shared"
    );
    assert_eq!(env.ports().await.len(), ports, "{name}: nothing created");
}

/// Every CredentialsResolved / TenantIsolationAttested refusal of docs/crd-reference.md, each by
/// its real cause, and with no share, no port and no attachment made.
async fn every_credential_gate_refuses(mut env: Env) {
    let side = customer_side(&env).await;
    let router = side.net.create_router(&unique("gates")).await.unwrap();
    let fifteen = Retry::After(std::time::Duration::from_secs(15));
    let gate = |condition, reason, says: &str, retry, secret_read, client_built| Gate {
        condition,
        reason,
        says: says.to_string(),
        retry,
        secret_read,
        client_built,
    };
    let mut n = 0;
    let mut next = |env: &mut Env| {
        n += 1;
        let name = format!("gate{n}");
        add(
            env,
            &side,
            &name,
            &router.id,
            &format!("10.{}.0.0/16", 200 + n),
        );
        name
    };

    // No annotation, or one that is not exactly "none": not a single OpenStack call.
    let name = next(&mut env);
    let i = idx(&env, &name);
    env.links[i].metadata.annotations = None;
    if let Some(cloud) = env.fake.clone() {
        cloud.reset_counters();
        reconcile(&mut env, &name, &side).await;
        assert!(cloud.calls().is_empty(), "{:?}", cloud.calls());
    }
    let says = format!("secret {NS}/clusterlink-{name}");
    refused(
        &mut env,
        &side,
        &name,
        gate(
            "TenantIsolationAttested",
            "NotAttested",
            &says,
            Retry::Resync,
            false,
            false,
        ),
    )
    .await;

    // A ref outside the credentials namespace, or naming a Secret not written for this link,
    // is refused before the Secret is read.
    let name = next(&mut env);
    let i = idx(&env, &name);
    env.links[i]
        .spec
        .credentials_secret_ref
        .as_mut()
        .unwrap()
        .namespace = "default".into();
    refused(
        &mut env,
        &side,
        &name,
        gate(
            "CredentialsResolved",
            "SecretNamespaceNotAllowed",
            NS,
            fifteen,
            false,
            false,
        ),
    )
    .await;
    let name = next(&mut env);
    let i = idx(&env, &name);
    env.links[i]
        .spec
        .credentials_secret_ref
        .as_mut()
        .unwrap()
        .name = "clusterlink-gate1".into();
    let says = format!("clusterlink-{name}");
    refused(
        &mut env,
        &side,
        &name,
        gate(
            "CredentialsResolved",
            "SecretNameNotAllowed",
            &says,
            fifteen,
            false,
            false,
        ),
    )
    .await;

    // SecretNotFound
    let name = next(&mut env);
    side.source
        .secrets
        .lock()
        .unwrap()
        .remove(&(NS.to_string(), format!("clusterlink-{name}")));
    refused(
        &mut env,
        &side,
        &name,
        gate(
            "CredentialsResolved",
            "SecretNotFound",
            "does not exist",
            fifteen,
            true,
            false,
        ),
    )
    .await;

    // CredentialsInvalid: a missing key, username/password, another Keystone (never asked).
    let (id, secret) = side.member.clone();
    for (pairs, says) in [
        (
            vec![("OS_APPLICATION_CREDENTIAL_ID", id.as_str())],
            "OS_APPLICATION_CREDENTIAL_SECRET",
        ),
        (
            vec![
                ("OS_USERNAME", "customer"),
                ("OS_PASSWORD", "pw-never-shown"),
            ],
            "username/password",
        ),
        (
            vec![
                ("OS_APPLICATION_CREDENTIAL_ID", id.as_str()),
                ("OS_APPLICATION_CREDENTIAL_SECRET", secret.as_str()),
                ("OS_AUTH_URL", "https://keystone.attacker.example/v3"),
            ],
            "OS_AUTH_URL",
        ),
    ] {
        let name = next(&mut env);
        side.put_secret(&name, &pairs);
        refused(
            &mut env,
            &side,
            &name,
            gate(
                "CredentialsResolved",
                "CredentialsInvalid",
                says,
                fifteen,
                true,
                false,
            ),
        )
        .await;
        let (_, _, m) = env.condition(&name, "CredentialsResolved");
        assert!(
            !m.contains("attacker") && !m.contains("pw-never-shown"),
            "{m}"
        );
    }

    // AuthFailed: a revoked application credential.
    let revoked = match &side.source.backend {
        Backend::Fake(cloud) => {
            let (id, secret) = cloud.application_credential("customer", &["member"]);
            cloud.revoke_application_credential(&id);
            (id, secret)
        }
        Backend::Lab { .. } => side.app_cred("CUSTOMER_REVOKED", "", &[]),
    };
    let name = next(&mut env);
    side.put_secret(
        &name,
        &[
            ("OS_APPLICATION_CREDENTIAL_ID", &revoked.0),
            ("OS_APPLICATION_CREDENTIAL_SECRET", &revoked.1),
        ],
    );
    refused(
        &mut env,
        &side,
        &name,
        gate(
            "CredentialsResolved",
            "AuthFailed",
            "HTTP 404",
            fifteen,
            true,
            true,
        ),
    )
    .await;

    // CredentialsPrivileged: by role name, and by a policy that makes another role admin
    // (the lab's Neutron policy.yaml makes net_operator cloud admin; the fake is told so).
    if let Backend::Fake(cloud) = &side.source.backend {
        let _ = cloud.clone().privileged_roles(&["net_operator"]);
    }
    for (key, roles, says) in [
        ("CUSTOMER_PRIV", &["admin", "member"][..], "\"admin\""),
        (
            "CUSTOMER_POLICYPRIV",
            &["net_operator", "member"][..],
            "was allowed",
        ),
    ] {
        let (id, secret) = side.app_cred(key, "customer", roles);
        let name = next(&mut env);
        side.put_secret(
            &name,
            &[
                ("OS_APPLICATION_CREDENTIAL_ID", &id),
                ("OS_APPLICATION_CREDENTIAL_SECRET", &secret),
            ],
        );
        refused(
            &mut env,
            &side,
            &name,
            gate(
                "CredentialsResolved",
                "CredentialsPrivileged",
                says,
                Retry::Resync,
                true,
                true,
            ),
        )
        .await;
    }

    // CredentialsAreOperatorProject: the operator's own credential pasted into the Secret.
    let (id, secret) = side.app_cred("OPERATOR", "operator", &["member"]);
    let name = next(&mut env);
    side.put_secret(
        &name,
        &[
            ("OS_APPLICATION_CREDENTIAL_ID", &id),
            ("OS_APPLICATION_CREDENTIAL_SECRET", &secret),
        ],
    );
    refused(
        &mut env,
        &side,
        &name,
        gate(
            "CredentialsResolved",
            "CredentialsAreOperatorProject",
            &side.operator.project_id,
            fifteen,
            true,
            true,
        ),
    )
    .await;

    // CredentialsProjectMismatch: another customer's credential; the message names both.
    let (id, secret) = side.app_cred("CUSTOMER2", "customer2", &["member"]);
    let other_project = match &side.source.backend {
        Backend::Fake(_) => "customer2".to_string(),
        Backend::Lab { lab, .. } => lab["LAB_CUSTOMER2_PROJECT_ID"].clone(),
    };
    let name = next(&mut env);
    side.put_secret(
        &name,
        &[
            ("OS_APPLICATION_CREDENTIAL_ID", &id),
            ("OS_APPLICATION_CREDENTIAL_SECRET", &secret),
        ],
    );
    refused(
        &mut env,
        &side,
        &name,
        gate(
            "CredentialsResolved",
            "CredentialsProjectMismatch",
            &other_project,
            Retry::Resync,
            true,
            true,
        ),
    )
    .await;
    let (_, _, m) = env.condition(&name, "CredentialsResolved");
    assert!(m.contains(&side.project), "names both projects: {m}");

    // A Secret's values stay out of status and condition messages: no
    // secret written into any of these Secrets appears in any link's status.
    let values: Vec<String> = side
        .source
        .secrets
        .lock()
        .unwrap()
        .values()
        .flat_map(|d| {
            d.iter()
                .filter(|(k, _)| k.contains("SECRET") || k.contains("PASSWORD"))
                .map(|(_, v)| String::from_utf8_lossy(v).into_owned())
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(values.len() >= 8, "{}", values.len());
    for l in &env.links {
        let text = serde_json::to_string(&l.status).unwrap();
        for v in &values {
            assert!(
                !text.contains(v.as_str()),
                "a secret value in the status of {:?}",
                l.metadata.name
            );
        }
    }
    side.net.delete_router(&router.id).await.unwrap();
}
both!(every_credential_gate_refuses);

/// The share step's cloud failures: EnsureNetworkSharedFailed (the create failed, and not
/// by a 403 or a collision with someone else's rule) and NetworkVisibilityCheckFailed (it was
/// refused or collided, and the customer's own look at the network failed as well); both are
/// retried, neither creates a leg.
#[tokio::test]
async fn share_failures_are_named_and_retried() {
    use bnerd_cloud_fake::{Fault, Op};
    let cloud = FakeCloud::new();
    let mut env = bnerd_testkit::fake_env_with(cloud.clone()).await;
    let side = customer_side(&env).await;
    let router = side.net.create_router("share-faults").await.unwrap();
    let err = |status: u16, kind: &str| Fault::Error {
        status,
        kind: kind.into(),
        message: "m".into(),
    };
    cloud.inject(Op::CreateRbacPolicy, err(500, "HTTPInternalServerError"), 1);
    add(&mut env, &side, "f500", &router.id, "10.229.0.0/16");
    let out = reconcile(&mut env, "f500", &side).await;
    let (s, r, m) = env.condition("f500", "TransitNetworkShared");
    assert_eq!(
        (s.as_str(), r.as_str()),
        ("False", "EnsureNetworkSharedFailed")
    );
    assert!(m.starts_with("operator credential: "), "{m}");
    assert_eq!(out.retry, Retry::Backoff);

    cloud.inject(Op::CreateRbacPolicy, err(403, "PolicyNotAuthorized"), 1);
    cloud.inject(Op::GetNetwork, err(503, "HTTPServiceUnavailable"), 1);
    let out = reconcile(&mut env, "f500", &side).await;
    let (s, r, m) = env.condition("f500", "TransitNetworkShared");
    assert_eq!(
        (s.as_str(), r.as_str()),
        ("False", "NetworkVisibilityCheckFailed")
    );
    assert!(m.starts_with("customer credential (secret "), "{m}");
    assert_eq!(out.retry, Retry::Backoff);
    assert_eq!(env.ports().await.len(), 1, "no leg without the share");

    // The faults pass: the next reconcile shares and converges.
    reconcile(&mut env, "f500", &side).await;
    env.assert_ready("f500");
}

/// CredentialsProjectChanged: the credential's project is not the one the link's leg was
/// built in (or a leg stands with no project ever recorded). Reachable for an object whose
/// status predates spec.customerProjectID; requeued at the resync interval.
async fn credentials_project_changed(mut env: Env) {
    let side = customer_side(&env).await;
    let router = side.net.create_router(&unique("changed")).await.unwrap();
    add(&mut env, &side, "changed", &router.id, "10.228.0.0/16");
    for (built_in, leg) in [(Some("an-older-project"), None), (None, Some("a-leg-port"))] {
        let i = idx(&env, "changed");
        env.links[i].status = Some(bnerd_api::ClusterLinkStatus {
            customer_project_id: built_in.map(String::from),
            leg_port_id: leg.map(String::from),
            ..Default::default()
        });
        let out = reconcile(&mut env, "changed", &side).await;
        let (s, r, _) = env.condition("changed", "CredentialsResolved");
        assert_eq!(
            (s.as_str(), r.as_str()),
            ("False", "CredentialsProjectChanged")
        );
        assert_eq!(out.retry, Retry::Resync);
        assert_eq!(own_shares(&env, &side.project).await, 0, "nothing shared");
    }
    env.links.clear();
    side.net.delete_router(&router.id).await.unwrap();
}
both!(credentials_project_changed);

/// Share the test's transit network with the customer's project by hand (as the operator
/// does for a cross-tenant link), so the customer can make ports on it.
async fn share_with(env: &Env, project: &str) {
    let r = env
        .net
        .create_rbac_policy(&ShareNetwork {
            network_id: env.fabric.transit_network_id.clone(),
            action: ACCESS_AS_SHARED.into(),
            target_tenant: project.into(),
        })
        .await;
    if let Err(e) = r {
        assert!(e.to_string().contains("409"), "sharing: {e}");
    }
}

/// A port the customer makes on the shared transit network (Neutron picks its address).
async fn customer_port(env: &Env, side: &Side, name: &str, description: &str) -> Port {
    side.net
        .create_port(&CreatePort {
            network_id: env.fabric.transit_network_id.clone(),
            subnet_id: Some(env.fabric.transit_subnet_id.clone()),
            name: name.into(),
            description: description.into(),
            ..Default::default()
        })
        .await
        .expect("customer port")
}

/// "A port is a link's leg only when it is on the transit network and in the project the
/// link builds in": a customer project the transit network is shared with makes a port and
/// writes a same-tenant link's UID into its tags and description. It is never kept,
/// unwound (the operator, the network's owner, could delete it) or routed to; it is
/// reported.
async fn a_forged_leg_marker_is_never_trusted(mut env: Env) {
    let side = customer_side(&env).await;
    let svc = env.router("victim").await;
    let cidr = "10.225.0.0/16";
    env.add_link("victim", spec(&svc.id, cidr, None));
    env.reconcile("victim").await;
    env.assert_ready("victim");
    let uid = env.link("victim").metadata.uid.clone().unwrap();
    share_with(&env, &side.project).await;
    let forged = customer_port(
        &env,
        &side,
        "forged",
        &format!("ClusterLink victim leg, managed by bnerd-vpn-operator, clusterlink-uid={uid}"),
    )
    .await;
    side.net
        .set_port_tags(&forged.id, &[TAG_MANAGED.into(), tag_link_uid(&uid)])
        .await
        .unwrap();
    let forged_ip = forged.first_ip().unwrap().to_string();
    let exists = |ports: &[Port]| ports.iter().any(|p| p.id == forged.id);

    // Beside the real leg it is no duplicate to remove.
    let out = env.reconcile("victim").await;
    env.assert_ready("victim");
    assert!(
        exists(&env.ports().await),
        "the customer's port was deleted"
    );
    let warned: Vec<&str> = out
        .actions
        .iter()
        .filter(|a| a.kind == ActionKind::ForeignLegMarker)
        .map(|a| a.note.as_str())
        .collect();
    assert_eq!(warned.len(), 1, "{:?}", out.actions);
    assert!(
        warned[0].contains(&forged.id) && warned[0].contains(&side.project),
        "{}",
        warned[0]
    );

    // The leg vanishes out of band: the new leg is a port of the operator's, never the
    // forged one, and the route follows the new leg only.
    let leg = env.leg_port_id("victim");
    env.net
        .remove_router_interface(&svc.id, &leg)
        .await
        .unwrap();
    env.reconcile("victim").await;
    env.assert_ready("victim");
    let ip = env.transit_ip("victim").unwrap();
    assert_ne!(ip, forged_ip);
    assert_eq!(env.gateway_routes().await, vec![Route::new(cidr, &ip)]);
    assert_ne!(env.leg_port_id("victim"), forged.id);

    // The delete unwinds the link's own leg and leaves the customer's port alone.
    env.delete("victim").await;
    assert!(env.gateway_routes().await.is_empty());
    assert!(
        exists(&env.ports().await),
        "the unwind deleted the customer's port"
    );
    side.net.delete_port(&forged.id).await.unwrap();
}
both!(a_forged_leg_marker_is_never_trusted);

/// "After resolving, refuse a router outside the expected project": an operator running on
/// an admin credential sees every router of the cloud; a same-tenant link naming a
/// customer's router (by ID or by name) must not get a leg on it.
async fn a_router_of_another_project_is_refused(mut env: Env) {
    let side = customer_side(&env).await;
    let theirs = side.net.create_router(&unique("theirs")).await.unwrap();
    let admin = admin_of(&env);
    let fabric = env.fabric.clone();
    let engine = LinkEngine::same_tenant(admin.as_ref(), &fabric);
    for (name, value) in [("grab-id", &theirs.id), ("grab-name", &theirs.name)] {
        env.add_link(name, spec(value, "10.227.0.0/16", None));
        let l = env.link(name).clone();
        let status = l.status.clone().unwrap_or_default();
        let input = link_input(&l, &status, &[], &env.reverse).expect("uid");
        let out = engine.reconcile(&input).await.outcome;
        let c = out
            .status
            .conditions
            .iter()
            .find(|c| c.type_ == "LegAttached")
            .unwrap();
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "RouterResolveFailed"),
            "{name}: {}",
            c.message
        );
        assert!(
            c.message.contains(&side.project)
                && c.message.contains(&env.fabric.operator_project_id),
            "{name}: both projects named: {}",
            c.message
        );
        let uid = l.metadata.uid.clone().unwrap();
        assert!(
            !env.ports()
                .await
                .iter()
                .any(|p| p.description.contains(&uid) || p.tags.iter().any(|t| t.contains(&uid))),
            "{name}: no leg was created"
        );
        let i = env
            .links
            .iter()
            .position(|l| l.metadata.name.as_deref() == Some(name));
        env.links.remove(i.unwrap());
    }
    side.net.delete_router(&theirs.id).await.unwrap();
}
both!(a_router_of_another_project_is_refused);

/// "Adopt only at status.transitIP when it is set": the leg vanished, and an untagged port
/// at another address sits on the customer's router; adopting it would move the gateway
/// route to a new address, which TransitIPMismatch exists to prevent.
async fn a_cross_tenant_leg_is_adopted_only_at_its_address(mut env: Env) {
    let side = customer_side(&env).await;
    let router = side.net.create_router(&unique("adopt")).await.unwrap();
    add(&mut env, &side, "adopt", &router.id, "10.226.0.0/16");
    reconcile(&mut env, "adopt", &side).await;
    env.assert_ready("adopt");
    let old = env.transit_ip("adopt").unwrap();
    let leg = env.leg_port_id("adopt");
    side.net
        .remove_router_interface(&router.id, &leg)
        .await
        .unwrap();
    // The old address is taken at once, so the hand-made port lands elsewhere.
    let squatter = env.port_at_ip(&old, "squatter").await;
    let hand = customer_port(&env, &side, "hand-made", "").await;
    side.net
        .add_router_interface(&router.id, &hand.id)
        .await
        .unwrap();
    let hand_ip = hand.first_ip().unwrap().to_string();
    reconcile(&mut env, "adopt", &side).await;
    let (s, r, m) = env.condition("adopt", "LegAttached");
    assert_eq!(
        (s.as_str(), r.as_str()),
        ("False", "TransitIPMismatch"),
        "{m}"
    );
    assert!(
        !env.gateway_routes()
            .await
            .iter()
            .any(|r| r.nexthop == hand_ip),
        "the gateway route followed the port to {hand_ip}"
    );
    assert!(
        env.gateway_routes().await.is_empty(),
        "the route via {old} went"
    );
    delete(&mut env, "adopt", &side).await;
    side.net
        .remove_router_interface(&router.id, &hand.id)
        .await
        .unwrap();
    env.net.delete_port(&squatter.id).await.unwrap();
    side.net.delete_router(&router.id).await.unwrap();
}
both!(a_cross_tenant_leg_is_adopted_only_at_its_address);
/// The controller's delete of a cross-tenant link, through the engine.
async fn unwind_link(
    env: &Env,
    name: &str,
    side: &Side,
) -> Result<Result<UnwindPlan, StepFail>, Held> {
    let l = env.link(name).clone();
    let status = l.status.clone().unwrap_or_default();
    let input = link_input(&l, &status, &[], &env.reverse).expect("uid");
    match LinkEngine::new(env.net.as_ref(), &env.fabric, side.customers())
        .unwind(&input, &env.reverse)
        .await
    {
        Unwound::Done(done) => Ok(Ok(done)),
        Unwound::Stuck(f) => Ok(Err(f)),
        Unwound::Held(held) => Err(held),
    }
}

/// Deleting a link that never built anything releases at once: never attested, its Secret in
/// a foreign namespace, another link's Secret, no Secret at all, or a credential refused
/// (privileged, another project). The gateway-route step still runs on the operator's
/// credential; no Secret is read and no customer client is built.
async fn a_link_that_built_nothing_is_released_at_once(mut env: Env) {
    let side = customer_side(&env).await;
    let router = side.net.create_router(&unique("nothing")).await.unwrap();
    let priv_cred = side.app_cred("CUSTOMER_PRIV", "customer", &["admin", "member"]);
    let other_cred = side.app_cred("CUSTOMER2", "customer2", &["member"]);
    let cases: [(&str, &str); 6] = [
        ("nb-unattested", "NotAttested"),
        ("nb-namespace", "SecretNamespaceNotAllowed"),
        ("nb-name", "SecretNameNotAllowed"),
        ("nb-missing", "SecretNotFound"),
        ("nb-privileged", "CredentialsPrivileged"),
        ("nb-mismatch", "CredentialsProjectMismatch"),
    ];
    for (n, (name, reason)) in cases.iter().enumerate() {
        add(
            &mut env,
            &side,
            name,
            &router.id,
            &format!("10.{}.0.0/16", 180 + n),
        );
        let i = idx(&env, name);
        match *reason {
            "NotAttested" => env.links[i].metadata.annotations = None,
            "SecretNamespaceNotAllowed" => {
                env.links[i]
                    .spec
                    .credentials_secret_ref
                    .as_mut()
                    .unwrap()
                    .namespace = "default".into()
            }
            "SecretNameNotAllowed" => {
                env.links[i]
                    .spec
                    .credentials_secret_ref
                    .as_mut()
                    .unwrap()
                    .name = "clusterlink-nb-unattested".into()
            }
            "SecretNotFound" => {
                side.source
                    .secrets
                    .lock()
                    .unwrap()
                    .remove(&(NS.to_string(), format!("clusterlink-{name}")));
            }
            "CredentialsPrivileged" | "CredentialsProjectMismatch" => {
                let (id, secret) = if *reason == "CredentialsPrivileged" {
                    priv_cred.clone()
                } else {
                    other_cred.clone()
                };
                side.put_secret(
                    name,
                    &[
                        ("OS_APPLICATION_CREDENTIAL_ID", &id),
                        ("OS_APPLICATION_CREDENTIAL_SECRET", &secret),
                    ],
                );
            }
            _ => unreachable!(),
        }
        reconcile(&mut env, name, &side).await;
        let failed = env
            .link(name)
            .status
            .as_ref()
            .unwrap()
            .conditions
            .iter()
            .find(|c| c.status == "False")
            .map(|c| c.reason.clone());
        assert_eq!(failed.as_deref(), Some(*reason), "{name}");
        let (reads, clients) = (
            side.source.reads.load(Ordering::Relaxed),
            side.source.clients.load(Ordering::Relaxed),
        );
        if let Some(cloud) = &env.fake {
            cloud.reset_counters();
        }
        match unwind_link(&env, name, &side).await {
            Ok(Ok(_)) => {}
            Ok(Err(f)) => panic!("{name}: the delete is stuck: {f:?}"),
            Err(held) => panic!("{name}: the delete is held: {held:?}"),
        }
        assert_eq!(
            (
                side.source.reads.load(Ordering::Relaxed),
                side.source.clients.load(Ordering::Relaxed)
            ),
            (reads, clients),
            "{name}: no Secret read and no customer client for a link that built nothing"
        );
        if let Some(cloud) = &env.fake {
            // The gateway-route step ran: the transit ports and the gateway router were read,
            // and nothing else (no write, no customer call).
            let (r, w) = cloud.read_write_counts();
            assert_eq!((r, w), (2, 0), "{name}: {:?}", cloud.calls());
        }
    }
    env.links.clear();
    assert_eq!(own_shares(&env, &side.project).await, 0, "nothing shared");
    side.net.delete_router(&router.id).await.unwrap();
}
both!(a_link_that_built_nothing_is_released_at_once);

/// The abandon hatch also covers a customer side that refuses its unwind while the
/// credential resolves (here the customer's router refuses the detach, 409, for a route via
/// the transit network the link does not own): the gateway route is gone, the delete is held
/// at Ready=False/Deleting naming the hatch, and the annotation may release it.
async fn a_refused_customer_side_may_be_abandoned(mut env: Env) {
    let side = customer_side(&env).await;
    let router = side
        .net
        .create_router(&unique("refused-side"))
        .await
        .unwrap();
    add(&mut env, &side, "refside", &router.id, "10.179.0.0/16");
    reconcile(&mut env, "refside", &side).await;
    env.assert_ready("refside");
    let leg = env.leg_port_id("refside");
    let theirs = Route::new("100.64.99.0/24", "10.254.0.1");
    side.net
        .set_routes(&router.id, std::slice::from_ref(&theirs), None)
        .await
        .expect("the customer's own route via the transit network");
    let held = match unwind_link(&env, "refside", &side).await {
        Err(held) => held,
        Ok(r) => panic!("want a held delete, got {r:?}"),
    };
    assert_eq!(held.condition.as_str(), "Ready");
    assert_eq!(held.fail.reason.as_str(), "Deleting");
    assert!(
        held.fail
            .message
            .contains("ipsec.bnerd.net/abandon-customer-resources=true")
            && held.fail.message.contains("customer credential (secret "),
        "{}",
        held.fail.message
    );
    assert!(held.gateway_route.is_ok());
    assert!(
        env.gateway_routes().await.is_empty(),
        "the data path is cut first"
    );
    assert!(
        env.net.get_port(&leg).await.is_ok(),
        "the customer side is left as it is"
    );
    assert!(may_abandon(Some("true"), held.gateway_route.is_ok()));
    assert!(!may_abandon(None, held.gateway_route.is_ok()));

    // Its owner removes the route: the unwind finishes.
    side.net.set_routes(&router.id, &[], None).await.unwrap();
    delete(&mut env, "refside", &side).await;
    assert!(env.net.get_port(&leg).await.unwrap_err().is_not_found());
    side.net.delete_router(&router.id).await.unwrap();
}
both!(a_refused_customer_side_may_be_abandoned);

/// The privilege probe on a cloud that does not serve it (404, 501: no `quota_details`): the
/// link proceeds on the role-name check and CredentialsResolved says the policy probe could not
/// run (counted once per credential); a server error or no answer decides nothing and is
/// looked at again after the fixed 15 s (docs/crd-reference.md, CredentialsResolved), never an exponential backoff.
#[tokio::test]
async fn a_cloud_without_the_privilege_probe() {
    use bnerd_cloud_fake::{Fault, Op};
    let cloud = FakeCloud::new();
    let mut env = bnerd_testkit::fake_env_with(cloud.clone()).await;
    let side = customer_side(&env).await;
    let router = side.net.create_router("no-probe").await.unwrap();
    let err = |status: u16| Fault::Error {
        status,
        kind: "HTTPNotFound".into(),
        message: "m".into(),
    };

    // 5xx: AuthFailed, 15 s, and not remembered (asked again next time).
    cloud.inject(Op::ProbeAdminRead, err(503), 1);
    add(&mut env, &side, "noprobe", &router.id, "10.178.0.0/16");
    let out = reconcile(&mut env, "noprobe", &side).await;
    let (s, r, m) = env.condition("noprobe", "CredentialsResolved");
    assert_eq!((s.as_str(), r.as_str()), ("False", "AuthFailed"), "{m}");
    assert_eq!(out.retry, Retry::After(std::time::Duration::from_secs(15)));
    assert!(!out.probe_unavailable);

    // 404: proceeds, says so, counted.
    cloud.inject(Op::ProbeAdminRead, err(404), 1);
    let out = reconcile(&mut env, "noprobe", &side).await;
    env.assert_ready("noprobe");
    let (_, _, m) = env.condition("noprobe", "CredentialsResolved");
    assert!(m.contains("the policy probe could not run"), "{m}");
    assert!(out.probe_unavailable, "counted when the probe was sent");
    // The finding is kept per Secret version: not probed, not counted again, still said.
    cloud.reset_counters();
    let out = reconcile(&mut env, "noprobe", &side).await;
    assert!(!out.probe_unavailable);
    assert_eq!(cloud.calls().get(&Op::ProbeAdminRead), None);
    assert!(
        env.condition("noprobe", "CredentialsResolved")
            .2
            .contains("the policy probe could not run")
    );

    // 501 on another credential of the same project: the same.
    let (id, secret) = cloud.application_credential("customer", &["member"]);
    add(&mut env, &side, "noprobe2", &router.id, "10.177.0.0/16");
    side.put_secret(
        "noprobe2",
        &[
            ("OS_APPLICATION_CREDENTIAL_ID", &id),
            ("OS_APPLICATION_CREDENTIAL_SECRET", &secret),
        ],
    );
    cloud.inject(Op::ProbeAdminRead, err(501), 1);
    let out = reconcile(&mut env, "noprobe2", &side).await;
    let (s, r, m) = env.condition("noprobe2", "CredentialsResolved");
    assert_eq!((s.as_str(), r.as_str()), ("True", "Resolved"), "{m}");
    assert!(m.contains("the policy probe could not run"), "{m}");
    assert!(out.probe_unavailable);
}

/// A gateway with a reverse exposure, its `status.portFixedIP` at `ip`.
fn gateway_target(name: &str, cidr: &str, ip: &str) -> ReverseTarget {
    ReverseTarget {
        gateway: GatewayRef {
            kind: "IPsecGateway".into(),
            namespace: "vpn".into(),
            name: name.into(),
        },
        service_cidr: cidr.into(),
        port_fixed_ip: ip.into(),
        uid: None,
        created: None,
    }
}

/// TransitNetworkShared runs "at every reconcile, so a share removed out of band comes back"
/// (docs/crd-reference.md, "TransitNetworkShared"). Neutron keeps a share while the customer
/// has a port on the network (409 RbacPolicyInUse), so the customer detaches the leg first
/// (the detach deletes the port), then the operator's rule is deleted by hand. The next
/// reconcile of the link, Ready before, makes a new rule and says so. Where the new leg lands
/// is Neutron's pick (TransitIPMismatch when it is not the old address), not what this checks.
async fn a_removed_share_is_made_again(mut env: Env) {
    let side = customer_side(&env).await;
    let router = side.net.create_router(&unique("reshare")).await.unwrap();
    add(&mut env, &side, "reshare", &router.id, "10.176.0.0/16");
    reconcile(&mut env, "reshare", &side).await;
    env.assert_ready("reshare");
    let rules = |env: &Env| {
        let net = env.net.clone();
        let network = env.fabric.transit_network_id.clone();
        let project = side.project.clone();
        async move {
            net.list_rbac_policies(&network)
                .await
                .unwrap()
                .into_iter()
                .filter(|p| p.target_tenant == project && p.action == ACCESS_AS_SHARED)
                .map(|p| p.id)
                .collect::<Vec<_>>()
        }
    };
    let before = rules(&env).await;
    assert_eq!(before.len(), 1, "{before:?}");
    let leg = env.leg_port_id("reshare");
    side.net
        .remove_router_interface(&router.id, &leg)
        .await
        .unwrap();
    env.net.delete_rbac_policy(&before[0]).await.unwrap();
    assert!(rules(&env).await.is_empty());

    let out = reconcile(&mut env, "reshare", &side).await;
    let (s, r, m) = env.condition("reshare", "TransitNetworkShared");
    assert_eq!((s.as_str(), r.as_str()), ("True", "Shared"), "{m}");
    let after = rules(&env).await;
    assert_eq!(after.len(), 1, "one new rule: {after:?}");
    assert_ne!(after[0], before[0], "a new rule, not the one deleted");
    assert!(
        out.actions
            .iter()
            .any(|a| a.kind == ActionKind::TransitNetworkShared),
        "the share is reported: {:?}",
        out.actions
    );
    delete(&mut env, "reshare", &side).await;
    side.net.delete_router(&router.id).await.unwrap();
}
both!(a_removed_share_is_made_again);

/// "On a cross-tenant link, failure messages of … ReverseRoutesInstalled start with
/// `customer credential (secret <ns>/<name>): `" (docs/crd-reference.md, "Conditions"): the
/// reverse routes go on the customer's router, with the customer's credential. A gateway
/// whose `status.portFixedIP` is no gateway port is refused; the forward path stays Ready.
async fn a_reverse_route_failure_names_the_customer_credential(mut env: Env) {
    let side = customer_side(&env).await;
    let router = side.net.create_router(&unique("revfail")).await.unwrap();
    env.reverse = vec![gateway_target("nowhere", "100.64.82.0/24", "10.254.0.249")];
    add(&mut env, &side, "revfail", &router.id, "10.175.0.0/16");
    reconcile(&mut env, "revfail", &side).await;
    env.assert_ready("revfail");
    let (s, r, m) = env.condition("revfail", "ReverseRoutesInstalled");
    assert_eq!(
        (s.as_str(), r.as_str()),
        ("False", "EnsureReverseRoutesFailed"),
        "{m}"
    );
    assert!(
        m.starts_with(&format!(
            "customer credential (secret {NS}/clusterlink-revfail): "
        )),
        "{m}"
    );
    assert!(m.contains("vpn/nowhere"), "the gateway is named: {m}");
    assert!(
        side.net
            .get_router(&router.id)
            .await
            .unwrap()
            .routes
            .is_empty(),
        "no route for the refused gateway"
    );
    delete(&mut env, "revfail", &side).await;
    side.net.delete_router(&router.id).await.unwrap();
}
both!(a_reverse_route_failure_names_the_customer_credential);

/// "On a deleting link: the customer-side unwind refuses a credential of another project
/// than the one the leg was built in and the one the link names (the finalizer is held)"
/// (docs/crd-reference.md, "CredentialsResolved"). The Secret of a built link now holds
/// another customer's credential: the gateway route goes on the operator's credential, as
/// always, the delete is held at CredentialsResolved=False/CredentialsProjectMismatch, and
/// nothing on the customer side is written: the leg stays attached, the reverse route stays.
async fn an_unwind_with_another_projects_credential_is_held(mut env: Env) {
    let side = customer_side(&env).await;
    let router = side.net.create_router(&unique("moved")).await.unwrap();
    env.reverse = vec![gateway_target("gw", "100.64.83.0/24", "10.254.0.250")];
    // The gateway's own port holds its portFixedIP, so Neutron cannot pick it for the leg.
    let gateway_port = env.port_at_ip("10.254.0.250", "gateway-pod").await;
    add(&mut env, &side, "moved", &router.id, "10.174.0.0/16");
    reconcile(&mut env, "moved", &side).await;
    env.assert_ready("moved");
    let leg = env.leg_port_id("moved");
    let reverse = vec![Route::new("100.64.83.0/24", "10.254.0.250")];
    assert_eq!(
        side.net.get_router(&router.id).await.unwrap().routes,
        reverse
    );

    let (id, secret) = side.app_cred("CUSTOMER2", "customer2", &["member"]);
    side.put_secret(
        "moved",
        &[
            ("OS_APPLICATION_CREDENTIAL_ID", &id),
            ("OS_APPLICATION_CREDENTIAL_SECRET", &secret),
        ],
    );
    if let Some(cloud) = &env.fake {
        cloud.reset_counters();
    }
    let held = match unwind_link(&env, "moved", &side).await {
        Err(held) => held,
        Ok(r) => panic!("want a held delete, got {r:?}"),
    };
    assert_eq!(held.condition.as_str(), "CredentialsResolved");
    assert_eq!(
        held.fail.reason.as_str(),
        "CredentialsProjectMismatch",
        "{}",
        held.fail.message
    );
    assert!(
        held.fail.message.contains(&side.project),
        "{}",
        held.fail.message
    );
    assert!(held.gateway_route.is_ok());
    assert!(
        env.gateway_routes().await.is_empty(),
        "the data path is cut first"
    );
    if let Some(cloud) = &env.fake {
        let (_, writes) = cloud.read_write_counts();
        assert_eq!(
            writes,
            1,
            "the gateway route's removal, nothing else: {:?}",
            cloud.calls()
        );
    }
    let port = env.net.get_port(&leg).await.expect("the leg stays");
    assert!(port.is_interface_of(&router.id), "the leg stays attached");
    assert_eq!(
        side.net.get_router(&router.id).await.unwrap().routes,
        reverse,
        "the reverse route stays"
    );

    // The credential of the link's project again: the unwind finishes.
    side.put_member_secret("moved");
    delete(&mut env, "moved", &side).await;
    assert!(env.net.get_port(&leg).await.unwrap_err().is_not_found());
    env.net.delete_port(&gateway_port.id).await.unwrap();
    side.net.delete_router(&router.id).await.unwrap();
}
both!(an_unwind_with_another_projects_credential_is_held);
