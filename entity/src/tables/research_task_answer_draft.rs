//! `research_task_answer_drafts`: the answer of a task as written so far, for
//! `researchTaskAnswer` subscribers in any process.
use sea_orm::entity::prelude::*;

/// One task's draft answer.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "research_task_answer_drafts")]
pub struct Model {
    /// The task.
    #[sea_orm(primary_key, auto_increment = false)]
    pub research_task_job_id: Uuid,
    /// The task's tenant.
    pub tenant_id: String,
    /// Counts restarts of generation; within one the text only grows.
    pub generation: i32,
    /// The citation-checked answer so far (the whole answer once the task completed).
    pub answer: String,
    /// `answer`'s length in Unicode code points.
    pub char_count: i32,
    /// Epoch milliseconds.
    pub updated_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
