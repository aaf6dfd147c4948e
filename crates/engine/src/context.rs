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

/// The cloud side of the operator: one Neutron credential, the fabric it serves, and the
/// side of the link's shape its steps work on.
pub(crate) struct Engine<'a> {
    /// The operator's credential: the transit network, the gateway router, RBAC shares.
    pub net: &'a dyn Neutron,
    pub fabric: &'a Fabric,
    pub side: Side<'a>,
}

/// Whose credential builds a link's leg side, and where its legs stand: the one value every
/// step that differs between the shapes (docs/design.md, "The reconcile order") matches on.
pub(crate) enum Side<'a> {
    /// A same-tenant link: the operator's credential builds everything, on the main transit.
    Operator,
    /// A cross-tenant `Shared` link: the customer's credential builds the leg side, on the
    /// main transit shared into its project.
    Shared(Customer<'a>),
    /// A cross-tenant `PerCustomer` link: the customer's credential builds the leg side, on
    /// its project's customer transit (`None` until found or built).
    PerCustomer(Customer<'a>, Option<CustomerTransit>),
}

pub(crate) use crate::plan::share::Whose;

/// The network a link's legs stand on.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LegNetwork<'a> {
    pub network_id: &'a str,
    pub subnet_id: &'a str,
    pub subnet: ipnet::Ipv4Net,
}

/// The customer side of a cross-tenant link, once its credential is resolved.
#[derive(Clone, Copy)]
pub(crate) struct Customer<'a> {
    pub net: &'a dyn Neutron,
    /// The project the credential authenticates into.
    pub project_id: &'a str,
    /// `<ns>/<name>` of the Secret it came from, for messages.
    pub secret: &'a str,
}

impl<'a> Engine<'a> {
    /// A same-tenant link: one credential for everything.
    pub(crate) fn same_tenant(net: &'a dyn Neutron, fabric: &'a Fabric) -> Self {
        Self {
            net,
            fabric,
            side: Side::Operator,
        }
    }

    /// The customer's credential, when the link's leg side is built with it.
    pub(crate) fn customer(&self) -> Option<&Customer<'a>> {
        match &self.side {
            Side::Operator => None,
            Side::Shared(c) | Side::PerCustomer(c, _) => Some(c),
        }
    }

    /// Whose credential builds the leg side: the service router, the leg port, reverse routes.
    pub(crate) fn leg_side(&self) -> Whose {
        match &self.side {
            Side::Operator => Whose::Operator,
            Side::Shared(_) | Side::PerCustomer(..) => Whose::Customer,
        }
    }

    /// A `PerCustomer` link's customer transit, once found or built.
    pub(crate) fn customer_transit(&self) -> Option<&CustomerTransit> {
        match &self.side {
            Side::PerCustomer(_, t) => t.as_ref(),
            Side::Operator | Side::Shared(_) => None,
        }
    }

    /// The same engine with its `PerCustomer` link's legs on `transit`.
    pub(crate) fn on_customer_transit(&self, c: &Customer<'a>, transit: CustomerTransit) -> Self {
        Self {
            net: self.net,
            fabric: self.fabric,
            side: Side::PerCustomer(*c, Some(transit)),
        }
    }

    /// The operator's router that routes via the leg: the gateway router, or a `PerCustomer`
    /// link's edge router.
    pub(crate) fn leg_router(&self) -> &str {
        match self.customer_transit() {
            Some(t) => &t.edge_router_id,
            None => &self.fabric.gateway_router_id,
        }
    }

    /// The main transit network, or a `PerCustomer` link's customer transit.
    pub(crate) fn leg_network(&self) -> LegNetwork<'_> {
        match self.customer_transit() {
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
        let Some(c) = self.customer() else {
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
    pub(crate) fn leg_client(&self) -> &'a dyn Neutron {
        match &self.side {
            Side::Shared(c) | Side::PerCustomer(c, _) => c.net,
            Side::Operator => self.net,
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
