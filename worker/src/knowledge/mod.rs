//! A space's knowledge as research uses it: documents split into passages (`chunk`), the
//! passages written with each document (`index`), searched by full text and by vector
//! (`search`, fused in `retrieve`; research's reranker may reorder them),
//! with embeddings made in the background by an
//! OpenAI-compatible endpoint (`embeddings`, `backlog`) and stored portably (`vectors`).
pub mod backlog;
pub mod chunk;
pub mod embeddings;
pub mod extract;
pub mod index;
pub mod pages;
pub mod retrieve;
pub mod search;
pub mod uploads;
pub mod vectors;

use sea_orm::DatabaseConnection;

use crate::knowledge::chunk::ChunkSettings;
use crate::model_settings::EmbeddingSettings;

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
    let split = index::backfill(db, &chunk, embeddings_on, now).await?;
    let reconciled = backlog::reconcile(db, endpoint.as_ref().map(|endpoint| endpoint.model.as_str()), now).await?;
    Ok(Prepared { split, reconciled, embeddings_on })
}
