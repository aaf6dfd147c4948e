//! Log output: JSON lines for log collectors (the chart's default) or text for a terminal.
//! Colour only when stderr is a terminal, so files and collectors never get ANSI codes.
//! Lines about a link carry `clusterlink=<name>` from the reconcile's span.

use std::io::IsTerminal;

use clap::ValueEnum;

mod flat_json;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    Json,
    Text,
}

/// Install the global subscriber; `RUST_LOG` filters (default `info`).
pub fn init(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
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
}
