#![doc = include_str!("../README.md")]

pub mod auth;
pub mod config;
pub mod error;
pub mod gauges;
pub mod graphql;
pub mod http;
pub mod live;
pub mod mcp;
pub mod rate;
pub mod request_id;
pub mod server;
pub mod state;
