//! The outcome of publishing outbox entries to an external queue, recorded in one
//! transaction: `dispatched` with the queue's id, or the failure with its backoff (`dead`
//! after the last attempt). A row some claim took meanwhile is left as the claim wrote it.
use entity::{OutboxStatus, research_task_outbox as outbox};
use sea_orm::DatabaseConnection;

use super::LifecycleError;
use crate::store::{self, begin_write};

/// What one dispatch step did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DispatchOutcome {
    /// Entries published and recorded `dispatched`.
    pub dispatched: usize,
    /// Rows whose publish failed and that will be retried.
    pub retrying: usize,
    /// Rows that used their last attempt and are now `dead`.
    pub dead: usize,
}

impl DispatchOutcome {
    /// Whether the step found nothing to do.
    pub fn is_idle(&self) -> bool {
        *self == Self::default()
    }
}

/// How one locked entry's publish went.
#[derive(Debug)]
pub enum Published {
    /// The queue took it, under this id.
    Queued(String),
    /// It failed with this message; try again after `delay_ms`.
    Failed {
        /// Why, as logged and stored.
        message: String,
        /// The backoff before the next attempt.
        delay_ms: i64,
    },
}

/// Records how each locked entry's publish went, in one transaction.
pub async fn record_dispatches(
    db: &DatabaseConnection,
    dispatches: Vec<(outbox::Model, Published)>,
    max_attempts: i32,
    now: i64,
) -> Result<DispatchOutcome, LifecycleError> {
    let mut outcome = DispatchOutcome::default();
    let txn = begin_write(db).await?;
    for (row, published) in dispatches {
        match published {
            Published::Queued(queue_job_id) => {
                if store::outbox::record_published(&txn, &row, &queue_job_id, now).await? {
                    metrics::histogram!("research_outbox_dispatch_seconds")
                        .record((now - row.created_at).max(0) as f64 / 1e3);
                    outcome.dispatched += 1;
                }
            }
            Published::Failed { message, delay_ms } => {
                let written = store::outbox::record_failed(&txn, &row, &message, max_attempts, delay_ms, now).await?;
                match written {
                    Some(OutboxStatus::Dead) => {
                        tracing::error!(outbox.id = %row.id, task.id = %row.research_task_job_id, error = %message, "outbox entry is dead");
                        metrics::counter!("research_outbox_dead_total").increment(1);
                        outcome.dead += 1;
                    }
                    Some(_) => {
                        tracing::warn!(outbox.id = %row.id, error = %message, "outbox publish failed; will retry");
                        outcome.retrying += 1;
                    }
                    None => {}
                }
            }
        }
    }
    txn.commit().await?;
    Ok(outcome)
}
