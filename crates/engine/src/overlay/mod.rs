//! The simulated Neutron: an overlay that answers reads from what it was given ([`Known`]) or
//! else from the cloud below it, and records writes, answering each as Neutron would
//! (refusals included, in the words of `bnerd_cloud::refusals`) so the steps go on to the end
//! as they would for real. Later reads see the recorded writes.
//!
//! Two callers run the reconcile over it:
//! - `kubectl clusterlink plan`: nothing known, the cloud below. The plan is the reconcile's
//!   own decision, so a plan and the reconcile after it cannot disagree.
//! - The batched resync (`resync`): a snapshot known. For a same-tenant link nothing is
//!   below: a read the snapshot cannot answer is a miss ([`Recorded::Miss`]) and sends the
//!   link down the per-link path. For a cross-tenant link the operator's cloud is below a
//!   learning overlay ([`Overlay::learning`]), whose answers the snapshot keeps for the next
//!   link asking the same, and the customer's side reads live beside it.
//!
//! A [`Overlay::tap`] instead passes writes to the cloud and records them as a plan names
//! them: what a test compares a plan with.
//!
//! A cross-tenant link writes with two credentials: [`Overlay::beside`] gives the customer's
//! side an overlay of its own over the customer's client, sharing the recorded writes (one list,
//! in call order, each with its [`Whose`]) and the ports they left.
//!
//! What it was given is in `known`, what it records in `planned`. This file passes 500 lines
//! and stays one piece: every answer reads the known objects, the recorded writes and the
//! cloud below together, in the order Neutron would; split by call, each half would reach
//! into the other's state.

mod customer;
mod known;
mod planned;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use bnerd_cloud::refusals::{self, SubnetRef};
use bnerd_cloud::{
    CloudError, CreatePort, CreateRouter, CreateSubnet, FixedIp, Identity, Network, NetworkQuery,
    Neutron, Port, PortQuery, RbacPolicy, Result, Route, Router, RouterQuery, ShareNetwork, Subnet,
    SubnetQuery, TokenInfo,
};

use crate::credentials::CustomerCloud;

pub use customer::CustomerSide;
use known::Learned;
pub use known::{Interfaces, Known};
pub use planned::PlannedWrite;

/// One thing the overlay recorded, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    Write(PlannedWrite),
    /// A read neither the known objects nor a cloud below could answer (what was asked).
    Miss(String),
}

pub use crate::plan::share::Whose;

/// The cloud below an overlay: borrowed (the operator's client), or held (a customer client
/// made while the reconcile runs).
enum Below<'a> {
    Borrowed(&'a dyn Neutron),
    Held(Arc<dyn CustomerCloud>),
}

impl Below<'_> {
    fn net(&self) -> &dyn Neutron {
        match self {
            Below::Borrowed(n) => *n,
            Below::Held(c) => c.as_ref(),
        }
    }
}

#[derive(Default)]
struct State {
    /// Ports as the recorded writes leave them; `None`: deleted.
    ports: BTreeMap<String, Option<Port>>,
    routers: BTreeMap<String, Router>,
    /// Routers the recorded writes deleted.
    routers_gone: std::collections::BTreeSet<String>,
    /// Networks and subnets as the recorded writes leave them; `None`: deleted.
    networks: BTreeMap<String, Option<Network>>,
    subnets: BTreeMap<String, Option<Subnet>>,
    log: Vec<(Whose, Recorded)>,
    created: usize,
    /// How many networks, subnets and routers the writes created, for their planned names.
    made: BTreeMap<&'static str, usize>,
    /// Tap: the objects this run created, by their cloud ID, as a plan names them.
    names: BTreeMap<String, String>,
    /// The addresses planned ports stand at because Neutron would pick them.
    picked: Vec<String>,
    /// The revision of each router read from the cloud in this run.
    revisions: BTreeMap<String, u64>,
}

/// A read answered by what an earlier overlay learned of exactly this request, else by the
/// cloud below (a miss when there is none), its answer kept for the next (learning overlays
/// only). `$kind` is the [`Learned`] variant the answer is kept as.
macro_rules! read_through {
    ($o:expr, $request:expr, $kind:path, |$net:ident| $call:expr) => {{
        let request: String = $request;
        match $o.recalled(&request) {
            Some($kind(v)) => Ok(v),
            _ => match $o.below(|| request.clone()) {
                Err(e) => Err(e),
                Ok($net) => match $call.await {
                    Err(e) => Err(e),
                    Ok(v) => {
                        $o.keep(request, $kind(v.clone()));
                        Ok(v)
                    }
                },
            },
        }
    }};
}

/// A router this run read from the cloud, at its revision, and its ports when
/// [`Interfaces`] holds them at that revision.
struct HeldAt {
    router: String,
    revision: u64,
    ports: Option<Vec<Port>>,
}

/// The simulated Neutron (see the module).
pub struct Overlay<'a> {
    known: Option<&'a Known>,
    /// Answers what `known` cannot; `None`: such a read is a miss.
    below: Option<Below<'a>>,
    /// Whose credential the writes through this overlay are made with.
    credential: Whose,
    /// Writes go to `below` too, and are recorded as a plan would name them.
    tap: bool,
    /// What `below` answers is kept in `known` for the next overlay over it.
    learn: bool,
    /// Routers' interfaces and subnets held from earlier runs, for this overlay and the ones
    /// beside it.
    interfaces: Option<Arc<Interfaces>>,
    /// The project a planned port lands in: the credential's, as Neutron would set it (the
    /// reconcile checks a port's project before attaching it). A customer side learns it from
    /// its token.
    project: Mutex<String>,
    /// Neutron words its refusals as a cloud with this L3 plugin does (`Fabric`'s flag).
    router_subnets_by_cidr: bool,
    /// The transit subnet, where a planned port Neutron picks the address of gets
    /// [`planned_pick`]'s.
    transit: Option<ipnet::Ipv4Net>,
    /// Shared with the overlays [`Overlay::beside`] made.
    state: Arc<Mutex<State>>,
}

/// The address a planned port stands at when Neutron picks it (a cross-tenant leg): the last
/// host address of the transit subnet, far from the walk's end. Neutron picks at random among
/// the first free ones (its IPAM samples a window of them), so a plan names it as "the address
/// Neutron picks" ([`PICKED`]).
pub fn planned_pick(transit: ipnet::Ipv4Net) -> std::net::Ipv4Addr {
    let last = u32::from(transit.broadcast());
    std::net::Ipv4Addr::from(last.saturating_sub(1))
}

/// How a plan names [`planned_pick`]'s address.
pub const PICKED: &str = "<the address Neutron picks>";

/// The id a planned port goes by until Neutron gives it one.
pub const PLANNED_PORT: &str = "<new port>";

/// A list as the recorded writes leave it: what the cloud listed, less what they deleted, and
/// what they made that the query matches.
fn as_written<T: Clone>(
    listed: Vec<T>,
    written: &BTreeMap<String, Option<T>>,
    id: impl Fn(&T) -> &String,
    matches: impl Fn(&T) -> bool,
) -> Vec<T> {
    let mut out: Vec<T> = listed
        .into_iter()
        .filter(|x| !matches!(written.get(id(x)), Some(None)))
        .collect();
    out.extend(written.values().flatten().filter(|x| matches(x)).cloned());
    out
}

/// The id the `n`th planned object of a kind goes by: `<new network>`, `<new router 2>`.
fn planned_name(kind: &str, n: usize) -> String {
    if n == 1 {
        format!("<new {kind}>")
    } else {
        format!("<new {kind} {n}>")
    }
}

impl<'a> Overlay<'a> {
    fn new(known: Option<&'a Known>, below: Option<&'a dyn Neutron>, tap: bool) -> Self {
        Self {
            known,
            below: below.map(Below::Borrowed),
            credential: Whose::Operator,
            tap,
            learn: false,
            interfaces: None,
            project: Mutex::new(String::new()),
            router_subnets_by_cidr: false,
            transit: None,
            state: Arc::new(Mutex::new(State::default())),
        }
    }

    /// The customer's side beside this overlay: reads from `customer` (its Keystone calls go
    /// straight to it), writes recorded (or, beside a tap, made) in this overlay's list.
    pub fn beside(&self, customer: Arc<dyn CustomerCloud>) -> Overlay<'static> {
        Overlay {
            known: None,
            below: Some(Below::Held(customer)),
            credential: Whose::Customer,
            tap: self.tap,
            learn: false,
            interfaces: self.interfaces.clone(),
            project: Mutex::new(String::new()),
            router_subnets_by_cidr: self.router_subnets_by_cidr,
            transit: self.transit,
            state: self.state.clone(),
        }
    }

    /// Reads from `cloud`, writes only recorded: a plan.
    pub fn on(cloud: &'a dyn Neutron) -> Self {
        Self::new(None, Some(cloud), false)
    }

    /// Reads from `known` alone, writes only recorded: the batched resync. Never calls a cloud.
    pub fn of(known: &'a Known) -> Self {
        Self::new(Some(known), None, false)
    }

    /// Reads from `known`, else from `cloud`, whose answers `known` then keeps for the next
    /// overlay over it (the same request answered once a window); writes only recorded: the
    /// batched resync of a cross-tenant link, whose customer side no snapshot holds.
    pub fn learning(known: &'a Known, cloud: &'a dyn Neutron) -> Self {
        Self {
            learn: true,
            ..Self::new(Some(known), Some(cloud), false)
        }
    }

    /// Routers' interfaces and subnets read from the cloud below are held in `interfaces`,
    /// and answered from there while a router's revision (read in this run) is unchanged.
    pub fn holding(self, interfaces: Arc<Interfaces>) -> Self {
        Self {
            interfaces: Some(interfaces),
            ..self
        }
    }

    /// Writes reach the cloud, and are recorded with the ports this run created named as a
    /// plan names them, so the two lists compare equal when the plan was right.
    pub fn tap(cloud: &'a dyn Neutron) -> Self {
        Self::new(None, Some(cloud), true)
    }

    /// Refusals worded as the cloud of `fabric` words them.
    pub fn worded_for(self, fabric: &bnerd_cloud::fabric::Fabric) -> Self {
        Self {
            router_subnets_by_cidr: fabric.router_subnets_by_cidr,
            transit: Some(fabric.transit_subnet),
            ..self
        }
    }

    /// Planned ports are created in this project (the credential's own).
    pub fn creating_in(self, project: &str) -> Self {
        Self {
            project: Mutex::new(project.to_string()),
            ..self
        }
    }

    /// The writes recorded so far, in order.
    pub fn writes(&self) -> Vec<PlannedWrite> {
        self.with(|s| {
            s.log
                .iter()
                .filter_map(|(_, r)| match r {
                    Recorded::Write(w) => Some(w.clone()),
                    Recorded::Miss(_) => None,
                })
                .collect()
        })
    }

    /// The writes recorded so far, in order, each with the credential that makes it.
    pub fn writes_by(&self) -> Vec<(Whose, PlannedWrite)> {
        self.with(|s| {
            s.log
                .iter()
                .filter_map(|(c, r)| match r {
                    Recorded::Write(w) => Some((*c, w.clone())),
                    Recorded::Miss(_) => None,
                })
                .collect()
        })
    }

    /// The addresses planned ports stand at where Neutron would pick them ([`planned_pick`]
    /// of their subnet), for a plan to name as [`PICKED`].
    pub fn picked(&self) -> Vec<String> {
        self.with(|s| s.picked.clone())
    }

    /// Everything recorded, writes and misses, in order, each with the credential it was
    /// asked with.
    pub fn recorded_by(&self) -> Vec<(Whose, Recorded)> {
        self.with(|s| s.log.clone())
    }

    /// Everything recorded, writes and misses, in order.
    pub fn recorded(&self) -> Vec<Recorded> {
        self.with(|s| s.log.iter().map(|(_, r)| r.clone()).collect())
    }

    fn with<T>(&self, f: impl FnOnce(&mut State) -> T) -> T {
        let mut g = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut g)
    }

    fn note(&self, w: PlannedWrite) {
        let c = self.credential;
        self.with(|s| s.log.push((c, Recorded::Write(w))));
    }

    /// The cloud below, or a miss: stop the steps, the answer is not known. Whatever they
    /// conclude is thrown away (`plan::resync` sends the link down the per-link path).
    fn below(&self, what: impl FnOnce() -> String) -> Result<&dyn Neutron> {
        match &self.below {
            Some(b) => Ok(b.net()),
            None => {
                let what = what();
                let c = self.credential;
                self.with(|s| s.log.push((c, Recorded::Miss(what.clone()))));
                Err(CloudError::Decode {
                    method: "GET".into(),
                    path: what,
                    message: "not in the resync snapshot".into(),
                })
            }
        }
    }

    /// Where a learning overlay keeps what the cloud answered; `None` for any other.
    fn learning_into(&self) -> Option<&'a Known> {
        self.known.filter(|_| self.learn)
    }

    /// What an earlier overlay learned of exactly `request` (learning overlays only).
    fn recalled(&self, request: &str) -> Option<Learned> {
        self.learning_into().and_then(|k| k.recall(request))
    }

    /// Keep the cloud's answer to `request` for the next overlay (learning overlays only).
    fn keep(&self, request: String, answer: Learned) {
        if let Some(k) = self.learning_into() {
            k.learn(request, answer);
        }
    }

    /// For a query of exactly one router's ports, when this run read that router from the
    /// cloud: the router at its revision, and its ports if held at that revision.
    fn held_interfaces(&self, q: &PortQuery) -> Option<HeldAt> {
        let i = self.interfaces.as_ref()?;
        let [router] = q.device_ids.as_slice() else {
            return None;
        };
        let only_device = PortQuery {
            device_ids: q.device_ids.clone(),
            ..Default::default()
        };
        if *q != only_device {
            return None;
        }
        let revision = self.with(|s| s.revisions.get(router).copied())?;
        Some(HeldAt {
            ports: i.ports(router, revision),
            router: router.clone(),
            revision,
        })
    }

    /// The cloud a tap writes to; `None`: writes are only recorded.
    fn tapping(&self) -> Option<&dyn Neutron> {
        self.below.as_ref().filter(|_| self.tap).map(Below::net)
    }

    /// A write the cloud makes (a tap): recorded as a plan names it, in the order the steps
    /// call (two writes sent side by side keep their call order, whichever Neutron answers
    /// first), and taken back when Neutron refuses it.
    async fn tapped<T>(
        &self,
        w: PlannedWrite,
        call: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        let entry = (self.credential, Recorded::Write(w));
        self.with(|s| s.log.push(entry.clone()));
        let done = call.await;
        if done.is_err() {
            self.with(|s| {
                if let Some(i) = s.log.iter().rposition(|r| *r == entry) {
                    s.log.remove(i);
                }
            });
        }
        done
    }

    /// The name a port goes by in the recorded writes.
    fn called(&self, id: &str) -> String {
        self.with(|s| s.names.get(id).cloned().unwrap_or_else(|| id.to_string()))
    }

    /// The next planned port's name.
    fn next_planned(s: &mut State) -> String {
        s.created += 1;
        if s.created == 1 {
            PLANNED_PORT.to_string()
        } else {
            format!("{PLANNED_PORT} {}", s.created)
        }
    }

    /// The project planned objects land in.
    fn project(&self) -> String {
        self.project
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Tap: `call` makes an object of `kind` in the cloud, recorded as `w`, and the object is
    /// named as a plan names it.
    async fn tapped_made<T>(
        &self,
        w: PlannedWrite,
        call: impl std::future::Future<Output = Result<T>>,
        kind: &'static str,
        id: impl Fn(&T) -> &str,
    ) -> Result<T> {
        let made = self.tapped(w, call).await?;
        self.name_made(id(&made), kind);
        Ok(made)
    }

    /// The next planned object of `kind` (network, subnet, router).
    fn next_made(s: &mut State, kind: &'static str) -> String {
        let n = s.made.entry(kind).or_default();
        *n += 1;
        planned_name(kind, *n)
    }

    /// Tap: name the object the cloud just made as a plan names it.
    fn name_made(&self, id: &str, kind: &'static str) {
        self.with(|s| {
            let called = Self::next_made(s, kind);
            s.names.insert(id.to_string(), called);
        });
    }

    async fn port_now(&self, id: &str) -> Result<Port> {
        match self.with(|s| s.ports.get(id).cloned()) {
            Some(Some(p)) => return Ok(p),
            Some(None) => {
                return Err(refusals::port_not_found("GET", &format!("/ports/{id}"), id));
            }
            None => {}
        }
        if let Some(p) = self.known.and_then(|k| k.port(id)) {
            return Ok(p);
        }
        read_through!(self, format!("GET /ports/{id}"), Learned::Port, |n| n
            .get_port(id))
    }

    async fn router_now(&self, id: &str) -> Result<Router> {
        if self.with(|s| s.routers_gone.contains(id)) {
            return Err(refusals::router_not_found(
                "GET",
                &format!("/routers/{id}"),
                id,
            ));
        }
        if let Some(r) = self.with(|s| s.routers.get(id).cloned()) {
            return Ok(r);
        }
        if let Some(r) = self.known.and_then(|k| k.router(id)) {
            return Ok(r);
        }
        let r = self
            .below(|| format!("GET /routers/{id}"))?
            .get_router(id)
            .await?;
        if let Some(k) = self.learning_into() {
            k.learn_router(r.clone());
        }
        self.with(|s| s.revisions.insert(r.id.clone(), r.revision_number));
        Ok(r)
    }

    async fn subnet_now(&self, id: &str) -> Result<Subnet> {
        match self.with(|s| s.subnets.get(id).cloned()) {
            Some(Some(sub)) => return Ok(sub),
            Some(None) => {
                return Err(refusals::subnet_not_found(
                    "GET",
                    &format!("/subnets/{id}"),
                    id,
                ));
            }
            None => {}
        }
        if let Some(s) = self.known.and_then(|k| k.subnet(id)) {
            return Ok(s);
        }
        let request = format!("GET /subnets/{id}");
        if let Some(Learned::Subnet(s)) = self.recalled(&request) {
            return Ok(s);
        }
        if let Some(s) = self.interfaces.as_ref().and_then(|i| i.subnet(id)) {
            return Ok(s);
        }
        let sub = self.below(|| request.clone())?.get_subnet(id).await?;
        self.keep(request, Learned::Subnet(sub.clone()));
        if let Some(i) = &self.interfaces {
            i.keep_subnet(sub.clone());
        }
        Ok(sub)
    }

    /// The CIDR of a subnet the recorded writes created.
    fn planned_subnet(&self, id: Option<&str>) -> Option<ipnet::Ipv4Net> {
        let id = id?;
        self.with(|s| s.subnets.get(id).cloned().flatten())
            .and_then(|sub| sub.cidr.parse().ok())
    }

    fn keep_port(&self, p: Port) {
        self.with(|s| s.ports.insert(p.id.clone(), Some(p)));
    }

    fn keep_router(&self, r: Router) -> Router {
        self.with(|s| s.routers.insert(r.id.clone(), r.clone()));
        r
    }

    /// A route write answered as Neutron answers it: the whole router, one revision on.
    async fn edit_routes(
        &self,
        router_id: &str,
        w: PlannedWrite,
        edit: impl FnOnce(&mut Vec<Route>),
    ) -> Result<Router> {
        let mut r = self.router_now(router_id).await?;
        self.note(w);
        edit(&mut r.routes);
        r.revision_number += 1;
        Ok(self.keep_router(r))
    }

    /// Neutron's refusal of a second interface on one subnet (or, checked by CIDR, an
    /// overlapping one), as the cloud words it; `None`: the attach goes through.
    async fn second_interface(&self, router_id: &str, port: &Port) -> Result<Option<CloudError>> {
        let on_network = self
            .list_ports(&PortQuery {
                network_id: Some(port.network_id.clone()),
                device_ids: vec![router_id.into()],
                ..Default::default()
            })
            .await?;
        let Some(other) = on_network
            .iter()
            .find(|p| p.id != port.id && p.is_router_interface())
        else {
            return Ok(None);
        };
        let subnet_of = |p: &Port| {
            p.fixed_ips
                .first()
                .map(|f| f.subnet_id.clone())
                .unwrap_or_default()
        };
        let (new_id, old_id) = (subnet_of(port), subnet_of(other));
        // The CIDR wording needs both subnets' CIDRs: two reads, on this refusal only.
        let (new_cidr, old_cidr) = if self.router_subnets_by_cidr {
            (
                self.subnet_now(&new_id).await?.cidr,
                self.subnet_now(&old_id).await?.cidr,
            )
        } else {
            Default::default()
        };
        Ok(Some(refusals::second_router_interface_refused(
            &format!("/routers/{router_id}/add_router_interface"),
            self.router_subnets_by_cidr,
            SubnetRef {
                id: &new_id,
                cidr: &new_cidr,
            },
            SubnetRef {
                id: &old_id,
                cidr: &old_cidr,
            },
        )))
    }

    /// Neutron's refusal of a detach while a route's nexthop lies in a subnet of the port.
    async fn needed_by_route(&self, router_id: &str, port: &Port) -> Result<Option<CloudError>> {
        let router = self.router_now(router_id).await?;
        if router.routes.is_empty() {
            return Ok(None);
        }
        for f in &port.fixed_ips {
            let Ok(net) = self
                .subnet_now(&f.subnet_id)
                .await?
                .cidr
                .parse::<ipnet::Ipv4Net>()
            else {
                continue;
            };
            let needed = router.routes.iter().any(|r| {
                r.nexthop
                    .parse::<std::net::Ipv4Addr>()
                    .is_ok_and(|h| net.contains(&h))
            });
            if needed {
                return Ok(Some(refusals::router_interface_in_use_by_route(
                    &format!("/routers/{router_id}/remove_router_interface"),
                    router_id,
                    &f.subnet_id,
                )));
            }
        }
        Ok(None)
    }
}

#[async_trait]
impl Neutron for Overlay<'_> {
    async fn extensions(&self) -> Result<Vec<String>> {
        self.below(|| "GET /extensions".into())?.extensions().await
    }

    async fn get_network(&self, id: &str) -> Result<Network> {
        match self.with(|s| s.networks.get(id).cloned()) {
            Some(Some(n)) => return Ok(n),
            Some(None) => {
                return Err(refusals::network_not_found(
                    "GET",
                    &format!("/networks/{id}"),
                    id,
                ));
            }
            None => {}
        }
        read_through!(self, format!("GET /networks/{id}"), Learned::Network, |n| n
            .get_network(id))
    }

    async fn get_subnet(&self, id: &str) -> Result<Subnet> {
        self.subnet_now(id).await
    }

    async fn list_ports(&self, query: &PortQuery) -> Result<Vec<Port>> {
        let request = known::ports_request(query);
        let listed = match self.known.and_then(|k| k.answers(query)) {
            Some(ports) => ports,
            None => match (self.recalled(&request), self.held_interfaces(query)) {
                (Some(Learned::Ports(ports)), _)
                | (
                    None,
                    Some(HeldAt {
                        ports: Some(ports), ..
                    }),
                ) => ports,
                (_, held) => {
                    let ports = self.below(|| request.clone())?.list_ports(query).await?;
                    self.keep(request, Learned::Ports(ports.clone()));
                    if let (Some(i), Some(at)) = (&self.interfaces, held) {
                        i.keep_ports(&at.router, at.revision, ports.clone());
                    }
                    ports
                }
            },
        };
        Ok(self.with(|s| {
            // What was listed, as the recorded writes left it, then the ports those writes
            // brought into the query (created, attached, tagged).
            let mut out: Vec<Port> = listed
                .iter()
                .filter_map(|p| match s.ports.get(&p.id) {
                    Some(Some(now)) => query.matches(now).then(|| now.clone()),
                    Some(None) => None,
                    None => Some(p.clone()),
                })
                .collect();
            for p in s.ports.values().flatten() {
                if query.matches(p) && !listed.iter().any(|l| l.id == p.id) {
                    out.push(p.clone());
                }
            }
            out
        }))
    }

    async fn get_port(&self, id: &str) -> Result<Port> {
        self.port_now(id).await
    }

    async fn create_port(&self, req: &CreatePort) -> Result<Port> {
        let planned = PlannedWrite::CreatePort {
            network_id: self.called(&req.network_id),
            ip_address: req.ip_address.clone(),
            name: req.name.clone(),
        };
        if let Some(cloud) = self.tapping() {
            let port = self.tapped(planned, cloud.create_port(req)).await?;
            self.with(|s| {
                let called = Self::next_planned(s);
                s.names.insert(port.id.clone(), called);
            });
            return Ok(port);
        }
        self.note(planned);
        let id = self.with(Self::next_planned);
        let port = Port {
            id,
            name: req.name.clone(),
            network_id: req.network_id.clone(),
            description: req.description.clone(),
            fixed_ips: req
                .ip_address
                .clone()
                .or_else(|| {
                    let pick = self
                        .planned_subnet(req.subnet_id.as_deref())
                        .or(self.transit)
                        .map(|t| planned_pick(t).to_string());
                    self.with(|s| s.picked.extend(pick.clone()));
                    pick
                })
                .iter()
                .map(|ip| FixedIp {
                    subnet_id: req.subnet_id.clone().unwrap_or_default(),
                    ip_address: ip.clone(),
                })
                .collect(),
            tags: req.tags.clone(),
            project_id: self
                .project
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
            ..Default::default()
        };
        self.keep_port(port.clone());
        Ok(port)
    }

    async fn add_port_tag(&self, port_id: &str, tag: &str) -> Result<()> {
        let planned = || PlannedWrite::TagPort {
            port_id: self.called(port_id),
            tags: vec![tag.to_string()],
        };
        if let Some(cloud) = self.tapping() {
            return self
                .tapped(planned(), cloud.add_port_tag(port_id, tag))
                .await;
        }
        let mut p = self.port_now(port_id).await?;
        if !p.has_tag(tag) {
            p.tags.push(tag.to_string());
        }
        self.note(planned());
        self.keep_port(p);
        Ok(())
    }

    async fn set_port_tags(&self, port_id: &str, tags: &[String]) -> Result<()> {
        let planned = || PlannedWrite::TagPort {
            port_id: self.called(port_id),
            tags: tags.to_vec(),
        };
        if let Some(cloud) = self.tapping() {
            return self
                .tapped(planned(), cloud.set_port_tags(port_id, tags))
                .await;
        }
        let mut p = self.port_now(port_id).await?;
        p.tags = tags.to_vec();
        self.note(planned());
        self.keep_port(p);
        Ok(())
    }

    async fn delete_port(&self, id: &str) -> Result<()> {
        let planned = || PlannedWrite::DeletePort {
            port_id: self.called(id),
        };
        if let Some(cloud) = self.tapping() {
            return self.tapped(planned(), cloud.delete_port(id)).await;
        }
        let p = self.port_now(id).await?;
        // The L3 plugin guards a router's interface port while the router exists.
        if p.is_router_interface() && self.router_now(&p.device_id).await.is_ok() {
            return Err(refusals::service_port_in_use(
                &format!("/ports/{id}"),
                id,
                &p.device_owner,
            ));
        }
        self.note(planned());
        self.with(|s| s.ports.insert(id.into(), None));
        Ok(())
    }

    async fn get_router(&self, id: &str) -> Result<Router> {
        self.router_now(id).await
    }

    async fn list_routers(&self, query: &RouterQuery) -> Result<Vec<Router>> {
        // By ID alone, when each is known or written; a lookup by name may find a router
        // nothing here holds.
        if query.name.is_none() && !query.ids.is_empty() {
            let held: Option<Vec<Router>> = query
                .ids
                .iter()
                .map(|id| {
                    self.with(|s| s.routers.get(id).cloned())
                        .or_else(|| self.known.and_then(|k| k.router(id)))
                })
                .collect();
            if let Some(routers) = held {
                return Ok(routers);
            }
        }
        let request = known::routers_request(query);
        let recalled = match (self.recalled(&request), self.known) {
            (Some(Learned::Routers(ids)), Some(k)) => ids.iter().map(|id| k.router(id)).collect(),
            _ => None,
        };
        let listed = match recalled {
            Some(routers) => routers,
            None => {
                let routers = self.below(|| request.clone())?.list_routers(query).await?;
                if let Some(k) = self.learning_into() {
                    k.learn_routers(routers.clone());
                }
                self.keep(
                    request,
                    Learned::Routers(routers.iter().map(|r| r.id.clone()).collect()),
                );
                routers
            }
        };
        Ok(self.with(|s| {
            let mut out: Vec<Router> = listed
                .iter()
                .filter(|r| !s.routers_gone.contains(&r.id))
                .map(|r| s.routers.get(&r.id).cloned().unwrap_or_else(|| r.clone()))
                .collect();
            // Routers the recorded writes created, when the query names them.
            out.extend(
                s.routers
                    .values()
                    .filter(|r| !listed.iter().any(|l| l.id == r.id))
                    .filter(|r| query.matches(r))
                    .cloned(),
            );
            out
        }))
    }

    async fn add_router_interface(&self, router_id: &str, port_id: &str) -> Result<()> {
        let planned = || PlannedWrite::Attach {
            router_id: self.called(router_id),
            port_id: self.called(port_id),
        };
        if let Some(cloud) = self.tapping() {
            return self
                .tapped(planned(), cloud.add_router_interface(router_id, port_id))
                .await;
        }
        let path = format!("/routers/{router_id}/add_router_interface");
        let mut port = self.port_now(port_id).await?;
        if !port.device_id.is_empty() {
            return Err(refusals::port_in_use(
                &path,
                port_id,
                &port.network_id,
                &port.device_id,
            ));
        }
        if let Some(refused) = self.second_interface(router_id, &port).await? {
            return Err(refused);
        }
        self.note(planned());
        port.device_id = router_id.into();
        port.device_owner = bnerd_cloud::OWNER_ROUTER_INTERFACE.into();
        self.keep_port(port);
        Ok(())
    }

    async fn remove_router_interface(&self, router_id: &str, port_id: &str) -> Result<()> {
        let planned = || PlannedWrite::Detach {
            router_id: self.called(router_id),
            port_id: self.called(port_id),
        };
        if let Some(cloud) = self.tapping() {
            return self
                .tapped(planned(), cloud.remove_router_interface(router_id, port_id))
                .await;
        }
        let path = format!("/routers/{router_id}/remove_router_interface");
        let port = match self.port_now(port_id).await {
            Ok(p) if p.is_interface_of(router_id) => p,
            Ok(_) => {
                return Err(refusals::router_interface_not_found(
                    &path, router_id, port_id,
                ));
            }
            Err(e) if e.is_not_found() => {
                return Err(refusals::router_interface_not_found(
                    &path, router_id, port_id,
                ));
            }
            Err(e) => return Err(e),
        };
        if let Some(refused) = self.needed_by_route(router_id, &port).await? {
            return Err(refused);
        }
        self.note(planned());
        // Neutron deletes an interface port when it is detached.
        self.with(|s| s.ports.insert(port_id.into(), None));
        Ok(())
    }

    async fn add_extraroutes(&self, router_id: &str, routes: &[Route]) -> Result<Router> {
        let planned = PlannedWrite::AddRoutes {
            router_id: self.called(router_id),
            routes: routes.to_vec(),
        };
        if let Some(cloud) = self.tapping() {
            return self
                .tapped(planned, cloud.add_extraroutes(router_id, routes))
                .await;
        }
        self.edit_routes(router_id, planned, |table| {
            for r in routes {
                if !table.contains(r) {
                    table.push(r.clone());
                }
            }
        })
        .await
    }

    async fn remove_extraroutes(&self, router_id: &str, routes: &[Route]) -> Result<Router> {
        let planned = PlannedWrite::RemoveRoutes {
            router_id: self.called(router_id),
            routes: routes.to_vec(),
        };
        if let Some(cloud) = self.tapping() {
            return self
                .tapped(planned, cloud.remove_extraroutes(router_id, routes))
                .await;
        }
        self.edit_routes(router_id, planned, |table| {
            table.retain(|x| !routes.contains(x))
        })
        .await
    }

    async fn set_routes(
        &self,
        router_id: &str,
        routes: &[Route],
        if_revision: Option<u64>,
    ) -> Result<Router> {
        let planned = PlannedWrite::SetRoutes {
            router_id: self.called(router_id),
            routes: routes.to_vec(),
        };
        if let Some(cloud) = self.tapping() {
            return self
                .tapped(planned, cloud.set_routes(router_id, routes, if_revision))
                .await;
        }
        self.edit_routes(router_id, planned, |table| *table = routes.to_vec())
            .await
    }

    async fn create_rbac_policy(&self, req: &ShareNetwork) -> Result<RbacPolicy> {
        let planned = PlannedWrite::Share {
            network_id: self.called(&req.network_id),
            project: req.target_tenant.clone(),
        };
        if let Some(cloud) = self.tapping() {
            return self.tapped(planned, cloud.create_rbac_policy(req)).await;
        }
        self.note(planned);
        Ok(RbacPolicy {
            id: "<new RBAC policy>".into(),
            object_type: "network".into(),
            object_id: req.network_id.clone(),
            action: req.action.clone(),
            target_tenant: req.target_tenant.clone(),
            project_id: String::new(),
        })
    }

    async fn list_rbac_policies(&self, object_id: &str) -> Result<Vec<RbacPolicy>> {
        let request = known::rbac_request(object_id);
        read_through!(self, request, Learned::Rbac, |n| n
            .list_rbac_policies(object_id))
    }

    async fn list_rbac_policies_of(&self, object_ids: &[String]) -> Result<Vec<RbacPolicy>> {
        let mut out = vec![];
        for id in object_ids {
            out.extend(self.list_rbac_policies(id).await?);
        }
        Ok(out)
    }

    async fn delete_rbac_policy(&self, id: &str) -> Result<()> {
        let planned = PlannedWrite::Unshare {
            policy_id: id.into(),
        };
        if let Some(cloud) = self.tapping() {
            return self.tapped(planned, cloud.delete_rbac_policy(id)).await;
        }
        self.note(planned);
        Ok(())
    }

    async fn probe_admin_read(&self) -> Result<()> {
        self.below(|| bnerd_cloud::ADMIN_READ_PROBE.into())?
            .probe_admin_read()
            .await
    }

    async fn quota_details(&self, project_id: &str) -> Result<Vec<bnerd_cloud::QuotaUsage>> {
        self.below(|| format!("GET /quotas/{project_id}/details"))?
            .quota_details(project_id)
            .await
    }

    async fn list_networks(&self, query: &NetworkQuery) -> Result<Vec<Network>> {
        let request = known::networks_request(query);
        let listed: Vec<Network> =
            read_through!(self, request, Learned::Networks, |n| n.list_networks(query))?;
        Ok(self.with(|s| as_written(listed, &s.networks, |n| &n.id, |n| query.matches(n))))
    }

    async fn list_subnets(&self, query: &SubnetQuery) -> Result<Vec<Subnet>> {
        let request = known::subnets_request(query);
        let listed: Vec<Subnet> =
            read_through!(self, request, Learned::Subnets, |n| n.list_subnets(query))?;
        Ok(self.with(|s| as_written(listed, &s.subnets, |n| &n.id, |n| query.matches(n))))
    }

    async fn create_network(&self, name: &str) -> Result<Network> {
        let planned = PlannedWrite::CreateNetwork { name: name.into() };
        if let Some(cloud) = self.tapping() {
            return self
                .tapped_made(planned, cloud.create_network(name), "network", |n| &n.id)
                .await;
        }
        self.note(planned);
        let project = self.project();
        Ok(self.with(|s| {
            let n = Network {
                id: Self::next_made(s, "network"),
                name: name.into(),
                project_id: project,
                ..Default::default()
            };
            s.networks.insert(n.id.clone(), Some(n.clone()));
            n
        }))
    }

    async fn delete_network(&self, id: &str) -> Result<()> {
        let planned = || PlannedWrite::DeleteNetwork {
            network_id: self.called(id),
        };
        if let Some(cloud) = self.tapping() {
            return self.tapped(planned(), cloud.delete_network(id)).await;
        }
        self.get_network(id).await?;
        self.note(planned());
        let subnets = self
            .list_subnets(&SubnetQuery {
                network_id: Some(id.into()),
                ..Default::default()
            })
            .await?;
        self.with(|s| {
            s.networks.insert(id.into(), None);
            for sub in subnets {
                s.subnets.insert(sub.id, None);
            }
        });
        Ok(())
    }

    async fn create_subnet_with(&self, req: &CreateSubnet) -> Result<Subnet> {
        let (network_id, cidr, gateway_ip) = (&req.network_id, &req.cidr, &req.gateway_ip);
        let planned = PlannedWrite::CreateSubnet {
            network_id: self.called(network_id),
            cidr: cidr.clone(),
            dhcp: req.dhcp,
        };
        if let Some(cloud) = self.tapping() {
            let call = cloud.create_subnet_with(req);
            return self.tapped_made(planned, call, "subnet", |s| &s.id).await;
        }
        let network = self.get_network(network_id).await?;
        self.note(planned);
        Ok(self.with(|s| {
            let sub = Subnet {
                id: Self::next_made(s, "subnet"),
                network_id: network_id.into(),
                cidr: cidr.into(),
                gateway_ip: Some(gateway_ip.into()),
                project_id: network.project_id.clone(),
            };
            s.subnets.insert(sub.id.clone(), Some(sub.clone()));
            if let Some(Some(n)) = s.networks.get_mut(network_id) {
                n.subnets.push(sub.id.clone());
            }
            sub
        }))
    }

    async fn create_router_with(&self, req: &CreateRouter) -> Result<Router> {
        let planned = PlannedWrite::CreateRouter {
            name: req.name.clone(),
        };
        if let Some(cloud) = self.tapping() {
            return self
                .tapped_made(planned, cloud.create_router_with(req), "router", |r| &r.id)
                .await;
        }
        self.note(planned);
        let project = self.project();
        let id = self.with(|s| Self::next_made(s, "router"));
        Ok(self.keep_router(Router {
            id,
            name: req.name.clone(),
            project_id: req.project_id.clone().unwrap_or(project),
            ..Default::default()
        }))
    }

    async fn delete_router(&self, id: &str) -> Result<()> {
        let planned = || PlannedWrite::DeleteRouter {
            router_id: self.called(id),
        };
        if let Some(cloud) = self.tapping() {
            return self.tapped(planned(), cloud.delete_router(id)).await;
        }
        self.router_now(id).await?;
        self.note(planned());
        self.with(|s| {
            s.routers.remove(id);
            s.routers_gone.insert(id.to_string());
        });
        Ok(())
    }

    async fn add_router_subnet(&self, router_id: &str, subnet_id: &str) -> Result<String> {
        let planned = || PlannedWrite::AttachSubnet {
            router_id: self.called(router_id),
            subnet_id: self.called(subnet_id),
        };
        if let Some(cloud) = self.tapping() {
            let port = self
                .tapped(planned(), cloud.add_router_subnet(router_id, subnet_id))
                .await?;
            self.with(|s| {
                let called = Self::next_planned(s);
                s.names.insert(port.clone(), called);
            });
            return Ok(port);
        }
        let router = self.router_now(router_id).await?;
        let subnet = self.subnet_now(subnet_id).await?;
        self.note(planned());
        let port = Port {
            id: self.with(Self::next_planned),
            network_id: subnet.network_id.clone(),
            project_id: router.project_id.clone(),
            device_id: router_id.into(),
            device_owner: bnerd_cloud::OWNER_ROUTER_INTERFACE.into(),
            fixed_ips: subnet
                .gateway_ip
                .iter()
                .map(|ip| FixedIp {
                    subnet_id: subnet_id.into(),
                    ip_address: ip.clone(),
                })
                .collect(),
            ..Default::default()
        };
        let id = port.id.clone();
        self.keep_port(port);
        Ok(id)
    }
}

/// A customer side's Keystone calls go to its client; its token names the project its planned
/// ports land in.
#[async_trait]
impl Identity for Overlay<'_> {
    async fn token_info(&self) -> Result<TokenInfo> {
        let Some(Below::Held(customer)) = &self.below else {
            return Err(CloudError::Decode {
                method: "POST".into(),
                path: "/auth/tokens".into(),
                message: "no customer client below this overlay".into(),
            });
        };
        let token = customer.token_info().await?;
        *self.project.lock().unwrap_or_else(|e| e.into_inner()) = token.project_id.clone();
        Ok(token)
    }
}

#[cfg(test)]
mod tests;
