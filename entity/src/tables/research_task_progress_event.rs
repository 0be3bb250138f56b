//! `research_task_progress_events`: what subscribers follow (seed table).
use sea_orm::entity::prelude::*;

use crate::{ProgressEventType, Stage};

/// One progress event. Sequences are gapless per job and allocated under the job's row
/// lock, so commit order equals sequence order.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "research_task_progress_events")]
pub struct Model {
    /// The event's id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The space's tenant.
    pub tenant_id: String,
    /// The space.
    pub knowledge_space_id: Uuid,
    /// The job.
    pub research_task_job_id: Uuid,
    /// 1, 2, 3… per job.
    pub sequence: i32,
    /// Unique per job.
    pub idempotency_key: String,
    /// What happened.
    pub event_type: ProgressEventType,
    /// The stage the task is in after the event.
    pub stage: Stage,
    /// Details, a JSON object.
    #[sea_orm(column_type = "JsonBinary")]
    pub payload: Json,
    /// Epoch milliseconds.
    pub created_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
