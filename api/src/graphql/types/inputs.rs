//! Mutation inputs. Limits are checked in the resolvers (see `limits`), so each violation
//! answers `BAD_USER_INPUT` naming its field.
use async_graphql::{InputObject, Json};
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::graphql::enums::{GqlMediaType, GqlMode, GqlRole};

/// A new knowledge space; the caller becomes its owner.
#[derive(InputObject)]
pub struct CreateKnowledgeSpaceInput {
    /// At most 255 characters.
    pub name: String,
}

/// A member to add (or re-add, or give a new role).
#[derive(InputObject)]
pub struct AddKnowledgeSpaceMemberInput {
    /// The space.
    pub knowledge_space_id: Uuid,
    /// The subject (a JWT `sub`), at most 255 characters.
    pub subject_id: String,
    /// What the member may do.
    pub role: GqlRole,
}

/// A new API key for a space.
#[derive(InputObject)]
pub struct CreateApiKeyInput {
    /// The one space the key may act in.
    pub knowledge_space_id: Uuid,
    /// A label, at most 255 characters.
    pub name: String,
    /// When the key stops working; must be in the future. Null for no expiry.
    pub expires_at: Option<DateTime<Utc>>,
}

/// A document to add to a space.
#[derive(InputObject)]
pub struct AddKnowledgeDocumentInput {
    /// The space.
    pub knowledge_space_id: Uuid,
    /// At most 512 characters.
    pub title: String,
    /// The text, at most 5 MB of UTF-8 by default (`KFS_MAX_CONTENT_BYTES`). Passage
    /// character ranges index it in Unicode code points.
    pub content: String,
    /// What `content` is written in.
    #[graphql(default)]
    pub media_type: GqlMediaType,
    /// Where the document came from (a URL or any reference), at most 2048 characters.
    pub source_uri: Option<String>,
    /// Your own data, a JSON object of at most 16 KB.
    pub metadata: Option<Json<Value>>,
}

/// Changes to a document; omitted fields keep their value. Any change makes a new revision
/// and re-splits the document into passages in the same transaction.
#[derive(InputObject)]
pub struct UpdateKnowledgeDocumentInput {
    /// A new title, at most 512 characters.
    pub title: Option<String>,
    /// New content, within the same limit as when adding.
    pub content: Option<String>,
    /// A new format.
    pub media_type: Option<GqlMediaType>,
    /// A new source; an empty string clears it.
    pub source_uri: Option<String>,
    /// New metadata, replacing the old.
    pub metadata: Option<Json<Value>>,
}

/// A research task to start.
#[derive(InputObject)]
pub struct CreateResearchTaskInput {
    /// The space to research.
    pub knowledge_space_id: Uuid,
    /// The question, 1 to 4000 characters.
    pub query: String,
    /// How hard to work; the engine decides when null.
    pub mode: Option<GqlMode>,
    /// How much evidence to keep, 1 to 100.
    pub top_k: Option<i32>,
    /// The most the task may spend, at least 0.
    pub budget_usd: Option<f64>,
    /// Limits, a JSON object of at most 16 KB. Each key must be one of these; an unknown
    /// key, or a value of the wrong type or out of range, is BAD_USER_INPUT naming the key,
    /// and `null` (or leaving a key out) means its default:
    ///
    #[doc = entity::task_limits_doc!()]
    pub limits: Option<Json<Value>>,
    /// Which documents evidence may come from (stored in `limits` under `filters`; give it
    /// here or there, not both).
    pub filters: Option<ResearchFiltersInput>,
    /// Your own data, a JSON object of at most 16 KB.
    pub metadata: Option<Json<Value>>,
    /// Repeating a request with the same key returns the same task; at most 255 characters.
    /// In a thread the key is the thread's: the same key in another thread is a new turn.
    pub idempotency_key: Option<String>,
    /// Adds the task as the next turn of this thread (yours, in `knowledgeSpaceId`: a
    /// thread of another space is BAD_USER_INPUT, a missing or foreign one NOT_FOUND). A
    /// thread holds at most `KFS_THREAD_MAX_TURNS` turns (500 by default); one more is
    /// BAD_USER_INPUT.
    pub thread_id: Option<Uuid>,
    /// With `threadId`: what to do when the thread has an unfinished turn (ENQUEUE when
    /// null). A repeated `idempotencyKey` returns its turn whatever the strategy. Ignored
    /// outside a thread.
    pub multitask_strategy: Option<crate::graphql::enums::GqlMultitaskStrategy>,
}

/// A new research thread.
#[derive(InputObject)]
pub struct CreateResearchThreadInput {
    /// The space every turn researches.
    pub knowledge_space_id: Uuid,
    /// A title, at most 512 characters (blank is none).
    pub title: Option<String>,
    /// Your own data, a JSON object of at most 16 KB.
    pub metadata: Option<Json<Value>>,
}

/// Changes to a research thread: a field left out keeps its value; `title: null` clears
/// the title.
#[derive(InputObject)]
pub struct UpdateResearchThreadInput {
    /// A title, at most 512 characters.
    pub title: async_graphql::MaybeUndefined<String>,
    /// Your own data, a JSON object of at most 16 KB (replaces the old).
    pub metadata: Option<Json<Value>>,
}

impl CreateResearchTaskInput {
    /// The input as the application layer takes it (checked there).
    pub fn into_request(self) -> worker::app::tasks::TaskRequest {
        worker::app::tasks::TaskRequest {
            knowledge_space_id: self.knowledge_space_id,
            query: self.query,
            mode: self.mode.map(entity::ResearchMode::from),
            top_k: self.top_k,
            budget_usd: self.budget_usd,
            limits: self.limits.map(|Json(limits)| limits),
            filters: self.filters.as_ref().map(ResearchFiltersInput::to_json),
            metadata: self.metadata.map(|Json(metadata)| metadata),
            idempotency_key: self.idempotency_key,
            thread_id: self.thread_id,
            multitask_strategy: self.multitask_strategy.map(Into::into),
            new_thread: false,
        }
    }
}

/// Which documents of the space a task's evidence may come from, in every round and for
/// full-text and vector search alike. Every condition given must hold; a filter that
/// matches no document gives the no-evidence answer.
#[derive(InputObject, Default)]
pub struct ResearchFiltersInput {
    /// Each key must match the document's `metadata` value for that key by JSON equality
    /// with types kept (`1` is not `"1"`); a list here means any of its values; a document
    /// value that is a list matches when any element does. At most 32 keys; values are
    /// strings, numbers, booleans or null, or lists of 1 to 100 of them.
    pub metadata: Option<Json<Value>>,
    /// What the document is.
    pub media_types: Option<Vec<GqlMediaType>>,
    /// Only these documents (at most 1,000).
    pub document_ids: Option<Vec<Uuid>>,
    /// Documents created at or after this instant.
    pub created_after: Option<chrono::DateTime<chrono::Utc>>,
    /// Documents created before this instant.
    pub created_before: Option<chrono::DateTime<chrono::Utc>>,
}

impl ResearchFiltersInput {
    /// The filters in the shape `limits.filters` stores.
    pub fn to_json(&self) -> Value {
        let mut object = serde_json::Map::new();
        if let Some(Json(metadata)) = &self.metadata {
            object.insert("metadata".to_owned(), metadata.clone());
        }
        if let Some(types) = &self.media_types {
            object.insert("mediaTypes".to_owned(), types.iter().map(|kind| Value::from(kind.name())).collect());
        }
        if let Some(ids) = &self.document_ids {
            object.insert("documentIds".to_owned(), ids.iter().map(|id| Value::from(id.to_string())).collect());
        }
        let instant =
            |at: &chrono::DateTime<chrono::Utc>| Value::from(at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true));
        if let Some(after) = &self.created_after {
            object.insert("createdAfter".to_owned(), instant(after));
        }
        if let Some(before) = &self.created_before {
            object.insert("createdBefore".to_owned(), instant(before));
        }
        Value::Object(object)
    }
}

/// A webhook endpoint for the caller's own tasks in a space.
#[derive(InputObject)]
pub struct CreateWebhookEndpointInput {
    /// The space whose tasks (the caller's own) it follows.
    pub knowledge_space_id: uuid::Uuid,
    /// Where deliveries are POSTed: HTTPS to a public address (unless the server allows
    /// private ones), at most 2,048 characters.
    pub url: String,
    /// The event types to deliver; at least one.
    pub events: Vec<crate::graphql::enums::GqlEventType>,
}
