//! The worker: the task lifecycle (the only writer of `research_task_*` rows), the grant
//! check, and (in their own modules) the lease loop, outbox loop and research pipeline.
//! See `README.md` beside this crate.

pub mod db;
pub mod grant;
pub mod lifecycle;
pub mod notify;

pub use lifecycle::LifecycleError;
pub use notify::{Notifier, TaskSignal};
