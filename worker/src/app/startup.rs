//! What a process does with stored knowledge before it serves: checks the knowledge
//! settings, splits documents stored before passages existed, and settles indexing
//! statuses. Both binaries call [`prepare`] at start.
use sea_orm::DatabaseConnection;

use entity::IndexingStatus;
use sea_orm::DbErr;

use crate::knowledge::backlog;
use crate::knowledge::chunk::ChunkSettings;
use crate::knowledge::index::{Splitter, initial_status};
use crate::lifecycle;
use crate::model_settings::EmbeddingSettings;
use crate::store::documents;

/// How many unsplit documents the backfill reads at a time.
const BACKFILL_BATCH: u64 = 20;

/// What [`prepare`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prepared {
    /// Documents split into passages (stored before passages existed, or by an older revision).
    pub split: usize,
    /// Documents whose indexing status changed to match the configuration.
    pub reconciled: u64,
    /// Whether an embeddings endpoint is configured.
    pub embeddings_on: bool,
}

/// Checks the knowledge settings and brings stored documents in line with them: splits
/// the ones without passages, and settles indexing statuses (see
/// [`backlog::reconcile`]). Both binaries call it at start; safe in several processes at
/// once.
pub async fn prepare(
    db: &DatabaseConnection,
    chunk: &ChunkSettings,
    embeddings: &EmbeddingSettings,
    now: i64,
) -> anyhow::Result<Prepared> {
    let chunk = chunk.validated().map_err(anyhow::Error::msg)?;
    let endpoint = embeddings.endpoint().map_err(anyhow::Error::msg)?;
    if let Some(endpoint) = &endpoint {
        reqwest::Url::parse(&endpoint.base_url)
            .map_err(|error| anyhow::anyhow!("KFS_EMBEDDINGS_BASE_URL is not a URL ({error})"))?;
    }
    let embeddings_on = endpoint.is_some();
    let split = backfill(db, &chunk, embeddings_on, now).await?;
    let reconciled = backlog::reconcile(db, endpoint.as_ref().map(|endpoint| endpoint.model.as_str()), now).await?;
    Ok(Prepared { split, reconciled, embeddings_on })
}

/// Splits every document whose passages are missing or from an older revision (documents
/// stored before passages existed), one transaction each; returns how many it split.
/// Safe to run in several processes at once: a split replaces the passages whole.
pub async fn backfill(
    db: &DatabaseConnection,
    settings: &ChunkSettings,
    embeddings_on: bool,
    now: i64,
) -> Result<usize, DbErr> {
    let mut split_count = 0;
    let splitter = Splitter::new(*settings);
    loop {
        let ids = documents::unsplit(db, BACKFILL_BATCH).await?;
        if ids.is_empty() {
            return Ok(split_count);
        }
        for id in ids {
            let Some(found) = documents::find_any(db, id).await? else { continue };
            // A document stored before the passage limit that splits past it is kept, but
            // fails its indexing with the reason (and is not tried again for this revision).
            let (chunks, status, error) = match splitter.split(&found.content, found.media_type).await {
                Ok(chunks) => (chunks, initial_status(embeddings_on), None),
                Err(error) => (Vec::new(), IndexingStatus::Failed, Some(error.to_string())),
            };
            // Split outside the transaction, so it holds no lock meanwhile.
            let split = lifecycle::Split { chunks, status, error };
            if lifecycle::write_split(db, &found, split, now).await? {
                split_count += 1;
            }
        }
    }
}
