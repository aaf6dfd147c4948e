//! `recreate`: delete a ClusterLink and apply it again with the same spec, labels and
//! annotations — what the terminal TransitIPMismatch asks a human to do, and what anyone
//! wanting a link rebuilt from scratch does. The operator's finalizer unwinds the old leg and
//! routes before the object goes; the new object starts from an empty status. One
//! annotation is never carried over: the abandon hatch (see [`NOT_CARRIED_OVER`]).

use std::time::Duration;

use bnerd_api::conditions::is_true;
use bnerd_api::echo::shell_word;
use bnerd_api::names::ANNOTATION_ABANDON;
use bnerd_api::{ClusterLink, ConditionType, TransitIsolation};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::core::ObjectMeta;
use thiserror::Error;

use crate::share::{Pinned, decommission_command};

#[derive(Debug, Error)]
pub enum RecreateError {
    #[error("ClusterLink {0} does not exist")]
    NotFound(String),
    #[error("ClusterLink {0} is already being deleted; wait for it to go, then apply it again")]
    AlreadyDeleting(String),
    #[error("{what}: {source}")]
    Kube {
        what: String,
        #[source]
        source: kube::Error,
    },
    #[error(
        "ClusterLink {name} was not gone after {waited:?}: its finalizer is still unwinding (kubectl describe clusterlink {}); nothing was re-applied",
        shell_word(name)
    )]
    NotGone { name: String, waited: Duration },
    #[error("aborted: nothing was changed")]
    Aborted,
    #[error(
        "ClusterLink {0} is same-tenant: --isolation is for a cross-tenant link (one with spec.credentialsSecretRef)"
    )]
    NotCrossTenant(String),
}

/// Annotations the new object does not get. `ipsec.bnerd.net/abandon-customer-resources`
/// is a human's decision about one deletion, "never set automatically": carried over, the
/// successor's next delete would abandon its customer side without anyone deciding it (and
/// recreate is typically run on a link that was stuck, where someone may have set it).
pub const NOT_CARRIED_OVER: &[&str] = &[ANNOTATION_ABANDON];

/// The old object's annotations that [`recreated`] leaves off, in order.
pub fn dropped_annotations(old: &ClusterLink) -> Vec<String> {
    let Some(a) = &old.metadata.annotations else {
        return vec![];
    };
    NOT_CARRIED_OVER
        .iter()
        .filter(|k| a.contains_key(**k))
        .map(|k| k.to_string())
        .collect()
}

/// What the new object is: the old one's name, spec, labels and annotations (but those
/// [`NOT_CARRIED_OVER`]), nothing the apiserver or the operator wrote (UID, status,
/// finalizers, resourceVersion, managedFields).
pub fn recreated(old: &ClusterLink) -> ClusterLink {
    let annotations = old.metadata.annotations.clone().map(|mut a| {
        a.retain(|k, _| !NOT_CARRIED_OVER.contains(&k.as_str()));
        a
    });
    ClusterLink {
        metadata: ObjectMeta {
            name: old.metadata.name.clone(),
            labels: old.metadata.labels.clone(),
            annotations,
            ..Default::default()
        },
        spec: old.spec.clone(),
        status: None,
    }
}

/// The line saying an annotation is not carried over, and why.
pub fn dropped_line(annotation: &str) -> String {
    format!(
        "annotation {annotation} is not carried over: it decides one deletion and always needs a human decision; set it on the new link only if that decision is made again"
    )
}

/// The new object for a move between transit isolation modes: [`recreated`], with
/// `spec.transitIsolation` set (`Shared` is written as the field left out, as the spec
/// spells the default).
pub fn moved(old: &ClusterLink, to: TransitIsolation) -> Result<ClusterLink, RecreateError> {
    if !old.is_cross_tenant() {
        return Err(RecreateError::NotCrossTenant(
            old.metadata.name.clone().unwrap_or_default(),
        ));
    }
    let mut new = recreated(old);
    new.spec.transit_isolation = match to {
        TransitIsolation::PerCustomer => Some(TransitIsolation::PerCustomer),
        TransitIsolation::Shared => None,
    };
    Ok(new)
}

/// What a move between modes does, line by line: the old link's unwind as [`plan`] says it,
/// then what goes with it and what the new link builds in its mode.
pub fn plan_move(old: &ClusterLink, new: &ClusterLink) -> Vec<String> {
    let name = old.metadata.name.clone().unwrap_or_default();
    let project = old.spec.customer_project_id.clone().unwrap_or_default();
    let mut out: Vec<String> = plan(old)
        .into_iter()
        .filter(|l| !l.starts_with("apply ClusterLink"))
        .collect();
    let st = old.status.clone().unwrap_or_default();
    if let Some(ct) = st
        .customer_transit
        .as_ref()
        .filter(|_| old.spec.per_customer())
    {
        out.push(format!(
            "  if no other PerCustomer link of project {project} uses it: remove its customer transit (network {}, edge router {}, the share)",
            ct.network_id.as_deref().unwrap_or("?"),
            ct.edge_router_id.as_deref().unwrap_or("?")
        ));
    }
    let comes = if new.spec.per_customer() {
        format!(
            "apply ClusterLink {name} again with spec.transitIsolation: PerCustomer: a leg on project {project}'s customer transit (the project's first PerCustomer link builds it: a network cut from the operator's pool, an edge router, a share to {project} only), at an address Neutron picks, then its routes via the edge router"
        )
    } else {
        format!(
            "apply ClusterLink {name} again as Shared: a leg on the transit network (shared with project {project}) at an address Neutron picks, then its routes"
        )
    };
    out.push(comes);
    let attested = new
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(bnerd_api::names::ANNOTATION_API_ACCESS))
        .is_some_and(|v| v == "none");
    if !new.spec.per_customer() && !attested {
        out.push(format!(
            "  the new link has no {}=\"none\" annotation: it stops at TenantIsolationAttested=False until a platform admin sets it",
            bnerd_api::names::ANNOTATION_API_ACCESS
        ));
    }
    if new.spec.per_customer() {
        out.push(format!(
            "  the transit network stays shared with project {project} until no Shared link names it and the share is decommissioned: kubectl clusterlink decommission-share --project {}",
            shell_word(&project)
        ));
    }
    out
}

/// What `recreate` will do, line by line, for the confirmation prompt and the dry look.
pub fn plan(old: &ClusterLink) -> Vec<String> {
    let name = old.metadata.name.clone().unwrap_or_default();
    let mut out = vec![format!(
        "delete ClusterLink {name}; the operator unwinds it first:"
    )];
    let st = old.status.clone().unwrap_or_default();
    if let Some(r) = &st.gateway_route {
        out.push(format!(
            "  remove gateway route {} via {}",
            r.destination, r.nexthop
        ));
    }
    if let Some(p) = &st.leg_port_id {
        out.push(format!(
            "  detach and delete leg port {p} at {} from router {}",
            st.transit_ip.as_deref().unwrap_or("?"),
            st.service_router_id.as_deref().unwrap_or("?")
        ));
    }
    if !st.reverse_routes.is_empty() {
        out.push(format!(
            "  remove {} reverse route(s) from the service router",
            st.reverse_routes.len()
        ));
    }
    // The annotation still decides this deletion, the old link's: say so before it happens.
    if old
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_ABANDON))
        .is_some_and(|v| v == "true")
    {
        out.push(format!(
            "  {ANNOTATION_ABANDON}=true is set on it: if its customer side cannot be unwound, the operator leaves it behind"
        ));
    }
    let address = match (&old.spec.transit_ip, old.is_cross_tenant()) {
        (Some(ip), _) => format!("at the pinned spec.transitIP {ip}"),
        (None, true) => "at an address Neutron picks (cross-tenant)".to_string(),
        (None, false) => "at the lowest free transit address".to_string(),
    };
    let dropped = dropped_annotations(old);
    let annotations = if dropped.is_empty() {
        "annotations".to_string()
    } else {
        format!("annotations but {}", dropped.join(", "))
    };
    out.push(format!(
        "apply ClusterLink {name} again with the same spec, labels and {annotations}: a new leg {address}, then its routes"
    ));
    out.extend(dropped.iter().map(|a| format!("  {}", dropped_line(a))));
    out
}

/// How the recreate ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recreated {
    pub ready: bool,
    /// The first condition (in reconcile order) not True when `ready` is false.
    pub stuck: Option<String>,
    pub transit_ip: Option<String>,
    /// The old object's annotations the new one did not get ([`NOT_CARRIED_OVER`]).
    pub dropped_annotations: Vec<String>,
    /// After a move from `Shared` to `PerCustomer`: whether the project's share of the
    /// transit network is still needed ([`share_after_move`]); None for any other recreate.
    pub share: Option<ShareAfterMove>,
}

/// What a move from `Shared` to `PerCustomer` leaves of the project's share of the transit
/// network. The operator never removes a share (it may be hand-made, or serve other links),
/// and recreate does not either: the removal is `decommission-share`'s, which checks again
/// when it runs, needs the operator's OpenStack credential where recreate needs only the
/// kubeconfig, and has its own dry run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ShareAfterMove {
    /// The moved link was the project's last `Shared` link: nothing needs the share any
    /// more, and while it stays the project can still reach every linked cluster from a port
    /// on the transit network.
    LeftBehind { project: String },
    /// The project's other `Shared` links (named) still need it.
    StillNeeded {
        project: String,
        shared: Vec<String>,
    },
    /// The links could not be listed to tell (why).
    Unknown { project: String, why: String },
}

impl ShareAfterMove {
    pub fn project(&self) -> &str {
        match self {
            Self::LeftBehind { project }
            | Self::StillNeeded { project, .. }
            | Self::Unknown { project, .. } => project,
        }
    }

    /// The command that removes the share, when nothing needs it any more.
    pub fn decommission(&self) -> Option<String> {
        match self {
            Self::LeftBehind { project } => Some(decommission_command(project, true)),
            _ => None,
        }
    }

    /// What `recreate` says about it at the end.
    pub fn line(&self, name: &str) -> String {
        let command = decommission_command(self.project(), true);
        match self {
            Self::LeftBehind { project } => format!(
                "ClusterLink {name} was project {project}'s last Shared link: nothing needs the transit network shared with {project} any more, and while it is, the project can still make ports on it and reach every linked cluster; the operator never removes a share, so remove it: {command}"
            ),
            Self::StillNeeded { project, shared } => format!(
                "project {project} still has Shared ClusterLink(s) {}: the transit network stays shared with it until they are moved too (kubectl clusterlink recreate <name> --isolation PerCustomer); after the last one: {command}",
                shared.join(", ")
            ),
            Self::Unknown { project, why } => format!(
                "could not list the ClusterLinks to tell whether project {project} still has Shared links ({why}); once none has, remove the transit network's share with it: {command} (it refuses while one does)"
            ),
        }
    }
}

/// After `old` was applied again as `new`: when the move took a `Shared` link to
/// `PerCustomer`, whether another `Shared` link (not `old` by name, so `links` may be read
/// before or after the move) still holds the project's share. None for any other recreate.
pub fn share_after_move(
    old: &ClusterLink,
    new: &ClusterLink,
    links: &[ClusterLink],
) -> Option<ShareAfterMove> {
    if old.spec.per_customer() || !new.spec.per_customer() {
        return None;
    }
    let project = old
        .spec
        .customer_project_id
        .clone()
        .filter(|p| !p.is_empty())?;
    let others: Vec<ClusterLink> = links
        .iter()
        .filter(|l| l.metadata.name != old.metadata.name)
        .cloned()
        .collect();
    let shared = Pinned::of(&project, &others).shared;
    Some(if shared.is_empty() {
        ShareAfterMove::LeftBehind { project }
    } else {
        ShareAfterMove::StillNeeded { project, shared }
    })
}

/// Delete, wait for the finalizer, re-apply, wait for Ready (up to `timeout` each).
pub async fn recreate(
    api: &Api<ClusterLink>,
    old: &ClusterLink,
    timeout: Duration,
) -> Result<Recreated, RecreateError> {
    recreate_as(api, old, &recreated(old), timeout).await
}

/// [`recreate`], applying `new` (a [`moved`] link) after the old one is gone.
pub async fn recreate_as(
    api: &Api<ClusterLink>,
    old: &ClusterLink,
    new: &ClusterLink,
    timeout: Duration,
) -> Result<Recreated, RecreateError> {
    let name = old.metadata.name.clone().unwrap_or_default();
    let kube = |what: &str| {
        let what = format!("{what} ClusterLink {name}");
        move |source| RecreateError::Kube { what, source }
    };
    api.delete(&name, &DeleteParams::default())
        .await
        .map_err(kube("deleting"))?;
    let step = Duration::from_millis(500);
    let mut waited = Duration::ZERO;
    loop {
        match api.get_opt(&name).await.map_err(kube("reading"))? {
            None => break,
            Some(_) if waited >= timeout => return Err(RecreateError::NotGone { name, waited }),
            Some(_) => {}
        }
        tokio::time::sleep(step).await;
        waited += step;
    }
    api.create(&PostParams::default(), new)
        .await
        .map_err(kube("creating"))?;
    let mut waited = Duration::ZERO;
    loop {
        let now = api.get_opt(&name).await.map_err(kube("reading"))?;
        let status = now.and_then(|l| l.status).unwrap_or_default();
        let ready = is_true(&status.conditions, ConditionType::Ready);
        if ready || waited >= timeout {
            let stuck = (!ready).then(|| {
                ConditionType::ALL
                    .iter()
                    .filter_map(|t| bnerd_api::conditions::find(&status.conditions, *t))
                    .find(|c| c.status != "True")
                    .map(|c| format!("{}={} {}: {}", c.type_, c.status, c.reason, c.message))
                    .unwrap_or_else(|| "no conditions yet: is the operator running?".into())
            });
            // The old link is gone, so its leg has left the transit network whether or not
            // the new one is Ready yet.
            let share = match share_after_move(old, new, &[]) {
                None => None,
                Some(first) => match api.list(&ListParams::default()).await {
                    Ok(links) => share_after_move(old, new, &links.items),
                    Err(e) => Some(ShareAfterMove::Unknown {
                        project: first.project().to_string(),
                        why: bnerd_cloud::error_chain(&e),
                    }),
                },
            };
            return Ok(Recreated {
                ready,
                stuck,
                transit_ip: status.transit_ip,
                dropped_annotations: dropped_annotations(old),
                share,
            });
        }
        tokio::time::sleep(step).await;
        waited += step;
    }
}

/// Read the link and refuse what recreate cannot do.
pub async fn fetch(api: &Api<ClusterLink>, name: &str) -> Result<ClusterLink, RecreateError> {
    let l = api
        .get_opt(name)
        .await
        .map_err(|source| RecreateError::Kube {
            what: format!("reading ClusterLink {name}"),
            source,
        })?
        .ok_or_else(|| RecreateError::NotFound(name.into()))?;
    if l.metadata.deletion_timestamp.is_some() {
        return Err(RecreateError::AlreadyDeleting(name.into()));
    }
    Ok(l)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnerd_api::{ClusterLinkSpec, ClusterLinkStatus, RouteRecord};

    fn old() -> ClusterLink {
        let mut l = ClusterLink::new(
            "svc01-link",
            ClusterLinkSpec {
                service_cluster_router: "shoot--services--svc01".into(),
                service_cluster_cidr: "10.251.0.0/16".into(),
                ..Default::default()
            },
        );
        l.metadata.uid = Some("u1".into());
        l.metadata.resource_version = Some("42".into());
        l.metadata.finalizers = Some(vec!["ipsec.bnerd.net/cleanup".into()]);
        l.metadata.labels = Some([("team".to_string(), "infra".to_string())].into());
        l.metadata.annotations = Some([("a".to_string(), "b".to_string())].into());
        l.status = Some(ClusterLinkStatus {
            leg_port_id: Some("p1".into()),
            transit_ip: Some("10.254.0.3".into()),
            service_router_id: Some("r1".into()),
            gateway_route: Some(RouteRecord {
                destination: "10.251.0.0/16".into(),
                nexthop: "10.254.0.3".into(),
            }),
            ..Default::default()
        });
        l
    }

    #[test]
    fn the_new_object_keeps_what_a_human_wrote_and_nothing_else() {
        let n = recreated(&old());
        assert_eq!(n.metadata.name.as_deref(), Some("svc01-link"));
        assert_eq!(n.spec, old().spec);
        assert_eq!(n.metadata.labels, old().metadata.labels);
        assert_eq!(n.metadata.annotations, old().metadata.annotations);
        assert!(n.status.is_none());
        assert!(n.metadata.uid.is_none() && n.metadata.resource_version.is_none());
        assert!(n.metadata.finalizers.is_none());
    }

    /// The abandon hatch decides one deletion: the successor does not inherit it, and the
    /// plan says so; every other annotation is kept.
    #[test]
    fn the_abandon_annotation_is_not_carried_over() {
        let mut stuck = old();
        stuck
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(ANNOTATION_ABANDON.into(), "true".into());
        let n = recreated(&stuck);
        let a = n.metadata.annotations.expect("annotations");
        assert!(!a.contains_key(ANNOTATION_ABANDON), "{a:?}");
        assert_eq!(a.get("a").map(String::as_str), Some("b"));
        assert_eq!(dropped_annotations(&stuck), vec![ANNOTATION_ABANDON]);
        let p = plan(&stuck).join("\n");
        assert!(
            p.contains(
                "same spec, labels and annotations but ipsec.bnerd.net/abandon-customer-resources:"
            ) && p.contains(
                "annotation ipsec.bnerd.net/abandon-customer-resources is not carried over"
            ),
            "{p}"
        );
        assert!(
            p.contains("abandon-customer-resources=true is set on it: if its customer side cannot be unwound"),
            "{p}"
        );
        assert!(dropped_annotations(&old()).is_empty());
        assert!(!plan(&old()).join("\n").contains("not carried over"));
    }

    #[test]
    fn the_plan_names_what_goes_and_what_comes() {
        let p = plan(&old()).join("\n");
        assert!(
            p.contains("remove gateway route 10.251.0.0/16 via 10.254.0.3"),
            "{p}"
        );
        assert!(
            p.contains("leg port p1 at 10.254.0.3 from router r1"),
            "{p}"
        );
        assert!(p.contains("lowest free transit address"), "{p}");
        let mut pinned = old();
        pinned.spec.transit_ip = Some("10.254.0.9".into());
        assert!(
            plan(&pinned)
                .join("\n")
                .contains("pinned spec.transitIP 10.254.0.9")
        );
    }

    fn cross_tenant() -> ClusterLink {
        let mut l = old();
        l.spec.credentials_secret_ref = Some(bnerd_api::SecretRef {
            name: "clusterlink-svc01-link".into(),
            namespace: "bnerd-vpn-clusterlinks".into(),
        });
        l.spec.customer_project_id = Some("p1".into());
        l
    }

    #[test]
    fn a_move_between_modes_says_what_goes_and_what_comes() {
        assert!(matches!(
            moved(&old(), TransitIsolation::PerCustomer),
            Err(RecreateError::NotCrossTenant(_))
        ));
        let shared = cross_tenant();
        let new = moved(&shared, TransitIsolation::PerCustomer).unwrap();
        assert!(new.spec.per_customer());
        assert_eq!(
            new.spec.credentials_secret_ref,
            shared.spec.credentials_secret_ref
        );
        let p = plan_move(&shared, &new).join("\n");
        assert!(
            p.contains("remove gateway route 10.251.0.0/16 via 10.254.0.3"),
            "{p}"
        );
        assert!(
            p.contains(
                "spec.transitIsolation: PerCustomer: a leg on project p1's customer transit"
            ),
            "{p}"
        );
        assert!(
            p.contains("kubectl clusterlink decommission-share --project p1"),
            "{p}"
        );
        assert!(
            !p.contains("apply ClusterLink svc01-link again with the same spec"),
            "{p}"
        );

        // Back to Shared: the field goes, the customer transit may go with the link, and a
        // missing attestation is said before it stops the new link.
        let mut per_customer = new.clone();
        per_customer.status = Some(bnerd_api::ClusterLinkStatus {
            customer_transit: Some(bnerd_api::CustomerTransit {
                network_id: Some("anet".into()),
                edge_router_id: Some("edge".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        let back = moved(&per_customer, TransitIsolation::Shared).unwrap();
        assert_eq!(back.spec.transit_isolation, None);
        let p = plan_move(&per_customer, &back).join("\n");
        assert!(
            p.contains("remove its customer transit (network anet, edge router edge, the share)"),
            "{p}"
        );
        assert!(p.contains("again as Shared"), "{p}");
        assert!(
            p.contains("TenantIsolationAttested=False until a platform admin sets it"),
            "{p}"
        );
    }

    /// A move to `PerCustomer` of the project's last `Shared` link says the share is left
    /// behind and names the exact command that removes it; while another `Shared` link of
    /// the project exists (deleting or not), it names those; any other recreate says nothing.
    #[test]
    fn the_last_shared_link_moved_leaves_the_share_behind() {
        let project = "0123456789abcdef0123456789abcdef";
        let of = |name: &str, project: &str, mode: Option<TransitIsolation>| {
            let mut l = cross_tenant();
            l.metadata.name = Some(name.into());
            l.spec.customer_project_id = Some(project.into());
            l.spec.transit_isolation = mode;
            l
        };
        let old = of("svc01-link", project, None);
        let new = moved(&old, TransitIsolation::PerCustomer).unwrap();
        let per_customer = Some(TransitIsolation::PerCustomer);
        let left_behind = ShareAfterMove::LeftBehind {
            project: project.into(),
        };
        let left = Some(left_behind.clone());
        let kept = |names: &[&str]| {
            Some(ShareAfterMove::StillNeeded {
                project: project.into(),
                shared: names.iter().map(|n| n.to_string()).collect(),
            })
        };
        let deleting = {
            let mut l = of("going", project, None);
            l.metadata.deletion_timestamp =
                Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
                ));
            l
        };
        let other = "fedcba9876543210fedcba9876543210";
        let cases: Vec<(&str, Vec<ClusterLink>, Option<ShareAfterMove>)> = vec![
            ("no other link", vec![], left.clone()),
            (
                "the moved link itself, read after",
                vec![new.clone()],
                left.clone(),
            ),
            (
                "the old link itself, read before",
                vec![old.clone()],
                left.clone(),
            ),
            (
                "other links PerCustomer or of another project",
                vec![of("b", project, per_customer), of("c", other, None)],
                left.clone(),
            ),
            (
                "another Shared link",
                vec![
                    of("b", project, Some(TransitIsolation::Shared)),
                    of("c", project, per_customer),
                ],
                kept(&["b"]),
            ),
            ("a deleting Shared link", vec![deleting], kept(&["going"])),
        ];
        for (what, links, want) in cases {
            assert_eq!(share_after_move(&old, &new, &links), want, "{what}");
        }
        // Not a move from Shared to PerCustomer: nothing to say.
        let back = moved(&new, TransitIsolation::Shared).unwrap();
        assert_eq!(share_after_move(&new, &back, &[]), None);
        let again = moved(&new, TransitIsolation::PerCustomer).unwrap();
        assert_eq!(share_after_move(&new, &again, &[]), None);
        assert_eq!(share_after_move(&old, &recreated(&old), &[]), None);

        let command = format!("kubectl clusterlink decommission-share --project {project} --yes");
        let line = left_behind.line("svc01-link");
        assert!(
            line.starts_with(&format!(
                "ClusterLink svc01-link was project {project}'s last Shared link"
            )) && line.ends_with(&command),
            "{line}"
        );
        assert_eq!(left_behind.decommission(), Some(command.clone()));
        let line = kept(&["b", "c"]).unwrap().line("svc01-link");
        assert!(
            line.contains("still has Shared ClusterLink(s) b, c") && line.ends_with(&command),
            "{line}"
        );
        assert_eq!(kept(&["b"]).unwrap().decommission(), None);
        let unknown = ShareAfterMove::Unknown {
            project: "p $(id)".into(),
            why: "forbidden".into(),
        };
        assert!(
            unknown
                .line("l")
                .contains("kubectl clusterlink decommission-share --project 'p $(id)' --yes"),
            "{}",
            unknown.line("l")
        );
        assert_eq!(unknown.decommission(), None);
    }
}
