//! Appending progress events and partial results with gapless per-job sequences.
use entity::{
    ProgressEventType, Stage, now_millis, research_task_job, research_task_partial_result as partial,
    research_task_progress_event as progress,
};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect,
};
use serde_json::Value;
use uuid::Uuid;

/// A per-job journal table: rows keyed by (job, sequence) and (job, idempotency key).
trait Journal: EntityTrait {
    /// The job column.
    const JOB: Self::Column;
    /// The idempotency-key column.
    const KEY: Self::Column;
    /// The sequence column.
    const SEQUENCE: Self::Column;
}

impl Journal for progress::Entity {
    const JOB: progress::Column = progress::Column::ResearchTaskJobId;
    const KEY: progress::Column = progress::Column::IdempotencyKey;
    const SEQUENCE: progress::Column = progress::Column::Sequence;
}

impl Journal for partial::Entity {
    const JOB: partial::Column = partial::Column::ResearchTaskJobId;
    const KEY: partial::Column = partial::Column::IdempotencyKey;
    const SEQUENCE: partial::Column = partial::Column::Sequence;
}

/// The sequence of the job's row with this key, if one was written already.
async fn existing<J: Journal, C: ConnectionTrait>(txn: &C, job_id: Uuid, key: &str) -> Result<Option<i32>, DbErr> {
    J::find()
        .select_only()
        .column(J::SEQUENCE)
        .filter(J::JOB.eq(job_id))
        .filter(J::KEY.eq(key))
        .into_tuple()
        .one(txn)
        .await
}

/// The job's next sequence. Only gapless because callers hold the job's row lock.
async fn next_sequence<J: Journal, C: ConnectionTrait>(txn: &C, job_id: Uuid) -> Result<i32, DbErr> {
    let last: Option<i32> = J::find()
        .select_only()
        .column(J::SEQUENCE)
        .filter(J::JOB.eq(job_id))
        .order_by_desc(J::SEQUENCE)
        .into_tuple()
        .one(txn)
        .await?;
    Ok(last.unwrap_or(0) + 1)
}

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
    if let Some(sequence) = existing::<progress::Entity, _>(txn, job.id, idempotency_key).await? {
        return Ok(sequence);
    }
    let sequence = next_sequence::<progress::Entity, _>(txn, job.id).await?;
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
    if let Some(sequence) = existing::<partial::Entity, _>(txn, job.id, idempotency_key).await? {
        return Ok(sequence);
    }
    let sequence = next_sequence::<partial::Entity, _>(txn, job.id).await?;
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
