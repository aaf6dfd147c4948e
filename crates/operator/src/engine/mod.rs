//! One reconcile of one ClusterLink against the cloud, and its unwind on delete.
//!
//! Steps run in the spec's order, each owning one condition: Validated → LegAttached →
//! RouteInstalled → ReverseRoutesInstalled, then Ready. Each step observes (reads only), a
//! pure function in `plan` decides (every condition reason is chosen there), the step acts on
//! that decision, and `report` turns the results into conditions. A failing step sets its own
//! condition False and the later ones Unknown; nothing after it touches the cloud.

mod gateway_route;
mod leg;
mod model;
mod ops;
pub mod plan;
mod report;
mod reverse_routes;
mod share;
mod unwind;

use bnerd_api::ConditionType;

pub use model::{Action, ActionKind, Input, Outcome, Retry};
pub use ops::{Customer, Engine};
pub use plan::reverse_routes::GatewayProblem;
pub use plan::unwind::UnwindPlan;
pub use plan::{Peer, StepFail};
pub use report::{Transition, deleting_status, transitions};
pub use unwind::unwind;

impl Engine<'_> {
    /// Converge one link. Never fails: every problem becomes a condition.
    pub async fn reconcile(&self, input: &Input<'_>) -> Outcome {
        let mut r = report::Report::new(input);
        let spec = input.spec;

        let valid = match plan::validated::plan(spec, self.fabric.transit_subnet) {
            Ok(v) => v,
            Err(f) => {
                r.fail(ConditionType::Validated, f);
                return r.finish();
            }
        };
        if spec.credentials_secret_ref.is_some() && self.customer.is_none() {
            r.fail(
                ConditionType::Validated,
                plan::validated::cross_tenant_unsupported(),
            );
            return r.finish();
        }
        r.pass(ConditionType::Validated, plan::validated::valid_message());

        let leg = match leg::resolve(self, input).await {
            Ok(resolved) => {
                if let Some(c) = &self.customer {
                    // After the router is found, before the leg: the customer may only create
                    // a port on the transit network once it is shared with its project.
                    match share::ensure(self, c).await {
                        Ok(msg) => r.pass(ConditionType::TransitNetworkShared, msg),
                        Err(f) => {
                            r.fail(ConditionType::TransitNetworkShared, f);
                            return r.finish();
                        }
                    }
                }
                leg::ensure(self, input, &valid, resolved, &mut r.actions).await
            }
            Err(f) => Err(f),
        };
        let leg = match leg {
            Ok(leg) => leg,
            Err(f) => {
                if gateway_route::withdraw_orphaned(self, input, &mut r.actions).await {
                    r.status.gateway_route = None;
                }
                r.fail(ConditionType::LegAttached, f);
                return r.finish();
            }
        };
        r.status.leg_port_id = Some(leg.port_id.clone());
        r.status.transit_ip = Some(leg.ip.to_string());
        r.status.service_router_id = Some(leg.router_id.clone());
        if let Some(c) = &self.customer {
            r.status.customer_project_id = Some(c.project_id.to_string());
        }
        r.pass(
            ConditionType::LegAttached,
            format!(
                "leg port {} at {} attached to router {}",
                leg.port_id, leg.ip, leg.router_id
            ),
        );

        match gateway_route::ensure(self, input, &valid, &leg, &mut r.actions).await {
            Ok((msg, route)) => {
                r.status.gateway_route = Some(route);
                r.pass(ConditionType::RouteInstalled, msg);
            }
            Err((f, route)) => {
                r.status.gateway_route = route;
                r.fail(ConditionType::RouteInstalled, self.named(f, false));
            }
        }
        // Reverse routes do not depend on the forward route: a broken one never reads as the
        // forward path being down, and vice versa.
        let rev = reverse_routes::ensure(self, input, &leg).await;
        r.status.reverse_routes = rev.installed;
        r.gateway_problems = rev.problems;
        match rev.verdict {
            Ok(msg) => r.pass(ConditionType::ReverseRoutesInstalled, msg),
            Err(f) => r.fail(ConditionType::ReverseRoutesInstalled, self.named(f, true)),
        }
        r.finish()
    }
}
