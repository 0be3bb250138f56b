//! Creating a task: the job, the grant it runs under and its first outbox entry, in one
//! transaction, idempotent on the client's key.
use entity::{ResearchMode, Stage, TaskLimits, research_task_job as job};
use sea_orm::DatabaseConnection;
use serde_json::Value;
use uuid::Uuid;

use super::LifecycleError;
use super::commit::commit;
use crate::grant::{self, GrantRequest};
use crate::notify::{Notifier, TaskSignal};
use crate::store::{self, begin_write};

/// Everything needed to create a task; validated by the caller.
#[derive(Debug, Clone)]
pub struct NewTask {
    /// Who asks, in which space, through which credential.
    pub grant: GrantRequest,
    /// The question.
    pub query: String,
    /// How hard to work.
    pub mode: Option<ResearchMode>,
    /// How much evidence to keep.
    pub top_k: Option<i32>,
    /// The most it may spend.
    pub budget_usd: Option<f64>,
    /// The limits it runs under, parsed where they entered.
    pub limits: TaskLimits,
    /// Client data, a JSON object.
    pub metadata: Value,
    /// The client's idempotency key, if it sent one.
    pub idempotency_key: Option<String>,
    /// Claims allowed before the task fails.
    pub max_execution_attempts: i32,
    /// The tenant's quotas, checked in the creating transaction.
    pub quotas: super::Quotas,
    /// The thread the task is a turn of (the caller's own, in the task's space), with the
    /// most turns it may hold.
    pub thread: Option<ThreadTurn>,
}

/// Where a new turn goes.
#[derive(Debug, Clone, Copy)]
pub struct ThreadTurn {
    /// The thread.
    pub thread_id: Uuid,
    /// The most turns a thread holds (`KFS_THREAD_MAX_TURNS`).
    pub max_turns: u64,
    /// Whether a thread with an unfinished turn refuses this one (`REJECT`); otherwise it
    /// waits, queued, behind them (`ENQUEUE`: the claim skips a turn an earlier one holds
    /// up).
    pub reject_in_flight: bool,
}

/// A created (or, for a repeated idempotency key, the earlier) task.
#[derive(Debug, Clone)]
pub struct Created {
    /// The task.
    pub task: job::Model,
    /// True when the idempotency key named a task created earlier.
    pub replayed: bool,
}

/// The namespace for ids derived from idempotency keys.
const IDEMPOTENCY_NAMESPACE: Uuid = Uuid::from_u128(0x6b66_7372_6573_6561_7263_685f_7461_736b);

/// The task id a client's idempotency key stands for: derived from the tenant, space,
/// subject and key (and the thread, for a turn: the same key in another thread is another
/// turn), so the same key from another subject names another task. The parts are encoded
/// as a JSON array, so no choice of strings makes two tuples one name (a separator could
/// appear inside a part).
pub fn key_task_id(grant: &GrantRequest, key: &str, thread: Option<Uuid>) -> Uuid {
    let space = grant.knowledge_space_id.to_string();
    let mut parts = vec![grant.tenant_id.as_str(), &space, grant.subject_id.as_str(), key];
    let thread = thread.map(|id| format!("thread:{id}"));
    if let Some(thread) = &thread {
        parts.push(thread);
    }
    let name = serde_json::to_vec(&parts).unwrap_or_default();
    Uuid::new_v5(&IDEMPOTENCY_NAMESPACE, &name)
}

/// Creates the task, or returns the one its idempotency key already created.
#[tracing::instrument(name = "create task", level = "debug", skip_all, fields(task.id = tracing::field::Empty))]
pub async fn create(
    db: &DatabaseConnection,
    notifier: &Notifier,
    input: NewTask,
    now: i64,
) -> Result<Created, LifecycleError> {
    let id = match &input.idempotency_key {
        Some(key) => key_task_id(&input.grant, key, input.thread.map(|turn| turn.thread_id)),
        None => Uuid::now_v7(),
    };
    tracing::Span::current().record("task.id", tracing::field::display(id));
    // Only a key can name a task that exists: a fresh id needs no lookup.
    if input.idempotency_key.is_some()
        && let Some(existing) = store::tasks::find(db, id).await?
    {
        return replay(db, existing, &input, now).await;
    }
    match insert(db, notifier, id, &input, now).await {
        Ok(task) => Ok(Created { task, replayed: false }),
        // Two requests with one key raced; the loser answers with the winner's task.
        Err(error) if input.idempotency_key.is_some() => match store::tasks::find(db, id).await? {
            Some(existing) => replay(db, existing, &input, now).await,
            None => Err(error),
        },
        Err(error) => Err(error),
    }
}

/// The earlier task for a repeated key, if the caller may still read it and the input
/// matches what created it. Replay never returns what a read of the task would not: the
/// task must be the caller's own (tenant, space and subject) and its grant must still
/// hold (a member removed and re-added, or a key rotated, holds a new grant, not the old).
async fn replay(
    db: &DatabaseConnection,
    existing: job::Model,
    input: &NewTask,
    now: i64,
) -> Result<Created, LifecycleError> {
    let grant = &input.grant;
    let owned = existing.tenant_id == grant.tenant_id
        && existing.knowledge_space_id == grant.knowledge_space_id
        && existing.subject_id == grant.subject_id;
    if !owned || !grant::check(db, existing.permission_snapshot_id, now).await?.holds() {
        return Err(LifecycleError::IdempotencyKeyUnreadable);
    }
    let same = existing.query == input.query
        && existing.mode == input.mode
        && existing.top_k == input.top_k
        && existing.budget_usd == input.budget_usd
        && TaskLimits::from_stored(&existing.limits) == input.limits
        && existing.metadata == input.metadata;
    if same { Ok(Created { task: existing, replayed: true }) } else { Err(LifecycleError::IdempotencyMismatch) }
}

/// Writes the snapshot, the job, its trace context and its first outbox entry in one
/// transaction.
async fn insert(
    db: &DatabaseConnection,
    notifier: &Notifier,
    id: Uuid,
    input: &NewTask,
    now: i64,
) -> Result<job::Model, LifecycleError> {
    let txn = begin_write(db).await?;
    super::seal::guard(&txn, &input.grant.tenant_id).await?;
    super::quota::check(&txn, input.quotas, &input.grant.tenant_id, now).await?;
    let mut now = now;
    if let Some(turn) = input.thread {
        // The thread's row lock orders its turns; one deleted meanwhile is not found.
        store::threads::lock(&txn, turn.thread_id).await?.ok_or(LifecycleError::NotFound)?;
        if turn.reject_in_flight
            && let Some(in_flight) = store::threads::unfinished_turns(&txn, turn.thread_id).await?.pop()
        {
            return Err(LifecycleError::TurnInFlight(in_flight.id));
        }
        if store::threads::turn_count(&txn, turn.thread_id).await? >= turn.max_turns {
            return Err(LifecycleError::TooManyTurns(turn.max_turns));
        }
        // Turns are ordered by creation time: strictly later than the last, in lock order.
        if let Some(last) = store::threads::last_turn_at(&txn, turn.thread_id).await? {
            now = now.max(last.saturating_add(1));
        }
    }
    let snapshot = grant::snapshot_of(Uuid::now_v7(), &input.grant, now);
    let task = job::Model {
        id,
        tenant_id: input.grant.tenant_id.clone(),
        knowledge_space_id: input.grant.knowledge_space_id,
        subject_id: input.grant.subject_id.clone(),
        permission_snapshot_id: snapshot.id,
        permission_snapshot_revision: snapshot.revision,
        access_channel: input.grant.access_channel,
        query: input.query.clone(),
        mode: input.mode,
        top_k: input.top_k,
        budget_usd: input.budget_usd,
        limits: serde_json::to_value(&input.limits).unwrap_or_else(|_| serde_json::json!({})),
        metadata: input.metadata.clone(),
        cost: serde_json::json!({}),
        stage: Stage::Queued,
        paused_from_stage: None,
        queue_job_id: None,
        error: None,
        resume_after: None,
        paused_at: None,
        completed_at: None,
        row_version: 1,
        execution_attempts: 0,
        max_execution_attempts: input.max_execution_attempts,
        worker_id: None,
        lease_token: None,
        lease_expires_at: None,
        heartbeat_at: None,
        retry_at: None,
        created_at: now,
        updated_at: now,
    };
    let rows = store::tasks::NewTaskRows {
        outbox: store::outbox::entry(&task, 1, now),
        trace_context: crate::telemetry::context::row_of_current_span(id, now),
        snapshot,
        task,
    };
    let task = store::tasks::create(&txn, rows).await?;
    if let Some(turn) = input.thread {
        store::threads::add_turn(&txn, turn.thread_id, task.id, now).await?;
    }
    commit(txn, notifier, vec![TaskSignal::work(task.id)]).await?;
    metrics::counter!("research_tasks_created_total").increment(1);
    Ok(task)
}

#[cfg(test)]
mod tests {
    use entity::{AccessChannel, MemberRole};

    use super::*;
    use crate::grant::GrantSource;

    fn grant(tenant: &str, subject: &str) -> GrantRequest {
        GrantRequest {
            tenant_id: tenant.to_owned(),
            knowledge_space_id: Uuid::nil(),
            subject_id: subject.to_owned(),
            access_channel: AccessChannel::Interactive,
            source: GrantSource::Member { revision: 1, role: MemberRole::Viewer },
        }
    }

    #[test]
    fn no_choice_of_subject_and_key_makes_two_callers_share_a_task_id() {
        // Joined with a separator these would be one name: "t\0victim\0x\0k".
        assert_ne!(
            key_task_id(&grant("t", "victim"), "x\u{0}k", None),
            key_task_id(&grant("t", "victim\u{0}x"), "k", None)
        );
        assert_ne!(
            key_task_id(&grant("t\u{0}victim", "x"), "k", None),
            key_task_id(&grant("t", "victim\u{0}x"), "k", None)
        );
        assert_eq!(key_task_id(&grant("t", "victim"), "k", None), key_task_id(&grant("t", "victim"), "k", None));
        // A key is scoped to its thread.
        let (one, two) = (Some(Uuid::from_u128(1)), Some(Uuid::from_u128(2)));
        assert_ne!(key_task_id(&grant("t", "a"), "k", one), key_task_id(&grant("t", "a"), "k", two));
        assert_ne!(key_task_id(&grant("t", "a"), "k", one), key_task_id(&grant("t", "a"), "k", None));
    }
}
