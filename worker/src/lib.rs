#![doc = include_str!("../README.md")]

pub mod answer;
pub mod config;
pub mod cost;
pub mod db;
pub mod engine;
pub mod grant;
pub mod knowledge;
pub mod lifecycle;
pub mod notify;
pub mod observe;
pub mod openai;
pub mod outbox;
pub mod pipeline;
pub mod remote;
pub mod runtime;
pub mod store;
pub mod telemetry;
pub mod tokens;
pub mod webhooks;

pub use config::WorkerSettings;
pub use lifecycle::LifecycleError;
pub use notify::{Notifier, Signal, TaskSignal};
