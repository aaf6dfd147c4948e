//! Deleting a ClusterLink, observe and act: list the transit network and the gateway router,
//! let `plan::unwind` say what is ours, then remove it in the unwind order (docs/design.md,
//! "The unwind order").

use bnerd_api::gateway::ReverseTarget;

use super::context::Engine;
use super::model::Input;
use super::ops;
use super::plan::StepFail;
use super::plan::unwind::{
    UnwindError, UnwindPlan, UnwindView, customer_refused, deleting, plan, refused_for_good,
    unsettled,
};

fn cloud(context: &str) -> impl FnOnce(bnerd_cloud::CloudError) -> StepFail + '_ {
    move |error| {
        deleting(&UnwindError::Cloud {
            context: context.to_string(),
            error,
        })
    }
}

/// Look-and-remove rounds of one unwind. Two suffice for a writer that had not seen the
/// delete yet (a second replica without leader election, a stale cache): it may add a leg or
/// a route between this unwind's look and its removal, and the next look finds it; more
/// rounds than this means something keeps adding them.
const MAX_ROUNDS: usize = 3;

/// The whole unwind for a deleted link. `Ok` carries what was removed (for the Event); `Err`
/// is Ready=False/Deleting naming what is in the way. It ends only when a fresh look finds
/// nothing of the link's left (crash-point finding: a reconcile racing the delete re-added
/// the gateway route after the unwind's only look, via an address no port held any more).
pub async fn unwind(
    e: &Engine<'_>,
    input: &Input<'_>,
    targets: &[ReverseTarget],
) -> Result<UnwindPlan, StepFail> {
    unwind_rounds(e, input, targets).await.map_err(|f| f.fail)
}

/// Why an unwind stopped.
pub(crate) struct Stopped {
    pub fail: StepFail,
    /// The customer side refused a call in a way retrying will not clear, after the gateway
    /// route went (the abandon annotation may release such a link).
    pub customer_refused: bool,
}

pub(crate) async fn unwind_rounds(
    e: &Engine<'_>,
    input: &Input<'_>,
    targets: &[ReverseTarget],
) -> Result<UnwindPlan, Stopped> {
    let mut done = UnwindPlan::default();
    for _ in 0..MAX_ROUNDS {
        let p = unwind_round(e, input, targets).await?;
        if p.is_empty() {
            return Ok(done);
        }
        done.gateway_remove.extend(p.gateway_remove);
        done.legs.extend(p.legs);
    }
    Err(Stopped {
        fail: unsettled(MAX_ROUNDS),
        customer_refused: false,
    })
}

fn stopped(fail: StepFail) -> Stopped {
    Stopped {
        fail,
        customer_refused: false,
    }
}

/// One look at the transit network and the gateway router, and the removal of what it found.
async fn unwind_round(
    e: &Engine<'_>,
    input: &Input<'_>,
    targets: &[ReverseTarget],
) -> Result<UnwindPlan, Stopped> {
    let (p, ports) = look_and_cut(e, input).await.map_err(stopped)?;
    let own: Vec<std::net::Ipv4Addr> = p
        .legs
        .iter()
        .filter_map(|l| l.first_ip()?.parse().ok())
        .collect();
    let (screened, _) = crate::screen::screened(e, input, targets, &ports, &own);
    for leg in &p.legs {
        // Every call here is on the leg's side: the customer's credential on a cross-tenant
        // link, and the gateway routes above are gone by now.
        ops::unwind_port(e, leg, None, &screened, &input.status.reverse_routes)
            .await
            .map_err(|u| match e.customer() {
                Some(c) if refused_for_good(&u) => Stopped {
                    fail: customer_refused(c.secret, &u),
                    customer_refused: true,
                },
                _ => stopped(deleting(&u)),
            })?;
    }
    Ok(p)
}

/// Only this link's gateway-router routes, on the operator's credential: the first step of
/// every unwind, so the data path is cut whatever state the customer's credential is in
/// (docs/crd-reference.md, "Deletion"). `Ok` carries the link's legs the same look found on the transit network
/// (whatever project they are in: the operator owns the network and sees every port).
pub async fn unwind_gateway_route(
    e: &Engine<'_>,
    input: &Input<'_>,
) -> Result<Vec<bnerd_cloud::Port>, StepFail> {
    Ok(look_and_cut(e, input).await?.0.legs)
}

/// The look both start with, and the cut: list the transit network and read the gateway
/// router, let `plan::unwind` say what is the link's, and remove its gateway routes first (they
/// cut the data path). The plan names the legs still to go.
async fn look_and_cut(
    e: &Engine<'_>,
    input: &Input<'_>,
) -> Result<(UnwindPlan, Vec<bnerd_cloud::Port>), StepFail> {
    let ports = ops::leg_network_ports(e)
        .await
        .map_err(cloud("listing transit ports"))?;
    let gw_id = &e.fabric.gateway_router_id;
    let gateway_router = match e.net.get_router(gw_id).await {
        Ok(r) => Some(r),
        Err(err) if err.is_not_found() => None,
        Err(err) => return Err(cloud("reading the gateway router")(err)),
    };
    let p = plan(&UnwindView {
        uid: input.uid,
        project: e.leg_project(input),
        ports: &ports,
        gateway_routes: gateway_router
            .as_ref()
            .map(|g| g.routes.as_slice())
            .unwrap_or(&[]),
        recorded: input.status.gateway_route.as_ref(),
        recorded_ip: input.status.transit_ip.as_deref(),
        spec_cidr: &input.spec.service_cluster_cidr,
    });
    if let Some(g) = &gateway_router {
        ops::remove_routes(e, e.net, g, &p.gateway_remove)
            .await
            .map_err(cloud("removing this link's routes from the gateway router"))?;
    }
    Ok((p, ports))
}
