//! The batched resync's one decision: after a link's steps ran against a resync snapshot
//! (`engine::resync`), is what they saw and wanted good enough to stand for a live reconcile?
//!
//! - Nothing missing and nothing to write: the link is converged; its outcome stands.
//! - Only route additions and removals on routers the snapshot holds, with extraroute-atomic:
//!   replay them on the cloud in order. They name exact routes and are idempotent, so a
//!   snapshot a few seconds old decides them as well as a fresh read would (a route someone
//!   else added meanwhile is neither replaced nor removed by them). This is what a gateway
//!   change costs every link: one write per router whose route set changed, no read.
//! - Anything else — a read the snapshot cannot answer (a router it does not hold, a port
//!   query other than the transit network's), any other write (a port to create, tag,
//!   attach or delete, a whole-table PUT), or any write with a cross-tenant link's customer
//!   credential — falls back to the per-link path, which reads afresh and repairs. Such a
//!   write was never made: the dry run only recorded it.

use bnerd_cloud::Route;

/// One call the steps made against the snapshot that it could not just answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Noted {
    /// A read outside the snapshot (what was asked).
    Miss(String),
    /// `add_extraroutes` on a router the snapshot holds.
    AddRoutes { router: String, routes: Vec<Route> },
    /// `remove_extraroutes` on a router the snapshot holds.
    RemoveRoutes { router: String, routes: Vec<Route> },
    /// Any other write (what it was).
    OtherWrite(String),
    /// A write with a cross-tenant link's customer credential (what it was): made only by
    /// the per-link path, which reads that side afresh and names the credential if it fails.
    CustomerWrite(String),
}

/// A route write to make on the cloud, in the order the steps asked for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RouteWrite {
    Add { router: String, routes: Vec<Route> },
    Remove { router: String, routes: Vec<Route> },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResyncPlan {
    /// Converged as the snapshot shows it: no call at all.
    Converged,
    /// Converged once these route writes are made.
    Replay(Vec<RouteWrite>),
    /// Reconcile this link on its own, reading afresh; why (for the log).
    PerLink(String),
}

pub fn plan(noted: &[Noted]) -> ResyncPlan {
    let mut writes = vec![];
    for n in noted {
        match n {
            Noted::Miss(what) => {
                return ResyncPlan::PerLink(format!("not in the snapshot: {what}"));
            }
            Noted::OtherWrite(what) => {
                return ResyncPlan::PerLink(format!("needs {what}"));
            }
            Noted::CustomerWrite(what) => {
                return ResyncPlan::PerLink(format!("needs {what} with the customer's credential"));
            }
            Noted::AddRoutes { router, routes } => writes.push(RouteWrite::Add {
                router: router.clone(),
                routes: routes.clone(),
            }),
            Noted::RemoveRoutes { router, routes } => writes.push(RouteWrite::Remove {
                router: router.clone(),
                routes: routes.clone(),
            }),
        }
    }
    if writes.is_empty() {
        ResyncPlan::Converged
    } else {
        ResyncPlan::Replay(writes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::fixtures::route;

    fn add(r: &str) -> Noted {
        Noted::AddRoutes {
            router: r.into(),
            routes: vec![route("100.64.0.0/24", "10.254.0.200")],
        }
    }

    fn remove(r: &str) -> Noted {
        Noted::RemoveRoutes {
            router: r.into(),
            routes: vec![route("100.64.9.0/24", "10.254.0.209")],
        }
    }

    #[test]
    fn table() {
        let rows: Vec<(&str, Vec<Noted>, ResyncPlan)> = vec![
            (
                "a converged link costs nothing",
                vec![],
                ResyncPlan::Converged,
            ),
            (
                "a gateway change: the new reverse route is replayed, no read",
                vec![add("svc")],
                ResyncPlan::Replay(vec![RouteWrite::Add {
                    router: "svc".into(),
                    routes: vec![route("100.64.0.0/24", "10.254.0.200")],
                }]),
            ),
            (
                "stale routes go before new ones, in the steps' order",
                vec![remove("gw"), add("svc")],
                ResyncPlan::Replay(vec![
                    RouteWrite::Remove {
                        router: "gw".into(),
                        routes: vec![route("100.64.9.0/24", "10.254.0.209")],
                    },
                    RouteWrite::Add {
                        router: "svc".into(),
                        routes: vec![route("100.64.0.0/24", "10.254.0.200")],
                    },
                ]),
            ),
            (
                "a router the snapshot does not hold: per link",
                vec![Noted::Miss("router r9".into())],
                ResyncPlan::PerLink("not in the snapshot: router r9".into()),
            ),
            (
                "a leg port to recreate (deleted out of band): per link, nothing replayed",
                vec![add("gw"), Noted::OtherWrite("POST /ports".into())],
                ResyncPlan::PerLink("needs POST /ports".into()),
            ),
            (
                "a return route missing on a customer's router: per link, which reads that \
                 side afresh with the customer's credential",
                vec![
                    add("edge"),
                    Noted::CustomerWrite("add routes on router svc".into()),
                ],
                ResyncPlan::PerLink(
                    "needs add routes on router svc with the customer's credential".into(),
                ),
            ),
            (
                "a miss after a route write: per link, the write is not replayed",
                vec![add("svc"), Noted::Miss("GET /ports/p1".into())],
                ResyncPlan::PerLink("not in the snapshot: GET /ports/p1".into()),
            ),
        ];
        for (rule, noted, want) in rows {
            assert_eq!(plan(&noted), want, "{rule}");
        }
    }
}
