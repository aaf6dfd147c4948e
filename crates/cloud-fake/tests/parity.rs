//! docs/design.md, "What Neutron and Keystone do", row by row: the fake and the real lab must
//! answer every call with the same status code and NeutronError type. One table, run against both.
//!
//! One file although it is long: the table is one sequence in which every row runs on what
//! the rows before it left (ports attached, routes added, networks shared), and EXPECTED is
//! read side by side with it; split up, the rows would lose the state they are about.

use std::sync::Arc;

use bnerd_cloud::{
    ACCESS_AS_SHARED, CreatePort, CreateRouter, CreateSubnet, Identity, Neutron, OpenStack,
    PortQuery, Result, Route, Router, RouterQuery, ShareNetwork, SubnetQuery,
};
use bnerd_cloud_fake::FakeCloud;
use bnerd_testkit::{
    lab_app_cred_client, lab_client, lab_or_skip, lab_tagged_client, ovn_lab_or_skip, unique,
};

fn obs<T>(r: Result<T>) -> String {
    match r {
        Ok(_) => "ok".into(),
        Err(e) if e.auth_status().is_some() => {
            format!("keystone {}", e.auth_status().unwrap_or_default())
        }
        Err(e) => format!(
            "{} {}",
            e.status()
                .map(|s| s.to_string())
                .unwrap_or_else(|| "-".into()),
            e.kind().unwrap_or("-")
        ),
    }
}

struct Clouds {
    op: Arc<dyn Neutron>,
    cust: Arc<dyn Neutron>,
    cust_identity: Arc<dyn Identity>,
    /// A cloud admin (for the rule an admin made by hand, and HA/DVR routers).
    admin: Arc<dyn Neutron>,
    /// The project `op` works in.
    op_project: String,
    /// An application credential that was deleted after it worked once.
    revoked: Arc<dyn Identity>,
    /// The customer project's application credential carrying admin.
    priv_ac: Arc<dyn Neutron>,
    /// The customer project's application credential carrying member and
    /// [`POLICY_PRIV_ROLE`], which the cloud's policy makes cloud admin.
    policy_priv: Arc<dyn Neutron>,
}

/// The role the lab's Neutron policy makes cloud admin (lab/openstack/up.sh writes
/// `context_is_admin: role:admin or role:net_operator`); the fake is told the same.
const POLICY_PRIV_ROLE: &str = "net_operator";

/// Which admin-only router attribute a block of rows exercises.
#[derive(Clone, Copy)]
enum RouterKind {
    Ha,
    Dvr,
}

impl RouterKind {
    fn request(self, name: String, project_id: Option<String>) -> CreateRouter {
        CreateRouter {
            name,
            project_id,
            ha: matches!(self, RouterKind::Ha).then_some(true),
            distributed: matches!(self, RouterKind::Dvr).then_some(true),
        }
    }

    /// Row names, in the order [`router_kind_rows`] pushes them.
    fn rows(self) -> [&'static str; 12] {
        match self {
            RouterKind::Ha => [
                "member asks for an HA router",
                "admin creates an HA router for the operator's project",
                "member attaches a port to the HA router",
                "HA router interface device_owner",
                "re-attach the same port to the HA router",
                "delete the HA interface port directly",
                "route via the HA interface",
                "nexthop is the HA router's own interface",
                "remove the HA interface needed by a route",
                "remove the HA interface by port",
                "HA interface port gone with the detach",
                "member deletes the HA router",
            ],
            RouterKind::Dvr => [
                "member asks for a DVR router",
                "admin creates a DVR router for the operator's project",
                "member attaches a port to the DVR router",
                "DVR router interface device_owner",
                "re-attach the same port to the DVR router",
                "delete the DVR interface port directly",
                "route via the DVR interface",
                "nexthop is the DVR router's own interface",
                "remove the DVR interface needed by a route",
                "remove the DVR interface by port",
                "DVR interface port gone with the detach",
                "member deletes the DVR router",
            ],
        }
    }
}

/// The rows of a router kind the cloud would not make.
const NO_ROUTER: &str = "no such router to try";

/// What a refused router creation answered; one that wrongly succeeded is removed again so
/// the shared lab keeps no leftovers.
async fn refused(c: &Clouds, r: Result<Router>) -> String {
    if let Ok(router) = &r {
        let _ = c.admin.delete_router(&router.id).await;
    }
    obs(r)
}

/// An admin makes an L3-HA or DVR router for the operator's project; the operator (member)
/// then uses it as any other: its interfaces get their own device_owner, and every rule on
/// interfaces (in use, not deletable directly, needed by a route, deleted with the detach)
/// must hold for that owner too.
async fn router_kind_rows(
    c: &Clouds,
    kind: RouterKind,
    network_id: &str,
    ip: &str,
) -> Vec<(&'static str, String)> {
    // From the HA router's create to its delete: see the lock (the two lab tables and
    // findings' HA scenarios run at once otherwise).
    let _turn = bnerd_testkit::ha_routers_exclusive().await;
    let op = c.op.as_ref();
    let names = kind.rows();
    let mut out = vec![];
    let by_member = op
        .create_router_with(&kind.request(unique("pkind"), None))
        .await;
    out.push((names[0], refused(c, by_member).await));
    let router = c
        .admin
        .create_router_with(&kind.request(unique("pkind"), Some(c.op_project.clone())))
        .await;
    let router = match router {
        Ok(r) => r,
        Err(e) => {
            out.push((names[1], obs::<()>(Err(e))));
            out.extend(names[2..].iter().map(|n| (*n, NO_ROUTER.to_string())));
            return out;
        }
    };
    out.push((names[1], "ok".into()));
    let port = op
        .create_port(&CreatePort {
            network_id: network_id.into(),
            ip_address: Some(ip.into()),
            name: unique("pkind"),
            ..Default::default()
        })
        .await
        .unwrap();
    out.push((
        names[2],
        obs(op.add_router_interface(&router.id, &port.id).await),
    ));
    out.push((names[3], op.get_port(&port.id).await.unwrap().device_owner));
    out.push((
        names[4],
        obs(op.add_router_interface(&router.id, &port.id).await),
    ));
    out.push((names[5], obs(op.delete_port(&port.id).await)));
    let via = Route::new("192.168.111.0/24", "10.254.0.21");
    out.push((
        names[6],
        obs(op
            .add_extraroutes(&router.id, std::slice::from_ref(&via))
            .await),
    ));
    out.push((
        names[7],
        obs(op
            .add_extraroutes(&router.id, &[Route::new("192.168.112.0/24", ip)])
            .await),
    ));
    out.push((
        names[8],
        obs(op.remove_router_interface(&router.id, &port.id).await),
    ));
    op.remove_extraroutes(&router.id, &[via]).await.unwrap();
    out.push((
        names[9],
        obs(op.remove_router_interface(&router.id, &port.id).await),
    ));
    out.push((names[10], obs(op.get_port(&port.id).await)));
    out.push((names[11], obs(op.delete_router(&router.id).await)));
    out
}

fn share(network_id: &str, target: &str) -> ShareNetwork {
    ShareNetwork {
        network_id: network_id.into(),
        action: ACCESS_AS_SHARED.into(),
        target_tenant: target.into(),
    }
}

/// Objects as (ID, the network or object they belong to), sorted.
fn ids_of<'a>(v: impl Iterator<Item = (&'a String, &'a String)>) -> Vec<(String, String)> {
    let mut v: Vec<_> = v.map(|(a, b)| (a.clone(), b.clone())).collect();
    v.sort();
    v
}

/// A row's answer for one list against the lists it should be together: `same` when they
/// hold the same objects and those belong to two networks, else both.
fn together(whole: Result<Vec<(String, String)>>, each: Result<Vec<(String, String)>>) -> String {
    match (whole, each) {
        (Ok(w), Ok(e)) => {
            let mut of: Vec<&String> = w.iter().map(|(_, n)| n).collect();
            of.sort();
            of.dedup();
            if w == e && of.len() == 2 {
                "same, of both".into()
            } else {
                format!("{w:?} against {e:?}")
            }
        }
        (w, e) => format!("{:?} / {:?}", w.err(), e.err()),
    }
}

/// The ports on network `net_id` that nobody but Neutron made, as a row's answer.
async fn own_ports(op: &dyn Neutron, net_id: &str) -> String {
    let own = op
        .list_ports(&PortQuery {
            network_id: Some(net_id.into()),
            ..Default::default()
        })
        .await
        .unwrap();
    match own.as_slice() {
        [] => "none".to_string(),
        [p] => format!(
            "{} at {}, device_id {}",
            p.device_owner,
            p.first_ip().unwrap_or("no address"),
            if p.device_id == format!("ovnmeta-{net_id}") {
                "ovnmeta-<network>"
            } else {
                p.device_id.as_str()
            }
        ),
        more => format!("{more:?}"),
    }
}

async fn table(c: &Clouds) -> Vec<(&'static str, String)> {
    let op = c.op.as_ref();
    let mut out = vec![];
    let net = op.create_network(&unique("parity")).await.unwrap();
    let sub = op
        .create_subnet(&net.id, "10.254.0.0/24", "10.254.0.1")
        .await
        .unwrap();
    let gw = op.create_router(&unique("pgw")).await.unwrap();
    let svc = op.create_router(&unique("psvc")).await.unwrap();
    let port = |ip: &str| CreatePort {
        network_id: net.id.clone(),
        ip_address: Some(ip.into()),
        name: unique("p"),
        ..Default::default()
    };

    out.push((
        "Neutron's own ports on a new subnet",
        own_ports(op, &net.id).await,
    ));
    // A subnet without DHCP, as a customer transit's: ML2/OVN's metadata port (made with the
    // network) takes no address on it.
    let bare = op.create_network(&unique("parity-bare")).await.unwrap();
    op.create_subnet_with(&CreateSubnet {
        network_id: bare.id.clone(),
        cidr: "10.253.9.0/28".into(),
        gateway_ip: "10.253.9.1".into(),
        dhcp: false,
    })
    .await
    .unwrap();
    out.push((
        "Neutron's own ports on a new subnet without DHCP",
        own_ports(op, &bare.id).await,
    ));
    // How `plan` and doctor tell whether a new network brings a port of Neutron's own: the
    // transit's ports asked for by that owner, with only the fields they read.
    let metadata = op.list_ports(&PortQuery::metadata_ports(&net.id)).await;
    out.push((
        "metadata ports by device_owner, fields narrowed",
        match metadata {
            Ok(p) => format!(
                "{} ({})",
                p.len(),
                p.iter()
                    .map(|p| p.device_owner.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            Err(e) => format!("{e}"),
        },
    ));
    // The batched resync lists many customer transits' ports and subnets in one call each
    // (repeated network_id): the answer must be each network's own list, together.
    let mut mine = vec![];
    for n in [&net.id, &bare.id] {
        let p = op
            .create_port(&CreatePort {
                network_id: n.clone(),
                name: unique("p"),
                ..Default::default()
            })
            .await;
        mine.push(p);
    }
    let both = [net.id.clone(), bare.id.clone()];
    let ports_each = |id: &str| PortQuery {
        network_id: Some(id.into()),
        ..Default::default()
    };
    let of_both = PortQuery {
        network_ids: both.to_vec(),
        ..Default::default()
    };
    let whole = op.list_ports(&of_both).await;
    let a = op.list_ports(&ports_each(&net.id)).await;
    let b = op.list_ports(&ports_each(&bare.id)).await;
    out.push((
        "ports of two networks by repeated network_id",
        together(
            whole.map(|v| ids_of(v.iter().map(|p| (&p.id, &p.network_id)))),
            a.and_then(|a| b.map(|b| ids_of(a.iter().chain(&b).map(|p| (&p.id, &p.network_id))))),
        ),
    ));
    let subnets_each = |id: &str| SubnetQuery {
        network_id: Some(id.into()),
        ..Default::default()
    };
    let of_both = SubnetQuery {
        network_ids: both.to_vec(),
        ..Default::default()
    };
    let whole = op.list_subnets(&of_both).await;
    let a = op.list_subnets(&subnets_each(&net.id)).await;
    let b = op.list_subnets(&subnets_each(&bare.id)).await;
    out.push((
        "subnets of two networks by repeated network_id",
        together(
            whole.map(|v| ids_of(v.iter().map(|s| (&s.id, &s.network_id)))),
            a.and_then(|a| b.map(|b| ids_of(a.iter().chain(&b).map(|s| (&s.id, &s.network_id))))),
        ),
    ));
    for p in mine.into_iter().flatten() {
        op.delete_port(&p.id).await.unwrap();
    }
    op.delete_network(&bare.id).await.unwrap();
    out.push((
        "tag-ports-during-bulk-creation listed",
        format!(
            "{}",
            op.extensions()
                .await
                .unwrap()
                .iter()
                .any(|e| e == "tag-ports-during-bulk-creation")
        ),
    ));
    let rev = op.get_router(&gw.id).await.unwrap().revision_number;
    let gw_leg = op.add_router_subnet(&gw.id, &sub.id).await;
    let gw_leg_id = gw_leg.as_ref().cloned().unwrap_or_default();
    out.push(("gateway leg by subnet", obs(gw_leg)));
    out.push((
        "an attached interface moves the router's revision",
        format!(
            "{}",
            op.get_router(&gw.id).await.unwrap().revision_number > rev
        ),
    ));
    let p3 = op
        .create_port(&CreatePort {
            tags: vec!["t1".into(), "t2".into()],
            ..port("10.254.0.3")
        })
        .await
        .unwrap();
    out.push((
        "create with tags in the body",
        format!("{:?}", {
            let mut t = p3.tags.clone();
            t.sort();
            t
        }),
    ));
    out.push((
        "replace all tags",
        obs(op.set_port_tags(&p3.id, &["t1".into(), "t2".into()]).await),
    ));
    out.push((
        "fixed IP taken",
        obs(op.create_port(&port("10.254.0.3")).await),
    ));
    out.push((
        "fixed IP outside subnet",
        obs(op.create_port(&port("10.254.1.3")).await),
    ));
    let with_subnet = CreatePort {
        subnet_id: Some(sub.id.clone()),
        ..port("10.254.1.3")
    };
    out.push((
        "fixed IP outside the named subnet",
        obs(op.create_port(&with_subnet).await),
    ));
    out.push((
        "invalid CIDR via PUT",
        obs(op
            .set_routes(
                &gw.id,
                &[Route::new("192.168.106.0/33", "10.254.0.11")],
                None,
            )
            .await),
    ));
    out.push(("add tag", obs(op.add_port_tag(&p3.id, "t3").await)));
    let q = PortQuery {
        network_id: Some(net.id.clone()),
        tags: vec!["t1".into(), "t3".into()],
        ..Default::default()
    };
    out.push((
        "filter tags (all)",
        format!("{}", op.list_ports(&q).await.unwrap().len()),
    ));
    let p5 = op.create_port(&port("10.254.0.5")).await.unwrap();
    op.add_port_tag(&p5.id, "t3").await.unwrap();
    let on_net = |q: PortQuery| PortQuery {
        network_id: Some(net.id.clone()),
        ..q
    };
    out.push((
        "filter tags-any",
        format!(
            "{}",
            op.list_ports(&on_net(PortQuery {
                tags_any: vec!["t1".into(), "t3".into()],
                ..Default::default()
            }))
            .await
            .unwrap()
            .len()
        ),
    ));
    out.push((
        "filter not-tags",
        format!(
            "{}",
            op.list_ports(&on_net(PortQuery {
                not_tags: vec!["t1".into(), "t3".into()],
                ..Default::default()
            }))
            .await
            .unwrap()
            .len()
        ),
    ));
    let fifty: Vec<String> = (0..50).map(|i| format!("k{i}")).collect();
    out.push(("set 50 tags", obs(op.set_port_tags(&p5.id, &fifty).await)));
    out.push(("add a 51st tag", obs(op.add_port_tag(&p5.id, "k50").await)));
    let fifty_one: Vec<String> = (0..51).map(|i| format!("k{i}")).collect();
    out.push((
        "set 51 tags",
        obs(op.set_port_tags(&p5.id, &fifty_one).await),
    ));
    let long = |n: usize| "x".repeat(n);
    out.push((
        "set duplicate tags",
        obs(op
            .set_port_tags(&p5.id, &["a".into(), "b".into(), "a".into()])
            .await),
    ));
    out.push((
        "set a tag of 256 characters",
        obs(op.set_port_tags(&p5.id, &[long(256)]).await),
    ));
    out.push((
        "set a tag of 255 characters",
        obs(op.set_port_tags(&p5.id, &[long(255)]).await),
    ));
    out.push((
        "add a tag of 256 characters",
        obs(op.add_port_tag(&p5.id, &format!("y{}", long(255))).await),
    ));
    out.push((
        "add a tag of 255 characters",
        obs(op.add_port_tag(&p5.id, &format!("y{}", long(254))).await),
    ));
    op.delete_port(&p5.id).await.unwrap();
    out.push((
        "port name of 256 characters",
        obs(op
            .create_port(&CreatePort {
                name: long(256),
                ..port("10.254.0.8")
            })
            .await),
    ));
    out.push((
        "port description of 256 characters",
        obs(op
            .create_port(&CreatePort {
                description: long(256),
                ..port("10.254.0.8")
            })
            .await),
    ));
    out.push((
        "create-body tag of 256 characters",
        obs(op
            .create_port(&CreatePort {
                tags: vec![long(256)],
                ..port("10.254.0.8")
            })
            .await),
    ));
    let at_limit = op
        .create_port(&CreatePort {
            name: "ä".repeat(255),
            description: long(255),
            ..port("10.254.0.8")
        })
        .await;
    if let Ok(p) = &at_limit {
        op.delete_port(&p.id).await.unwrap();
    }
    out.push((
        "port name (two-byte characters) and description of 255 characters",
        obs(at_limit),
    ));
    out.push((
        "attach port",
        obs(op.add_router_interface(&svc.id, &p3.id).await),
    ));
    out.push((
        "re-attach same port",
        obs(op.add_router_interface(&svc.id, &p3.id).await),
    ));
    let p4 = op.create_port(&port("10.254.0.4")).await.unwrap();
    out.push((
        "second interface on the subnet",
        obs(op.add_router_interface(&svc.id, &p4.id).await),
    ));
    out.push((
        "second interface on the subnet, Neutron's words",
        match op.add_router_interface(&svc.id, &p4.id).await {
            Err(bnerd_cloud::CloudError::Api { message, .. }) => {
                message.replace(&sub.id, "<subnet>")
            }
            other => format!("{other:?}"),
        },
    ));
    out.push((
        "delete interface port directly",
        obs(op.delete_port(&p3.id).await),
    ));
    let r1 = Route::new("192.168.101.0/24", "10.254.0.11");
    out.push((
        "add_extraroutes",
        obs(op.add_extraroutes(&svc.id, std::slice::from_ref(&r1)).await),
    ));
    out.push((
        "add_extraroutes again",
        obs(op.add_extraroutes(&svc.id, std::slice::from_ref(&r1)).await),
    ));
    out.push((
        "nexthop not connected",
        obs(op
            .add_extraroutes(&svc.id, &[Route::new("192.168.104.0/24", "10.99.0.5")])
            .await),
    ));
    out.push((
        "nexthop is the router's own",
        obs(op
            .set_routes(
                &svc.id,
                &[Route::new("192.168.105.0/24", "10.254.0.3")],
                None,
            )
            .await),
    ));
    out.push((
        "invalid CIDR",
        obs(op
            .add_extraroutes(&svc.id, &[Route::new("192.168.106.0/33", "10.254.0.11")])
            .await),
    ));
    let rev = op.get_router(&svc.id).await.unwrap().revision_number;
    out.push((
        "PUT routes stale If-Match",
        obs(op
            .set_routes(&svc.id, &[], Some(rev.saturating_sub(1)))
            .await),
    ));
    out.push((
        "remove interface needed by a route",
        obs(op.remove_router_interface(&svc.id, &p3.id).await),
    ));
    out.push((
        "remove_extraroutes",
        obs(op
            .remove_extraroutes(&svc.id, std::slice::from_ref(&r1))
            .await),
    ));
    out.push((
        "remove_extraroutes again",
        obs(op
            .remove_extraroutes(&svc.id, std::slice::from_ref(&r1))
            .await),
    ));
    let many: Vec<Route> = (0..31)
        .map(|i| Route::new(format!("172.16.{i}.0/24"), "10.254.0.20"))
        .collect();
    out.push((
        "more routes than max_routes",
        obs(op.add_extraroutes(&svc.id, &many).await),
    ));
    out.push((
        "list routers by two ids",
        obs(op
            .list_routers(&RouterQuery {
                ids: vec![gw.id.clone(), svc.id.clone()],
                ..Default::default()
            })
            .await
            .map(|r| assert_eq!(r.len(), 2, "{r:?}"))),
    ));
    out.push((
        "list ports of two routers by device_id",
        match op
            .list_ports(&PortQuery {
                device_ids: vec![gw.id.clone(), svc.id.clone()],
                ..Default::default()
            })
            .await
        {
            Ok(ports) => {
                let mut of: Vec<&str> = ports
                    .iter()
                    .filter(|p| p.is_router_interface())
                    .map(|p| if p.device_id == gw.id { "gw" } else { "svc" })
                    .collect();
                of.sort();
                of.dedup();
                format!("{of:?}")
            }
            Err(e) => format!("{e}"),
        },
    ));
    // ?fields=: only the attributes asked for come back (the drift check's reads).
    out.push((
        "list routers, fields id and routes",
        match op
            .list_routers(&RouterQuery {
                ids: vec![svc.id.clone()],
                fields: vec!["id".into(), "routes".into()],
                ..Default::default()
            })
            .await
        {
            Ok(r) => format!(
                "{} router, id {}, name {:?}, project {:?}",
                r.len(),
                r.first().is_some_and(|r| r.id == svc.id),
                r.first().map(|r| r.name.as_str()).unwrap_or("-"),
                r.first().map(|r| r.project_id.as_str()).unwrap_or("-"),
            ),
            Err(e) => format!("{e}"),
        },
    ));
    out.push((
        "list ports, fields without network_id",
        obs(op
            .list_ports(&PortQuery {
                device_ids: vec![svc.id.clone()],
                fields: vec!["id".into(), "device_id".into()],
                ..Default::default()
            })
            .await),
    ));
    out.push((
        "list ports, the drift check's fields",
        match op
            .list_ports(&PortQuery {
                device_ids: vec![svc.id.clone()],
                fields: ["id", "network_id", "device_id", "device_owner", "fixed_ips"]
                    .map(String::from)
                    .to_vec(),
                ..Default::default()
            })
            .await
        {
            Ok(ports) => format!(
                "interfaces {}, names {:?}, tags {}",
                ports
                    .iter()
                    .all(|p| p.is_interface_of(&svc.id) && !p.fixed_ips.is_empty()),
                ports
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .concat(),
                ports.iter().map(|p| p.tags.len()).sum::<usize>(),
            ),
            Err(e) => format!("{e}"),
        },
    ));
    out.push((
        "list subnets by id",
        match op
            .list_subnets(&SubnetQuery {
                ids: vec![
                    sub.id.clone(),
                    "00000000-0000-0000-0000-000000000000".into(),
                ],
                ..Default::default()
            })
            .await
        {
            Ok(subnets) => format!("{:?}", subnets.iter().map(|s| &s.cidr).collect::<Vec<_>>()),
            Err(e) => format!("{e}"),
        },
    ));
    out.push((
        "delete router with interfaces",
        obs(op.delete_router(&svc.id).await),
    ));
    out.push((
        "remove interface by port",
        obs(op.remove_router_interface(&svc.id, &p3.id).await),
    ));
    out.push(("port gone with the detach", obs(op.get_port(&p3.id).await)));
    out.push((
        "delete port after detach",
        obs(op.delete_port(&p3.id).await),
    ));
    out.push((
        "remove interface not attached",
        obs(op.remove_router_interface(&svc.id, &p4.id).await),
    ));
    out.push((
        "get missing router",
        obs(op.get_router("00000000-0000-4000-8000-000000000000").await),
    ));

    // Cross-project visibility (member credentials of two projects).
    let cust = c.cust.as_ref();
    let cnet = cust.create_network(&unique("cnet")).await.unwrap();
    let csub = cust
        .create_subnet(&cnet.id, "10.60.0.0/24", "10.60.0.1")
        .await
        .unwrap();
    let cport = cust
        .create_port(&CreatePort {
            network_id: cnet.id.clone(),
            subnet_id: Some(csub.id.clone()),
            name: unique("cp"),
            ..Default::default()
        })
        .await
        .unwrap();
    let crouter = cust.create_router(&unique("crouter")).await.unwrap();
    out.push((
        "operator port on customer router, as customer",
        obs(cust.add_router_interface(&crouter.id, &p4.id).await),
    ));
    out.push((
        "customer port on operator router, as customer",
        obs(cust.add_router_interface(&gw.id, &cport.id).await),
    ));
    out.push((
        "customer tags an operator port it cannot see",
        obs(cust.add_port_tag(&p4.id, "cust-tag").await),
    ));
    out.push((
        "customer replaces the tags of an operator port it cannot see",
        obs(cust.set_port_tags(&p4.id, &["cust-tag".into()]).await),
    ));
    let tok = c.cust_identity.token_info().await.unwrap();
    let mut roles = tok.roles.clone();
    roles.sort();
    out.push(("customer token roles", format!("{roles:?}")));
    out.push((
        "customer token names its restricted application credential",
        format!(
            "{} {:?}",
            tok.application_credential_id.is_some(),
            tok.application_credential_restricted
        ),
    ));
    out.push((
        "revoked application credential",
        obs(c.revoked.token_info().await),
    ));
    // The privilege probe (docs/crd-reference.md, "CredentialsResolved"): Neutron answers quota
    // details of a project not the caller's only when the context is cloud admin
    // (context_is_admin).
    out.push((
        "privilege probe, member application credential",
        obs(cust.probe_admin_read().await),
    ));
    out.push((
        "privilege probe, operator (member)",
        obs(op.probe_admin_read().await),
    ));
    out.push((
        "privilege probe, admin application credential",
        obs(c.priv_ac.probe_admin_read().await),
    ));
    out.push((
        "privilege probe, application credential whose role the policy makes admin",
        obs(c.policy_priv.probe_admin_read().await),
    ));
    out.push((
        "a role the policy makes admin reads the operator's network",
        obs(c.policy_priv.get_network(&net.id).await),
    ));
    // The capacity read (docs/operations.md, "Neutron's quotas"): a member reads its own
    // project's limits; router_route is a limit per router whose usage Neutron leaves at 0.
    out.push((
        "quota details of the caller's own project: limits of what the operator creates",
        match op.quota_details(&c.op_project).await {
            Ok(rows) => rows
                .iter()
                .filter(|r| {
                    [
                        "network",
                        "subnet",
                        "port",
                        "router",
                        "rbac_policy",
                        "router_route",
                    ]
                    .contains(&r.resource.as_str())
                })
                .map(|r| match (r.resource.as_str(), r.limit) {
                    ("router_route", l) => format!("router_route {} of {l:?}", r.used),
                    (name, l) => format!("{name} {l:?}"),
                })
                .collect::<Vec<_>>()
                .join(", "),
            Err(e) => obs::<()>(Err(e)),
        },
    ));
    out.push((
        "quota details of another project, member",
        obs(cust.quota_details(&c.op_project).await),
    ));

    // RBAC: the operator (network owner, member) shares its network with the customer.
    let cust_project = tok.project_id.clone();
    let shared = op.create_rbac_policy(&share(&net.id, &cust_project)).await;
    let shared_id = shared.as_ref().map(|p| p.id.clone()).unwrap_or_default();
    out.push(("share network with a project", obs(shared)));
    out.push((
        "share again",
        obs(op.create_rbac_policy(&share(&net.id, &cust_project)).await),
    ));
    out.push((
        "share with every project, as member",
        obs(op.create_rbac_policy(&share(&net.id, "*")).await),
    ));
    out.push((
        "customer shares a network it does not own",
        obs(cust.create_rbac_policy(&share(&net.id, &uuid_hex())).await),
    ));
    out.push((
        "owner lists its policies",
        format!("{}", op.list_rbac_policies(&net.id).await.unwrap().len()),
    ));
    out.push((
        "target lists the policies",
        format!("{}", cust.list_rbac_policies(&net.id).await.unwrap().len()),
    ));
    // The operator's policies on many customer transits in one call (repeated object_id).
    let other = op.create_network(&unique("parity-rbac")).await.unwrap();
    let other_share = op
        .create_rbac_policy(&share(&other.id, &cust_project))
        .await
        .unwrap();
    let two = [net.id.clone(), other.id.clone()];
    let whole = op.list_rbac_policies_of(&two).await;
    let a = op.list_rbac_policies(&net.id).await;
    let b = op.list_rbac_policies(&other.id).await;
    out.push((
        "owner lists its policies on two networks by repeated object_id",
        together(
            whole.map(|v| ids_of(v.iter().map(|r| (&r.id, &r.object_id)))),
            a.and_then(|a| b.map(|b| ids_of(a.iter().chain(&b).map(|r| (&r.id, &r.object_id))))),
        ),
    ));
    op.delete_rbac_policy(&other_share.id).await.unwrap();
    op.delete_network(&other.id).await.unwrap();
    out.push((
        "shared flag, owner's view",
        format!("{}", op.get_network(&net.id).await.unwrap().shared),
    ));
    out.push((
        "shared flag, target's view",
        format!("{}", cust.get_network(&net.id).await.unwrap().shared),
    ));
    out.push((
        "target reads the subnet",
        obs(cust.get_subnet(&sub.id).await),
    ));
    let on_shared = CreatePort {
        network_id: net.id.clone(),
        subnet_id: Some(sub.id.clone()),
        name: unique("cleg"),
        ..Default::default()
    };
    out.push((
        "customer port on shared net with ip_address",
        obs(cust
            .create_port(&CreatePort {
                ip_address: Some("10.254.0.40".into()),
                ..on_shared.clone()
            })
            .await),
    ));
    let cleg = cust.create_port(&on_shared).await;
    out.push((
        "customer port on shared net, subnet only",
        obs(cleg.clone().map(|p| {
            let ip: std::net::Ipv4Addr = p.first_ip().unwrap().parse().unwrap();
            assert!(ip.octets()[..3] == [10, 254, 0], "{ip}");
            assert_eq!(p.project_id, cust_project);
        })),
    ));
    let cleg = cleg.unwrap();
    out.push((
        "customer lists others' ports on the shared net",
        format!(
            "{}",
            cust.list_ports(&PortQuery {
                network_id: Some(net.id.clone()),
                ..Default::default()
            })
            .await
            .unwrap()
            .iter()
            .filter(|p| p.project_id != cust_project)
            .count()
        ),
    ));
    out.push((
        "customer tags its own port",
        obs(cust.add_port_tag(&cleg.id, "cust-tag").await),
    ));
    out.push((
        "withdraw share while the target has ports",
        obs(op.delete_rbac_policy(&shared_id).await),
    ));
    cust.delete_port(&cleg.id).await.unwrap();
    out.push((
        "withdraw share",
        obs(op.delete_rbac_policy(&shared_id).await),
    ));
    out.push((
        "target reads the network after withdrawal",
        obs(cust.get_network(&net.id).await),
    ));
    // A rule an admin made by hand: the owner cannot see it, yet it collides.
    let by_admin = c
        .admin
        .create_rbac_policy(&share(&net.id, &cust_project))
        .await;
    let by_admin_id = by_admin.as_ref().map(|p| p.id.clone()).unwrap_or_default();
    out.push(("admin shares the network", obs(by_admin)));
    out.push((
        "owner lists policies, admin's rule present",
        format!("{}", op.list_rbac_policies(&net.id).await.unwrap().len()),
    ));
    out.push((
        "owner shares where an admin rule exists",
        obs(op.create_rbac_policy(&share(&net.id, &cust_project)).await),
    ));
    out.push((
        "owner deletes the admin's rule",
        obs(op.delete_rbac_policy(&by_admin_id).await),
    ));
    out.push((
        "admin deletes its rule",
        obs(c.admin.delete_rbac_policy(&by_admin_id).await),
    ));
    let everyone = c.admin.create_rbac_policy(&share(&net.id, "*")).await;
    let everyone_id = everyone.as_ref().map(|p| p.id.clone()).unwrap_or_default();
    out.push(("admin shares with every project", obs(everyone)));
    out.push((
        "shared flag, owner's view, shared with every project",
        format!("{}", op.get_network(&net.id).await.unwrap().shared),
    ));
    out.push((
        "admin withdraws the share with every project",
        obs(c.admin.delete_rbac_policy(&everyone_id).await),
    ));

    out.push((
        "member creates a router for another project",
        refused(
            c,
            op.create_router_with(&CreateRouter {
                name: unique("pother"),
                project_id: Some(cust_project.clone()),
                ..Default::default()
            })
            .await,
        )
        .await,
    ));
    out.extend(router_kind_rows(c, RouterKind::Ha, &net.id, "10.254.0.6").await);
    out.extend(router_kind_rows(c, RouterKind::Dvr, &net.id, "10.254.0.7").await);

    // Tidy up (matters on the shared lab).
    cust.delete_port(&cport.id).await.unwrap();
    cust.delete_router(&crouter.id).await.unwrap();
    cust.delete_network(&cnet.id).await.unwrap();
    op.delete_port(&p4.id).await.unwrap();
    op.delete_router(&svc.id).await.unwrap();
    op.remove_router_interface(&gw.id, &gw_leg_id)
        .await
        .unwrap();
    op.delete_router(&gw.id).await.unwrap();
    op.delete_network(&net.id).await.unwrap();
    out
}

const EXPECTED: &[(&str, &str)] = &[
    ("Neutron's own ports on a new subnet", "none"),
    ("Neutron's own ports on a new subnet without DHCP", "none"),
    ("metadata ports by device_owner, fields narrowed", "0 ()"),
    (
        "ports of two networks by repeated network_id",
        "same, of both",
    ),
    (
        "subnets of two networks by repeated network_id",
        "same, of both",
    ),
    // Without ML2's tag_ports_during_bulk_creation driver (the lab's, and most clouds',
    // setup) create-body tags are dropped; `tag-creation` is listed either way and only
    // means POST /ports/{id}/tags.
    ("tag-ports-during-bulk-creation listed", "false"),
    ("gateway leg by subnet", "ok"),
    ("an attached interface moves the router's revision", "true"),
    ("create with tags in the body", "[]"),
    ("replace all tags", "ok"),
    ("fixed IP taken", "409 IpAddressAlreadyAllocated"),
    ("fixed IP outside subnet", "400 InvalidIpForNetwork"),
    (
        "fixed IP outside the named subnet",
        "400 InvalidIpForSubnet",
    ),
    ("invalid CIDR via PUT", "400 HTTPBadRequest"),
    ("add tag", "ok"),
    ("filter tags (all)", "1"),
    // On the network: the gateway's leg (no tags), p3 (t1 t2 t3), p5 (t3).
    ("filter tags-any", "2"),
    ("filter not-tags", "2"),
    ("set 50 tags", "ok"),
    ("add a 51st tag", "400 BadRequest"),
    ("set 51 tags", "400 BadRequest"),
    // "Invalid input for operation: Duplicate items in the list: 'a'."
    ("set duplicate tags", "400 InvalidInput"),
    // "Invalid input for operation: '<tag>' exceeds maximum length of 255.", checked before
    // the port is looked up.
    ("set a tag of 256 characters", "400 InvalidInput"),
    ("set a tag of 255 characters", "ok"),
    ("add a tag of 256 characters", "400 InvalidInput"),
    ("add a tag of 255 characters", "ok"),
    // "Invalid input for name. Reason: '<name>' exceeds maximum length of 255.", checked
    // before the network is looked up; characters are counted, not bytes.
    ("port name of 256 characters", "400 HTTPBadRequest"),
    ("port description of 256 characters", "400 HTTPBadRequest"),
    // Validated even by a Neutron that then drops create-body tags.
    ("create-body tag of 256 characters", "400 HTTPBadRequest"),
    (
        "port name (two-byte characters) and description of 255 characters",
        "ok",
    ),
    ("attach port", "ok"),
    ("re-attach same port", "409 PortInUse"),
    ("second interface on the subnet", "400 BadRequest"),
    (
        "second interface on the subnet, Neutron's words",
        "Bad router request: Router already has a port on subnet <subnet>.",
    ),
    ("delete interface port directly", "409 ServicePortInUse"),
    ("add_extraroutes", "ok"),
    ("add_extraroutes again", "ok"),
    ("nexthop not connected", "400 InvalidRoutes"),
    ("nexthop is the router's own", "400 InvalidRoutes"),
    ("invalid CIDR", "400 AddrFormatError"),
    (
        "PUT routes stale If-Match",
        "412 RevisionNumberConstraintFailed",
    ),
    (
        "remove interface needed by a route",
        "409 RouterInterfaceInUseByRoute",
    ),
    ("remove_extraroutes", "ok"),
    ("remove_extraroutes again", "ok"),
    ("more routes than max_routes", "409 OverQuota"),
    ("list routers by two ids", "ok"),
    (
        "list ports of two routers by device_id",
        "[\"gw\", \"svc\"]",
    ),
    (
        "list routers, fields id and routes",
        "1 router, id true, name \"\", project \"\"",
    ),
    ("list ports, fields without network_id", "- -"),
    (
        "list ports, the drift check's fields",
        "interfaces true, names \"\", tags 0",
    ),
    ("list subnets by id", "[\"10.254.0.0/24\"]"),
    ("delete router with interfaces", "409 RouterInUse"),
    ("remove interface by port", "ok"),
    ("port gone with the detach", "404 PortNotFound"),
    ("delete port after detach", "404 PortNotFound"),
    (
        "remove interface not attached",
        "404 RouterInterfaceNotFound",
    ),
    ("get missing router", "404 RouterNotFound"),
    (
        "operator port on customer router, as customer",
        "404 PortNotFound",
    ),
    (
        "customer port on operator router, as customer",
        "404 RouterNotFound",
    ),
    // Refused, not hidden: the tagging controller reads the port before policy.
    (
        "customer tags an operator port it cannot see",
        "403 PolicyNotAuthorized",
    ),
    (
        "customer replaces the tags of an operator port it cannot see",
        "403 PolicyNotAuthorized",
    ),
    ("customer token roles", "[\"member\", \"reader\"]"),
    (
        "customer token names its restricted application credential",
        "true Some(true)",
    ),
    ("revoked application credential", "keystone 404"),
    // "User does not have admin privileges: Only admin is authorized to access quotas for
    // another project." Neutron checks context.is_admin here, no policy rule.
    (
        "privilege probe, member application credential",
        "403 AdminRequired",
    ),
    ("privilege probe, operator (member)", "403 AdminRequired"),
    ("privilege probe, admin application credential", "ok"),
    (
        "privilege probe, application credential whose role the policy makes admin",
        "ok",
    ),
    // Why the probe matters: the name check passes this credential, yet it reaches other
    // projects (a member gets 404 NetworkNotFound, see "target reads the network after
    // withdrawal").
    (
        "a role the policy makes admin reads the operator's network",
        "ok",
    ),
    (
        "quota details of the caller's own project: limits of what the operator creates",
        "network None, port None, rbac_policy None, router None, router_route 0 of Some(30), subnet None",
    ),
    (
        "quota details of another project, member",
        "403 AdminRequired",
    ),
    ("share network with a project", "ok"),
    ("share again", "409 DuplicateRbacPolicy"),
    (
        "share with every project, as member",
        "403 PolicyNotAuthorized",
    ),
    (
        "customer shares a network it does not own",
        "400 InvalidInput",
    ),
    ("owner lists its policies", "1"),
    ("target lists the policies", "0"),
    (
        "owner lists its policies on two networks by repeated object_id",
        "same, of both",
    ),
    ("shared flag, owner's view", "false"),
    ("shared flag, target's view", "true"),
    ("target reads the subnet", "ok"),
    (
        "customer port on shared net with ip_address",
        "403 PolicyNotAuthorized",
    ),
    ("customer port on shared net, subnet only", "ok"),
    ("customer lists others' ports on the shared net", "0"),
    ("customer tags its own port", "ok"),
    (
        "withdraw share while the target has ports",
        "409 RbacPolicyInUse",
    ),
    ("withdraw share", "ok"),
    (
        "target reads the network after withdrawal",
        "404 NetworkNotFound",
    ),
    ("admin shares the network", "ok"),
    ("owner lists policies, admin's rule present", "0"),
    (
        "owner shares where an admin rule exists",
        "409 DuplicateRbacPolicy",
    ),
    ("owner deletes the admin's rule", "404 RbacPolicyNotFound"),
    ("admin deletes its rule", "ok"),
    ("admin shares with every project", "ok"),
    (
        "shared flag, owner's view, shared with every project",
        "true",
    ),
    ("admin withdraws the share with every project", "ok"),
    // Measured: "Specifying 'project_id' other than the authenticated project in request is
    // not allowed for the current user." (checked before the ha/distributed policy).
    (
        "member creates a router for another project",
        "400 HTTPBadRequest",
    ),
    // "(rule:create_router and rule:create_router:ha) is disallowed by policy", also for
    // ha=false. The lab (no L3 agents) creates HA and DVR routers for an admin all the same.
    ("member asks for an HA router", "403 PolicyNotAuthorized"),
    (
        "admin creates an HA router for the operator's project",
        "ok",
    ),
    ("member attaches a port to the HA router", "ok"),
    (
        "HA router interface device_owner",
        "network:ha_router_replicated_interface",
    ),
    ("re-attach the same port to the HA router", "409 PortInUse"),
    (
        "delete the HA interface port directly",
        "409 ServicePortInUse",
    ),
    ("route via the HA interface", "ok"),
    (
        "nexthop is the HA router's own interface",
        "400 InvalidRoutes",
    ),
    (
        "remove the HA interface needed by a route",
        "409 RouterInterfaceInUseByRoute",
    ),
    ("remove the HA interface by port", "ok"),
    ("HA interface port gone with the detach", "404 PortNotFound"),
    ("member deletes the HA router", "ok"),
    ("member asks for a DVR router", "403 PolicyNotAuthorized"),
    (
        "admin creates a DVR router for the operator's project",
        "ok",
    ),
    ("member attaches a port to the DVR router", "ok"),
    (
        "DVR router interface device_owner",
        "network:router_interface_distributed",
    ),
    ("re-attach the same port to the DVR router", "409 PortInUse"),
    (
        "delete the DVR interface port directly",
        "409 ServicePortInUse",
    ),
    ("route via the DVR interface", "ok"),
    (
        "nexthop is the DVR router's own interface",
        "400 InvalidRoutes",
    ),
    (
        "remove the DVR interface needed by a route",
        "409 RouterInterfaceInUseByRoute",
    ),
    ("remove the DVR interface by port", "ok"),
    (
        "DVR interface port gone with the detach",
        "404 PortNotFound",
    ),
    ("member deletes the DVR router", "ok"),
];

/// A project-ID-shaped value no project has.
fn uuid_hex() -> String {
    format!("{:032x}", std::process::id() as u128 * 7919 + 0xabcdef)
}

/// The rows that differ on a cloud whose ML2 loads `tag_ports_during_bulk_creation`.
const TAGS_AT_CREATE: &[(&str, &str)] = &[
    ("tag-ports-during-bulk-creation listed", "true"),
    ("create with tags in the body", "[\"t1\", \"t2\"]"),
];

fn check(backend: &str, got: Vec<(&'static str, String)>, tags_at_create: bool) {
    check_with(
        backend,
        got,
        if tags_at_create { TAGS_AT_CREATE } else { &[] },
    );
}

/// EXPECTED, with the rows `differ` names answered as it says.
fn check_with(backend: &str, got: Vec<(&'static str, String)>, differ: &[(&str, &'static str)]) {
    let want = |row: &str, default: &'static str| {
        differ
            .iter()
            .find(|(r, _)| *r == row)
            .map_or(default, |(_, w)| *w)
    };
    let mismatches: Vec<String> = EXPECTED
        .iter()
        .zip(got.iter())
        .filter(|((row, w), (_, have))| want(row, w) != have)
        .map(|((row, w), (_, have))| format!("{row}: want {}, {backend} gave {have}", want(row, w)))
        .collect();
    assert_eq!(got.len(), EXPECTED.len(), "{backend}: {got:?}");
    // Rows are compared by position: a table whose names drift from EXPECTED's would
    // compare one row's answer with another's expectation.
    let names: Vec<&str> = got.iter().map(|(row, _)| *row).collect();
    let want_names: Vec<&str> = EXPECTED.iter().map(|(row, _)| *row).collect();
    assert_eq!(
        names, want_names,
        "{backend}: row names differ from EXPECTED"
    );
    assert!(mismatches.is_empty(), "{}", mismatches.join("\n"));
}

async fn fake_clouds(cloud: &FakeCloud) -> Clouds {
    let (id, secret) = cloud.application_credential("customer", &["member"]);
    let cust = cloud.client_with_app_cred(&id, &secret);
    let (gone, gone_secret) = cloud.application_credential("customer", &["member"]);
    let revoked = cloud.client_with_app_cred(&gone, &gone_secret);
    revoked
        .token_info()
        .await
        .expect("works before it is revoked");
    cloud.revoke_application_credential(&gone);
    let (admin_ac, admin_secret) = cloud.application_credential("customer", &["admin"]);
    let (netop, netop_secret) =
        cloud.application_credential("customer", &["member", POLICY_PRIV_ROLE]);
    Clouds {
        op: Arc::new(cloud.client("operator")),
        cust: Arc::new(cust.clone()),
        cust_identity: Arc::new(cust),
        admin: Arc::new(cloud.admin("admin")),
        op_project: "operator".into(),
        revoked: Arc::new(revoked),
        priv_ac: Arc::new(cloud.client_with_app_cred(&admin_ac, &admin_secret)),
        policy_priv: Arc::new(cloud.client_with_app_cred(&netop, &netop_secret)),
    }
}

fn lab_clouds(env: &std::collections::BTreeMap<String, String>, op: OpenStack) -> Clouds {
    let cust = Arc::new(lab_app_cred_client(env, "CUSTOMER"));
    Clouds {
        op: Arc::new(op),
        cust: cust.clone(),
        cust_identity: cust,
        admin: Arc::new(lab_client(env, "ADMIN")),
        op_project: env
            .get("LAB_OPERATOR_PROJECT_ID")
            .cloned()
            .expect("lab.env lacks LAB_OPERATOR_PROJECT_ID"),
        revoked: Arc::new(lab_app_cred_client(env, "CUSTOMER_REVOKED")),
        priv_ac: Arc::new(lab_app_cred_client(env, "CUSTOMER_PRIV")),
        policy_priv: {
            assert!(
                env.contains_key("LAB_CUSTOMER_POLICYPRIV_AC_ID"),
                "lab.env lacks LAB_CUSTOMER_POLICYPRIV_AC_*: rerun lab/openstack/up.sh from a \
                 tree that has it (an older up.sh rewrites lab.env without it)"
            );
            Arc::new(lab_app_cred_client(env, "CUSTOMER_POLICYPRIV"))
        },
    }
}

#[tokio::test]
async fn fake_matches_design_table() {
    let c = fake_clouds(&FakeCloud::new().privileged_roles(&[POLICY_PRIV_ROLE])).await;
    check("fake", table(&c).await, false);
}

#[tokio::test]
async fn lab_matches_design_table() {
    let Some(env) = lab_or_skip("lab_matches_design_table") else {
        return;
    };
    let c = lab_clouds(&env, lab_client(&env, "OPERATOR"));
    check("lab", table(&c).await, false);
}

#[tokio::test]
async fn fake_with_tags_at_create_matches_design_table() {
    let c = fake_clouds(
        &FakeCloud::new()
            .honour_create_tags(true)
            .privileged_roles(&[POLICY_PRIV_ROLE]),
    )
    .await;
    check("fake (tags at create)", table(&c).await, true);
}

/// The rows that differ on ML2/OVN (the `ovn` mechanism driver and `ovn-router` service
/// plugin, lab/openstack/ovn.sh), measured there; the fake follows with `ml2_ovn`.
const ML2_OVN: &[(&str, &str)] = &[
    // The metadata port every DHCP subnet gets with ovn_metadata_enabled (the usual setting).
    (
        "Neutron's own ports on a new subnet",
        "network:distributed at 10.254.0.2, device_id ovnmeta-<network>",
    ),
    // ... made with the network, addressless on a subnet without DHCP.
    (
        "Neutron's own ports on a new subnet without DHCP",
        "network:distributed at no address, device_id ovnmeta-<network>",
    ),
    // ... found by its owner, as `plan` and doctor ask for it.
    (
        "metadata ports by device_owner, fields narrowed",
        "1 (network:distributed)",
    ),
    // ... which carries no tags, so a not-tags query finds it too.
    ("filter not-tags", "3"),
    // ovn-router's router-subnet check compares CIDRs, and words it so.
    (
        "second interface on the subnet, Neutron's words",
        "Bad router request: Cidr 10.254.0.0/24 of subnet <subnet> overlaps with cidr 10.254.0.0/24 of subnet <subnet>.",
    ),
    // OVN routers are not HA routers in Neutron's sense: their interfaces are plain ones.
    (
        "HA router interface device_owner",
        "network:router_interface",
    ),
    // No `dvr`: `distributed` is an attribute the API does not know, for anyone.
    ("member asks for a DVR router", "400 HTTPBadRequest"),
    (
        "admin creates a DVR router for the operator's project",
        "400 HTTPBadRequest",
    ),
    ("member attaches a port to the DVR router", NO_ROUTER),
    ("DVR router interface device_owner", NO_ROUTER),
    ("re-attach the same port to the DVR router", NO_ROUTER),
    ("delete the DVR interface port directly", NO_ROUTER),
    ("route via the DVR interface", NO_ROUTER),
    ("nexthop is the DVR router's own interface", NO_ROUTER),
    ("remove the DVR interface needed by a route", NO_ROUTER),
    ("remove the DVR interface by port", NO_ROUTER),
    ("DVR interface port gone with the detach", NO_ROUTER),
    ("member deletes the DVR router", NO_ROUTER),
];

#[tokio::test]
async fn fake_ml2_ovn_matches_design_table() {
    let c = fake_clouds(
        &FakeCloud::new()
            .ml2_ovn(true)
            .privileged_roles(&[POLICY_PRIV_ROLE]),
    )
    .await;
    check_with("fake (ML2/OVN)", table(&c).await, ML2_OVN);
}

/// The lab's third Neutron: ML2/OVN, its own database, region RegionOVN.
#[tokio::test]
async fn lab_ml2_ovn_matches_design_table() {
    let Some(env) = ovn_lab_or_skip("lab_ml2_ovn_matches_design_table") else {
        return;
    };
    let c = lab_clouds(&env, lab_client(&env, "OPERATOR"));
    check_with("lab (ML2/OVN)", table(&c).await, ML2_OVN);
}

/// The rows that differ on Neutron 2025.1 (lab/openstack/older.sh), measured there; the fake
/// follows with `up_to_2026_1` (docs/design.md, "How Neutron releases differ").
const NEUTRON_2025_1: &[(&str, &str)] = &[
    // The server's max_routes, not the router_route quota.
    ("more routes than max_routes", "400 RoutesExhausted"),
    // ... which is no quota resource there either.
    (
        "quota details of the caller's own project: limits of what the operator creates",
        "network None, port None, rbac_policy None, router None, subnet None",
    ),
];

#[tokio::test]
async fn fake_2025_1_matches_design_table() {
    let c = fake_clouds(
        &FakeCloud::new()
            .up_to_2026_1()
            .privileged_roles(&[POLICY_PRIV_ROLE]),
    )
    .await;
    check_with("fake (2025.1)", table(&c).await, NEUTRON_2025_1);
}

/// The lab's older Neutron: release 2025.1, its own database, region Region2025.
#[tokio::test]
async fn lab_2025_1_matches_design_table() {
    let Some(env) = lab_or_skip("lab_2025_1_matches_design_table") else {
        return;
    };
    let env = bnerd_testkit::on_2025_1(env);
    let c = lab_clouds(&env, lab_client(&env, "OPERATOR"));
    check_with("lab (2025.1)", table(&c).await, NEUTRON_2025_1);
}

/// The lab's second Neutron API: same database, ML2 with tag_ports_during_bulk_creation.
#[tokio::test]
async fn lab_with_tags_at_create_matches_design_table() {
    let Some(env) = lab_or_skip("lab_with_tags_at_create_matches_design_table") else {
        return;
    };
    let c = lab_clouds(&env, lab_tagged_client(&env));
    check("lab (tags at create)", table(&c).await, true);
}
