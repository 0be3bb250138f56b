//! The embedding backlog's rows: documents leased for embedding (the `indexing_lock_*`
//! columns, as jobs are leased), their passages without vectors, and the vectors written
//! fenced by the lease token and the document's revision. What to retry and when is
//! `knowledge::backlog`'s.
use entity::{IndexingStatus, knowledge_document as document, knowledge_passage_embedding as embedding};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, FromQueryResult, QueryFilter, QueryOrder, QuerySelect,
    Statement, TransactionTrait,
};
use uuid::Uuid;

use super::backend::{Backend, on_backend};

/// A leased document: what every write of its embedding run is fenced by.
#[derive(Debug, Clone, Copy)]
pub struct DocumentLease {
    /// The document.
    pub id: Uuid,
    /// The revision being embedded.
    pub revision: i32,
    /// The lease's token.
    pub token: Uuid,
    /// Its attempts so far.
    pub attempts: i32,
}

/// A passage waiting for its embedding.
#[derive(Debug, Clone, FromQueryResult)]
pub struct Unembedded {
    /// The passage.
    pub id: Uuid,
    /// Its tenant.
    pub tenant_id: String,
    /// Its space.
    pub knowledge_space_id: Uuid,
    /// What search weighs with it (title and headings).
    pub context: String,
    /// Its text.
    pub text: String,
}

/// A document due for embedding at `now`: pending, available, and not leased.
fn due(now: i64) -> Condition {
    Condition::all()
        .add(document::Column::IndexingStatus.eq(IndexingStatus::Pending))
        .add(
            Condition::any()
                .add(document::Column::IndexingAvailableAt.is_null())
                .add(document::Column::IndexingAvailableAt.lte(now)),
        )
        .add(
            Condition::any()
                .add(document::Column::IndexingLockedUntil.is_null())
                .add(document::Column::IndexingLockedUntil.lte(now)),
        )
}

/// Leases one due document to `worker_id` until `now + lock_ms`, the one that waited
/// longest; `None` when none is due. Of two workers racing for one, one updates the row.
pub async fn lease_due<C: ConnectionTrait>(
    conn: &C,
    worker_id: &str,
    lock_ms: i64,
    now: i64,
) -> Result<Option<DocumentLease>, DbErr> {
    let candidates: Vec<(Uuid, i32, i32)> = document::Entity::find()
        .select_only()
        .columns([document::Column::Id, document::Column::Revision, document::Column::IndexingAttempts])
        .filter(due(now))
        .order_by_asc(document::Column::IndexingAvailableAt)
        .order_by_asc(document::Column::Id)
        .limit(4)
        .into_tuple()
        .all(conn)
        .await?;
    for (id, revision, attempts) in candidates {
        let token = Uuid::new_v4();
        let taken = document::Entity::update_many()
            .col_expr(document::Column::IndexingLockToken, Expr::value(token))
            .col_expr(document::Column::IndexingLockedBy, Expr::value(worker_id))
            .col_expr(document::Column::IndexingLockedUntil, Expr::value(now + lock_ms))
            .filter(document::Column::Id.eq(id))
            .filter(document::Column::Revision.eq(revision))
            .filter(due(now))
            .exec(conn)
            .await?
            .rows_affected
            == 1;
        if taken {
            return Ok(Some(DocumentLease { id, revision, token, attempts }));
        }
    }
    Ok(None)
}

/// Up to `limit` of the document's passages without an embedding by `model`, in order.
pub async fn unembedded<C: ConnectionTrait>(
    conn: &C,
    document_id: Uuid,
    model: &str,
    limit: usize,
) -> Result<Vec<Unembedded>, DbErr> {
    let sql = on_backend!(conn, |B| B::STATEMENTS.unembedded);
    let limit = i64::try_from(limit.max(1)).unwrap_or(i64::MAX);
    let statement = Statement::from_sql_and_values(
        conn.get_database_backend(),
        sql,
        [document_id.into(), model.into(), limit.into()],
    );
    Unembedded::find_by_statement(statement).all(conn).await
}

/// The condition every write of a leased document is fenced by.
fn fenced(lease: &DocumentLease) -> Condition {
    Condition::all()
        .add(document::Column::Id.eq(lease.id))
        .add(document::Column::Revision.eq(lease.revision))
        .add(document::Column::IndexingLockToken.eq(lease.token))
}

/// Writes one batch's vectors (built by the caller) and extends the lease to `until`, in
/// one transaction; false when the lease was lost (nothing is written then).
pub async fn write_vectors<C>(
    db: &C,
    lease: &DocumentLease,
    rows: Vec<embedding::Model>,
    until: i64,
) -> Result<bool, DbErr>
where
    C: TransactionTrait<Transaction = sea_orm::DatabaseTransaction>,
{
    use sea_orm::{ActiveModelTrait as _, IntoActiveModel as _};
    let txn = db.begin().await?;
    // First the fence: on PostgreSQL the update locks the row, so an edit waits for this
    // batch or this batch sees the edit's cleared lock; SQLite holds one writer anyway.
    let held = document::Entity::update_many()
        .col_expr(document::Column::IndexingLockedUntil, Expr::value(until))
        .filter(fenced(lease))
        .exec(&txn)
        .await?
        .rows_affected
        == 1;
    if !held {
        txn.rollback().await?;
        return Ok(false);
    }
    let replace = OnConflict::column(embedding::Column::PassageId)
        .update_columns([
            embedding::Column::Model,
            embedding::Column::Dimensions,
            embedding::Column::Vector,
            embedding::Column::CreatedAt,
        ])
        .to_owned();
    let rows = rows.into_iter().map(|row| row.into_active_model().reset_all());
    embedding::Entity::insert_many(rows).on_conflict(replace).exec_without_returning(&txn).await?;
    txn.commit().await?;
    Ok(true)
}

/// How a leased document's run ends.
#[derive(Debug, Clone)]
pub struct Settled {
    /// Its status from now.
    pub status: IndexingStatus,
    /// Why it failed, if it did.
    pub error: Option<String>,
    /// When it is due again, if it waits.
    pub available_at: Option<i64>,
    /// Its attempts so far.
    pub attempts: i32,
}

/// Ends the lease with `settled`, fenced; false when the lease was lost.
pub async fn settle<C: ConnectionTrait>(conn: &C, lease: &DocumentLease, settled: Settled) -> Result<bool, DbErr> {
    let result = document::Entity::update_many()
        .col_expr(document::Column::IndexingStatus, Expr::value(settled.status))
        .col_expr(document::Column::IndexingError, Expr::value(settled.error))
        .col_expr(document::Column::IndexingAttempts, Expr::value(settled.attempts))
        .col_expr(document::Column::IndexingAvailableAt, Expr::value(settled.available_at))
        .col_expr(document::Column::IndexingLockToken, Expr::value(Option::<Uuid>::None))
        .col_expr(document::Column::IndexingLockedBy, Expr::value(Option::<String>::None))
        .col_expr(document::Column::IndexingLockedUntil, Expr::value(Option::<i64>::None))
        .filter(fenced(lease))
        .exec(conn)
        .await?;
    Ok(result.rows_affected == 1)
}

/// Gives the lease back untouched (the worker is stopping).
pub async fn release<C: ConnectionTrait>(conn: &C, lease: &DocumentLease) -> Result<(), DbErr> {
    document::Entity::update_many()
        .col_expr(document::Column::IndexingLockToken, Expr::value(Option::<Uuid>::None))
        .col_expr(document::Column::IndexingLockedBy, Expr::value(Option::<String>::None))
        .col_expr(document::Column::IndexingLockedUntil, Expr::value(Option::<i64>::None))
        .filter(fenced(lease))
        .exec(conn)
        .await
        .map(|_| ())
}

/// With no endpoint: nothing waits for embeddings (every document not ready becomes
/// ready). Returns how many changed.
pub async fn mark_all_ready<C: ConnectionTrait>(conn: &C) -> Result<u64, DbErr> {
    let result = document::Entity::update_many()
        .col_expr(document::Column::IndexingStatus, Expr::value(IndexingStatus::Ready))
        .col_expr(document::Column::IndexingError, Expr::value(Option::<String>::None))
        .filter(document::Column::IndexingStatus.ne(IndexingStatus::Ready))
        .exec(conn)
        .await?;
    Ok(result.rows_affected)
}

/// With an endpoint of `model`: failed documents get a fresh set of attempts, and ready
/// documents whose passages lack vectors of the model wait again, due at `now`. Returns
/// how many changed.
pub async fn requeue_for_model<C: ConnectionTrait>(conn: &C, model: &str, now: i64) -> Result<u64, DbErr> {
    let retried = document::Entity::update_many()
        .col_expr(document::Column::IndexingStatus, Expr::value(IndexingStatus::Pending))
        .col_expr(document::Column::IndexingAttempts, Expr::value(0))
        .col_expr(document::Column::IndexingAvailableAt, Expr::value(now))
        .filter(document::Column::IndexingStatus.eq(IndexingStatus::Failed))
        .exec(conn)
        .await?
        .rows_affected;
    let sql = on_backend!(conn, |B| B::STATEMENTS.reconcile_unembedded);
    let statement = Statement::from_sql_and_values(conn.get_database_backend(), sql, [model.into(), now.into()]);
    let stale = conn.execute_raw(statement).await?.rows_affected();
    Ok(retried + stale)
}
