//! RouteInstalled, observe and act: read the gateway router (or take the leg step's read),
//! let `plan::gateway_route` decide, remove what is stale, add what is missing.

use bnerd_api::RouteRecord;

use super::leg::Leg;
use super::model::{Action, ActionKind, Input};
use super::ops::{self, Engine};
use super::plan::StepFail;
use super::plan::gateway_route::{RouteCall, RouteView, call_failed, installed_message, plan};
use super::plan::record_of;
use super::plan::validated::Valid;

/// Converge the gateway route. `Ok` carries the condition message and the route to record;
/// the `Err` side carries the route status may still record (none after a refusal).
pub(crate) async fn ensure(
    e: &Engine<'_>,
    input: &Input<'_>,
    valid: &Valid,
    leg: &Leg,
    actions: &mut Vec<Action>,
) -> Result<(String, RouteRecord), (StepFail, Option<RouteRecord>)> {
    let gw = &e.fabric.gateway_router_id;
    let keep_recorded = || input.status.gateway_route.clone();
    let router = ops::router(e, leg.seen.gateway.as_ref(), gw)
        .await
        .map_err(|err| (call_failed(RouteCall::Read, gw, &err), keep_recorded()))?;
    let p = plan(&RouteView {
        name: input.name,
        created: &input.created,
        gateway_router_id: gw,
        routes: &router.routes,
        cidr: valid.cidr,
        leg_ip: leg.ip,
        recorded: input.status.gateway_route.as_ref(),
        peers: input.peers,
    });
    if !p.remove.is_empty() {
        ops::remove_routes(e, &router, &p.remove)
            .await
            .map_err(|err| (call_failed(RouteCall::Remove, gw, &err), keep_recorded()))?;
        let list: Vec<String> = p
            .remove
            .iter()
            .map(|r| format!("{} via {}", r.destination, r.nexthop))
            .collect();
        actions.push(Action::new(
            ActionKind::RouteRemoved,
            format!("removed {} from gateway router {gw}", list.join(", ")),
        ));
    }
    let want = p.verdict.map_err(|f| (f, None))?;
    if let Some(add) = &p.add {
        // The stale ones are gone: status must not claim them while the add is retried.
        ops::add_routes(e, &router, std::slice::from_ref(add))
            .await
            .map_err(|err| (call_failed(RouteCall::Add, gw, &err), None))?;
        actions.push(Action::new(
            ActionKind::RouteInstalled,
            installed_message(add, gw),
        ));
    }
    Ok((installed_message(&want, gw), record_of(&want)))
}
