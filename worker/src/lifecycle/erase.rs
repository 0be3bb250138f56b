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
use entity::{
    answer_trace, api_key, audit_event, knowledge_document as document, knowledge_space as space,
    knowledge_space_deletion as deletion, member, permission_snapshot as snapshot, research_task_answer_draft as draft,
    research_task_job as job, webhook_endpoint as endpoint,
};
use sea_orm::sea_query::{Expr, ExprTrait as _, Query};
use sea_orm::{
    ColumnTrait, ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr, EntityTrait, QueryFilter, QuerySelect,
};
use serde::Serialize;
use uuid::Uuid;

use super::LifecycleError;
use super::row::{commit_many, lock_job, signal};
use crate::db::begin_write;
use crate::notify::{Notifier, TaskSignal};

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
    audit: audit_event::ActiveModel,
) -> Result<bool, LifecycleError> {
    let txn = begin_write(db).await?;
    let Some(task) = lock_job(&txn, id).await? else {
        return Ok(false);
    };
    let erased = delete_tasks(&txn, &[id]).await?;
    audit_event::Entity::insert(audit).exec_without_returning(&txn).await?;
    drop_unreferenced_snapshots(&txn, &[task.permission_snapshot_id]).await?;
    commit_deleted(txn, notifier, &[id]).await?;
    tracing::info!(task.id = %id, answer_traces = erased.answer_traces, "task deleted");
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
    audit: audit_event::ActiveModel,
) -> Result<bool, LifecycleError> {
    let txn = begin_write(db).await?;
    let Some(trace) = answer_trace::Entity::find_by_id(id).one(&txn).await? else {
        return Ok(false);
    };
    answer_trace::Entity::delete_by_id(id).exec(&txn).await?;
    if let Some(task_id) = trace.research_task_id {
        draft::Entity::delete_by_id(task_id).exec(&txn).await?;
    }
    audit_event::Entity::insert(audit).exec_without_returning(&txn).await?;
    if let Some(snapshot_id) = trace.permission_snapshot_id {
        drop_unreferenced_snapshots(&txn, &[snapshot_id]).await?;
    }
    let signals: Vec<TaskSignal> =
        trace.research_task_id.map(|task| signal(task, None, None, false)).into_iter().collect();
    commit_many(txn, notifier, signals).await?;
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
    let row = deletion::ActiveModel {
        knowledge_space_id: sea_orm::ActiveValue::Set(space_id),
        tenant_id: sea_orm::ActiveValue::Set(tenant_id.to_owned()),
        requested_by: sea_orm::ActiveValue::Set(requested_by.to_owned()),
        requested_at: sea_orm::ActiveValue::Set(now),
    };
    deletion::Entity::insert(row)
        .on_conflict(sea_orm::sea_query::OnConflict::column(deletion::Column::KnowledgeSpaceId).do_nothing().to_owned())
        .exec_without_returning(txn)
        .await?;
    member::Entity::update_many()
        .col_expr(member::Column::RemovedAt, Expr::value(now))
        .col_expr(member::Column::Revision, Expr::col(member::Column::Revision).add(1))
        .col_expr(member::Column::UpdatedAt, Expr::value(now))
        .filter(member::Column::TenantId.eq(tenant_id))
        .filter(member::Column::KnowledgeSpaceId.eq(space_id))
        .filter(member::Column::RemovedAt.is_null())
        .exec(txn)
        .await?;
    api_key::Entity::update_many()
        .col_expr(api_key::Column::RevokedAt, Expr::value(now))
        .col_expr(api_key::Column::UpdatedAt, Expr::value(now))
        .filter(api_key::Column::TenantId.eq(tenant_id))
        .filter(api_key::Column::KnowledgeSpaceId.eq(space_id))
        .filter(api_key::Column::RevokedAt.is_null())
        .exec(txn)
        .await?;
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
    let in_space = |limit| ids_in_space(db, tenant_id, space_id, Some(limit));
    // Tasks first, with their traces; their journals and deliveries go by cascade.
    loop {
        let ids = in_space(BATCH).tasks().await?;
        if ids.is_empty() {
            break;
        }
        let txn = begin_write(db).await?;
        erased += delete_tasks(&txn, &ids).await?;
        commit_deleted(txn, notifier, &ids).await?;
    }
    // The remaining traces (of tasks already gone, or written without one).
    loop {
        let ids = in_space(BATCH).traces().await?;
        if ids.is_empty() {
            break;
        }
        // Every write in a transaction of its own that takes the write lock first: on
        // SQLite a statement that reads before it writes can lose its snapshot to a
        // concurrent writer and fail instead of waiting.
        let txn = begin_write(db).await?;
        erased.answer_traces += answer_trace::Entity::delete_many()
            .filter(answer_trace::Column::Id.is_in(ids))
            .exec(&txn)
            .await?
            .rows_affected;
        txn.commit().await?;
    }
    // Documents a few at a time: each takes its passages (up to 20,000) and embeddings
    // with it, and a short transaction keeps other writers' waits short.
    loop {
        let ids = in_space(DOCUMENT_BATCH).documents().await?;
        if ids.is_empty() {
            break;
        }
        let txn = begin_write(db).await?;
        erased.documents +=
            document::Entity::delete_many().filter(document::Column::Id.is_in(ids)).exec(&txn).await?.rows_affected;
        txn.commit().await?;
    }
    // What is left is small and has no dependants but each other: one transaction. A task
    // created by a request that passed its access check just before the seal may have
    // committed since; it goes here, before the grants it names.
    let txn = begin_write(db).await?;
    let late = ids_in_space(&txn, tenant_id, space_id, None).tasks().await?;
    erased += delete_tasks(&txn, &late).await?;
    erased.answer_traces += delete_in_space::<answer_trace::Entity>(
        &txn,
        answer_trace::Column::TenantId,
        answer_trace::Column::KnowledgeSpaceId,
        tenant_id,
        space_id,
    )
    .await?;
    erased.webhook_endpoints += delete_in_space::<endpoint::Entity>(
        &txn,
        endpoint::Column::TenantId,
        endpoint::Column::KnowledgeSpaceId,
        tenant_id,
        space_id,
    )
    .await?;
    erased.permission_snapshots += delete_in_space::<snapshot::Entity>(
        &txn,
        snapshot::Column::TenantId,
        snapshot::Column::KnowledgeSpaceId,
        tenant_id,
        space_id,
    )
    .await?;
    erased.api_keys += delete_in_space::<api_key::Entity>(
        &txn,
        api_key::Column::TenantId,
        api_key::Column::KnowledgeSpaceId,
        tenant_id,
        space_id,
    )
    .await?;
    erased.members += delete_in_space::<member::Entity>(
        &txn,
        member::Column::TenantId,
        member::Column::KnowledgeSpaceId,
        tenant_id,
        space_id,
    )
    .await?;
    erased.knowledge_spaces += space::Entity::delete_many()
        .filter(space::Column::TenantId.eq(tenant_id))
        .filter(space::Column::Id.eq(space_id))
        .exec(&txn)
        .await?
        .rows_affected;
    deletion::Entity::delete_by_id(space_id).exec(&txn).await?;
    commit_deleted(txn, notifier, &late).await?;
    tracing::info!(knowledge_space.id = %space_id, erased = ?erased, "knowledge space deleted");
    Ok(erased)
}

/// The ids of one space's rows of a kind (up to `limit`, or all), for deleting them in
/// batches.
struct InSpace<'a, C> {
    conn: &'a C,
    tenant_id: &'a str,
    space_id: Uuid,
    limit: Option<u64>,
}

fn ids_in_space<'a, C: ConnectionTrait>(
    conn: &'a C,
    tenant_id: &'a str,
    space_id: Uuid,
    limit: Option<u64>,
) -> InSpace<'a, C> {
    InSpace { conn, tenant_id, space_id, limit }
}

impl<C: ConnectionTrait> InSpace<'_, C> {
    async fn ids<E: EntityTrait>(
        &self,
        id: E::Column,
        tenant: E::Column,
        space: E::Column,
    ) -> Result<Vec<Uuid>, DbErr> {
        E::find()
            .select_only()
            .column(id)
            .filter(tenant.eq(self.tenant_id))
            .filter(space.eq(self.space_id))
            .limit(self.limit)
            .into_tuple()
            .all(self.conn)
            .await
    }

    async fn tasks(&self) -> Result<Vec<Uuid>, DbErr> {
        self.ids::<job::Entity>(job::Column::Id, job::Column::TenantId, job::Column::KnowledgeSpaceId).await
    }

    async fn traces(&self) -> Result<Vec<Uuid>, DbErr> {
        use answer_trace::Column;
        self.ids::<answer_trace::Entity>(Column::Id, Column::TenantId, Column::KnowledgeSpaceId).await
    }

    async fn documents(&self) -> Result<Vec<Uuid>, DbErr> {
        use document::Column;
        self.ids::<document::Entity>(Column::Id, Column::TenantId, Column::KnowledgeSpaceId).await
    }
}

/// Deletes the rows of `E` in one space (they have no dependants left); returns how many.
async fn delete_in_space<E: EntityTrait>(
    txn: &DatabaseTransaction,
    tenant_column: E::Column,
    space_column: E::Column,
    tenant_id: &str,
    space_id: Uuid,
) -> Result<u64, LifecycleError> {
    let deleted =
        E::delete_many().filter(tenant_column.eq(tenant_id)).filter(space_column.eq(space_id)).exec(txn).await?;
    Ok(deleted.rows_affected)
}

/// Finishes every space deletion an interrupted request left behind; returns how many.
pub async fn finish_pending_deletions(db: &DatabaseConnection, notifier: &Notifier) -> Result<usize, LifecycleError> {
    let pending = deletion::Entity::find().limit(10).all(db).await?;
    for row in &pending {
        finish_space_deletion(db, notifier, &row.tenant_id, row.knowledge_space_id).await?;
    }
    Ok(pending.len())
}

/// The tenant's spaces, for erasing it space by space.
pub async fn tenant_spaces<C: ConnectionTrait>(conn: &C, tenant_id: &str) -> Result<Vec<Uuid>, LifecycleError> {
    Ok(space::Entity::find()
        .select_only()
        .column(space::Column::Id)
        .filter(space::Column::TenantId.eq(tenant_id))
        .into_tuple()
        .all(conn)
        .await?)
}

/// Deletes the tasks `ids` and their answer traces, in the caller's transaction.
async fn delete_tasks(txn: &DatabaseTransaction, ids: &[Uuid]) -> Result<Erased, LifecycleError> {
    let traces = answer_trace::Entity::delete_many()
        .filter(answer_trace::Column::ResearchTaskId.is_in(ids.iter().copied()))
        .exec(txn)
        .await?;
    let tasks = job::Entity::delete_many().filter(job::Column::Id.is_in(ids.iter().copied())).exec(txn).await?;
    Ok(Erased { research_tasks: tasks.rows_affected, answer_traces: traces.rows_affected, ..Erased::default() })
}

/// Deletes those of the snapshots `ids` that no task and no trace names any more.
async fn drop_unreferenced_snapshots(txn: &DatabaseTransaction, ids: &[Uuid]) -> Result<u64, LifecycleError> {
    let by_task = Query::select()
        .expr(Expr::val(1))
        .from(job::Entity)
        .and_where(
            Expr::col((job::Entity, job::Column::PermissionSnapshotId))
                .equals((snapshot::Entity, snapshot::Column::Id)),
        )
        .to_owned();
    let by_trace = Query::select()
        .expr(Expr::val(1))
        .from(answer_trace::Entity)
        .and_where(
            Expr::col((answer_trace::Entity, answer_trace::Column::PermissionSnapshotId))
                .equals((snapshot::Entity, snapshot::Column::Id)),
        )
        .to_owned();
    let deleted = snapshot::Entity::delete_many()
        .filter(snapshot::Column::Id.is_in(ids.iter().copied()))
        .filter(Expr::exists(by_task).not())
        .filter(Expr::exists(by_trace).not())
        .exec(txn)
        .await?;
    Ok(deleted.rows_affected)
}

/// Commits a deletion of tasks with a signal for each: heartbeats of their runs and their
/// live topics look again at once, in this process and (through NOTIFY) every other.
async fn commit_deleted(txn: DatabaseTransaction, notifier: &Notifier, ids: &[Uuid]) -> Result<(), LifecycleError> {
    let signals: Vec<TaskSignal> = ids.iter().map(|id| signal(*id, None, None, false)).collect();
    commit_many(txn, notifier, signals).await
}
