//! The Model Context Protocol endpoint: `POST /mcp` (Streamable HTTP, served by `rmcp`,
//! the official Rust SDK, statelessly: no session lives in this process, so any api
//! process behind a load balancer answers any request), guarded like GraphQL (`guard.rs`:
//! the same credentials and rate limits, checked on every request, an `Origin` allowlist,
//! audience binding), with research as tools (`tools.rs`) and the protected resource
//! metadata clients discover the authorization server from (`metadata.rs`).
mod catalog;
mod guard;
mod handler;
mod library;
mod metadata;
mod response_limit;
mod tasks;
mod time;
mod tools;
mod urls;
mod waiting;

use std::sync::Arc;

use axum::Router;
use axum::routing::get;
use rmcp::transport::streamable_http_server::session::never::NeverSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::state::AppState;

pub use urls::{ITEMS, PATH, resource as resource_url};

/// The routes: `/mcp` and its protected resource metadata.
pub fn router(state: AppState) -> Router {
    tools::register_metrics();
    let mut config = StreamableHttpServerConfig::default();
    // Stateless for every revision: 2026-07-28 has no sessions, and the earlier ones are
    // answered without one too, so nothing depends on which process took a request.
    config.legacy_session_mode = false;
    config.json_response = true;
    config.allowed_hosts = guard::allowed_hosts(&state.public_url);
    config.max_request_body_bytes = state.settings.body_limit();
    let handler_state = state.clone();
    let service = StreamableHttpService::new(
        move || Ok(handler::McpHandler::new(handler_state.clone())),
        Arc::new(NeverSessionManager::default()),
        config,
    );
    let mcp = Router::new()
        .route_service(PATH, service)
        .route(&format!("{ITEMS}/{{id}}"), get(library::fetch_http))
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard::guard))
        .with_state(state.clone());
    let metadata = Router::new()
        .route(urls::METADATA, get(metadata::document))
        .route("/.well-known/oauth-protected-resource", get(metadata::document))
        .with_state(state);
    mcp.merge(metadata)
}
