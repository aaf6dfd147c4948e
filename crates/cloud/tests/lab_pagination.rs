//! Paged lists against the real lab Neutron (29.0.0, `lab/openstack/up.sh`).
//!
//! What it answers to `GET /v2.0/ports?limit=2` (measured): absolute links built from the
//! request's Host header, filters kept, and a `next` on every full page, so a list whose size
//! is a multiple of the page size ends with one empty page:
//!
//! ```text
//! {"ports": [..2..], "ports_links": [
//!   {"rel": "next", "href": "http://127.0.0.1:9696/v2.0/ports?limit=2&marker=<last id>"},
//!   {"rel": "previous", "href": "http://127.0.0.1:9696/v2.0/ports?limit=2&marker=<first id>&page_reverse=True"}]}
//! ```
//!
//! The last page carries only `previous`. `limit=0` means no limit; `/extensions` ignores
//! `limit` and is never paged.

use std::collections::BTreeSet;

use bnerd_cloud::{CreatePort, Neutron, OpenStack, PortQuery, RouterQuery};
use bnerd_testkit::{lab_client, lab_or_skip, unique};

fn reads(c: &OpenStack) -> u64 {
    c.call_counts().0
}

#[tokio::test]
async fn lab_lists_follow_neutron_pages() {
    let test = "lab_lists_follow_neutron_pages";
    let Some(env) = lab_or_skip(test) else {
        return;
    };
    let plain = lab_client(&env, "OPERATOR");
    let paged = lab_client(&env, "OPERATOR").with_page_size(2);

    // Objects of our own, so other tests on the shared lab cannot change what is listed.
    let net = plain
        .create_network(&unique("paging"))
        .await
        .expect("network");
    let mut ports = BTreeSet::new();
    for i in 0..5 {
        let p = plain
            .create_port(&CreatePort {
                network_id: net.id.clone(),
                name: format!("paging-{i}"),
                ..Default::default()
            })
            .await
            .expect("port");
        ports.insert(p.id);
    }
    let mut routers = BTreeSet::new();
    for _ in 0..4 {
        let r = plain
            .create_router(&unique("paging"))
            .await
            .expect("router");
        routers.insert(r.id);
    }

    let pq = PortQuery {
        network_id: Some(net.id.clone()),
        ..Default::default()
    };
    let rq = RouterQuery {
        ids: routers.iter().cloned().collect(),
        ..Default::default()
    };
    let r0 = reads(&paged);
    let paged_ports = paged.list_ports(&pq).await;
    let r1 = reads(&paged);
    let paged_routers = paged.list_routers(&rq).await;
    let r2 = reads(&paged);
    let p0 = reads(&plain);
    let plain_ports = plain.list_ports(&pq).await;
    let plain_routers = plain.list_routers(&rq).await;
    let p1 = reads(&plain);

    // Clean up before asserting, so a failure leaves nothing behind on the shared lab.
    for id in &ports {
        if let Err(e) = plain.delete_port(id).await {
            eprintln!("{test}: cleanup port {id}: {e}");
        }
    }
    for id in &routers {
        if let Err(e) = plain.delete_router(id).await {
            eprintln!("{test}: cleanup router {id}: {e}");
        }
    }
    if let Err(e) = plain.delete_network(&net.id).await {
        eprintln!("{test}: cleanup network {}: {e}", net.id);
    }

    let ids = |v: Vec<String>| v.into_iter().collect::<BTreeSet<_>>();
    let paged_ports = ids(paged_ports
        .expect("paged ports")
        .into_iter()
        .map(|p| p.id)
        .collect());
    let plain_ports = ids(plain_ports
        .expect("ports")
        .into_iter()
        .map(|p| p.id)
        .collect());
    let paged_routers = ids(paged_routers
        .expect("paged routers")
        .into_iter()
        .map(|r| r.id)
        .collect());
    let plain_routers = ids(plain_routers
        .expect("routers")
        .into_iter()
        .map(|r| r.id)
        .collect());
    eprintln!(
        "{test}: 5 ports in {} reads, 4 routers in {} reads at limit=2; unpaged: {} reads for both",
        r1 - r0,
        r2 - r1,
        p1 - p0
    );
    assert_eq!(paged_ports, ports);
    assert_eq!(plain_ports, ports);
    assert_eq!(paged_routers, routers);
    assert_eq!(plain_routers, routers);
    assert_eq!(p1 - p0, 2, "unpaged, each list is one read");
    assert_eq!(r1 - r0, 3, "5 ports at 2 a page: 2 + 2 + 1");
    assert_eq!(
        r2 - r1,
        3,
        "4 routers at 2 a page: 2 + 2, and the empty page the last full page links to"
    );
}
