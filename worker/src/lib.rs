#![doc = include_str!("../README.md")]

// The face: what the API, the `worker` binary and the tests use, grouped. Everything else
// is the worker's own machinery.

// Running a worker: its settings, the database, the loops, and what operators read.
pub mod config;
pub mod db;
pub mod model_settings;
pub mod observe;
pub mod runtime;
pub mod telemetry;

// The application layer: one operation per use case, which every channel calls.
pub mod app;

// Research tasks: the lifecycle decides, the store reads and writes (every statement this
// service sends), signals tell followers, grants say who may. The store is closed: only
// the lifecycle and the application layer reach it, and the tests crate's driver suite
// through the `testing` feature.
pub mod grant;
pub mod lifecycle;
pub mod notify;
#[cfg(feature = "testing")]
pub mod store;
#[cfg(not(feature = "testing"))]
pub(crate) mod store;

// Research itself: engines, rounds, grounding, answers, prompts, model costs. It reaches
// passages through a port and knows no database.
pub mod research;

// What research runs on and reports: knowledge, webhooks, and the seam for an external
// queue.
pub mod knowledge;
pub mod outbox;
pub mod webhooks;

// The pipeline that runs a claimed task stage by stage (the tests drive it directly).
#[cfg(feature = "testing")]
pub mod pipeline;
#[cfg(not(feature = "testing"))]
pub(crate) mod pipeline;

// Inside the worker only: the background loops (the composition root, `runtime`, lists
// them), and helpers.
pub(crate) mod loops;
pub(crate) mod remote;
pub(crate) mod retry;
pub(crate) mod tokens;

pub use config::WorkerSettings;
pub use lifecycle::LifecycleError;
pub use notify::{Notifier, Signal, TaskSignal};
