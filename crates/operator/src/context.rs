//! What every part of the ClusterLink controller shares: the clients, the fabric, the caches
//! and the observers (`controller.rs` runs the pipeline; `link_events.rs` and `drift_check.rs`
//! read from it).

use std::sync::Arc;

use bnerd_api::ClusterLink;
use bnerd_cloud::Neutron;
use bnerd_cloud::fabric::Fabric;
use kube::Client;
use kube::runtime::events::Recorder;
use kube::runtime::reflector::Store;

use crate::customers::LinkSource;
use crate::engine::resync::resync_window;
use crate::engine::{Customers, LinkEngine};

use crate::backoff::Backoff;
use crate::config::Config;
use crate::customers::CustomerClients;
use crate::engine::OperatorIdentity;
use crate::engine::resync::Snapshots;
use crate::gateways::TargetIndex;
use crate::metrics::Metrics;

pub struct Context {
    pub client: Client,
    pub net: Arc<dyn Neutron>,
    /// Who the operator is (cross-tenant credentials are checked against it).
    pub operator: OperatorIdentity,
    /// One cached client per cross-tenant link.
    pub customers: CustomerClients,
    pub fabric: Fabric,
    pub config: Config,
    pub recorder: Recorder,
    pub backoff: Backoff,
    pub links: Store<ClusterLink>,
    /// Every gateway's reverse target, kept by the gateway watches.
    pub targets: TargetIndex,
    /// The resync window's shared reads (engine::resync).
    pub snapshots: Snapshots,
    /// The links the drift check sent, which must read afresh, not from a snapshot.
    pub drifted: Drifted,
    pub metrics: Arc<Metrics>,
    /// The gateway Warnings already published (each once, not per link and reconcile).
    pub gateway_warnings: crate::gateway_warnings::GatewayWarnings,
}

impl Context {
    /// The context of one controller run: fresh caches, the backoff empty, no gateway Warning
    /// published yet; the snapshots' window follows the resync interval.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        client: Client,
        recorder: Recorder,
        cloud: Arc<bnerd_cloud::OpenStack>,
        operator: OperatorIdentity,
        fabric: Fabric,
        config: Config,
        links: Store<ClusterLink>,
        metrics: Arc<Metrics>,
    ) -> Self {
        let window = resync_window(config.resync_interval);
        Context {
            recorder,
            client,
            customers: CustomerClients::new(cloud.clone()),
            net: cloud,
            operator,
            fabric,
            config,
            backoff: Backoff::default(),
            links,
            targets: TargetIndex::new(),
            snapshots: Snapshots::new(window),
            drifted: Default::default(),
            metrics,
            gateway_warnings: Default::default(),
        }
    }

    /// The engine for one link: a cross-tenant link's customer credential through the link's
    /// own Secret reader (the engine reads the link's shape from its input).
    pub(crate) fn engine_for<'a>(&'a self, source: &'a LinkSource<'a>) -> LinkEngine<'a> {
        LinkEngine::new(
            self.net.as_ref(),
            &self.fabric,
            Customers {
                source,
                operator: &self.operator,
                namespace: &self.config.credentials_namespace,
            },
        )
    }
}

/// The links sent by the drift check and not reconciled since: their reconcile reads afresh.
#[derive(Debug, Default)]
pub struct Drifted(std::sync::Mutex<std::collections::BTreeSet<String>>);

impl Drifted {
    /// Note that the drift check sent this link.
    pub fn mark(&self, link: &str) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(link.to_string());
    }

    /// Whether the drift check sent this link since its last reconcile (and forget it).
    pub fn take(&self, link: &str) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(link)
    }
}
