//! `kubectl clusterlink plan` predicts the reconcile: for each case the plan is made, then the
//! reconcile runs for real through a tap that records its writes the way a plan names them,
//! and the two lists (and the conditions) must be equal. On the fake and on the real lab.
//! A cross-tenant link is planned with its customer's credential (both credentials' writes in
//! one list, each named by its credential), and a deleting link's plan is its unwind.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bnerd_api::SecretRef;
use bnerd_api::names::{ANNOTATION_ABANDON, ANNOTATION_API_ACCESS, KEY_AC_ID, KEY_AC_SECRET};
use bnerd_cloud::{AuthConfig, AuthMethod, Neutron, OpenStack, Route, RouterQuery, SecretString};
use bnerd_clusterlink_cli::plan::{CustomerAccess, Plan, Released, plan};
use bnerd_engine::overlay::{CustomerSide, Overlay, PICKED, PlannedWrite, Whose};
use bnerd_engine::view::{input_of, peers_of};
use bnerd_engine::{
    CredentialSource, CustomerCloud, CustomerCredential, Customers, LinkEngine, OperatorIdentity,
    Unwound,
};
use bnerd_testkit::{Env, both, spec};

/// Plan `name`, then reconcile it for real through a tap; both write lists and conditions.
async fn plan_then_apply(env: &mut Env, name: &str) -> (Plan, Vec<PlannedWrite>) {
    let (p, applied, _) = plan_and_run(env, name, None).await;
    (p, applied.into_iter().map(|(_, w)| w).collect())
}

/// Plan and apply link `name`, whose attach Neutron refuses: the same writes, not Ready,
/// EnsureRouterHasPortFailed, and a hint containing `hint`.
async fn refused_attach(env: &mut Env, name: &str, hint: &str) -> Plan {
    let (p, applied) = plan_then_apply(env, name).await;
    assert_eq!(kinds(&p.writes), kinds(&applied), "{name}");
    assert!(!p.ready);
    assert!(
        p.conditions
            .iter()
            .any(|c| c.reason == "EnsureRouterHasPortFailed"),
        "{p:?}"
    );
    assert!(p.hints.iter().any(|h| h.contains(hint)), "{hint}: {p:?}");
    // Neutron's words, as the cloud behind `env` says them (the two backends differ).
    let message = |conditions: Vec<(String, String)>| {
        conditions
            .into_iter()
            .find(|(reason, _)| reason == "EnsureRouterHasPortFailed")
            .map(|(_, m)| m)
            .unwrap_or_default()
    };
    let planned = message(
        p.conditions
            .iter()
            .map(|c| (c.reason.clone(), c.message.clone()))
            .collect(),
    );
    let applied = message(
        env.link(name)
            .status
            .clone()
            .unwrap_or_default()
            .conditions
            .into_iter()
            .map(|c| (c.reason, c.message))
            .collect(),
    );
    let words = |m: &str| {
        m.find("Bad router request:")
            .map(|i| m[i..].split(". ").next().unwrap_or_default().to_string())
            .unwrap_or_default()
    };
    assert!(
        !words(&applied).is_empty() && words(&planned) == words(&applied),
        "{name}: the plan words Neutron's refusal as the cloud does\nplanned: {planned}\napplied: {applied}"
    );
    p
}

fn kinds(ws: &[PlannedWrite]) -> Vec<String> {
    ws.iter().map(|w| w.to_string()).collect()
}

async fn plan_predicts_the_reconcile(mut env: Env) {
    // Create: the lowest free address, attach, the gateway route.
    let a = env.router("plan-a").await;
    env.add_link("create", spec(&a.id, "10.81.0.0/16", None));
    let (p, applied) = plan_then_apply(&mut env, "create").await;
    assert_eq!(kinds(&p.writes), kinds(&applied), "create");
    assert!(p.ready);
    let text = kinds(&p.writes).join("\n");
    assert!(text.contains("at 10.254.0.3"), "{text}");
    // Added alone, or (without extraroute-atomic) as the router's whole new table.
    assert!(text.contains("10.81.0.0/16 via 10.254.0.3"), "{text}");
    // A converged link plans nothing.
    let (p, applied) = plan_then_apply(&mut env, "create").await;
    assert!(p.writes.is_empty() && applied.is_empty(), "{p:?}");

    // Adopt: an untagged port already attached at the pinned address is taken over.
    let b = env.router("plan-b").await;
    let hand = env.port_at_ip("10.254.0.20", "hand-made").await;
    env.net.add_router_interface(&b.id, &hand.id).await.unwrap();
    env.add_link("adopt", spec(&b.id, "10.82.0.0/16", Some("10.254.0.20")));
    let (p, applied) = plan_then_apply(&mut env, "adopt").await;
    assert_eq!(kinds(&p.writes), kinds(&applied), "adopt");
    assert!(p.ready);
    assert!(
        !p.writes
            .iter()
            .any(|w| matches!(w, PlannedWrite::CreatePort { .. })),
        "adopting creates no port: {p:?}"
    );

    // A hand-made leg at another address on the router: the attach is refused, and the
    // plan says which address to pin.
    let c = env.router("plan-c").await;
    let other = env.port_at_ip("10.254.0.30", "hand-made-2").await;
    env.net
        .add_router_interface(&c.id, &other.id)
        .await
        .unwrap();
    env.add_link("refused", spec(&c.id, "10.83.0.0/16", None));
    refused_attach(&mut env, "refused", "pin spec.transitIP: 10.254.0.30").await;

    // A second link on a router that another link already holds: the attach is refused too,
    // but that leg is the other link's, so pinning its address would only be refused as
    // claimed; the hint names the link holding the router instead.
    env.add_link("second", spec(&a.id, "10.85.0.0/16", None));
    let holder = format!("router {} is already linked by ClusterLink create", a.id);
    let p = refused_attach(&mut env, "second", &holder).await;
    assert!(
        !p.hints.iter().any(|h| h.contains("pin spec.transitIP")),
        "{p:?}"
    );

    // A foreign route for the same CIDR on the gateway router: RouteConflict, nothing routed.
    let d = env.router("plan-d").await;
    let mut table = env.get_router(&env.fabric.gateway_router_id).await.routes;
    table.push(Route::new("10.84.0.0/16", "10.254.0.99"));
    env.net
        .set_routes(&env.fabric.gateway_router_id, &table, None)
        .await
        .unwrap();
    env.add_link("foreign", spec(&d.id, "10.84.0.0/16", None));
    let (p, applied) = plan_then_apply(&mut env, "foreign").await;
    assert_eq!(kinds(&p.writes), kinds(&applied), "foreign route");
    assert!(
        p.conditions.iter().any(|c| c.reason == "RouteConflict"),
        "{p:?}"
    );

    // Overlap with a Ready link's CIDR: CIDROverlap.
    let e = env.router("plan-e").await;
    env.add_link("overlap", spec(&e.id, "10.81.128.0/17", None));
    let (p, applied) = plan_then_apply(&mut env, "overlap").await;
    assert_eq!(kinds(&p.writes), kinds(&applied), "overlap");
    assert!(
        p.conditions.iter().any(|c| c.reason == "CIDROverlap"),
        "{p:?}"
    );

    // A duplicate leg (a second port with the link's UID): the plan removes the same one.
    let uid = env.link("create").metadata.uid.clone().unwrap();
    let dup = env.port_at_ip("10.254.0.50", "dup").await;
    env.net
        .set_port_tags(
            &dup.id,
            &[
                "bnerd-vpn-operator".into(),
                format!("clusterlink-uid={uid}"),
                "clusterlink=create".into(),
            ],
        )
        .await
        .unwrap();
    let (p, applied) = plan_then_apply(&mut env, "create").await;
    assert_eq!(kinds(&p.writes), kinds(&applied), "duplicate leg");
    assert!(
        p.writes
            .iter()
            .any(|w| matches!(w, PlannedWrite::DeletePort { port_id } if *port_id == dup.id)),
        "{p:?}"
    );

    // The routers stay findable by name for the plan as for the reconcile.
    let found = env
        .net
        .list_routers(&RouterQuery {
            name: Some(a.name.clone()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(found.len(), 1);
    for name in ["create", "adopt", "refused", "second", "foreign", "overlap"] {
        env.delete(name).await;
    }
}
both!(plan_predicts_the_reconcile);

/// The same on the lab's ML2/OVN Neutron, whose L3 plugin words the refused attach otherwise
/// (`both!` runs it on a fake that answers as ML2/OVN does).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_predicts_the_reconcile_on_the_ml2_ovn_lab() {
    let Some(env) =
        bnerd_testkit::ovn_env_for("plan_predicts_the_reconcile_on_the_ml2_ovn_lab").await
    else {
        return;
    };
    let cleanup = env.cleanup();
    plan_predicts_the_reconcile(env).await;
    cleanup.teardown(&[]).await;
}

const NS: &str = bnerd_api::names::DEFAULT_CREDENTIALS_NAMESPACE;

/// The customer of a cross-tenant link: its member application credential as its Secret
/// holds it, and clients on it (the fake's, or the lab's at the operator's Keystone).
struct Customer {
    fake: Option<bnerd_cloud_fake::FakeCloud>,
    lab: Option<(BTreeMap<String, String>, Option<String>)>,
    id: String,
    secret: String,
    project: String,
    operator: OperatorIdentity,
    /// The Secret was deleted.
    secret_gone: std::sync::atomic::AtomicBool,
}

impl Customer {
    fn of(env: &Env) -> Self {
        match &env.fake {
            Some(cloud) => {
                let (id, secret) = cloud.application_credential("customer", &["member"]);
                Customer {
                    fake: Some(cloud.clone()),
                    lab: None,
                    id,
                    secret,
                    project: "customer".into(),
                    operator: OperatorIdentity {
                        project_id: env.fabric.operator_project_id.clone(),
                        auth_url: "http://127.0.0.1:5000/v3".into(),
                        region: Some("RegionOne".into()),
                    },
                    secret_gone: Default::default(),
                }
            }
            None => {
                let lab = bnerd_testkit::lab_env().expect("lab.env");
                let tagged = env
                    .fabric
                    .tags_at_create
                    .then(|| lab["LAB_NEUTRON_TAGGED_URL"].clone());
                Customer {
                    id: lab["LAB_CUSTOMER_AC_ID"].clone(),
                    secret: lab["LAB_CUSTOMER_AC_SECRET"].clone(),
                    project: lab["LAB_CUSTOMER_PROJECT_ID"].clone(),
                    operator: OperatorIdentity {
                        project_id: lab["LAB_OPERATOR_PROJECT_ID"].clone(),
                        auth_url: lab["OS_AUTH_URL"].clone(),
                        region: Some(bnerd_testkit::lab_region(&lab)),
                    },
                    fake: None,
                    lab: Some((lab, tagged)),
                    secret_gone: Default::default(),
                }
            }
        }
    }

    /// A client on the customer's credential.
    fn net(&self, id: &str, secret: &str) -> Arc<dyn Neutron> {
        match &self.fake {
            Some(cloud) => Arc::new(cloud.client_with_app_cred(id, secret)),
            None => self.lab_client(id, SecretString::new(secret.to_string())),
        }
    }

    /// The lab's client on an application credential, at the operator's Keystone (and, on a
    /// tagged env, its Neutron).
    fn lab_client(&self, id: &str, secret: SecretString) -> Arc<OpenStack> {
        let (lab, tagged) = self.lab.as_ref().expect("a lab customer");
        let client = OpenStack::new(AuthConfig {
            auth_url: lab["OS_AUTH_URL"].clone(),
            region: Some(bnerd_testkit::lab_region(lab)),
            interface: "public".into(),
            method: AuthMethod::ApplicationCredential {
                id: id.into(),
                secret,
            },
            tls: Default::default(),
        })
        .expect("client");
        Arc::new(match tagged {
            Some(u) => client.with_neutron_url(u.clone()),
            None => client,
        })
    }

    fn access(&self) -> CustomerAccess<'_> {
        CustomerAccess {
            source: self,
            operator: &self.operator,
            namespace: NS,
        }
    }
}

#[async_trait]
impl CredentialSource for Customer {
    async fn secret(&self, _r: &SecretRef) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
        if self.secret_gone.load(std::sync::atomic::Ordering::Relaxed) {
            return Ok(None);
        }
        Ok(Some(
            [
                (KEY_AC_ID.to_string(), self.id.as_bytes().to_vec()),
                (KEY_AC_SECRET.to_string(), self.secret.as_bytes().to_vec()),
            ]
            .into(),
        ))
    }

    fn client(&self, c: &CustomerCredential) -> Arc<dyn CustomerCloud> {
        match &self.fake {
            Some(cloud) => Arc::new(cloud.client_with_app_cred(&c.id, c.secret.expose())),
            None => self.lab_client(&c.id, c.secret.clone()),
        }
    }
}

/// Plan link `name` (a cross-tenant one with `customer`), then reconcile it, or unwind it
/// when it is being deleted, for real through a tap, both credentials' writes in one list.
/// Both lists as "credential: write" lines, the address Neutron picked named as the plan
/// names it; the link's status moves on as the real run left it.
async fn plan_then_run(
    env: &mut Env,
    name: &str,
    customer: Option<&Customer>,
) -> (Plan, Vec<String>, Vec<String>) {
    let (planned, applied, picked) = plan_and_run(env, name, customer).await;
    let applied: Vec<String> = applied
        .iter()
        .map(|(c, w)| {
            let line = format!("{}: {w}", c.as_str());
            match &picked {
                Some(ip) => line.replace(ip.as_str(), PICKED),
                None => line,
            }
        })
        .collect();
    let planned_lines: Vec<String> = planned
        .writes
        .iter()
        .zip(&planned.credentials)
        .map(|(w, c)| format!("{}: {w}", c.as_str()))
        .collect();
    (planned, planned_lines, applied)
}

/// A create whose middle runs two halves side by side (a `PerCustomer` link's edge half beside
/// its leg: docs/design.md, "Per-customer transit") interleaves them as Neutron answers, and
/// numbers the new objects in the order they were made. So does its footing (the first `head`
/// writes): the edge router is made beside the network, and the network's subnet beside its
/// share, so only the network's place before its subnet and its share is fixed. The plan holds
/// when the footing's writes are the same ones with the network first on its branch, the last
/// `tail` (made after both halves) are the same, and the writes in between are the same ones,
/// whatever their interleaving.
fn same_writes_side_by_side(planned: &[String], applied: &[String], head: usize, tail: usize) {
    assert_eq!(planned.len(), applied.len(), "{planned:#?}\n{applied:#?}");
    let n = planned.len();
    let footing = |l: &[String]| {
        let first_of_network_branch = l[..head]
            .iter()
            .find(|w| !w.contains("create router"))
            .cloned();
        let mut all = l[..head].to_vec();
        all.sort();
        (all, first_of_network_branch)
    };
    assert_eq!(footing(planned), footing(applied), "made before the halves");
    let ends = |l: &[String]| {
        let mut e: Vec<String> = l[n - tail..].iter().map(|w| unnumbered(w)).collect();
        e.sort();
        e
    };
    assert_eq!(ends(planned), ends(applied), "made after both halves");
    let middle = |l: &[String]| {
        let mut m: Vec<String> = l[head..n - tail].iter().map(|w| unnumbered(w)).collect();
        m.sort();
        m
    };
    assert_eq!(middle(planned), middle(applied), "the halves' writes");
}

/// The footing's branches may answer in any order on a real Neutron (a run once made the
/// subnet and the share before the edge router, where the plan had the router second); only a
/// subnet or a share before its network breaks the plan.
#[test]
fn a_footing_interleaved_as_neutron_answered_still_holds_the_plan() {
    let lines = |footing: [&str; 4]| -> Vec<String> {
        footing
            .iter()
            .chain(&["attach subnet", "create port", "create route 1"])
            .map(|w| w.to_string())
            .collect()
    };
    let planned = lines([
        "create network",
        "create router",
        "share network",
        "create subnet",
    ]);
    for applied in [
        [
            "create network",
            "create subnet",
            "share network",
            "create router",
        ],
        [
            "create router",
            "create network",
            "share network",
            "create subnet",
        ],
    ] {
        same_writes_side_by_side(&planned, &lines(applied), 4, 1);
    }
    let broken = lines([
        "create subnet",
        "create network",
        "share network",
        "create router",
    ]);
    let held = std::panic::catch_unwind(|| same_writes_side_by_side(&planned, &broken, 4, 1));
    assert!(held.is_err(), "a subnet before its network passed");
}

/// `w` without the creation-order number after a placeholder (`<new port> 3` -> `<new port>`,
/// `<new port> 3:` -> `<new port>:`).
fn unnumbered(w: &str) -> String {
    let mut out: Vec<String> = vec![];
    for x in w.split(' ') {
        let digits = x.trim_end_matches(':');
        let numbered = out.last().is_some_and(|p| p.ends_with('>'))
            && !digits.is_empty()
            && digits.chars().all(|c| c.is_ascii_digit());
        match (numbered, out.last_mut()) {
            (true, Some(p)) => p.push_str(&x[digits.len()..]),
            _ => out.push(x.to_string()),
        }
    }
    out.join(" ")
}

/// The plan of link `name`, the writes of the real run (each with its credential), and the
/// address Neutron picked for a leg created without one.
async fn plan_and_run(
    env: &mut Env,
    name: &str,
    customer: Option<&Customer>,
) -> (Plan, Vec<(Whose, PlannedWrite)>, Option<String>) {
    let link = env.link(name).clone();
    let planned = plan(
        env.net.as_ref(),
        &env.fabric,
        &link,
        &env.links,
        &env.reverse,
        customer.map(Customer::access),
    )
    .await
    .expect("plan");
    let status = link.status.clone().unwrap_or_default();
    let deleting = link.metadata.deletion_timestamp.is_some();
    let peers = if deleting {
        vec![]
    } else {
        peers_of(&link, env.links.iter())
    };
    let input = input_of(&link, &status, &peers, &env.reverse).expect("uid");
    let tap = Overlay::tap(env.net.as_ref());
    let side = customer.map(|c| CustomerSide::beside(&tap, c));
    let engine = match (&side, customer) {
        (Some(side), Some(c)) => LinkEngine::new(
            &tap,
            &env.fabric,
            Customers {
                source: side,
                operator: &c.operator,
                namespace: NS,
            },
        ),
        _ => LinkEngine::same_tenant(&tap, &env.fabric),
    };
    let after = if deleting {
        match engine.unwind(&input, &env.reverse).await {
            Unwound::Done(_) => {
                assert_eq!(planned.deleting, Some(Released::Yes), "{name}: {planned:?}");
                status.clone()
            }
            other => panic!("{name}: the unwind did not finish: {other:?}"),
        }
    } else {
        let out = engine.reconcile(&input).await.outcome;
        let mut planned_conditions: Vec<(String, String, String)> = planned
            .conditions
            .iter()
            .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
            .collect();
        let mut applied: Vec<(String, String, String)> = out
            .status
            .conditions
            .iter()
            .map(|c| (c.type_.clone(), c.status.clone(), c.reason.clone()))
            .collect();
        planned_conditions.sort();
        applied.sort();
        let failed: Vec<&str> = out
            .status
            .conditions
            .iter()
            .filter(|c| c.status == "False")
            .map(|c| c.message.as_str())
            .collect();
        assert_eq!(
            planned_conditions, applied,
            "{name}: conditions (the real run's failures: {failed:?})"
        );
        out.status
    };
    // The address Neutron picked for a leg created without one, as the plan names it.
    let picked = after.transit_ip.clone().filter(|_| {
        tap.writes().iter().any(|w| {
            matches!(
                w,
                PlannedWrite::CreatePort {
                    ip_address: None,
                    ..
                }
            )
        })
    });
    let applied = tap.writes_by();
    let i = env
        .links
        .iter()
        .position(|l| l.metadata.name.as_deref() == Some(name))
        .expect("link");
    if deleting {
        env.links.remove(i);
    } else {
        env.links[i].status = Some(after);
    }
    (planned, applied, picked)
}

fn mark_deleting(env: &mut Env, name: &str) {
    let i = env
        .links
        .iter()
        .position(|l| l.metadata.name.as_deref() == Some(name))
        .expect("link");
    env.links[i].metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
    );
}

/// A deleting link's plan is its unwind: the gateway route, the detach (which deletes the
/// leg), in the unwind order (docs/design.md, "The unwind order"), and the finalizer goes; the
/// real unwind writes the same list.
async fn plan_predicts_the_unwind(mut env: Env) {
    let a = env.router("plan-unwind").await;
    env.add_link("going", spec(&a.id, "10.87.0.0/16", None));
    let (p, planned, applied) = plan_then_run(&mut env, "going", None).await;
    assert_eq!(planned, applied, "create");
    assert!(p.ready && p.deleting.is_none(), "{p:?}");
    mark_deleting(&mut env, "going");
    let (p, planned, applied) = plan_then_run(&mut env, "going", None).await;
    assert_eq!(planned, applied, "unwind");
    assert!(!p.ready, "{p:?}");
    let text = planned.join("\n");
    assert!(
        text.contains("remove route 10.87.0.0/16 via 10.254.0.3")
            || text.contains("set the routes of router"),
        "{text}"
    );
    let route = planned
        .iter()
        .position(|l| l.contains("route"))
        .expect("route");
    let detach = planned
        .iter()
        .position(|l| l.contains("detach port"))
        .expect("detach");
    assert!(route < detach, "the gateway route goes first: {text}");
    assert!(
        env.leg_ports().await.is_empty(),
        "the real unwind left no leg"
    );
    // Nothing left: the plan of a deleting link that built nothing writes nothing.
    env.add_link("never", spec(&a.id, "10.88.0.0/16", None));
    mark_deleting(&mut env, "never");
    let (p, planned, applied) = plan_then_run(&mut env, "never", None).await;
    assert!(planned.is_empty() && applied.is_empty(), "{p:?}");
    assert_eq!(p.deleting, Some(Released::Yes));
}
both!(plan_predicts_the_unwind);

/// A cross-tenant link, planned with its customer's credential read from its Secret: the
/// share (operator), the leg at the address Neutron picks and its attach (customer), the
/// gateway route (operator); the real reconcile writes the same list with the same
/// credentials. Then its unwind, planned and run the same way.
async fn plan_predicts_a_cross_tenant_link(mut env: Env) {
    let (customer, router) = add_cross_tenant_link(
        &mut env,
        "ct",
        "10.89.0.0/16",
        &bnerd_testkit::unique("plan-ct"),
    )
    .await;
    let cnet = customer.net(&customer.id, &customer.secret);
    let i = env.links.len() - 1;
    env.links[i].metadata.annotations =
        Some([(ANNOTATION_API_ACCESS.to_string(), "none".to_string())].into());

    let (p, planned, applied) = plan_then_run(&mut env, "ct", Some(&customer)).await;
    assert_eq!(planned, applied, "cross-tenant create");
    assert!(p.ready && p.cross_tenant, "{p:?}");
    let text = planned.join("\n");
    for want in [
        "customer credential: create port",
        "at an address Neutron picks",
        &format!(
            "customer credential: attach port <new port> to router {}",
            router.id
        ),
        &format!("via {PICKED}"),
    ] {
        assert!(text.contains(want), "{want}: {text}");
    }
    assert!(
        planned
            .iter()
            .any(|l| l.starts_with("operator credential:") && l.contains("route")),
        "the gateway route is the operator's: {text}"
    );
    // Converged: nothing to plan, nothing written.
    let (_, planned, applied) = plan_then_run(&mut env, "ct", Some(&customer)).await;
    assert!(planned.is_empty() && applied.is_empty(), "{planned:?}");

    // Without a way to the Secret, the plan says so rather than guessing.
    let link = env.link("ct").clone();
    let refused = plan(
        env.net.as_ref(),
        &env.fabric,
        &link,
        &env.links,
        &env.reverse,
        None,
    )
    .await;
    assert!(
        refused.as_ref().is_err_and(|e| e
            .to_string()
            .contains("needs a way to its credentials Secret")),
        "{refused:?}"
    );

    // Its Secret gone and the abandon annotation set: the plan says the controller would
    // release it, the gateway route going and the customer side staying, and names what to
    // clean up by hand. Planned only: the real release would leave the customer side behind.
    let mut held = env.link("ct").clone();
    held.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    held.metadata
        .annotations
        .get_or_insert_default()
        .insert(ANNOTATION_ABANDON.to_string(), "true".to_string());
    customer
        .secret_gone
        .store(true, std::sync::atomic::Ordering::Relaxed);
    let p = plan(
        env.net.as_ref(),
        &env.fabric,
        &held,
        &env.links,
        &env.reverse,
        Some(customer.access()),
    )
    .await
    .expect("plan");
    customer
        .secret_gone
        .store(false, std::sync::atomic::Ordering::Relaxed);
    assert_eq!(p.deleting, Some(Released::Abandoned), "{p:?}");
    assert!(
        p.writes.len() == 1
            && p.credentials == [Whose::Operator]
            && p.writes[0].to_string().contains("route"),
        "only the gateway route goes: {p:?}"
    );
    assert!(p.hints.iter().any(|h| h.contains("abandon")), "{p:?}");

    mark_deleting(&mut env, "ct");
    let (p, planned, applied) = plan_then_run(&mut env, "ct", Some(&customer)).await;
    assert_eq!(planned, applied, "cross-tenant unwind");
    assert_eq!(p.deleting, Some(Released::Yes));
    let text = planned.join("\n");
    assert!(
        text.contains("customer credential: detach port") && text.contains("operator credential:"),
        "{text}"
    );
    assert!(
        env.leg_ports().await.is_empty(),
        "the real unwind left no leg"
    );
    cnet.delete_router(&router.id)
        .await
        .expect("router removed");
}
both!(plan_predicts_a_cross_tenant_link);

/// A cross-tenant link `name` of the customer's project to `cidr`, on a new router of the
/// customer's named `router`, with the customer's Secret: the customer and the router.
async fn add_cross_tenant_link(
    env: &mut Env,
    name: &str,
    cidr: &str,
    router: &str,
) -> (Customer, bnerd_cloud::Router) {
    let customer = Customer::of(env);
    let router = customer
        .net(&customer.id, &customer.secret)
        .create_router(router)
        .await
        .expect("customer router");
    let mut s = spec(&router.id, cidr, None);
    s.credentials_secret_ref = Some(SecretRef {
        name: format!("clusterlink-{name}"),
        namespace: NS.into(),
    });
    s.customer_project_id = Some(customer.project.clone());
    env.add_link(name, s);
    (customer, router)
}

/// A `PerCustomer` link "pc" (as [`add_cross_tenant_link`], to 10.91.0.0/16), its customer
/// transits cut from `pool` (/28 each).
async fn add_per_customer_link(
    env: &mut Env,
    pool: &str,
    router: &str,
) -> (Customer, bnerd_cloud::Router) {
    env.fabric.customer_transit = Some(bnerd_cloud::fabric::CustomerTransitPool {
        pool: pool.parse().unwrap(),
        prefix_len: 28,
    });
    let added = add_cross_tenant_link(env, "pc", "10.91.0.0/16", router).await;
    let i = env.links.len() - 1;
    env.links[i].spec.transit_isolation = Some(bnerd_api::TransitIsolation::PerCustomer);
    added
}

/// A `PerCustomer` link's plan shows its project's customer transit being built (network,
/// subnet, edge router, its interface and transit leg, the share), then the leg and the three
/// routes; the real reconcile makes the same writes (its two halves interleaved as Neutron
/// answers), and the unwind of the project's last link (the customer transit taken down) the
/// same list. In between, `doctor` checks the customer
/// transit.
async fn plan_predicts_a_per_customer_link(mut env: Env) {
    // A pool of its own per variant: the lab variants run side by side in one operator
    // project, and a plan cannot foresee a block another run takes between it and the run.
    let pool = if env.fabric.tags_at_create {
        "10.255.161.0/24"
    } else {
        "10.255.160.0/24"
    };
    let block = pool.replace(".0/24", ".0/28");
    let gateway = pool.replace(".0/24", ".1");
    let (customer, router) =
        add_per_customer_link(&mut env, pool, &bnerd_testkit::unique("plan-pc")).await;
    let cnet = customer.net(&customer.id, &customer.secret);

    let (p, planned, applied) = plan_then_run(&mut env, "pc", Some(&customer)).await;
    same_writes_side_by_side(&planned, &applied, 4, 3);
    assert!(p.ready && p.cross_tenant, "{p:?}");
    let text = planned.join("\n");
    let project = &customer.project;
    for want in [
        format!(
            "operator credential: create network bnerd-vpn-customer-{project}-on-{}",
            env.fabric.transit_network_id
        ),
        format!("operator credential: create subnet {block} on network <new network>"),
        format!(
            "operator credential: create router bnerd-vpn-edge-{project}-on-{}",
            env.fabric.transit_network_id
        ),
        "operator credential: attach subnet <new subnet> to router <new router>".to_string(),
        format!("operator credential: share network <new network> with project {project}"),
        "customer credential: create port".to_string(),
    ] {
        assert!(text.contains(&want), "{want}: {text}");
    }
    // The routes, added one by one or by a guarded rewrite (If-Match) as the cloud allows.
    let line_with = |parts: &[&str]| planned.iter().any(|l| parts.iter().all(|p| l.contains(p)));
    let edge_route = format!("10.91.0.0/16 via {PICKED}");
    let back = format!("{} via {gateway}", env.fabric.transit_subnet);
    assert!(
        line_with(&["operator credential:", &edge_route, "router <new router>"]),
        "{text}"
    );
    assert!(
        line_with(&["customer credential:", &back, &router.id]),
        "{text}"
    );
    let (_, planned, applied) = plan_then_run(&mut env, "pc", Some(&customer)).await;
    assert!(planned.is_empty() && applied.is_empty(), "{planned:?}");

    // `doctor` checks the customer transit: fine as built; a share to another project is a
    // problem naming the command that removes it.
    let doctor = async |env: &Env| {
        bnerd_clusterlink_cli::doctor::diagnose(
            env.net.as_ref(),
            &env.fabric.transit_network_id,
            &env.fabric.gateway_router_id,
            &env.links,
        )
        .await
    };
    let report = doctor(&env).await;
    let problems: Vec<&str> = report
        .findings
        .iter()
        .filter(|f| f.problem)
        .map(|f| f.text.as_str())
        .collect();
    assert!(
        problems.is_empty() && report.unchecked.is_none(),
        "{report:?}"
    );
    assert!(
        report
            .findings
            .iter()
            .any(|f| f.text.contains("shared with that project only")),
        "{report:?}"
    );
    let anet = env
        .link("pc")
        .status
        .as_ref()
        .and_then(|s| s.customer_transit.clone())
        .and_then(|c| c.network_id)
        .expect("status.customerTransit.networkID");
    let other = match &env.fake {
        Some(_) => "customer2".to_string(),
        None => bnerd_testkit::lab_env().expect("lab")["LAB_CUSTOMER2_PROJECT_ID"].clone(),
    };
    let foreign = env
        .net
        .create_rbac_policy(&bnerd_cloud::ShareNetwork {
            network_id: anet.clone(),
            action: bnerd_cloud::ACCESS_AS_SHARED.into(),
            target_tenant: other.clone(),
        })
        .await
        .expect("a share to another project, by hand");
    let report = doctor(&env).await;
    assert!(
        report.findings.iter().any(|f| f.problem
            && f.text.contains(&format!(
                "is shared with {other}, which is not its customer"
            ))
            && f.text
                .contains(&format!("openstack network rbac delete {}", foreign.id))),
        "{report:?}"
    );
    env.net
        .delete_rbac_policy(&foreign.id)
        .await
        .expect("the hand-made share goes");

    mark_deleting(&mut env, "pc");
    let (p, planned, applied) = plan_then_run(&mut env, "pc", Some(&customer)).await;
    assert_eq!(
        planned, applied,
        "PerCustomer unwind of the project's last link"
    );
    assert_eq!(p.deleting, Some(Released::Yes));
    let text = planned.join("\n");
    for want in ["delete router", "delete network", "delete RBAC policy"] {
        assert!(text.contains(want), "{want}: {text}");
    }
    cnet.delete_router(&router.id)
        .await
        .expect("router removed");
}
both!(plan_predicts_a_per_customer_link);

/// A link the gateway router has no room for: the plan says so before it is applied, naming
/// the limit and its raise command, and the reconcile then ends as the plan said.
#[tokio::test]
async fn plan_names_a_limit_the_link_would_exceed() {
    let mut env =
        bnerd_testkit::fake_env_with(bnerd_cloud_fake::FakeCloud::new().max_routes(2)).await;
    for (i, cidr) in ["10.91.0.0/16", "10.92.0.0/16", "10.93.0.0/16"]
        .iter()
        .enumerate()
    {
        let r = env.router(&format!("full-{i}")).await;
        env.add_link(&format!("full-{i}"), spec(&r.id, cidr, None));
    }
    for name in ["full-0", "full-1"] {
        let (p, _) = plan_then_apply(&mut env, name).await;
        assert!(p.ready, "{p:?}");
        assert!(p.hints.is_empty(), "{p:?}");
    }
    // The overlay does not count routes against the limit, so the plan's conditions still
    // read Ready; the hint is where the plan says the reconcile will be refused.
    // As the CLI does at each run: the fabric (and the gateway router's routes) read afresh.
    let fabric = bnerd_cloud::fabric::Fabric::discover(
        env.net.as_ref(),
        &env.fabric.transit_network_id,
        &env.fabric.gateway_router_id,
    )
    .await
    .unwrap();
    let link = env.link("full-2").clone();
    let p = plan(
        env.net.as_ref(),
        &fabric,
        &link,
        &env.links,
        &env.reverse,
        None,
    )
    .await
    .expect("plan");
    env.reconcile("full-2").await;
    let route = env
        .link("full-2")
        .status
        .clone()
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "RouteInstalled")
        .unwrap();
    assert_eq!(
        (route.status.as_str(), route.reason.as_str()),
        ("False", "EnsureRouteFailed")
    );
    assert!(
        p.hints.iter().any(|h| h.starts_with(
            "this link needs 1 more of routes on the gateway router, which has 0 left (routes on the gateway router: 2 of 2 (100 %)); to raise it: raise max_routes"
        )),
        "{:?}",
        p.hints
    );
}

/// A project's first `PerCustomer` link on ML2/OVN costs the operator's project three ports:
/// the edge router's two interfaces and the metadata port Neutron makes with the customer
/// transit. With two left, the plan names the port quota (and Neutron then refuses the build);
/// with three, or on a backend that makes no such port with two, the plan is clean and the link
/// is built as planned.
#[tokio::test]
async fn plan_counts_the_port_ml2_ovn_makes_with_a_customer_transit() {
    for (ovn, free, hinted) in [(true, 2, true), (true, 3, false), (false, 2, false)] {
        let cloud = bnerd_cloud_fake::FakeCloud::new().ml2_ovn(ovn);
        let mut env = bnerd_testkit::fake_env_with(cloud.clone()).await;
        let used = env
            .net
            .quota_details(&env.fabric.operator_project_id)
            .await
            .expect("quota details")
            .into_iter()
            .find(|q| q.resource == "port")
            .expect("the port row")
            .used;
        let _ = cloud.clone().quota("port", used as usize + free);
        let (customer, _) =
            add_per_customer_link(&mut env, "10.255.170.0/24", "plan-pc-quota").await;
        let case = format!("ML2/OVN {ovn}, {free} ports left");
        let port_hint = |p: &Plan| {
            p.hints
                .iter()
                .find(|h| h.starts_with("this link needs") && h.contains(" of port,"))
                .cloned()
        };
        if !hinted {
            let (p, _, _) = plan_then_run(&mut env, "pc", Some(&customer)).await;
            assert!(p.ready, "{case}: {p:?}");
            assert_eq!(port_hint(&p), None, "{case}");
            continue;
        }
        let link = env.link("pc").clone();
        let p = plan(
            env.net.as_ref(),
            &env.fabric,
            &link,
            &env.links,
            &env.reverse,
            Some(customer.access()),
        )
        .await
        .expect("plan");
        let hint = port_hint(&p).unwrap_or_default();
        assert!(
            hint.starts_with(&format!(
                "this link needs 3 more of port, which has {free} left"
            )),
            "{case}: {:?}",
            p.hints
        );
        // Neutron agrees: the build runs out of ports.
        let status = Default::default();
        let input = input_of(&link, &status, &[], &env.reverse).expect("uid");
        let tap = Overlay::tap(env.net.as_ref());
        let side = CustomerSide::beside(&tap, &customer);
        let engine = LinkEngine::new(
            &tap,
            &env.fabric,
            Customers {
                source: &side,
                operator: &customer.operator,
                namespace: NS,
            },
        );
        let out = engine.reconcile(&input).await.outcome;
        let failed: Vec<String> = out
            .status
            .conditions
            .iter()
            .filter(|c| c.status == "False")
            .map(|c| c.message.clone())
            .collect();
        assert!(
            failed.iter().any(|m| m.to_lowercase().contains("quota")),
            "{case}: {failed:?}"
        );
    }
}
