//! `research_task_waits`: what a paused task waits for from a person (plan approval or a
//! clarifying question) and how the wait ended. At most one wait of each reason per task.
use sea_orm::entity::prelude::*;

/// Why a task waits: `plan_approval` (after planning, before the first retrieval).
pub const PLAN_APPROVAL: &str = "plan_approval";
/// Why a task waits: `clarification` (before planning).
pub const CLARIFICATION: &str = "clarification";

/// One input wait.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "research_task_waits")]
pub struct Model {
    /// The wait.
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: Uuid,
    /// The task that waits.
    pub research_task_job_id: Uuid,
    /// `plan_approval` or `clarification`.
    pub reason: String,
    /// The plan proposed for approval (`{mode, sub_queries}`); null for a clarification.
    #[sea_orm(column_type = "JsonBinary", nullable)]
    pub proposed_plan: Option<Json>,
    /// The clarifying question; null for a plan approval.
    pub question: Option<String>,
    /// When the wait began, epoch milliseconds.
    pub since: i64,
    /// When it ends by itself (`limits.input_timeout_ms` after `since`).
    pub until: i64,
    /// When it ended; null while the task waits.
    pub resolved_at: Option<i64>,
    /// `approved`, `answered`, `resumed`, `timed_out` or `canceled`; null while it waits.
    pub resolution: Option<String>,
    /// The plan round 1 searches, as approved (edited or as proposed).
    #[sea_orm(column_type = "JsonBinary", nullable)]
    pub approved_plan: Option<Json>,
    /// The person's answer to the clarifying question.
    pub answer: Option<String>,
}

impl Model {
    /// Whether the task still waits on it.
    pub fn is_open(&self) -> bool {
        self.resolved_at.is_none()
    }

    /// How long the task waited (until `now` while it still waits).
    pub fn waited_ms(&self, now: i64) -> i64 {
        (self.resolved_at.unwrap_or(now) - self.since).max(0)
    }
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
