//! A new task's rows in one statement (`sql/create_task.sql`), each as a JSON object of
//! its columns.
use entity::{
    permission_snapshot as snapshot, research_task_job as job, research_task_outbox as outbox,
    research_task_trace_context as context,
};
use sea_orm::{ActiveEnum as _, ConnectionTrait, DatabaseBackend, DbErr, Statement};
use serde_json::{Value, json};

/// Writes the rows `store::tasks::create` was given; returns the task as written.
pub(crate) async fn create<C: ConnectionTrait>(
    txn: &C,
    snapshot: &snapshot::Model,
    task: job::Model,
    trace_context: Option<&context::Model>,
    outbox: &outbox::Model,
) -> Result<job::Model, DbErr> {
    let input = json!({
        "snapshot": snapshot_json(snapshot),
        "task": task_json(&task),
        "context": trace_context.map(context_json),
        "outbox": outbox_json(outbox),
    });
    let statement =
        Statement::from_sql_and_values(DatabaseBackend::Postgres, super::CREATE_TASK, [input.to_string().into()]);
    let created =
        txn.query_one_raw(statement).await?.ok_or_else(|| DbErr::Custom("the task was not created".into()))?;
    let entries: i64 = created.try_get("", "entries")?;
    let contexts: i64 = created.try_get("", "contexts")?;
    let expected_contexts = i64::from(trace_context.is_some());
    if entries != 1 || contexts != expected_contexts {
        return Err(DbErr::Custom(format!(
            "creating task {} wrote {entries} outbox entries and {contexts} trace contexts",
            task.id
        )));
    }
    Ok(task)
}

fn snapshot_json(row: &snapshot::Model) -> Value {
    json!({
        "id": row.id,
        "tenant_id": row.tenant_id,
        "knowledge_space_id": row.knowledge_space_id,
        "subject_id": row.subject_id,
        "access_channel": row.access_channel.to_value(),
        "revision": row.revision,
        "permissions": row.permissions,
        "issued_at": row.issued_at,
        "api_key_id": row.api_key_id,
        "api_key_revision": row.api_key_revision,
        "api_key_expires_at": row.api_key_expires_at.map(|at| at.to_rfc3339()),
    })
}

fn task_json(row: &job::Model) -> Value {
    json!({
        "id": row.id,
        "tenant_id": row.tenant_id,
        "knowledge_space_id": row.knowledge_space_id,
        "subject_id": row.subject_id,
        "permission_snapshot_id": row.permission_snapshot_id,
        "permission_snapshot_revision": row.permission_snapshot_revision,
        "access_channel": row.access_channel.to_value(),
        "query": row.query,
        "mode": row.mode.map(|mode| mode.to_value()),
        "top_k": row.top_k,
        "budget_usd": row.budget_usd,
        "limits": row.limits,
        "metadata": row.metadata,
        "cost": row.cost,
        "stage": row.stage.to_value(),
        "paused_from_stage": row.paused_from_stage.map(|stage| stage.to_value()),
        "queue_job_id": row.queue_job_id,
        "error": row.error,
        "resume_after": row.resume_after,
        "paused_at": row.paused_at,
        "completed_at": row.completed_at,
        "row_version": row.row_version,
        "execution_attempts": row.execution_attempts,
        "max_execution_attempts": row.max_execution_attempts,
        "worker_id": row.worker_id,
        "lease_token": row.lease_token,
        "lease_expires_at": row.lease_expires_at,
        "heartbeat_at": row.heartbeat_at,
        "retry_at": row.retry_at,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    })
}

fn context_json(row: &context::Model) -> Value {
    json!({
        "research_task_job_id": row.research_task_job_id,
        "traceparent": row.traceparent,
        "tracestate": row.tracestate,
        "created_at": row.created_at,
    })
}

fn outbox_json(row: &outbox::Model) -> Value {
    json!({
        "id": row.id,
        "research_task_job_id": row.research_task_job_id,
        "delivery_revision": row.delivery_revision,
        "event_type": row.event_type,
        "schema_version": row.schema_version,
        "idempotency_key": row.idempotency_key,
        "payload": row.payload,
        "status": row.status.to_value(),
        "available_at": row.available_at,
        "dispatch_attempts": row.dispatch_attempts,
        "locked_by": row.locked_by,
        "locked_until": row.locked_until,
        "lock_token": row.lock_token,
        "queue_job_id": row.queue_job_id,
        "last_error": row.last_error,
        "delivered_at": row.delivered_at,
        "created_at": row.created_at,
        "updated_at": row.updated_at,
    })
}
