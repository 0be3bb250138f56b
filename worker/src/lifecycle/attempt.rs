//! The end of an attempt that did not reach a boundary: a failure (retried later, or the
//! task failed for good) or a release (graceful shutdown gives the lease back). Both are
//! the lease holder's writes, fenced by its token.
use crate::retry::RetryPolicy;
use entity::{OutboxStatus, ProgressEventType, Stage, research_task_job as job};
use sea_orm::{ConnectionTrait, DatabaseConnection};
use serde_json::json;

use super::commit::{clear_lease, commit, touch};
use super::events::{self, Appended, Event};
use super::{Lease, LifecycleError};
use crate::notify::{Notifier, TaskSignal};
use crate::research::cost::CostDelta;
use crate::store::{self, begin_write};

/// Why an attempt failed.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Kept in the job's `error`.
    pub message: String,
    /// Whether another attempt may succeed (a database hiccup) or not (a denied grant, a
    /// budget spent).
    pub retryable: bool,
    /// What the attempt spent before failing.
    pub cost_delta: CostDelta,
}

/// What became of a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailOutcome {
    /// The job waits in its stage until `retry_at` (epoch ms).
    Retrying {
        /// When the lease loop may claim it again.
        retry_at: i64,
    },
    /// The job ended in `failed`.
    Failed,
}

/// Locks the job and checks it still carries this lease: the fence of a lease holder's
/// write outside a boundary.
pub(super) async fn lock_leased<C: ConnectionTrait>(txn: &C, lease: &Lease) -> Result<job::Model, LifecycleError> {
    match store::tasks::lock(txn, lease.job_id).await? {
        Some(current) if current.lease_token == Some(lease.token) => Ok(current),
        _ => Err(LifecycleError::LeaseLost),
    }
}

/// Records a failed attempt: a retryable failure with attempts left waits until `retry_at`
/// in its stage with the lease cleared; anything else ends in `failed` with the error kept.
#[tracing::instrument(name = "fail attempt", level = "debug", skip_all, fields(task.id = %lease.job_id))]
pub async fn fail_attempt(
    db: &DatabaseConnection,
    notifier: &Notifier,
    lease: &Lease,
    failure: Failure,
    policy: RetryPolicy,
    now: i64,
) -> Result<FailOutcome, LifecycleError> {
    let txn = begin_write(db).await?;
    let current = lock_leased(&txn, lease).await?;
    let attempts_left = current.execution_attempts < current.max_execution_attempts;
    let (outcome, signal) = if failure.retryable && attempts_left {
        let retry_at = now + policy.delay_ms(current.execution_attempts);
        let mut row = current.clone();
        touch(&mut row, now);
        clear_lease(&mut row);
        row.retry_at = Some(retry_at);
        row.error = Some(failure.message);
        row.cost = failure.cost_delta.added_to(&current.cost);
        store::tasks::save(&txn, row).await?;
        (FailOutcome::Retrying { retry_at }, TaskSignal::by_lease_holder(current.id))
    } else {
        let failed = fail(&txn, current.clone(), &failure.message, &failure.cost_delta, now).await?;
        (FailOutcome::Failed, TaskSignal::by_lease_holder(current.id).with_webhooks(failed.webhooks))
    };
    commit(txn, notifier, vec![signal]).await?;
    match outcome {
        FailOutcome::Retrying { .. } => metrics::counter!("research_task_retries_total").increment(1),
        FailOutcome::Failed => metrics::counter!("research_tasks_ended_total", "stage" => "failed").increment(1),
    }
    Ok(outcome)
}

/// Gives the lease back (graceful shutdown) so another worker picks the job up at once;
/// the attempt it used is given back too, since nothing failed.
#[tracing::instrument(name = "release", level = "debug", skip_all, fields(task.id = %lease.job_id))]
pub async fn release(
    db: &DatabaseConnection,
    notifier: &Notifier,
    lease: &Lease,
    now: i64,
) -> Result<(), LifecycleError> {
    let txn = begin_write(db).await?;
    let mut row = lock_leased(&txn, lease).await?;
    touch(&mut row, now);
    clear_lease(&mut row);
    row.execution_attempts = (row.execution_attempts - 1).max(0);
    let id = row.id;
    store::tasks::save(&txn, row).await?;
    let signal = TaskSignal { work_available: true, ..TaskSignal::by_lease_holder(id) };
    commit(txn, notifier, vec![signal]).await
}

/// Ends the locked task `current` in `failed` with its event, its outbox entries closed;
/// returns the event.
pub(super) async fn fail<C: ConnectionTrait>(
    txn: &C,
    current: job::Model,
    message: &str,
    cost_delta: &CostDelta,
    now: i64,
) -> Result<Appended, LifecycleError> {
    let from_stage = current.stage;
    let mut row = current;
    touch(&mut row, now);
    clear_lease(&mut row);
    row.stage = Stage::Failed;
    row.error = Some(message.to_owned());
    row.retry_at = None;
    row.completed_at = Some(now);
    row.cost = cost_delta.added_to(&row.cost);
    let failed = store::tasks::save(txn, row).await?;
    store::outbox::close(txn, failed.id, OutboxStatus::Completed, now).await?;
    let payload = json!({ "from_stage": from_stage, "error": message, "attempts": failed.execution_attempts });
    let event = Event { event_type: ProgressEventType::Failed, stage: Stage::Failed, key: "failed".into(), payload };
    Ok(events::append(txn, &failed, event, now).await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_delay_doubles_up_to_the_cap_with_jitter_in_the_upper_half() {
        let policy = RetryPolicy { base_ms: 100, cap_ms: 1_000 };
        for attempts in 1..=8 {
            let ceiling = (100_i64 << (attempts - 1)).min(1_000);
            let delay = policy.delay_ms(attempts);
            assert!(delay >= ceiling / 2 && delay <= ceiling, "attempt {attempts}: {delay}");
        }
    }
}
