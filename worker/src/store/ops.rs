//! What operators read: the queue gauges' counts, and the operations page's snapshot:
//! counts and ids across every tenant, never a task's query, answer or evidence. Each
//! read goes through an index (stage, lease, status).
use entity::{OutboxStatus, Stage, research_task_job as job, research_task_outbox as outbox};
use sea_orm::{
    ActiveEnum as _, ColumnTrait, ConnectionTrait, DatabaseConnection, DbErr, EntityTrait, FromQueryResult, Iterable,
    PaginatorTrait as _, QueryFilter, QueryOrder, QuerySelect, sea_query::Expr,
};
use serde::Serialize;
use uuid::Uuid;

/// One look at the service.
#[derive(Debug, Serialize)]
pub struct Snapshot {
    /// Epoch milliseconds.
    pub at: i64,
    /// Tasks by stage.
    pub stages: Vec<(String, i64)>,
    /// Seconds the oldest queued task has waited.
    pub oldest_queued_seconds: f64,
    /// Tasks completed in the last minute.
    pub completed_last_minute: u64,
    /// Tasks running under a live lease (the 50 that expire first).
    pub running: Vec<Running>,
    /// The last failures.
    pub failures: Vec<Failure>,
    /// Outbox rows by status.
    pub outbox: Vec<(String, i64)>,
    /// Dead outbox rows (the newest 20).
    pub dead_outbox: Vec<DeadRow>,
    /// The tenants with the most unfinished tasks.
    pub tenants: Vec<Tenant>,
    /// Tasks waiting for a person, by what they wait for (`plan_approval`, `clarification`).
    pub awaiting_input: Vec<(String, i64)>,
    /// Research threads, and their queued turns held up behind an earlier unfinished turn
    /// (`ENQUEUE`).
    pub threads: ThreadCounts,
}

/// How many research threads there are, and how many turns wait behind another.
#[derive(Debug, Default, Serialize)]
pub struct ThreadCounts {
    /// Threads.
    pub threads: u64,
    /// Queued turns an earlier unfinished turn of their thread holds up.
    pub enqueued_turns: u64,
}

/// A running task, by id.
#[derive(Debug, Serialize, FromQueryResult)]
pub struct Running {
    /// The task.
    pub id: Uuid,
    /// Its stage.
    pub stage: String,
    /// Who holds it.
    pub worker_id: Option<String>,
    /// When its lease expires, epoch milliseconds.
    pub lease_expires_at: Option<i64>,
}

/// A failed task, by id, with its error.
#[derive(Debug, Serialize, FromQueryResult)]
pub struct Failure {
    /// The task.
    pub id: Uuid,
    /// Why.
    pub error: Option<String>,
    /// When, epoch milliseconds.
    pub updated_at: i64,
}

/// A dead outbox row.
#[derive(Debug, Serialize, FromQueryResult)]
pub struct DeadRow {
    /// The row.
    pub id: Uuid,
    /// Its task.
    pub research_task_job_id: Uuid,
    /// The last publish error.
    pub last_error: Option<String>,
}

/// A tenant's share of the queue.
#[derive(Debug, Serialize, FromQueryResult)]
pub struct Tenant {
    /// The tenant.
    pub tenant_id: String,
    /// Its unfinished tasks.
    pub unfinished: i64,
}

/// Reads one snapshot (the queue counts are the ones the gauges use).
pub async fn snapshot(conn: &DatabaseConnection, now: i64) -> Result<Snapshot, DbErr> {
    let stages =
        stage_counts(conn).await?.into_iter().map(|(stage, count)| (stage.as_str().to_owned(), count)).collect();
    let oldest = oldest_queued_seconds(conn, now).await?;
    let completed_last_minute = job::Entity::find()
        .filter(job::Column::Stage.eq(Stage::Completed))
        .filter(job::Column::UpdatedAt.gte(now - 60_000))
        .count(conn)
        .await?;
    let running = job::Entity::find()
        .select_only()
        .columns([job::Column::Id, job::Column::Stage, job::Column::WorkerId, job::Column::LeaseExpiresAt])
        .filter(job::Column::Stage.is_in(Stage::iter().filter(|stage| stage.is_running())))
        .filter(job::Column::LeaseToken.is_not_null())
        .order_by_asc(job::Column::LeaseExpiresAt)
        .limit(50)
        .into_model::<Running>()
        .all(conn)
        .await?;
    let failures = job::Entity::find()
        .select_only()
        .columns([job::Column::Id, job::Column::Error, job::Column::UpdatedAt])
        .filter(job::Column::Stage.eq(Stage::Failed))
        .order_by_desc(job::Column::UpdatedAt)
        .limit(10)
        .into_model::<Failure>()
        .all(conn)
        .await?;
    let outbox = outbox_counts(conn).await?.into_iter().map(|(status, count)| (status.to_value(), count)).collect();
    let dead_outbox = outbox::Entity::find()
        .select_only()
        .columns([outbox::Column::Id, outbox::Column::ResearchTaskJobId, outbox::Column::LastError])
        .filter(outbox::Column::Status.eq(OutboxStatus::Dead))
        .order_by_desc(outbox::Column::UpdatedAt)
        .limit(20)
        .into_model::<DeadRow>()
        .all(conn)
        .await?;
    let tenants = job::Entity::find()
        .select_only()
        .column(job::Column::TenantId)
        .column_as(job::Column::Id.count(), "unfinished")
        .filter(Expr::cust(format!("\"stage\" IN ({})", migration::UNFINISHED)))
        .group_by(job::Column::TenantId)
        .order_by_desc(Expr::cust("\"unfinished\""))
        .limit(10)
        .into_model::<Tenant>()
        .all(conn)
        .await?;
    let awaiting_input = awaiting_counts(conn).await?;
    let threads = ThreadCounts {
        threads: entity::research_thread::Entity::find().count(conn).await?,
        enqueued_turns: job::Entity::find()
            .filter(job::Column::Stage.eq(entity::Stage::Queued))
            .filter(sea_orm::sea_query::Expr::cust(super::threads::held_up_turn()))
            .count(conn)
            .await?,
    };
    Ok(Snapshot {
        at: now,
        stages,
        oldest_queued_seconds: oldest,
        completed_last_minute,
        running,
        failures,
        outbox,
        dead_outbox,
        tenants,
        awaiting_input,
        threads,
    })
}

#[derive(FromQueryResult)]
struct ReasonCount {
    reason: String,
    count: i64,
}

/// Open input waits by reason, both reasons listed (zero included), through the open-wait
/// index.
pub async fn awaiting_counts<C: ConnectionTrait>(db: &C) -> Result<Vec<(String, i64)>, DbErr> {
    use entity::research_task_wait::{self as wait, CLARIFICATION, PLAN_APPROVAL};
    let rows = wait::Entity::find()
        .select_only()
        .column(wait::Column::Reason)
        .column_as(wait::Column::Id.count(), "count")
        .filter(wait::Column::ResolvedAt.is_null())
        .group_by(wait::Column::Reason)
        .into_model::<ReasonCount>()
        .all(db)
        .await?;
    let count = |reason: &str| rows.iter().find(|row| row.reason == reason).map_or(0, |row| row.count);
    Ok([PLAN_APPROVAL, CLARIFICATION].into_iter().map(|reason| (reason.to_owned(), count(reason))).collect())
}

#[derive(FromQueryResult)]
struct StageCount {
    stage: Stage,
    count: i64,
}

#[derive(FromQueryResult)]
struct StatusCount {
    status: OutboxStatus,
    count: i64,
}

/// Tasks by stage, every stage listed (zero included), counted through the stage index.
pub async fn stage_counts<C: ConnectionTrait>(db: &C) -> Result<Vec<(Stage, i64)>, DbErr> {
    let rows = job::Entity::find()
        .select_only()
        .column(job::Column::Stage)
        .column_as(job::Column::Id.count(), "count")
        .group_by(job::Column::Stage)
        .into_model::<StageCount>()
        .all(db)
        .await?;
    let count = |stage: Stage| rows.iter().find(|row| row.stage == stage).map_or(0, |row| row.count);
    Ok(<Stage as sea_orm::Iterable>::iter().map(|stage| (stage, count(stage))).collect())
}

/// Outbox rows by status, every status listed, counted through the status index.
pub async fn outbox_counts<C: ConnectionTrait>(db: &C) -> Result<Vec<(OutboxStatus, i64)>, DbErr> {
    let rows = outbox::Entity::find()
        .select_only()
        .column(outbox::Column::Status)
        .column_as(outbox::Column::Id.count(), "count")
        .group_by(outbox::Column::Status)
        .into_model::<StatusCount>()
        .all(db)
        .await?;
    let count = |status: OutboxStatus| rows.iter().find(|row| row.status == status).map_or(0, |row| row.count);
    Ok(<OutboxStatus as sea_orm::Iterable>::iter().map(|status| (status, count(status))).collect())
}

/// Seconds the oldest queued task has waited (0 with none queued).
pub async fn oldest_queued_seconds<C: ConnectionTrait>(db: &C, now: i64) -> Result<f64, DbErr> {
    let oldest = job::Entity::find()
        .filter(job::Column::Stage.eq(Stage::Queued))
        .order_by_asc(job::Column::CreatedAt)
        .one(db)
        .await?;
    Ok(oldest.map_or(0.0, |row| (now - row.created_at).max(0) as f64 / 1000.0))
}
