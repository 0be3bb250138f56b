//! A held lease, and keeping it: what a claim hands the worker (`claim.rs`), and the
//! heartbeats that renew it while a stage runs. Every write after the claim is fenced by
//! the lease's token: a worker whose lease was re-claimed, canceled or paused gets
//! [`LifecycleError::LeaseLost`] and writes nothing.
use entity::{GrantDenial, research_task_job as job};
use sea_orm::DatabaseConnection;
use uuid::Uuid;

use super::LifecycleError;
pub use crate::store::tasks::LeasePair;

/// A held lease: what every fenced write carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lease {
    /// The job leased.
    pub job_id: Uuid,
    /// The fencing token; the row must still hold it for a write to land.
    pub token: Uuid,
    /// The worker holding it.
    pub worker_id: String,
}

impl Lease {
    /// The job and token, as the store checks them.
    pub fn pair(&self) -> LeasePair {
        LeasePair { job_id: self.job_id, token: self.token }
    }
}

/// A job this worker now runs, as the claim left it.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The job row after the claim committed.
    pub job: job::Model,
    /// The lease to carry on every later write.
    pub lease: Lease,
    /// The task's grant at the claim's time, checked in the claim's own transaction
    /// (`None`: it held), so the run need not ask again before its first stage.
    pub grant: Option<GrantDenial>,
}

/// Extends the lease while a stage runs. Lease internals only: neither `row_version` nor
/// `updated_at` moves, so a client's `expectedRowVersion` is not made stale every few
/// seconds by a change it cannot see.
#[tracing::instrument(name = "heartbeat", level = "debug", skip_all, fields(task.id = %lease.job_id))]
pub async fn heartbeat(db: &DatabaseConnection, lease: &Lease, lease_ms: i64, now: i64) -> Result<(), LifecycleError> {
    let lost = crate::store::tasks::renew_leases(db, &[lease.pair()], lease_ms, now).await?;
    if lost.is_empty() { Ok(()) } else { Err(LifecycleError::LeaseLost) }
}

/// Extends many leases at once, as [`heartbeat`] does one; returns the jobs whose lease
/// was lost (empty in the common case, which costs one statement per 10,000 leases).
#[tracing::instrument(name = "heartbeats", level = "debug", skip_all, fields(leases = leases.len()))]
pub async fn heartbeats(
    db: &DatabaseConnection,
    leases: &[LeasePair],
    lease_ms: i64,
    now: i64,
) -> Result<Vec<Uuid>, LifecycleError> {
    Ok(crate::store::tasks::renew_leases(db, leases, lease_ms, now).await?)
}
