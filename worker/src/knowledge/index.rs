//! Splitting documents into passages, before the transaction that writes them (the store
//! replaces the old passages, and by cascade their embeddings, in it), so a search never
//! sees a document without its passages or with another revision's. Documents stored
//! before passages existed are split on start (`app::startup::backfill`).
use entity::{IndexingStatus, MediaType};

use super::chunk::{Chunk, ChunkSettings, TooManyPassages, chunk};
use super::pages::chunk_pages;

/// How documents are indexed as they are written.
#[derive(Debug, Clone, Copy)]
pub struct Indexing {
    /// How they are split into passages.
    pub chunk: ChunkSettings,
    /// Whether an embeddings endpoint will embed the passages later.
    pub embeddings_on: bool,
}

impl Indexing {
    /// What the settings ask for (an incomplete embeddings configuration counts as off;
    /// start-up refuses it before anything is written).
    pub fn from_settings(chunk: ChunkSettings, embeddings: &crate::model_settings::EmbeddingSettings) -> Self {
        let embeddings_on = matches!(embeddings.endpoint(), Ok(Some(_)));
        Self { chunk, embeddings_on }
    }
}

/// The status a document written now starts in: waiting for its embeddings when an
/// endpoint is configured, ready when full-text search is all there is.
pub fn initial_status(embeddings_on: bool) -> IndexingStatus {
    if embeddings_on { IndexingStatus::Pending } else { IndexingStatus::Ready }
}

/// Content above this size is split on the blocking pool, and waits for its turn: a
/// 5 MiB document takes a fraction of a second and some megabytes, which must neither
/// stall the async threads serving everyone else nor happen for many at once.
const SPLIT_ON_POOL_BYTES: usize = 64 * 1024;

/// Why a document was not split.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SplitError {
    /// It splits into more passages than a document may hold.
    #[error(transparent)]
    TooManyPassages(#[from] TooManyPassages),
    /// Every turn was taken for as long as a caller waits: come back after this long.
    #[error("too many documents are being split at once; try again shortly")]
    Busy {
        /// When to try again.
        retry_after: std::time::Duration,
    },
}

/// Splits documents into passages, at most `KFS_CHUNK_CONCURRENCY` large ones at a time
/// in this process (small ones, under 64 KiB, need no turn): a caller waits up to
/// `KFS_CHUNK_WAIT_MS` for a turn and is then told to come back, so a burst of large
/// documents costs a bounded amount of memory and CPU. One per process, shared by every
/// caller; clones share the turns.
#[derive(Debug, Clone)]
pub struct Splitter {
    settings: ChunkSettings,
    turns: std::sync::Arc<tokio::sync::Semaphore>,
}

impl Splitter {
    /// A splitter with `settings`' passage sizes, limit and turns.
    pub fn new(settings: ChunkSettings) -> Self {
        Self { settings, turns: std::sync::Arc::new(tokio::sync::Semaphore::new(settings.concurrency.max(1))) }
    }

    /// The settings it splits with.
    pub fn settings(&self) -> &ChunkSettings {
        &self.settings
    }

    /// Splits content into passages, off the async threads when it is large. Call it
    /// before the write transaction opens, so no lock is held while splitting.
    pub async fn split(&self, content: &str, media: MediaType) -> Result<Vec<Chunk>, SplitError> {
        self.split_as(content, media, false).await
    }

    /// [`Self::split`], for a PDF's text (`paged`) page by page, so each passage knows its
    /// page ([`chunk_pages`]).
    pub async fn split_as(&self, content: &str, media: MediaType, paged: bool) -> Result<Vec<Chunk>, SplitError> {
        let settings = self.settings;
        let split =
            move |content: &str| if paged { chunk_pages(content, &settings) } else { chunk(content, media, &settings) };
        if content.len() < SPLIT_ON_POOL_BYTES {
            return Ok(split(content)?);
        }
        let wait = std::time::Duration::from_millis(settings.wait_ms);
        let turn = match tokio::time::timeout(wait, self.turns.clone().acquire_owned()).await {
            Ok(Ok(turn)) => turn,
            _ => return Err(SplitError::Busy { retry_after: std::time::Duration::from_secs(1) }),
        };
        let content = content.to_owned();
        let split = tokio::task::spawn_blocking(move || {
            let _turn = turn;
            split(&content)
        });
        match split.await {
            Ok(chunks) => Ok(chunks?),
            // The closure does not panic on any input (the chunker's tests and the fuzzing
            // of the API say so); if it ever did, the panic is the bug to see.
            Err(error) => std::panic::resume_unwind(error.into_panic()),
        }
    }
}
