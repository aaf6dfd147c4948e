//! What a reconcile did to the cloud, in the engine's words: the vocabulary of Events, kept
//! with the plans so the pure rules (drift) can read it without depending on the engine.

use bnerd_api::EventReason;

/// Something the reconcile did to the cloud, worth an Event of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionKind {
    LegPortCreated,
    LegPortAdopted,
    LegAttached,
    LegMoved,
    DuplicateLegRemoved,
    RouteInstalled,
    RouteRemoved,
    /// A cross-tenant link's RBAC share of the transit network was created.
    TransitNetworkShared,
    /// Reverse routes status recorded were found gone from the service router and re-added.
    ReverseRouteRestored,
    /// A port of another project carries this link's UID: left alone, reported (a Warning).
    ForeignLegMarker,
    /// A piece of a `PerCustomer` link's customer transit was built.
    CustomerTransitBuilt,
    /// The last link of a project took its customer transit down.
    CustomerTransitRemoved,
}

impl ActionKind {
    /// The Event reason.
    pub fn reason(self) -> EventReason {
        match self {
            ActionKind::LegPortCreated => EventReason::LegPortCreated,
            ActionKind::LegPortAdopted => EventReason::LegPortAdopted,
            ActionKind::LegAttached => EventReason::LegAttached,
            ActionKind::LegMoved => EventReason::LegMoved,
            ActionKind::DuplicateLegRemoved => EventReason::DuplicateLegRemoved,
            ActionKind::RouteInstalled => EventReason::RouteInstalled,
            ActionKind::RouteRemoved => EventReason::RouteRemoved,
            ActionKind::TransitNetworkShared => EventReason::TransitNetworkShared,
            ActionKind::ReverseRouteRestored => EventReason::ReverseRouteRestored,
            ActionKind::ForeignLegMarker => EventReason::ForeignLegMarker,
            ActionKind::CustomerTransitBuilt => EventReason::CustomerTransitBuilt,
            ActionKind::CustomerTransitRemoved => EventReason::CustomerTransitRemoved,
        }
    }

    /// Whether its Event is a Warning: something a human should look at, not a change made.
    pub fn is_warning(self) -> bool {
        matches!(self, ActionKind::ForeignLegMarker)
    }

    /// The Event reason as the API spells it.
    pub fn as_str(self) -> &'static str {
        self.reason().as_str()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    pub kind: ActionKind,
    pub note: String,
}

impl Action {
    pub fn new(kind: ActionKind, note: impl Into<String>) -> Self {
        Self {
            kind,
            note: note.into(),
        }
    }
}
