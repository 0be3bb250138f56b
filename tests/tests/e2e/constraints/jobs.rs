//! `research_task_jobs`: stage, mode and channel values, the positive counters, the lease
//! triple, and the job's grant.
use anyhow::Context as _;
use entity::{AccessChannel, ResearchMode, Stage};
use kfs_tests::{DbTest, TestDb, Violation, db_tests, fixtures};
use sea_orm::{ActiveEnum, Iterable, Value};
use uuid::Uuid;

use super::{accepted, set};

/// The job tests.
pub fn tests() -> Vec<DbTest> {
    db_tests![
        stage_check_accepts_every_stage_and_rejects_any_other,
        mode_check_accepts_every_mode_or_none_and_rejects_any_other,
        channel_check_rejects_an_unknown_access_channel,
        every_access_channel_can_create_a_task,
        positive_check_rejects_a_permission_snapshot_revision_below_one,
        positive_check_rejects_a_row_version_below_one,
        positive_check_rejects_negative_execution_attempts,
        positive_check_rejects_max_execution_attempts_below_one,
        positive_check_rejects_top_k_below_one,
        positive_check_rejects_a_negative_budget,
        lease_check_rejects_any_partial_lease,
        a_job_must_run_under_a_snapshot_of_its_own_subject_and_channel,
        a_job_must_belong_to_an_existing_space,
    ]
}

const JOBS: &str = "research_task_jobs";
const POSITIVE: Violation = Violation::Check("research_task_jobs_positive_ck");

/// Sets one column of the fixture task's job and returns what the database said.
async fn set_one(db: &TestDb, job: Uuid, column: &str, value: Value) -> Result<sea_orm::ExecResult, sea_orm::DbErr> {
    set(db, JOBS, job, &[(column, value)]).await
}

async fn stage_check_accepts_every_stage_and_rejects_any_other(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job.id;
    for stage in Stage::iter() {
        accepted(set_one(&db, job, "stage", stage.to_value().into()).await, stage.as_str())?;
    }
    for stage in ["archived", "QUEUED", "running", ""] {
        let result = set_one(&db, job, "stage", stage.into()).await;
        db.assert_violates(result, Violation::Check("research_task_jobs_stage_ck")).await.context(stage)?;
    }
    Ok(())
}

async fn mode_check_accepts_every_mode_or_none_and_rejects_any_other(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job.id;
    for mode in ResearchMode::iter() {
        accepted(set_one(&db, job, "mode", mode.to_value().into()).await, mode.as_str())?;
    }
    accepted(set_one(&db, job, "mode", Option::<String>::None.into()).await, "no mode")?;
    for mode in ["turbo", "FAST", ""] {
        let result = set_one(&db, job, "mode", mode.into()).await;
        db.assert_violates(result, Violation::Check("research_task_jobs_mode_ck")).await.context(mode)?;
    }
    Ok(())
}

async fn channel_check_rejects_an_unknown_access_channel(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job.id;
    for channel in ["email", "INTERACTIVE", ""] {
        let result = set_one(&db, job, "access_channel", channel.into()).await;
        db.assert_violates(result, Violation::Check("research_task_jobs_channel_ck")).await.context(channel)?;
    }
    Ok(())
}

/// The accepting half of the channel check: a job's channel is pinned by its snapshot's,
/// so each channel gets a task of its own.
async fn every_access_channel_can_create_a_task(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    for channel in AccessChannel::iter() {
        let job = fixtures::job(&db, &task.member, channel).await.context(channel.as_str())?;
        anyhow::ensure!(job.access_channel == channel, "{channel:?} came back as {:?}", job.access_channel);
    }
    Ok(())
}

async fn positive_check_rejects_a_permission_snapshot_revision_below_one(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job.id;
    for revision in [0, -1] {
        let result = set_one(&db, job, "permission_snapshot_revision", revision.into()).await;
        db.assert_violates(result, POSITIVE).await?;
    }
    accepted(set_one(&db, job, "permission_snapshot_revision", 2.into()).await, "revision 2")
}

async fn positive_check_rejects_a_row_version_below_one(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job.id;
    db.assert_violates(set_one(&db, job, "row_version", 0.into()).await, POSITIVE).await?;
    accepted(set_one(&db, job, "row_version", 1.into()).await, "row version 1")
}

async fn positive_check_rejects_negative_execution_attempts(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job.id;
    db.assert_violates(set_one(&db, job, "execution_attempts", (-1).into()).await, POSITIVE).await?;
    accepted(set_one(&db, job, "execution_attempts", 0.into()).await, "no attempts")
}

async fn positive_check_rejects_max_execution_attempts_below_one(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job.id;
    db.assert_violates(set_one(&db, job, "max_execution_attempts", 0.into()).await, POSITIVE).await?;
    accepted(set_one(&db, job, "max_execution_attempts", 1.into()).await, "one attempt allowed")
}

async fn positive_check_rejects_top_k_below_one(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job.id;
    for top_k in [0, -5] {
        db.assert_violates(set_one(&db, job, "top_k", top_k.into()).await, POSITIVE).await?;
    }
    accepted(set_one(&db, job, "top_k", 1.into()).await, "top_k 1")?;
    accepted(set_one(&db, job, "top_k", Option::<i32>::None.into()).await, "no top_k")
}

async fn positive_check_rejects_a_negative_budget(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job.id;
    db.assert_violates(set_one(&db, job, "budget_usd", (-0.01_f64).into()).await, POSITIVE).await?;
    accepted(set_one(&db, job, "budget_usd", 0.0_f64.into()).await, "a zero budget")?;
    accepted(set_one(&db, job, "budget_usd", Option::<f64>::None.into()).await, "no budget")
}

async fn lease_check_rejects_any_partial_lease(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job.id;
    let token = || Value::from(Uuid::new_v4());
    let worker = || Value::from("worker-1");
    let expires = || Value::from(entity::now_millis() + 30_000);
    let no_token = || Value::from(Option::<Uuid>::None);
    let no_worker = || Value::from(Option::<String>::None);
    let no_expiry = || Value::from(Option::<i64>::None);
    let partial_leases = [
        [token(), no_worker(), no_expiry()],
        [no_token(), worker(), no_expiry()],
        [no_token(), no_worker(), expires()],
        [token(), worker(), no_expiry()],
        [token(), no_worker(), expires()],
        [no_token(), worker(), expires()],
    ];
    for [token, worker, expires] in partial_leases {
        let what = format!("lease ({token:?}, {worker:?}, {expires:?})");
        let lease = [("lease_token", token), ("worker_id", worker), ("lease_expires_at", expires)];
        db.assert_violates(set(&db, JOBS, job, &lease).await, Violation::Check("research_task_jobs_lease_ck"))
            .await
            .context(what)?;
    }
    let full = [("lease_token", token()), ("worker_id", worker()), ("lease_expires_at", expires())];
    accepted(set(&db, JOBS, job, &full).await, "a full lease")?;
    let none = [("lease_token", no_token()), ("worker_id", no_worker()), ("lease_expires_at", no_expiry())];
    accepted(set(&db, JOBS, job, &none).await, "no lease")
}

/// The composite foreign key to the snapshot covers tenant, space, id, subject and channel,
/// so a job can never be re-pointed at someone else's grant.
async fn a_job_must_run_under_a_snapshot_of_its_own_subject_and_channel(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let job = task.job.id;
    let unnamed_fk = Violation::ForeignKey(None);
    db.assert_violates(set_one(&db, job, "subject_id", "intruder".into()).await, unnamed_fk)
        .await
        .context("subject")?;
    db.assert_violates(set_one(&db, job, "access_channel", "mcp".into()).await, unnamed_fk).await.context("channel")?;
    let missing = set_one(&db, job, "permission_snapshot_id", Uuid::new_v4().into()).await;
    db.assert_violates(missing, unnamed_fk).await.context("missing snapshot")?;
    let other_owner = fixtures::member(&db, &task.space, "other", entity::MemberRole::Viewer).await?;
    let others_grant = fixtures::snapshot(&db, &other_owner, AccessChannel::Interactive).await?;
    let result = set_one(&db, job, "permission_snapshot_id", others_grant.id.into()).await;
    db.assert_violates(result, unnamed_fk).await.context("another subject's snapshot")
}

async fn a_job_must_belong_to_an_existing_space(db: TestDb) -> anyhow::Result<()> {
    let job = fixtures::task(&db).await?.job.id;
    let result = set_one(&db, job, "knowledge_space_id", Uuid::new_v4().into()).await;
    db.assert_violates(result, Violation::ForeignKey(None)).await
}
