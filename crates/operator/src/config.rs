//! Operator settings from flags or environment. A wrong or missing setting stops the
//! operator at startup with the setting named.

use std::net::SocketAddr;
use std::time::Duration;

use bnerd_cloud::fabric::{Admission, CidrPolicy};
use clap::Parser;
use ipnet::Ipv4Net;
use thiserror::Error;

pub use crate::logging::LogFormat;

#[derive(Debug, Clone, Parser)]
#[command(
    name = "bnerd-vpn-operator",
    version,
    about = "Plumbs service clusters into the VPN gateway cluster (ClusterLink)"
)]
pub struct Args {
    /// The gateway cluster's own OpenStack router (routes to service clusters go here).
    #[arg(long, env = "IPSEC_GATEWAY_ROUTER_ID")]
    pub gateway_router_id: Option<String>,
    /// The transit network every leg port lives on (one subnet, never --share).
    #[arg(long, env = "IPSEC_TRANSIT_NETWORK_ID")]
    pub transit_network_id: Option<String>,
    /// How often a converged link is checked again (self-healing), e.g. 300s, 5m, 1h.
    #[arg(long, env = "IPSEC_RESYNC_INTERVAL", default_value = "5m")]
    pub resync_interval: String,
    /// How often the drift check runs between resyncs (two reads for the whole estate: the
    /// operator project's routers and every router interface it can see): a link whose
    /// gateway route, leg, edge leg or edge route is gone is reconciled at once. Default 2s.
    #[arg(long, env = "IPSEC_DRIFT_CHECK_INTERVAL")]
    pub drift_check_interval: Option<String>,
    /// Deprecated: the drift check's interval under its former name (it checked cross-tenant
    /// legs only). Honoured when IPSEC_DRIFT_CHECK_INTERVAL is not set.
    #[arg(long, env = "IPSEC_CROSS_TENANT_LEG_CHECK_INTERVAL", hide = true)]
    pub cross_tenant_leg_check_interval: Option<String>,
    /// The one namespace cross-tenant credentials Secrets may live in.
    #[arg(long, env = "IPSEC_CLUSTERLINK_CREDENTIALS_NAMESPACE", default_value = bnerd_api::names::DEFAULT_CREDENTIALS_NAMESPACE)]
    pub credentials_namespace: String,
    /// ClusterLinks reconciled in parallel.
    #[arg(long, env = "IPSEC_CONCURRENCY", default_value_t = 4)]
    pub concurrency: u16,
    /// Log lines as JSON (for collectors) or text.
    #[arg(long, env = "IPSEC_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,
    /// Address of the one port serving /healthz, /readyz and /metrics (port 0: any free one).
    #[arg(long, env = "IPSEC_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: String,
    /// Reconcile only while holding the Lease (needed for more than one replica).
    #[arg(long, env = "IPSEC_LEADER_ELECT", default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Name of the coordination.k8s.io/v1 Lease the replicas elect a leader on.
    #[arg(long, env = "IPSEC_LEASE_NAME", default_value = "bnerd-vpn-operator")]
    pub lease_name: String,
    /// Namespace of that Lease: default POD_NAMESPACE, else the pod's service-account
    /// namespace, else the kubeconfig's namespace.
    #[arg(long, env = "IPSEC_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// How long a leader's Lease lasts without renewal: a standby takes over this long after
    /// the leader dies, and a leader that cannot renew stops before it runs out.
    #[arg(long, env = "IPSEC_LEASE_DURATION", default_value = "15s")]
    pub lease_duration: String,
    /// Ranges every spec.serviceClusterCIDR must lie in, comma-separated; empty (the
    /// default, as earlier versions admitted): any. Recommended: the private and
    /// shared-address ranges (docs/operations.md, "What the operator routes, and which port
    /// is a leg").
    #[arg(long, env = "IPSEC_SERVICE_CIDR_RANGES", default_value = "")]
    pub service_cidr_ranges: String,
    /// The shortest prefix a spec.serviceClusterCIDR may have (0, the default: any).
    #[arg(
        long,
        env = "IPSEC_SERVICE_CIDR_MIN_PREFIX_LENGTH",
        default_value_t = 0
    )]
    pub service_cidr_min_prefix_length: u8,
    /// Ranges every gateway's status.serviceCIDR must lie in to get reverse routes,
    /// comma-separated; empty: any.
    #[arg(long, env = "IPSEC_GATEWAY_CIDR_RANGES", default_value = "")]
    pub gateway_cidr_ranges: String,
    /// The shortest prefix a gateway's status.serviceCIDR may have (0: any).
    #[arg(
        long,
        env = "IPSEC_GATEWAY_CIDR_MIN_PREFIX_LENGTH",
        default_value_t = 0
    )]
    pub gateway_cidr_min_prefix_length: u8,
    /// The IPv4 pool PerCustomer links' customer networks are cut from (e.g. 10.255.0.0/16);
    /// unset: spec.transitIsolation PerCustomer is not configured.
    #[arg(long, env = "IPSEC_PER_CUSTOMER_TRANSIT_POOL")]
    pub per_customer_transit_pool: Option<String>,
    /// The prefix length of each customer network cut from that pool, from the pool's own
    /// up to 29; default 28. Only with the pool.
    #[arg(long, env = "IPSEC_PER_CUSTOMER_TRANSIT_PREFIX_LENGTH")]
    pub per_customer_transit_prefix_length: Option<String>,
}

/// Parse a comma-separated list of IPv4 CIDRs and a shortest prefix into a policy.
fn cidr_policy(
    ranges: &str,
    min_prefix_len: u8,
    setting: &'static str,
    prefix_setting: &'static str,
) -> Result<CidrPolicy, ConfigError> {
    let mut out = vec![];
    for item in ranges.split(',').map(str::trim).filter(|s| !s.is_empty()) {
        let net: Ipv4Net = item.parse().map_err(|_| ConfigError::Invalid {
            setting,
            message: format!("{item:?} is not an IPv4 CIDR (e.g. 10.0.0.0/8)"),
        })?;
        if net.trunc() != net {
            return Err(ConfigError::Invalid {
                setting,
                message: format!("{item} has host bits set (did you mean {}?)", net.trunc()),
            });
        }
        out.push(net);
    }
    if min_prefix_len > 32 {
        return Err(ConfigError::Invalid {
            setting: prefix_setting,
            message: format!("{min_prefix_len} is not a prefix length (0 to 32)"),
        });
    }
    Ok(CidrPolicy {
        ranges: out,
        min_prefix_len,
    })
}

/// Where PerCustomer links' customer networks come from (spec.transitIsolation): the pool
/// (canonical, no host bits) and each customer network's prefix length (at least the pool's,
/// at most [`PER_CUSTOMER_MAX_PREFIX_LEN`]). The engine's own type: the fabric carries it.
pub use bnerd_cloud::fabric::CustomerTransitPool as PerCustomerTransit;

/// The PerCustomer pool and prefix length; None when no pool is set (the one parser, shared
/// with `kubectl clusterlink plan`).
fn per_customer_transit(
    pool: Option<&str>,
    prefix_len: Option<&str>,
) -> Result<Option<PerCustomerTransit>, ConfigError> {
    PerCustomerTransit::from_settings(pool, prefix_len).map_err(|e| ConfigError::Invalid {
        setting: e.setting,
        message: e.message,
    })
}

/// The drift check's default interval (docs/design.md, "The drift check"): a removed route or
/// leg is seen within 2 s (1 s on average) for 3600 pairs of list reads an hour.
pub const DEFAULT_DRIFT_CHECK_INTERVAL: &str = "2s";
const DRIFT_CHECK_SETTING: &str = "IPSEC_DRIFT_CHECK_INTERVAL (--drift-check-interval)";
const LEG_CHECK_SETTING: &str =
    "IPSEC_CROSS_TENANT_LEG_CHECK_INTERVAL (--cross-tenant-leg-check-interval)";

/// Validated settings.
#[derive(Debug, Clone)]
pub struct Config {
    pub gateway_router_id: String,
    pub transit_network_id: String,
    pub resync_interval: Duration,
    pub drift_check_interval: Duration,
    /// Settings given under a deprecated name, for a warning at startup.
    pub deprecated: Vec<&'static str>,
    pub credentials_namespace: String,
    pub concurrency: u16,
    pub log_format: LogFormat,
    pub metrics_addr: SocketAddr,
    /// None: no leader election, this process always reconciles.
    pub lease: Option<LeaseConfig>,
    /// What the operator routes: link and gateway CIDR bounds.
    pub admission: Admission,
    /// None: spec.transitIsolation PerCustomer is not configured.
    pub per_customer_transit: Option<PerCustomerTransit>,
}

/// The leader election's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaseConfig {
    pub name: String,
    /// None: decided at startup from the pod's namespace or the kubeconfig.
    pub namespace: Option<String>,
    pub duration: Duration,
}

#[derive(Debug, Error, PartialEq, Eq)]
pub enum ConfigError {
    #[error("{0} is not set")]
    Missing(&'static str),
    #[error("{setting}: {message}")]
    Invalid {
        setting: &'static str,
        message: String,
    },
}

/// The shortest lease: renewal starts a third before its end and must finish in time.
pub const MIN_LEASE: Duration = Duration::from_secs(6);

/// Parse `300`, `300s`, `5m`, `1h`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (num, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (e.g. 300s, 5m, 1h)"))?;
    let per = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        _ => {
            return Err(format!(
                "{s:?} has an unknown unit {unit:?} (use s, m or h)"
            ));
        }
    };
    let secs = n
        .checked_mul(per)
        .ok_or_else(|| format!("{s:?} is too long"))?;
    if secs == 0 {
        return Err("must be greater than zero".into());
    }
    Ok(Duration::from_secs(secs))
}

impl TryFrom<Args> for Config {
    type Error = ConfigError;

    fn try_from(a: Args) -> Result<Self, ConfigError> {
        let need = |v: Option<String>, name: &'static str| {
            v.filter(|s| !s.trim().is_empty())
                .ok_or(ConfigError::Missing(name))
        };
        let resync_interval =
            parse_duration(&a.resync_interval).map_err(|message| ConfigError::Invalid {
                setting: "IPSEC_RESYNC_INTERVAL (--resync-interval)",
                message,
            })?;
        let (interval, setting, deprecated) =
            match (&a.drift_check_interval, &a.cross_tenant_leg_check_interval) {
                (Some(v), _) => (v.as_str(), DRIFT_CHECK_SETTING, vec![]),
                (None, Some(v)) => (v.as_str(), LEG_CHECK_SETTING, vec![LEG_CHECK_SETTING]),
                (None, None) => (DEFAULT_DRIFT_CHECK_INTERVAL, DRIFT_CHECK_SETTING, vec![]),
            };
        let drift_check_interval = parse_duration(interval)
            .map_err(|message| ConfigError::Invalid { setting, message })?;
        if a.credentials_namespace.trim().is_empty() {
            return Err(ConfigError::Missing(
                "IPSEC_CLUSTERLINK_CREDENTIALS_NAMESPACE (--credentials-namespace)",
            ));
        }
        if a.concurrency == 0 {
            return Err(ConfigError::Invalid {
                setting: "IPSEC_CONCURRENCY (--concurrency)",
                message: "must be at least 1".into(),
            });
        }
        let metrics_addr = a.metrics_addr.parse().map_err(|_| ConfigError::Invalid {
            setting: "IPSEC_METRICS_ADDR (--metrics-addr)",
            message: format!("{:?} is not an address:port", a.metrics_addr),
        })?;
        let lease_duration =
            parse_duration(&a.lease_duration).map_err(|message| ConfigError::Invalid {
                setting: "IPSEC_LEASE_DURATION (--lease-duration)",
                message,
            })?;
        if lease_duration < MIN_LEASE {
            return Err(ConfigError::Invalid {
                setting: "IPSEC_LEASE_DURATION (--lease-duration)",
                message: format!(
                    "must be at least {}s: the leader renews a third of it before the end",
                    MIN_LEASE.as_secs()
                ),
            });
        }
        if a.leader_elect && a.lease_name.trim().is_empty() {
            return Err(ConfigError::Missing("IPSEC_LEASE_NAME (--lease-name)"));
        }
        let lease = a.leader_elect.then(|| LeaseConfig {
            name: a.lease_name.clone(),
            namespace: a.lease_namespace.filter(|n| !n.trim().is_empty()),
            duration: lease_duration,
        });
        let admission = Admission {
            service_cidrs: cidr_policy(
                &a.service_cidr_ranges,
                a.service_cidr_min_prefix_length,
                "IPSEC_SERVICE_CIDR_RANGES (--service-cidr-ranges)",
                "IPSEC_SERVICE_CIDR_MIN_PREFIX_LENGTH (--service-cidr-min-prefix-length)",
            )?,
            gateway_cidrs: cidr_policy(
                &a.gateway_cidr_ranges,
                a.gateway_cidr_min_prefix_length,
                "IPSEC_GATEWAY_CIDR_RANGES (--gateway-cidr-ranges)",
                "IPSEC_GATEWAY_CIDR_MIN_PREFIX_LENGTH (--gateway-cidr-min-prefix-length)",
            )?,
        };
        let per_customer_transit = per_customer_transit(
            a.per_customer_transit_pool.as_deref(),
            a.per_customer_transit_prefix_length.as_deref(),
        )?;
        Ok(Config {
            admission,
            per_customer_transit,
            gateway_router_id: need(
                a.gateway_router_id,
                "IPSEC_GATEWAY_ROUTER_ID (--gateway-router-id)",
            )?,
            transit_network_id: need(
                a.transit_network_id,
                "IPSEC_TRANSIT_NETWORK_ID (--transit-network-id)",
            )?,
            resync_interval,
            drift_check_interval,
            deprecated,
            credentials_namespace: a.credentials_namespace,
            concurrency: a.concurrency,
            log_format: a.log_format,
            metrics_addr,
            lease,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(extra: &[&str]) -> Args {
        let mut v = vec!["op"];
        v.extend_from_slice(extra);
        Args::try_parse_from(v).unwrap()
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("300").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("5m").unwrap(), Duration::from_secs(300));
        assert_eq!(parse_duration("1h").unwrap(), Duration::from_secs(3600));
        assert!(parse_duration("5x").unwrap_err().contains("unknown unit"));
        assert!(parse_duration("0s").is_err());
        assert!(parse_duration("m").is_err());
        assert!(
            parse_duration("99999999999999999h")
                .unwrap_err()
                .contains("too long")
        );
    }

    #[test]
    fn missing_and_invalid_settings_are_named() {
        let e = Config::try_from(args(&["--transit-network-id", "n"])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "IPSEC_GATEWAY_ROUTER_ID (--gateway-router-id) is not set"
        );
        let e = Config::try_from(args(&["--gateway-router-id", "r"])).unwrap_err();
        assert!(e.to_string().starts_with("IPSEC_TRANSIT_NETWORK_ID"));
        let e = Config::try_from(args(&[
            "--gateway-router-id",
            "r",
            "--transit-network-id",
            "n",
            "--resync-interval",
            "soon",
        ]))
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with("IPSEC_RESYNC_INTERVAL (--resync-interval): "),
            "{e}"
        );
        let c = Config::try_from(args(&[
            "--gateway-router-id",
            "r",
            "--transit-network-id",
            "n",
        ]))
        .unwrap();
        assert_eq!(c.credentials_namespace, "bnerd-vpn-clusterlinks");
        assert_eq!(c.resync_interval, Duration::from_secs(300));
        assert_eq!(c.drift_check_interval, Duration::from_secs(2));
        assert!(c.deprecated.is_empty());
        assert_eq!(c.log_format, LogFormat::Text);
        assert_eq!(c.metrics_addr.to_string(), "0.0.0.0:8080");
        assert_eq!(
            c.lease,
            Some(LeaseConfig {
                name: "bnerd-vpn-operator".into(),
                namespace: None,
                duration: Duration::from_secs(15)
            })
        );
    }

    #[test]
    fn operations_settings_are_checked() {
        let ids = ["--gateway-router-id", "r", "--transit-network-id", "n"];
        let with = |extra: &[&str]| {
            let mut v = ids.to_vec();
            v.extend_from_slice(extra);
            Config::try_from(args(&v))
        };
        let c = with(&["--leader-elect", "false", "--log-format", "json"]).unwrap();
        assert_eq!(c.lease, None);
        assert_eq!(c.log_format, LogFormat::Json);
        let e = with(&["--metrics-addr", "8080"]).unwrap_err();
        assert!(e.to_string().starts_with("IPSEC_METRICS_ADDR"), "{e}");
        let c = with(&["--drift-check-interval", "5s"]).unwrap();
        assert_eq!(c.drift_check_interval, Duration::from_secs(5));
        let e = with(&["--drift-check-interval", "0s"]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("IPSEC_DRIFT_CHECK_INTERVAL (--drift-check-interval)"),
            "{e}"
        );
        // The former name still sets it (an upgrade keeps a value it was given), with a
        // warning; the new name wins over it.
        let c = with(&["--cross-tenant-leg-check-interval", "30s"]).unwrap();
        assert_eq!(c.drift_check_interval, Duration::from_secs(30));
        assert_eq!(c.deprecated, vec![LEG_CHECK_SETTING]);
        let e = with(&["--cross-tenant-leg-check-interval", "0s"]).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "IPSEC_CROSS_TENANT_LEG_CHECK_INTERVAL (--cross-tenant-leg-check-interval)"
            ),
            "{e}"
        );
        let c = with(&[
            "--cross-tenant-leg-check-interval",
            "30s",
            "--drift-check-interval",
            "3s",
        ])
        .unwrap();
        assert_eq!(c.drift_check_interval, Duration::from_secs(3));
        assert!(c.deprecated.is_empty());
        let e = with(&["--lease-duration", "2s"]).unwrap_err();
        assert!(e.to_string().contains("at least 6s"), "{e}");
        assert!(
            Args::try_parse_from(["op", "--log-format", "xml"]).is_err(),
            "clap names the allowed values"
        );
    }

    #[test]
    fn per_customer_transit_is_optional_and_checked() {
        let ids = ["--gateway-router-id", "r", "--transit-network-id", "n"];
        let with = |extra: &[&str]| {
            let mut v = ids.to_vec();
            v.extend_from_slice(extra);
            Config::try_from(args(&v))
        };
        let net = |s: &str| s.parse::<Ipv4Net>().unwrap();
        assert_eq!(with(&[]).unwrap().per_customer_transit, None, "unset");
        const POOL: &str = "--per-customer-transit-pool";
        const LEN: &str = "--per-customer-transit-prefix-length";
        // (pool, prefix length, the setting or the error's start and a piece of it)
        let ok = |pool: &str, prefix_len: u8| {
            Ok::<_, (&str, &str)>(Some(PerCustomerTransit {
                pool: net(pool),
                prefix_len,
            }))
        };
        let refused = |setting, piece| Err((setting, piece));
        let pool_env = "IPSEC_PER_CUSTOMER_TRANSIT_POOL (--per-customer-transit-pool): ";
        let len_env =
            "IPSEC_PER_CUSTOMER_TRANSIT_PREFIX_LENGTH (--per-customer-transit-prefix-length): ";
        for (pool, len, want) in [
            (None, None, Ok(None)),
            (Some(""), None, Ok(None)),
            (Some("  "), Some(""), Ok(None)),
            (Some("10.255.0.0/16"), None, ok("10.255.0.0/16", 28)),
            (Some(" 10.255.0.0/16 "), Some("29"), ok("10.255.0.0/16", 29)),
            (Some("10.255.0.0/16"), Some("16"), ok("10.255.0.0/16", 16)),
            (Some("10.255.0.0/16"), Some("24"), ok("10.255.0.0/16", 24)),
            (Some("192.168.7.0/28"), None, ok("192.168.7.0/28", 28)),
            (Some("192.168.7.0/29"), Some("29"), ok("192.168.7.0/29", 29)),
            (
                Some("10.255.0.1/16"),
                None,
                refused(
                    pool_env,
                    "10.255.0.1/16 has host bits set (did you mean 10.255.0.0/16?)",
                ),
            ),
            (
                Some("10.255.0.0"),
                None,
                refused(pool_env, "\"10.255.0.0\" is not an IPv4 CIDR"),
            ),
            (
                Some("fd00::/64"),
                None,
                refused(pool_env, "\"fd00::/64\" is not an IPv4 CIDR"),
            ),
            (
                Some("pool"),
                None,
                refused(pool_env, "\"pool\" is not an IPv4 CIDR"),
            ),
            (
                Some("10.255.0.0/30"),
                Some("30"),
                refused(
                    pool_env,
                    "10.255.0.0/30 is smaller than one customer network",
                ),
            ),
            (
                None,
                Some("28"),
                refused(
                    len_env,
                    "\"28\" is set but IPSEC_PER_CUSTOMER_TRANSIT_POOL is not",
                ),
            ),
            (
                Some(""),
                Some("28"),
                refused(len_env, "is set but IPSEC_PER_CUSTOMER_TRANSIT_POOL is not"),
            ),
            (
                Some("10.255.0.0/16"),
                Some("30"),
                refused(len_env, "30 is outside 16 to 29"),
            ),
            (
                Some("10.255.0.0/16"),
                Some("15"),
                refused(len_env, "15 is outside 16 to 29"),
            ),
            (
                Some("10.255.0.0/16"),
                Some("0"),
                refused(len_env, "0 is outside 16 to 29"),
            ),
            (
                Some("10.255.0.0/16"),
                Some("/28"),
                refused(
                    len_env,
                    "\"/28\" is not a prefix length (16 to 29 for the pool 10.255.0.0/16)",
                ),
            ),
            (
                Some("10.255.0.0/16"),
                Some("-1"),
                refused(len_env, "\"-1\" is not a prefix length"),
            ),
            (
                Some("10.255.0.0/16"),
                Some("300"),
                refused(len_env, "\"300\" is not a prefix length"),
            ),
            (
                Some("192.168.7.0/29"),
                None,
                refused(len_env, "28 (the default) is outside 29 to 29"),
            ),
        ] {
            // `--flag=value`, so that clap takes "-1" as a value, not a flag.
            let mut extra = vec![];
            if let Some(p) = pool {
                extra.push(format!("{POOL}={p}"));
            }
            if let Some(l) = len {
                extra.push(format!("{LEN}={l}"));
            }
            let extra: Vec<&str> = extra.iter().map(String::as_str).collect();
            let got = with(&extra);
            match (got, want) {
                (Ok(c), Ok(w)) => assert_eq!(c.per_customer_transit, w, "{extra:?}"),
                (Err(e), Err((start, piece))) => {
                    let e = e.to_string();
                    assert!(e.starts_with(start) && e.contains(piece), "{extra:?}: {e}");
                }
                (got, want) => panic!("{extra:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn cidr_bounds_default_to_what_earlier_versions_admitted_and_are_checked() {
        let ids = ["--gateway-router-id", "r", "--transit-network-id", "n"];
        let with = |extra: &[&str]| Config::try_from(args(&[ids.as_slice(), extra].concat()));
        // No bounds unless set: a link an earlier version admitted (a public CIDR, a wide
        // one) still converges after an upgrade.
        let c = with(&[]).unwrap();
        assert_eq!(c.admission.service_cidrs, CidrPolicy::default());
        for cidr in ["198.51.100.0/24", "11.0.0.0/8", "128.0.0.0/1"] {
            assert_eq!(
                c.admission.service_cidrs.admits(cidr.parse().unwrap()),
                Ok(())
            );
        }
        // The recommended bounds, as the chart's values comment spells them.
        let c = with(&[
            "--service-cidr-ranges",
            "10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,100.64.0.0/10",
            "--service-cidr-min-prefix-length",
            "12",
        ])
        .unwrap();
        assert_eq!(
            c.admission.service_cidrs,
            CidrPolicy::recommended_for_links()
        );
        let text: Vec<String> = c
            .admission
            .service_cidrs
            .ranges
            .iter()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            text,
            [
                "10.0.0.0/8",
                "172.16.0.0/12",
                "192.168.0.0/16",
                "100.64.0.0/10"
            ]
        );
        assert_eq!(c.admission.service_cidrs.min_prefix_len, 12);
        assert_eq!(c.admission.gateway_cidrs, CidrPolicy::default());
        // An empty list admits all.
        let c = with(&[
            "--service-cidr-ranges",
            "",
            "--service-cidr-min-prefix-length",
            "0",
        ])
        .unwrap();
        assert_eq!(c.admission.service_cidrs, CidrPolicy::default());
        let c = with(&["--gateway-cidr-ranges", "100.64.0.0/10, 10.96.0.0/12"]).unwrap();
        assert_eq!(c.admission.gateway_cidrs.ranges.len(), 2);
        let e = with(&["--service-cidr-ranges", "10.0.0.0/8,nope"]).unwrap_err();
        assert!(
            e.to_string().starts_with("IPSEC_SERVICE_CIDR_RANGES")
                && e.to_string().contains("nope"),
            "{e}"
        );
        let e = with(&["--gateway-cidr-ranges", "10.0.0.1/8"]).unwrap_err();
        assert!(e.to_string().contains("host bits"), "{e}");
        let e = with(&["--gateway-cidr-min-prefix-length", "33"]).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("IPSEC_GATEWAY_CIDR_MIN_PREFIX_LENGTH"),
            "{e}"
        );
    }
}
