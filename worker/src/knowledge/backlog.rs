//! The embedding backlog: documents whose `indexing_status` is `pending` wait for their
//! passages' embeddings. A worker loop leases one document at a time (the
//! `indexing_lock_*` columns, as jobs are leased), embeds its passages in batches and
//! writes each batch fenced by the lock token and the document's revision, so an edit or
//! removal made meanwhile (which clears the lock) turns the rest of the run into a no-op.
//! An endpoint that is down or rate limited puts the document back with a backoff that
//! honours `Retry-After`, up to `max_attempts`; a response that cannot be right fails the
//! document at once. Either way full-text search keeps finding it.
use std::time::Duration;

use entity::{IndexingStatus, knowledge_document as document, knowledge_passage_embedding as embedding};
use sea_orm::sea_query::{Expr, OnConflict};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, FromQueryResult,
    QueryFilter, QueryOrder, QuerySelect, Statement, TransactionTrait as _,
};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::embeddings::{EmbedError, Embedder};
use super::vectors;
use crate::lifecycle::RetryPolicy;

/// How the backlog is worked.
#[derive(Debug, Clone)]
pub struct BacklogPolicy {
    /// Who holds the locks (the worker id).
    pub worker_id: String,
    /// How long a lock lasts without progress, in milliseconds.
    pub lock_ms: i64,
    /// Passages per request.
    pub batch_size: usize,
    /// Attempts of one document before it is `failed`.
    pub max_attempts: i32,
    /// The backoff between attempts.
    pub retry: RetryPolicy,
}

/// What one step did.
#[derive(Debug, Clone, PartialEq)]
pub enum Worked {
    /// No document was due.
    Idle,
    /// A document was worked: embedded, failed, or given up because it changed meanwhile.
    Document {
        /// The document.
        id: Uuid,
        /// Passages embedded by this step.
        embedded: usize,
        /// Where the document ended up.
        status: IndexingStatus,
    },
    /// The endpoint could not answer: the document waits, and so should the loop.
    Unavailable {
        /// How long to wait before the next request.
        wait: Duration,
    },
}

/// A claimed document.
struct Claim {
    id: Uuid,
    revision: i32,
    token: Uuid,
    attempts: i32,
}

#[derive(Debug, FromQueryResult)]
struct Unembedded {
    id: Uuid,
    tenant_id: String,
    knowledge_space_id: Uuid,
    context: String,
    text: String,
}

/// Claims the document that has waited longest and embeds what its passages lack.
pub async fn embed_due(
    db: &DatabaseConnection,
    embedder: &Embedder,
    policy: &BacklogPolicy,
    stop: &CancellationToken,
    now: impl Fn() -> i64,
) -> Result<Worked, DbErr> {
    let Some(claim) = claim(db, policy, now()).await? else {
        return Ok(Worked::Idle);
    };
    let mut embedded = 0;
    loop {
        if stop.is_cancelled() {
            release(db, &claim).await?;
            return Ok(Worked::Document { id: claim.id, embedded, status: IndexingStatus::Pending });
        }
        let batch = unembedded(db, claim.id, embedder.model(), policy.batch_size).await?;
        if batch.is_empty() {
            let status = if settle(db, &claim, IndexingStatus::Ready, None, None, 0).await? {
                IndexingStatus::Ready
            } else {
                IndexingStatus::Pending
            };
            return Ok(Worked::Document { id: claim.id, embedded, status });
        }
        let inputs: Vec<String> = batch.iter().map(|row| format!("{}\n\n{}", row.context, row.text)).collect();
        let vectors = match embedder.embed(&inputs).await {
            Ok(vectors) => vectors,
            Err(error) => return fail(db, policy, &claim, embedded, error, now()).await,
        };
        if !store(db, policy, &claim, embedder.model(), &batch, &vectors, now()).await? {
            // Edited, removed or re-leased meanwhile: the new revision starts over.
            return Ok(Worked::Document { id: claim.id, embedded, status: IndexingStatus::Pending });
        }
        embedded += batch.len();
    }
}

/// Leases one due document, or `None` when none is.
async fn claim(db: &DatabaseConnection, policy: &BacklogPolicy, now: i64) -> Result<Option<Claim>, DbErr> {
    let due = || {
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
    };
    let candidates: Vec<(Uuid, i32, i32)> = document::Entity::find()
        .select_only()
        .columns([document::Column::Id, document::Column::Revision, document::Column::IndexingAttempts])
        .filter(due())
        .order_by_asc(document::Column::IndexingAvailableAt)
        .order_by_asc(document::Column::Id)
        .limit(4)
        .into_tuple()
        .all(db)
        .await?;
    for (id, revision, attempts) in candidates {
        let token = Uuid::new_v4();
        // The same conditions again: of two workers racing for it, one updates the row.
        let taken = document::Entity::update_many()
            .col_expr(document::Column::IndexingLockToken, Expr::value(token))
            .col_expr(document::Column::IndexingLockedBy, Expr::value(policy.worker_id.clone()))
            .col_expr(document::Column::IndexingLockedUntil, Expr::value(now + policy.lock_ms))
            .filter(document::Column::Id.eq(id))
            .filter(document::Column::Revision.eq(revision))
            .filter(due())
            .exec(db)
            .await?
            .rows_affected
            == 1;
        if taken {
            return Ok(Some(Claim { id, revision, token, attempts }));
        }
    }
    Ok(None)
}

/// Up to `limit` passages of the document without an embedding by `model`, in order.
async fn unembedded(
    db: &DatabaseConnection,
    document_id: Uuid,
    model: &str,
    limit: usize,
) -> Result<Vec<Unembedded>, DbErr> {
    let backend = db.get_database_backend();
    let sql = if crate::db::is_postgres(backend) {
        r#"SELECT p."id", p."tenant_id", p."knowledge_space_id", p."context", p."text" FROM "knowledge_passages" p
           WHERE p."document_id" = $1 AND NOT EXISTS (
             SELECT 1 FROM "knowledge_passage_embeddings" e WHERE e."passage_id" = p."id" AND e."model" = $2)
           ORDER BY p."ordinal" LIMIT $3"#
    } else {
        r#"SELECT p."id", p."tenant_id", p."knowledge_space_id", p."context", p."text" FROM "knowledge_passages" p
           WHERE p."document_id" = ? AND NOT EXISTS (
             SELECT 1 FROM "knowledge_passage_embeddings" e WHERE e."passage_id" = p."id" AND e."model" = ?)
           ORDER BY p."ordinal" LIMIT ?"#
    };
    let limit = i64::try_from(limit.max(1)).unwrap_or(i64::MAX);
    let statement = Statement::from_sql_and_values(backend, sql, [document_id.into(), model.into(), limit.into()]);
    Unembedded::find_by_statement(statement).all(db).await
}

/// The condition every write of a claimed document is fenced by.
fn fenced(claim: &Claim) -> Condition {
    Condition::all()
        .add(document::Column::Id.eq(claim.id))
        .add(document::Column::Revision.eq(claim.revision))
        .add(document::Column::IndexingLockToken.eq(claim.token))
}

/// Writes one batch's vectors and extends the lock, in one transaction; false when the
/// lock was lost (nothing is written then).
async fn store(
    db: &DatabaseConnection,
    policy: &BacklogPolicy,
    claim: &Claim,
    model: &str,
    batch: &[Unembedded],
    vectors: &[Vec<f32>],
    now: i64,
) -> Result<bool, DbErr> {
    let txn = db.begin().await?;
    // First the fence: on PostgreSQL the update locks the row, so an edit waits for this
    // batch or this batch sees the edit's cleared lock; SQLite holds one writer anyway.
    let held = document::Entity::update_many()
        .col_expr(document::Column::IndexingLockedUntil, Expr::value(now + policy.lock_ms))
        .filter(fenced(claim))
        .exec(&txn)
        .await?
        .rows_affected
        == 1;
    if !held {
        txn.rollback().await?;
        return Ok(false);
    }
    let rows = batch.iter().zip(vectors).map(|(passage, vector)| embedding::ActiveModel {
        passage_id: Set(passage.id),
        tenant_id: Set(passage.tenant_id.clone()),
        knowledge_space_id: Set(passage.knowledge_space_id),
        model: Set(model.to_owned()),
        dimensions: Set(i32::try_from(vector.len()).unwrap_or(i32::MAX)),
        vector: Set(vectors::to_le_bytes(vector)),
        created_at: Set(now),
    });
    let replace = OnConflict::column(embedding::Column::PassageId)
        .update_columns([
            embedding::Column::Model,
            embedding::Column::Dimensions,
            embedding::Column::Vector,
            embedding::Column::CreatedAt,
        ])
        .to_owned();
    embedding::Entity::insert_many(rows).on_conflict(replace).exec_without_returning(&txn).await?;
    txn.commit().await?;
    Ok(true)
}

/// Records a failed request: a transient failure waits (at least `Retry-After`) unless
/// the attempts are used up; anything else fails the document now.
async fn fail(
    db: &DatabaseConnection,
    policy: &BacklogPolicy,
    claim: &Claim,
    embedded: usize,
    error: EmbedError,
    now: i64,
) -> Result<Worked, DbErr> {
    let attempts = claim.attempts.saturating_add(1);
    let message = error.to_string();
    let (status, wait) = match &error {
        EmbedError::Unavailable { retry_after, .. } if attempts < policy.max_attempts => {
            let backoff = Duration::from_millis(u64::try_from(policy.retry.delay_ms(attempts)).unwrap_or_default());
            (IndexingStatus::Pending, Some(retry_after.map_or(backoff, |asked| asked.max(backoff))))
        }
        _ => (IndexingStatus::Failed, None),
    };
    let available_at = wait.map(|wait| now + i64::try_from(wait.as_millis()).unwrap_or(i64::MAX / 2));
    tracing::warn!(document.id = %claim.id, attempts, error = %message, "embedding a document failed");
    settle(db, claim, status, Some(message), available_at, attempts).await?;
    Ok(match (error.is_transient(), wait) {
        (true, Some(wait)) => Worked::Unavailable { wait },
        _ => Worked::Document { id: claim.id, embedded, status },
    })
}

/// Ends the claim with this status, fenced; false when the lock was lost.
async fn settle(
    db: &DatabaseConnection,
    claim: &Claim,
    status: IndexingStatus,
    error: Option<String>,
    available_at: Option<i64>,
    attempts: i32,
) -> Result<bool, DbErr> {
    let result = document::Entity::update_many()
        .col_expr(document::Column::IndexingStatus, Expr::value(status))
        .col_expr(document::Column::IndexingError, Expr::value(error))
        .col_expr(document::Column::IndexingAttempts, Expr::value(attempts))
        .col_expr(document::Column::IndexingAvailableAt, Expr::value(available_at))
        .col_expr(document::Column::IndexingLockToken, Expr::value(Option::<Uuid>::None))
        .col_expr(document::Column::IndexingLockedBy, Expr::value(Option::<String>::None))
        .col_expr(document::Column::IndexingLockedUntil, Expr::value(Option::<i64>::None))
        .filter(fenced(claim))
        .exec(db)
        .await?;
    Ok(result.rows_affected == 1)
}

/// Gives the claim back untouched (the worker is stopping).
async fn release(db: &DatabaseConnection, claim: &Claim) -> Result<(), DbErr> {
    document::Entity::update_many()
        .col_expr(document::Column::IndexingLockToken, Expr::value(Option::<Uuid>::None))
        .col_expr(document::Column::IndexingLockedBy, Expr::value(Option::<String>::None))
        .col_expr(document::Column::IndexingLockedUntil, Expr::value(Option::<i64>::None))
        .filter(fenced(claim))
        .exec(db)
        .await
        .map(|_| ())
}

/// Brings statuses in line with the configuration at start: with no endpoint, nothing
/// waits for embeddings (`pending` and `failed` become `ready`); with one, failed
/// documents get a fresh set of attempts, and ready documents whose passages lack vectors
/// of the configured model (embeddings newly turned on, or a new model) wait again.
pub async fn reconcile(db: &DatabaseConnection, model: Option<&str>, now: i64) -> Result<u64, DbErr> {
    let Some(model) = model else {
        let result = document::Entity::update_many()
            .col_expr(document::Column::IndexingStatus, Expr::value(IndexingStatus::Ready))
            .col_expr(document::Column::IndexingError, Expr::value(Option::<String>::None))
            .filter(document::Column::IndexingStatus.ne(IndexingStatus::Ready))
            .exec(db)
            .await?;
        return Ok(result.rows_affected);
    };
    let retried = document::Entity::update_many()
        .col_expr(document::Column::IndexingStatus, Expr::value(IndexingStatus::Pending))
        .col_expr(document::Column::IndexingAttempts, Expr::value(0))
        .col_expr(document::Column::IndexingAvailableAt, Expr::value(now))
        .filter(document::Column::IndexingStatus.eq(IndexingStatus::Failed))
        .exec(db)
        .await?
        .rows_affected;
    let backend = db.get_database_backend();
    let (status_ready, status_pending) = ("ready", "pending");
    let sql = format!(
        r#"UPDATE "knowledge_documents" SET "indexing_status" = '{status_pending}', "indexing_available_at" = {now}
           WHERE "indexing_status" = '{status_ready}' AND EXISTS (
             SELECT 1 FROM "knowledge_passages" p WHERE p."document_id" = "knowledge_documents"."id"
               AND NOT EXISTS (SELECT 1 FROM "knowledge_passage_embeddings" e
                               WHERE e."passage_id" = p."id" AND e."model" = {model_mark}))"#,
        model_mark = if crate::db::is_postgres(backend) { "$1" } else { "?" },
    );
    let stale = db.execute_raw(Statement::from_sql_and_values(backend, sql, [model.into()])).await?.rows_affected();
    Ok(retried + stale)
}
