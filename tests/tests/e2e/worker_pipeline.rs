//! The research pipeline: a task runs to an answer whose citations point at its evidence;
//! a crash after any commit resumes with no duplicate and no gap; cancel, pause, a revoked
//! grant, a spent budget or a passed limit stop it cleanly.
use entity::{
    AccessChannel, OutboxStatus, ProgressEventType, ResearchMode, Stage, answer_trace, now_millis,
    research_task_outbox as outbox,
};
use kfs_tests::{DbTest, TestDb, db_tests, fixtures};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::json;
use std::collections::HashSet;
use worker::Notifier;
use worker::lifecycle::{self, TaskRef};
use worker::pipeline::{RunOutcome, Stop};
use worker::runtime::{Step, run_due};

use crate::worker_support::{
    Act, Ask, Scripted, assert_gapless, create_task, events, key_grant, partials, pipeline, reload,
    space_with_documents,
};

/// This module's tests.
pub fn tests() -> Vec<DbTest> {
    db_tests![
        a_task_runs_to_an_answer_whose_citations_point_at_its_evidence,
        a_crash_after_each_commit_point_resumes_with_no_duplicate_and_no_gap,
        cancel_during_a_running_stage_stops_the_work_and_writes_nothing_after,
        pause_during_a_running_stage_stops_the_work_and_writes_nothing_after,
        a_revoked_api_key_fails_the_task_with_a_permission_error,
        a_key_revoked_before_the_claim_fails_the_task_before_its_first_stage_runs,
        a_removed_member_fails_the_task_with_a_permission_error,
        a_grant_that_dies_during_a_stage_commits_nothing_of_that_stage,
        a_spent_budget_fails_the_task_with_a_clear_error,
        a_passed_limit_fails_the_task_with_a_clear_error,
    ]
}

async fn a_task_runs_to_an_answer_whose_citations_point_at_its_evidence(db: TestDb) -> anyhow::Result<()> {
    let (_space, owner, documents) = space_with_documents(&db).await?;
    let notifier = Notifier::new();
    let task =
        create_task(&db, &notifier, fixtures::member_grant(&owner, AccessChannel::Interactive), Ask::default()).await?;
    let worker = pipeline(&db, &notifier, "worker-a", None);
    let (step, outcomes) = run_due(&worker, &Stop::default(), now_millis()).await?;
    anyhow::ensure!(step == Step::Claimed(1), "{step:?}");
    let Some(RunOutcome::Completed(trace_id)) = outcomes.first().cloned() else {
        anyhow::bail!("the run ended {outcomes:?}");
    };
    let row = reload(&db, task.id).await?;
    anyhow::ensure!(
        row.stage == Stage::Completed && row.completed_at.is_some() && row.lease_token.is_none(),
        "{row:?}"
    );
    anyhow::ensure!(row.cost["usd"].as_f64().is_some_and(|usd| usd > 0.0), "cost {}", row.cost);
    anyhow::ensure!(row.cost["stages"].as_object().is_some_and(|stages| stages.len() == 4), "cost {}", row.cost);
    // The spend adds up exactly: integer nanodollars, and `usd` derived from them.
    let nanos = row.cost["usd_nanos"].as_i64().unwrap_or_default();
    let by_stage: i64 =
        row.cost["stages"].as_object().into_iter().flatten().filter_map(|(_, stage)| stage["usd_nanos"].as_i64()).sum();
    anyhow::ensure!(nanos > 0 && nanos == by_stage, "total {nanos} nanos, stages {by_stage}: {}", row.cost);
    anyhow::ensure!(row.cost["usd"] == json!(nanos as f64 / 1e9), "usd is not usd_nanos / 1e9: {}", row.cost);

    let trace =
        answer_trace::Entity::find_by_id(trace_id).one(&db.db).await?.ok_or_else(|| anyhow::anyhow!("no trace"))?;
    kfs_tests::ensure_eq!(trace.research_task_id, Some(task.id));
    kfs_tests::ensure_eq!(trace.subject_id.as_deref(), Some(owner.subject_id.as_str()));
    kfs_tests::ensure_eq!(trace.permission_snapshot_id, Some(task.permission_snapshot_id));
    kfs_tests::ensure_eq!(trace.permission_snapshot_revision, Some(task.permission_snapshot_revision));
    kfs_tests::ensure_eq!(trace.access_channel, Some(AccessChannel::Interactive));
    let evidence = trace.evidence.as_array().ok_or_else(|| anyhow::anyhow!("evidence is not an array"))?;
    anyhow::ensure!(!evidence.is_empty() && evidence.len() <= 3, "{} pieces of evidence", evidence.len());
    let known: HashSet<String> = documents.iter().map(ToString::to_string).collect();
    for (index, piece) in evidence.iter().enumerate() {
        let citation = index + 1;
        anyhow::ensure!(piece["citation"] == json!(citation));
        anyhow::ensure!(
            trace.answer.contains(&format!("[{citation}]")),
            "answer {:?} lacks [{citation}]",
            trace.answer
        );
        let document = piece["document_id"].as_str().unwrap_or_default();
        anyhow::ensure!(known.contains(document), "evidence cites unknown document {document}");
    }
    anyhow::ensure!(!trace.answer.contains(&format!("[{}]", evidence.len() + 1)), "answer cites past its evidence");
    anyhow::ensure!(!trace.answer.contains("Tomatoes"), "the gardening document is not evidence: {}", trace.answer);

    let journal = events(&db, task.id).await?;
    let keys: Vec<_> = journal.iter().map(|e| e.idempotency_key.as_str()).collect();
    // RESEARCH runs up to two rounds. No document holds "fence" or "use", so the first
    // round leaves them uncovered and the second searches them, each round keyed by round.
    anyhow::ensure!(
        keys == [
            "started",
            "stage:retrieving",
            "stage:analyzing",
            "stage:retrieving:r2",
            "stage:analyzing:r2",
            "stage:generating",
            "stage:completed"
        ],
        "{keys:?}"
    );
    let first = &journal[3].payload;
    kfs_tests::ensure_eq!((&first["round"], &first["decision"]), (&json!(1), &json!("continue")), "{first}");
    anyhow::ensure!(first["plan"]["sub_queries"].as_array().is_some_and(|queries| queries.contains(&json!("fence"))));
    let last = &journal[5].payload;
    kfs_tests::ensure_eq!((&last["round"], &last["decision"]), (&json!(2), &json!("max_rounds")), "{last}");
    assert_gapless("progress", &journal.iter().map(|e| e.sequence).collect::<Vec<_>>())?;
    let results = partials(&db, task.id).await?;
    assert_gapless("partial", &results.iter().map(|p| p.sequence).collect::<Vec<_>>())?;
    anyhow::ensure!(results.last().is_some_and(|p| p.idempotency_key == "evidence:r2"), "{results:?}");
    let delivery = outbox::Entity::find().filter(outbox::Column::ResearchTaskJobId.eq(task.id)).one(&db.db).await?;
    kfs_tests::ensure_eq!(delivery.map(|d| d.status), Some(OutboxStatus::Completed));
    Ok(())
}

async fn a_crash_after_each_commit_point_resumes_with_no_duplicate_and_no_gap(db: TestDb) -> anyhow::Result<()> {
    let (_space, owner, _documents) = space_with_documents(&db).await?;
    let notifier = Notifier::new();
    // A clean run, to compare against.
    let clean =
        create_task(&db, &notifier, fixtures::member_grant(&owner, AccessChannel::Interactive), Ask::default()).await?;
    run_due(&pipeline(&db, &notifier, "clean", None), &Stop::default(), now_millis()).await?;
    let clean_events = events(&db, clean.id).await?.len();
    let clean_partials = partials(&db, clean.id).await?.len();

    for crash_at in [Stage::Planning, Stage::Retrieving, Stage::Analyzing, Stage::Generating] {
        let task =
            create_task(&db, &notifier, fixtures::member_grant(&owner, AccessChannel::Interactive), Ask::default())
                .await?;
        let engine = Scripted::new(&db, crash_at, Act::Block);
        let doomed = pipeline(&db, &notifier, "doomed", Some(engine.clone()));
        let running = tokio::spawn(async move { run_due(&doomed, &Stop::default(), now_millis()).await });
        engine.entered.notified().await;
        // The process dies mid-stage: no release, no more writes; its lease lapses.
        running.abort();
        let _ = running.await;
        // A dead process renews nothing; in this one, the doomed pipeline's lease keeper
        // may finish a renewal already under way before it sees the pipeline is gone
        // (its next beat, 20 ms on). Read the lease once that has passed.
        tokio::time::sleep(std::time::Duration::from_millis(150)).await;
        let crashed = reload(&db, task.id).await?;
        anyhow::ensure!(crashed.stage == crash_at && crashed.lease_token.is_some(), "{crashed:?}");

        let later = crashed.lease_expires_at.unwrap_or_default() + 1;
        let (_, outcomes) = run_due(&pipeline(&db, &notifier, "rescuer", None), &Stop::default(), later).await?;
        anyhow::ensure!(
            matches!(outcomes.as_slice(), [RunOutcome::Completed(_)]),
            "after a crash in {crash_at:?}: {outcomes:?}"
        );

        let journal = events(&db, task.id).await?;
        assert_gapless("progress", &journal.iter().map(|e| e.sequence).collect::<Vec<_>>())?;
        let keys: HashSet<_> = journal.iter().map(|e| e.idempotency_key.clone()).collect();
        anyhow::ensure!(
            keys.len() == journal.len() && journal.len() == clean_events,
            "crash in {crash_at:?}: {keys:?}"
        );
        let results = partials(&db, task.id).await?;
        assert_gapless("partial", &results.iter().map(|p| p.sequence).collect::<Vec<_>>())?;
        anyhow::ensure!(results.len() == clean_partials, "crash in {crash_at:?}: {} partial results", results.len());
        let traces =
            answer_trace::Entity::find().filter(answer_trace::Column::ResearchTaskId.eq(task.id)).all(&db.db).await?;
        anyhow::ensure!(traces.len() == 1, "crash in {crash_at:?}: {} answer traces", traces.len());
        let row = reload(&db, task.id).await?;
        anyhow::ensure!(row.execution_attempts == 2, "crash in {crash_at:?}: {} attempts", row.execution_attempts);
    }
    Ok(())
}

/// Runs a task until the engine is inside `stage`, gives `command`, and checks the worker
/// stopped without writing.
async fn command_during_stage(db: &TestDb, command: TaskCommand, expected: Stage) -> anyhow::Result<()> {
    let (_space, owner, _documents) = space_with_documents(db).await?;
    let notifier = Notifier::new();
    let task =
        create_task(db, &notifier, fixtures::member_grant(&owner, AccessChannel::Interactive), Ask::default()).await?;
    let engine = Scripted::new(db, Stage::Retrieving, Act::Block);
    let worker = pipeline(db, &notifier, "worker-a", Some(engine.clone()));
    let running = tokio::spawn(async move { run_due(&worker, &Stop::default(), now_millis()).await });
    engine.entered.notified().await;

    let owner_ref = TaskRef {
        id: task.id,
        tenant_id: task.tenant_id.clone(),
        subject_id: task.subject_id.clone(),
        expected_row_version: None,
    };
    let stopped = match command {
        TaskCommand::Cancel => lifecycle::cancel(&db.db, &notifier, &owner_ref, entity::now_millis()).await?,
        TaskCommand::Pause => lifecycle::pause(&db.db, &notifier, &owner_ref, None, entity::now_millis()).await?,
    };
    let events_at_stop = events(db, task.id).await?.len();
    // The engine never finishes on its own: only the heartbeat noticing the lost lease
    // can end this run.
    let (_, outcomes) = running.await??;
    anyhow::ensure!(outcomes == [RunOutcome::LeaseLost], "{outcomes:?}");
    let row = reload(db, task.id).await?;
    anyhow::ensure!(
        row.stage == expected && row.row_version == stopped.row_version,
        "the worker wrote after the command: {row:?}"
    );
    let journal = events(db, task.id).await?;
    anyhow::ensure!(journal.len() == events_at_stop, "events were written after the command");
    anyhow::ensure!(partials(db, task.id).await?.is_empty(), "partial results were written after the command");
    Ok(())
}

enum TaskCommand {
    Cancel,
    Pause,
}

async fn cancel_during_a_running_stage_stops_the_work_and_writes_nothing_after(db: TestDb) -> anyhow::Result<()> {
    command_during_stage(&db, TaskCommand::Cancel, Stage::Canceled).await
}

async fn pause_during_a_running_stage_stops_the_work_and_writes_nothing_after(db: TestDb) -> anyhow::Result<()> {
    command_during_stage(&db, TaskCommand::Pause, Stage::Paused).await
}

async fn a_revoked_api_key_fails_the_task_with_a_permission_error(db: TestDb) -> anyhow::Result<()> {
    let (space, _owner, _documents) = space_with_documents(&db).await?;
    let key = fixtures::api_key(&db, &space).await?;
    let notifier = Notifier::new();
    let task = create_task(&db, &notifier, key_grant(&key), Ask::default()).await?;
    let engine = Scripted::new(&db, Stage::Retrieving, Act::RevokeKey(key.id));
    let outcomes =
        run_due(&pipeline(&db, &notifier, "worker-a", Some(engine)), &Stop::default(), now_millis()).await?.1;
    expect_failed(&db, task.id, &outcomes, "revoked").await
}

/// A grant that died while the task was queued is refused before any stage runs (the
/// claim checks it, on PostgreSQL in the claim's own statement): the engine, which would
/// block in planning, is never entered, and the task fails with the denial.
async fn a_key_revoked_before_the_claim_fails_the_task_before_its_first_stage_runs(db: TestDb) -> anyhow::Result<()> {
    use sea_orm::ActiveValue::Set;
    let (space, _owner, _documents) = space_with_documents(&db).await?;
    let key = fixtures::api_key(&db, &space).await?;
    let notifier = Notifier::new();
    let task = create_task(&db, &notifier, key_grant(&key), Ask::default()).await?;
    let revoked =
        entity::api_key::ActiveModel { id: Set(key.id), revoked_at: Set(Some(now_millis())), ..Default::default() };
    entity::api_key::Entity::update(revoked).exec(&db.db).await?;
    let engine = Scripted::new(&db, Stage::Planning, Act::Block);
    let worker = pipeline(&db, &notifier, "worker-a", Some(engine));
    let stop = Stop::default();
    let run = run_due(&worker, &stop, now_millis());
    let outcomes = tokio::time::timeout(std::time::Duration::from_secs(20), run)
        .await
        .map_err(|_| anyhow::anyhow!("the first stage ran under a revoked key"))??
        .1;
    expect_failed(&db, task.id, &outcomes, "revoked").await?;
    let types: Vec<_> = events(&db, task.id).await?.into_iter().map(|e| e.event_type).collect();
    anyhow::ensure!(types == [ProgressEventType::Started, ProgressEventType::Failed], "{types:?}");
    anyhow::ensure!(partials(&db, task.id).await?.is_empty());
    Ok(())
}

async fn a_removed_member_fails_the_task_with_a_permission_error(db: TestDb) -> anyhow::Result<()> {
    let (space, _owner, _documents) = space_with_documents(&db).await?;
    let viewer = fixtures::member(&db, &space, "viewer", entity::MemberRole::Viewer).await?;
    let notifier = Notifier::new();
    let task =
        create_task(&db, &notifier, fixtures::member_grant(&viewer, AccessChannel::Agent), Ask::default()).await?;
    let engine = Scripted::new(&db, Stage::Analyzing, Act::RemoveMember(viewer.id));
    let outcomes =
        run_due(&pipeline(&db, &notifier, "worker-a", Some(engine)), &Stop::default(), now_millis()).await?.1;
    expect_failed(&db, task.id, &outcomes, "membership").await
}

/// The boundary after a stage checks the grant in the checkpoint's own fenced statement:
/// a grant that died while the stage ran keeps the stage's outputs (its partial results,
/// or the answer trace) from ever being written, and the task fails with the denial.
async fn a_grant_that_dies_during_a_stage_commits_nothing_of_that_stage(db: TestDb) -> anyhow::Result<()> {
    for stage in [Stage::Retrieving, Stage::Generating] {
        let (space, _owner, _documents) = space_with_documents(&db).await?;
        let key = fixtures::api_key(&db, &space).await?;
        let notifier = Notifier::new();
        let task = create_task(&db, &notifier, key_grant(&key), Ask::default()).await?;
        let engine = Scripted::new(&db, stage, Act::RevokeKey(key.id));
        let outcomes =
            run_due(&pipeline(&db, &notifier, "worker-a", Some(engine)), &Stop::default(), now_millis()).await?.1;
        expect_failed(&db, task.id, &outcomes, "revoked").await?;
        let keys: Vec<String> = events(&db, task.id).await?.into_iter().map(|event| event.idempotency_key).collect();
        let written: Vec<String> =
            partials(&db, task.id).await?.into_iter().map(|partial| partial.idempotency_key).collect();
        let boundary = format!("stage:{}", stage.as_str());
        kfs_tests::ensure_eq!(keys.last().map(String::as_str), Some("failed"));
        anyhow::ensure!(
            keys.get(keys.len().saturating_sub(2)) == Some(&boundary),
            "{stage:?}: the last boundary committed should be the one into the stage: {keys:?}"
        );
        if stage == Stage::Retrieving {
            anyhow::ensure!(written.is_empty(), "retrieval results written under a dead grant: {written:?}");
        } else {
            anyhow::ensure!(written.iter().any(|key| key == "evidence"), "analysis committed before: {written:?}");
        }
    }
    Ok(())
}

async fn a_spent_budget_fails_the_task_with_a_clear_error(db: TestDb) -> anyhow::Result<()> {
    let (_space, owner, _documents) = space_with_documents(&db).await?;
    let notifier = Notifier::new();
    let ask = Ask { budget_usd: Some(0.000_001), ..Ask::default() };
    let task = create_task(&db, &notifier, fixtures::member_grant(&owner, AccessChannel::Interactive), ask).await?;
    let outcomes = run_due(&pipeline(&db, &notifier, "worker-a", None), &Stop::default(), now_millis()).await?.1;
    expect_failed(&db, task.id, &outcomes, "budget exceeded").await?;
    let row = reload(&db, task.id).await?;
    anyhow::ensure!(row.cost["usd"].as_f64().is_some_and(|usd| usd > 0.000_001), "the spend is recorded: {}", row.cost);
    Ok(())
}

async fn a_passed_limit_fails_the_task_with_a_clear_error(db: TestDb) -> anyhow::Result<()> {
    let (_space, owner, _documents) = space_with_documents(&db).await?;
    let notifier = Notifier::new();
    let ask = Ask { mode: Some(ResearchMode::Deep), limits: json!({ "max_sub_queries": 1 }), ..Ask::default() };
    let task = create_task(&db, &notifier, fixtures::member_grant(&owner, AccessChannel::Interactive), ask).await?;
    let outcomes = run_due(&pipeline(&db, &notifier, "worker-a", None), &Stop::default(), now_millis()).await?.1;
    expect_failed(&db, task.id, &outcomes, "max_sub_queries").await
}

/// The run failed for good, not retried, with `needle` in the error and a `failed` event last.
async fn expect_failed(db: &TestDb, task_id: uuid::Uuid, outcomes: &[RunOutcome], needle: &str) -> anyhow::Result<()> {
    anyhow::ensure!(
        matches!(outcomes, [RunOutcome::Failed(message)] if message.contains(needle)),
        "expected a failure mentioning {needle:?}, got {outcomes:?}"
    );
    let row = reload(db, task_id).await?;
    anyhow::ensure!(row.stage == Stage::Failed && row.retry_at.is_none() && row.lease_token.is_none(), "{row:?}");
    anyhow::ensure!(row.error.as_deref().is_some_and(|e| e.contains(needle)), "{:?}", row.error);
    let last = events(db, task_id).await?.pop().ok_or_else(|| anyhow::anyhow!("no events"))?;
    anyhow::ensure!(last.event_type == ProgressEventType::Failed, "{last:?}");
    let traces =
        answer_trace::Entity::find().filter(answer_trace::Column::ResearchTaskId.eq(task_id)).all(&db.db).await?;
    anyhow::ensure!(traces.is_empty(), "a failed task wrote an answer trace");
    Ok(())
}
