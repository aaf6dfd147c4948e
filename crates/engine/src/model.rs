//! What a reconcile takes in and gives back, shared by every step: a leaf the steps and the
//! orchestrator both read, so neither depends on the other for its vocabulary.

use std::collections::BTreeMap;
use std::time::Duration;

use bnerd_api::gateway::ReverseTarget;
use bnerd_api::{ClusterLinkSpec, ClusterLinkStatus, SecretRef, TransitIsolation};

use super::plan::Peer;
pub use super::plan::action::{Action, ActionKind};
use super::plan::reverse_routes::GatewayProblem;

/// Everything a reconcile reads besides the cloud.
pub struct Input<'a> {
    pub name: &'a str,
    pub uid: &'a str,
    pub generation: Option<i64>,
    pub created: String,
    pub spec: &'a ClusterLinkSpec,
    pub status: &'a ClusterLinkStatus,
    pub peers: &'a [Peer],
    /// Gateways needing a reverse route on this link's service router.
    pub reverse_targets: &'a [ReverseTarget],
    /// metadata.annotations (the attestation, the abandon hatch).
    pub annotations: &'a BTreeMap<String, String>,
    /// The link's shape, read from `spec` once ([`Shape::of`]).
    pub shape: Shape<'a>,
}

/// A link's shape: whose credential builds its leg side and which transit its legs stand on
/// (docs/design.md, "The reconcile order"): same-tenant, cross-tenant `Shared`, cross-tenant
/// `PerCustomer`. Read from the spec in one place, [`Shape::of`]; every step that differs
/// between the shapes matches on it (or on the engine's side, the same shape with its
/// credential resolved), so a fourth shape is a compile error wherever one must decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape<'a> {
    /// No `credentialsSecretRef`: the operator's own project, its legs on the main transit.
    SameTenant,
    /// A customer's project, on the credential in `secret`; its legs on the main transit
    /// shared into that project (`Shared`) or on the project's customer transit
    /// (`PerCustomer`).
    CrossTenant {
        secret: &'a SecretRef,
        isolation: TransitIsolation,
    },
}

impl<'a> Shape<'a> {
    /// The one reading of `credentialsSecretRef` and `transitIsolation` that decides the
    /// shape. A `transitIsolation` without a credentials Secret makes no cross-tenant link
    /// (the apiserver refuses it; `plan` of a file meets it as a same-tenant spec).
    pub fn of(spec: &'a ClusterLinkSpec) -> Self {
        match &spec.credentials_secret_ref {
            None => Shape::SameTenant,
            Some(secret) => Shape::CrossTenant {
                secret,
                isolation: spec.transit_isolation.unwrap_or_default(),
            },
        }
    }

    pub fn is_per_customer(&self) -> bool {
        matches!(
            self,
            Shape::CrossTenant {
                isolation: TransitIsolation::PerCustomer,
                ..
            }
        )
    }
}
/// When to look again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Converged or failed terminally: next look at the resync interval.
    Resync,
    /// A transient failure: back off and try again.
    Backoff,
    /// Look again after this long (the fixed 15 s of docs/crd-reference.md, "When a link is
    /// looked at again").
    After(Duration),
}

/// The result of one reconcile: the full status to write and what to say about it.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub status: ClusterLinkStatus,
    pub retry: Retry,
    /// Actions worth an Event beyond condition changes (adoption, creation, removal).
    pub actions: Vec<Action>,
    /// Gateways whose reverse route could not be installed (a Warning Event on each).
    pub gateway_problems: Vec<GatewayProblem>,
    /// This reconcile sent the privilege probe and the cloud does not serve it (counted).
    pub probe_unavailable: bool,
}
