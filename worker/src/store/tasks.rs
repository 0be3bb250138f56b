//! Task rows (`research_task_jobs`): as the lifecycle reads and writes them one at a time
//! (created, found, locked, written back whole once the lifecycle decided every column,
//! their leases renewed), and as the API reads them, scoped to the subject that created
//! them and to grants that hold. The hot paths' batched writes are `boundaries` and
//! `claims`.
use std::collections::HashSet;

use entity::{Stage, research_task_job as job};
use sea_orm::sea_query::Query;
use sea_orm::{
    ActiveModelTrait as _, ColumnTrait, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel as _, QueryFilter,
    QuerySelect, Statement,
};
use uuid::Uuid;

use super::backend::{Backend, on_backend};
use super::pages::{PageKey, before};
pub use super::rows::{Fence, LeasePair, NewTaskRows};

/// Writes a new task with its grant, trace context and first outbox entry; returns the
/// task as written. One statement on PostgreSQL; one insert per row on SQLite.
pub async fn create<C: ConnectionTrait>(txn: &C, rows: NewTaskRows) -> Result<job::Model, DbErr> {
    on_backend!(txn, |B| B::create_task(txn, rows).await)
}

/// The task row, if there is one.
pub async fn find<C: ConnectionTrait>(conn: &C, id: Uuid) -> Result<Option<job::Model>, DbErr> {
    job::Entity::find_by_id(id).one(conn).await
}

/// Reads the task row and locks it until the transaction ends: `SELECT … FOR UPDATE` on
/// PostgreSQL; SQLite's write transactions begin IMMEDIATE and already hold the one write
/// lock.
pub async fn lock<C: ConnectionTrait>(txn: &C, id: Uuid) -> Result<Option<job::Model>, DbErr> {
    on_backend!(txn, |B| B::locking_rows(job::Entity::find_by_id(id))).one(txn).await
}

/// Writes the task row back as the caller decided it (every column), under the row lock
/// the caller holds; returns it as written.
pub async fn save<C: ConnectionTrait>(txn: &C, row: job::Model) -> Result<job::Model, DbErr> {
    row.into_active_model().reset_all().update(txn).await
}

/// The fence of a boundary of `lease` from `from_stage` at `now`, checked under the row's
/// lock (taken here, held until the transaction ends): what would keep it out, if anything.
pub async fn fence<C: ConnectionTrait>(
    txn: &C,
    lease: LeasePair,
    from_stage: Stage,
    now: i64,
) -> Result<Option<Fence>, DbErr> {
    let backend = txn.get_database_backend();
    let sql = on_backend!(txn, |B| B::STATEMENTS.fence);
    let statement = Statement::from_sql_and_values(backend, sql, [lease.job_id.into(), now.into()]);
    let Some(row) = txn.query_one_raw(statement).await? else {
        return Ok(Some(Fence::LeaseLost));
    };
    let token: Option<Uuid> = row.try_get("", "lease_token")?;
    let stage: Stage = row.try_get("", "stage")?;
    let denial: Option<String> = row.try_get("", "denial")?;
    Ok(if token != Some(lease.token) {
        Some(Fence::LeaseLost)
    } else if stage != from_stage {
        Some(Fence::StageMoved(stage))
    } else {
        denial.as_deref().map(|denial| Fence::GrantDenied(entity::GrantDenial::from_label(denial)))
    })
}

/// The most leases one renewal statement names (two parameters each, well under both
/// databases' limits).
const RENEWAL_BATCH: usize = 10_000;

/// Extends each lease of `leases` to `now + lease_ms`, each row only while it still
/// carries its own lease's token; returns the jobs whose lease was lost. Lease internals
/// only: neither `row_version` nor `updated_at` moves. One statement per 10,000 leases in
/// the common case; a second names the lost ones when any were.
///
/// On PostgreSQL a row locked right now is skipped rather than waited for (it is most
/// often this worker's own boundary, which renews the lease itself): a skipped row still
/// carries its token, so it is not counted lost, and the next renewal takes it. A single
/// lease (a signal's check) waits, so nothing renewed then means lost.
pub async fn renew_leases<C: ConnectionTrait>(
    conn: &C,
    leases: &[LeasePair],
    lease_ms: i64,
    now: i64,
) -> Result<Vec<Uuid>, DbErr> {
    let mut lost = Vec::new();
    for batch in leases.chunks(RENEWAL_BATCH) {
        // Tokens are unique to the claim that issued them, so a row matching both lists
        // carries exactly its own lease's token.
        let ids: Vec<Uuid> = batch.iter().map(|lease| lease.job_id).collect();
        let tokens: Vec<Uuid> = batch.iter().map(|lease| lease.token).collect();
        let mut held_rows = Query::select()
            .column(job::Column::Id)
            .from(job::Entity)
            .and_where(job::Column::Id.is_in(ids.clone()))
            .and_where(job::Column::LeaseToken.is_in(tokens.clone()))
            .to_owned();
        let skip_locked = batch.len() > 1 && on_backend!(conn, |B| B::skip_locked_rows(&mut held_rows));
        let result = job::Entity::update_many()
            .col_expr(job::Column::LeaseExpiresAt, now.saturating_add(lease_ms).into())
            .col_expr(job::Column::HeartbeatAt, now.into())
            .filter(job::Column::Id.in_subquery(held_rows))
            .exec(conn)
            .await?;
        if result.rows_affected == batch.len() as u64 {
            continue;
        }
        // None renewed without skipping: all lost, no lookup.
        if result.rows_affected == 0 && !skip_locked {
            lost.extend(ids);
            continue;
        }
        let held: HashSet<Uuid> = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            .filter(job::Column::Id.is_in(ids.clone()))
            .filter(job::Column::LeaseToken.is_in(tokens))
            .into_tuple::<Uuid>()
            .all(conn)
            .await?
            .into_iter()
            .collect();
        lost.extend(ids.into_iter().filter(|id| !held.contains(id)));
    }
    Ok(lost)
}

/// The task with this id if `subject_id` of `tenant_id` created it and the grant it was
/// created under holds at `now`: one statement, written once per backend, whatever the
/// grant (`sql/task_readable.*.sql`).
pub async fn find_readable<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    subject_id: &str,
    id: Uuid,
    now: i64,
) -> Result<Option<job::Model>, DbErr> {
    use sea_orm::FromQueryResult as _;
    let sql = on_backend!(conn, |B| B::STATEMENTS.task_readable);
    let values: [sea_orm::Value; 4] = [id.into(), tenant_id.into(), subject_id.into(), now.into()];
    let statement = Statement::from_sql_and_values(conn.get_database_backend(), sql, values);
    job::Model::find_by_statement(statement).one(conn).await
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
    use sea_orm::QueryOrder as _;
    let grant_holds = on_backend!(conn, |B| B::STATEMENTS.grant_holds_of_jobs);
    let mut query = job::Entity::find()
        .filter(job::Column::TenantId.eq(tenant_id))
        .filter(job::Column::KnowledgeSpaceId.eq(knowledge_space_id))
        .filter(job::Column::SubjectId.eq(subject_id))
        .filter(sea_orm::sea_query::Expr::cust_with_values(grant_holds, [now]));
    if let Some(stages) = stages {
        query = query.filter(job::Column::Stage.is_in(stages.iter().copied()));
    }
    if let Some(key) = after {
        query = query.filter(before(job::Column::UpdatedAt, job::Column::Id, key));
    }
    query.order_by_desc(job::Column::UpdatedAt).order_by_desc(job::Column::Id).limit(limit).all(conn).await
}
