use bnerd_cloud::refusals::{self, SubnetRef};
use bnerd_cloud::{FixedIp, Port, PortQuery, Route, Router};

use super::{Known, Neutron, Overlay, PlannedWrite, Recorded};

fn port(id: &str, router: &str, ip: &str, tags: &[&str]) -> Port {
    Port {
        id: id.into(),
        network_id: "transit".into(),
        device_id: router.into(),
        device_owner: if router.is_empty() {
            String::new()
        } else {
            bnerd_cloud::OWNER_ROUTER_INTERFACE.into()
        },
        fixed_ips: vec![FixedIp {
            subnet_id: "transit-subnet".into(),
            ip_address: ip.into(),
        }],
        tags: tags.iter().map(|t| t.to_string()).collect(),
        ..Default::default()
    }
}

fn transit() -> Known {
    Known::network(
        "transit",
        vec![
            port("p1", "r1", "10.254.0.3", &["bnerd-vpn-operator"]),
            port("p2", "", "10.254.0.4", &[]),
        ],
    )
    .with_subnet(bnerd_cloud::Subnet {
        id: "transit-subnet".into(),
        network_id: "transit".into(),
        cidr: "10.254.0.0/24".into(),
        ..Default::default()
    })
    .with_devices(
        &["r1".into(), "r2".into()],
        vec![port("p1", "r1", "10.254.0.3", &["bnerd-vpn-operator"])],
    )
}

fn ids(ports: &[Port]) -> Vec<&str> {
    ports.iter().map(|p| p.id.as_str()).collect()
}

/// Any query on a network whose every port is known is answered by its fields, as Neutron
/// filters: not only the one query the steps happen to make today.
#[tokio::test]
async fn known_ports_answer_every_query_on_their_network() {
    let known = transit();
    let o = Overlay::of(&known);
    let on = |f: fn(&mut PortQuery)| {
        let mut q = PortQuery {
            network_id: Some("transit".into()),
            ..Default::default()
        };
        f(&mut q);
        q
    };
    let rows: Vec<(&str, PortQuery, Vec<&str>)> = vec![
        ("the whole network", on(|_| {}), vec!["p1", "p2"]),
        (
            "by tag",
            on(|q| q.tags = vec!["bnerd-vpn-operator".into()]),
            vec!["p1"],
        ),
        (
            "by address",
            on(|q| q.ip_address = Some("10.254.0.4".into())),
            vec!["p2"],
        ),
        (
            "by router",
            on(|q| q.device_ids = vec!["r1".into()]),
            vec!["p1"],
        ),
        (
            "a router's interfaces, asked by router alone",
            PortQuery {
                device_ids: vec!["r1".into()],
                ..Default::default()
            },
            vec!["p1"],
        ),
    ];
    for (rule, q, want) in rows {
        assert_eq!(ids(&o.list_ports(&q).await.unwrap()), want, "{rule}");
    }
    assert!(o.recorded().is_empty(), "{:?}", o.recorded());
    // Another network's ports are not known: a miss, recorded, no answer.
    let other = PortQuery {
        network_id: Some("elsewhere".into()),
        ..Default::default()
    };
    assert!(o.list_ports(&other).await.is_err());
    assert!(matches!(o.recorded().as_slice(), [Recorded::Miss(_)]));
    // Nor are the ports of a router whose ports were not listed.
    let unknown_router = PortQuery {
        device_ids: vec!["r9".into()],
        ..Default::default()
    };
    assert!(o.list_ports(&unknown_router).await.is_err());
    assert_eq!(o.recorded().len(), 2);
}

/// Writes are answered as Neutron answers them, refusals in the fake's words, and later
/// reads see them.
#[tokio::test]
async fn writes_are_answered_as_neutron_would() {
    let known = transit();
    known.learn_router(Router {
        id: "r1".into(),
        routes: vec![Route::new("10.90.0.0/16", "10.254.0.3")],
        ..Default::default()
    });
    known.learn_router(Router {
        id: "r2".into(),
        ..Default::default()
    });
    let o = Overlay::of(&known);
    let attach = |r: &str| format!("/routers/{r}/add_router_interface");
    let detach = |r: &str| format!("/routers/{r}/remove_router_interface");
    // p1 is attached already.
    assert_eq!(
        o.add_router_interface("r2", "p1").await,
        Err(refusals::port_in_use(&attach("r2"), "p1", "transit", "r1"))
    );
    // p2 is no interface of r1.
    assert_eq!(
        o.remove_router_interface("r1", "p2").await,
        Err(refusals::router_interface_not_found(
            &detach("r1"),
            "r1",
            "p2"
        ))
    );
    // r1 routes via p1's subnet.
    assert_eq!(
        o.remove_router_interface("r1", "p1").await,
        Err(refusals::router_interface_in_use_by_route(
            &detach("r1"),
            "r1",
            "transit-subnet"
        ))
    );
    // An interface port cannot be deleted directly.
    assert_eq!(
        o.delete_port("p1").await,
        Err(refusals::service_port_in_use(
            "/ports/p1",
            "p1",
            bnerd_cloud::OWNER_ROUTER_INTERFACE
        ))
    );
    // A second interface on the transit subnet.
    o.add_router_interface("r2", "p2").await.unwrap();
    let created = o
        .create_port(&bnerd_cloud::CreatePort {
            network_id: "transit".into(),
            subnet_id: Some("transit-subnet".into()),
            ip_address: Some("10.254.0.9".into()),
            name: "leg".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let transit = SubnetRef {
        id: "transit-subnet",
        cidr: "",
    };
    assert_eq!(
        o.add_router_interface("r2", &created.id).await,
        Err(refusals::second_router_interface_refused(
            &attach("r2"),
            false,
            transit,
            transit
        ))
    );
    // Later reads see the writes: p2 on r2, the new port on the network; deleted, it is gone.
    let on_r2 = PortQuery {
        device_ids: vec!["r2".into()],
        ..Default::default()
    };
    assert_eq!(ids(&o.list_ports(&on_r2).await.unwrap()), vec!["p2"]);
    o.delete_port(&created.id).await.unwrap();
    let gone = format!("/ports/{}", created.id);
    assert_eq!(
        o.get_port(&created.id).await,
        Err(refusals::port_not_found("GET", &gone, &created.id))
    );
    assert_eq!(
        o.writes(),
        vec![
            PlannedWrite::Attach {
                router_id: "r2".into(),
                port_id: "p2".into()
            },
            PlannedWrite::CreatePort {
                network_id: "transit".into(),
                ip_address: Some("10.254.0.9".into()),
                name: "leg".into()
            },
            PlannedWrite::DeletePort {
                port_id: created.id.clone()
            },
        ]
    );
}
