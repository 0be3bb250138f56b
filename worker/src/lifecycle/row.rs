//! What every lifecycle write shares: reading a job row under its lock, the bookkeeping of
//! an update, and the one way a write transaction ends.
use entity::research_task_job as job;
use sea_orm::{
    ActiveValue::Set, ConnectionTrait, DatabaseBackend, DatabaseTransaction, DbErr, EntityTrait, QuerySelect,
    sea_query::LockType,
};
use uuid::Uuid;

use super::{Lease, LifecycleError};
use crate::notify::{Notifier, TaskSignal, notify_in_transaction};

/// Reads the job and locks its row until the transaction ends (public only to the
/// `test-support` feature: the module is private). On PostgreSQL this is
/// `SELECT … FOR UPDATE`; SQLite write transactions begin IMMEDIATE and so already hold
/// the database's one write lock.
pub async fn lock_job<C: ConnectionTrait>(txn: &C, id: Uuid) -> Result<Option<job::Model>, DbErr> {
    let mut query = job::Entity::find_by_id(id);
    if txn.get_database_backend() == DatabaseBackend::Postgres {
        query = query.lock(LockType::Update);
    }
    query.one(txn).await
}

/// Locks the job and checks it still carries this lease: the fence of every worker write.
pub(crate) async fn lock_leased(txn: &DatabaseTransaction, lease: &Lease) -> Result<job::Model, LifecycleError> {
    match lock_job(txn, lease.job_id).await? {
        Some(current) if current.lease_token == Some(lease.token) => Ok(current),
        _ => Err(LifecycleError::LeaseLost),
    }
}

/// Marks an update: `row_version + 1` and `updated_at = now` (never earlier than before,
/// so the list order by `updated_at` stays stable when clocks disagree).
pub(crate) fn touch(model: &job::Model, active: &mut job::ActiveModel, now: i64) {
    active.row_version = Set(model.row_version + 1);
    active.updated_at = Set(now.max(model.updated_at));
}

/// Clears the lease (all three columns together, as `research_task_jobs_lease_ck`
/// demands): the worker holding it is fenced out from here on.
pub(crate) fn clear_lease(row: &mut job::ActiveModel) {
    row.worker_id = Set(None);
    row.lease_token = Set(None);
    row.lease_expires_at = Set(None);
}

/// A signal about one task.
pub(crate) fn signal(task_id: Uuid, progress: Option<i32>, partial: Option<i32>, work_available: bool) -> TaskSignal {
    TaskSignal { task_id, progress_sequence: progress, partial_sequence: partial, work_available, answer_draft: false }
}

/// Ends a lifecycle write the one way they all end: the NOTIFY is queued in the
/// transaction (delivered at commit, never when it rolls back), the transaction commits,
/// and only then do this process's listeners hear the same signal.
pub(crate) async fn commit(
    txn: DatabaseTransaction,
    notifier: &Notifier,
    signal: TaskSignal,
) -> Result<(), LifecycleError> {
    notify_in_transaction(&txn, &signal).await?;
    txn.commit().await?;
    notifier.publish(signal);
    Ok(())
}
