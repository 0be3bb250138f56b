//! Logging and tracing for both binaries, set up once at start ([`init`]).
//!
//! Logs: `RUST_LOG` filters (default `info`, with the database drivers quieter),
//! `KFS_LOG_FORMAT` picks human-readable text or one JSON object per line with the fields
//! of every enclosing span, and colours appear only when standard output is a terminal.
//! Spans carry the context (`task run` with `task.id`, `stage`, `attempt`, `worker_id`;
//! `websocket`; `graphql operation`), and a line is written when each closes, with how
//! long it was busy.
//!
//! Traces: with `KFS_OTLP_ENDPOINT` set, spans are also exported over OTLP/HTTP with
//! protobuf ([`otlp`]), including the DEBUG-level spans the logs leave out (each HTTP
//! request, GraphQL operation, resolver and lifecycle call). Incoming W3C `traceparent`
//! headers are honoured, and the trace context of the request that created a task is
//! stored with it ([`context`]), so the worker's spans for that task join the same trace
//! in whichever process runs it.
use std::io::IsTerminal as _;

use serde::Deserialize;
use tracing_subscriber::fmt::format::FmtSpan;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _, Registry};

pub mod context;
mod otlp;

pub use context::TraceContext;

/// How log lines are written (`KFS_LOG_FORMAT`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    /// One readable line per event (the default).
    #[default]
    Text,
    /// One JSON object per line, with the span fields.
    Json,
}

/// The filter when `RUST_LOG` is not set (rmcp logs every stateless request's session at
/// INFO: three lines per MCP call).
const DEFAULT_FILTER: &str = "info,sqlx=warn,sea_orm=warn,sea_orm_migration=warn,tower_http=info,rmcp=warn";

/// What runs for the life of the process; [`Telemetry::shutdown`] flushes the spans not
/// yet exported.
#[must_use = "call shutdown before the process exits, or the last spans are lost"]
pub struct Telemetry {
    exporter: Option<otlp::Exporter>,
}

impl Telemetry {
    /// Exports what is still buffered and stops the exporter (a no-op without one).
    pub async fn shutdown(self) {
        if let Some(exporter) = self.exporter {
            exporter.shutdown().await;
        }
    }
}

/// Installs the process's subscriber: logs as `format` says, and with `otlp_endpoint`
/// (an OTLP/HTTP base URL such as `http://collector:4318`) trace export under
/// `service_name`. Call once, first thing in `main`, inside the Tokio runtime.
pub fn init(format: LogFormat, otlp_endpoint: Option<&str>, service_name: &str) -> anyhow::Result<Telemetry> {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let logs = tracing_subscriber::fmt::layer().with_span_events(FmtSpan::CLOSE);
    let logs = match format {
        LogFormat::Text => logs.with_ansi(std::io::stdout().is_terminal()).with_filter(filter).boxed(),
        LogFormat::Json => {
            logs.json().with_current_span(true).with_span_list(true).flatten_event(true).with_filter(filter).boxed()
        }
    };
    let exporter = otlp_endpoint.map(|endpoint| otlp::Exporter::start(endpoint, service_name)).transpose()?;
    let mut layers = vec![logs];
    if let Some(exporter) = &exporter {
        layers.push(exporter.layer::<Registry>().boxed());
    }
    tracing_subscriber::registry().with(layers).init();
    Ok(Telemetry { exporter })
}
