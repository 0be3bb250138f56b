//! The extraction loop's step: an uploaded file's text becomes its document's content and
//! passages, in the worker, never in the request that uploaded it. A step leases the file
//! that has waited longest, reads its bytes (the one copy in memory), extracts the text
//! ([`super::extract`], bounded in time, memory and size), records `splitting`, splits it
//! (a PDF's passages learn their pages) and writes it all in one fenced transaction. A
//! file that cannot be read fails its document with the reason; a worker that stops
//! midway gives the lease back.
use entity::{FileMediaType, FileState, IndexingStatus};
use sea_orm::{DatabaseConnection, DbErr};
use tokio_util::sync::CancellationToken;
use uuid::Uuid;

use super::chunk::{ChunkSettings, chunk};
use super::extract::{self, ExtractSettings, Extracted, Unreadable};
use super::index::initial_status;
use super::pages::chunk_pages;
use crate::store::files::{self, ExtractedText, FileLease, MAX_ATTEMPTS};

/// How uploads are extracted and indexed.
#[derive(Debug, Clone)]
pub struct ExtractionPolicy {
    /// Extraction's limits.
    pub extract: ExtractSettings,
    /// The most text one file may give (`KFS_MAX_EXTRACTED_BYTES`).
    pub max_extracted_bytes: usize,
    /// How the text is split.
    pub chunk: ChunkSettings,
    /// Whether an embeddings endpoint will embed the passages.
    pub embeddings_on: bool,
}

impl ExtractionPolicy {
    /// How long a lease lasts: an extraction's time limit, the split and the writes.
    pub fn lock_ms(&self) -> i64 {
        i64::try_from(self.extract.timeout_ms).unwrap_or(i64::MAX / 4).saturating_add(120_000)
    }
}

/// What one step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extraction {
    /// No file was due.
    Idle,
    /// A file was worked.
    File {
        /// Its document.
        document_id: Uuid,
        /// Where it ended: done, failed, or still extracting (the lease was given back or
        /// lost to a replacement or removal).
        state: FileState,
    },
}

/// Leases the file that has waited longest and extracts it.
pub async fn extract_due(
    db: &DatabaseConnection,
    policy: &ExtractionPolicy,
    stop: &CancellationToken,
    now: impl Fn() -> i64,
) -> Result<Extraction, DbErr> {
    let Some(lease) = files::lease_due(db, policy.lock_ms(), now()).await? else {
        return Ok(Extraction::Idle);
    };
    let worked = |state| Ok(Extraction::File { document_id: lease.document_id, state });
    if lease.attempts > MAX_ATTEMPTS {
        let message = format!("reading the file did not finish in {MAX_ATTEMPTS} attempts");
        files::fail(db, &lease, &message, now()).await?;
        return worked(FileState::Failed);
    }
    let bytes = files::read_bytes(db, &lease).await?;
    let extracted = tokio::select! {
        biased;
        () = stop.cancelled() => {
            files::release(db, &lease, now()).await?;
            return worked(FileState::Extracting);
        }
        extracted = extract::extract(bytes, lease.media_type, &policy.extract, policy.max_extracted_bytes) => extracted,
    };
    let extracted = match extracted {
        Ok(extracted) => extracted,
        Err(Unreadable(reason)) => return settle_failed(db, &lease, &reason, now()).await,
    };
    if !files::mark_splitting(db, &lease, now()).await? {
        return worked(FileState::Extracting);
    }
    let is_pdf = lease.media_type == FileMediaType::Pdf;
    let (extracted, chunks) = match split(extracted, policy.chunk, is_pdf).await {
        Ok(split) => split,
        Err(reason) => return settle_failed(db, &lease, &reason, now()).await,
    };
    let text = ExtractedText {
        content: extracted.text,
        media_type: extracted.media_type,
        chunks: &chunks,
        page_count: extracted.page_count,
        indexing_status: initial_status(policy.embeddings_on),
    };
    let state = if files::finish(db, &lease, text, now()).await? { FileState::Done } else { FileState::Extracting };
    worked(state)
}

/// Fails the file (and its document) with `reason`.
async fn settle_failed(
    db: &DatabaseConnection,
    lease: &FileLease,
    reason: &str,
    now: i64,
) -> Result<Extraction, DbErr> {
    tracing::info!(document.id = %lease.document_id, reason, "an uploaded file could not be read");
    let state = if files::fail(db, lease, reason, now).await? { FileState::Failed } else { FileState::Extracting };
    Ok(Extraction::File { document_id: lease.document_id, state })
}

/// Splits the text on the blocking pool (this loop is the bound on how many run at once);
/// a PDF page by page, so its passages know their page.
async fn split(
    extracted: Extracted,
    settings: ChunkSettings,
    is_pdf: bool,
) -> Result<(Extracted, Vec<super::chunk::Chunk>), String> {
    let split = tokio::task::spawn_blocking(move || {
        let chunks = if is_pdf {
            chunk_pages(&extracted.text, &settings)
        } else {
            chunk(&extracted.text, extracted.media_type, &settings)
        };
        Ok((extracted, chunks.map_err(|error| error.to_string())?))
    });
    split.await.unwrap_or_else(|_| Err("splitting the file's text failed".to_owned()))
}

/// The status a document shows, from its row and its file's row (`file`), read in that
/// order: its extraction while that runs, then the document's own. The two rows are read
/// in two statements, so the file may already be `done` while the document row read
/// before it still lacks the text (an extraction always writes some): that document is
/// shown as still splitting, never as ready and empty.
pub fn shown_status(file: Option<FileState>, document: &entity::knowledge_document::Model) -> ShownStatus {
    match file {
        Some(FileState::Extracting) => ShownStatus::Extracting,
        Some(FileState::Splitting) => ShownStatus::Splitting,
        Some(FileState::Done) if document.content.is_empty() => ShownStatus::Splitting,
        // An edit after the failure (a new title) resets the document's own status; the
        // file still gave no text.
        Some(FileState::Failed) => ShownStatus::Indexing(IndexingStatus::Failed),
        Some(FileState::Done) | None => ShownStatus::Indexing(document.indexing_status),
    }
}

/// A document's status as clients see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShownStatus {
    /// Its file's text is being extracted.
    Extracting,
    /// Its file's text is being split into passages.
    Splitting,
    /// Its passages' indexing status.
    Indexing(IndexingStatus),
}
