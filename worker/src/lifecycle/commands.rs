//! The commands a task's owner gives through the API: cancel, pause, resume. Each locks the
//! row, checks the caller's scope, `expectedRowVersion` and the stage rule, and writes the
//! new stage, its progress event and its outbox change in one transaction. Cancel and pause
//! clear the lease, which fences the running worker out.
use entity::{LifecycleCommand, OutboxStatus, ProgressEventType, Stage, research_task_job as job};
use sea_orm::DatabaseConnection;

use super::LifecycleError;
use super::commit::{clear_lease, commit, touch};
use super::events::{self, Event};
use super::records::{Commanded, stored};
use super::task_ref::TaskRef;
use super::wait::{Ending, end_wait};
use crate::notify::{Notifier, TaskSignal};
use crate::store::{self, begin_write};

/// Cancels the task for good.
pub async fn cancel(
    db: &DatabaseConnection,
    notifier: &Notifier,
    task: &TaskRef,
    now: i64,
) -> Result<job::Model, LifecycleError> {
    apply(db, notifier, task, LifecycleCommand::Cancel, None, now).await
}

/// Pauses the task; with `resume_after` (epoch ms) a worker resumes it by itself then.
pub async fn pause(
    db: &DatabaseConnection,
    notifier: &Notifier,
    task: &TaskRef,
    resume_after: Option<i64>,
    now: i64,
) -> Result<job::Model, LifecycleError> {
    apply(db, notifier, task, LifecycleCommand::Pause, resume_after, now).await
}

/// Resumes a paused task where it stopped, with a new outbox entry.
pub async fn resume(
    db: &DatabaseConnection,
    notifier: &Notifier,
    task: &TaskRef,
    now: i64,
) -> Result<job::Model, LifecycleError> {
    apply(db, notifier, task, LifecycleCommand::Resume, None, now).await
}

#[tracing::instrument(name = "task command", level = "debug", skip_all, fields(task.id = %task.id, command = ?command))]
async fn apply(
    db: &DatabaseConnection,
    notifier: &Notifier,
    task: &TaskRef,
    command: LifecycleCommand,
    resume_after: Option<i64>,
    now: i64,
) -> Result<job::Model, LifecycleError> {
    let txn = begin_write(db).await?;
    let current = store::tasks::lock(&txn, task.id)
        .await?
        .filter(|row| row.tenant_id == task.tenant_id && row.subject_id == task.subject_id)
        .ok_or(LifecycleError::NotFound)?;
    // Canceling twice is the same as canceling once: the task comes back as it is, with no
    // new event and no new row version, whatever version the caller last saw.
    if command == LifecycleCommand::Cancel && current.stage == Stage::Canceled {
        return Ok(current);
    }
    if let Some(expected) = task.expected_row_version
        && expected != current.row_version
    {
        return Err(LifecycleError::StaleRowVersion { expected, actual: current.row_version });
    }
    let target = current
        .stage
        .apply(command, current.paused_from_stage)
        .map_err(|refused| LifecycleError::NotAllowed { command: command_name(command), current: refused.current })?;

    // A task waiting for a person stops waiting: resumed without the input (round 1
    // searches the plan as proposed; no clarification), or canceled.
    let mut said = None;
    if current.stage == Stage::Paused
        && command != LifecycleCommand::Pause
        && let Some(open) = store::waits::open(&txn, current.id).await?
    {
        let resolution = if command == LifecycleCommand::Resume { "resumed" } else { "canceled" };
        said = Some(end_wait(&txn, open, Ending { resolution, ..Ending::default() }, now).await?);
    }
    let mut row = current.clone();
    touch(&mut row, now);
    row.stage = target;
    // Whatever the command, the running worker (if any) loses its lease: it is fenced out
    // and stops at its next write.
    clear_lease(&mut row);
    let event_type = match command {
        LifecycleCommand::Cancel => {
            row.completed_at = Some(now);
            row.resume_after = None;
            ProgressEventType::Canceled
        }
        LifecycleCommand::Pause => {
            row.paused_from_stage = Some(current.stage);
            row.paused_at = Some(now);
            row.resume_after = resume_after;
            ProgressEventType::Paused
        }
        LifecycleCommand::Resume => {
            row.paused_from_stage = None;
            row.paused_at = None;
            row.resume_after = None;
            row.retry_at = None;
            ProgressEventType::Resumed
        }
    };
    let updated = store::tasks::save(&txn, row).await?;
    if command == LifecycleCommand::Resume {
        // Back in the queue: the task's next outbox entry.
        let revision = store::outbox::last_revision(&txn, updated.id).await? + 1;
        store::outbox::insert(&txn, store::outbox::entry(&updated, revision, now)).await?;
    } else {
        store::outbox::close(&txn, updated.id, OutboxStatus::Canceled, now).await?;
    }
    let key = format!("{}:{}", event_name(event_type), updated.row_version);
    let wait = if command == LifecycleCommand::Resume { said } else { None };
    let payload = stored(&Commanded { from_stage: current.stage, resume_after, wait });
    let appended = events::append(&txn, &updated, Event { event_type, stage: target, key, payload }, now).await?;
    let signal = match command {
        LifecycleCommand::Resume => TaskSignal::work(updated.id),
        _ => TaskSignal::changed(updated.id),
    };
    commit(txn, notifier, vec![signal.with_webhooks(appended.webhooks)]).await?;
    let counted = match command {
        LifecycleCommand::Cancel => "canceled",
        LifecycleCommand::Pause => "paused",
        LifecycleCommand::Resume => "resumed",
    };
    metrics::counter!("research_task_commands_total", "command" => counted).increment(1);
    if command == LifecycleCommand::Cancel {
        metrics::counter!("research_tasks_ended_total", "stage" => "canceled").increment(1);
    }
    Ok(updated)
}

fn command_name(command: LifecycleCommand) -> &'static str {
    match command {
        LifecycleCommand::Cancel => "cancel",
        LifecycleCommand::Pause => "pause",
        LifecycleCommand::Resume => "resume",
    }
}

fn event_name(event_type: ProgressEventType) -> &'static str {
    match event_type {
        ProgressEventType::Started => "started",
        ProgressEventType::StageChanged => "stage_changed",
        ProgressEventType::Paused => "paused",
        ProgressEventType::Resumed => "resumed",
        ProgressEventType::Canceled => "canceled",
        ProgressEventType::Failed => "failed",
    }
}
