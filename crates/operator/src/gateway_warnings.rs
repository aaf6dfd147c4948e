//! Which gateway Warnings were already published. Every link that meets a refused gateway
//! reports it, at every reconcile: published as it comes, that is one Event write per gateway,
//! per link, per resync. A gateway's owner needs to hear of a problem once, when it appears or
//! changes, so each (gateway as the index saw it, note) is published once per leader term.
//! A gateway whose status changes is a new key (its uid, CIDR or next hop differ), so a new or
//! returning problem is published again; gateways gone from the index are forgotten.

use std::collections::BTreeSet;
use std::sync::Mutex;

use bnerd_api::GatewayRef;
use bnerd_api::gateway::ReverseTarget;

/// One published Warning: the gateway as its target read, and what the Event said.
type Key = (GatewayRef, Option<String>, String, String, String);

#[derive(Default)]
pub struct GatewayWarnings {
    published: Mutex<BTreeSet<Key>>,
}

impl GatewayWarnings {
    /// Whether this note about this gateway is new (to be published); records it. `targets`
    /// is the index the reconcile read: entries of gateways no longer in it are dropped.
    pub fn first(&self, gateway: &GatewayRef, note: &str, targets: &[ReverseTarget]) -> bool {
        let target = targets.iter().find(|t| t.gateway == *gateway);
        let key: Key = (
            gateway.clone(),
            target.and_then(|t| t.uid.clone()),
            target.map(|t| t.service_cidr.clone()).unwrap_or_default(),
            target.map(|t| t.port_fixed_ip.clone()).unwrap_or_default(),
            note.to_string(),
        );
        let mut published = self.published.lock().unwrap_or_else(|e| e.into_inner());
        published.retain(|(g, uid, cidr, hop, _)| {
            targets.iter().any(|t| {
                t.gateway == *g
                    && t.uid == *uid
                    && t.service_cidr == *cidr
                    && t.port_fixed_ip == *hop
            })
        });
        published.insert(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(name: &str, cidr: &str) -> ReverseTarget {
        ReverseTarget {
            gateway: GatewayRef {
                kind: "IPsecGateway".into(),
                namespace: "vpn".into(),
                name: name.into(),
            },
            service_cidr: cidr.into(),
            port_fixed_ip: "10.254.0.10".into(),
            uid: Some(format!("uid-{name}")),
            created: None,
        }
    }

    #[test]
    fn a_gateways_problem_is_published_once_until_it_changes() {
        let w = GatewayWarnings::default();
        let targets = vec![target("g", "0.0.0.0/0"), target("h", "100.64.1.0/24")];
        let g = &targets[0].gateway;
        // A thousand links meet the same problem: one Event.
        let published = (0..1000)
            .filter(|_| {
                w.first(
                    g,
                    "status.serviceCIDR 0.0.0.0/0 would route everything",
                    &targets,
                )
            })
            .count();
        assert_eq!(published, 1);
        // Another problem of the same gateway is news.
        assert!(w.first(g, "another problem", &targets));
        // The gateway's status changes: the same words are news again.
        let changed = vec![target("g", "0.0.0.0/1"), targets[1].clone()];
        assert!(w.first(
            &changed[0].gateway,
            "status.serviceCIDR 0.0.0.0/0 would route everything",
            &changed
        ));
        // A gateway gone from the index is forgotten.
        let h = &targets[1].gateway;
        assert!(w.first(h, "n", &targets));
        assert!(!w.first(h, "n", &targets));
        let without_h = vec![targets[0].clone()];
        w.first(g, "x", &without_h);
        assert!(
            w.first(h, "n", &targets),
            "published again after it came back"
        );
    }
}
