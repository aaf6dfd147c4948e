//! CredentialsResolved: is the customer's application credential member-scoped?
//!
//! The role rule is a name check: a token role named admin, service or advsvc, in any letter
//! case, refuses the credential. By itself it has a known gap: a name check cannot see a cloud
//! whose policy grants privilege to other roles, through a customised context_is_admin or
//! context_with_global_access. The privilege probe (docs/crd-reference.md, "CredentialsResolved") closes the
//! context_is_admin half with one read that only a cloud admin is allowed ([`ADMIN_READ_PROBE`],
//! see `Neutron::probe_admin_read`): Neutron decides it by `context.is_admin` itself, which is
//! what a customised `context_is_admin` changes. `context_with_global_access` grants no
//! permission on its own (it only widens the database scope of reads that per-resource rules
//! must also allow), so no refusal can reveal it; that half of the gap stays open.
//!
//! The name check comes first and needs no call, so the engine runs [`check_role_names`],
//! sends the probe only when it passes, then takes [`verdict`]. Messages name the Secret as
//! `secret <ns>/<name>` and never carry a value from it.

use bnerd_api::Reason;
use bnerd_cloud::{ADMIN_READ_PROBE, CloudError};

use super::StepFail;

/// A role named admin, service or advsvc, in any letter case (docs/crd-reference.md,
/// "CredentialsResolved"). Exact names: under legacy policy admin reaches every project, and
/// Neutron runs a service/advsvc token as a service context, which bypasses its per-project
/// filtering.
pub const PRIVILEGED_ROLE_NAMES: [&str; 3] = ["admin", "service", "advsvc"];

/// The first of `roles` docs/crd-reference.md (CredentialsPrivileged) refuses by name (admin, service, advsvc in any letter case).
/// Free of any Secret: the startup check of the operator's own credential asks the same.
pub fn privileged_role(roles: &[String]) -> Option<&String> {
    roles.iter().find(|r| {
        PRIVILEGED_ROLE_NAMES
            .iter()
            .any(|p| r.eq_ignore_ascii_case(p))
    })
}

/// The checks the token's roles decide alone: Err when they refuse the credential, so the
/// probe is never sent for it. `secret` is `<ns>/<name>`.
pub fn check_role_names(secret: &str, roles: &[String]) -> Result<(), StepFail> {
    if roles.is_empty() {
        return Err(StepFail::terminal(
            Reason::AuthFailed,
            format!(
                "the application credential in secret {secret} authenticated, but its token carries no roles, so whether it is privileged cannot be checked"
            ),
        ));
    }
    match privileged_role(roles) {
        Some(role) => Err(StepFail::terminal(
            Reason::CredentialsPrivileged,
            format!(
                "the application credential in secret {secret} is privileged: its token carries the role {role:?} (admin, service and advsvc are refused in any letter case); use an application credential of a member of the customer project"
            ),
        )),
        None => Ok(()),
    }
}

/// What one answer to [`ADMIN_READ_PROBE`] says about the credential that sent it. Pure, and
/// free of any Secret: the startup check of the operator's own credential asks the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProbeAnswer {
    /// Neutron refused it (403): what a member gets.
    Refused,
    /// Neutron allowed it: the cloud's policy makes one of the token's roles cloud admin.
    Allowed,
    /// This cloud does not serve the probe's URL (404, 501: no `quota_details`): the policy
    /// cannot be checked here, and the role-name check is all there is.
    Unavailable,
    /// Nothing was decided (a server error, no answer, Keystone refusing the re-auth): ask
    /// again later.
    Undecided,
}

/// Classify the probe's answer.
pub fn probe_answer(probe: &Result<(), CloudError>) -> ProbeAnswer {
    match probe {
        Ok(()) => ProbeAnswer::Allowed,
        // Only Neutron's own refusal counts: a 403 from Keystone on re-authentication
        // (CloudError::Auth) says nothing about the policy.
        Err(CloudError::Api { status: 403, .. }) => ProbeAnswer::Refused,
        Err(CloudError::Api {
            status: 404 | 501, ..
        }) => ProbeAnswer::Unavailable,
        Err(_) => ProbeAnswer::Undecided,
    }
}

/// A credential the checks let through, and how far they could look.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admitted {
    /// The names pass and Neutron refused the probe.
    Member,
    /// The names pass; the probe is not served by this cloud, so a policy that makes another
    /// role cloud admin cannot be seen.
    ProbeUnavailable,
}

/// What CredentialsResolved=True's message adds for an admitted credential.
pub fn admitted_note(a: Admitted) -> String {
    match a {
        Admitted::Member => String::new(),
        Admitted::ProbeUnavailable => format!(
            "; the policy probe could not run ({ADMIN_READ_PROBE} is not served by this cloud), so only the role names were checked"
        ),
    }
}

/// The whole verdict, from the token's roles and the answer to [`ADMIN_READ_PROBE`]. A 403
/// from Neutron is the answer a member gets; an allowed probe means the cloud's policy makes
/// one of the roles cloud admin; a cloud without the probe's URL leaves the role-name check
/// alone to decide; anything else decided nothing and is looked at again after the
/// fixed 15 s (AuthFailed, not retryable: no backoff).
pub fn verdict(
    secret: &str,
    roles: &[String],
    probe: &Result<(), CloudError>,
) -> Result<Admitted, StepFail> {
    check_role_names(secret, roles)?;
    match probe_answer(probe) {
        ProbeAnswer::Refused => Ok(Admitted::Member),
        ProbeAnswer::Unavailable => Ok(Admitted::ProbeUnavailable),
        ProbeAnswer::Allowed => Err(StepFail::terminal(
            Reason::CredentialsPrivileged,
            format!(
                "the application credential in secret {secret} is privileged: {ADMIN_READ_PROBE} was allowed, and Neutron allows it a cloud admin only; this cloud's policy makes one of the token's roles [{}] cloud admin (a customised context_is_admin); use an application credential of a member of the customer project",
                roles.join(", ")
            ),
        )),
        ProbeAnswer::Undecided => Err(StepFail::terminal(
            Reason::AuthFailed,
            format!(
                "could not check whether the application credential in secret {secret} is privileged: {ADMIN_READ_PROBE} failed: {}",
                probe
                    .as_ref()
                    .err()
                    .map(ToString::to_string)
                    .unwrap_or_default()
            ),
        )),
    }
}

/// What the checks found about the operator's own credential. Not a refusal: the operator
/// is what does the work, so a privileged credential is reported (a Warning Event on its Pod,
/// a `/readyz` line, a metric) and the operator runs on. It matters because under such a
/// credential Neutron shows every project's routers and ports: a `serviceClusterRouter` name
/// or ID resolves anywhere in the cloud, not only in the projects links build in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OperatorPrivilege {
    /// The role names pass and Neutron refused the probe.
    Member,
    /// Privileged: why.
    Privileged(String),
    /// The role names pass, but the probe decided nothing (a cloud without the quota details
    /// API, a server error, no answer): why. Not reported as privileged.
    ProbeUnavailable(String),
}

impl OperatorPrivilege {
    /// The `/readyz` line for it, if any (never a reason to be not ready).
    pub fn readiness_line(&self) -> Option<String> {
        match self {
            OperatorPrivilege::Member => None,
            OperatorPrivilege::Privileged(why) => Some(format!("warning: {why}")),
            OperatorPrivilege::ProbeUnavailable(why) => Some(format!("note: {why}")),
        }
    }
}

/// The same two checks as a customer credential's ([`privileged_role`], then the probe's
/// answer), on the operator's own token. `probe` is None when it was not sent (the names
/// already decided).
pub fn operator_privilege(
    roles: &[String],
    probe: Option<&Result<(), CloudError>>,
) -> OperatorPrivilege {
    const WHY: &str = "under it Neutron shows every project's routers and ports, so a spec.serviceClusterRouter name or ID resolves anywhere in the cloud (docs/operations.md, \"The operator's own credential\"); give the operator a credential with the member role in its own project";
    if let Some(role) = privileged_role(roles) {
        return OperatorPrivilege::Privileged(format!(
            "the operator's own OpenStack credential is privileged: its token carries the role {role:?} (admin, service and advsvc count in any letter case); {WHY}"
        ));
    }
    let Some(probe) = probe else {
        return OperatorPrivilege::ProbeUnavailable(format!(
            "the privilege probe on the operator's own OpenStack credential was not sent ({ADMIN_READ_PROBE}); only the role-name check was made, and it passed"
        ));
    };
    match (probe_answer(probe), probe) {
        (ProbeAnswer::Allowed, _) => OperatorPrivilege::Privileged(format!(
            "the operator's own OpenStack credential is privileged: {ADMIN_READ_PROBE} was allowed, and Neutron allows it a cloud admin only (this cloud's policy makes one of the roles [{}] cloud admin); {WHY}",
            roles.join(", ")
        )),
        (ProbeAnswer::Refused, _) => OperatorPrivilege::Member,
        // Unavailable (404, 501) and Undecided (5xx, no answer) alike: the operator runs
        // either way, and the next fabric check asks again.
        (ProbeAnswer::Unavailable | ProbeAnswer::Undecided, e) => {
            let why = e
                .as_ref()
                .err()
                .map(ToString::to_string)
                .unwrap_or_default();
            OperatorPrivilege::ProbeUnavailable(format!(
                "the privilege probe on the operator's own OpenStack credential could not run ({ADMIN_READ_PROBE}: {why}); only the role-name check was made, and it passed"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "bnerd-vpn-clusterlinks/clusterlink-diehl01";

    fn roles(r: &[&str]) -> Vec<String> {
        r.iter().map(|s| s.to_string()).collect()
    }

    fn api(status: u16, kind: &str) -> CloudError {
        CloudError::Api {
            method: "GET".into(),
            path: "/quotas/00000000000000000000000000000000/details".into(),
            status,
            kind: kind.into(),
            message: "m".into(),
        }
    }

    fn refused() -> Result<(), CloudError> {
        Err(api(403, "AdminRequired"))
    }

    /// (rule, roles, probe answer, expected: admitted how, or (reason, retryable, text in
    /// the message)).
    type Row = (
        &'static str,
        &'static [&'static str],
        Result<(), CloudError>,
        Result<Admitted, (Reason, bool, &'static str)>,
    );

    #[test]
    fn one_row_per_rule() {
        use Admitted::{Member, ProbeUnavailable};
        use Reason::{AuthFailed, CredentialsPrivileged};
        let rows: Vec<Row> = vec![
            (
                "rule: a typical member credential (_member_, load-balancer_member) passes",
                &["_member_", "load-balancer_member", "reader"],
                refused(),
                Ok(Member),
            ),
            (
                "a role whose name only includes `admin` (load-balancer_admin, sysadmin) is no admin role",
                &[
                    "member",
                    "load-balancer_admin",
                    "sysadmin",
                    "service_user",
                    "advsvc2",
                ],
                refused(),
                Ok(Member),
            ),
            (
                "rule: a role named admin is refused (CredentialsPrivileged)",
                &["member", "admin"],
                Ok(()),
                Err((CredentialsPrivileged, false, "role \"admin\"")),
            ),
            (
                "rule: ... in any letter case",
                &["member", "Admin"],
                Ok(()),
                Err((CredentialsPrivileged, false, "role \"Admin\"")),
            ),
            (
                "rule: a role named service is refused, in any letter case; the name check \
                 needs no probe (Neutron refuses the probe to service, which is no admin)",
                &["SERVICE", "member"],
                refused(),
                Err((CredentialsPrivileged, false, "role \"SERVICE\"")),
            ),
            (
                "rule: a role named advsvc is refused",
                &["advsvc"],
                refused(),
                Err((CredentialsPrivileged, false, "role \"advsvc\"")),
            ),
            (
                "an empty role list is refused too (AuthFailed), \
                 whatever the probe answers",
                &[],
                refused(),
                Err((AuthFailed, false, "carries no roles")),
            ),
            (
                "privilege probe: the names pass but the probe is allowed (a customised \
                 context_is_admin) -> CredentialsPrivileged naming the probe",
                &["member", "net_operator", "reader"],
                Ok(()),
                Err((
                    CredentialsPrivileged,
                    false,
                    "GET /v2.0/quotas/00000000000000000000000000000000/details was allowed",
                )),
            ),
            (
                "privilege probe: a 403 passes, whatever Neutron's error type",
                &["member", "reader"],
                Err(api(403, "PolicyNotAuthorized")),
                Ok(Member),
            ),
            (
                "a server error decided nothing: AuthFailed, looked at again after the \
                 fixed 15 s (not retryable: no backoff)",
                &["member"],
                Err(api(503, "")),
                Err((AuthFailed, false, "HTTP 503")),
            ),
            (
                "a cloud without the probe's URL (404, no quota_details): the role-name check \
                 alone decides, and the credential passes",
                &["member"],
                Err(api(404, "HTTPNotFound")),
                Ok(ProbeUnavailable),
            ),
            (
                "... and 501 (not implemented) likewise",
                &["member"],
                Err(api(501, "")),
                Ok(ProbeUnavailable),
            ),
            (
                "an unavailable probe never overrides the role names",
                &["admin"],
                Err(api(404, "HTTPNotFound")),
                Err((CredentialsPrivileged, false, "role \"admin\"")),
            ),
            (
                "no answer decided nothing: AuthFailed at the fixed 15 s",
                &["member"],
                Err(CloudError::Timeout {
                    method: "GET".into(),
                    path: "/quotas/x/details".into(),
                }),
                Err((AuthFailed, false, "timed out")),
            ),
            (
                "privilege probe: only Neutron's refusal passes; Keystone's 403 on re-authentication \
                 decided nothing",
                &["member"],
                Err(CloudError::Auth {
                    status: Some(403),
                    message: "Keystone answered HTTP 403 to the token request: Forbidden".into(),
                }),
                Err((AuthFailed, false, "Keystone answered HTTP 403")),
            ),
        ];
        for (rule, token_roles, probe, want) in rows {
            let got = verdict(SECRET, &roles(token_roles), &probe);
            match (want, got) {
                (Ok(want), Ok(got)) => assert_eq!(want, got, "{rule}"),
                (Err((reason, retryable, text)), Err(f)) => {
                    assert_eq!((f.reason, f.retryable), (reason, retryable), "{rule}");
                    assert!(f.message.contains(text), "{rule}: {}", f.message);
                    assert!(
                        f.message.contains(&format!("secret {SECRET}")),
                        "{rule}: the message names the Secret: {}",
                        f.message
                    );
                }
                (want, got) => panic!("{rule}: want {want:?}, got {got:?}"),
            }
        }
    }

    #[test]
    fn the_probe_answers_and_the_note_they_leave() {
        use ProbeAnswer::*;
        for (probe, want) in [
            (Ok(()), Allowed),
            (Err(api(403, "AdminRequired")), Refused),
            (Err(api(404, "HTTPNotFound")), Unavailable),
            (Err(api(501, "")), Unavailable),
            (Err(api(500, "")), Undecided),
            (Err(api(400, "")), Undecided),
            (
                Err(CloudError::Auth {
                    status: Some(404),
                    message: "m".into(),
                }),
                Undecided,
            ),
        ] {
            assert_eq!(probe_answer(&probe), want, "{probe:?}");
        }
        assert_eq!(admitted_note(Admitted::Member), "");
        let note = admitted_note(Admitted::ProbeUnavailable);
        assert!(
            note.contains("policy probe could not run") && note.contains(ADMIN_READ_PROBE),
            "{note}"
        );
    }

    #[test]
    fn the_name_check_decides_without_the_probe() {
        assert_eq!(
            privileged_role(&roles(&["member", "Service"])).map(String::as_str),
            Some("Service")
        );
        assert_eq!(
            privileged_role(&roles(&["member", "load-balancer_admin"])),
            None
        );
        assert!(check_role_names(SECRET, &roles(&["member", "load-balancer_admin"])).is_ok());
        let f = check_role_names(SECRET, &roles(&["aDvSvC"])).unwrap_err();
        assert_eq!(f.reason, Reason::CredentialsPrivileged);
        assert_eq!(
            check_role_names(SECRET, &[]).unwrap_err().reason,
            Reason::AuthFailed
        );
    }

    #[test]
    fn an_allowed_probe_names_the_roles_to_look_at() {
        let f = verdict(SECRET, &roles(&["member", "net_operator"]), &Ok(())).unwrap_err();
        assert!(
            f.message.contains("[member, net_operator]"),
            "{}",
            f.message
        );
    }

    #[test]
    fn the_operator_credential_one_row_per_rule() {
        use OperatorPrivilege::{Member, Privileged, ProbeUnavailable};
        /// (rule, roles, probe answer or None when not sent, expected finding, text in its
        /// `/readyz` line).
        type Row = (
            &'static str,
            &'static [&'static str],
            Option<Result<(), CloudError>>,
            fn(&OperatorPrivilege) -> bool,
            &'static str,
        );
        let rows: Vec<Row> = vec![
            (
                "a member (the lab's operator user): the names pass and Neutron refuses the probe",
                &["member", "reader"],
                Some(refused()),
                |p| *p == Member,
                "",
            ),
            (
                "load-balancer_admin is fine, as for a customer credential",
                &["member", "load-balancer_admin"],
                Some(refused()),
                |p| *p == Member,
                "",
            ),
            (
                "a role named admin, in any letter case: privileged, the probe not needed",
                &["member", "ADMIN"],
                None,
                |p| matches!(p, Privileged(_)),
                "role \"ADMIN\"",
            ),
            (
                "service and advsvc count as for a customer credential",
                &["Service"],
                None,
                |p| matches!(p, Privileged(_)),
                "role \"Service\"",
            ),
            (
                "the names pass but the probe is allowed (a customised context_is_admin)",
                &["member", "net_operator"],
                Some(Ok(())),
                |p| matches!(p, Privileged(_)),
                "was allowed",
            ),
            (
                "a cloud without the quota details API (404): probe unavailable, not privileged",
                &["member"],
                Some(Err(api(404, "HTTPNotFound"))),
                |p| matches!(p, ProbeUnavailable(_)),
                "could not run",
            ),
            (
                "501, 5xx, no answer: probe unavailable too (the next fabric check asks again)",
                &["member"],
                Some(Err(api(503, ""))),
                |p| matches!(p, ProbeUnavailable(_)),
                "HTTP 503",
            ),
            (
                "Keystone's 403 is no answer of Neutron's policy",
                &["member"],
                Some(Err(CloudError::Auth {
                    status: Some(403),
                    message: "Keystone answered HTTP 403 to the token request: Forbidden".into(),
                })),
                |p| matches!(p, ProbeUnavailable(_)),
                "Keystone answered HTTP 403",
            ),
        ];
        for (rule, token_roles, probe, want, text) in rows {
            let got = operator_privilege(&roles(token_roles), probe.as_ref());
            assert!(want(&got), "{rule}: {got:?}");
            let line = got.readiness_line().unwrap_or_default();
            assert!(line.contains(text), "{rule}: {line}");
            if let Privileged(why) = &got {
                assert!(
                    line.starts_with("warning: ") && why.contains("every project"),
                    "{rule}: the line says why it matters: {line}"
                );
            }
        }
    }
}
