//! The cross-tenant gates before any OpenStack change (docs/design.md, "A cross-tenant link"):
//! TenantIsolationAttested, then CredentialsResolved up to the point where the customer's
//! credential is known to be the right one. Pure: the Secret arrives as its key names and
//! bytes, the token as project and roles; nothing here reads or sends anything.
//!
//! The engine's credential step (`credentials::resolve`) and the cross-tenant unwind call these
//! rules; they are table-tested against docs/crd-reference.md, "TenantIsolationAttested" and
//! "CredentialsResolved".

use std::collections::BTreeMap;

use bnerd_api::echo::quoted;
use bnerd_api::names::{ANNOTATION_API_ACCESS, credentials_secret_name};
use bnerd_api::{Reason, SecretRef, TransitIsolation};

use super::StepFail;

/// The Secret keys of the contract.
pub use bnerd_api::names::{KEY_AC_ID, KEY_AC_SECRET};
pub const KEY_AUTH_URL: &str = "OS_AUTH_URL";
pub const KEY_REGION: &str = "OS_REGION_NAME";
/// Keys of a username/password credential: refused, application credentials only.
const PASSWORD_KEYS: [&str; 4] = ["OS_USERNAME", "OS_PASSWORD", "OS_USER_ID", "OS_TOKEN"];

/// How a failure of these gates wants to be looked at again (docs/crd-reference.md,
/// "CredentialsResolved").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Requeue {
    /// Looked at again after a fixed 15 seconds.
    Fixed15s,
    /// Looked at again at the resync interval (refusals, and what needs a human).
    Resync,
}

/// When a CredentialsResolved failure is looked at again (docs/crd-reference.md): refusals and what
/// needs a human at the resync interval, everything else at a fixed 15 s.
pub fn requeue_of(f: &StepFail) -> Requeue {
    match f.reason {
        Reason::CredentialsPrivileged
        | Reason::CredentialsProjectMismatch
        | Reason::CredentialsProjectChanged => Requeue::Resync,
        _ => Requeue::Fixed15s,
    }
}

/// The credential could not be used to authenticate (or its Secret not be read).
pub fn auth_failed(secret: &str, why: &str) -> (StepFail, Requeue) {
    (
        StepFail::terminal(
            Reason::AuthFailed,
            format!(
                "secret {secret}: authenticating with its application credential failed: {why}"
            ),
        ),
        Requeue::Fixed15s,
    )
}

/// A deleting cross-tenant link whose customer credential does not resolve to the project
/// its leg was built in: CredentialsResolved=False/CredentialsUnavailable (or
/// CredentialsProjectMismatch for a credential of the wrong project), and the finalizer is
/// held: a credential that cannot be reached never lets the object go while its OpenStack
/// resources stay behind unnoticed (docs/crd-reference.md, "Deletion").
pub fn unavailable(f: &StepFail) -> StepFail {
    let reason = match f.reason {
        Reason::CredentialsProjectMismatch | Reason::CredentialsProjectChanged => {
            Reason::CredentialsProjectMismatch
        }
        _ => Reason::CredentialsUnavailable,
    };
    StepFail {
        reason,
        message: format!(
            "the customer side cannot be unwound ({}); the gateway route is removed and the ClusterLink stays until the Secret is fixed, or a human sets ipsec.bnerd.net/abandon-customer-resources=true",
            f.message
        ),
        retryable: true,
    }
}

/// CredentialsResolved=True's message.
pub fn resolved_message(secret: &str, project: &str) -> String {
    format!(
        "secret {secret}: a member-scoped application credential of project {project}, the project spec.customerProjectID names"
    )
}

/// TenantIsolationAttested is NotAttested while the attestation annotation is absent or holds
/// anything but exactly "none": no OpenStack call is made, and no retry helps until someone
/// sets it (docs/crd-reference.md, "TenantIsolationAttested"). A `PerCustomer` link needs
/// no annotation (StructuralIsolation): its transit is shared with its own project only.
/// The True reason and message.
pub fn attested(
    isolation: TransitIsolation,
    annotation: Option<&str>,
    secret: &SecretRef,
) -> Result<(Reason, String), StepFail> {
    let s = secret_name(secret);
    match isolation {
        TransitIsolation::PerCustomer => {
            return Ok((
                Reason::StructuralIsolation,
                bnerd_api::conditions::structural_isolation_message(&s),
            ));
        }
        TransitIsolation::Shared => {}
    }
    match annotation {
        Some("none") => Ok((
            Reason::Attested,
            format!(
                "{ANNOTATION_API_ACCESS}=\"none\": the customer has no OpenStack API access of its own (secret {s})"
            ),
        )),
        other => Err(StepFail::terminal(
            Reason::NotAttested,
            format!(
                "annotation {ANNOTATION_API_ACCESS} is {}, not exactly \"none\"; a platform admin sets it once the customer has no OpenStack API access of its own into that project; no OpenStack call is made until then (secret {s})",
                match other {
                    None => "missing".to_string(),
                    Some(v) => quoted(v),
                }
            ),
        )),
    }
}

/// What the customer project holds of the main transit network, looked at for a
/// `PerCustomer` link: its isolation is structural only while it holds nothing there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MainTransitShare {
    /// The customer's credential does not see the main transit network.
    None,
    /// It sees it: through these rules of the operator's (left by an earlier `Shared` link, a
    /// migration, or by hand on the operator's credential), or through a rule the operator
    /// cannot list (an admin's) when the list is empty.
    Visible { rules: Vec<String> },
}

/// TenantIsolationAttested of a `PerCustomer` link once its project's view of the main
/// transit network is known. Without a share of it the isolation is structural. With one, the
/// project can still make ports on the main transit and reach every link through it: then the
/// link needs the attestation a `Shared` link needs, and the message names the share and the
/// command that removes it. The link's own path is built either way (it adds no reach).
pub fn per_customer_isolation(
    share: &MainTransitShare,
    transit: &str,
    project: &str,
    annotation: Option<&str>,
    secret: &SecretRef,
) -> Result<(Reason, String), StepFail> {
    let MainTransitShare::Visible { rules } = share else {
        return attested(TransitIsolation::PerCustomer, annotation, secret);
    };
    let which = if rules.is_empty() {
        "by a rule the operator's credential cannot list (an admin's)".to_string()
    } else {
        format!("by RBAC rule(s) {}", rules.join(", "))
    };
    let standing = format!(
        "the main transit network {transit} is still shared with project {project} ({which}): the project can make ports on it and reach every link through it, so spec.transitIsolation PerCustomer isolates nothing while that share stands; remove it once no Shared link of the project needs it (kubectl clusterlink decommission-share --project {project})"
    );
    match attested(TransitIsolation::Shared, annotation, secret) {
        Ok((reason, _)) => Ok((
            reason,
            format!(
                "{ANNOTATION_API_ACCESS}=\"none\" attests what isolation cannot yet: {standing} (secret {})",
                secret_name(secret)
            ),
        )),
        Err(f) => Err(StepFail::terminal(
            f.reason,
            format!(
                "not isolated: {standing}; until then the link needs annotation {ANNOTATION_API_ACCESS}=\"none\" like a Shared link (secret {})",
                secret_name(secret)
            ),
        )),
    }
}

fn secret_name(r: &SecretRef) -> String {
    format!("{}/{}", r.namespace, r.name)
}

/// The Secret ref, checked before the Secret is read: a namespace other than the operator's
/// credentials namespace is SecretNamespaceNotAllowed, and a name other than
/// `clusterlink-<link name>` is SecretNameNotAllowed (docs/crd-reference.md,
/// "CredentialsResolved"). Both decided from the link's spec alone.
pub fn secret_ref_allowed(
    link: &str,
    r: &SecretRef,
    credentials_namespace: &str,
) -> Result<(), (StepFail, Requeue)> {
    let s = secret_name(r);
    if r.namespace != credentials_namespace {
        return Err((
            StepFail::terminal(
                Reason::SecretNamespaceNotAllowed,
                format!(
                    "secret {s}: credentials Secrets must live in the operator's credentials namespace {credentials_namespace} (IPSEC_CLUSTERLINK_CREDENTIALS_NAMESPACE); the Secret was not read"
                ),
            ),
            Requeue::Fixed15s,
        ));
    }
    let want = credentials_secret_name(link);
    if r.name != want {
        return Err((
            StepFail::terminal(
                Reason::SecretNameNotAllowed,
                format!(
                    "secret {s}: a ClusterLink may only use the Secret written for it, {credentials_namespace}/{want}; the Secret was not read"
                ),
            ),
            Requeue::Fixed15s,
        ));
    }
    Ok(())
}

/// The customer's application credential, read from the Secret. The secret part is held in
/// a type that never prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomerCredential {
    pub id: String,
    pub secret: bnerd_cloud::SecretString,
}

/// The operator's own endpoint, against which a Secret's optional keys are compared.
#[derive(Debug, Clone)]
pub struct OperatorEndpoint<'a> {
    pub auth_url: &'a str,
    pub region: Option<&'a str>,
}

fn same_url(a: &str, b: &str) -> bool {
    a.trim_end_matches('/') == b.trim_end_matches('/')
}

/// Read the Secret's data (None: it does not exist). OS_APPLICATION_CREDENTIAL_ID and
/// OS_APPLICATION_CREDENTIAL_SECRET are required (an application credential, nothing else);
/// OS_AUTH_URL and OS_REGION_NAME may be left out, but when given they have to match the
/// operator's own Keystone endpoint and region exactly (a trailing / does not count), else the
/// Secret is CredentialsInvalid (docs/crd-reference.md, "CredentialsResolved"). Messages name
/// keys, never values.
pub fn credential_from_secret(
    r: &SecretRef,
    data: Option<&BTreeMap<String, Vec<u8>>>,
    operator: &OperatorEndpoint<'_>,
) -> Result<CustomerCredential, (StepFail, Requeue)> {
    let s = secret_name(r);
    let invalid = |m: String| {
        (
            StepFail::terminal(Reason::CredentialsInvalid, format!("secret {s}: {m}")),
            Requeue::Fixed15s,
        )
    };
    let Some(data) = data else {
        return Err((
            StepFail::terminal(
                Reason::SecretNotFound,
                format!(
                    "secret {s} does not exist; hq writes it with the customer's application credential"
                ),
            ),
            Requeue::Fixed15s,
        ));
    };
    // A source that read the Secret says its type; one that did not (a test's) says nothing.
    if let Some(t) = data.get(bnerd_api::secrets::TYPE_KEY)
        && t.as_slice() != bnerd_api::secrets::OPAQUE.as_bytes()
    {
        return Err(invalid(format!(
            "is of type {}, not {}: write the application credential into an Opaque Secret",
            quoted(&String::from_utf8_lossy(t)),
            bnerd_api::secrets::OPAQUE
        )));
    }
    if let Some(k) = PASSWORD_KEYS.iter().find(|k| data.contains_key(**k)) {
        return Err(invalid(format!(
            "has key {k}: username/password credentials are refused, use an application credential ({KEY_AC_ID}, {KEY_AC_SECRET})"
        )));
    }
    let text = |key: &str| -> Result<Option<String>, (StepFail, Requeue)> {
        match data.get(key) {
            None => Ok(None),
            Some(v) => match std::str::from_utf8(v) {
                Ok(t) if !t.trim().is_empty() => Ok(Some(t.trim().to_string())),
                Ok(_) => Err(invalid(format!("key {key} is empty"))),
                Err(_) => Err(invalid(format!("key {key} is not UTF-8 text"))),
            },
        }
    };
    let required = |key: &str| -> Result<String, (StepFail, Requeue)> {
        text(key)?.ok_or_else(|| invalid(format!("required key {key} is missing")))
    };
    let id = required(KEY_AC_ID)?;
    let secret = required(KEY_AC_SECRET)?;
    if let Some(url) = text(KEY_AUTH_URL)?
        && !same_url(&url, operator.auth_url)
    {
        // Never send anything to a Secret-supplied endpoint: the value is not even echoed.
        return Err(invalid(format!(
            "key {KEY_AUTH_URL} differs from the operator's own Keystone endpoint; remove it or set it to the operator's"
        )));
    }
    if let Some(region) = text(KEY_REGION)?
        && Some(region.as_str()) != operator.region
    {
        // The value is the Secret's: named by key only, like every other one.
        return Err(invalid(format!(
            "key {KEY_REGION} differs from the operator's region {}; remove it or set it to the operator's",
            operator.region.unwrap_or("(none)")
        )));
    }
    Ok(CustomerCredential {
        id,
        secret: bnerd_cloud::SecretString::new(secret),
    })
}

/// After authenticating: the project the credential lives in, against the link and the
/// operator (docs/crd-reference.md, "CredentialsResolved"): the operator's own project, as the
/// credential's or as `spec.customerProjectID`, is refused (CredentialsAreOperatorProject); a
/// credential of another project than the link names is CredentialsResolved=False/
/// CredentialsProjectMismatch, the message giving both IDs, before anything is shared,
/// created or attached; and a credential whose project differs from the one the link's leg
/// was built in, or a leg with no project ever recorded, is CredentialsProjectChanged.
pub fn project_checks(
    r: &SecretRef,
    token_project: &str,
    spec_project: &str,
    operator_project: &str,
    built_in: Option<&str>,
    leg_exists: bool,
) -> Result<(), (StepFail, Requeue)> {
    let s = secret_name(r);
    if spec_project == operator_project || token_project == operator_project {
        return Err((
            StepFail::terminal(
                Reason::CredentialsAreOperatorProject,
                format!(
                    "secret {s}: the credential or spec.customerProjectID is the operator's own project {operator_project}; a cross-tenant link needs the customer's project (use a same-tenant link instead)"
                ),
            ),
            Requeue::Fixed15s,
        ));
    }
    if token_project != spec_project {
        return Err((
            StepFail::terminal(
                Reason::CredentialsProjectMismatch,
                format!(
                    "secret {s}: the credential authenticates into project {token_project}, but spec.customerProjectID is {spec_project}; nothing was shared, created or attached"
                ),
            ),
            Requeue::Resync,
        ));
    }
    match built_in {
        Some(p) if p != token_project => Err((
            StepFail::terminal(
                Reason::CredentialsProjectChanged,
                format!(
                    "secret {s}: the credential's project {token_project} is not the project {p} this link's leg was built in; restore the right credential"
                ),
            ),
            Requeue::Resync,
        )),
        None if leg_exists => Err((
            StepFail::terminal(
                Reason::CredentialsProjectChanged,
                format!(
                    "secret {s}: a leg exists but no project was ever pinned for it (status.customerProjectID); restore the credential it was built with"
                ),
            ),
            Requeue::Resync,
        )),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_per_customer_link_is_isolated_only_without_a_main_transit_share() {
        let secret = SecretRef {
            name: "clusterlink-x".into(),
            namespace: "ns".into(),
        };
        let run = |share: &MainTransitShare, annotation: Option<&str>| {
            per_customer_isolation(share, "transit-1", "proj-1", annotation, &secret)
        };
        let none = MainTransitShare::None;
        assert_eq!(run(&none, None).unwrap().0, Reason::StructuralIsolation);
        let ours = MainTransitShare::Visible {
            rules: vec!["rbac-1".into()],
        };
        let (reason, m) = run(&ours, Some("none")).unwrap();
        assert_eq!(reason, Reason::Attested);
        for want in [
            "transit-1",
            "proj-1",
            "rbac-1",
            "decommission-share --project proj-1",
        ] {
            assert!(m.contains(want), "{want}: {m}");
        }
        let f = run(&ours, None).unwrap_err();
        assert_eq!((f.reason, f.retryable), (Reason::NotAttested, false));
        assert!(f.message.starts_with("not isolated: "), "{}", f.message);
        assert!(f.message.contains("rbac-1"), "{}", f.message);
        let admins = MainTransitShare::Visible { rules: vec![] };
        let f = run(&admins, Some("yes")).unwrap_err();
        assert!(f.message.contains("cannot list"), "{}", f.message);
    }

    use super::*;

    fn sref(ns: &str, name: &str) -> SecretRef {
        SecretRef {
            namespace: ns.into(),
            name: name.into(),
        }
    }

    const NS: &str = "bnerd-vpn-clusterlinks";

    #[test]
    fn attestation_is_exactly_none() {
        let r = sref(NS, "clusterlink-diehl01");
        assert_eq!(
            attested(TransitIsolation::Shared, Some("none"), &r)
                .unwrap()
                .0,
            Reason::Attested
        );
        // PerCustomer: no annotation needed, whatever it says.
        for a in [None, Some("none"), Some("yes")] {
            let (reason, msg) = attested(TransitIsolation::PerCustomer, a, &r).unwrap();
            assert_eq!(reason, Reason::StructuralIsolation);
            assert!(msg.contains("PerCustomer"), "{msg}");
        }
        for bad in [None, Some("None"), Some("none "), Some(""), Some("yes")] {
            let f = attested(TransitIsolation::Shared, bad, &r).unwrap_err();
            assert_eq!(f.reason, Reason::NotAttested, "{bad:?}");
            assert!(
                f.message.contains(ANNOTATION_API_ACCESS)
                    && f.message
                        .contains("secret bnerd-vpn-clusterlinks/clusterlink-diehl01")
            );
            assert!(!f.retryable);
        }
    }

    #[test]
    fn the_ref_is_checked_before_the_secret_is_read() {
        assert!(secret_ref_allowed("diehl01", &sref(NS, "clusterlink-diehl01"), NS).is_ok());
        // A ref outside the credentials namespace is refused at reconcile time.
        let (f, q) =
            secret_ref_allowed("diehl01", &sref("default", "clusterlink-diehl01"), NS).unwrap_err();
        assert_eq!(
            (f.reason, q),
            (Reason::SecretNamespaceNotAllowed, Requeue::Fixed15s)
        );
        // So is a ref to a Secret not named for this link (another link's, say).
        let (f, _) = secret_ref_allowed("diehl01", &sref(NS, "clusterlink-other"), NS).unwrap_err();
        assert_eq!(f.reason, Reason::SecretNameNotAllowed);
        assert!(f.message.contains("clusterlink-diehl01") && f.message.contains("not read"));
    }

    fn data(pairs: &[(&str, &[u8])]) -> BTreeMap<String, Vec<u8>> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_vec()))
            .collect()
    }

    const OP: OperatorEndpoint<'static> = OperatorEndpoint {
        auth_url: "http://127.0.0.1:5000/v3",
        region: Some("RegionOne"),
    };

    #[test]
    fn secret_contents() {
        let r = sref(NS, "clusterlink-x");
        let ok = data(&[(KEY_AC_ID, b"acid"), (KEY_AC_SECRET, b"s3cr3t-value")]);
        let c = credential_from_secret(&r, Some(&ok), &OP).unwrap();
        assert_eq!(c.id, "acid");
        assert!(
            !format!("{c:?}").contains("s3cr3t-value"),
            "the secret never prints"
        );
        // The Secret's type must be Opaque: another type is refused, naming it; Opaque passes.
        let mut typed = ok.clone();
        typed.insert(
            bnerd_api::secrets::TYPE_KEY.into(),
            b"kubernetes.io/basic-auth".to_vec(),
        );
        let (f, q) = credential_from_secret(&r, Some(&typed), &OP).unwrap_err();
        assert_eq!(
            (f.reason, q),
            (Reason::CredentialsInvalid, Requeue::Fixed15s)
        );
        assert!(
            f.message.contains("\"kubernetes.io/basic-auth\"") && f.message.contains("Opaque"),
            "{}",
            f.message
        );
        typed.insert(bnerd_api::secrets::TYPE_KEY.into(), b"Opaque".to_vec());
        assert!(credential_from_secret(&r, Some(&typed), &OP).is_ok());
        // SecretNotFound
        let (f, q) = credential_from_secret(&r, None, &OP).unwrap_err();
        assert_eq!((f.reason, q), (Reason::SecretNotFound, Requeue::Fixed15s));
        // A required key left out.
        let (f, _) =
            credential_from_secret(&r, Some(&data(&[(KEY_AC_ID, b"a")])), &OP).unwrap_err();
        assert_eq!(f.reason, Reason::CredentialsInvalid);
        assert!(f.message.contains(KEY_AC_SECRET));
        // Username/password keys are refused.
        let pw = data(&[
            (KEY_AC_ID, b"a"),
            (KEY_AC_SECRET, b"b"),
            ("OS_PASSWORD", b"hunter2"),
        ]);
        let (f, _) = credential_from_secret(&r, Some(&pw), &OP).unwrap_err();
        assert!(f.message.contains("OS_PASSWORD") && !f.message.contains("hunter2"));
        // OS_AUTH_URL has to be the operator's own endpoint; a trailing / does not count.
        let mut same = ok.clone();
        same.insert(KEY_AUTH_URL.into(), b"http://127.0.0.1:5000/v3/".to_vec());
        same.insert(KEY_REGION.into(), b"RegionOne".to_vec());
        assert!(credential_from_secret(&r, Some(&same), &OP).is_ok());
        let mut evil = ok.clone();
        evil.insert(KEY_AUTH_URL.into(), b"https://evil.example/v3".to_vec());
        let (f, _) = credential_from_secret(&r, Some(&evil), &OP).unwrap_err();
        assert_eq!(f.reason, Reason::CredentialsInvalid);
        assert!(!f.message.contains("evil.example"), "{}", f.message);
        let mut region = ok.clone();
        region.insert(KEY_REGION.into(), b"RegionTwo".to_vec());
        assert_eq!(
            credential_from_secret(&r, Some(&region), &OP)
                .unwrap_err()
                .0
                .reason,
            Reason::CredentialsInvalid
        );
        // Bytes that are not text are named by key only.
        let bin = data(&[(KEY_AC_ID, b"a"), (KEY_AC_SECRET, &[0xff, 0xfe])]);
        let (f, _) = credential_from_secret(&r, Some(&bin), &OP).unwrap_err();
        assert!(f.message.contains("not UTF-8"));
    }

    #[test]
    fn a_held_unwind_keeps_a_wrong_project_as_its_reason() {
        let f = |reason| StepFail::terminal(reason, "m");
        assert_eq!(
            unavailable(&f(Reason::SecretNotFound)).reason,
            Reason::CredentialsUnavailable
        );
        assert_eq!(
            unavailable(&f(Reason::AuthFailed)).reason,
            Reason::CredentialsUnavailable
        );
        for r in [
            Reason::CredentialsProjectMismatch,
            Reason::CredentialsProjectChanged,
        ] {
            assert_eq!(
                unavailable(&f(r)).reason,
                Reason::CredentialsProjectMismatch
            );
        }
        assert!(
            unavailable(&f(Reason::AuthFailed))
                .message
                .contains("abandon-customer-resources=true")
        );
    }

    #[test]
    fn requeue_classes() {
        // A fixed 15 s requeue for most; refusals are looked at again at the resync interval.
        let f = |reason| StepFail::terminal(reason, "m");
        for r in [
            Reason::SecretNotFound,
            Reason::SecretNamespaceNotAllowed,
            Reason::SecretNameNotAllowed,
            Reason::CredentialsInvalid,
            Reason::AuthFailed,
            Reason::CredentialsAreOperatorProject,
        ] {
            assert_eq!(requeue_of(&f(r)), Requeue::Fixed15s, "{r}");
        }
        for r in [
            Reason::CredentialsPrivileged,
            Reason::CredentialsProjectMismatch,
            Reason::CredentialsProjectChanged,
        ] {
            assert_eq!(requeue_of(&f(r)), Requeue::Resync, "{r}");
        }
        let (f, q) = auth_failed(
            "ns/n",
            "Keystone answered HTTP 404 to the token request: Not Found",
        );
        assert_eq!((f.reason, q), (Reason::AuthFailed, Requeue::Fixed15s));
    }

    #[test]
    fn projects() {
        let r = sref(NS, "clusterlink-x");
        assert!(project_checks(&r, "cust", "cust", "op", None, false).is_ok());
        assert!(project_checks(&r, "cust", "cust", "op", Some("cust"), true).is_ok());
        // The operator's own project is refused, from the token or from the spec.
        for (tok, spec) in [("op", "op"), ("op", "cust"), ("cust", "op")] {
            let (f, _) = project_checks(&r, tok, spec, "op", None, false).unwrap_err();
            assert_eq!(
                f.reason,
                Reason::CredentialsAreOperatorProject,
                "{tok} {spec}"
            );
        }
        // The message carries both projects; a refusal is looked at again at the resync.
        let (f, q) = project_checks(&r, "other", "cust", "op", None, false).unwrap_err();
        assert_eq!(
            (f.reason, q),
            (Reason::CredentialsProjectMismatch, Requeue::Resync)
        );
        assert!(f.message.contains("other") && f.message.contains("cust"));
        // CredentialsProjectChanged: the credential's project is not the one the leg was
        // built in (or a leg stands with no project ever recorded).
        let (f, q) = project_checks(&r, "cust", "cust", "op", Some("older"), true).unwrap_err();
        assert_eq!(
            (f.reason, q),
            (Reason::CredentialsProjectChanged, Requeue::Resync)
        );
        let (f, _) = project_checks(&r, "cust", "cust", "op", None, true).unwrap_err();
        assert_eq!(f.reason, Reason::CredentialsProjectChanged);
    }
}
