//! Fault injection on the fake: a failure at any write leaves nothing behind and the next
//! reconcile converges without duplicates; and every fault at every call position of a
//! scenario (`every_call`, on the crash-point harness in `support/`).

mod support;

use bnerd_cloud_fake::{Fault, Op};
use bnerd_engine::Retry;
use bnerd_testkit::{fake_env, spec};

fn api_error(status: u16, kind: &str) -> Fault {
    Fault::Error {
        status,
        kind: kind.into(),
        message: "injected".into(),
    }
}

#[tokio::test]
async fn transient_errors_back_off_then_converge() {
    for op in [
        Op::CreatePort,
        Op::SetPortTags,
        Op::AddRouterInterface,
        Op::AddExtraroutes,
        Op::ListPorts,
        Op::GetRouter,
    ] {
        let mut env = fake_env().await;
        let cloud = env.fake.clone().expect("fake");
        let svc = env.router("svc").await;
        env.add_link("l", spec(&svc.id, "10.251.0.0/16", None));
        cloud.inject(op, api_error(503, "ServiceUnavailable"), 1);
        let out = env.reconcile("l").await;
        assert_eq!(
            out.retry,
            Retry::Backoff,
            "{op:?}: a 503 is retried with backoff"
        );
        assert_eq!(env.condition("l", "Ready").0, "False", "{op:?}");
        let out = env.reconcile("l").await;
        assert_eq!(out.retry, Retry::Resync, "{op:?}");
        assert_eq!(
            env.condition("l", "Ready").0,
            "True",
            "{op:?}: {:?}",
            out.status.conditions
        );
        assert_eq!(env.ports().await.len(), 2, "{op:?}: no duplicate leg");
    }
}

#[tokio::test]
async fn commit_then_timeout_never_duplicates() {
    for op in [
        Op::CreatePort,
        Op::SetPortTags,
        Op::AddRouterInterface,
        Op::AddExtraroutes,
    ] {
        let mut env = fake_env().await;
        let cloud = env.fake.clone().expect("fake");
        let svc = env.router("svc").await;
        env.add_link("l", spec(&svc.id, "10.251.0.0/16", None));
        cloud.inject(op, Fault::CommitThenTimeout, 1);
        env.reconcile("l").await;
        assert_eq!(env.condition("l", "Ready").0, "False", "{op:?}");
        env.reconcile("l").await;
        assert_eq!(
            env.condition("l", "Ready").0,
            "True",
            "{op:?}: {:?}",
            env.link("l").status
        );
        assert_eq!(
            env.transit_ip("l").as_deref(),
            Some("10.254.0.3"),
            "{op:?}: the committed port is found again"
        );
        assert_eq!(env.ports().await.len(), 2, "{op:?}: no duplicate leg");
        let gw = env.get_router(&env.fabric.gateway_router_id).await;
        assert_eq!(gw.routes.len(), 1, "{op:?}");
    }
}

#[tokio::test]
async fn terminal_errors_wait_for_resync_and_cleanup_survives_faults() {
    let mut env = fake_env().await;
    let cloud = env.fake.clone().expect("fake");
    let svc = env.router("svc").await;
    env.add_link("l", spec(&svc.id, "10.251.0.0/16", None));
    cloud.inject(Op::AddExtraroutes, api_error(400, "InvalidRoutes"), 1);
    let out = env.reconcile("l").await;
    assert_eq!(out.retry, Retry::Resync, "a 400 is not retried in a loop");
    assert_eq!(env.condition("l", "RouteInstalled").1, "EnsureRouteFailed");
    assert_eq!(
        env.condition("l", "LegAttached").0,
        "True",
        "earlier steps keep their state"
    );
    env.reconcile("l").await;
    assert_eq!(env.condition("l", "Ready").0, "True");
    // Unwind with the detach's answer lost: the port is gone anyway, delete counts 404 as done.
    cloud.inject(Op::RemoveRouterInterface, Fault::CommitThenTimeout, 1);
    let l = env.link("l").clone();
    let status = l.status.clone().unwrap_or_default();
    let input = bnerd_testkit::link_input(&l, &status, &[], &[]).expect("uid");
    let unwind = || bnerd_testkit::unwind_same_tenant(env.net.as_ref(), &env.fabric, &input, &[]);
    assert!(unwind().await.is_err(), "the timeout is reported");
    unwind().await.expect("second unwind finishes");
    assert_eq!(
        env.ports().await.len(),
        1,
        "only the gateway's own leg is left"
    );
    assert!(
        env.get_router(&env.fabric.gateway_router_id)
            .await
            .routes
            .is_empty()
    );
}

/// Faults at every call: each fault at each call position of a
/// scenario's reconcile (or unwind), then a fresh engine converges; afterwards no leak and
/// the same invariants as the crash points (`support::check`). The faults: 500, 503, 429
/// (what is left after the client honoured Retry-After), a timeout after the write
/// committed, 409 from a concurrent writer, 412 on If-Match.
mod every_call {
    use bnerd_cloud::CloudError;
    use bnerd_cloud_fake::FakeCloud;
    use bnerd_testkit::crash::Crash;
    use bnerd_testkit::fake_env_with;

    use bnerd_engine::Retry;

    use super::support::{Scenario, Stage, point, point_with};

    fn api(status: u16, kind: &str) -> CloudError {
        CloudError::Api {
            method: "PUT".into(),
            path: "/injected".into(),
            status,
            kind: kind.into(),
            message: "injected".into(),
        }
    }

    /// (name, error, committed first).
    fn faults() -> Vec<(&'static str, CloudError, bool)> {
        vec![
            ("500", api(500, "InternalServerError"), false),
            ("503", api(503, "ServiceUnavailable"), false),
            ("429", api(429, "OverLimit"), false),
            (
                "timeout after commit",
                CloudError::Timeout {
                    method: "PUT".into(),
                    path: "/injected".into(),
                },
                true,
            ),
            ("409 concurrent writer", api(409, "Conflict"), false),
            (
                "412 If-Match",
                api(412, "RevisionNumberConstraintFailed"),
                false,
            ),
        ]
    }

    const SCENARIOS: [Scenario; 5] = [
        Scenario::Create,
        Scenario::ResyncDrift,
        Scenario::CidrChange,
        Scenario::RouterChange,
        Scenario::Delete,
    ];

    /// Every fault at every call of every scenario on this cloud; the points covered.
    async fn every(cloud: impl Fn() -> FakeCloud, cross: bool) -> usize {
        let mut covered = 0;
        for scenario in SCENARIOS {
            let stage = Stage::new(fake_env_with(cloud()).await, cross).await;
            let (_, calls) = point(&stage, scenario, Crash::counting(), "unfaulted").await;
            // Runs a retryable fault left failed: what the retry check below looked at.
            let mut checked = 0;
            for (name, error, commit) in faults() {
                for k in 0..calls {
                    let what = format!("{name} at call {k}");
                    let crash = Crash::fail_at(k, error.clone(), commit);
                    let (_, _, ended) = point_with(&stage, scenario, crash, &what).await;
                    // Weather is retried soon (backoff, or the fixed 15 s for a
                    // credential step), never left to the resync interval; a delete's
                    // unwind says so by its failure's `retryable` (support::unwind_retry).
                    if let Some(e) = ended.filter(|e| !e.done && error.is_retryable()) {
                        assert_ne!(
                            e.retry,
                            Retry::Resync,
                            "{scenario:?} {what}: a retryable fault waits for the resync interval"
                        );
                        checked += 1;
                    }
                    covered += 1;
                }
            }
            assert!(
                checked > 0,
                "{scenario:?}: no retryable fault left a run failed, so no retry was checked"
            );
        }
        covered
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_fault_at_each_call_same_tenant() {
        let n = every(FakeCloud::new, false).await;
        eprintln!("faults at every call, same-tenant: {n} points");
        bnerd_testkit::report::count("faults.same_tenant", n);
    }

    /// Without extraroute-atomic every route change is a GET + PUT with If-Match: a 412
    /// there is the revision race the retry loop is for.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_fault_at_each_call_if_match_routes() {
        let n = every(
            || FakeCloud::new().without_extension("extraroute-atomic"),
            false,
        )
        .await;
        eprintln!("faults at every call, If-Match routes: {n} points");
        bnerd_testkit::report::count("faults.if_match_routes", n);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn each_fault_at_each_call_cross_tenant() {
        let n = every(FakeCloud::new, true).await;
        eprintln!("faults at every call, cross-tenant: {n} points");
        bnerd_testkit::report::count("faults.cross_tenant", n);
    }
}
