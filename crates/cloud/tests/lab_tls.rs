//! The real lab (Keystone 30 + Neutron 29) through its HTTPS endpoint: `lab/openstack/up.sh`
//! puts a TLS-terminating proxy with a CA of its own in front of both, and lists the proxied
//! Neutron in Keystone's catalog as region `LAB_TLS_REGION`.
//!
//! Behind that proxy Neutron writes its paging links as it does behind many a real cloud's:
//! `http://127.0.0.1:<proxy port>/v2.0/ports?...` (its own scheme, the Host it was sent) for
//! an `https://` endpoint. A list of five ports at `limit=2` reads all three pages anyway.

use std::time::Instant;

use bnerd_cloud::{
    AuthConfig, CloudError, CreatePort, Identity, Neutron, OpenStack, PortQuery, TlsConfig,
};
use bnerd_testkit::{lab_tls_client, lab_tls_or_skip, unique};

#[tokio::test]
async fn lab_through_tls_with_the_lab_ca() {
    let test = "lab_through_tls_with_the_lab_ca";
    let Some((env, tls)) = lab_tls_or_skip(test) else {
        return;
    };
    let client = lab_tls_client(&env, &tls, "OPERATOR").with_page_size(2);

    let t = Instant::now();
    let token = client.token_info().await.expect("a token through TLS");
    let token_time = t.elapsed();
    assert_eq!(token.project_name, "operator");

    let net = client
        .create_network(&unique("tls"))
        .await
        .expect("network through TLS");
    let mut created = vec![];
    let t = Instant::now();
    for i in 0..5 {
        match client
            .create_port(&CreatePort {
                network_id: net.id.clone(),
                name: format!("tls-{i}"),
                ..Default::default()
            })
            .await
        {
            Ok(p) => created.push(p.id),
            Err(e) => eprintln!("{test}: port {i}: {e}"),
        }
    }
    let create_time = t.elapsed();
    let reads = client.call_counts().0;
    let t = Instant::now();
    let listed = client
        .list_ports(&PortQuery {
            network_id: Some(net.id.clone()),
            ..Default::default()
        })
        .await;
    let list_time = t.elapsed();
    let pages = client.call_counts().0 - reads;

    // Clean up before asserting, so a failure leaves nothing behind on the shared lab.
    let t = Instant::now();
    let mut deleted = 0;
    for id in &created {
        match client.delete_port(id).await {
            Ok(()) => deleted += 1,
            Err(e) => eprintln!("{test}: cleanup port {id}: {e}"),
        }
    }
    let delete_time = t.elapsed();
    if let Err(e) = client.delete_network(&net.id).await {
        eprintln!("{test}: cleanup network {}: {e}", net.id);
    }

    eprintln!(
        "{test}: token {token_time:?}; 5 port creates {create_time:?}; list at limit=2 in {pages} pages {list_time:?}; 5 deletes {delete_time:?}"
    );
    assert_eq!(created.len(), 5, "every port created");
    assert_eq!(deleted, 5, "every port deleted");
    let mut listed: Vec<String> = listed
        .expect("the paged list, whose next links say http://")
        .into_iter()
        .map(|p| p.id)
        .collect();
    listed.sort();
    created.sort();
    assert_eq!(listed, created);
    assert_eq!(pages, 3, "5 ports at 2 a page: 2 + 2 + 1");
}

#[tokio::test]
async fn lab_tls_without_the_ca_is_a_certificate_error() {
    let test = "lab_tls_without_the_ca_is_a_certificate_error";
    let Some((env, tls)) = lab_tls_or_skip(test) else {
        return;
    };
    let with_ca = lab_tls_client(&env, &tls, "OPERATOR");
    let auth = |auth_url: &str, tls_config: TlsConfig| AuthConfig {
        auth_url: auth_url.to_string(),
        tls: tls_config,
        ..with_ca.auth_config().clone()
    };
    let certificate_error = |err: &CloudError, path: &str| match err {
        CloudError::Transport {
            path: p, message, ..
        } => {
            assert_eq!(p, path, "{err}");
            assert!(
                message.contains("invalid peer certificate: UnknownIssuer")
                    && message.contains("set OS_CACERT or clouds.yaml cacert"),
                "{err}"
            );
        }
        other => panic!("expected a certificate error, got {other:?}"),
    };

    // Keystone over TLS, system roots only: the token request fails at the handshake.
    let client = OpenStack::new(auth(&tls.auth_url, TlsConfig::default())).expect("client");
    let err = client.token_info().await.unwrap_err();
    certificate_error(&err, "/v3/auth/tokens");
    eprintln!("{test}: {err}");

    // Keystone over plain HTTP, Neutron from the TLS region's catalog entry: the token comes,
    // the Neutron call is refused at the handshake. This is also what shows the region's
    // catalog entry is the proxy.
    let plain_keystone = env.get("OS_AUTH_URL").cloned().expect("OS_AUTH_URL");
    let client = OpenStack::new(auth(&plain_keystone, TlsConfig::default())).expect("client");
    client.token_info().await.expect("a token over plain HTTP");
    let err = client.extensions().await.unwrap_err();
    certificate_error(&err, "/extensions");

    // verify: false takes the lab's certificate without its CA.
    let client = OpenStack::new(auth(&tls.auth_url, TlsConfig::insecure("test"))).expect("client");
    assert!(!client.extensions().await.expect("extensions").is_empty());
}

/// The operator's settings as a binary reads them: clouds.yaml `lab-operator-tls` (the
/// operator's application credential, `cacert:` the lab CA, region `LAB_TLS_REGION`).
#[tokio::test]
async fn lab_tls_from_clouds_yaml() {
    let test = "lab_tls_from_clouds_yaml";
    let Some((env, tls)) = lab_tls_or_skip(test) else {
        return;
    };
    let clouds = env
        .get("LAB_CLOUDS_YAML")
        .cloned()
        .expect("LAB_CLOUDS_YAML");
    let get = |k: &str| match k {
        "OS_CLOUD" => Some("lab-operator-tls".to_string()),
        "OS_CLIENT_CONFIG_FILE" => Some(clouds.clone()),
        _ => None,
    };
    let auth = AuthConfig::from_env(&get).expect("lab-operator-tls in clouds.yaml");
    assert_eq!(auth.auth_url, tls.auth_url);
    assert_eq!(auth.region.as_deref(), Some(tls.region.as_str()));
    let ca = auth.tls.ca.as_ref().expect("cacert");
    assert_eq!(
        ca.setting,
        format!("{clouds}: clouds.lab-operator-tls.cacert")
    );
    let client = OpenStack::new(auth).expect("client");
    let token = client.token_info().await.expect("token");
    assert!(token.application_credential_id.is_some());
    client.extensions().await.expect("Neutron through TLS");
}
