use std::sync::Arc;

use bnerd_cloud::{AuthConfig, OpenStack};
use bnerd_vpn_operator::config::{Args, Config};
use bnerd_vpn_operator::controller::{self, Observers};
use bnerd_vpn_operator::health::{self, Health};
use bnerd_vpn_operator::leader::{self, Election, LeaderError};
use bnerd_vpn_operator::logging;
use bnerd_vpn_operator::metrics::{CloudCalls, Metrics};
use bnerd_vpn_operator::startup;
use clap::Parser;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Recorder, Reporter};
use tracing::{error, info};

/// Exit codes: 2 for a setting that is wrong (a restart will not help), 1 for a lost Lease
/// (the pod restarts as a standby).
#[tokio::main]
async fn main() -> std::process::ExitCode {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = match Config::try_from(Args::parse()) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bnerd-vpn-operator: {e}");
            return std::process::ExitCode::from(2);
        }
    };
    logging::init(config.log_format);
    for setting in &config.deprecated {
        tracing::warn!(
            "{setting} is deprecated: set IPSEC_DRIFT_CHECK_INTERVAL (chart clusterLink.driftCheckInterval) instead"
        );
    }
    match run(config).await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(Failure::Lost(e)) => {
            error!("{e}");
            std::process::ExitCode::from(1)
        }
        Err(Failure::Setup(e)) => {
            error!("{e}");
            eprintln!("bnerd-vpn-operator: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

enum Failure {
    Setup(String),
    Lost(LeaderError),
}

async fn run(config: Config) -> Result<(), Failure> {
    let metrics = Arc::new(Metrics::new());
    let health = Arc::new(Health::default());
    let auth = AuthConfig::from_env(&|k| std::env::var(k).ok())
        .map_err(|e| Failure::Setup(format!("operator credential: {e}")))?;
    let cloud = OpenStack::new(auth)
        .map_err(|e| Failure::Setup(e.to_string()))?
        .with_observer(Arc::new(CloudCalls(metrics.clone())));
    let cloud = Arc::new(cloud);
    let client = kube::Client::try_default()
        .await
        .map_err(|e| Failure::Setup(format!("kubernetes client: {e}")))?;
    health::serve(config.metrics_addr, health.clone(), metrics.clone())
        .await
        .map_err(|e| {
            Failure::Setup(format!(
                "IPSEC_METRICS_ADDR (--metrics-addr) {}: {e}",
                config.metrics_addr
            ))
        })?;

    let election = config
        .lease
        .as_ref()
        .map(|l| Election::resolve(l, client.default_namespace()));
    let events = operator_reference(election.as_ref()).map(|r| {
        let reporter = Reporter {
            controller: "bnerd-vpn-operator".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        (Recorder::new(client.clone(), reporter), r)
    });
    let work = {
        let (health, metrics) = (health.clone(), metrics.clone());
        move |stop: tokio::sync::watch::Receiver<bool>| {
            lead_work(client.clone(), cloud, config, health, metrics, events, stop)
        }
    };
    match election {
        Some(election) => {
            let lease_client = leader::lease_client(&election)
                .await
                .map_err(|e| Failure::Setup(format!("kubernetes client: {e}")))?;
            leader::lead(
                lease_client,
                &election,
                &health,
                &metrics,
                shutdown_signal(),
                work,
            )
            .await
            .map_err(|e| match e {
                LeaderError::Lost(_) => Failure::Lost(e),
                other => Failure::Setup(other.to_string()),
            })
        }
        None => {
            info!("leader election disabled (IPSEC_LEADER_ELECT=false): reconciling at once");
            health.set_electing(true);
            health.set_leading(true);
            metrics.set_leader(true);
            let (stop, stopped) = tokio::sync::watch::channel(false);
            let mut work = std::pin::pin!(work(stopped));
            tokio::select! {
                () = &mut work => {}
                () = shutdown_signal() => {
                    let _ = stop.send(true);
                    work.await;
                }
            }
            Ok(())
        }
    }
}

/// What the leader does: reach the cloud (retrying), then reconcile and keep checking the
/// fabric until told to stop.
async fn lead_work(
    client: kube::Client,
    cloud: Arc<OpenStack>,
    config: Config,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    events: Option<(Recorder, ObjectReference)>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let connected = tokio::select! {
        c = startup::connect(&cloud, &config, &health, &metrics, events.as_ref()) => Some(c),
        _ = stop.wait_for(|s| *s) => None,
    };
    let Some((fabric, operator, privilege)) = connected else {
        return;
    };
    info!("the cloud answered and the fabric checks out; reconciling");
    let fabric_checks = startup::watch_fabric(
        cloud.clone(),
        config.clone(),
        fabric.clone(),
        privilege,
        health.clone(),
        metrics.clone(),
        events,
    );
    let observers = Observers { metrics, health };
    tokio::select! {
        () = controller::run(client, cloud, operator, fabric, config, observers, stop) => {}
        () = fabric_checks => {}
    }
}

/// The object fabric-check Events are about: this pod when it knows itself (the chart sets
/// POD_NAME and POD_NAMESPACE), else the leader Lease.
fn operator_reference(election: Option<&Election>) -> Option<ObjectReference> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
    if let (Some(name), Some(namespace)) = (env("POD_NAME"), env("POD_NAMESPACE")) {
        return Some(ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Pod".into()),
            name: Some(name),
            namespace: Some(namespace),
            // Without it `kubectl describe pod` never lists these Events (it matches by uid).
            uid: env("POD_UID"),
            ..Default::default()
        });
    }
    election.map(|e| ObjectReference {
        api_version: Some("coordination.k8s.io/v1".into()),
        kind: Some("Lease".into()),
        name: Some(e.name.clone()),
        namespace: Some(e.namespace.clone()),
        ..Default::default()
    })
}

/// SIGTERM (the kubelet) or Ctrl-C.
async fn shutdown_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        () = term => {}
    }
    info!("shutdown signal received");
}
