//! `audit_events`: the append-only record of security-relevant actions.
use sea_orm::entity::prelude::*;

use crate::AccessChannel;

/// One recorded action.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "audit_events")]
pub struct Model {
    /// UUID v7, so ids sort by time.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The tenant whose data the action concerned (an operator's own, for tenant erasure).
    pub tenant_id: String,
    /// The space it concerned, when one.
    pub knowledge_space_id: Option<Uuid>,
    /// What was done, as `<thing>.<verb>` (`api_key.rotated`).
    pub action: String,
    /// Who did it.
    pub actor_subject_id: String,
    /// How they reached the service.
    pub actor_channel: AccessChannel,
    /// The API key they presented, if any.
    pub actor_api_key_id: Option<Uuid>,
    /// The identity provider that vouched for them, if any.
    pub actor_issuer: Option<String>,
    /// The request's `x-request-id`.
    pub request_id: Option<String>,
    /// The kind of thing acted on (`api_key`, `member`, `knowledge_space`, …).
    pub target_type: String,
    /// Its id (a subject id for members).
    pub target_id: Option<String>,
    /// What else is worth knowing (a role, a revision, counts); never a secret or content.
    pub details: Json,
    /// Epoch milliseconds.
    pub created_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
