//! Outbox entries (`research_task_outbox`): every hand-over of a task to the queue is an
//! entry written in the task's own transaction. The database is the queue by default: an
//! entry is `pending` from the moment it is written until a worker claims the task
//! (`leased`), then `completed` or `canceled`; nothing is published and the job row is not
//! touched. With an external queue the outbox loop publishes due entries
//! (`pending → dispatching → dispatched`, `dead` after its attempts), and a claim still
//! marks the entry `leased`, fencing out a publish still under way.
use entity::{OutboxStatus, research_task_job as job, research_task_outbox as outbox};
use sea_orm::sea_query::{Expr, ExprTrait as _};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect, UpdateMany,
};
use uuid::Uuid;

use super::backend::{Backend, on_backend};

/// The message id of a task's n-th entry; unique, and stable across retries of the same
/// entry, so an external queue can drop duplicates.
pub fn idempotency_key(job_id: Uuid, delivery_revision: i32) -> String {
    format!("research.task:{job_id}:{delivery_revision}")
}

/// The row of a task's next entry (the caller knows its revision: 1 for a new task).
pub fn entry(task: &job::Model, delivery_revision: i32, now: i64) -> outbox::Model {
    outbox::Model {
        id: Uuid::now_v7(),
        research_task_job_id: task.id,
        delivery_revision,
        event_type: outbox::EVENT_TYPE.to_owned(),
        schema_version: outbox::SCHEMA_VERSION,
        idempotency_key: idempotency_key(task.id, delivery_revision),
        payload: serde_json::json!({
            "schema_version": outbox::SCHEMA_VERSION,
            "task_id": task.id,
            "tenant_id": task.tenant_id,
            "knowledge_space_id": task.knowledge_space_id,
            "delivery_revision": delivery_revision,
        }),
        status: OutboxStatus::Pending,
        available_at: now,
        dispatch_attempts: 0,
        locked_by: None,
        locked_until: None,
        lock_token: None,
        queue_job_id: None,
        last_error: None,
        delivered_at: None,
        created_at: now,
        updated_at: now,
    }
}

/// Writes an entry (built by [`entry`]).
pub async fn insert<C: ConnectionTrait>(txn: &C, row: outbox::Model) -> Result<(), DbErr> {
    use sea_orm::{ActiveModelTrait as _, IntoActiveModel as _};
    outbox::Entity::insert(row.into_active_model().reset_all()).exec_without_returning(txn).await?;
    Ok(())
}

/// The task's latest entry revision (0 for none): a resume writes the next one.
pub async fn last_revision<C: ConnectionTrait>(txn: &C, job_id: Uuid) -> Result<i32, DbErr> {
    let last: Option<i32> = outbox::Entity::find()
        .select_only()
        .column_as(outbox::Column::DeliveryRevision.max(), "revision")
        .filter(outbox::Column::ResearchTaskJobId.eq(job_id))
        .into_tuple::<Option<i32>>()
        .one(txn)
        .await?
        .flatten();
    Ok(last.unwrap_or(0))
}

/// The entries of a task still on their way: what [`close`] ends.
pub const OPEN: [OutboxStatus; 4] =
    [OutboxStatus::Pending, OutboxStatus::Dispatching, OutboxStatus::Dispatched, OutboxStatus::Leased];

/// The entries of a task no worker has picked up yet: what [`mark_leased`] marks.
pub const UNLEASED: [OutboxStatus; 3] = [OutboxStatus::Pending, OutboxStatus::Dispatching, OutboxStatus::Dispatched];

/// Ends the task's open entries with `status` (`canceled` on cancel and pause, `completed`
/// when the task ends).
pub async fn close<C: ConnectionTrait>(txn: &C, job_id: Uuid, status: OutboxStatus, now: i64) -> Result<u64, DbErr> {
    move_unlocked(txn, job_id, &OPEN, status, now).await
}

/// Marks the task's unleased entries `leased`: a worker claimed the task. A publisher's
/// lock is cleared with it, which fences out a publish under way.
pub async fn mark_leased<C: ConnectionTrait>(txn: &C, job_id: Uuid, now: i64) -> Result<u64, DbErr> {
    move_unlocked(txn, job_id, &UNLEASED, OutboxStatus::Leased, now).await
}

/// An update of entries that releases a publisher's lock (all three lock columns
/// together, as `research_task_outbox_lock_ck` demands) and stamps `updated_at`.
fn unlocked(now: i64) -> UpdateMany<outbox::Entity> {
    outbox::Entity::update_many()
        .col_expr(outbox::Column::LockToken, Expr::value(Option::<Uuid>::None))
        .col_expr(outbox::Column::LockedBy, Expr::value(Option::<String>::None))
        .col_expr(outbox::Column::LockedUntil, Expr::value(Option::<i64>::None))
        .col_expr(outbox::Column::UpdatedAt, Expr::value(now))
}

/// Moves the task's entries in one of `from` to `to`, clearing any publisher's lock.
///
/// The rows are found through the task's index alone: the status test is written so that
/// no index can serve it (`status || ''`). A task has a handful of entries, but a planner
/// without statistics (a table that grew fast, autovacuum off) ANDed in a scan of the
/// status index over every open entry, milliseconds per claim and per completion.
async fn move_unlocked<C: ConnectionTrait>(
    txn: &C,
    job_id: Uuid,
    from: &[OutboxStatus],
    to: OutboxStatus,
    now: i64,
) -> Result<u64, DbErr> {
    let unindexed_status = Expr::cust(r#"("research_task_outbox"."status" || '')"#);
    let result = unlocked(now)
        .col_expr(outbox::Column::Status, Expr::value(to))
        .filter(outbox::Column::ResearchTaskJobId.eq(job_id))
        .filter(unindexed_status.is_in(from.iter().map(|status| Expr::value(*status))))
        .exec(txn)
        .await?;
    Ok(result.rows_affected)
}

/// Locks up to `batch` entries due for publishing to an external queue, for this loop,
/// in one short transaction: pending ones whose `available_at` passed, and dispatching
/// ones whose publisher's lock lapsed (it crashed mid-publish). Other loops skip locked
/// rows on PostgreSQL; SQLite's write transactions take turns.
pub async fn lock_due<C>(
    db: &C,
    locked_by: &str,
    lock_ms: i64,
    batch: u64,
    now: i64,
) -> Result<Vec<outbox::Model>, DbErr>
where
    C: sea_orm::TransactionTrait<Transaction = sea_orm::DatabaseTransaction>,
{
    let txn = super::begin_write(db).await?;
    let pending = Condition::all()
        .add(outbox::Column::Status.eq(OutboxStatus::Pending))
        .add(outbox::Column::AvailableAt.lte(now));
    let abandoned = Condition::all()
        .add(outbox::Column::Status.eq(OutboxStatus::Dispatching))
        .add(outbox::Column::LockedUntil.lte(now));
    let query = outbox::Entity::find()
        .filter(Condition::any().add(pending).add(abandoned))
        .order_by_asc(outbox::Column::AvailableAt)
        .order_by_asc(outbox::Column::Id)
        .limit(batch);
    let query = on_backend!(&txn, |B| B::skipping_locked_rows(query));
    let due: Vec<Uuid> = query.select_only().column(outbox::Column::Id).into_tuple().all(&txn).await?;
    if due.is_empty() {
        txn.rollback().await?;
        return Ok(Vec::new());
    }
    // One statement locks the batch, under one token: each row's later writes are fenced
    // by it all the same, since any other loop's lock or a claim replaces or clears it.
    let mut locked = outbox::Entity::update_many()
        .col_expr(outbox::Column::Status, Expr::value(OutboxStatus::Dispatching))
        .col_expr(outbox::Column::LockToken, Expr::value(Uuid::new_v4()))
        .col_expr(outbox::Column::LockedBy, Expr::value(locked_by))
        .col_expr(outbox::Column::LockedUntil, Expr::value(now + lock_ms))
        .col_expr(outbox::Column::UpdatedAt, Expr::value(now))
        .filter(outbox::Column::Id.is_in(due.iter().copied()))
        .exec_with_returning(&txn)
        .await?;
    txn.commit().await?;
    let order: std::collections::HashMap<Uuid, usize> = due.iter().enumerate().map(|(at, id)| (*id, at)).collect();
    locked.sort_by_key(|row| order.get(&row.id).copied().unwrap_or(usize::MAX));
    Ok(locked)
}

/// Records an entry an external queue accepted: the queue's id on the task (a column no
/// client reads: neither `row_version` nor `updated_at` moves) and on the entry, which
/// becomes `dispatched` with its lock cleared. Only while the entry is still this loop's
/// and no worker holds the task: a claim that won the race has marked the entry `leased`
/// (clearing the lock), and then neither row is written. The task row is written first,
/// so locks are taken task first, entry second, as claims and commands take them. Returns
/// false when the lock was lost.
pub async fn record_published<C: ConnectionTrait>(
    txn: &C,
    row: &outbox::Model,
    queue_job_id: &str,
    now: i64,
) -> Result<bool, DbErr> {
    let still_locked_here = sea_orm::sea_query::Query::select()
        .expr(Expr::val(1))
        .from(outbox::Entity)
        .and_where(outbox::Column::Id.eq(row.id))
        .and_where(outbox::Column::LockToken.eq(row.lock_token))
        .to_owned();
    job::Entity::update_many()
        .col_expr(job::Column::QueueJobId, Expr::value(queue_job_id))
        .filter(job::Column::Id.eq(row.research_task_job_id))
        .filter(job::Column::LeaseToken.is_null())
        .filter(Expr::exists(still_locked_here))
        .exec(txn)
        .await?;
    let result = unlocked(now)
        .col_expr(outbox::Column::Status, Expr::value(OutboxStatus::Dispatched))
        .col_expr(outbox::Column::QueueJobId, Expr::value(queue_job_id))
        .col_expr(outbox::Column::DeliveredAt, Expr::value(now))
        .col_expr(outbox::Column::DispatchAttempts, Expr::value(row.dispatch_attempts + 1))
        .col_expr(outbox::Column::LastError, Expr::value(Option::<String>::None))
        .filter(outbox::Column::Id.eq(row.id))
        .filter(outbox::Column::LockToken.eq(row.lock_token))
        .exec(txn)
        .await?;
    Ok(result.rows_affected == 1)
}

/// Records a failed publish: back to `pending` after `retry_in_ms`, or `dead` once
/// `max_attempts` are used. Returns the status written, or None when the lock was lost.
pub async fn record_failed<C: ConnectionTrait>(
    txn: &C,
    row: &outbox::Model,
    error: &str,
    max_attempts: i32,
    retry_in_ms: i64,
    now: i64,
) -> Result<Option<OutboxStatus>, DbErr> {
    let attempts = row.dispatch_attempts + 1;
    let status = if attempts >= max_attempts { OutboxStatus::Dead } else { OutboxStatus::Pending };
    let result = unlocked(now)
        .col_expr(outbox::Column::Status, Expr::value(status))
        .col_expr(outbox::Column::DispatchAttempts, Expr::value(attempts))
        .col_expr(outbox::Column::LastError, Expr::value(error))
        .col_expr(outbox::Column::AvailableAt, Expr::value(now + retry_in_ms))
        .filter(outbox::Column::Id.eq(row.id))
        .filter(outbox::Column::LockToken.eq(row.lock_token))
        .exec(txn)
        .await?;
    Ok((result.rows_affected == 1).then_some(status))
}

/// An operator's redelivery of a dead entry: pending again, due now, with a fresh round of
/// attempts. Returns whether the entry was dead (anything else is left alone).
pub async fn redeliver_dead<C: ConnectionTrait>(txn: &C, id: Uuid, now: i64) -> Result<bool, DbErr> {
    let result = unlocked(now)
        .col_expr(outbox::Column::Status, Expr::value(OutboxStatus::Pending))
        .col_expr(outbox::Column::DispatchAttempts, Expr::value(0))
        .col_expr(outbox::Column::AvailableAt, Expr::value(now))
        .filter(outbox::Column::Id.eq(id))
        .filter(outbox::Column::Status.eq(OutboxStatus::Dead))
        .exec(txn)
        .await?;
    Ok(result.rows_affected == 1)
}
