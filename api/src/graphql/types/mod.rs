//! GraphQL object and input types, each mapped from an entity model it wraps.

mod api_key;
mod audit;
mod document;
mod inputs;
mod journal;
mod space;
mod task;
mod trace;
mod viewer;
mod webhook;

pub use api_key::{ApiKey, CreatedApiKey};
pub use audit::{AuditEvent, ErasedCounts};
pub use document::KnowledgeDocument;
pub use inputs::{
    AddKnowledgeDocumentInput, AddKnowledgeSpaceMemberInput, CreateApiKeyInput, CreateKnowledgeSpaceInput,
    CreateResearchTaskInput, CreateWebhookEndpointInput, UpdateKnowledgeDocumentInput,
};
pub use journal::{ResearchTaskAnswerDelta, ResearchTaskPartialResult, ResearchTaskProgressEvent};
pub use space::{KnowledgeSpace, KnowledgeSpaceMember};
pub use task::ResearchTask;
pub use trace::AnswerTrace;
pub use viewer::Viewer;
pub use webhook::{CreatedWebhookEndpoint, WebhookDelivery, WebhookEndpoint};

use chrono::{DateTime, Utc};

/// An epoch-milliseconds column as a DateTime. Columns hold times the service wrote, so
/// the out-of-range fallback (the epoch) is never expected to show.
pub fn datetime(millis: i64) -> DateTime<Utc> {
    DateTime::from_timestamp_millis(millis).unwrap_or_default()
}
