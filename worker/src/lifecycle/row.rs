//! What every lifecycle write shares: reading a job row under its lock, the bookkeeping of
//! an update, and the one way a write transaction ends.
use entity::research_task_job as job;
use sea_orm::{
    ActiveValue::Set,
    ColumnTrait, ConnectionTrait, DatabaseBackend, DatabaseTransaction, DbErr, EntityTrait, QueryFilter, QuerySelect,
    UpdateMany,
    sea_query::{Expr, ExprTrait, Func, LockType},
};
use uuid::Uuid;

use super::journal::Appended;
use super::{Lease, LifecycleError};
use crate::notify::{Notifier, TaskSignal, notify_in_transaction, notify_many_in_transaction};

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

/// The fenced write of a stage boundary, in one statement: `update` (with the bookkeeping
/// of [`touch`] added) lands only while the job still carries `lease`, is still in
/// `from.stage` and its grant holds at `now`, and returns the row as updated. The row is
/// then locked until the transaction ends, as [`lock_leased`] would have left it.
///
/// `from` is the row as this lease holder last committed it. Its `stage` and `cost` are
/// still the row's: only the lease holder writes them, and every other writer of either
/// (cancel, pause, a re-claim) replaces the token first. When nothing matched, the row is
/// locked and read to say why: [`LifecycleError::LeaseLost`], `NotAllowed` for a stage
/// that moved under this lease, or [`LifecycleError::GrantDenied`].
pub(crate) async fn update_fenced(
    txn: &DatabaseTransaction,
    lease: &Lease,
    from: &job::Model,
    command: &'static str,
    update: UpdateMany<job::Entity>,
    now: i64,
) -> Result<job::Model, LifecycleError> {
    let backend = txn.get_database_backend();
    let fenced = update
        .col_expr(job::Column::RowVersion, Expr::col(job::Column::RowVersion).add(1))
        .col_expr(job::Column::UpdatedAt, Func::greatest([Expr::col(job::Column::UpdatedAt), Expr::val(now)]).into())
        .filter(job::Column::Id.eq(lease.job_id))
        .filter(job::Column::LeaseToken.eq(lease.token))
        .filter(job::Column::Stage.eq(from.stage))
        .filter(crate::grant::holds_sql(backend, "\"research_task_jobs\".\"permission_snapshot_id\"", now));
    if let Some(updated) = fenced.exec_with_returning(txn).await?.pop() {
        return Ok(updated);
    }
    Err(why_unfenced(txn, lease, from, command, now).await?)
}

/// Why a fenced boundary write matched no row, read under the row's lock:
/// [`LifecycleError::LeaseLost`], `NotAllowed` for a stage that moved under this lease, or
/// [`LifecycleError::GrantDenied`]. Writes nothing; `Err` is a statement that failed.
pub(crate) async fn why_unfenced(
    txn: &DatabaseTransaction,
    lease: &Lease,
    from: &job::Model,
    command: &'static str,
    now: i64,
) -> Result<LifecycleError, DbErr> {
    let Some(current) = lock_job(txn, lease.job_id).await?.filter(|row| row.lease_token == Some(lease.token)) else {
        return Ok(LifecycleError::LeaseLost);
    };
    if current.stage != from.stage {
        return Ok(LifecycleError::NotAllowed { command, current: current.stage });
    }
    Ok(match crate::grant::check(txn, current.permission_snapshot_id, now).await? {
        crate::grant::Verdict::Denied(denial) => LifecycleError::GrantDenied(denial),
        // The grant was restored between the two statements; the lock now keeps the row
        // still, so the caller may simply try again.
        crate::grant::Verdict::Holds => LifecycleError::Database(DbErr::Custom(format!(
            "the {command} of task {} raced a grant change; it will be retried",
            lease.job_id
        ))),
    })
}

/// Marks an update: `row_version + 1` and `updated_at = now` (never earlier than before,
/// so the list order by `updated_at` stays stable when clocks disagree).
pub(crate) fn touch(model: &job::Model, active: &mut job::ActiveModel, now: i64) {
    active.row_version = Set(model.row_version + 1);
    active.updated_at = Set(Ord::max(now, model.updated_at));
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
    TaskSignal {
        task_id,
        progress_sequence: progress,
        partial_sequence: partial,
        work_available,
        answer_draft: false,
        webhooks: false,
        by_lease_holder: false,
    }
}

/// A signal about the progress event `appended` (and the partial results up to
/// `partial`) of one task.
pub(crate) fn event_signal(
    task_id: Uuid,
    appended: Appended,
    partial: Option<i32>,
    work_available: bool,
) -> TaskSignal {
    TaskSignal { webhooks: appended.webhooks, ..signal(task_id, Some(appended.sequence), partial, work_available) }
}

/// Ends a lifecycle write the one way they all end: the NOTIFY is queued in the
/// transaction (delivered at commit, never when it rolls back), the transaction commits,
/// and only then do this process's listeners hear the same signal.
pub(crate) async fn commit(
    txn: DatabaseTransaction,
    notifier: &Notifier,
    signal: TaskSignal,
) -> Result<(), LifecycleError> {
    end(txn, notifier, signal, false).await
}

/// [`commit`] for a write of the lease holder under its own lease: the signal says so,
/// so lease keepers (which look at every other signal about a task they hold) skip it.
pub(crate) async fn commit_as_lease_holder(
    txn: DatabaseTransaction,
    notifier: &Notifier,
    signal: TaskSignal,
) -> Result<(), LifecycleError> {
    end(txn, notifier, TaskSignal { by_lease_holder: true, ..signal }, false).await
}

/// [`commit`] for a transaction whose last event was appended by
/// `journal::append_progress_event_announcing` with `template`: the signal is the
/// template with the event's sequence and webhooks, the same one its insert queued as
/// NOTIFY; only when it queued none (SQLite, a replayed key) is one sent here.
pub(crate) async fn commit_announced(
    txn: DatabaseTransaction,
    notifier: &Notifier,
    template: TaskSignal,
    appended: Appended,
) -> Result<(), LifecycleError> {
    end(txn, notifier, announced_signal(template, appended), appended.announced).await
}

/// The signal [`commit_announced`] announces: `template` with the event's sequence and
/// webhooks.
pub(crate) fn announced_signal(template: TaskSignal, appended: Appended) -> TaskSignal {
    TaskSignal { progress_sequence: Some(appended.sequence), webhooks: appended.webhooks, ..template }
}

/// The NOTIFY unless the transaction already queued it, the commit, then this process.
async fn end(
    txn: DatabaseTransaction,
    notifier: &Notifier,
    signal: TaskSignal,
    announced: bool,
) -> Result<(), LifecycleError> {
    if !announced {
        notify_in_transaction(&txn, &signal).await?;
    }
    txn.commit().await?;
    notifier.publish(signal);
    Ok(())
}

/// The signal a lease holder's write announces (see [`commit_as_lease_holder`]), before
/// its event's sequence is known: the template of `commit_announced`.
pub(crate) fn lease_holder_signal(task_id: Uuid, partial: Option<i32>) -> TaskSignal {
    TaskSignal { by_lease_holder: true, ..signal(task_id, None, partial, false) }
}

/// [`commit`] for a transaction that changed several tasks (a chunk of claims, a batch of
/// deletions): NOTIFYs listing their signals, and each signal published here after the
/// commit.
pub(crate) async fn commit_many(
    txn: DatabaseTransaction,
    notifier: &Notifier,
    signals: Vec<TaskSignal>,
) -> Result<(), LifecycleError> {
    notify_many_in_transaction(&txn, &signals).await?;
    txn.commit().await?;
    for signal in signals {
        notifier.publish(signal);
    }
    Ok(())
}

/// A lifecycle statement written as PostgreSQL text (`*.postgres.sql`) with the rules it
/// shares with the rest of the crate filled in from their one definition each:
/// `{GRANT_HOLDS}` (the grant of row `grant_row` at `now`, `grant::holds_at`),
/// `{ANY_ENDPOINT}` (whether the creator of row `task_row` has a webhook endpoint),
/// `{DELIVERY_OPEN}` and `{DELIVERY_UNLEASED}` (the status tests of `delivery`, on the
/// delivery row `o`).
pub(crate) fn postgres_statement(template: &str, grant_row: &str, now: &str, task_row: &str) -> String {
    use crate::lifecycle::delivery::{OPEN, UNLEASED, status_in};
    let backend = DatabaseBackend::Postgres;
    template
        .replace(
            "{GRANT_HOLDS}",
            &crate::grant::holds_at(backend, &format!("{grant_row}.\"permission_snapshot_id\""), now),
        )
        .replace("{ANY_ENDPOINT}", &crate::webhooks::any_endpoint_of(task_row))
        .replace("{DELIVERY_OPEN}", &status_in("o", &OPEN))
        .replace("{DELIVERY_UNLEASED}", &status_in("o", &UNLEASED))
}

#[cfg(test)]
mod tests {
    use super::postgres_statement;

    /// Every marker of the statements written as text is filled in; a marker misspelled in
    /// a template (or a rule renamed here) would reach PostgreSQL as text.
    #[test]
    fn every_marker_of_the_postgres_statements_is_filled_in() {
        for template in [include_str!("boundaries.postgres.sql"), include_str!("claims.postgres.sql")] {
            let filled = postgres_statement(template, "j", "b.\"now\"", "f");
            let left: Vec<&str> = filled
                .match_indices('{')
                .map(|(at, _)| &filled[at..filled.len().min(at + 24)])
                .filter(|rest| rest[1..].starts_with(|c: char| c.is_ascii_uppercase()))
                .collect();
            assert!(left.is_empty(), "markers left: {left:?}");
            assert!(
                filled.contains("\"knowledge_space_permission_snapshots\"") && filled.contains("\"webhook_endpoints\"")
            );
        }
    }
}
