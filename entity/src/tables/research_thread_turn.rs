//! `research_thread_turns`: which task is a turn of which thread.
use sea_orm::entity::prelude::*;

/// One turn.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "research_thread_turns")]
pub struct Model {
    /// The task the turn is.
    #[sea_orm(primary_key, auto_increment = false)]
    pub research_task_job_id: Uuid,
    /// Its thread.
    pub research_thread_id: Uuid,
    /// When the turn was added (its task's creation), epoch milliseconds.
    pub created_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
