//! What a port create sends, read by a server on loopback: a leg made with a customer's
//! credential on the operator's shared transit network carries only the fields Neutron lets a
//! project that does not own the network set (network, subnet, name, description, tags), never
//! an address, a MAC, a device owner or a binding. Neutron refuses a non-owner's fixed address
//! (`403 PolicyNotAuthorized`, the parity table's "customer port on shared net with
//! ip_address"), and the engine asks for one only on the operator's own legs.

mod support;

use bnerd_cloud::{CreatePort, Neutron};
use serde_json::Value;
use support::{Reply, Request, Server};

fn ports(req: &Request) -> Reply {
    if let Some(r) = support::keystone(req) {
        r
    } else if req.line.starts_with("POST /v2.0/ports") {
        Reply::json(
            "201 Created",
            r#"{"port": {"id": "p1", "network_id": "n1", "fixed_ips": [{"subnet_id": "s1", "ip_address": "10.254.0.7"}]}}"#,
        )
    } else {
        Reply::json("404 Not Found", "{}")
    }
}

async fn sent(req: &CreatePort) -> Value {
    let server = Server::start(ports).await;
    server.client().create_port(req).await.unwrap();
    let post = server
        .requests()
        .into_iter()
        .find(|r| r.line.starts_with("POST /v2.0/ports"))
        .expect("the create was sent");
    serde_json::from_slice(&post.body).unwrap()
}

#[tokio::test]
async fn a_leg_without_an_address_sends_only_what_a_non_owner_may() {
    let body = sent(&CreatePort {
        network_id: "n1".into(),
        subnet_id: Some("s1".into()),
        ip_address: None,
        name: "leg".into(),
        description: "ClusterLink x leg".into(),
        tags: vec!["t".into()],
    })
    .await;
    let port = body["port"].as_object().unwrap();
    let mut keys: Vec<&str> = port.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        ["description", "fixed_ips", "name", "network_id", "tags"],
        "{body}"
    );
    assert_eq!(
        port["fixed_ips"],
        serde_json::json!([{"subnet_id": "s1"}]),
        "{body}"
    );

    // The operator's own leg at a pinned address is the only create that names one.
    let pinned = sent(&CreatePort {
        network_id: "n1".into(),
        subnet_id: Some("s1".into()),
        ip_address: Some("10.254.0.7".into()),
        name: "leg".into(),
        description: String::new(),
        tags: vec![],
    })
    .await;
    assert_eq!(
        pinned["port"]["fixed_ips"],
        serde_json::json!([{"subnet_id": "s1", "ip_address": "10.254.0.7"}])
    );
    for never in [
        "mac_address",
        "device_owner",
        "device_id",
        "binding:host_id",
        "port_security_enabled",
    ] {
        assert!(pinned["port"].get(never).is_none(), "{never}: {pinned}");
    }
}
