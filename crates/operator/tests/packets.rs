//! The packet tier: the real operator binary on the kube lab and the lab's ML2/OVN Neutron with
//! a real data plane (`lab/openstack/ovn.sh`). Neutron ports become network namespaces
//! (`bnerd_testkit::dataplane`): a gateway pod on the transit network that answers for a VPN
//! client address (the reverse-exposure side), and a VM on each service network.
//!
//! Every verdict reads what the destination saw, once OVN has applied the last change: an echo
//! request is delivered when the destination counted it and its reply came back, not delivered
//! when the destination counted nothing (a reply alone would prove nothing either way: nothing
//! routes back to a customer transit, so a request that leaks there one way gets no reply).
//! Every "not delivered" has its positive control from the same endpoint in the same run (its
//! own gateway answers it, and in the isolation test its own VM). Each mode (same-tenant,
//! cross-tenant `Shared`, `PerCustomer`) also carries a TCP connection to a listener in a
//! service VM's namespace, as a service behind the link is reached. A verdict that surprises
//! prints the `ovn-trace` of its flow.
//!
//! Timings (apply → Ready, apply → first packet, break → first packet again) are printed as
//! `NOTE` lines; `BNERD_PACKET_ROUNDS=5` repeats the self-heal rounds for the medians of
//! docs/performance.md.
//!
//! One file although it passes 500 lines: the cases share one fixture (labs, fabric, data plane,
//! the operator process) and its teardown.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bnerd_api::ClusterLink;
use bnerd_cloud::{Neutron, Port, Route, Router};
use bnerd_testkit::cloud_cpu::CloudCpu;
use bnerd_testkit::dataplane::{DataPlane, Dest, Endpoint, Probe, ServiceNet};
use bnerd_testkit::kube_lab::{install_crd, kube_client};
use bnerd_testkit::operator_proc::{
    OperatorCommand, OperatorProcess, TEST_LABEL, create_cross_tenant_as, create_per_customer_as,
    delete_credentials_secret, install_gateway_crds, is_ready, kube_lab_exclusive, sweep_leftovers,
    test_link, wait_for, wait_gone,
};
use bnerd_testkit::{Env, lab_app_cred_client, ovn_env_for, ovn_lab_or_skip, report, unique};
use kube::Client;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use serde_json::json;

/// The gateway pod's port on the transit network: the reverse routes' next hop.
const POD_IP: &str = "10.254.0.10";
/// A VPN client address the gateway pod answers for (on its loopback), inside the gateway's
/// reverse-exposure CIDR.
const CLIENT: &str = "100.64.0.11";
const EXPOSURE_CIDR: &str = "100.64.0.0/24";
const SVC_CIDR: &str = "10.251.0.0/16";
const SVC_VM: &str = "10.251.0.5";
/// The port a service VM listens on for the TCP checks (`Endpoint::serve_tcp`).
const TCP_PORT: u16 = 8080;

struct Fixture {
    client: Client,
    kubeconfig: String,
    lab: BTreeMap<String, String>,
    env: Env,
    plane: DataPlane,
    /// The lab cloud's control plane, for the CPU a link's build costs it.
    cpu: Option<CloudCpu>,
    _exclusive: std::fs::File,
}

async fn fixture(test: &str) -> Option<Fixture> {
    let (client, kubeconfig) = kube_client(test).await?;
    let lab = ovn_lab_or_skip(test)?;
    install_crd(&client).await;
    install_gateway_crds(&client).await;
    let env = ovn_env_for(test).await?;
    let plane = DataPlane::from_lab(&lab);
    let exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    let cpu = CloudCpu::of_lab(&lab);
    Some(Fixture {
        client,
        kubeconfig,
        lab,
        env,
        plane,
        cpu,
        _exclusive: exclusive,
    })
}

impl Fixture {
    /// The operator on the lab, the defaults but `resync`, to be started.
    fn operator_command(&self, resync: &str) -> OperatorCommand {
        OperatorCommand::new(env!("CARGO_BIN_EXE_bnerd-vpn-operator")).lab(
            &self.kubeconfig,
            &self.lab,
            &self.env.fabric.gateway_router_id,
            &self.env.fabric.transit_network_id,
            resync,
        )
    }

    fn operator(&self, resync: &str) -> OperatorProcess {
        self.operator_command(resync).spawn()
    }

    fn net(&self) -> &dyn Neutron {
        self.env.net.as_ref()
    }

    fn links(&self) -> Api<ClusterLink> {
        Api::all(self.client.clone())
    }

    /// The same-tenant scene: a service router of the operator's project with its network
    /// ([`SVC_CIDR`]) and a VM at [`SVC_VM`], and the gateway pod; endpoints `<prefix>-pod` and
    /// `<prefix>-vm`.
    async fn same_tenant_scene(&self, prefix: &str) -> (Router, ServiceNet, Endpoint, Endpoint) {
        let net = self.net();
        let router = self.env.router(&format!("pk-{prefix}-svc")).await;
        let svc = ServiceNet::make(net, &router.id, SVC_CIDR, "10.251.0.1", SVC_VM).await;
        let (_, pod) = self.gateway_pod(&format!("{prefix}-pod")).await;
        let vm = self
            .plane
            .attach(net, &svc.vm, &format!("{prefix}-vm"))
            .await;
        (router, svc, pod, vm)
    }

    /// The gateway pod: a port at [`POD_IP`] on the transit network, answering for [`CLIENT`].
    /// The operator on the lab with the pool a `PerCustomer` link needs (and otherwise the
    /// defaults but `resync`), to be started.
    fn per_customer_operator(&self, resync: &str) -> OperatorCommand {
        self.operator_command(resync)
            .env("IPSEC_PER_CUSTOMER_TRANSIT_POOL", POOL)
    }

    /// A router of `who`'s project named after `name`, with a service network
    /// `10.<octet>.0.0/16` on it (gateway `.1`, a VM port at `.5`).
    async fn customer_router(
        &self,
        who: &dyn Neutron,
        name: &str,
        octet: u8,
    ) -> (Router, ServiceNet) {
        let router = who.create_router(&unique(name)).await.expect("router");
        let at = |host: &str| format!("10.{octet}.0.{host}");
        let svc = ServiceNet::make(
            who,
            &router.id,
            &format!("10.{octet}.0.0/16"),
            &at("1"),
            &at("5"),
        )
        .await;
        (router, svc)
    }

    async fn gateway_pod(&self, name: &str) -> (Port, Endpoint) {
        let port = self.env.port_at_ip(POD_IP, "gateway-pod").await;
        let ep = self.plane.attach(self.net(), &port, name).await;
        ep.add_loopback_address(&format!("{CLIENT}/32"));
        (port, ep)
    }

    /// An IPsecGateway with one reverse exposure whose status names the pod's port: every
    /// link's router gets `EXPOSURE_CIDR via POD_IP`.
    async fn reverse_exposing_gateway(&self) -> String {
        let ar = bnerd_vpn_operator::gateways::resource("IPsecGateway", "ipsecgateways");
        let gws: Api<kube::api::DynamicObject> =
            Api::namespaced_with(self.client.clone(), "default", &ar);
        let name = unique("pk-gw");
        let gw: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "ipsec.bnerd.net/v1alpha1", "kind": "IPsecGateway",
            "metadata": {"name": name, "namespace": "default", "labels": {TEST_LABEL: "true"}},
            "spec": {"reverseExposures": [{"name": "svc", "port": 8080}]},
            "status": {"serviceCIDR": EXPOSURE_CIDR, "portFixedIP": POD_IP}
        }))
        .expect("gateway");
        gws.patch(
            &name,
            &PatchParams::apply("packets").force(),
            &Patch::Apply(&gw),
        )
        .await
        .expect("apply gateway");
        name
    }

    async fn delete_gateway(&self, name: &str) {
        let ar = bnerd_vpn_operator::gateways::resource("IPsecGateway", "ipsecgateways");
        let gws: Api<kube::api::DynamicObject> =
            Api::namespaced_with(self.client.clone(), "default", &ar);
        let _ = gws.delete(name, &DeleteParams::default()).await;
    }

    async fn gateway_routes(&self) -> Vec<Route> {
        self.env.gateway_routes().await
    }
}

async fn wait_route(net: &dyn Neutron, router_id: &str, route: &Route, present: bool) {
    wait_for("route on the router", 60, async || {
        let has = net.get_router(router_id).await.ok()?.routes.contains(route);
        (has == present).then_some(())
    })
    .await;
}

/// The link's transit IP, from its status.
fn transit_ip(l: &ClusterLink) -> String {
    l.status
        .as_ref()
        .and_then(|s| s.transit_ip.clone())
        .expect("a transit IP in status")
}

/// The link's leg port, from its status.
fn leg_port(l: &ClusterLink) -> String {
    l.status
        .as_ref()
        .and_then(|s| s.leg_port_id.clone())
        .expect("a leg port in status")
}

fn rounds() -> usize {
    std::env::var("BNERD_PACKET_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1)
}

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// Run `create` (which applies a link and waits for Ready) and measure apply → Ready and
/// apply → the first reply from `dst` at `from` (probing all along), printed as a `NOTE`
/// named `what`.
async fn timed(
    cpu: Option<&CloudCpu>,
    from: &Endpoint,
    dst: &str,
    what: &str,
    create: impl std::future::Future<Output = ClusterLink>,
) -> (ClusterLink, Duration, Duration, Option<u128>) {
    let t0 = Instant::now();
    let cpu0 = cpu.map(CloudCpu::used_ms);
    let ready = async {
        let l = create.await;
        (l, t0.elapsed())
    };
    let first = async {
        let first = from.first_reply_within(dst, Duration::from_secs(90)).await;
        (first, cpu.map(CloudCpu::used_ms))
    };
    let ((l, to_ready), (first, cpu1)) = tokio::join!(ready, first);
    let to_packet = first.unwrap_or_else(|| panic!("no reply from {dst} within 90 s of the apply"));
    // In the unit the medians take, as the times are.
    let cloud_cpu = cpu0.zip(cpu1).map(|(a, b)| u128::from(b.saturating_sub(a)));
    report::note(&format!(
        "{what}: apply->Ready {} ms, apply->first packet {} ms, the cloud's CPU meanwhile {}",
        ms(to_ready),
        ms(to_packet),
        cloud_cpu.map_or("not read".into(), |c| format!("{c} ms"))
    ));
    (l, to_ready, to_packet, cloud_cpu)
}

/// Create a same-tenant link and measure apply → Ready and apply → the first reply from
/// `dst` through it (probing all along).
async fn apply_and_time(
    f: &Fixture,
    (from, dst): (&Endpoint, &str),
    what: &str,
    name: &str,
    spec: serde_json::Value,
) -> (ClusterLink, Duration, Duration, Option<u128>) {
    let api = f.links();
    let create = async {
        api.create(&PostParams::default(), &test_link(name, spec))
            .await
            .expect("create link");
        wait_for("Ready=True", 90, async || {
            api.get(name).await.ok().filter(is_ready)
        })
        .await
    };
    timed(f.cpu.as_ref(), from, dst, what, create).await
}

/// Same-tenant: before the link nothing routes; once Ready the gateway pod reaches the service
/// VM (pings, and TCP to its listener) and the reply comes back over the leg's connected route
/// (the service router has no route of its own to the transit network); with a
/// reverse-exposing gateway the service VM reaches the VPN client address (pings and TCP);
/// delete withdraws the gateway route before the leg and the path goes.
#[tokio::test]
async fn same_tenant_link_carries_packets_both_ways_and_delete_cuts_them() {
    let test = "same_tenant_link_carries_packets_both_ways_and_delete_cuts_them";
    let Some(f) = fixture(test).await else {
        return;
    };
    let net = f.net();
    let (router, svc, pod, vm) = f.same_tenant_scene("st").await;
    vm.serve_tcp(TCP_PORT).await;
    pod.assert_not_delivered(vm.dest(), "before any link").await;

    let _op = f.operator("10s");
    let name = unique("pk-st");
    let (l, _, _, _) = apply_and_time(
        &f,
        (&pod, SVC_VM),
        "packets same-tenant",
        &name,
        json!({"serviceClusterRouter": router.id, "serviceClusterCIDR": SVC_CIDR}),
    )
    .await;
    pod.assert_delivered(vm.dest(), "gateway pod -> service VM and back")
        .await;
    pod.assert_tcp_delivered(
        &vm,
        SVC_VM,
        TCP_PORT,
        "gateway pod -> service VM, TCP (same-tenant)",
    )
    .await;
    let routes = f.env.get_router(&router.id).await.routes;
    assert!(
        routes.iter().all(|r| !r.destination.starts_with("10.254.")),
        "the reply needs no route of its own (the leg's subnet is connected): {routes:?}"
    );

    // The service VM initiates toward a reverse exposure: nothing routes it until a gateway
    // with reverse exposures exists.
    let client = Dest::Ns(&pod, CLIENT);
    vm.assert_not_delivered(client, "service VM -> VPN client before any reverse route")
        .await;
    let gw = f.reverse_exposing_gateway().await;
    wait_route(net, &router.id, &Route::new(EXPOSURE_CIDR, POD_IP), true).await;
    vm.assert_delivered(client, "service VM -> VPN client via the reverse route")
        .await;
    pod.serve_tcp(TCP_PORT).await;
    vm.assert_tcp_delivered(
        &pod,
        CLIENT,
        TCP_PORT,
        "service VM -> VPN client via the reverse route, TCP",
    )
    .await;

    // Delete: the gateway route goes first, and the path with it, the leg after.
    let ip = transit_ip(&l);
    let leg = leg_port(&l);
    let route = Route::new(SVC_CIDR, &ip);
    f.links()
        .delete(&name, &DeleteParams::default())
        .await
        .expect("delete");
    let start = Instant::now();
    let (leg_then, probe) = loop {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "the gateway route did not go within 60 s of the delete"
        );
        let has_route = f.gateway_routes().await.contains(&route);
        let has_leg = net.get_port(&leg).await.is_ok();
        if !has_route {
            break (has_leg, pod.probe(vm.dest(), 1).await);
        }
        assert!(
            has_leg,
            "the leg went while the gateway route still pointed at it"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(
        (probe.arrived, probe.replies),
        (0, 0),
        "nothing arrives once the gateway route is gone (leg present: {leg_then}): {}",
        probe.verdict()
    );
    wait_gone(&f.links(), &name, 60).await;
    pod.assert_not_delivered(vm.dest(), "after the delete")
        .await;
    vm.assert_not_delivered(
        client,
        "after the delete (the reverse route went with the link)",
    )
    .await;
    f.delete_gateway(&gw).await;

    drop((pod, vm));
    svc.teardown(net).await;
    f.env.teardown(&[]).await;
}

/// Cross-tenant: two customers, each with a cross-tenant link (its own router and service VM,
/// its own credential): the gateway pod reaches both VMs (customer's by TCP too) and both reach
/// the VPN client through the reverse route. Then the known gap of a shared transit network
/// (docs/crd-reference.md, "TenantIsolationAttested"), measured: a port of
/// customer2's project on the shared transit network reaches customer's service VM (pings and
/// TCP) through the gateway router, and straight through customer's leg.
#[tokio::test]
async fn cross_tenant_links_carry_packets_and_the_shared_transit_gap_is_real() {
    let test = "cross_tenant_links_carry_packets_and_the_shared_transit_gap_is_real";
    let Some(f) = fixture(test).await else {
        return;
    };
    let a = lab_app_cred_client(&f.lab, "CUSTOMER");
    let b = lab_app_cred_client(&f.lab, "CUSTOMER2");
    let (ra, svc_a) = f.customer_router(&a, "pk-ct-a", 252).await;
    let (rb, svc_b) = f.customer_router(&b, "pk-ct-b", 253).await;
    let (_pod_port, pod) = f.gateway_pod("ct-pod").await;
    let vm_a = f.plane.attach(&a, &svc_a.vm, "ct-vm-a").await;
    let vm_b = f.plane.attach(&b, &svc_b.vm, "ct-vm-b").await;
    vm_a.serve_tcp(TCP_PORT).await;

    let _op = f.operator("10s");
    let api = f.links();
    let (na, nb) = (unique("pk-ct-a"), unique("pk-ct-b"));
    let (la, _, _, _) = timed(
        f.cpu.as_ref(),
        &pod,
        "10.252.0.5",
        "packets cross-tenant",
        create_cross_tenant_as(
            &f.client,
            &api,
            &f.lab,
            "CUSTOMER",
            &na,
            &ra.id,
            "10.252.0.0/16",
        ),
    )
    .await;
    let _lb = create_cross_tenant_as(
        &f.client,
        &api,
        &f.lab,
        "CUSTOMER2",
        &nb,
        &rb.id,
        "10.253.0.0/16",
    )
    .await;
    pod.assert_delivered(vm_a.dest(), "gateway pod -> customer's VM (cross-tenant)")
        .await;
    pod.assert_delivered(vm_b.dest(), "gateway pod -> customer2's VM (cross-tenant)")
        .await;
    pod.assert_tcp_delivered(
        &vm_a,
        &vm_a.ip,
        TCP_PORT,
        "gateway pod -> customer's VM, TCP (cross-tenant Shared)",
    )
    .await;

    let gw = f.reverse_exposing_gateway().await;
    let reverse = Route::new(EXPOSURE_CIDR, POD_IP);
    wait_route(&a, &ra.id, &reverse, true).await;
    wait_route(&b, &rb.id, &reverse, true).await;
    vm_a.assert_delivered(
        Dest::Ns(&pod, CLIENT),
        "customer's VM -> VPN client via the reverse route",
    )
    .await;
    vm_b.assert_delivered(
        Dest::Ns(&pod, CLIENT),
        "customer2's VM -> VPN client via the reverse route",
    )
    .await;

    // The gap. customer2's project may make ports on the transit network (the share its link
    // needs is to the whole project); Neutron's IPAM gives the address, as a customer may not
    // choose one on a shared network. Nothing but the attestation annotation
    // (ipsec.bnerd.net/customer-api-access: none — the customer has no OpenStack API access)
    // stands between such a port and every other linked cluster.
    let rogue_port = b
        .create_port(&bnerd_cloud::CreatePort {
            network_id: f.env.fabric.transit_network_id.clone(),
            name: "rogue".into(),
            ..Default::default()
        })
        .await
        .expect("customer2 makes a port on the shared transit network");
    let rogue = f.plane.attach(&b, &rogue_port, "ct-rogue").await;
    rogue
        .assert_delivered(vm_a.dest(),
            "the admitted gap: customer2's port on the shared transit -> customer's VM via the gateway router",
        )
        .await;
    rogue
        .assert_tcp_delivered(
            &vm_a,
            &vm_a.ip,
            TCP_PORT,
            "the admitted gap, TCP: customer2's port on the shared transit -> customer's VM via the gateway router",
        )
        .await;
    let leg_a = transit_ip(&la);
    rogue.add_route("10.252.0.0/16", &leg_a);
    rogue
        .assert_delivered(
            vm_a.dest(),
            "the admitted gap: customer2's port -> customer's VM straight through customer's leg",
        )
        .await;
    report::note(
        "packets shared transit: customer2's port on the transit reaches customer's service VM via the gateway router (ICMP and TCP) and via customer's leg (the admitted gap of docs/operations.md; only the attestation annotation stands there)",
    );

    // Unwind: the links first (their legs), then what the test made.
    drop(rogue);
    let _ = Neutron::delete_port(&b, &rogue_port.id).await;
    for n in [&na, &nb] {
        let _ = api.delete(n, &DeleteParams::default()).await;
    }
    for n in [&na, &nb] {
        wait_gone(&api, n, 90).await;
        delete_credentials_secret(&f.client, n).await;
    }
    f.delete_gateway(&gw).await;
    drop((pod, vm_a, vm_b));
    svc_a.teardown(&a).await;
    svc_b.teardown(&b).await;
    let _ = Neutron::delete_router(&a, &ra.id).await;
    let _ = Neutron::delete_router(&b, &rb.id).await;
    f.env.teardown(&[&a as &dyn bnerd_cloud::Neutron, &b]).await;
}

/// The pool the operator cuts customer transits from in the packet tier.
const POOL: &str = "10.255.0.0/24";

/// What a link's `status.customerTransit` says: (network, its gateway address, edge router).
fn customer_transit(l: &ClusterLink) -> (String, String, String) {
    let ct = l
        .status
        .as_ref()
        .and_then(|s| s.customer_transit.clone())
        .expect("status.customerTransit");
    let cidr: ipnet::Ipv4Net = ct.cidr.expect("cidr").parse().expect("a CIDR");
    let gateway = cidr.hosts().next().expect("a host").to_string();
    (
        ct.network_id.expect("network"),
        gateway,
        ct.edge_router_id.expect("edge router"),
    )
}

/// One verdict of the isolation report: what was tried, what the destination counted and
/// what came back.
fn verdict(report: &mut Vec<String>, mode: &str, what: &str, probe: Probe) {
    report.push(format!("{mode:<11} {what:<72} {}", probe.verdict()));
}

/// Per-customer isolation with real packets. Customers A and B each have a `PerCustomer` link
/// (a VM behind its router) and a `Shared` one next to it. The gateway pod reaches every VM (A's
/// `PerCustomer` one by TCP too) and every VM the VPN client address. A port of A on A's
/// customer transit reaches A's own VM and router (the controls), and gets not one packet to
/// anything of B's (B's VM, B's leg, B's edge router, a port on B's customer transit), through
/// A's edge router or through A's own router, also after A routes B's network to its edge
/// router; B's port on its own the same. A's port reaches the gateway pod one way only, as the
/// docs admit. The `Shared` links keep the reach a shared transit gives every project on it
/// (docs/crd-reference.md, "TenantIsolationAttested"): B's port on the shared transit reaches
/// A's `Shared` VM, and A's `PerCustomer` VM too (pings and TCP). The report prints every
/// verdict with its counts. The last link of a project takes its customer transit down:
/// nothing of it is left.
#[tokio::test]
async fn per_customer_links_cut_the_gap_packet_by_packet() {
    let test = "per_customer_links_cut_the_gap_packet_by_packet";
    let Some(f) = fixture(test).await else {
        return;
    };
    let net = f.net();
    let a = lab_app_cred_client(&f.lab, "CUSTOMER");
    let b = lab_app_cred_client(&f.lab, "CUSTOMER2");
    let (ra, svc_a) = f.customer_router(&a, "pk-pc-a", 252).await;
    let (rb, svc_b) = f.customer_router(&b, "pk-pc-b", 253).await;
    let (ra2, svc_a2) = f.customer_router(&a, "pk-sh-a", 248).await;
    let (rb2, svc_b2) = f.customer_router(&b, "pk-sh-b", 249).await;
    let (ra, rb, ra2, rb2) = (&ra, &rb, &ra2, &rb2);
    let (_pod_port, pod) = f.gateway_pod("pc-pod").await;
    let vm_a = f.plane.attach(&a, &svc_a.vm, "pc-vm-a").await;
    let vm_b = f.plane.attach(&b, &svc_b.vm, "pc-vm-b").await;
    let vm_a2 = f.plane.attach(&a, &svc_a2.vm, "sh-vm-a").await;

    let _op = f.per_customer_operator("10s").spawn();
    let api = f.links();
    let (na, nb, na2, nb2) = (
        unique("pk-pc-a"),
        unique("pk-pc-b"),
        unique("pk-sh-a"),
        unique("pk-sh-b"),
    );
    let (la, _, _, _) = timed(
        f.cpu.as_ref(),
        &pod,
        "10.252.0.5",
        "packets PerCustomer (the project's first link builds its customer transit)",
        create_per_customer_as(
            &f.client,
            &api,
            &f.lab,
            "CUSTOMER",
            &na,
            &ra.id,
            "10.252.0.0/16",
        ),
    )
    .await;
    let lb = create_per_customer_as(
        &f.client,
        &api,
        &f.lab,
        "CUSTOMER2",
        &nb,
        &rb.id,
        "10.253.0.0/16",
    )
    .await;
    create_cross_tenant_as(
        &f.client,
        &api,
        &f.lab,
        "CUSTOMER",
        &na2,
        &ra2.id,
        "10.248.0.0/16",
    )
    .await;
    create_cross_tenant_as(
        &f.client,
        &api,
        &f.lab,
        "CUSTOMER2",
        &nb2,
        &rb2.id,
        "10.249.0.0/16",
    )
    .await;
    for (dst, what) in [
        (vm_a.dest(), "gateway pod -> A's VM (PerCustomer)"),
        (vm_b.dest(), "gateway pod -> B's VM (PerCustomer)"),
        (vm_a2.dest(), "gateway pod -> A's VM (Shared)"),
    ] {
        pod.assert_delivered(dst, what).await;
    }
    vm_a.serve_tcp(TCP_PORT).await;
    pod.assert_tcp_delivered(
        &vm_a,
        &vm_a.ip,
        TCP_PORT,
        "gateway pod -> A's VM, TCP (PerCustomer)",
    )
    .await;

    let gw = f.reverse_exposing_gateway().await;
    let (anet, anet_gw, edge_a) = customer_transit(&la);
    let (bnet, bnet_gw, edge_b) = customer_transit(&lb);
    wait_route(&a, &ra.id, &Route::new(EXPOSURE_CIDR, &anet_gw), true).await;
    wait_route(net, &edge_a, &Route::new(EXPOSURE_CIDR, POD_IP), true).await;
    wait_route(&b, &rb.id, &Route::new(EXPOSURE_CIDR, &bnet_gw), true).await;
    // Each link writes its own edge router's reverse route: B's may land after A's.
    wait_route(net, &edge_b, &Route::new(EXPOSURE_CIDR, POD_IP), true).await;
    let client = Dest::Ns(&pod, CLIENT);
    vm_a.assert_delivered(client, "A's VM -> VPN client via A's edge router")
        .await;
    vm_b.assert_delivered(client, "B's VM -> VPN client via B's edge router")
        .await;

    // A port of each customer on its own customer transit (Neutron's IPAM gives the address,
    // as a customer may not choose one on a network shared with it).
    let port_on = async |who: &bnerd_cloud::OpenStack, network: &str, name: &str| {
        let p = who
            .create_port(&bnerd_cloud::CreatePort {
                network_id: network.into(),
                name: name.into(),
                ..Default::default()
            })
            .await
            .expect("a customer makes a port on its customer transit");
        let ep = f.plane.attach(who, &p, name).await;
        (p, ep)
    };
    let (rogue_a_port, rogue_a) = port_on(&a, &anet, "pc-rog-a").await;
    let (rogue_b_port, rogue_b) = port_on(&b, &bnet, "pc-rog-b").await;
    let leg_a = transit_ip(&la);
    let leg_b = transit_ip(&lb);
    let mut lines = vec![];
    // The controls: each port reaches its own project's VM through its edge router and its
    // leg (the reply comes straight back: the customer's router has the customer transit
    // connected), so what these ports do not reach below is the path's doing, not theirs.
    for (ep, dst, what) in [
        (
            &rogue_a,
            vm_a.dest(),
            "A's port on its customer transit -> A's VM (control)",
        ),
        (
            &rogue_b,
            vm_b.dest(),
            "B's port on its customer transit -> B's VM (control)",
        ),
    ] {
        let p = ep.assert_delivered(dst, what).await;
        verdict(&mut lines, "PerCustomer", what, p);
    }
    for (what, dst) in [
        (
            "A's port on its customer transit -> B's VM via A's edge router",
            vm_b.dest(),
        ),
        (
            "A's port on its customer transit -> B's leg",
            Dest::Router(&leg_b),
        ),
        (
            "A's port on its customer transit -> B's edge router on B's transit",
            Dest::Router(&bnet_gw),
        ),
        (
            "A's port on its customer transit -> B's port on B's transit",
            rogue_b.dest(),
        ),
        (
            "A's port on its customer transit -> A's Shared VM",
            vm_a2.dest(),
        ),
    ] {
        let p = rogue_a.assert_not_delivered(dst, what).await;
        verdict(&mut lines, "PerCustomer", what, p);
    }
    let what = "B's port on its customer transit -> A's VM";
    let p = rogue_b.assert_not_delivered(vm_a.dest(), what).await;
    verdict(&mut lines, "PerCustomer", what, p);
    // What the mode admits (docs/operations.md, "Per-customer transit isolation"): A's customer
    // transit reaches the main transit one way, through A's edge router, which has it
    // connected; the gateway pod's reply finds no way back.
    let what = "A's port on its customer transit -> the gateway pod (one way)";
    let p = rogue_a.assert_one_way(pod.dest(), what).await;
    verdict(&mut lines, "PerCustomer", what, p);
    // Through A's own router, and with routes of A's own on it: A's router has no route to
    // B, and A's edge router none either. The control: A's port reaches A's router, the
    // next hop of its route.
    rogue_a.add_route("10.253.0.0/16", &leg_a);
    let what = "A's port -> A's router, its route's next hop (control)";
    let p = rogue_a.assert_delivered(Dest::Router(&leg_a), what).await;
    verdict(&mut lines, "PerCustomer", what, p);
    let what = "A's port -> B's VM via A's own router";
    let p = rogue_a.assert_not_delivered(vm_b.dest(), what).await;
    verdict(&mut lines, "PerCustomer", what, p);
    a.add_extraroutes(&ra.id, &[Route::new("10.253.0.0/16", &anet_gw)])
        .await
        .expect("A routes B's network to its edge router");
    for (ep, what) in [
        (
            &rogue_a,
            "A's port -> B's VM via A's router, A's own route to its edge router",
        ),
        (&vm_a, "A's VM -> B's VM, A's own route to its edge router"),
    ] {
        let p = ep.assert_not_delivered(vm_b.dest(), what).await;
        verdict(&mut lines, "PerCustomer", what, p);
    }
    a.remove_extraroutes(&ra.id, &[Route::new("10.253.0.0/16", &anet_gw)])
        .await
        .expect("A's own route goes");

    // The Shared links next to them: B's port on the shared transit (B's Shared link shares
    // it with B's project) reaches A's Shared VM, the known gap of a shared transit; and A's
    // PerCustomer VM too, through the gateway router and A's edge router (the edge router has
    // the transit connected, so the reply finds its way back), TCP as well.
    let shared_port = b
        .create_port(&bnerd_cloud::CreatePort {
            network_id: f.env.fabric.transit_network_id.clone(),
            name: "sh-rogue".into(),
            ..Default::default()
        })
        .await
        .expect("B makes a port on the shared transit");
    let shared = f.plane.attach(&b, &shared_port, "sh-rog-b").await;
    let what = "B's port on the shared transit -> A's Shared VM";
    let p = shared.assert_delivered(vm_a2.dest(), what).await;
    verdict(&mut lines, "Shared", what, p);
    let what = "B's port on the shared transit -> A's PerCustomer VM";
    let p = shared.assert_delivered(vm_a.dest(), what).await;
    verdict(&mut lines, "Shared", what, p);
    shared
        .assert_tcp_delivered(
            &vm_a,
            &vm_a.ip,
            TCP_PORT,
            "B's port on the shared transit -> A's PerCustomer VM, TCP",
        )
        .await;
    report::note("packets isolation report, PerCustomer next to Shared (one verdict a line):");
    for l in &lines {
        report::note(&format!("packets isolation: {l}"));
    }

    // `recreate --isolation PerCustomer` moves A's Shared link onto A's customer transit: it
    // says what goes and what comes, and the moved link carries packets again.
    let old = api.get(&na2).await.expect("A's Shared link");
    let moved =
        bnerd_clusterlink_cli::recreate::moved(&old, bnerd_api::TransitIsolation::PerCustomer)
            .expect("a cross-tenant link moves");
    let lines = bnerd_clusterlink_cli::recreate::plan_move(&old, &moved);
    assert!(
        lines.iter().any(|l| l.contains("customer transit")),
        "{lines:?}"
    );
    let t0 = Instant::now();
    let done =
        bnerd_clusterlink_cli::recreate::recreate_as(&api, &old, &moved, Duration::from_secs(90))
            .await
            .expect("recreate");
    assert!(done.ready, "{done:?}");
    let now = api.get(&na2).await.expect("the moved link");
    assert_eq!(
        customer_transit(&now).0,
        anet,
        "the move lands on A's customer transit"
    );
    pod.assert_delivered(
        vm_a2.dest(),
        "gateway pod -> A's moved VM (now PerCustomer)",
    )
    .await;
    report::note(&format!(
        "packets recreate --isolation PerCustomer: delete -> Ready again {} ms",
        ms(t0.elapsed())
    ));

    // Unwind: the test's ports, then the links; A's last link takes A's customer transit down.
    drop((rogue_a, rogue_b, shared));
    for (who, p) in [(&a, &rogue_a_port), (&b, &rogue_b_port), (&b, &shared_port)] {
        let _ = Neutron::delete_port(who, &p.id).await;
    }
    for n in [&na, &nb, &na2, &nb2] {
        let _ = api.delete(n, &DeleteParams::default()).await;
    }
    for n in [&na, &nb, &na2, &nb2] {
        wait_gone(&api, n, 90).await;
        delete_credentials_secret(&f.client, n).await;
    }
    for (network, edge, who) in [(&anet, &edge_a, "A"), (&bnet, &edge_b, "B")] {
        assert!(
            net.get_network(network)
                .await
                .is_err_and(|e| e.is_not_found()),
            "{who}'s customer transit {network} is left"
        );
        assert!(
            net.get_router(edge).await.is_err_and(|e| e.is_not_found()),
            "{who}'s edge router {edge} is left"
        );
    }
    let edge_legs: Vec<Port> = f
        .env
        .ports()
        .await
        .into_iter()
        .filter(|p| p.name.starts_with("bnerd-vpn-edge-"))
        .collect();
    assert!(edge_legs.is_empty(), "edge legs left: {edge_legs:?}");
    pod.assert_not_delivered(vm_a.dest(), "after the delete: gateway pod -> A's VM")
        .await;
    f.delete_gateway(&gw).await;
    drop((pod, vm_a, vm_b, vm_a2));
    for (svc, who) in [(svc_a, &a), (svc_b, &b), (svc_a2, &a), (svc_b2, &b)] {
        svc.teardown(who).await;
    }
    for (r, who) in [(ra, &a), (rb, &b), (ra2, &a), (rb2, &b)] {
        let _ = Neutron::delete_router(who, &r.id).await;
    }
    f.env.teardown(&[&a as &dyn bnerd_cloud::Neutron, &b]).await;
}

/// Break the path out of band and time the self-heal: from the break to the first reply from
/// `vm` again. A probe once OVN has applied the break must not reach the VM unless the operator
/// has already put the path back (then the break is tried again: an arrival with the gateway
/// route still gone would be a path this test does not know). The resync interval is the
/// default 5 minutes and the wait 60 s: a heal is the drift check's.
async fn time_heal(
    f: &Fixture,
    pod: &Endpoint,
    vm: &Endpoint,
    what: &str,
    route: &Route,
    mut brk: impl AsyncFnMut(),
) -> Duration {
    for _ in 0..5 {
        brk().await;
        let t0 = Instant::now();
        let probe = pod.probe(vm.dest(), 1).await;
        if probe.arrived > 0 || probe.replies > 0 {
            assert!(
                f.gateway_routes().await.contains(route),
                "{what}: {} with the gateway route still gone",
                probe.verdict()
            );
            continue;
        }
        pod.first_reply_within(&vm.ip, Duration::from_secs(60))
            .await
            .unwrap_or_else(|| panic!("{what}: not healed within 60 s"));
        return t0.elapsed();
    }
    panic!("{what}: the operator healed every break before a probe could see it");
}

/// Heal times of one path, in ms.
#[derive(Default)]
struct Heals {
    to_ready: Vec<u128>,
    to_packet: Vec<u128>,
    route: Vec<u128>,
    leg: Vec<u128>,
    /// The cloud's CPU time from the apply to the first packet, ms (when the lab's processes
    /// are readable here).
    cloud_cpu: Vec<u128>,
}

impl Heals {
    fn line(&self, path: &str) -> String {
        format!(
            "{path}: apply->Ready {:?} ms (median {}), apply->first packet {:?} ms (median {}), gateway route removed->first packet again {:?} ms (median {}), leg removed->{} {:?} ms (median {})",
            self.to_ready,
            median(&self.to_ready),
            self.to_packet,
            median(&self.to_packet),
            self.route,
            median(&self.route),
            if path == "Shared" {
                "gateway route via the old address gone (TransitIPMismatch) or first packet again (the leg back at its address)"
            } else {
                "first packet again"
            },
            self.leg,
            median(&self.leg)
        )
    }
}

/// [`time_heal`] of `route` removed from the gateway router out of band, on `path`.
async fn time_route_heal(
    f: &Fixture,
    pod: &Endpoint,
    vm: &Endpoint,
    path: &str,
    route: &Route,
) -> Duration {
    let what = format!("{path}: gateway route removed");
    time_heal(f, pod, vm, &what, route, async || {
        f.env
            .remove_routes(&f.env.fabric.gateway_router_id, std::slice::from_ref(route))
            .await
            .expect("remove the gateway route out of band");
    })
    .await
}

/// Drift at the default settings (resync 5 minutes, drift check every 2 s), on each path: the
/// gateway route removed out of band, then the leg removed out of band. Same-tenant and
/// `PerCustomer`: the path breaks and the operator restores it (a `PerCustomer` leg may come
/// back at another address on its customer transit; the edge router's route follows it).
/// `Shared`: a leg back at another address is `TransitIPMismatch` (docs/crd-reference.md,
/// `LegAttached`), so the time is until the route via the old address is gone, and the path
/// stays cut; a leg Neutron gave its old address again heals like the others. Each round
/// applies the three links (timed to Ready and to their first packet), breaks them and
/// deletes them.
#[tokio::test]
async fn drift_breaks_the_path_and_the_operator_heals_it() {
    let test = "drift_breaks_the_path_and_the_operator_heals_it";
    let Some(f) = fixture(test).await else {
        return;
    };
    let net = f.net();
    let (router, svc, pod, vm) = f.same_tenant_scene("dr").await;
    let a = lab_app_cred_client(&f.lab, "CUSTOMER");
    let b = lab_app_cred_client(&f.lab, "CUSTOMER2");
    let (ra, svc_a) = f.customer_router(&a, "pk-dr-sh", 252).await;
    let (rb, svc_b) = f.customer_router(&b, "pk-dr-pc", 253).await;
    let vm_a = f.plane.attach(&a, &svc_a.vm, "dr-vm-a").await;
    let vm_b = f.plane.attach(&b, &svc_b.vm, "dr-vm-b").await;
    // The defaults but for the pool a PerCustomer link needs. BNERD_PACKET_DRIFT_CHECK_INTERVAL
    // measures another interval by hand (docs/performance.md, the packet figures); CI runs the default.
    let mut op = f.per_customer_operator("5m").env(
        "RUST_LOG",
        &std::env::var("BNERD_PACKET_OPERATOR_LOG").unwrap_or_else(|_| "info".into()),
    );
    let interval = std::env::var("BNERD_PACKET_DRIFT_CHECK_INTERVAL").ok();
    if let Some(i) = &interval {
        op = op.env("IPSEC_DRIFT_CHECK_INTERVAL", i);
    }
    let op = op.spawn();
    let api = f.links();

    let (mut same, mut shared, mut per_customer) =
        (Heals::default(), Heals::default(), Heals::default());
    let mut shared_outcomes = vec![];
    for _ in 0..rounds() {
        // Same-tenant.
        let name = unique("pk-dr");
        let (l, ready, packet, cpu) = apply_and_time(
            &f,
            (&pod, SVC_VM),
            "packets drift same-tenant",
            &name,
            json!({"serviceClusterRouter": router.id, "serviceClusterCIDR": SVC_CIDR}),
        )
        .await;
        same.to_ready.push(ms(ready));
        same.to_packet.push(ms(packet));
        same.cloud_cpu.extend(cpu);
        let ip = transit_ip(&l);
        let route = Route::new(SVC_CIDR, &ip);
        let d = time_route_heal(&f, &pod, &vm, "same-tenant", &route).await;
        same.route.push(ms(d));
        let d = time_heal(
            &f,
            &pod,
            &vm,
            "same-tenant: leg removed",
            &route,
            async || {
                let leg = f
                    .env
                    .ports()
                    .await
                    .into_iter()
                    .find(|p| p.device_id == router.id && p.has_ip(&ip))
                    .expect("the leg");
                // Neutron deletes the port with the interface.
                net.remove_router_interface(&router.id, &leg.id)
                    .await
                    .expect("remove the leg out of band");
            },
        )
        .await;
        same.leg.push(ms(d));

        // PerCustomer (customer2's project).
        let nb = unique("pk-dr-pc");
        let (lb, ready, packet, cpu) = timed(
            f.cpu.as_ref(),
            &pod,
            "10.253.0.5",
            "packets drift PerCustomer",
            create_per_customer_as(
                &f.client,
                &api,
                &f.lab,
                "CUSTOMER2",
                &nb,
                &rb.id,
                "10.253.0.0/16",
            ),
        )
        .await;
        per_customer.to_ready.push(ms(ready));
        per_customer.to_packet.push(ms(packet));
        per_customer.cloud_cpu.extend(cpu);
        let route = lb
            .status
            .as_ref()
            .and_then(|s| s.gateway_route.as_ref())
            .map(|r| Route::new(&r.destination, &r.nexthop))
            .expect("status.gatewayRoute");
        let d = time_route_heal(&f, &pod, &vm_b, "PerCustomer", &route).await;
        per_customer.route.push(ms(d));
        let d = time_heal(
            &f,
            &pod,
            &vm_b,
            "PerCustomer: leg removed",
            &route,
            async || {
                // Neutron refuses to detach an interface that a route of the router needs: the
                // customer's routes via the edge router go first.
                let now = api.get(&nb).await.expect("the PerCustomer link");
                let routes = Neutron::get_router(&b, &rb.id)
                    .await
                    .expect("B's router")
                    .routes;
                Neutron::remove_extraroutes(&b, &rb.id, &routes)
                    .await
                    .expect("remove B's routes out of band");
                Neutron::remove_router_interface(&b, &rb.id, &leg_port(&now))
                    .await
                    .expect("remove the PerCustomer leg out of band");
            },
        )
        .await;
        per_customer.leg.push(ms(d));

        // Shared (customer's project).
        let na = unique("pk-dr-sh");
        let (la, ready, packet, cpu) = timed(
            f.cpu.as_ref(),
            &pod,
            "10.252.0.5",
            "packets drift Shared",
            create_cross_tenant_as(
                &f.client,
                &api,
                &f.lab,
                "CUSTOMER",
                &na,
                &ra.id,
                "10.252.0.0/16",
            ),
        )
        .await;
        shared.to_ready.push(ms(ready));
        shared.to_packet.push(ms(packet));
        shared.cloud_cpu.extend(cpu);
        let old = transit_ip(&la);
        let route = Route::new("10.252.0.0/16", &old);
        let d = time_route_heal(&f, &pod, &vm_a, "Shared", &route).await;
        shared.route.push(ms(d));
        Neutron::remove_router_interface(&a, &ra.id, &leg_port(&la))
            .await
            .expect("remove the Shared leg out of band");
        let t0 = Instant::now();
        let (outcome, l) = wait_for(
            "TransitIPMismatch, or Ready with a leg at the old address",
            60,
            async || {
                let l = api.get(&na).await.ok()?;
                let mismatch = l
                    .status
                    .as_ref()
                    .is_some_and(|s| s.conditions.iter().any(|c| c.reason == "TransitIPMismatch"));
                let gone = !f.gateway_routes().await.contains(&route);
                if mismatch && gone {
                    return Some(("TransitIPMismatch", l));
                }
                let healed = is_ready(&l)
                    && l.status.as_ref().and_then(|s| s.leg_port_id.clone()) != Some(leg_port(&la));
                healed.then_some(("back at its address", l))
            },
        )
        .await;
        let took = t0.elapsed();
        if outcome == "TransitIPMismatch" {
            pod.assert_not_delivered(
                vm_a.dest(),
                "Shared: the leg came back elsewhere (TransitIPMismatch)",
            )
            .await;
        } else {
            assert_eq!(
                transit_ip(&l),
                old,
                "a Shared leg heals only at its address"
            );
            pod.assert_delivered(vm_a.dest(), "Shared: the leg back at its address")
                .await;
        }
        shared.leg.push(ms(took));
        shared_outcomes.push(outcome);

        for n in [&name, &nb, &na] {
            api.delete(n, &DeleteParams::default())
                .await
                .expect("delete");
        }
        for n in [&name, &nb, &na] {
            wait_gone(&api, n, 90).await;
        }
        for n in [&nb, &na] {
            delete_credentials_secret(&f.client, n).await;
        }
        pod.assert_not_delivered(vm.dest(), "after the delete")
            .await;
    }
    report::note(&format!(
        "packets drift at the default settings (resync 5m, drift check {}), {} round(s); {}; {}; {} (outcomes {shared_outcomes:?})",
        interval.as_deref().unwrap_or("2 s, the default"),
        rounds(),
        same.line("same-tenant"),
        per_customer.line("PerCustomer"),
        shared.line("Shared"),
    ));
    // A project's first PerCustomer link builds its customer transit; its time to the first
    // packet against a Shared link's of the same run (every round's PerCustomer link is its
    // project's first: the round before took the transit down with its last link).
    let (pc, sh) = (median(&per_customer.to_packet), median(&shared.to_packet));
    report::note(&format!(
        "packets drift: a project's first PerCustomer link, apply->first packet, is {:.2}x a Shared link's in this run (medians {pc} ms / {sh} ms)",
        pc as f64 / sh.max(1) as f64
    ));
    // What the builds cost the cloud: on cores the cloud's control plane saturates, no order
    // of the calls brings a build in under its CPU time over the core count.
    if !per_customer.cloud_cpu.is_empty() && !shared.cloud_cpu.is_empty() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as u128;
        let (pc_cpu, sh_cpu, st_cpu) = (
            median(&per_customer.cloud_cpu),
            median(&shared.cloud_cpu),
            median(&same.cloud_cpu),
        );
        let floor = pc_cpu / cores;
        report::note(&format!(
            "packets drift: the cloud's CPU from the apply to the first packet (Keystone, MariaDB, Neutron, OVN, whoever they serve: a build's own only on an otherwise idle machine; medians): same-tenant {st_cpu} ms {:?}, PerCustomer first link {pc_cpu} ms {:?}, Shared {sh_cpu} ms {:?}; on this machine's {cores} core(s) a first PerCustomer link needs at least {floor} ms however its calls are ordered, {:.2}x the Shared link's first packet",
            same.cloud_cpu,
            per_customer.cloud_cpu,
            shared.cloud_cpu,
            floor as f64 / sh.max(1) as f64
        ));
    }
    // BNERD_PACKET_OPERATOR_LOG=<filter> (e.g. info,bnerd_cloud=debug: every request with its
    // wait) keeps the operator's log for the breakdown of docs/performance.md.
    if std::env::var("BNERD_PACKET_OPERATOR_LOG").is_ok() {
        let path = std::env::temp_dir().join("bnerd-packets-drift-operator.log");
        let _ = std::fs::write(&path, op.log_so_far());
        report::note(&format!(
            "packets drift: the operator's log is {}",
            path.display()
        ));
    }

    drop((pod, vm, vm_a, vm_b));
    svc.teardown(net).await;
    svc_a.teardown(&a).await;
    svc_b.teardown(&b).await;
    let _ = Neutron::delete_router(&a, &ra.id).await;
    let _ = Neutron::delete_router(&b, &rb.id).await;
    f.env.teardown(&[&a as &dyn bnerd_cloud::Neutron, &b]).await;
}

/// Links applied at once, and deleted at once, leave OVN routing by the table Neutron shows.
/// Every link writes its route on the one gateway router, and ML2/OVN mis-applies two route
/// writes on one router that are under way at once (docs/design.md, "How Neutron backends
/// differ"): the engine sends them one at a time. OVN's static routes of the gateway router
/// are read from its northbound database, after every chassis caught up.
#[tokio::test]
async fn links_applied_at_once_leave_ovn_routing_by_neutrons_table() {
    let test = "links_applied_at_once_leave_ovn_routing_by_neutrons_table";
    let Some(f) = fixture(test).await else {
        return;
    };
    const LINKS: usize = 6;
    let mut routers = vec![];
    for i in 0..LINKS {
        routers.push(f.env.router(&format!("pk-many-{i}")).await);
    }
    let gw = f.env.fabric.gateway_router_id.clone();
    let sorted = |mut v: Vec<Route>| {
        v.sort_by(|a, b| (&a.destination, &a.nexthop).cmp(&(&b.destination, &b.nexthop)));
        v
    };
    let before = sorted(f.gateway_routes().await);
    assert_eq!(
        f.plane.ovn_routes(&gw).await,
        before,
        "OVN and Neutron agree at the start"
    );

    let _op = f.operator("10m");
    let api = f.links();
    let names: Vec<String> = (0..LINKS).map(|_| unique("pk-many")).collect();
    let creates = names.iter().zip(&routers).enumerate().map(|(i, (n, r))| {
        let spec = json!({
            "serviceClusterRouter": r.id,
            "serviceClusterCIDR": format!("10.{}.0.0/16", 120 + i),
        });
        let api = api.clone();
        async move {
            api.create(&PostParams::default(), &test_link(n, spec))
                .await
        }
    });
    for c in futures::future::join_all(creates).await {
        c.expect("create link");
    }
    for n in &names {
        wait_for("Ready=True", 120, async || {
            api.get(n).await.ok().filter(is_ready)
        })
        .await;
    }
    let neutron = sorted(f.gateway_routes().await);
    assert_eq!(neutron.len(), before.len() + LINKS, "{neutron:?}");
    assert_eq!(
        f.plane.ovn_routes(&gw).await,
        neutron,
        "after {LINKS} links applied at once, OVN routes by what Neutron shows"
    );

    let deletes = names.iter().map(|n| {
        let api = api.clone();
        async move { api.delete(n, &DeleteParams::default()).await }
    });
    for d in futures::future::join_all(deletes).await {
        d.expect("delete link");
    }
    for n in &names {
        wait_gone(&api, n, 120).await;
    }
    assert_eq!(sorted(f.gateway_routes().await), before);
    assert_eq!(
        f.plane.ovn_routes(&gw).await,
        before,
        "after {LINKS} links deleted at once, OVN routes by what Neutron shows"
    );
    f.env.teardown(&[]).await;
}

fn median(v: &[u128]) -> u128 {
    let mut v = v.to_vec();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or_default()
}

/// Adopting a link made by hand (docs/crd-reference.md, "The adoption rule"), with the
/// addresses of the usual example: a hand-made leg at 10.254.0.3 on the service router and the
/// gateway route to it by hand, carrying a continuous ping; a ClusterLink pinned to that
/// address adopts the port and keeps the route: not one packet is lost.
#[tokio::test]
async fn adoption_of_a_hand_made_leg_loses_no_packet() {
    let test = "adoption_of_a_hand_made_leg_loses_no_packet";
    let Some(f) = fixture(test).await else {
        return;
    };
    let net = f.net();
    let (router, svc, pod, vm) = f.same_tenant_scene("ad").await;
    // The manual way: the leg port, its router attachment, the gateway route.
    let leg = f
        .env
        .port_at_ip("10.254.0.3", "vpn-transit-svc01-leg")
        .await;
    net.add_router_interface(&router.id, &leg.id)
        .await
        .expect("router add port");
    let route = Route::new(SVC_CIDR, "10.254.0.3");
    f.env
        .add_routes(
            &f.env.fabric.gateway_router_id,
            std::slice::from_ref(&route),
        )
        .await
        .expect("router set --route");
    pod.assert_delivered(vm.dest(), "the hand-made path").await;

    // 20 s of pings, 50 ms apart, across the adoption; the VM counts every request it gets.
    let echoes = vm.counter("Icmp.InEchos").await;
    let stream = pod.stream(SVC_VM, "0.05", 400);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _op = f.operator("10s");
    let name = unique("pk-ad");
    let api = f.links();
    api.create(
        &PostParams::default(),
        &test_link(
            &name,
            json!({"serviceClusterRouter": router.id, "serviceClusterCIDR": SVC_CIDR, "transitIP": "10.254.0.3"}),
        ),
    )
    .await
    .expect("create link");
    let l = wait_for("Ready=True", 15, async || {
        api.get(&name).await.ok().filter(is_ready)
    })
    .await;
    assert_eq!(
        l.status
            .as_ref()
            .and_then(|s| s.leg_port_id.clone())
            .as_deref(),
        Some(leg.id.as_str()),
        "the hand-made port is adopted, not replaced"
    );
    let count = stream.finish().await;
    let arrived = vm.counter("Icmp.InEchos").await - echoes;
    assert_eq!(
        (count.received, arrived),
        (count.sent, u64::from(count.sent)),
        "packets lost during the adoption: {count:?}, {arrived} arrived at the VM"
    );
    report::note(&format!(
        "packets adoption: {} of {} echo requests arrived at the VM and were answered across the adoption",
        count.received, count.sent
    ));
    assert_eq!(
        f.gateway_routes()
            .await
            .iter()
            .filter(|r| **r == route)
            .count(),
        1
    );

    api.delete(&name, &DeleteParams::default())
        .await
        .expect("delete");
    wait_gone(&api, &name, 60).await;
    assert!(
        net.get_port(&leg.id).await.is_err(),
        "the adopted leg is the link's to delete"
    );
    pod.assert_not_delivered(vm.dest(), "after the delete")
        .await;
    drop((pod, vm));
    svc.teardown(net).await;
    f.env.teardown(&[]).await;
}
