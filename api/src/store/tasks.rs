//! Reads of research tasks, scoped to the subject that created them (their journals are
//! read through `worker::store::journal`). Nothing here writes: `worker::lifecycle` is the only
//! writer of `research_task_*` rows.
use entity::{Stage, research_task_job as job};
use std::sync::OnceLock;

use sea_orm::sea_query::Values;
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseBackend, DbErr, EntityTrait, FromQueryResult, QueryFilter, QueryOrder,
    QuerySelect, QueryTrait, Statement,
};
use uuid::Uuid;

use super::{PageKey, before};

/// The grant condition on a task row (see `worker::grant::holds_sql`).
fn grant_holds(backend: sea_orm::DatabaseBackend, now: i64) -> sea_orm::sea_query::Expr {
    worker::grant::holds_sql(backend, "\"research_task_jobs\".\"permission_snapshot_id\"", now)
}

/// The task with this id if `subject_id` of `tenant_id` created it and the grant it was
/// created under holds at `now`: the row and its grant's validity in one statement.
///
/// This is the read every `researchTask(id)` makes, and building the statement with
/// sea-query cost more than the rest of the request together: its text depends only on the
/// backend, so it is built once per backend ([`readable_sql`]) and each read binds its
/// values ([`readable_values`], in the order the builder binds them; a test holds the two
/// to the builder's statement).
pub async fn find_readable<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    subject_id: &str,
    id: Uuid,
    now: i64,
) -> Result<Option<job::Model>, DbErr> {
    let backend = conn.get_database_backend();
    let values = readable_values(tenant_id, subject_id, id, now);
    let statement = Statement::from_sql_and_values(backend, readable_sql(backend), values);
    // Straight to the model: `Entity::find()` would first assemble a select it never uses.
    job::Model::find_by_statement(statement).one(conn).await
}

/// `find_readable`'s statement as sea-query builds it.
fn readable_statement(backend: DatabaseBackend, tenant_id: &str, subject_id: &str, id: Uuid, now: i64) -> Statement {
    job::Entity::find_by_id(id)
        .filter(job::Column::TenantId.eq(tenant_id))
        .filter(job::Column::SubjectId.eq(subject_id))
        .filter(grant_holds(backend, now))
        .limit(1)
        .build(backend)
}

/// The text of `find_readable`'s statement on `backend`, built once.
fn readable_sql(backend: DatabaseBackend) -> &'static str {
    static POSTGRES: OnceLock<String> = OnceLock::new();
    static OTHER: OnceLock<String> = OnceLock::new();
    let built = if backend == DatabaseBackend::Postgres { &POSTGRES } else { &OTHER };
    built.get_or_init(|| readable_statement(backend, "", "", Uuid::nil(), 0).sql)
}

/// The values `find_readable`'s statement binds, in the builder's order: the id, tenant and
/// subject, the grant rule's two clock readings, and the limit of one row.
fn readable_values(tenant_id: &str, subject_id: &str, id: Uuid, now: i64) -> Values {
    Values(vec![id.into(), tenant_id.into(), subject_id.into(), now.into(), now.into(), 1u64.into()])
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

#[cfg(test)]
mod tests {
    use super::*;

    /// The prebuilt text and the bound values are exactly the statement sea-query builds,
    /// on both backends, so the fast path reads what the builder's query would.
    #[test]
    fn the_prebuilt_read_is_the_builders_statement() {
        let id = Uuid::now_v7();
        for backend in [DatabaseBackend::Postgres, DatabaseBackend::Sqlite] {
            let built = readable_statement(backend, "tenant-a", "subject-b", id, 1_796_000_000_123);
            assert_eq!(built.sql, readable_sql(backend), "{backend:?}");
            let values = readable_values("tenant-a", "subject-b", id, 1_796_000_000_123);
            assert_eq!(built.values, Some(values), "{backend:?}");
        }
    }
}
