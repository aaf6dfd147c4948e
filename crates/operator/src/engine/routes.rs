//! RouteInstalled (the gateway router's route to the service CIDR) and
//! ReverseRoutesInstalled (the service router's routes back to reverse-exposure gateways).

use bnerd_api::{GatewayRef, Reason, ReverseRoute, RouteRecord};
use bnerd_cloud::{CloudError, Route, Router};

use super::report::Report;
use super::validate::Valid;
use super::{Engine, Input, Leg, StepFail};

/// Retries of a read-modify-write of the route table when another writer got in between.
const IF_MATCH_RETRIES: usize = 3;

pub(crate) fn record(r: &Route) -> RouteRecord {
    RouteRecord {
        destination: r.destination.clone(),
        nexthop: r.nexthop.clone(),
    }
}

pub(crate) fn route(r: &RouteRecord) -> Route {
    Route::new(&r.destination, &r.nexthop)
}

/// Add routes without touching anyone else's: extraroute-atomic when loaded, else a
/// GET + PUT guarded by If-Match on the revision, retried on a lost race.
pub(crate) async fn add_routes(
    e: &Engine<'_>,
    router: &Router,
    add: &[Route],
) -> Result<(), CloudError> {
    if e.fabric.extraroute_atomic {
        return e.net.add_extraroutes(&router.id, add).await.map(|_| ());
    }
    edit_table(e, router, |routes| {
        for a in add {
            if !routes.contains(a) {
                routes.push(a.clone());
            }
        }
    })
    .await
}

pub(crate) async fn remove_routes(
    e: &Engine<'_>,
    router: &Router,
    remove: &[Route],
) -> Result<(), CloudError> {
    if e.fabric.extraroute_atomic {
        return e
            .net
            .remove_extraroutes(&router.id, remove)
            .await
            .map(|_| ());
    }
    edit_table(e, router, |routes| routes.retain(|r| !remove.contains(r))).await
}

async fn edit_table(
    e: &Engine<'_>,
    router: &Router,
    edit: impl Fn(&mut Vec<Route>),
) -> Result<(), CloudError> {
    let mut current = router.clone();
    let mut attempt = 0;
    loop {
        let mut next = current.routes.clone();
        edit(&mut next);
        if next == current.routes {
            return Ok(());
        }
        match e
            .net
            .set_routes(&current.id, &next, Some(current.revision_number))
            .await
        {
            Ok(_) => return Ok(()),
            Err(err) if err.status() == Some(412) && attempt < IF_MATCH_RETRIES => {
                attempt += 1;
                current = e.net.get_router(&current.id).await?;
            }
            Err(err) => return Err(err),
        }
    }
}

/// Whether an overlapping peer outranks us for the same addresses: an installed route wins,
/// then the older link, then the name.
fn overlap_winner<'p>(input: &'p Input<'_>, valid: &Valid) -> Option<&'p super::Peer> {
    let we_installed = input.status.gateway_route.is_some();
    let me = (!we_installed, input.created.as_str(), input.name);
    input.peers.iter().find(|p| {
        p.cidr
            .is_some_and(|c| bnerd_api::cidr::overlaps(c, valid.cidr))
            && (!p.route_installed, p.created.as_str(), p.name.as_str()) < me
    })
}

/// The router as this reconcile already read it, else read now.
async fn current(e: &Engine<'_>, seen: &Option<Router>, id: &str) -> Result<Router, CloudError> {
    match seen {
        Some(r) => Ok(r.clone()),
        None => e.net.get_router(id).await,
    }
}

pub(crate) async fn ensure_gateway_route(
    e: &Engine<'_>,
    input: &Input<'_>,
    valid: &Valid,
    leg: &Leg,
    r: &mut Report,
) -> Result<String, StepFail> {
    let want = Route::new(valid.cidr.to_string(), leg.ip.to_string());
    let gw = &e.fabric.gateway_router_id;
    let router = current(e, &leg.seen.gateway, gw).await.map_err(|err| {
        StepFail::cloud(
            Reason::EnsureRouteFailed,
            &format!("reading gateway router {gw}"),
            &err,
        )
    })?;

    // An old route of ours that the spec no longer wants goes first (status proves it ours).
    let stale: Vec<Route> = input
        .status
        .gateway_route
        .iter()
        .map(route)
        .filter(|old| *old != want && router.routes.contains(old))
        .collect();
    let conflict = overlap_winner(input, valid).map(|p| p.name.clone());
    if !stale.is_empty() || conflict.is_some() {
        let drop: Vec<Route> = if conflict.is_some() {
            // Losing an overlap also means giving up our own copy of the route.
            router
                .routes
                .iter()
                .filter(|x| input.status.gateway_route.iter().any(|g| route(g) == **x))
                .cloned()
                .collect()
        } else {
            stale
        };
        if !drop.is_empty() {
            remove_routes(e, &router, &drop).await.map_err(|err| {
                StepFail::cloud(
                    Reason::EnsureRouteFailed,
                    &format!("removing old route from gateway router {gw}"),
                    &err,
                )
            })?;
            r.action(
                "RouteRemoved",
                format!("removed {} route(s) from gateway router {gw}", drop.len()),
            );
        }
        r.status.gateway_route = None;
        if let Some(peer) = conflict {
            return Err(StepFail::terminal(
                Reason::CIDROverlap,
                format!(
                    "spec.serviceClusterCIDR {} overlaps the CIDR of ClusterLink {peer}, which holds the route",
                    valid.cidr
                ),
            ));
        }
        if router.routes.contains(&want) {
            r.status.gateway_route = Some(record(&want));
            return Ok(format!(
                "{} via {} on gateway router {gw}",
                want.destination, want.nexthop
            ));
        }
    }

    if let Some(foreign) = router
        .routes
        .iter()
        .find(|x| x.destination == want.destination && x.nexthop != want.nexthop)
    {
        return Err(StepFail::terminal(
            Reason::RouteConflict,
            format!(
                "gateway router {gw} already routes {} via {}, which this link does not own; remove that route or change spec.serviceClusterCIDR",
                foreign.destination, foreign.nexthop
            ),
        ));
    }
    if !router.routes.contains(&want) {
        add_routes(e, &router, std::slice::from_ref(&want))
            .await
            .map_err(|err| {
                StepFail::cloud(
                    Reason::EnsureRouteFailed,
                    &format!("adding route to gateway router {gw}"),
                    &err,
                )
            })?;
        r.action(
            "RouteInstalled",
            format!(
                "{} via {} on gateway router {gw}",
                want.destination, want.nexthop
            ),
        );
    }
    r.status.gateway_route = Some(record(&want));
    Ok(format!(
        "{} via {} on gateway router {gw}",
        want.destination, want.nexthop
    ))
}

pub(crate) async fn ensure_reverse_routes(
    e: &Engine<'_>,
    input: &Input<'_>,
    leg: &Leg,
    r: &mut Report,
) -> Result<String, StepFail> {
    let desired: Vec<ReverseRoute> = input
        .reverse_targets
        .iter()
        .map(|t| ReverseRoute {
            service_cidr: t.service_cidr.clone(),
            next_hop: t.port_fixed_ip.clone(),
            gateway_ref: t.gateway.clone(),
        })
        .collect();
    let owned = &input.status.reverse_routes;
    if desired.is_empty() && owned.is_empty() {
        return Ok("no gateway in the estate has reverse exposures".into());
    }
    let fail =
        |ctx: &str, err: &CloudError| StepFail::cloud(Reason::EnsureReverseRoutesFailed, ctx, err);
    let router = current(e, &leg.seen.service, &leg.router_id)
        .await
        .map_err(|err| fail(&format!("reading router {}", leg.router_id), &err))?;
    let as_route = |x: &ReverseRoute| Route::new(&x.service_cidr, &x.next_hop);

    let stale: Vec<Route> = owned
        .iter()
        .filter(|o| !desired.iter().any(|d| as_route(d) == as_route(o)))
        .map(as_route)
        .filter(|x| router.routes.contains(x))
        .collect();
    if !stale.is_empty() {
        remove_routes(e, &router, &stale).await.map_err(|err| {
            fail(
                &format!("removing stale reverse routes from {}", leg.router_id),
                &err,
            )
        })?;
    }
    let mut installed: Vec<ReverseRoute> = vec![];
    let mut problems: Vec<String> = vec![];
    let mut add: Vec<(Route, ReverseRoute)> = vec![];
    for d in &desired {
        let want = as_route(d);
        if router.routes.contains(&want) {
            installed.push(d.clone());
        } else if let Some(f) = router
            .routes
            .iter()
            .find(|x| x.destination == want.destination)
        {
            problems.push(format!(
                "{} (gateway {}) is already routed via {} on router {}",
                want.destination,
                gw_name(&d.gateway_ref),
                f.nexthop,
                leg.router_id
            ));
        } else {
            add.push((want, d.clone()));
        }
    }
    if !add.is_empty() {
        let routes: Vec<Route> = add.iter().map(|(x, _)| x.clone()).collect();
        match add_routes(e, &router, &routes).await {
            Ok(()) => installed.extend(add.into_iter().map(|(_, d)| d)),
            Err(err) => {
                r.status.reverse_routes = installed;
                return Err(fail(
                    &format!("adding reverse routes to router {}", leg.router_id),
                    &err,
                ));
            }
        }
    }
    installed.sort();
    r.status.reverse_routes = installed;
    if problems.is_empty() {
        Ok(format!(
            "{} reverse route(s) on router {}",
            r.status.reverse_routes.len(),
            leg.router_id
        ))
    } else {
        Err(StepFail::terminal(
            Reason::EnsureReverseRoutesFailed,
            problems.join("; "),
        ))
    }
}

fn gw_name(g: &GatewayRef) -> String {
    format!("{}/{}/{}", g.kind, g.namespace, g.name)
}
