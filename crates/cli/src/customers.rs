//! A cross-tenant link's credential as `plan` reaches it: the link's Secret read with the
//! caller's kubeconfig (its rights, not the operator's; a Secret it may not read is said so),
//! and a client on the application credential at the operator's own endpoint (never one a
//! Secret names), as the operator makes it.

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bnerd_api::SecretRef;
use bnerd_cloud::{OpenStack, error_chain};
use bnerd_engine::{CredentialSource, CustomerCloud, CustomerCredential};
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;

use crate::plan::SECRET_FORBIDDEN;

/// Secrets through the caller's kubeconfig; clients beside the caller's operator client.
pub struct CallerSecrets<'a> {
    pub kube: kube::Client,
    pub cloud: &'a OpenStack,
}

#[async_trait]
impl CredentialSource for CallerSecrets<'_> {
    async fn secret(&self, r: &SecretRef) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
        let api: Api<Secret> = Api::namespaced(self.kube.clone(), &r.namespace);
        match api.get_opt(&r.name).await {
            Ok(found) => Ok(found.map(bnerd_api::secrets::secret_data)),
            Err(kube::Error::Api(ae)) if ae.code == 403 => {
                Err(format!("{SECRET_FORBIDDEN} ({})", ae.message))
            }
            Err(e) => Err(error_chain(&e)),
        }
    }

    fn client(&self, c: &CustomerCredential) -> Arc<dyn CustomerCloud> {
        Arc::new(
            self.cloud
                .on_application_credential(c.id.clone(), c.secret.clone()),
        )
    }
}
