//! The client at the moments a reconcile meets weather: a token that
//! expires mid-reconcile (Neutron's 401, one re-auth, never a loop), a 429/503 with
//! `Retry-After` (honoured as the least wait, writes included), and a Neutron endpoint that
//! leaves the catalog (a clear error naming it, retryable, and mended when it comes back).

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use bnerd_cloud::{AuthConfig, AuthMethod, CloudError, Neutron, OpenStack, Route, SecretString};
use support::{Reply, Request, Server};

const ROUTER: &str =
    r#"{"router": {"id": "r1", "name": "r1", "routes": [], "revision_number": 3}}"#;

/// A Keystone that hands out `tok-1`, `tok-2`, ... one per token request.
fn numbered_token(req: &Request, issued: &AtomicUsize, catalog: &str) -> Option<Reply> {
    if !req.line.starts_with("POST /v3/auth/tokens") {
        return None;
    }
    let n = issued.fetch_add(1, Ordering::SeqCst) + 1;
    let body = format!(
        r#"{{"token": {{"expires_at": "2099-01-01T00:00:00Z", "project": {{"id": "p", "name": "p"}}, "user": {{"id": "u", "name": "u"}}, "roles": [{{"id": "r", "name": "member"}}], "catalog": {catalog}}}}}"#
    );
    Some(Reply::json("201 Created", body).header("X-Subject-Token", &format!("tok-{n}")))
}

fn token_of(req: &Request) -> String {
    req.header("x-auth-token").unwrap_or_default().to_string()
}

/// Keystone's 401 body for a token it no longer accepts.
fn unauthorized() -> Reply {
    Reply::json(
        "401 Unauthorized",
        r#"{"error": {"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication."}}"#,
    )
}

#[tokio::test]
async fn a_token_that_expires_mid_reconcile_is_renewed_once() {
    let issued = Arc::new(AtomicUsize::new(0));
    let i = issued.clone();
    let server = Server::start(move |req| {
        if let Some(r) = numbered_token(req, &i, "[]") {
            return r;
        }
        // The first token is revoked after its first use: Keystone (through Neutron's
        // keystonemiddleware) answers 401 from then on.
        let first_used = req.conn > 0 && token_of(req) == "tok-1";
        if first_used && req.line.contains("add_extraroutes") {
            return unauthorized();
        }
        Reply::json("200 OK", ROUTER)
    })
    .await;
    let client = server.client();
    client.get_router("r1").await.expect("first call on tok-1");
    // Mid-reconcile, a write meets the expired token: one re-auth, then the write goes
    // through on the new token, once.
    client
        .add_extraroutes("r1", &[Route::new("10.9.0.0/16", "10.254.0.3")])
        .await
        .expect("the write after the re-auth");
    assert_eq!(issued.load(Ordering::SeqCst), 2, "exactly one re-auth");
    let writes: Vec<String> = server
        .requests()
        .iter()
        .filter(|r| r.line.contains("add_extraroutes"))
        .map(token_of)
        .collect();
    assert_eq!(
        writes,
        vec!["tok-1", "tok-2"],
        "the write was sent again once, on the new token"
    );
}

#[tokio::test]
async fn a_token_refused_again_after_the_re_auth_is_an_error_not_a_loop() {
    let issued = Arc::new(AtomicUsize::new(0));
    let i = issued.clone();
    let server =
        Server::start(move |req| numbered_token(req, &i, "[]").unwrap_or_else(unauthorized)).await;
    let err = server
        .client()
        .get_router("r1")
        .await
        .expect_err("a Neutron that refuses every token");
    assert_eq!(err.status(), Some(401), "{err}");
    assert_eq!(issued.load(Ordering::SeqCst), 2, "one re-auth, no more");
    assert_eq!(server.neutron_requests().len(), 2);
}

#[tokio::test]
async fn a_short_retry_after_is_waited_out_and_the_write_sent_again() {
    for (code, reason) in [
        ("429 Too Many Requests", "OverLimit"),
        ("503 Service Unavailable", "ServiceUnavailable"),
    ] {
        let refused = Arc::new(AtomicBool::new(false));
        let r = refused.clone();
        let server = Server::start(move |req| {
            if let Some(k) = support::keystone(req) {
                return k;
            }
            if !r.swap(true, Ordering::SeqCst) {
                let body = format!(r#"{{"NeutronError": {{"type": "{reason}", "message": "slow down", "detail": ""}}}}"#);
                return Reply::json(code, body).header("Retry-After", "1");
            }
            Reply::json("200 OK", ROUTER)
        })
        .await;
        let started = Instant::now();
        server
            .client()
            .add_extraroutes("r1", &[Route::new("10.9.0.0/16", "10.254.0.3")])
            .await
            .unwrap_or_else(|e| panic!("{code}: {e}"));
        let took = started.elapsed();
        assert!(
            took >= Duration::from_millis(950),
            "{code}: waited only {took:?}"
        );
        assert!(took < Duration::from_secs(5), "{code}: {took:?}");
        assert_eq!(
            server.neutron_requests().len(),
            2,
            "{code}: sent again once"
        );
    }
}

#[tokio::test]
async fn a_long_retry_after_fails_the_call_and_holds_the_next_ones() {
    let server = Server::start(|req| {
        if let Some(k) = support::keystone(req) {
            return k;
        }
        Reply::json(
            "429 Too Many Requests",
            r#"{"NeutronError": {"type": "OverLimit", "message": "slow down", "detail": ""}}"#,
        )
        .header("Retry-After", "120")
    })
    .await;
    let client = server.client();
    let started = Instant::now();
    let err = client.get_router("r1").await.expect_err("throttled");
    assert_eq!(err.status(), Some(429), "{err}");
    assert!(err.is_retryable());
    // The reconcile's own backoff (1 s, 2 s, ...) comes back long before 120 s: nothing is
    // sent to the server until the time it named.
    let again = client.get_router("r1").await.expect_err("held");
    assert!(
        again.to_string().contains("Retry-After"),
        "the message says why nothing was sent: {again}"
    );
    assert!(again.is_retryable());
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "no long wait in the call"
    );
    assert_eq!(
        server.neutron_requests().len(),
        1,
        "the second call never left"
    );
}

#[tokio::test]
async fn a_neutron_endpoint_that_leaves_the_catalog_is_named_and_retried() {
    let issued = Arc::new(AtomicUsize::new(0));
    let listed = Arc::new(AtomicBool::new(true));
    let (i, l) = (issued.clone(), listed.clone());
    let server = Arc::new(std::sync::OnceLock::<String>::new());
    let url = server.clone();
    let srv = Server::start(move |req| {
        let catalog = if l.load(Ordering::SeqCst) {
            format!(
                r#"[{{"type": "network", "endpoints": [{{"interface": "public", "region_id": "RegionOne", "url": "{}"}}]}}]"#,
                url.get().cloned().unwrap_or_default()
            )
        } else {
            r#"[{"type": "identity", "endpoints": []}]"#.to_string()
        };
        if let Some(r) = numbered_token(req, &i, &catalog) {
            return r;
        }
        // Each token is good for one Neutron call: the next one needs a new token, which
        // reads the catalog again.
        let n: usize = token_of(req)
            .trim_start_matches("tok-")
            .parse()
            .unwrap_or(0);
        let used_before = req.conn > 0 && n < i.load(Ordering::SeqCst);
        if used_before {
            return unauthorized();
        }
        Reply::json("200 OK", ROUTER)
    })
    .await;
    server.set(srv.url()).expect("url once");
    let client = OpenStack::new(AuthConfig {
        auth_url: format!("{}/v3", srv.url()),
        region: Some("RegionOne".into()),
        interface: "public".into(),
        tls: Default::default(),
        method: AuthMethod::Password {
            username: "u".into(),
            password: SecretString::new(support::PASSWORD.to_string()),
            user_domain_name: "Default".into(),
            project_id: Some("p".into()),
            project_name: None,
            project_domain_name: "Default".into(),
        },
    })
    .expect("client");
    client
        .get_router("r1")
        .await
        .expect("Neutron in the catalog");
    // Neutron leaves the catalog; the token in hand is refused, and the new one's catalog
    // has no network service.
    listed.store(false, Ordering::SeqCst);
    issued.fetch_add(1, Ordering::SeqCst);
    let err = client.get_router("r1").await.expect_err("no Neutron");
    assert!(matches!(err, CloudError::Catalog { .. }), "{err:?}");
    assert!(
        err.to_string().contains("network (Neutron)"),
        "the message names what is missing: {err}"
    );
    assert!(err.is_retryable(), "weather, not a refused credential");
    // It comes back: the next try works.
    listed.store(true, Ordering::SeqCst);
    client
        .get_router("r1")
        .await
        .expect("Neutron back in the catalog");
}
