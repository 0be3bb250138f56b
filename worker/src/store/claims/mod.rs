//! Claims: which (tenant, space) pairs have unfinished tasks, how many leases each holds,
//! the due rows of one pair, and the lease itself. Which pair goes next, whether a paused
//! task resumes or an exhausted one fails instead, and what its `started` event says are
//! the lifecycle's decisions (`lifecycle::claim`); the store reads and writes.
//!
//! Leasing is one operation per backend: on PostgreSQL one statement for any number of
//! rows (`postgres/sql/claims.sql`), on SQLite the same writes row by row
//! (`sqlite/claims.rs`). Both also say whether each task's grant holds at the claim's time
//! (so the run need not ask before its first stage) and whether its creator has a webhook
//! endpoint (so an event nobody subscribed to costs no lookup).
use entity::{Stage, research_task_job as job};
use sea_orm::sea_query::Expr;
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, FromQueryResult, Iterable as _, QueryFilter,
    QueryOrder, QuerySelect, Statement,
};
use uuid::Uuid;

pub(crate) mod rows;

pub use rows::{LeaseWrite, Leased};

use crate::store::backend::{Backend, on_backend};

/// One tenant's space: the unit fair claiming takes turns between.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, FromQueryResult)]
pub struct Pair {
    /// The tenant.
    pub tenant_id: String,
    /// The space.
    pub knowledge_space_id: Uuid,
}

/// Every pair with unfinished tasks, in order: a skip scan over the partial index of
/// unfinished tasks (one probe per pair), never a read of the backlog itself.
pub async fn pairs<C: ConnectionTrait>(conn: &C) -> Result<Vec<Pair>, DbErr> {
    let sql = on_backend!(conn, |B| B::STATEMENTS.pairs);
    Pair::find_by_statement(Statement::from_string(conn.get_database_backend(), sql)).all(conn).await
}

/// The live leases of one pair.
#[derive(Debug, Clone, PartialEq, Eq, FromQueryResult)]
pub struct PairLeases {
    /// The tenant.
    pub tenant_id: String,
    /// The space.
    pub knowledge_space_id: Uuid,
    /// How many of its tasks run under a live lease.
    pub running: i64,
}

/// The live leases held now, counted per pair: bounded by what the workers run, not by
/// the backlog (the lease index is read for the running stages' live leases only).
pub async fn running<C: ConnectionTrait>(conn: &C, now: i64) -> Result<Vec<PairLeases>, DbErr> {
    job::Entity::find()
        .select_only()
        .column(job::Column::TenantId)
        .column(job::Column::KnowledgeSpaceId)
        .column_as(job::Column::Id.count(), "running")
        .filter(job::Column::Stage.is_in(Stage::iter().filter(|stage| stage.is_running())))
        .filter(job::Column::LeaseExpiresAt.gt(now))
        .filter(job::Column::LeaseToken.is_not_null())
        .group_by(job::Column::TenantId)
        .group_by(job::Column::KnowledgeSpaceId)
        .into_model::<PairLeases>()
        .all(conn)
        .await
}

/// The live leases of a tenant's tasks, or of one of its spaces: read through the lease
/// index (the tenant's own index would walk its whole backlog; SQLite's planner, without
/// statistics, picks it unless told otherwise).
pub async fn live_leases<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    knowledge_space_id: Option<Uuid>,
    now: i64,
) -> Result<i64, DbErr> {
    let statements = on_backend!(conn, |B| &B::STATEMENTS);
    let sql = match knowledge_space_id {
        None => statements.live_leases_of_tenant,
        Some(_) => statements.live_leases_of_space,
    };
    let mut values: Vec<sea_orm::Value> = vec![now.into(), tenant_id.into()];
    values.extend(knowledge_space_id.map(Into::into));
    let row = conn.query_one_raw(Statement::from_sql_and_values(conn.get_database_backend(), sql, values)).await?;
    Ok(match row {
        Some(row) => row.try_get::<i64>("", "n")?,
        None => 0,
    })
}

/// Up to `limit` of the pair's oldest due tasks but `taken`, locked until the transaction
/// ends: queued, or running with no live lease, with `retry_at` passed; or paused with
/// `resume_after` passed. On PostgreSQL another worker skips them rather than waiting.
pub async fn due<C: ConnectionTrait>(
    txn: &C,
    pair: &Pair,
    now: i64,
    limit: u64,
    taken: &[Uuid],
) -> Result<Vec<job::Model>, DbErr> {
    let lease_free = Condition::any().add(job::Column::LeaseToken.is_null()).add(job::Column::LeaseExpiresAt.lte(now));
    let retry_passed = Condition::any().add(job::Column::RetryAt.is_null()).add(job::Column::RetryAt.lte(now));
    let claimable = Stage::iter().filter(|stage| stage.is_claimable());
    let runnable = Condition::all().add(job::Column::Stage.is_in(claimable)).add(lease_free).add(retry_passed);
    let waking = Condition::all().add(job::Column::Stage.eq(Stage::Paused)).add(job::Column::ResumeAfter.lte(now));
    let mut query = job::Entity::find()
        .filter(job::Column::TenantId.eq(pair.tenant_id.as_str()))
        .filter(job::Column::KnowledgeSpaceId.eq(pair.knowledge_space_id))
        // The partial index's own predicate, so both planners read it.
        .filter(Expr::cust(format!("\"stage\" IN ({})", migration::UNFINISHED)))
        .filter(Condition::any().add(runnable).add(waking))
        // A turn waits, queued, while an earlier turn of its thread is unfinished.
        .filter(Expr::cust(format!("NOT ({})", crate::store::threads::held_up_turn())))
        .order_by_asc(job::Column::UpdatedAt)
        .order_by_asc(job::Column::Id)
        .limit(limit);
    if !taken.is_empty() {
        query = query.filter(job::Column::Id.is_not_in(taken.iter().copied()));
    }
    on_backend!(txn, |B| B::skipping_locked_rows(query)).all(txn).await
}

/// Writes `leases` (due rows the caller's transaction locked) and returns each leased row,
/// in the order given: the row's lease, attempt and stage, the `started` event when there
/// is one, and the task's open outbox entries marked `leased` (fencing out any publish
/// under way).
pub async fn lease<C: ConnectionTrait>(txn: &C, leases: &[LeaseWrite]) -> Result<Vec<Leased>, DbErr> {
    if leases.is_empty() {
        return Ok(Vec::new());
    }
    on_backend!(txn, |B| B::lease(txn, leases).await)
}
