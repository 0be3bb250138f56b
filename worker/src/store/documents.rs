//! Documents and their passages (`knowledge_documents`, `knowledge_passages`): what
//! research retrieves from. Every write replaces the document's passages in the same
//! transaction (split beforehand by `knowledge::index`), so search never sees a document
//! without its passages or with another revision's; evidence already written keeps its
//! own copy of the text.
use entity::{IndexingStatus, MediaType, knowledge_document as document, knowledge_passage as passage};
use sea_orm::sea_query::{Expr, ExprTrait as _};
use sea_orm::{
    ActiveModelTrait, ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel,
    QueryFilter, QueryOrder, QuerySelect,
};
use serde_json::{Value, json};
use uuid::Uuid;

use super::backend::{Backend, on_backend};
use super::pages::{PageKey, before};
use entity::Chunk;

/// Passages inserted per statement (16 values each, well under SQLite's variable limit).
const INSERT_BATCH: usize = 200;

/// What a new document needs.
#[derive(Debug, Clone)]
pub struct NewDocument {
    /// The space's tenant.
    pub tenant_id: String,
    /// The space it belongs to.
    pub knowledge_space_id: Uuid,
    /// A short title.
    pub title: String,
    /// The full text.
    pub content: String,
    /// What the content is written in.
    pub media_type: MediaType,
    /// Where it came from.
    pub source_uri: Option<String>,
    /// The author's own data, a JSON object.
    pub metadata: Value,
    /// The subject adding it.
    pub created_by: String,
    /// The indexing status it starts in (`knowledge::index::initial_status`).
    pub indexing_status: IndexingStatus,
}

/// The fields an edit may change; `None` keeps the current value.
#[derive(Debug, Clone, Default)]
pub struct DocumentChanges {
    /// A new title.
    pub title: Option<String>,
    /// New content.
    pub content: Option<String>,
    /// A new format.
    pub media_type: Option<MediaType>,
    /// A new source; `Some(None)` clears it.
    pub source_uri: Option<Option<String>>,
    /// New metadata.
    pub metadata: Option<Value>,
}

impl DocumentChanges {
    /// What the document's text and format will be once the changes apply to `current`:
    /// what its passages are split from.
    pub fn apply_to<'a>(&'a self, current: &'a document::Model) -> (&'a str, MediaType) {
        let content = self.content.as_deref().unwrap_or(&current.content);
        (content, self.media_type.unwrap_or(current.media_type))
    }
}

/// Inserts the document and its passages (`chunks`, split from its content by
/// `worker::knowledge::index::split` before the transaction began).
pub async fn add<C: ConnectionTrait>(
    conn: &C,
    new: NewDocument,
    chunks: &[Chunk],
    now: i64,
) -> Result<document::Model, DbErr> {
    let row = document::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(new.tenant_id),
        knowledge_space_id: Set(new.knowledge_space_id),
        title: Set(new.title),
        content: Set(new.content),
        created_by: Set(new.created_by),
        created_at: Set(now),
        updated_at: Set(now),
        media_type: Set(new.media_type),
        source_uri: Set(new.source_uri),
        metadata: Set(new.metadata),
        revision: Set(1),
        indexed_revision: Set(None),
        indexing_status: Set(new.indexing_status),
        indexing_error: Set(None),
        indexing_attempts: Set(0),
        indexing_available_at: Set(Some(now)),
        indexing_lock_token: Set(None),
        indexing_locked_by: Set(None),
        indexing_locked_until: Set(None),
        updated_by: Set(None),
    };
    let inserted = document::Entity::insert(row).exec_with_returning(conn).await?;
    write_passages(conn, &inserted, chunks, now).await?;
    Ok(document::Model { indexed_revision: Some(inserted.revision), ..inserted })
}

/// Applies `changes` as a new revision with its passages (`chunks`, split from the
/// changed content beforehand: [`DocumentChanges::apply_to`] says what that is). The
/// embedding state starts over in `indexing_status`, and its lock is cleared, which fences
/// out an embedding run of the old revision.
pub async fn update<C: ConnectionTrait>(
    conn: &C,
    current: document::Model,
    changes: DocumentChanges,
    editor: &str,
    chunks: &[Chunk],
    indexing_status: IndexingStatus,
    now: i64,
) -> Result<document::Model, DbErr> {
    let revision = current.revision + 1;
    let mut row = current.into_active_model();
    if let Some(title) = changes.title {
        row.title = Set(title);
    }
    if let Some(content) = changes.content {
        row.content = Set(content);
    }
    if let Some(media_type) = changes.media_type {
        row.media_type = Set(media_type);
    }
    if let Some(source_uri) = changes.source_uri {
        row.source_uri = Set(source_uri);
    }
    if let Some(metadata) = changes.metadata {
        row.metadata = Set(metadata);
    }
    row.revision = Set(revision);
    row.updated_at = Set(now);
    row.updated_by = Set(Some(editor.to_owned()));
    row.indexing_status = Set(indexing_status);
    row.indexing_error = Set(None);
    row.indexing_attempts = Set(0);
    row.indexing_available_at = Set(Some(now));
    row.indexing_lock_token = Set(None);
    row.indexing_locked_by = Set(None);
    row.indexing_locked_until = Set(None);
    let updated = row.update(conn).await?;
    write_passages(conn, &updated, chunks, now).await?;
    Ok(document::Model { indexed_revision: Some(revision), ..updated })
}

/// Deletes the document; its passages and their embeddings go with it (by cascade).
pub async fn remove<C: ConnectionTrait>(conn: &C, document: document::Model) -> Result<(), DbErr> {
    document::Entity::delete_by_id(document.id).exec(conn).await.map(|_| ())
}

/// The document with this id in this tenant.
pub async fn find<C: ConnectionTrait>(conn: &C, tenant_id: &str, id: Uuid) -> Result<Option<document::Model>, DbErr> {
    document::Entity::find_by_id(id).filter(document::Column::TenantId.eq(tenant_id)).one(conn).await
}

/// [`find`], locking the row until the transaction ends, so two edits of one document
/// apply one after the other.
pub async fn lock<C: ConnectionTrait>(txn: &C, tenant_id: &str, id: Uuid) -> Result<Option<document::Model>, DbErr> {
    Ok(lock_any(txn, id).await?.filter(|document| document.tenant_id == tenant_id))
}

/// Reads the document (any tenant's) and locks its row until the transaction ends
/// (SQLite's write transactions hold the one write lock already).
pub async fn lock_any<C: ConnectionTrait>(txn: &C, id: Uuid) -> Result<Option<document::Model>, DbErr> {
    on_backend!(txn, |B| B::locking_rows(document::Entity::find_by_id(id))).one(txn).await
}

/// The document by id alone (any tenant's).
pub async fn find_any<C: ConnectionTrait>(conn: &C, id: Uuid) -> Result<Option<document::Model>, DbErr> {
    document::Entity::find_by_id(id).one(conn).await
}

/// Replaces the document's passages with `chunks` (split from its current content) and
/// records the revision they belong to. Call inside the transaction that wrote the
/// document.
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
            page_start: Set(piece.pages.map(|(first, _)| first)),
            page_end: Set(piece.pages.map(|(_, last)| last)),
            source_map: Set(Some(piece.source_map.encode())),
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

/// What full-text search weighs with a passage's text: the document's title and the
/// headings above the passage.
fn context(title: &str, headings: &[String]) -> String {
    std::iter::once(title).chain(headings.iter().map(String::as_str)).collect::<Vec<_>>().join(" › ")
}

/// Up to `limit` ids of documents whose passages are missing or from an older revision
/// (stored before passages existed), in id order.
pub async fn unsplit<C: ConnectionTrait>(conn: &C, limit: u64) -> Result<Vec<Uuid>, DbErr> {
    let stale = Condition::any()
        .add(document::Column::IndexedRevision.is_null())
        .add(Expr::col(document::Column::IndexedRevision).not_equals(document::Column::Revision));
    document::Entity::find()
        .select_only()
        .column(document::Column::Id)
        .filter(stale)
        .order_by_asc(document::Column::Id)
        .limit(limit)
        .into_tuple()
        .all(conn)
        .await
}

/// Sets the document's indexing status (and error) as of `now`, when it is due again.
pub async fn set_indexing<C: ConnectionTrait>(
    txn: &C,
    id: Uuid,
    status: IndexingStatus,
    error: Option<String>,
    now: i64,
) -> Result<(), DbErr> {
    document::Entity::update_many()
        .col_expr(document::Column::IndexingStatus, Expr::value(status))
        .col_expr(document::Column::IndexingError, Expr::value(error))
        .col_expr(document::Column::IndexingAvailableAt, Expr::value(now))
        .filter(document::Column::Id.eq(id))
        .exec(txn)
        .await?;
    Ok(())
}

/// One page of a space's documents, newest first.
pub async fn page<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    knowledge_space_id: Uuid,
    after: Option<PageKey>,
    limit: u64,
) -> Result<Vec<document::Model>, DbErr> {
    let mut query = document::Entity::find()
        .filter(document::Column::TenantId.eq(tenant_id))
        .filter(document::Column::KnowledgeSpaceId.eq(knowledge_space_id));
    if let Some(key) = after {
        query = query.filter(before(document::Column::CreatedAt, document::Column::Id, key));
    }
    query.order_by_desc(document::Column::CreatedAt).order_by_desc(document::Column::Id).limit(limit).all(conn).await
}

/// Up to `limit` passages of a document after the one numbered `after` (-1 for the
/// first), in order.
pub async fn passages<C: ConnectionTrait>(
    conn: &C,
    document_id: Uuid,
    after: i32,
    limit: u64,
) -> Result<Vec<passage::Model>, DbErr> {
    passage::Entity::find()
        .filter(passage::Column::DocumentId.eq(document_id))
        .filter(passage::Column::Ordinal.gt(after))
        .order_by_asc(passage::Column::Ordinal)
        .limit(limit)
        .all(conn)
        .await
}
