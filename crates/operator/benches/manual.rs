//! Against the manual method (docs/performance.md, "Against the manual method"), side by side in
//! one run on the labs: from "go" to every cloud object of the link present (the leg port at its
//! address on the transit network, attached to the service cluster's router, and the route on the
//! gateway router), for 1 link and for 20 links, three ways:
//!
//! - **raw floor**: the three Neutron writes (port create, add_router_interface,
//!   add_extraroutes) over a client that already holds a token, one link after another;
//! - **openstack CLI**: the manual method, plumbing a link by hand without the operator, its
//!   commands run as processes the way a human runs them (port create, router add port,
//!   router set --route, then router show -c routes to check the result, since --route can
//!   append a stale or duplicate entry without a warning), one link after another;
//! - **operator**: the real binary against the kube lab, from creating the ClusterLink(s) (what
//!   `kubectl apply` does) until polling Neutron sees every object present.
//!
//! Rounds interleave the rows, so the lab's speed drifting during the run hits every row
//! alike. Each measurement gets service routers of its own, made before its clock starts and
//! removed (with everything the measurement made) after; the transit network and gateway
//! router are this bench's own too, removed at the end.
//!
//! `cargo bench -p bnerd-vpn-operator --bench manual` with both labs up (`BNERD_LAB_ENV`,
//! `BNERD_KUBECONFIG`, or their default places); `MANUAL_ROUNDS=n` (default 3). The CLI is
//! the lab venv's `openstack` (`BNERD_OPENSTACK_CLI` to name another).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bnerd_api::ClusterLink;
use bnerd_cloud::{CreatePort, Neutron, OpenStack, PortQuery, Route};
use bnerd_testkit::kube_lab::{install_crd, kube_client};
use bnerd_testkit::operator_proc::{
    OperatorCommand, OperatorProcess, TEST_LABEL, http_get, install_gateway_crds, is_ready,
    kube_lab_exclusive, sum_of, sweep_leftovers, test_link, wait_for,
};
use bnerd_testkit::{Env, env_on, lab_client, lab_or_skip, unique};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

const MANY: usize = 20;
/// How often the operator rows look at Neutron for the objects (one read of the gateway
/// router; the ports once every route is there).
const POLL: Duration = Duration::from_millis(50);

/// One link's objects: the service router, its CIDR, and (raw and CLI) the leg's address.
#[derive(Clone)]
struct Target {
    router_id: String,
    router_name: String,
    cidr: String,
    ip: String,
}

fn cidr(i: usize) -> String {
    format!("10.{}.0.0/16", 100 + i)
}

/// Addresses from .3 up, as a human plumbing links by hand picks them (.1 is the gateway
/// router's leg, .2 the DHCP port).
fn leg_ip(i: usize) -> String {
    format!("10.254.0.{}", 3 + i)
}

struct Bench {
    net: Arc<OpenStack>,
    env: Env,
    /// Names the CLI is given, as a human would type them.
    network_name: String,
    subnet_name: String,
    gateway_name: String,
    subnet_id: String,
    cli: String,
    cli_env: Vec<(String, String)>,
}

impl Bench {
    async fn routers(&self, n: usize) -> Vec<Target> {
        let mut out = vec![];
        for i in 0..n {
            let r = self.env.router("shoot--services--svc").await;
            out.push(Target {
                router_id: r.id,
                router_name: r.name,
                cidr: cidr(i),
                ip: leg_ip(i),
            });
        }
        out
    }

    /// Whether every target's leg is on the transit network, attached to its router, and
    /// routed from the gateway router; with the operator the address is whichever it chose.
    ///
    /// The gateway router first, alone: a poll is one light read until every route is there,
    /// so the watching loads Neutron (two cores, shared with the operator) as little as it
    /// can; then the ports, once.
    async fn all_present(&self, targets: &[Target]) -> bool {
        let Ok(gw) = self
            .net
            .get_router(&self.env.fabric.gateway_router_id)
            .await
        else {
            return false;
        };
        let routed = targets
            .iter()
            .all(|t| gw.routes.iter().any(|r| r.destination == t.cidr));
        if !routed {
            return false;
        }
        let q = PortQuery {
            network_id: Some(self.env.fabric.transit_network_id.clone()),
            ..Default::default()
        };
        let Ok(ports) = self.net.list_ports(&q).await else {
            return false;
        };
        targets.iter().all(|t| {
            ports
                .iter()
                .filter(|p| p.device_id == t.router_id && p.is_router_interface())
                .flat_map(|p| p.fixed_ips.iter())
                .any(|f| {
                    gw.routes
                        .iter()
                        .any(|r| r.destination == t.cidr && r.nexthop == f.ip_address)
                })
        })
    }

    /// Remove what a measurement made: its routes on the gateway router, its legs (a detach
    /// deletes the port), its routers. Only what these targets name.
    async fn clean(&self, targets: &[Target]) {
        let gw_id = &self.env.fabric.gateway_router_id;
        if let Ok(gw) = self.net.get_router(gw_id).await {
            let ours: Vec<Route> = gw
                .routes
                .iter()
                .filter(|r| targets.iter().any(|t| t.cidr == r.destination))
                .cloned()
                .collect();
            if !ours.is_empty() {
                let _ = self.net.remove_extraroutes(gw_id, &ours).await;
            }
        }
        let ports = self
            .net
            .list_ports(&PortQuery {
                network_id: Some(self.env.fabric.transit_network_id.clone()),
                ..Default::default()
            })
            .await
            .unwrap_or_default();
        for t in targets {
            for p in ports.iter().filter(|p| p.device_id == t.router_id) {
                let _ = self.net.remove_router_interface(&t.router_id, &p.id).await;
            }
            let _ = self.net.delete_router(&t.router_id).await;
        }
        // A CLI port whose attach failed is not on any router: it goes by its name.
        for p in ports.iter().filter(|p| {
            p.device_id.is_empty()
                && targets
                    .iter()
                    .any(|t| p.name == format!("vpn-transit-{}-leg", t.router_name))
        }) {
            let _ = self.net.delete_port(&p.id).await;
        }
    }

    /// The floor: the three writes per link, one link after another, token in hand.
    async fn raw(&self, n: usize) -> Duration {
        let targets = self.routers(n).await;
        let fab = &self.env.fabric;
        let started = Instant::now();
        for t in &targets {
            let port = self
                .net
                .create_port(&CreatePort {
                    network_id: fab.transit_network_id.clone(),
                    subnet_id: Some(self.subnet_id.clone()),
                    ip_address: Some(t.ip.clone()),
                    name: format!("vpn-transit-{}-leg", t.router_name),
                    description: String::new(),
                    tags: vec![],
                })
                .await
                .unwrap_or_else(|e| panic!("raw port create: {e}"));
            self.net
                .add_router_interface(&t.router_id, &port.id)
                .await
                .unwrap_or_else(|e| panic!("raw add_router_interface: {e}"));
            self.net
                .add_extraroutes(
                    &fab.gateway_router_id,
                    &[Route {
                        destination: t.cidr.clone(),
                        nexthop: t.ip.clone(),
                    }],
                )
                .await
                .unwrap_or_else(|e| panic!("raw add_extraroutes: {e}"));
        }
        let took = started.elapsed();
        assert!(self.all_present(&targets).await, "raw: objects missing");
        self.clean(&targets).await;
        took
    }

    fn openstack(&self, args: &[&str]) -> Duration {
        let started = Instant::now();
        let out = std::process::Command::new(&self.cli)
            .args(args)
            .env_clear()
            .envs(self.cli_env.iter().map(|(k, v)| (k, v)))
            .output()
            .unwrap_or_else(|e| panic!("{}: {e}", self.cli));
        assert!(
            out.status.success(),
            "openstack {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        started.elapsed()
    }

    /// The manual method, per link: (the three commands, with the check).
    async fn cli(&self, n: usize) -> (Duration, Duration) {
        let targets = self.routers(n).await;
        let (mut writes, mut all) = (Duration::ZERO, Duration::ZERO);
        for t in &targets {
            let leg = format!("vpn-transit-{}-leg", t.router_name);
            let fixed = format!("subnet={},ip-address={}", self.subnet_name, t.ip);
            let route = format!("destination={},gateway={}", t.cidr, t.ip);
            let w = self.openstack(&[
                "port",
                "create",
                "--network",
                &self.network_name,
                "--fixed-ip",
                &fixed,
                &leg,
            ]) + self.openstack(&["router", "add", "port", &t.router_name, &leg])
                + self.openstack(&["router", "set", "--route", &route, &self.gateway_name]);
            let check = self.openstack(&["router", "show", "-c", "routes", &self.gateway_name]);
            writes += w;
            all += w + check;
        }
        assert!(self.all_present(&targets).await, "cli: objects missing");
        self.clean(&targets).await;
        (writes, all)
    }
}

/// The operator rows: the real binary, already running and Ready on the same fabric.
struct Operator {
    process: OperatorProcess,
    links: Api<ClusterLink>,
    metrics: String,
}

/// One operator measurement: until every cloud object is present, until every link is
/// Ready, and the Neutron requests the operator sent (reads, writes) from its /metrics.
struct OperatorRun {
    present: Duration,
    ready: Duration,
    reads: u64,
    writes: u64,
}

impl Operator {
    async fn neutron_requests(&self) -> (u64, u64) {
        let (_, text) = http_get(&self.metrics, "/metrics").await;
        let all = sum_of(
            &text,
            "bnerd_openstack_requests_total",
            &["service=\"neutron\""],
        );
        let reads = sum_of(
            &text,
            "bnerd_openstack_requests_total",
            &["service=\"neutron\"", "operation=\"GET "],
        );
        (reads as u64, (all - reads) as u64)
    }

    async fn run(&self, b: &Bench, n: usize) -> OperatorRun {
        let targets = b.routers(n).await;
        let prefix = unique("manual");
        let names: Vec<String> = (0..n).map(|i| format!("{prefix}-{i}")).collect();
        let before = self.neutron_requests().await;
        let started = Instant::now();
        for (name, t) in names.iter().zip(&targets) {
            // As a human writes it: the router by name, the CIDR; the operator picks the address.
            self.links
                .create(
                    &PostParams::default(),
                    &test_link(
                        name,
                        json!({"serviceClusterRouter": t.router_name, "serviceClusterCIDR": t.cidr}),
                    ),
                )
                .await
                .unwrap_or_else(|e| panic!("create link {name}: {e}"));
        }
        wait_for("every cloud object present", 300, async || {
            if b.all_present(&targets).await {
                return Some(());
            }
            tokio::time::sleep(POLL).await;
            None
        })
        .await;
        let present = started.elapsed();
        wait_for("every link Ready", 300, async || {
            for name in &names {
                if !is_ready(&self.links.get(name).await.ok()?) {
                    return None;
                }
            }
            Some(())
        })
        .await;
        let ready = started.elapsed();
        let after = self.neutron_requests().await;
        for name in &names {
            let _ = self.links.delete(name, &DeleteParams::default()).await;
        }
        let mine = ListParams::default().labels(&format!("{TEST_LABEL}=true"));
        wait_for("links unwound and gone", 300, async || {
            let l = self.links.list(&mine).await.ok()?;
            (!l.iter()
                .any(|l| l.metadata.name.as_ref().is_some_and(|x| names.contains(x))))
            .then_some(())
        })
        .await;
        b.clean(&targets).await;
        OperatorRun {
            present,
            ready,
            reads: after.0 - before.0,
            writes: after.1 - before.1,
        }
    }
}

fn median(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    v[v.len() / 2]
}

fn min(v: &[Duration]) -> Duration {
    v.iter().copied().min().unwrap_or_default()
}

fn secs(d: Duration) -> String {
    format!("{:.2} s", d.as_secs_f64())
}

/// The lab venv's `openstack`, or `BNERD_OPENSTACK_CLI`.
fn openstack_cli() -> Option<String> {
    if let Ok(p) = std::env::var("BNERD_OPENSTACK_CLI") {
        return Some(p);
    }
    let dir = format!("{}/.cache/bnerd-vpn-operator", std::env::var("HOME").ok()?);
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("oslab-venv-"))
        .map(|e| e.path().join("bin/openstack"))
        .find(|p| p.exists())
        .map(|p| p.to_string_lossy().into_owned())
}

fn required() -> bool {
    std::env::var("BNERD_REQUIRE_LAB").is_ok_and(|v| v == "1")
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let name = "bench manual";
    let Some(lab) = lab_or_skip(name) else {
        return;
    };
    let Some((client, kubeconfig)) = kube_client(name).await else {
        return;
    };
    let Some(cli) = openstack_cli() else {
        assert!(!required(), "{name}: no openstack CLI in the lab venv");
        println!("SKIPPED {name}: no openstack CLI (lab/openstack/up.sh makes the venv)");
        return;
    };
    let rounds: usize = std::env::var("MANUAL_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3);
    let net = Arc::new(lab_client(&lab, "OPERATOR"));
    let env = env_on(net.clone()).await;
    let fab = env.fabric.clone();
    let network_name = net
        .get_network(&fab.transit_network_id)
        .await
        .expect("transit network")
        .name;
    let gateway_name = net
        .get_router(&fab.gateway_router_id)
        .await
        .expect("gateway router")
        .name;
    let subnet_id = fab.transit_subnet_id.clone();
    let subnet_name = format!("{network_name}-subnet");
    let cli_env: Vec<(String, String)> = [
        ("PATH", std::env::var("PATH").unwrap_or_default()),
        ("HOME", std::env::var("HOME").unwrap_or_default()),
        ("OS_CLOUD", "lab-operator".to_string()),
        ("OS_CLIENT_CONFIG_FILE", lab["LAB_CLOUDS_YAML"].clone()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    let b = Bench {
        net,
        env,
        network_name,
        subnet_name,
        gateway_name,
        subnet_id,
        cli,
        cli_env,
    };
    // The hand-run commands address the subnet by name; this bench's fabric made it without
    // a name.
    b.openstack(&["subnet", "set", "--name", &b.subnet_name, &b.subnet_id]);

    let _exclusive = kube_lab_exclusive(&kubeconfig).await;
    sweep_leftovers(&client).await;
    install_crd(&client).await;
    install_gateway_crds(&client).await;
    let process = OperatorCommand::new(env!("CARGO_BIN_EXE_bnerd-vpn-operator"))
        .lab(
            &kubeconfig,
            &lab,
            &fab.gateway_router_id,
            &fab.transit_network_id,
            "5m",
        )
        .env(
            "RUST_LOG",
            &std::env::var("MANUAL_OPERATOR_LOG")
                .unwrap_or_else(|_| "warn,bnerd_vpn_operator=info".into()),
        )
        .spawn();
    let metrics = process.served_address().await;
    wait_for("operator /readyz", 120, async || {
        (http_get(&metrics, "/readyz").await.0 == 200).then_some(())
    })
    .await;
    let op = Operator {
        process,
        links: Api::all(client.clone()),
        metrics,
    };
    // Untimed: the first link of a fresh process opens its connections; a running operator
    // has them open, as the raw floor's client has its token.
    op.run(&b, 1).await;
    b.raw(1).await;

    let mut rows: BTreeMap<&str, Vec<Duration>> = BTreeMap::new();
    let mut calls: BTreeMap<&str, (u64, u64)> = BTreeMap::new();
    let mut push = |k, d| rows.entry(k).or_default().push(d);
    for round in 0..rounds {
        eprintln!("bench manual: round {} of {rounds}", round + 1);
        push("raw 1", b.raw(1).await);
        let (w, all) = b.cli(1).await;
        push("cli 1 writes", w);
        push("cli 1", all);
        let o = op.run(&b, 1).await;
        push("operator 1", o.present);
        push("operator 1 ready", o.ready);
        calls.insert("operator 1", (o.reads, o.writes));
        push("raw 20", b.raw(MANY).await);
        let (w, all) = b.cli(2).await;
        push("cli 2 writes", w);
        push("cli 2", all);
        let o = op.run(&b, MANY).await;
        push("operator 20", o.present);
        push("operator 20 ready", o.ready);
        calls.insert("operator 20", (o.reads, o.writes));
    }
    let (_, log) = op.process.terminate(20).await;
    b.env.teardown(&[]).await;
    if let Ok(path) = std::env::var("MANUAL_OPERATOR_LOG_FILE") {
        let _ = std::fs::write(path, &log);
    }
    report(&rows, &calls, rounds, &log);
}

fn report(
    rows: &BTreeMap<&str, Vec<Duration>>,
    calls: &BTreeMap<&str, (u64, u64)>,
    rounds: usize,
    log: &str,
) {
    let m = |k: &str| median(&rows[k]);
    let line = |what: &str, k: &str, note: &str| {
        println!(
            "| {what} | {} | {} | {note} |",
            secs(m(k)),
            secs(min(&rows[k]))
        );
    };
    let c = |k: &str| calls.get(k).copied().unwrap_or_default();
    println!(
        "manual method vs operator (lab, {rounds} rounds, interleaved; apply -> every cloud object present)"
    );
    println!("| what | median | min | note |");
    println!("| --- | ---: | ---: | --- |");
    line(
        "raw floor, 1 link",
        "raw 1",
        "3 Neutron writes, token in hand",
    );
    line(
        "openstack CLI, 1 link",
        "cli 1",
        "port create, router add port, router set --route, router show",
    );
    line("... the 3 writing commands only", "cli 1 writes", "");
    line(
        "operator, 1 link",
        "operator 1",
        &format!(
            "until Ready: {}; Neutron {} reads, {} writes",
            secs(m("operator 1 ready")),
            c("operator 1").0,
            c("operator 1").1
        ),
    );
    line(
        "raw floor, 20 links one after another",
        "raw 20",
        "60 writes",
    );
    line("openstack CLI, 2 links", "cli 2", "8 commands");
    line("... the 3 writing commands only", "cli 2 writes", "");
    line(
        "operator, 20 links",
        "operator 20",
        &format!(
            "until Ready: {}; Neutron {} reads, {} writes",
            secs(m("operator 20 ready")),
            c("operator 20").0,
            c("operator 20").1
        ),
    );
    // The ratios docs/performance.md ("Against the manual method") judges against its
    // targets: measured only. Wall time on a shared lab varies from run to run more than a
    // target's margin, so a verdict here would gate nothing.
    let r1 = m("operator 1").as_secs_f64() / m("raw 1").as_secs_f64();
    let r20 = m("operator 20").as_secs_f64() / m("cli 2").as_secs_f64();
    println!("ratio: operator 1 link / raw floor 1 link (medians): {r1:.2}x");
    println!("ratio: operator 20 links / openstack CLI 2 links (medians): {r20:.2}x");
    let errors = log.lines().filter(|l| l.contains("ERROR")).count();
    if errors > 0 {
        println!("operator logged {errors} ERROR lines");
    }
}
