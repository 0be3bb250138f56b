//! Appending progress events and partial results with gapless per-job sequences.
use entity::{
    ProgressEventType, Stage, now_millis, research_task_job, research_task_partial_result as partial,
    research_task_progress_event as progress,
};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder,
    QuerySelect,
};
use serde_json::Value;
use uuid::Uuid;

/// Appends one progress event unless one with the same idempotency key exists; returns
/// the sequence of the event (new or existing). Call only while holding the job's lock.
pub async fn append_progress_event<C: ConnectionTrait>(
    txn: &C,
    job: &research_task_job::Model,
    event_type: ProgressEventType,
    stage: Stage,
    idempotency_key: &str,
    payload: Value,
) -> Result<i32, DbErr> {
    let existing = progress::Entity::find()
        .filter(progress::Column::ResearchTaskJobId.eq(job.id))
        .filter(progress::Column::IdempotencyKey.eq(idempotency_key))
        .one(txn)
        .await?;
    if let Some(event) = existing {
        return Ok(event.sequence);
    }
    let last: Option<i32> = progress::Entity::find()
        .select_only()
        .column(progress::Column::Sequence)
        .filter(progress::Column::ResearchTaskJobId.eq(job.id))
        .order_by_desc(progress::Column::Sequence)
        .into_tuple()
        .one(txn)
        .await?;
    let sequence = last.unwrap_or(0) + 1;
    let event = progress::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(job.tenant_id.clone()),
        knowledge_space_id: Set(job.knowledge_space_id),
        research_task_job_id: Set(job.id),
        sequence: Set(sequence),
        idempotency_key: Set(idempotency_key.to_owned()),
        event_type: Set(event_type),
        stage: Set(stage),
        payload: Set(payload),
        created_at: Set(now_millis()),
    };
    progress::Entity::insert(event).exec_without_returning(txn).await?;
    Ok(sequence)
}

/// Appends one partial result unless one with the same idempotency key exists; returns
/// its sequence. Call only while holding the job's lock.
pub async fn append_partial_result<C: ConnectionTrait>(
    txn: &C,
    job: &research_task_job::Model,
    idempotency_key: &str,
    evidence_bundle: Value,
) -> Result<i32, DbErr> {
    let existing = partial::Entity::find()
        .filter(partial::Column::ResearchTaskJobId.eq(job.id))
        .filter(partial::Column::IdempotencyKey.eq(idempotency_key))
        .one(txn)
        .await?;
    if let Some(result) = existing {
        return Ok(result.sequence);
    }
    let last: Option<i32> = partial::Entity::find()
        .select_only()
        .column(partial::Column::Sequence)
        .filter(partial::Column::ResearchTaskJobId.eq(job.id))
        .order_by_desc(partial::Column::Sequence)
        .into_tuple()
        .one(txn)
        .await?;
    let sequence = last.unwrap_or(0) + 1;
    let result = partial::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(job.tenant_id.clone()),
        knowledge_space_id: Set(job.knowledge_space_id),
        research_task_job_id: Set(job.id),
        sequence: Set(sequence),
        idempotency_key: Set(idempotency_key.to_owned()),
        evidence_bundle: Set(evidence_bundle),
        created_at: Set(now_millis()),
    };
    partial::Entity::insert(result).exec_without_returning(txn).await?;
    Ok(sequence)
}
