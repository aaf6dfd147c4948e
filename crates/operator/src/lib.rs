//! bnerd-vpn-operator: the ClusterLink reconciler.
//!
//! `engine` holds the cloud side of a reconcile (observe → decide → act against the
//! [`bnerd_cloud::Neutron`] port) and knows nothing of Kubernetes, so the same code runs
//! against the fake cloud, the real lab and production. `controller` is the Kubernetes glue.

pub mod backoff;
pub mod config;
pub mod context;
pub mod controller;
pub mod customers;
pub mod drift_check;
pub mod finalizer;
pub mod gateway_warnings;
/// The reconcile itself lives in its own crate, which `kubectl-clusterlink plan` shares.
pub use bnerd_engine as engine;
pub mod gateways;
pub mod health;
pub mod leader;
pub mod link_events;
pub mod logging;
pub mod metrics;
pub mod startup;
