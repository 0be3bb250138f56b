//! The HTTP surface: GraphQL over HTTP, the WebSocket endpoint, GraphiQL and health.
//!
//! **What is stock and what is ours.** async-graphql executes every operation
//! (`Schema::execute`, `execute_stream`) and names the WebSocket subprotocols;
//! async-graphql-axum's `GraphQLResponse` writes every executed HTTP response (with its
//! cache control and headers). Ours, because the stock behaviour fails the spec or our
//! design: the request extractor (the stock one accepts batches and answers malformed
//! parameters with plain-text 400s, where the graphql-http audit wants GraphQL errors with
//! codes), the status and content type of each response (the stock responder answers 200
//! with `application/graphql-response+json` to every client), the WebSocket loop (the
//! stock one buffers each operation's output in a queue per connection, authenticates only
//! at `connection_init`, and has neither our close codes nor per-operation limits), and the
//! WebSocket handshake (`ws/upgrade.rs`, over hyper's upgrade and tokio-tungstenite:
//! axum's gives no way back to the transport, which the connection must read and discard
//! after refusing an oversized frame from its header, or the reset loses the 1009).
//! async-graphql's `Tracing` extension is not used: its `parse` span records the document
//! with its variables inlined; `graphql/spans.rs` opens an operation span named by the
//! operation and a span per object resolver.

pub(crate) mod admission;
mod graphiql;
mod graphql_http;
mod health;
mod json_size;
mod media;
mod metrics;
pub mod multipart;
pub mod ops;
mod ws;

pub use graphiql::{assets as graphiql_assets, page as graphiql};
pub use graphql_http::{GraphqlEndpoint, graphql_get, graphql_post};
pub use health::{healthz, readyz};
pub use metrics::{install as install_metrics, metrics, track as track_metrics};
pub use ws::{ConnectionLimits, WsEndpoint, graphql_ws};

/// The span each HTTP request runs in (DEBUG, so exported traces have it and the logs do
/// not): the method and path, never the query string (a GET's document and variables),
/// and the caller's trace as its parent when the request carries a W3C `traceparent`.
pub fn request_span(request: &axum::http::Request<axum::body::Body>) -> tracing::Span {
    let span = tracing::debug_span!("http request", http.method = %request.method(), http.path = request.uri().path());
    worker::telemetry::context::adopt_remote_parent(&span, request.headers());
    span
}

/// The answer to a request whose handler panicked: a GraphQL error with the internal
/// code, never the panic's message.
pub fn panic_response(_panic: Box<dyn std::any::Any + Send + 'static>) -> axum::response::Response {
    tracing::error!("a request handler panicked");
    let body = serde_json::json!({ "errors": [{ "message": "internal server error", "extensions": { "code": "INTERNAL_SERVER_ERROR" } }] });
    media::Media::Json.respond(axum::http::StatusCode::INTERNAL_SERVER_ERROR, &body)
}
