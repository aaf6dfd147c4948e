//! The drift check between resyncs (docs/design.md, "The drift check"): every interval, two
//! reads for the whole estate (`engine::drift_check`), and the links whose recorded path is
//! gone are sent to be reconciled at once. A drift that outlasts its reconcile (a repair that
//! fails, or a status not yet updated) is sent again with a growing wait, so a link that
//! cannot be repaired does not bypass its backoff every interval.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bnerd_api::ClusterLink;
use kube::runtime::reflector::ObjectRef;
use tracing::{debug, info, warn};

use crate::context::Context;
use crate::engine::drift_check::{Drift, RecordedPath, check};

/// What the check looks at (`engine::view::recorded_paths`).
pub fn recorded_paths(links: &[Arc<ClusterLink>]) -> Vec<RecordedPath> {
    crate::engine::view::recorded_paths(links.iter().map(AsRef::as_ref))
}

/// The drifts sent before, per link: what was seen, when it was sent, and how long to wait
/// before sending the same again.
#[derive(Debug, Default)]
pub struct Sent {
    links: BTreeMap<String, (String, Instant, Duration)>,
}

impl Sent {
    /// The drifts of this check to send now: a new one (or one seen differently) at once, the
    /// same one again after a wait that doubles from `2 × interval` up to `cap` (the resync
    /// interval). A link that no longer drifted is forgotten.
    pub fn to_send(
        &mut self,
        now: Instant,
        drifts: Vec<Drift>,
        interval: Duration,
        cap: Duration,
    ) -> Vec<Drift> {
        let first_wait = (interval * 2).min(cap);
        let mut kept = BTreeMap::new();
        let mut send = vec![];
        for d in drifts {
            let entry = match self.links.remove(&d.link) {
                Some((why, at, wait)) if why == d.why => {
                    if now.duration_since(at) >= wait {
                        send.push(d.clone());
                        (why, now, (wait * 2).min(cap))
                    } else {
                        (why, at, wait)
                    }
                }
                _ => {
                    send.push(d.clone());
                    (d.why.clone(), now, first_wait)
                }
            };
            kept.insert(d.link, entry);
        }
        self.links = kept;
        send
    }
}

/// Every `interval`, check every recorded path and send the links that drifted to be
/// reconciled at once. Runs for the leader's term (the caller drops it).
pub(crate) async fn watch_drift(
    ctx: Arc<Context>,
    interval: Duration,
    reconcile_now: futures::channel::mpsc::UnboundedSender<ObjectRef<ClusterLink>>,
) {
    if ctx.links.wait_until_ready().await.is_err() {
        return;
    }
    let mut sent = Sent::default();
    loop {
        let started = tokio::time::Instant::now();
        let paths = recorded_paths(&ctx.links.state());
        match check(ctx.net.as_ref(), &ctx.fabric, &paths).await {
            Ok(drifts) => {
                ctx.metrics.drift_checked(true, drifts.len());
                let send =
                    sent.to_send(Instant::now(), drifts, interval, ctx.config.resync_interval);
                for d in send {
                    info!(clusterlink = %d.link, "drift check: {}; reconciling now", d.why);
                    ctx.drifted.mark(&d.link);
                    if reconcile_now
                        .unbounded_send(ObjectRef::new(&d.link))
                        .is_err()
                    {
                        return;
                    }
                }
            }
            Err(e) => {
                ctx.metrics.drift_checked(false, 0);
                warn!(error = %e, links = paths.len(), "drift check failed; the resync interval still applies");
            }
        }
        let took = started.elapsed();
        let wait = wait_after(interval, took);
        if took + wait > interval {
            debug!(
                ?took,
                ?wait,
                "drift check: Neutron answered slowly; the next check waits longer"
            );
        }
        tokio::time::sleep(wait).await;
    }
}

/// The pause after a check that took `took`: the rest of the interval, and never less than
/// three times the check's own time. Each read holds one of Neutron's API workers while it
/// runs, and a list grows with the estate and slows with the cloud's load; so whatever either
/// does, the check keeps a Neutron worker busy at most a quarter of the time, and stretches
/// its interval instead of queueing reads back to back behind the operator's own writes.
pub fn wait_after(interval: Duration, took: Duration) -> Duration {
    interval.saturating_sub(took).max(took * 3)
}

#[cfg(test)]
mod tests {
    use bnerd_api::conditions::{Status, set_condition};
    use bnerd_api::{ClusterLinkSpec, Reason, SecretRef};

    use bnerd_api::{ClusterLink, ClusterLinkStatus, ConditionType};
    use bnerd_cloud::Route;

    use super::*;
    use crate::engine::drift_check::{RecordedEdge, RecordedLeg};

    /// A link named `name`; cross-tenant when `cross`; Ready at `ready_at` (a generation) or
    /// not Ready; its leg and gateway route in status when `leg`.
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
            status.service_router_id = Some("svc".into());
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
    fn every_recorded_path_is_checked_whatever_the_ready_state() {
        let mut deleting = (*link("deleting", true, Some(2), true)).clone();
        deleting.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
            ));
        // A PerCustomer link: its leg on the customer transit, its gateway route via its
        // project's edge leg, and the edge router's route via its leg.
        let mut per_customer = (*link("per-customer", true, Some(2), true)).clone();
        per_customer.spec.transit_isolation = Some(bnerd_api::TransitIsolation::PerCustomer);
        if let Some(st) = per_customer.status.as_mut() {
            st.transit_ip = Some("10.255.0.5".into());
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
            link("no-route", true, Some(2), false),
            Arc::new(deleting),
        ];
        let paths = recorded_paths(&links);
        let route = Route::new("10.251.0.0/16", "10.254.0.7");
        let path = |name: &str| RecordedPath {
            link: name.into(),
            gateway_route: route.clone(),
            leg: Some(RecordedLeg {
                port_id: format!("{name}-port"),
                ip: "10.254.0.7".into(),
                router_id: Some("svc".into()),
            }),
            edge: None,
        };
        let mut pc = path("per-customer");
        if let Some(l) = pc.leg.as_mut() {
            l.ip = "10.255.0.5".into();
        }
        pc.edge = Some(RecordedEdge {
            router_id: "edge-1".into(),
            transit_ip: "10.254.0.7".into(),
            route: Some(Route::new("10.251.0.0/16", "10.255.0.5")),
        });
        assert_eq!(
            paths,
            vec![
                pc,
                path("converged"),
                path("same-tenant"),
                path("not-ready"),
                path("older-generation"),
            ]
        );
    }

    fn drift(link: &str, why: &str) -> Drift {
        Drift {
            link: link.into(),
            why: why.into(),
        }
    }

    fn names(v: &[Drift]) -> Vec<&str> {
        v.iter().map(|d| d.link.as_str()).collect()
    }

    #[test]
    fn a_drift_is_sent_once_then_again_after_a_doubling_wait() {
        let (i, cap) = (Duration::from_secs(2), Duration::from_secs(20));
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut sent = Sent::default();
        let rows: Vec<(&str, u64, Vec<Drift>, Vec<&str>)> = vec![
            (
                "a new drift goes at once",
                0,
                vec![drift("a", "x")],
                vec!["a"],
            ),
            (
                "the same, before 2 intervals: not again",
                2,
                vec![drift("a", "x")],
                vec![],
            ),
            (
                "the same after 2 intervals: again",
                4,
                vec![drift("a", "x")],
                vec!["a"],
            ),
            ("then after 4 intervals", 10, vec![drift("a", "x")], vec![]),
            (
                "... 8 s after the last",
                12,
                vec![drift("a", "x")],
                vec!["a"],
            ),
            (
                "seen otherwise: at once",
                13,
                vec![drift("a", "y")],
                vec!["a"],
            ),
            ("healed: forgotten", 14, vec![], vec![]),
            (
                "broken again: at once",
                15,
                vec![drift("a", "y")],
                vec!["a"],
            ),
            (
                "another link is its own",
                16,
                vec![drift("a", "y"), drift("b", "x")],
                vec!["b"],
            ),
        ];
        for (rule, t, drifts, want) in rows {
            assert_eq!(names(&sent.to_send(at(t), drifts, i, cap)), want, "{rule}");
        }
        // The wait stops growing at the cap (the resync interval).
        let mut sent = Sent::default();
        let mut times = vec![];
        for t in 0..200 {
            if !sent
                .to_send(at(t), vec![drift("a", "x")], i, cap)
                .is_empty()
            {
                times.push(t);
            }
        }
        assert_eq!(&times[..6], &[0, 4, 12, 28, 48, 68]);
    }

    #[test]
    fn a_slow_check_stretches_the_interval() {
        let ms = Duration::from_millis;
        let i = Duration::from_secs(2);
        // (rule, the check took, the wait after it)
        let rows = [
            ("a quick check keeps the interval", ms(100), ms(1900)),
            (
                "a quarter of the interval is the turning point",
                ms(500),
                ms(1500),
            ),
            (
                "a slower one waits three times its own time",
                ms(600),
                ms(1800),
            ),
            ("one longer than the interval too", ms(2500), ms(7500)),
            ("an instant one waits the whole interval", ms(0), ms(2000)),
        ];
        for (rule, took, want) in rows {
            assert_eq!(wait_after(i, took), want, "{rule}");
        }
    }
}
