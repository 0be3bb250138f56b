//! `GET /graphql/ws`: GraphQL over WebSocket, `graphql-transport-ws` to the letter and the
//! legacy `graphql-ws`. The credential comes in the `connection_init` payload:
//! `{"Authorization": "Bearer …"}`.

mod admission;
mod connection;
mod protocol;
mod upgrade;

use std::sync::Arc;
use std::time::Duration;

use std::net::SocketAddr;

use axum::Extension;
use axum::extract::{ConnectInfo, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use tokio::sync::Semaphore;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tracing::Instrument as _;

pub use connection::ConnectionLimits;

use super::GraphqlEndpoint;
use super::admission::{Refused, admit};
use crate::error::ApiError;

/// The largest frame the transport reads whole. Messages between `protocol::MAX_INBOUND_BYTES`
/// and this are read and then refused (1009), so nothing unread resets the connection
/// before the client sees why; larger ones are refused from their header alone.
const MAX_FRAME_BYTES: usize = 1024 * 1024;

/// What the WebSocket endpoint shares across connections.
#[derive(Clone)]
pub struct WsEndpoint {
    /// The GraphQL endpoint the operations run on.
    pub graphql: GraphqlEndpoint,
    /// One permit per open connection: the per-process connection limit.
    pub connections: Arc<Semaphore>,
    /// Per-connection tunables.
    pub limits: ConnectionLimits,
    /// Cancelled when the server shuts down.
    pub shutdown: tokio_util::sync::CancellationToken,
}

/// Upgrades the connection, or answers 429 when its address (or the principal an
/// `Authorization` header names) is past its rate, or 503 when the process holds its
/// connection limit already.
pub async fn graphql_ws(
    State(endpoint): State<WsEndpoint>,
    peer: Option<Extension<ConnectInfo<SocketAddr>>>,
    headers: axum::http::HeaderMap,
    upgrade: upgrade::Upgrade,
) -> Response {
    // The upgrade is charged like any request before anything is read: the connection's
    // credential comes in `connection_init`, so here a header that does not authenticate
    // (or none) counts against the address alone, and never refuses the upgrade itself.
    let peer = peer.map(|Extension(ConnectInfo(address))| address.ip());
    if let Err(Refused { error: error @ ApiError::RateLimited { .. }, checked }) =
        admit(&endpoint.graphql.state, &headers, peer).await
    {
        return rate_limited(&error, &checked);
    }
    // The upgrade's id stands for every operation of the connection.
    let request_id = crate::request_id::of(&headers);
    let Ok(permit) = endpoint.connections.clone().try_acquire_owned() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "too many WebSocket connections").into_response();
    };
    let upgrade_span = tracing::Span::current();
    // In order of preference: the current protocol, then the legacy one; a client that
    // offers neither is served the current one, as before.
    let chosen = upgrade.choose(&async_graphql::http::ALL_WEBSOCKET_PROTOCOLS);
    let config = WebSocketConfig::default()
        // Small buffers: an idle subscribed connection should cost kilobytes, not the
        // 128 KiB per direction tungstenite would reserve by default. Client messages are
        // a few hundred bytes; a larger frame grows the buffer to fit it.
        .read_buffer_size(1024)
        .write_buffer_size(0)
        // Room for the largest message the server sends (a result HTTP would return) and
        // its frame header; results past it get an `error` instead (see `connection`).
        .max_write_buffer_size(endpoint.limits.max_message_bytes.saturating_add(64 * 1024))
        .max_message_size(Some(MAX_FRAME_BYTES))
        .max_frame_size(Some(MAX_FRAME_BYTES));
    upgrade.respond(chosen, config, move |socket| async move {
        let protocol = protocol::negotiated(chosen);
        // A child of the upgrade request's span, so a `traceparent` sent with the upgrade
        // makes the connection's operations part of the caller's trace.
        let span = tracing::info_span!(parent: &upgrade_span, "websocket", connection.id = %uuid::Uuid::new_v4(), protocol = ?protocol);
        connection::serve(socket, protocol, endpoint.graphql, endpoint.limits, endpoint.shutdown, request_id)
            .instrument(span)
            .await;
        drop(permit);
    })
}

/// A 429 for an upgrade past its rate, with `Retry-After`, the rate headers and the
/// GraphQL error a POST would carry.
fn rate_limited(error: &ApiError, checked: &crate::rate::Checked) -> Response {
    let retry_after = match error {
        ApiError::RateLimited { retry_after_secs } => *retry_after_secs,
        _ => 1,
    };
    let body = serde_json::json!({ "errors": [{ "message": error.to_string(), "extensions": { "code": "RATE_LIMITED", "retryAfterSeconds": retry_after } }] });
    let mut response = (StatusCode::TOO_MANY_REQUESTS, axum::Json(body)).into_response();
    let set = response.headers_mut();
    set.insert(axum::http::header::RETRY_AFTER, retry_after.into());
    if let Some((policy, now)) = checked.headers()
        && let (Ok(policy), Ok(now)) = (policy.parse(), now.parse())
    {
        set.insert("ratelimit-policy", policy);
        set.insert("ratelimit", now);
    }
    response
}

impl ConnectionLimits {
    /// From the settings' milliseconds and counts.
    pub fn new(
        init_timeout_ms: u64,
        ping_interval_ms: u64,
        max_subscriptions: usize,
        send_timeout_ms: u64,
        max_message_bytes: usize,
    ) -> Self {
        Self {
            init_timeout: Duration::from_millis(init_timeout_ms),
            ping_interval: Duration::from_millis(ping_interval_ms.max(100)),
            max_subscriptions,
            send_timeout: Duration::from_millis(send_timeout_ms.max(1)),
            max_message_bytes,
        }
    }
}
