//! `KnowledgeDocument` and its `KnowledgePassage`s.
use async_graphql::{Context, Json, Object};
use chrono::{DateTime, Utc};
use entity::{knowledge_document as document, knowledge_passage as passage};
use serde_json::Value;
use uuid::Uuid;

use super::datetime;
use crate::error::{ApiError, IntoGql};
use crate::graphql::context::state;
use crate::graphql::enums::{GqlIndexingStatus, GqlMediaType};
use crate::graphql::limits::{DEFAULT_PAGE, MAX_PAGE, after_sequence, page_size};
use worker::store::documents;

/// A document research retrieves from.
pub struct KnowledgeDocument(pub document::Model);

/// A document research retrieves from, split into passages that research cites.
#[Object]
impl KnowledgeDocument {
    async fn id(&self) -> Uuid {
        self.0.id
    }
    async fn knowledge_space_id(&self) -> Uuid {
        self.0.knowledge_space_id
    }
    async fn title(&self) -> &str {
        &self.0.title
    }
    /// The text as it was given. Passage ranges index it in Unicode code points.
    async fn content(&self) -> &str {
        &self.0.content
    }
    /// What `content` is written in.
    async fn media_type(&self) -> GqlMediaType {
        self.0.media_type.into()
    }
    /// Where the document came from, if its author said.
    async fn source_uri(&self) -> Option<&str> {
        self.0.source_uri.as_deref()
    }
    /// The author's own data.
    async fn metadata(&self) -> Json<&Value> {
        Json(&self.0.metadata)
    }
    /// 1 when added; every update adds one.
    async fn revision(&self) -> i32 {
        self.0.revision
    }
    /// Whether every ranker can find the passages yet. Full-text search finds a document
    /// as soon as it is written; embeddings, when configured, come in the background.
    async fn indexing_status(&self) -> GqlIndexingStatus {
        self.0.indexing_status.into()
    }
    /// Why embedding failed, when `indexingStatus` is `FAILED`.
    async fn indexing_error(&self) -> Option<&str> {
        self.0.indexing_error.as_deref()
    }
    /// The subject who added it.
    async fn created_by(&self) -> &str {
        &self.0.created_by
    }
    /// The subject who last changed it, if anyone has.
    async fn updated_by(&self) -> Option<&str> {
        self.0.updated_by.as_deref()
    }
    async fn created_at(&self) -> DateTime<Utc> {
        datetime(self.0.created_at)
    }
    async fn updated_at(&self) -> DateTime<Utc> {
        datetime(self.0.updated_at)
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
            let rows = documents::passages(&state(ctx)?.db, self.0.id, after, size).await?;
            Ok::<_, ApiError>(rows.into_iter().map(KnowledgePassage).collect())
        };
        run.await.gql()
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
}
