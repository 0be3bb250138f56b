//! GraphiQL, preconfigured with the HTTP and subscription endpoints. On the embedded
//! default (the public development secret) it also carries a fresh development token for
//! `alice` in tenant `acme`, over HTTP and in the WebSocket `connection_init`, so a
//! newcomer can run the README's first task without minting one; with a real secret the
//! caller puts `{"Authorization": "Bearer …"}` in the Headers tab.
use async_graphql::http::GraphiQLSource;
use axum::extract::State;
use axum::response::Html;

use crate::auth::{Claims, mint_token};
use crate::state::AppState;

/// How long the token GraphiQL carries stays valid.
const DEVELOPMENT_TOKEN_TTL_SECONDS: i64 = 24 * 60 * 60;

/// Serves the GraphiQL page.
pub async fn graphiql(State(state): State<AppState>) -> Html<String> {
    let source = GraphiQLSource::build()
        .endpoint("/graphql")
        .subscription_endpoint("/graphql/ws")
        .title("Research tasks · GraphiQL");
    let bearer = development_bearer(&state);
    let source = match &bearer {
        Some(bearer) => source.header("Authorization", bearer).ws_connection_param("Authorization", bearer),
        None => source,
    };
    Html(source.finish())
}

/// `Bearer <token>` for the development subject, only while the public development secret
/// is in use (such a token proves nothing anyway).
fn development_bearer(state: &AppState) -> Option<String> {
    if !state.settings.uses_development_secret() {
        return None;
    }
    let claims = Claims {
        sub: "alice".to_owned(),
        tenant: "acme".to_owned(),
        channel: None,
        exp: chrono::Utc::now().timestamp() + DEVELOPMENT_TOKEN_TTL_SECONDS,
    };
    mint_token(&state.settings.jwt_secret, &claims).ok().map(|token| format!("Bearer {token}"))
}
