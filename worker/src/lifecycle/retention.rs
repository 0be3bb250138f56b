//! Retention: finished tasks (completed, failed, canceled) not updated for `days` are
//! deleted in small batches, each its own short transaction, with everything that hangs
//! off them (events, partial results, outbox rows, the answer draft, the trace context, webhook deliveries
//! and their attempts go by cascade). Answer traces are kept, unlinked from the task (the
//! foreign key sets null), unless `answer_traces` asks to prune them too. Unfinished tasks
//! are never touched, however old. Audit events older than `days` go too. A research
//! thread whose last turn goes is deleted with it; a thread its client left empty stays.
use sea_orm::{DatabaseConnection, DbErr};

use crate::store::{self, begin_write};

/// What one pass deleted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Pruned {
    /// Tasks (with their rows).
    pub tasks: u64,
    /// Answer traces.
    pub answer_traces: u64,
    /// Audit events.
    pub audit_events: u64,
}

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;

/// Deletes what is older than `days`, `batch` tasks per transaction, until nothing is left.
pub async fn prune(
    db: &DatabaseConnection,
    days: u32,
    answer_traces: bool,
    batch: u64,
    now: i64,
) -> Result<Pruned, DbErr> {
    let cutoff = now - i64::from(days) * DAY_MS;
    let mut pruned = Pruned::default();
    loop {
        let txn = begin_write(db).await?;
        let (tasks, traces) = store::retention::prune_finished_tasks(&txn, cutoff, batch, answer_traces).await?;
        txn.commit().await?;
        pruned.tasks += tasks;
        pruned.answer_traces += traces;
        if tasks == 0 {
            break;
        }
    }
    loop {
        let deleted = store::retention::prune_audit_events(db, cutoff, batch).await?;
        pruned.audit_events += deleted;
        if deleted == 0 {
            break;
        }
    }
    metrics::counter!("retention_pruned_total", "table" => "research_task_jobs").increment(pruned.tasks);
    metrics::counter!("retention_pruned_total", "table" => "audit_events").increment(pruned.audit_events);
    metrics::counter!("retention_pruned_total", "table" => "answer_traces").increment(pruned.answer_traces);
    Ok(pruned)
}
