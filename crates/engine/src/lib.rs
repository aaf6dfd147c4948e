//! One reconcile of one ClusterLink against the cloud, and its unwind on delete.
//!
//! Steps run in one pipeline (docs/design.md, "The pipeline"), each owning one condition:
//! Validated → LegAttached → RouteInstalled → ReverseRoutesInstalled, then Ready. Each step
//! observes (reads only), a pure function in `plan` decides (every condition reason is chosen
//! there), the step acts on that decision, and `report` turns the results into conditions. A
//! failing step sets its own condition False and the later ones Unknown; nothing after it
//! touches the cloud. Callers reach it through the door, `LinkEngine`.

mod ahead;
mod context;
mod converge;
mod credentials;
mod customer_transit;
mod door;
pub mod drift_check;
mod gateway_route;
mod keyed_lock;
mod leg;
mod model;
mod ops;
pub mod overlay;
mod per_customer;
pub mod plan;
mod queries;
mod report;
pub mod resync;
mod reverse_routes;
mod screen;
mod share;
mod unwind;
pub mod view;

pub use converge::Held;
pub use credentials::{Checked, CredentialSource, CustomerCloud, OperatorIdentity};
pub use door::{
    Batch, Counted, Customers, LinkEngine, LinkEvent, Reconciled, ResyncPath, Severity, Unwound,
    events, unwound_events,
};
pub use model::{Action, ActionKind, Input, Outcome, Retry, Shape};
pub use plan::reverse_routes::GatewayProblem;
pub use plan::tenant::CustomerCredential;
pub use plan::unwind::{UnwindPlan, may_abandon};
pub use plan::{Peer, StepFail};
pub use report::{deleting_status, failed_status};
