//! The audit log as owners and operators read it, and what a deletion removed.
use async_graphql::{Json, Object, SimpleObject};
use chrono::{DateTime, Utc};
use entity::audit_event as event;
use serde_json::Value;
use uuid::Uuid;

use super::datetime;
use crate::graphql::enums::GqlChannel;

/// One security-relevant action: who did what, when, from which request. Never a secret
/// and never task content.
pub struct AuditEvent(pub event::Model);

#[Object]
impl AuditEvent {
    async fn id(&self) -> Uuid {
        self.0.id
    }
    /// `api_key.created`, `api_key.rotated`, `api_key.revoked`, `member.added`,
    /// `member.changed`, `member.removed`, `knowledge_space.created`,
    /// `knowledge_space.deleted`, `research_task.deleted`, `research_thread.deleted`, `answer_trace.deleted`,
    /// `webhook_endpoint.created`, `webhook_endpoint.secret_rotated`,
    /// `webhook_endpoint.disabled`, `tenant.erased` or `outbox.redelivered`.
    async fn action(&self) -> &str {
        &self.0.action
    }
    /// The tenant whose data it concerned (for `tenant.erased`, the operator's own).
    async fn tenant_id(&self) -> &str {
        &self.0.tenant_id
    }
    /// The space it concerned, if one.
    async fn knowledge_space_id(&self) -> Option<Uuid> {
        self.0.knowledge_space_id
    }
    /// Who did it (`api_key:<id>` for service clients).
    async fn actor_subject_id(&self) -> &str {
        &self.0.actor_subject_id
    }
    /// How they reached the service.
    async fn actor_channel(&self) -> GqlChannel {
        self.0.actor_channel.into()
    }
    /// The API key they presented, if any.
    async fn actor_api_key_id(&self) -> Option<Uuid> {
        self.0.actor_api_key_id
    }
    /// The identity provider (`iss`) that vouched for them, if any.
    async fn actor_issuer(&self) -> Option<&str> {
        self.0.actor_issuer.as_deref()
    }
    /// The request's `x-request-id` (the response to it carried the same).
    async fn request_id(&self) -> Option<&str> {
        self.0.request_id.as_deref()
    }
    /// What was acted on: `api_key`, `member`, `knowledge_space`, `research_task`,
    /// `answer_trace`, `webhook_endpoint`, `tenant` or `research_task_outbox`.
    async fn target_type(&self) -> &str {
        &self.0.target_type
    }
    /// Its id (a member's subject id).
    async fn target_id(&self) -> Option<&str> {
        self.0.target_id.as_deref()
    }
    /// Particulars: a role change, a revision, what a deletion removed.
    async fn details(&self) -> Json<&Value> {
        Json(&self.0.details)
    }
    async fn created_at(&self) -> DateTime<Utc> {
        datetime(self.0.created_at)
    }
}

/// What a deletion removed, by kind.
#[derive(SimpleObject)]
pub struct ErasedCounts {
    /// Knowledge spaces.
    pub knowledge_spaces: i64,
    /// Research tasks, with their progress events, partial results and answer drafts.
    pub research_tasks: i64,
    /// Answer traces.
    pub answer_traces: i64,
    /// Documents, with their passages and embeddings.
    pub documents: i64,
    /// Permission snapshots (the grants tasks ran under).
    pub permission_snapshots: i64,
    /// Memberships, removed ones included.
    pub members: i64,
    /// API keys.
    pub api_keys: i64,
    /// Webhook endpoints, with their deliveries.
    pub webhook_endpoints: i64,
    /// Audit events (erasing a tenant only).
    pub audit_events: i64,
}

impl ErasedCounts {
    /// From the lifecycle's counts and the audit events erased.
    pub fn new(erased: worker::app::deletes::Erased, audit_events: u64) -> Self {
        let count = |value: u64| i64::try_from(value).unwrap_or(i64::MAX);
        Self {
            knowledge_spaces: count(erased.knowledge_spaces),
            research_tasks: count(erased.research_tasks),
            answer_traces: count(erased.answer_traces),
            documents: count(erased.documents),
            permission_snapshots: count(erased.permission_snapshots),
            members: count(erased.members),
            api_keys: count(erased.api_keys),
            webhook_endpoints: count(erased.webhook_endpoints),
            audit_events: count(audit_events),
        }
    }
}
