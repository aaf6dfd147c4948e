//! The fake's world (every project's objects) and per-credential handles on it: the leaf every
//! other module builds on. Calls enter here (counted, authenticated, faulted) before the
//! module that owns the resource answers them.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex, MutexGuard};

/// Every error the fake answers is a Neutron error answer, built as `refusals` builds them.
pub(crate) use bnerd_cloud::refusals::refusal as api;
use bnerd_cloud::{CloudError, Network, Port, RbacPolicy, Result, Router, Subnet};

use crate::faults::{Fault, Op, PlannedFault};

/// Neutron's default `max_routes` (the `router_route` quota per router).
pub(crate) const MAX_ROUTES: usize = 30;

pub(crate) const EXTRAROUTE_ATOMIC: &str = "extraroute-atomic";
pub(crate) const REVISION_IF_MATCH: &str = "revision-if-match";
pub(crate) const TAGS_AT_CREATE: &str = "tag-ports-during-bulk-creation";

/// What the lab's Neutron lists among the extensions the operator looks at.
const LOADED: [&str; 7] = [
    "extraroute",
    EXTRAROUTE_ATOMIC,
    "rbac-policies",
    REVISION_IF_MATCH,
    "standard-attr-revisions",
    "tag-creation",
    "standard-attr-tag",
];

#[derive(Default)]
pub(crate) struct World {
    pub(crate) networks: BTreeMap<String, Network>,
    pub(crate) subnets: BTreeMap<String, Subnet>,
    pub(crate) ports: BTreeMap<String, Port>,
    pub(crate) routers: BTreeMap<String, Router>,
    /// What kind each router is; `Router` carries only what the operator reads, and a member
    /// never sees `ha`/`distributed` (measured: absent from its GET).
    pub(crate) router_kinds: BTreeMap<String, RouterKind>,
    pub(crate) rbac: BTreeMap<String, RbacPolicy>,
    pub(crate) app_creds: BTreeMap<String, AppCred>,
    faults: Vec<PlannedFault>,
    calls: BTreeMap<Op, u64>,
    settings: Settings,
    /// Route writes under way, per router, and the routers that ever had two at once. Neutron
    /// takes both, but ML2/OVN then routes by a table its API no longer shows (measured on
    /// the lab: docs/design.md, "How Neutron backends differ"); the fake cannot route, so it
    /// keeps the evidence instead.
    route_writes: BTreeMap<String, usize>,
    overlapping_route_writes: BTreeSet<String>,
}

/// How this cloud is configured, where clouds differ: the builder methods of [`FakeCloud`].
struct Settings {
    honour_create_tags: bool,
    /// Answer as Neutron with ML2/OVN (`ovn` mechanism driver, `ovn-router` plugin) does
    /// where it differs from ML2 without a backend: see [`FakeCloud::ml2_ovn`].
    pub(crate) ml2_ovn: bool,
    hidden: BTreeSet<String>,
    max_routes: usize,
    /// Answer as Neutron up to 2026.1 where it differs ([`FakeCloud::up_to_2026_1`]).
    up_to_2026_1: bool,
    /// Lower-cased, as oslo.policy compares role names.
    privileged_roles: BTreeSet<String>,
    /// Per-project limits by Neutron's resource name; a resource not named is unlimited.
    quotas: BTreeMap<&'static str, usize>,
}

impl Default for Settings {
    fn default() -> Self {
        Self {
            honour_create_tags: false,
            ml2_ovn: false,
            hidden: BTreeSet::new(),
            max_routes: MAX_ROUTES,
            up_to_2026_1: false,
            privileged_roles: BTreeSet::new(),
            quotas: BTreeMap::new(),
        }
    }
}

impl World {
    /// The aliases `GET /extensions` lists.
    pub(crate) fn extensions(&self) -> Vec<String> {
        let tags_at_create = self.settings.honour_create_tags.then_some(TAGS_AT_CREATE);
        let ovn = self
            .settings
            .ml2_ovn
            .then_some(bnerd_cloud::refusals::EXTERNAL_GATEWAY_MULTIHOMING);
        LOADED
            .into_iter()
            .chain(tags_at_create)
            .chain(ovn)
            .filter(|e| !self.settings.hidden.contains(*e))
            .map(String::from)
            .collect()
    }

    /// Whether the extension is loaded: the calls it adds exist only then.
    pub(crate) fn has_extension(&self, alias: &str) -> bool {
        self.extensions().iter().any(|e| e == alias)
    }

    pub(crate) fn ml2_ovn(&self) -> bool {
        self.settings.ml2_ovn
    }

    pub(crate) fn max_routes(&self) -> usize {
        self.settings.max_routes
    }

    pub(crate) fn up_to_2026_1(&self) -> bool {
        self.settings.up_to_2026_1
    }

    /// A role this cloud's customised policy makes cloud admin ([`FakeCloud::privileged_roles`]).
    /// What `project` holds of a quota resource, counted as Neutron's quota engine counts
    /// it: every object the project owns, those Neutron made itself (router interfaces)
    /// included.
    pub(crate) fn usage(&self, project: &str, resource: &str) -> usize {
        match resource {
            "network" => count(self.networks.values().map(|n| &n.project_id), project),
            "subnet" => count(self.subnets.values().map(|s| &s.project_id), project),
            "port" => count(self.ports.values().map(|p| &p.project_id), project),
            "router" => count(self.routers.values().map(|r| &r.project_id), project),
            "rbac_policy" => count(self.rbac.values().map(|r| &r.project_id), project),
            _ => 0,
        }
    }

    /// The limit of a quota resource, None when unlimited.
    pub(crate) fn quota(&self, resource: &str) -> Option<usize> {
        self.settings.quotas.get(resource).copied()
    }

    /// The API layer's check before a create: one more `resource` for `project` must fit.
    pub(crate) fn check_quota(
        &self,
        project: &str,
        resource: &str,
        method: &str,
        path: &str,
    ) -> Result<()> {
        match self.quota(resource) {
            Some(limit) if self.usage(project, resource) >= limit => Err(api(
                method,
                path,
                409,
                "OverQuota",
                format!("Quota exceeded for resources: ['{resource}']."),
            )),
            _ => Ok(()),
        }
    }

    pub(crate) fn privileged_role(&self, role: &str) -> bool {
        self.settings
            .privileged_roles
            .contains(&role.to_ascii_lowercase())
    }
}

/// An admin-only router attribute set at creation (`--ha`, `--distributed`).
fn count<'a>(owners: impl Iterator<Item = &'a String>, project: &str) -> usize {
    owners.filter(|o| *o == project).count()
}

/// Neutron's default per-project quotas (`[QUOTAS]` in neutron.conf) for what the operator
/// creates; the routes of a router are `max_routes` (`FakeCloud::max_routes`).
pub const NEUTRON_DEFAULT_QUOTAS: [(&str, usize); 5] = [
    ("network", 100),
    ("subnet", 100),
    ("port", 500),
    ("router", 10),
    ("rbac_policy", 10),
];

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct RouterKind {
    pub(crate) ha: bool,
    pub(crate) distributed: bool,
}

/// A Keystone application credential. It lives here rather than in `keystone` because every
/// call checks it on entry ([`FakeNeutron::run`]), and the world must not depend on the
/// modules built on it.
pub(crate) struct AppCred {
    pub(crate) secret: String,
    pub(crate) project_id: String,
    pub(crate) roles: Vec<String>,
}

/// The shared in-memory cloud. Clone handles with [`FakeCloud::client`].
#[derive(Clone, Default)]
pub struct FakeCloud {
    pub(crate) world: Arc<Mutex<World>>,
}

/// One credential's view of the fake cloud: it sees its own project's objects (and, as a
/// network owner, every port on its networks), as Neutron's policy does for a member.
#[derive(Clone)]
pub struct FakeNeutron {
    pub(crate) world: Arc<Mutex<World>>,
    pub(crate) project_id: String,
    pub(crate) roles: Vec<String>,
    pub(crate) admin: bool,
    /// Set when this handle authenticates with an application credential: every call checks
    /// it is still valid, as Keystone revokes a deleted credential's tokens.
    pub(crate) app_cred: Option<(String, String)>,
}

/// A route write under way on one router, until dropped.
struct RouteWrite<'a> {
    fake: &'a FakeNeutron,
    router_id: String,
}

impl<'a> RouteWrite<'a> {
    fn start(fake: &'a FakeNeutron, router_id: &str) -> Self {
        let mut w = fake.lock();
        let n = w.route_writes.entry(router_id.to_string()).or_default();
        *n += 1;
        if *n > 1 {
            w.overlapping_route_writes.insert(router_id.to_string());
        }
        Self {
            fake,
            router_id: router_id.to_string(),
        }
    }
}

impl Drop for RouteWrite<'_> {
    fn drop(&mut self) {
        let mut w = self.fake.lock();
        if let Some(n) = w.route_writes.get_mut(&self.router_id) {
            *n = n.saturating_sub(1);
        }
    }
}

/// What Neutron answers for a URL no loaded extension serves, e.g. `PUT
/// /routers/{id}/add_extraroutes` without `extraroute-atomic`: the API router (pecan) finds
/// no controller, so it answers before authorisation or any lookup, whatever the router ID.
/// Measured on the lab with an action that does not exist (`PUT
/// /routers/{id}/add_extraroutes_nope`): 404 `{"NeutronError": {"type": "HTTPNotFound",
/// "message": "The resource could not be found.", "detail": ""}}`.
pub(crate) fn unknown_url(method: &str, path: &str) -> CloudError {
    api(
        method,
        path,
        404,
        "HTTPNotFound",
        "The resource could not be found.".into(),
    )
}

/// What a list answers with `?fields=`: Neutron leaves out every other attribute, so a
/// caller that asks for too few gets objects it cannot read (a `Decode` error, as the HTTP
/// client would give).
pub(crate) fn only_fields<T>(
    method: &str,
    path: &str,
    items: Vec<T>,
    fields: &[String],
) -> Result<Vec<T>>
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    if fields.is_empty() {
        return Ok(items);
    }
    let decode = |e: serde_json::Error| CloudError::Decode {
        method: method.into(),
        path: path.into(),
        message: e.to_string(),
    };
    items
        .into_iter()
        .map(|item| {
            let mut v = serde_json::to_value(&item).map_err(decode)?;
            if let Some(o) = v.as_object_mut() {
                o.retain(|k, _| fields.contains(k));
            }
            serde_json::from_value(v).map_err(decode)
        })
        .collect()
}

pub(crate) fn new_id() -> String {
    uuid::Uuid::new_v4().to_string()
}

/// Keystone's answer to `POST /v3/auth/tokens` with this credential.
fn check_app_cred(w: &World, id: &str, secret: &str) -> Result<()> {
    // Keystone's free-text message can echo input: the client keeps only status and title.
    let refused = |status: u16, title: &str| CloudError::Auth {
        status: Some(status),
        message: format!("Keystone answered HTTP {status} to the token request: {title}"),
    };
    match w.app_creds.get(id) {
        None => Err(refused(404, "Not Found")),
        Some(ac) if ac.secret != secret => Err(refused(401, "Unauthorized")),
        Some(_) => Ok(()),
    }
}

impl FakeCloud {
    pub fn new() -> Self {
        Self::default()
    }

    /// A member credential of `project_id`.
    pub fn client(&self, project_id: &str) -> FakeNeutron {
        FakeNeutron {
            world: self.world.clone(),
            project_id: project_id.into(),
            roles: vec!["member".into(), "reader".into()],
            admin: false,
            app_cred: None,
        }
    }

    /// A cloud-admin credential (sees and may touch everything).
    pub fn admin(&self, project_id: &str) -> FakeNeutron {
        FakeNeutron {
            admin: true,
            roles: vec!["admin".into(), "member".into(), "reader".into()],
            ..self.client(project_id)
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keep `tags` sent in a port's create body and list `tag-ports-during-bulk-creation`, as
    /// Neutron does with ML2's `tag_ports_during_bulk_creation` driver. Off by default, as in
    /// the lab: without the driver the tags are dropped (`tag-creation`, listed either way,
    /// is only `POST /{resource}/{id}/tags`).
    pub fn honour_create_tags(self, on: bool) -> Self {
        self.lock().settings.honour_create_tags = on;
        self
    }

    /// Answer as a Neutron on ML2/OVN does where it differs (measured on the lab's ML2/OVN
    /// Neutron, the parity table's ML2/OVN rows): `external-gateway-multihoming` is listed;
    /// every network gets a metadata port (`network:distributed`, `ovnmeta-<network>`),
    /// given the first free address of each DHCP subnet and removed with the network; router
    /// interfaces are always `network:router_interface` (OVN routers say `ha: true` and are
    /// not HA routers in Neutron's sense); `distributed` is an unknown attribute (no `dvr`); a
    /// second interface on a subnet is refused in the CIDR-overlap wording.
    pub fn ml2_ovn(self, on: bool) -> Self {
        self.lock().settings.ml2_ovn = on;
        self
    }

    /// Leave the extension `alias` out of `GET /extensions`, as a cloud that does not load
    /// it. The calls it adds then answer as Neutron answers for them: without
    /// `extraroute-atomic`, `add_extraroutes`/`remove_extraroutes` are unknown URLs (404);
    /// without `revision-if-match`, a `set_routes` guarded by `If-Match` is refused (400).
    pub fn without_extension(self, alias: &str) -> Self {
        self.lock().settings.hidden.insert(alias.into());
        self
    }

    /// The `router_route` quota per router (Neutron's `max_routes`, 30 unless a cloud
    /// raises it).
    pub fn max_routes(self, n: usize) -> Self {
        self.lock().settings.max_routes = n;
        self
    }

    /// Limit every project to `n` of a quota resource (`network`, `subnet`, `port`,
    /// `router`, `rbac_policy`), as `openstack quota set` does; without it the resource is
    /// unlimited, as in the lab.
    pub fn quota(self, resource: &str, n: usize) -> Self {
        if let Some((name, _)) = NEUTRON_DEFAULT_QUOTAS.iter().find(|(r, _)| *r == resource) {
            self.lock().settings.quotas.insert(name, n);
        }
        self
    }

    /// Neutron's default quotas for every project ([`NEUTRON_DEFAULT_QUOTAS`]).
    pub fn default_quotas(self) -> Self {
        NEUTRON_DEFAULT_QUOTAS
            .iter()
            .fold(self, |c, (r, n)| c.quota(r, *n))
    }

    /// Answer as Neutron up to 2026.1 does where it differs from the lab's Neutron (2026.2;
    /// docs/design.md, "How Neutron releases differ"): a router's routes are limited by the
    /// server's `max_routes`, and one route too many is refused `400 RoutesExhausted`
    /// ("… The number of routes exceeds the maximum 30."), not `409 OverQuota`.
    pub fn up_to_2026_1(self) -> Self {
        self.lock().settings.up_to_2026_1 = true;
        self
    }

    /// Roles this cloud's Neutron policy treats as cloud admin besides `admin`, as on a cloud
    /// whose `context_is_admin` reads `role:admin or role:net_operator` (the lab's override,
    /// lab/openstack/up.sh). A handle made from an application credential holding one is
    /// cloud admin: it sees and may touch everything, and `probe_admin_read` answers it Ok.
    pub fn privileged_roles(self, roles: &[&str]) -> Self {
        self.lock()
            .settings
            .privileged_roles
            .extend(roles.iter().map(|r| r.to_ascii_lowercase()));
        self
    }

    /// Inject `fault` into the next `times` calls of `op`.
    pub fn inject(&self, op: Op, fault: Fault, times: usize) {
        self.lock().faults.push(PlannedFault {
            op,
            fault,
            remaining: times,
        });
    }

    pub fn clear_faults(&self) {
        self.lock().faults.clear();
    }

    /// The routers that had two route writes under way at once (an `add_extraroutes`,
    /// `remove_extraroutes` or route-table `PUT` started before another had answered).
    pub fn overlapping_route_writes(&self) -> Vec<String> {
        self.lock()
            .overlapping_route_writes
            .iter()
            .cloned()
            .collect()
    }

    /// Calls made so far, per operation.
    pub fn calls(&self) -> BTreeMap<Op, u64> {
        self.lock().calls.clone()
    }

    /// (reads, writes) made so far.
    pub fn read_write_counts(&self) -> (u64, u64) {
        let calls = self.calls();
        let reads = calls
            .iter()
            .filter(|(op, _)| op.is_read())
            .map(|(_, n)| n)
            .sum();
        let writes = calls
            .iter()
            .filter(|(op, _)| !op.is_read())
            .map(|(_, n)| n)
            .sum();
        (reads, writes)
    }

    pub fn reset_counters(&self) {
        self.lock().calls.clear();
    }

    /// Every port, as an admin would list them (for assertions).
    pub fn all_ports(&self) -> Vec<Port> {
        self.lock().ports.values().cloned().collect()
    }

    /// A router as an admin would see it (for assertions).
    pub fn router(&self, id: &str) -> Option<Router> {
        self.lock().routers.get(id).cloned()
    }
}

impl FakeNeutron {
    pub(crate) fn lock(&self) -> MutexGuard<'_, World> {
        self.world.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Count the call and apply a planned fault. Returns true when the call must report a
    /// timeout after committing.
    async fn enter(&self, op: Op, method: &str, path: &str) -> Result<bool> {
        let fault = {
            let mut w = self.lock();
            *w.calls.entry(op).or_default() += 1;
            if let Some((id, secret)) = &self.app_cred {
                check_app_cred(&w, id, secret)?;
            }
            let hit = w.faults.iter_mut().find(|f| f.op == op && f.remaining > 0);
            hit.map(|f| {
                f.remaining -= 1;
                f.fault.clone()
            })
        };
        match fault {
            None => Ok(false),
            Some(Fault::Error {
                status,
                kind,
                message,
            }) => Err(api(method, path, status, &kind, message)),
            Some(Fault::Latency(d)) => {
                tokio::time::sleep(d).await;
                Ok(false)
            }
            Some(Fault::CommitThenTimeout) => Ok(true),
        }
    }

    /// A route write on `router_id`: [`Self::run`], counted as under way from its start
    /// (before any injected latency) until it answers or is dropped.
    pub(crate) async fn route_write<T>(
        &self,
        router_id: &str,
        op: Op,
        method: &str,
        path: &str,
        f: impl FnOnce(&mut World) -> Result<T>,
    ) -> Result<T> {
        let _under_way = RouteWrite::start(self, router_id);
        self.run(op, method, path, f).await
    }

    /// One API call: counted, authenticated and faulted on entry, then `f` answers it
    /// against the world under the lock.
    pub(crate) async fn run<T>(
        &self,
        op: Op,
        method: &str,
        path: &str,
        f: impl FnOnce(&mut World) -> Result<T>,
    ) -> Result<T> {
        let timeout_after = self.enter(op, method, path).await?;
        let out = f(&mut self.lock());
        if timeout_after {
            return Err(CloudError::Timeout {
                method: method.into(),
                path: path.into(),
            });
        }
        out
    }

    /// `GET /extensions`: the aliases this fake cloud loads.
    pub(crate) async fn extension_list(&self) -> Result<Vec<String>> {
        self.run(Op::Extensions, "GET", "/extensions", |w| Ok(w.extensions()))
            .await
    }
}
