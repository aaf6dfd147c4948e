//! Packets through the lab's ML2/OVN Neutron (`lab/openstack/ovn.sh`): a Neutron port becomes
//! an endpoint, a network namespace whose `eth0` has the port's MAC and address and whose veth
//! peer sits on the chassis' `br-int` with `external_ids:iface-id=<port id>`, so ovn-controller
//! binds the port to it.
//!
//! Every verdict reads what the destination saw, not only what came back: a reply can die on
//! its way back (nothing routes back to a customer transit, docs/design.md, "Per-customer
//! transit") while the request got through. A namespace counts the echo requests it receives
//! (`Icmp: InEchos` of its `/proc/net/snmp`) and the connections it accepts (`Tcp:
//! PassiveOpens`); a router's own address is answered by OVN, and the OpenFlow flows of the
//! logical flow that answers it count what reaches it. Each probe first waits until every
//! chassis has applied the last change to OVN's northbound database (`ovn-nbctl --wait=hv
//! sync`), so a verdict never reads a data plane that lags behind Neutron. A verdict that
//! surprises prints the `ovn-trace` of its flow.
//!
//! Endpoint ports have port security off: security groups would decide first, and what the
//! tests measure is what the routes the operator writes (and the ones it must not) do. Their
//! `eth0` has checksum offload off: the userspace datapath hands a packet on with the partial
//! checksum a veth leaves to the hardware, and the receiver drops such TCP segments (ICMP is
//! checksummed in software, so pings pass either way).
//! Needs root (network namespaces), `ethtool` and `socat` (lab/openstack/up.sh installs both).

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bnerd_cloud::{CreatePort, Neutron, Port, PortQuery};

/// Prefix of every namespace and veth made here; `lab/openstack/ovn.sh down` removes leftovers.
const PREFIX: &str = "bnl-";
/// The MTU of a geneve network on this lab (Neutron says 1442).
const MTU: &str = "1442";

/// The data plane's settings, from lab.env.
#[derive(Clone, Debug)]
pub struct DataPlane {
    pub ovs_db: String,
    pub nb_db: String,
    pub sb_db: String,
    pub neutron_url: String,
    /// ovs-vswitchd's run directory (its `br-int.mgmt` and `ovs-vswitchd.ctl`), beside the
    /// vswitch DB's socket (lab/openstack/ovn.sh).
    ovs_rundir: String,
    python: String,
    helper: String,
}

impl DataPlane {
    pub fn from_lab(lab: &BTreeMap<String, String>) -> Self {
        let g = |k: &str| {
            lab.get(k)
                .cloned()
                .unwrap_or_else(|| panic!("lab.env lacks {k}: rerun lab/openstack/up.sh"))
        };
        let venv = std::fs::read_to_string(format!("{}/run/venv.path", g("LAB_DIR")))
            .expect("the lab's venv.path");
        let ovs_db = g("LAB_OVN_OVS_DB");
        let ovs_rundir = ovs_db
            .strip_prefix("unix:")
            .and_then(|sock| std::path::Path::new(sock).parent())
            .map(|d| d.display().to_string())
            .unwrap_or_else(|| panic!("LAB_OVN_OVS_DB {ovs_db:?} is not a unix socket"));
        Self {
            ovs_db,
            nb_db: g("LAB_OVN_NB_DB"),
            ovs_rundir,
            sb_db: g("LAB_OVN_SB_DB"),
            neutron_url: g("LAB_NEUTRON_OVN_URL"),
            python: format!("{}/bin/python", venv.trim()),
            helper: format!(
                "{}/../../lab/openstack/neutron_call.py",
                env!("CARGO_MANIFEST_DIR")
            ),
        }
    }

    /// One Neutron call as the lab's admin (`lab/openstack/neutron_call.py`).
    pub fn admin_call(
        &self,
        method: &str,
        path: &str,
        body: &serde_json::Value,
    ) -> serde_json::Value {
        let out = Command::new(&self.python)
            .args([
                &self.helper,
                &self.neutron_url,
                method,
                path,
                &body.to_string(),
            ])
            .output()
            .expect("neutron_call.py runs");
        assert!(
            out.status.success(),
            "neutron_call.py {method} {path}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).expect("neutron_call.py prints JSON")
    }

    /// Turn `port` into an endpoint named `name` (at most 10 characters: it names a veth).
    /// Waits until ovn-controller has bound it.
    pub async fn attach(&self, net: &dyn Neutron, port: &Port, name: &str) -> Endpoint {
        assert!(name.len() <= 10, "endpoint name {name:?} is longer than 10");
        let fixed = port.fixed_ips.first().expect("the port has an address");
        let subnet = net.get_subnet(&fixed.subnet_id).await.expect("subnet");
        let gateway = subnet.gateway_ip.clone().expect("the subnet has a gateway");
        let plen = subnet.cidr.split('/').nth(1).expect("a CIDR").to_string();
        self.admin_call(
            "PUT",
            &format!("/ports/{}", port.id),
            &serde_json::json!({"port": {"port_security_enabled": false, "security_groups": []}}),
        );
        let mac = self.admin_call(
            "GET",
            &format!("/ports/{}", port.id),
            &serde_json::json!(null),
        )["port"]["mac_address"]
            .as_str()
            .expect("mac_address")
            .to_string();
        let ep = Endpoint {
            ns: format!("{PREFIX}{name}"),
            veth: format!("{PREFIX}{name}"),
            ip: fixed.ip_address.clone(),
            mac,
            port_id: port.id.clone(),
            network_id: port.network_id.clone(),
            gateway: gateway.clone(),
            plane: self.clone(),
            servers: Mutex::new(vec![]),
        };
        let _ = run("ip", &["netns", "del", &ep.ns]);
        let _ = run("ip", &["link", "del", &ep.veth]);
        let peer = format!("{}-p", ep.veth);
        for args in [
            vec!["netns", "add", &ep.ns],
            vec![
                "link", "add", &ep.veth, "type", "veth", "peer", "name", &peer,
            ],
            vec!["link", "set", &peer, "netns", &ep.ns],
            vec!["-n", &ep.ns, "link", "set", &peer, "name", "eth0"],
            vec![
                "-n", &ep.ns, "link", "set", "eth0", "address", &ep.mac, "mtu", MTU,
            ],
            vec![
                "-n",
                &ep.ns,
                "addr",
                "add",
                &format!("{}/{plen}", ep.ip),
                "dev",
                "eth0",
            ],
            vec!["-n", &ep.ns, "link", "set", "lo", "up"],
            vec!["-n", &ep.ns, "link", "set", "eth0", "up"],
            vec!["-n", &ep.ns, "route", "add", "default", "via", &gateway],
            vec!["link", "set", &ep.veth, "mtu", MTU, "up"],
        ] {
            run("ip", &args).unwrap_or_else(|e| panic!("ip {args:?}: {e}"));
        }
        run(
            "ovs-vsctl",
            &[
                &format!("--db={}", self.ovs_db),
                "--may-exist",
                "add-port",
                "br-int",
                &ep.veth,
                "--",
                "set",
                "Interface",
                &ep.veth,
                &format!("external_ids:iface-id={}", port.id),
            ],
        )
        .unwrap_or_else(|e| panic!("ovs-vsctl add-port: {e}"));
        // Checksums in software (the module's header says why).
        run(
            "ip",
            &[
                "netns", "exec", &ep.ns, "ethtool", "-K", "eth0", "tx", "off",
            ],
        )
        .unwrap_or_else(|e| {
            panic!(
                "checksum offload off in {}: {e} (lab/openstack/up.sh installs ethtool)",
                ep.ns
            )
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let up = run(
                "ovn-sbctl",
                &[
                    &format!("--db={}", self.sb_db),
                    "--bare",
                    "--columns=up",
                    "find",
                    "Port_Binding",
                    &format!("logical_port={}", port.id),
                ],
            )
            .unwrap_or_default();
            if up.trim() == "true" {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "ovn-controller did not bind port {} ({name}) in 20 s",
                port.id
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        ep
    }

    /// Waits until every chassis has applied the northbound database as it is now
    /// (`ovn-nbctl --wait=hv sync`). Neutron writes a change there before its API call
    /// returns; northd and ovn-controller then follow on their own time.
    pub async fn sync(&self) {
        let nb = format!("--db={}", self.nb_db);
        run_async("ovn-nbctl", &[&nb, "--timeout=30", "--wait=hv", "sync"])
            .await
            .unwrap_or_else(|e| panic!("OVN did not apply the last change within 30 s: {e}"));
    }

    /// The static routes OVN routes by on the logical router of Neutron router `router_id`
    /// (`ovn-nbctl lr-route-list neutron-<id>`), after every chassis has caught up.
    pub async fn ovn_routes(&self, router_id: &str) -> Vec<bnerd_cloud::Route> {
        self.sync().await;
        let nb = format!("--db={}", self.nb_db);
        let out = run_async(
            "ovn-nbctl",
            &[&nb, "lr-route-list", &format!("neutron-{router_id}")],
        )
        .await
        .unwrap_or_else(|e| panic!("ovn-nbctl lr-route-list of router {router_id}: {e}"));
        let mut routes: Vec<bnerd_cloud::Route> = out
            .lines()
            .filter_map(|l| {
                let mut w = l.split_whitespace();
                let (dst, via) = (w.next()?, w.next()?);
                dst.contains('/').then(|| bnerd_cloud::Route::new(dst, via))
            })
            .collect();
        routes.sort_by(|a, b| (&a.destination, &a.nexthop).cmp(&(&b.destination, &b.nexthop)));
        routes
    }

    /// How many echo requests to the router address `ip` have reached a router: the packet
    /// counts of the OpenFlow flows (on this, the one chassis) of the logical flow that answers
    /// them (`lr_in_ip_input`, priority 90, `ip4.dst == {...} && icmp4.type == 8`;
    /// ovn-controller gives each OpenFlow flow the first 32 bits of its logical flow's UUID as
    /// its cookie). None when no such flow is installed.
    pub async fn router_echoes(&self, ip: &str) -> Option<u64> {
        let sb = format!("--db={}", self.sb_db);
        let lflows = run_async(
            "ovn-sbctl",
            &[
                &sb,
                "--bare",
                "--columns=_uuid,match",
                "find",
                "Logical_Flow",
                "external_ids:stage-name=lr_in_ip_input",
                "priority=90",
            ],
        )
        .await
        .ok()?;
        let cookies = echo_flow_cookies(&lflows, ip);
        if cookies.is_empty() {
            return None;
        }
        // The datapath's flow statistics reach the OpenFlow flows when a revalidator runs;
        // one full round of them first, so every packet sent so far is counted.
        let ctl = format!("{}/ovs-vswitchd.ctl", self.ovs_rundir);
        run_async("ovs-appctl", &["-t", &ctl, "revalidator/wait"])
            .await
            .ok()?;
        let mgmt = format!("unix:{}/br-int.mgmt", self.ovs_rundir);
        let mut total = None;
        for cookie in cookies {
            let flows = run_async(
                "ovs-ofctl",
                &["dump-flows", &mgmt, &format!("cookie=0x{cookie}/-1")],
            )
            .await
            .ok()?;
            if let Some(n) = echo_flow_packets(&flows, ip) {
                total = Some(total.unwrap_or(0) + n);
            }
        }
        total
    }
}

/// A Neutron port as a network namespace; removed when dropped.
pub struct Endpoint {
    pub ns: String,
    veth: String,
    pub ip: String,
    pub mac: String,
    pub port_id: String,
    pub network_id: String,
    pub gateway: String,
    plane: DataPlane,
    /// TCP listeners running in the namespace ([`Endpoint::serve_tcp`]), stopped on drop.
    servers: Mutex<Vec<std::process::Child>>,
}

/// What one bounded ping saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PingCount {
    pub sent: u32,
    pub received: u32,
}

/// Where an echo request goes, and what counts it on arrival.
#[derive(Clone, Copy)]
pub enum Dest<'a> {
    /// An address of an endpoint's namespace (its `eth0` or one on its loopback): the
    /// namespace's `Icmp: InEchos` counts every echo request that arrives.
    Ns(&'a Endpoint, &'a str),
    /// An address of a logical router, which OVN answers itself: the OpenFlow flows of the
    /// logical flow that answers it count every echo request that reaches it
    /// ([`DataPlane::router_echoes`]).
    Router(&'a str),
}

impl Dest<'_> {
    pub fn ip(&self) -> &str {
        match self {
            Dest::Ns(_, ip) | Dest::Router(ip) => ip,
        }
    }
}

/// One probe: echo requests sent, echo replies back, and echo requests the destination
/// counted on arrival.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    pub sent: u32,
    pub replies: u32,
    pub arrived: u64,
}

impl Probe {
    /// The verdict in a word or two, with the counts behind it (for reports).
    pub fn verdict(&self) -> String {
        let word = match (self.arrived > 0, self.replies > 0) {
            (true, true) => "DELIVERED",
            (true, false) => "ONE-WAY",
            (false, false) => "not delivered",
            (false, true) => "REPLY WITHOUT ARRIVAL",
        };
        format!(
            "{word} ({}/{} arrived, {} replies)",
            self.arrived, self.sent, self.replies
        )
    }
}

impl Endpoint {
    /// An address on the namespace's loopback (a VPN client address a gateway pod answers for).
    pub fn add_loopback_address(&self, cidr: &str) {
        run("ip", &["-n", &self.ns, "addr", "add", cidr, "dev", "lo"])
            .unwrap_or_else(|e| panic!("ip addr add {cidr}: {e}"));
    }

    /// This endpoint at its own address, as a destination.
    pub fn dest(&self) -> Dest<'_> {
        Dest::Ns(self, &self.ip)
    }

    /// `count` echo requests to `dst`, 0.2 s apart, each waiting at most 1 s for its reply.
    pub async fn ping(&self, dst: &str, count: u32) -> PingCount {
        let out = tokio::process::Command::new("ip")
            .args([
                "netns", "exec", &self.ns, "ping", "-n", "-q", "-i", "0.2", "-W", "1",
            ])
            .args(["-c", &count.to_string(), dst])
            .output()
            .await
            .expect("ping runs");
        parse_ping(&String::from_utf8_lossy(&out.stdout))
            .unwrap_or_else(|| panic!("ping printed no statistics: {out:?}"))
    }

    /// The namespace's IP counters (`/proc/net/snmp` read inside it), keyed `Icmp.InEchos`,
    /// `Tcp.PassiveOpens`, ...
    pub async fn snmp(&self) -> BTreeMap<String, i64> {
        let text = run_async("ip", &["netns", "exec", &self.ns, "cat", "/proc/net/snmp"])
            .await
            .unwrap_or_else(|e| panic!("/proc/net/snmp of {}: {e}", self.ns));
        parse_snmp(&text)
    }

    /// One counter of [`Endpoint::snmp`].
    pub async fn counter(&self, key: &str) -> u64 {
        let n = self
            .snmp()
            .await
            .get(key)
            .copied()
            .unwrap_or_else(|| panic!("{} has no {key} in /proc/net/snmp", self.ns));
        u64::try_from(n).unwrap_or_else(|_| panic!("{} counts {key} = {n}", self.ns))
    }

    /// What reached `dst` so far (an ever-growing count).
    async fn arrivals(&self, dst: Dest<'_>) -> u64 {
        match dst {
            Dest::Ns(ep, _) => ep.counter("Icmp.InEchos").await,
            Dest::Router(ip) => self.plane.router_echoes(ip).await.unwrap_or_else(|| {
                panic!(
                    "no OpenFlow flow on this chassis answers echo requests to the router address {ip}: nothing could count them"
                )
            }),
        }
    }

    /// `count` echo requests to `dst` once OVN has applied the last change, counting what
    /// came back and what the destination received.
    pub async fn probe(&self, dst: Dest<'_>, count: u32) -> Probe {
        self.plane.sync().await;
        let before = self.arrivals(dst).await;
        let got = self.ping(dst.ip(), count).await;
        let after = self.arrivals(dst).await;
        assert!(
            after >= before,
            "the echo counter of {} went back from {before} to {after} (flows reinstalled?)",
            dst.ip()
        );
        Probe {
            sent: got.sent,
            replies: got.received,
            arrived: after - before,
        }
    }

    /// The time until the first echo reply from `dst`; None when nothing came back within
    /// `limit`. One `ping` sends a request every 20 ms and prints each reply as it comes, so
    /// the time is the reply's to within about 20 ms (probes of their own, each waiting for
    /// its reply, read a path back up to a probe's whole wait late).
    pub async fn first_reply_within(&self, dst: &str, limit: Duration) -> Option<Duration> {
        use tokio::io::AsyncBufReadExt;
        let start = Instant::now();
        let count = (limit.as_millis() / 20).max(1).to_string();
        let mut ping = tokio::process::Command::new("ip")
            .args([
                "netns", "exec", &self.ns, "ping", "-n", "-i", "0.02", "-W", "0.2",
            ])
            .args(["-c", &count, dst])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("ping starts");
        let mut lines = tokio::io::BufReader::new(ping.stdout.take()?).lines();
        // "64 bytes from <dst>: icmp_seq=… time=…"; an ICMP error reads "From <hop> …".
        let reply = format!(" bytes from {dst}: ");
        let replied = tokio::time::timeout(limit, async {
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains(&reply) && line.contains(" time=") {
                    return true;
                }
            }
            false
        })
        .await;
        let _ = ping.kill().await;
        matches!(replied, Ok(true)).then(|| start.elapsed())
    }

    /// A route in the namespace (a more specific path than its default route).
    pub fn add_route(&self, cidr: &str, via: &str) {
        run("ip", &["-n", &self.ns, "route", "add", cidr, "via", via])
            .unwrap_or_else(|e| panic!("ip route add {cidr} via {via}: {e}"));
    }

    /// `count` echo requests to `dst`, one every `interval` seconds, in the background;
    /// [`Stream::finish`] waits for the last reply (or its 1 s timeout) and counts.
    pub fn stream(&self, dst: &str, interval: &str, count: u32) -> Stream {
        let child = tokio::process::Command::new("ip")
            .args([
                "netns", "exec", &self.ns, "ping", "-n", "-q", "-i", interval, "-W", "1",
            ])
            .args(["-c", &count.to_string(), dst])
            .stdout(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("ping starts");
        Stream { child }
    }

    /// `ovn-trace` of an echo request from this endpoint to `dst` through its first-hop
    /// router (whose MAC it learns from Neutron as the admin: the router may be another
    /// project's, as an edge router is), every connection state `new`.
    pub async fn trace(&self, dst: &str) -> String {
        let ports = self.plane.admin_call(
            "GET",
            &format!(
                "/ports?network_id={}&fixed_ips=ip_address%3D{}",
                self.network_id, self.gateway
            ),
            &serde_json::json!(null),
        );
        let Some(gw_mac) = ports["ports"][0]["mac_address"].as_str() else {
            return format!(
                "(no port holds the gateway {} to trace through)",
                self.gateway
            );
        };
        let flow = format!(
            "inport == \"{}\" && eth.src == {} && eth.dst == {gw_mac} && ip4.src == {} && ip4.dst == {dst} && ip.ttl == 64 && icmp4.type == 8 && icmp4.code == 0",
            self.port_id, self.mac, self.ip
        );
        let mut args = vec![format!("--db={}", self.plane.sb_db)];
        args.extend(std::iter::repeat_n("--ct=new".to_string(), 6));
        args.push(format!("neutron-{}", self.network_id));
        args.push(flow);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        match run("ovn-trace", &args) {
            Ok(t) => format!("ovn-trace {}\n{t}", args.join(" ")),
            Err(e) => format!("ovn-trace failed: {e}"),
        }
    }

    /// Asserts that echo requests to `dst` arrive there and their replies come back; else
    /// panics with the counts and the trace. Returns the probe (for reports).
    pub async fn assert_delivered(&self, dst: Dest<'_>, what: &str) -> Probe {
        let got = self.probe(dst, 3).await;
        if got.arrived == 0 || got.replies == 0 {
            panic!(
                "{what}: {} -> {} not delivered both ways: {} ({got:?})\n{}",
                self.ip,
                dst.ip(),
                got.verdict(),
                self.trace(dst.ip()).await
            );
        }
        got
    }

    /// Asserts that echo requests to `dst` arrive there and no reply comes back: a path one
    /// way only. Returns the probe (for reports).
    pub async fn assert_one_way(&self, dst: Dest<'_>, what: &str) -> Probe {
        let got = self.probe(dst, 3).await;
        if got.arrived == 0 || got.replies != 0 {
            panic!(
                "{what}: {} -> {} expected to arrive with no reply back: {} ({got:?})\n{}",
                self.ip,
                dst.ip(),
                got.verdict(),
                self.trace(dst.ip()).await
            );
        }
        got
    }

    /// Asserts that no echo request to `dst` arrives there (and no reply comes back), after a
    /// positive control from this endpoint in the same breath: its own gateway router
    /// receives and answers it, so a silence is the path's and not a dead endpoint's.
    /// Returns the probe (for reports).
    pub async fn assert_not_delivered(&self, dst: Dest<'_>, what: &str) -> Probe {
        self.assert_delivered(
            Dest::Router(&self.gateway),
            &format!("{what} (control: the probing endpoint reaches its own gateway)"),
        )
        .await;
        let got = self.probe(dst, 3).await;
        if got.arrived != 0 || got.replies != 0 {
            panic!(
                "{what}: {} -> {} expected not to arrive, but the destination counted {} of {} echo request(s) ({} replies came back): {got:?}\n{}",
                self.ip,
                dst.ip(),
                got.arrived,
                got.sent,
                got.replies,
                self.trace(dst.ip()).await
            );
        }
        got
    }

    /// A TCP listener on `port` in the namespace (socat, every connection echoing what it
    /// reads), running until the endpoint is dropped; returns once it listens.
    pub async fn serve_tcp(&self, port: u16) {
        let child = Command::new("ip")
            .args(["netns", "exec", &self.ns, "socat"])
            .arg(format!("TCP-LISTEN:{port},reuseaddr,fork"))
            .arg("PIPE")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("socat starts");
        self.servers
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(child);
        let sport = format!("sport = :{port}");
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let listening = run_async("ip", &["netns", "exec", &self.ns, "ss", "-Hltn", &sport])
                .await
                .is_ok_and(|out| !out.trim().is_empty());
            if listening {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "socat did not listen on {port} in {} within 5 s",
                self.ns
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Opens a TCP connection to `addr` (an address of `server`'s namespace, where
    /// [`Endpoint::serve_tcp`] listens on `port`) once OVN has applied the last change, sends a
    /// line and asserts that it comes back and that the server's namespace counted the
    /// connection (`Tcp: PassiveOpens`); else panics with what was seen.
    pub async fn assert_tcp_delivered(&self, server: &Endpoint, addr: &str, port: u16, what: &str) {
        self.plane.sync().await;
        let before = server.counter("Tcp.PassiveOpens").await;
        let line = format!("bnerd {} -> {addr}:{port}\n", self.ip);
        let mut child = tokio::process::Command::new("ip")
            .args([
                "netns", "exec", &self.ns, "socat", "-t", "3", "-T", "5", "-",
            ])
            .arg(format!("TCP:{addr}:{port},connect-timeout=3"))
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("socat starts");
        if let Some(mut stdin) = child.stdin.take() {
            use tokio::io::AsyncWriteExt;
            stdin.write_all(line.as_bytes()).await.expect("to socat");
        }
        let out = tokio::time::timeout(Duration::from_secs(10), child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("{what}: socat still running after 10 s"))
            .expect("socat output");
        let after = server.counter("Tcp.PassiveOpens").await;
        let echoed = String::from_utf8_lossy(&out.stdout);
        if echoed != line || after <= before {
            panic!(
                "{what}: TCP {} -> {addr}:{port} not delivered: echoed {echoed:?} (sent {line:?}), the server accepted {} connection(s), socat: {}",
                self.ip,
                after.saturating_sub(before),
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let servers = self
            .servers
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for mut s in servers.drain(..) {
            let _ = s.kill();
            let _ = s.wait();
        }
        let _ = run(
            "ovs-vsctl",
            &[
                &format!("--db={}", self.plane.ovs_db),
                "--if-exists",
                "del-port",
                "br-int",
                &self.veth,
            ],
        );
        let _ = run("ip", &["netns", "del", &self.ns]);
        let _ = run("ip", &["link", "del", &self.veth]);
    }
}

/// A running ping of a fixed count.
pub struct Stream {
    child: tokio::process::Child,
}

impl Stream {
    /// Waits for the last echo request's reply (or its timeout): what ping counted.
    pub async fn finish(self) -> PingCount {
        let out = self.child.wait_with_output().await.expect("ping output");
        parse_ping(&String::from_utf8_lossy(&out.stdout))
            .unwrap_or_else(|| panic!("ping printed no statistics: {out:?}"))
    }
}

/// A service network behind a router: a network, its subnet (gateway .1 on the router) and a
/// VM port at `vm_ip`, made through `net` (the router's project).
pub struct ServiceNet {
    pub network_id: String,
    pub subnet_id: String,
    pub router_id: String,
    pub vm: Port,
}

impl ServiceNet {
    pub async fn make(
        net: &dyn Neutron,
        router_id: &str,
        cidr: &str,
        gateway: &str,
        vm_ip: &str,
    ) -> Self {
        let n = net
            .create_network(&crate::unique("svc-net"))
            .await
            .expect("service network");
        let s = net
            .create_subnet(&n.id, cidr, gateway)
            .await
            .expect("service subnet");
        net.add_router_subnet(router_id, &s.id)
            .await
            .expect("service router interface");
        let vm = net
            .create_port(&CreatePort {
                network_id: n.id.clone(),
                ip_address: Some(vm_ip.into()),
                name: "service-vm".into(),
                ..Default::default()
            })
            .await
            .expect("service VM port");
        Self {
            network_id: n.id,
            subnet_id: s.id,
            router_id: router_id.into(),
            vm,
        }
    }

    /// Removes the VM port, the router's interface and the network (best effort).
    pub async fn teardown(self, net: &dyn Neutron) {
        let _ = net.delete_port(&self.vm.id).await;
        let ports = ports_on(net, &self.network_id).await;
        for p in ports.iter().filter(|p| p.device_id == self.router_id) {
            let _ = net.remove_router_interface(&self.router_id, &p.id).await;
        }
        let _ = net.delete_network(&self.network_id).await;
    }
}

/// The ports on a network (none when the read fails: callers are diagnostics and teardown).
async fn ports_on(net: &dyn Neutron, network_id: &str) -> Vec<Port> {
    net.list_ports(&PortQuery {
        network_id: Some(network_id.into()),
        ..Default::default()
    })
    .await
    .unwrap_or_default()
}

fn run(program: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new(program)
        .args(args)
        .output()
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

async fn run_async(program: &str, args: &[&str]) -> Result<String, String> {
    let out = tokio::process::Command::new(program)
        .args(args)
        .output()
        .await
        .map_err(|e| format!("{program}: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(format!(
            "{program} {args:?}: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// `/proc/net/snmp`: pairs of lines, a protocol's field names then its values
/// (`Icmp: InMsgs ...` / `Icmp: 3 ...`), as `Icmp.InMsgs` -> 3.
fn parse_snmp(text: &str) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks(2) {
        let [names, values] = pair else { continue };
        let (Some((proto, names)), Some((proto2, values))) =
            (names.split_once(':'), values.split_once(':'))
        else {
            continue;
        };
        if proto != proto2 {
            continue;
        }
        for (n, v) in names.split_whitespace().zip(values.split_whitespace()) {
            if let Ok(v) = v.parse() {
                out.insert(format!("{proto}.{n}"), v);
            }
        }
    }
    out
}

/// The cookies (first 8 hex digits of the UUID) of the logical flows in `ovn-sbctl --bare
/// --columns=_uuid,match find Logical_Flow ...` output (records apart by a blank line) that
/// answer echo requests to `ip`: `ip4.dst == 10.0.0.1 && icmp4.type == 8 && ...` or
/// `ip4.dst == {10.0.0.1, 10.1.0.1} && ...`.
fn echo_flow_cookies(records: &str, ip: &str) -> Vec<String> {
    records
        .split("\n\n")
        .filter_map(|rec| {
            let mut lines = rec.lines().map(str::trim).filter(|l| !l.is_empty());
            let uuid = lines.next()?;
            let m = lines.next()?;
            let set = m.strip_prefix("ip4.dst == ")?;
            let (set, rest) = set.split_once(" && ")?;
            if !rest.starts_with("icmp4.type == 8") {
                return None;
            }
            set.trim_matches(|c| c == '{' || c == '}')
                .split(',')
                .any(|a| a.trim() == ip)
                .then(|| uuid.get(..8).map(str::to_string))?
        })
        .collect()
}

/// The packet count of the flows for destination `ip` in `ovs-ofctl dump-flows` output (one
/// flow a line, `... n_packets=3, ... priority=90,icmp,...,nw_dst=10.0.0.1,... actions=...`);
/// None when no flow is for `ip`.
fn echo_flow_packets(flows: &str, ip: &str) -> Option<u64> {
    let want = format!("nw_dst={ip}");
    let mut total = None;
    for line in flows.lines() {
        let head = line.split(" actions=").next().unwrap_or_default();
        let fields: Vec<&str> = head
            .split([',', ' '])
            .map(str::trim)
            .filter(|f| !f.is_empty())
            .collect();
        if !fields.contains(&want.as_str()) {
            continue;
        }
        let n = fields
            .iter()
            .find_map(|f| f.strip_prefix("n_packets="))
            .and_then(|n| n.parse::<u64>().ok())?;
        total = Some(total.unwrap_or(0) + n);
    }
    total
}

/// "3 packets transmitted, 2 received, ..." from ping's summary.
fn parse_ping(out: &str) -> Option<PingCount> {
    let line = out.lines().find(|l| l.contains("packets transmitted"))?;
    let mut nums = line
        .split(',')
        .filter_map(|part| part.split_whitespace().next()?.parse::<u32>().ok());
    Some(PingCount {
        sent: nums.next()?,
        received: nums.next()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ping_statistics_are_read() {
        let out = "PING 10.0.0.1 (10.0.0.1) 56(84) bytes of data.\n\n--- 10.0.0.1 ping statistics ---\n3 packets transmitted, 2 received, +1 errors, 33.3333% packet loss, time 405ms\n";
        assert_eq!(
            parse_ping(out),
            Some(PingCount {
                sent: 3,
                received: 2
            })
        );
        let none = "--- x ping statistics ---\n5 packets transmitted, 0 received, 100% packet loss, time 4090ms\n";
        assert_eq!(
            parse_ping(none),
            Some(PingCount {
                sent: 5,
                received: 0
            })
        );
        assert_eq!(parse_ping("ping: connect: Network is unreachable"), None);
    }

    #[test]
    fn snmp_counters_are_read() {
        let text = "Ip: Forwarding DefaultTTL\nIp: 2 64\nIcmp: InMsgs InErrors InEchos\nIcmp: 5 0 3\nTcp: RtoAlgorithm MaxConn PassiveOpens\nTcp: 1 -1 2\n";
        let c = parse_snmp(text);
        assert_eq!(c.get("Icmp.InEchos"), Some(&3));
        assert_eq!(c.get("Tcp.PassiveOpens"), Some(&2));
        assert_eq!(c.get("Tcp.MaxConn"), Some(&-1));
        assert_eq!(c.get("Ip.Forwarding"), Some(&2));
    }

    #[test]
    fn router_echo_flows_are_found_by_address() {
        let lflows = "50fcb681-15a4-459e-bc3c-25b15ba8b058\ninport == \"lrp-c6\" && arp.op == 1 && arp.tpa == 10.254.0.1\n\nf00d65c9-98bb-449a-b439-870f0e455646\nip4.dst == 10.254.0.1 && icmp4.type == 8 && icmp4.code == 0\n\n0a0b0c0d-0000-0000-0000-000000000000\nip4.dst == {10.255.0.17, 10.253.0.1} && icmp4.type == 8 && icmp4.code == 0\n";
        assert_eq!(echo_flow_cookies(lflows, "10.254.0.1"), ["f00d65c9"]);
        assert_eq!(echo_flow_cookies(lflows, "10.253.0.1"), ["0a0b0c0d"]);
        assert!(echo_flow_cookies(lflows, "10.254.0.10").is_empty());
        let flows = "NXST_FLOW reply (xid=0x8):\n cookie=0xf00d65c9, duration=1.2s, table=11, n_packets=3, n_bytes=294, idle_age=0, priority=90,icmp,metadata=0x3,nw_dst=10.254.0.1,icmp_type=8,icmp_code=0 actions=push:NXM_OF_IP_DST[]\n cookie=0xf00d65c9, duration=1.2s, table=11, n_packets=7, n_bytes=294, idle_age=0, priority=90,icmp,metadata=0x3,nw_dst=10.254.0.10,icmp_type=8,icmp_code=0 actions=drop\n";
        assert_eq!(echo_flow_packets(flows, "10.254.0.1"), Some(3));
        assert_eq!(echo_flow_packets(flows, "10.254.0.10"), Some(7));
        assert_eq!(echo_flow_packets(flows, "10.254.0.2"), None);
    }
}
