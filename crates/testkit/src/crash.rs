//! A pod killed at the worst moment: a Neutron wrapper that lets `k` calls complete and then
//! never answers again, so the reconcile future that made them can be dropped there, as the
//! process would be. Every client of one reconcile (the operator's and a customer's) shares
//! one [`Crash`], so `k` counts calls across credentials in the order they were made.
//!
//! Two kinds of stop, because a write's effect and its answer are two different moments:
//! [`Kind::Before`] stops before call `k` reaches the cloud; [`Kind::AnswerLost`] lets call `k`
//! commit and loses its answer ("timeout after commit", and then the pod dies).

use std::future::Future;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use bnerd_cloud::{
    CloudError, CreatePort, CreateRouter, CreateSubnet, Identity, Network, NetworkQuery, Neutron,
    Port, PortQuery, RbacPolicy, Result, Route, Router, RouterQuery, ShareNetwork, Subnet,
    SubnetQuery, TokenInfo,
};
use tokio::sync::Notify;

/// Where the stop falls relative to call `k` (0-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Calls `0..k` complete; call `k` never reaches the cloud.
    Before,
    /// Calls `0..k` complete; call `k` commits but its answer never comes.
    AnswerLost,
}

impl Kind {
    pub const ALL: [Kind; 2] = [Kind::Before, Kind::AnswerLost];
}

/// What happens at call `k`.
#[derive(Debug, Clone)]
enum Plan {
    /// The pod dies there: call `k` and every later one never answer.
    Stop(Kind),
    /// Call `k` alone fails with this error; `commit` first when set (the answer was lost).
    Fail { error: CloudError, commit: bool },
}

/// The shared stop plan of one reconcile, and what it saw.
#[derive(Default)]
pub struct Crash {
    plan: Mutex<Option<(usize, Plan)>>,
    /// Yield to the scheduler this many times before the first call, and once before each
    /// call: two engines joined in one task then interleave call by call, at an offset.
    interleave: Option<AtomicUsize>,
    calls: AtomicUsize,
    tripped: Notify,
    /// Names of the calls made, in order (to report where a finding appeared).
    log: Mutex<Vec<&'static str>>,
}

enum Gate {
    Go,
    Hang,
    CommitThenHang,
    Fail(CloudError),
    CommitThenFail(CloudError),
}

impl Crash {
    /// Nothing stops: every call goes through and is counted.
    pub fn counting() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Stop at call `k` the `kind` way.
    pub fn at(k: usize, kind: Kind) -> Arc<Self> {
        let c = Self::default();
        *c.plan.lock().unwrap_or_else(|e| e.into_inner()) = Some((k, Plan::Stop(kind)));
        Arc::new(c)
    }

    /// Call `k` fails with `error` (after committing when `commit`); the rest go through.
    pub fn fail_at(k: usize, error: CloudError, commit: bool) -> Arc<Self> {
        let c = Self::default();
        *c.plan.lock().unwrap_or_else(|e| e.into_inner()) = Some((k, Plan::Fail { error, commit }));
        Arc::new(c)
    }

    /// Nothing stops; yield `offset` times before the first call and once before each.
    pub fn interleaved(offset: usize) -> Arc<Self> {
        Arc::new(Self {
            interleave: Some(AtomicUsize::new(offset)),
            ..Self::default()
        })
    }

    /// Calls made so far (the stopped one included).
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// The calls made, by name, in order.
    pub fn log(&self) -> Vec<&'static str> {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Resolves once a call has been stopped.
    pub async fn tripped(&self) {
        self.tripped.notified().await
    }

    fn enter(&self, name: &'static str) -> Gate {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        self.log
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(name);
        let plan = self.plan.lock().unwrap_or_else(|e| e.into_inner()).clone();
        match plan {
            Some((k, Plan::Stop(kind))) if n >= k => match kind {
                // The pod dies once call `k` has committed: the stop is signalled after its
                // answer comes (`gate`). Signalled here, the reconcile would be dropped with
                // the request still in flight, and a real server may commit it after the
                // next reconcile has looked.
                Kind::AnswerLost if n == k => Gate::CommitThenHang,
                Kind::AnswerLost => Gate::Hang,
                Kind::Before => {
                    // notify_one keeps a permit when nobody waits yet.
                    self.tripped.notify_one();
                    Gate::Hang
                }
            },
            Some((k, Plan::Fail { error, commit })) if n == k => {
                if commit {
                    Gate::CommitThenFail(error)
                } else {
                    Gate::Fail(error)
                }
            }
            _ => Gate::Go,
        }
    }

    async fn gate<T>(&self, name: &'static str, f: impl Future<Output = Result<T>>) -> Result<T> {
        if let Some(offset) = &self.interleave {
            let first = offset.swap(0, Ordering::SeqCst);
            for _ in 0..=first {
                tokio::task::yield_now().await;
            }
        }
        match self.enter(name) {
            Gate::Fail(e) => Err(e),
            Gate::CommitThenFail(e) => {
                let _ = f.await;
                Err(e)
            }
            Gate::Go => f.await,
            Gate::Hang => std::future::pending().await,
            Gate::CommitThenHang => {
                let _ = f.await;
                self.tripped.notify_one();
                std::future::pending().await
            }
        }
    }
}

/// Run `fut` unless the crash plan stops it first: `Some(output)` when it finished, `None`
/// when it was dropped at the stop (the pod died).
pub async fn run_until_crash<T>(crash: &Crash, fut: impl Future<Output = T>) -> Option<T> {
    tokio::select! {
        biased;
        out = fut => Some(out),
        () = crash.tripped() => None,
    }
}

/// `inner`, stopped by `crash`.
pub struct Crashing {
    inner: Arc<dyn Neutron>,
    /// Keystone, for a customer's client (its token is one call of the reconcile too).
    identity: Option<Arc<dyn Identity>>,
    crash: Arc<Crash>,
}

impl Crashing {
    pub fn new(inner: Arc<dyn Neutron>, crash: Arc<Crash>) -> Self {
        Self {
            inner,
            identity: None,
            crash,
        }
    }

    /// A client of both Neutron and Keystone (a customer's), stopped by `crash`.
    pub fn with_identity<T: Neutron + Identity + 'static>(
        inner: Arc<T>,
        crash: Arc<Crash>,
    ) -> Self {
        Self {
            inner: inner.clone(),
            identity: Some(inner),
            crash,
        }
    }
}

#[async_trait]
impl Identity for Crashing {
    async fn token_info(&self) -> Result<TokenInfo> {
        match &self.identity {
            Some(i) => self.crash.gate("token_info", i.token_info()).await,
            None => Err(CloudError::auth("this test client has no Keystone")),
        }
    }
}

#[async_trait]
impl Neutron for Crashing {
    async fn extensions(&self) -> Result<Vec<String>> {
        self.crash.gate("extensions", self.inner.extensions()).await
    }
    async fn get_network(&self, id: &str) -> Result<Network> {
        self.crash
            .gate("get_network", self.inner.get_network(id))
            .await
    }
    async fn get_subnet(&self, id: &str) -> Result<Subnet> {
        self.crash
            .gate("get_subnet", self.inner.get_subnet(id))
            .await
    }
    async fn list_ports(&self, q: &PortQuery) -> Result<Vec<Port>> {
        self.crash
            .gate("list_ports", self.inner.list_ports(q))
            .await
    }
    async fn get_port(&self, id: &str) -> Result<Port> {
        self.crash.gate("get_port", self.inner.get_port(id)).await
    }
    async fn create_port(&self, req: &CreatePort) -> Result<Port> {
        self.crash
            .gate("create_port", self.inner.create_port(req))
            .await
    }
    async fn add_port_tag(&self, port_id: &str, tag: &str) -> Result<()> {
        self.crash
            .gate("add_port_tag", self.inner.add_port_tag(port_id, tag))
            .await
    }
    async fn set_port_tags(&self, port_id: &str, tags: &[String]) -> Result<()> {
        self.crash
            .gate("set_port_tags", self.inner.set_port_tags(port_id, tags))
            .await
    }
    async fn delete_port(&self, id: &str) -> Result<()> {
        self.crash
            .gate("delete_port", self.inner.delete_port(id))
            .await
    }
    async fn get_router(&self, id: &str) -> Result<Router> {
        self.crash
            .gate("get_router", self.inner.get_router(id))
            .await
    }
    async fn list_routers(&self, q: &RouterQuery) -> Result<Vec<Router>> {
        self.crash
            .gate("list_routers", self.inner.list_routers(q))
            .await
    }
    async fn add_router_interface(&self, router_id: &str, port_id: &str) -> Result<()> {
        self.crash
            .gate(
                "add_router_interface",
                self.inner.add_router_interface(router_id, port_id),
            )
            .await
    }
    async fn remove_router_interface(&self, router_id: &str, port_id: &str) -> Result<()> {
        self.crash
            .gate(
                "remove_router_interface",
                self.inner.remove_router_interface(router_id, port_id),
            )
            .await
    }
    async fn add_extraroutes(&self, router_id: &str, routes: &[Route]) -> Result<Router> {
        self.crash
            .gate(
                "add_extraroutes",
                self.inner.add_extraroutes(router_id, routes),
            )
            .await
    }
    async fn remove_extraroutes(&self, router_id: &str, routes: &[Route]) -> Result<Router> {
        self.crash
            .gate(
                "remove_extraroutes",
                self.inner.remove_extraroutes(router_id, routes),
            )
            .await
    }
    async fn set_routes(
        &self,
        router_id: &str,
        routes: &[Route],
        if_revision: Option<u64>,
    ) -> Result<Router> {
        self.crash
            .gate(
                "set_routes",
                self.inner.set_routes(router_id, routes, if_revision),
            )
            .await
    }
    async fn create_rbac_policy(&self, req: &ShareNetwork) -> Result<RbacPolicy> {
        self.crash
            .gate("create_rbac_policy", self.inner.create_rbac_policy(req))
            .await
    }
    async fn list_rbac_policies(&self, object_id: &str) -> Result<Vec<RbacPolicy>> {
        self.crash
            .gate(
                "list_rbac_policies",
                self.inner.list_rbac_policies(object_id),
            )
            .await
    }
    async fn list_rbac_policies_of(&self, object_ids: &[String]) -> Result<Vec<RbacPolicy>> {
        self.crash
            .gate(
                "list_rbac_policies",
                self.inner.list_rbac_policies_of(object_ids),
            )
            .await
    }
    async fn delete_rbac_policy(&self, id: &str) -> Result<()> {
        self.crash
            .gate("delete_rbac_policy", self.inner.delete_rbac_policy(id))
            .await
    }
    async fn probe_admin_read(&self) -> Result<()> {
        self.crash
            .gate("probe_admin_read", self.inner.probe_admin_read())
            .await
    }
    async fn quota_details(&self, project_id: &str) -> Result<Vec<bnerd_cloud::QuotaUsage>> {
        self.crash
            .gate("quota_details", self.inner.quota_details(project_id))
            .await
    }
    async fn list_networks(&self, q: &NetworkQuery) -> Result<Vec<Network>> {
        self.crash
            .gate("list_networks", self.inner.list_networks(q))
            .await
    }
    async fn list_subnets(&self, q: &SubnetQuery) -> Result<Vec<Subnet>> {
        self.crash
            .gate("list_subnets", self.inner.list_subnets(q))
            .await
    }
    async fn create_network(&self, name: &str) -> Result<Network> {
        self.crash
            .gate("create_network", self.inner.create_network(name))
            .await
    }
    async fn delete_network(&self, id: &str) -> Result<()> {
        self.crash
            .gate("delete_network", self.inner.delete_network(id))
            .await
    }
    async fn create_subnet_with(&self, req: &CreateSubnet) -> Result<Subnet> {
        self.crash
            .gate("create_subnet", self.inner.create_subnet_with(req))
            .await
    }
    async fn create_router_with(&self, req: &CreateRouter) -> Result<Router> {
        self.crash
            .gate("create_router", self.inner.create_router_with(req))
            .await
    }
    async fn delete_router(&self, id: &str) -> Result<()> {
        self.crash
            .gate("delete_router", self.inner.delete_router(id))
            .await
    }
    async fn add_router_subnet(&self, router_id: &str, subnet_id: &str) -> Result<String> {
        self.crash
            .gate(
                "add_router_subnet",
                self.inner.add_router_subnet(router_id, subnet_id),
            )
            .await
    }
}

/// A fixed-seed sample without a dependency: splitmix64.
pub struct Sample(u64);

impl Sample {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn draw(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// `n` distinct values below `bound` (all of them when `n >= bound`), sorted.
    pub fn distinct(&mut self, n: usize, bound: usize) -> Vec<usize> {
        if n >= bound {
            return (0..bound).collect();
        }
        let mut out = std::collections::BTreeSet::new();
        while out.len() < n {
            out.insert((self.draw() % bound as u64) as usize);
        }
        out.into_iter().collect()
    }
}
