//! Research threads (`research_threads`) and their turns (`research_thread_turns`): as
//! the API reads them, scoped to the subject that created them, and as task creation
//! adds a turn (in the transaction that writes the task).
use entity::{research_task_job as job, research_thread as thread, research_thread_turn as turn};
use sea_orm::sea_query::{Expr, Query};
use sea_orm::{
    ActiveModelTrait as _, ColumnTrait, Condition, ConnectionTrait, DbErr, EntityTrait, IntoActiveModel as _,
    PaginatorTrait as _, QueryFilter, QueryOrder as _, QuerySelect,
};
use uuid::Uuid;

use super::backend::{Backend, on_backend};
use super::pages::{PageKey, before};

/// `SELECT research_task_job_id FROM research_thread_turns WHERE research_thread_id = …`:
/// the tasks of a thread's turns, for `IN (…)`.
fn turn_task_ids(thread_id: Uuid) -> sea_orm::sea_query::SelectStatement {
    Query::select()
        .column(turn::Column::ResearchTaskJobId)
        .from(turn::Entity)
        .and_where(turn::Column::ResearchThreadId.eq(thread_id))
        .to_owned()
}

/// Writes a new thread.
pub async fn insert<C: ConnectionTrait>(conn: &C, row: thread::Model) -> Result<(), DbErr> {
    thread::Entity::insert(row.into_active_model().reset_all()).exec_without_returning(conn).await?;
    Ok(())
}

/// The thread `id`, if it is `subject_id`'s in `tenant_id`.
pub async fn find_owned<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    subject_id: &str,
    id: Uuid,
) -> Result<Option<thread::Model>, DbErr> {
    thread::Entity::find_by_id(id)
        .filter(thread::Column::TenantId.eq(tenant_id))
        .filter(thread::Column::SubjectId.eq(subject_id))
        .one(conn)
        .await
}

/// Reads the thread and locks it until the transaction ends (turns of one thread are
/// added one at a time).
pub async fn lock<C: ConnectionTrait>(txn: &C, id: Uuid) -> Result<Option<thread::Model>, DbErr> {
    on_backend!(txn, |B| B::locking_rows(thread::Entity::find_by_id(id))).one(txn).await
}

/// One page of a subject's threads in a space, most recently updated first.
pub async fn page<C: ConnectionTrait>(
    conn: &C,
    tenant_id: &str,
    knowledge_space_id: Uuid,
    subject_id: &str,
    after: Option<PageKey>,
    limit: u64,
) -> Result<Vec<thread::Model>, DbErr> {
    let mut query = thread::Entity::find()
        .filter(thread::Column::TenantId.eq(tenant_id))
        .filter(thread::Column::KnowledgeSpaceId.eq(knowledge_space_id))
        .filter(thread::Column::SubjectId.eq(subject_id));
    if let Some(key) = after {
        query = query.filter(before(thread::Column::UpdatedAt, thread::Column::Id, key));
    }
    query.order_by_desc(thread::Column::UpdatedAt).order_by_desc(thread::Column::Id).limit(limit).all(conn).await
}

/// Writes the thread back whole (title, metadata, `updated_at`).
pub async fn save<C: ConnectionTrait>(conn: &C, row: thread::Model) -> Result<thread::Model, DbErr> {
    row.into_active_model().reset_all().update(conn).await
}

/// Deletes the thread (its remaining turn rows go with it); whether it was there.
pub async fn delete<C: ConnectionTrait>(conn: &C, id: Uuid) -> Result<bool, DbErr> {
    Ok(thread::Entity::delete_by_id(id).exec(conn).await?.rows_affected > 0)
}

/// Adds `task_id` as a turn of `thread_id` and marks the thread updated at `now`.
pub async fn add_turn<C: ConnectionTrait>(txn: &C, thread_id: Uuid, task_id: Uuid, now: i64) -> Result<(), DbErr> {
    let row = turn::Model { research_task_job_id: task_id, research_thread_id: thread_id, created_at: now };
    turn::Entity::insert(row.into_active_model().reset_all()).exec_without_returning(txn).await?;
    thread::Entity::update_many()
        .col_expr(thread::Column::UpdatedAt, Expr::value(now))
        .filter(thread::Column::Id.eq(thread_id))
        .exec(txn)
        .await?;
    Ok(())
}

/// How many turns the thread has.
pub async fn turn_count<C: ConnectionTrait>(conn: &C, thread_id: Uuid) -> Result<u64, DbErr> {
    turn::Entity::find().filter(turn::Column::ResearchThreadId.eq(thread_id)).count(conn).await
}

/// The thread each of `task_ids` is a turn of (tasks outside threads are absent).
pub async fn threads_of<C: ConnectionTrait>(conn: &C, task_ids: &[Uuid]) -> Result<Vec<turn::Model>, DbErr> {
    if task_ids.is_empty() {
        return Ok(Vec::new());
    }
    turn::Entity::find().filter(turn::Column::ResearchTaskJobId.is_in(task_ids.iter().copied())).all(conn).await
}

/// Every turn's task id, oldest first.
pub async fn turn_ids<C: ConnectionTrait>(conn: &C, thread_id: Uuid) -> Result<Vec<Uuid>, DbErr> {
    turn::Entity::find()
        .select_only()
        .column(turn::Column::ResearchTaskJobId)
        .filter(turn::Column::ResearchThreadId.eq(thread_id))
        .order_by_asc(turn::Column::CreatedAt)
        .order_by_asc(turn::Column::ResearchTaskJobId)
        .into_tuple()
        .all(conn)
        .await
}

/// One page of the thread's turns whose grant holds at `now`, oldest first, after `after`
/// (the `created_at` and id of the last turn shown).
pub async fn turns_page<C: ConnectionTrait>(
    conn: &C,
    thread_id: Uuid,
    after: Option<PageKey>,
    limit: u64,
    now: i64,
) -> Result<Vec<job::Model>, DbErr> {
    let grant_holds = on_backend!(conn, |B| B::STATEMENTS.grant_holds_of_jobs);
    let mut query = job::Entity::find()
        .filter(job::Column::Id.in_subquery(turn_task_ids(thread_id)))
        .filter(Expr::cust_with_values(grant_holds, [now]));
    if let Some(key) = after {
        let later = Condition::any()
            .add(job::Column::CreatedAt.gt(key.at))
            .add(Condition::all().add(job::Column::CreatedAt.eq(key.at)).add(job::Column::Id.gt(key.id)));
        query = query.filter(later);
    }
    query.order_by_asc(job::Column::CreatedAt).order_by_asc(job::Column::Id).limit(limit).all(conn).await
}

/// The turn `task_id` is, if it is one.
pub async fn turn_of<C: ConnectionTrait>(conn: &C, task_id: Uuid) -> Result<Option<turn::Model>, DbErr> {
    turn::Entity::find_by_id(task_id).one(conn).await
}

/// The turns of `turn`'s thread before it (and before `before`, a turn's `created_at` and
/// id, when given) whose grant holds at `now`, newest first, at most `limit`.
pub async fn earlier_turns<C: ConnectionTrait>(
    conn: &C,
    turn: &turn::Model,
    before: Option<PageKey>,
    now: i64,
    limit: u64,
) -> Result<Vec<job::Model>, DbErr> {
    let grant_holds = on_backend!(conn, |B| B::STATEMENTS.grant_holds_of_jobs);
    let key = before.unwrap_or(PageKey { at: turn.created_at, id: turn.research_task_job_id });
    job::Entity::find()
        .filter(job::Column::Id.in_subquery(turn_task_ids(turn.research_thread_id)))
        .filter(super::pages::before(job::Column::CreatedAt, job::Column::Id, key))
        .filter(Expr::cust_with_values(grant_holds, [now]))
        .order_by_desc(job::Column::CreatedAt)
        .order_by_desc(job::Column::Id)
        .limit(limit)
        .all(conn)
        .await
}

/// The thread's unfinished turns (queued, running or paused), oldest first.
pub async fn unfinished_turns<C: ConnectionTrait>(conn: &C, thread_id: Uuid) -> Result<Vec<job::Model>, DbErr> {
    job::Entity::find()
        .filter(job::Column::Id.in_subquery(turn_task_ids(thread_id)))
        .filter(Expr::cust(format!("\"stage\" IN ({})", migration::UNFINISHED)))
        .order_by_asc(job::Column::CreatedAt)
        .order_by_asc(job::Column::Id)
        .all(conn)
        .await
}

/// When the thread's newest turn was added.
pub async fn last_turn_at<C: ConnectionTrait>(conn: &C, thread_id: Uuid) -> Result<Option<i64>, DbErr> {
    turn::Entity::find()
        .select_only()
        .column(turn::Column::CreatedAt)
        .filter(turn::Column::ResearchThreadId.eq(thread_id))
        .order_by_desc(turn::Column::CreatedAt)
        .into_tuple()
        .one(conn)
        .await
}

/// The SQL condition on `research_task_jobs` that holds for a queued turn an earlier
/// unfinished turn of its thread holds up (`ENQUEUE`): the claim skips it. A task outside
/// threads costs one primary-key probe of `research_thread_turns`.
pub fn held_up_turn() -> String {
    format!(
        "\"research_task_jobs\".\"stage\" = 'queued' AND EXISTS (SELECT 1 FROM \"research_thread_turns\" AS \"mine\" \
         JOIN \"research_thread_turns\" AS \"before\" ON \"before\".\"research_thread_id\" = \"mine\".\"research_thread_id\" \
         AND (\"before\".\"created_at\" < \"mine\".\"created_at\" OR (\"before\".\"created_at\" = \"mine\".\"created_at\" \
         AND \"before\".\"research_task_job_id\" < \"mine\".\"research_task_job_id\")) \
         JOIN \"research_task_jobs\" AS \"earlier\" ON \"earlier\".\"id\" = \"before\".\"research_task_job_id\" \
         WHERE \"mine\".\"research_task_job_id\" = \"research_task_jobs\".\"id\" AND \"earlier\".\"stage\" IN ({}))",
        migration::UNFINISHED
    )
}

/// When the last of the turns before `turn` ended (`completed_at` of a finished turn), if
/// one ended after `turn` was added: how long an enqueued turn was held up.
pub async fn earlier_ended_at<C: ConnectionTrait>(conn: &C, turn: &turn::Model) -> Result<Option<i64>, DbErr> {
    job::Entity::find()
        .select_only()
        .column(job::Column::CompletedAt)
        .filter(job::Column::Id.in_subquery(turn_task_ids(turn.research_thread_id)))
        .filter(job::Column::CreatedAt.lt(turn.created_at))
        .filter(job::Column::CompletedAt.gt(turn.created_at))
        .order_by_desc(job::Column::CompletedAt)
        .into_tuple::<Option<i64>>()
        .one(conn)
        .await
        .map(Option::flatten)
}

/// Deletes those of `thread_ids` that hold no turn any more (retention removed their last);
/// returns how many.
pub async fn delete_emptied<C: ConnectionTrait>(conn: &C, thread_ids: &[Uuid]) -> Result<u64, DbErr> {
    if thread_ids.is_empty() {
        return Ok(0);
    }
    let holding = Query::select()
        .column(turn::Column::ResearchThreadId)
        .from(turn::Entity)
        .and_where(turn::Column::ResearchThreadId.is_in(thread_ids.iter().copied()))
        .to_owned();
    Ok(thread::Entity::delete_many()
        .filter(thread::Column::Id.is_in(thread_ids.iter().copied()))
        .filter(thread::Column::Id.not_in_subquery(holding))
        .exec(conn)
        .await?
        .rows_affected)
}
