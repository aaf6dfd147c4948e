//! The Kubernetes side of cross-tenant credentials: reading `clusterlink-<name>` in the
//! credentials namespace, and one cached customer client per link, rebuilt only when the
//! Secret's UID or resourceVersion changes (docs/operations.md, "Rotate a customer credential").
//! Clients share the operator's HTTP connection pool.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bnerd_api::SecretRef;
use bnerd_cloud::OpenStack;
use k8s_openapi::api::core::v1::Secret;
use kube::api::Api;
use kube::{Client, ResourceExt};

use crate::engine::{Checked, CredentialSource, CustomerCloud, CustomerCredential};

/// A Secret version: its UID and resourceVersion.
type Version = (String, String);

struct Entry {
    version: Version,
    client: Arc<OpenStack>,
    checked: Option<Checked>,
}

/// Customer clients by ClusterLink name.
pub struct CustomerClients {
    operator: Arc<OpenStack>,
    entries: Mutex<HashMap<String, Entry>>,
}

impl CustomerClients {
    pub fn new(operator: Arc<OpenStack>) -> Self {
        Self {
            operator,
            entries: Mutex::new(HashMap::new()),
        }
    }

    /// A deleted link's client goes with it.
    pub fn forget(&self, link: &str) {
        self.lock().remove(link);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The credential source of one link for one reconcile.
    pub fn source<'a>(&'a self, client: &Client, link: &'a str) -> LinkSource<'a> {
        LinkSource {
            clients: self,
            kube: client.clone(),
            link,
            seen: Mutex::new(None),
        }
    }
}

/// One link's view: reads its Secret and hands out the cached client for that version.
pub struct LinkSource<'a> {
    clients: &'a CustomerClients,
    kube: Client,
    link: &'a str,
    /// The version `secret` read this reconcile.
    seen: Mutex<Option<Version>>,
}

impl LinkSource<'_> {
    fn seen(&self) -> Option<Version> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

#[async_trait]
impl CredentialSource for LinkSource<'_> {
    async fn secret(&self, r: &SecretRef) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
        let api: Api<Secret> = Api::namespaced(self.kube.clone(), &r.namespace);
        let secret = api
            .get_opt(&r.name)
            .await
            .map_err(|e| bnerd_cloud::error_chain(&e))?;
        let Some(secret) = secret else {
            return Ok(None);
        };
        let version = (
            secret.uid().unwrap_or_default(),
            secret.resource_version().unwrap_or_default(),
        );
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(version);
        let data = bnerd_api::secrets::secret_data(secret);
        Ok(Some(data))
    }

    fn client(&self, c: &CustomerCredential) -> Arc<dyn CustomerCloud> {
        let version = self.seen().unwrap_or_default();
        let mut entries = self.clients.lock();
        if let Some(e) = entries.get(self.link).filter(|e| e.version == version) {
            return e.client.clone();
        }
        let client = Arc::new(
            self.clients
                .operator
                .on_application_credential(c.id.clone(), c.secret.clone()),
        );
        entries.insert(
            self.link.to_string(),
            Entry {
                version,
                client: client.clone(),
                checked: None,
            },
        );
        client
    }

    fn checked(&self, _c: &CustomerCredential) -> Option<Checked> {
        let version = self.seen()?;
        let entries = self.clients.lock();
        entries
            .get(self.link)
            .filter(|e| e.version == version)
            .and_then(|e| e.checked.clone())
    }

    fn remember(&self, _c: &CustomerCredential, checked: Checked) {
        let Some(version) = self.seen() else {
            return;
        };
        if let Some(e) = self.clients.lock().get_mut(self.link)
            && e.version == version
        {
            e.checked = Some(checked);
        }
    }
}
