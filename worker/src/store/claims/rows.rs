//! A lease as the lifecycle decides it, and the leased row.
use entity::{GrantDenial, Stage, research_task_job as job};
use uuid::Uuid;

use crate::store::boundaries::EventWrite;

/// One lease, as decided: a due row (locked by the caller's transaction) goes to
/// `worker_id` under a new token, counts an attempt, and runs from `stage`.
#[derive(Debug, Clone)]
pub struct LeaseWrite {
    /// The task.
    pub job_id: Uuid,
    /// The fencing token of the new lease.
    pub token: Uuid,
    /// The worker it goes to.
    pub worker_id: String,
    /// The stage it runs from (the first of the pipeline for a queued task).
    pub stage: Stage,
    /// When the lease lapses unless renewed.
    pub lease_expires_at: i64,
    /// The claim's time.
    pub now: i64,
    /// Its `started` event, when it starts now.
    pub started: Option<EventWrite>,
}

/// A leased task.
#[derive(Debug, Clone)]
pub struct Leased {
    /// The row as leased.
    pub job: job::Model,
    /// Its `started` event's sequence and whether it is new, when one was asked for.
    pub started: Option<crate::store::journal::Appended>,
    /// Whether the task's creator has an enabled webhook endpoint.
    pub any_endpoint: bool,
    /// Why the task's grant does not hold at the claim's time (`None`: it holds).
    pub grant: Option<GrantDenial>,
}
