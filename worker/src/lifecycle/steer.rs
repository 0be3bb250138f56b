//! Steering: guidance a person adds to a task that is queued, planning, retrieving,
//! analyzing or paused (not while its answer is being written, which no note reaches). The next
//! round's decision and the answer take the notes into account; the running worker keeps
//! its lease (a note changes what it is told, not who runs it).
use entity::{research_task_job as job, research_task_note as note};
use sea_orm::DatabaseConnection;
use uuid::Uuid;

use super::LifecycleError;
use super::commit::{commit, touch};
use super::task_ref::TaskRef;
use crate::notify::{Notifier, TaskSignal};
use crate::store::{self, begin_write};

/// The most notes one task takes.
pub const MAX_NOTES: u64 = 8;

/// Adds `text` (already validated: 1 to 2,000 characters) to the task, under its lock:
/// another subject's task is `NotFound`, a ninth note `TooManyNotes`, a stale row version
/// `StaleRowVersion`, a terminal or generating task `NotAllowed`. Bumps the row version.
pub async fn steer(
    db: &DatabaseConnection,
    notifier: &Notifier,
    task: &TaskRef,
    text: &str,
    now: i64,
) -> Result<job::Model, LifecycleError> {
    let txn = begin_write(db).await?;
    let current = store::tasks::lock(&txn, task.id)
        .await?
        .filter(|row| row.tenant_id == task.tenant_id && row.subject_id == task.subject_id)
        .ok_or(LifecycleError::NotFound)?;
    // The note itself is checked before the task's state (BAD_USER_INPUT before CONFLICT).
    if store::notes::count(&txn, current.id).await? >= MAX_NOTES {
        return Err(LifecycleError::TooManyNotes(MAX_NOTES));
    }
    if let Some(expected) = task.expected_row_version
        && expected != current.row_version
    {
        return Err(LifecycleError::StaleRowVersion { expected, actual: current.row_version });
    }
    // Generation reads the notes when it starts: a note added while the answer is being
    // written would reach nothing, so it is refused rather than silently dropped.
    if current.stage.is_terminal() || current.stage == entity::Stage::Generating {
        return Err(LifecycleError::NotAllowed { command: "steer", current: current.stage });
    }
    let row =
        note::Model { id: Uuid::now_v7(), research_task_job_id: current.id, text: text.to_owned(), created_at: now };
    store::notes::insert(&txn, row).await?;
    let mut updated = current;
    touch(&mut updated, now);
    let updated = store::tasks::save(&txn, updated).await?;
    commit(txn, notifier, vec![TaskSignal::changed(updated.id)]).await?;
    metrics::counter!("research_task_commands_total", "command" => "steered").increment(1);
    Ok(updated)
}
