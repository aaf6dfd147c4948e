//! What kubectl-clusterlink's `doctor` finds on cloud state the operator's engine made: here
//! rather than in the CLI crate, so that the CLI does not depend on the operator.

use std::sync::Arc;

use bnerd_cloud::{CreatePort, Neutron, Route};
use bnerd_clusterlink_cli::doctor::{Finding, diagnose};
use bnerd_testkit::{Env, both, spec, unique};

async fn findings(env: &Env) -> Vec<Finding> {
    let report = diagnose(
        env.net.as_ref(),
        &env.fabric.transit_network_id,
        &env.fabric.gateway_router_id,
        &env.links,
    )
    .await;
    assert_eq!(report.unchecked, None, "{report:?}");
    report.findings
}

fn problems(f: &[Finding]) -> Vec<String> {
    f.iter()
        .filter(|f| f.problem)
        .map(|f| f.text.clone())
        .collect()
}

async fn doctor_finds_what_is_wrong(mut env: Env) {
    let a = env.router("doc-a").await;
    env.add_link("healthy", spec(&a.id, "10.71.0.0/16", None));
    env.reconcile("healthy").await;
    let f = findings(&env).await;
    assert!(problems(&f).is_empty(), "{f:?}");
    assert!(
        f.iter()
            .any(|f| f.text.starts_with("ClusterLink healthy: Ready")),
        "{f:?}"
    );

    // A link whose object vanished without its unwind (finalizer stripped by hand).
    let b = env.router("doc-b").await;
    env.add_link("gone", spec(&b.id, "10.72.0.0/16", None));
    env.reconcile("gone").await;
    let gone_port = env.leg_port_id("gone");
    env.links
        .retain(|l| l.metadata.name.as_deref() != Some("gone"));
    // A route to an address nobody holds, and a hand-made one via an untagged port.
    let gw = env.fabric.gateway_router_id.clone();
    let dead = Route::new("10.73.0.0/16", "10.254.0.200");
    env.add_routes(&gw, std::slice::from_ref(&dead))
        .await
        .unwrap();
    let hand = env.port_at_ip("10.254.0.201", &unique("hand")).await;
    let manual = Route::new("10.74.0.0/16", "10.254.0.201");
    env.add_routes(&gw, std::slice::from_ref(&manual))
        .await
        .unwrap();
    env.add_link("broken", spec(&a.id, "10.75.0.1/16", None));
    env.reconcile("broken").await;

    let f = findings(&env).await;
    let p = problems(&f);
    assert_eq!(p.len(), 4, "{p:#?}");
    assert!(
        p.iter().any(|t| t.contains(&gone_port)
            && t.contains("ClusterLink gone, which no longer exists")
            && t.contains(&format!(
                "openstack router remove port {} {gone_port}",
                b.id
            ))),
        "{p:#?}"
    );
    assert!(
        p.iter()
            .any(|t| t.contains("route 10.72.0.0/16 via 10.254.0.4")
                && t.contains(&gone_port)
                && t.contains("remove the route first")),
        "{p:#?}"
    );
    assert!(
        p.iter()
            .any(|t| t.contains("route 10.73.0.0/16 via 10.254.0.200: no port holds")),
        "{p:#?}"
    );
    assert!(
        p.iter()
            .any(|t| t.starts_with("ClusterLink broken: not Ready, Validated=False InvalidSpec")),
        "{p:#?}"
    );
    assert!(
        f.iter().any(|f| !f.problem
            && f.text.contains("10.74.0.0/16 via 10.254.0.201")
            && f.text.contains("hand-made")),
        "{f:?}"
    );

    // Following the hints makes the cloud problems go away.
    env.remove_routes(
        &gw,
        &[dead, manual, Route::new("10.72.0.0/16", "10.254.0.4")],
    )
    .await
    .unwrap();
    env.net
        .remove_router_interface(&b.id, &gone_port)
        .await
        .unwrap();
    env.net.delete_port(&hand.id).await.unwrap();
    env.delete("broken").await;
    let f = findings(&env).await;
    assert!(problems(&f).is_empty(), "{f:#?}");
    env.delete("healthy").await;
}
both!(doctor_finds_what_is_wrong);

/// "A marked port of another project is never adopted, kept, unwound or trusted as a nexthop;
/// it is reported (Warning Event and `doctor`)": a port someone else made on the transit
/// network, carrying a live link's UID.
async fn doctor_names_a_forged_leg_marker(mut env: Env) {
    let a = env.router("doc-f").await;
    env.add_link("marked", spec(&a.id, "10.76.0.0/16", None));
    env.reconcile("marked").await;
    env.assert_ready("marked");
    let uid = env.link("marked").metadata.uid.clone().unwrap();
    // A cloud admin's port is in the admin's project, not the operator's.
    let admin: Arc<dyn Neutron> = match &env.fake {
        Some(cloud) => Arc::new(cloud.admin("admin")),
        None => Arc::new(bnerd_testkit::lab_client(
            &bnerd_testkit::lab_env().expect("lab.env"),
            "ADMIN",
        )),
    };
    let forged = admin
        .create_port(&CreatePort {
            network_id: env.fabric.transit_network_id.clone(),
            ip_address: Some("10.254.0.210".into()),
            name: "forged".into(),
            description: format!("clusterlink-uid={uid}"),
            ..Default::default()
        })
        .await
        .expect("forged port");
    let p = problems(&findings(&env).await);
    assert!(
        p.iter().any(|t| t.contains(&forged.id)
            && t.contains("carries the UID of ClusterLink marked")
            && t.contains("not that link's leg")),
        "{p:#?}"
    );
    admin.delete_port(&forged.id).await.unwrap();
    env.delete("marked").await;
}
both!(doctor_names_a_forged_leg_marker);

/// `doctor` prints the operator project's capacity as the operator reads it: a row per limit,
/// a warning naming the raise command at 80 %, and how many more links of each kind fit,
/// before a create is refused.
#[tokio::test]
async fn doctor_forecasts_the_limits_before_neutron_refuses() {
    let env =
        bnerd_testkit::fake_env_with(bnerd_cloud_fake::FakeCloud::new().default_quotas()).await;
    // The gateway router and seven more: 8 of Neutron's default 10 routers.
    let mut routers = vec![];
    for i in 0..7 {
        routers.push(env.router(&format!("cap-{i}")).await);
    }
    let mut env = env;
    env.add_link("cap-a", spec(&routers[0].id, "10.81.0.0/16", None));
    env.reconcile("cap-a").await;
    env.add_link("cap-b", spec(&routers[1].id, "10.82.0.0/16", None));
    env.reconcile("cap-b").await;
    let f = findings(&env).await;
    let capacity: Vec<(bool, &str)> = f
        .iter()
        .filter(|f| f.text.starts_with("capacity: "))
        .map(|f| (f.warning, f.text.as_str()))
        .collect();
    let project = &env.fabric.operator_project_id;
    assert!(
        capacity.contains(&(
            true,
            format!("capacity: router: 8 of 10 (80 %); to raise it: openstack quota set --routers <n> {project}").as_str()
        )),
        "{capacity:#?}"
    );
    assert!(
        capacity.contains(&(
            false,
            "capacity: routes on the gateway router: 2 of 30 (6 %)"
        )),
        "{capacity:#?}"
    );
    assert!(
        capacity.contains(&(
            false,
            "capacity: room for 28 more same-tenant links, 10 more Shared customer projects, 2 more PerCustomer customer projects"
        )),
        "{capacity:#?}"
    );
    assert!(problems(&f).is_empty(), "{f:?}");
}
