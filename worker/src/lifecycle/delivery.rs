//! Outbox rows: every delivery of a job to the queue is written in the job's transaction.
use entity::{OutboxStatus, research_task_job, research_task_outbox as outbox};
use sea_orm::{
    ActiveValue::Set,
    ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect, UpdateMany,
    sea_query::{Expr, ExprTrait},
};
use uuid::Uuid;

/// The message id of a job's n-th delivery; unique, and stable across retries of the
/// same delivery, so the queue can drop duplicates.
pub fn idempotency_key(job_id: Uuid, delivery_revision: i32) -> String {
    format!("research.task:{job_id}:{delivery_revision}")
}

/// Writes the job's next delivery (revision = the highest so far + 1).
pub async fn enqueue<C: ConnectionTrait>(
    txn: &C,
    job: &research_task_job::Model,
    now: i64,
) -> Result<outbox::Model, DbErr> {
    let last: Option<i32> = outbox::Entity::find()
        .select_only()
        .column_as(outbox::Column::DeliveryRevision.max(), "revision")
        .filter(outbox::Column::ResearchTaskJobId.eq(job.id))
        .into_tuple::<Option<i32>>()
        .one(txn)
        .await?
        .flatten();
    let revision = last.unwrap_or(0) + 1;
    let row = outbox::ActiveModel {
        id: Set(Uuid::now_v7()),
        research_task_job_id: Set(job.id),
        delivery_revision: Set(revision),
        event_type: Set(outbox::EVENT_TYPE.to_owned()),
        schema_version: Set(outbox::SCHEMA_VERSION),
        idempotency_key: Set(idempotency_key(job.id, revision)),
        payload: Set(serde_json::json!({
            "schema_version": outbox::SCHEMA_VERSION,
            "task_id": job.id,
            "tenant_id": job.tenant_id,
            "knowledge_space_id": job.knowledge_space_id,
            "delivery_revision": revision,
        })),
        status: Set(OutboxStatus::Pending),
        available_at: Set(now),
        dispatch_attempts: Set(0),
        locked_by: Set(None),
        locked_until: Set(None),
        lock_token: Set(None),
        queue_job_id: Set(None),
        last_error: Set(None),
        delivered_at: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    };
    outbox::Entity::insert(row).exec_with_returning(txn).await
}

/// Ends every delivery of the job that is still on its way, with `status`
/// (canceled on cancel and pause, completed when the task finishes).
pub async fn close_open<C: ConnectionTrait>(
    txn: &C,
    job_id: Uuid,
    status: OutboxStatus,
    now: i64,
) -> Result<u64, DbErr> {
    move_unlocked(txn, job_id, &OPEN, status, now).await
}

/// A delivery still on its way: what [`close_open`] ends.
pub(crate) const OPEN: [OutboxStatus; 4] =
    [OutboxStatus::Pending, OutboxStatus::Dispatching, OutboxStatus::Dispatched, OutboxStatus::Leased];

/// A delivery no worker has picked up yet: what [`mark_leased`] marks.
pub(crate) const UNLEASED: [OutboxStatus; 3] =
    [OutboxStatus::Pending, OutboxStatus::Dispatching, OutboxStatus::Dispatched];

/// Marks the job's open delivery `leased`: a worker picked the job up, so the outbox loop
/// need not publish it (again). The publisher's lock is cleared, which fences out an
/// outbox loop that is publishing it right now.
pub async fn mark_leased<C: ConnectionTrait>(txn: &C, job_id: Uuid, now: i64) -> Result<u64, DbErr> {
    move_unlocked(txn, job_id, &UNLEASED, OutboxStatus::Leased, now).await
}

/// An update of outbox rows that releases the publisher's lock (all three lock columns
/// together, as `research_task_outbox_lock_ck` demands) and stamps `updated_at`.
fn unlocked(now: i64) -> UpdateMany<outbox::Entity> {
    outbox::Entity::update_many()
        .col_expr(outbox::Column::LockToken, Expr::value(Option::<Uuid>::None))
        .col_expr(outbox::Column::LockedBy, Expr::value(Option::<String>::None))
        .col_expr(outbox::Column::LockedUntil, Expr::value(Option::<i64>::None))
        .col_expr(outbox::Column::UpdatedAt, Expr::value(now))
}

/// Moves the job's deliveries in one of `from` to `to`, clearing any publisher's lock.
///
/// The rows are found through the job's index alone: the status test is written so that
/// no index can serve it. A job has a handful of deliveries, but a planner without
/// statistics (a table that grew fast, autovacuum off) ANDed in a scan of the claim
/// index over every open delivery, milliseconds per claim and per completion.
async fn move_unlocked<C: ConnectionTrait>(
    txn: &C,
    job_id: Uuid,
    from: &[OutboxStatus],
    to: OutboxStatus,
    now: i64,
) -> Result<u64, DbErr> {
    let result = unlocked(now)
        .col_expr(outbox::Column::Status, Expr::value(to))
        .filter(outbox::Column::ResearchTaskJobId.eq(job_id))
        .filter(Expr::cust(status_in(r#""research_task_outbox""#, from)))
        .exec(txn)
        .await?;
    Ok(result.rows_affected)
}

/// Whether the delivery row `alias` is in one of `statuses`, as SQL written so that no
/// index can serve it (see [`move_unlocked`]); the statements written as text use it too.
/// The values are the fixed `OutboxStatus` enum, never input.
pub(crate) fn status_in(alias: &str, statuses: &[OutboxStatus]) -> String {
    use sea_orm::ActiveEnum;
    let statuses: Vec<String> = statuses.iter().map(|status| format!("'{}'", status.to_value())).collect();
    format!("({alias}.\"status\" || '') IN ({})", statuses.join(", "))
}

/// Locks up to `batch` deliveries due for publishing for this outbox loop, in one short
/// transaction: pending ones whose `available_at` passed, and dispatching ones whose
/// publisher's lock lapsed (it crashed mid-publish). Other loops skip locked rows.
pub async fn lock_due(
    db: &sea_orm::DatabaseConnection,
    locked_by: &str,
    lock_ms: i64,
    batch: u64,
    now: i64,
) -> Result<Vec<outbox::Model>, DbErr> {
    use sea_orm::sea_query::{LockBehavior, LockType};
    use sea_orm::{Condition, QueryOrder};
    let txn = crate::db::begin_write(db).await?;
    let pending = Condition::all()
        .add(outbox::Column::Status.eq(OutboxStatus::Pending))
        .add(outbox::Column::AvailableAt.lte(now));
    let abandoned = Condition::all()
        .add(outbox::Column::Status.eq(OutboxStatus::Dispatching))
        .add(outbox::Column::LockedUntil.lte(now));
    let mut query = outbox::Entity::find()
        .filter(Condition::any().add(pending).add(abandoned))
        .order_by_asc(outbox::Column::AvailableAt)
        .order_by_asc(outbox::Column::Id)
        .limit(batch);
    if crate::db::is_postgres(txn.get_database_backend()) {
        query = query.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
    }
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
    // In the order they were due, as the select read them.
    let order: std::collections::HashMap<Uuid, usize> = due.iter().enumerate().map(|(at, id)| (*id, at)).collect();
    locked.sort_by_key(|row| order.get(&row.id).copied().unwrap_or(usize::MAX));
    Ok(locked)
}

/// Records a published delivery: the job's `queue_job_id`, then the row `dispatched`
/// with its lock cleared. The job is written first so that locks are always taken job
/// first, outbox second (as claims and commands do), which rules out deadlocks. Returns
/// false when this loop's lock was lost (a worker leased the job meanwhile).
///
/// The job is written only while no worker holds it and the delivery is still this
/// loop's: a claim that won the race has already marked the delivery `leased`, and the
/// running job is the lease holder's to write. Without that fence a late publish bumped
/// a running job's `row_version`, and (since it waited for the claim's row lock while
/// holding the locks of the batch's other jobs) stalled their stage boundaries behind it.
pub async fn record_published<C: ConnectionTrait>(
    txn: &C,
    row: &outbox::Model,
    queue_job_id: &str,
    now: i64,
) -> Result<bool, DbErr> {
    use sea_orm::sea_query::{Func, Query};
    let still_locked_here = Query::select()
        .expr(Expr::val(1))
        .from(outbox::Entity)
        .and_where(outbox::Column::Id.eq(row.id))
        .and_where(outbox::Column::LockToken.eq(row.lock_token))
        .to_owned();
    research_task_job::Entity::update_many()
        .col_expr(research_task_job::Column::QueueJobId, Expr::value(queue_job_id))
        .col_expr(research_task_job::Column::RowVersion, Expr::col(research_task_job::Column::RowVersion).add(1))
        .col_expr(
            research_task_job::Column::UpdatedAt,
            Func::greatest([Expr::col(research_task_job::Column::UpdatedAt), Expr::val(now)]).into(),
        )
        .filter(research_task_job::Column::Id.eq(row.research_task_job_id))
        .filter(research_task_job::Column::LeaseToken.is_null())
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

/// An operator's redelivery of a dead outbox row: pending again, due now, with a fresh
/// round of attempts. Returns whether the row was dead (anything else is left alone).
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
