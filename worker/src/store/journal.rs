//! A task's two journals, progress events and partial results: per-job tables keyed by
//! `(job, sequence)` and `(job, idempotency key)`. One trait names their columns; appends
//! (the lifecycle's, which holds the job's row lock) and the reads every journal needs
//! (the lifecycle, the API's lists, the live subscriptions) live here once, the same on
//! both backends.
//!
//! An append is one statement: `INSERT … SELECT <last sequence + 1> … ON CONFLICT DO
//! NOTHING RETURNING sequence`. The next sequence is the last one plus one, which is only
//! gapless because callers hold the job's row lock; a key written before (a replay) writes
//! nothing, and a second statement reads the sequence it was written at.
pub use entity::Journal;
use entity::{research_task_partial_result as partial, research_task_progress_event as progress};
use sea_orm::sea_query::{Expr, ExprTrait as _, Func, OnConflict, Query, SimpleExpr};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DbErr, Iterable as _, QueryFilter, QueryOrder, QuerySelect, StatementBuilder,
};
use uuid::Uuid;

/// Up to `limit` rows of the job with a sequence greater than `after`, in order.
pub async fn after<J: Journal, C: ConnectionTrait>(
    conn: &C,
    job_id: Uuid,
    after: i32,
    limit: u64,
) -> Result<Vec<J::Model>, DbErr> {
    J::find()
        .filter(J::JOB.eq(job_id))
        .filter(J::SEQUENCE.gt(after))
        .order_by_asc(J::SEQUENCE)
        .limit(limit)
        .all(conn)
        .await
}

/// For each of `job_ids`, its rows with a sequence greater than `after`, at most `limit`,
/// in order: one statement for many jobs (a list of tasks with their journals). Sequences
/// have no gaps, so "the next `limit` rows" is the sequence range `after+1 ..= after+limit`
/// and needs no per-job window.
pub async fn after_for_tasks<J: Journal, C: ConnectionTrait>(
    conn: &C,
    job_ids: &[Uuid],
    after: i32,
    limit: u64,
) -> Result<Vec<J::Model>, DbErr> {
    if job_ids.is_empty() || limit == 0 {
        return Ok(Vec::new());
    }
    let last = after.saturating_add(i32::try_from(limit).unwrap_or(i32::MAX));
    J::find()
        .filter(J::JOB.is_in(job_ids.iter().copied()))
        .filter(J::SEQUENCE.gt(after))
        .filter(J::SEQUENCE.lte(last))
        .order_by_asc(J::JOB)
        .order_by_asc(J::SEQUENCE)
        .all(conn)
        .await
}

/// The job's highest sequence so far (0 for none).
pub async fn last_sequence<J: Journal, C: ConnectionTrait>(conn: &C, job_id: Uuid) -> Result<i32, DbErr> {
    let last: Option<i32> = J::find()
        .select_only()
        .column(J::SEQUENCE)
        .filter(J::JOB.eq(job_id))
        .order_by_desc(J::SEQUENCE)
        .into_tuple()
        .one(conn)
        .await?;
    Ok(last.unwrap_or(0))
}

/// The sequence of the job's row with this idempotency key, if one was written.
pub async fn sequence_of_key<J: Journal, C: ConnectionTrait>(
    conn: &C,
    job_id: Uuid,
    key: &str,
) -> Result<Option<i32>, DbErr> {
    J::find()
        .select_only()
        .column(J::SEQUENCE)
        .filter(J::JOB.eq(job_id))
        .filter(J::KEY.eq(key))
        .into_tuple()
        .one(conn)
        .await
}

/// Where an append went: its sequence, and whether it wrote it (false for a key written
/// before, whose row and sequence stand).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The row's sequence.
    pub sequence: i32,
    /// Whether this append wrote the row.
    pub new: bool,
}

/// Appends `row` (every column but its sequence decided by the caller) at the job's next
/// sequence, unless a row with its key exists. Call only while holding the job's lock.
pub async fn append_event<C: ConnectionTrait>(txn: &C, row: &progress::Model) -> Result<Appended, DbErr> {
    let values = progress::Column::iter()
        .map(|column| {
            let value: Option<SimpleExpr> = match column {
                progress::Column::Id => Some(Expr::val(row.id)),
                progress::Column::TenantId => Some(Expr::val(row.tenant_id.as_str())),
                progress::Column::KnowledgeSpaceId => Some(Expr::val(row.knowledge_space_id)),
                progress::Column::ResearchTaskJobId => Some(Expr::val(row.research_task_job_id)),
                progress::Column::Sequence => None,
                progress::Column::IdempotencyKey => Some(Expr::val(row.idempotency_key.as_str())),
                progress::Column::EventType => Some(Expr::val(row.event_type)),
                progress::Column::Stage => Some(Expr::val(row.stage)),
                progress::Column::Payload => Some(Expr::val(row.payload.clone())),
                progress::Column::CreatedAt => Some(Expr::val(row.created_at)),
            };
            (column, value)
        })
        .collect();
    insert_next::<progress::Entity, _>(txn, row.research_task_job_id, &row.idempotency_key, values).await
}

/// [`append_event`] for a partial result.
pub async fn append_partial<C: ConnectionTrait>(txn: &C, row: &partial::Model) -> Result<Appended, DbErr> {
    let values = partial::Column::iter()
        .map(|column| {
            let value: Option<SimpleExpr> = match column {
                partial::Column::Id => Some(Expr::val(row.id)),
                partial::Column::TenantId => Some(Expr::val(row.tenant_id.as_str())),
                partial::Column::KnowledgeSpaceId => Some(Expr::val(row.knowledge_space_id)),
                partial::Column::ResearchTaskJobId => Some(Expr::val(row.research_task_job_id)),
                partial::Column::Sequence => None,
                partial::Column::IdempotencyKey => Some(Expr::val(row.idempotency_key.as_str())),
                partial::Column::EvidenceBundle => Some(Expr::val(row.evidence_bundle.clone())),
                partial::Column::CreatedAt => Some(Expr::val(row.created_at)),
            };
            (column, value)
        })
        .collect();
    insert_next::<partial::Entity, _>(txn, row.research_task_job_id, &row.idempotency_key, values).await
}

/// Inserts the row `values` (every column of `J`, the sequence's place holding `None`) at
/// the job's next sequence unless a row with `key` exists.
async fn insert_next<J: Journal, C: ConnectionTrait>(
    txn: &C,
    job_id: Uuid,
    key: &str,
    values: Vec<(J::Column, Option<SimpleExpr>)>,
) -> Result<Appended, DbErr> {
    // The last sequence plus one, read in the same statement (the caller's row lock keeps
    // it from moving until commit).
    let next = Expr::expr(Func::coalesce([Expr::col(J::SEQUENCE).max(), Expr::val(0)])).add(1);
    let mut select = Query::select();
    for (_, value) in &values {
        select.expr(value.clone().unwrap_or_else(|| next.clone()));
    }
    select.from(J::default().table_ref()).and_where(Expr::col(J::JOB).eq(job_id));
    let insert = Query::insert()
        .into_table(J::default().table_ref())
        .columns(values.iter().map(|(column, _)| *column))
        .select_from(select)
        .map_err(|error| DbErr::Custom(error.to_string()))?
        // Either unique index (key or sequence) makes it a no-op; only a written key can
        // clash while the caller holds the row lock.
        .on_conflict(OnConflict::new().do_nothing().to_owned())
        .returning(Query::returning().expr(Expr::col(J::SEQUENCE)))
        .to_owned();
    let statement = StatementBuilder::build(&insert, &txn.get_database_backend());
    if let Some(row) = txn.query_one_raw(statement).await? {
        return Ok(Appended { sequence: row.try_get_by_index(0)?, new: true });
    }
    let written = sequence_of_key::<J, _>(txn, job_id, key).await?.ok_or_else(|| {
        DbErr::Custom(format!("journal append for {job_id} clashed on a sequence, not its key {key}"))
    })?;
    Ok(Appended { sequence: written, new: false })
}

/// The job's row with this idempotency key, if one was written (the driver suite's check).
#[cfg(feature = "testing")]
pub async fn by_key<J: Journal, C: ConnectionTrait>(
    conn: &C,
    job_id: Uuid,
    key: &str,
) -> Result<Option<J::Model>, DbErr> {
    J::find().filter(J::JOB.eq(job_id)).filter(J::KEY.eq(key)).one(conn).await
}

/// The job's rows whose idempotency key starts with `prefix`, in sequence order.
pub async fn by_key_prefix<J: Journal, C: ConnectionTrait>(
    conn: &C,
    job_id: Uuid,
    prefix: &str,
) -> Result<Vec<J::Model>, DbErr> {
    J::find().filter(J::JOB.eq(job_id)).filter(J::KEY.starts_with(prefix)).order_by_asc(J::SEQUENCE).all(conn).await
}
