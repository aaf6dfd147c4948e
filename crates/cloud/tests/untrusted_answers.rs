//! What the client does with answers it cannot take at face value, against a server on
//! loopback: paged lists are read to the end, but a `next` link is only read as a path under
//! the Neutron endpoint, from that endpoint, and only so far; bodies are read up to a cap;
//! redirects are not followed; Keystone's free text never reaches an error message. The token
//! goes nowhere but Neutron.

mod support;

use std::time::{Duration, Instant};

use bnerd_cloud::{
    CloudError, Identity, MAX_BODY_BYTES, MAX_PAGES, Neutron, PortQuery, RouterQuery,
};
use support::{PASSWORD, Reply, Request, Server, TOKEN};

/// A Neutron list of `items` numbered ids, `page` at a time, with Neutron 29's links: a full
/// page has a `next` (so an exact multiple ends on an empty page), every page after the first
/// a `previous`.
fn paged(req: &Request, resource: &str, key: &str, items: usize, page: usize) -> Reply {
    let item = |i: usize| match key {
        "ports" => format!(r#"{{"id": "p{i}", "network_id": "n"}}"#),
        "routers" => format!(r#"{{"id": "r{i}", "name": "r"}}"#),
        _ => format!(
            r#"{{"id": "b{i}", "object_type": "network", "object_id": "n", "action": "access_as_shared", "target_tenant": "t{i}"}}"#
        ),
    };
    let start = req
        .query("marker")
        .and_then(|m| m[1..].parse::<usize>().ok())
        .unwrap_or(0);
    let end = (start + page).min(items);
    let body: Vec<String> = (start + 1..=end).map(item).collect();
    let base = format!("{}/v2.0/{resource}?limit={page}", req.origin());
    let mut links = vec![];
    if end - start == page {
        links.push(format!(
            r#"{{"rel": "next", "href": "{base}&marker={}{end}"}}"#,
            &key[..1]
        ));
    }
    if start > 0 {
        links.push(format!(
            r#"{{"rel": "previous", "href": "{base}&marker={}{}&page_reverse=True"}}"#,
            &key[..1],
            start + 1
        ));
    }
    Reply::json(
        "200 OK",
        format!(
            r#"{{"{key}": [{}], "{key}_links": [{}]}}"#,
            body.join(", "),
            links.join(", ")
        ),
    )
}

fn lists(req: &Request) -> Reply {
    if let Some(r) = support::keystone(req) {
        return r;
    }
    for (resource, key) in [
        ("ports", "ports"),
        ("routers", "routers"),
        ("rbac-policies", "rbac_policies"),
    ] {
        let path = req.target().split('?').next().unwrap_or_default();
        if path == format!("/v2.0/{resource}") {
            return paged(req, resource, key, 5, 2);
        }
    }
    Reply::json("404 Not Found", "{}")
}

#[tokio::test]
async fn every_list_reads_every_page() {
    let server = Server::start(lists).await;
    let client = server.client().with_page_size(2);

    let ports = client
        .list_ports(&PortQuery {
            network_id: Some("n".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    let ids: Vec<&str> = ports.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["p1", "p2", "p3", "p4", "p5"]);
    assert_eq!(client.call_counts(), (3, 0), "one read per page");
    let lines: Vec<String> = server.neutron_requests().into_iter().map(|r| r.1).collect();
    assert!(
        lines[0].starts_with("GET /v2.0/ports?network_id=n&limit=2 "),
        "{lines:?}"
    );
    assert!(
        lines[2].starts_with("GET /v2.0/ports?limit=2&marker=p4 "),
        "{lines:?}"
    );

    let routers = client
        .list_routers(&RouterQuery {
            name: Some("r".into()),
            ..Default::default()
        })
        .await
        .unwrap();
    assert_eq!(routers.len(), 5);
    assert_eq!(routers[4].id, "r5");
    let policies = client.list_rbac_policies("n").await.unwrap();
    assert_eq!(policies.len(), 5);
    assert_eq!(policies[0].target_tenant, "t1");
    assert_eq!(client.call_counts(), (9, 0));

    // Without a page size no limit is sent; the server's own paging is still followed.
    let plain = server.client();
    let all = plain.list_ports(&PortQuery::default()).await.unwrap();
    assert_eq!(all.len(), 5);
    let last = server
        .neutron_requests()
        .into_iter()
        .rev()
        .nth(2)
        .unwrap()
        .1;
    assert!(last.starts_with("GET /v2.0/ports "), "{last}");
}

/// A server whose every list answer is one port and a `next` link to `href(request)`.
async fn first_page_linking(href: impl Fn(&Request) -> String + Send + Sync + 'static) -> Server {
    Server::start(move |req| {
        if let Some(r) = support::keystone(req) {
            return r;
        }
        Reply::json(
            "200 OK",
            format!(
                r#"{{"ports": [{{"id": "p1", "network_id": "n"}}], "ports_links": [{{"rel": "next", "href": "{}"}}]}}"#,
                href(req)
            ),
        )
    })
    .await
}

fn assert_no_secret(err: &CloudError) {
    let text = format!("{err} {err:?}");
    assert!(!text.contains(TOKEN), "the token leaked: {text}");
    assert!(!text.contains(PASSWORD), "the password leaked: {text}");
}

#[tokio::test]
async fn a_next_link_to_another_host_is_read_from_our_endpoint() {
    // What a proxy in front of Neutron makes of its links (another scheme, host or port), or
    // a server pointing elsewhere: the path and query are read from our own endpoint, and
    // nothing at all goes to the host the link names.
    let elsewhere = Server::start(|_| Reply::json("200 OK", r#"{"ports": []}"#)).await;
    let other = elsewhere.addr;
    let server = Server::start(move |req| {
        if let Some(r) = support::keystone(req) {
            return r;
        }
        match req.query("marker") {
            None => Reply::json(
                "200 OK",
                format!(
                    r#"{{"ports": [{{"id": "p1", "network_id": "n"}}], "ports_links": [{{"rel": "next", "href": "http://{other}/v2.0/ports?marker=p1"}}]}}"#
                ),
            ),
            Some(_) => Reply::json("200 OK", r#"{"ports": [{"id": "p2", "network_id": "n"}]}"#),
        }
    })
    .await;
    let client = server.client();
    let ports = client.list_ports(&PortQuery::default()).await.unwrap();
    let ids: Vec<&str> = ports.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["p1", "p2"]);
    assert_eq!(client.call_counts(), (2, 0));
    let lines: Vec<String> = server.neutron_requests().into_iter().map(|r| r.1).collect();
    assert_eq!(
        lines,
        [
            "GET /v2.0/ports HTTP/1.1",
            "GET /v2.0/ports?marker=p1 HTTP/1.1"
        ]
    );
    let seen = elsewhere.seen.lock().unwrap();
    assert_eq!(
        (seen.connections, seen.requests.len()),
        (0, 0),
        "the host the link named was never contacted"
    );
}

#[tokio::test]
async fn a_next_link_outside_the_endpoint_path_is_not_followed() {
    let elsewhere = Server::start(|req| {
        support::keystone(req).unwrap_or_else(|| Reply::json("200 OK", r#"{"ports": []}"#))
    })
    .await;
    let other = elsewhere.addr;
    let server =
        first_page_linking(move |_| format!("http://{other}/identity/v3/auth/tokens")).await;
    let client = server.client();
    let err = client.list_ports(&PortQuery::default()).await.unwrap_err();
    match &err {
        CloudError::Decode { message, path, .. } => {
            assert!(
                message.contains("not under the Neutron endpoint")
                    && message.contains(&other.to_string()),
                "{message}"
            );
            assert_eq!(path, "/ports");
        }
        other => panic!("expected a decode error, got {other:?}"),
    }
    assert_no_secret(&err);
    assert_eq!(client.call_counts(), (1, 0));
    assert_eq!(server.neutron_requests().len(), 1);
    let seen = elsewhere.seen.lock().unwrap();
    assert_eq!(
        (seen.connections, seen.requests.len()),
        (0, 0),
        "the other server was never contacted"
    );
}

#[tokio::test]
async fn a_next_link_that_loops_is_bounded() {
    // The same link again: found at once.
    let server = first_page_linking(|req| format!("{}/v2.0/ports?marker=p1", req.origin())).await;
    let client = server.client();
    let err = client.list_ports(&PortQuery::default()).await.unwrap_err();
    assert!(
        err.to_string()
            .contains("points back to a page already read"),
        "{err}"
    );
    assert_eq!(client.call_counts(), (2, 0));

    // A new link every time: given up after MAX_PAGES pages.
    let server = first_page_linking(|req| {
        let n: u64 = req
            .query("marker")
            .and_then(|m| m.parse().ok())
            .unwrap_or(0);
        format!("{}/v2.0/ports?marker={}", req.origin(), n + 1)
    })
    .await;
    let client = server.client();
    let t = Instant::now();
    let err = client.list_ports(&PortQuery::default()).await.unwrap_err();
    assert!(
        matches!(&err, CloudError::Decode { message, .. }
            if message == &format!("the list did not end within {MAX_PAGES} pages")),
        "{err:?}"
    );
    assert_eq!(client.call_counts(), (MAX_PAGES as u64, 0));
    assert_eq!(server.neutron_requests().len(), MAX_PAGES);
    eprintln!("{MAX_PAGES} pages in {:?}", t.elapsed());
}

fn cap_message() -> String {
    format!("response body exceeds {MAX_BODY_BYTES} bytes")
}

#[tokio::test]
async fn a_body_past_the_cap_is_refused() {
    const TEN_MB: usize = 10 * 1024 * 1024;
    let server = Server::start(|req| {
        if let Some(r) = support::keystone(req) {
            return r;
        }
        if req.target().starts_with("/v2.0/networks/announced") {
            let mut body = br#"{"network": {"id": "n", "name": ""#.to_vec();
            body.resize(TEN_MB, b'x');
            body.extend_from_slice(br#""}}"#);
            return Reply::Full {
                status: "200 OK",
                headers: vec![],
                body,
            };
        }
        // Chunked, so nothing says up front how much is coming: 1 GiB unless the client stops.
        Reply::Chunked {
            status: "200 OK",
            total: 1 << 30,
        }
    })
    .await;
    let client = server.client();

    let err = client.get_network("announced").await.unwrap_err();
    assert!(
        matches!(&err, CloudError::Decode { message, .. } if *message == cap_message()),
        "{err:?}"
    );

    let t = Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(20), client.get_network("streamed"))
        .await
        .expect("refused long before the whole body")
        .unwrap_err();
    assert!(
        matches!(&err, CloudError::Decode { message, .. } if *message == cap_message()),
        "{err:?}"
    );
    // Give the server a moment to notice the closed connection, then check how much it
    // managed to write: the cap plus what socket buffers hold, not the gigabyte.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let streamed = server.seen.lock().unwrap().streamed;
    assert!(
        streamed < 4 * MAX_BODY_BYTES,
        "{streamed} bytes went out for a {MAX_BODY_BYTES}-byte cap"
    );
    eprintln!(
        "streamed body refused after {:?}, {streamed} bytes written",
        t.elapsed()
    );
    assert!(
        err.to_string()
            .starts_with("GET /networks/streamed: unexpected response"),
        "{err}"
    );
}

#[tokio::test]
async fn a_keystone_body_past_the_cap_is_refused() {
    let server = Server::start(|_| Reply::Chunked {
        status: "201 Created",
        total: 1 << 30,
    })
    .await;
    let err = server.client().token_info().await.unwrap_err();
    match &err {
        CloudError::Auth { status, message } => {
            assert_eq!(*status, None);
            assert_eq!(
                message,
                &format!("Keystone's answer to the token request exceeds {MAX_BODY_BYTES} bytes")
            );
        }
        other => panic!("expected an auth error, got {other:?}"),
    }
}

#[tokio::test]
async fn a_redirect_is_not_followed() {
    let elsewhere = Server::start(|req| {
        support::keystone(req).unwrap_or_else(|| {
            Reply::json("200 OK", r#"{"network": {"id": "n1", "name": "stolen"}}"#)
        })
    })
    .await;
    let target = elsewhere.url();
    let server = Server::start(move |req| {
        if req.target().starts_with("/v3/") {
            // 307 keeps method and body: followed, it would post the password elsewhere.
            if String::from_utf8_lossy(&req.body).contains(r#""name":"redirected""#) {
                return Reply::json("307 Temporary Redirect", "{}")
                    .header("Location", &format!("{target}/v3/auth/tokens"));
            }
            return support::keystone(req).unwrap_or_else(|| Reply::json("404 Not Found", "{}"));
        }
        Reply::json("302 Found", r#"{"moved": true}"#)
            .header("Location", &format!("{target}{}", req.target()))
    })
    .await;

    let client = server.client();
    let err = client.get_network("n1").await.unwrap_err();
    assert_eq!(err.status(), Some(302), "{err:?}");
    assert!(!err.is_retryable());
    assert_no_secret(&err);
    assert_eq!(client.call_counts(), (1, 0));

    let err = server
        .client_as("redirected")
        .token_info()
        .await
        .unwrap_err();
    assert_eq!(err.auth_status(), Some(307), "{err:?}");
    assert_eq!(
        err.to_string(),
        "authentication failed: Keystone answered HTTP 307 to the token request"
    );
    assert_no_secret(&err);

    let seen = elsewhere.seen.lock().unwrap();
    assert_eq!(
        (seen.connections, seen.requests.len()),
        (0, 0),
        "nothing reached the redirect's target"
    );
}

#[tokio::test]
async fn keystone_free_text_never_reaches_the_message() {
    let server = Server::start(|req| {
        let body = String::from_utf8_lossy(&req.body).to_string();
        let reply = if body.contains(r#""name":"title-echo""#) {
            r#"{"error": {"code": 401, "title": "s3cr3t-echo", "message": "x"}}"#
        } else if body.contains(r#""name":"text-echo""#) {
            "Authentication failed for s3cr3t-echo"
        } else {
            r#"{"error": {"code": 401, "title": "Unauthorized", "message": "The request you have made requires authentication: user s3cr3t-echo"}}"#
        };
        Reply::json("401 Unauthorized", reply)
    })
    .await;

    let err = server
        .client_as("message-echo")
        .token_info()
        .await
        .unwrap_err();
    assert_eq!(err.auth_status(), Some(401));
    assert_eq!(
        err.to_string(),
        "authentication failed: Keystone answered HTTP 401 to the token request: Unauthorized"
    );
    for user in ["title-echo", "text-echo"] {
        let err = server.client_as(user).token_info().await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "authentication failed: Keystone answered HTTP 401 to the token request",
            "{user}"
        );
        assert!(!format!("{err:?}").contains("s3cr3t-echo"), "{err:?}");
    }

    // The same through a Neutron call, which authenticates first.
    let err = server
        .client_as("message-echo")
        .list_ports(&PortQuery::default())
        .await
        .unwrap_err();
    assert_eq!(err.auth_status(), Some(401));
    assert!(!format!("{err} {err:?}").contains("s3cr3t-echo"), "{err}");
    assert_no_secret(&err);
}
