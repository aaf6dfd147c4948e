//! Publishing what a reconcile says happened: the engine's Events about a link (published,
//! logged and counted as each says), and a Warning on a gateway whose reverse route a link
//! could not install.

use bnerd_api::EventReason;
use bnerd_api::gateway::ReverseTarget;
use kube::runtime::events::{Event as KubeEvent, EventType};
use tracing::{debug, info, warn};

use crate::context::Context;
use crate::engine::{Counted, GatewayProblem, LinkEvent, Severity};

/// One of the engine's Events about the link: published, logged and counted as it says.
pub(crate) async fn emit(
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

pub(crate) async fn publish(
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

/// A gateway whose reverse route a link could not install hears about it itself: it may live
/// in a namespace whose owners never look at ClusterLinks. The uid comes from the index entry
/// the reconcile read (`targets`): `kubectl describe` finds Events by uid alone.
pub(crate) async fn warn_gateway(
    ctx: &Context,
    link: &str,
    p: &GatewayProblem,
    targets: &[ReverseTarget],
) {
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
