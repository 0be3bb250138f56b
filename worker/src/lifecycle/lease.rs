//! The worker's side of the lifecycle after a claim (`claim.rs`): heartbeat, checkpoint,
//! complete, fail and release. Every write after the claim is fenced by the lease token: a worker whose lease
//! was re-claimed, canceled or paused gets [`LifecycleError::LeaseLost`] and writes nothing.
use entity::{OutboxStatus, ProgressEventType, Stage, answer_trace, research_task_job as job};
use sea_orm::{
    ActiveModelTrait,
    ActiveValue::Set,
    ColumnTrait, ConnectionTrait, DatabaseConnection, DatabaseTransaction, EntityTrait, IntoActiveModel, QueryFilter,
    QuerySelect,
    sea_query::{Expr, LockBehavior, LockType, Query},
};
use serde_json::{Value, json};
use uuid::Uuid;

use super::journal::{Appended, Event, append_progress_event_announcing};
use super::row::{
    announced_signal, clear_lease, commit_announced, commit_as_lease_holder, event_signal, lease_holder_signal,
    lock_leased, signal, touch, update_fenced,
};
use super::{LifecycleError, append_partial_result, append_progress_event, delivery};
use crate::db::begin_write;
use crate::notify::{Notifier, TaskSignal};

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

/// A job this worker now runs, as the claim left it.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The job row after the claim committed.
    pub job: job::Model,
    /// The lease to carry on every later write.
    pub lease: Lease,
    /// Whether the claim found the task's grant holding as it leased it (the batched
    /// claim checks it in the same statement), so the run need not ask again before its
    /// first stage; false when nobody asked.
    pub grant_checked: bool,
}

/// What a stage boundary commits.
#[derive(Debug, Clone)]
pub struct Checkpoint {
    /// The stage the task moves to (never `completed`: use [`complete`]).
    pub next_stage: Stage,
    /// Evidence bundles keyed by idempotency key; a key written before is skipped.
    pub partial_results: Vec<(String, Value)>,
    /// What the finished stage spent, added number by number to the job's `cost`.
    pub cost_delta: Value,
    /// Details for the `stage_changed` event (what the finished stage produced).
    pub payload: Value,
}

/// The end of a task that produced an answer.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The extractive answer with numbered citations.
    pub answer: String,
    /// The cited evidence, a JSON array in citation order.
    pub evidence: Value,
    /// What generation spent.
    pub cost_delta: Value,
    /// What generation reports about itself (model, citations removed…), recorded in the
    /// `completed` event's payload as `generation`; null for nothing.
    pub payload: Value,
}

/// Why an attempt failed.
#[derive(Debug, Clone)]
pub struct Failure {
    /// Kept in the job's `error`.
    pub message: String,
    /// Whether another attempt may succeed (a database hiccup) or not (a denied grant, a
    /// budget spent).
    pub retryable: bool,
    /// What the attempt spent before failing.
    pub cost_delta: Value,
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

/// Exponential backoff with jitter for failed attempts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// The first delay, in milliseconds.
    pub base_ms: i64,
    /// The longest delay, in milliseconds.
    pub cap_ms: i64,
}

impl RetryPolicy {
    /// The delay before attempt `attempts + 1`: `base · 2^(attempts-1)` capped, then a
    /// random point in its upper half, so workers that failed together do not retry together.
    pub fn delay_ms(&self, attempts: i32) -> i64 {
        let exponent = attempts.saturating_sub(1).clamp(0, 30) as u32;
        let ceiling = self.base_ms.max(1).saturating_mul(1_i64 << exponent).min(self.cap_ms.max(1));
        let floor = ceiling / 2;
        if floor >= ceiling { ceiling } else { rand::random_range(floor..=ceiling) }
    }
}

/// Extends the lease while a stage runs. Lease internals only: it neither bumps
/// `row_version` nor `updated_at`, so a client's `expectedRowVersion` is not made stale
/// every few seconds by a change it cannot see.
#[tracing::instrument(name = "heartbeat", level = "debug", skip_all, fields(task.id = %lease.job_id))]
pub async fn heartbeat(db: &DatabaseConnection, lease: &Lease, lease_ms: i64, now: i64) -> Result<(), LifecycleError> {
    let result = job::Entity::update_many()
        .col_expr(job::Column::LeaseExpiresAt, now.saturating_add(lease_ms).into())
        .col_expr(job::Column::HeartbeatAt, now.into())
        .filter(job::Column::Id.eq(lease.job_id))
        .filter(job::Column::LeaseToken.eq(lease.token))
        .exec(db)
        .await?;
    if result.rows_affected == 1 { Ok(()) } else { Err(LifecycleError::LeaseLost) }
}

/// The most leases one batched heartbeat statement renews (two parameters each, well
/// under both databases' limits).
const HEARTBEAT_BATCH: usize = 10_000;

/// Extends many leases at once, as [`heartbeat`] does one: one statement per
/// [`HEARTBEAT_BATCH`] leases, each row renewed only while it still carries its own
/// lease's token. Returns the leases that were lost (empty in the common case, which costs
/// that one statement; a second one names the lost ones when any were).
#[tracing::instrument(name = "heartbeat many", level = "debug", skip_all, fields(leases = leases.len()))]
pub async fn heartbeat_many(
    db: &DatabaseConnection,
    leases: &[(Uuid, Uuid)],
    lease_ms: i64,
    now: i64,
) -> Result<Vec<Uuid>, LifecycleError> {
    let mut lost = Vec::new();
    for chunk in leases.chunks(HEARTBEAT_BATCH) {
        // Tokens are unique to the claim that issued them, so a row matching both lists
        // carries exactly its own lease's token.
        let (ids, tokens): (Vec<Uuid>, Vec<Uuid>) = chunk.iter().copied().unzip();
        // On PostgreSQL a row locked right now is skipped rather than waited for: it is
        // most often this worker's own checkpoint, which renews the lease itself, and one
        // long wait would make every other lease in the batch late. A skipped row still
        // carries its token, so the lookup below does not count it lost; the next beat
        // renews it.
        let mut held_rows = Query::select()
            .column(job::Column::Id)
            .from(job::Entity)
            .and_where(job::Column::Id.is_in(ids.clone()))
            .and_where(job::Column::LeaseToken.is_in(tokens.clone()))
            .to_owned();
        // (One lease alone, a signal's check, waits: then nothing renewed means lost.)
        let skip_locked = chunk.len() > 1 && crate::db::is_postgres(db.get_database_backend());
        if skip_locked {
            held_rows.lock_with_behavior(LockType::Update, LockBehavior::SkipLocked);
        }
        let result = job::Entity::update_many()
            .col_expr(job::Column::LeaseExpiresAt, now.saturating_add(lease_ms).into())
            .col_expr(job::Column::HeartbeatAt, now.into())
            .filter(job::Column::Id.in_subquery(held_rows))
            .exec(db)
            .await?;
        if result.rows_affected == chunk.len() as u64 {
            continue;
        }
        // None renewed without skipping (a single lease that was canceled, most often):
        // all lost, no lookup.
        if result.rows_affected == 0 && !skip_locked {
            lost.extend(chunk.iter().map(|(id, _)| *id));
            continue;
        }
        let held: std::collections::HashSet<Uuid> = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            .filter(job::Column::Id.is_in(ids))
            .filter(job::Column::LeaseToken.is_in(tokens))
            .into_tuple::<Uuid>()
            .all(db)
            .await?
            .into_iter()
            .collect();
        lost.extend(chunk.iter().map(|(id, _)| *id).filter(|id| !held.contains(id)));
    }
    Ok(lost)
}

/// Commits a stage boundary in one transaction: the new stage, its `stage_changed` event,
/// the partial results and the cost. `from` is the job as this lease last committed it
/// (the claim's or the previous checkpoint's row). The boundary is also where the grant
/// is checked: a grant that died makes it [`LifecycleError::GrantDenied`] and writes
/// nothing. Returns the job as committed.
#[tracing::instrument(name = "checkpoint", level = "debug", skip_all, fields(task.id = %lease.job_id))]
pub async fn checkpoint(
    db: &DatabaseConnection,
    notifier: &Notifier,
    lease: &Lease,
    from: &job::Model,
    lease_ms: i64,
    step: Checkpoint,
    now: i64,
) -> Result<job::Model, LifecycleError> {
    let txn = begin_write(db).await?;
    let (updated, written) = checkpoint_in(&txn, lease, from, lease_ms, step, now).await?;
    written.commit(txn, notifier).await?;
    Ok(updated)
}

/// What a boundary wrote in a transaction still open: the signal its commit announces.
#[derive(Debug, Clone)]
pub(crate) struct Written {
    /// The signal, before its event's sequence is filled in.
    pub template: TaskSignal,
    /// The event the boundary appended last.
    pub appended: Appended,
}

impl Written {
    /// The signal as the commit announces it.
    pub fn signal(&self) -> TaskSignal {
        announced_signal(self.template.clone(), self.appended)
    }

    /// Commits the boundary's transaction alone.
    pub async fn commit(self, txn: DatabaseTransaction, notifier: &Notifier) -> Result<(), LifecycleError> {
        commit_announced(txn, notifier, self.template, self.appended).await
    }
}

/// The writes of [`checkpoint`] in the caller's transaction (which commits them, alone or
/// with other tasks' boundaries): nothing is written when it fails with
/// [`LifecycleError::LeaseLost`] or [`LifecycleError::GrantDenied`]; after any other
/// error the transaction must be rolled back.
pub(crate) async fn checkpoint_in(
    txn: &DatabaseTransaction,
    lease: &Lease,
    from: &job::Model,
    lease_ms: i64,
    step: Checkpoint,
    now: i64,
) -> Result<(job::Model, Written), LifecycleError> {
    let update = job::Entity::update_many()
        .col_expr(job::Column::Stage, Expr::value(step.next_stage))
        .col_expr(job::Column::Cost, Expr::value(crate::cost::merge(&from.cost, &step.cost_delta)))
        // A boundary proves the worker alive: the lease runs on from here.
        .col_expr(job::Column::LeaseExpiresAt, Expr::value(now.saturating_add(lease_ms)))
        .col_expr(job::Column::HeartbeatAt, Expr::value(now));
    let updated = update_fenced(txn, lease, from, "checkpoint", update, now).await?;
    // Checked once the fence held, so a stale worker hears that it lost its lease; the
    // transaction rolls back on return.
    if !may_checkpoint(from.stage, step.next_stage) {
        return Err(LifecycleError::NotAllowed { command: "checkpoint", current: from.stage });
    }
    let mut partial_sequence = None;
    for (key, bundle) in step.partial_results {
        partial_sequence = Some(append_partial_result(txn, &updated, &key, bundle, now).await?);
    }
    let key = stage_event_key(step.next_stage);
    let payload = checkpoint_payload(from.stage, step.payload);
    let event =
        Event { event_type: ProgressEventType::StageChanged, stage: step.next_stage, idempotency_key: &key, payload };
    let template = lease_holder_signal(updated.id, partial_sequence);
    let appended = append_progress_event_announcing(txn, &updated, event, &template, now).await?;
    Ok((updated, Written { template, appended }))
}

/// Ends the task with its answer: stage `completed`, the answer trace bound to the task's
/// subject and grant, the delivery completed and the lease cleared, in one transaction.
/// `from` and the grant check are as for [`checkpoint`].
#[tracing::instrument(name = "complete", level = "debug", skip_all, fields(task.id = %lease.job_id))]
pub async fn complete(
    db: &DatabaseConnection,
    notifier: &Notifier,
    lease: &Lease,
    from: &job::Model,
    completion: Completion,
    now: i64,
) -> Result<answer_trace::Model, LifecycleError> {
    let txn = begin_write(db).await?;
    let (trace, written) = complete_in(&txn, lease, from, completion, now).await?;
    written.commit(txn, notifier).await?;
    metrics::counter!("research_tasks_ended_total", "stage" => "completed").increment(1);
    Ok(trace)
}

/// The writes of [`complete`] in the caller's transaction, as [`checkpoint_in`] is to
/// [`checkpoint`].
pub(crate) async fn complete_in(
    txn: &DatabaseTransaction,
    lease: &Lease,
    from: &job::Model,
    completion: Completion,
    now: i64,
) -> Result<(answer_trace::Model, Written), LifecycleError> {
    let update = job::Entity::update_many()
        .col_expr(job::Column::Stage, Expr::value(Stage::Completed))
        .col_expr(job::Column::CompletedAt, Expr::value(now))
        .col_expr(job::Column::RetryAt, Expr::value(Option::<i64>::None))
        .col_expr(job::Column::Error, Expr::value(Option::<String>::None))
        .col_expr(job::Column::Cost, Expr::value(crate::cost::merge(&from.cost, &completion.cost_delta)))
        // The lease goes (all three columns together, as `research_task_jobs_lease_ck` demands).
        .col_expr(job::Column::WorkerId, Expr::value(Option::<String>::None))
        .col_expr(job::Column::LeaseToken, Expr::value(Option::<Uuid>::None))
        .col_expr(job::Column::LeaseExpiresAt, Expr::value(Option::<i64>::None));
    let updated = update_fenced(txn, lease, from, "complete", update, now).await?;
    if !may_complete(from.stage) {
        return Err(LifecycleError::NotAllowed { command: "complete", current: from.stage });
    }
    let trace = answer_trace_of(&updated, Uuid::now_v7(), completion.answer, completion.evidence, now);
    let trace = answer_trace::Entity::insert(trace.into_active_model().reset_all()).exec_with_returning(txn).await?;
    super::draft::finish_in(txn, &updated.tenant_id, updated.id, &trace.answer, now).await?;
    delivery::close_open(txn, updated.id, OutboxStatus::Completed, now).await?;
    let payload = completion_payload(from.stage, trace.id, &updated.cost, completion.payload);
    let key = stage_event_key(Stage::Completed);
    let event =
        Event { event_type: ProgressEventType::StageChanged, stage: Stage::Completed, idempotency_key: &key, payload };
    let template = lease_holder_signal(updated.id, None);
    let appended = append_progress_event_announcing(txn, &updated, event, &template, now).await?;
    Ok((trace, Written { template, appended }))
}

/// The key of the `stage_changed` event of a boundary into `stage` (a replayed boundary
/// appends nothing).
pub(super) fn stage_event_key(stage: Stage) -> String {
    format!("stage:{}", stage.as_str())
}

/// Whether the stage rule lets a checkpoint move a task from `from` to `next`.
pub(super) fn may_checkpoint(from: Stage, next: Stage) -> bool {
    next != Stage::Completed && from.may_become(next, None)
}

/// Whether the stage rule lets a task in `from` complete.
pub(super) fn may_complete(from: Stage) -> bool {
    from.may_become(Stage::Completed, None)
}

/// A checkpoint's `stage_changed` payload: what the finished stage reported, and the
/// stage it left.
pub(super) fn checkpoint_payload(from: Stage, mut reported: Value) -> Value {
    if let Value::Object(fields) = &mut reported {
        fields.insert("from_stage".into(), json!(from));
    }
    reported
}

/// A completion's `stage_changed` payload: the stage it left, its answer trace, the task's
/// cost with generation's spend, and what generation reported (`generation`, when any).
pub(super) fn completion_payload(from: Stage, trace_id: Uuid, cost: &Value, generation: Value) -> Value {
    let mut payload = json!({ "from_stage": from, "answer_trace_id": trace_id, "cost": cost });
    if !generation.is_null() {
        payload["generation"] = generation;
    }
    payload
}

/// The answer trace a completion of `job` writes, bound to the task's subject and grant.
pub(super) fn answer_trace_of(
    job: &job::Model,
    id: Uuid,
    answer: String,
    evidence: Value,
    now: i64,
) -> answer_trace::Model {
    answer_trace::Model {
        id,
        tenant_id: job.tenant_id.clone(),
        knowledge_space_id: job.knowledge_space_id,
        research_task_id: Some(job.id),
        query: job.query.clone(),
        answer,
        evidence,
        created_at: now,
        subject_id: Some(job.subject_id.clone()),
        permission_snapshot_id: Some(job.permission_snapshot_id),
        permission_snapshot_revision: Some(job.permission_snapshot_revision),
        access_channel: Some(job.access_channel),
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
        let mut row = current.clone().into_active_model();
        touch(&current, &mut row, now);
        clear_lease(&mut row);
        row.retry_at = Set(Some(retry_at));
        row.error = Set(Some(failure.message));
        row.cost = Set(crate::cost::merge(&current.cost, &failure.cost_delta));
        row.update(&txn).await?;
        (FailOutcome::Retrying { retry_at }, signal(current.id, None, None, false))
    } else {
        let failed = fail_row(&txn, &current, &failure.message, &failure.cost_delta, now).await?;
        (FailOutcome::Failed, event_signal(current.id, failed, None, false))
    };
    commit_as_lease_holder(txn, notifier, signal).await?;
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
    let current = lock_leased(&txn, lease).await?;
    let mut row = current.clone().into_active_model();
    touch(&current, &mut row, now);
    clear_lease(&mut row);
    row.execution_attempts = Set((current.execution_attempts - 1).max(0));
    row.update(&txn).await?;
    let signal = signal(current.id, None, None, true);
    commit_as_lease_holder(txn, notifier, signal).await?;
    Ok(())
}

/// Ends the job in `failed` with its event; returns the event.
pub(super) async fn fail_row<C: ConnectionTrait>(
    txn: &C,
    current: &job::Model,
    message: &str,
    cost_delta: &Value,
    now: i64,
) -> Result<Appended, LifecycleError> {
    let mut row = current.clone().into_active_model();
    touch(current, &mut row, now);
    clear_lease(&mut row);
    row.stage = Set(Stage::Failed);
    row.error = Set(Some(message.to_owned()));
    row.retry_at = Set(None);
    row.completed_at = Set(Some(now));
    row.cost = Set(crate::cost::merge(&current.cost, cost_delta));
    let updated = row.update(txn).await?;
    delivery::close_open(txn, updated.id, OutboxStatus::Completed, now).await?;
    let payload = json!({ "from_stage": current.stage, "error": message, "attempts": updated.execution_attempts });
    Ok(append_progress_event(txn, &updated, ProgressEventType::Failed, Stage::Failed, "failed", payload, now).await?)
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
