//! Outbox rows: every delivery of a job to the queue is written in the job's transaction.
use entity::{
    OutboxStatus, now_millis, research_task_job, research_task_outbox as outbox,
};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect,
    sea_query::Expr,
};
use uuid::Uuid;

/// The message id of a job's n-th delivery; unique, and stable across retries of the
/// same delivery, so the queue can drop duplicates.
pub fn idempotency_key(job_id: Uuid, delivery_revision: i32) -> String {
    format!("research.task:{job_id}:{delivery_revision}")
}

/// Writes the job's next delivery (revision = the highest so far + 1).
pub async fn enqueue<C: ConnectionTrait>(txn: &C, job: &research_task_job::Model) -> Result<outbox::Model, DbErr> {
    let last: Option<i32> = outbox::Entity::find()
        .select_only()
        .column_as(outbox::Column::DeliveryRevision.max(), "revision")
        .filter(outbox::Column::ResearchTaskJobId.eq(job.id))
        .into_tuple::<Option<i32>>()
        .one(txn)
        .await?
        .flatten();
    let revision = last.unwrap_or(0) + 1;
    let now = now_millis();
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
pub async fn close_open<C: ConnectionTrait>(txn: &C, job_id: Uuid, status: OutboxStatus) -> Result<u64, DbErr> {
    let open = [
        OutboxStatus::Pending,
        OutboxStatus::Dispatching,
        OutboxStatus::Dispatched,
        OutboxStatus::Leased,
    ];
    let result = outbox::Entity::update_many()
        .col_expr(outbox::Column::Status, Expr::value(status))
        .col_expr(outbox::Column::LockToken, Expr::value(Option::<Uuid>::None))
        .col_expr(outbox::Column::LockedBy, Expr::value(Option::<String>::None))
        .col_expr(outbox::Column::LockedUntil, Expr::value(Option::<i64>::None))
        .col_expr(outbox::Column::UpdatedAt, Expr::value(now_millis()))
        .filter(outbox::Column::ResearchTaskJobId.eq(job_id))
        .filter(outbox::Column::Status.is_in(open))
        .exec(txn)
        .await?;
    Ok(result.rows_affected)
}
