//! Kubernetes glue: watch ClusterLinks and, inside the finalizer, take each through the
//! engine's door (`LinkEngine`: observe → engine → write status with server-side apply →
//! publish the engine's `events`; docs/design.md, "The door into the engine"). A converged
//! link is offered the window's shared snapshot (`engine::resync`); reverse targets come from
//! the gateway index (`gateways`). What every piece shares is `context.rs`; the Events are
//! published by `link_events.rs`; the drift check between resyncs is `drift_check.rs`, and a
//! link it finds drifted is reconciled at once.

use std::sync::Arc;

use bnerd_api::gateway::ReverseTarget;
use bnerd_api::names::{FIELD_MANAGER, FINALIZER};
use bnerd_api::{ClusterLink, ClusterLinkStatus, ConditionType, EventReason};
use bnerd_cloud::OpenStack;
use bnerd_cloud::fabric::Fabric;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use thiserror::Error;
use tracing::{Instrument, debug, info, warn};

use crate::config::Config;
use crate::context::Context;
use crate::drift_check::watch_drift;
use crate::engine::plan::unwind::abandoned;
use crate::engine::resync::aligned_requeue;
use crate::engine::{
    Batch, Held, Input, OperatorIdentity, Peer, Reconciled, ResyncPath, Retry, Unwound,
    deleting_status, events, failed_status, unwound_events,
};
use crate::finalizer;
use crate::gateways::{NotSynced, fan_out};
use crate::health::Health;
use crate::link_events::{emit, publish, warn_gateway};
use crate::metrics::{Metrics, ReconcileResult};

#[derive(Debug, Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("unwinding cloud resources: {0}")]
    Unwind(String),
    #[error("object has no metadata.uid")]
    NoUid,
    #[error(transparent)]
    Targets(#[from] NotSynced),
}

/// How long a reconcile waits for the gateway index's first sync before it gives up and is
/// retried (the unwind must never read an unsynced index as "no targets").
const TARGETS_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Other links' claims, from the informer cache.
pub fn peers_of(me: &ClusterLink, all: &[Arc<ClusterLink>]) -> Vec<Peer> {
    crate::engine::view::peers_of(me, all.iter().map(|l| l.as_ref()))
}

/// The engine's view of one ClusterLink object.
pub fn link_input<'a>(
    link: &'a ClusterLink,
    status: &'a ClusterLinkStatus,
    peers: &'a [Peer],
    targets: &'a [ReverseTarget],
) -> Result<Input<'a>, Error> {
    crate::engine::view::input_of(link, status, peers, targets).ok_or(Error::NoUid)
}

/// A link Ready at its current generation, with its reverse routes in place, before this
/// reconcile: whatever the reconcile had to change again was changed out of band (self-heal).
/// Ready alone no longer says so: it reflects the forward path, and a link whose reverse
/// routes failed still has work of its own to finish.
fn was_converged(link: &ClusterLink, status: &ClusterLinkStatus) -> bool {
    [ConditionType::Ready, ConditionType::ReverseRoutesInstalled]
        .iter()
        .all(|t| crate::engine::view::true_at_generation(link, status, *t))
}

/// Observe, run the engine, write status, publish Events, requeue.
async fn apply(
    link: Arc<ClusterLink>,
    ctx: &Context,
    retrying: &std::sync::atomic::AtomicBool,
) -> Result<Action, Error> {
    let name = link.name_any();
    let status = link.status.clone().unwrap_or_default();
    let all = ctx.links.state();
    let peers = peers_of(&link, &all);
    let targets = ctx.targets.current(TARGETS_WAIT).await?;
    let input = link_input(&link, &status, &peers, &targets)?;
    let converged = was_converged(&link, &status);

    // A converged link resyncs from the window's shared snapshot of every same-tenant link's
    // service router (listed only when the snapshot is taken), unless the drift check sent it:
    // the snapshot may predate what the check saw.
    let routers = || crate::engine::view::same_tenant_routers(all.iter().map(AsRef::as_ref));
    let drifted = ctx.drifted.take(&name);
    let batch = (converged && !drifted).then_some(Batch {
        snapshots: &ctx.snapshots,
        routers: &routers,
    });
    let source = ctx.customers.source(&ctx.client, &name);
    let Reconciled { outcome, resync } = ctx
        .engine_for(&source)
        .with_batch(batch)
        .reconcile(&input)
        .await;
    if let Some(path) = &resync {
        debug!(clusterlink = %name, path = ?path, "resync");
        ctx.metrics.resynced(path.as_str());
    }
    let from_snapshot = matches!(resync, Some(ResyncPath::Snapshot | ResyncPath::Replayed(_)));
    if !from_snapshot && (outcome.status != status || !outcome.actions.is_empty()) {
        ctx.snapshots.invalidate().await;
    }

    if outcome.status != status {
        match write_status(ctx, &name, &outcome.status).await {
            Ok(()) => {}
            Err(e) if is_gone(&e) => {
                return unwind_gone(&link, ctx, &outcome.status, &targets).await;
            }
            Err(e) => return Err(e),
        }
    }
    ctx.metrics
        .link_conditions(&name, &outcome.status.conditions);
    if outcome.probe_unavailable {
        warn!(clusterlink = %name, "the cloud does not serve the privilege probe; the customer credential was admitted on its role names alone");
        ctx.metrics.privilege_probe_unavailable();
    }
    retrying.store(
        !matches!(outcome.retry, Retry::Resync),
        std::sync::atomic::Ordering::Relaxed,
    );

    let reference = link.object_ref(&());
    let seen = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    for e in events(&status, &outcome, converged, &seen) {
        emit(ctx, &reference, &name, e).await;
    }
    for p in &outcome.gateway_problems {
        warn_gateway(ctx, &name, p, &targets).await;
    }
    Ok(match outcome.retry {
        Retry::Resync => {
            ctx.backoff.reset(&name);
            // Onto a shared window boundary, so the next resyncs share one snapshot.
            Action::requeue(aligned_requeue(
                ctx.config.resync_interval,
                std::time::SystemTime::now(),
            ))
        }
        Retry::Backoff => Action::requeue(ctx.backoff.next_delay(&name)),
        Retry::After(d) => {
            ctx.backoff.reset(&name);
            Action::requeue(d)
        }
    })
}

/// Write a link's whole status (server-side apply, our field manager).
async fn write_status(ctx: &Context, name: &str, status: &ClusterLinkStatus) -> Result<(), Error> {
    let api: Api<ClusterLink> = Api::all(ctx.client.clone());
    let patch =
        json!({"apiVersion": "ipsec.bnerd.net/v1alpha1", "kind": "ClusterLink", "status": status});
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await?;
    Ok(())
}

/// The apiserver no longer has the object.
fn is_gone(e: &Error) -> bool {
    matches!(e, Error::Kube(kube::Error::Api(ae)) if ae.code == 404)
}

/// The link went away while this reconcile ran (its status patch answered 404): a delete
/// finished meanwhile, by another replica running without leader election or while this
/// one's cache had not seen it yet. What this reconcile just built has no owner left and no
/// finalizer will come for it: unwind it now, from the status this reconcile computed.
/// Best effort: the object is gone, so nothing requeues it; what is left is logged (and
/// `kubectl clusterlink doctor` finds it by its tag).
async fn unwind_gone(
    link: &ClusterLink,
    ctx: &Context,
    status: &ClusterLinkStatus,
    targets: &[ReverseTarget],
) -> Result<Action, Error> {
    let name = link.name_any();
    warn!(clusterlink = %name, "the link was deleted while it was reconciled; unwinding what this reconcile built");
    let input = link_input(link, status, &[], targets)?;
    let source = ctx.customers.source(&ctx.client, &name);
    let unwound = ctx.engine_for(&source).unwind(&input, targets).await;
    ctx.customers.forget(&name);
    ctx.backoff.reset(&name);
    ctx.metrics.forget_link(&name);
    let left = match unwound {
        Unwound::Done(_) => return Ok(Action::await_change()),
        Unwound::Stuck(f) => f.message,
        Unwound::Held(held) => held.fail.message,
    };
    warn!(clusterlink = %name, "unwinding after the delete failed, left behind: {left}");
    Err(Error::Unwind(left))
}

/// A deleting link whose unwind is stuck: its status says why, once, with a Warning Event.
async fn report_stuck(
    ctx: &Context,
    link: &ClusterLink,
    status: &ClusterLinkStatus,
    stuck: &ClusterLinkStatus,
    f: &crate::engine::StepFail,
) -> Result<(), Error> {
    if stuck == status {
        return Ok(());
    }
    let name = link.name_any();
    write_status(ctx, &name, stuck).await?;
    // A stuck delete is a failure like any other: its gauges must stop saying Ready and the
    // failure counter must see its reason.
    ctx.metrics.link_conditions(&name, &stuck.conditions);
    publish(
        ctx,
        &link.object_ref(&()),
        EventType::Warning,
        f.reason.as_str(),
        &f.message,
    )
    .await;
    Ok(())
}

async fn remove(link: Arc<ClusterLink>, ctx: &Context) -> Result<Action, Error> {
    let name = link.name_any();
    let status = link.status.clone().unwrap_or_default();
    // Routes matching a current reverse target go before the detach even when status lost
    // them: an index not yet synced is an error (retried), never "no targets".
    let targets = ctx.targets.current(TARGETS_WAIT).await?;
    let input = link_input(&link, &status, &[], &targets)?;
    let source = ctx.customers.source(&ctx.client, &name);
    let done = match ctx.engine_for(&source).unwind(&input, &targets).await {
        Unwound::Done(done) => done,
        Unwound::Held(held) => return hold_or_abandon(&link, ctx, &status, held).await,
        Unwound::Stuck(f) => {
            let stuck = deleting_status(&status, &f, link.metadata.generation);
            report_stuck(ctx, &link, &status, &stuck, &f).await?;
            return Err(Error::Unwind(f.message));
        }
    };
    ctx.customers.forget(&name);
    ctx.metrics.forget_link(&name);
    info!(clusterlink = %name, "unwound gateway route, attachment and leg port");
    let reference = link.object_ref(&());
    for e in unwound_events(&done) {
        emit(ctx, &reference, &name, e).await;
    }
    ctx.backoff.reset(&link.name_any());
    Ok(Action::await_change())
}

/// A deleting cross-tenant link whose customer side is out of reach (CredentialsResolved=False)
/// or refuses its unwind (Ready=False/Deleting): held until that is fixed — or released,
/// leaving the customer side behind, when a human set the abandon annotation (never the
/// operator).
async fn hold_or_abandon(
    link: &ClusterLink,
    ctx: &Context,
    status: &ClusterLinkStatus,
    held: Held,
) -> Result<Action, Error> {
    let name = link.name_any();
    let reference = link.object_ref(&());
    if held.released_by(link) {
        // What stays, then why it could not go (a blocked customer transit names the ports
        // of the customer's that stand on it).
        let note = format!("{}; held because: {}", abandoned(status), held.fail.message);
        warn!(clusterlink = %name, "{note}");
        publish(
            ctx,
            &reference,
            EventType::Warning,
            EventReason::CustomerResourcesAbandoned.as_str(),
            &note,
        )
        .await;
        ctx.customers.forget(&name);
        ctx.metrics.forget_link(&name);
        ctx.backoff.reset(&name);
        return Ok(Action::await_change());
    }
    let stuck = failed_status(status, held.condition, &held.fail, link.metadata.generation);
    report_stuck(ctx, link, status, &stuck, &held.fail).await?;
    let why = match held.gateway_route {
        Ok(()) => held.fail.message,
        Err(f) => format!("{}; {}", f.message, held.fail.message),
    };
    Err(Error::Unwind(why))
}

async fn reconcile(link: Arc<ClusterLink>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = std::time::Instant::now();
    let span = tracing::info_span!("reconcile", clusterlink = %link.name_any());
    let retrying = std::sync::atomic::AtomicBool::new(false);
    let done = through_finalizer(link, &ctx, &retrying)
        .instrument(span)
        .await;
    let result = match &done {
        Err(_) => ReconcileResult::Error,
        Ok(_) if retrying.load(std::sync::atomic::Ordering::Relaxed) => ReconcileResult::Retry,
        Ok(_) => ReconcileResult::Ok,
    };
    ctx.metrics.reconciled(result, started.elapsed());
    done
}

/// Apply a live link (adding the finalizer first, in the same pass), unwind a deleting one
/// and then release it.
async fn through_finalizer(
    link: Arc<ClusterLink>,
    ctx: &Context,
    retrying: &std::sync::atomic::AtomicBool,
) -> Result<Action, Error> {
    let api: Api<ClusterLink> = Api::all(ctx.client.clone());
    match finalizer::step(&link, FINALIZER) {
        finalizer::Step::Apply => apply(link, ctx, retrying).await,
        finalizer::Step::AddThenApply => {
            let link = finalizer::add(&api, &link, FINALIZER).await?;
            apply(Arc::new(link), ctx, retrying).await
        }
        finalizer::Step::Cleanup(i) => {
            let action = remove(link.clone(), ctx).await?;
            finalizer::remove(&api, &link, i, FINALIZER).await?;
            Ok(action)
        }
        finalizer::Step::Nothing => Ok(Action::await_change()),
    }
}

fn error_policy(link: Arc<ClusterLink>, err: &Error, ctx: Arc<Context>) -> Action {
    let name = link.name_any();
    let delay = ctx.backoff.next_delay(&name);
    warn!(clusterlink = %name, error = %err, retry_in = ?delay, "reconcile failed");
    Action::requeue(delay)
}

/// What the controller reports to, besides Kubernetes.
pub struct Observers {
    pub metrics: Arc<Metrics>,
    pub health: Arc<Health>,
}

/// Run the ClusterLink controller until `stop` turns true; reconciles in flight then finish.
pub async fn run(
    client: Client,
    cloud: Arc<OpenStack>,
    operator: OperatorIdentity,
    fabric: Fabric,
    config: Config,
    observers: Observers,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let links: Api<ClusterLink> = Api::all(client.clone());
    // A rotated Secret is picked up at once: `clusterlink-<name>` maps to its link. Only the
    // credentials namespace is watched (the chart's Role allows nothing else).
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &config.credentials_namespace);
    let controller = Controller::new(links, watcher::Config::default().any_semantic())
        .watches(secrets, watcher::Config::default(), |s: Secret| {
            s.name_any()
                .strip_prefix("clusterlink-")
                .map(ObjectRef::<ClusterLink>::new)
        })
        .with_config(kube::runtime::controller::Config::default().concurrency(config.concurrency));
    let reporter = Reporter {
        controller: "bnerd-vpn-operator".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let drift_check_interval = config.drift_check_interval;
    let (reconcile_now, drifted) = futures::channel::mpsc::unbounded();
    let client_for_events = client.clone();
    let ctx = Arc::new(Context::new(
        client,
        Recorder::new(client_for_events, reporter),
        cloud,
        operator,
        fabric,
        config,
        controller.store(),
        observers.metrics,
    ));
    let store = ctx.links.clone();
    let index = ctx.targets.clone();
    let health = observers.health;
    // Ready once the links and both gateway kinds are listed: before that a reconcile could
    // only wait for them.
    let synced = async move {
        if store.wait_until_ready().await.is_ok() {
            info!("ClusterLink cache synced");
            index.wait_synced().await;
            health.set_synced(true);
            info!("gateway index synced");
        }
        std::future::pending::<()>().await
    };
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
    };
    let drift_check = watch_drift(ctx.clone(), drift_check_interval, reconcile_now);
    let synced = async move {
        tokio::join!(synced, drift_check);
    };
    let run = controller
        .reconcile_all_on(fan_out(ctx.client.clone(), ctx.targets.clone()))
        .reconcile_on(drifted)
        .graceful_shutdown_on(stopped)
        .run(reconcile, error_policy, ctx)
        .for_each(|res| async move {
            if let Err(e) = res {
                tracing::debug!(error = %e, "controller event");
            }
        });
    tokio::select! {
        () = run => {}
        () = synced => {}
    }
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod mock_apiserver_tests;
