//! Reads of research tasks, scoped to the subject that created them (their journals are
//! read through `worker::journal`). Nothing here writes: `worker::lifecycle` is the only
//! writer of `research_task_*` rows.
use entity::{Stage, research_task_job as job};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use uuid::Uuid;

use super::{PageKey, before};

/// The grant condition on a task row (see `worker::grant::holds_sql`).
fn grant_holds(backend: sea_orm::DatabaseBackend, now: i64) -> sea_orm::sea_query::Expr {
    worker::grant::holds_sql(backend, "\"research_task_jobs\".\"permission_snapshot_id\"", now)
}

/// The task with this id if `subject_id` of `tenant_id` created it and the grant it was
/// created under holds at `now`: the row and its grant's validity in one statement.
pub async fn find_readable<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    subject_id: &str,
    id: Uuid,
    now: i64,
) -> Result<Option<job::Model>, DbErr> {
    job::Entity::find_by_id(id)
        .filter(job::Column::TenantId.eq(tenant_id))
        .filter(job::Column::SubjectId.eq(subject_id))
        .filter(grant_holds(conn.get_database_backend(), now))
        .one(conn)
        .await
}

/// The task by id alone, for follow-ups once the caller's access was checked.
pub async fn find<C: ConnectionTrait>(conn: &C, id: Uuid) -> Result<Option<job::Model>, DbErr> {
    job::Entity::find_by_id(id).one(conn).await
}

/// One page of a subject's tasks in a space whose grants hold at `now`, most recently
/// updated first (the seed's `research_task_jobs_scope_updated_idx` order), optionally
/// only in some stages.
#[expect(clippy::too_many_arguments, reason = "each is one filter of the page")]
pub async fn page<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    knowledge_space_id: Uuid,
    subject_id: &str,
    stages: Option<&[Stage]>,
    after: Option<PageKey>,
    limit: u64,
    now: i64,
) -> Result<Vec<job::Model>, DbErr> {
    let mut query = job::Entity::find()
        .filter(job::Column::TenantId.eq(tenant_id))
        .filter(job::Column::KnowledgeSpaceId.eq(knowledge_space_id))
        .filter(job::Column::SubjectId.eq(subject_id))
        .filter(grant_holds(conn.get_database_backend(), now));
    if let Some(stages) = stages {
        query = query.filter(job::Column::Stage.is_in(stages.iter().copied()));
    }
    if let Some(key) = after {
        query = query.filter(before(job::Column::UpdatedAt, job::Column::Id, key));
    }
    query.order_by_desc(job::Column::UpdatedAt).order_by_desc(job::Column::Id).limit(limit).all(conn).await
}
