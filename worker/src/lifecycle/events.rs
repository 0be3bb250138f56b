//! Progress events as the lifecycle decides them: the row, its key (a replay appends
//! nothing), and the webhook deliveries a new event owes its task's creator, queued in
//! the same transaction. The store allocates the sequence (`store::journal`).
use entity::{ProgressEventType, Stage, research_task_job as job, research_task_progress_event as progress};
use sea_orm::{ConnectionTrait, DbErr};
use serde_json::Value;
use uuid::Uuid;

use crate::store::journal;

/// A progress event to append.
#[derive(Debug, Clone)]
pub(crate) struct Event {
    /// Its type.
    pub event_type: ProgressEventType,
    /// The stage it reports.
    pub stage: Stage,
    /// Its idempotency key.
    pub key: String,
    /// Its payload.
    pub payload: Value,
}

/// Where an event went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Appended {
    /// Its sequence (new, or the one its key was written at before).
    pub sequence: i32,
    /// Whether webhook deliveries were queued for it.
    pub webhooks: bool,
}

/// Appends `event` to `task`'s journal (the caller holds the task's row lock) and queues
/// the webhook deliveries a new event owes.
pub(crate) async fn append<C: ConnectionTrait>(
    txn: &C,
    task: &job::Model,
    event: Event,
    now: i64,
) -> Result<Appended, DbErr> {
    let row = row_of(task, &event, now);
    let appended = journal::append_event(txn, &row).await?;
    let webhooks = appended.new
        && crate::webhooks::enqueue(txn, task, event.event_type, event.stage, appended.sequence, &event.payload, now)
            .await?;
    Ok(Appended { sequence: appended.sequence, webhooks })
}

/// The journal row of `event` (its sequence is the store's to allocate).
pub(crate) fn row_of(task: &job::Model, event: &Event, now: i64) -> progress::Model {
    progress::Model {
        id: Uuid::now_v7(),
        tenant_id: task.tenant_id.clone(),
        knowledge_space_id: task.knowledge_space_id,
        research_task_job_id: task.id,
        sequence: 0,
        idempotency_key: event.key.clone(),
        event_type: event.event_type,
        stage: event.stage,
        payload: event.payload.clone(),
        created_at: now,
    }
}
