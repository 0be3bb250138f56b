//! Logging for both binaries, set up once at start: `RUST_LOG` filters (default `info`,
//! with the database drivers quieter), `KFS_LOG_FORMAT` picks human-readable text or one
//! JSON object per line with the fields of every enclosing span, and colours appear only
//! when standard output is a terminal. Spans carry the context (`task run` with
//! `task.id`, `stage`, `attempt`, `worker_id`; `websocket`; `graphql operation`), and a
//! line is written when each closes, with how long it was busy.
use std::io::IsTerminal as _;

use serde::Deserialize;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::format::FmtSpan;

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

/// The filter when `RUST_LOG` is not set.
const DEFAULT_FILTER: &str = "info,sqlx=warn,sea_orm=warn,sea_orm_migration=warn,tower_http=info";

/// Installs the process's subscriber. Call once, first thing in `main`.
pub fn init(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(DEFAULT_FILTER));
    let builder = tracing_subscriber::fmt().with_env_filter(filter).with_span_events(FmtSpan::CLOSE);
    match format {
        LogFormat::Text => builder.with_ansi(std::io::stdout().is_terminal()).init(),
        LogFormat::Json => builder.json().with_current_span(true).with_span_list(true).flatten_event(true).init(),
    }
}
