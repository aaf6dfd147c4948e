//! Condition types and reasons of a ClusterLink, spelled exactly as the spec spells them,
//! and the one function that writes a condition into a status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

macro_rules! string_enum {
    ($(#[$m:meta])* $name:ident { $($variant:ident),+ $(,)? }) => {
        $(#[$m])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name { $($variant),+ }

        impl $name {
            pub const ALL: &'static [$name] = &[$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self { $($name::$variant => stringify!($variant)),+ }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

string_enum!(
    /// Conditions in the order of the reconcile steps that own them.
    ConditionType {
        Validated,
        TenantIsolationAttested,
        CredentialsResolved,
        TransitNetworkShared,
        LegAttached,
        RouteInstalled,
        ReverseRoutesInstalled,
        Ready,
    }
);

impl ConditionType {
    /// Conditions every same-tenant link carries (docs/design.md, "The conditions a link
    /// carries"), Ready last.
    pub const SAME_TENANT: &'static [ConditionType] = &[
        ConditionType::Validated,
        ConditionType::LegAttached,
        ConditionType::RouteInstalled,
        ConditionType::ReverseRoutesInstalled,
        ConditionType::Ready,
    ];
}

string_enum!(
    /// Condition reasons. True reasons first, then False reasons per step.
    Reason {
        // True reasons
        Valid,
        Attested,
        // TenantIsolationAttested of a PerCustomer link: no attestation needed
        StructuralIsolation,
        Resolved,
        Shared,
        Attached,
        Installed,
        Ready,
        // Validated
        InvalidSpec,
        // TenantIsolationAttested
        NotAttested,
        // CredentialsResolved
        SecretNotFound,
        SecretNamespaceNotAllowed,
        SecretNameNotAllowed,
        CredentialsInvalid,
        AuthFailed,
        CredentialsAreOperatorProject,
        CredentialsPrivileged,
        CredentialsProjectMismatch,
        CredentialsProjectChanged,
        CredentialsUnavailable,
        // TransitNetworkShared
        EnsureNetworkSharedFailed,
        NetworkVisibilityCheckFailed,
        TransitNetworkNotShared,
        CustomerTransitNotConfigured,
        CustomerTransitPoolExhausted,
        // LegAttached
        RouterResolveFailed,
        TransitIPUnavailable,
        EnsureLegPortFailed,
        EnsureRouterHasPortFailed,
        TransitIPMismatch,
        // RouteInstalled
        EnsureRouteFailed,
        RouteConflict,
        CIDROverlap,
        // ReverseRoutesInstalled
        EnsureReverseRoutesFailed,
        // Any condition not reached because an earlier step failed
        Blocked,
        // Ready while the object is being deleted
        Deleting,
        // Ready when some other condition is not True
        NotReady,
    }
);

impl ConditionType {
    /// Every reason the operator can set on this condition, True reasons first. The single
    /// list docs/crd-reference.md is checked against (crates/api/tests/reference.rs), and
    /// [`set_condition`] refuses (in debug builds) a reason not listed for its condition.
    pub fn reasons(self) -> &'static [Reason] {
        use Reason::*;
        match self {
            ConditionType::Validated => &[Valid, InvalidSpec],
            ConditionType::TenantIsolationAttested => {
                &[Attested, StructuralIsolation, NotAttested, Blocked]
            }
            ConditionType::CredentialsResolved => &[
                Resolved,
                SecretNotFound,
                SecretNamespaceNotAllowed,
                SecretNameNotAllowed,
                CredentialsInvalid,
                AuthFailed,
                CredentialsAreOperatorProject,
                CredentialsPrivileged,
                CredentialsProjectMismatch,
                CredentialsProjectChanged,
                CredentialsUnavailable,
                Blocked,
            ],
            ConditionType::TransitNetworkShared => &[
                Shared,
                EnsureNetworkSharedFailed,
                NetworkVisibilityCheckFailed,
                TransitNetworkNotShared,
                CustomerTransitNotConfigured,
                CustomerTransitPoolExhausted,
                TransitIPUnavailable,
                Blocked,
            ],
            ConditionType::LegAttached => &[
                Attached,
                RouterResolveFailed,
                TransitIPUnavailable,
                EnsureLegPortFailed,
                EnsureRouterHasPortFailed,
                TransitIPMismatch,
                Blocked,
            ],
            ConditionType::RouteInstalled => &[
                Installed,
                EnsureRouteFailed,
                RouteConflict,
                CIDROverlap,
                Blocked,
            ],
            ConditionType::ReverseRoutesInstalled => {
                &[Installed, EnsureReverseRoutesFailed, Blocked]
            }
            ConditionType::Ready => &[Ready, NotReady, Deleting],
        }
    }
}

string_enum!(
    /// Reasons of the Events the operator publishes besides condition transitions (a
    /// transition's Event carries the condition's own [`Reason`]). The one list of them: the
    /// code spells each through this enum, and docs/crd-reference.md and docs/operations.md
    /// are checked against it.
    EventReason {
        // On the ClusterLink: what a reconcile did to the cloud.
        LegPortCreated,
        LegPortAdopted,
        LegAttached,
        LegMoved,
        DuplicateLegRemoved,
        RouteInstalled,
        RouteRemoved,
        TransitNetworkShared,
        ReverseRouteRestored,
        CustomerTransitBuilt,
        CustomerTransitRemoved,
        // On the ClusterLink, a Warning: a port of another project carries its UID.
        ForeignLegMarker,
        // On the ClusterLink, a Warning: a reconcile of a Ready link put back what was
        // removed out of band (what was missing, when it was seen, what was restored).
        DriftRepaired,
        // On the ClusterLink: its delete.
        Unwound,
        CustomerResourcesAbandoned,
        // On a gateway (IPsecGateway/VPNGateway) whose reverse route a link could not install.
        ReverseRouteNotInstalled,
        // On the operator's Pod: the periodic fabric checks.
        FabricCheckPassed,
        FabricCheckFailed,
        FabricCheckUnreachable,
        // On the operator's Pod, a Warning: its own credential is privileged (checked at
        // startup and at every fabric check).
        OperatorCredentialPrivileged,
        // On the operator's Pod, a Warning: its project is at 80 % or more of a Neutron
        // limit (a quota, or the routes of the gateway router), once per change.
        QuotaNearLimit,
    }
);

/// TenantIsolationAttested=True/StructuralIsolation's message. The attestation annotation
/// exists because the shared transit network gives a customer project reach to every other
/// link (docs/crd-reference.md, "TenantIsolationAttested"); a PerCustomer link's transit
/// network is shared with its own project only, so there is nothing to attest. `secret` is
/// `<namespace>/<name>`, named as the other messages of this condition name it.
pub fn structural_isolation_message(secret: &str) -> String {
    format!(
        "spec.transitIsolation is PerCustomer: no {} annotation is needed, the link's transit network is shared with its own project only (secret {secret})",
        crate::names::ANNOTATION_API_ACCESS
    )
}

/// Status of a condition as the API spells it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    True,
    False,
    Unknown,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::True => "True",
            Status::False => "False",
            Status::Unknown => "Unknown",
        }
    }
}

/// Write one condition, keeping `lastTransitionTime` unless the status itself changed
/// (reason or message changes alone are not transitions).
pub fn set_condition(
    conditions: &mut Vec<Condition>,
    type_: ConditionType,
    status: Status,
    reason: Reason,
    message: impl Into<String>,
    generation: Option<i64>,
    now: Timestamp,
) {
    debug_assert!(
        type_.reasons().contains(&reason),
        "{reason} is not a reason of {type_} (ConditionType::reasons)"
    );
    // The apiserver refuses a status whose condition message passes its limit, and the
    // whole patch with it: cut here, whatever a step put together.
    let message = crate::echo::truncated(message.into(), crate::echo::MAX_CONDITION_MESSAGE_BYTES);
    match conditions.iter_mut().find(|c| c.type_ == type_.as_str()) {
        Some(c) => {
            if c.status != status.as_str() {
                c.last_transition_time = Time(now);
            }
            c.status = status.as_str().to_string();
            c.reason = reason.as_str().to_string();
            c.message = message;
            c.observed_generation = generation;
        }
        None => conditions.push(Condition {
            type_: type_.as_str().to_string(),
            status: status.as_str().to_string(),
            reason: reason.as_str().to_string(),
            message,
            observed_generation: generation,
            last_transition_time: Time(now),
        }),
    }
}

/// Find a condition by type.
pub fn find(conditions: &[Condition], type_: ConditionType) -> Option<&Condition> {
    conditions.iter().find(|c| c.type_ == type_.as_str())
}

/// True when the condition is present with status True.
pub fn is_true(conditions: &[Condition], type_: ConditionType) -> bool {
    find(conditions, type_).is_some_and(|c| c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let t0 = Timestamp::from_second(1_700_000_000).unwrap();
        let t1 = Timestamp::from_second(1_700_000_300).unwrap();
        let t2 = Timestamp::from_second(1_700_000_540).unwrap();
        let mut c = vec![];
        set_condition(
            &mut c,
            ConditionType::LegAttached,
            Status::False,
            Reason::RouterResolveFailed,
            "a",
            Some(1),
            t0,
        );
        set_condition(
            &mut c,
            ConditionType::LegAttached,
            Status::False,
            Reason::EnsureRouterHasPortFailed,
            "b",
            Some(2),
            t1,
        );
        assert_eq!(c[0].last_transition_time.0, t0);
        assert_eq!(c[0].reason, "EnsureRouterHasPortFailed");
        assert_eq!(c[0].observed_generation, Some(2));
        set_condition(
            &mut c,
            ConditionType::LegAttached,
            Status::True,
            Reason::Attached,
            "ok",
            Some(2),
            t2,
        );
        assert_eq!(c[0].last_transition_time.0, t2);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn every_reason_belongs_to_a_condition() {
        for r in Reason::ALL {
            assert!(
                ConditionType::ALL.iter().any(|t| t.reasons().contains(r)),
                "{r} is set on no condition"
            );
        }
    }

    #[test]
    fn structural_isolation_says_why_no_attestation_is_needed() {
        assert!(
            ConditionType::TenantIsolationAttested
                .reasons()
                .contains(&Reason::StructuralIsolation)
        );
        let m = structural_isolation_message("bnerd-vpn-clusterlinks/clusterlink-x");
        for want in [
            "PerCustomer",
            "no ipsec.bnerd.net/customer-openstack-api-access annotation is needed",
            "shared with its own project only",
            "(secret bnerd-vpn-clusterlinks/clusterlink-x)",
        ] {
            assert!(m.contains(want), "{want}: {m}");
        }
    }

    #[test]
    fn names_are_spelled_as_in_the_spec() {
        assert_eq!(Reason::CIDROverlap.as_str(), "CIDROverlap");
        assert_eq!(
            Reason::EnsureRouterHasPortFailed.as_str(),
            "EnsureRouterHasPortFailed"
        );
        assert_eq!(
            ConditionType::ReverseRoutesInstalled.as_str(),
            "ReverseRoutesInstalled"
        );
    }
}
