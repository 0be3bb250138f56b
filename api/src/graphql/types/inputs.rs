//! Mutation inputs. Limits are checked in the resolvers (see `limits`), so each violation
//! answers `BAD_USER_INPUT` naming its field.
use async_graphql::{InputObject, Json};
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::graphql::enums::{GqlMode, GqlRole};

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
    /// At most 200 KB.
    pub content: String,
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
    /// Limits, a JSON object of at most 16 KB.
    pub limits: Option<Json<Value>>,
    /// Your own data, a JSON object of at most 16 KB.
    pub metadata: Option<Json<Value>>,
    /// Repeating a request with the same key returns the same task; at most 255 characters.
    pub idempotency_key: Option<String>,
}
