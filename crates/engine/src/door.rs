//! The one door into the engine for a link: its tenancy resolved once, from the link and the
//! way to its customer's credential, then [`LinkEngine::reconcile`] (which picks the window's
//! shared snapshot, a replay of its route writes, or the per-link path itself) and
//! [`LinkEngine::unwind`]. [`events`] says, from the status before and the outcome, what a
//! controller publishes; it decides nothing the outcome does not already hold.

use bnerd_api::gateway::ReverseTarget;
use bnerd_api::{ClusterLinkStatus, ConditionType};
use bnerd_cloud::Neutron;
use bnerd_cloud::fabric::Fabric;

use crate::context::Engine;
use crate::converge::{reconcile_cross_tenant, unwind_cross_tenant};
pub use crate::credentials::Customers;
use crate::model::{Input, Outcome, Shape};
use crate::plan::StepFail;
use crate::plan::drift;
use crate::plan::unwind::UnwindPlan;
use crate::resync::{Resynced, Snapshots, resync_from};
use crate::unwind::unwind;
use crate::{Held, report};

/// The window's shared snapshot a converged link may be resynced from, and the routers it
/// reads (every same-tenant link's service router), listed only when the snapshot is taken.
pub struct Batch<'a> {
    pub snapshots: &'a Snapshots,
    pub routers: &'a (dyn Fn() -> Vec<String> + Send + Sync),
}

/// How a resync offered the window's snapshot came about (for its metric and log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResyncPath {
    /// Converged as the snapshot shows it: no call of its own.
    Snapshot,
    /// Converged after replaying these many route writes.
    Replayed(usize),
    /// Reconciled on its own; why.
    PerLink(String),
}

impl ResyncPath {
    /// The metric label.
    pub fn as_str(&self) -> &'static str {
        match self {
            ResyncPath::Snapshot => "snapshot",
            ResyncPath::Replayed(_) => "replayed",
            ResyncPath::PerLink(_) => "per_link",
        }
    }
}

/// A reconcile's outcome, and the resync path when a snapshot was offered.
pub struct Reconciled {
    pub outcome: Outcome,
    pub resync: Option<ResyncPath>,
}

/// What an unwind came to.
#[derive(Debug)]
pub enum Unwound {
    /// Everything the link built is gone; what was removed.
    Done(UnwindPlan),
    /// Something is in the way (Ready=False/Deleting names it); try again.
    Stuck(StepFail),
    /// A cross-tenant link's customer side is out of reach or refuses: held until that is
    /// fixed, or released by the abandon annotation.
    Held(Held),
}

/// One link's way into the engine. The link's shape (`Input::shape`) picks the path; a
/// cross-tenant link's customer credential is resolved through `customers`.
pub struct LinkEngine<'a> {
    net: &'a dyn Neutron,
    fabric: &'a Fabric,
    /// The way to a cross-tenant link's customer credential; `None` for an engine made for
    /// same-tenant links, where a cross-tenant link builds nothing (Validated says why).
    customers: Option<Customers<'a>>,
    batch: Option<Batch<'a>>,
}

impl<'a> LinkEngine<'a> {
    /// The engine for any link: a cross-tenant one's customer credential through `customers`.
    pub fn new(net: &'a dyn Neutron, fabric: &'a Fabric, customers: Customers<'a>) -> Self {
        Self {
            net,
            fabric,
            customers: Some(customers),
            batch: None,
        }
    }

    /// The engine for same-tenant links (tests, benches, `plan` of such a link).
    pub fn same_tenant(net: &'a dyn Neutron, fabric: &'a Fabric) -> Self {
        Self {
            net,
            fabric,
            customers: None,
            batch: None,
        }
    }

    /// Offer the window's shared snapshot: a converged link is resynced from it (its own
    /// reads of the operator's side skipped, its route writes replayed), or falls back to
    /// the per-link path.
    pub fn with_batch(self, batch: Option<Batch<'a>>) -> Self {
        Self { batch, ..self }
    }

    /// Converge the link. Never fails: every problem becomes a condition.
    pub async fn reconcile(&self, input: &Input<'_>) -> Reconciled {
        // A same-tenant link's routers are in the window's snapshot; a cross-tenant link's
        // live in its customer's project, read with its own credential beside the snapshot.
        let resync = match (input.shape, &self.batch, self.customers) {
            (Shape::SameTenant, Some(batch), _)
            | (Shape::CrossTenant { .. }, Some(batch), Some(_)) => {
                Some(self.resync_from_snapshot(batch, input).await)
            }
            (_, None, _) | (Shape::CrossTenant { .. }, _, None) => None,
        };
        let resync = match resync {
            Some(Ok(outcome)) => {
                return Reconciled {
                    resync: Some(outcome.1),
                    outcome: outcome.0,
                };
            }
            Some(Err(why)) => Some(ResyncPath::PerLink(why)),
            None => None,
        };
        let outcome = match (input.shape, self.customers) {
            (Shape::CrossTenant { secret, isolation }, Some(c)) => {
                reconcile_cross_tenant(self.net, self.fabric, c, (secret, isolation), input).await
            }
            (Shape::SameTenant, _) | (Shape::CrossTenant { .. }, None) => {
                Engine::same_tenant(self.net, self.fabric)
                    .reconcile(input)
                    .await
            }
        };
        Reconciled { outcome, resync }
    }

    async fn resync_from_snapshot(
        &self,
        batch: &Batch<'_>,
        input: &Input<'_>,
    ) -> Result<(Outcome, ResyncPath), String> {
        let snap = batch
            .snapshots
            .get(self.net, self.fabric, batch.routers)
            .await
            .map_err(|e| format!("the window's snapshot could not be taken: {e}"))?;
        match resync_from(&snap, self.net, self.fabric, self.customers, input).await {
            Resynced::Done { outcome, writes: 0 } => Ok((*outcome, ResyncPath::Snapshot)),
            Resynced::Done { outcome, writes } => Ok((*outcome, ResyncPath::Replayed(writes))),
            Resynced::PerLink(why) => Err(why),
        }
    }

    /// Remove what the link built, in the unwind order (the gateway route first).
    pub async fn unwind(&self, input: &Input<'_>, targets: &[ReverseTarget]) -> Unwound {
        match (input.shape, self.customers) {
            (Shape::CrossTenant { secret, isolation }, Some(c)) => {
                let shape = (secret, isolation);
                match unwind_cross_tenant(self.net, self.fabric, c, shape, input, targets).await {
                    Ok(Ok(done)) => Unwound::Done(done),
                    Ok(Err(f)) => Unwound::Stuck(f),
                    Err(held) => Unwound::Held(held),
                }
            }
            // Without the customer's credential only the operator's side of a cross-tenant
            // link is in reach: what its credential can list as the link's own.
            (Shape::SameTenant, _) | (Shape::CrossTenant { .. }, None) => {
                let engine = Engine::same_tenant(self.net, self.fabric);
                match unwind(&engine, input, targets).await {
                    Ok(done) => Unwound::Done(done),
                    Err(f) => Unwound::Stuck(f),
                }
            }
        }
    }
}

/// An Event's type, as Kubernetes has two.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Normal,
    Warning,
}

/// What a controller also counts for an Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Counted {
    /// ReverseRoutesInstalled went False with this reason.
    ReverseRouteFailure(String),
    /// A repair of drift of this kind.
    DriftRepaired(&'static str),
}

/// One Event about the link, in the order they are published.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkEvent {
    pub severity: Severity,
    pub reason: String,
    /// The Recorder folds Events of one type, reason and action into one series: the action
    /// keeps apart what must not fold (two conditions reaching one reason, repairs of
    /// different kinds of drift).
    pub action: String,
    pub note: String,
    /// Logged as well (repairs and actions are; condition transitions are in the status).
    pub logged: bool,
    pub counted: Option<Counted>,
}

/// The Events a reconcile's outcome makes, given the status before it: one per condition
/// transition (its type as the action), one per repaired drift when the link was converged
/// before (`converged`, stamped `seen`), one per other action worth telling.
pub fn events(
    before: &ClusterLinkStatus,
    outcome: &Outcome,
    converged: bool,
    seen: &str,
) -> Vec<LinkEvent> {
    let mut out = vec![];
    for t in report::transitions(&before.conditions, &outcome.status.conditions) {
        let failed = t.status == "False";
        let counted = (failed && t.type_ == ConditionType::ReverseRoutesInstalled.as_str())
            .then(|| Counted::ReverseRouteFailure(t.reason.clone()));
        out.push(LinkEvent {
            severity: if failed {
                Severity::Warning
            } else {
                Severity::Normal
            },
            note: format!("{} {}: {}", t.type_, t.status, t.message),
            reason: t.reason,
            action: t.type_,
            logged: false,
            counted,
        });
    }
    let (repairs, rest) = drift::classify(converged, before, &outcome.actions, seen);
    for r in repairs {
        out.push(LinkEvent {
            severity: Severity::Warning,
            reason: drift::DRIFT_REPAIRED.as_str().to_string(),
            action: r.kind.action().to_string(),
            note: r.note,
            logged: true,
            counted: Some(Counted::DriftRepaired(r.kind.as_str())),
        });
    }
    out.extend(rest.into_iter().map(action_event));
    out
}

/// An action worth telling, as its Event.
fn action_event(a: crate::model::Action) -> LinkEvent {
    LinkEvent {
        severity: if a.kind.is_warning() {
            Severity::Warning
        } else {
            Severity::Normal
        },
        reason: a.kind.as_str().to_string(),
        action: "Reconcile".to_string(),
        note: a.note,
        logged: true,
        counted: None,
    }
}

/// The Events a finished unwind makes: one per action it reports beyond the link's own leg
/// and routes (the customer transit its project's last `PerCustomer` link took down), then
/// `Unwound`. An unwind's actions are told here or nowhere: the link is about to go.
pub fn unwound_events(done: &UnwindPlan) -> Vec<LinkEvent> {
    let mut out: Vec<LinkEvent> = done.actions.iter().cloned().map(action_event).collect();
    out.push(LinkEvent {
        severity: Severity::Normal,
        reason: bnerd_api::EventReason::Unwound.as_str().to_string(),
        action: "Reconcile".to_string(),
        note: "gateway route, router attachment and leg port removed".to_string(),
        logged: false,
        counted: None,
    });
    out
}

#[cfg(test)]
mod tests {
    use bnerd_api::ClusterLinkStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

    use super::*;
    use crate::model::{Action, ActionKind, Retry};

    fn cond(t: ConditionType, status: &str, reason: &str) -> Condition {
        Condition {
            type_: t.as_str().into(),
            status: status.into(),
            reason: reason.into(),
            message: format!("{reason} message"),
            observed_generation: None,
            last_transition_time: k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ),
        }
    }

    fn outcome(conditions: Vec<Condition>, actions: Vec<Action>) -> Outcome {
        Outcome {
            status: ClusterLinkStatus {
                conditions,
                ..Default::default()
            },
            retry: Retry::Resync,
            actions,
            gateway_problems: vec![],
            probe_unavailable: false,
        }
    }

    #[test]
    fn a_transition_is_one_event_whose_action_is_its_condition() {
        let before = ClusterLinkStatus::default();
        let out = outcome(
            vec![
                cond(ConditionType::RouteInstalled, "True", "Installed"),
                cond(
                    ConditionType::ReverseRoutesInstalled,
                    "False",
                    "GatewayRefused",
                ),
            ],
            vec![],
        );
        let e = events(&before, &out, false, "t");
        assert_eq!(e.len(), 2, "{e:?}");
        assert_eq!(
            (e[0].severity, e[0].reason.as_str(), e[0].action.as_str()),
            (Severity::Normal, "Installed", "RouteInstalled")
        );
        assert_eq!(e[0].note, "RouteInstalled True: Installed message");
        assert!(!e[0].logged && e[0].counted.is_none());
        // Two conditions reaching one reason stay apart by their action; a failed reverse
        // route is counted by its reason.
        assert_eq!(e[1].severity, Severity::Warning);
        assert_eq!(
            e[1].counted,
            Some(Counted::ReverseRouteFailure("GatewayRefused".into()))
        );
    }

    #[test]
    fn an_unchanged_condition_says_nothing() {
        let c = vec![cond(ConditionType::Ready, "True", "Ready")];
        let before = ClusterLinkStatus {
            conditions: c.clone(),
            ..Default::default()
        };
        assert!(events(&before, &outcome(c, vec![]), true, "t").is_empty());
    }

    #[test]
    fn actions_are_logged_events_and_a_converged_links_repairs_are_drift() {
        let before = ClusterLinkStatus {
            leg_port_id: Some("p1".into()),
            transit_ip: Some("10.254.0.3".into()),
            ..Default::default()
        };
        let created = Action::new(
            ActionKind::LegPortCreated,
            "created leg port p2".to_string(),
        );
        // Not converged before: a created port is an action like any other.
        let e = events(&before, &outcome(vec![], vec![created.clone()]), false, "t");
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].reason, ActionKind::LegPortCreated.as_str());
        assert_eq!(e[0].action, "Reconcile");
        assert!(e[0].logged && e[0].counted.is_none());
        // Converged before: the same write repaired drift, one DriftRepaired Warning, counted.
        let e = events(&before, &outcome(vec![], vec![created]), true, "t");
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].reason, drift::DRIFT_REPAIRED.as_str());
        assert_eq!(e[0].severity, Severity::Warning);
        assert!(matches!(e[0].counted, Some(Counted::DriftRepaired(_))));
    }

    #[test]
    fn an_unwinds_actions_are_told_before_unwound() {
        let plain = unwound_events(&UnwindPlan::default());
        assert_eq!(plain.len(), 1, "{plain:?}");
        assert_eq!(plain[0].reason, bnerd_api::EventReason::Unwound.as_str());
        let removed = Action::new(
            ActionKind::CustomerTransitRemoved,
            "took down the customer transit of project p: network n1 with subnet s1",
        );
        let e = unwound_events(&UnwindPlan {
            actions: vec![removed.clone()],
            ..Default::default()
        });
        let told: Vec<(&str, Severity, &str)> = e
            .iter()
            .map(|e| (e.reason.as_str(), e.severity, e.note.as_str()))
            .collect();
        assert_eq!(
            told,
            vec![
                (
                    ActionKind::CustomerTransitRemoved.as_str(),
                    Severity::Normal,
                    removed.note.as_str()
                ),
                (
                    bnerd_api::EventReason::Unwound.as_str(),
                    Severity::Normal,
                    plain[0].note.as_str()
                ),
            ]
        );
        assert!(e[0].logged, "an action is logged as well");
    }
}
