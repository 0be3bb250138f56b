//! `research_task_outbox`: deliveries of jobs to the queue (seed table).
use sea_orm::entity::prelude::*;

use crate::OutboxStatus;

/// The only event type the seed allows.
pub const EVENT_TYPE: &str = "research.task";
/// The only message schema version the seed allows.
pub const SCHEMA_VERSION: i32 = 1;

/// One delivery of one job, written in the job's transaction.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "research_task_outbox")]
pub struct Model {
    /// The delivery's id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The job delivered.
    pub research_task_job_id: Uuid,
    /// 1 on create, +1 on every resume.
    pub delivery_revision: i32,
    /// Always `research.task`.
    pub event_type: String,
    /// Always 1.
    pub schema_version: i32,
    /// The message id on the queue.
    pub idempotency_key: String,
    /// The message body.
    #[sea_orm(column_type = "JsonBinary")]
    pub payload: Json,
    /// Where the delivery stands.
    pub status: OutboxStatus,
    /// Epoch milliseconds before which it is not dispatched.
    pub available_at: i64,
    /// Publish attempts so far.
    pub dispatch_attempts: i32,
    /// The outbox loop that holds it.
    pub locked_by: Option<String>,
    /// Epoch milliseconds when that lock lapses.
    pub locked_until: Option<i64>,
    /// Fencing token of the lock.
    pub lock_token: Option<Uuid>,
    /// The queue's id for the published message.
    pub queue_job_id: Option<String>,
    /// The last publish error.
    #[sea_orm(column_type = "Text")]
    pub last_error: Option<String>,
    /// Epoch milliseconds when it was published.
    pub delivered_at: Option<i64>,
    /// Epoch milliseconds.
    pub created_at: i64,
    /// Epoch milliseconds.
    pub updated_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
