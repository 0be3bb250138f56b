//! What deleting a row takes with it: a job takes its outbox, partial results and progress
//! events; a grant that a job runs under cannot be deleted; a job's answer trace outlives
//! it; a space takes everything inside it.
use anyhow::{Context as _, ensure};
use entity::{answer_trace, research_task_partial_result as partial, research_task_progress_event as progress};
use kfs_tests::{DbTest, TestDb, Violation, db_tests, fixtures};
use sea_orm::{ActiveValue::Set, EntityTrait};

use super::delete;

/// The cascade and restrict tests.
pub fn tests() -> Vec<DbTest> {
    db_tests![
        deleting_a_job_cascades_to_its_outbox_partial_results_and_progress_events,
        deleting_a_permission_snapshot_that_a_job_runs_under_is_restricted,
        deleting_a_job_keeps_its_answer_trace_and_clears_the_link,
        deleting_a_knowledge_space_removes_its_tasks_grants_and_keys,
    ]
}

/// A task with one partial result and one progress event besides its outbox delivery.
async fn task_with_journal(db: &TestDb) -> anyhow::Result<fixtures::Task> {
    let task = fixtures::task(db).await?;
    partial::Entity::insert(fixtures::partial_row(&task.job, 1, "p1")).exec_without_returning(&db.db).await?;
    progress::Entity::insert(fixtures::progress_row(&task.job, 1, "e1")).exec_without_returning(&db.db).await?;
    Ok(task)
}

/// Counts the rows that belong to the job in each of its child tables.
async fn children(db: &TestDb, job: uuid::Uuid) -> anyhow::Result<[i64; 3]> {
    Ok([
        db.count_where("research_task_outbox", "research_task_job_id", job).await?,
        db.count_where("research_task_partial_results", "research_task_job_id", job).await?,
        db.count_where("research_task_progress_events", "research_task_job_id", job).await?,
    ])
}

async fn deleting_a_job_cascades_to_its_outbox_partial_results_and_progress_events(db: TestDb) -> anyhow::Result<()> {
    let task = task_with_journal(&db).await?;
    let bystander = task_with_journal(&db).await?;
    ensure!(children(&db, task.job.id).await? == [1, 1, 1], "fixture rows missing");
    let deleted = delete(&db, "research_task_jobs", task.job.id).await?;
    ensure!(deleted.rows_affected() == 1, "the job was not deleted");
    ensure!(children(&db, task.job.id).await? == [0, 0, 0], "children survived their job");
    ensure!(children(&db, bystander.job.id).await? == [1, 1, 1], "another job's rows went too");
    let grants = db.count_where("knowledge_space_permission_snapshots", "id", task.job.permission_snapshot_id).await?;
    ensure!(grants == 1, "the grant went with the job");
    Ok(())
}

async fn deleting_a_permission_snapshot_that_a_job_runs_under_is_restricted(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let result = delete(&db, "knowledge_space_permission_snapshots", task.job.permission_snapshot_id).await;
    db.assert_violates(result, Violation::ForeignKey(None)).await?;
    ensure!(db.count_where("research_task_jobs", "id", task.job.id).await? == 1, "the job is gone");
    Ok(())
}

/// The answer is the task's product: it stays (with its grant) when the task row goes.
async fn deleting_a_job_keeps_its_answer_trace_and_clears_the_link(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let snapshot = entity::permission_snapshot::Entity::find_by_id(task.job.permission_snapshot_id)
        .one(&db.db)
        .await?
        .context("the task's snapshot")?;
    let mut trace = fixtures::answer_trace_row(&snapshot);
    let trace_id = uuid::Uuid::now_v7();
    trace.id = Set(trace_id);
    trace.research_task_id = Set(Some(task.job.id));
    answer_trace::Entity::insert(trace).exec_without_returning(&db.db).await?;
    delete(&db, "research_task_jobs", task.job.id).await?;
    let trace = answer_trace::Entity::find_by_id(trace_id).one(&db.db).await?.context("the trace went with its job")?;
    ensure!(trace.research_task_id.is_none(), "the trace still links the deleted job: {trace:?}");
    Ok(())
}

/// Every scoped table cascades from the space, and the job's own cascade runs before the
/// grant's restriction is checked, so a whole space can be deleted in one statement.
async fn deleting_a_knowledge_space_removes_its_tasks_grants_and_keys(db: TestDb) -> anyhow::Result<()> {
    let task = task_with_journal(&db).await?;
    let bystander = task_with_journal(&db).await?;
    fixtures::api_key(&db, &task.space).await?;
    fixtures::api_key(&db, &bystander.space).await?;
    delete(&db, "knowledge_spaces", task.space.id).await.context("deleting the space")?;
    for table in [
        "knowledge_space_members",
        "knowledge_space_api_keys",
        "knowledge_space_permission_snapshots",
        "research_task_jobs",
        "research_task_partial_results",
        "research_task_progress_events",
    ] {
        ensure!(db.count_where(table, "knowledge_space_id", task.space.id).await? == 0, "{table} kept rows");
        ensure!(
            db.count_where(table, "knowledge_space_id", bystander.space.id).await? > 0,
            "{table} lost another space's rows"
        );
    }
    ensure!(children(&db, task.job.id).await? == [0, 0, 0], "the outbox kept rows");
    Ok(())
}
