//! GraphQL object and input types, each mapped from an entity model it wraps.

mod api_key;
mod audit;
mod awaiting;
mod citation;
mod document;
mod inputs;
mod journal;
mod note;
mod space;
mod task;
mod thread;
mod time;
mod trace;
mod viewer;
mod webhook;

pub use api_key::{ApiKey, CreatedApiKey};
pub use audit::{AuditEvent, ErasedCounts};
pub use awaiting::ResearchTaskAwaiting;
pub use document::KnowledgeDocument;
pub use inputs::{
    AddKnowledgeDocumentInput, AddKnowledgeSpaceMemberInput, CreateApiKeyInput, CreateKnowledgeSpaceInput,
    CreateResearchTaskInput, CreateResearchThreadInput, CreateWebhookEndpointInput, UpdateKnowledgeDocumentInput,
    UpdateResearchThreadInput,
};
pub use journal::{ResearchTaskAnswerDelta, ResearchTaskPartialResult, ResearchTaskProgressEvent};
pub use note::ResearchTaskNote;
pub use space::{KnowledgeSpace, KnowledgeSpaceMember};
pub use task::ResearchTask;
pub use thread::{ResearchThread, ResearchThreadEvent};
pub use time::datetime;
pub use trace::AnswerTrace;
pub use viewer::Viewer;
pub use webhook::{CreatedWebhookEndpoint, WebhookDelivery, WebhookEndpoint};
