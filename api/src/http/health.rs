//! Liveness and readiness.
use axum::extract::State;
use axum::http::StatusCode;

use crate::state::AppState;

/// The process is up.
pub async fn healthz() -> &'static str {
    "ok"
}

/// Ready when the database answers, no migration is pending and the embedded worker's
/// loops tick; 503 with the reason otherwise, so a load balancer stops sending traffic.
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, String) {
    match worker::observe::not_ready(&state.db, &state.worker_ticks).await {
        None => (StatusCode::OK, "ready".to_owned()),
        Some(reason) => {
            tracing::warn!(reason = %reason, "readiness check failed");
            (StatusCode::SERVICE_UNAVAILABLE, reason)
        }
    }
}
