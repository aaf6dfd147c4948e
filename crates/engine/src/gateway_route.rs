//! RouteInstalled, observe and act: read the gateway router (or take the leg step's read),
//! let `plan::gateway_route` decide, remove what is stale, add what is missing.

use bnerd_api::RouteRecord;

use super::context::Engine;
use super::leg::Leg;
use super::model::{Action, ActionKind, Input};
use super::ops;
use super::plan::StepFail;
use super::plan::gateway_route::{
    RouteCall, RouteView, call_failed, installed_message, orphaned, plan,
};
use super::plan::leg::is_own;
use super::plan::record_of;
use super::plan::validated::Valid;

/// Converge the gateway route. `Ok` carries the condition message and the route to record;
/// the `Err` side carries the route status may still record (none after a refusal).
/// `via`: a `PerCustomer` link's next hop, its project's edge router leg (shared by the
/// project's links); `None`: the leg itself.
pub(crate) async fn ensure(
    e: &Engine<'_>,
    input: &Input<'_>,
    valid: &Valid,
    leg: &Leg,
    via: Option<std::net::Ipv4Addr>,
    actions: &mut Vec<Action>,
) -> Result<(String, RouteRecord), (StepFail, Option<RouteRecord>)> {
    let gw = &e.fabric.gateway_router_id;
    let keep_recorded = || input.status.gateway_route.clone();
    let router = ops::router(e.net, leg.seen.gateway_router.as_ref(), gw)
        .await
        .map_err(|err| (call_failed(RouteCall::Read, gw, &err), keep_recorded()))?;
    let p = plan(&RouteView {
        name: input.name,
        created: &input.created,
        gateway_router_id: gw,
        routes: &router.routes,
        cidr: valid.cidr,
        leg_ip: via.unwrap_or(leg.ip),
        shared_next_hop: via.is_some(),
        recorded: input.status.gateway_route.as_ref(),
        peers: input.peers,
    });
    if !p.remove.is_empty() {
        ops::remove_routes(e, e.net, &router, &p.remove)
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
        ops::add_routes(e, e.net, &router, std::slice::from_ref(add))
            .await
            .map_err(|err| (call_failed(RouteCall::Add, gw, &err), None))?;
        actions.push(Action::new(
            ActionKind::RouteInstalled,
            installed_message(add, gw),
        ));
    }
    Ok((installed_message(&want, gw), record_of(&want)))
}

/// After LegAttached failed: withdraw the recorded route if no port of ours holds its next
/// hop any more. Best effort: a failure here leaves status recording the route, so the next
/// reconcile tries again. Returns whether status may forget the route.
pub(crate) async fn withdraw_orphaned(
    e: &Engine<'_>,
    input: &Input<'_>,
    actions: &mut Vec<Action>,
) -> bool {
    let Some(recorded) = input.status.gateway_route.as_ref() else {
        return false;
    };
    let gw = &e.fabric.gateway_router_id;
    let (Ok(ports), Ok(router)) = (ops::leg_network_ports(e).await, e.net.get_router(gw).await)
    else {
        return false;
    };
    let own_ips: Vec<String> = ports
        .iter()
        .filter(|p| is_own(p, input.uid, e.leg_project(input)))
        .flat_map(|p| p.fixed_ips.iter().map(|f| f.ip_address.clone()))
        .collect();
    let gone = orphaned(&router.routes, Some(recorded), &own_ips);
    let held = router
        .routes
        .iter()
        .any(|r| *r == super::plan::route_of(recorded));
    if gone.is_empty() {
        // Not on the router any more: status may forget it; still held: keep it.
        return !held;
    }
    if ops::remove_routes(e, e.net, &router, &gone).await.is_err() {
        return false;
    }
    actions.push(Action::new(
        ActionKind::RouteRemoved,
        format!(
            "removed {} via {} from gateway router {gw}: no leg of this link holds that address any more",
            recorded.destination, recorded.nexthop
        ),
    ));
    true
}
