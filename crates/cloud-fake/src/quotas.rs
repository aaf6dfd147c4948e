//! Quotas, as far as the operator reads them: the privilege probe (quota details of a project
//! that is not the caller's) and the caller's own limits and usage.

use bnerd_cloud::{ADMIN_READ_PROBE_PROJECT, QuotaUsage, Result};

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

    /// `GET /quotas/{id}/details` of the caller's own project (any project for an admin):
    /// each resource the fake counts, with its limit (-1 in Neutron: None here), sorted by
    /// name. `router_route` is a limit per router, its usage always 0; up to 2026.1 it is no
    /// quota resource at all (the server's `max_routes` is not in the answer).
    pub(crate) async fn quota_details(&self, project_id: &str) -> Result<Vec<QuotaUsage>> {
        let path = format!("/quotas/{project_id}/details");
        self.run(Op::QuotaDetails, "GET", &path, |w| {
            if !(self.admin || self.project_id == project_id) {
                return Err(api(
                    "GET",
                    &path,
                    403,
                    "AdminRequired",
                    "User does not have admin privileges: Only admin is authorized to access quotas for another project.".into(),
                ));
            }
            let mut out: Vec<QuotaUsage> = crate::NEUTRON_DEFAULT_QUOTAS
                .iter()
                .map(|(resource, _)| QuotaUsage {
                    resource: resource.to_string(),
                    used: w.usage(project_id, resource) as u64,
                    limit: w.quota(resource).map(|n| n as u64),
                })
                .collect();
            if !w.up_to_2026_1() {
                // Measured on Neutron 29: `used` stays 0 whatever routes the project's
                // routers hold; the limit is checked per router at each route change.
                out.push(QuotaUsage {
                    resource: "router_route".into(),
                    used: 0,
                    limit: Some(w.max_routes() as u64),
                });
            }
            out.sort_by(|a, b| a.resource.cmp(&b.resource));
            Ok(out)
        })
        .await
    }
}
