//! Packets through the lab's ML2/OVN Neutron (`lab/openstack/ovn.sh`): a Neutron port becomes
//! an endpoint, a network namespace whose `eth0` has the port's MAC and address and whose veth
//! peer sits on the chassis' `br-int` with `external_ids:iface-id=<port id>`, so ovn-controller
//! binds the port to it. Probes are bounded `ping`s; a verdict that surprises prints the
//! `ovn-trace` of that flow.
//!
//! Endpoint ports have port security off: security groups would decide first, and what the
//! tests measure is what the routes the operator writes (and the ones it must not) do.
//! Needs root (network namespaces), as the lab's processes do.

use std::collections::BTreeMap;
use std::process::Command;
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
    pub sb_db: String,
    pub neutron_url: String,
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
        Self {
            ovs_db: g("LAB_OVN_OVS_DB"),
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
}

/// What one bounded ping saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PingCount {
    pub sent: u32,
    pub received: u32,
}

impl Endpoint {
    /// An address on the namespace's loopback (a VPN client address a gateway pod answers for).
    pub fn add_loopback_address(&self, cidr: &str) {
        run("ip", &["-n", &self.ns, "addr", "add", cidr, "dev", "lo"])
            .unwrap_or_else(|e| panic!("ip addr add {cidr}: {e}"));
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

    /// Whether an echo request to `dst` gets its reply (3 tries).
    pub async fn reaches(&self, dst: &str) -> bool {
        self.ping(dst, 3).await.received > 0
    }

    /// The time until the first echo reply from `dst`, probing every 50 ms (each probe waits
    /// at most 200 ms for its reply); None when nothing came back within `limit`.
    pub async fn first_reply_within(&self, dst: &str, limit: Duration) -> Option<Duration> {
        let start = Instant::now();
        while start.elapsed() < limit {
            let ok = tokio::process::Command::new("ip")
                .args([
                    "netns", "exec", &self.ns, "ping", "-n", "-q", "-c", "1", "-W", "0.2", dst,
                ])
                .output()
                .await
                .map(|o| o.status.success())
                .unwrap_or(false);
            if ok {
                return Some(start.elapsed());
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
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
    /// router (whose MAC it learns from Neutron), every connection state `new`.
    pub async fn trace(&self, net: &dyn Neutron, dst: &str) -> String {
        let ports = ports_on(net, &self.network_id).await;
        let Some(gw) = ports.iter().find(|p| p.has_ip(&self.gateway)) else {
            return format!(
                "(no port holds the gateway {} to trace through)",
                self.gateway
            );
        };
        let gw_mac = self.plane.admin_call(
            "GET",
            &format!("/ports/{}", gw.id),
            &serde_json::json!(null),
        )["port"]["mac_address"]
            .as_str()
            .unwrap_or_default()
            .to_string();
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

    /// Asserts that an echo request to `dst` gets its reply; else panics with the trace.
    pub async fn assert_delivered(&self, net: &dyn Neutron, dst: &str, what: &str) {
        let got = self.ping(dst, 3).await;
        if got.received == 0 {
            panic!(
                "{what}: {} -> {dst} not delivered ({got:?})\n{}",
                self.ip,
                self.trace(net, dst).await
            );
        }
    }

    /// Asserts that no echo reply comes back from `dst`; else panics with the trace.
    pub async fn assert_not_delivered(&self, net: &dyn Neutron, dst: &str, what: &str) {
        let got = self.ping(dst, 3).await;
        if got.received != 0 {
            panic!(
                "{what}: {} -> {dst} delivered ({got:?}), expected no reply\n{}",
                self.ip,
                self.trace(net, dst).await
            );
        }
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
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
}
