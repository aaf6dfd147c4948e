//! The crash-point suite (docs/performance.md, "Crash points"): a reconcile (or the delete's
//! unwind) is stopped after every k-th cloud call, the way a pod killed at that moment stops, and a
//! fresh engine with empty memory converges from what is left: the cloud as the dead one left it
//! and the status as last written before it (the status write comes after the reconcile, so a
//! dropped reconcile writes none). After each point: converged, no orphan port, no duplicate leg,
//! no route whose nexthop no port of the link holds, and a status true to the cloud.
//!
//! Each stop comes in two kinds: before call k reaches the cloud, and after call k committed
//! with its answer lost ("timeout after commit", then the pod dies). Scenarios: create,
//! resync, resync repairing drift, CIDR change, router change, pinned transitIP change
//! (same-tenant only: a cross-tenant pin can only adopt) and delete; same-tenant and
//! cross-tenant; one gateway with a reverse exposure throughout, so reverse routes are in
//! every one. The fake runs every k of both kinds; the lab runs a sample drawn with a fresh
//! seed each run, printed (`BNERD_CRASH_SEED=<seed>` repeats a run's sample, so runs cover
//! every point over time; `BNERD_CRASH_LAB_POINTS` per test, default 4;
//! `BNERD_CRASH_LAB_POINTS=all` is the full run). The point counts go to `test.sh`, which
//! holds them to the figures of `docs/performance.md`.
//! The harness (stage, point, converge, invariants) lives in `support/`, shared with the
//! faults at every call in `faults.rs`.

mod support;

use bnerd_cloud_fake::FakeCloud;
use bnerd_testkit::crash::{Crash, Kind, Sample};
use bnerd_testkit::report;
use bnerd_testkit::{fake_env, fake_env_with, lab_env_for};
use support::{SCENARIOS, Scenario, Stage, point};

/// The fake clouds every point runs on: the default (tags in a create body dropped, as on
/// the lab), one that keeps them, and one without extraroute-atomic (If-Match routes).
fn clouds() -> [(&'static str, FakeCloud); 3] {
    [
        ("default", FakeCloud::new()),
        ("tags at create", FakeCloud::new().honour_create_tags(true)),
        (
            "If-Match routes",
            FakeCloud::new().without_extension("extraroute-atomic"),
        ),
    ]
}

/// Every k of both kinds on the fake; returns the number of crash points covered.
async fn every_point(cross: bool) -> usize {
    let mut total = 0;
    for (cloud_name, cloud) in clouds() {
        let stage = Stage::new(fake_env_with(cloud).await, cross).await;
        for scenario in SCENARIOS {
            if cross && scenario == Scenario::PinnedIpChange {
                continue;
            }
            let (_, calls) = point(&stage, scenario, Crash::counting(), "uncrashed").await;
            let mut here = 0;
            for kind in Kind::ALL {
                for k in 0.. {
                    let what = format!("{cloud_name}: stopped {kind:?} at call {k}");
                    let (tripped, _) = point(&stage, scenario, Crash::at(k, kind), &what).await;
                    if !tripped {
                        break;
                    }
                    here += 1;
                }
            }
            eprintln!(
                "crash points {scenario:?}{} on the fake ({cloud_name}): {here} ({calls} calls, both kinds)",
                if cross { " cross-tenant" } else { "" }
            );
            total += here;
        }
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_every_crash_point_same_tenant() {
    let n = every_point(false).await;
    eprintln!("crash points covered on the fake, same-tenant: {n}");
    report::count("crash_points.fake.same_tenant", n);
    assert!(n > 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fake_every_crash_point_cross_tenant() {
    let n = every_point(true).await;
    eprintln!("crash points covered on the fake, cross-tenant: {n}");
    report::count("crash_points.fake.cross_tenant", n);
    assert!(n > 0);
}

/// Finding 1 of the suite: a cross-tenant router change whose process died after the old leg
/// was removed (its detach deletes it) and before the new one was made: status still named
/// the old router and address, so the new leg at a Neutron-picked address read as "the leg
/// came back elsewhere" and the link was held at TransitIPMismatch until a human recreated
/// it. Found at RouterChange cross-tenant, stopped before call 11 (the list after
/// remove_router_interface).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finding_cross_tenant_move_stopped_between_old_and_new_leg() {
    let stage = Stage::new(fake_env().await, true).await;
    let counting = Crash::counting();
    point(
        &stage,
        Scenario::RouterChange,
        counting.clone(),
        "uncrashed",
    )
    .await;
    let log = counting.log();
    let detach = log
        .iter()
        .position(|c| *c == "remove_router_interface")
        .expect("the move detaches the old leg");
    for k in [detach + 1, detach + 2] {
        let what = format!("stopped Before at call {k}, after the old leg went");
        point(
            &stage,
            Scenario::RouterChange,
            Crash::at(k, Kind::Before),
            &what,
        )
        .await;
    }
}

/// The lab sample's seed: `BNERD_CRASH_SEED`, or a fresh one from the clock, so successive
/// runs draw different points and cover all of them over time.
fn seed() -> u64 {
    match std::env::var("BNERD_CRASH_SEED") {
        Ok(s) => s
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("BNERD_CRASH_SEED={s:?} is not a u64")),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    }
}

/// Points per lab test (one per tenancy), drawn across every scenario: a number, or `all`.
/// Four by default: a point costs some 35 real Neutron calls (a link brought to where its
/// scenario starts, the stopped run, the converge, the checks, the delete), 5-30 s depending
/// on the machine's load, and the file must stay near two minutes; the fake covers every
/// point.
fn lab_points() -> Option<usize> {
    match std::env::var("BNERD_CRASH_LAB_POINTS").ok().as_deref() {
        Some("all") => None,
        Some(n) => Some(n.parse().unwrap_or(4)),
        None => Some(4),
    }
}

/// How many calls the scenario makes, counted on the fake (which answers as the lab does,
/// tests/parity.rs): the lab's points are drawn among them without a lab run to count.
async fn calls_on_the_fake(scenario: Scenario, cross: bool) -> usize {
    let stage = Stage::new(fake_env().await, cross).await;
    point(&stage, scenario, Crash::counting(), "uncrashed")
        .await
        .1
}

/// A sample of the points on the lab, drawn by the seed among every scenario's calls.
async fn lab_sample(cross: bool, test: &str) {
    let base = seed();
    let mut space = vec![];
    for scenario in SCENARIOS {
        if cross && scenario == Scenario::PinnedIpChange {
            continue;
        }
        for k in 0..calls_on_the_fake(scenario, cross).await {
            for kind in Kind::ALL {
                space.push((scenario, k, kind));
            }
        }
    }
    let picks = Sample::new(base ^ u64::from(cross))
        .distinct(lab_points().unwrap_or(space.len()), space.len());
    let picks: Vec<_> = picks.iter().map(|i| space[*i]).collect();
    let tenancy = if cross { "cross_tenant" } else { "same_tenant" };
    // The space counts whether or not a lab runs: its size is a figure of the docs.
    report::count(&format!("crash_points.lab_space.{tenancy}"), space.len());
    let Some(env) = lab_env_for(test).await else {
        return;
    };
    report::note(&format!(
        "{test}: BNERD_CRASH_SEED={base}, {} of {} points: {picks:?}",
        picks.len(),
        space.len()
    ));
    let stage = Stage::new(env, cross).await;
    let started = std::time::Instant::now();
    for (scenario, k, kind) in &picks {
        let what = format!("lab: stopped {kind:?} at call {k}");
        let (tripped, _) = point(&stage, *scenario, Crash::at(*k, *kind), &what).await;
        assert!(
            tripped,
            "{scenario:?}: the lab made fewer calls than the fake; the fake no longer answers as the lab does"
        );
    }
    eprintln!(
        "{test}: {} crash points in {:?}",
        picks.len(),
        started.elapsed()
    );
    stage.teardown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lab_sampled_crash_points_same_tenant() {
    lab_sample(false, "crash_points::lab_sampled_crash_points_same_tenant").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lab_sampled_crash_points_cross_tenant() {
    lab_sample(true, "crash_points::lab_sampled_crash_points_cross_tenant").await;
}
