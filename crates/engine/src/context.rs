//! What every step of a link's reconcile and unwind works with: the operator's credential and
//! the fabric ([`Engine`]), a cross-tenant link's customer side ([`Customer`]), and the network
//! its legs stand on. A leaf: the steps import it, the pipeline (`converge.rs`) runs them, and
//! nothing here calls a step.

use std::net::Ipv4Addr;

use bnerd_cloud::Neutron;
use bnerd_cloud::fabric::Fabric;
use ipnet::Ipv4Net;

use crate::plan::StepFail;
use crate::plan::share::Credential;

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

/// Whose credential a failed call was made with, for the message
/// ([`Engine::named`]): the operator's, or (cross-tenant) the customer's, which also builds
/// the leg side of a link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Whose {
    Operator,
    Customer,
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
    pub(crate) fn named(&self, f: StepFail, whose: Whose) -> StepFail {
        let Some(c) = &self.customer else {
            return f;
        };
        let who = match whose {
            Whose::Customer => Credential::Customer(c.secret),
            Whose::Operator => Credential::Operator,
        };
        StepFail {
            message: format!("{}{}", who.prefix(), f.message),
            ..f
        }
    }

    /// The project this link's leg must belong to (`plan::leg::leg_project`).
    pub(crate) fn leg_project<'i>(&'i self, input: &'i crate::model::Input<'_>) -> Option<&'i str> {
        crate::plan::leg::leg_project(input.spec, input.status, &self.fabric.operator_project_id)
    }

    /// The credential of the leg's side: the service router, the leg port, reverse routes.
    pub fn leg_client(&self) -> &'a dyn Neutron {
        match &self.customer {
            Some(c) => c.net,
            None => self.net,
        }
    }
}

/// A project's customer transit as a link uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CustomerTransit {
    pub network_id: String,
    pub subnet_id: String,
    pub cidr: Ipv4Net,
    /// The edge router's address on the customer transit (its subnet's gateway): the next hop
    /// of the customer router's routes.
    pub gateway: Ipv4Addr,
    pub edge_router_id: String,
    /// The edge router's leg on the main transit: the gateway router's next hop.
    pub edge_ip: Ipv4Addr,
}
