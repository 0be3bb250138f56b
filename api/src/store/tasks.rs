//! Reads of research tasks, scoped to the subject that created them (their journals are
//! read through `worker::journal`). Nothing here writes: `worker::lifecycle` is the only
//! writer of `research_task_*` rows.
use entity::{Stage, research_task_job as job};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QueryOrder, QuerySelect};
use uuid::Uuid;

use super::{PageKey, before};

/// The task with this id if `subject_id` of `tenant_id` created it.
pub async fn find_owned<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    subject_id: &str,
    id: Uuid,
) -> Result<Option<job::Model>, DbErr> {
    job::Entity::find_by_id(id)
        .filter(job::Column::TenantId.eq(tenant_id))
        .filter(job::Column::SubjectId.eq(subject_id))
        .one(conn)
        .await
}

/// The task by id alone, for follow-ups once the caller's access was checked.
pub async fn find<C: ConnectionTrait>(conn: &C, id: Uuid) -> Result<Option<job::Model>, DbErr> {
    job::Entity::find_by_id(id).one(conn).await
}

/// One page of a subject's tasks in a space, most recently updated first (the seed's
/// `research_task_jobs_scope_updated_idx` order), optionally only in some stages.
pub async fn page<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    knowledge_space_id: Uuid,
    subject_id: &str,
    stages: Option<&[Stage]>,
    after: Option<PageKey>,
    limit: u64,
) -> Result<Vec<job::Model>, DbErr> {
    let mut query = job::Entity::find()
        .filter(job::Column::TenantId.eq(tenant_id))
        .filter(job::Column::KnowledgeSpaceId.eq(knowledge_space_id))
        .filter(job::Column::SubjectId.eq(subject_id));
    if let Some(stages) = stages {
        query = query.filter(job::Column::Stage.is_in(stages.iter().copied()));
    }
    if let Some(key) = after {
        query = query.filter(before(job::Column::UpdatedAt, job::Column::Id, key));
    }
    query.order_by_desc(job::Column::UpdatedAt).order_by_desc(job::Column::Id).limit(limit).all(conn).await
}
