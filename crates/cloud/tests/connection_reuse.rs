//! How the HTTP client uses its connections, against a small HTTP/1.1 server on loopback that
//! records every connection and request: connections idle past `POOL_IDLE` are not reused
//! (servers close theirs after as little as 2 s), a GET whose connection breaks is retried once
//! on a fresh one, and a write whose connection breaks is not (its outcome is unknown).

mod support;

use std::time::Duration;

use bnerd_cloud::{CloudError, Neutron, POOL_IDLE};
use support::{Reply, Request, Server};

fn networks(req: &Request) -> Reply {
    if let Some(r) = support::keystone(req) {
        r
    } else if req.line.starts_with("GET /v2.0/networks/") {
        Reply::json("200 OK", r#"{"network": {"id": "n1", "name": "transit"}}"#)
    } else if req.line.starts_with("POST /v2.0/networks") {
        Reply::json("201 Created", r#"{"network": {"id": "n2", "name": "new"}}"#)
    } else {
        Reply::json("404 Not Found", "{}")
    }
}

async fn start() -> (bnerd_cloud::OpenStack, Server) {
    let server = Server::start(networks).await;
    (server.client(), server)
}

#[tokio::test]
async fn a_connection_idle_past_pool_idle_is_not_reused() {
    let (client, seen) = start().await;
    client.get_network("n1").await.unwrap();
    client.get_network("n1").await.unwrap();
    tokio::time::sleep(POOL_IDLE + Duration::from_millis(500)).await;
    client.get_network("n1").await.unwrap();
    let reqs = seen.neutron_requests();
    assert_eq!(reqs.len(), 3, "{reqs:?}");
    assert_eq!(
        reqs[0].0, reqs[1].0,
        "back-to-back calls share a connection: {reqs:?}"
    );
    assert_ne!(
        reqs[1].0, reqs[2].0,
        "after {POOL_IDLE:?} idle a new connection is opened: {reqs:?}"
    );
}

#[tokio::test]
async fn a_get_on_a_broken_connection_is_retried_once() {
    let (client, seen) = start().await;
    seen.drop_once("GET /v2.0/networks/n1");
    let net = client.get_network("n1").await.expect("the retry answers");
    assert_eq!(net.id, "n1");
    let reqs = seen.neutron_requests();
    assert_eq!(reqs.len(), 2, "one failed GET, one retried: {reqs:?}");
    assert_eq!(
        client.call_counts(),
        (2, 0),
        "the retry is counted as a read"
    );

    // Twice broken: the error comes back, with the cause from the source chain.
    seen.drop_once("GET /v2.0/networks/n1");
    seen.drop_once("GET /v2.0/networks/n1");
    let err = client.get_network("n1").await.unwrap_err();
    match &err {
        CloudError::Transport { message, .. } => assert!(
            message.contains("error sending request") && message.matches(": ").count() >= 2,
            "the cause is named, not only reqwest's summary: {message}"
        ),
        other => panic!("expected a transport error, got {other:?}"),
    }
    assert!(err.is_retryable());
    assert_eq!(seen.neutron_requests().len(), 4);
}

#[tokio::test]
async fn a_write_on_a_broken_connection_is_not_repeated() {
    let (client, seen) = start().await;
    seen.drop_once("POST /v2.0/networks");
    let err = client.create_network("new").await.unwrap_err();
    assert!(
        matches!(err, CloudError::Transport { .. }),
        "the write's outcome is unknown and reported: {err:?}"
    );
    let posts: Vec<_> = seen
        .neutron_requests()
        .into_iter()
        .filter(|(_, l)| l.starts_with("POST"))
        .collect();
    assert_eq!(
        posts.len(),
        1,
        "sent once, never repeated blindly: {posts:?}"
    );
    assert_eq!(client.call_counts(), (0, 1));
}
