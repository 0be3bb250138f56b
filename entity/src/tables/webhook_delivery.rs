//! `webhook_deliveries`: one task event for one endpoint, sent at least once with a
//! stable id (the `webhook-id` header) until delivered or dead.
use sea_orm::entity::prelude::*;

/// One delivery.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "webhook_deliveries")]
pub struct Model {
    /// The delivery's id, sent as `webhook-id` (`msg_<id>`).
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The endpoint.
    pub endpoint_id: Uuid,
    /// The task's tenant.
    pub tenant_id: String,
    /// The task.
    pub research_task_job_id: Uuid,
    /// The progress event's type (`research_task.completed` for a completion).
    pub event_type: String,
    /// The task's stage after the event.
    pub stage: String,
    /// The progress event's sequence.
    pub sequence: i32,
    /// The exact body sent (and signed): ids, never content.
    pub body: String,
    /// `pending`, `delivered` or `dead`.
    pub status: String,
    /// Attempts made.
    pub attempts: i32,
    /// When the next attempt is due, epoch milliseconds.
    pub next_attempt_at: i64,
    /// The sender holding it, if one does.
    pub lock_token: Option<Uuid>,
    /// Who holds it.
    pub locked_by: Option<String>,
    /// Until when.
    pub locked_until: Option<i64>,
    /// The last attempt's HTTP status, if it got one.
    pub last_status_code: Option<i32>,
    /// The last attempt's error, if it failed.
    pub last_error: Option<String>,
    /// Epoch milliseconds.
    pub created_at: i64,
    /// Epoch milliseconds.
    pub updated_at: i64,
    /// When a 2xx came back.
    pub delivered_at: Option<i64>,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
