//! TenantIsolationAttested and CredentialsResolved, observe and act (cross-tenant only): the
//! attestation annotation, the Secret (read through a [`CredentialSource`], only when the
//! ref is allowed), a client on the customer's application credential, its token, the
//! privilege probe — each decided by `plan::tenant` and `plan::credentials`.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bnerd_api::names::ANNOTATION_API_ACCESS;
use bnerd_api::{Reason, SecretRef, TransitIsolation};
use bnerd_cloud::{Identity, Neutron};

use super::model::Input;
use super::plan::StepFail;
use super::plan::credentials::{
    Admitted, ProbeAnswer, admitted_note, check_role_names, probe_answer, verdict,
};
use super::plan::tenant::{
    CustomerCredential, OperatorEndpoint, Requeue, attested, auth_failed, credential_from_secret,
    project_checks, requeue_of, resolved_message,
};

/// A client of the customer's cloud: Neutron for the leg, Keystone for who it is.
pub trait CustomerCloud: Neutron + Identity {}
impl<T: Neutron + Identity + ?Sized> CustomerCloud for T {}

/// Where a cross-tenant link's credential comes from. The controller reads Secrets in the
/// credentials namespace and caches one client per Secret version; tests use the fake cloud
/// or the lab.
#[async_trait]
pub trait CredentialSource: Send + Sync {
    /// The Secret's data; `Ok(None)` when it does not exist. `Err` says why it could not be
    /// read (the message must not carry a value of it).
    async fn secret(&self, r: &SecretRef) -> Result<Option<BTreeMap<String, Vec<u8>>>, String>;
    /// A client that authenticates with this application credential at the operator's own
    /// endpoint (never one a Secret names).
    fn client(&self, c: &CustomerCredential) -> Arc<dyn CustomerCloud>;
    /// What an earlier reconcile found out about this credential (the same Secret version):
    /// its roles are looked at once per Secret version, and a version refused once is not
    /// tried again (docs/crd-reference.md, "CredentialsResolved").
    fn checked(&self, _c: &CustomerCredential) -> Option<Checked> {
        None
    }
    /// Remember a definitive finding about this credential.
    fn remember(&self, _c: &CustomerCredential, _checked: Checked) {}
}

/// A credential's definitive findings: its project, and the refusal when it is privileged.
#[derive(Debug, Clone)]
pub struct Checked {
    pub project_id: String,
    pub refused: Option<StepFail>,
    /// The privilege probe is not served by this cloud: only the role names were checked.
    pub probe_unavailable: bool,
}

/// Who the operator is, for the checks that compare a credential against it.
#[derive(Debug, Clone)]
pub struct OperatorIdentity {
    pub project_id: String,
    pub auth_url: String,
    pub region: Option<String>,
}

/// A resolved customer credential.
pub struct ResolvedCredential {
    pub client: Arc<dyn CustomerCloud>,
    pub project_id: String,
    /// `<ns>/<name>`
    pub secret: String,
    pub message: String,
    /// The privilege probe was sent by this resolve and this cloud does not serve it (the
    /// controller counts it; a remembered finding is not counted again).
    pub probe_unavailable_now: bool,
}

impl ResolvedCredential {
    /// The customer side of the engine for this credential.
    pub fn customer(&self) -> super::context::Customer<'_> {
        let net: &dyn Neutron = self.client.as_ref();
        super::context::Customer {
            net,
            project_id: &self.project_id,
            secret: &self.secret,
        }
    }
}

fn with_requeue(f: StepFail) -> (StepFail, Requeue) {
    let q = requeue_of(&f);
    (f, q)
}

/// TenantIsolationAttested, decided from the object alone: a cross-tenant link without the
/// attestation stops here, before any OpenStack call, the credential's resolution included
/// (docs/crd-reference.md, "TenantIsolationAttested").
pub fn attestation(
    input: &Input<'_>,
    r: &SecretRef,
    isolation: TransitIsolation,
) -> Result<(Reason, String), StepFail> {
    attested(
        isolation,
        input
            .annotations
            .get(ANNOTATION_API_ACCESS)
            .map(String::as_str),
        r,
    )
}

/// CredentialsResolved, in the order of docs/crd-reference.md, "CredentialsResolved": the ref
/// (before any read), the Secret, the token, its role names, the privilege probe (sent only
/// when the names pass: a refused name needs no call), then the projects. The token, roles and
/// probe are facts of the credential, remembered per Secret version; the projects are checked
/// against the spec and status, which change, so they come last and run every time.
pub async fn resolve(
    source: &dyn CredentialSource,
    operator: &OperatorIdentity,
    credentials_namespace: &str,
    input: &Input<'_>,
    r: &SecretRef,
) -> Result<ResolvedCredential, (StepFail, Requeue)> {
    let secret = format!("{}/{}", r.namespace, r.name);
    super::plan::tenant::secret_ref_allowed(input.name, r, credentials_namespace)?;
    let data = source
        .secret(r)
        .await
        .map_err(|why| auth_failed(&secret, &format!("reading the Secret failed: {why}")))?;
    let endpoint = OperatorEndpoint {
        auth_url: &operator.auth_url,
        region: operator.region.as_deref(),
    };
    let cred = credential_from_secret(r, data.as_ref(), &endpoint)?;
    let client = source.client(&cred);
    let mut probe_unavailable_now = false;
    let checked = match source.checked(&cred) {
        Some(c) => c,
        None => {
            let token = client
                .token_info()
                .await
                .map_err(|e| auth_failed(&secret, &e.to_string()))?;
            let mut admitted = Admitted::Member;
            let refused = match check_role_names(&secret, &token.roles) {
                // A role list is fixed when an application credential is made.
                Err(f) => Some(f),
                Ok(()) => {
                    let probe = client.probe_admin_read().await;
                    match verdict(&secret, &token.roles, &probe) {
                        Ok(a) => {
                            admitted = a;
                            None
                        }
                        // Nothing decided: asked again, never remembered.
                        Err(f) if probe_answer(&probe) == ProbeAnswer::Undecided => {
                            return Err(with_requeue(f));
                        }
                        Err(f) => Some(f),
                    }
                }
            };
            probe_unavailable_now = admitted == Admitted::ProbeUnavailable;
            let c = Checked {
                project_id: token.project_id,
                refused,
                probe_unavailable: probe_unavailable_now,
            };
            source.remember(&cred, c.clone());
            c
        }
    };
    if let Some(f) = checked.refused {
        return Err(with_requeue(f));
    }
    let spec_project = input
        .spec
        .customer_project_id
        .as_deref()
        .unwrap_or_default();
    project_checks(
        r,
        &checked.project_id,
        spec_project,
        &operator.project_id,
        input.status.customer_project_id.as_deref(),
        input.status.leg_port_id.is_some(),
    )?;
    let admitted = if checked.probe_unavailable {
        Admitted::ProbeUnavailable
    } else {
        Admitted::Member
    };
    Ok(ResolvedCredential {
        message: format!(
            "{}{}",
            resolved_message(&secret, &checked.project_id),
            admitted_note(admitted)
        ),
        probe_unavailable_now,
        client,
        project_id: checked.project_id,
        secret,
    })
}

/// How a cross-tenant link reaches its customer's credential.
#[derive(Clone, Copy)]
pub struct Customers<'a> {
    pub source: &'a dyn CredentialSource,
    pub operator: &'a OperatorIdentity,
    /// The namespace the credential Secrets live in.
    pub namespace: &'a str,
}
