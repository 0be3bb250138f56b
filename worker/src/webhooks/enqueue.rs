//! Writing deliveries: in the transaction of the progress event, one row per enabled
//! endpoint of the task's own creator (same tenant, space and subject) that wants the
//! event's type. Idempotent on (endpoint, task, sequence), as the event is on its key.
use entity::{
    ProgressEventType, Stage, research_task_job as job, webhook_delivery as delivery, webhook_endpoint as endpoint,
};
use sea_orm::{ConnectionTrait, DbErr};

use crate::store::{self, webhooks::Owner};
use serde_json::{Value, json};
use uuid::Uuid;

/// Queues the deliveries of one progress event (call in the event's transaction); returns
/// whether any endpoint wanted it.
pub async fn enqueue<C: ConnectionTrait>(
    txn: &C,
    task: &job::Model,
    event_type: ProgressEventType,
    stage: Stage,
    sequence: i32,
    payload: &Value,
    now: i64,
) -> Result<bool, DbErr> {
    let owner =
        Owner { tenant_id: &task.tenant_id, knowledge_space_id: task.knowledge_space_id, subject_id: &task.subject_id };
    let endpoints = store::webhooks::enabled_endpoints(txn, owner).await?;
    let kind = event_name(event_type);
    let wanted: Vec<endpoint::Model> = endpoints
        .into_iter()
        .filter(|endpoint| endpoint.events.as_array().is_some_and(|events| events.iter().any(|event| *event == kind)))
        .collect();
    if wanted.is_empty() {
        return Ok(false);
    }
    let timestamp = chrono::DateTime::from_timestamp_millis(now).unwrap_or_default().to_rfc3339();
    // Ids only, as the rest: the thread the task is a turn of, or null.
    let thread_id = store::threads::turn_of(txn, task.id).await?.map(|turn| turn.research_thread_id);
    let answer_trace_id = payload.get("answer_trace_id").cloned().unwrap_or(Value::Null);
    let mut body = json!({
        "type": kind,
        "timestamp": timestamp,
        "data": {
            "task_id": task.id,
            "thread_id": thread_id,
            "knowledge_space_id": task.knowledge_space_id,
            "stage": stage.as_str(),
            "sequence": sequence,
            "answer_trace_id": answer_trace_id,
        },
    });
    // A pause that waits for a person says for what (that word only: never the plan or
    // the question, which only the task's readers see).
    if event_type == ProgressEventType::Paused
        && let Some(reason) = awaiting(payload)
    {
        body["data"]["awaiting"] = json!(reason);
    }
    let body = body.to_string();
    let rows = wanted
        .iter()
        .map(|endpoint| delivery::Model {
            id: Uuid::now_v7(),
            endpoint_id: endpoint.id,
            tenant_id: task.tenant_id.clone(),
            research_task_job_id: task.id,
            event_type: kind.clone(),
            stage: stage.as_str().to_owned(),
            sequence,
            body: body.clone(),
            status: "pending".to_owned(),
            attempts: 0,
            next_attempt_at: now,
            lock_token: None,
            locked_by: None,
            locked_until: None,
            last_status_code: None,
            last_error: None,
            created_at: now,
            updated_at: now,
            delivered_at: None,
        })
        .collect();
    store::webhooks::insert_deliveries(txn, rows).await?;
    Ok(true)
}

/// The event type as endpoints name it: the progress event's own stored value
/// (`research_task.*`).
pub fn event_name(event_type: ProgressEventType) -> String {
    sea_orm::ActiveEnum::to_value(&event_type)
}

/// What a `PAUSED` event's payload says the task waits for, as one of the fixed words.
fn awaiting(payload: &Value) -> Option<&'static str> {
    match payload.get("reason").and_then(Value::as_str)? {
        entity::research_task_wait::PLAN_APPROVAL => Some(entity::research_task_wait::PLAN_APPROVAL),
        entity::research_task_wait::CLARIFICATION => Some(entity::research_task_wait::CLARIFICATION),
        _ => None,
    }
}
