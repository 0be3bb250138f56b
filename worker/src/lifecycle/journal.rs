//! Appending to a task's journals (progress events and partial results) with gapless
//! per-job sequences. The next sequence is the last one plus one, which is only gapless
//! because callers hold the job's row lock; a key written before returns its sequence.
use entity::{
    ProgressEventType, Stage, research_task_job, research_task_partial_result as partial,
    research_task_progress_event as progress,
};
use sea_orm::{ActiveValue::Set, ConnectionTrait, DbErr, EntityTrait};
use serde_json::Value;
use uuid::Uuid;

use crate::journal::{Journal, last_sequence, sequence_of_key};

/// Where a keyed row goes in its journal.
enum Slot {
    /// A row with the key was written before, at this sequence: write nothing.
    Written(i32),
    /// The key is new: write the row at this sequence, the last one plus one.
    Free(i32),
}

async fn slot<J: Journal, C: ConnectionTrait>(txn: &C, job_id: Uuid, key: &str) -> Result<Slot, DbErr> {
    if let Some(sequence) = sequence_of_key::<J, _>(txn, job_id, key).await? {
        return Ok(Slot::Written(sequence));
    }
    Ok(Slot::Free(last_sequence::<J, _>(txn, job_id).await? + 1))
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
    now: i64,
) -> Result<i32, DbErr> {
    let sequence = match slot::<progress::Entity, _>(txn, job.id, idempotency_key).await? {
        Slot::Written(sequence) => return Ok(sequence),
        Slot::Free(sequence) => sequence,
    };
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
        created_at: Set(now),
    };
    let payload = event.payload.clone();
    progress::Entity::insert(event).exec_without_returning(txn).await?;
    // Webhooks of the task's creator, in the same transaction as the event.
    if let sea_orm::ActiveValue::Set(payload) = payload {
        crate::webhooks::enqueue(txn, job, event_type, stage, sequence, &payload, now).await?;
    }
    Ok(sequence)
}

/// Appends one partial result unless one with the same idempotency key exists; returns
/// its sequence. Call only while holding the job's lock.
pub async fn append_partial_result<C: ConnectionTrait>(
    txn: &C,
    job: &research_task_job::Model,
    idempotency_key: &str,
    evidence_bundle: Value,
    now: i64,
) -> Result<i32, DbErr> {
    let sequence = match slot::<partial::Entity, _>(txn, job.id, idempotency_key).await? {
        Slot::Written(sequence) => return Ok(sequence),
        Slot::Free(sequence) => sequence,
    };
    let result = partial::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(job.tenant_id.clone()),
        knowledge_space_id: Set(job.knowledge_space_id),
        research_task_job_id: Set(job.id),
        sequence: Set(sequence),
        idempotency_key: Set(idempotency_key.to_owned()),
        evidence_bundle: Set(evidence_bundle),
        created_at: Set(now),
    };
    partial::Entity::insert(result).exec_without_returning(txn).await?;
    Ok(sequence)
}
