//! `GET /graphql/ws`: GraphQL subscriptions over WebSocket, speaking both
//! `graphql-transport-ws` and the legacy `graphql-ws` subprotocol. The credential comes in
//! the `connection_init` payload: `{"Authorization": "Bearer …"}`.
use async_graphql::Data;
use async_graphql_axum::{GraphQLProtocol, GraphQLWebSocket};
use axum::extract::{State, WebSocketUpgrade};
use axum::response::Response;
use serde_json::Value;

use super::graphql_http::GraphqlEndpoint;
use crate::auth::authenticate;
use crate::error::ApiError;

/// Upgrades the connection and serves subscriptions on it.
pub async fn graphql_ws(
    State(endpoint): State<GraphqlEndpoint>,
    protocol: GraphQLProtocol,
    upgrade: WebSocketUpgrade,
) -> Response {
    upgrade
        .protocols(async_graphql::http::ALL_WEBSOCKET_PROTOCOLS)
        .max_message_size(64 * 1024)
        .on_upgrade(move |socket| async move {
            let state = endpoint.state.clone();
            GraphQLWebSocket::new(socket, endpoint.schema.clone(), protocol)
                .on_connection_init(move |payload| async move {
                    let header = authorization(&payload);
                    // A credential that does not check out refuses the connection (4403);
                    // no credential at all gives an anonymous connection whose
                    // subscriptions answer UNAUTHENTICATED.
                    let principal = authenticate(&state, header.as_deref())
                        .await
                        .map_err(|error: ApiError| async_graphql::Error::new(error.to_string()))?;
                    let mut data = Data::default();
                    if let Some(principal) = principal {
                        data.insert(principal);
                    }
                    Ok(data)
                })
                .serve()
                .await;
        })
}

/// The `Authorization` value of a `connection_init` payload, in any letter case, at the
/// top level or under `headers`.
fn authorization(payload: &Value) -> Option<String> {
    let find = |object: &serde_json::Map<String, Value>| {
        object
            .iter()
            .find(|(name, _)| name.eq_ignore_ascii_case("authorization"))
            .and_then(|(_, value)| value.as_str().map(str::to_owned))
    };
    let object = payload.as_object()?;
    find(object).or_else(|| object.get("headers").and_then(Value::as_object).and_then(find))
}
