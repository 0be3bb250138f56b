//! W3C trace context across the request that creates a task and the worker that runs it:
//! taken from incoming headers ([`adopt_remote_parent`]), stored with the task in the creating
//! transaction ([`row_of_current_span`]), and set as the parent of the worker's `task run` span
//! ([`join_stored`]). Without trace export all of it is a no-op that costs nothing (no
//! row is written or read).
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};

use entity::research_task_trace_context as row;
use opentelemetry::trace::TraceContextExt as _;
use sea_orm::ConnectionTrait;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;
use uuid::Uuid;

/// The longest `tracestate` kept (the column's width; the spec's own bound is 32 members
/// of 256 characters, but a header that long is not worth storing per task).
const MAX_TRACESTATE: usize = 512;

static EXPORTING: AtomicBool = AtomicBool::new(false);

pub(super) fn mark_exporting() {
    EXPORTING.store(true, Ordering::Relaxed);
}

/// Whether spans are exported in this process.
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// A span's place in a trace, as the W3C headers carry it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceContext {
    /// `00-<trace id>-<parent span id>-<flags>`.
    pub traceparent: String,
    /// Vendor data, when there was any.
    pub tracestate: Option<String>,
}

/// Makes `span` (not yet entered) a child of the remote span a request's `traceparent`
/// and `tracestate` headers name; missing or malformed headers leave it a new trace's root.
pub fn adopt_remote_parent(span: &tracing::Span, headers: &http::HeaderMap) {
    if !exporting() || !headers.contains_key("traceparent") {
        return;
    }
    let parent = opentelemetry::global::get_text_map_propagator(|propagator| {
        propagator.extract(&opentelemetry_http::HeaderExtractor(headers))
    });
    if let Err(error) = span.set_parent(parent) {
        tracing::debug!(error = ?error, "the request span could not join the caller's trace");
    }
}

/// The current span's trace context, when it is part of an exported trace.
pub fn of_current_span() -> Option<TraceContext> {
    if !exporting() {
        return None;
    }
    let context = tracing::Span::current().context();
    if !context.span().span_context().is_valid() {
        return None;
    }
    let mut headers = HashMap::new();
    opentelemetry::global::get_text_map_propagator(|propagator| propagator.inject_context(&context, &mut headers));
    let traceparent = headers.remove("traceparent")?;
    let tracestate = headers.remove("tracestate").filter(|state| !state.is_empty() && state.len() <= MAX_TRACESTATE);
    Some(TraceContext { traceparent, tracestate })
}

/// The row that records the current span's trace context for the new task `job_id`,
/// when there is one (written in the creating transaction).
pub fn row_of_current_span(job_id: Uuid, now: i64) -> Option<row::Model> {
    let context = of_current_span()?;
    Some(row::Model {
        research_task_job_id: job_id,
        traceparent: context.traceparent,
        tracestate: context.tracestate,
        created_at: now,
    })
}

/// Makes `span` (not yet entered) a child of the span that created task `job_id`, when
/// spans are exported and the task has a stored context. A failed read only costs the
/// link, never the run.
pub async fn join_stored<C: ConnectionTrait>(conn: &C, span: &tracing::Span, job_id: Uuid) {
    if !exporting() {
        return;
    }
    let stored = match crate::store::trace_contexts::find(conn, job_id).await {
        Ok(Some(stored)) => stored,
        Ok(None) => return,
        Err(error) => {
            tracing::debug!(error = %error, "reading the task's trace context failed");
            return;
        }
    };
    let mut headers = HashMap::from([("traceparent".to_owned(), stored.traceparent)]);
    if let Some(state) = stored.tracestate {
        headers.insert("tracestate".to_owned(), state);
    }
    let parent = opentelemetry::global::get_text_map_propagator(|propagator| propagator.extract(&headers));
    if let Err(error) = span.set_parent(parent) {
        tracing::debug!(error = ?error, "the task run could not join its trace");
    }
}
