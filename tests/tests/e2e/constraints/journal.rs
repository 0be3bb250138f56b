//! `research_task_progress_events` and `research_task_partial_results`: positive, unique
//! sequences and idempotency keys per job, known event types and stages, and rows that
//! stay inside their job's tenant and space.
use anyhow::Context as _;
use entity::{
    ProgressEventType, Stage, research_task_partial_result as partial, research_task_progress_event as progress,
};
use kfs_tests::{DbTest, TestDb, Violation, db_tests, fixtures};
use sea_orm::{ActiveValue::Set, EntityTrait, Iterable};
use uuid::Uuid;

use super::set;

/// The progress-event and partial-result tests.
pub fn tests() -> Vec<DbTest> {
    db_tests![
        progress_sequence_check_rejects_a_sequence_below_one,
        progress_event_check_accepts_every_event_type_and_rejects_any_other,
        progress_stage_check_accepts_every_stage_and_rejects_any_other,
        progress_idempotency_keys_are_unique_per_job,
        progress_sequences_are_unique_per_job,
        progress_events_must_stay_in_their_jobs_tenant_and_space,
        partial_result_idempotency_keys_are_unique_per_job,
        partial_result_sequences_are_unique_per_job,
        partial_results_must_belong_to_an_existing_job,
    ]
}

const PROGRESS: &str = "research_task_progress_events";

async fn insert_progress(db: &TestDb, row: progress::ActiveModel) -> Result<u64, sea_orm::DbErr> {
    progress::Entity::insert(row).exec_without_returning(&db.db).await
}

async fn insert_partial(db: &TestDb, row: partial::ActiveModel) -> Result<u64, sea_orm::DbErr> {
    partial::Entity::insert(row).exec_without_returning(&db.db).await
}

async fn progress_sequence_check_rejects_a_sequence_below_one(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job;
    for sequence in [0, -1] {
        let result = insert_progress(&db, fixtures::progress_row(&job, sequence, &format!("k{sequence}"))).await;
        db.assert_violates(result, Violation::Check("research_task_progress_sequence_ck")).await?;
    }
    insert_progress(&db, fixtures::progress_row(&job, 1, "k1")).await?;
    Ok(())
}

async fn progress_event_check_accepts_every_event_type_and_rejects_any_other(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job;
    let mut last = None;
    for (sequence, event_type) in (1..).zip(ProgressEventType::iter()) {
        let mut row = fixtures::progress_row(&job, sequence, &format!("event {sequence}"));
        row.event_type = Set(event_type);
        let id = Uuid::now_v7();
        row.id = Set(id);
        insert_progress(&db, row).await.with_context(|| format!("{event_type:?}"))?;
        last = Some(id);
    }
    let event = last.context("no event types")?;
    // Completion is a stage_changed event, so a "completed" event type must not exist.
    for event_type in ["research_task.completed", "research.task", "started"] {
        let result = set(&db, PROGRESS, event, &[("event_type", event_type.into())]).await;
        db.assert_violates(result, Violation::Check("research_task_progress_event_ck")).await.context(event_type)?;
    }
    Ok(())
}

async fn progress_stage_check_accepts_every_stage_and_rejects_any_other(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job;
    let mut last = None;
    for (sequence, stage) in (1..).zip(Stage::iter()) {
        let mut row = fixtures::progress_row(&job, sequence, &format!("stage {sequence}"));
        row.stage = Set(stage);
        let id = Uuid::now_v7();
        row.id = Set(id);
        insert_progress(&db, row).await.with_context(|| format!("{stage:?}"))?;
        last = Some(id);
    }
    let event = last.context("no stages")?;
    for stage in ["archived", "Completed", ""] {
        let result = set(&db, PROGRESS, event, &[("stage", stage.into())]).await;
        db.assert_violates(result, Violation::Check("research_task_progress_stage_ck")).await.context(stage)?;
    }
    Ok(())
}

async fn progress_idempotency_keys_are_unique_per_job(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job;
    insert_progress(&db, fixtures::progress_row(&job, 1, "planning:1")).await?;
    let result = insert_progress(&db, fixtures::progress_row(&job, 2, "planning:1")).await;
    db.assert_violates(result, Violation::Unique("research_task_progress_job_idempotency_uq")).await?;
    let other = fixtures::task(&db).await?.job;
    insert_progress(&db, fixtures::progress_row(&other, 1, "planning:1")).await.context("another job, same key")?;
    Ok(())
}

async fn progress_sequences_are_unique_per_job(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job;
    insert_progress(&db, fixtures::progress_row(&job, 1, "first")).await?;
    let result = insert_progress(&db, fixtures::progress_row(&job, 1, "second")).await;
    db.assert_violates(result, Violation::Unique("research_task_progress_job_sequence_uq")).await?;
    let other = fixtures::task(&db).await?.job;
    insert_progress(&db, fixtures::progress_row(&other, 1, "first")).await.context("another job, same sequence")?;
    Ok(())
}

/// The foreign key is (tenant, space, job), so an event cannot be filed under a job of
/// another space or tenant, where another subject's reads would find it.
async fn progress_events_must_stay_in_their_jobs_tenant_and_space(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job;
    let elsewhere = fixtures::space(&db).await?;
    let mut row = fixtures::progress_row(&job, 1, "misfiled");
    row.tenant_id = Set(elsewhere.tenant_id.clone());
    row.knowledge_space_id = Set(elsewhere.id);
    db.assert_violates(insert_progress(&db, row).await, Violation::ForeignKey(None)).await.context("another space")?;
    let mut row = fixtures::progress_row(&job, 1, "orphan");
    row.research_task_job_id = Set(Uuid::new_v4());
    db.assert_violates(insert_progress(&db, row).await, Violation::ForeignKey(None)).await.context("no such job")
}

async fn partial_result_idempotency_keys_are_unique_per_job(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job;
    insert_partial(&db, fixtures::partial_row(&job, 1, "retrieving:1")).await?;
    let result = insert_partial(&db, fixtures::partial_row(&job, 2, "retrieving:1")).await;
    db.assert_violates(result, Violation::Unique("research_task_partials_job_idempotency_uq")).await?;
    let other = fixtures::task(&db).await?.job;
    insert_partial(&db, fixtures::partial_row(&other, 1, "retrieving:1")).await.context("another job, same key")?;
    Ok(())
}

async fn partial_result_sequences_are_unique_per_job(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job;
    insert_partial(&db, fixtures::partial_row(&job, 1, "first")).await?;
    let result = insert_partial(&db, fixtures::partial_row(&job, 1, "second")).await;
    db.assert_violates(result, Violation::Unique("research_task_partials_job_sequence_uq")).await?;
    let other = fixtures::task(&db).await?.job;
    insert_partial(&db, fixtures::partial_row(&other, 1, "first")).await.context("another job, same sequence")?;
    Ok(())
}

async fn partial_results_must_belong_to_an_existing_job(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job;
    let mut row = fixtures::partial_row(&job, 1, "orphan");
    row.research_task_job_id = Set(Uuid::new_v4());
    db.assert_violates(insert_partial(&db, row).await, Violation::ForeignKey(None)).await.context("no such job")?;
    let elsewhere = fixtures::space(&db).await?;
    let mut row = fixtures::partial_row(&job, 1, "no such space");
    row.knowledge_space_id = Set(Uuid::new_v4());
    row.tenant_id = Set(elsewhere.tenant_id);
    db.assert_violates(insert_partial(&db, row).await, Violation::ForeignKey(None)).await.context("no such space")
}
