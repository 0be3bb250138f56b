//! Writing a document's passages, in the transaction that writes the document: the old
//! passages (and, by cascade, their embeddings) go and the new ones come from splitting
//! the content, so a search never sees a document without its passages or with another
//! revision's. Documents stored before passages existed are split on start ([`backfill`]).
use entity::{IndexingStatus, knowledge_document as document, knowledge_passage as passage};
use sea_orm::sea_query::{Expr, ExprTrait as _};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect,
};
use serde_json::json;
use uuid::Uuid;

use super::chunk::{ChunkSettings, chunk};
use crate::db::begin_write;

/// Passages inserted per statement (13 values each, well under SQLite's variable limit).
const INSERT_BATCH: usize = 200;
/// Documents split per transaction by [`backfill`].
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

/// Replaces the document's passages with those of its current content and records the
/// revision they were split from. Call inside the transaction that wrote the document.
pub async fn write_passages<C: ConnectionTrait>(
    conn: &C,
    document: &document::Model,
    settings: &ChunkSettings,
    now: i64,
) -> Result<usize, DbErr> {
    passage::Entity::delete_many().filter(passage::Column::DocumentId.eq(document.id)).exec(conn).await?;
    let chunks = chunk(&document.content, document.media_type, settings);
    let rows: Vec<passage::ActiveModel> = chunks
        .iter()
        .map(|piece| passage::ActiveModel {
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
        })
        .collect();
    for batch in rows.chunks(INSERT_BATCH) {
        passage::Entity::insert_many(batch.to_vec()).exec_without_returning(conn).await?;
    }
    document::Entity::update_many()
        .col_expr(document::Column::IndexedRevision, Expr::value(document.revision))
        .filter(document::Column::Id.eq(document.id))
        .exec(conn)
        .await?;
    Ok(chunks.len())
}

/// Splits every document whose passages are missing or from an older revision (documents
/// stored before passages existed), a few per transaction; returns how many it split.
/// Safe to run in several processes at once: a split replaces the passages whole.
pub async fn backfill(
    db: &DatabaseConnection,
    settings: &ChunkSettings,
    embeddings_on: bool,
    now: i64,
) -> Result<usize, DbErr> {
    let mut split = 0;
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
            return Ok(split);
        }
        let txn = begin_write(db).await?;
        for id in ids {
            let Some(found) = document::Entity::find_by_id(id).one(&txn).await? else { continue };
            write_passages(&txn, &found, settings, now).await?;
            document::Entity::update_many()
                .col_expr(document::Column::IndexingStatus, Expr::value(initial_status(embeddings_on)))
                .col_expr(document::Column::IndexingAvailableAt, Expr::value(now))
                .filter(document::Column::Id.eq(id))
                .exec(&txn)
                .await?;
            split += 1;
        }
        txn.commit().await?;
    }
}
