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
    /// Every port of these devices (routers whose ports were listed by `device_id`).
    complete_devices: BTreeMap<String, Vec<Port>>,
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

    /// Every port of each of these devices (`device_id` is the device whose ports they are;
    /// a device named with no port has none).
    pub fn with_devices(mut self, devices: &[String], ports: Vec<Port>) -> Self {
        for d in devices {
            self.complete_devices.entry(d.clone()).or_default();
        }
        for p in ports {
            if let Some(of) = self.complete_devices.get_mut(&p.device_id) {
                of.push(p);
            }
        }
        self
    }

    pub fn with_subnets(mut self, subnets: impl IntoIterator<Item = Subnet>) -> Self {
        for s in subnets {
            self.subnets.insert(s.id.clone(), s);
        }
        self
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
        if let Some(n) = &q.network_id {
            return self.complete_networks.contains(n).then(|| {
                self.ports
                    .iter()
                    .filter(|p| q.matches(p))
                    .cloned()
                    .collect()
            });
        }
        if q.device_ids.is_empty() {
            return None;
        }
        let mut out = vec![];
        for d in &q.device_ids {
            out.extend(
                self.complete_devices
                    .get(d)?
                    .iter()
                    .filter(|p| q.matches(p))
                    .cloned(),
            );
        }
        Some(out)
    }
}
