//! `kubectl-clusterlink` (run as `kubectl clusterlink …`): reads the cluster's ClusterLinks
//! and the operator's OpenStack project with the operator's settings and credential.
//! Exit codes (stable): 0 all good / done, 1 problems found / refused, 2 usage, bad settings
//! or unreachable.

use std::process::ExitCode;

use bnerd_api::ClusterLink;
use bnerd_cloud::{AuthConfig, Identity, OpenStack, SecretString, error_chain};
use bnerd_clusterlink_cli::output::{self, Format, ShareOutcome};
use bnerd_clusterlink_cli::{bounds, customers, doctor, plan, recreate, share};
use clap::{CommandFactory, Parser, Subcommand};
use kube::api::{Api, ListParams};

#[derive(Debug, Parser)]
#[command(
    name = "kubectl-clusterlink",
    version,
    about = "Health checks and decommission helpers for ClusterLinks (the operator's settings and OS_* credential apply)",
    after_help = "Exit codes: 0 all good or done, 1 problems found or refused, 2 usage, bad settings or unreachable."
)]
struct Cli {
    /// text for a person, json for a script (one document on stdout; errors as {"error": …}).
    #[arg(long, short = 'o', value_enum, default_value = "text", global = true)]
    output: Format,
    /// The gateway cluster's OpenStack router, as the operator is configured.
    #[arg(long, env = "IPSEC_GATEWAY_ROUTER_ID", global = true)]
    gateway_router_id: Option<String>,
    /// The transit network, as the operator is configured.
    #[arg(long, env = "IPSEC_TRANSIT_NETWORK_ID", global = true)]
    transit_network_id: Option<String>,
    /// The namespace of the customer credential Secrets, as the operator is configured.
    #[arg(long, env = "IPSEC_CLUSTERLINK_CREDENTIALS_NAMESPACE", global = true, default_value = bnerd_api::names::DEFAULT_CREDENTIALS_NAMESPACE)]
    credentials_namespace: String,
    /// The pool PerCustomer links' customer transits come from, as the operator is configured
    /// (`plan` of such a link needs it).
    #[arg(long, env = "IPSEC_PER_CUSTOMER_TRANSIT_POOL", global = true)]
    per_customer_transit_pool: Option<String>,
    /// Each customer transit's prefix length, as the operator is configured.
    #[arg(long, env = "IPSEC_PER_CUSTOMER_TRANSIT_PREFIX_LENGTH", global = true)]
    per_customer_transit_prefix_length: Option<String>,
    /// The ranges gateways' status.serviceCIDR must lie in, as the operator is configured
    /// (`doctor` warns while they are unset).
    #[arg(long, env = "IPSEC_GATEWAY_CIDR_RANGES", global = true)]
    gateway_cidr_ranges: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Links not Ready, leg ports whose ClusterLink is gone, gateway routes to nowhere, the
    /// transit network's share with each cross-tenant project (needed for Shared links, a
    /// problem for a project whose links are all PerCustomer); a warning (exit unchanged) for
    /// an abandon annotation on a link not being deleted. Exit 2 when the cloud cannot be
    /// asked, after what Kubernetes shows.
    Doctor,
    /// Withdraw the operator's RBAC share of the transit network with a customer project,
    /// once no Shared ClusterLink is pinned to that project: PerCustomer links do not need it
    /// (dry run without --yes).
    DecommissionShare {
        /// The customer project ID.
        #[arg(long)]
        project: String,
        /// Delete the rules instead of listing them.
        #[arg(long)]
        yes: bool,
    },
    /// What the operator's next reconcile of a ClusterLink would do against the cloud now,
    /// without writing: a link in the cluster by name, or a manifest file (`-` for stdin) as
    /// `kubectl apply` would send it. A cross-tenant link reads its Secret with your
    /// kubeconfig; a deleting link shows its unwind. Exit 0 when it would end Ready (or, being
    /// deleted, unwound), 1 when refused.
    Plan {
        /// A ClusterLink name, or a path to its YAML manifest.
        target: String,
    },
    /// Delete a ClusterLink and apply it again with the same spec, labels and annotations
    /// (for the terminal TransitIPMismatch, or any link to rebuild): shows what will happen,
    /// asks (or --yes), waits for the finalizer's unwind, then for Ready. The abandon
    /// annotation is never carried over: it decides one deletion. Moving a project's last
    /// Shared link to PerCustomer ends with the decommission-share command that removes the
    /// project's share of the transit network (never run by recreate).
    Recreate {
        /// The ClusterLink's name.
        name: String,
        /// Do it without asking.
        #[arg(long)]
        yes: bool,
        /// How long to wait for the unwind, and then for Ready, in seconds.
        #[arg(long, default_value_t = 300)]
        timeout: u64,
        /// Move a cross-tenant link to this transit isolation mode: Shared or PerCustomer.
        #[arg(long, value_parser = isolation_mode)]
        isolation: Option<bnerd_api::TransitIsolation>,
    },
    /// Print a shell completion script: `source <(kubectl-clusterlink completion bash)`.
    Completion {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// `--isolation`, spelled as `spec.transitIsolation` spells it.
fn isolation_mode(s: &str) -> Result<bnerd_api::TransitIsolation, String> {
    serde_json::from_value(serde_json::Value::String(s.to_string()))
        .map_err(|_| format!("{s:?} is not a transit isolation mode (Shared or PerCustomer)"))
}

fn setting(v: Option<String>, name: &str) -> Result<String, String> {
    v.filter(|s| !s.is_empty())
        .ok_or_else(|| format!("{name} is not set"))
}

async fn links() -> Result<Vec<ClusterLink>, String> {
    let client = kube::Client::try_default()
        .await
        .map_err(|e| format!("kubernetes client: {}", error_chain(&e)))?;
    let api: Api<ClusterLink> = Api::all(client);
    api.list(&ListParams::default())
        .await
        .map(|l| l.items)
        .map_err(|e| format!("listing ClusterLinks: {}", error_chain(&e)))
}

/// Every gateway with reverse exposures (both kinds, every namespace).
async fn gateways() -> Result<Vec<bnerd_api::gateway::ReverseTarget>, String> {
    let client = kube::Client::try_default()
        .await
        .map_err(|e| format!("kubernetes client: {}", error_chain(&e)))?;
    bnerd_api::gateway::reverse_targets(&client)
        .await
        .map_err(|e| format!("listing gateways: {}", error_chain(&e)))
}

/// Each cross-tenant link with a client on its customer's credential, read from its Secret
/// where the current kubeconfig may (the operator's own endpoint is used, never one a Secret
/// names).
async fn cross_tenant_views(
    cloud: &OpenStack,
    links: &[ClusterLink],
) -> Result<Vec<doctor::CrossTenantLink>, String> {
    use bnerd_api::names::{KEY_AC_ID, KEY_AC_SECRET};
    use k8s_openapi::api::core::v1::Secret;
    let client = kube::Client::try_default()
        .await
        .map_err(|e| format!("kubernetes client: {}", error_chain(&e)))?;
    let mut out = vec![];
    for l in links {
        let (Some(r), Some(project)) =
            (&l.spec.credentials_secret_ref, &l.spec.customer_project_id)
        else {
            continue;
        };
        let api: Api<Secret> = Api::namespaced(client.clone(), &r.namespace);
        let view = match api.get(&r.name).await {
            Err(e) => doctor::CustomerView::Unreadable(format!(
                "cannot read secret {}/{}: {}",
                r.namespace,
                r.name,
                error_chain(&e)
            )),
            Ok(s) => {
                let data = s.data.unwrap_or_default();
                let key = |k: &str| {
                    data.get(k)
                        .and_then(|v| String::from_utf8(v.0.clone()).ok())
                        .filter(|v| !v.trim().is_empty())
                };
                match (key(KEY_AC_ID), key(KEY_AC_SECRET)) {
                    (Some(id), Some(secret)) => doctor::CustomerView::Client(Box::new(
                        cloud.on_application_credential(id, SecretString::new(secret)),
                    )),
                    _ => doctor::CustomerView::Unreadable(format!(
                        "secret {}/{} lacks {KEY_AC_ID} or {KEY_AC_SECRET}",
                        r.namespace, r.name
                    )),
                }
            }
        };
        out.push(doctor::CrossTenantLink {
            name: l.metadata.name.clone().unwrap_or_default(),
            project: project.clone(),
            per_customer: l.spec.per_customer(),
            view,
        });
    }
    Ok(out)
}

/// How a command ended, as its exit code says it.
enum Verdict {
    /// 0: no problem, or done.
    Fine,
    /// 1: a problem found, or refused.
    Problems,
    /// 2 with a report printed: part of the checks could not run (the cloud could not be
    /// asked), which says nothing either way about what they would have found.
    Unchecked(String),
}

impl From<bool> for Verdict {
    fn from(fine: bool) -> Self {
        if fine {
            Verdict::Fine
        } else {
            Verdict::Problems
        }
    }
}

async fn run(cli: Cli) -> Result<Verdict, String> {
    if let Command::Completion { shell } = cli.command {
        // Into memory first: clap_complete panics on a failed write, e.g. `| head`.
        let mut script = vec![];
        clap_complete::generate(
            shell,
            &mut Cli::command(),
            "kubectl-clusterlink",
            &mut script,
        );
        use std::io::Write;
        return match std::io::stdout().write_all(&script) {
            Ok(()) => Ok(Verdict::Fine),
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(Verdict::Fine),
            Err(e) => Err(format!("writing the completion script: {e}")),
        };
    }
    let _ = rustls::crypto::ring::default_provider().install_default();
    let format = cli.output;
    if let Command::Recreate {
        name,
        yes,
        timeout,
        isolation,
    } = &cli.command
    {
        return recreate_cmd(
            format,
            name,
            *yes,
            std::time::Duration::from_secs(*timeout),
            *isolation,
        )
        .await
        .map(Verdict::from);
    }
    let network = setting(
        cli.transit_network_id,
        "IPSEC_TRANSIT_NETWORK_ID (--transit-network-id)",
    )?;
    let auth = AuthConfig::from_env(&|k| std::env::var(k).ok())
        .map_err(|e| format!("operator credential: {e}"))?;
    let cloud = OpenStack::new(auth).map_err(|e| e.to_string())?;
    match cli.command {
        Command::Doctor => {
            let gw = setting(
                cli.gateway_router_id,
                "IPSEC_GATEWAY_ROUTER_ID (--gateway-router-id)",
            )?;
            let links = links().await?;
            let mut report = doctor::diagnose(&cloud, &network, &gw, &links).await;
            report.findings.extend(bounds::link_findings(&links));
            match gateways().await {
                Ok(targets) => report.findings.extend(bounds::gateway_findings(
                    cli.gateway_cidr_ranges.as_deref(),
                    &targets,
                )),
                Err(e) => report.findings.push(doctor::Finding::warning(format!(
                    "gateways: not read, so their CIDR bounds were not checked: {e}"
                ))),
            }
            // The shares are checked with each customer's credential at the operator's own
            // endpoint: when the operator's credential got nowhere, neither would they.
            if report.unchecked.is_none() {
                let cross = cross_tenant_views(&cloud, &links).await?;
                match doctor::share_findings(&cloud, &network, &cross).await {
                    Ok(f) => report.findings.extend(f),
                    Err(why) => report.unchecked = Some(why),
                }
            }
            print!("{}", output::doctor(format, &report));
            Ok(match report.unchecked {
                Some(why) => Verdict::Unchecked(why),
                None => (!report.findings.iter().any(|f| f.problem)).into(),
            })
        }
        Command::DecommissionShare { project, yes } => {
            let links = links().await?;
            let done = share::decommission_share(&cloud, &network, &project, &links, yes).await;
            print!(
                "{}",
                output::share(format, &network, &project, yes, &ShareOutcome::of(&done))
            );
            Ok(done.is_ok().into())
        }
        Command::Plan { target } => {
            let gw = setting(
                cli.gateway_router_id,
                "IPSEC_GATEWAY_ROUTER_ID (--gateway-router-id)",
            )?;
            let links = links().await?;
            let link = plan_target(&target, &links)?;
            let client = kube::Client::try_default()
                .await
                .map_err(|e| format!("kubernetes client: {}", error_chain(&e)))?;
            let targets = bnerd_api::gateway::reverse_targets(&client)
                .await
                .map_err(|e| format!("listing gateways: {}", error_chain(&e)))?;
            let pool = bnerd_cloud::fabric::CustomerTransitPool::from_settings(
                cli.per_customer_transit_pool.as_deref(),
                cli.per_customer_transit_prefix_length.as_deref(),
            )
            .map_err(|e| format!("{}: {}", e.setting, e.message))?;
            let mut fabric = bnerd_cloud::fabric::Fabric::discover(&cloud, &network, &gw)
                .await
                .map_err(|e| e.to_string())?;
            if let Some(p) = &pool {
                p.clear_of(fabric.transit_subnet)
                    .map_err(|e| format!("{}: {}", e.setting, e.message))?;
            }
            fabric.customer_transit = pool;
            let token = cloud
                .token_info()
                .await
                .map_err(|e| format!("operator credential: {e}"))?;
            let operator = bnerd_engine::OperatorIdentity {
                project_id: token.project_id,
                auth_url: cloud.auth_config().auth_url.clone(),
                region: cloud.auth_config().region.clone(),
            };
            let secrets = customers::CallerSecrets {
                kube: client.clone(),
                cloud: &cloud,
            };
            let access = plan::CustomerAccess {
                source: &secrets,
                operator: &operator,
                namespace: &cli.credentials_namespace,
            };
            match plan::plan(&cloud, &fabric, &link, &links, &targets, Some(access)).await {
                Ok(p) => {
                    print!("{}", output::plan(format, &p));
                    let released = matches!(
                        p.deleting,
                        Some(plan::Released::Yes | plan::Released::Abandoned)
                    );
                    Ok((p.ready || released).into())
                }
                Err(e) => Err(e.to_string()),
            }
        }
        Command::Completion { .. } | Command::Recreate { .. } => Ok(Verdict::Fine),
    }
}

/// The link to plan: a manifest (a path, or `-` for stdin) as `kubectl apply` would send it,
/// on top of the object of that name if the cluster has one (its UID, status and generation,
/// the generation moved on when the spec changes); else the named object in the cluster.
fn plan_target(target: &str, links: &[ClusterLink]) -> Result<ClusterLink, String> {
    let path = std::path::Path::new(target);
    let text = if target == "-" {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .map_err(|e| format!("reading the manifest from stdin: {e}"))?;
        Some(s)
    } else if path.is_file() {
        Some(std::fs::read_to_string(path).map_err(|e| format!("reading {target}: {e}"))?)
    } else {
        None
    };
    let Some(text) = text else {
        return links
            .iter()
            .find(|l| l.metadata.name.as_deref() == Some(target))
            .cloned()
            .ok_or_else(|| format!("no ClusterLink {target} in the cluster and no file {target}"));
    };
    let mut wanted: ClusterLink =
        serde_yaml::from_str(&text).map_err(|e| format!("{target}: not a ClusterLink: {e}"))?;
    if let Some(live) = links
        .iter()
        .find(|l| l.metadata.name == wanted.metadata.name)
    {
        let changed = live.spec != wanted.spec;
        wanted.metadata.uid = live.metadata.uid.clone();
        wanted.metadata.creation_timestamp = live.metadata.creation_timestamp.clone();
        wanted.metadata.generation = live
            .metadata
            .generation
            .map(|g| if changed { g + 1 } else { g });
        wanted.status = live.status.clone();
    }
    Ok(wanted)
}

async fn recreate_cmd(
    format: Format,
    name: &str,
    yes: bool,
    timeout: std::time::Duration,
    to: Option<bnerd_api::TransitIsolation>,
) -> Result<bool, String> {
    if !yes && format == Format::Json {
        return Err("recreate with --output json needs --yes (there is no one to ask)".into());
    }
    let client = kube::Client::try_default()
        .await
        .map_err(|e| format!("kubernetes client: {}", error_chain(&e)))?;
    let api: Api<ClusterLink> = Api::all(client);
    let old = match recreate::fetch(&api, name).await {
        Ok(l) => l,
        Err(e @ recreate::RecreateError::Kube { .. }) => return Err(e.to_string()),
        Err(e) => {
            print!("{}", output::recreated(format, name, &Err(e.to_string())));
            return Ok(false);
        }
    };
    let (new, lines) = match to {
        None => (recreate::recreated(&old), recreate::plan(&old)),
        Some(to) => match recreate::moved(&old, to) {
            Ok(new) => {
                let lines = recreate::plan_move(&old, &new);
                (new, lines)
            }
            Err(e) => {
                print!("{}", output::recreated(format, name, &Err(e.to_string())));
                return Ok(false);
            }
        },
    };
    if format == Format::Text {
        for line in lines {
            println!("{}", output::safe(&line));
        }
    }
    if !yes {
        eprint!("recreate ClusterLink {}? [y/N] ", output::safe(name));
        let mut answer = String::new();
        let _ = std::io::stdin().read_line(&mut answer);
        let answer = answer.trim().to_ascii_lowercase();
        if !matches!(answer.as_str(), "y" | "yes") {
            println!("{}", recreate::RecreateError::Aborted);
            return Ok(false);
        }
    }
    let done = recreate::recreate_as(&api, &old, &new, timeout)
        .await
        .map_err(|e| e.to_string());
    let ok = matches!(&done, Ok(r) if r.ready);
    print!("{}", output::recreated(format, name, &done));
    Ok(ok)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let format = cli.output;
    match run(cli).await {
        Ok(Verdict::Fine) => ExitCode::SUCCESS,
        Ok(Verdict::Problems) => ExitCode::from(1),
        // The report is on stdout already (JSON included); the reason goes to stderr too, as
        // for every exit 2, for whoever reads only that.
        Ok(Verdict::Unchecked(why)) => {
            eprintln!("kubectl-clusterlink: {}", output::safe(&why));
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("kubectl-clusterlink: {}", output::safe(&e));
            if let Some(json) = output::error(format, &e) {
                print!("{json}");
            }
            ExitCode::from(2)
        }
    }
}
