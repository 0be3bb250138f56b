//! Retention's deletes: finished tasks not updated since a cutoff (everything that hangs
//! off them goes by cascade; their answer traces are unlinked, or deleted when asked), and
//! audit events older than it. Unfinished tasks are never touched, however old.
use entity::{Stage, answer_trace, audit_event, research_task_job as job};
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, Iterable as _, QueryFilter, QueryOrder, QuerySelect};
use uuid::Uuid;

/// Deletes up to `limit` of the oldest finished tasks last updated before `cutoff` (and
/// their answer traces when `with_traces`); returns (tasks, traces) deleted.
pub async fn prune_finished_tasks<C: ConnectionTrait>(
    txn: &C,
    cutoff: i64,
    limit: u64,
    with_traces: bool,
) -> Result<(u64, u64), DbErr> {
    let finished: Vec<Stage> = Stage::iter().filter(|stage| stage.is_terminal()).collect();
    let ids: Vec<Uuid> = job::Entity::find()
        .select_only()
        .column(job::Column::Id)
        .filter(job::Column::Stage.is_in(finished.clone()))
        .filter(job::Column::UpdatedAt.lt(cutoff))
        .order_by_asc(job::Column::UpdatedAt)
        .limit(limit.max(1))
        .into_tuple()
        .all(txn)
        .await?;
    if ids.is_empty() {
        return Ok((0, 0));
    }
    let mut traces = 0;
    if with_traces {
        traces = answer_trace::Entity::delete_many()
            .filter(answer_trace::Column::ResearchTaskId.is_in(ids.clone()))
            .exec(txn)
            .await?
            .rows_affected;
    }
    // A thread whose last turn goes goes with it (one a client left empty stays).
    let threads: Vec<Uuid> =
        super::threads::threads_of(txn, &ids).await?.into_iter().map(|turn| turn.research_thread_id).collect();
    // Checked again in the delete: a task is finished for good, but the condition is the
    // one that must hold when the row goes.
    let tasks = job::Entity::delete_many()
        .filter(job::Column::Id.is_in(ids))
        .filter(job::Column::Stage.is_in(finished))
        .filter(job::Column::UpdatedAt.lt(cutoff))
        .exec(txn)
        .await?
        .rows_affected;
    super::threads::delete_emptied(txn, &threads).await?;
    Ok((tasks, traces))
}

/// Deletes up to `limit` audit events older than `cutoff`; returns how many.
pub async fn prune_audit_events<C: ConnectionTrait>(conn: &C, cutoff: i64, limit: u64) -> Result<u64, DbErr> {
    let ids: Vec<Uuid> = audit_event::Entity::find()
        .select_only()
        .column(audit_event::Column::Id)
        .filter(audit_event::Column::CreatedAt.lt(cutoff))
        .limit(limit.max(1))
        .into_tuple()
        .all(conn)
        .await?;
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(audit_event::Entity::delete_many().filter(audit_event::Column::Id.is_in(ids)).exec(conn).await?.rows_affected)
}
