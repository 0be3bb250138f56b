//! What people said to a task that may wait for them (`limits.approve_plan`,
//! `limits.clarify`): read once per run from its waits, since a wait ends the run that
//! starts it and is answered while no worker holds the task.
use entity::research_task_job as job;
use entity::research_task_wait::{CLARIFICATION, PLAN_APPROVAL};
use sea_orm::{DatabaseConnection, DbErr};

use crate::research::engine::{Clarification, limits_of};

/// A task's waits, as a run needs them.
#[derive(Debug, Clone, Default)]
pub(super) struct Human {
    /// The clarifying question asked before planning, with its answer.
    pub clarification: Option<Clarification>,
    /// Whether the plan was already put to a person (so planning does not ask again).
    pub plan_reviewed: bool,
    /// How long the task has waited for people, in milliseconds: not counted against
    /// `limits.deadline_ms`.
    pub waited_ms: i64,
}

impl Human {
    /// Reads the task's waits; nothing (no statement) for a task that never waits.
    pub async fn load(db: &DatabaseConnection, task: &job::Model, now: i64) -> Result<Self, DbErr> {
        if !limits_of(task).may_wait() {
            return Ok(Self::default());
        }
        let waits = crate::store::waits::of_task(db, task.id).await?;
        let mut human = Self::default();
        for wait in waits {
            human.waited_ms += wait.waited_ms(now);
            match wait.reason.as_str() {
                CLARIFICATION => {
                    human.clarification =
                        Some(Clarification { question: wait.question.unwrap_or_default(), answer: wait.answer });
                }
                PLAN_APPROVAL => human.plan_reviewed = true,
                _ => {}
            }
        }
        Ok(human)
    }
}
