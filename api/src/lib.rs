//! The GraphQL server: HTTP and WebSocket endpoints, identity and permission scoping.
//! See `README.md` beside this crate.

pub mod auth;
pub mod config;
pub mod error;
pub mod graphql;
pub mod http;
pub mod live;
pub mod server;
pub mod state;
pub mod store;
