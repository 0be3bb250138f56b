//! The OAuth 2.0 Protected Resource Metadata of `/mcp` (RFC 9728), which MCP clients read
//! after a 401 to find where to get a token: the resource URL, the authorization servers
//! (the configured identity providers; none with HS256 secrets alone, a development setup
//! in which clients need a pre-issued bearer token) and how a token is presented.
use axum::Json;
use axum::extract::State;
use serde_json::{Value, json};

use crate::state::AppState;

/// The document.
pub async fn document(State(state): State<AppState>) -> Json<Value> {
    let servers: Vec<&str> = state.settings.issuers().map(|issuer| issuer.issuer.as_str()).collect();
    Json(json!({
        "resource": super::urls::resource(&state.public_url),
        "authorization_servers": servers,
        "bearer_methods_supported": ["header"],
        "resource_name": "Knowledge-space research",
    }))
}
