//! Uploading PDF and Word files (GraphQL multipart requests; `http/multipart.rs` streams
//! each file to a temporary file). The request stores the file's bytes in parts in the
//! document's transaction and answers at once with `EXTRACTING`; a worker extracts the
//! text and splits it (`worker::knowledge::uploads`), so no request waits on a parser.
use std::io::{Read as _, Seek as _};

use async_graphql::{Context, InputObject, Json, Object, Upload, UploadValue};
use entity::{FileMediaType, IndexingStatus, MemberRole};
use serde_json::Value;
use uuid::Uuid;
use worker::knowledge::extract::detect;
use worker::store::documents::NewDocument;
use worker::store::files::{self, NewFile, PART_BYTES};

use super::creating::begin_creating;
use super::documents::{check_revision, writable};
use crate::error::{ApiError, IntoGql};
use crate::graphql::context::{principal, state};
use crate::graphql::request_writes;
use crate::graphql::types::KnowledgeDocument;
use worker::app::access::require_role;
use worker::app::limits::{self, MAX_TITLE_CHARS};

/// A file to add to a space as a document.
#[derive(InputObject)]
pub struct UploadKnowledgeDocumentInput {
    /// The space.
    pub knowledge_space_id: Uuid,
    /// A PDF or Word (`.docx`) file, at most `KFS_MAX_UPLOAD_BYTES` (50 MiB by default).
    /// What it is comes from its bytes, not its name.
    pub file: Upload,
    /// At most 512 characters; the file's name when omitted.
    pub title: Option<String>,
    /// Your own data, a JSON object of at most 16 KB.
    pub metadata: Option<Json<Value>>,
    /// Where the document came from (a URL or any reference), at most 2048 characters.
    pub source_uri: Option<String>,
}

/// File uploads. Editors and owners; viewers and API keys are `FORBIDDEN`; a space or
/// document the caller cannot see is `NOT_FOUND`.
#[derive(Default)]
pub struct UploadMutation;

#[Object]
impl UploadMutation {
    /// Adds a document from a PDF or Word file, sent as a GraphQL multipart request (with
    /// the header `GraphQL-Preflight: 1`). Answers at once with `indexingStatus:
    /// EXTRACTING`; a worker then extracts the text (`SPLITTING`, then `READY`, or
    /// `PENDING` while embeddings come), or fails the document with `indexingError` when
    /// the file cannot be read (damaged, encrypted with a password, no text layer, not
    /// what its name says). The file's bytes are kept until the document is removed and
    /// count against `KFS_QUOTA_UPLOAD_BYTES_PER_TENANT`. Editors and owners.
    async fn upload_knowledge_document(
        &self,
        ctx: &Context<'_>,
        input: UploadKnowledgeDocumentInput,
    ) -> async_graphql::Result<KnowledgeDocument> {
        let run = async {
            let (caller, app) = (principal(ctx)?, state(ctx)?);
            let upload = request_writes::take_upload(ctx, &input.file)?;
            let title = match input.title {
                Some(title) => title,
                None => upload.filename.chars().take(MAX_TITLE_CHARS).collect(),
            };
            limits::text("title", &title, MAX_TITLE_CHARS)?;
            let source_uri = limits::source_uri(input.source_uri)?;
            let metadata = limits::json_object("metadata", input.metadata.map(|metadata| metadata.0))?;
            let inspected = inspect(&upload, app.settings.max_upload_bytes)?;
            request_writes::charge_document(ctx, 0, app.settings.body_limit())?;
            require_role(&app.db, caller, input.knowledge_space_id, MemberRole::can_write_documents).await?;
            let new = NewDocument {
                tenant_id: caller.tenant_id.clone(),
                knowledge_space_id: input.knowledge_space_id,
                title,
                content: String::new(),
                media_type: entity::MediaType::TextPlain,
                source_uri,
                metadata,
                created_by: caller.subject_id.clone(),
                indexing_status: IndexingStatus::Ready,
            };
            let txn = begin_creating(&app.db, &caller.tenant_id).await?;
            let quota = app.settings.quota_upload_bytes_per_tenant;
            worker::lifecycle::check_upload_bytes(&txn, quota, &caller.tenant_id, inspected.file.byte_size, 0).await?;
            let (document, file) = files::add_upload(&txn, new, inspected.file, entity::now_millis()).await?;
            store_parts(&txn, document.id, upload).await?;
            txn.commit().await?;
            app.notifier.documents_due();
            Ok(KnowledgeDocument::with_file(document, Some(file)))
        };
        run.await.gql()
    }

    /// Replaces a document's text with a new file's (a new revision, extracted in the
    /// background as with `uploadKnowledgeDocument`; research does not find the document
    /// until then). With `expectedRevision`, answers `CONFLICT` if someone changed it
    /// since. The old file's bytes are deleted. Editors and owners.
    async fn replace_knowledge_document_file(
        &self,
        ctx: &Context<'_>,
        id: Uuid,
        file: Upload,
        expected_revision: Option<i32>,
    ) -> async_graphql::Result<KnowledgeDocument> {
        let run = async {
            let (caller, app) = (principal(ctx)?, state(ctx)?);
            let upload = request_writes::take_upload(ctx, &file)?;
            let inspected = inspect(&upload, app.settings.max_upload_bytes)?;
            request_writes::charge_document(ctx, 0, app.settings.body_limit())?;
            let txn = begin_creating(&app.db, &caller.tenant_id).await?;
            let current = writable(&txn, caller, id).await?;
            check_revision(&current, expected_revision)?;
            let replacing = files::find(&txn, id).await?.map_or(0, |old| old.byte_size);
            let quota = app.settings.quota_upload_bytes_per_tenant;
            let size = inspected.file.byte_size;
            worker::lifecycle::check_upload_bytes(&txn, quota, &caller.tenant_id, size, replacing).await?;
            let now = entity::now_millis();
            let (document, file) = files::replace(&txn, current, &caller.subject_id, inspected.file, now).await?;
            store_parts(&txn, document.id, upload).await?;
            txn.commit().await?;
            app.notifier.documents_due();
            Ok(KnowledgeDocument::with_file(document, Some(file)))
        };
        run.await.gql()
    }
}

/// What an upload is, from its first bytes and size.
struct Inspected {
    file: NewFile,
}

/// Reads an upload's size and first bytes: an empty file, one past the limit, or one that
/// is neither a PDF nor a Word file by its bytes or its name is `BAD_USER_INPUT`. A file
/// whose name says PDF or Word but whose bytes do not is stored as named, and its
/// extraction fails with what the bytes are.
fn inspect(upload: &UploadValue, max_bytes: usize) -> Result<Inspected, ApiError> {
    let size = upload.content.metadata().map_err(ApiError::internal)?.len();
    if size == 0 {
        return Err(ApiError::bad_input("the file is empty"));
    }
    if size > max_bytes as u64 {
        return Err(ApiError::bad_input(format!(
            "the file is larger than {max_bytes} bytes, the most one upload may be (KFS_MAX_UPLOAD_BYTES)"
        )));
    }
    let mut head = Vec::with_capacity(1024);
    let mut reader = upload.try_clone().map_err(ApiError::internal)?.content;
    (&mut reader).take(1024).read_to_end(&mut head).map_err(ApiError::internal)?;
    // A clone shares the file's position: put it back where the parts are read from.
    reader.rewind().map_err(ApiError::internal)?;
    let named = named_type(&upload.filename, upload.content_type.as_deref());
    let media_type = detect(&head).or(named).ok_or_else(|| {
        ApiError::bad_input(
            "only PDF and Word (.docx) files can be uploaded, and this file is neither; send text, Markdown or HTML with addKnowledgeDocument",
        )
    })?;
    let file_name: String = upload.filename.chars().take(MAX_TITLE_CHARS).collect();
    let byte_size = i64::try_from(size).map_err(ApiError::internal)?;
    Ok(Inspected { file: NewFile { file_name, media_type, byte_size } })
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

/// Copies the upload's bytes into the document's parts, a part at a time (read on the
/// blocking pool), in the transaction that created or replaced the document.
async fn store_parts(
    txn: &sea_orm::DatabaseTransaction,
    document_id: Uuid,
    upload: UploadValue,
) -> Result<(), ApiError> {
    let mut reader = upload.content;
    let mut index = 0;
    loop {
        let read = tokio::task::spawn_blocking(move || {
            let mut part = Vec::with_capacity(PART_BYTES);
            (&mut reader).take(PART_BYTES as u64).read_to_end(&mut part).map(|_| (reader, part))
        });
        let (returned, part) = read.await.map_err(ApiError::internal)?.map_err(ApiError::internal)?;
        reader = returned;
        if part.is_empty() {
            return Ok(());
        }
        files::write_part(txn, document_id, index, part).await?;
        index += 1;
    }
}
