//! Leader election on a coordination.k8s.io/v1 Lease (kube-lease-manager): only the holder
//! reconciles. A standby waits, making no OpenStack call, and takes over once the Lease runs
//! out. A leader that loses the Lease, or cannot tell whether it still holds it, drops its
//! work at once: no write leaves after that point.
//!
//! The Lease is renewed a third of its duration before it ends, over a Kubernetes client whose
//! requests time out before that third is over; so a leader cut off from the apiserver learns
//! it failed to renew while its Lease still holds, and stops before anyone can take over.

use std::future::Future;
use std::pin::pin;
use std::time::Duration;

use kube::Client;
use kube_lease_manager::{LeaseManager, LeaseManagerBuilder};
use thiserror::Error;
use tracing::{error, info, warn};

use crate::config::LeaseConfig;
use crate::health::Health;
use crate::metrics::Metrics;

#[derive(Debug, Error)]
pub enum LeaderError {
    #[error("leader election on Lease {namespace}/{name}: {source}")]
    Lease {
        namespace: String,
        name: String,
        #[source]
        source: kube_lease_manager::LeaseManagerError,
    },
    #[error("lost the leader Lease {0}; stopped reconciling")]
    Lost(String),
}

/// Where the election runs and who this replica is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Election {
    pub name: String,
    pub namespace: String,
    pub identity: String,
    pub duration: Duration,
}

impl Election {
    /// Namespace: the setting, else POD_NAMESPACE, else the pod's service-account namespace,
    /// else the kubeconfig's. Identity: POD_NAME, else host name and process ID.
    pub fn resolve(lease: &LeaseConfig, kube_default_namespace: &str) -> Self {
        let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        let namespace = lease
            .namespace
            .clone()
            .or_else(|| env("POD_NAMESPACE"))
            .or_else(|| {
                std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                    .ok()
                    .map(|s| s.trim().to_string())
                    .filter(|s| !s.is_empty())
            })
            .unwrap_or_else(|| kube_default_namespace.to_string());
        let identity = env("POD_NAME").unwrap_or_else(|| {
            let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
                .map(|h| h.trim().to_string())
                .ok()
                .or_else(|| env("HOSTNAME"))
                .unwrap_or_else(|| "operator".into());
            format!("{host}-{}", std::process::id())
        });
        Self {
            name: lease.name.clone(),
            namespace,
            identity,
            duration: lease.duration,
        }
    }

    /// Seconds before the end of the Lease at which the holder renews it.
    pub fn grace(&self) -> Duration {
        Duration::from_secs((self.duration.as_secs() / 3).max(2))
    }

    /// Every request of the election must answer within this, so a failed renewal is known
    /// before the Lease ends.
    pub fn request_timeout(&self) -> Duration {
        self.grace()
            .saturating_sub(Duration::from_secs(1))
            .max(Duration::from_secs(1))
    }

    fn lease_error(&self, source: kube_lease_manager::LeaseManagerError) -> LeaderError {
        LeaderError::Lease {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
            source,
        }
    }
}

/// A Kubernetes client for the election alone, whose requests give up within
/// `Election::request_timeout`.
pub async fn lease_client(election: &Election) -> Result<Client, kube::Error> {
    let mut config = kube::Config::infer()
        .await
        .map_err(kube::Error::InferConfig)?;
    let t = election.request_timeout();
    config.connect_timeout = Some(t);
    config.read_timeout = Some(t);
    config.write_timeout = Some(t);
    Client::try_from(config)
}

/// Take part in the election until `shutdown`; while leading, run `work`. `work` gets a
/// future that resolves when it should stop gracefully (the process is shutting down and
/// still holds the Lease); losing the Lease drops `work` at once instead. The Lease is
/// released on a graceful stop so a standby takes over without waiting for it to run out.
pub async fn lead<W, F>(
    client: Client,
    election: &Election,
    health: &Health,
    metrics: &Metrics,
    shutdown: impl Future<Output = ()>,
    work: W,
) -> Result<(), LeaderError>
where
    W: FnOnce(tokio::sync::watch::Receiver<bool>) -> F,
    F: Future<Output = ()>,
{
    let mut shutdown = pin!(shutdown);
    let mut retry = Duration::from_secs(1);
    // An apiserver that is not there yet (or RBAC not yet applied) is waited for, not a crash
    // loop: /readyz says why meanwhile.
    let manager = loop {
        tokio::select! {
            biased;
            () = &mut shutdown => return Ok(()),
            built = build(client.clone(), election) => match built {
                Ok(m) => break m,
                Err(e) => {
                    warn!(retry_in = ?retry, "{e}");
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(election.duration);
                }
            }
        }
    };
    retry = Duration::from_secs(1);
    health.set_electing(true);
    info!(lease = %format!("{}/{}", election.namespace, election.name), identity = %election.identity, "waiting to lead");
    loop {
        tokio::select! {
            biased;
            () = &mut shutdown => {
                // A standby holds nothing: release() leaves someone else's Lease alone, and
                // saying "released" here would read as if this replica had led.
                if let Err(e) = manager.release().await {
                    warn!(error = %e, "leaving the leader election");
                }
                info!("stopped waiting to lead");
                return Ok(());
            }
            changed = manager.changed() => match changed {
                Ok(true) => break,
                Ok(false) => {}
                Err(e) => {
                    warn!(error = %e, retry_in = ?retry, "leader election: the Lease could not be read or taken");
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(election.duration);
                }
            }
        }
    }

    info!(identity = %election.identity, "became the leader");
    metrics.set_leader(true);
    health.set_leading(true);
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let mut work = pin!(work(stopped));
    let mut stopping = false;
    let ended = loop {
        tokio::select! {
            biased;
            changed = manager.changed() => {
                // While this replica leads, `changed` only returns when it no longer does or
                // cannot tell; either way the work must stop now.
                let why = match changed {
                    Ok(_) => "another replica holds it".to_string(),
                    Err(e) => format!("renewing it failed: {e}"),
                };
                break Err(LeaderError::Lost(format!("{}/{} ({why})", election.namespace, election.name)));
            }
            () = &mut work => break Ok(()),
            () = &mut shutdown, if !stopping => {
                info!("shutting down: finishing the reconciles in flight");
                stopping = true;
                let _ = stop.send(true);
            }
        }
    };
    metrics.set_leader(false);
    health.set_leading(false);
    match ended {
        Ok(()) => {
            release(&manager, election).await;
            Ok(())
        }
        Err(e) => {
            error!("{e}");
            Err(e)
        }
    }
}

async fn build(client: Client, election: &Election) -> Result<LeaseManager, LeaderError> {
    LeaseManagerBuilder::new(client, &election.name)
        .with_namespace(&election.namespace)
        .with_identity(&election.identity)
        .with_duration(election.duration.as_secs())
        .with_grace(election.grace().as_secs())
        .build()
        .await
        .map_err(|e| election.lease_error(e))
}

async fn release(manager: &LeaseManager, election: &Election) {
    match manager.release().await {
        Ok(()) => info!(lease = %election.name, "released the leader Lease"),
        Err(e) => {
            warn!(error = %e, "releasing the leader Lease failed; a standby takes over when it runs out")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renewal_and_its_timeout_fit_in_the_lease() {
        for secs in [6, 10, 15, 30, 60] {
            let e = Election {
                name: "l".into(),
                namespace: "n".into(),
                identity: "i".into(),
                duration: Duration::from_secs(secs),
            };
            assert!(e.grace() < e.duration, "{secs}");
            assert!(e.request_timeout() < e.grace(), "{secs}");
        }
    }

    #[test]
    fn the_namespace_setting_wins() {
        let lease = LeaseConfig {
            name: "bnerd".into(),
            namespace: Some("ops".into()),
            duration: Duration::from_secs(15),
        };
        let e = Election::resolve(&lease, "default");
        assert_eq!(e.namespace, "ops");
        assert!(!e.identity.is_empty());
    }
}
