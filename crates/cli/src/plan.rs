//! `plan`: what the operator's next reconcile of a ClusterLink would do against the real
//! cloud, without writing. It runs the operator's own reconcile (`bnerd_engine`) over a
//! Neutron that reads the cloud and records writes, so the plan is the reconcile's own
//! decision: the address it would take or the leg it would adopt, the ports and routes it
//! would create and remove, and the refusals it would hit, with what to do about them.
//!
//! A cross-tenant link is planned with its customer's credential read as the operator reads
//! it (the caller's [`CredentialSource`]: its Secret, with the caller's kubeconfig rights, and
//! a client at the operator's own endpoint); the customer side reads through an overlay of
//! its own beside the operator's, and each write says whose credential makes it. A link being
//! deleted shows its unwind, and whether its finalizer would then be removed.

use bnerd_api::gateway::ReverseTarget;
use bnerd_api::names::{is_managed, leg_owner_uid, link_name_in_tags};
use bnerd_api::{ClusterLink, ConditionType, Reason};
use bnerd_cloud::fabric::Fabric;
use bnerd_cloud::{Neutron, Port, PortQuery, RouterQuery};
use bnerd_engine::overlay::{CustomerSide, Overlay, PICKED, PlannedWrite, Whose};
use bnerd_engine::view::{input_of, peers_of};
use bnerd_engine::{
    CredentialSource, Customers, LinkEngine, Unwound, deleting_status, failed_status,
};
use thiserror::Error;

/// The UID a link that is not in the cluster yet plans with: no port carries it.
pub const NEW_LINK_UID: &str = "00000000-0000-0000-0000-000000000000";

#[derive(Debug, Error)]
pub enum PlanError {
    #[error("ClusterLink {0} is cross-tenant: planning it needs a way to its credentials Secret")]
    NoCustomerAccess(String),
    #[error("the link has no UID")]
    NoUid,
}

/// One condition as the reconcile would leave it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedCondition {
    pub type_: String,
    pub status: String,
    pub reason: String,
    pub message: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub name: String,
    pub writes: Vec<PlannedWrite>,
    /// Whose credential makes each write (same order as `writes`).
    pub credentials: Vec<Whose>,
    /// A cross-tenant link: the writes name their credential.
    pub cross_tenant: bool,
    /// The link is being deleted: the writes are its unwind. `released`: the unwind would
    /// finish and the finalizer go.
    pub deleting: Option<Released>,
    pub conditions: Vec<PlannedCondition>,
    pub ready: bool,
    /// What a human can do about a refusal.
    pub hints: Vec<String>,
}

/// How a deleting link's unwind would end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Released {
    /// Everything it built goes, then its finalizer.
    Yes,
    /// Something is in the way (the conditions say what); the finalizer stays.
    No,
    /// The customer side is out of reach, and the abandon annotation releases the link
    /// without it: the gateway route goes, the customer's leg and routes stay.
    Abandoned,
}

/// The caller's way to a cross-tenant link's credential: `source` reads its Secret with the
/// caller's rights and makes a client at the operator's endpoint.
pub struct CustomerAccess<'a> {
    pub source: &'a dyn CredentialSource,
    pub operator: &'a bnerd_engine::OperatorIdentity,
    /// The namespace the credential Secrets live in (the operator's setting).
    pub namespace: &'a str,
}

/// What the planned writes would take past a limit of the operator's project (docs/operations.md,
/// "Neutron's quotas"); nothing when its quota details cannot be read (Neutron refuses the
/// writes itself then, and the conditions say so).
async fn capacity_hints(
    net: &dyn Neutron,
    fabric: &Fabric,
    writes: &[(Whose, PlannedWrite)],
) -> Vec<String> {
    use bnerd_engine::plan::capacity;
    let mut needs: std::collections::BTreeMap<&str, u64> = Default::default();
    for (whose, w) in writes {
        if *whose != Whose::Operator {
            continue;
        }
        let (resource, n) = match w {
            PlannedWrite::CreatePort { .. } | PlannedWrite::AttachSubnet { .. } => ("port", 1),
            PlannedWrite::CreateNetwork { .. } => {
                // With the network, Neutron may make a port of its own in the same project.
                let own = crate::doctor::own_ports_per_network(net, fabric).await;
                *needs.entry("port").or_default() += own;
                ("network", 1)
            }
            PlannedWrite::CreateSubnet { .. } => ("subnet", 1),
            PlannedWrite::CreateRouter { .. } => ("router", 1),
            PlannedWrite::Share { .. } => ("rbac_policy", 1),
            PlannedWrite::AddRoutes { router_id, routes }
                if *router_id == fabric.gateway_router_id =>
            {
                (capacity::GATEWAY_ROUTES, routes.len() as u64)
            }
            _ => continue,
        };
        *needs.entry(resource).or_default() += n;
    }
    if needs.is_empty() {
        return vec![];
    }
    let Ok(quota) = net.quota_details(&fabric.operator_project_id).await else {
        return vec![];
    };
    let needs: Vec<(&str, u64)> = needs.into_iter().collect();
    capacity::exceeded(
        &capacity::rows(&quota, fabric.gateway_routes),
        &needs,
        &fabric.operator_project_id,
    )
}

/// Plan `link` against the cloud behind `net`, as the operator would reconcile it now with
/// `all` the cluster's links (its peers) and the estate's gateway `targets`; a link being
/// deleted, as its finalizer would unwind it. `customers` reaches a cross-tenant link's
/// credential; without it, such a link is not planned ([`PlanError::NoCustomerAccess`]).
pub async fn plan(
    net: &dyn Neutron,
    fabric: &Fabric,
    link: &ClusterLink,
    all: &[ClusterLink],
    targets: &[ReverseTarget],
    customers: Option<CustomerAccess<'_>>,
) -> Result<Plan, PlanError> {
    let name = link.metadata.name.clone().unwrap_or_default();
    let mut link = link.clone();
    if link.metadata.uid.is_none() {
        link.metadata.uid = Some(NEW_LINK_UID.into());
    }
    let status = link.status.clone().unwrap_or_default();
    let deleting = link.metadata.deletion_timestamp.is_some();
    // The finalizer's unwind reads no peers; a reconcile reads every other link's claims.
    let peers = if deleting {
        vec![]
    } else {
        peers_of(
            &link,
            all.iter().filter(|l| l.metadata.name != link.metadata.name),
        )
    };
    let input = input_of(&link, &status, &peers, targets).ok_or(PlanError::NoUid)?;
    let rec = Overlay::on(net)
        .creating_in(&fabric.operator_project_id)
        .worded_for(fabric);
    let beside = customers
        .as_ref()
        .map(|a| CustomerSide::beside(&rec, a.source));
    let engine = match (&customers, &beside) {
        (Some(a), Some(beside)) => LinkEngine::new(
            &rec,
            fabric,
            Customers {
                source: beside,
                operator: a.operator,
                namespace: a.namespace,
            },
        ),
        _ if link.is_cross_tenant() => return Err(PlanError::NoCustomerAccess(name)),
        _ => LinkEngine::same_tenant(&rec, fabric),
    };
    let (after, released) = if deleting {
        match engine.unwind(&input, targets).await {
            Unwound::Done(_) => (status.clone(), Some(Released::Yes)),
            Unwound::Stuck(f) => (
                deleting_status(&status, &f, link.metadata.generation),
                Some(Released::No),
            ),
            // The abandon annotation releases a held link as the controller does, leaving
            // its customer side behind.
            Unwound::Held(h) if h.released_by(&link) => (status.clone(), Some(Released::Abandoned)),
            Unwound::Held(h) => (
                failed_status(&status, h.condition, &h.fail, link.metadata.generation),
                Some(Released::No),
            ),
        }
    } else {
        (engine.reconcile(&input).await.outcome.status, None)
    };
    let by = rec.writes_by();
    // A leg whose address Neutron picks stands at `planned_pick` in the simulation: name it so.
    let picked = rec.picked().into_iter().next();
    let named = |text: &str| match &picked {
        Some(ip) => text.replace(ip.as_str(), PICKED),
        None => text.to_string(),
    };
    let conditions: Vec<PlannedCondition> = ConditionType::ALL
        .iter()
        .filter_map(|t| bnerd_api::conditions::find(&after.conditions, *t))
        .map(|c| PlannedCondition {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: named(&c.message),
        })
        .collect();
    let ready = !deleting
        && conditions
            .iter()
            .any(|c| c.type_ == ConditionType::Ready.as_str() && c.status == "True");
    let mut hints = vec![];
    if conditions
        .iter()
        .any(|c| c.reason == Reason::EnsureRouterHasPortFailed.as_str())
        && !link.is_cross_tenant()
        && let Some(h) = router_leg_hint(net, fabric, &link, all).await
    {
        hints.push(h);
    }
    if let Some(why) = conditions
        .iter()
        .find(|c| c.type_ == ConditionType::CredentialsResolved.as_str() && c.status == "False")
        .filter(|c| c.message.contains(SECRET_FORBIDDEN))
    {
        hints.push(format!(
            "the plan stops where the operator would go on: {}; run plan with a kubeconfig that may get Secrets in the credentials namespace (the operator's ServiceAccount may)",
            why.message
        ));
    }
    if !deleting {
        hints.extend(capacity_hints(net, fabric, &by).await);
    }
    if released == Some(Released::Abandoned) {
        hints.push(bnerd_engine::plan::unwind::abandoned(&status));
    }
    let (credentials, writes) = by
        .into_iter()
        .map(|(c, w)| match &picked {
            Some(ip) => (c, name_pick(w, ip)),
            None => (c, w),
        })
        .unzip();
    Ok(Plan {
        name,
        writes,
        credentials,
        cross_tenant: link.is_cross_tenant(),
        deleting: released,
        conditions,
        ready,
        hints,
    })
}

/// What a caller's Secret reader says when the caller's kubeconfig may not read the Secret.
pub const SECRET_FORBIDDEN: &str = "your kubeconfig may not get this Secret";

/// A route's next hop at the simulated pick, named as the plan names it.
fn name_pick(w: PlannedWrite, ip: &str) -> PlannedWrite {
    let name = |routes: Vec<bnerd_cloud::Route>| {
        routes
            .into_iter()
            .map(|r| bnerd_cloud::Route {
                nexthop: if r.nexthop == ip {
                    PICKED.to_string()
                } else {
                    r.nexthop
                },
                ..r
            })
            .collect()
    };
    match w {
        PlannedWrite::AddRoutes { router_id, routes } => PlannedWrite::AddRoutes {
            router_id,
            routes: name(routes),
        },
        PlannedWrite::RemoveRoutes { router_id, routes } => PlannedWrite::RemoveRoutes {
            router_id,
            routes: name(routes),
        },
        PlannedWrite::SetRoutes { router_id, routes } => PlannedWrite::SetRoutes {
            router_id,
            routes: name(routes),
        },
        other => other,
    }
}

/// A router that refuses the leg already has an interface on the transit subnet: another
/// link's leg, or a hand-made one. Only a hand-made one can be adopted by pinning its address.
async fn router_leg_hint(
    net: &dyn Neutron,
    fabric: &Fabric,
    link: &ClusterLink,
    all: &[ClusterLink],
) -> Option<String> {
    let router = &link.spec.service_cluster_router;
    let ids: Vec<String> = match net.get_router(router).await {
        Ok(r) => vec![r.id],
        Err(_) => net
            .list_routers(&RouterQuery {
                name: Some(router.clone()),
                ..Default::default()
            })
            .await
            .ok()?
            .into_iter()
            .map(|r| r.id)
            .collect(),
    };
    let ports: Vec<Port> = net
        .list_ports(&PortQuery {
            network_id: Some(fabric.transit_network_id.clone()),
            ..Default::default()
        })
        .await
        .ok()?;
    leg_hint(&ports, &ids, link, all)
}

/// Whose the port is, as the reconcile judges it: a ClusterLink whose UID it is tagged with
/// (or whose description marker it carries), whose status names it as its leg, or whose
/// claimed addresses (the engine's `peers_of`: status and pinned spec) it holds. The same
/// claims that make the reconcile refuse the address.
fn claimant(p: &Port, link: &ClusterLink, all: &[ClusterLink]) -> Option<String> {
    let others = || {
        all.iter().filter(|l| {
            l.metadata.uid != link.metadata.uid && l.metadata.name != link.metadata.name
        })
    };
    let name = |l: &ClusterLink| l.metadata.name.clone().unwrap_or_default();
    if let Some(uid) = leg_owner_uid(&p.tags, &p.description) {
        return others()
            .find(|l| l.metadata.uid.as_deref() == Some(uid))
            .map(name);
    }
    if let Some(l) = others()
        .find(|l| l.status.as_ref().and_then(|s| s.leg_port_id.as_deref()) == Some(p.id.as_str()))
    {
        return Some(name(l));
    }
    peers_of(link, others())
        .into_iter()
        .find(|peer| peer.transit_ips.iter().any(|ip| p.has_ip(&ip.to_string())))
        .map(|peer| peer.name)
}

/// Pure: the hint for the first router interface on the transit network of one of `routers`,
/// for `link` among `all` the cluster's links. Pinning the address adopts only a port no link
/// owns: for another link's leg it would end in TransitIPUnavailable ("already claimed"), so
/// that hint names the link holding the router instead.
pub fn leg_hint(
    ports: &[Port],
    routers: &[String],
    link: &ClusterLink,
    all: &[ClusterLink],
) -> Option<String> {
    let own = link.metadata.uid.as_deref();
    let p = ports.iter().find(|p| {
        p.is_router_interface()
            && routers.contains(&p.device_id)
            && (own.is_none() || leg_owner_uid(&p.tags, &p.description) != own)
    })?;
    let ip = p.first_ip()?;
    let router = &p.device_id;
    let has = format!(
        "router {router} already has port {} at {ip} on the transit network",
        p.id
    );
    if let Some(other) = claimant(p, link, all) {
        return Some(format!(
            "router {router} is already linked by ClusterLink {other} (its leg is port {} at {ip}): a router takes one leg on the transit network, so one ClusterLink per router; point spec.serviceClusterRouter at another router, or delete ClusterLink {other} first",
            p.id
        ));
    }
    if let Some(uid) = leg_owner_uid(&p.tags, &p.description) {
        let whose = link_name_in_tags(&p.tags)
            .map(|n| format!("ClusterLink {n}"))
            .unwrap_or_else(|| format!("ClusterLink uid {uid}"));
        return Some(format!(
            "{has}, the leg of {whose}, which no longer exists; remove it (`kubectl clusterlink doctor` names the commands), then this link attaches its own"
        ));
    }
    if is_managed(&p.tags) {
        return Some(format!(
            "{has}, tagged as a ClusterLink's leg but no link's, so it cannot be adopted; remove it, or its tags to adopt it by pinning spec.transitIP: {ip}"
        ));
    }
    Some(format!(
        "{has}, so the new leg will fail to attach; to adopt that port, pin spec.transitIP: {ip}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnerd_cloud::FixedIp;

    fn leg(id: &str, router: &str, ip: &str, tags: &[&str]) -> Port {
        Port {
            id: id.into(),
            network_id: "n".into(),
            device_id: router.into(),
            device_owner: "network:router_interface".into(),
            fixed_ips: vec![FixedIp {
                subnet_id: "s".into(),
                ip_address: ip.into(),
            }],
            tags: tags.iter().map(|t| t.to_string()).collect(),
            ..Default::default()
        }
    }

    fn link(name: &str, uid: &str, status: serde_json::Value) -> ClusterLink {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "ipsec.bnerd.net/v1alpha1", "kind": "ClusterLink",
            "metadata": {"name": name, "uid": uid},
            "spec": {"serviceClusterRouter": "r1", "serviceClusterCIDR": "10.90.0.0/16"},
            "status": status,
        }))
        .expect("link")
    }

    /// Pinning adopts only a leg no link owns: for another link's leg (by tag, or claimed in
    /// its status) the hint names that link, as the reconcile would refuse the pin with
    /// TransitIPUnavailable "already claimed by ClusterLink x".
    #[test]
    fn the_hint_pins_only_a_hand_made_leg() {
        let me = link("second", "uid-me", serde_json::json!({}));
        let x = link(
            "x",
            "uid-x",
            serde_json::json!({"transitIP": "10.254.0.3", "legPortID": "px"}),
        );
        let all = vec![x, me.clone()];
        let uid_tag = bnerd_api::names::tag_link_uid("uid-x");
        let gone_tag = bnerd_api::names::tag_link_uid("uid-gone");
        let r1 = ["r1".to_string()];
        let hint = |p: Port| leg_hint(&[p], &r1, &me, &all);
        for (port, want, not) in [
            (
                leg("p9", "r1", "10.254.0.40", &[]),
                "to adopt that port, pin spec.transitIP: 10.254.0.40",
                "already linked",
            ),
            (
                leg("px", "r1", "10.254.0.3", &["bnerd-vpn-operator", &uid_tag]),
                "router r1 is already linked by ClusterLink x (its leg is port px at 10.254.0.3)",
                "pin spec.transitIP",
            ),
            // Untagged, but ClusterLink x's status claims the port and its address.
            (
                leg("px", "r1", "10.254.0.3", &[]),
                "router r1 is already linked by ClusterLink x",
                "pin spec.transitIP",
            ),
            (
                leg("pg", "r1", "10.254.0.7", &[&gone_tag, "clusterlink=gone"]),
                "the leg of ClusterLink gone, which no longer exists",
                "pin spec.transitIP: 10.254.0.7",
            ),
            (
                leg("pm", "r1", "10.254.0.8", &["bnerd-vpn-operator"]),
                "cannot be adopted",
                "already linked",
            ),
        ] {
            let h = hint(port).expect("hint");
            assert!(h.contains(want), "{h}");
            assert!(!h.contains(not), "{h}");
        }
        assert_eq!(
            leg_hint(
                &[leg("p9", "r1", "10.254.0.40", &[])],
                &["r2".into()],
                &me,
                &all
            ),
            None
        );
    }
}
