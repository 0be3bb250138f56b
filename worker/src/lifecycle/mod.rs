//! The task lifecycle: every write to `research_task_*` rows goes through here. The API
//! calls the commands (create, cancel, pause, resume); the worker loops call the lease
//! functions (claim, heartbeat, checkpoint, complete, fail).
//!
//! **Invariant:** every event's sequence is allocated in the transaction that writes it,
//! while that transaction holds the job's row lock, so commit order equals sequence order.

mod claim;
mod commands;
mod create;
pub mod delivery;
mod error;
mod journal;
mod lease;
mod row;

pub use claim::claim_due;
pub use commands::{TaskRef, cancel, pause, resume};
pub use create::{Created, NewTask, create};
pub use error::LifecycleError;
pub use journal::{append_partial_result, append_progress_event};
pub use lease::{
    Checkpoint, Claimed, Completion, FailOutcome, Failure, Lease, RetryPolicy, checkpoint, complete, fail_attempt,
    heartbeat, merge_cost, release,
};
pub use row::{lock_job, touch};
