//! Lost and stale writes, at the engine level: the status patch that
//! fails after the cloud writes (then the CIDR changes, then the link is deleted), the status
//! patch answered 409, an informer cache stale by one generation, and two engines
//! reconciling the same link at once without leader election. On the fake and on the lab;
//! each lab test removes its fabric when it ends.

mod support;

use std::sync::atomic::{AtomicUsize, Ordering};

use bnerd_api::ClusterLink;
use bnerd_testkit::crash::Crash;
use bnerd_testkit::{fake_env, lab_env_for};
use support::{
    CIDR_NEW, GW_PORT_IP, Point, Scenario, Stage, check, converge, converge_delete, own, point,
    prepare, reconcile_with, unwind_with,
};

/// Run `body` on the fake, and on the lab when one is up (its fabric removed afterwards).
macro_rules! fake_and_lab {
    ($name:ident, $cross:expr) => {
        mod $name {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn fake() {
                let stage = super::Stage::new(super::fake_env().await, $cross).await;
                super::$name(&stage).await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn lab() {
                let test = concat!("lost_writes::", stringify!($name), "::lab");
                if let Some(env) = super::lab_env_for(test).await {
                    let stage = super::Stage::new(env, $cross).await;
                    super::$name(&stage).await;
                    stage.teardown().await;
                }
            }
        }
    };
}

/// The scenarios to run: all on the fake; the first alone on the lab, where a point costs
/// seconds of real Neutron and the file must stay near two minutes (the fake runs them all
/// with the same code).
fn on_the_lab_first(stage: &Stage, all: &[Scenario]) -> Vec<Scenario> {
    match stage.env.fake {
        Some(_) => all.to_vec(),
        None => all[..1].to_vec(),
    }
}

/// The damage two writers may leave while neither has settled the other's work: no route
/// on the gateway router to an address no leg of the link holds, no route on a service
/// router but the reverse one.
async fn bounded(stage: &Stage, p: &Point, at: &str) {
    let uid = p.link.metadata.uid.clone().unwrap_or_default();
    let legs = own(&stage.env.ports().await, &uid);
    for r in stage.env.gateway_routes().await {
        assert!(
            legs.iter().any(|l| l.has_ip(&r.nexthop)),
            "{at}: gateway route {r:?} to an address the link does not hold"
        );
    }
    for id in [&p.a, &p.b] {
        let routes = stage
            .leg_client()
            .get_router(id)
            .await
            .expect("router")
            .routes;
        assert!(
            routes.iter().all(|r| r.nexthop == GW_PORT_IP),
            "{at}: a route on service router {id} that is not the reverse one: {routes:?}"
        );
    }
}

/// "The status patch fails after the cloud writes, then the CIDR changes, then the link is
/// deleted: nothing may be left."
async fn status_lost_then_cidr_change_then_delete(stage: &Stage) {
    for reconcile_between in [false, true] {
        let mut p = prepare(stage, Scenario::Create).await;
        let at = format!("lost status, reconcile after the CIDR change: {reconcile_between}");
        // Every status patch is lost: the link keeps the status it had (none).
        let out = reconcile_with(stage, &p.link, &Crash::counting()).await;
        assert!(
            support::ready(&out.status),
            "{at}: {:?}",
            out.status.conditions
        );
        p.link.spec.service_cluster_cidr = CIDR_NEW.into();
        p.link.metadata.generation = Some(2);
        if reconcile_between {
            reconcile_with(stage, &p.link, &Crash::counting()).await;
            let routes = stage.env.gateway_routes().await;
            assert_eq!(
                routes.len(),
                1,
                "{at}: the route moved, not copied: {routes:?}"
            );
            assert_eq!(routes[0].destination, CIDR_NEW, "{at}");
        }
        assert!(p.link.status.is_none(), "no status was ever written");
        converge_delete(stage, &p.link, &at).await;
        check(stage, &p, None, &at).await;
    }
}
fake_and_lab!(status_lost_then_cidr_change_then_delete, false);

mod status_lost_cross_tenant {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fake() {
        let stage = super::Stage::new(super::fake_env().await, true).await;
        super::status_lost_then_cidr_change_then_delete(&stage).await;
    }
}

/// "The apiserver answers 409 on the status patch": the reconcile's cloud writes stand, its
/// status does not; the next reconcile (from the old status) must not build them twice.
async fn status_conflict_never_duplicates(stage: &Stage) {
    for scenario in [
        Scenario::Create,
        Scenario::CidrChange,
        Scenario::RouterChange,
    ] {
        let mut p = prepare(stage, scenario).await;
        let at = format!("{scenario:?}, status patch answered 409 three times");
        for _ in 0..3 {
            reconcile_with(stage, &p.link, &Crash::counting()).await;
            bounded(stage, &p, &at).await;
            let uid = p.link.metadata.uid.clone().unwrap_or_default();
            let legs = own(&stage.env.ports().await, &uid);
            assert_eq!(legs.len(), 1, "{at}: duplicate legs {legs:#?}");
        }
        converge(stage, &mut p.link, &at).await;
        check(stage, &p, Some(&p.link.clone()), &at).await;
        converge_delete(stage, &p.link, &at).await;
    }
}
fake_and_lab!(status_conflict_never_duplicates, false);

/// "The informer cache is stale by one generation": a reconcile with the previous spec and
/// status runs after a newer one did. It may undo the newer one for a moment (it cannot know
/// better), never beyond the link's own leg and routes, and the next one converges.
async fn stale_cache_by_one_generation(stage: &Stage) {
    for scenario in on_the_lab_first(
        stage,
        &[
            Scenario::RouterChange,
            Scenario::CidrChange,
            Scenario::PinnedIpChange,
        ],
    ) {
        if stage.side.is_some() && scenario == Scenario::PinnedIpChange {
            continue;
        }
        let mut p = prepare(stage, scenario).await;
        let at = format!("{scenario:?} with a stale cache");
        // prepare() converged generation 1 and changed the spec: recover generation 1 as the
        // cache last held it.
        let mut old: ClusterLink = p.link.clone();
        old.metadata.generation = Some(1);
        old.spec.service_cluster_cidr = support::CIDR.into();
        old.spec.service_cluster_router = p.a.clone();
        if scenario == Scenario::PinnedIpChange {
            old.spec.transit_ip = Some(support::PIN.into());
        }
        // The newer one runs and its status lands.
        converge(stage, &mut p.link, &at).await;
        // Then the stale one: its status (from generation 1's view) lands over it.
        let out = reconcile_with(stage, &old, &Crash::counting()).await;
        bounded(stage, &p, &at).await;
        p.link.status = Some(out.status);
        // The watch delivers the current object again: it converges from there.
        converge(stage, &mut p.link, &at).await;
        check(stage, &p, Some(&p.link.clone()), &at).await;
        converge_delete(stage, &p.link, &at).await;
        check(stage, &p, None, &at).await;
    }
}
fake_and_lab!(stale_cache_by_one_generation, false);

mod stale_cache_cross_tenant {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fake() {
        let stage = super::Stage::new(super::fake_env().await, true).await;
        super::stale_cache_by_one_generation(&stage).await;
    }
}

/// Where the second engine starts.
enum Offsets {
    /// Before each call the first engine makes, and after its last: the scenario's calls
    /// counted first on this stage, run alone (as the crash-point suites count theirs).
    EveryCall,
    /// These alone (the lab, where each costs seconds of real Neutron).
    These(std::ops::Range<usize>),
}

/// Two engines reconcile the same link at once without leader election, interleaved call by
/// call at every offset: the damage is bounded while they run, and a final converge from
/// whichever status landed last leaves exactly the link's one leg and routes.
async fn two_engines_at_once(stage: &Stage, offsets: Offsets) {
    for scenario in [
        Scenario::Create,
        Scenario::CidrChange,
        Scenario::RouterChange,
        Scenario::Delete,
    ] {
        if stage.env.fake.is_none()
            && matches!(scenario, Scenario::CidrChange | Scenario::RouterChange)
        {
            continue;
        }
        let (range, calls) = match &offsets {
            Offsets::EveryCall => {
                let (_, calls) = point(stage, scenario, Crash::counting(), "alone").await;
                (0..calls + 1, Some(calls))
            }
            Offsets::These(r) => (r.clone(), None),
        };
        let mut ran = vec![];
        for offset in range {
            ran.push(offset);
            {
                let p = prepare(stage, scenario).await;
                let at = format!("{scenario:?}, second engine {offset} calls behind");
                let (c1, c2) = (Crash::interleaved(0), Crash::interleaved(offset));
                if scenario == Scenario::Delete {
                    // One engine unwinds the deleted link while the other, its cache not yet
                    // showing the delete, reconciles it.
                    let order = AtomicUsize::new(0);
                    let ((gone, a_at), (out, b_at)) = tokio::join!(
                        async {
                            let r = unwind_with(stage, &p.link, &c1).await;
                            (r, order.fetch_add(1, Ordering::SeqCst))
                        },
                        async {
                            let o = reconcile_with(stage, &p.link, &c2).await;
                            (o, order.fetch_add(1, Ordering::SeqCst))
                        }
                    );
                    let mut late = p.link.clone();
                    late.status = Some(out.status);
                    match gone {
                        // The finalizer went first: the reconciling engine's status patch
                        // answers 404 and it unwinds what it built (the controller's
                        // unwind_gone).
                        Ok(()) if a_at < b_at => {
                            converge_delete(stage, &late, &format!("{at}, after the 404")).await;
                        }
                        // Its status landed on the deleting object before the finalizer went:
                        // nothing runs for the link again.
                        Ok(()) => {}
                        // The unwind failed (the other writer in its way): it runs again,
                        // from the status that landed last.
                        Err(_) => {
                            converge_delete(stage, &late, &at).await;
                        }
                    }
                    bounded(stage, &p, &at).await;
                    check(stage, &p, None, &at).await;
                    continue;
                }
                let (o1, o2) = tokio::join!(
                    reconcile_with(stage, &p.link, &c1),
                    reconcile_with(stage, &p.link, &c2)
                );
                bounded(stage, &p, &at).await;
                // The apiserver keeps whichever status patch lands last; try both.
                for last in [o1.status.clone(), o2.status.clone()] {
                    let mut l = p.link.clone();
                    l.status = Some(last);
                    converge(stage, &mut l, &at).await;
                    check(stage, &p, Some(&l), &at).await;
                }
                converge_delete(stage, &p.link, &at).await;
                check(stage, &p, None, &at).await;
            }
        }
        // Every call of the scenario had the second engine start before it, and one offset
        // started it after the last.
        if let Some(calls) = calls {
            assert!(
                (0..=calls).all(|k| ran.contains(&k)),
                "{scenario:?}: the second engine started at offsets {ran:?}, not before each of \
                 the {calls} calls of the first and after its last"
            );
            eprintln!(
                "two engines, {scenario:?}{}: {} offsets ({calls} calls)",
                if stage.side.is_some() {
                    " cross-tenant"
                } else {
                    ""
                },
                ran.len()
            );
        }
    }
}

mod two_engines {
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fake() {
        let stage = super::Stage::new(super::fake_env().await, false).await;
        super::two_engines_at_once(&stage, super::Offsets::EveryCall).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fake_cross_tenant() {
        let stage = super::Stage::new(super::fake_env().await, true).await;
        super::two_engines_at_once(&stage, super::Offsets::EveryCall).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lab() {
        if let Some(env) = super::lab_env_for("lost_writes::two_engines::lab").await {
            let stage = super::Stage::new(env, false).await;
            // Create and delete racing a reconcile, the second engine one call behind.
            super::two_engines_at_once(&stage, super::Offsets::These(1..2)).await;
            stage.teardown().await;
        }
    }
}
