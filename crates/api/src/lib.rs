//! The `ClusterLink` API (`ipsec.bnerd.net/v1alpha1`) and the vocabulary of its status:
//! condition types, reasons and the names the spec fixes (annotations, tags, finalizer).
//! No IO lives here.

pub mod cidr;
pub mod clusterlink;
pub mod conditions;
pub mod echo;
pub mod gateway;
pub mod names;
pub mod secrets;

pub use clusterlink::{
    ClusterLink, ClusterLinkSpec, ClusterLinkStatus, CustomerTransit, GatewayRef, ReverseRoute,
    RouteRecord, SecretRef, TransitIsolation,
};
pub use conditions::{ConditionType, EventReason, Reason};
