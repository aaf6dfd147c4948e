//! Deleting a ClusterLink: the gateway route, then reverse routes and the router
//! attachment, then the leg port. Only what status or tags prove is ours is touched.

use bnerd_api::Reason;
use bnerd_cloud::{CloudError, Port, Route};

use super::report::Report;
use super::routes::{remove_routes, route};
use super::{Engine, Input, StepFail};

/// Gone already counts as done.
fn done_if_gone(r: Result<(), CloudError>) -> Result<(), CloudError> {
    match r {
        Err(e) if e.is_not_found() => Ok(()),
        other => other,
    }
}

/// Remove this link's route(s) from the gateway router: the recorded one, and the one the
/// spec asks for if it points at our own leg's address (a crash may have kept it out of status).
async fn remove_gateway_routes(
    e: &Engine<'_>,
    input: &Input<'_>,
    leg_ip: Option<&str>,
) -> Result<(), CloudError> {
    let gw = &e.fabric.gateway_router_id;
    let router = match e.net.get_router(gw).await {
        Ok(r) => r,
        Err(err) if err.is_not_found() => return Ok(()),
        Err(err) => return Err(err),
    };
    let mut ours: Vec<Route> = input.status.gateway_route.iter().map(route).collect();
    if let Some(ip) = leg_ip.or(input.status.transit_ip.as_deref()) {
        ours.push(Route::new(&input.spec.service_cluster_cidr, ip));
    }
    let present: Vec<Route> = router
        .routes
        .iter()
        .filter(|x| ours.contains(x))
        .cloned()
        .collect();
    if present.is_empty() {
        return Ok(());
    }
    done_if_gone(remove_routes(e, &router, &present).await)
}

/// Remove reverse routes, detach the port (Neutron deletes it with the detach) and delete
/// it if it survived. Used by delete and by a spec change that moves the leg.
pub(crate) async fn unwind_leg(
    e: &Engine<'_>,
    input: &Input<'_>,
    port: &Port,
    r: &mut Report,
) -> Result<(), StepFail> {
    let fail = |ctx: &str, err: &CloudError| StepFail::cloud(Reason::EnsureLegPortFailed, ctx, err);
    // A moved leg may change its address: the gateway route via the old one must go first.
    remove_gateway_routes(e, input, port.first_ip())
        .await
        .map_err(|err| fail("removing gateway route before moving the leg", &err))?;
    r.status.gateway_route = None;
    unwind_port(e, input, port)
        .await
        .map_err(|err| fail(&format!("removing leg port {}", port.id), &err))?;
    r.status.reverse_routes.clear();
    r.status.leg_port_id = None;
    r.status.transit_ip = None;
    r.status.service_router_id = None;
    Ok(())
}

async fn unwind_port(e: &Engine<'_>, input: &Input<'_>, port: &Port) -> Result<(), CloudError> {
    if !port.device_id.is_empty() && port.device_owner.starts_with("network:router_interface") {
        let rid = &port.device_id;
        if !input.status.reverse_routes.is_empty() {
            match e.net.get_router(rid).await {
                Ok(router) => {
                    let ours: Vec<Route> = input
                        .status
                        .reverse_routes
                        .iter()
                        .map(|x| Route::new(&x.service_cidr, &x.next_hop))
                        .filter(|x| router.routes.contains(x))
                        .collect();
                    if !ours.is_empty() {
                        done_if_gone(remove_routes(e, &router, &ours).await)?;
                    }
                }
                Err(err) if err.is_not_found() => {}
                Err(err) => return Err(err),
            }
        }
        match e.net.remove_router_interface(rid, &port.id).await {
            Ok(()) => return Ok(()),
            Err(err) if err.is_not_found() => {}
            Err(err) => return Err(err),
        }
    }
    done_if_gone(e.net.delete_port(&port.id).await)
}

/// The whole unwind for a deleted link. `Ok` means nothing of ours is left in the cloud.
pub async fn cleanup(e: &Engine<'_>, input: &Input<'_>) -> Result<(), CloudError> {
    let (leg, _) = super::leg::find_own(e, input).await?;
    remove_gateway_routes(e, input, leg.as_ref().and_then(|p| p.first_ip())).await?;
    if let Some(port) = leg {
        unwind_port(e, input, &port).await?;
    }
    Ok(())
}
