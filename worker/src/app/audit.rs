//! The audit log as operations write it: one append-only row per security-relevant
//! action, written in the transaction of the action itself (`crate::store::audit`), so an
//! action is recorded exactly when it happened.
//! Rows name who (subject, channel, API key, identity provider), what, on which thing and
//! from which request; never a secret and never task content.
use entity::audit_event as event;
use sea_orm::{ConnectionTrait, DbErr};
use serde_json::Value;
use uuid::Uuid;

use super::Principal;

/// The actions recorded, as stored and as `AuditEvent.action` shows them.
pub mod action {
    /// An API key was minted.
    pub const API_KEY_CREATED: &str = "api_key.created";
    /// An API key got a new secret (and revision).
    pub const API_KEY_ROTATED: &str = "api_key.rotated";
    /// An API key was revoked.
    pub const API_KEY_REVOKED: &str = "api_key.revoked";
    /// A subject became a member (or a removed one came back).
    pub const MEMBER_ADDED: &str = "member.added";
    /// A member's role changed.
    pub const MEMBER_CHANGED: &str = "member.changed";
    /// A member was removed.
    pub const MEMBER_REMOVED: &str = "member.removed";
    /// A space was created.
    pub const SPACE_CREATED: &str = "knowledge_space.created";
    /// A space and everything in it were deleted.
    pub const SPACE_DELETED: &str = "knowledge_space.deleted";
    /// A research task was deleted by its owner.
    pub const TASK_DELETED: &str = "research_task.deleted";
    /// A research thread (and its turns) was deleted by its owner.
    pub const THREAD_DELETED: &str = "research_thread.deleted";
    /// An answer trace was deleted by its owner.
    pub const TRACE_DELETED: &str = "answer_trace.deleted";
    /// A webhook endpoint was registered.
    pub const WEBHOOK_CREATED: &str = "webhook_endpoint.created";
    /// A webhook endpoint's signing secret was replaced.
    pub const WEBHOOK_SECRET_ROTATED: &str = "webhook_endpoint.secret_rotated";
    /// A webhook endpoint was disabled.
    pub const WEBHOOK_DISABLED: &str = "webhook_endpoint.disabled";
    /// An operator erased a tenant.
    pub const TENANT_ERASED: &str = "tenant.erased";
    /// An operator made a dead outbox row pending again.
    pub const OUTBOX_REDELIVERED: &str = "outbox.redelivered";
}

/// Who acts, and from which request.
#[derive(Debug, Clone, Copy)]
pub struct Actor<'a> {
    /// The authenticated caller.
    pub principal: &'a Principal,
    /// The id of the request it came with (`x-request-id`), when it came with one.
    pub request_id: Option<&'a str>,
}

/// What is recorded about one action.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// The tenant whose data it concerns.
    pub tenant_id: &'a str,
    /// The space it concerns, if one.
    pub knowledge_space_id: Option<Uuid>,
    /// One of [`action`].
    pub action: &'static str,
    /// The kind of thing acted on.
    pub target_type: &'static str,
    /// Its id.
    pub target_id: Option<String>,
    /// Anything else worth knowing; never a secret or content.
    pub details: Value,
}

/// Appends `entry`, done by `actor`, at `now`.
pub async fn record<C: ConnectionTrait>(conn: &C, actor: Actor<'_>, entry: Entry<'_>, now: i64) -> Result<(), DbErr> {
    crate::store::audit::insert(conn, row(actor, entry, now)).await
}

/// The row `record` appends, for actions whose transaction the lifecycle owns (it inserts
/// the row there).
pub fn row(actor: Actor<'_>, entry: Entry<'_>, now: i64) -> event::Model {
    let caller = actor.principal;
    event::Model {
        id: Uuid::now_v7(),
        tenant_id: entry.tenant_id.to_owned(),
        knowledge_space_id: entry.knowledge_space_id,
        action: entry.action.to_owned(),
        actor_subject_id: caller.subject_id.clone(),
        actor_channel: caller.channel,
        actor_api_key_id: caller.api_key.as_ref().map(|key| key.key_id),
        actor_issuer: caller.issuer.clone(),
        request_id: actor.request_id.map(str::to_owned),
        target_type: entry.target_type.to_owned(),
        target_id: entry.target_id,
        details: entry.details,
        created_at: now,
    }
}
