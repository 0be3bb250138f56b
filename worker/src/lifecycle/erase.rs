//! Deleting what users ask to delete: one task, one answer trace, a whole space (in
//! batches, finished by a worker loop if the request that began it was interrupted), and
//! a tenant. Rows go in the order the foreign keys demand, never with them disabled:
//! tasks (their events, partial results, outbox rows, draft, trace context and webhook
//! deliveries follow by cascade) and answer traces before the permission snapshots they
//! name (`ON DELETE RESTRICT`), snapshots before the API keys they name (also RESTRICT).
//!
//! Deleting a task is the fence for its worker: every worker write locks the row and finds
//! it gone, so a running stage stops at its next heartbeat and writes nothing, and the
//! signal committed with the delete wakes that heartbeat (and ends live subscriptions)
//! at once, in every process.
use entity::{audit_event, knowledge_space_deletion as deletion};
use sea_orm::{ConnectionTrait, DatabaseConnection, DatabaseTransaction};
use serde::Serialize;
use uuid::Uuid;

use super::LifecycleError;
use super::commit::commit;
use crate::notify::{Notifier, TaskSignal};
use crate::store::deletions::{self, Batched};
use crate::store::{self, begin_write};

/// Rows deleted per transaction when a space goes: short transactions, short locks.
const BATCH: u64 = 200;
/// Documents deleted per transaction (each takes its passages with it).
const DOCUMENT_BATCH: u64 = 5;

/// What a deletion removed, by kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Erased {
    /// Knowledge spaces.
    pub knowledge_spaces: u64,
    /// Research tasks (with their journals, outbox rows, drafts and deliveries).
    pub research_tasks: u64,
    /// Answer traces.
    pub answer_traces: u64,
    /// Documents (with their passages and embeddings).
    pub documents: u64,
    /// Permission snapshots (grants).
    pub permission_snapshots: u64,
    /// Membership rows, removed ones included.
    pub members: u64,
    /// API keys.
    pub api_keys: u64,
    /// Webhook endpoints (with their deliveries).
    pub webhook_endpoints: u64,
}

impl std::ops::AddAssign for Erased {
    fn add_assign(&mut self, other: Self) {
        self.knowledge_spaces += other.knowledge_spaces;
        self.research_tasks += other.research_tasks;
        self.answer_traces += other.answer_traces;
        self.documents += other.documents;
        self.permission_snapshots += other.permission_snapshots;
        self.members += other.members;
        self.api_keys += other.api_keys;
        self.webhook_endpoints += other.webhook_endpoints;
    }
}

/// Deletes the task with its answer traces (and its grant, once nothing names it), and
/// appends `audit` (the record of the deletion) in the same transaction; false when there
/// was no such task. The caller has checked it may.
pub async fn delete_task(
    db: &DatabaseConnection,
    notifier: &Notifier,
    id: Uuid,
    audit: audit_event::Model,
) -> Result<bool, LifecycleError> {
    let txn = begin_write(db).await?;
    let Some(task) = store::tasks::lock(&txn, id).await? else {
        return Ok(false);
    };
    let (_, traces) = deletions::delete_tasks(&txn, &[id]).await?;
    store::audit::insert(&txn, audit).await?;
    deletions::drop_unreferenced_snapshots(&txn, &[task.permission_snapshot_id]).await?;
    commit_deleted(txn, notifier, &[id]).await?;
    tracing::info!(task.id = %id, answer_traces = traces, "task deleted");
    Ok(true)
}

/// Deletes one answer trace with every other copy of its answer (the task's answer draft,
/// which live subscriptions read), and its grant once nothing names it, appending `audit`
/// in the same transaction; false when there was no such trace. The task's topic is
/// signalled, so a process that holds the answer for its subscribers reads again and
/// finds it gone.
pub async fn delete_answer_trace(
    db: &DatabaseConnection,
    notifier: &Notifier,
    id: Uuid,
    audit: audit_event::Model,
) -> Result<bool, LifecycleError> {
    let txn = begin_write(db).await?;
    let Some(trace) = store::answer_traces::find(&txn, id).await? else {
        return Ok(false);
    };
    deletions::delete_traces(&txn, &[id]).await?;
    if let Some(task_id) = trace.research_task_id {
        store::drafts::delete(&txn, task_id).await?;
    }
    store::audit::insert(&txn, audit).await?;
    if let Some(snapshot_id) = trace.permission_snapshot_id {
        deletions::drop_unreferenced_snapshots(&txn, &[snapshot_id]).await?;
    }
    let signals: Vec<TaskSignal> = trace.research_task_id.map(TaskSignal::changed).into_iter().collect();
    commit(txn, notifier, signals).await?;
    Ok(true)
}

/// Begins the space's deletion in the caller's transaction: records it, and seals the
/// space (every member removed and every key revoked, which also kills every grant), so
/// nothing new can be created or read in it while its rows go.
pub async fn begin_space_deletion(
    txn: &DatabaseTransaction,
    tenant_id: &str,
    space_id: Uuid,
    requested_by: &str,
    now: i64,
) -> Result<(), LifecycleError> {
    let mark = deletion::Model {
        knowledge_space_id: space_id,
        tenant_id: tenant_id.to_owned(),
        requested_by: requested_by.to_owned(),
        requested_at: now,
    };
    deletions::seal_space(txn, mark, now).await?;
    Ok(())
}

/// Deletes everything in the space, batch by batch, then the space and its deletion mark.
/// Idempotent: run again after an interruption, it goes on where it stopped.
pub async fn finish_space_deletion(
    db: &DatabaseConnection,
    notifier: &Notifier,
    tenant_id: &str,
    space_id: Uuid,
) -> Result<Erased, LifecycleError> {
    let mut erased = Erased::default();
    let batch = |kind, limit| deletions::ids_in_space(db, kind, tenant_id, space_id, Some(limit));
    // Tasks first, with their traces; their journals and deliveries go by cascade.
    loop {
        let ids = batch(Batched::Tasks, BATCH).await?;
        if ids.is_empty() {
            break;
        }
        let txn = begin_write(db).await?;
        let (tasks, traces) = deletions::delete_tasks(&txn, &ids).await?;
        erased.research_tasks += tasks;
        erased.answer_traces += traces;
        commit_deleted(txn, notifier, &ids).await?;
    }
    // The remaining traces (of tasks already gone, or written without one). Every write
    // in a transaction of its own that takes the write lock first: on SQLite a statement
    // that reads before it writes can lose its snapshot to a concurrent writer and fail
    // instead of waiting.
    loop {
        let ids = batch(Batched::Traces, BATCH).await?;
        if ids.is_empty() {
            break;
        }
        let txn = begin_write(db).await?;
        erased.answer_traces += deletions::delete_traces(&txn, &ids).await?;
        txn.commit().await?;
    }
    // Documents a few at a time: each takes its passages (up to 20,000) and embeddings
    // with it, and a short transaction keeps other writers' waits short.
    loop {
        let ids = batch(Batched::Documents, DOCUMENT_BATCH).await?;
        if ids.is_empty() {
            break;
        }
        let txn = begin_write(db).await?;
        erased.documents += deletions::delete_documents(&txn, &ids).await?;
        txn.commit().await?;
    }
    // What is left is small and has no dependants but each other: one transaction. A task
    // created by a request that passed its access check just before the seal may have
    // committed since; it goes here, before the grants it names.
    let txn = begin_write(db).await?;
    let late = deletions::ids_in_space(&txn, Batched::Tasks, tenant_id, space_id, None).await?;
    let (tasks, traces) = deletions::delete_tasks(&txn, &late).await?;
    let rest = deletions::delete_rest_of_space(&txn, tenant_id, space_id).await?;
    erased += Erased {
        knowledge_spaces: rest.knowledge_spaces,
        research_tasks: tasks,
        answer_traces: traces + rest.answer_traces,
        documents: 0,
        permission_snapshots: rest.permission_snapshots,
        members: rest.members,
        api_keys: rest.api_keys,
        webhook_endpoints: rest.webhook_endpoints,
    };
    commit_deleted(txn, notifier, &late).await?;
    tracing::info!(knowledge_space.id = %space_id, erased = ?erased, "knowledge space deleted");
    Ok(erased)
}

/// Finishes every space deletion an interrupted request left behind; returns how many.
pub async fn finish_pending_deletions(db: &DatabaseConnection, notifier: &Notifier) -> Result<usize, LifecycleError> {
    let pending = deletions::pending(db, 10).await?;
    for row in &pending {
        finish_space_deletion(db, notifier, &row.tenant_id, row.knowledge_space_id).await?;
    }
    Ok(pending.len())
}

/// The tenant's spaces, for erasing it space by space.
pub async fn tenant_spaces<C: ConnectionTrait>(conn: &C, tenant_id: &str) -> Result<Vec<Uuid>, LifecycleError> {
    Ok(deletions::tenant_spaces(conn, tenant_id).await?)
}

/// Commits a deletion of tasks with a signal for each: heartbeats of their runs and their
/// live topics look again at once, in this process and (through NOTIFY) every other.
async fn commit_deleted(txn: DatabaseTransaction, notifier: &Notifier, ids: &[Uuid]) -> Result<(), LifecycleError> {
    commit(txn, notifier, ids.iter().copied().map(TaskSignal::changed).collect()).await
}
