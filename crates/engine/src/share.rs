//! TransitNetworkShared, observe and act (cross-tenant only): the operator's own RBAC rules on
//! the transit network, a create when none shares it with the customer project, and the
//! customer's own look at the network when the create is refused or collides.

use bnerd_cloud::{ACCESS_AS_SHARED, ShareNetwork};

use super::context::{Customer, Engine, Side};
use super::model::{Action, ActionKind};
use super::plan::StepFail;
use super::plan::share::{
    AfterCreate, after_create, after_visibility, already_shared, list_failed, shared_message,
};

/// Share the network the link's leg stands on (the transit network, or a `PerCustomer` link's
/// customer transit) with the customer's project, or prove it already is. Runs at every
/// reconcile (self-healing a removed rule); writes nothing when one of the operator's rules is
/// in place. A rule it creates is reported in `actions`.
pub(crate) async fn ensure(
    e: &Engine<'_>,
    c: &Customer<'_>,
    actions: &mut Vec<Action>,
) -> Result<String, StepFail> {
    let network = e.leg_network().network_id.to_string();
    ensure_on(e, c, &network, false, actions).await
}

/// [`ensure`] on `network`, which a `PerCustomer` link's footing may share while its subnet is
/// cut. `made`: this reconcile made the network moments ago, under its project's lock, so no
/// rule can share it yet and there is nothing to read.
pub(crate) async fn ensure_on(
    e: &Engine<'_>,
    c: &Customer<'_>,
    network: &str,
    made: bool,
    actions: &mut Vec<Action>,
) -> Result<String, StepFail> {
    let project = c.project_id;
    if !made {
        let own = e
            .net
            .list_rbac_policies(network)
            .await
            .map_err(|err| list_failed(&err))?;
        if already_shared(&own, network, project) {
            return Ok(shared_message(network, project));
        }
    }
    let req = ShareNetwork {
        network_id: network.to_string(),
        action: ACCESS_AS_SHARED.into(),
        target_tenant: project.to_string(),
    };
    let created = e.net.create_rbac_policy(&req).await.map(|_| ());
    match after_create(created.as_ref().map(|_| ())) {
        AfterCreate::Shared => {
            if created.is_ok() {
                let which = match &e.side {
                    Side::PerCustomer(..) => "customer transit network",
                    Side::Operator | Side::Shared(_) => "transit network",
                };
                actions.push(Action::new(
                    ActionKind::TransitNetworkShared,
                    format!(
                        "shared {which} {network} with project {project} (RBAC access_as_shared)"
                    ),
                ));
            }
            Ok(shared_message(network, project))
        }
        AfterCreate::Failed(f) => Err(f),
        AfterCreate::CheckVisibility => {
            let seen = c.net.get_network(network).await.map(|_| ());
            after_visibility(seen.as_ref().map(|_| ()), network, project, c.secret)
        }
    }
}
