//! `decommission-share`: the spec's "removing the RBAC share by hand", with its check done
//! first. A share is withdrawn only when no ClusterLink is pinned to that project any more,
//! since every reconcile of such a link would simply re-create it.

use bnerd_api::ClusterLink;
use bnerd_cloud::{ACCESS_AS_SHARED, CloudError, Neutron, RbacPolicy};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ShareError {
    #[error(
        "project {project} is still the customer project of ClusterLink(s) {}; delete those first, or their next reconcile re-creates the share",
        links.join(", ")
    )]
    StillNeeded { project: String, links: Vec<String> },
    #[error(
        "Neutron refused to remove RBAC policy {policy}: {source} (RbacPolicyInUse means project ports are still on the transit network)"
    )]
    Delete { policy: String, source: CloudError },
    #[error("listing RBAC policies of network {network}: {source}")]
    List { network: String, source: CloudError },
}

fn pinned_to(l: &ClusterLink, project: &str) -> bool {
    l.spec.customer_project_id.as_deref() == Some(project)
        || l.status
            .as_ref()
            .and_then(|s| s.customer_project_id.as_deref())
            == Some(project)
}

/// The operator's own `access_as_shared` rules on `network_id` for `project`: returned, and
/// deleted when `apply`. An admin-made rule is invisible to the operator's credential and is
/// not among them.
pub async fn decommission_share(
    net: &dyn Neutron,
    network_id: &str,
    project: &str,
    links: &[ClusterLink],
    apply: bool,
) -> Result<Vec<RbacPolicy>, ShareError> {
    let pinned: Vec<String> = links
        .iter()
        .filter(|l| pinned_to(l, project))
        .filter_map(|l| l.metadata.name.clone())
        .collect();
    if !pinned.is_empty() {
        return Err(ShareError::StillNeeded {
            project: project.into(),
            links: pinned,
        });
    }
    let policies: Vec<RbacPolicy> = net
        .list_rbac_policies(network_id)
        .await
        .map_err(|source| ShareError::List {
            network: network_id.into(),
            source,
        })?
        .into_iter()
        .filter(|p| p.action == ACCESS_AS_SHARED && p.target_tenant == project)
        .collect();
    if apply {
        for p in &policies {
            match net.delete_rbac_policy(&p.id).await {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(source) => {
                    return Err(ShareError::Delete {
                        policy: p.id.clone(),
                        source,
                    });
                }
            }
        }
    }
    Ok(policies)
}
