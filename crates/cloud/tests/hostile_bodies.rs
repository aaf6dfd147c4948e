//! Hostile and broken answers from Neutron and Keystone, property-based,
//! served by a server on loopback: malformed JSON, missing fields, wrong types, nesting deep
//! enough to overflow a naive parser, error bodies with megabyte messages, 10 MiB bodies with
//! and without a Content-Length. The client answers each with its value or a typed error that
//! names the call and, for a wrong or missing field, the field; an error status, a body past
//! the cap, nesting no answer has and a token answer without `X-Subject-Token` always fail,
//! each with its own error (only a body that may still hold a valid item, a mutated field or
//! arbitrary JSON, may come back as a value); nothing panics; no message
//! passes a few KiB whatever the body held; the password and the token never appear in one;
//! and no body past `MAX_BODY_BYTES` is read whole.
//!
//! Sampled: a fresh seed each run, printed. Replay or widen with `BNERD_HOSTILE_SEED=<seed>`
//! and `BNERD_HOSTILE_CASES=<n>` (docs/performance.md, "Hostile input").

mod support;

use std::sync::{Arc, Mutex};

use bnerd_cloud::{
    CloudError, CreatePort, Identity, MAX_BODY_BYTES, Neutron, PortQuery, Route, RouterQuery,
};
use bnerd_testkit::hostile::{check, runner};
use proptest::collection::{btree_map, vec};
use proptest::prelude::*;
use serde_json::{Value, json};
use support::{PASSWORD, Reply, Request, Server, TOKEN};

/// No error message may pass this, whatever the body held.
const MAX_MESSAGE: usize = 2048;

/// One Neutron call and the key its answer lives under.
#[derive(Debug, Clone, Copy)]
enum Call {
    GetNetwork,
    GetSubnet,
    GetPort,
    ListPorts,
    GetRouter,
    ListRouters,
    AddExtraroutes,
    CreatePort,
    ListRbac,
    Extensions,
}

impl Call {
    const ALL: [Call; 10] = [
        Call::GetNetwork,
        Call::GetSubnet,
        Call::GetPort,
        Call::ListPorts,
        Call::GetRouter,
        Call::ListRouters,
        Call::AddExtraroutes,
        Call::CreatePort,
        Call::ListRbac,
        Call::Extensions,
    ];

    /// The key of the answer, whether it is a list, and a valid item.
    fn shape(self) -> (&'static str, bool, Value) {
        let port = json!({"id": "p1", "name": "leg", "network_id": "n1", "project_id": "op",
            "description": "", "device_id": "r1", "device_owner": "network:router_interface",
            "fixed_ips": [{"subnet_id": "s1", "ip_address": "10.254.0.3"}],
            "tags": ["bnerd-vpn-operator"], "revision_number": 4});
        let router = json!({"id": "r1", "name": "svc", "project_id": "op",
            "routes": [{"destination": "10.1.0.0/16", "nexthop": "10.254.0.3"}], "revision_number": 7});
        match self {
            Call::GetNetwork => (
                "network",
                false,
                json!({"id": "n1", "name": "t", "project_id": "op", "shared": false, "subnets": ["s1"]}),
            ),
            Call::GetSubnet => (
                "subnet",
                false,
                json!({"id": "s1", "network_id": "n1", "cidr": "10.254.0.0/24", "gateway_ip": "10.254.0.1"}),
            ),
            Call::GetPort | Call::CreatePort => ("port", false, port),
            Call::ListPorts => ("ports", true, port),
            Call::GetRouter | Call::AddExtraroutes => ("router", false, router),
            Call::ListRouters => ("routers", true, router),
            Call::ListRbac => (
                "rbac_policies",
                true,
                json!({"id": "b1", "object_type": "network", "object_id": "n1",
                    "action": "access_as_shared", "target_tenant": "t1"}),
            ),
            Call::Extensions => ("extensions", true, json!({"alias": "extraroute-atomic"})),
        }
    }

    fn envelope(self, item: Value, n: usize) -> Value {
        let (key, list, _) = self.shape();
        let mut v = serde_json::Map::new();
        v.insert(
            key.into(),
            if list {
                Value::Array(vec![item; n])
            } else {
                item
            },
        );
        Value::Object(v)
    }

    async fn run(self, c: &bnerd_cloud::OpenStack) -> Result<usize, CloudError> {
        match self {
            Call::GetNetwork => c.get_network("n1").await.map(|_| 1),
            Call::GetSubnet => c.get_subnet("s1").await.map(|_| 1),
            Call::GetPort => c.get_port("p1").await.map(|_| 1),
            Call::ListPorts => c.list_ports(&PortQuery::default()).await.map(|v| v.len()),
            Call::GetRouter => c.get_router("r1").await.map(|_| 1),
            Call::ListRouters => c
                .list_routers(&RouterQuery::default())
                .await
                .map(|v| v.len()),
            Call::AddExtraroutes => c
                .add_extraroutes("r1", &[Route::new("10.1.0.0/16", "10.254.0.3")])
                .await
                .map(|_| 1),
            Call::CreatePort => c
                .create_port(&CreatePort {
                    network_id: "n1".into(),
                    ..Default::default()
                })
                .await
                .map(|_| 1),
            Call::ListRbac => c.list_rbac_policies("n1").await.map(|v| v.len()),
            Call::Extensions => c.extensions().await.map(|v| v.len()),
        }
    }
}

/// Any JSON at all, a few levels deep, strings of every kind.
fn any_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        any::<f64>().prop_map(|f| json!(f)),
        any::<String>().prop_map(Value::String),
        (1usize..300_000).prop_map(|n| Value::String("\u{e9}".repeat(n))),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            vec(inner.clone(), 0..5).prop_map(Value::Array),
            btree_map("[a-z_]{0,10}", inner, 0..5)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

/// What the server answers, and what the client must make of it.
#[derive(Debug, Clone)]
enum Body {
    /// A valid answer of `n` items: the client returns it.
    Valid(usize),
    /// A valid item with one field replaced (or removed, `None`): returned, or refused
    /// naming the field.
    Mutated(String, Option<Value>),
    /// Any JSON, any bytes, deep nesting: returned or refused, never a panic.
    Json(Value),
    Bytes(Vec<u8>),
    Nested(usize),
    /// An error status with Neutron's error body, its message any size.
    Error(&'static str, String),
    /// Past the cap, announced by Content-Length.
    Huge(usize),
    /// Past the cap, chunked: nothing says how much is coming.
    Streamed(usize),
}

impl Body {
    /// What a failure message says of the body: never the body itself, which can be
    /// megabytes.
    fn what(&self) -> String {
        match self {
            Body::Valid(n) => format!("a valid answer of {n} items"),
            Body::Mutated(field, _) => format!("an answer with {field} changed"),
            Body::Json(_) => "arbitrary JSON".into(),
            Body::Bytes(b) => format!("{} arbitrary bytes", b.len()),
            Body::Nested(depth) => format!("nesting {depth} deep"),
            Body::Error(status, m) => format!("HTTP {status} with a {}-byte message", m.len()),
            Body::Huge(n) => format!("a {n}-byte body with its Content-Length"),
            Body::Streamed(n) => format!("a {n}-byte chunked body"),
        }
    }
}

fn field_of(call: Call) -> impl Strategy<Value = String> {
    let (_, _, item) = call.shape();
    let keys: Vec<String> = item
        .as_object()
        .map(|o| o.keys().cloned().collect())
        .unwrap_or_default();
    proptest::sample::select(keys)
}

fn body(call: Call) -> impl Strategy<Value = Body> {
    prop_oneof![
        2 => (0usize..3000).prop_map(Body::Valid),
        4 => (field_of(call), proptest::option::weighted(0.8, any_json()))
            .prop_map(|(f, v)| Body::Mutated(f, v)),
        2 => any_json().prop_map(Body::Json),
        1 => vec(any::<u8>(), 0..2048).prop_map(Body::Bytes),
        1 => (64usize..100_000).prop_map(Body::Nested),
        2 => (
            prop_oneof![
                Just("400 Bad Request"),
                Just("404 Not Found"),
                Just("409 Conflict"),
                Just("500 Internal Server Error"),
                Just("302 Found"),
            ],
            prop_oneof![
                any::<String>(),
                (1usize..(MAX_BODY_BYTES / 2)).prop_map(|n| "m".repeat(n)),
            ],
        )
            .prop_map(|(s, m)| Body::Error(s, m)),
        1 => (MAX_BODY_BYTES + 1..=10 * 1024 * 1024 + 1).prop_map(Body::Huge),
        1 => (MAX_BODY_BYTES + 1..=12 * 1024 * 1024).prop_map(Body::Streamed),
    ]
}

fn reply(call: Call, body: &Body) -> Reply {
    let (_, _, item) = call.shape();
    let ok = |v: Value| Reply::json("200 OK", v.to_string());
    match body {
        Body::Valid(n) => ok(call.envelope(item, *n)),
        Body::Mutated(field, value) => {
            let mut item = item;
            if let Some(o) = item.as_object_mut() {
                match value {
                    Some(v) => o.insert(field.clone(), v.clone()),
                    None => o.remove(field),
                };
            }
            ok(call.envelope(item, 3))
        }
        Body::Json(v) => ok(v.clone()),
        Body::Bytes(b) => Reply::Full {
            status: "200 OK",
            headers: vec![],
            body: b.clone(),
        },
        Body::Nested(depth) => {
            let (key, _, _) = call.shape();
            let s = format!(
                r#"{{"{key}": {}{}}}"#,
                "[".repeat(*depth),
                "]".repeat(*depth)
            );
            Reply::json("200 OK", s)
        }
        Body::Error(status, message) => Reply::json(
            status,
            json!({"NeutronError": {"type": "SomethingBad", "message": message, "detail": ""}})
                .to_string(),
        ),
        Body::Huge(n) => Reply::Full {
            status: "200 OK",
            headers: vec![],
            body: vec![b' '; *n],
        },
        Body::Streamed(n) => Reply::Chunked {
            status: "200 OK",
            total: *n,
        },
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

fn common(err: &CloudError) -> Result<(), TestCaseError> {
    let text = format!("{err}");
    prop_assert!(
        text.len() <= MAX_MESSAGE,
        "a message of {} bytes: {}...",
        text.len(),
        text.chars().take(300).collect::<String>()
    );
    let debug = format!("{err:?}");
    prop_assert!(
        !debug.contains(TOKEN) && !debug.contains(PASSWORD),
        "{}",
        debug
    );
    Ok(())
}

type Slot = Arc<Mutex<Option<Reply>>>;

async fn neutron_property(
    server: &Server,
    slot: &Slot,
    call: Call,
    body: Body,
) -> Result<(), TestCaseError> {
    *slot.lock().expect("slot") = Some(reply(call, &body));
    let client = server.client();
    let got = call.run(&client).await;
    let (key, list, _) = call.shape();
    match (&body, got) {
        (Body::Valid(n), Ok(len)) => {
            if list {
                prop_assert_eq!(len, *n);
            }
        }
        (Body::Valid(_), Err(e)) => prop_assert!(false, "a valid answer refused: {}", e),
        // An error status, a body past the cap and nesting no answer has are never a value.
        (Body::Error(..) | Body::Huge(_) | Body::Streamed(_) | Body::Nested(_), Ok(len)) => {
            prop_assert!(false, "{} answered Ok ({} items)", body.what(), len)
        }
        // A valid item with a field an answer may omit, or JSON that happens to fit: either.
        (Body::Mutated(..) | Body::Json(_) | Body::Bytes(_), Ok(_)) => {}
        (body, Err(e)) => {
            common(&e)?;
            let text = e.to_string();
            match body {
                Body::Error(status, _) => {
                    let code: u16 = status[..3].parse().expect("a status");
                    prop_assert!(matches!(e, CloudError::Api { .. }), "{:?}", e);
                    prop_assert_eq!(e.status(), Some(code), "{}", text);
                }
                Body::Huge(_) | Body::Streamed(_) => {
                    prop_assert!(matches!(e, CloudError::Decode { .. }), "{:?}", e);
                    prop_assert!(
                        text.contains(&format!("exceeds {MAX_BODY_BYTES} bytes")),
                        "{}",
                        text
                    )
                }
                Body::Mutated(field, _) => {
                    prop_assert!(matches!(e, CloudError::Decode { .. }), "{:?}", e);
                    prop_assert!(
                        text.contains(key) && text.contains(field.as_str()),
                        "a refused {} does not name {}.{}: {}",
                        key,
                        key,
                        field,
                        text
                    );
                }
                _ => prop_assert!(matches!(e, CloudError::Decode { .. }), "{:?}", e),
            }
            // The call is always named: what failed, where.
            prop_assert!(text.contains(" /"), "no path in {}", text);
        }
    }
    Ok(())
}

#[test]
fn neutron_answers() {
    let (mut runner, seed) = runner("neutron_answers", 160);
    let rt = runtime();
    let slot: Slot = Arc::new(Mutex::new(None));
    let server = {
        let slot = slot.clone();
        rt.block_on(Server::start(move |req: &Request| {
            if let Some(r) = support::keystone(req) {
                return r;
            }
            slot.lock()
                .expect("slot")
                .take()
                .unwrap_or_else(|| Reply::json("500 Internal Server Error", "{}"))
        }))
    };
    let strategy =
        proptest::sample::select(Call::ALL.to_vec()).prop_flat_map(|call| (Just(call), body(call)));
    let result = runner.run(&strategy, |(call, body)| {
        rt.block_on(neutron_property(&server, &slot, call, body))
    });
    check("neutron_answers", seed, result);
    // Memory: the streamed bodies were cut off, not read to their end.
    let streamed = server.seen.lock().expect("seen").streamed;
    eprintln!("neutron_answers: {streamed} bytes streamed in all");
}

// ---------------------------------------------------------------------------------------
// Keystone
// ---------------------------------------------------------------------------------------

fn token_template() -> Value {
    json!({"token": {"expires_at": "2099-01-01T00:00:00Z",
        "project": {"id": "p", "name": "p"}, "user": {"id": "u", "name": "u"},
        "roles": [{"id": "r", "name": "member"}], "catalog": [],
        "application_credential": {"id": "ac", "restricted": true}}})
}

#[derive(Debug, Clone)]
enum TokenBody {
    Valid,
    /// A field under `token` replaced (or removed).
    Mutated(String, Option<Value>),
    Json(Value),
    Bytes(Vec<u8>),
    Huge(usize),
    Streamed(usize),
    Refused(&'static str, Value),
}

impl TokenBody {
    /// What a failure message says of the body, never the body itself.
    fn what(&self) -> String {
        match self {
            TokenBody::Valid => "a valid token body".into(),
            TokenBody::Mutated(field, _) => format!("a token body with token.{field} changed"),
            TokenBody::Json(_) => "arbitrary JSON".into(),
            TokenBody::Bytes(b) => format!("{} arbitrary bytes", b.len()),
            TokenBody::Huge(n) => format!("a {n}-byte body with its Content-Length"),
            TokenBody::Streamed(n) => format!("a {n}-byte chunked body"),
            TokenBody::Refused(status, _) => format!("HTTP {status}"),
        }
    }
}

fn token_body() -> impl Strategy<Value = TokenBody> {
    let fields = proptest::sample::select(vec![
        "expires_at".to_string(),
        "project".to_string(),
        "user".to_string(),
        "roles".to_string(),
        "catalog".to_string(),
        "application_credential".to_string(),
    ]);
    prop_oneof![
        1 => Just(TokenBody::Valid),
        4 => (fields, proptest::option::weighted(0.8, any_json()))
            .prop_map(|(f, v)| TokenBody::Mutated(f, v)),
        2 => any_json().prop_map(TokenBody::Json),
        1 => vec(any::<u8>(), 0..2048).prop_map(TokenBody::Bytes),
        1 => (MAX_BODY_BYTES + 1..=10 * 1024 * 1024 + 1).prop_map(TokenBody::Huge),
        1 => (MAX_BODY_BYTES + 1..=12 * 1024 * 1024).prop_map(TokenBody::Streamed),
        2 => (
            prop_oneof![Just("401 Unauthorized"), Just("404 Not Found"), Just("500 Internal Server Error")],
            any_json(),
        )
            .prop_map(|(s, v)| TokenBody::Refused(s, json!({"error": v}))),
    ]
}

fn token_reply(body: &TokenBody, header: bool) -> Reply {
    let with_token = |r: Reply| {
        if header {
            r.header("X-Subject-Token", TOKEN)
        } else {
            r
        }
    };
    match body {
        TokenBody::Valid => with_token(Reply::json("201 Created", token_template().to_string())),
        TokenBody::Mutated(field, value) => {
            let mut t = token_template();
            if let Some(o) = t["token"].as_object_mut() {
                match value {
                    Some(v) => o.insert(field.clone(), v.clone()),
                    None => o.remove(field),
                };
            }
            with_token(Reply::json("201 Created", t.to_string()))
        }
        TokenBody::Json(v) => with_token(Reply::json("201 Created", v.to_string())),
        TokenBody::Bytes(b) => with_token(Reply::Full {
            status: "201 Created",
            headers: vec![],
            body: b.clone(),
        }),
        TokenBody::Huge(n) => with_token(Reply::Full {
            status: "201 Created",
            headers: vec![],
            body: vec![b' '; *n],
        }),
        TokenBody::Streamed(n) => Reply::Chunked {
            status: "201 Created",
            total: *n,
        },
        TokenBody::Refused(status, v) => Reply::json(status, v.to_string()),
    }
}

async fn keystone_property(
    server: &Server,
    slot: &Slot,
    body: TokenBody,
    header: bool,
) -> Result<(), TestCaseError> {
    *slot.lock().expect("slot") = Some(token_reply(&body, header));
    let got = server.client().token_info().await;
    match (&body, got) {
        (TokenBody::Valid, Ok(info)) if header => {
            prop_assert_eq!(info.project_id.as_str(), "p");
            prop_assert_eq!(info.roles, vec!["member".to_string()]);
        }
        (TokenBody::Valid, r) if header => prop_assert!(false, "a valid token refused: {:?}", r),
        // A token body with a field Keystone may omit, or JSON that happens to fit: either.
        (TokenBody::Mutated(..) | TokenBody::Json(_) | TokenBody::Bytes(_), Ok(_)) if header => {}
        // Without X-Subject-Token there is no token, whatever the body; a refusal, or a body
        // past the cap, is never a token either.
        (body, Ok(_)) => prop_assert!(
            false,
            "{} (X-Subject-Token {}) answered Ok",
            body.what(),
            if header { "sent" } else { "missing" }
        ),
        (body, Err(e)) => {
            common(&e)?;
            prop_assert!(matches!(e, CloudError::Auth { .. }), "{:?}", e);
            let text = e.to_string();
            match body {
                TokenBody::Refused(status, _) => {
                    let code: u16 = status[..3].parse().expect("a status");
                    prop_assert_eq!(e.auth_status(), Some(code), "{}", text);
                }
                TokenBody::Huge(_) | TokenBody::Streamed(_) => {}
                _ if !header => prop_assert!(
                    text.contains("no X-Subject-Token"),
                    "a token answer without X-Subject-Token refused otherwise: {}",
                    text
                ),
                _ => {}
            }
            if let (TokenBody::Mutated(field, _), true) = (body, header) {
                prop_assert!(
                    text.contains(field.as_str()),
                    "a refused token does not name token.{}: {}",
                    field,
                    text
                );
            }
            if let TokenBody::Huge(_) | TokenBody::Streamed(_) = body {
                prop_assert!(
                    text.contains(&format!("exceeds {MAX_BODY_BYTES} bytes")),
                    "{}",
                    text
                );
            }
        }
    }
    Ok(())
}

#[test]
fn keystone_answers() {
    let (mut runner, seed) = runner("keystone_answers", 96);
    let rt = runtime();
    let slot: Slot = Arc::new(Mutex::new(None));
    let server = {
        let slot = slot.clone();
        rt.block_on(Server::start(move |_req: &Request| {
            slot.lock()
                .expect("slot")
                .take()
                .unwrap_or_else(|| Reply::json("500 Internal Server Error", "{}"))
        }))
    };
    let strategy = (token_body(), prop_oneof![9 => Just(true), 1 => Just(false)]);
    let result = runner.run(&strategy, |(body, header)| {
        rt.block_on(keystone_property(&server, &slot, body, header))
    });
    check("keystone_answers", seed, result);
}
