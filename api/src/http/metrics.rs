//! `GET /metrics`: Prometheus text exposition of the process's metrics.
use std::sync::OnceLock;
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The process-wide recorder. Installed once: tests run many servers in one process.
fn handle() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| match PrometheusBuilder::new().install_recorder() {
            Ok(handle) => Some(handle),
            Err(error) => {
                tracing::warn!(error = %error, "metrics recorder not installed; /metrics will be empty");
                None
            }
        })
        .as_ref()
}

/// Installs the recorder; call once at start so early metrics are not lost.
pub fn install() {
    let _ = handle();
}

/// Renders every metric.
pub async fn metrics() -> Response {
    let body = handle().map(PrometheusHandle::render).unwrap_or_default();
    ([("content-type", "text/plain; version=0.0.4")], body).into_response()
}

/// Counts requests and their latency per route and status.
pub async fn track(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_owned())
        .unwrap_or_else(|| "unmatched".to_owned());
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!("http_requests_total", "route" => route.clone(), "status" => status).increment(1);
    metrics::histogram!("http_request_duration_seconds", "route" => route).record(started.elapsed().as_secs_f64());
    response
}
