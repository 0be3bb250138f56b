//! The task lifecycle: every decision about `research_task_*` rows is made here, and the
//! store writes what it decided (`crate::store`). The API calls the commands (create,
//! cancel, pause, resume, deletions); the worker loops call the lease operations (claim,
//! heartbeat, stage boundaries, fail, release).
//!
//! Its invariants (the only writer, fencing, sequences allocated under the row lock,
//! idempotent journals, heartbeats and `row_version`) are stated once, in
//! ARCHITECTURE.md.

mod attempt;
mod boundary;
mod claim;
mod commands;
mod commit;
mod create;
mod dispatch;
mod draft;
mod erase;
mod error;
mod events;
mod fair;
mod lease;
mod quota;
mod records;
mod retention;
mod seal;
mod split;
mod steer;
mod task_ref;
mod wait;

pub use crate::retry::RetryPolicy;
pub use attempt::{FailOutcome, Failure, fail_attempt, release};
pub use boundary::{
    Boundary, BoundaryStep, Checkpoint, Committed, Completion, checkpoint, commit_boundaries, commit_boundary, complete,
};
pub use claim::{Claim, claim_due, claim_fairly};
pub use commands::{cancel, pause, resume};
pub use create::{Created, NewTask, ThreadTurn, create, key_task_id};
pub use dispatch::{DispatchOutcome, Published, record_dispatches};
pub use draft::write_answer_draft;
pub use erase::{
    Erased, begin_space_deletion, delete_answer_trace, delete_task, finish_pending_deletions, finish_space_deletion,
    tenant_spaces,
};
pub use error::{LifecycleError, QuotaRefusal};
pub use fair::{Caps, Fairness, Pair};
pub use lease::{Claimed, Lease, LeasePair, heartbeat, heartbeats};
pub use quota::{Quotas, check_upload_bytes};
pub use retention::{Pruned, prune};
pub use seal::{finish_pending_erasures, finish_tenant_erasure, guard as guard_tenant, is_sealed, seal_tenant};
pub use split::{Split, write_split};
pub use steer::{MAX_NOTES, steer};
pub use task_ref::TaskRef;
pub use wait::{InputRequest, answer_clarification, approve_plan, await_input, awaiting, plan_queries};

/// Makes a dead outbox entry pending again (an operator's redelivery), appending `audit`
/// in the same transaction when it did; false when the entry is not dead or does not
/// exist.
pub async fn redeliver_outbox(
    db: &sea_orm::DatabaseConnection,
    notifier: &crate::notify::Notifier,
    id: uuid::Uuid,
    now: i64,
    audit: entity::audit_event::Model,
) -> Result<bool, LifecycleError> {
    let txn = crate::store::begin_write(db).await?;
    let redelivered = crate::store::outbox::redeliver_dead(&txn, id, now).await?;
    if redelivered {
        crate::store::audit::insert(&txn, audit).await?;
    }
    txn.commit().await?;
    if redelivered {
        notifier.work_due();
    }
    Ok(redelivered)
}
