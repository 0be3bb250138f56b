//! The embedding backlog: documents whose `indexing_status` is `pending` wait for their
//! passages' embeddings. A worker loop leases one document at a time (the
//! `indexing_lock_*` columns, as jobs are leased), embeds its passages in batches and
//! writes each batch fenced by the lock token and the document's revision, so an edit or
//! removal made meanwhile (which clears the lock) turns the rest of the run into a no-op.
//! An endpoint that is down or rate limited puts the document back with a backoff that
//! honours `Retry-After`, up to `max_attempts`; a response that cannot be right fails the
//! document at once. Either way full-text search keeps finding it.
use std::time::Duration;

use entity::{IndexingStatus, knowledge_passage_embedding as embedding};
use sea_orm::{DatabaseConnection, DbErr};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::embeddings::{EmbedError, Embedder};
use super::vectors;
use crate::retry::RetryPolicy;
use crate::store::embeddings::{self, DocumentLease, Settled};

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

/// Claims the document that has waited longest and embeds what its passages lack.
pub async fn embed_due(
    db: &DatabaseConnection,
    embedder: &Embedder,
    policy: &BacklogPolicy,
    stop: &CancellationToken,
    now: impl Fn() -> i64,
) -> Result<Worked, DbErr> {
    let Some(claim) = embeddings::lease_due(db, &policy.worker_id, policy.lock_ms, now()).await? else {
        return Ok(Worked::Idle);
    };
    let mut embedded = 0;
    loop {
        if stop.is_cancelled() {
            embeddings::release(db, &claim).await?;
            return Ok(Worked::Document { id: claim.id, embedded, status: IndexingStatus::Pending });
        }
        let batch = embeddings::unembedded(db, claim.id, embedder.model(), policy.batch_size).await?;
        if batch.is_empty() {
            let ready = Settled { status: IndexingStatus::Ready, error: None, available_at: None, attempts: 0 };
            let status = if embeddings::settle(db, &claim, ready).await? {
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
        let at = now();
        let rows = batch
            .iter()
            .zip(&vectors)
            .map(|(passage, vector)| embedding::Model {
                passage_id: passage.id,
                tenant_id: passage.tenant_id.clone(),
                knowledge_space_id: passage.knowledge_space_id,
                model: embedder.model().to_owned(),
                dimensions: i32::try_from(vector.len()).unwrap_or(i32::MAX),
                vector: vectors::to_le_bytes(vector),
                created_at: at,
            })
            .collect();
        if !embeddings::write_vectors(db, &claim, rows, at + policy.lock_ms).await? {
            // Edited, removed or re-leased meanwhile: the new revision starts over.
            return Ok(Worked::Document { id: claim.id, embedded, status: IndexingStatus::Pending });
        }
        embedded += batch.len();
    }
}

/// Records a failed request: a transient failure waits (at least `Retry-After`) unless
/// the attempts are used up; anything else fails the document now.
async fn fail(
    db: &DatabaseConnection,
    policy: &BacklogPolicy,
    claim: &DocumentLease,
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
    embeddings::settle(db, claim, Settled { status, error: Some(message), available_at, attempts }).await?;
    Ok(match (error.is_transient(), wait) {
        (true, Some(wait)) => Worked::Unavailable { wait },
        _ => Worked::Document { id: claim.id, embedded, status },
    })
}

/// Brings statuses in line with the configuration at start: with no endpoint, nothing
/// waits for embeddings (`pending` and `failed` become `ready`); with one, failed
/// documents get a fresh set of attempts, and ready documents whose passages lack vectors
/// of the configured model (embeddings newly turned on, or a new model) wait again.
pub async fn reconcile(db: &DatabaseConnection, model: Option<&str>, now: i64) -> Result<u64, DbErr> {
    match model {
        None => embeddings::mark_all_ready(db).await,
        Some(model) => embeddings::requeue_for_model(db, model, now).await,
    }
}
