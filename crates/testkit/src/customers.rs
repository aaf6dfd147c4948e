//! Many cross-tenant links on the fake, their customer side held as the controller holds it:
//! one Secret per link (`clusterlink-<name>`, its own application credential in its project),
//! one client per credential, and what was found out about each credential remembered. The
//! estate test and the estate bench resync `PerCustomer` links through the engine's door with
//! it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bnerd_api::gateway::ReverseTarget;
use bnerd_api::names::DEFAULT_CREDENTIALS_NAMESPACE;
use bnerd_api::{ClusterLink, SecretRef, TransitIsolation};
use bnerd_cloud::Neutron;
use bnerd_cloud::fabric::Fabric;
use bnerd_cloud_fake::FakeCloud;
use bnerd_engine::resync::Snapshots;
use bnerd_engine::{
    Batch, Checked, CredentialSource, CustomerCloud, CustomerCredential, Customers, LinkEngine,
    OperatorIdentity, ResyncPath,
};

use crate::{link_input, peers_of, spec};

/// The Secrets of many links (see the module).
pub struct FakeSecrets {
    cloud: FakeCloud,
    creds: BTreeMap<String, (String, String)>,
    clients: Mutex<BTreeMap<String, Arc<dyn CustomerCloud>>>,
    checked: Mutex<BTreeMap<String, Checked>>,
}

impl FakeSecrets {
    /// The application credential (ID, secret) in link `name`'s Secret.
    pub fn of(&self, name: &str) -> &(String, String) {
        &self.creds[&format!("clusterlink-{name}")]
    }
}

#[async_trait]
impl CredentialSource for FakeSecrets {
    async fn secret(&self, r: &SecretRef) -> Result<Option<BTreeMap<String, Vec<u8>>>, String> {
        Ok(self.creds.get(&r.name).map(|(id, secret)| {
            [
                (
                    "OS_APPLICATION_CREDENTIAL_ID".to_string(),
                    id.clone().into_bytes(),
                ),
                (
                    "OS_APPLICATION_CREDENTIAL_SECRET".to_string(),
                    secret.clone().into_bytes(),
                ),
            ]
            .into()
        }))
    }

    fn client(&self, c: &CustomerCredential) -> Arc<dyn CustomerCloud> {
        self.clients
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(c.id.clone())
            .or_insert_with(|| Arc::new(self.cloud.client_with_app_cred(&c.id, c.secret.expose())))
            .clone()
    }

    fn checked(&self, c: &CustomerCredential) -> Option<Checked> {
        self.checked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&c.id)
            .cloned()
    }

    fn remember(&self, c: &CustomerCredential, checked: Checked) {
        self.checked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(c.id.clone(), checked);
    }
}

/// `per_project` `PerCustomer` links in each of `projects` customer projects (`customer<p>`),
/// each on its own router with its own credential; service CIDRs `10.<100+p>.<i>.0/24`.
pub async fn per_customer_links(
    cloud: &FakeCloud,
    projects: usize,
    per_project: usize,
) -> (Vec<ClusterLink>, FakeSecrets) {
    let mut creds = BTreeMap::new();
    let mut links = vec![];
    for p in 0..projects {
        let project = format!("customer{p}");
        for i in 0..per_project {
            let name = format!("pc{p}-{i}");
            let (id, secret) = cloud.application_credential(&project, &["member"]);
            let router = cloud
                .client_with_app_cred(&id, &secret)
                .create_router(&format!("svc-{name}"))
                .await
                .expect("the customer's router");
            creds.insert(format!("clusterlink-{name}"), (id, secret));
            let mut s = spec(&router.id, &format!("10.{}.{i}.0/24", 100 + p), None);
            s.transit_isolation = Some(TransitIsolation::PerCustomer);
            s.customer_project_id = Some(project.clone());
            s.credentials_secret_ref = Some(SecretRef {
                name: format!("clusterlink-{name}"),
                namespace: DEFAULT_CREDENTIALS_NAMESPACE.into(),
            });
            let mut l = ClusterLink::new(&name, s);
            l.metadata.uid = Some(format!("0c0c0c0c-0000-4000-8000-{:012x}", p * 1000 + i));
            l.metadata.generation = Some(1);
            links.push(l);
        }
    }
    let source = FakeSecrets {
        cloud: cloud.clone(),
        creds,
        clients: Default::default(),
        checked: Default::default(),
    };
    (links, source)
}

/// One reconcile of each link through the door, as the controller runs it (the operator's
/// project is the fake's `operator`), offered the window's snapshot (`snaps`) or not; the
/// resync path each took.
pub async fn reconcile_each(
    net: &dyn Neutron,
    fabric: &Fabric,
    source: &FakeSecrets,
    links: &mut [ClusterLink],
    targets: &[ReverseTarget],
    snaps: Option<&Snapshots>,
) -> Vec<Option<ResyncPath>> {
    let operator = OperatorIdentity {
        project_id: "operator".into(),
        auth_url: "http://127.0.0.1:5000/v3".into(),
        region: None,
    };
    let customers = Customers {
        source,
        operator: &operator,
        namespace: DEFAULT_CREDENTIALS_NAMESPACE,
    };
    let no_routers = Vec::new;
    let all: Vec<Arc<ClusterLink>> = links.iter().cloned().map(Arc::new).collect();
    let mut paths = vec![];
    for l in links.iter_mut() {
        let status = l.status.clone().unwrap_or_default();
        let peers = peers_of(l, &all);
        let input = link_input(l, &status, &peers, targets).expect("uid");
        let batch = snaps.map(|snapshots| Batch {
            snapshots,
            routers: &no_routers,
        });
        let done = LinkEngine::new(net, fabric, customers)
            .with_batch(batch)
            .reconcile(&input)
            .await;
        paths.push(done.resync);
        l.status = Some(done.outcome.status);
    }
    paths
}
