//! Documents: added as text, uploaded as a PDF or Word file, changed, given a new file,
//! removed. Editors and owners write; viewers and API keys are FORBIDDEN; a document in a
//! space the caller cannot see is NOT_FOUND, as a missing id is. Each text write re-splits
//! the document into passages in its own transaction, so research never retrieves a
//! document without its passages or with another revision's; an uploaded file's bytes are
//! stored in the document's transaction and a worker extracts its text.
use std::io::{Read as _, Seek as _};

use entity::{FileMediaType, IndexingStatus, MediaType, MemberRole, knowledge_document as document};
use sea_orm::{DatabaseConnection, DatabaseTransaction};
use serde_json::Value;
use uuid::Uuid;

use super::access::require_role;
use super::limits::{self, MAX_TITLE_CHARS};
use super::writes::{begin, begin_creating};
use super::{App, AppError, Principal};
use crate::knowledge::extract::detect;
use crate::knowledge::index::initial_status;
use crate::store::documents::{self, DocumentChanges, NewDocument};
use crate::store::files::{self, NewFile, PART_BYTES};

/// A text document to add, as a channel received it.
pub struct DocumentRequest {
    /// The space.
    pub knowledge_space_id: Uuid,
    /// Its title.
    pub title: String,
    /// Its text.
    pub content: String,
    /// What the text is (plain, Markdown, HTML).
    pub media_type: MediaType,
    /// Where it came from; blank means nowhere.
    pub source_uri: Option<String>,
    /// The caller's metadata object.
    pub metadata: Option<Value>,
}

/// Changes to a document; every field left `None` stays.
#[derive(Default)]
pub struct DocumentEdit {
    /// A new title.
    pub title: Option<String>,
    /// New text.
    pub content: Option<String>,
    /// A new format.
    pub media_type: Option<MediaType>,
    /// A new source; blank clears it.
    pub source_uri: Option<String>,
    /// New metadata, replacing the old.
    pub metadata: Option<Value>,
}

/// An uploaded file, as the channel stored it while the request came in.
pub struct UploadedFile {
    /// The file's bytes, at position 0.
    pub content: std::fs::File,
    /// The name the client gave it.
    pub file_name: String,
    /// The content type the client declared, if any.
    pub content_type: Option<String>,
}

/// A document to make from an uploaded file.
pub struct UploadRequest {
    /// The space.
    pub knowledge_space_id: Uuid,
    /// The file.
    pub file: UploadedFile,
    /// The title; the file's name when `None`.
    pub title: Option<String>,
    /// Where it came from; blank means nowhere.
    pub source_uri: Option<String>,
    /// The caller's metadata object.
    pub metadata: Option<Value>,
}

/// Adds a text document research can retrieve.
pub async fn add(app: &App, caller: &Principal, request: DocumentRequest) -> Result<document::Model, AppError> {
    limits::text("title", &request.title, MAX_TITLE_CHARS)?;
    limits::content(&request.content, app.rules.max_content_bytes)?;
    let source_uri = limits::source_uri(request.source_uri)?;
    let metadata = limits::json_object("metadata", request.metadata)?;
    require_role(&app.db, caller, request.knowledge_space_id, MemberRole::can_write_documents).await?;
    let chunks = app.splitter.split(&request.content, request.media_type).await?;
    let new = NewDocument {
        tenant_id: caller.tenant_id.clone(),
        knowledge_space_id: request.knowledge_space_id,
        title: request.title,
        content: request.content,
        media_type: request.media_type,
        source_uri,
        metadata,
        created_by: caller.subject_id.clone(),
        indexing_status: initial_status(app.indexing.embeddings_on),
    };
    let txn = begin_creating(&app.db, &caller.tenant_id).await?;
    let document = documents::add(&txn, new, &chunks, entity::now_millis()).await?;
    txn.commit().await?;
    app.notifier.documents_due();
    Ok(document)
}

/// Edits of one document that race with others are prepared at most this often.
const SPLIT_ATTEMPTS: usize = 3;

/// Changes a document, as a new revision split anew into passages. With
/// `expected_revision`, CONFLICT if someone changed it since. Evidence already written
/// keeps the text it was given.
pub async fn update(
    app: &App,
    caller: &Principal,
    id: Uuid,
    edit: DocumentEdit,
    expected_revision: Option<i32>,
) -> Result<document::Model, AppError> {
    let changes = changes(edit, app.rules.max_content_bytes)?;
    // Split before the write transaction, so no lock is held while splitting; if another
    // edit lands in between, split its result again.
    for _ in 0..SPLIT_ATTEMPTS {
        let seen = readable(&app.db, caller, id).await?;
        check_revision(&seen, expected_revision)?;
        let file = files::find(&app.db, id).await?;
        if file.is_some() && (changes.content.is_some() || changes.media_type.is_some()) {
            return Err(AppError::bad_input(
                "this document's text comes from its uploaded file: send a new file with replaceKnowledgeDocumentFile",
            ));
        }
        let (content, media_type) = changes.apply_to(&seen);
        let paged = file.as_ref().is_some_and(|file| file.media_type == FileMediaType::Pdf);
        let chunks = app.splitter.split_as(content, media_type, paged).await?;
        let txn = begin_creating(&app.db, &caller.tenant_id).await?;
        let current = writable(&txn, caller, id).await?;
        if current.revision != seen.revision {
            txn.rollback().await?;
            continue;
        }
        let now = entity::now_millis();
        let status = initial_status(app.indexing.embeddings_on);
        let updated = documents::update(&txn, current, changes, &caller.subject_id, &chunks, status, now).await?;
        if file.is_some() {
            // A file still being extracted writes into the new revision; a file that
            // failed keeps its document failed.
            files::follow_revision(&txn, id, updated.revision).await?;
        }
        txn.commit().await?;
        app.notifier.documents_due();
        return Ok(updated);
    }
    Err(AppError::conflict("the document kept changing while this edit was prepared; try again"))
}

/// Removes a document and its passages; research no longer retrieves it, while evidence
/// already written keeps its text. False when there is no such document the caller can
/// see (removing twice answers false).
pub async fn remove(app: &App, caller: &Principal, id: Uuid) -> Result<bool, AppError> {
    let txn = begin(&app.db).await?;
    let current = match writable(&txn, caller, id).await {
        Ok(current) => current,
        Err(AppError::NotFound) => return Ok(false),
        Err(other) => return Err(other),
    };
    documents::remove(&txn, current).await?;
    txn.commit().await?;
    Ok(true)
}

/// Adds a document from a PDF or Word file: stored now, its text extracted by a worker.
pub async fn upload(
    app: &App,
    caller: &Principal,
    request: UploadRequest,
) -> Result<(document::Model, entity::knowledge_document_file::Model), AppError> {
    let UploadRequest { knowledge_space_id, file, title, source_uri, metadata } = request;
    let title = title.unwrap_or_else(|| file.file_name.chars().take(MAX_TITLE_CHARS).collect());
    limits::text("title", &title, MAX_TITLE_CHARS)?;
    let source_uri = limits::source_uri(source_uri)?;
    let metadata = limits::json_object("metadata", metadata)?;
    let inspected = inspect(&file, app.rules.max_upload_bytes)?;
    require_role(&app.db, caller, knowledge_space_id, MemberRole::can_write_documents).await?;
    let new = NewDocument {
        tenant_id: caller.tenant_id.clone(),
        knowledge_space_id,
        title,
        content: String::new(),
        media_type: MediaType::TextPlain,
        source_uri,
        metadata,
        created_by: caller.subject_id.clone(),
        indexing_status: IndexingStatus::Ready,
    };
    let txn = begin_creating(&app.db, &caller.tenant_id).await?;
    let quota = app.rules.quota_upload_bytes_per_tenant;
    crate::lifecycle::check_upload_bytes(&txn, quota, &caller.tenant_id, inspected.byte_size, 0).await?;
    let (document, stored) = files::add_upload(&txn, new, inspected, entity::now_millis()).await?;
    store_parts(&txn, document.id, file.content).await?;
    txn.commit().await?;
    app.notifier.documents_due();
    Ok((document, stored))
}

/// Replaces a document's text with a new file's (a new revision, extracted by a worker;
/// research does not find the document until then). With `expected_revision`, CONFLICT if
/// someone changed it since. The old file's bytes are deleted.
pub async fn replace_file(
    app: &App,
    caller: &Principal,
    id: Uuid,
    file: UploadedFile,
    expected_revision: Option<i32>,
) -> Result<(document::Model, entity::knowledge_document_file::Model), AppError> {
    let inspected = inspect(&file, app.rules.max_upload_bytes)?;
    let txn = begin_creating(&app.db, &caller.tenant_id).await?;
    let current = writable(&txn, caller, id).await?;
    check_revision(&current, expected_revision)?;
    let replacing = files::find(&txn, id).await?.map_or(0, |old| old.byte_size);
    let quota = app.rules.quota_upload_bytes_per_tenant;
    let size = inspected.byte_size;
    crate::lifecycle::check_upload_bytes(&txn, quota, &caller.tenant_id, size, replacing).await?;
    let now = entity::now_millis();
    let (document, stored) = files::replace(&txn, current, &caller.subject_id, inspected, now).await?;
    store_parts(&txn, document.id, file.content).await?;
    txn.commit().await?;
    app.notifier.documents_due();
    Ok((document, stored))
}

/// CONFLICT when the caller expected another revision.
fn check_revision(document: &document::Model, expected: Option<i32>) -> Result<(), AppError> {
    match expected {
        Some(expected) if expected != document.revision => {
            Err(AppError::conflict(format!("the document is at revision {}, not {expected}", document.revision)))
        }
        _ => Ok(()),
    }
}

/// The document, unlocked, if the caller may change it (as [`writable`] answers).
async fn readable(db: &DatabaseConnection, caller: &Principal, id: Uuid) -> Result<document::Model, AppError> {
    let document = documents::find(db, &caller.tenant_id, id).await?.ok_or(AppError::NotFound)?;
    require_role(db, caller, document.knowledge_space_id, MemberRole::can_write_documents).await?;
    Ok(document)
}

/// The document, locked, if the caller may change it: NOT_FOUND when it does not exist or
/// its space is not visible to the caller, FORBIDDEN when the caller only reads.
async fn writable(txn: &DatabaseTransaction, caller: &Principal, id: Uuid) -> Result<document::Model, AppError> {
    let document = documents::lock(txn, &caller.tenant_id, id).await?.ok_or(AppError::NotFound)?;
    require_role(txn, caller, document.knowledge_space_id, MemberRole::can_write_documents).await?;
    Ok(document)
}

/// The edit's changes, each checked as when adding; nothing to change is bad input.
fn changes(edit: DocumentEdit, max_content_bytes: usize) -> Result<DocumentChanges, AppError> {
    if let Some(title) = &edit.title {
        limits::text("title", title, MAX_TITLE_CHARS)?;
    }
    if let Some(content) = &edit.content {
        limits::content(content, max_content_bytes)?;
    }
    let source_uri = match edit.source_uri {
        None => None,
        given => Some(limits::source_uri(given)?),
    };
    let metadata = match edit.metadata {
        None => None,
        given => Some(limits::json_object("metadata", given)?),
    };
    let changes =
        DocumentChanges { title: edit.title, content: edit.content, media_type: edit.media_type, source_uri, metadata };
    let nothing = changes.title.is_none()
        && changes.content.is_none()
        && changes.media_type.is_none()
        && changes.source_uri.is_none()
        && changes.metadata.is_none();
    if nothing {
        return Err(AppError::bad_input("input must change at least one field"));
    }
    Ok(changes)
}

/// Reads an upload's size and first bytes: an empty file, one past the limit, or one that
/// is neither a PDF nor a Word file by its bytes or its name is BAD_USER_INPUT. A file
/// whose name says PDF or Word but whose bytes do not is stored as named, and its
/// extraction fails with what the bytes are.
fn inspect(file: &UploadedFile, max_bytes: usize) -> Result<NewFile, AppError> {
    let size = file.content.metadata().map_err(AppError::internal)?.len();
    if size == 0 {
        return Err(AppError::bad_input("the file is empty"));
    }
    if size > max_bytes as u64 {
        return Err(AppError::bad_input(format!(
            "the file is larger than {max_bytes} bytes, the most one upload may be (KFS_MAX_UPLOAD_BYTES)"
        )));
    }
    let mut head = Vec::with_capacity(1024);
    let mut reader = file.content.try_clone().map_err(AppError::internal)?;
    (&mut reader).take(1024).read_to_end(&mut head).map_err(AppError::internal)?;
    // A clone shares the file's position: put it back where the parts are read from.
    reader.rewind().map_err(AppError::internal)?;
    let named = named_type(&file.file_name, file.content_type.as_deref());
    let media_type = detect(&head).or(named).ok_or_else(|| {
        AppError::bad_input(
            "only PDF and Word (.docx) files can be uploaded, and this file is neither; send text, Markdown or HTML with addKnowledgeDocument",
        )
    })?;
    let file_name: String = file.file_name.chars().take(MAX_TITLE_CHARS).collect();
    let byte_size = i64::try_from(size).map_err(AppError::internal)?;
    Ok(NewFile { file_name, media_type, byte_size })
}

/// The type a file's name (or its declared content type) claims.
fn named_type(file_name: &str, content_type: Option<&str>) -> Option<FileMediaType> {
    let extension = file_name.rsplit_once('.').map(|(_, extension)| extension.to_ascii_lowercase());
    match (extension.as_deref(), content_type) {
        (Some("pdf"), _) | (_, Some("application/pdf")) => Some(FileMediaType::Pdf),
        (Some("docx"), _) => Some(FileMediaType::Docx),
        (_, Some(declared)) if declared.contains("wordprocessingml") => Some(FileMediaType::Docx),
        _ => None,
    }
}

/// Copies the file's bytes into the document's parts, a part at a time (read on the
/// blocking pool), in the transaction that created or replaced the document.
async fn store_parts(txn: &DatabaseTransaction, document_id: Uuid, content: std::fs::File) -> Result<(), AppError> {
    let mut reader = content;
    let mut index = 0;
    loop {
        let read = tokio::task::spawn_blocking(move || {
            let mut part = Vec::with_capacity(PART_BYTES);
            (&mut reader).take(PART_BYTES as u64).read_to_end(&mut part).map(|_| (reader, part))
        });
        let (returned, part) = read.await.map_err(AppError::internal)?.map_err(AppError::internal)?;
        reader = returned;
        if part.is_empty() {
            return Ok(());
        }
        files::write_part(txn, document_id, index, part).await?;
        index += 1;
    }
}

/// The code points `char_start..char_end` of `document`'s content (a caller who may read it
/// asks): at most [`MAX_EXCERPT_CHARS`](super::limits::MAX_EXCERPT_CHARS) of them, so a
/// viewer shows a quote in context without loading the whole document. A negative,
/// inverted or too long range, or one past the content's end, is BAD_USER_INPUT; with
/// `revision`, a document at another revision is CONFLICT (ranges index one revision's
/// content).
pub fn excerpt(
    document: &document::Model,
    char_start: i32,
    char_end: i32,
    revision: Option<i32>,
) -> Result<String, AppError> {
    let (Ok(start), Ok(end)) = (usize::try_from(char_start), usize::try_from(char_end)) else {
        return Err(AppError::bad_input("charStart and charEnd must not be negative"));
    };
    if end < start {
        return Err(AppError::bad_input("charEnd must not be before charStart"));
    }
    let limit = super::limits::MAX_EXCERPT_CHARS;
    if end - start > limit {
        return Err(AppError::bad_input(format!("an excerpt holds at most {limit} code points")));
    }
    if let Some(revision) = revision
        && revision != document.revision
    {
        return Err(AppError::conflict(format!(
            "the document is at revision {}, not {revision}: its ranges index another text",
            document.revision
        )));
    }
    let length = document.content.chars().count();
    if end > length {
        return Err(AppError::bad_input(format!("charEnd is past the content's end ({length} code points)")));
    }
    Ok(document.content.chars().skip(start).take(end - start).collect())
}

/// The document `id`, if the caller may read its space (else `None`, as for a missing id).
pub async fn find(app: &App, caller: &Principal, id: Uuid) -> Result<Option<document::Model>, AppError> {
    let Some(document) = documents::find(&app.db, &caller.tenant_id, id).await? else {
        return Ok(None);
    };
    let readable = super::access::space_access(&app.db, caller, document.knowledge_space_id).await?.is_some();
    Ok(readable.then_some(document))
}

/// The passages of a document the caller was shown, after ordinal `after`, at most `size`.
pub async fn passages(
    app: &App,
    document: &document::Model,
    after: i32,
    size: u64,
) -> Result<Vec<entity::knowledge_passage::Model>, AppError> {
    Ok(documents::passages(&app.db, document.id, after, size).await?)
}

/// The uploaded file of a document the caller was shown, if it has one.
pub async fn file(
    app: &App,
    document: &document::Model,
) -> Result<Option<entity::knowledge_document_file::Model>, AppError> {
    Ok(files::find(&app.db, document.id).await?)
}
