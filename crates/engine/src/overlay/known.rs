//! What the overlay was given to answer reads from, instead of the cloud.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

use bnerd_cloud::{
    Network, NetworkQuery, Port, PortQuery, RbacPolicy, Router, RouterQuery, Subnet, SubnetQuery,
};

/// What the overlay was given: every port of some networks, some routers, some subnets.
/// Shared by every link of a resync window; the routers follow the writes replayed on the
/// cloud ([`Known::learn_router`]) so links later in the window see each table as it is.
/// A learning overlay ([`super::Overlay::learning`]) adds the answers of the reads it had to
/// make on the cloud, by their exact request ([`Learned`]), for the next link of the window
/// that makes the same one.
#[derive(Default)]
pub struct Known {
    /// Networks whose every port is in `ports`: a port query naming one is answered here.
    complete_networks: BTreeSet<String>,
    ports: Vec<Port>,
    subnets: BTreeMap<String, Subnet>,
    routers: Mutex<BTreeMap<String, Router>>,
    /// Every port of these devices (routers whose ports were listed by `device_id`).
    complete_devices: BTreeMap<String, Vec<Port>>,
    learned: Mutex<BTreeMap<String, Learned>>,
}

/// The cloud's answer to one read, as a learning overlay keeps it. Routers are kept by ID
/// (their tables are in `routers`, which follow the replayed route writes); everything else
/// as answered: a window's per-link change drops the whole snapshot.
#[derive(Debug, Clone)]
pub(super) enum Learned {
    Network(Network),
    Networks(Vec<Network>),
    Subnet(Subnet),
    Subnets(Vec<Subnet>),
    Port(Port),
    Ports(Vec<Port>),
    Routers(Vec<String>),
    Rbac(Vec<RbacPolicy>),
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

    /// What an earlier read of exactly `request` answered.
    pub(super) fn recall(&self, request: &str) -> Option<Learned> {
        self.learned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(request)
            .cloned()
    }

    pub(super) fn learn(&self, request: String, answer: Learned) {
        self.learned
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(request, answer);
    }

    /// Answer `q` with `networks` for every learning overlay that asks it: the batched resync
    /// knows the answer ahead, from a list that holds every network `q` can match.
    pub fn ahead_networks(&self, q: &NetworkQuery, networks: Vec<Network>) {
        self.learn(networks_request(q), Learned::Networks(networks));
    }

    /// As [`Known::ahead_networks`], for subnets.
    pub fn ahead_subnets(&self, q: &SubnetQuery, subnets: Vec<Subnet>) {
        self.learn(subnets_request(q), Learned::Subnets(subnets));
    }

    /// As [`Known::ahead_networks`], for ports.
    pub fn ahead_ports(&self, q: &PortQuery, ports: Vec<Port>) {
        self.learn(ports_request(q), Learned::Ports(ports));
    }

    /// As [`Known::ahead_networks`], for routers (their tables join the routers known).
    pub fn ahead_routers(&self, q: &RouterQuery, routers: Vec<Router>) {
        let ids = routers.iter().map(|r| r.id.clone()).collect();
        self.learn_routers(routers);
        self.learn(routers_request(q), Learned::Routers(ids));
    }

    /// As [`Known::ahead_networks`], for the caller's RBAC policies on one object.
    pub fn ahead_rbac(&self, object_id: &str, policies: Vec<RbacPolicy>) {
        self.learn(rbac_request(object_id), Learned::Rbac(policies));
    }

    /// How many reads were learned.
    pub fn learned(&self) -> usize {
        self.learned.lock().unwrap_or_else(|e| e.into_inner()).len()
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

/// Routers' interfaces and their subnets as the batched resync's earlier windows read them,
/// for the reads a cross-tenant link's steps make of its customer's router with its own
/// credential (the connected-subnet screen). Neutron moves a router's `revision_number` when
/// an interface is attached or detached, and a subnet's CIDR never changes: so once a run has
/// read the router itself (as every link reads its own router, proving its credential), its
/// interfaces at an unchanged revision are the ones held, and a subnet once read is known.
/// What no window asked for since the one before is forgotten.
#[derive(Default)]
pub struct Interfaces {
    held: Mutex<HeldInterfaces>,
}

#[derive(Default)]
struct HeldInterfaces {
    /// Router ID → (its revision, its ports).
    ports: BTreeMap<String, (u64, Vec<Port>)>,
    subnets: BTreeMap<String, Subnet>,
    /// What was asked for since the last [`Interfaces::next_window`].
    used: BTreeSet<String>,
}

impl Interfaces {
    fn held(&self) -> MutexGuard<'_, HeldInterfaces> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The ports of `router` when they were read at `revision`.
    pub(super) fn ports(&self, router: &str, revision: u64) -> Option<Vec<Port>> {
        let mut h = self.held();
        h.used.insert(router.to_string());
        h.ports
            .get(router)
            .filter(|(rev, _)| *rev == revision)
            .map(|(_, p)| p.clone())
    }

    pub(super) fn keep_ports(&self, router: &str, revision: u64, ports: Vec<Port>) {
        self.held()
            .ports
            .insert(router.to_string(), (revision, ports));
    }

    pub(super) fn subnet(&self, id: &str) -> Option<Subnet> {
        let mut h = self.held();
        h.used.insert(id.to_string());
        h.subnets.get(id).cloned()
    }

    pub(super) fn keep_subnet(&self, s: Subnet) {
        self.held().subnets.insert(s.id.clone(), s);
    }

    /// A new window: forget what the windows since the last call did not ask for.
    pub fn next_window(&self) {
        let mut h = self.held();
        let used = std::mem::take(&mut h.used);
        h.ports.retain(|id, _| used.contains(id));
        h.subnets.retain(|id, _| used.contains(id));
    }
}

// The requests a learning overlay keeps its answers by: one spelling for the reads and for
// the answers known ahead.

pub(super) fn networks_request(q: &NetworkQuery) -> String {
    format!("GET /networks {q:?}")
}

pub(super) fn subnets_request(q: &SubnetQuery) -> String {
    format!("GET /subnets {q:?}")
}

pub(super) fn ports_request(q: &PortQuery) -> String {
    format!("GET /ports {q:?}")
}

pub(super) fn routers_request(q: &RouterQuery) -> String {
    format!("GET /routers {q:?}")
}

pub(super) fn rbac_request(object_id: &str) -> String {
    format!("GET /rbac-policies?object_id={object_id}")
}
