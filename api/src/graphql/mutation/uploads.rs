//! Uploading PDF and Word files (GraphQL multipart requests; `http/multipart.rs` streams
//! each file to a temporary file; `worker::app::documents` stores the file's bytes in parts
//! in the document's transaction) answering at once with `EXTRACTING`; a worker extracts
//! the text and splits it (`worker::knowledge::uploads`), so no request waits on a parser.
use async_graphql::{Context, InputObject, Json, Object, Upload, UploadValue};
use serde_json::Value;
use uuid::Uuid;
use worker::app::documents::{self, UploadRequest, UploadedFile};

use crate::error::IntoGql;
use crate::graphql::context::{principal, state};
use crate::graphql::request_writes;
use crate::graphql::types::KnowledgeDocument;

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
            let (caller, state) = (principal(ctx)?, state(ctx)?);
            let upload = request_writes::take_upload(ctx, &input.file)?;
            request_writes::charge_document(ctx, 0, state.settings.body_limit())?;
            let request = UploadRequest {
                knowledge_space_id: input.knowledge_space_id,
                file: uploaded(upload),
                title: input.title,
                source_uri: input.source_uri,
                metadata: input.metadata.map(|metadata| metadata.0),
            };
            let (document, file) = documents::upload(&state.app, caller, request).await?;
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
            let (caller, state) = (principal(ctx)?, state(ctx)?);
            let upload = request_writes::take_upload(ctx, &file)?;
            request_writes::charge_document(ctx, 0, state.settings.body_limit())?;
            let (document, file) =
                documents::replace_file(&state.app, caller, id, uploaded(upload), expected_revision).await?;
            Ok(KnowledgeDocument::with_file(document, Some(file)))
        };
        run.await.gql()
    }
}

/// The upload as the application layer takes it.
fn uploaded(upload: UploadValue) -> UploadedFile {
    UploadedFile { content: upload.content, file_name: upload.filename, content_type: upload.content_type }
}
