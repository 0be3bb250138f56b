//! `research_task_jobs`: one research task and its lease (seed table).
use sea_orm::entity::prelude::*;

use crate::{AccessChannel, ResearchMode, Stage};

/// A research task. Only the worker crate's lifecycle module writes these rows.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "research_task_jobs")]
pub struct Model {
    /// The task's id.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The space's tenant.
    pub tenant_id: String,
    /// The space researched.
    pub knowledge_space_id: Uuid,
    /// Who created the task; the only subject that may see it.
    pub subject_id: String,
    /// The grant the task runs under.
    pub permission_snapshot_id: Uuid,
    /// The grant's revision.
    pub permission_snapshot_revision: i32,
    /// How the creator reached the service.
    pub access_channel: AccessChannel,
    /// The question.
    #[sea_orm(column_type = "Text")]
    pub query: String,
    /// How hard to work; null means the engine's default.
    pub mode: Option<ResearchMode>,
    /// How much evidence to keep; null means the engine's default.
    pub top_k: Option<i32>,
    /// The most the task may spend; null for no budget.
    #[sea_orm(column_type = "Double")]
    pub budget_usd: Option<f64>,
    /// Limits (max sub-queries, max evidence, deadline), a JSON object.
    #[sea_orm(column_type = "JsonBinary")]
    pub limits: Json,
    /// The client's own data, a JSON object.
    #[sea_orm(column_type = "JsonBinary")]
    pub metadata: Json,
    /// What the engine spent so far, a JSON object.
    #[sea_orm(column_type = "JsonBinary")]
    pub cost: Json,
    /// Where the task stands.
    pub stage: Stage,
    /// The stage a paused task returns to.
    pub paused_from_stage: Option<Stage>,
    /// The queue's id for the latest delivery.
    pub queue_job_id: Option<String>,
    /// Why the task failed (or the last retried attempt's error).
    #[sea_orm(column_type = "Text")]
    pub error: Option<String>,
    /// Epoch milliseconds at which a paused task resumes by itself.
    pub resume_after: Option<i64>,
    /// Epoch milliseconds.
    pub paused_at: Option<i64>,
    /// Epoch milliseconds.
    pub completed_at: Option<i64>,
    /// Increases on every update; API mutations compare it.
    pub row_version: i32,
    /// Claims so far.
    pub execution_attempts: i32,
    /// Claims allowed before the task fails.
    pub max_execution_attempts: i32,
    /// The worker holding the lease.
    pub worker_id: Option<String>,
    /// The fencing token every worker write carries.
    pub lease_token: Option<Uuid>,
    /// Epoch milliseconds when the lease lapses.
    pub lease_expires_at: Option<i64>,
    /// Epoch milliseconds of the last heartbeat.
    pub heartbeat_at: Option<i64>,
    /// Epoch milliseconds before which a failed attempt is not retried.
    pub retry_at: Option<i64>,
    /// Epoch milliseconds.
    pub created_at: i64,
    /// Epoch milliseconds.
    pub updated_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
