//! `research_task_partial_results`: evidence bundles written as a task runs (seed table).
use sea_orm::entity::prelude::*;

/// One evidence bundle. Sequences are gapless per job; the idempotency key makes a re-run
/// after a crash write nothing twice.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "research_task_partial_results")]
pub struct Model {
    /// The result's id.
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
    /// The evidence, a JSON object.
    #[sea_orm(column_type = "JsonBinary")]
    pub evidence_bundle: Json,
    /// Epoch milliseconds.
    pub created_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
