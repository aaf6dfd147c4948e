use std::sync::Arc;

use bnerd_cloud::fabric::Fabric;
use bnerd_cloud::{AuthConfig, Identity, OpenStack};
use bnerd_vpn_operator::config::{Args, Config};
use bnerd_vpn_operator::controller;
use bnerd_vpn_operator::engine::OperatorIdentity;
use clap::Parser;
use tracing::{error, info};

#[tokio::main]
async fn main() -> std::process::ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    match run().await {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            error!("{e}");
            eprintln!("bnerd-vpn-operator: {e}");
            std::process::ExitCode::from(2)
        }
    }
}

async fn run() -> Result<(), String> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let config = Config::try_from(Args::parse()).map_err(|e| e.to_string())?;
    let auth = AuthConfig::from_env(&|k| std::env::var(k).ok())
        .map_err(|e| format!("operator credential: {e}"))?;
    let cloud = OpenStack::new(auth).map_err(|e| e.to_string())?;
    let fabric = Fabric::discover(
        &cloud,
        &config.transit_network_id,
        &config.gateway_router_id,
    )
    .await
    .map_err(|e| format!("startup check failed: {e}"))?;
    info!(
        transit_network = %fabric.transit_network_id,
        subnet = %fabric.transit_subnet,
        gateway_router = %fabric.gateway_router_id,
        extraroute_atomic = fabric.extraroute_atomic,
        revision_if_match = fabric.revision_if_match,
        tags_at_create = fabric.tags_at_create,
        "fabric checked"
    );
    let token = cloud
        .token_info()
        .await
        .map_err(|e| format!("operator credential: {e}"))?;
    let operator = OperatorIdentity {
        project_id: token.project_id,
        auth_url: cloud.auth_config().auth_url.clone(),
        region: cloud.auth_config().region.clone(),
    };
    let client = kube::Client::try_default()
        .await
        .map_err(|e| format!("kubernetes client: {e}"))?;
    controller::run(client, Arc::new(cloud), operator, fabric, config).await;
    Ok(())
}
