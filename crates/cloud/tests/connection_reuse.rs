//! How the HTTP client uses its connections, against a small HTTP/1.1 server on loopback that
//! records every connection and request: connections idle past `POOL_IDLE` are not reused
//! (servers close theirs after as little as 2 s), a GET whose connection breaks is retried once
//! on a fresh one, and a write whose connection breaks is not (its outcome is unknown).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bnerd_cloud::{
    AuthConfig, AuthMethod, CloudError, Neutron, NeutronAdmin, OpenStack, POOL_IDLE, SecretString,
};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

#[derive(Default)]
struct Seen {
    connections: usize,
    /// (connection number, request line)
    requests: Vec<(usize, String)>,
    /// Requests (by request line prefix) to answer by dropping the connection, once each.
    drop_once: Vec<String>,
}

const TOKEN: &str = r#"{"token": {"expires_at": "2099-01-01T00:00:00Z", "project": {"id": "p", "name": "p"}, "user": {"id": "u", "name": "u"}, "roles": [{"id": "r", "name": "member"}], "catalog": []}}"#;

async fn serve(listener: TcpListener, seen: Arc<Mutex<Seen>>) {
    loop {
        let Ok((sock, _)) = listener.accept().await else {
            return;
        };
        let n = {
            let mut s = seen.lock().unwrap();
            s.connections += 1;
            s.connections
        };
        tokio::spawn(connection(sock, n, seen.clone()));
    }
}

/// Keep-alive until the client goes away; never closes an idle connection itself, so any
/// second connection is the client's choice.
async fn connection(sock: TcpStream, n: usize, seen: Arc<Mutex<Seen>>) {
    let (r, mut w) = sock.into_split();
    let mut r = BufReader::new(r);
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).await.unwrap_or(0) == 0 {
            return;
        }
        let line = line.trim_end().to_string();
        let mut length = 0usize;
        loop {
            let mut h = String::new();
            if r.read_line(&mut h).await.unwrap_or(0) == 0 {
                return;
            }
            let h = h.trim_end();
            if h.is_empty() {
                break;
            }
            if let Some((k, v)) = h.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0; length];
        if r.read_exact(&mut body).await.is_err() {
            return;
        }
        let drop_it = {
            let mut s = seen.lock().unwrap();
            s.requests.push((n, line.clone()));
            match s
                .drop_once
                .iter()
                .position(|p| line.starts_with(p.as_str()))
            {
                Some(i) => {
                    s.drop_once.remove(i);
                    true
                }
                None => false,
            }
        };
        if drop_it {
            // Gone without an answer, as a server closing a kept-alive connection is.
            return;
        }
        let (status, extra, body) = if line.starts_with("POST /v3/auth/tokens") {
            ("201 Created", "X-Subject-Token: t\r\n", TOKEN.to_string())
        } else if line.starts_with("GET /v2.0/networks/") {
            (
                "200 OK",
                "",
                r#"{"network": {"id": "n1", "name": "transit"}}"#.to_string(),
            )
        } else if line.starts_with("POST /v2.0/networks") {
            (
                "201 Created",
                "",
                r#"{"network": {"id": "n2", "name": "new"}}"#.to_string(),
            )
        } else {
            ("404 Not Found", "", "{}".to_string())
        };
        let head = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\n\r\n",
            body.len()
        );
        if w.write_all(head.as_bytes()).await.is_err()
            || w.write_all(body.as_bytes()).await.is_err()
        {
            return;
        }
    }
}

async fn start() -> (OpenStack, Arc<Mutex<Seen>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Mutex::new(Seen::default()));
    tokio::spawn(serve(listener, seen.clone()));
    let auth = AuthConfig {
        auth_url: format!("http://{addr}/v3"),
        region: None,
        interface: "public".into(),
        method: AuthMethod::Password {
            username: "u".into(),
            password: SecretString::new("pw".to_string()),
            user_domain_name: "Default".into(),
            project_id: Some("p".into()),
            project_name: None,
            project_domain_name: "Default".into(),
        },
    };
    let client = OpenStack::new(auth)
        .unwrap()
        .with_neutron_url(format!("http://{addr}"));
    (client, seen)
}

fn neutron_requests(seen: &Arc<Mutex<Seen>>) -> Vec<(usize, String)> {
    seen.lock()
        .unwrap()
        .requests
        .iter()
        .filter(|(_, l)| l.contains("/v2.0/"))
        .cloned()
        .collect()
}

#[tokio::test]
async fn a_connection_idle_past_pool_idle_is_not_reused() {
    let (client, seen) = start().await;
    client.get_network("n1").await.unwrap();
    client.get_network("n1").await.unwrap();
    tokio::time::sleep(POOL_IDLE + Duration::from_millis(500)).await;
    client.get_network("n1").await.unwrap();
    let reqs = neutron_requests(&seen);
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
    seen.lock()
        .unwrap()
        .drop_once
        .push("GET /v2.0/networks/n1".into());
    let net = client.get_network("n1").await.expect("the retry answers");
    assert_eq!(net.id, "n1");
    let reqs = neutron_requests(&seen);
    assert_eq!(reqs.len(), 2, "one failed GET, one retried: {reqs:?}");
    assert_eq!(
        client.call_counts(),
        (2, 0),
        "the retry is counted as a read"
    );

    // Twice broken: the error comes back, with the cause from the source chain.
    seen.lock().unwrap().drop_once.extend([
        "GET /v2.0/networks/n1".to_string(),
        "GET /v2.0/networks/n1".to_string(),
    ]);
    let err = client.get_network("n1").await.unwrap_err();
    match &err {
        CloudError::Transport { message, .. } => assert!(
            message.contains("error sending request") && message.matches(": ").count() >= 2,
            "the cause is named, not only reqwest's summary: {message}"
        ),
        other => panic!("expected a transport error, got {other:?}"),
    }
    assert!(err.is_retryable());
    assert_eq!(neutron_requests(&seen).len(), 4);
}

#[tokio::test]
async fn a_write_on_a_broken_connection_is_not_repeated() {
    let (client, seen) = start().await;
    seen.lock()
        .unwrap()
        .drop_once
        .push("POST /v2.0/networks".into());
    let err = client.create_network("new").await.unwrap_err();
    assert!(
        matches!(err, CloudError::Transport { .. }),
        "the write's outcome is unknown and reported: {err:?}"
    );
    let posts: Vec<_> = neutron_requests(&seen)
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
