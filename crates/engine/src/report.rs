//! Turning step results into conditions, Ready, and the Events for what changed.

use bnerd_api::conditions::{Status, set_condition};
use bnerd_api::{ClusterLinkStatus, ConditionType, Reason};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;

use super::model::{Action, Input, Outcome, Retry, Shape};
use super::plan::StepFail;
use super::plan::reverse_routes::GatewayProblem;

/// The reason a step's condition carries when it passed.
fn true_reason(t: ConditionType) -> Reason {
    match t {
        ConditionType::Validated => Reason::Valid,
        ConditionType::TenantIsolationAttested => Reason::Attested,
        ConditionType::CredentialsResolved => Reason::Resolved,
        ConditionType::TransitNetworkShared => Reason::Shared,
        ConditionType::LegAttached => Reason::Attached,
        ConditionType::RouteInstalled | ConditionType::ReverseRoutesInstalled => Reason::Installed,
        ConditionType::Ready => Reason::Ready,
    }
}

/// The conditions a cross-tenant link carries (docs/design.md, "The conditions a link
/// carries"), Ready last.
const CROSS_TENANT: &[ConditionType] = &[
    ConditionType::Validated,
    ConditionType::TenantIsolationAttested,
    ConditionType::CredentialsResolved,
    ConditionType::TransitNetworkShared,
    ConditionType::LegAttached,
    ConditionType::RouteInstalled,
    ConditionType::ReverseRoutesInstalled,
    ConditionType::Ready,
];

pub(crate) struct Report {
    pub status: ClusterLinkStatus,
    /// The conditions this link carries, in step order.
    steps: &'static [ConditionType],
    generation: Option<i64>,
    now: Timestamp,
    done: Vec<ConditionType>,
    first_failure: Option<ConditionType>,
    retryable: bool,
    /// A fixed look-again the failing step asked for (15 s for credentials).
    retry_after: Option<std::time::Duration>,
    pub actions: Vec<Action>,
    pub gateway_problems: Vec<GatewayProblem>,
    pub probe_unavailable: bool,
}

impl Report {
    pub fn new(input: &Input<'_>) -> Self {
        Self {
            steps: match input.shape {
                Shape::SameTenant => ConditionType::SAME_TENANT,
                Shape::CrossTenant { .. } => CROSS_TENANT,
            },
            status: input.status.clone(),
            generation: input.generation,
            now: Timestamp::now(),
            done: vec![],
            first_failure: None,
            retryable: false,
            retry_after: None,
            actions: vec![],
            gateway_problems: vec![],
            probe_unavailable: false,
        }
    }

    fn set(&mut self, t: ConditionType, s: Status, reason: Reason, message: String) {
        set_condition(
            &mut self.status.conditions,
            t,
            s,
            reason,
            message,
            self.generation,
            self.now,
        );
        self.done.push(t);
    }

    pub fn pass(&mut self, t: ConditionType, message: impl Into<String>) {
        self.set(t, Status::True, true_reason(t), message.into());
    }

    /// True with a reason of its own (a condition with more than one True reason).
    pub fn pass_with(&mut self, t: ConditionType, reason: Reason, message: impl Into<String>) {
        self.set(t, Status::True, reason, message.into());
    }

    pub fn fail(&mut self, t: ConditionType, f: StepFail) {
        self.retryable |= f.retryable;
        self.first_failure.get_or_insert(t);
        self.set(t, Status::False, f.reason, f.message);
    }

    /// Look again after `d` rather than at the resync interval (unless a retryable failure
    /// backs off sooner).
    pub fn requeue_after(&mut self, d: std::time::Duration) {
        self.retry_after = Some(d);
    }

    /// Conditions not reached are Unknown, naming the step that stopped them; Ready sums up.
    pub fn finish(mut self) -> Outcome {
        for &t in self.steps {
            if t == ConditionType::Ready || self.done.contains(&t) {
                continue;
            }
            let blocker = self
                .first_failure
                .map(|f| f.as_str())
                .unwrap_or("an earlier step");
            let message = format!("not evaluated: {blocker} is not True");
            self.set(t, Status::Unknown, Reason::Blocked, message);
        }
        let (status, reason, message) = ready(self.steps, &self.status.conditions);
        self.set(ConditionType::Ready, status, reason, message);
        self.status.observed_generation = self.generation;
        // Keep the condition list in step order so `kubectl get -o yaml` reads top-down.
        self.status.conditions.sort_by_key(|c| {
            ConditionType::ALL
                .iter()
                .position(|t| t.as_str() == c.type_)
                .unwrap_or(usize::MAX)
        });
        Outcome {
            status: self.status,
            retry: match (self.retryable, self.retry_after) {
                (true, _) => Retry::Backoff,
                (false, Some(d)) => Retry::After(d),
                (false, None) => Retry::Resync,
            },
            actions: self.actions,
            gateway_problems: self.gateway_problems,
            probe_unavailable: self.probe_unavailable,
        }
    }
}

/// Ready, from the other conditions: the forward path. A reverse route that fails for one
/// gateway must not make this link's forward path look down (docs/crd-reference.md,
/// "Conditions"). Every condition but
/// ReverseRoutesInstalled must be True — Validated, LegAttached, RouteInstalled and,
/// cross-tenant, the attestation, the credential and the share. A reverse route that could
/// not be installed (often another namespace's malformed gateway, reported on every link)
/// stays on ReverseRoutesInstalled and is named in Ready's message.
pub(crate) fn ready(steps: &[ConditionType], conditions: &[Condition]) -> (Status, Reason, String) {
    let not_true: Vec<&str> = steps
        .iter()
        .filter(|t| {
            !matches!(
                t,
                ConditionType::Ready | ConditionType::ReverseRoutesInstalled
            )
        })
        .filter(|t| !bnerd_api::conditions::is_true(conditions, **t))
        .map(|t| t.as_str())
        .collect();
    let reverse = conditions
        .iter()
        .find(|c| c.type_ == ConditionType::ReverseRoutesInstalled.as_str());
    let reverse_note = match reverse {
        Some(c) if c.status == "False" => format!(
            "; ReverseRoutesInstalled is False ({}): reverse routes to gateways are not all in place, which does not take the forward path down",
            c.reason
        ),
        _ => String::new(),
    };
    if not_true.is_empty() {
        let head = if reverse_note.is_empty() {
            "leg attached and routes installed"
        } else {
            "leg attached and gateway route installed"
        };
        (Status::True, Reason::Ready, format!("{head}{reverse_note}"))
    } else {
        (
            Status::False,
            Reason::NotReady,
            format!("not ready: {} not True{reverse_note}", not_true.join(", ")),
        )
    }
}

/// The status of a deleting link whose unwind is stuck: Ready=False/Deleting says what is in
/// the way; the other conditions stay as the last reconcile left them.
pub fn deleting_status(
    status: &ClusterLinkStatus,
    f: &StepFail,
    generation: Option<i64>,
) -> ClusterLinkStatus {
    failed_status(status, ConditionType::Ready, f, generation)
}

/// The status with one condition set False for `f` (a held unwind's CredentialsResolved).
pub fn failed_status(
    status: &ClusterLinkStatus,
    t: ConditionType,
    f: &StepFail,
    generation: Option<i64>,
) -> ClusterLinkStatus {
    let mut s = status.clone();
    set_condition(
        &mut s.conditions,
        t,
        Status::False,
        f.reason,
        f.message.clone(),
        generation,
        Timestamp::now(),
    );
    s
}

/// A condition whose status or reason changed: worth one Event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

/// Conditions in `new` whose status or reason differs from `old`.
pub fn transitions(old: &[Condition], new: &[Condition]) -> Vec<Transition> {
    new.iter()
        .filter(|n| {
            !old.iter()
                .any(|o| o.type_ == n.type_ && o.status == n.status && o.reason == n.reason)
        })
        .map(|n| Transition {
            type_: n.type_.clone(),
            status: n.status.clone(),
            reason: n.reason.clone(),
            message: n.message.clone(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnerd_api::ConditionType::*;

    fn conditions(set: &[(ConditionType, &str, Reason)]) -> Vec<Condition> {
        let mut out = vec![];
        for (t, s, r) in set {
            let status = match *s {
                "True" => Status::True,
                "False" => Status::False,
                _ => Status::Unknown,
            };
            set_condition(&mut out, *t, status, *r, "m", None, Timestamp::now());
        }
        out
    }

    /// One row per rule of Ready: (rule, steps, conditions, want status, reason, texts).
    #[test]
    fn ready_reflects_the_forward_path() {
        use Reason::*;
        let same = ConditionType::SAME_TENANT;
        let ok = |t| (t, "True", Installed);
        type Row = (
            &'static str,
            &'static [ConditionType],
            Vec<Condition>,
            &'static str,
            Reason,
            &'static [&'static str],
        );
        let rows: Vec<Row> = vec![
            (
                "everything True: Ready, routes installed",
                same,
                conditions(&[
                    (Validated, "True", Valid),
                    (LegAttached, "True", Attached),
                    ok(RouteInstalled),
                    ok(ReverseRoutesInstalled),
                ]),
                "True",
                Reason::Ready,
                &["leg attached and routes installed"],
            ),
            (
                "rule: a broken reverse route never reads as the forward path being down; \
                 Ready's message names it",
                same,
                conditions(&[
                    (Validated, "True", Valid),
                    (LegAttached, "True", Attached),
                    ok(RouteInstalled),
                    (ReverseRoutesInstalled, "False", EnsureReverseRoutesFailed),
                ]),
                "True",
                Reason::Ready,
                &[
                    "gateway route installed",
                    "ReverseRoutesInstalled is False (EnsureReverseRoutesFailed)",
                ],
            ),
            (
                "the forward route missing: not Ready, reverse routes fine or not",
                same,
                conditions(&[
                    (Validated, "True", Valid),
                    (LegAttached, "True", Attached),
                    (RouteInstalled, "False", RouteConflict),
                    (ReverseRoutesInstalled, "False", EnsureReverseRoutesFailed),
                ]),
                "False",
                NotReady,
                &[
                    "not ready: RouteInstalled not True",
                    "ReverseRoutesInstalled is False",
                ],
            ),
            (
                "a step not reached (Unknown) is not True",
                same,
                conditions(&[
                    (Validated, "True", Valid),
                    (LegAttached, "False", RouterResolveFailed),
                    (RouteInstalled, "Unknown", Blocked),
                    (ReverseRoutesInstalled, "Unknown", Blocked),
                ]),
                "False",
                NotReady,
                &["not ready: LegAttached, RouteInstalled not True"],
            ),
            (
                "cross-tenant: the credential counts for Ready",
                CROSS_TENANT,
                conditions(&[
                    (Validated, "True", Valid),
                    (TenantIsolationAttested, "True", Attested),
                    (CredentialsResolved, "False", AuthFailed),
                    (TransitNetworkShared, "Unknown", Blocked),
                    (LegAttached, "Unknown", Blocked),
                    (RouteInstalled, "Unknown", Blocked),
                    (ReverseRoutesInstalled, "Unknown", Blocked),
                ]),
                "False",
                NotReady,
                &[
                    "CredentialsResolved, TransitNetworkShared, LegAttached, RouteInstalled not True",
                ],
            ),
            (
                "cross-tenant: attested, resolved, shared, leg and route: Ready despite a \
                 reverse route",
                CROSS_TENANT,
                conditions(&[
                    (Validated, "True", Valid),
                    (TenantIsolationAttested, "True", Attested),
                    (CredentialsResolved, "True", Resolved),
                    (TransitNetworkShared, "True", Shared),
                    (LegAttached, "True", Attached),
                    ok(RouteInstalled),
                    (ReverseRoutesInstalled, "False", EnsureReverseRoutesFailed),
                ]),
                "True",
                Reason::Ready,
                &["ReverseRoutesInstalled is False"],
            ),
        ];
        for (rule, steps, conds, status, reason, texts) in rows {
            let (s, r, m) = ready(steps, &conds);
            assert_eq!((s.as_str(), r), (status, reason), "{rule}: {m}");
            for t in texts {
                assert!(m.contains(t), "{rule}: {t:?} not in {m:?}");
            }
        }
    }
}
