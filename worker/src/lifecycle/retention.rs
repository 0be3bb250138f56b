//! Retention: finished tasks (completed, failed, canceled) not updated for `days` are
//! deleted in small batches, each its own short transaction, with everything that hangs
//! off them (events, partial results, outbox rows, the answer draft, the trace context, webhook deliveries
//! and their attempts go by cascade). Answer traces are kept, unlinked from the task (the
//! foreign key sets null), unless `answer_traces` asks to prune them too. Unfinished tasks
//! are never touched, however old. Audit events older than `days` go too.
use entity::{Stage, answer_trace, audit_event, research_task_job as job};
use sea_orm::{ColumnTrait, DatabaseConnection, DbErr, EntityTrait, Iterable, QueryFilter, QueryOrder, QuerySelect};
use uuid::Uuid;

use crate::db::begin_write;

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
    let finished: Vec<Stage> = Stage::iter().filter(|stage| stage.is_terminal()).collect();
    let mut pruned = Pruned::default();
    loop {
        let txn = begin_write(db).await?;
        let ids: Vec<Uuid> = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            .filter(job::Column::Stage.is_in(finished.clone()))
            .filter(job::Column::UpdatedAt.lt(cutoff))
            .order_by_asc(job::Column::UpdatedAt)
            .limit(batch.max(1))
            .into_tuple()
            .all(&txn)
            .await?;
        if ids.is_empty() {
            txn.commit().await?;
            break;
        }
        if answer_traces {
            let traces = answer_trace::Entity::delete_many()
                .filter(answer_trace::Column::ResearchTaskId.is_in(ids.clone()))
                .exec(&txn)
                .await?;
            pruned.answer_traces += traces.rows_affected;
        }
        // Checked again under the write lock: a task is finished for good, but the
        // condition is the one that must hold when the row goes.
        let tasks = job::Entity::delete_many()
            .filter(job::Column::Id.is_in(ids))
            .filter(job::Column::Stage.is_in(finished.clone()))
            .filter(job::Column::UpdatedAt.lt(cutoff))
            .exec(&txn)
            .await?;
        txn.commit().await?;
        pruned.tasks += tasks.rows_affected;
    }
    pruned.audit_events = prune_audit_events(db, cutoff, batch).await?;
    metrics::counter!("retention_pruned_total", "table" => "research_task_jobs").increment(pruned.tasks);
    metrics::counter!("retention_pruned_total", "table" => "audit_events").increment(pruned.audit_events);
    metrics::counter!("retention_pruned_total", "table" => "answer_traces").increment(pruned.answer_traces);
    Ok(pruned)
}

/// Deletes audit events older than `cutoff`, `batch` per statement: the audit log keeps
/// what the retention settings keep, and no more.
async fn prune_audit_events(db: &DatabaseConnection, cutoff: i64, batch: u64) -> Result<u64, DbErr> {
    let mut pruned = 0;
    loop {
        let ids: Vec<Uuid> = audit_event::Entity::find()
            .select_only()
            .column(audit_event::Column::Id)
            .filter(audit_event::Column::CreatedAt.lt(cutoff))
            .limit(batch.max(1))
            .into_tuple()
            .all(db)
            .await?;
        if ids.is_empty() {
            return Ok(pruned);
        }
        pruned +=
            audit_event::Entity::delete_many().filter(audit_event::Column::Id.is_in(ids)).exec(db).await?.rows_affected;
    }
}
