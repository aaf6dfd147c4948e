//! Kubernetes glue: watch ClusterLinks and, inside the finalizer, take each through the
//! engine's door (`LinkEngine`: observe → engine → write status with server-side apply →
//! publish the engine's `events`; docs/design.md, "The door into the engine"). A converged
//! link is offered the window's shared snapshot (`engine::resync`); reverse targets come from
//! the gateway index (`gateways`). The next hop of every recorded gateway route is checked on
//! a short interval of its own ([`legs_to_check`], `engine::resync::check_legs`); a leg gone
//! or moved reconciles its link at once.
//!
//! Past 500 lines because every piece of the finalizer's two arms (apply, and remove with its
//! cross-tenant hold/abandon) shares the status, Event and backoff helpers here; splitting
//! them would only move those helpers to a module both halves import.

use std::sync::Arc;

use bnerd_api::gateway::ReverseTarget;
use bnerd_api::names::{FIELD_MANAGER, FINALIZER};
use bnerd_api::{ClusterLink, ClusterLinkStatus, ConditionType, EventReason};
use bnerd_cloud::Neutron;
use bnerd_cloud::OpenStack;
use bnerd_cloud::fabric::Fabric;
use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::events::{Event as KubeEvent, EventType, Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::reflector::Store;
use kube::runtime::watcher;
use kube::{Client, Resource, ResourceExt};
use serde_json::json;
use thiserror::Error;
use tracing::{Instrument, debug, info, warn};

use crate::backoff::Backoff;
use crate::config::Config;
use crate::customers::{CustomerClients, LinkSource};
use crate::engine::plan::unwind::abandoned;
use crate::engine::resync::{RecordedLeg, Snapshots, aligned_requeue, check_legs, resync_window};
use crate::engine::{
    Batch, Counted, Customers, GatewayProblem, Held, Input, LinkEngine, LinkEvent,
    OperatorIdentity, Peer, Reconciled, ResyncPath, Retry, Severity, Unwound, deleting_status,
    events, failed_status, unwound_events,
};
use crate::finalizer;
use crate::gateways::{NotSynced, TargetIndex, fan_out};
use crate::health::Health;
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

pub struct Context {
    pub client: Client,
    pub net: Arc<dyn Neutron>,
    /// Who the operator is (cross-tenant credentials are checked against it).
    pub operator: OperatorIdentity,
    /// One cached client per cross-tenant link.
    pub customers: CustomerClients,
    pub fabric: Fabric,
    pub config: Config,
    pub recorder: Recorder,
    pub backoff: Backoff,
    pub links: Store<ClusterLink>,
    /// Every gateway's reverse target, kept by the gateway watches.
    pub targets: TargetIndex,
    /// The resync window's shared reads (engine::resync).
    pub snapshots: Snapshots,
    pub metrics: Arc<Metrics>,
    /// The gateway Warnings already published (each once, not per link and reconcile).
    pub gateway_warnings: crate::gateway_warnings::GatewayWarnings,
}

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

/// The engine for `link`: its tenancy from its spec, its customer's credential through the
/// link's own Secret reader.
fn engine_for<'a>(
    ctx: &'a Context,
    link: &ClusterLink,
    source: &'a LinkSource<'a>,
) -> LinkEngine<'a> {
    LinkEngine::for_link(
        ctx.net.as_ref(),
        &ctx.fabric,
        &link.spec,
        Customers {
            source,
            operator: &ctx.operator,
            namespace: &ctx.config.credentials_namespace,
        },
    )
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
    // service router (listed only when the snapshot is taken).
    let routers = || crate::engine::view::same_tenant_routers(all.iter().map(AsRef::as_ref));
    let batch = converged.then_some(Batch {
        snapshots: &ctx.snapshots,
        routers: &routers,
    });
    let source = ctx.customers.source(&ctx.client, &name);
    let Reconciled { outcome, resync } = engine_for(ctx, &link, &source)
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

/// One of the engine's Events about the link: published, logged and counted as it says.
async fn emit(
    ctx: &Context,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    name: &str,
    e: LinkEvent,
) {
    match &e.counted {
        Some(Counted::ReverseRouteFailure(reason)) => ctx.metrics.reverse_routes_failed(reason),
        Some(Counted::DriftRepaired(kind)) => ctx.metrics.drift_repaired(kind),
        None => {}
    }
    let type_ = match e.severity {
        Severity::Warning => {
            if e.logged {
                warn!(clusterlink = %name, reason = %e.reason, "{}", e.note);
            }
            EventType::Warning
        }
        Severity::Normal => {
            if e.logged {
                info!(clusterlink = %name, reason = %e.reason, "{}", e.note);
            }
            EventType::Normal
        }
    };
    publish_as(ctx, reference, type_, &e.reason, &e.action, &e.note).await;
}

async fn publish(
    ctx: &Context,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    publish_as(ctx, reference, type_, reason, "Reconcile", note).await;
}

/// The Recorder folds Events of one object with the same type, reason and action into one
/// series (its count and last time move, the first note stays): the action keeps apart what
/// must not fold into each other, e.g. repairs of different kinds of drift.
async fn publish_as(
    ctx: &Context,
    reference: &k8s_openapi::api::core::v1::ObjectReference,
    type_: EventType,
    reason: &str,
    action: &str,
    note: &str,
) {
    let ev = KubeEvent {
        type_,
        reason: reason.chars().take(128).collect(),
        note: Some(note.chars().take(1000).collect()),
        action: action.into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, reference).await {
        warn!(error = %e, "publishing event failed");
    }
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
    let unwound = engine_for(ctx, link, &source).unwind(&input, targets).await;
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

/// A gateway whose reverse route a link could not install hears about it itself: it may live
/// in a namespace whose owners never look at ClusterLinks. The uid comes from the index entry
/// the reconcile read (`targets`): `kubectl describe` finds Events by uid alone.
async fn warn_gateway(ctx: &Context, link: &str, p: &GatewayProblem, targets: &[ReverseTarget]) {
    let uid = targets
        .iter()
        .find(|t| t.gateway == p.gateway)
        .and_then(|t| t.uid.clone());
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some(format!("{}/v1alpha1", bnerd_api::names::GROUP)),
        kind: Some(p.gateway.kind.clone()),
        namespace: Some(p.gateway.namespace.clone()),
        name: Some(p.gateway.name.clone()),
        uid,
        ..Default::default()
    };
    let gateway = format!("{}/{}", p.gateway.namespace, p.gateway.name);
    if !ctx.gateway_warnings.first(&p.gateway, &p.note, targets) {
        // Already told, by this link or another: the link's condition still says it.
        debug!(clusterlink = %link, gateway = %gateway, "reverse route not installed: {}", p.message);
        return;
    }
    warn!(clusterlink = %link, gateway = %gateway, "reverse route not installed: {}", p.message);
    // The gateway's tenant reads this Event: its own problem only, never which link, router
    // or other tenant's CIDR met it (the link's condition and the log carry those).
    publish(
        ctx,
        &reference,
        EventType::Warning,
        EventReason::ReverseRouteNotInstalled.as_str(),
        &p.note,
    )
    .await;
}

async fn remove(link: Arc<ClusterLink>, ctx: &Context) -> Result<Action, Error> {
    let name = link.name_any();
    let status = link.status.clone().unwrap_or_default();
    // Routes matching a current reverse target go before the detach even when status lost
    // them: an index not yet synced is an error (retried), never "no targets".
    let targets = ctx.targets.current(TARGETS_WAIT).await?;
    let input = link_input(&link, &status, &[], &targets)?;
    let source = ctx.customers.source(&ctx.client, &name);
    let done = match engine_for(ctx, &link, &source)
        .unwind(&input, &targets)
        .await
    {
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

/// The links whose recorded gateway route the short check looks at (`engine::view`): every
/// one not being deleted, Ready or not.
pub fn legs_to_check(links: &[Arc<ClusterLink>]) -> Vec<RecordedLeg> {
    crate::engine::view::legs_to_check(links.iter().map(AsRef::as_ref))
}

/// Every `interval`, check the next hop of every recorded gateway route from one read of the
/// transit ports and send the links whose leg (or edge leg) is gone or moved to be reconciled
/// at once. Runs for
/// the leader's term (the caller drops it).
async fn watch_cross_tenant_legs(
    ctx: Arc<Context>,
    interval: std::time::Duration,
    reconcile_now: futures::channel::mpsc::UnboundedSender<ObjectRef<ClusterLink>>,
) {
    if ctx.links.wait_until_ready().await.is_err() {
        return;
    }
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let legs = legs_to_check(&ctx.links.state());
        match check_legs(ctx.net.as_ref(), &ctx.fabric, &legs).await {
            Ok(moved) => {
                ctx.metrics.cross_tenant_legs_checked(true, moved.len());
                for m in moved {
                    info!(clusterlink = %m.link, "leg check: {}; reconciling now", m.why);
                    if reconcile_now
                        .unbounded_send(ObjectRef::new(&m.link))
                        .is_err()
                    {
                        return;
                    }
                }
            }
            Err(e) => {
                ctx.metrics.cross_tenant_legs_checked(false, 0);
                warn!(error = %e, legs = legs.len(), "leg check could not read the transit ports; the resync interval still applies");
            }
        }
    }
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
    let window = resync_window(config.resync_interval);
    let leg_check_interval = config.cross_tenant_leg_check_interval;
    let (reconcile_now, legs_moved) = futures::channel::mpsc::unbounded();
    let ctx = Arc::new(Context {
        recorder: Recorder::new(client.clone(), reporter),
        client,
        customers: CustomerClients::new(cloud.clone()),
        net: cloud,
        operator,
        fabric,
        config,
        backoff: Backoff::default(),
        links: controller.store(),
        targets: TargetIndex::new(),
        snapshots: Snapshots::new(window),
        metrics: observers.metrics,
        gateway_warnings: Default::default(),
    });
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
    let leg_check = watch_cross_tenant_legs(ctx.clone(), leg_check_interval, reconcile_now);
    let synced = async move {
        tokio::join!(synced, leg_check);
    };
    let run = controller
        .reconcile_all_on(fan_out(ctx.client.clone(), ctx.targets.clone()))
        .reconcile_on(legs_moved)
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
mod tests {
    use bnerd_api::conditions::{Status, set_condition};
    use bnerd_api::{ClusterLinkSpec, Reason, SecretRef};

    use super::*;

    /// A link named `name`; cross-tenant when `cross`; Ready at `ready_at` (a generation) or
    /// not Ready; its leg in status when `leg`.
    fn link(name: &str, cross: bool, ready_at: Option<i64>, leg: bool) -> Arc<ClusterLink> {
        let mut l = ClusterLink::new(
            name,
            ClusterLinkSpec {
                credentials_secret_ref: cross.then(|| SecretRef {
                    name: format!("clusterlink-{name}"),
                    namespace: "bnerd-vpn-clusterlinks".into(),
                }),
                ..Default::default()
            },
        );
        l.metadata.generation = Some(2);
        let mut status = ClusterLinkStatus::default();
        if leg {
            status.leg_port_id = Some(format!("{name}-port"));
            status.transit_ip = Some("10.254.0.7".into());
            status.gateway_route = Some(bnerd_api::RouteRecord {
                destination: "10.251.0.0/16".into(),
                nexthop: "10.254.0.7".into(),
            });
        }
        let (s, reason) = match ready_at {
            Some(_) => (Status::True, Reason::Ready),
            None => (Status::False, Reason::NotReady),
        };
        set_condition(
            &mut status.conditions,
            ConditionType::Ready,
            s,
            reason,
            "m",
            ready_at.or(Some(2)),
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        );
        l.status = Some(status);
        Arc::new(l)
    }

    #[test]
    fn every_recorded_gateway_route_has_its_next_hop_checked() {
        let mut deleting = (*link("deleting", true, Some(2), true)).clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        // A PerCustomer link's gateway route goes via its project's edge leg: the edge router
        // must hold the address.
        let mut per_customer = (*link("per-customer", true, Some(2), true)).clone();
        per_customer.spec.transit_isolation = Some(bnerd_api::TransitIsolation::PerCustomer);
        if let Some(st) = per_customer.status.as_mut() {
            st.customer_transit = Some(bnerd_api::clusterlink::CustomerTransit {
                edge_router_id: Some("edge-1".into()),
                edge_router_transit_ip: Some("10.254.0.7".into()),
                ..Default::default()
            });
        }
        let links = vec![
            Arc::new(per_customer),
            link("converged", true, Some(2), true),
            link("same-tenant", false, Some(2), true),
            // Not Ready (failed at its credential or share, say): its route is still there.
            link("not-ready", true, None, true),
            link("older-generation", true, Some(1), true),
            link("no-leg", true, Some(2), false),
            Arc::new(deleting),
        ];
        let legs = legs_to_check(&links);
        use crate::engine::resync::LegHolder;
        let leg = |name: &str, holder: LegHolder| RecordedLeg {
            link: name.into(),
            holder,
            transit_ip: "10.254.0.7".into(),
        };
        let port = |name: &str| LegHolder::Port(format!("{name}-port"));
        assert_eq!(
            legs,
            vec![
                leg("per-customer", LegHolder::EdgeRouter("edge-1".into())),
                leg("converged", port("converged")),
                leg("same-tenant", port("same-tenant")),
                leg("not-ready", port("not-ready")),
                leg("older-generation", port("older-generation")),
            ]
        );
    }
}

#[cfg(test)]
#[path = "controller_tests.rs"]
mod mock_apiserver_tests;
