//! One link's engine value ([`Engine`]: the operator's credential, the fabric, and a
//! cross-tenant link's resolved customer side) and what it runs: Validated, then every step in
//! the spec's order (docs/design.md, "The reconcile order"), and the cross-tenant reconcile and
//! unwind that resolve the customer's credential first. Callers outside the engine go through
//! the door (`door.rs`).

use bnerd_api::ConditionType;
use bnerd_cloud::Neutron;
use bnerd_cloud::fabric::Fabric;

use crate::customer_transit::CustomerTransit;
use crate::door::Customers;
use crate::model::{Action, ActionKind, Input, Outcome};
use crate::plan::share::Credential;
use crate::plan::unwind::UnwindPlan;
use crate::plan::{self, StepFail};
use crate::unwind::{self, unwind, unwind_gateway_route};
use crate::{credentials, gateway_route, leg, report, reverse_routes, share};

/// The cloud side of the operator: one Neutron credential and the fabric it serves.
pub struct Engine<'a> {
    /// The operator's credential: the transit network, the gateway router, RBAC shares.
    pub net: &'a dyn Neutron,
    pub fabric: &'a Fabric,
    /// A cross-tenant link's customer credential: its router, leg port and reverse routes.
    pub customer: Option<Customer<'a>>,
    /// A `PerCustomer` link's customer transit, once found or built: its legs stand there.
    pub(crate) customer_transit: Option<CustomerTransit>,
}

/// The network a link's legs stand on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LegNetwork<'a> {
    pub network_id: &'a str,
    pub subnet_id: &'a str,
    pub subnet: ipnet::Ipv4Net,
}

/// The customer side of a cross-tenant link, once its credential is resolved.
pub struct Customer<'a> {
    pub net: &'a dyn Neutron,
    /// The project the credential authenticates into.
    pub project_id: &'a str,
    /// `<ns>/<name>` of the Secret it came from, for messages.
    pub secret: &'a str,
}

impl<'a> Engine<'a> {
    /// A same-tenant link: one credential for everything.
    pub fn same_tenant(net: &'a dyn Neutron, fabric: &'a Fabric) -> Self {
        Self {
            net,
            fabric,
            customer: None,
            customer_transit: None,
        }
    }

    /// A cross-tenant link whose customer credential is already resolved.
    pub fn cross_tenant(net: &'a dyn Neutron, fabric: &'a Fabric, customer: Customer<'a>) -> Self {
        Self {
            net,
            fabric,
            customer: Some(customer),
            customer_transit: None,
        }
    }

    /// The operator's router that routes via the leg: the gateway router, or a `PerCustomer`
    /// link's edge router.
    pub(crate) fn leg_router(&self) -> &str {
        match &self.customer_transit {
            Some(t) => &t.edge_router_id,
            None => &self.fabric.gateway_router_id,
        }
    }

    /// The main transit network, or a `PerCustomer` link's customer transit.
    pub(crate) fn leg_network(&self) -> LegNetwork<'_> {
        match &self.customer_transit {
            Some(t) => LegNetwork {
                network_id: &t.network_id,
                subnet_id: &t.subnet_id,
                subnet: t.cidr,
            },
            None => LegNetwork {
                network_id: &self.fabric.transit_network_id,
                subnet_id: &self.fabric.transit_subnet_id,
                subnet: self.fabric.transit_subnet,
            },
        }
    }

    /// A cross-tenant link's failure messages say which credential failed: the operator's
    /// (gateway route) or the customer's (its router's reverse routes). A same-tenant link's
    /// read as they always did.
    pub(crate) fn named(&self, f: StepFail, customer_side: bool) -> StepFail {
        let Some(c) = &self.customer else {
            return f;
        };
        let who = if customer_side {
            Credential::Customer(c.secret)
        } else {
            Credential::Operator
        };
        StepFail {
            message: format!("{}{}", who.prefix(), f.message),
            ..f
        }
    }

    /// The project this link's leg must belong to (`plan::leg::leg_project`).
    pub(crate) fn leg_project<'i>(&'i self, input: &'i super::model::Input<'_>) -> Option<&'i str> {
        super::plan::leg::leg_project(input.spec, input.status, &self.fabric.operator_project_id)
    }

    /// The credential of the leg's side: the service router, the leg port, reverse routes.
    pub fn leg_net(&self) -> &'a dyn Neutron {
        match &self.customer {
            Some(c) => c.net,
            None => self.net,
        }
    }
}

impl Engine<'_> {
    /// Converge one link. Never fails: every problem becomes a condition. A cross-tenant
    /// link needs its customer's credential: through [`reconcile_cross_tenant`], or already
    /// resolved in `customer`.
    pub async fn reconcile(&self, input: &Input<'_>) -> Outcome {
        let mut r = report::Report::new(input);
        let Some(valid) = validate(self.fabric, input, &mut r) else {
            withdraw_before_leg(self.net, self.fabric, input, &mut r).await;
            return r.finish();
        };
        if input.spec.credentials_secret_ref.is_some() && self.customer.is_none() {
            r.fail(
                ConditionType::Validated,
                plan::validated::customer_credential_missing(),
            );
            return r.finish();
        }
        self.converge(input, &valid, &mut r).await;
        r.finish()
    }

    /// Every step after Validated (and, cross-tenant, after the credential).
    async fn converge(
        &self,
        input: &Input<'_>,
        valid: &plan::validated::Valid,
        r: &mut report::Report,
    ) {
        if let Some(c) = &self.customer {
            // Pinned as soon as the credential resolves to the spec's project, before the share
            // is made: the decommission listing (status.customerProjectID) must see a link
            // that shared the network but never got its leg attached.
            r.status.customer_project_id = Some(c.project_id.to_string());
        }
        let leg = match leg::resolve(self, input).await {
            Ok(resolved) => {
                if let Some(c) = &self.customer {
                    // After the router is found, before the leg: the customer may only create
                    // a port on the transit network once it is shared with its project.
                    match share::ensure(self, c, &mut r.actions).await {
                        Ok(msg) => r.pass(ConditionType::TransitNetworkShared, msg),
                        Err(f) => {
                            r.fail(ConditionType::TransitNetworkShared, f);
                            withdraw_before_leg(self.net, self.fabric, input, r).await;
                            return;
                        }
                    }
                }
                leg::ensure(self, input, valid, resolved, &mut r.actions).await
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
                return;
            }
        };
        record_leg(r, &leg, None);

        match gateway_route::ensure(self, input, valid, &leg, None, &mut r.actions).await {
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
        let rev = reverse_routes::ensure(
            self,
            input,
            &leg,
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
            Err(f) => r.fail(ConditionType::ReverseRoutesInstalled, self.named(f, true)),
        }
    }
}

/// LegAttached=True and what status records of the leg; `on`: the customer transit network a
/// `PerCustomer` link's leg stands on.
pub(crate) fn record_leg(r: &mut report::Report, leg: &leg::Leg, on: Option<&str>) {
    r.status.leg_port_id = Some(leg.port_id.clone());
    r.status.transit_ip = Some(leg.ip.to_string());
    r.status.service_router_id = Some(leg.router_id.clone());
    let on = on
        .map(|n| format!(" on customer transit network {n}"))
        .unwrap_or_default();
    r.pass(
        ConditionType::LegAttached,
        format!(
            "leg port {} at {}{on} attached to router {}",
            leg.port_id, leg.ip, leg.router_id
        ),
    );
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
    if input.spec.per_customer() || input.status.gateway_route.is_none() {
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
pub async fn reconcile_cross_tenant(
    net: &dyn bnerd_cloud::Neutron,
    fabric: &bnerd_cloud::fabric::Fabric,
    customers: Customers<'_>,
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
    let Some(secret_ref) = input.spec.credentials_secret_ref.as_ref() else {
        return Engine::same_tenant(net, fabric).reconcile(input).await;
    };
    match credentials::attestation(input, secret_ref) {
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
    let engine = Engine {
        net,
        fabric,
        customer: Some(resolved.customer()),
        customer_transit: None,
    };
    match &engine.customer {
        Some(c) if input.spec.per_customer() => {
            crate::per_customer::converge(&engine, c, input, &valid, &mut r).await;
        }
        _ => engine.converge(input, &valid, &mut r).await,
    }
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
pub async fn unwind_cross_tenant(
    net: &dyn bnerd_cloud::Neutron,
    fabric: &bnerd_cloud::fabric::Fabric,
    customers: Customers<'_>,
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
    let Some(secret_ref) = input.spec.credentials_secret_ref.as_ref() else {
        return Ok(unwind(&base, input, targets).await);
    };
    // A PerCustomer link's legs stand on its project's customer transit, not on the transit
    // network the look above listed.
    let per_customer = input
        .spec
        .customer_project_id
        .as_deref()
        .filter(|_| input.spec.per_customer());
    let legs_in_cloud = match (per_customer, &gateway_route) {
        (Some(p), Ok(_)) => crate::per_customer::legs(&base, input, p)
            .await
            .ok()
            .map(|(_, own)| own.len()),
        (None, Ok(legs)) => Some(legs.len()),
        (_, Err(_)) => None,
    };
    let gateway_route = gateway_route.map(|_| ());
    let side = plan::unwind::customer_side(
        credentials::attestation(input, secret_ref).map(|_| ()),
        input.status.leg_port_id.is_some(),
        legs_in_cloud,
    );
    let held = |fail: &StepFail, gateway_route| Held {
        condition: ConditionType::CredentialsResolved,
        fail: plan::tenant::unavailable(fail),
        gateway_route,
    };
    match side {
        plan::unwind::CustomerSide::NothingBuilt => {
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
        plan::unwind::CustomerSide::NotAttested(f) => return Err(held(&f, gateway_route)),
        plan::unwind::CustomerSide::Resolve => {}
    }
    let resolved =
        credentials::resolve(source, operator, credentials_namespace, input, secret_ref).await;
    let resolved = match resolved {
        Ok(r) => r,
        Err((f, _)) => {
            if let Some(p) = per_customer {
                crate::per_customer::cut_operator_side(&base, input, p).await;
            }
            return Err(held(&f, gateway_route));
        }
    };
    let engine = Engine {
        net,
        fabric,
        customer: Some(resolved.customer()),
        customer_transit: None,
    };
    let unwound = match &engine.customer {
        Some(c) if input.spec.per_customer() => {
            crate::per_customer::unwind(&engine, c, input, targets).await
        }
        _ => unwind::unwind_rounds(&engine, input, targets).await,
    };
    match unwound {
        Ok(done) => Ok(Ok(done)),
        // The gateway route went in that same round, before the customer side refused.
        Err(s) if s.customer_refused => {
            if let Some(p) = per_customer {
                crate::per_customer::cut_operator_side(&base, input, p).await;
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
