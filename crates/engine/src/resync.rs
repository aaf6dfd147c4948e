//! Batched periodic resync: a converged estate is checked from a few shared reads instead of
//! two reads per link.
//!
//! Per link, a resync reads the transit network's ports, the link's routers and the service
//! router's ports and subnets (its connected subnets screen the gateways). Across N links
//! those reads are the same port list N times and the rest one router at a time. A
//! [`Snapshot`] reads them once for every link whose resync falls in the same window: one
//! `GET /ports?network_id=<transit>` (the very list each link's leg step reads) and the
//! gateway router with every link's recorded service router by repeated `id` filters
//! (`GET /routers?id=a&id=b…`), [`ROUTER_IDS_PER_CALL`] to a call, so the URL stays within
//! what a WSGI front end accepts. The service routers' ports (repeated `device_id` filters)
//! and their subnets (repeated `id` filters) are read in the same chunks, but only for
//! routers whose revision moved since an earlier window read them ([`Seen`]). 1000 links on
//! 1000 routers: 1 + 13 reads a window once converged; the first window, or one after every
//! router changed, 1 + 13 + 13 + 13.//!
//! Each link then runs its ordinary steps — same observe code, same pure plans, same
//! conditions — over the snapshot ([`Overlay::of`]: the simulated Neutron that answers reads
//! from what it was given and only records writes, with no cloud below it), the
//! connected-subnet screen included (docs/crd-reference.md, "Reverse-route screening").
//! `plan::resync` judges what the steps recorded: converged (no call), route writes only
//! (replayed; see there why a snapshot decides them safely), or anything else, which falls
//! back to the per-link path with fresh reads. A link whose generation changed, or that is
//! not Ready, never takes this path: it converges on its own at once, as before.
//!
//! The controller requeues converged links onto shared window boundaries
//! ([`aligned_requeue`]) so their resyncs meet in one window, and keeps one snapshot per
//! window ([`Snapshots`]): the first link of a window takes it, the others wait for it.
//!
//! A cross-tenant link takes part with its operator's side from the snapshot (and what that
//! does not hold read once a window, [`Overlay::learning`]) and its customer's side read with
//! its own credential, its routers' interfaces held across windows while their revision
//! stands ([`Interfaces`]); docs/design.md, "The resync". Between resyncs, the drift check
//! (`engine::drift_check`) looks at what every link's status records on the operator's side,
//! from two reads for the whole estate.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bnerd_cloud::fabric::Fabric;
use bnerd_cloud::{Neutron, Port, PortQuery, Result, RouterQuery, Subnet, SubnetQuery};

use super::context::{Engine, Whose};
use super::converge::reconcile_cross_tenant;
use super::credentials::Customers;
use super::model::{Input, Outcome, Shape};
use super::overlay::{CustomerSide, Interfaces, Known, Overlay, PlannedWrite, Recorded};
use super::plan::resync::{Noted, ResyncPlan, RouteWrite, plan};

/// Router IDs per `GET /routers?id=…` call: 80 IDs make a request line of about 3.2 KB,
/// under gunicorn's default limit of 4094 bytes and the 8 KB of common proxies. Measured on
/// the lab's Neutron (gunicorn): 100 IDs (4026 bytes) answer 200, 120 IDs 414 URI Too Long.
/// A cloud with a shorter limit fails the snapshot, and its links resync per link.
pub const ROUTER_IDS_PER_CALL: usize = 80;

/// The shared reads of one resync window.
pub struct Snapshot {
    taken: Instant,
    /// The transit network's ports and subnet, and the routers read. Replayed writes update
    /// the routers (Neutron answers them with the whole router), so links later in the window
    /// see each table as it is.
    known: Known,
    reads: u64,
    /// Customers' routers' interfaces held across windows ([`Interfaces`]).
    interfaces: Arc<Interfaces>,
    /// The reads that answered every `PerCustomer` project's customer transit ahead
    /// ([`crate::ahead`]), made when the window's first `PerCustomer` link asks.
    ahead: tokio::sync::OnceCell<u64>,
}

/// Every port on the transit network, in one read.
async fn transit_ports(net: &dyn Neutron, fabric: &Fabric) -> Result<Vec<Port>> {
    net.list_ports(&PortQuery {
        network_id: Some(fabric.transit_network_id.clone()),
        ..Default::default()
    })
    .await
}

impl Snapshot {
    /// Read the transit network's ports, these routers (the gateway router is always
    /// included), the ports of those that changed since `seen` last read theirs, and the
    /// subnets those stand on that `seen` does not hold yet.
    pub async fn take(
        net: &dyn Neutron,
        fabric: &Fabric,
        router_ids: impl IntoIterator<Item = String>,
        seen: &Seen,
    ) -> Result<Self> {
        let taken = Instant::now();
        let ports = transit_ports(net, fabric).await?;
        let mut ids: Vec<String> = router_ids.into_iter().collect();
        ids.sort();
        ids.dedup();
        ids.retain(|id| *id != fabric.gateway_router_id);
        let mut reads = 1;
        let mut routers = vec![];
        let mut all = ids.clone();
        all.push(fabric.gateway_router_id.clone());
        for chunk in all.chunks(ROUTER_IDS_PER_CALL) {
            let q = RouterQuery {
                ids: chunk.to_vec(),
                ..Default::default()
            };
            routers.extend(net.list_routers(&q).await?);
            reads += 1;
        }
        // The service routers' ports give the subnets each is connected to (a gateway CIDR
        // overlapping one is refused on that router): the same screen as a link's own
        // reconcile. Only routers whose revision moved are read again.
        let stale = seen.stale(&routers, &ids);
        let mut fresh = vec![];
        for chunk in stale.chunks(ROUTER_IDS_PER_CALL) {
            let q = PortQuery {
                device_ids: chunk.iter().map(|(id, _)| id.clone()).collect(),
                ..Default::default()
            };
            fresh.extend(net.list_ports(&q).await?);
            reads += 1;
        }
        let interfaces = seen.learn_ports(&stale, fresh, &ids);
        let missing = seen.missing_subnets(&interfaces, fabric);
        for chunk in missing.chunks(ROUTER_IDS_PER_CALL) {
            let q = SubnetQuery {
                ids: chunk.to_vec(),
                ..Default::default()
            };
            seen.learn_subnets(net.list_subnets(&q).await?);
            reads += 1;
        }
        let known = transit_known(fabric, ports)
            .with_devices(&ids, interfaces)
            .with_subnets(seen.subnets());
        known.learn_routers(routers);
        Ok(Self {
            taken,
            known,
            reads,
            interfaces: Arc::default(),
            ahead: tokio::sync::OnceCell::new(),
        })
    }

    /// Answer every `PerCustomer` project's customer transit reads ahead, once a window. If
    /// a list fails, each link reads its own as before (one read of each request a window).
    async fn answer_ahead(&self, net: &dyn Neutron, fabric: &Fabric) {
        self.ahead
            .get_or_init(|| async {
                match crate::ahead::read(net, fabric, ROUTER_IDS_PER_CALL).await {
                    Ok((lists, reads)) => {
                        crate::ahead::teach(&self.known, crate::ahead::answers(fabric, &lists));
                        reads
                    }
                    // Only a cost: the links make the reads themselves.
                    Err(_) => 0,
                }
            })
            .await;
    }

    pub fn age(&self) -> Duration {
        self.taken.elapsed()
    }

    /// The cloud reads it cost (those answering customer transits ahead included).
    pub fn reads(&self) -> u64 {
        self.reads + self.ahead.get().copied().unwrap_or(0)
    }
}

/// What a snapshot knows of the transit network: every port on it, and its one subnet as the
/// fabric describes it (no read).
fn transit_known(fabric: &Fabric, ports: Vec<Port>) -> Known {
    Known::network(&fabric.transit_network_id, ports).with_subnet(Subnet {
        id: fabric.transit_subnet_id.clone(),
        network_id: fabric.transit_network_id.clone(),
        cidr: fabric.transit_subnet.to_string(),
        ..Default::default()
    })
}

/// Service routers' ports and subnets as earlier windows read them. Neutron moves a router's
/// `revision_number` when an interface is attached or detached (a route write moves it too),
/// and a subnet's CIDR never changes: so a window reads the ports of only the routers whose
/// revision moved, and only subnets it has not seen. A converged estate pays for neither.
#[derive(Default)]
pub struct Seen {
    ports: std::sync::Mutex<BTreeMap<String, (u64, Vec<Port>)>>,
    subnets: std::sync::Mutex<BTreeMap<String, Subnet>>,
}

impl Seen {
    fn ports(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, (u64, Vec<Port>)>> {
        self.ports.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn subnet_map(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Subnet>> {
        self.subnets.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The routers among `ids` whose ports must be read: never read, or at another revision
    /// now (a router the read did not return is left out: its link finds it gone).
    fn stale(&self, routers: &[bnerd_cloud::Router], ids: &[String]) -> Vec<(String, u64)> {
        let held = self.ports();
        routers
            .iter()
            .filter(|r| ids.contains(&r.id))
            .filter(|r| {
                held.get(&r.id)
                    .is_none_or(|(rev, _)| *rev != r.revision_number)
            })
            .map(|r| (r.id.clone(), r.revision_number))
            .collect()
    }

    /// Hold the ports just read of the `stale` routers; every port of the routers `ids`.
    fn learn_ports(&self, stale: &[(String, u64)], read: Vec<Port>, ids: &[String]) -> Vec<Port> {
        let mut held = self.ports();
        // Routers no link records any more are forgotten.
        let wanted: std::collections::BTreeSet<&String> = ids.iter().collect();
        held.retain(|id, _| wanted.contains(id));
        for (id, rev) in stale {
            let of: Vec<Port> = read
                .iter()
                .filter(|p| p.device_id == *id)
                .cloned()
                .collect();
            held.insert(id.clone(), (*rev, of));
        }
        ids.iter()
            .filter_map(|id| held.get(id))
            .flat_map(|(_, ports)| ports.iter().cloned())
            .collect()
    }

    /// The subnets of these router interfaces that are neither the transit's nor held.
    fn missing_subnets(&self, ports: &[Port], fabric: &Fabric) -> Vec<String> {
        let held = self.subnet_map();
        let mut ids: Vec<String> = ports
            .iter()
            .filter(|p| p.is_router_interface())
            .flat_map(|p| p.fixed_ips.iter().map(|f| f.subnet_id.clone()))
            .filter(|id| *id != fabric.transit_subnet_id && !held.contains_key(id))
            .collect();
        ids.sort();
        ids.dedup();
        ids
    }

    fn learn_subnets(&self, subnets: Vec<Subnet>) {
        let mut held = self.subnet_map();
        for s in subnets {
            held.insert(s.id.clone(), s);
        }
    }

    fn subnets(&self) -> Vec<Subnet> {
        self.subnet_map().values().cloned().collect()
    }
}

/// One snapshot per resync window, shared by every link resyncing in it.
pub struct Snapshots {
    window: Duration,
    current: tokio::sync::Mutex<Option<Arc<Snapshot>>>,
    seen: Seen,
    interfaces: Arc<Interfaces>,
}

impl Snapshots {
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            current: tokio::sync::Mutex::new(None),
            seen: Seen::default(),
            interfaces: Arc::default(),
        }
    }

    /// The window's snapshot, taken now if there is none younger than the window. Holding the
    /// lock while taking it makes the other links of the window wait for this one read
    /// instead of each taking their own.
    pub async fn get(
        &self,
        net: &dyn Neutron,
        fabric: &Fabric,
        router_ids: impl FnOnce() -> Vec<String>,
    ) -> Result<Arc<Snapshot>> {
        let mut current = self.current.lock().await;
        if let Some(s) = current.as_ref().filter(|s| s.age() < self.window) {
            return Ok(s.clone());
        }
        let mut s = Snapshot::take(net, fabric, router_ids(), &self.seen).await?;
        self.interfaces.next_window();
        s.interfaces = self.interfaces.clone();
        let s = Arc::new(s);
        *current = Some(s.clone());
        Ok(s)
    }

    /// Drop the window's snapshot: a reconcile outside it changed the cloud (a new link's
    /// leg, a reverse route added on its own path), and a link resynced from the old one
    /// would judge by what is no longer so (e.g. keep status forgetting a route the
    /// snapshot never saw, leaving it on the router).
    pub async fn invalidate(&self) {
        *self.current.lock().await = None;
    }
}

/// How to requeue a converged link: `interval` from now, moved later to the next multiple of
/// `window` since the epoch, so links converged at slightly different times resync together
/// and share a snapshot. The window is a tenth of the interval (at most 30 s): a link's
/// self-heal is late by at most that.
pub fn aligned_requeue(interval: Duration, now: SystemTime) -> Duration {
    let window = resync_window(interval);
    let Ok(since) = now.duration_since(UNIX_EPOCH) else {
        return interval;
    };
    let due = since + interval;
    let w = window.as_millis().max(1);
    let slots = due.as_millis().div_ceil(w);
    let at = Duration::from_millis(u64::try_from(slots * w).unwrap_or(u64::MAX));
    at.saturating_sub(since).max(interval)
}

/// The window links share a snapshot in, for a resync interval.
pub fn resync_window(interval: Duration) -> Duration {
    (interval / 10).min(Duration::from_secs(30))
}

/// What a batched resync of one link came to.
pub enum Resynced {
    /// The outcome stands (converged, or converged by the replayed route writes).
    Done {
        outcome: Box<Outcome>,
        writes: usize,
    },
    /// Reconcile it on its own; why.
    PerLink(String),
}

/// Run one link's steps against the snapshot and carry out what `plan::resync` decides.
/// `net` is the live cloud, used only to replay route writes (and, for a cross-tenant link,
/// for what the snapshot does not hold of the operator's side). A cross-tenant link needs
/// `customers`: its customer side is read live with its own credential.
pub async fn resync_from(
    snap: &Snapshot,
    net: &dyn Neutron,
    fabric: &Fabric,
    customers: Option<Customers<'_>>,
    input: &Input<'_>,
) -> Resynced {
    let (outcome, recorded) = match (input.shape, customers) {
        (Shape::SameTenant, _) => {
            let dry = Overlay::of(&snap.known).worded_for(fabric);
            let outcome = Engine::same_tenant(&dry, fabric).reconcile(input).await;
            (outcome, dry.recorded_by())
        }
        (Shape::CrossTenant { secret, isolation }, Some(c)) => {
            // The operator's side from the snapshot, and what it does not hold read once a
            // window (the first link of a project reads its customer transit for the others);
            // the customer's side read with the link's own credential, as a live reconcile
            // reads it: the credential proves itself every resync. Writes only recorded.
            if input.shape.is_per_customer() {
                snap.answer_ahead(net, fabric).await;
            }
            let dry = Overlay::learning(&snap.known, net)
                .holding(snap.interfaces.clone())
                .worded_for(fabric);
            let side = CustomerSide::beside(&dry, c.source);
            let customers = Customers { source: &side, ..c };
            let outcome =
                reconcile_cross_tenant(&dry, fabric, customers, (secret, isolation), input).await;
            (outcome, dry.recorded_by())
        }
        (Shape::CrossTenant { .. }, None) => {
            return Resynced::PerLink("no way to the customer's credential".into());
        }
    };
    let noted: Vec<Noted> = recorded.into_iter().map(noted).collect();
    match plan(&noted) {
        ResyncPlan::Converged => Resynced::Done {
            outcome: Box::new(outcome),
            writes: 0,
        },
        ResyncPlan::PerLink(why) => Resynced::PerLink(why),
        ResyncPlan::Replay(writes) => {
            let n = writes.len();
            for w in writes {
                let done = match &w {
                    RouteWrite::Add { router, routes } => {
                        super::ops::extraroutes(net, router, routes, true).await
                    }
                    RouteWrite::Remove { router, routes } => {
                        super::ops::extraroutes(net, router, routes, false).await
                    }
                };
                match done {
                    Ok(r) => snap.known.learn_router(r),
                    // The per-link path meets the same answer and reports it properly.
                    Err(e) => return Resynced::PerLink(format!("replaying a route write: {e}")),
                }
            }
            Resynced::Done {
                outcome: Box::new(outcome),
                writes: n,
            }
        }
    }
}

/// What the overlay recorded, as `plan::resync` judges it: the operator's route writes may be
/// replayed, anything else sends the link down the per-link path.
fn noted((whose, r): (Whose, Recorded)) -> Noted {
    match (whose, r) {
        (Whose::Customer, Recorded::Write(w)) => Noted::CustomerWrite(w.to_string()),
        (_, r) => noted_operator(r),
    }
}

fn noted_operator(r: Recorded) -> Noted {
    match r {
        Recorded::Miss(what) => Noted::Miss(what),
        Recorded::Write(PlannedWrite::AddRoutes { router_id, routes }) => Noted::AddRoutes {
            router: router_id,
            routes,
        },
        Recorded::Write(PlannedWrite::RemoveRoutes { router_id, routes }) => Noted::RemoveRoutes {
            router: router_id,
            routes,
        },
        Recorded::Write(other) => Noted::OtherWrite(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn converged_links_are_requeued_onto_shared_window_boundaries() {
        let five_min = Duration::from_secs(300);
        assert_eq!(resync_window(five_min), Duration::from_secs(30));
        assert_eq!(
            resync_window(Duration::from_secs(2)),
            Duration::from_millis(200)
        );
        // Links converged 1 s and 17 s into a window meet at the same boundary.
        let base = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let a = base + Duration::from_secs(1);
        let b = base + Duration::from_secs(17);
        let at_a = a.duration_since(UNIX_EPOCH).unwrap() + aligned_requeue(five_min, a);
        let at_b = b.duration_since(UNIX_EPOCH).unwrap() + aligned_requeue(five_min, b);
        assert_eq!(at_a, at_b);
        // Never earlier than the interval, never later than interval + window.
        for s in 0..60 {
            let now = base + Duration::from_millis(s * 997);
            let d = aligned_requeue(five_min, now);
            assert!(
                d >= five_min && d <= five_min + Duration::from_secs(30),
                "{d:?}"
            );
        }
    }
}
