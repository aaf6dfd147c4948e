//! An in-memory Neutron (and the Keystone token facts the operator reads) that answers the
//! way Neutron 29 / Keystone 30 do for every behaviour in DESIGN.md section 4, with call
//! counters and per-call fault injection. The integration suite runs the same parametrised
//! cases against this and the real lab to keep the two in step.

mod faults;
mod keystone;
mod rbac;
mod state;

pub use faults::{Fault, Op};
pub use state::{FakeCloud, FakeNeutron};
