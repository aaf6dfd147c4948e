//! Log output: JSON lines for log collectors (the chart's default) or text for a terminal.
//! Colour only when stderr is a terminal, so files and collectors never get ANSI codes.
//! Lines about a link carry `clusterlink=<name>` from the reconcile's span.

use std::io::IsTerminal;

use clap::ValueEnum;
use tracing::{info, warn};
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;

mod flat_json;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

/// The filter when `RUST_LOG` is unset, or refused.
pub const DEFAULT_FILTER: &str = "info";

/// rustls-platform-verifier logs every refused certificate at ERROR, naming the build host's
/// source paths; the operator's own error already says what failed and what to set.
const QUIET: &str = "rustls_platform_verifier=off";

/// The filter to install for `RUST_LOG` (None: unset) and, when the value was refused, why.
/// A filter that does not parse, or that would drop even the operator's own errors (a typo
/// such as `inf` reads as a target name and silences everything else), is replaced by the
/// default: an operator whose failures nobody can see is never what was asked for.
pub fn filter_for(rust_log: Option<&str>) -> (String, Option<String>) {
    let asked = rust_log.map(str::trim).filter(|s| !s.is_empty());
    let Some(asked) = asked else {
        return (with_quiet(DEFAULT_FILTER), None);
    };
    let refused = match EnvFilter::builder().parse(asked) {
        Err(e) => Some(format!("RUST_LOG {asked:?} is not a filter ({e})")),
        Ok(filter) => (!lets_operator_errors_through(filter)).then(|| {
            format!(
                "RUST_LOG {asked:?} lets no line of the operator through (a typo? e.g. info, debug, info,bnerd_engine=debug)"
            )
        }),
    };
    match refused {
        Some(why) => (
            with_quiet(DEFAULT_FILTER),
            Some(format!("{why}; logging at {DEFAULT_FILTER:?} instead")),
        ),
        None => (with_quiet(asked), None),
    }
}

fn with_quiet(filter: &str) -> String {
    if filter.contains("rustls_platform_verifier") {
        filter.to_string()
    } else {
        format!("{filter},{QUIET}")
    }
}

fn lets_operator_errors_through(filter: EnvFilter) -> bool {
    let probe = tracing_subscriber::registry().with(filter);
    tracing::subscriber::with_default(probe, || {
        tracing::enabled!(target: "bnerd_vpn_operator", tracing::Level::ERROR)
            && tracing::enabled!(target: "bnerd_engine", tracing::Level::ERROR)
    })
}

/// Install the global subscriber; `RUST_LOG` filters (default `info`). The filter in effect
/// is the first line logged, and a refused `RUST_LOG` a warning.
pub fn init(format: LogFormat) {
    let (spec, refused) = filter_for(std::env::var("RUST_LOG").ok().as_deref());
    let filter = EnvFilter::builder()
        .parse(&spec)
        .unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        // Span fields at the top level too, so every line of a reconcile carries
        // `clusterlink` where a collector looks for it (see flat_json).
        LogFormat::Json => builder
            .fmt_fields(tracing_subscriber::fmt::format::JsonFields::new())
            .event_format(flat_json::FlatJson)
            .init(),
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
    }
    match refused {
        Some(why) => warn!(filter = %spec, "{why}"),
        None => info!(filter = %spec, "logging"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// tracing caches each callsite's interest across threads: two probes with different
    /// scoped subscribers at once can see each other's answer, so the tests take turns.
    static PROBES: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn rust_log_is_kept_when_the_operator_still_speaks() {
        let _turn = PROBES.lock().unwrap_or_else(|p| p.into_inner());
        for asked in [
            "info",
            "warn",
            "debug",
            "error",
            "info,bnerd_engine=debug",
            "hyper=debug,info",
        ] {
            let (spec, refused) = filter_for(Some(asked));
            assert_eq!(refused, None, "{asked}");
            assert_eq!(spec, format!("{asked},{QUIET}"));
        }
        assert_eq!(filter_for(None), (format!("info,{QUIET}"), None));
        assert_eq!(filter_for(Some("  ")), (format!("info,{QUIET}"), None));
        let (spec, _) = filter_for(Some("info,rustls_platform_verifier=debug"));
        assert_eq!(spec, "info,rustls_platform_verifier=debug");
    }

    #[test]
    fn a_typo_that_silences_the_operator_falls_back_naming_it() {
        let _turn = PROBES.lock().unwrap_or_else(|p| p.into_inner());
        for asked in ["inf", "no such==", "off", "hyper=debug", "kube=info"] {
            let (spec, refused) = filter_for(Some(asked));
            assert_eq!(spec, format!("info,{QUIET}"), "{asked}");
            let why = refused.unwrap_or_else(|| panic!("{asked} was kept"));
            assert!(
                why.contains(&format!("RUST_LOG {asked:?}")) && why.ends_with("instead"),
                "{why}"
            );
        }
    }
}
