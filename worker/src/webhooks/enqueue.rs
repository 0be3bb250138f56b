//! Writing deliveries: in the transaction of the progress event, one row per enabled
//! endpoint of the task's own creator (same tenant, space and subject) that wants the
//! event's type. Idempotent on (endpoint, task, sequence), as the event is on its key.
use entity::{
    ProgressEventType, Stage, research_task_job as job, webhook_delivery as delivery, webhook_endpoint as endpoint,
};
use sea_orm::{ActiveValue::Set, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, sea_query::OnConflict};
use serde_json::{Value, json};
use uuid::Uuid;

/// Whether the task's creator has an enabled endpoint, as one SQL condition: the event
/// insert returns it, so the (common) event nobody subscribed to costs no second
/// statement, and [`enqueue`] runs only when it is true.
pub fn any_endpoint(task: &job::Model) -> sea_orm::sea_query::SimpleExpr {
    use sea_orm::sea_query::Expr;
    let owner =
        [Expr::val(task.tenant_id.as_str()), Expr::val(task.knowledge_space_id), Expr::val(task.subject_id.as_str())];
    Expr::exists(endpoints_of(owner.map(Into::into)))
}

/// [`any_endpoint`] for the task row `alias` of a statement written as PostgreSQL text
/// (the batched claims and stage boundaries).
pub fn any_endpoint_of(alias: &str) -> String {
    use sea_orm::sea_query::{Expr, PostgresQueryBuilder};
    let owner =
        ["tenant_id", "knowledge_space_id", "subject_id"].map(|column| Expr::cust(format!("{alias}.\"{column}\"")));
    format!("EXISTS ({})", endpoints_of(owner).to_string(PostgresQueryBuilder))
}

/// The enabled endpoints of the creator `owner` names: its tenant, space and subject.
fn endpoints_of(owner: [sea_orm::sea_query::SimpleExpr; 3]) -> sea_orm::sea_query::SelectStatement {
    use sea_orm::sea_query::{Expr, ExprTrait as _, Query};
    let [tenant, space, subject] = owner;
    Query::select()
        .expr(Expr::val(1))
        .from(endpoint::Entity)
        .and_where(Expr::col(endpoint::Column::TenantId).eq(tenant))
        .and_where(Expr::col(endpoint::Column::KnowledgeSpaceId).eq(space))
        .and_where(Expr::col(endpoint::Column::SubjectId).eq(subject))
        .and_where(endpoint::Column::DisabledAt.is_null())
        .to_owned()
}

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
    let endpoints = endpoint::Entity::find()
        .filter(endpoint::Column::TenantId.eq(task.tenant_id.as_str()))
        .filter(endpoint::Column::KnowledgeSpaceId.eq(task.knowledge_space_id))
        .filter(endpoint::Column::SubjectId.eq(task.subject_id.as_str()))
        .filter(endpoint::Column::DisabledAt.is_null())
        .all(txn)
        .await?;
    let kind = event_name(event_type);
    let wanted: Vec<endpoint::Model> = endpoints
        .into_iter()
        .filter(|endpoint| endpoint.events.as_array().is_some_and(|events| events.iter().any(|event| *event == kind)))
        .collect();
    if wanted.is_empty() {
        return Ok(false);
    }
    let timestamp = chrono::DateTime::from_timestamp_millis(now).unwrap_or_default().to_rfc3339();
    let answer_trace_id = payload.get("answer_trace_id").cloned().unwrap_or(Value::Null);
    let body = json!({
        "type": kind,
        "timestamp": timestamp,
        "data": {
            "task_id": task.id,
            "knowledge_space_id": task.knowledge_space_id,
            "stage": stage.as_str(),
            "sequence": sequence,
            "answer_trace_id": answer_trace_id,
        },
    })
    .to_string();
    let rows = wanted.iter().map(|endpoint| delivery::ActiveModel {
        id: Set(Uuid::now_v7()),
        endpoint_id: Set(endpoint.id),
        tenant_id: Set(task.tenant_id.clone()),
        research_task_job_id: Set(task.id),
        event_type: Set(kind.clone()),
        stage: Set(stage.as_str().to_owned()),
        sequence: Set(sequence),
        body: Set(body.clone()),
        status: Set("pending".to_owned()),
        attempts: Set(0),
        next_attempt_at: Set(now),
        lock_token: Set(None),
        locked_by: Set(None),
        locked_until: Set(None),
        last_status_code: Set(None),
        last_error: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
        delivered_at: Set(None),
    });
    let on_conflict = OnConflict::columns([
        delivery::Column::EndpointId,
        delivery::Column::ResearchTaskJobId,
        delivery::Column::Sequence,
    ])
    .do_nothing()
    .to_owned();
    delivery::Entity::insert_many(rows).on_conflict(on_conflict).exec_without_returning(txn).await?;
    Ok(true)
}

/// The event type as endpoints name it: the progress event's own stored value
/// (`research_task.*`).
pub fn event_name(event_type: ProgressEventType) -> String {
    sea_orm::ActiveEnum::to_value(&event_type)
}
