//! Hostile and broken input, property-based: ClusterLink specs and
//! annotations, gateway objects from any namespace, and the Secrets of cross-tenant links,
//! driven through the engine against the in-memory fake cloud.
//!
//! Every input is either reconciled or rejected by a condition whose message names the field
//! (or the Secret key) at fault; nothing panics; a rejected spec makes no cloud call at all;
//! a Secret's values never reach status, Events or errors; and every message stays bounded
//! whatever size the input had (a condition message past Kubernetes' 32 KiB would make the
//! status patch itself fail, and the condition would never be seen).
//!
//! Sampled: each run draws a fresh seed and prints it. Replay or widen with
//! `BNERD_HOSTILE_SEED=<seed>` and `BNERD_HOSTILE_CASES=<n>` (docs/performance.md, "Hostile input").

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bnerd_api::gateway::{ReverseTarget, reverse_target};
use bnerd_api::names::{ANNOTATION_ABANDON, ANNOTATION_API_ACCESS, KEY_AC_ID, KEY_AC_SECRET};
use bnerd_api::{ClusterLink, ClusterLinkSpec, SecretRef};
use bnerd_cloud_fake::FakeCloud;
use bnerd_engine::{
    CredentialSource, CustomerCloud, CustomerCredential, Customers, LinkEngine, OperatorIdentity,
    Outcome,
};
use bnerd_testkit::hostile::{check, runner};
use bnerd_testkit::link_input;
use bnerd_testkit::{Env, fake_env, fake_env_with};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::{Value, json};

/// No condition message, Event note or gateway problem may pass this, whatever the input:
/// the link's spec fields are echoed shortened, never whole.
const MAX_MESSAGE: usize = 4096;
const NS: &str = "bnerd-vpn-clusterlinks";
const AUTH_URL: &str = "http://127.0.0.1:5000/v3";
const MIB: usize = 1024 * 1024;

// ---------------------------------------------------------------------------------------
// Generators
// ---------------------------------------------------------------------------------------

/// Strings nobody should send: control characters and NUL, unicode of every plane, RTL
/// overrides, very long runs (up to 1 MiB), and near-misses of the formats the spec uses.
fn nasty_string() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => any::<String>(),
        2 => "[\\x00-\\x1f\\u{7f}\\u{202e}\\u{feff}a-z0-9./:-]{0,40}",
        1 => Just(String::new()),
        1 => Just(" \t\n".to_string()),
        1 => Just("\u{0}".to_string()),
        1 => (1usize..=MIB + 17).prop_map(|n| "x".repeat(n)),
        1 => (1usize..=4096).prop_map(|n| "\u{1F4A5}".repeat(n)),
        1 => Just("../../etc/passwd".to_string()),
        1 => Just("%00%2f?name=x&tags=y".to_string()),
    ]
}

/// What a generated field is, syntactically: the oracle the engine's verdict is held to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Valid,
    Invalid,
    /// Arbitrary text: whatever the engine says, it must say it well.
    Unknown,
}

fn octet() -> impl Strategy<Value = u8> {
    any::<u8>()
}

/// spec.serviceClusterCIDR: canonical networks (never touching the transit 10.254.0.0/24),
/// the near-misses a human types, and noise.
fn cidr() -> impl Strategy<Value = (String, Kind)> {
    let valid = (1u8..=223, octet(), 8u8..=24)
        .prop_filter("not the transit network", |(a, b, _)| {
            !(*a == 10 && *b == 254)
        })
        .prop_filter("not 10/8 (it holds the transit network)", |(a, _, p)| {
            !(*a == 10 && *p < 16)
        })
        .prop_map(|(a, b, p)| {
            let net: ipnet::Ipv4Net = format!("{a}.{b}.0.0/{p}").parse().expect("a network");
            (net.trunc().to_string(), Kind::Valid)
        });
    let invalid = prop_oneof![
        (1u8..=223, octet(), 1u8..=255).prop_map(|(a, b, h)| format!("{a}.{b}.0.{h}/16")),
        (1u8..=223, 33u8..=255).prop_map(|(a, p)| format!("{a}.0.0.0/{p}")),
        Just("0.0.0.0/0".to_string()),
        Just("10.254.0.0/16".to_string()),
        Just("10.254.0.128/25".to_string()),
        Just("fd00::/64".to_string()),
        Just("::ffff:10.1.0.0/112".to_string()),
        Just("10.1.0.0".to_string()),
        Just("10.1.0.0/".to_string()),
        Just("/16".to_string()),
        Just("10.1.0.0/16 ".to_string()),
        Just(" 10.1.0.0/16".to_string()),
        Just("10.1.0.0/16\u{0}".to_string()),
        Just("10.1.0.0/+16".to_string()),
        Just("010.001.0.0/16".to_string()),
        Just("10.1.0.0/16/16".to_string()),
        Just("256.1.0.0/16".to_string()),
        Just("10.1.0.0\\16".to_string()),
        Just(String::new()),
    ];
    prop_oneof![
        3 => valid,
        3 => invalid.prop_map(|s| (s, Kind::Invalid)),
        2 => nasty_string().prop_map(|s| (s, Kind::Unknown)),
    ]
}

/// spec.transitIP: absent, a free host address of the transit subnet, the reserved ones,
/// outside it, near-misses, noise.
fn transit_ip() -> impl Strategy<Value = (Option<String>, Kind)> {
    prop_oneof![
        3 => Just((None, Kind::Valid)),
        2 => (3u8..=254).prop_map(|h| (Some(format!("10.254.0.{h}")), Kind::Valid)),
        2 => prop_oneof![
            Just("10.254.0.0".to_string()),
            Just("10.254.0.1".to_string()),
            Just("10.254.0.2".to_string()),
            Just("10.254.0.255".to_string()),
            (0u8..=255).prop_map(|h| format!("10.254.1.{h}")),
            Just("10.254.0.3/32".to_string()),
            Just("10.254.0.03".to_string()),
            Just("10.254.0".to_string()),
            Just("::1".to_string()),
            Just("fd00::3".to_string()),
            Just(" 10.254.0.3".to_string()),
            Just(String::new()),
        ]
        .prop_map(|s| (Some(s), Kind::Invalid)),
        1 => nasty_string().prop_map(|s| (Some(s), Kind::Unknown)),
    ]
}

/// spec.serviceClusterRouter: the real router by name or by ID, names nobody has, blank,
/// noise. `true` in the pair: it names the router the env made.
#[derive(Debug, Clone)]
enum RouterPick {
    ByName,
    ById,
    Other(String),
}

fn router() -> impl Strategy<Value = RouterPick> {
    prop_oneof![
        3 => Just(RouterPick::ByName),
        2 => Just(RouterPick::ById),
        1 => Just(RouterPick::Other(String::new())),
        1 => Just(RouterPick::Other("   ".into())),
        3 => nasty_string().prop_map(RouterPick::Other),
    ]
}

fn annotations() -> impl Strategy<Value = BTreeMap<String, String>> {
    let key = prop_oneof![
        Just(ANNOTATION_API_ACCESS.to_string()),
        Just(ANNOTATION_ABANDON.to_string()),
        nasty_string(),
    ];
    let value = prop_oneof![
        Just("none".to_string()),
        Just("None".to_string()),
        Just("none ".to_string()),
        Just("true".to_string()),
        nasty_string(),
    ];
    btree_map(key, value, 0..4)
}

#[derive(Debug, Clone)]
struct SpecCase {
    router: RouterPick,
    cidr: (String, Kind),
    ip: (Option<String>, Kind),
    customer_project: Option<String>,
    annotations: BTreeMap<String, String>,
}

fn spec_case() -> impl Strategy<Value = SpecCase> {
    (
        router(),
        cidr(),
        transit_ip(),
        proptest::option::weighted(0.1, nasty_string()),
        annotations(),
    )
        .prop_map(
            |(router, cidr, ip, customer_project, annotations)| SpecCase {
                router,
                cidr,
                ip,
                customer_project,
                annotations,
            },
        )
}

// ---------------------------------------------------------------------------------------
// Checks shared by every property
// ---------------------------------------------------------------------------------------

fn condition<'a>(o: &'a Outcome, t: &str) -> Option<&'a Condition> {
    o.status.conditions.iter().find(|c| c.type_ == t)
}

/// Every text the outcome would publish: condition messages, Event notes, gateway warnings.
fn published(o: &Outcome) -> Vec<String> {
    let mut out: Vec<String> = o
        .status
        .conditions
        .iter()
        .map(|c| c.message.clone())
        .collect();
    out.extend(o.actions.iter().map(|a| a.note.clone()));
    out.extend(o.gateway_problems.iter().map(|p| p.message.clone()));
    out
}

fn bounded(o: &Outcome) -> Result<(), TestCaseError> {
    for m in published(o) {
        prop_assert!(
            m.len() <= MAX_MESSAGE,
            "a message of {} bytes: {}...",
            m.len(),
            m.chars().take(300).collect::<String>()
        );
    }
    Ok(())
}

fn new_link(
    name: &str,
    spec: ClusterLinkSpec,
    annotations: BTreeMap<String, String>,
) -> ClusterLink {
    let mut l = ClusterLink::new(name, spec);
    l.metadata.uid = Some("6b1f6c3e-0000-4000-8000-00000000beef".into());
    l.metadata.generation = Some(1);
    l.metadata.annotations = Some(annotations);
    l
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

// ---------------------------------------------------------------------------------------
// Specs and annotations
// ---------------------------------------------------------------------------------------

async fn spec_property(case: SpecCase) -> Result<(), TestCaseError> {
    let env = fake_env().await;
    let cloud = env.fake.clone().expect("the fake");
    let svc = env.router("svc").await;
    let (router_value, router_exists, router_kind) = match &case.router {
        RouterPick::ByName => (svc.name.clone(), true, Kind::Valid),
        RouterPick::ById => (svc.id.clone(), true, Kind::Valid),
        RouterPick::Other(s) if s.trim().is_empty() => (s.clone(), false, Kind::Invalid),
        RouterPick::Other(s) => (s.clone(), s == &svc.name || s == &svc.id, Kind::Valid),
    };
    let spec = ClusterLinkSpec {
        service_cluster_router: router_value,
        service_cluster_cidr: case.cidr.0.clone(),
        transit_ip: case.ip.0.clone(),
        credentials_secret_ref: None,
        customer_project_id: case.customer_project.clone(),
        transit_isolation: None,
    };
    let link = new_link("hostile", spec, case.annotations.clone());
    let status = Default::default();
    let input = link_input(&link, &status, &[], &[]).expect("uid");
    cloud.reset_counters();
    let out = bnerd_testkit::reconcile_same_tenant(env.net.as_ref(), &env.fabric, &input).await;
    let (reads, writes) = cloud.read_write_counts();
    bounded(&out)?;

    let validated = condition(&out, "Validated").expect("Validated is always set");
    let invalid: Vec<&str> = [
        (router_kind, "spec.serviceClusterRouter"),
        (case.cidr.1, "spec.serviceClusterCIDR"),
        (case.ip.1, "spec.transitIP"),
    ]
    .iter()
    .filter(|(k, _)| *k == Kind::Invalid)
    .map(|(_, f)| *f)
    .collect();
    let unknown = case.cidr.1 == Kind::Unknown || case.ip.1 == Kind::Unknown;
    if validated.status == "False" {
        prop_assert_eq!(&validated.reason, "InvalidSpec");
        prop_assert!(
            unknown || !invalid.is_empty(),
            "a valid spec was refused: {:?}",
            validated.message
        );
        let named = [
            "spec.serviceClusterRouter",
            "spec.serviceClusterCIDR",
            "spec.transitIP",
        ]
        .iter()
        .any(|f| validated.message.contains(f));
        prop_assert!(named, "the message names no field: {:?}", validated.message);
        if !invalid.is_empty() && !unknown {
            prop_assert!(
                invalid.iter().any(|f| validated.message.contains(f)),
                "broken {:?}, but the message says {:?}",
                invalid,
                validated.message
            );
        }
        // A rejected spec never reaches the cloud: not a write, not even a read.
        prop_assert_eq!((reads, writes), (0, 0), "calls for a rejected spec");
        for c in &out.status.conditions {
            if c.type_ != "Validated" && c.type_ != "Ready" {
                prop_assert_eq!(
                    (c.status.as_str(), c.reason.as_str()),
                    ("Unknown", "Blocked")
                );
            }
        }
        prop_assert!(out.status.leg_port_id.is_none() && out.status.gateway_route.is_none());
        return Ok(());
    }
    prop_assert!(
        invalid.is_empty(),
        "{:?} broken, yet Validated is {}: {:?}",
        invalid,
        validated.status,
        validated.message
    );
    prop_assert_eq!(validated.status.as_str(), "True");
    if !router_exists {
        let leg = condition(&out, "LegAttached").expect("LegAttached");
        prop_assert_eq!(
            (leg.status.as_str(), leg.reason.as_str()),
            ("False", "RouterResolveFailed")
        );
        prop_assert!(
            leg.message.contains("spec.serviceClusterRouter"),
            "{:?}",
            leg.message
        );
        prop_assert_eq!(writes, 0, "writes for a router nobody has");
        return Ok(());
    }
    // A valid spec on a router that exists converges.
    let ready = condition(&out, "Ready").expect("Ready");
    prop_assert_eq!(
        ready.status.as_str(),
        "True",
        "a valid spec did not converge: {:?}",
        out.status.conditions
    );
    if let Some(ip) = &case.ip.0 {
        prop_assert_eq!(out.status.transit_ip.as_deref(), Some(ip.as_str()));
    }
    Ok(())
}

#[test]
fn specs_and_annotations() {
    let (mut runner, seed) = runner("specs_and_annotations", 256);
    let rt = runtime();
    let result = runner.run(&spec_case(), |case| rt.block_on(spec_property(case)));
    check("specs_and_annotations", seed, result);
}

// ---------------------------------------------------------------------------------------
// Gateway objects from any namespace
// ---------------------------------------------------------------------------------------

/// Any JSON at all, a few levels deep.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        nasty_string().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 32, 6, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..6).prop_map(Value::Array),
            btree_map("[a-zA-Z]{0,12}", inner, 0..6)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// A gateway's status.serviceCIDR / portFixedIP: right, near-miss, wrong type, huge.
fn gateway_field(
    valid: impl Strategy<Value = String> + 'static,
) -> impl Strategy<Value = Option<Value>> {
    prop_oneof![
        3 => valid.prop_map(|s| Some(Value::String(s))),
        1 => Just(None),
        1 => Just(Some(Value::Null)),
        2 => any_json().prop_map(Some),
        1 => nasty_string().prop_map(|s| Some(Value::String(s))),
        1 => (1usize..=2 * MIB).prop_map(|n| Some(Value::String("1".repeat(n)))),
    ]
}

#[derive(Debug, Clone)]
struct GatewayCase {
    kind: &'static str,
    namespace: String,
    name: String,
    object: Value,
}

fn gateway() -> impl Strategy<Value = GatewayCase> {
    let exposures = prop_oneof![
        3 => Just(Some(json!([{"port": 80}]))),
        1 => (0usize..20_000).prop_map(|n| Some(Value::Array(vec![json!({"port": 80}); n]))),
        1 => Just(Some(json!([]))),
        1 => Just(None),
        2 => any_json().prop_map(Some),
    ];
    let cidr = gateway_field((100u8..=100, 64u8..=127, octet(), 24u8..=28).prop_map(
        |(a, b, c, p)| {
            let n: ipnet::Ipv4Net = format!("{a}.{b}.{c}.0/{p}").parse().expect("net");
            n.trunc().to_string()
        },
    ));
    let hop = gateway_field((0u8..=255).prop_map(|h| format!("10.254.0.{h}")));
    let deleting = proptest::option::weighted(0.1, any_json());
    let status_shape = prop_oneof![8 => Just(true), 1 => Just(false)];
    (
        prop_oneof![Just("IPsecGateway"), Just("VPNGateway")],
        "[a-z0-9-]{1,63}",
        "[a-z0-9.-]{1,253}",
        exposures,
        cidr,
        hop,
        deleting,
        status_shape,
        any_json(),
    )
        .prop_map(
            |(kind, namespace, name, exposures, cidr, hop, deleting, status_is_object, junk)| {
                let mut obj = json!({"metadata": {"name": name, "namespace": namespace}});
                if let Some(d) = deleting {
                    obj["metadata"]["deletionTimestamp"] = d;
                }
                match exposures {
                    Some(e) => obj["spec"] = json!({"reverseExposures": e}),
                    None => obj["spec"] = junk.clone(),
                }
                if status_is_object {
                    let mut status = serde_json::Map::new();
                    if let Some(c) = cidr {
                        status.insert("serviceCIDR".into(), c);
                    }
                    if let Some(h) = hop {
                        status.insert("portFixedIP".into(), h);
                    }
                    obj["status"] = Value::Object(status);
                } else {
                    obj["status"] = junk;
                }
                GatewayCase {
                    kind,
                    namespace,
                    name,
                    object: obj,
                }
            },
        )
}

/// What one gateway asks of the links, for the index: small whatever the object's size (the
/// index holds one per gateway of the estate).
const MAX_TARGET_FIELD: usize = 256;

async fn gateway_property(gateways: Vec<GatewayCase>) -> Result<(), TestCaseError> {
    let mut env: Env = fake_env().await;
    let svc = env.router("svc").await;
    let mut targets: Vec<ReverseTarget> = vec![];
    for g in &gateways {
        let t = reverse_target(g.kind, &g.namespace, &g.name, &g.object);
        let exposures = g
            .object
            .pointer("/spec/reverseExposures")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty());
        let deleting = g
            .object
            .pointer("/metadata/deletionTimestamp")
            .is_some_and(|v| !v.is_null());
        let filled = |p: &str| g.object.pointer(p).is_some_and(|v| !v.is_null());
        if exposures && !deleting && filled("/status/serviceCIDR") && filled("/status/portFixedIP")
        {
            // Asks for a route: routed or refused below, never skipped without a word.
            prop_assert!(t.is_some(), "no target from {:?}", g.object);
        }
        if let Some(t) = &t {
            prop_assert!(exposures && !deleting, "a target from {:?}", g.object);
            prop_assert!(
                t.service_cidr.len() <= MAX_TARGET_FIELD
                    && t.port_fixed_ip.len() <= MAX_TARGET_FIELD,
                "an index entry of {} + {} bytes",
                t.service_cidr.len(),
                t.port_fixed_ip.len()
            );
        }
        targets.extend(t);
    }
    env.reverse = targets.clone();
    env.add_link("rev", bnerd_testkit::spec(&svc.name, "10.77.0.0/16", None));
    let out = env.reconcile("rev").await;
    bounded(&out)?;
    for c in ["Validated", "LegAttached", "RouteInstalled"] {
        prop_assert_eq!(
            condition(&out, c).map(|c| c.status.as_str()),
            Some("True"),
            "gateways broke {}: {:?}",
            c,
            out.status.conditions
        );
    }
    // Each refused gateway is named, with the field at fault.
    for p in &out.gateway_problems {
        prop_assert!(
            p.message.contains("status.serviceCIDR") || p.message.contains("status.portFixedIP"),
            "no field named: {:?}",
            p.message
        );
        prop_assert!(targets.iter().any(|t| t.gateway == p.gateway));
    }
    // Every target is either routed or refused, never dropped without a word.
    for t in &targets {
        let routed = out
            .status
            .reverse_routes
            .iter()
            .any(|r| r.gateway_ref == t.gateway);
        let refused = out.gateway_problems.iter().any(|p| p.gateway == t.gateway);
        prop_assert!(
            routed || refused,
            "{:?} neither routed nor refused",
            t.gateway
        );
    }
    let rev = condition(&out, "ReverseRoutesInstalled").expect("ReverseRoutesInstalled");
    if out.gateway_problems.is_empty() {
        prop_assert_eq!(rev.status.as_str(), "True", "{:?}", rev.message);
    }
    Ok(())
}

#[test]
fn gateway_objects_from_any_namespace() {
    let (mut runner, seed) = runner("gateway_objects", 96);
    let rt = runtime();
    let result = runner.run(&vec(gateway(), 0..5), |gs| {
        rt.block_on(gateway_property(gs))
    });
    check("gateway_objects", seed, result);
}

// ---------------------------------------------------------------------------------------
// Secrets of cross-tenant links
// ---------------------------------------------------------------------------------------

/// Values a Secret can hold. Every one that is not the real credential carries `MARK`, so a
/// leak is found by searching for it.
const MARK: &str = "sv7q";

fn secret_value() -> impl Strategy<Value = Vec<u8>> {
    let marked = |s: String| format!("{MARK}{s}").into_bytes();
    prop_oneof![
        2 => "[a-zA-Z0-9]{4,40}".prop_map(marked),
        1 => Just(Vec::new()),
        1 => Just(b"  \n".to_vec()),
        1 => vec(any::<u8>(), 0..64).prop_map(|mut v| {
            v.splice(0..0, MARK.bytes());
            v.push(0xff);
            v
        }),
        1 => (MIB..=MIB + 4096).prop_map(move |n| {
            let mut v = MARK.as_bytes().to_vec();
            v.resize(n, b'A');
            v
        }),
        1 => Just(format!("{MARK}=====!!base64?==").into_bytes()),
        1 => Just(
            format!(
                "clouds:\n  a: &a [\"{MARK}\",\"{MARK}\",\"{MARK}\",\"{MARK}\"]\n  b: &b [*a,*a,*a,*a,*a,*a,*a,*a]\n  c: &c [*b,*b,*b,*b,*b,*b,*b,*b]\n  d: &d [*c,*c,*c,*c,*c,*c,*c,*c]\n  e: [*d,*d,*d,*d,*d,*d,*d,*d]\n"
            )
            .into_bytes()
        ),
        1 => Just(format!("http://evil.example/{MARK}/v3").into_bytes()),
        1 => Just(format!("RegionOne{MARK}").into_bytes()),
    ]
}

#[derive(Debug, Clone)]
enum Cred {
    /// The real, member credential of the customer project.
    Real,
    /// The real id, a wrong secret.
    WrongSecret,
    Value(Vec<u8>),
    Absent,
}

#[derive(Debug, Clone)]
struct SecretCase {
    id: Cred,
    secret: Cred,
    extra: BTreeMap<String, Vec<u8>>,
    exists: bool,
    ref_ok: (bool, bool),
    /// The attestation annotation's value, if set.
    attestation: Option<String>,
    project_ok: bool,
}

fn cred() -> impl Strategy<Value = Cred> {
    prop_oneof![
        3 => Just(Cred::Real),
        1 => Just(Cred::WrongSecret),
        3 => secret_value().prop_map(Cred::Value),
        1 => Just(Cred::Absent),
    ]
}

fn secret_case() -> impl Strategy<Value = SecretCase> {
    let key = prop_oneof![
        Just("OS_AUTH_URL".to_string()),
        Just("OS_REGION_NAME".to_string()),
        Just("OS_PASSWORD".to_string()),
        Just("OS_USERNAME".to_string()),
        Just("OS_TOKEN".to_string()),
        Just("clouds.yaml".to_string()),
        Just(String::new()),
        Just("os_application_credential_id".to_string()),
        Just(" OS_APPLICATION_CREDENTIAL_SECRET".to_string()),
        "[\\PC]{1,30}",
    ];
    (
        cred(),
        cred(),
        btree_map(key, secret_value(), 0..3),
        prop_oneof![9 => Just(true), 1 => Just(false)],
        (
            prop_oneof![9 => Just(true), 1 => Just(false)],
            prop_oneof![9 => Just(true), 1 => Just(false)],
        ),
        prop_oneof![
            12 => Just(Some("none".to_string())),
            1 => Just(None),
            1 => Just(Some("None".to_string())),
            1 => Just(Some("none\u{0}".to_string())),
            1 => nasty_string().prop_map(Some),
        ],
        prop_oneof![6 => Just(true), 1 => Just(false)],
    )
        .prop_map(
            |(id, secret, extra, exists, ref_ok, attestation, project_ok)| SecretCase {
                id,
                secret,
                extra,
                exists,
                ref_ok,
                attestation,
                project_ok,
            },
        )
}

/// The controller's part, as far as the engine sees it: this Secret, and a client on the
/// credential it holds.
struct Source {
    cloud: FakeCloud,
    data: Option<BTreeMap<String, Vec<u8>>>,
}

#[async_trait]
impl CredentialSource for Source {
    async fn secret(&self, _r: &SecretRef) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
        Ok(self.data.clone())
    }

    fn client(&self, c: &CustomerCredential) -> Arc<dyn CustomerCloud> {
        Arc::new(self.cloud.client_with_app_cred(&c.id, c.secret.expose()))
    }
}

async fn secret_property(case: SecretCase) -> Result<(), TestCaseError> {
    let cloud = FakeCloud::new();
    let env = fake_env_with(cloud.clone()).await;
    let (ac_id, ac_secret) = cloud.application_credential("customer", &["member"]);
    let customer = cloud.client_with_app_cred(&ac_id, &ac_secret);
    let router = bnerd_cloud::Neutron::create_router(&customer, "cust-router")
        .await
        .expect("customer router");
    let value = |c: &Cred, real: &str| match c {
        Cred::Real => Some(real.as_bytes().to_vec()),
        Cred::WrongSecret => Some(format!("{MARK}-not-the-secret").into_bytes()),
        Cred::Value(v) => Some(v.clone()),
        Cred::Absent => None,
    };
    let mut data = case.extra.clone();
    data.extend(value(&case.id, &ac_id).map(|v| (KEY_AC_ID.to_string(), v)));
    data.extend(value(&case.secret, &ac_secret).map(|v| (KEY_AC_SECRET.to_string(), v)));
    let secret_ref = SecretRef {
        namespace: if case.ref_ok.0 {
            NS.into()
        } else {
            "default".into()
        },
        name: if case.ref_ok.1 {
            "clusterlink-cust".into()
        } else {
            "clusterlink-other".into()
        },
    };
    let spec = ClusterLinkSpec {
        service_cluster_router: router.name.clone(),
        service_cluster_cidr: "10.78.0.0/16".into(),
        transit_ip: None,
        credentials_secret_ref: Some(secret_ref),
        customer_project_id: Some(
            if case.project_ok {
                "customer"
            } else {
                "elsewhere"
            }
            .into(),
        ),
        transit_isolation: None,
    };
    let annotations: BTreeMap<String, String> = case
        .attestation
        .clone()
        .map(|v| (ANNOTATION_API_ACCESS.to_string(), v))
        .into_iter()
        .collect();
    let link = new_link("cust", spec, annotations);
    let status = Default::default();
    let input = link_input(&link, &status, &[], &[]).expect("uid");
    let source = Source {
        cloud: cloud.clone(),
        data: case.exists.then_some(data.clone()),
    };
    let operator = OperatorIdentity {
        project_id: "operator".into(),
        auth_url: AUTH_URL.into(),
        region: Some("RegionOne".into()),
    };
    cloud.reset_counters();
    let customers = Customers {
        source: &source,
        operator: &operator,
        namespace: NS,
    };
    let out = LinkEngine::new(env.net.as_ref(), &env.fabric, customers)
        .reconcile(&input)
        .await
        .outcome;
    let (reads, writes) = cloud.read_write_counts();
    bounded(&out)?;

    // No value of the Secret, whatever its size or encoding, is ever published.
    let everything = format!(
        "{} {:?} {:?}",
        serde_json::to_string(&out.status).expect("status as JSON"),
        out.actions,
        out.gateway_problems
    );
    prop_assert!(
        !everything.contains(MARK),
        "a Secret value was published: {}",
        {
            let at = everything.find(MARK).unwrap_or(0);
            everything[at.saturating_sub(200)..]
                .chars()
                .take(400)
                .collect::<String>()
        }
    );
    prop_assert!(
        !everything.contains(&ac_secret),
        "the credential's secret was published"
    );
    prop_assert!(
        !everything.contains(&ac_id),
        "the credential's id was published"
    );

    let get = |t: &str| {
        condition(&out, t).map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    };
    let (s, reason, msg) = get("TenantIsolationAttested").expect("TenantIsolationAttested");
    if case.attestation.as_deref() != Some("none") {
        prop_assert!(msg.contains(ANNOTATION_API_ACCESS), "{}", msg);
        prop_assert_eq!((s.as_str(), reason.as_str()), ("False", "NotAttested"));
        prop_assert_eq!(
            (reads, writes),
            (0, 0),
            "OpenStack calls before the attestation"
        );
        return Ok(());
    }
    prop_assert_eq!(s.as_str(), "True", "{}", msg);
    let (s, reason, msg) = get("CredentialsResolved").expect("CredentialsResolved");
    let resolves = case.ref_ok == (true, true)
        && case.exists
        && matches!(case.id, Cred::Real)
        && matches!(case.secret, Cred::Real)
        && case.project_ok
        && case.extra.keys().all(|k| {
            // Optional keys that still pass: the operator's own endpoint and region (never
            // generated: every generated value carries MARK), so any of these refuses.
            !matches!(
                k.as_str(),
                "OS_AUTH_URL" | "OS_REGION_NAME" | "OS_PASSWORD" | "OS_USERNAME" | "OS_TOKEN"
            )
        });
    if !resolves {
        prop_assert_eq!(s.as_str(), "False", "resolved a bad credential: {}", msg);
        prop_assert!(
            msg.contains("secret "),
            "CredentialsResolved names no Secret: {}",
            msg
        );
        if matches!(reason.as_str(), "CredentialsInvalid") {
            prop_assert!(
                msg.contains("key "),
                "CredentialsInvalid names no key: {}",
                msg
            );
        }
        prop_assert_eq!(
            writes,
            0,
            "writes with a refused credential ({}): {}",
            reason,
            msg
        );
        return Ok(());
    }
    prop_assert_eq!(s.as_str(), "True", "{}: {}", reason, msg);
    let ready = condition(&out, "Ready").expect("Ready");
    prop_assert_eq!(ready.status.as_str(), "True", "{:?}", out.status.conditions);
    Ok(())
}

#[test]
fn secrets_with_odd_keys_sizes_and_encodings() {
    let (mut runner, seed) = runner("secrets", 192);
    let rt = runtime();
    let result = runner.run(&secret_case(), |case| rt.block_on(secret_property(case)));
    check("secrets", seed, result);
}

/// The customer's Neutron is read through the same client for every call: make sure a
/// resolved link really did its work there, so the property above cannot pass vacuously.
#[test]
fn the_secret_property_reaches_ready_on_a_good_credential() {
    let rt = runtime();
    let case = SecretCase {
        id: Cred::Real,
        secret: Cred::Real,
        extra: BTreeMap::new(),
        exists: true,
        ref_ok: (true, true),
        attestation: Some("none".into()),
        project_ok: true,
    };
    rt.block_on(secret_property(case))
        .expect("a good credential converges");
}
