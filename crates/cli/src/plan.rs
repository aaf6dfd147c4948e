//! `plan`: what the operator's next reconcile of a ClusterLink would do against the real
//! cloud, without writing. It runs the operator's own reconcile (`bnerd_engine`) over a
//! Neutron that reads the cloud and records writes, so the plan is the reconcile's own
//! decision: the address it would take or the leg it would adopt, the ports and routes it
//! would create and remove, and the refusals it would hit, with what to do about them.

use bnerd_api::gateway::ReverseTarget;
use bnerd_api::{ClusterLink, ConditionType, Reason};
use bnerd_cloud::fabric::Fabric;
use bnerd_cloud::{Neutron, Port, PortQuery, RouterQuery};
use bnerd_engine::Engine;
use bnerd_engine::recording::{PlannedWrite, Recording};
use bnerd_engine::view::{input_of, peers_of};
use thiserror::Error;

/// The UID a link that is not in the cluster yet plans with: no port carries it.
pub const NEW_LINK_UID: &str = "00000000-0000-0000-0000-000000000000";

#[derive(Debug, Error)]
pub enum PlanError {
    #[error(
        "ClusterLink {0} is cross-tenant: plan covers same-tenant links (the customer's side needs its credential from the Secret)"
    )]
    CrossTenant(String),
    #[error(
        "ClusterLink {0} is being deleted: its finalizer unwinds it; plan covers the reconcile of a live link"
    )]
    Deleting(String),
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
    pub conditions: Vec<PlannedCondition>,
    pub ready: bool,
    /// What a human can do about a refusal.
    pub hints: Vec<String>,
}

/// Plan `link` against the cloud behind `net`, as the operator would reconcile it now with
/// `all` the cluster's links (its peers) and the estate's gateway `targets`.
pub async fn plan(
    net: &dyn Neutron,
    fabric: &Fabric,
    link: &ClusterLink,
    all: &[ClusterLink],
    targets: &[ReverseTarget],
) -> Result<Plan, PlanError> {
    let name = link.metadata.name.clone().unwrap_or_default();
    if link.is_cross_tenant() {
        return Err(PlanError::CrossTenant(name));
    }
    if link.metadata.deletion_timestamp.is_some() {
        return Err(PlanError::Deleting(name));
    }
    let mut link = link.clone();
    if link.metadata.uid.is_none() {
        link.metadata.uid = Some(NEW_LINK_UID.into());
    }
    let status = link.status.clone().unwrap_or_default();
    let peers = peers_of(
        &link,
        all.iter().filter(|l| l.metadata.name != link.metadata.name),
    );
    let input = input_of(&link, &status, &peers, targets).ok_or(PlanError::NoUid)?;
    let rec = Recording::new(net);
    let outcome = Engine::same_tenant(&rec, fabric).reconcile(&input).await;
    let conditions: Vec<PlannedCondition> = ConditionType::ALL
        .iter()
        .filter_map(|t| bnerd_api::conditions::find(&outcome.status.conditions, *t))
        .map(|c| PlannedCondition {
            type_: c.type_.clone(),
            status: c.status.clone(),
            reason: c.reason.clone(),
            message: c.message.clone(),
        })
        .collect();
    let ready = conditions
        .iter()
        .any(|c| c.type_ == ConditionType::Ready.as_str() && c.status == "True");
    let mut hints = vec![];
    if conditions
        .iter()
        .any(|c| c.reason == Reason::EnsureRouterHasPortFailed.as_str())
        && let Some(h) = hand_made_leg_hint(net, fabric, &link).await
    {
        hints.push(h);
    }
    Ok(Plan {
        name,
        writes: rec.writes(),
        conditions,
        ready,
        hints,
    })
}

/// A router that refuses the leg already has an interface on the transit subnet: a hand-made
/// leg (or another link's). Pinning its address adopts it.
async fn hand_made_leg_hint(
    net: &dyn Neutron,
    fabric: &Fabric,
    link: &ClusterLink,
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
    pin_hint(&ports, &ids)
}

/// Pure: the hint for the first router interface on the transit network of one of `routers`.
pub fn pin_hint(ports: &[Port], routers: &[String]) -> Option<String> {
    let p = ports
        .iter()
        .find(|p| p.is_router_interface() && routers.contains(&p.device_id))?;
    let ip = p.first_ip()?;
    Some(format!(
        "router {} already has port {} at {ip} on the transit network, so the new leg will fail to attach; to adopt that port, pin spec.transitIP: {ip}",
        p.device_id, p.id
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnerd_cloud::FixedIp;

    #[test]
    fn the_hint_names_the_address_to_pin() {
        let hand = Port {
            id: "p9".into(),
            network_id: "n".into(),
            device_id: "r1".into(),
            device_owner: "network:router_interface".into(),
            fixed_ips: vec![FixedIp {
                subnet_id: "s".into(),
                ip_address: "10.254.0.40".into(),
            }],
            ..Default::default()
        };
        let h = pin_hint(std::slice::from_ref(&hand), &["r1".into()]).expect("hint");
        assert!(h.contains("pin spec.transitIP: 10.254.0.40"), "{h}");
        assert!(h.contains("will fail to attach"), "{h}");
        assert_eq!(pin_hint(&[hand], &["r2".into()]), None);
    }
}
