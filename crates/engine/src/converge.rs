//! The pipeline (docs/design.md, "The pipeline"): Validated, then one sequence of steps for
//! every shape of link, the steps only a `PerCustomer` link runs taken from `per_customer.rs`
//! by a `match` on the engine's side; and the cross-tenant reconcile and unwind that resolve
//! the customer's credential first. Callers outside the engine go through the door
//! (`door.rs`).
//!
//! One piece, over the usual size: the step order is the file, top to bottom, and the halves
//! a `PerCustomer` link runs side by side (`share_and_leg` beside the edge half) are joined
//! where that order needs them; apart, the order would have to be read across modules.
use bnerd_api::ConditionType;

use bnerd_api::{SecretRef, TransitIsolation};

use crate::context::{Engine, Side, Whose};
use crate::credentials::Customers;
use crate::model::{Action, ActionKind, Input, Outcome, Shape};
use crate::plan::unwind::UnwindPlan;
use crate::plan::{self, StepFail};
use crate::unwind::{self, unwind_gateway_route};
use crate::{
    credentials, customer_transit, gateway_route, leg, ops, report, reverse_routes, share,
};

impl Engine<'_> {
    /// Converge a same-tenant link. Never fails: every problem becomes a condition. A
    /// cross-tenant link comes here only when its caller has no way to its customer's
    /// credential (`plan` of a file, an engine made for same-tenant links): it builds nothing.
    pub(crate) async fn reconcile(&self, input: &Input<'_>) -> Outcome {
        let mut r = report::Report::new(input);
        let Some(valid) = validate(self.fabric, input, &mut r) else {
            withdraw_before_leg(self.net, self.fabric, input, &mut r).await;
            return r.finish();
        };
        match input.shape {
            Shape::SameTenant => self.converge(input, &valid, &mut r).await,
            Shape::CrossTenant { .. } => r.fail(
                ConditionType::Validated,
                plan::validated::customer_credential_missing(),
            ),
        }
        r.finish()
    }

    /// Every step after Validated (and, cross-tenant, after the credential): one sequence for
    /// every shape (docs/design.md, "The pipeline"). The customer transit is a step only a
    /// `PerCustomer` link runs; its routes and reverse routes add the edge router's to the
    /// same steps.
    async fn converge(
        &self,
        input: &Input<'_>,
        valid: &plan::validated::Valid,
        r: &mut report::Report,
    ) {
        if let Some(c) = self.customer() {
            // Pinned as soon as the credential resolves to spec.customerProjectID, before the share
            // is made: the decommission listing (status.customerProjectID) must see a link
            // that shared the network but never got its leg attached.
            r.status.customer_project_id = Some(c.project_id.to_string());
        }
        // The router first: a link whose router cannot be found builds and shares nothing.
        let found = match leg::resolve(self, input).await {
            Ok(found) => found,
            Err(f) => {
                self.withdraw_orphaned(input, r).await;
                r.fail(ConditionType::LegAttached, f);
                return;
            }
        };
        // A `PerCustomer` link's legs stand on its project's customer transit: found or built
        // here, under the project's lock. Its network, subnet and edge router first, the share
        // made as soon as the network is there (while the subnet is cut); the edge router's
        // two interfaces, which only the routes need, are made beside the leg.
        let _building;
        let on_footing;
        let mut footing = None;
        let mut early = Early {
            shared: None,
            fresh_network: false,
        };
        let e = match &self.side {
            Side::PerCustomer(c, None) => {
                _building = customer_transit::hold(c.project_id).await;
                let share = |n: customer_transit::NetworkKnown| async move {
                    let mut actions = vec![];
                    let shared = share::ensure_on(self, c, &n.id, n.made, &mut actions).await;
                    (shared, actions)
                };
                match crate::per_customer::footing(self, c, input, &found, share, r).await {
                    (Some(f), shared) => {
                        on_footing = self.on_customer_transit(c, f.transit.clone());
                        early = Early {
                            shared,
                            fresh_network: f.network_made,
                        };
                        footing = Some((c, f));
                        &on_footing
                    }
                    (None, shared) => {
                        // A share made before the footing failed is reported; the next
                        // reconcile finds it.
                        if let Some((_, actions)) = shared {
                            r.actions.extend(actions);
                        }
                        return;
                    }
                }
            }
            Side::Operator | Side::Shared(_) | Side::PerCustomer(_, Some(_)) => self,
        };
        let edge = async {
            match footing {
                Some((c, f)) => Some((c, crate::per_customer::edge(self, c, input, f).await)),
                None => None,
            }
        };
        let at = r.actions.len();
        let (edge, chain) = futures::join!(edge, share_and_leg(e, input, valid, found, early, r));
        let whole;
        let e = match edge {
            None => e,
            Some((c, Ok((t, built)))) => {
                // The customer transit's Event before the share's and the leg's, as when the
                // steps ran one after the other.
                r.actions.splice(at..at, built);
                crate::per_customer::record_transit(r, &t);
                whole = self.on_customer_transit(c, t);
                &whole
            }
            Some((_, Err(f))) => {
                // A leg made meanwhile is the link's by its UID: the next reconcile finds it.
                r.fail(ConditionType::TransitNetworkShared, f);
                return;
            }
        };
        let pass_share = |r: &mut report::Report, shared: Option<String>| {
            if let (Some(msg), Some(c)) = (shared, e.customer()) {
                let msg = match e.customer_transit() {
                    Some(t) => crate::per_customer::shared_message(t, c),
                    None => msg,
                };
                r.pass(ConditionType::TransitNetworkShared, msg);
            }
        };
        let mut leg = match chain {
            Ok((shared, leg)) => {
                pass_share(r, shared);
                leg
            }
            Err(Stop::Share(f)) => {
                r.fail(ConditionType::TransitNetworkShared, f);
                withdraw_before_leg(self.net, self.fabric, input, r).await;
                return;
            }
            Err(Stop::Leg(f, shared)) => {
                pass_share(r, shared);
                e.withdraw_orphaned(input, r).await;
                r.fail(ConditionType::LegAttached, f);
                return;
            }
        };
        leg::record(r, &leg, e.customer_transit().map(|t| t.network_id.as_str()));

        let routes = match e.customer_transit() {
            Some(t) => {
                crate::per_customer::routes(e, input, valid, &mut leg, t, &mut r.actions).await
            }
            None => gateway_route::ensure(e, input, valid, &leg, None, &mut r.actions)
                .await
                .map_err(|(f, route)| (e.named(f, Whose::Operator), route)),
        };
        match routes {
            Ok((msg, route)) => {
                r.status.gateway_route = Some(route);
                r.pass(ConditionType::RouteInstalled, msg);
            }
            Err((f, route)) => {
                r.status.gateway_route = route;
                r.fail(ConditionType::RouteInstalled, f);
            }
        }
        // Reverse routes do not depend on the forward route: a broken one never reads as the
        // forward path being down, and vice versa.
        match e.customer_transit() {
            Some(t) => crate::per_customer::reverse(e, input, &leg, t, r).await,
            None => e.reverse(input, &leg, r).await,
        }
    }

    /// After the leg step failed (or the router was not found): a recorded route via an
    /// address no leg of this link holds any more goes (Neutron may hand that address to
    /// another port). On the gateway router; for a `PerCustomer` link, whose gateway route
    /// goes via its project's edge leg, on the edge router, once its customer transit is known.
    async fn withdraw_orphaned(&self, input: &Input<'_>, r: &mut report::Report) {
        match &self.side {
            Side::Operator | Side::Shared(_) => {
                if gateway_route::withdraw_orphaned(self, input, &mut r.actions).await {
                    r.status.gateway_route = None;
                }
            }
            Side::PerCustomer(_, Some(t)) => {
                crate::per_customer::withdraw_orphaned(self, input, t, &mut r.actions).await;
            }
            Side::PerCustomer(_, None) => {}
        }
    }

    /// ReverseRoutesInstalled on the main transit: the service router's reverse routes via
    /// the gateways' ports on it.
    async fn reverse(&self, input: &Input<'_>, leg: &leg::Leg, r: &mut report::Report) {
        let rev = reverse_routes::ensure(
            self,
            input,
            leg,
            reverse_routes::Hop {
                via: None,
                transit_ports: &leg.ports,
            },
        )
        .await;
        if !rev.restored.is_empty() {
            let list: Vec<String> = rev
                .restored
                .iter()
                .map(|d| format!("{} via {}", d.service_cidr, d.next_hop))
                .collect();
            r.actions.push(Action::new(
                ActionKind::ReverseRouteRestored,
                format!("re-added {} on router {}", list.join(", "), leg.router_id),
            ));
        }
        r.status.reverse_routes = rev.installed;
        r.gateway_problems = rev.problems;
        match rev.verdict {
            Ok(msg) => r.pass(ConditionType::ReverseRoutesInstalled, msg),
            Err(f) => r.fail(
                ConditionType::ReverseRoutesInstalled,
                self.named(f, Whose::Customer),
            ),
        }
    }
}

/// A link that stops before its leg step (Validated, CredentialsResolved or
/// TransitNetworkShared failed) still has its recorded gateway route on the gateway router.
/// If no leg of the link holds that route's next hop any more, Neutron may hand the address
/// to another tenant's port: the route is withdrawn on the operator's credential (which
/// reads the transit network's ports whatever project holds them). Not after a missing
/// attestation: such a link makes no OpenStack call at all. Not for a `PerCustomer` link:
/// its gateway route goes via its project's edge leg, which no failure of one link frees.
async fn withdraw_before_leg(
    net: &dyn bnerd_cloud::Neutron,
    fabric: &bnerd_cloud::fabric::Fabric,
    input: &Input<'_>,
    r: &mut report::Report,
) {
    match input.shape {
        Shape::CrossTenant {
            isolation: TransitIsolation::PerCustomer,
            ..
        } => return,
        Shape::SameTenant
        | Shape::CrossTenant {
            isolation: TransitIsolation::Shared,
            ..
        } => {}
    }
    if input.status.gateway_route.is_none() {
        return;
    }
    let operator = Engine::same_tenant(net, fabric);
    if gateway_route::withdraw_orphaned(&operator, input, &mut r.actions).await {
        r.status.gateway_route = None;
    }
}

/// Validated, the first step of every link.
fn validate(
    fabric: &bnerd_cloud::fabric::Fabric,
    input: &Input<'_>,
    r: &mut report::Report,
) -> Option<plan::validated::Valid> {
    match plan::validated::plan(
        input.spec,
        fabric.transit_subnet,
        &fabric.admission.service_cidrs,
        fabric.customer_transit.map(|p| p.pool),
    ) {
        Ok(v) => {
            r.pass(ConditionType::Validated, plan::validated::valid_message());
            Some(v)
        }
        Err(f) => {
            r.fail(ConditionType::Validated, f);
            None
        }
    }
}

/// The "fixed 15s requeue" for most credential failures (docs/crd-reference.md, "When a link
/// is looked at again").
const CREDENTIALS_RETRY: std::time::Duration = std::time::Duration::from_secs(15);

/// Converge a cross-tenant link (docs/design.md, "A cross-tenant link"): Validated →
/// TenantIsolationAttested → CredentialsResolved → (router, TransitNetworkShared, leg) →
/// RouteInstalled → ReverseRoutesInstalled. Nothing touches OpenStack before the
/// attestation, and nothing changes before the credential is resolved.
pub(crate) async fn reconcile_cross_tenant(
    net: &dyn bnerd_cloud::Neutron,
    fabric: &bnerd_cloud::fabric::Fabric,
    customers: Customers<'_>,
    (secret_ref, isolation): (&SecretRef, TransitIsolation),
    input: &Input<'_>,
) -> Outcome {
    let Customers {
        source,
        operator,
        namespace: credentials_namespace,
    } = customers;
    let mut r = report::Report::new(input);
    let Some(valid) = validate(fabric, input, &mut r) else {
        withdraw_before_leg(net, fabric, input, &mut r).await;
        return r.finish();
    };
    match credentials::attestation(input, secret_ref, isolation) {
        Ok((reason, msg)) => r.pass_with(ConditionType::TenantIsolationAttested, reason, msg),
        Err(f) => {
            r.fail(ConditionType::TenantIsolationAttested, f);
            return r.finish();
        }
    }
    let resolved = match credentials::resolve(
        source,
        operator,
        credentials_namespace,
        input,
        secret_ref,
    )
    .await
    {
        Ok(c) => c,
        Err((f, q)) => {
            if q == plan::tenant::Requeue::Fixed15s {
                r.requeue_after(CREDENTIALS_RETRY);
            }
            r.fail(ConditionType::CredentialsResolved, f);
            withdraw_before_leg(net, fabric, input, &mut r).await;
            return r.finish();
        }
    };
    r.pass(ConditionType::CredentialsResolved, resolved.message.clone());
    r.probe_unavailable = resolved.probe_unavailable_now;
    let customer = resolved.customer();
    let engine = Engine {
        net,
        fabric,
        side: match isolation {
            TransitIsolation::Shared => Side::Shared(customer),
            TransitIsolation::PerCustomer => Side::PerCustomer(customer, None),
        },
    };
    match isolation {
        // Whether the project still holds a share of the main transit decides, again, what
        // its isolation is worth.
        TransitIsolation::PerCustomer => {
            crate::per_customer::isolation(&engine, &customer, secret_ref, input, &mut r).await;
        }
        TransitIsolation::Shared => {}
    }
    engine.converge(input, &valid, &mut r).await;
    r.finish()
}

/// A cross-tenant unwind that cannot reach, or clean up, the customer side.
#[derive(Debug)]
pub struct Held {
    /// The condition that says why: CredentialsResolved (CredentialsUnavailable or
    /// CredentialsProjectMismatch) when the credential does not resolve, Ready (Deleting) when
    /// it does but the customer side refuses its unwind.
    pub condition: ConditionType,
    pub fail: StepFail,
    /// Whether the gateway route went (it is removed first, always).
    pub gateway_route: Result<(), StepFail>,
}

impl Held {
    /// Whether the abandon annotation on `link` releases this held deletion (the controller
    /// releases it; `plan` says it would).
    pub fn released_by(&self, link: &bnerd_api::ClusterLink) -> bool {
        let annotation = link
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(bnerd_api::names::ANNOTATION_ABANDON))
            .map(String::as_str);
        plan::unwind::may_abandon(annotation, self.gateway_route.is_ok())
    }
}

/// Delete a cross-tenant link (docs/design.md, "The unwind order"): the
/// gateway route on the operator's credential first, always; then, when the link never built
/// anything on the customer side, nothing more (no customer call); otherwise the customer
/// side only with a credential that resolves to the project the leg was built in and the one
/// the link names, and only on an attested link.
pub(crate) async fn unwind_cross_tenant(
    net: &dyn bnerd_cloud::Neutron,
    fabric: &bnerd_cloud::fabric::Fabric,
    customers: Customers<'_>,
    (secret_ref, isolation): (&SecretRef, TransitIsolation),
    input: &Input<'_>,
    targets: &[bnerd_api::gateway::ReverseTarget],
) -> Result<Result<UnwindPlan, StepFail>, Held> {
    let Customers {
        source,
        operator,
        namespace: credentials_namespace,
    } = customers;
    let base = Engine::same_tenant(net, fabric);
    let gateway_route = unwind_gateway_route(&base, input).await;
    // A PerCustomer link's legs stand on its project's customer transit, not on the transit
    // network the look above listed.
    let per_customer = match isolation {
        TransitIsolation::PerCustomer => input.spec.customer_project_id.as_deref(),
        TransitIsolation::Shared => None,
    };
    // Looked up once: what decides the customer side below is what its unwind then works on.
    let mut looked = match (per_customer, &gateway_route) {
        (Some(p), Ok(_)) => crate::per_customer::legs(&base, input, p).await.ok(),
        (Some(_), Err(_)) | (None, _) => None,
    };
    let legs_in_cloud = match (per_customer, &gateway_route) {
        (Some(_), Ok(_)) => looked.as_ref().map(|l| l.own.len()),
        (None, Ok(legs)) => Some(legs.len()),
        (_, Err(_)) => None,
    };
    let gateway_route = gateway_route.map(|_| ());
    let side = plan::unwind::customer_unwind(
        credentials::attestation(input, secret_ref, isolation).map(|_| ()),
        input.status.leg_port_id.is_some(),
        legs_in_cloud,
    );
    let held = |fail: &StepFail, gateway_route| Held {
        condition: ConditionType::CredentialsResolved,
        fail: plan::tenant::unavailable(fail),
        gateway_route,
    };
    match side {
        plan::unwind::CustomerUnwind::NothingBuilt => {
            // Nothing of the link's on the customer side; the customer transit it may have
            // built is the operator's to take down.
            let actions = match per_customer {
                Some(p) => match crate::per_customer::release(&base, p).await {
                    Ok(actions) => actions,
                    Err(f) => return Ok(Err(f)),
                },
                None => vec![],
            };
            return Ok(Ok(UnwindPlan {
                actions,
                ..Default::default()
            }));
        }
        plan::unwind::CustomerUnwind::NotAttested(f) => return Err(held(&f, gateway_route)),
        plan::unwind::CustomerUnwind::Resolve => {}
    }
    let resolved =
        credentials::resolve(source, operator, credentials_namespace, input, secret_ref).await;
    let resolved = match resolved {
        Ok(r) => r,
        Err((f, _)) => {
            if let Some(p) = per_customer {
                crate::per_customer::cut_operator_side(&base, input, p, looked.take()).await;
            }
            return Err(held(&f, gateway_route));
        }
    };
    let customer = resolved.customer();
    let unwound = match isolation {
        TransitIsolation::Shared => {
            let engine = Engine {
                net,
                fabric,
                side: Side::Shared(customer),
            };
            unwind::unwind_rounds(&engine, input, targets).await
        }
        TransitIsolation::PerCustomer => {
            let engine = Engine {
                net,
                fabric,
                side: Side::PerCustomer(customer, None),
            };
            crate::per_customer::unwind(&engine, &customer, looked.take(), input, targets).await
        }
    };
    match unwound {
        Ok(done) => Ok(Ok(done)),
        // The gateway route went in that same round, before the customer side refused.
        Err(s) if s.customer_refused => {
            if let Some(p) = per_customer {
                // The look before the unwind is stale now: the unwind removed what it could.
                crate::per_customer::cut_operator_side(&base, input, p, None).await;
            }
            Err(Held {
                condition: ConditionType::Ready,
                fail: s.fail,
                gateway_route: Ok(()),
            })
        }
        Err(s) => Ok(Err(s.fail)),
    }
}

/// Where the share-and-leg half of the pipeline stopped.
enum Stop {
    Share(plan::StepFail),
    /// The leg failed after the share (its message, when there was one) was made.
    Leg(plan::StepFail, Option<String>),
}

/// What a `PerCustomer` link's footing already did for the share and the leg.
struct Early {
    /// The share, made beside the subnet, with its actions.
    shared: Option<(Result<String, plan::StepFail>, Vec<Action>)>,
    /// The customer transit is this reconcile's: no port stands on it yet but what this
    /// reconcile makes.
    fresh_network: bool,
}

/// The share (cross-tenant: the customer may only create a port on a network shared with its
/// project) and the leg, after the router was found. The share's message when there is one,
/// and the leg.
async fn share_and_leg(
    e: &Engine<'_>,
    input: &Input<'_>,
    valid: &plan::validated::Valid,
    found: leg::FoundRouter,
    early: Early,
    r: &mut report::Report,
) -> Result<(Option<String>, leg::Leg), Stop> {
    let mut shared = None;
    if let Some(c) = e.customer() {
        let made = match early.shared {
            Some((made, actions)) => {
                r.actions.extend(actions);
                made
            }
            None => share::ensure(e, c, &mut r.actions).await,
        };
        shared = Some(made.map_err(Stop::Share)?);
    }
    let found = match e.customer_transit() {
        Some(_) if early.fresh_network => Ok(found.with_ports(vec![])),
        // The router's read saw the main transit's ports; the leg stands on the customer
        // transit's.
        Some(_) => match ops::leg_network_ports(e).await {
            Ok(ports) => Ok(found.with_ports(ports)),
            Err(err) => Err(e.named(
                plan::leg::call_failed(plan::leg::LegCall::ListPorts, &err),
                Whose::Operator,
            )),
        },
        None => Ok(found),
    };
    let leg = match found {
        Ok(found) => leg::ensure(e, input, valid, found, &mut r.actions).await,
        Err(f) => Err(f),
    };
    match leg {
        Ok(leg) => Ok((shared, leg)),
        Err(f) => Err(Stop::Leg(f, shared)),
    }
}
