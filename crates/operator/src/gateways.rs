//! The gateways' side of reverse routes: a watch-fed index of every VPNGateway/IPsecGateway
//! that needs one, and the estate-wide fan-out (docs/crd-reference.md, "When a link is looked
//! at again"). A gateway gaining or losing
//! reverse exposures, changing the CIDR or address they route to, or being deleted re-triggers
//! every ClusterLink instead of waiting for the resync; the changes of one
//! [`FAN_OUT_WINDOW`] re-trigger them once.
//!
//! One watch per gateway kind feeds both: the index every reconcile reads from memory (a
//! fan-out over N links used to cost 2N cluster-wide LISTs), and the trigger stream. The index
//! keeps only what a gateway asks of the links (a [`ReverseTarget`], ~100 bytes) rather than a
//! reflector store of whole objects, whose status and spec can be kilobytes each: an estate
//! with 1000 gateways, of which a handful have reverse exposures, costs a few KiB.
//!
//! A kind is "unknown" until its first list completes. The unwind removes reverse routes by
//! matching targets, so an unknown kind is never read as "no targets": readers wait for the
//! index, and give up with an error (the reconcile is retried) rather than guess.

use std::collections::BTreeMap;
use std::time::Duration;

use bnerd_api::gateway::{GATEWAY_KINDS, ReverseTarget};
use futures::{Stream, StreamExt, stream};
use kube::api::{Api, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use thiserror::Error;
use tracing::{debug, info, warn};

pub use bnerd_api::gateway::resource;

pub use bnerd_api::gateway::{reverse_targets, target_of};

/// The index is not synced: some gateway kind has not been listed yet (or its watch keeps
/// failing for a reason other than a missing CRD, e.g. RBAC).
#[derive(Debug, Error)]
#[error("gateway index not synced after {waited:?}: still waiting for the first list of {kinds}")]
pub struct NotSynced {
    pub waited: Duration,
    pub kinds: String,
}

/// Per kind: `None` until its first list completed; a kind whose CRD is missing is synced
/// and empty.
type Kinds = BTreeMap<&'static str, Option<BTreeMap<String, ReverseTarget>>>;

/// The estate's reverse targets, kept current by the gateway watches ([`fan_out`]).
#[derive(Clone)]
pub struct TargetIndex {
    tx: std::sync::Arc<tokio::sync::watch::Sender<Kinds>>,
}

impl Default for TargetIndex {
    fn default() -> Self {
        Self::new()
    }
}

impl TargetIndex {
    pub fn new() -> Self {
        let kinds: Kinds = GATEWAY_KINDS.iter().map(|(k, _)| (*k, None)).collect();
        Self {
            tx: std::sync::Arc::new(tokio::sync::watch::Sender::new(kinds)),
        }
    }

    /// Replace what one kind asks for (after its list, or after a change).
    pub fn set(&self, kind: &'static str, targets: BTreeMap<String, ReverseTarget>) {
        self.tx.send_modify(|k| {
            k.insert(kind, Some(targets));
        });
    }

    pub fn synced(&self) -> bool {
        self.tx.borrow().values().all(Option::is_some)
    }

    /// Wait until every kind has been listed once.
    pub async fn wait_synced(&self) {
        let mut rx = self.tx.subscribe();
        // The sender lives as long as `self`: wait_for cannot fail while we hold it.
        let _ = rx.wait_for(|k| k.values().all(Option::is_some)).await;
    }

    /// Every current target, sorted; waits up to `wait` for the index to sync and refuses to
    /// answer before (an empty answer would read as "no gateway needs a route").
    pub async fn current(&self, wait: Duration) -> Result<Vec<ReverseTarget>, NotSynced> {
        if tokio::time::timeout(wait, self.wait_synced())
            .await
            .is_err()
        {
            let kinds: Vec<&str> = self
                .tx
                .borrow()
                .iter()
                .filter(|(_, v)| v.is_none())
                .map(|(k, _)| *k)
                .collect();
            return Err(NotSynced {
                waited: wait,
                kinds: kinds.join(", "),
            });
        }
        let mut out: Vec<ReverseTarget> = self
            .tx
            .borrow()
            .values()
            .flatten()
            .flat_map(|m| m.values().cloned())
            .collect();
        out.sort();
        Ok(out)
    }
}

/// What each gateway of one kind asks of the links, keyed by namespace/name. Feeding it watch
/// events says whether the estate's reverse targets changed.
#[derive(Debug, Default)]
pub struct TargetTracker {
    known: BTreeMap<String, Option<ReverseTarget>>,
    relist: Option<BTreeMap<String, Option<ReverseTarget>>>,
}

impl TargetTracker {
    /// What the gateways of this kind ask for now, by namespace/name.
    pub fn targets(&self) -> BTreeMap<String, ReverseTarget> {
        self.known
            .iter()
            .filter_map(|(k, t)| t.clone().map(|t| (k.clone(), t)))
            .collect()
    }

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

/// How long the fan-out gathers gateway changes before it re-triggers every link. Each
/// fan-out queues a reconcile of every link, and a link already reconciling runs again after,
/// so a burst of N changes (a namespace deleted with its gateways, a gateway controller
/// rewriting their statuses after a restart) used to reconcile the estate up to N times. Such
/// bursts reach the watch within about a second. Two seconds takes them whole, and is what a
/// change waits at most: little next to the fan-out it starts (a Neutron write on every link's
/// router: 11 to 27 s for 50 links on the lab) or to the resync that would pick the change up
/// otherwise (minutes). A longer trickle of changes re-triggers the links once per window.
pub const FAN_OUT_WINDOW: Duration = Duration::from_secs(2);

/// `changes` merged by window: the first change opens a window of `window`, every change until
/// it closes joins it, and at its close one item says how many it took. A window never grows
/// past `window` from its first change, so a steady stream of changes still goes out once per
/// window. Ends when `changes` ends (closing an open window at once).
pub fn coalesce<S>(changes: S, window: Duration) -> impl Stream<Item = usize> + Send + 'static
where
    S: Stream<Item = ()> + Send + Unpin + 'static,
{
    stream::unfold(changes.fuse(), move |mut changes| async move {
        changes.next().await?;
        let close = tokio::time::Instant::now() + window;
        let mut merged = 1;
        while let Ok(Some(())) = tokio::time::timeout_at(close, changes.next()).await {
            merged += 1;
        }
        Some((merged, changes))
    })
}

/// One `()` per [`FAN_OUT_WINDOW`] in which the estate's reverse targets changed, from watches
/// on both gateway kinds, which keep `index` current as each change arrives (so the reconciles
/// a `()` triggers read every change of its window). A kind whose CRD is missing counts as
/// synced and empty, and keeps retrying with the watcher's backoff, so installing it later
/// needs no restart.
pub fn fan_out(client: Client, index: TargetIndex) -> impl Stream<Item = ()> + Send + 'static {
    let per_kind = GATEWAY_KINDS.iter().map(move |(kind, plural)| {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), &resource(kind, plural));
        let mut tracker = TargetTracker::default();
        let index = index.clone();
        let kind: &'static str = kind;
        watcher(api, watcher::Config::default())
            .default_backoff()
            .filter_map(move |ev| {
                let changed = match ev {
                    Ok(ev) => {
                        let listed = matches!(ev, watcher::Event::InitDone);
                        let changed = tracker.observe(project(kind, ev));
                        // The first list marks the kind synced even when it found nothing.
                        if changed || listed {
                            index.set(kind, tracker.targets());
                        }
                        changed
                    }
                    // A kind whose CRD is not installed is normal: it asks for nothing.
                    Err(e) if crd_missing(&e) => {
                        debug!(kind = %kind, error = %e, "gateway kind not installed");
                        // Only a CRD removed under gateways that had targets changes anything.
                        let had = !tracker.targets().is_empty();
                        tracker = TargetTracker::default();
                        index.set(kind, BTreeMap::new());
                        had
                    }
                    // Anything else (RBAC!) silently costs the fan-out, so say it. The index
                    // keeps what it knew; before the first list it stays unsynced.
                    Err(e) => {
                        warn!(kind = %kind, error = %e, "gateway watch failed; reverse routes follow gateway changes only at the resync interval until it recovers");
                        false
                    }
                };
                if changed {
                    debug!(kind = %kind, "gateway reverse targets changed");
                }
                std::future::ready(changed.then_some(()))
            })
            .boxed()
    });
    coalesce(stream::select_all(per_kind), FAN_OUT_WINDOW).map(|changes| {
        info!(
            changes,
            "gateway reverse targets changed; re-triggering every ClusterLink"
        );
    })
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
                uid: None,
                created: None,
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

    /// What `Controller::reconcile_all_on` does with each fan-out: a reconcile of every link.
    fn trigger_every_link(triggered: &mut [u32]) {
        for n in triggered {
            *n += 1;
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_burst_of_gateway_changes_reconciles_each_link_once() {
        let (tx, rx) = futures::channel::mpsc::unbounded();
        let mut fan_outs = Box::pin(coalesce(rx, FAN_OUT_WINDOW));
        let mut triggered = vec![0u32; 1000];
        // 1000 gateways gain reverse exposures over about a second, ten every 10 ms, each a
        // change for the tracker as the watch would feed it.
        let burst = tokio::spawn({
            let tx = tx.clone();
            async move {
                let mut k = TargetTracker::default();
                for i in 0..1000 {
                    if k.observe(Event::Apply(t(&format!("g{i}"), "100.64.1.0/24"))) {
                        tx.unbounded_send(()).expect("receiver alive");
                    }
                    if i % 10 == 9 {
                        tokio::time::sleep(Duration::from_millis(10)).await;
                    }
                }
            }
        });
        let start = tokio::time::Instant::now();
        assert_eq!(fan_outs.next().await, Some(1000));
        trigger_every_link(&mut triggered);
        // Out when the window closes, not later.
        let waited = start.elapsed();
        assert!(
            waited >= FAN_OUT_WINDOW && waited < FAN_OUT_WINDOW + Duration::from_millis(20),
            "{waited:?}"
        );
        burst.await.expect("burst");
        assert!(triggered.iter().all(|n| *n == 1));
        // Quiet: no more fan-outs.
        let quiet = tokio::time::timeout(Duration::from_secs(60), fan_outs.next()).await;
        assert!(quiet.is_err(), "{quiet:?}");
        // A change after the window has its own fan-out, one window later.
        let again = tokio::time::Instant::now();
        tx.unbounded_send(()).expect("receiver alive");
        assert_eq!(fan_outs.next().await, Some(1));
        trigger_every_link(&mut triggered);
        assert!(again.elapsed() >= FAN_OUT_WINDOW);
        assert!(triggered.iter().all(|n| *n == 2));
        // A steady trickle, one change every 100 ms for 10 s: one fan-out per window.
        let trickle = tokio::spawn({
            let tx = tx.clone();
            async move {
                for _ in 0..100 {
                    tx.unbounded_send(()).expect("receiver alive");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
        });
        let mut windows = vec![];
        while windows.iter().sum::<usize>() < 100 {
            windows.push(fan_outs.next().await.expect("open"));
        }
        trickle.await.expect("trickle");
        assert_eq!(windows.len(), 5, "{windows:?}");
        // The watches gone: the fan-out ends.
        drop(tx);
        assert_eq!(fan_outs.next().await, None);
    }

    #[tokio::test]
    async fn an_unsynced_index_never_answers_no_targets() {
        let index = TargetIndex::new();
        assert!(!index.synced());
        // Before both kinds were listed the unwind must not read "no gateway needs a route".
        let e = index
            .current(Duration::from_millis(20))
            .await
            .expect_err("unsynced");
        assert!(
            e.kinds.contains("IPsecGateway") && e.kinds.contains("VPNGateway"),
            "{e}"
        );
        let mut k = TargetTracker::default();
        k.observe(Event::Init);
        k.observe(Event::InitApply(t("a", "100.64.1.0/24")));
        k.observe(Event::InitDone);
        index.set("IPsecGateway", k.targets());
        assert!(index.current(Duration::from_millis(20)).await.is_err());
        // A kind whose CRD is missing is synced and empty.
        index.set("VPNGateway", BTreeMap::new());
        let got = index.current(Duration::ZERO).await.expect("synced");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0].service_cidr, "100.64.1.0/24");
        // A change replaces the kind's targets; a reader waiting for the sync wakes up.
        index.set("IPsecGateway", BTreeMap::new());
        assert!(
            index
                .current(Duration::ZERO)
                .await
                .expect("synced")
                .is_empty()
        );
    }
}
