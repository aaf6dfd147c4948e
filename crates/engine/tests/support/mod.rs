//! The harness of the crash-point suite and of the faults at every call (`crash_points.rs`,
//! `faults.rs`): a stage (one fabric, a gateway with a reverse exposure, optionally a
//! customer's credential), a point (one link and two routers brought to where a scenario
//! starts), the run of that scenario through a stopping or failing client, a converge with a
//! fresh engine, and the invariants checked after it.
//!
//! One module although it passes 500 lines: stage, point, converge and the invariants are
//! one harness; the two suites that use it differ only in what happens at call k.

#![allow(dead_code)]

use std::sync::Arc;

use async_trait::async_trait;
use bnerd_api::gateway::ReverseTarget;
use bnerd_api::names::{ANNOTATION_API_ACCESS, leg_owner_uid};
use bnerd_api::{ClusterLink, ClusterLinkSpec, ClusterLinkStatus, GatewayRef, SecretRef};
use bnerd_cloud::{AuthConfig, AuthMethod, OpenStack};
use bnerd_cloud::{Neutron, Port, Route};
use bnerd_cloud_fake::FakeCloud;
use bnerd_engine::{
    CredentialSource, CustomerCloud, CustomerCredential, Customers, LinkEngine, OperatorIdentity,
    Outcome, Retry, StepFail, UnwindPlan, Unwound,
};
use bnerd_testkit::crash::{Crash, Crashing, run_until_crash};
use bnerd_testkit::link_input;
use bnerd_testkit::{Env, lab_app_cred_client, lab_env, spec, unique};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

pub const NS: &str = "bnerd-vpn-clusterlinks";
pub const CIDR: &str = "10.60.0.0/16";
pub const CIDR_NEW: &str = "10.61.0.0/16";
pub const PIN: &str = "10.254.0.40";
pub const PIN_NEW: &str = "10.254.0.41";
pub const GW_PORT_IP: &str = "10.254.0.250";
pub const GW_SERVICE_CIDR: &str = "100.64.81.0/24";
/// A converge that needs more reconciles than this is not converging.
pub const MAX_RECONCILES: usize = 6;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scenario {
    Create,
    Resync,
    ResyncDrift,
    CidrChange,
    RouterChange,
    PinnedIpChange,
    Delete,
}

pub const SCENARIOS: [Scenario; 7] = [
    Scenario::Create,
    Scenario::Resync,
    Scenario::ResyncDrift,
    Scenario::CidrChange,
    Scenario::RouterChange,
    Scenario::PinnedIpChange,
    Scenario::Delete,
];

/// The customer's side of a cross-tenant stage: its member application credential (written
/// as the link's Secret), its project, and a client on it for fixtures and checks.
pub struct Side {
    pub net: Arc<dyn Neutron>,
    pub project: String,
    pub cred: (String, String),
    pub operator: OperatorIdentity,
    /// The fake cloud, or None on the lab.
    fake: Option<FakeCloud>,
    lab: Option<std::collections::BTreeMap<String, String>>,
    /// The lab client on the customer's credential, made at the first reconcile.
    lab_client: std::sync::OnceLock<Arc<OpenStack>>,
    /// The link's Secret was deleted: the credential does not resolve.
    pub secret_gone: std::sync::atomic::AtomicBool,
}

impl Side {
    fn lab_client(&self, c: &CustomerCredential) -> Arc<OpenStack> {
        self.lab_client
            .get_or_init(|| {
                let lab = self.lab.as_ref().expect("a lab side");
                Arc::new(
                    OpenStack::new(AuthConfig {
                        auth_url: lab["OS_AUTH_URL"].clone(),
                        region: Some("RegionOne".into()),
                        interface: "public".into(),
                        tls: Default::default(),
                        method: AuthMethod::ApplicationCredential {
                            id: c.id.clone(),
                            secret: c.secret.clone(),
                        },
                    })
                    .expect("client"),
                )
            })
            .clone()
    }
}

/// The controller's part for a cross-tenant link, as a fresh process has it: the Secret, and
/// a new client per credential (no memory of earlier checks), stopped by the same crash
/// plan as the operator's client.
struct Source<'a> {
    side: &'a Side,
    crash: Arc<Crash>,
}

#[async_trait]
impl CredentialSource for Source<'_> {
    async fn secret(
        &self,
        _r: &SecretRef,
    ) -> Result<Option<std::collections::BTreeMap<String, Vec<u8>>>, String> {
        if self
            .side
            .secret_gone
            .load(std::sync::atomic::Ordering::Relaxed)
        {
            return Ok(None);
        }
        let (id, secret) = &self.side.cred;
        Ok(Some(
            [
                (
                    "OS_APPLICATION_CREDENTIAL_ID".to_string(),
                    id.as_bytes().to_vec(),
                ),
                (
                    "OS_APPLICATION_CREDENTIAL_SECRET".to_string(),
                    secret.as_bytes().to_vec(),
                ),
            ]
            .into(),
        ))
    }

    fn client(&self, c: &CustomerCredential) -> Arc<dyn CustomerCloud> {
        let crash = self.crash.clone();
        match (&self.side.fake, &self.side.lab) {
            (Some(cloud), _) => Arc::new(Crashing::with_identity(
                Arc::new(cloud.client_with_app_cred(&c.id, c.secret.expose())),
                crash,
            )),
            // One client on the lab, reused: a fresh process would ask Keystone for a token
            // first, which tests nothing here and costs a loaded lab seconds per reconcile.
            // What it found out about the credential is not kept (`checked` is None).
            (None, Some(_)) => Arc::new(Crashing::with_identity(self.side.lab_client(c), crash)),
            (None, None) => unreachable!("a side is on the fake or the lab"),
        }
    }
}

/// One fabric, reused by every point of a scenario: each point makes its own link and
/// routers and removes them, and the fabric must be back where it was after each.
pub struct Stage {
    pub env: Env,
    pub side: Option<Side>,
    /// The gateway pod's transit port (its portFixedIP): reverse routes point at it.
    pub baseline: Vec<String>,
    /// The two service routers every point uses (a link's first, and the one it moves to):
    /// each point leaves them as it found them (checked), so a stage makes them once.
    pub routers: (String, String),
}

impl Stage {
    pub async fn new(env: Env, cross: bool) -> Self {
        let mut env = env;
        let side = if cross {
            Some(match &env.fake {
                Some(cloud) => {
                    let cred = cloud.application_credential("customer", &["member"]);
                    Side {
                        net: Arc::new(cloud.client_with_app_cred(&cred.0, &cred.1)),
                        project: "customer".into(),
                        cred,
                        operator: OperatorIdentity {
                            project_id: "operator".into(),
                            auth_url: "http://127.0.0.1:5000/v3".into(),
                            region: Some("RegionOne".into()),
                        },
                        fake: Some(cloud.clone()),
                        lab: None,
                        lab_client: std::sync::OnceLock::new(),
                        secret_gone: Default::default(),
                    }
                }
                None => {
                    let lab = lab_env().expect("lab.env");
                    Side {
                        net: Arc::new(lab_app_cred_client(&lab, "CUSTOMER")),
                        project: lab["LAB_CUSTOMER_PROJECT_ID"].clone(),
                        cred: (
                            lab["LAB_CUSTOMER_AC_ID"].clone(),
                            lab["LAB_CUSTOMER_AC_SECRET"].clone(),
                        ),
                        operator: OperatorIdentity {
                            project_id: lab["LAB_OPERATOR_PROJECT_ID"].clone(),
                            auth_url: lab["OS_AUTH_URL"].clone(),
                            region: Some("RegionOne".into()),
                        },
                        fake: None,
                        lab: Some(lab),
                        lab_client: std::sync::OnceLock::new(),
                        secret_gone: Default::default(),
                    }
                }
            })
        } else {
            None
        };
        env.port_at_ip(GW_PORT_IP, "gateway-pod").await;
        env.reverse = vec![ReverseTarget {
            gateway: GatewayRef {
                kind: "IPsecGateway".into(),
                namespace: "vpn".into(),
                name: "gw".into(),
            },
            service_cidr: GW_SERVICE_CIDR.into(),
            port_fixed_ip: GW_PORT_IP.into(),
            uid: None,
            created: None,
        }];
        let baseline = port_ids(&env.ports().await);
        let net: &dyn Neutron = match &side {
            Some(s) => s.net.as_ref(),
            None => env.net.as_ref(),
        };
        let mut routers = vec![];
        for name in ["crash-a", "crash-b"] {
            routers.push(net.create_router(&unique(name)).await.expect("router").id);
        }
        let routers = (routers[0].clone(), routers[1].clone());
        Self {
            env,
            side,
            baseline,
            routers,
        }
    }

    pub fn leg_client(&self) -> &dyn Neutron {
        match &self.side {
            Some(s) => s.net.as_ref(),
            None => self.env.net.as_ref(),
        }
    }

    pub async fn teardown(self) {
        let net = self.leg_client();
        for id in [&self.routers.0, &self.routers.1] {
            let _ = net.set_routes(id, &[], None).await;
            let _ = net.delete_router(id).await;
        }
        let others: Vec<&dyn Neutron> = self
            .side
            .as_ref()
            .map(|s| s.net.as_ref() as &dyn Neutron)
            .into_iter()
            .collect();
        self.env.teardown(&others).await;
    }
}

pub fn port_ids(ports: &[Port]) -> Vec<String> {
    let mut ids: Vec<String> = ports.iter().map(|p| p.id.clone()).collect();
    ids.sort();
    ids
}

/// One link and its two routers, made for one point.
pub struct Point {
    pub link: ClusterLink,
    pub a: String,
    pub b: String,
}

pub fn new_link(stage: &Stage, s: ClusterLinkSpec) -> ClusterLink {
    let name = unique("crash");
    let mut s = s;
    if let Some(side) = &stage.side {
        s.credentials_secret_ref = Some(SecretRef {
            name: format!("clusterlink-{name}"),
            namespace: NS.into(),
        });
        s.customer_project_id = Some(side.project.clone());
    }
    let mut l = ClusterLink::new(&name, s);
    // FNV-1a of the unique name: a UID no other point (or run) shares.
    let h = name.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    l.metadata.uid = Some(format!(
        "0c0c0c0c-0000-4000-8000-{:012x}",
        h & 0xffff_ffff_ffff
    ));
    l.metadata.generation = Some(1);
    l.metadata.creation_timestamp = Some(Time(Timestamp::from_second(1_700_000_000).unwrap()));
    if stage.side.is_some() {
        l.metadata.annotations =
            Some([(ANNOTATION_API_ACCESS.to_string(), "none".to_string())].into());
    }
    l
}

/// One reconcile as a fresh process runs it, every cloud call (the customer's token
/// included) going through `crash`.
pub async fn reconcile_with(stage: &Stage, link: &ClusterLink, crash: &Arc<Crash>) -> Outcome {
    through_door(stage, link, crash, None).await.outcome
}

/// One resync of a converged link as the controller runs it in a resync window: offered the
/// window's snapshot (`snaps`), every cloud call through `crash`; the outcome and the path
/// the resync took.
pub async fn resync_batched(
    stage: &Stage,
    link: &ClusterLink,
    snaps: &bnerd_engine::resync::Snapshots,
    crash: &Arc<Crash>,
) -> (Outcome, Option<bnerd_engine::ResyncPath>) {
    let done = through_door(stage, link, crash, Some(snaps)).await;
    (done.outcome, done.resync)
}

async fn through_door(
    stage: &Stage,
    link: &ClusterLink,
    crash: &Arc<Crash>,
    snaps: Option<&bnerd_engine::resync::Snapshots>,
) -> bnerd_engine::Reconciled {
    let status = link.status.clone().unwrap_or_default();
    let input = link_input(link, &status, &[], &stage.env.reverse).expect("uid");
    let net = Crashing::new(stage.env.net.clone(), crash.clone());
    let source = stage.side.as_ref().map(|side| Source {
        side,
        crash: crash.clone(),
    });
    let no_routers = Vec::new;
    engine(stage, &net, source.as_ref())
        .with_batch(snaps.map(|snapshots| bnerd_engine::Batch {
            snapshots,
            routers: &no_routers,
        }))
        .reconcile(&input)
        .await
}

/// The engine through the door, as the controller makes it: a cross-tenant link's customer
/// credential (when the stage has one) read through `source`.
fn engine<'a>(
    stage: &'a Stage,
    net: &'a Crashing,
    source: Option<&'a Source<'a>>,
) -> LinkEngine<'a> {
    match (&stage.side, source) {
        (Some(side), Some(source)) => LinkEngine::new(
            net,
            &stage.env.fabric,
            Customers {
                source,
                operator: &side.operator,
                namespace: NS,
            },
        ),
        _ => LinkEngine::same_tenant(net, &stage.env.fabric),
    }
}

/// One unwind of a deleted link as a fresh process runs it, through `crash`.
pub async fn unwind_with(
    stage: &Stage,
    link: &ClusterLink,
    crash: &Arc<Crash>,
) -> Result<(), String> {
    unwound_with(stage, link, crash).await.map(|_| ())
}

/// [`unwind_with`], with what the finished unwind reports (its actions make Events).
pub async fn unwound_with(
    stage: &Stage,
    link: &ClusterLink,
    crash: &Arc<Crash>,
) -> Result<UnwindPlan, String> {
    unwind_failing(stage, link, crash)
        .await
        .map_err(|f| format!("{:?}: {}", f.reason, f.message))
}

/// [`unwound_with`], the failure kept whole: its `retryable` is the unwind's retry decision.
pub async fn unwind_failing(
    stage: &Stage,
    link: &ClusterLink,
    crash: &Arc<Crash>,
) -> Result<UnwindPlan, StepFail> {
    let status = link.status.clone().unwrap_or_default();
    let input = link_input(link, &status, &[], &stage.env.reverse).expect("uid");
    let net = Crashing::new(stage.env.net.clone(), crash.clone());
    let source = stage.side.as_ref().map(|side| Source {
        side,
        crash: crash.clone(),
    });
    match engine(stage, &net, source.as_ref())
        .unwind(&input, &stage.env.reverse)
        .await
    {
        Unwound::Done(plan) => Ok(plan),
        Unwound::Stuck(f) => Err(f),
        Unwound::Held(held) => Err(held.fail),
    }
}

/// The retry decision a failed unwind states, in a reconcile's terms: a retryable failure
/// (weather) is tried again soon, any other waits for a change or the resync.
pub fn unwind_retry(f: &StepFail) -> Retry {
    if f.retryable {
        Retry::Backoff
    } else {
        Retry::Resync
    }
}

/// One unwind as a fresh process runs it: `Some(whether the link's annotations release it)`
/// when it is held (the controller then keeps or abandons it), `None` when it is not.
pub async fn unwind_held(stage: &Stage, link: &ClusterLink) -> Option<bool> {
    let status = link.status.clone().unwrap_or_default();
    let input = link_input(link, &status, &[], &stage.env.reverse).expect("uid");
    let crash = Crash::counting();
    let net = Crashing::new(stage.env.net.clone(), crash.clone());
    let source = stage.side.as_ref().map(|side| Source {
        side,
        crash: crash.clone(),
    });
    match engine(stage, &net, source.as_ref())
        .unwind(&input, &stage.env.reverse)
        .await
    {
        Unwound::Held(held) => Some(held.released_by(link)),
        _ => None,
    }
}

pub fn ready(status: &ClusterLinkStatus) -> bool {
    status
        .conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
}

/// A fresh engine reconciles until Ready (status written after each); the number it took.
pub async fn converge(stage: &Stage, link: &mut ClusterLink, at: &str) -> usize {
    for n in 1..=MAX_RECONCILES {
        let out = reconcile_with(stage, link, &Crash::counting()).await;
        link.status = Some(out.status.clone());
        if ready(&out.status) && out.retry == Retry::Resync {
            return n;
        }
    }
    panic!(
        "{at}: not Ready after {MAX_RECONCILES} reconciles: {:#?}",
        link.status.as_ref().map(|s| &s.conditions)
    );
}

/// A fresh engine unwinds until the unwind passes (the finalizer goes, the object with it).
pub async fn converge_delete(stage: &Stage, link: &ClusterLink, at: &str) -> usize {
    let mut last = String::new();
    for n in 1..=MAX_RECONCILES {
        match unwind_with(stage, link, &Crash::counting()).await {
            Ok(()) => return n,
            Err(e) => last = e,
        }
    }
    panic!("{at}: unwind not done after {MAX_RECONCILES} tries: {last}");
}

pub fn own(ports: &[Port], uid: &str) -> Vec<Port> {
    ports
        .iter()
        .filter(|p| leg_owner_uid(&p.tags, &p.description) == Some(uid))
        .cloned()
        .collect()
}

/// The invariants of a link that should be Ready (`None`: deleted).
pub async fn check(stage: &Stage, point: &Point, link: Option<&ClusterLink>, at: &str) {
    let env = &stage.env;
    let uid = point.link.metadata.uid.clone().unwrap_or_default();
    let ports = env.ports().await;
    let legs = own(&ports, &uid);
    let gw_routes = env.gateway_routes().await;
    let a = stage
        .leg_client()
        .get_router(&point.a)
        .await
        .expect("router a");
    let b = stage
        .leg_client()
        .get_router(&point.b)
        .await
        .expect("router b");
    // No route on the gateway router may point at an address no port of a link holds (the
    // stage has one link, so: none but its leg's).
    for r in &gw_routes {
        assert!(
            legs.iter().any(|p| p.has_ip(&r.nexthop)),
            "{at}: gateway route {} via {} points at no leg of the link; legs {:?}",
            r.destination,
            r.nexthop,
            legs.iter().map(|p| p.first_ip()).collect::<Vec<_>>()
        );
    }
    let Some(link) = link else {
        assert!(legs.is_empty(), "{at}: legs left after delete: {legs:#?}");
        assert!(
            gw_routes.is_empty(),
            "{at}: gateway routes left: {gw_routes:?}"
        );
        assert!(
            a.routes.is_empty(),
            "{at}: routes left on router a: {:?}",
            a.routes
        );
        assert!(
            b.routes.is_empty(),
            "{at}: routes left on router b: {:?}",
            b.routes
        );
        assert_eq!(
            port_ids(&ports),
            stage.baseline,
            "{at}: the transit network is not back to its first state"
        );
        return;
    };
    let st = link.status.clone().unwrap_or_default();
    assert_eq!(legs.len(), 1, "{at}: orphan or duplicate legs: {legs:#?}");
    let leg = &legs[0];
    let ip = leg.first_ip().unwrap_or_default().to_string();
    let want_router = if link.spec.service_cluster_router == point.a {
        &a
    } else {
        &b
    };
    let other = if want_router.id == a.id { &b } else { &a };
    assert!(
        leg.is_interface_of(&want_router.id),
        "{at}: the leg is not attached to the router the spec names: {leg:#?}"
    );
    if let Some(pin) = &link.spec.transit_ip {
        assert_eq!(&ip, pin, "{at}: the leg is not at the pinned address");
    }
    // Nothing beyond the baseline and the one leg on the transit network.
    let mut expected = stage.baseline.clone();
    expected.push(leg.id.clone());
    expected.sort();
    assert_eq!(
        port_ids(&ports),
        expected,
        "{at}: stray ports on the transit network"
    );
    let cidr = &link.spec.service_cluster_cidr;
    assert_eq!(
        gw_routes,
        vec![Route::new(cidr, &ip)],
        "{at}: gateway router routes"
    );
    let reverse = vec![Route::new(GW_SERVICE_CIDR, GW_PORT_IP)];
    assert_eq!(
        want_router.routes, reverse,
        "{at}: reverse routes on the leg's router"
    );
    assert!(
        other.routes.is_empty(),
        "{at}: routes left on the router the leg left: {:?}",
        other.routes
    );
    // Status true to the cloud.
    assert_eq!(
        st.leg_port_id.as_deref(),
        Some(leg.id.as_str()),
        "{at}: status.legPortID"
    );
    assert_eq!(
        st.transit_ip.as_deref(),
        Some(ip.as_str()),
        "{at}: status.transitIP"
    );
    assert_eq!(
        st.service_router_id.as_deref(),
        Some(want_router.id.as_str()),
        "{at}: status.serviceRouterID"
    );
    let gr = st.gateway_route.clone().expect("status.gatewayRoute");
    assert_eq!(
        (gr.destination.as_str(), gr.nexthop.as_str()),
        (cidr.as_str(), ip.as_str()),
        "{at}: status.gatewayRoute"
    );
    let recorded: Vec<Route> = st
        .reverse_routes
        .iter()
        .map(|r| Route::new(&r.service_cidr, &r.next_hop))
        .collect();
    assert_eq!(recorded, reverse, "{at}: status.reverseRoutes");
}

/// Make the point's link and routers, and bring the link to where the scenario starts.
pub async fn prepare(stage: &Stage, scenario: Scenario) -> Point {
    let (a, b) = stage.routers.clone();
    let pin = (scenario == Scenario::PinnedIpChange).then_some(PIN);
    let mut link = new_link(stage, spec(&a, CIDR, pin));
    let mut point = Point {
        link: link.clone(),
        a: a.clone(),
        b: b.clone(),
    };
    if scenario == Scenario::Create {
        return point;
    }
    converge(stage, &mut link, "setup").await;
    let mut bump = true;
    match scenario {
        Scenario::Create | Scenario::Resync | Scenario::Delete => bump = false,
        Scenario::ResyncDrift => {
            // Out of band: someone removed the gateway route and the reverse route.
            bump = false;
            let st = link.status.clone().unwrap_or_default();
            let gr = st.gateway_route.expect("route");
            stage
                .env
                .remove_routes(
                    &stage.env.fabric.gateway_router_id,
                    &[Route::new(&gr.destination, &gr.nexthop)],
                )
                .await
                .expect("drift");
            remove_reverse(stage, &a).await;
        }
        Scenario::CidrChange => link.spec.service_cluster_cidr = CIDR_NEW.into(),
        Scenario::RouterChange => link.spec.service_cluster_router = b.clone(),
        Scenario::PinnedIpChange => link.spec.transit_ip = Some(PIN_NEW.into()),
    }
    if bump {
        link.metadata.generation = link.metadata.generation.map(|g| g + 1);
    }
    point.link = link;
    point
}

pub async fn remove_reverse(stage: &Stage, router: &str) {
    let net = stage.leg_client();
    let r = net.get_router(router).await.expect("router");
    let next: Vec<Route> = r
        .routes
        .iter()
        .filter(|x| x.destination != GW_SERVICE_CIDR)
        .cloned()
        .collect();
    net.set_routes(router, &next, Some(r.revision_number))
        .await
        .expect("drift");
}

/// One point: prepare, run the scenario's reconcile (or unwind) through `crash` (stopped,
/// or failing one call), converge with a fresh engine, check, clean up. Whether the run was
/// stopped (false: it finished, e.g. in fewer calls than the stop) and how many calls it
/// made. `what` names the point in every assertion.
pub async fn point(
    stage: &Stage,
    scenario: Scenario,
    crash: Arc<Crash>,
    what: &str,
) -> (bool, usize) {
    let (tripped, calls, _) = point_with(stage, scenario, crash, what).await;
    (tripped, calls)
}

/// How a run that finished ended: converged (Ready, or unwound), and when to look again (a
/// reconcile's `Retry`; a failed unwind's, from its failure's `retryable`: [`unwind_retry`]).
#[derive(Debug, Clone, Copy)]
pub struct Ended {
    pub done: bool,
    pub retry: Retry,
}

/// [`point`], also saying how the run ended when it was not stopped.
pub async fn point_with(
    stage: &Stage,
    scenario: Scenario,
    crash: Arc<Crash>,
    what: &str,
) -> (bool, usize, Option<Ended>) {
    let mut p = prepare(stage, scenario).await;
    let mut ended = None;
    let mut deleted = false;
    let finished = if scenario == Scenario::Delete {
        let done = run_until_crash(&crash, unwind_failing(stage, &p.link, &crash)).await;
        deleted = matches!(done, Some(Ok(_)));
        if let Some(d) = &done {
            ended = Some(Ended {
                done: d.is_ok(),
                // A finished unwind has nothing to look at again.
                retry: d.as_ref().err().map_or(Retry::Resync, unwind_retry),
            });
        }
        done.is_some()
    } else {
        let out = run_until_crash(&crash, reconcile_with(stage, &p.link, &crash)).await;
        if let Some(out) = &out {
            p.link.status = Some(out.status.clone());
            ended = Some(Ended {
                done: ready(&out.status),
                retry: out.retry,
            });
        }
        out.is_some()
    };
    let tripped = !finished;
    let calls = crash.calls();
    let at = format!(
        "{scenario:?}{} {what} (calls: {:?})",
        if stage.side.is_some() {
            " cross-tenant"
        } else {
            ""
        },
        crash.log()
    );
    if scenario == Scenario::Delete {
        if !deleted {
            converge_delete(stage, &p.link, &at).await;
        }
        check(stage, &p, None, &at).await;
    } else {
        let mut link = p.link.clone();
        converge(stage, &mut link, &at).await;
        check(stage, &p, Some(&link), &at).await;
        converge_delete(stage, &link, &format!("{at}, cleanup")).await;
        p.link = link;
        check(stage, &p, None, &format!("{at}, after cleanup")).await;
    }
    (tripped, calls, ended)
}
