//! `research_task_notes`: guidance a person added to a running task, oldest first.
use sea_orm::entity::prelude::*;

/// One steering note.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "research_task_notes")]
pub struct Model {
    /// The note.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The task it steers.
    pub research_task_job_id: Uuid,
    /// What it says (1 to 2,000 characters).
    pub text: String,
    /// Epoch milliseconds.
    pub created_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
