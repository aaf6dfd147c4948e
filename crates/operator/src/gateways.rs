//! The gateways' side of reverse routes: listing every VPNGateway/IPsecGateway that needs one,
//! and the estate-wide fan-out the spec asks for. A gateway gaining or losing reverse
//! exposures, changing the CIDR or address they route to, or being deleted re-triggers every
//! ClusterLink at once instead of waiting for the resync.

use std::collections::BTreeMap;

use bnerd_api::gateway::{GATEWAY_KINDS, ReverseTarget, reverse_target};
use futures::{Stream, StreamExt, stream};
use kube::api::{Api, DynamicObject, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use tracing::{debug, info, warn};

pub use bnerd_api::gateway::resource;

fn target_of(kind: &str, obj: &DynamicObject) -> Option<ReverseTarget> {
    let v = serde_json::to_value(obj).ok()?;
    reverse_target(
        kind,
        &obj.namespace().unwrap_or_default(),
        &obj.name_any(),
        &v,
    )
}

/// Every gateway with reverse exposures, either kind, any namespace. A kind whose CRD is
/// not installed simply contributes none.
pub async fn reverse_targets(client: &Client) -> Result<Vec<ReverseTarget>, kube::Error> {
    let mut out = vec![];
    for (kind, plural) in GATEWAY_KINDS {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind, plural));
        let list = match api.list(&ListParams::default()).await {
            Ok(l) => l,
            Err(kube::Error::Api(s)) if s.code == 404 => continue,
            Err(e) => return Err(e),
        };
        out.extend(list.iter().filter_map(|o| target_of(kind, o)));
    }
    out.sort();
    Ok(out)
}

/// What each gateway of one kind asks of the links, keyed by namespace/name. Feeding it watch
/// events says whether the estate's reverse targets changed.
#[derive(Debug, Default)]
pub struct TargetTracker {
    known: BTreeMap<String, Option<ReverseTarget>>,
    relist: Option<BTreeMap<String, Option<ReverseTarget>>>,
}

impl TargetTracker {
    /// Record one event; true when it changed what some gateway asks for.
    pub fn observe(&mut self, event: watcher::Event<(String, Option<ReverseTarget>)>) -> bool {
        match event {
            // A gateway first seen without a target (created before its status is filled
            // in) asks nothing of the links yet.
            watcher::Event::Apply((key, target)) => {
                self.known.insert(key, target.clone()).flatten() != target
            }
            watcher::Event::Delete((key, _)) => self.known.remove(&key).flatten().is_some(),
            watcher::Event::Init => {
                self.relist = Some(BTreeMap::new());
                false
            }
            watcher::Event::InitApply((key, target)) => {
                self.relist.get_or_insert_default().insert(key, target);
                false
            }
            // A relist after a lost watch may hide deletions and changes: compare the sets.
            watcher::Event::InitDone => {
                let fresh = self.relist.take().unwrap_or_default();
                let wanted = |m: &BTreeMap<String, Option<ReverseTarget>>| {
                    m.values().flatten().cloned().collect::<Vec<_>>()
                };
                let changed = wanted(&fresh) != wanted(&self.known);
                self.known = fresh;
                changed
            }
        }
    }
}

/// An event about a gateway object as an event about what it asks of the links.
fn project(
    kind: &str,
    ev: watcher::Event<DynamicObject>,
) -> watcher::Event<(String, Option<ReverseTarget>)> {
    let entry = |o: &DynamicObject| {
        let key = format!("{}/{}", o.namespace().unwrap_or_default(), o.name_any());
        (key, target_of(kind, o))
    };
    match ev {
        watcher::Event::Apply(o) => watcher::Event::Apply(entry(&o)),
        watcher::Event::Delete(o) => watcher::Event::Delete(entry(&o)),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(o) => watcher::Event::InitApply(entry(&o)),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

fn crd_missing(e: &watcher::Error) -> bool {
    matches!(e, watcher::Error::InitialListFailed(kube::Error::Api(s)) | watcher::Error::WatchStartFailed(kube::Error::Api(s)) if s.code == 404)
}

/// One `()` per change of the estate's reverse targets, from watches on both gateway kinds.
/// A kind whose CRD is missing keeps retrying with the watcher's backoff, so installing it
/// later needs no restart.
pub fn fan_out(client: Client) -> impl Stream<Item = ()> + Send + 'static {
    let per_kind = GATEWAY_KINDS.iter().map(move |(kind, plural)| {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind, plural));
        let mut tracker = TargetTracker::default();
        watcher(api, watcher::Config::default())
            .default_backoff()
            .filter_map(move |ev| {
                let changed = match ev {
                    Ok(ev) => tracker.observe(project(kind, ev)),
                    // A kind whose CRD is not installed is normal; anything else (RBAC!)
                    // silently costs the fan-out, so say it.
                    Err(e) if crd_missing(&e) => {
                        debug!(kind = %kind, error = %e, "gateway kind not installed");
                        false
                    }
                    Err(e) => {
                        warn!(kind = %kind, error = %e, "gateway watch failed; reverse routes follow gateway changes only at the resync interval until it recovers");
                        false
                    }
                };
                if changed {
                    info!(kind = %kind, "gateway reverse targets changed; re-triggering every ClusterLink");
                }
                std::future::ready(changed.then_some(()))
            })
            .boxed()
    });
    stream::select_all(per_kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bnerd_api::GatewayRef;
    use watcher::Event;

    fn t(name: &str, cidr: &str) -> (String, Option<ReverseTarget>) {
        (
            format!("ns/{name}"),
            Some(ReverseTarget {
                gateway: GatewayRef {
                    kind: "IPsecGateway".into(),
                    namespace: "ns".into(),
                    name: name.into(),
                },
                service_cidr: cidr.into(),
                port_fixed_ip: "10.254.0.10".into(),
            }),
        )
    }

    fn none(name: &str) -> (String, Option<ReverseTarget>) {
        (format!("ns/{name}"), None)
    }

    #[test]
    fn only_changes_of_what_gateways_ask_for_trigger() {
        let mut k = TargetTracker::default();
        // Startup list: a gateway with exposures is news, one without is not.
        assert!(!k.observe(Event::Init));
        assert!(!k.observe(Event::InitApply(t("a", "100.64.1.0/24"))));
        assert!(!k.observe(Event::InitApply(none("b"))));
        assert!(k.observe(Event::InitDone));
        // A new gateway without a target yet: nothing.
        assert!(!k.observe(Event::Apply(none("new"))));
        // An update that leaves the target alone (labels, other spec): nothing.
        assert!(!k.observe(Event::Apply(t("a", "100.64.1.0/24"))));
        assert!(!k.observe(Event::Apply(none("b"))));
        // Gaining exposures, moving the CIDR, losing the last exposure: each triggers.
        assert!(k.observe(Event::Apply(t("b", "100.64.2.0/24"))));
        assert!(k.observe(Event::Apply(t("b", "100.64.3.0/24"))));
        assert!(k.observe(Event::Apply(none("b"))));
        // Deleting a gateway that had a target triggers; one without does not.
        assert!(k.observe(Event::Delete(t("a", "100.64.1.0/24"))));
        assert!(!k.observe(Event::Delete(none("b"))));
        // A relist after a lost watch that finds a new target triggers, an identical one not.
        assert!(!k.observe(Event::Init));
        assert!(!k.observe(Event::InitApply(t("c", "100.64.4.0/24"))));
        assert!(k.observe(Event::InitDone));
        assert!(!k.observe(Event::Init));
        assert!(!k.observe(Event::InitApply(t("c", "100.64.4.0/24"))));
        assert!(!k.observe(Event::InitDone));
        // A relist that misses a deletion notices it.
        assert!(!k.observe(Event::Init));
        assert!(k.observe(Event::InitDone));
    }
}
