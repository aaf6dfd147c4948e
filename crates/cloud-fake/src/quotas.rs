//! Quotas, as far as the operator reads them: the privilege probe, quota details of a project
//! that is not the caller's.

use bnerd_cloud::{ADMIN_READ_PROBE_PROJECT, Result};

use crate::faults::Op;
use crate::world::{FakeNeutron, api};

impl FakeNeutron {
    /// `GET /quotas/{id}/details`: Neutron checks no policy rule here but `context.is_admin`
    /// itself, for any project but the caller's own (measured: 403 `AdminRequired` for a
    /// member and for a project manager, 200 for an admin and for a role a customised
    /// `context_is_admin` names).
    pub(crate) async fn quota_details_probe(&self) -> Result<()> {
        let path = format!("/quotas/{ADMIN_READ_PROBE_PROJECT}/details");
        self.run(Op::ProbeAdminRead, "GET", &path, |_| {
            if self.admin || self.project_id == ADMIN_READ_PROBE_PROJECT {
                return Ok(());
            }
            Err(api(
                "GET",
                &path,
                403,
                "AdminRequired",
                "User does not have admin privileges: Only admin is authorized to access quotas for another project.".into(),
            ))
        })
        .await
    }
}
