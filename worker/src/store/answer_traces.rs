//! Answer traces (`answer_traces`): a completed task's answer and the evidence it cites,
//! bound to the task's subject and grant. Reads are scoped to the subject that asked;
//! legacy rows (no subject) match no subject, so they are never returned.
use entity::{answer_trace as trace, answer_trace_citation_check as checks_row};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use uuid::Uuid;

use super::pages::{PageKey, before};

/// The trace with this id if `subject_id` of `tenant_id` owns it.
pub async fn find_owned<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    subject_id: &str,
    id: Uuid,
) -> Result<Option<trace::Model>, DbErr> {
    trace::Entity::find_by_id(id)
        .filter(trace::Column::TenantId.eq(tenant_id))
        .filter(trace::Column::SubjectId.eq(subject_id))
        .one(conn)
        .await
}

/// The trace a task wrote, if the task's subject owns it.
pub async fn find_for_task<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    subject_id: &str,
    task_id: Uuid,
) -> Result<Option<trace::Model>, DbErr> {
    trace::Entity::find()
        .filter(trace::Column::TenantId.eq(tenant_id))
        .filter(trace::Column::SubjectId.eq(subject_id))
        .filter(trace::Column::ResearchTaskId.eq(task_id))
        .order_by_desc(trace::Column::CreatedAt)
        .one(conn)
        .await
}

/// The traces of many tasks at once, each only where the task's own subject owns it
/// (`tasks`: task id, tenant, subject); the newest per task.
pub async fn find_for_tasks<C: ConnectionTrait>(
    conn: &C,
    tasks: &[(Uuid, String, String)],
) -> Result<Vec<trace::Model>, DbErr> {
    if tasks.is_empty() {
        return Ok(Vec::new());
    }
    let rows = trace::Entity::find()
        .filter(trace::Column::ResearchTaskId.is_in(tasks.iter().map(|(id, _, _)| *id)))
        .order_by_desc(trace::Column::CreatedAt)
        .all(conn)
        .await?;
    let owned = |row: &trace::Model| {
        tasks.iter().any(|(id, tenant, subject)| {
            row.research_task_id == Some(*id) && row.tenant_id == *tenant && row.subject_id.as_deref() == Some(subject)
        })
    };
    let mut seen = std::collections::HashSet::new();
    Ok(rows.into_iter().filter(owned).filter(|row| seen.insert(row.research_task_id)).collect())
}

/// One page of a subject's traces in a space, newest first (the seed's
/// `answer_traces_space_subject_created_idx` order).
pub async fn page<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    knowledge_space_id: Uuid,
    subject_id: &str,
    after: Option<PageKey>,
    limit: u64,
) -> Result<Vec<trace::Model>, DbErr> {
    let mut query = trace::Entity::find()
        .filter(trace::Column::KnowledgeSpaceId.eq(knowledge_space_id))
        .filter(trace::Column::SubjectId.eq(subject_id))
        .filter(trace::Column::TenantId.eq(tenant_id));
    if let Some(key) = after {
        query = query.filter(before(trace::Column::CreatedAt, trace::Column::Id, key));
    }
    query.order_by_desc(trace::Column::CreatedAt).order_by_desc(trace::Column::Id).limit(limit).all(conn).await
}

/// Writes an answer trace (decided by the caller) and returns it.
pub async fn insert<C: ConnectionTrait>(txn: &C, row: trace::Model) -> Result<trace::Model, DbErr> {
    use sea_orm::{ActiveModelTrait as _, IntoActiveModel as _};
    trace::Entity::insert(row.into_active_model().reset_all()).exec_with_returning(txn).await
}

/// Records a trace's citation checks and citations (JSON arrays); nothing when there are
/// neither.
pub async fn insert_checks<C: ConnectionTrait>(
    txn: &C,
    trace_id: Uuid,
    checks: &serde_json::Value,
    citations: &serde_json::Value,
    now: i64,
) -> Result<(), DbErr> {
    use sea_orm::{ActiveModelTrait as _, IntoActiveModel as _};
    let empty = |value: &serde_json::Value| value.as_array().is_none_or(Vec::is_empty);
    if empty(checks) && empty(citations) {
        return Ok(());
    }
    let row = checks_row::Model {
        answer_trace_id: trace_id,
        checks: checks.clone(),
        citations: Some(citations.clone()),
        created_at: now,
    };
    checks_row::Entity::insert(row.into_active_model().reset_all()).exec_without_returning(txn).await?;
    Ok(())
}

/// The citation check rows of these traces (already read through their owner's scope); a
/// trace without a row has no checks and no recorded citations.
pub async fn checks_for<C: ConnectionTrait>(
    conn: &C,
    trace_ids: &[Uuid],
) -> Result<std::collections::HashMap<Uuid, checks_row::Model>, DbErr> {
    if trace_ids.is_empty() {
        return Ok(std::collections::HashMap::new());
    }
    let rows = checks_row::Entity::find()
        .filter(checks_row::Column::AnswerTraceId.is_in(trace_ids.iter().copied()))
        .all(conn)
        .await?;
    Ok(rows.into_iter().map(|row| (row.answer_trace_id, row)).collect())
}

/// The answer trace, if there is one (unscoped: for the lifecycle, after its own checks).
pub async fn find<C: ConnectionTrait>(conn: &C, id: Uuid) -> Result<Option<trace::Model>, DbErr> {
    trace::Entity::find_by_id(id).one(conn).await
}
