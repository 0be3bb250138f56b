//! The HTTP surface: GraphQL over HTTP, the WebSocket endpoint, GraphiQL and health.

pub(crate) mod error_codes;
mod graphiql;
mod graphql_http;
mod health;
mod media;
mod metrics;
mod ws;

pub use error_codes::ErrorCodes;
pub use graphiql::graphiql;
pub use graphql_http::{GraphqlEndpoint, graphql_get, graphql_post};
pub use health::{healthz, readyz};
pub use metrics::{install as install_metrics, metrics, track as track_metrics};
pub use ws::{ConnectionLimits, WsEndpoint, graphql_ws};
