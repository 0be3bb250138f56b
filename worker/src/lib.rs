#![doc = include_str!("../README.md")]

// The face: what the API, the `worker` binary and the tests use, grouped. Everything else
// is the worker's own machinery.

// Running a worker: its settings, the database, the loops, and what operators read.
pub mod config;
pub mod db;
pub mod observe;
pub mod runtime;
pub mod telemetry;

// The application layer: one operation per use case, which every channel calls.
pub mod app;

// Research tasks: the lifecycle decides, the store reads and writes (every statement this
// service sends), signals tell followers, grants say who may.
pub mod grant;
pub mod lifecycle;
pub mod notify;
pub mod store;

// What research runs on and reports: engines, knowledge, costs, webhooks, and the seam for
// an external queue.
pub mod cost;
pub mod engine;
pub mod grounding;
pub mod knowledge;
pub mod outbox;
pub mod rounds;
pub mod webhooks;

// The pipeline that runs a claimed task stage by stage (the tests drive it directly).
#[cfg(feature = "test-support")]
pub mod pipeline;
#[cfg(not(feature = "test-support"))]
pub(crate) mod pipeline;

// Inside the worker only.
pub(crate) mod answer;
pub(crate) mod openai;
pub(crate) mod remote;
pub(crate) mod tokens;

pub use config::WorkerSettings;
pub use lifecycle::LifecycleError;
pub use notify::{Notifier, Signal, TaskSignal};
