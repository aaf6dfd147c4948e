//! TLS to Keystone and Neutron against a server on loopback with a CA made for the test: a
//! certificate from a private CA is refused with a message that says what to set, trusted
//! through `OS_CACERT` or clouds.yaml `cacert`, and not checked at all with `verify: false`.
//! The server writes its `next` links as `http://<Host>`, as Neutron does behind a proxy that
//! terminates TLS; they are followed over TLS on our own endpoint.

mod support;

use std::path::PathBuf;
use std::time::Instant;

use bnerd_cloud::{AuthConfig, CloudError, Identity, Neutron, OpenStack, PortQuery};
use support::{PASSWORD, Reply, Request, Server, TOKEN, TestCa};

fn scratch(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bnerd-tls-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Keystone, one network, and a port list of three in pages of two whose links are
/// `http://<Host>/v2.0/ports?...`: the scheme a TLS-terminating proxy leaves behind.
fn cloud(req: &Request) -> Reply {
    if let Some(r) = support::keystone(req) {
        return r;
    }
    if req.target().starts_with("/v2.0/networks/") {
        return Reply::json("200 OK", r#"{"network": {"id": "n1", "name": "transit"}}"#);
    }
    if req.target().starts_with("/v2.0/ports") {
        return match req.query("marker").as_deref() {
            None => Reply::json(
                "200 OK",
                format!(
                    r#"{{"ports": [{{"id": "p1", "network_id": "n"}}, {{"id": "p2", "network_id": "n"}}],
                        "ports_links": [{{"rel": "next", "href": "{}/v2.0/ports?limit=2&marker=p2"}}]}}"#,
                    req.origin()
                ),
            ),
            Some(_) => Reply::json("200 OK", r#"{"ports": [{"id": "p3", "network_id": "n"}]}"#),
        };
    }
    Reply::json("404 Not Found", "{}")
}

/// Settings as the operator reads them, on this server.
fn from_env(server: &Server, extra: &[(&str, &str)]) -> AuthConfig {
    let url = format!("{}/v3", server.url());
    let mut vars: Vec<(&str, &str)> = vec![
        ("OS_AUTH_URL", url.as_str()),
        ("OS_USERNAME", "u"),
        ("OS_PASSWORD", PASSWORD),
        ("OS_PROJECT_ID", "p"),
    ];
    vars.extend_from_slice(extra);
    let get = move |k: &str| {
        vars.iter()
            .find(|(name, _)| *name == k)
            .map(|(_, v)| v.to_string())
    };
    AuthConfig::from_env(&get).expect("settings")
}

fn assert_no_secret(err: &CloudError) {
    let text = format!("{err} {err:?}");
    assert!(!text.contains(TOKEN), "the token leaked: {text}");
    assert!(!text.contains(PASSWORD), "the password leaked: {text}");
}

/// Lists the ports and reads the network: a token request and three Neutron reads.
async fn use_the_cloud(client: &OpenStack) {
    let ports = client
        .list_ports(&PortQuery::default())
        .await
        .expect("ports");
    let ids: Vec<&str> = ports.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["p1", "p2", "p3"]);
    assert_eq!(client.get_network("n1").await.expect("network").id, "n1");
}

#[tokio::test]
async fn a_private_ca_is_refused_unless_trusted() {
    let ca = TestCa::new("bnerd test CA");
    let server = Server::start_tls(&ca.server_cert(&["127.0.0.1", "localhost"]), cloud).await;

    // The system's roots only: the handshake fails, nothing (no password) is sent, and the
    // message says what to set.
    let untrusted = OpenStack::new(from_env(&server, &[])).unwrap();
    let err = untrusted.token_info().await.unwrap_err();
    let CloudError::Transport { message, path, .. } = &err else {
        panic!("expected a transport error, got {err:?}")
    };
    assert_eq!(path, "/v3/auth/tokens");
    assert!(
        message.contains("invalid peer certificate: UnknownIssuer"),
        "{message}"
    );
    assert!(
        message.contains("set OS_CACERT or clouds.yaml cacert to that CA's PEM bundle"),
        "{message}"
    );
    assert_no_secret(&err);
    eprintln!("without the CA: {err}");
    assert_eq!(untrusted.call_counts(), (0, 0));
    // The server learns of the refusal from the client's alert, a moment after the client.
    for _ in 0..100 {
        if server.seen.lock().unwrap().tls_failures > 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    {
        let seen = server.seen.lock().unwrap();
        assert!(
            seen.requests.is_empty(),
            "nothing got through the handshake"
        );
        assert!(seen.tls_failures >= 1, "the handshake was refused");
    }

    // OS_CACERT: the same calls succeed, and the http:// next link goes to our https endpoint.
    let dir = scratch("os-cacert");
    let pem = ca.write_pem(&dir).display().to_string();
    let client = OpenStack::new(from_env(&server, &[("OS_CACERT", &pem)]))
        .unwrap()
        .with_neutron_url(server.url());
    let t = Instant::now();
    use_the_cloud(&client).await;
    let elapsed = t.elapsed();
    let lines: Vec<String> = server.neutron_requests().into_iter().map(|r| r.1).collect();
    assert_eq!(
        lines[1], "GET /v2.0/ports?limit=2&marker=p2 HTTP/1.1",
        "the next link's path, sent over TLS: {lines:?}"
    );
    // A sibling (a customer's credential) shares the pool and with it the TLS settings; its
    // own `tls` (the default here) is not read.
    let sibling = client.sibling(support::auth_config(&server.url(), "customer"));
    use_the_cloud(&sibling).await;
    let seen = server.seen.lock().unwrap();
    let conns: std::collections::BTreeSet<usize> = seen.requests.iter().map(|r| r.conn).collect();
    eprintln!(
        "with OS_CACERT: token + 3 reads in {elapsed:?}; {} requests of two clients on {} TLS connection(s) ({} refused handshakes before)",
        seen.requests.len(),
        conns.len(),
        seen.tls_failures
    );
    assert_eq!(seen.requests.len(), 8, "two tokens, six reads");
    assert_eq!(
        conns.len(),
        1,
        "one handshake: the sibling reuses the parent's connection"
    );
    drop(seen);
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn clouds_yaml_cacert_and_verify_false() {
    let ca = TestCa::new("bnerd test CA");
    let server = Server::start_tls(&ca.server_cert(&["127.0.0.1"]), cloud).await;
    let dir = scratch("clouds-yaml");
    let pem = ca.write_pem(&dir);
    let yaml = dir.join("clouds.yaml");
    let file = yaml.display().to_string();
    let write = |extra: String| {
        std::fs::write(
            &yaml,
            format!(
                "clouds:\n  tls:\n{extra}    auth:\n      auth_url: {}/v3\n      username: u\n      password: {PASSWORD}\n      project_id: p\n",
                server.url()
            ),
        )
        .unwrap()
    };
    let settings = || {
        let get = |k: &str| match k {
            "OS_CLOUD" => Some("tls".to_string()),
            "OS_CLIENT_CONFIG_FILE" => Some(file.clone()),
            _ => None,
        };
        AuthConfig::from_env(&get).expect("settings")
    };

    write(format!("    cacert: {}\n", pem.display()));
    let client = OpenStack::new(settings())
        .unwrap()
        .with_neutron_url(server.url());
    use_the_cloud(&client).await;

    // verify: false takes any certificate; here one for another name from another CA.
    let stranger = TestCa::new("someone else");
    let other = Server::start_tls(&stranger.server_cert(&["elsewhere.example"]), cloud).await;
    let insecure = |server: &Server| {
        let get = |k: &str| match k {
            "OS_CLOUD" => Some("tls".to_string()),
            "OS_CLIENT_CONFIG_FILE" => Some(file.clone()),
            _ => None,
        };
        std::fs::write(
            &yaml,
            format!(
                "clouds:\n  tls:\n    verify: false\n    auth:\n      auth_url: {}/v3\n      username: u\n      password: {PASSWORD}\n      project_id: p\n",
                server.url()
            ),
        )
        .unwrap();
        AuthConfig::from_env(&get).expect("settings")
    };
    let auth = insecure(&other);
    assert_eq!(
        auth.tls.insecure,
        Some(format!("{file}: clouds.tls.verify: false"))
    );
    let client = OpenStack::new(auth).unwrap().with_neutron_url(other.url());
    use_the_cloud(&client).await;
    std::fs::remove_dir_all(dir).unwrap();
}

#[tokio::test]
async fn a_trusted_ca_does_not_vouch_for_another_name() {
    let ca = TestCa::new("bnerd test CA");
    let server = Server::start_tls(&ca.server_cert(&["keystone.example"]), cloud).await;
    let dir = scratch("wrong-name");
    let pem = ca.write_pem(&dir).display().to_string();
    let client = OpenStack::new(from_env(&server, &[("OS_CACERT", &pem)])).unwrap();
    let err = client.token_info().await.unwrap_err();
    let message = err.to_string();
    assert!(
        message.contains("invalid peer certificate: certificate not valid for name \"127.0.0.1\"")
            && message.contains("the server's certificate is for another name"),
        "{message}"
    );
    eprintln!("a certificate for another name: {message}");
    assert!(server.seen.lock().unwrap().requests.is_empty());
    std::fs::remove_dir_all(dir).unwrap();
}
