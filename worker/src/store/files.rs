//! Uploaded files (`knowledge_document_files`, `knowledge_document_file_parts`): a
//! document made from a PDF or Word file, the file's bytes in parts, and the extraction
//! lease the worker's loop takes. Every write of the extraction is fenced by the lease
//! token and the document revision the file belongs to, so a file replaced, a document
//! removed or a lease taken over meanwhile turns the rest of a run into a no-op.
use std::collections::HashMap;

use entity::{
    FileMediaType, FileState, IndexingStatus, MediaType, knowledge_document as document,
    knowledge_document_file as file, knowledge_document_file_part as part,
};
use sea_orm::sea_query::{Expr, ExprTrait as _};
use sea_orm::{
    ActiveValue::Set, ColumnTrait, Condition, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, QueryFilter,
    QueryOrder, QuerySelect,
};
use uuid::Uuid;

use super::backend::{Backend, on_backend};
use super::begin_write;
use super::documents::{self, NewDocument};
use entity::Chunk;

/// The most bytes one part holds: a file is written and read a part at a time.
pub const PART_BYTES: usize = 1 << 20;

/// Extraction attempts of one file before it fails (a worker that died mid-run, or a
/// file that kills the reader every time).
pub const MAX_ATTEMPTS: i32 = 3;

/// What an upload stores besides its document.
#[derive(Debug, Clone)]
pub struct NewFile {
    /// The name it was uploaded with.
    pub file_name: String,
    /// What its bytes are.
    pub media_type: FileMediaType,
    /// Its size.
    pub byte_size: i64,
}

/// Inserts a document made from an upload, empty until its file is extracted, and the
/// file's row (due for extraction now); the parts follow with [`write_part`] in the same
/// transaction.
pub async fn add_upload<C: ConnectionTrait>(
    txn: &C,
    new: NewDocument,
    upload: NewFile,
    now: i64,
) -> Result<(document::Model, file::Model), DbErr> {
    let document = documents::add(txn, NewDocument { content: String::new(), ..new }, &[], now).await?;
    let row = insert_file(txn, &document, upload, now).await?;
    Ok((document, row))
}

/// Makes `current` a new revision waiting for the file `upload`: its text and passages go
/// until the new file is extracted, and the old file with its parts is deleted. Call in
/// the transaction that locked the document; the parts follow with [`write_part`].
pub async fn replace<C: ConnectionTrait>(
    txn: &C,
    current: document::Model,
    editor: &str,
    upload: NewFile,
    now: i64,
) -> Result<(document::Model, file::Model), DbErr> {
    file::Entity::delete_by_id(current.id).exec(txn).await?;
    let changes = documents::DocumentChanges { content: Some(String::new()), ..Default::default() };
    let document = documents::update(txn, current, changes, editor, &[], IndexingStatus::Ready, now).await?;
    let row = insert_file(txn, &document, upload, now).await?;
    Ok((document, row))
}

async fn insert_file<C: ConnectionTrait>(
    txn: &C,
    document: &document::Model,
    upload: NewFile,
    now: i64,
) -> Result<file::Model, DbErr> {
    let row = file::ActiveModel {
        document_id: Set(document.id),
        tenant_id: Set(document.tenant_id.clone()),
        knowledge_space_id: Set(document.knowledge_space_id),
        file_name: Set(upload.file_name),
        media_type: Set(upload.media_type),
        byte_size: Set(upload.byte_size),
        document_revision: Set(document.revision),
        state: Set(FileState::Extracting),
        error: Set(None),
        attempts: Set(0),
        available_at: Set(Some(now)),
        lock_token: Set(None),
        locked_until: Set(None),
        page_count: Set(None),
        created_at: Set(now),
        updated_at: Set(now),
    };
    file::Entity::insert(row).exec_with_returning(txn).await
}

/// Stores part `index` (0, 1, 2…) of the document's file.
pub async fn write_part<C: ConnectionTrait>(
    conn: &C,
    document_id: Uuid,
    index: i32,
    bytes: Vec<u8>,
) -> Result<(), DbErr> {
    let row = part::ActiveModel { document_id: Set(document_id), part: Set(index), bytes: Set(bytes) };
    part::Entity::insert(row).exec_without_returning(conn).await.map(|_| ())
}

/// The document's file, if it was uploaded as one.
pub async fn find<C: ConnectionTrait>(conn: &C, document_id: Uuid) -> Result<Option<file::Model>, DbErr> {
    file::Entity::find_by_id(document_id).one(conn).await
}

/// The files of many documents (already read through their space's scope), by document.
pub async fn of_documents<C: ConnectionTrait>(conn: &C, ids: &[Uuid]) -> Result<HashMap<Uuid, file::Model>, DbErr> {
    if ids.is_empty() {
        return Ok(HashMap::new());
    }
    let rows = file::Entity::find().filter(file::Column::DocumentId.is_in(ids.iter().copied())).all(conn).await?;
    Ok(rows.into_iter().map(|row| (row.document_id, row)).collect())
}

/// The file bytes a tenant has stored (what the upload quota counts).
pub async fn stored_bytes<C: ConnectionTrait>(conn: &C, tenant_id: &str) -> Result<i64, DbErr> {
    let total: Option<Option<i64>> = file::Entity::find()
        .select_only()
        .column_as(Expr::col(file::Column::ByteSize).sum().cast_as("BIGINT"), "total")
        .filter(file::Column::TenantId.eq(tenant_id))
        .into_tuple()
        .one(conn)
        .await?;
    Ok(total.flatten().unwrap_or(0))
}

/// The parts stored for a document (the tests check that removed bytes are gone).
#[cfg(feature = "testing")]
pub async fn part_count<C: ConnectionTrait>(conn: &C, document_id: Uuid) -> Result<u64, DbErr> {
    use sea_orm::PaginatorTrait as _;
    part::Entity::find().filter(part::Column::DocumentId.eq(document_id)).count(conn).await
}

/// A file the extraction loop holds.
#[derive(Debug, Clone)]
pub struct FileLease {
    /// The file's document.
    pub document_id: Uuid,
    /// The lease's token: every write checks it.
    pub token: Uuid,
    /// What the file is, as stored.
    pub media_type: FileMediaType,
    /// Its size.
    pub byte_size: i64,
    /// Attempts including this one.
    pub attempts: i32,
}

/// Leases a due file (not leased, or whose lease ran out) for `lock_ms`, fairly across
/// tenants: the tenant with the fewest files being extracted right now goes first, then
/// the one whose oldest due file has waited longest, and within it its oldest file, so
/// one tenant's backlog of slow files delays another's upload by at most one extraction
/// per slot. Counts the attempt. PostgreSQL skips rows another worker is leasing right
/// now; SQLite's write transaction is the one lock.
pub async fn lease_due(db: &DatabaseConnection, lock_ms: i64, now: i64) -> Result<Option<FileLease>, DbErr> {
    let txn = begin_write(db).await?;
    let due = || {
        let unleased =
            Condition::any().add(file::Column::LockedUntil.is_null()).add(file::Column::LockedUntil.lte(now));
        file::Entity::find()
            .filter(file::Column::State.is_in([FileState::Extracting, FileState::Splitting]))
            .filter(file::Column::AvailableAt.lte(now))
            .filter(unleased)
    };
    let oldest = |tenant: Option<String>| {
        let mut query = due().order_by_asc(file::Column::AvailableAt).order_by_asc(file::Column::DocumentId).limit(1);
        if let Some(tenant) = tenant {
            query = query.filter(file::Column::TenantId.eq(tenant));
        }
        on_backend!(&txn, |B| B::skipping_locked_rows(query))
    };
    // An idle loop (nothing due) costs this one grouped read.
    let Some(fairest) = fairest_tenant(&txn, now).await? else {
        txn.rollback().await?;
        return Ok(None);
    };
    let mut found = oldest(Some(fairest)).one(&txn).await?;
    if found.is_none() {
        // Another worker locked that tenant's due file meanwhile: take any other.
        found = oldest(None).one(&txn).await?;
    }
    let Some(due) = found else {
        txn.rollback().await?;
        return Ok(None);
    };
    let token = Uuid::now_v7();
    let attempts = due.attempts.saturating_add(1);
    file::Entity::update_many()
        .col_expr(file::Column::LockToken, Expr::value(token))
        .col_expr(file::Column::LockedUntil, Expr::value(now.saturating_add(lock_ms)))
        .col_expr(file::Column::Attempts, Expr::value(attempts))
        .col_expr(file::Column::State, Expr::value(FileState::Extracting))
        .col_expr(file::Column::UpdatedAt, Expr::value(now))
        .filter(file::Column::DocumentId.eq(due.document_id))
        .exec(&txn)
        .await?;
    txn.commit().await?;
    Ok(Some(FileLease {
        document_id: due.document_id,
        token,
        media_type: due.media_type,
        byte_size: due.byte_size,
        attempts,
    }))
}

/// The tenant whose due file goes next: the fewest files being extracted (leased and not
/// run out), then the oldest due file. Two grouped reads over the due index; `None` when
/// no file is due.
async fn fairest_tenant<C: ConnectionTrait>(txn: &C, now: i64) -> Result<Option<String>, DbErr> {
    let extracting = [FileState::Extracting, FileState::Splitting];
    let waiting: Vec<(String, Option<i64>)> = file::Entity::find()
        .select_only()
        .column(file::Column::TenantId)
        .column_as(file::Column::AvailableAt.min(), "oldest")
        .filter(file::Column::State.is_in(extracting))
        .filter(file::Column::AvailableAt.lte(now))
        .filter(Condition::any().add(file::Column::LockedUntil.is_null()).add(file::Column::LockedUntil.lte(now)))
        .group_by(file::Column::TenantId)
        .into_tuple()
        .all(txn)
        .await?;
    if waiting.len() < 2 {
        return Ok(waiting.into_iter().next().map(|(tenant, _)| tenant));
    }
    let running: HashMap<String, i64> = file::Entity::find()
        .select_only()
        .column(file::Column::TenantId)
        .column_as(file::Column::DocumentId.count(), "running")
        .filter(file::Column::State.is_in(extracting))
        .filter(file::Column::LockedUntil.gt(now))
        .group_by(file::Column::TenantId)
        .into_tuple()
        .all(txn)
        .await?
        .into_iter()
        .collect();
    let fairest = waiting.into_iter().min_by_key(|(tenant, oldest)| {
        (running.get(tenant).copied().unwrap_or(0), oldest.unwrap_or(i64::MAX), tenant.clone())
    });
    Ok(fairest.map(|(tenant, _)| tenant))
}

/// The leased file's bytes, read a part at a time into one buffer (the one copy of the
/// file this process holds).
pub async fn read_bytes<C: ConnectionTrait>(conn: &C, lease: &FileLease) -> Result<Vec<u8>, DbErr> {
    let mut bytes = Vec::with_capacity(usize::try_from(lease.byte_size).unwrap_or(0));
    let mut index = 0;
    loop {
        let found = part::Entity::find_by_id((lease.document_id, index)).one(conn).await?;
        let Some(found) = found else { return Ok(bytes) };
        bytes.extend_from_slice(&found.bytes);
        index += 1;
    }
}

/// The lease's row, locked, if the lease still holds and the file still belongs to its
/// document's current revision.
async fn fenced<C: ConnectionTrait>(txn: &C, lease: &FileLease) -> Result<Option<document::Model>, DbErr> {
    let Some(current) = documents::lock_any(txn, lease.document_id).await? else { return Ok(None) };
    let held = file::Entity::find_by_id(lease.document_id)
        .filter(file::Column::LockToken.eq(lease.token))
        .filter(file::Column::DocumentRevision.eq(current.revision))
        .one(txn)
        .await?;
    Ok(held.map(|_| current))
}

/// Records that the text is out and being split; false when the lease no longer holds.
pub async fn mark_splitting(db: &DatabaseConnection, lease: &FileLease, now: i64) -> Result<bool, DbErr> {
    let txn = begin_write(db).await?;
    if fenced(&txn, lease).await?.is_none() {
        txn.rollback().await?;
        return Ok(false);
    }
    set_state(&txn, lease.document_id, FileState::Splitting, None, now).await?;
    txn.commit().await?;
    Ok(true)
}

/// What an extraction ends with.
#[derive(Debug)]
pub struct ExtractedText<'a> {
    /// The document's text.
    pub content: String,
    /// How it was split.
    pub media_type: MediaType,
    /// Its passages.
    pub chunks: &'a [Chunk],
    /// A PDF's page count.
    pub page_count: Option<i32>,
    /// The status the document's indexing starts in (waiting for embeddings or ready).
    pub indexing_status: IndexingStatus,
}

/// Writes the extracted text and its passages into the document and settles the file;
/// false (nothing written) when the lease no longer holds.
pub async fn finish(
    db: &DatabaseConnection,
    lease: &FileLease,
    extracted: ExtractedText<'_>,
    now: i64,
) -> Result<bool, DbErr> {
    let txn = begin_write(db).await?;
    let Some(current) = fenced(&txn, lease).await? else {
        txn.rollback().await?;
        return Ok(false);
    };
    document::Entity::update_many()
        .col_expr(document::Column::Content, Expr::value(extracted.content))
        .col_expr(document::Column::MediaType, Expr::value(extracted.media_type))
        .col_expr(document::Column::IndexingStatus, Expr::value(extracted.indexing_status))
        .col_expr(document::Column::IndexingError, Expr::value(Option::<String>::None))
        .col_expr(document::Column::IndexingAvailableAt, Expr::value(now))
        .filter(document::Column::Id.eq(current.id))
        .exec(&txn)
        .await?;
    documents::write_passages(&txn, &current, extracted.chunks, now).await?;
    file::Entity::update_many()
        .col_expr(file::Column::PageCount, Expr::value(extracted.page_count))
        .filter(file::Column::DocumentId.eq(lease.document_id))
        .exec(&txn)
        .await?;
    set_state(&txn, lease.document_id, FileState::Done, None, now).await?;
    txn.commit().await?;
    Ok(true)
}

/// Fails the extraction with `error` (the document too, so `indexingStatus` says
/// `FAILED` with the reason); false when the lease no longer holds.
pub async fn fail(db: &DatabaseConnection, lease: &FileLease, error: &str, now: i64) -> Result<bool, DbErr> {
    let txn = begin_write(db).await?;
    if fenced(&txn, lease).await?.is_none() {
        txn.rollback().await?;
        return Ok(false);
    }
    documents::set_indexing(&txn, lease.document_id, IndexingStatus::Failed, Some(error.to_owned()), now).await?;
    set_state(&txn, lease.document_id, FileState::Failed, Some(error.to_owned()), now).await?;
    txn.commit().await?;
    Ok(true)
}

/// Gives the lease back unfinished (the worker is stopping): the file is due again now.
pub async fn release<C: ConnectionTrait>(conn: &C, lease: &FileLease, now: i64) -> Result<(), DbErr> {
    file::Entity::update_many()
        .col_expr(file::Column::LockToken, Expr::value(Option::<Uuid>::None))
        .col_expr(file::Column::LockedUntil, Expr::value(Option::<i64>::None))
        .col_expr(file::Column::State, Expr::value(FileState::Extracting))
        .col_expr(file::Column::Attempts, Expr::value(lease.attempts.saturating_sub(1)))
        .col_expr(file::Column::AvailableAt, Expr::value(now))
        .filter(file::Column::DocumentId.eq(lease.document_id))
        .filter(file::Column::LockToken.eq(lease.token))
        .exec(conn)
        .await?;
    Ok(())
}

/// When an edit (a title, metadata) makes a new revision of a document whose file is
/// still being extracted, the extraction writes into that revision instead.
pub async fn follow_revision<C: ConnectionTrait>(txn: &C, document_id: Uuid, revision: i32) -> Result<(), DbErr> {
    file::Entity::update_many()
        .col_expr(file::Column::DocumentRevision, Expr::value(revision))
        .filter(file::Column::DocumentId.eq(document_id))
        .exec(txn)
        .await?;
    Ok(())
}

async fn set_state<C: ConnectionTrait>(
    txn: &C,
    document_id: Uuid,
    state: FileState,
    error: Option<String>,
    now: i64,
) -> Result<(), DbErr> {
    let settled = matches!(state, FileState::Done | FileState::Failed);
    let mut update = file::Entity::update_many()
        .col_expr(file::Column::State, Expr::value(state))
        .col_expr(file::Column::Error, Expr::value(error))
        .col_expr(file::Column::UpdatedAt, Expr::value(now));
    if settled {
        update = update
            .col_expr(file::Column::LockToken, Expr::value(Option::<Uuid>::None))
            .col_expr(file::Column::LockedUntil, Expr::value(Option::<i64>::None))
            .col_expr(file::Column::AvailableAt, Expr::value(Option::<i64>::None));
    }
    update.filter(file::Column::DocumentId.eq(document_id)).exec(txn).await?;
    Ok(())
}
