//! Mutations on documents (`worker::app::documents`): each checks what only a GraphQL
//! request has (its share of the request's writes), calls one operation and renders.
use async_graphql::{Context, Object};
use uuid::Uuid;
use worker::app::documents::{self, DocumentEdit, DocumentRequest};

use crate::error::IntoGql;
use crate::graphql::context::{principal, state};
use crate::graphql::enums::GqlMediaType;
use crate::graphql::request_writes;
use crate::graphql::types::{AddKnowledgeDocumentInput, KnowledgeDocument, UpdateKnowledgeDocumentInput};

/// Document mutations. Editors and owners write; viewers and API keys are `FORBIDDEN`;
/// a document in a space the caller cannot see is `NOT_FOUND`, as a missing id is.
#[derive(Default)]
pub struct DocumentMutation;

#[Object]
impl DocumentMutation {
    /// Adds a document research can retrieve. Editors and owners.
    async fn add_knowledge_document(
        &self,
        ctx: &Context<'_>,
        input: AddKnowledgeDocumentInput,
    ) -> async_graphql::Result<KnowledgeDocument> {
        let run = async {
            let (caller, state) = (principal(ctx)?, state(ctx)?);
            request_writes::charge_document(ctx, input.content.len(), state.settings.body_limit())?;
            let request = DocumentRequest {
                knowledge_space_id: input.knowledge_space_id,
                title: input.title,
                content: input.content,
                media_type: input.media_type.text_format()?,
                source_uri: input.source_uri,
                metadata: input.metadata.map(|metadata| metadata.0),
            };
            documents::add(&state.app, caller, request).await.map(KnowledgeDocument::new)
        };
        run.await.gql()
    }

    /// Changes a document, as a new revision split anew into passages. With
    /// `expectedRevision`, answers `CONFLICT` if someone changed it since. Evidence already
    /// written keeps the text it was given. Editors and owners.
    async fn update_knowledge_document(
        &self,
        ctx: &Context<'_>,
        id: Uuid,
        input: UpdateKnowledgeDocumentInput,
        expected_revision: Option<i32>,
    ) -> async_graphql::Result<KnowledgeDocument> {
        let run = async {
            let (caller, state) = (principal(ctx)?, state(ctx)?);
            let text_bytes = input.content.as_ref().map_or(0, String::len);
            request_writes::charge_document(ctx, text_bytes, state.settings.body_limit())?;
            let edit = DocumentEdit {
                title: input.title,
                content: input.content,
                media_type: input.media_type.map(GqlMediaType::text_format).transpose()?,
                source_uri: input.source_uri,
                metadata: input.metadata.map(|metadata| metadata.0),
            };
            documents::update(&state.app, caller, id, edit, expected_revision).await.map(KnowledgeDocument::new)
        };
        run.await.gql()
    }

    /// Removes a document and its passages; research no longer retrieves it, while
    /// evidence already written keeps its text. True when it was removed; false when there
    /// is no such document the caller can see (removing twice answers false). Editors and
    /// owners; viewers and API keys are `FORBIDDEN`.
    async fn remove_knowledge_document(&self, ctx: &Context<'_>, id: Uuid) -> async_graphql::Result<bool> {
        let run = async { documents::remove(&state(ctx)?.app, principal(ctx)?, id).await };
        run.await.gql()
    }
}
