//! `decommission-share`: docs/operations.md's removal of the RBAC share by hand, with its check done
//! first. A share of the transit network is withdrawn only when no `Shared` ClusterLink is
//! pinned to that project any more, since every reconcile of such a link would simply
//! re-create it. `PerCustomer` links of the project do not hold it back: their legs stand on
//! the project's customer transit, and the share of the main transit is exactly the reach
//! `spec.transitIsolation: PerCustomer` is meant to take away.

use bnerd_api::ClusterLink;
use bnerd_api::echo::shell_word;
use bnerd_cloud::{ACCESS_AS_SHARED, CloudError, Neutron, RbacPolicy};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ShareError {
    #[error(
        "project {project} still has Shared ClusterLink(s) {} (spec.transitIsolation absent or Shared): their legs stand on the transit network and their next reconcile re-creates the share; move them (kubectl clusterlink recreate {} --isolation PerCustomer) or delete them first",
        links.join(", "),
        links.first().map(|l| shell_word(l)).unwrap_or_default()
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

/// The ClusterLinks pinned to a project (by `spec.customerProjectID` or
/// `status.customerProjectID`, deleting ones too: a `Shared` link's leg is on the transit
/// network until its unwind is done), by where their legs stand.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Pinned {
    /// Not `PerCustomer` (`spec.transitIsolation` absent or `Shared`): legs on the transit
    /// network, which needs the share.
    pub shared: Vec<String>,
    /// `spec.transitIsolation: PerCustomer`: legs on the project's customer transit.
    pub per_customer: Vec<String>,
}

impl Pinned {
    pub fn of(project: &str, links: &[ClusterLink]) -> Self {
        let mut out = Self::default();
        for l in links.iter().filter(|l| pinned_to(l, project)) {
            let name = l.metadata.name.clone().unwrap_or_default();
            if l.spec.per_customer() {
                out.per_customer.push(name);
            } else {
                out.shared.push(name);
            }
        }
        out
    }
}

/// Whether the share with `project` may go: Err with the `Shared` links pinned to it, which
/// hold it back; else Ok with the `PerCustomer` links pinned to it, whose legs do not need it.
pub fn may_go(project: &str, links: &[ClusterLink]) -> Result<Vec<String>, Vec<String>> {
    let pinned = Pinned::of(project, links);
    if !pinned.shared.is_empty() {
        return Err(pinned.shared);
    }
    Ok(pinned.per_customer)
}

/// What `decommission_share` found (and removed, when applied).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decommission {
    /// The operator's own `access_as_shared` rules for the project on the network.
    pub policies: Vec<RbacPolicy>,
    /// The project's `PerCustomer` links, which did not hold the share back.
    pub per_customer: Vec<String>,
}

/// The command that removes the share of the transit network with `project`, as `doctor`
/// and `recreate` print it (`apply`: with `--yes`, else the dry run that lists it).
pub fn decommission_command(project: &str, apply: bool) -> String {
    format!(
        "kubectl clusterlink decommission-share --project {}{}",
        shell_word(project),
        if apply { " --yes" } else { "" }
    )
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
) -> Result<Decommission, ShareError> {
    let per_customer = may_go(project, links).map_err(|links| ShareError::StillNeeded {
        project: project.into(),
        links,
    })?;
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
    Ok(Decommission {
        policies,
        per_customer,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnerd_api::{ClusterLinkSpec, ClusterLinkStatus, SecretRef, TransitIsolation};

    const P: &str = "0123456789abcdef0123456789abcdef";
    const OTHER: &str = "fedcba9876543210fedcba9876543210";

    fn link(name: &str, project: &str, isolation: Option<TransitIsolation>) -> ClusterLink {
        ClusterLink::new(
            name,
            ClusterLinkSpec {
                service_cluster_router: "r".into(),
                service_cluster_cidr: "10.1.0.0/16".into(),
                credentials_secret_ref: Some(SecretRef {
                    name: format!("clusterlink-{name}"),
                    namespace: "bnerd-vpn-clusterlinks".into(),
                }),
                customer_project_id: Some(project.into()),
                transit_isolation: isolation,
                ..Default::default()
            },
        )
    }

    /// Refused while a `Shared` link (absent, `Shared`, deleting, or pinned by its status
    /// alone) names the project, naming only those; accepted when every link of the project
    /// is `PerCustomer`, naming them; a link of another project counts for nothing.
    #[test]
    fn only_shared_links_hold_the_share_back() {
        use TransitIsolation::{PerCustomer, Shared};
        let deleting = {
            let mut l = link("deleting", P, None);
            l.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
            l
        };
        let by_status = {
            let mut l = link("by-status", OTHER, None);
            l.spec.customer_project_id = None;
            l.status = Some(ClusterLinkStatus {
                customer_project_id: Some(P.into()),
                ..Default::default()
            });
            l
        };
        // Ok: the PerCustomer links named; Err: the Shared links holding the share back.
        type Want<'a> = Result<Vec<&'a str>, Vec<&'a str>>;
        let cases: Vec<(&str, Vec<ClusterLink>, Want)> = vec![
            ("no link", vec![], Ok(vec![])),
            (
                "another project's links",
                vec![link("o", OTHER, None), link("o2", OTHER, Some(PerCustomer))],
                Ok(vec![]),
            ),
            ("absent is Shared", vec![link("a", P, None)], Err(vec!["a"])),
            ("Shared", vec![link("s", P, Some(Shared))], Err(vec!["s"])),
            (
                "all PerCustomer",
                vec![
                    link("x", P, Some(PerCustomer)),
                    link("y", P, Some(PerCustomer)),
                ],
                Ok(vec!["x", "y"]),
            ),
            (
                "mixed: only the Shared one named",
                vec![
                    link("x", P, Some(PerCustomer)),
                    link("s", P, Some(Shared)),
                    link("o", OTHER, None),
                ],
                Err(vec!["s"]),
            ),
            (
                "a deleting Shared link still unwinds its leg on the transit",
                vec![deleting, link("x", P, Some(PerCustomer))],
                Err(vec!["deleting"]),
            ),
            ("pinned by status", vec![by_status], Err(vec!["by-status"])),
        ];
        for (what, links, want) in cases {
            let want = want
                .map(|v| v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .map_err(|v| v.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            assert_eq!(may_go(P, &links), want, "{what}");
        }
    }

    #[test]
    fn the_refusal_names_the_shared_links_and_the_move() {
        let e = ShareError::StillNeeded {
            project: P.into(),
            links: may_go(P, &[link("a b", P, None), link("c", P, None)]).unwrap_err(),
        };
        assert_eq!(
            e.to_string(),
            format!(
                "project {P} still has Shared ClusterLink(s) a b, c (spec.transitIsolation absent or Shared): their legs stand on the transit network and their next reconcile re-creates the share; move them (kubectl clusterlink recreate 'a b' --isolation PerCustomer) or delete them first"
            )
        );
    }

    #[test]
    fn the_command_quotes_the_project() {
        assert_eq!(
            decommission_command(P, true),
            format!("kubectl clusterlink decommission-share --project {P} --yes")
        );
        assert_eq!(
            decommission_command("p; rm -rf /", false),
            "kubectl clusterlink decommission-share --project 'p; rm -rf /'"
        );
    }
}
