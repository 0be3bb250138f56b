//! `KnowledgeDocument` and its `KnowledgePassage`s.
use async_graphql::{Context, Json, Object};
use chrono::{DateTime, Utc};
use entity::{knowledge_document as document, knowledge_document_file as file, knowledge_passage as passage};
use serde_json::Value;
use uuid::Uuid;

use super::datetime;
use crate::error::{ApiError, IntoGql};
use crate::graphql::context::state;
use crate::graphql::enums::{GqlIndexingStatus, GqlMediaType};
use worker::app::documents;
use worker::app::limits::{DEFAULT_PAGE, MAX_PAGE, after_sequence, page_size};
use worker::knowledge::uploads::shown_status;

use crate::graphql::loaders::{FileOfDocument, RequestLoaders, loaded};

/// A document research retrieves from, and its uploaded file's row when it was read with it
/// (so every field of one answer tells of the same moment).
pub struct KnowledgeDocument {
    row: document::Model,
    /// `Some` when the file's row was read with the document (`Some(None)`: no file).
    file: Option<Option<file::Model>>,
}

/// A document research retrieves from, split into passages that research cites.
#[Object]
impl KnowledgeDocument {
    async fn id(&self) -> Uuid {
        self.row.id
    }
    async fn knowledge_space_id(&self) -> Uuid {
        self.row.knowledge_space_id
    }
    async fn title(&self) -> &str {
        &self.row.title
    }
    /// The text as it was given. Passage ranges index it in Unicode code points.
    async fn content(&self) -> &str {
        &self.row.content
    }
    /// The content's code points `charStart..charEnd` (half-open, as passage and quote
    /// ranges are), at most 20,000 of them: a quote shown in context without loading the
    /// whole document. A negative, inverted or longer range, or one past the content's end,
    /// is BAD_USER_INPUT; `revision`, when given, must be the document's current revision
    /// (CONFLICT otherwise), since ranges index one revision's text.
    async fn excerpt(&self, char_start: i32, char_end: i32, revision: Option<i32>) -> async_graphql::Result<String> {
        documents::excerpt(&self.row, char_start, char_end, revision).gql()
    }
    /// What the document is: the format its text was given in, or the type of the file it
    /// was uploaded as (detected from the file's bytes).
    async fn media_type(&self, ctx: &Context<'_>) -> async_graphql::Result<GqlMediaType> {
        let file = self.file_row(ctx).await.gql()?;
        Ok(GqlMediaType::of(self.row.media_type, file.map(|file| file.media_type)))
    }
    /// The file the document was uploaded as; null for documents given as text.
    async fn file(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<KnowledgeDocumentFile>> {
        Ok(self.file_row(ctx).await.gql()?.map(KnowledgeDocumentFile))
    }
    /// Where the document came from, if its author said.
    async fn source_uri(&self) -> Option<&str> {
        self.row.source_uri.as_deref()
    }
    /// The author's own data.
    async fn metadata(&self) -> Json<&Value> {
        Json(&self.row.metadata)
    }
    /// 1 when added; every update adds one.
    async fn revision(&self) -> i32 {
        self.row.revision
    }
    /// Where the document stands. A document given as text is searchable by full text as
    /// soon as it is written (`READY`, or `PENDING` while embeddings, when configured, come
    /// in the background). An uploaded file goes `EXTRACTING`, `SPLITTING`, then the same;
    /// `FAILED` with `indexingError` when it could not be read (or embedding gave up).
    async fn indexing_status(&self, ctx: &Context<'_>) -> async_graphql::Result<GqlIndexingStatus> {
        let file = self.file_row(ctx).await.gql()?;
        Ok(GqlIndexingStatus::of(shown_status(file.map(|file| file.state), &self.row)))
    }
    /// Why the document is `FAILED`: why its file could not be read, or why embedding
    /// gave up.
    async fn indexing_error(&self, ctx: &Context<'_>) -> async_graphql::Result<Option<String>> {
        let file = self.file_row(ctx).await.gql()?;
        let file_error = file.filter(|file| file.state == entity::FileState::Failed).and_then(|file| file.error);
        Ok(file_error.or_else(|| self.row.indexing_error.clone()))
    }
    /// The subject who added it.
    async fn created_by(&self) -> &str {
        &self.row.created_by
    }
    /// The subject who last changed it, if anyone has.
    async fn updated_by(&self) -> Option<&str> {
        self.row.updated_by.as_deref()
    }
    async fn created_at(&self) -> DateTime<Utc> {
        datetime(self.row.created_at)
    }
    async fn updated_at(&self) -> DateTime<Utc> {
        datetime(self.row.updated_at)
    }

    /// The passages in document order: at most `first` (default 20, maximum 100) after
    /// the one numbered `afterOrdinal`.
    #[graphql(complexity = "first.unwrap_or(DEFAULT_PAGE).clamp(0, MAX_PAGE) as usize * child_complexity")]
    async fn passages(
        &self,
        ctx: &Context<'_>,
        first: Option<i32>,
        after_ordinal: Option<i32>,
    ) -> async_graphql::Result<Vec<KnowledgePassage>> {
        let run = async {
            let size = page_size(first, DEFAULT_PAGE)?;
            let after = match after_ordinal {
                None => -1,
                Some(ordinal) => after_sequence(Some(ordinal))
                    .map_err(|_| ApiError::bad_input("afterOrdinal must not be negative"))?,
            };
            let rows = documents::passages(&state(ctx)?.app, &self.row, after, size).await?;
            Ok::<_, ApiError>(rows.into_iter().map(KnowledgePassage).collect())
        };
        run.await.gql()
    }
}

impl KnowledgeDocument {
    /// A document whose file (if any) its fields read when asked.
    pub fn new(row: document::Model) -> Self {
        Self { row, file: None }
    }

    /// A document with its file's row, read with it.
    pub fn with_file(row: document::Model, file: Option<file::Model>) -> Self {
        Self { row, file: Some(file) }
    }

    /// The document's uploaded file: the row read with it, else through the request's
    /// loader when it has one (a WebSocket operation reads it directly).
    async fn file_row(&self, ctx: &Context<'_>) -> Result<Option<file::Model>, ApiError> {
        if let Some(file) = &self.file {
            return Ok(file.clone());
        }
        match ctx.data_opt::<RequestLoaders>() {
            Some(loaders) => loaders.load_one(FileOfDocument(self.row.id)).await.map_err(loaded),
            None => Ok(documents::file(&state(ctx)?.app, &self.row).await?),
        }
    }
}

/// The file a document was uploaded as.
pub struct KnowledgeDocumentFile(pub file::Model);

/// The file a document was uploaded as. Its bytes are kept until the document is removed.
#[Object]
impl KnowledgeDocumentFile {
    /// The name it was uploaded with.
    async fn file_name(&self) -> &str {
        &self.0.file_name
    }
    /// Its size in bytes.
    async fn byte_size(&self) -> i64 {
        self.0.byte_size
    }
    /// How many pages a PDF has, once its text is extracted; null otherwise.
    async fn page_count(&self) -> Option<i32> {
        self.0.page_count
    }
}

/// A piece of a document: what retrieval ranks and evidence cites.
pub struct KnowledgePassage(pub passage::Model);

/// A piece of a document: what retrieval ranks and evidence cites. `charStart` and
/// `charEnd` index the document's `content` in Unicode code points, half-open; for HTML
/// they span the markup of the block the text was extracted from.
#[Object]
impl KnowledgePassage {
    async fn id(&self) -> Uuid {
        self.0.id
    }
    async fn document_id(&self) -> Uuid {
        self.0.document_id
    }
    /// 0, 1, 2… in document order.
    async fn ordinal(&self) -> i32 {
        self.0.ordinal
    }
    /// Where it starts in the content, in code points.
    async fn char_start(&self) -> i32 {
        self.0.char_start
    }
    /// Where it ends (exclusive), in code points.
    async fn char_end(&self) -> i32 {
        self.0.char_end
    }
    /// The headings above it, outermost first.
    async fn heading_path(&self) -> Vec<String> {
        serde_json::from_value(self.0.heading_path.clone()).unwrap_or_default()
    }
    /// Its text, without markup.
    async fn text(&self) -> &str {
        &self.0.text
    }
    /// Its size in estimated tokens.
    async fn token_count(&self) -> i32 {
        self.0.token_count
    }
    /// The first page of the PDF it comes from (1-based); null for other formats.
    async fn page_start(&self) -> Option<i32> {
        self.0.page_start
    }
    /// The last page of the PDF it comes from (inclusive); null for other formats.
    async fn page_end(&self) -> Option<i32> {
        self.0.page_end
    }
}
