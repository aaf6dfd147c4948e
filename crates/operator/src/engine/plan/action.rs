//! What a reconcile did to the cloud, in the engine's words: the vocabulary of Events, kept
//! with the plans so the pure rules (drift) can read it without depending on the engine.

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
}

impl ActionKind {
    /// The Event reason.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionKind::LegPortCreated => "LegPortCreated",
            ActionKind::LegPortAdopted => "LegPortAdopted",
            ActionKind::LegAttached => "LegAttached",
            ActionKind::LegMoved => "LegMoved",
            ActionKind::DuplicateLegRemoved => "DuplicateLegRemoved",
            ActionKind::RouteInstalled => "RouteInstalled",
            ActionKind::RouteRemoved => "RouteRemoved",
            ActionKind::TransitNetworkShared => "TransitNetworkShared",
            ActionKind::ReverseRouteRestored => "ReverseRouteRestored",
        }
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

