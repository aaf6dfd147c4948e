//! The short check of recorded legs between resyncs: every interval, one read of the transit
//! ports checks the next hop of every recorded gateway route (`engine::resync::check_legs`),
//! and the links whose leg (or edge leg) is gone or moved are sent to be reconciled at once.

use std::sync::Arc;

use bnerd_api::ClusterLink;
use kube::runtime::reflector::ObjectRef;
use tracing::{info, warn};

use crate::context::Context;
use crate::engine::resync::{RecordedLeg, check_legs};

/// The links whose recorded gateway route the short check looks at (`engine::view`): every
/// one not being deleted, Ready or not.
pub fn legs_to_check(links: &[Arc<ClusterLink>]) -> Vec<RecordedLeg> {
    crate::engine::view::legs_to_check(links.iter().map(AsRef::as_ref))
}

/// Every `interval`, check the next hop of every recorded gateway route from one read of the
/// transit ports and send the links whose leg (or edge leg) is gone or moved to be reconciled
/// at once. Runs for
/// the leader's term (the caller drops it).
pub(crate) async fn watch_cross_tenant_legs(
    ctx: Arc<Context>,
    interval: std::time::Duration,
    reconcile_now: futures::channel::mpsc::UnboundedSender<ObjectRef<ClusterLink>>,
) {
    if ctx.links.wait_until_ready().await.is_err() {
        return;
    }
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let legs = legs_to_check(&ctx.links.state());
        match check_legs(ctx.net.as_ref(), &ctx.fabric, &legs).await {
            Ok(moved) => {
                ctx.metrics.cross_tenant_legs_checked(true, moved.len());
                for m in moved {
                    info!(clusterlink = %m.link, "leg check: {}; reconciling now", m.why);
                    if reconcile_now
                        .unbounded_send(ObjectRef::new(&m.link))
                        .is_err()
                    {
                        return;
                    }
                }
            }
            Err(e) => {
                ctx.metrics.cross_tenant_legs_checked(false, 0);
                warn!(error = %e, legs = legs.len(), "leg check could not read the transit ports; the resync interval still applies");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use bnerd_api::conditions::{Status, set_condition};
    use bnerd_api::{ClusterLinkSpec, Reason, SecretRef};

    use bnerd_api::{ClusterLink, ClusterLinkStatus, ConditionType};

    use super::*;

    /// A link named `name`; cross-tenant when `cross`; Ready at `ready_at` (a generation) or
    /// not Ready; its leg in status when `leg`.
    fn link(name: &str, cross: bool, ready_at: Option<i64>, leg: bool) -> Arc<ClusterLink> {
        let mut l = ClusterLink::new(
            name,
            ClusterLinkSpec {
                credentials_secret_ref: cross.then(|| SecretRef {
                    name: format!("clusterlink-{name}"),
                    namespace: "bnerd-vpn-clusterlinks".into(),
                }),
                ..Default::default()
            },
        );
        l.metadata.generation = Some(2);
        let mut status = ClusterLinkStatus::default();
        if leg {
            status.leg_port_id = Some(format!("{name}-port"));
            status.transit_ip = Some("10.254.0.7".into());
            status.gateway_route = Some(bnerd_api::RouteRecord {
                destination: "10.251.0.0/16".into(),
                nexthop: "10.254.0.7".into(),
            });
        }
        let (s, reason) = match ready_at {
            Some(_) => (Status::True, Reason::Ready),
            None => (Status::False, Reason::NotReady),
        };
        set_condition(
            &mut status.conditions,
            ConditionType::Ready,
            s,
            reason,
            "m",
            ready_at.or(Some(2)),
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        );
        l.status = Some(status);
        Arc::new(l)
    }

    #[test]
    fn every_recorded_gateway_route_has_its_next_hop_checked() {
        let mut deleting = (*link("deleting", true, Some(2), true)).clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        // A PerCustomer link's gateway route goes via its project's edge leg: the edge router
        // must hold the address.
        let mut per_customer = (*link("per-customer", true, Some(2), true)).clone();
        per_customer.spec.transit_isolation = Some(bnerd_api::TransitIsolation::PerCustomer);
        if let Some(st) = per_customer.status.as_mut() {
            st.customer_transit = Some(bnerd_api::clusterlink::CustomerTransit {
                edge_router_id: Some("edge-1".into()),
                edge_router_transit_ip: Some("10.254.0.7".into()),
                ..Default::default()
            });
        }
        let links = vec![
            Arc::new(per_customer),
            link("converged", true, Some(2), true),
            link("same-tenant", false, Some(2), true),
            // Not Ready (failed at its credential or share, say): its route is still there.
            link("not-ready", true, None, true),
            link("older-generation", true, Some(1), true),
            link("no-leg", true, Some(2), false),
            Arc::new(deleting),
        ];
        let legs = legs_to_check(&links);
        use crate::engine::resync::LegHolder;
        let leg = |name: &str, holder: LegHolder| RecordedLeg {
            link: name.into(),
            holder,
            transit_ip: "10.254.0.7".into(),
        };
        let port = |name: &str| LegHolder::Port(format!("{name}-port"));
        assert_eq!(
            legs,
            vec![
                leg("per-customer", LegHolder::EdgeRouter("edge-1".into())),
                leg("converged", port("converged")),
                leg("same-tenant", port("same-tenant")),
                leg("not-ready", port("not-ready")),
                leg("older-generation", port("older-generation")),
            ]
        );
    }
}
