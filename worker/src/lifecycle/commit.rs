//! The one way a lifecycle write ends, and the bookkeeping every row change shares.
//!
//! A commit's signals are decided by the write (which tasks changed, and for whom); they
//! are announced to other processes inside the transaction (delivered at commit, never
//! when it rolls back), the transaction commits, and only then does this process hear
//! them.
use entity::research_task_job as job;
use sea_orm::DatabaseTransaction;

use super::LifecycleError;
use crate::notify::{Notifier, TaskSignal};
use crate::store::signals::announce;

/// Announces `signals`, commits `txn`, then publishes them in this process.
pub(crate) async fn commit(
    txn: DatabaseTransaction,
    notifier: &Notifier,
    signals: Vec<TaskSignal>,
) -> Result<(), LifecycleError> {
    announce(&txn, &signals).await?;
    txn.commit().await?;
    for signal in signals {
        notifier.publish(signal);
    }
    Ok(())
}

/// Marks a change a client can see: `row_version + 1` and `updated_at = now` (never
/// earlier than before, so the list order by `updated_at` stays stable when clocks
/// disagree).
pub(crate) fn touch(row: &mut job::Model, now: i64) {
    row.row_version += 1;
    row.updated_at = Ord::max(now, row.updated_at);
}

/// Clears the lease (all three columns together, as `research_task_jobs_lease_ck`
/// demands): the worker holding it is fenced out from here on.
pub(crate) fn clear_lease(row: &mut job::Model) {
    row.worker_id = None;
    row.lease_token = None;
    row.lease_expires_at = None;
}
