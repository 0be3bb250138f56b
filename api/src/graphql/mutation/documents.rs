//! Mutations on documents. Each write re-splits the document into passages in its own
//! transaction, so research never retrieves a document without its passages or with
//! another revision's.
use async_graphql::{Context, Object};
use entity::MemberRole;
use uuid::Uuid;
use worker::knowledge::index::Indexing;
use worker::store::begin_write;

use super::creating::begin_creating;
use crate::error::{ApiError, IntoGql};
use crate::graphql::context::{principal, state};
use crate::graphql::request_writes;
use crate::graphql::types::{AddKnowledgeDocumentInput, KnowledgeDocument, UpdateKnowledgeDocumentInput};
use crate::state::AppState;
use worker::app::Principal;
use worker::app::access::require_role;
use worker::app::limits::{self, MAX_TITLE_CHARS};
use worker::knowledge::index::initial_status;
use worker::store::documents::{self, DocumentChanges, NewDocument};
use worker::store::files;

use crate::graphql::enums::GqlMediaType;

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
            let (caller, app) = (principal(ctx)?, state(ctx)?);
            limits::text("title", &input.title, MAX_TITLE_CHARS)?;
            limits::content(&input.content, app.settings.max_content_bytes)?;
            let source_uri = limits::source_uri(input.source_uri)?;
            let metadata = limits::json_object("metadata", input.metadata.map(|metadata| metadata.0))?;
            request_writes::charge_document(ctx, input.content.len(), app.settings.body_limit())?;
            require_role(&app.db, caller, input.knowledge_space_id, MemberRole::can_write_documents).await?;
            let indexing = indexing(app);
            let media_type = input.media_type.text_format()?;
            let chunks = app.splitter.split(&input.content, media_type).await?;
            let new = NewDocument {
                tenant_id: caller.tenant_id.clone(),
                knowledge_space_id: input.knowledge_space_id,
                title: input.title,
                content: input.content,
                media_type,
                source_uri,
                metadata,
                created_by: caller.subject_id.clone(),
                indexing_status: initial_status(indexing.embeddings_on),
            };
            let txn = begin_creating(&app.db, &caller.tenant_id).await?;
            let document = documents::add(&txn, new, &chunks, entity::now_millis()).await?;
            txn.commit().await?;
            app.notifier.documents_due();
            Ok(KnowledgeDocument::new(document))
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
            let (caller, app) = (principal(ctx)?, state(ctx)?);
            let changes = changes(input, app.settings.max_content_bytes)?;
            let text_bytes = changes.content.as_ref().map_or(0, String::len);
            request_writes::charge_document(ctx, text_bytes, app.settings.body_limit())?;
            let indexing = indexing(app);
            // Split before the write transaction, so no lock is held while splitting; if
            // another edit lands in between, split its result again.
            for _ in 0..SPLIT_ATTEMPTS {
                let seen = readable(&app.db, caller, id).await?;
                check_revision(&seen, expected_revision)?;
                let file = files::find(&app.db, id).await?;
                if file.is_some() && (changes.content.is_some() || changes.media_type.is_some()) {
                    return Err(ApiError::bad_input(
                        "this document's text comes from its uploaded file: send a new file with replaceKnowledgeDocumentFile",
                    ));
                }
                let (content, media_type) = changes.apply_to(&seen);
                let paged = file.as_ref().is_some_and(|file| file.media_type == entity::FileMediaType::Pdf);
                let chunks = app.splitter.split_as(content, media_type, paged).await?;
                let txn = begin_creating(&app.db, &caller.tenant_id).await?;
                let current = writable(&txn, caller, id).await?;
                if current.revision != seen.revision {
                    txn.rollback().await?;
                    continue;
                }
                let now = entity::now_millis();
                let editor = &caller.subject_id;
                let status = initial_status(indexing.embeddings_on);
                let updated = documents::update(&txn, current, changes, editor, &chunks, status, now).await?;
                if file.is_some() {
                    // A file still being extracted writes into the new revision; a file
                    // that failed keeps its document failed.
                    files::follow_revision(&txn, id, updated.revision).await?;
                }
                txn.commit().await?;
                app.notifier.documents_due();
                return Ok(KnowledgeDocument::new(updated));
            }
            Err(ApiError::conflict("the document kept changing while this edit was prepared; try again"))
        };
        run.await.gql()
    }

    /// Removes a document and its passages; research no longer retrieves it, while
    /// evidence already written keeps its text. True when it was removed; false when there
    /// is no such document the caller can see (removing twice answers false). Editors and
    /// owners; viewers and API keys are `FORBIDDEN`.
    async fn remove_knowledge_document(&self, ctx: &Context<'_>, id: Uuid) -> async_graphql::Result<bool> {
        let run = async {
            let (caller, app) = (principal(ctx)?, state(ctx)?);
            let txn = begin_write(&app.db).await?;
            let current = match writable(&txn, caller, id).await {
                Ok(current) => current,
                Err(ApiError::NotFound) => return Ok(false),
                Err(other) => return Err(other),
            };
            documents::remove(&txn, current).await?;
            txn.commit().await?;
            Ok(true)
        };
        run.await.gql()
    }
}

/// How this server indexes what it writes.
pub(super) fn indexing(app: &AppState) -> Indexing {
    Indexing::from_settings(&app.settings.worker)
}

/// Edits of one document that race with others are prepared at most this often.
const SPLIT_ATTEMPTS: usize = 3;

/// `CONFLICT` when the caller expected another revision.
pub(super) fn check_revision(
    document: &entity::knowledge_document::Model,
    expected: Option<i32>,
) -> Result<(), ApiError> {
    match expected {
        Some(expected) if expected != document.revision => {
            Err(ApiError::conflict(format!("the document is at revision {}, not {expected}", document.revision)))
        }
        _ => Ok(()),
    }
}

/// The document, unlocked, if the caller may change it (as [`writable`] answers).
async fn readable(
    db: &sea_orm::DatabaseConnection,
    caller: &Principal,
    id: Uuid,
) -> Result<entity::knowledge_document::Model, ApiError> {
    let document = documents::find(db, &caller.tenant_id, id).await?.ok_or(ApiError::NotFound)?;
    require_role(db, caller, document.knowledge_space_id, MemberRole::can_write_documents).await?;
    Ok(document)
}

/// The document, locked, if the caller may change it: `NOT_FOUND` when it does not exist
/// or its space is not visible to the caller, `FORBIDDEN` when the caller only reads.
pub(super) async fn writable(
    txn: &sea_orm::DatabaseTransaction,
    caller: &Principal,
    id: Uuid,
) -> Result<entity::knowledge_document::Model, ApiError> {
    let document = documents::lock(txn, &caller.tenant_id, id).await?.ok_or(ApiError::NotFound)?;
    require_role(txn, caller, document.knowledge_space_id, MemberRole::can_write_documents).await?;
    Ok(document)
}

/// The input's changes, each checked as when adding; nothing to change is bad input.
fn changes(input: UpdateKnowledgeDocumentInput, max_content_bytes: usize) -> Result<DocumentChanges, ApiError> {
    if let Some(title) = &input.title {
        limits::text("title", title, MAX_TITLE_CHARS)?;
    }
    if let Some(content) = &input.content {
        limits::content(content, max_content_bytes)?;
    }
    let source_uri = match input.source_uri {
        None => None,
        given => Some(limits::source_uri(given)?),
    };
    let metadata = match input.metadata {
        None => None,
        given => Some(limits::json_object("metadata", given.map(|metadata| metadata.0))?),
    };
    let changes = DocumentChanges {
        title: input.title,
        content: input.content,
        media_type: input.media_type.map(GqlMediaType::text_format).transpose()?,
        source_uri,
        metadata,
    };
    let nothing = changes.title.is_none()
        && changes.content.is_none()
        && changes.media_type.is_none()
        && changes.source_uri.is_none()
        && changes.metadata.is_none();
    if nothing {
        return Err(ApiError::bad_input("input must change at least one field"));
    }
    Ok(changes)
}
