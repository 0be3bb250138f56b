//! Writing a document's passages, in the transaction that writes the document: the old
//! passages (and, by cascade, their embeddings) go and the new ones come from splitting
//! the content, so a search never sees a document without its passages or with another
//! revision's. Documents stored before passages existed are split on start ([`backfill`]).
use entity::{IndexingStatus, MediaType, knowledge_document as document, knowledge_passage as passage};
use sea_orm::sea_query::{Expr, ExprTrait as _};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect,
};
use serde_json::json;
use uuid::Uuid;

use super::chunk::{Chunk, ChunkSettings, TooManyPassages, chunk};
use crate::store::begin_write;

/// Passages inserted per statement (13 values each, well under SQLite's variable limit).
const INSERT_BATCH: usize = 200;
/// Documents [`backfill`] looks up at a time.
const BACKFILL_BATCH: u64 = 20;

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
    pub fn from_settings(settings: &crate::config::WorkerSettings) -> Self {
        let embeddings_on = matches!(settings.embeddings.endpoint(), Ok(Some(_)));
        Self { chunk: settings.chunk, embeddings_on }
    }
}

/// The status a document written now starts in: waiting for its embeddings when an
/// endpoint is configured, ready when full-text search is all there is.
pub fn initial_status(embeddings_on: bool) -> IndexingStatus {
    if embeddings_on { IndexingStatus::Pending } else { IndexingStatus::Ready }
}

/// What full-text search weighs with a passage's text: the document's title and the
/// headings above the passage.
fn context(title: &str, headings: &[String]) -> String {
    std::iter::once(title).chain(headings.iter().map(String::as_str)).collect::<Vec<_>>().join(" › ")
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
        let settings = self.settings;
        if content.len() < SPLIT_ON_POOL_BYTES {
            return Ok(chunk(content, media, &settings)?);
        }
        let wait = std::time::Duration::from_millis(settings.wait_ms);
        let turn = match tokio::time::timeout(wait, self.turns.clone().acquire_owned()).await {
            Ok(Ok(turn)) => turn,
            _ => return Err(SplitError::Busy { retry_after: std::time::Duration::from_secs(1) }),
        };
        let content = content.to_owned();
        let split = tokio::task::spawn_blocking(move || {
            let _turn = turn;
            chunk(&content, media, &settings)
        });
        match split.await {
            Ok(chunks) => Ok(chunks?),
            // The closure does not panic on any input (the chunker's tests and the fuzzing
            // of the API say so); if it ever did, the panic is the bug to see.
            Err(error) => std::panic::resume_unwind(error.into_panic()),
        }
    }
}

/// Replaces the document's passages with `chunks` (split from its current content by
/// [`split`]) and records the revision they belong to. Call inside the transaction that
/// wrote the document.
pub async fn write_passages<C: ConnectionTrait>(
    conn: &C,
    document: &document::Model,
    chunks: &[Chunk],
    now: i64,
) -> Result<usize, DbErr> {
    passage::Entity::delete_many().filter(passage::Column::DocumentId.eq(document.id)).exec(conn).await?;
    // Rows are built a batch at a time: a document's passages are held once, as chunks.
    for batch in chunks.chunks(INSERT_BATCH) {
        let rows = batch.iter().map(|piece| passage::ActiveModel {
            id: Set(Uuid::now_v7()),
            tenant_id: Set(document.tenant_id.clone()),
            knowledge_space_id: Set(document.knowledge_space_id),
            document_id: Set(document.id),
            document_revision: Set(document.revision),
            ordinal: Set(piece.ordinal),
            char_start: Set(i32::try_from(piece.char_start).unwrap_or(i32::MAX)),
            char_end: Set(i32::try_from(piece.char_end).unwrap_or(i32::MAX)),
            heading_path: Set(json!(piece.heading_path)),
            context: Set(context(&document.title, &piece.heading_path)),
            text: Set(piece.text.clone()),
            token_count: Set(i32::try_from(piece.tokens).unwrap_or(i32::MAX)),
            created_at: Set(now),
        });
        passage::Entity::insert_many(rows).exec_without_returning(conn).await?;
    }
    document::Entity::update_many()
        .col_expr(document::Column::IndexedRevision, Expr::value(document.revision))
        .filter(document::Column::Id.eq(document.id))
        .exec(conn)
        .await?;
    Ok(chunks.len())
}

/// Reads the document and locks its row until the transaction ends (SQLite write
/// transactions hold the one write lock already).
pub async fn lock_document<C: ConnectionTrait>(txn: &C, id: Uuid) -> Result<Option<document::Model>, DbErr> {
    let mut query = document::Entity::find_by_id(id);
    if txn.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
        query = query.lock(sea_orm::sea_query::LockType::Update);
    }
    query.one(txn).await
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
        let stale = Condition::any()
            .add(document::Column::IndexedRevision.is_null())
            .add(Expr::col(document::Column::IndexedRevision).not_equals(document::Column::Revision));
        let ids: Vec<Uuid> = document::Entity::find()
            .select_only()
            .column(document::Column::Id)
            .filter(stale)
            .order_by_asc(document::Column::Id)
            .limit(BACKFILL_BATCH)
            .into_tuple()
            .all(db)
            .await?;
        if ids.is_empty() {
            return Ok(split_count);
        }
        for id in ids {
            let Some(found) = document::Entity::find_by_id(id).one(db).await? else { continue };
            // A document stored before the passage limit that splits past it is kept, but
            // fails its indexing with the reason (and is not tried again for this revision).
            let (chunks, status, error) = match splitter.split(&found.content, found.media_type).await {
                Ok(chunks) => (chunks, initial_status(embeddings_on), None),
                Err(error) => (Vec::new(), IndexingStatus::Failed, Some(error.to_string())),
            };
            let txn = begin_write(db).await?;
            // Split outside the transaction, so it holds no lock meanwhile; an edit that
            // came in between has written its own passages, so this one stands aside.
            match lock_document(&txn, id).await? {
                Some(current) if current.revision == found.revision => {
                    write_passages(&txn, &current, &chunks, now).await?;
                    document::Entity::update_many()
                        .col_expr(document::Column::IndexingStatus, Expr::value(status))
                        .col_expr(document::Column::IndexingError, Expr::value(error))
                        .col_expr(document::Column::IndexingAvailableAt, Expr::value(now))
                        .filter(document::Column::Id.eq(id))
                        .exec(&txn)
                        .await?;
                    txn.commit().await?;
                    split_count += 1;
                }
                _ => txn.rollback().await?,
            }
        }
    }
}
