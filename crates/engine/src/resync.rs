//! Batched periodic resync: a converged estate is checked from a few shared reads instead of
//! two reads per link.
//!
//! Per link, a resync reads the transit network's ports and the link's routers (2 calls).
//! Across N links those reads are the same port list N times and N routers one at a time. A
//! [`Snapshot`] reads them once for every link whose resync falls in the same window: one
//! `GET /ports?network_id=<transit>` (the very list each link's leg step reads) and the
//! gateway router with every link's recorded service router by repeated `id` filters
//! (`GET /routers?id=a&id=b…`, [`ROUTER_IDS_PER_CALL`] to a call, so the URL stays within
//! what a WSGI front end accepts). 1000 links: 1 + 13 reads.
//!
//! Each link then runs its ordinary steps — same observe code, same pure plans, same
//! conditions — against a dry-run view of the snapshot ([`DryRun`], a `Neutron` that answers
//! reads from memory and only notes writes). `plan::resync` judges what the steps noted:
//! converged (no call), route writes only (replayed; see there why a snapshot decides them
//! safely), or anything else, which falls back to the per-link path with fresh reads. A link
//! whose generation changed, or that is not Ready, never takes this path: it converges on its
//! own at once, as before.
//!
//! The controller requeues converged links onto shared window boundaries
//! ([`aligned_requeue`]) so their resyncs meet in one window, and keeps one snapshot per
//! window ([`Snapshots`]): the first link of a window takes it, the others wait for it.
//!
//! Cross-tenant links take no part in that (their routers are read with each customer's
//! credential), but their legs are on the operator's transit network: [`check_legs`] checks
//! every converged cross-tenant leg from one read of its ports, on a short interval of its
//! own, so an address a leg lost stops being routed to long before the next resync.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bnerd_cloud::fabric::Fabric;
use bnerd_cloud::{
    CloudError, CreatePort, Network, Neutron, Port, PortQuery, RbacPolicy, Result, Route, Router,
    RouterQuery, ShareNetwork, Subnet,
};

use super::model::{Input, Outcome};
use super::ops::Engine;
use super::plan::resync::{Noted, ResyncPlan, RouteWrite, leg_check, plan};

/// Router IDs per `GET /routers?id=…` call: 80 IDs make a request line of about 3.2 KB,
/// under gunicorn's default limit of 4094 bytes and the 8 KB of common proxies. Measured on
/// the lab's Neutron (gunicorn): 100 IDs (4026 bytes) answer 200, 120 IDs 414 URI Too Long.
/// A cloud with a shorter limit fails the snapshot, and its links resync per link.
pub const ROUTER_IDS_PER_CALL: usize = 80;

/// The shared reads of one resync window.
pub struct Snapshot {
    taken: Instant,
    transit_network_id: String,
    ports: Vec<Port>,
    /// Updated by replayed writes (Neutron answers them with the whole router), so links
    /// later in the window see the table as it is.
    routers: Mutex<BTreeMap<String, Router>>,
    reads: u64,
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
    /// Read the transit network's ports and these routers (the gateway router is always
    /// included).
    pub async fn take(
        net: &dyn Neutron,
        fabric: &Fabric,
        router_ids: impl IntoIterator<Item = String>,
    ) -> Result<Self> {
        let taken = Instant::now();
        let ports = transit_ports(net, fabric).await?;
        let mut ids: Vec<String> = router_ids.into_iter().collect();
        ids.push(fabric.gateway_router_id.clone());
        ids.sort();
        ids.dedup();
        let mut routers = BTreeMap::new();
        let mut reads = 1;
        for chunk in ids.chunks(ROUTER_IDS_PER_CALL) {
            let q = RouterQuery {
                ids: chunk.to_vec(),
                ..Default::default()
            };
            for r in net.list_routers(&q).await? {
                routers.insert(r.id.clone(), r);
            }
            reads += 1;
        }
        Ok(Self {
            taken,
            transit_network_id: fabric.transit_network_id.clone(),
            ports,
            routers: Mutex::new(routers),
            reads,
        })
    }

    /// Read only the transit network's ports: all a check of cross-tenant legs needs.
    pub async fn take_ports(net: &dyn Neutron, fabric: &Fabric) -> Result<Self> {
        Ok(Self {
            taken: Instant::now(),
            transit_network_id: fabric.transit_network_id.clone(),
            ports: transit_ports(net, fabric).await?,
            routers: Mutex::new(BTreeMap::new()),
            reads: 1,
        })
    }

    pub fn age(&self) -> Duration {
        self.taken.elapsed()
    }

    /// The cloud reads it cost.
    pub fn reads(&self) -> u64 {
        self.reads
    }

    fn routers(&self) -> MutexGuard<'_, BTreeMap<String, Router>> {
        self.routers.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// A converged cross-tenant link's leg as its status records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedLeg {
    pub link: String,
    pub port_id: String,
    pub transit_ip: String,
}

/// A leg [`check_legs`] found gone or moved: its link, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MovedLeg {
    pub link: String,
    pub why: String,
}

/// Check these cross-tenant legs from one read of the transit network's ports (none when
/// there are no legs): the links whose leg is gone or no longer at its recorded address, to
/// be reconciled at once.
pub async fn check_legs(
    net: &dyn Neutron,
    fabric: &Fabric,
    legs: &[RecordedLeg],
) -> Result<Vec<MovedLeg>> {
    if legs.is_empty() {
        return Ok(vec![]);
    }
    let snap = Snapshot::take_ports(net, fabric).await?;
    Ok(legs
        .iter()
        .filter_map(|l| {
            leg_check(&l.port_id, &l.transit_ip, &snap.ports).map(|why| MovedLeg {
                link: l.link.clone(),
                why,
            })
        })
        .collect())
}

/// One snapshot per resync window, shared by every link resyncing in it.
pub struct Snapshots {
    window: Duration,
    current: tokio::sync::Mutex<Option<Arc<Snapshot>>>,
}

impl Snapshots {
    pub fn new(window: Duration) -> Self {
        Self {
            window,
            current: tokio::sync::Mutex::new(None),
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
        let s = Arc::new(Snapshot::take(net, fabric, router_ids()).await?);
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

/// Run one same-tenant link's steps against the snapshot and carry out what `plan::resync`
/// decides. `net` is the live cloud, used only to replay route writes.
pub async fn resync_from(
    snap: &Snapshot,
    net: &dyn Neutron,
    fabric: &Fabric,
    input: &Input<'_>,
) -> Resynced {
    if input.spec.credentials_secret_ref.is_some() {
        // Its routers live in the customer's project, read with its own credential.
        return Resynced::PerLink("cross-tenant".into());
    }
    let dry = DryRun {
        snap,
        overlay: Mutex::new(BTreeMap::new()),
        noted: Mutex::new(vec![]),
    };
    let outcome = Engine::same_tenant(&dry, fabric).reconcile(input).await;
    let noted = dry.noted.into_inner().unwrap_or_else(|e| e.into_inner());
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
                    RouteWrite::Add { router, routes } => net.add_extraroutes(router, routes).await,
                    RouteWrite::Remove { router, routes } => {
                        net.remove_extraroutes(router, routes).await
                    }
                };
                match done {
                    Ok(r) => {
                        snap.routers().insert(r.id.clone(), r);
                    }
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

/// A `Neutron` over a snapshot: reads come from memory, writes are only noted (route writes
/// answered as Neutron would, so the steps carry on to the end). The cloud is never called.
struct DryRun<'s> {
    snap: &'s Snapshot,
    /// Routers as this link's noted route writes would leave them.
    overlay: Mutex<BTreeMap<String, Router>>,
    noted: Mutex<Vec<Noted>>,
}

impl DryRun<'_> {
    fn note(&self, n: Noted) {
        self.noted.lock().unwrap_or_else(|e| e.into_inner()).push(n);
    }

    /// Stop the steps: the answer is not in the snapshot. Whatever they conclude is thrown
    /// away (`plan::resync` sends the link down the per-link path).
    fn miss<T>(&self, what: String) -> Result<T> {
        let e = CloudError::Decode {
            method: "GET".into(),
            path: what.clone(),
            message: "not in the resync snapshot".into(),
        };
        self.note(Noted::Miss(what));
        Err(e)
    }

    fn refuse<T>(&self, what: String) -> Result<T> {
        let e = CloudError::Decode {
            method: "WRITE".into(),
            path: what.clone(),
            message: "a resync snapshot makes no writes".into(),
        };
        self.note(Noted::OtherWrite(what));
        Err(e)
    }

    fn router(&self, id: &str) -> Option<Router> {
        let overlay = self.overlay.lock().unwrap_or_else(|e| e.into_inner());
        overlay
            .get(id)
            .cloned()
            .or_else(|| self.snap.routers().get(id).cloned())
    }

    fn edit(&self, id: &str, f: impl FnOnce(&mut Vec<Route>)) -> Option<Router> {
        let mut r = self.router(id)?;
        f(&mut r.routes);
        r.revision_number += 1;
        self.overlay
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(id.to_string(), r.clone());
        Some(r)
    }
}

#[async_trait]
impl Neutron for DryRun<'_> {
    async fn extensions(&self) -> Result<Vec<String>> {
        self.miss("GET /extensions".into())
    }
    async fn get_network(&self, id: &str) -> Result<Network> {
        self.miss(format!("GET /networks/{id}"))
    }
    async fn get_subnet(&self, id: &str) -> Result<Subnet> {
        self.miss(format!("GET /subnets/{id}"))
    }
    async fn list_ports(&self, q: &PortQuery) -> Result<Vec<Port>> {
        let transit = PortQuery {
            network_id: Some(self.snap.transit_network_id.clone()),
            ..Default::default()
        };
        if *q == transit {
            return Ok(self.snap.ports.clone());
        }
        // The reverse step's look at a service router's interfaces before it adds a route
        // (a gateway CIDR overlapping a connected subnet): the snapshot does not hold them,
        // and sending every link of a gateway change down the per-link path would cost a read
        // per link. A link's own CIDR and the transit subnet are still screened; the
        // router's other subnets are checked when the link reconciles on its own
        // (docs/crd-reference.md, "Reverse-route screening").
        let interfaces = PortQuery {
            device_id: q.device_id.clone(),
            ..Default::default()
        };
        if q.device_id.is_some() && *q == interfaces {
            return Ok(vec![]);
        }
        self.miss(format!("GET /ports {q:?}"))
    }
    async fn get_port(&self, id: &str) -> Result<Port> {
        self.miss(format!("GET /ports/{id}"))
    }
    async fn create_port(&self, _req: &CreatePort) -> Result<Port> {
        self.refuse("POST /ports".into())
    }
    async fn add_port_tag(&self, port_id: &str, _tag: &str) -> Result<()> {
        self.refuse(format!("PUT /ports/{port_id}/tags/…"))
    }
    async fn set_port_tags(&self, port_id: &str, _tags: &[String]) -> Result<()> {
        self.refuse(format!("PUT /ports/{port_id}/tags"))
    }
    async fn delete_port(&self, id: &str) -> Result<()> {
        self.refuse(format!("DELETE /ports/{id}"))
    }
    async fn get_router(&self, id: &str) -> Result<Router> {
        match self.router(id) {
            Some(r) => Ok(r),
            None => self.miss(format!("GET /routers/{id}")),
        }
    }
    async fn list_routers(&self, q: &RouterQuery) -> Result<Vec<Router>> {
        // By ID only: a lookup by name may find a router the snapshot never read.
        if q.name.is_some() || q.ids.is_empty() {
            return self.miss(format!("GET /routers {q:?}"));
        }
        let mut out = vec![];
        for id in &q.ids {
            match self.router(id) {
                Some(r) => out.push(r),
                None => return self.miss(format!("GET /routers?id={id}")),
            }
        }
        Ok(out)
    }
    async fn add_router_interface(&self, router_id: &str, _port_id: &str) -> Result<()> {
        self.refuse(format!("PUT /routers/{router_id}/add_router_interface"))
    }
    async fn remove_router_interface(&self, router_id: &str, _port_id: &str) -> Result<()> {
        self.refuse(format!("PUT /routers/{router_id}/remove_router_interface"))
    }
    async fn add_extraroutes(&self, router_id: &str, routes: &[Route]) -> Result<Router> {
        let edited = self.edit(router_id, |table| {
            for r in routes {
                if !table.contains(r) {
                    table.push(r.clone());
                }
            }
        });
        match edited {
            Some(r) => {
                self.note(Noted::AddRoutes {
                    router: router_id.into(),
                    routes: routes.to_vec(),
                });
                Ok(r)
            }
            None => self.miss(format!("router {router_id}")),
        }
    }
    async fn remove_extraroutes(&self, router_id: &str, routes: &[Route]) -> Result<Router> {
        match self.edit(router_id, |table| table.retain(|r| !routes.contains(r))) {
            Some(r) => {
                self.note(Noted::RemoveRoutes {
                    router: router_id.into(),
                    routes: routes.to_vec(),
                });
                Ok(r)
            }
            None => self.miss(format!("router {router_id}")),
        }
    }
    async fn set_routes(&self, router_id: &str, _r: &[Route], _rev: Option<u64>) -> Result<Router> {
        self.refuse(format!("PUT /routers/{router_id} routes"))
    }
    async fn create_rbac_policy(&self, _req: &ShareNetwork) -> Result<RbacPolicy> {
        self.refuse("POST /rbac-policies".into())
    }
    async fn list_rbac_policies(&self, object_id: &str) -> Result<Vec<RbacPolicy>> {
        self.miss(format!("GET /rbac-policies?object_id={object_id}"))
    }
    async fn delete_rbac_policy(&self, id: &str) -> Result<()> {
        self.refuse(format!("DELETE /rbac-policies/{id}"))
    }
    async fn probe_admin_read(&self) -> Result<()> {
        self.miss(bnerd_cloud::ADMIN_READ_PROBE.into())
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
