//! The task lifecycle: every write to `research_task_*` rows goes through here. The API
//! calls the commands (create, cancel, pause, resume); the worker loops call the lease
//! functions (claim, heartbeat, checkpoint, complete, fail).
//!
//! Its invariants (the only writer, fencing, sequences allocated under the row lock,
//! idempotent journals, heartbeats and `row_version`) are written once, in
//! ARCHITECTURE.md. Visibility enforces the first: the row primitives (`row`, `delivery`)
//! are crate-private, and tests reach them only through the `test-support` feature.

mod batch;
mod claim;
mod claim_many;
mod commands;
mod create;
#[cfg(feature = "test-support")]
pub mod delivery;
#[cfg(not(feature = "test-support"))]
pub(crate) mod delivery;
mod draft;
mod erase;
mod error;
mod fair;
mod group;
mod journal;
mod lease;
mod quota;
mod retention;
mod row;
mod seal;

pub use claim::{Caps, Claim, Fairness, Pair, claim_due, claim_fairly};
pub use commands::{TaskRef, cancel, pause, resume};
pub use create::{Created, NewTask, create};
pub use draft::write_answer_draft;
pub use erase::{
    Erased, begin_space_deletion, delete_answer_trace, delete_task, finish_pending_deletions, finish_space_deletion,
    tenant_spaces,
};
pub use error::LifecycleError;
pub use group::{Boundary, BoundaryStep, Committed, commit_boundaries};
pub use journal::{append_partial_result, append_progress_event};
pub use lease::{
    Checkpoint, Claimed, Completion, FailOutcome, Failure, Lease, RetryPolicy, checkpoint, complete, fail_attempt,
    heartbeat, heartbeat_many, release,
};
pub use quota::{QuotaRefusal, Quotas};
pub use retention::{Pruned, prune};
pub use seal::{finish_pending_erasures, finish_tenant_erasure, guard as guard_tenant, is_sealed, seal_tenant};

/// Makes a dead outbox row pending again (an operator's redelivery), appending `audit`
/// in the same transaction when it did; false when the row is not dead or does not exist.
pub async fn redeliver_outbox(
    db: &sea_orm::DatabaseConnection,
    notifier: &crate::notify::Notifier,
    id: uuid::Uuid,
    now: i64,
    audit: entity::audit_event::ActiveModel,
) -> Result<bool, LifecycleError> {
    use sea_orm::EntityTrait as _;
    let txn = crate::db::begin_write(db).await?;
    let redelivered = delivery::redeliver_dead(&txn, id, now).await?;
    if redelivered {
        entity::audit_event::Entity::insert(audit).exec_without_returning(&txn).await?;
    }
    txn.commit().await?;
    if redelivered {
        notifier.work_due();
    }
    Ok(redelivered)
}
#[cfg(feature = "test-support")]
pub use row::lock_job;
