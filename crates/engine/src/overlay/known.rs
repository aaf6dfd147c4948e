//! What the overlay was given to answer reads from, instead of the cloud.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

use bnerd_cloud::{Port, PortQuery, Router, Subnet};

/// What the overlay was given: every port of some networks, some routers, some subnets.
/// Shared by every link of a resync window; the routers follow the writes replayed on the
/// cloud ([`Known::learn_router`]) so links later in the window see each table as it is.
#[derive(Default)]
pub struct Known {
    /// Networks whose every port is in `ports`: a port query naming one is answered here.
    complete_networks: BTreeSet<String>,
    ports: Vec<Port>,
    subnets: BTreeMap<String, Subnet>,
    routers: Mutex<BTreeMap<String, Router>>,
    /// A router's interfaces, asked for by router alone, are taken to be those on the complete
    /// networks (the batched resync reads no interfaces: see `resync`).
    interfaces_on_complete_networks: bool,
}

impl Known {
    /// Every port of `network_id`.
    pub fn network(network_id: &str, ports: Vec<Port>) -> Self {
        Self {
            complete_networks: BTreeSet::from([network_id.to_string()]),
            ports,
            ..Self::default()
        }
    }

    pub fn with_subnet(mut self, s: Subnet) -> Self {
        self.subnets.insert(s.id.clone(), s);
        self
    }

    /// Answer a query for a router's interfaces from the complete networks' ports alone.
    pub fn interfaces_on_complete_networks(self) -> Self {
        Self {
            interfaces_on_complete_networks: true,
            ..self
        }
    }

    /// The ports of the complete networks.
    pub fn ports(&self) -> &[Port] {
        &self.ports
    }

    /// A router as the cloud now has it (read, or Neutron answered a write with it).
    pub fn learn_router(&self, r: Router) {
        self.routers().insert(r.id.clone(), r);
    }

    pub fn learn_routers(&self, routers: impl IntoIterator<Item = Router>) {
        let mut held = self.routers();
        for r in routers {
            held.insert(r.id.clone(), r);
        }
    }

    fn routers(&self) -> MutexGuard<'_, BTreeMap<String, Router>> {
        self.routers.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(super) fn router(&self, id: &str) -> Option<Router> {
        self.routers().get(id).cloned()
    }

    pub(super) fn port(&self, id: &str) -> Option<Port> {
        self.ports.iter().find(|p| p.id == id).cloned()
    }

    pub(super) fn subnet(&self, id: &str) -> Option<Subnet> {
        self.subnets.get(id).cloned()
    }

    /// The ports `q` lists, when every port it could match is known.
    pub(super) fn answers(&self, q: &PortQuery) -> Option<Vec<Port>> {
        let complete = match &q.network_id {
            Some(n) => self.complete_networks.contains(n),
            None => q.device_id.is_some() && self.interfaces_on_complete_networks,
        };
        complete.then(|| {
            self.ports
                .iter()
                .filter(|p| q.matches(p))
                .cloned()
                .collect()
        })
    }
}
