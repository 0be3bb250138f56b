//! `GET /metrics`: Prometheus text exposition of the process's metrics.
use std::time::Instant;

use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
/// Installs the process's recorder (`worker::observe`, shared with the worker binary).
pub fn install() {
    worker::observe::install();
}

/// Renders every metric.
pub async fn metrics() -> Response {
    let body = worker::observe::render();
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
