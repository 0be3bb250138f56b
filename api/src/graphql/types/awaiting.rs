//! `ResearchTaskAwaiting`: what a paused task waits for from a person.
use async_graphql::{Enum, Object};
use chrono::{DateTime, Utc};
use entity::research_task_wait::{self as wait, CLARIFICATION};

use super::datetime;

/// What a task waits for from a person.
#[derive(Enum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum AwaitingReason {
    /// Its plan, before the first retrieval: `approveResearchPlan` (possibly edited) or
    /// `resumeResearchTask` (as proposed).
    PlanApproval,
    /// An answer to its clarifying question, before planning: `answerResearchClarification`,
    /// or `resumeResearchTask` to go on without one.
    Clarification,
}

/// What a paused task waits for from a person, and until when: at `until`
/// (`limits.input_timeout_ms` after `since`) it goes on by itself, plan approval with
/// the proposed plan and a clarification without an answer.
pub struct ResearchTaskAwaiting(pub wait::Model);

/// What a paused task waits for from a person, and until when: at `until`
/// (`limits.input_timeout_ms` after `since`) it goes on by itself, plan approval with
/// the proposed plan and a clarification without an answer.
#[Object]
impl ResearchTaskAwaiting {
    /// What it waits for.
    async fn reason(&self) -> AwaitingReason {
        if self.0.reason == CLARIFICATION { AwaitingReason::Clarification } else { AwaitingReason::PlanApproval }
    }

    /// The proposed plan's sub-queries (plan approval only).
    async fn plan(&self) -> Option<Vec<String>> {
        self.0.proposed_plan.as_ref().map(worker::app::tasks::plan_queries)
    }

    /// The clarifying question (clarification only).
    async fn question(&self) -> Option<&str> {
        self.0.question.as_deref()
    }

    /// When the wait began.
    async fn since(&self) -> DateTime<Utc> {
        datetime(self.0.since)
    }

    /// When the task goes on by itself if nobody answers.
    async fn until(&self) -> DateTime<Utc> {
        datetime(self.0.until)
    }
}
