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

#[cfg(test)]
mod tests {
    //! The cache against a mock apiserver (a `tower_test` service behind the kube client)
    //! that serves one Secret, whose UID and resourceVersion the test changes between
    //! reconciles as an update or a delete-and-recreate of the Secret would.

    use super::*;
    use bnerd_cloud::{AuthConfig, AuthMethod, SecretString};
    use http::{Request, Response};
    use kube::client::Body;

    const NS: &str = "bnerd-vpn-clusterlinks";

    /// A kube client whose apiserver answers every GET with the Secret `clusterlink-l1` at the
    /// version `version` holds then.
    fn apiserver(version: Arc<Mutex<Version>>) -> Client {
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        tokio::spawn(async move {
            while let Some((req, send)) = handle.next_request().await {
                assert_eq!(
                    req.uri().path(),
                    format!("/api/v1/namespaces/{NS}/secrets/clusterlink-l1")
                );
                let (uid, rv) = version.lock().unwrap().clone();
                let secret = serde_json::json!({
                    "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                    "metadata": {"name": "clusterlink-l1", "namespace": NS, "uid": uid, "resourceVersion": rv},
                    // "acid" and "s3cr3t"
                    "data": {"OS_APPLICATION_CREDENTIAL_ID": "YWNpZA==", "OS_APPLICATION_CREDENTIAL_SECRET": "czNjcjN0"},
                });
                let resp = Response::builder()
                    .status(200)
                    .body(Body::from(serde_json::to_vec(&secret).unwrap()))
                    .unwrap();
                send.send_response(resp);
            }
        });
        Client::new(service, "default")
    }

    /// The operator's client; nothing here sends a request with it.
    fn operator() -> Arc<OpenStack> {
        Arc::new(
            OpenStack::new(AuthConfig {
                auth_url: "http://127.0.0.1:9/v3".into(),
                region: None,
                interface: "public".into(),
                method: AuthMethod::ApplicationCredential {
                    id: "operator".into(),
                    secret: SecretString::new(String::from("unused")),
                },
                tls: Default::default(),
            })
            .expect("client"),
        )
    }

    /// One reconcile's use of the source, in the engine's order (`credentials::resolve`):
    /// read the Secret, take the client, ask what is known of it, and remember what the
    /// check found when nothing was. Returns the client and whether it was checked afresh.
    async fn resolve(
        clients: &CustomerClients,
        kube: &Client,
        project: &str,
    ) -> (Arc<dyn CustomerCloud>, bool) {
        let source = clients.source(kube, "l1");
        let r = SecretRef {
            namespace: NS.into(),
            name: "clusterlink-l1".into(),
        };
        let data = source.secret(&r).await.expect("read").expect("the Secret");
        assert_eq!(data["OS_APPLICATION_CREDENTIAL_ID"], b"acid");
        let cred = CustomerCredential {
            id: "acid".into(),
            secret: SecretString::new(String::from("s3cr3t")),
        };
        let client = source.client(&cred);
        let fresh = source.checked(&cred).is_none();
        if fresh {
            source.remember(
                &cred,
                Checked {
                    project_id: project.into(),
                    refused: None,
                    probe_unavailable: false,
                },
            );
        }
        (client, fresh)
    }

    fn same(a: &Arc<dyn CustomerCloud>, b: &Arc<dyn CustomerCloud>) -> bool {
        std::ptr::addr_eq(Arc::as_ptr(a), Arc::as_ptr(b))
    }

    /// "It keeps one customer client per link and builds a new one only when the Secret's UID
    /// or resourceVersion changes; the new credential is authenticated and its roles checked
    /// once" (docs/operations.md, "Rotate a customer credential").
    #[tokio::test]
    async fn one_client_and_one_check_per_secret_version() {
        let version = Arc::new(Mutex::new(("uid-1".to_string(), "1".to_string())));
        let kube = apiserver(version.clone());
        let clients = CustomerClients::new(operator());

        let (first, fresh) = resolve(&clients, &kube, "customer").await;
        assert!(fresh, "a Secret version never seen is checked");
        let (again, fresh) = resolve(&clients, &kube, "customer").await;
        assert!(same(&first, &again), "the same version keeps its client");
        assert!(!fresh, "the same version is not checked again");

        // The Secret updated in place: a new resourceVersion.
        *version.lock().unwrap() = ("uid-1".into(), "2".into());
        let (rotated, fresh) = resolve(&clients, &kube, "customer").await;
        assert!(
            !same(&rotated, &first),
            "a new resourceVersion, a new client"
        );
        assert!(fresh, "a new resourceVersion is checked again");
        let (kept, fresh) = resolve(&clients, &kube, "customer").await;
        assert!(same(&kept, &rotated) && !fresh);

        // Deleted and made again under the same name: a new UID, whatever its
        // resourceVersion reads.
        *version.lock().unwrap() = ("uid-2".into(), "2".into());
        let (recreated, fresh) = resolve(&clients, &kube, "customer").await;
        assert!(!same(&recreated, &rotated), "a new UID, a new client");
        assert!(fresh, "a new UID is checked again");

        // A deleted link's client goes with it.
        clients.forget("l1");
        let (after, fresh) = resolve(&clients, &kube, "customer").await;
        assert!(!same(&after, &recreated) && fresh);
    }
}
