//! `kubectl clusterlink`: what a platform engineer runs when a link misbehaves or a customer
//! project is decommissioned. The checks read the same cloud and cluster the operator does
//! and never change anything unless told to (`--yes`).

pub mod bounds;
pub mod customer_transits;
pub mod customers;
pub mod doctor;
pub mod finding;
pub mod output;
pub mod plan;
pub mod recreate;
pub mod share;
