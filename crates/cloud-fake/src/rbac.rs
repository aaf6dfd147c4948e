//! Neutron's RBAC policies on networks, as a member sees them: only the owner of a network
//! may share it, only with a named project, only its own policies are listed, and a share
//! cannot be withdrawn while the target project still has ports on the network.

use bnerd_cloud::{ACCESS_AS_SHARED, RbacPolicy, Result, ShareNetwork};

use crate::faults::Op;
use crate::policy::grants;
use crate::world::{FakeNeutron, api, new_id};

impl FakeNeutron {
    pub(crate) async fn rbac_create(&self, req: &ShareNetwork) -> Result<RbacPolicy> {
        let path = "/rbac-policies";
        self.run(Op::CreateRbacPolicy, "POST", path, |w| {
            // Policy enforcement runs before anything looks at the object.
            if req.target_tenant == "*" && !self.admin {
                return Err(api(
                    "POST",
                    path,
                    403,
                    "PolicyNotAuthorized",
                    "((((rule:create_rbac_policy and rule:create_rbac_policy:object_type) and rule:create_rbac_policy:object_id) and rule:create_rbac_policy:target_tenant) and rule:create_rbac_policy:action) is disallowed by policy".into(),
                ));
            }
            let net = w
                .networks
                .get(&req.network_id)
                .filter(|n| self.can_use(w, n))
                .ok_or_else(|| {
                    api(
                        "POST",
                        path,
                        404,
                        "NetworkNotFound",
                        format!("Network {} could not be found.", req.network_id),
                    )
                })?;
            if !self.owns(&net.project_id) {
                return Err(api(
                    "POST",
                    path,
                    400,
                    "InvalidInput",
                    "Invalid input for operation: Only admins can manipulate policies on networks they do not own.".into(),
                ));
            }
            w.check_quota(&self.project_id, "rbac_policy", "POST", path)?;
            // The unique key ignores who made a policy: an admin's rule, invisible to the
            // owner, still collides.
            let duplicate = w.rbac.values().any(|r| {
                r.object_type == "network"
                    && r.object_id == req.network_id
                    && r.action == req.action
                    && r.target_tenant == req.target_tenant
            });
            if duplicate {
                return Err(api(
                    "POST",
                    path,
                    409,
                    "DuplicateRbacPolicy",
                    "An RBAC policy already exists with those values.".into(),
                ));
            }
            let policy = RbacPolicy {
                id: new_id(),
                object_type: "network".into(),
                object_id: req.network_id.clone(),
                action: req.action.clone(),
                target_tenant: req.target_tenant.clone(),
                project_id: self.project_id.clone(),
            };
            w.rbac.insert(policy.id.clone(), policy.clone());
            Ok(policy)
        })
        .await
    }

    pub(crate) async fn rbac_list(&self, object_ids: &[String]) -> Result<Vec<RbacPolicy>> {
        self.run(Op::ListRbacPolicies, "GET", "/rbac-policies", |w| {
            Ok(w.rbac
                .values()
                .filter(|r| object_ids.contains(&r.object_id) && self.owns(&r.project_id))
                .cloned()
                .collect())
        })
        .await
    }

    pub(crate) async fn rbac_delete(&self, id: &str) -> Result<()> {
        let path = format!("/rbac-policies/{id}");
        self.run(Op::DeleteRbacPolicy, "DELETE", &path, |w| {
            let policy = w
                .rbac
                .get(id)
                .filter(|r| self.owns(&r.project_id))
                .cloned()
                .ok_or_else(|| {
                    api(
                        "DELETE",
                        &path,
                        404,
                        "RbacPolicyNotFound",
                        format!("RBAC policy of type unknown with ID {id} not found"),
                    )
                })?;
            if policy.action == ACCESS_AS_SHARED {
                let owner = w
                    .networks
                    .get(&policy.object_id)
                    .map(|n| n.project_id.clone())
                    .unwrap_or_default();
                let stranded = w.ports.values().any(|p| {
                    p.network_id == policy.object_id
                        && p.project_id != owner
                        && (policy.target_tenant == "*" || p.project_id == policy.target_tenant)
                        && !grants(w, &policy.object_id, &p.project_id, Some(id))
                });
                if stranded {
                    return Err(api(
                        "DELETE",
                        &path,
                        409,
                        "RbacPolicyInUse",
                        format!(
                            "RBAC policy on object {} cannot be removed because other objects depend on it.",
                            policy.object_id
                        ),
                    ));
                }
            }
            w.rbac.remove(id);
            Ok(())
        })
        .await
    }
}
