//! The store's writes of a task's life, on both backends: journal appends, the fence, lease
//! renewal, stage boundaries, claims and outbox entries. Each test states what any backend
//! must do; the rows are built here as the lifecycle would decide them.
use entity::{OutboxStatus, ProgressEventType, Stage, research_task_job as job};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq, fixtures};
use serde_json::json;
use uuid::Uuid;
use worker::store::boundaries::{BoundaryOutcome, BoundaryWrite, EventWrite, PartialWrite, TraceWrite};
use worker::store::claims::{LeaseWrite, Pair};
use worker::store::tasks::{Fence, LeasePair};
use worker::store::{self, journal};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        journal_appends_are_gapless_and_a_written_key_keeps_its_sequence,
        the_fence_names_what_keeps_a_boundary_out,
        renewing_leases_renews_the_held_and_names_the_lost,
        a_batch_of_boundaries_lands_each_under_its_own_fence,
        a_completion_writes_its_trace_draft_and_closes_the_outbox,
        claiming_finds_pairs_and_due_rows_and_leases_them,
        outbox_entries_move_through_their_statuses_without_touching_the_task,
    ]
}

/// A claimed task (leased to "store", in planning), its lease and its row.
async fn leased(db: &TestDb) -> anyhow::Result<(fixtures::Task, LeasePair, job::Model)> {
    let task = fixtures::task(db).await?;
    let token = Uuid::new_v4();
    let now = entity::now_millis();
    let write = LeaseWrite {
        job_id: task.job.id,
        token,
        worker_id: "store".into(),
        stage: Stage::Planning,
        lease_expires_at: now + 60_000,
        now,
        started: None,
    };
    let txn = store::begin_write(&db.db).await?;
    store::claims::due(&txn, &pair(&task.job), now, 10, &[]).await?;
    let mut leased = store::claims::lease(&txn, &[write]).await?;
    txn.commit().await?;
    let row = leased.pop().ok_or_else(|| anyhow::anyhow!("nothing leased"))?.job;
    Ok((task, LeasePair { job_id: row.id, token }, row))
}

fn pair(task: &job::Model) -> Pair {
    Pair { tenant_id: task.tenant_id.clone(), knowledge_space_id: task.knowledge_space_id }
}

fn event(key: &str) -> EventWrite {
    EventWrite { id: Uuid::now_v7(), event_type: ProgressEventType::StageChanged, key: key.into(), payload: json!({}) }
}

/// A checkpoint of `lease` from `from` to `stage` at `now`.
fn checkpoint(lease: LeasePair, from: Stage, stage: Stage, now: i64) -> BoundaryWrite {
    BoundaryWrite {
        lease,
        from_stage: from,
        stage,
        cost: json!({ "usd_nanos": 5 }),
        now,
        lease_expires_at: Some(now + 60_000),
        event: event(&format!("stage:{}", stage.as_str())),
        partials: vec![PartialWrite { id: Uuid::now_v7(), key: "bundle:1".into(), bundle: json!({ "n": 1 }) }],
        trace: None,
    }
}

async fn journal_appends_are_gapless_and_a_written_key_keeps_its_sequence(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let first = fixtures::append_event(&db, &task.job, ProgressEventType::Started, Stage::Planning, "a").await?;
    let second = fixtures::append_event(&db, &task.job, ProgressEventType::Started, Stage::Planning, "b").await?;
    let again = fixtures::append_event(&db, &task.job, ProgressEventType::Started, Stage::Planning, "a").await?;
    // A new task's journal is empty: its first event is sequence 1.
    ensure_eq!((first, second, again), (1, 2, 1));
    ensure_eq!(
        journal::last_sequence::<entity::research_task_progress_event::Entity, _>(&db.db, task.job.id).await?,
        2
    );
    let partial = fixtures::append_partial(&db, &task.job, "p", json!({})).await?;
    let partial_again = fixtures::append_partial(&db, &task.job, "p", json!({ "other": true })).await?;
    ensure_eq!((partial, partial_again), (1, 1));
    let after = journal::after::<entity::research_task_progress_event::Entity, _>(&db.db, task.job.id, 1, 10).await?;
    ensure_eq!(after.iter().map(|row| row.sequence).collect::<Vec<_>>(), vec![2]);
    let many =
        journal::after_for_tasks::<entity::research_task_progress_event::Entity, _>(&db.db, &[task.job.id], 0, 2)
            .await?;
    ensure_eq!(many.len(), 2);
    let keyed = journal::by_key::<entity::research_task_progress_event::Entity, _>(&db.db, task.job.id, "b").await?;
    ensure_eq!(keyed.map(|row| row.sequence), Some(2));
    Ok(())
}

async fn the_fence_names_what_keeps_a_boundary_out(db: TestDb) -> anyhow::Result<()> {
    let (_, lease, row) = leased(&db).await?;
    let now = entity::now_millis();
    let fence = async |lease: LeasePair, from: Stage| -> anyhow::Result<Option<Fence>> {
        let txn = store::begin_write(&db.db).await?;
        let fence = store::tasks::fence(&txn, lease, from, now).await?;
        txn.rollback().await?;
        Ok(fence)
    };
    ensure_eq!(fence(lease, Stage::Planning).await?, None);
    ensure_eq!(fence(LeasePair { token: Uuid::new_v4(), ..lease }, Stage::Planning).await?, Some(Fence::LeaseLost));
    ensure_eq!(fence(lease, Stage::Analyzing).await?, Some(Fence::StageMoved(Stage::Planning)));
    ensure_eq!(fence(LeasePair { job_id: Uuid::now_v7(), ..lease }, Stage::Planning).await?, Some(Fence::LeaseLost));
    // Locked and saved whole: what the lifecycle decided is what the row holds.
    let txn = store::begin_write(&db.db).await?;
    let locked = store::tasks::lock(&txn, row.id).await?.ok_or_else(|| anyhow::anyhow!("no row"))?;
    let saved = store::tasks::save(&txn, job::Model { error: Some("noted".into()), ..locked }).await?;
    txn.commit().await?;
    ensure_eq!(store::tasks::find(&db.db, row.id).await?, Some(saved));
    Ok(())
}

async fn renewing_leases_renews_the_held_and_names_the_lost(db: TestDb) -> anyhow::Result<()> {
    let (_, held, row) = leased(&db).await?;
    let lost = LeasePair { job_id: Uuid::now_v7(), token: Uuid::new_v4() };
    let now = entity::now_millis() + 1_000;
    let gone = store::tasks::renew_leases(&db.db, &[held, lost], 30_000, now).await?;
    ensure_eq!(gone, vec![lost.job_id]);
    let renewed = store::tasks::find(&db.db, row.id).await?.ok_or_else(|| anyhow::anyhow!("no row"))?;
    ensure_eq!((renewed.lease_expires_at, renewed.heartbeat_at), (Some(now + 30_000), Some(now)));
    // Lease internals only: nothing a client sees moved.
    ensure_eq!((renewed.row_version, renewed.updated_at), (row.row_version, row.updated_at));
    let stale = LeasePair { token: Uuid::new_v4(), ..held };
    ensure_eq!(store::tasks::renew_leases(&db.db, &[stale], 30_000, now).await?, vec![held.job_id]);
    Ok(())
}

async fn a_batch_of_boundaries_lands_each_under_its_own_fence(db: TestDb) -> anyhow::Result<()> {
    let (_, first, _) = leased(&db).await?;
    let (_, second, _) = leased(&db).await?;
    let (_, third, _) = leased(&db).await?;
    let now = entity::now_millis();
    let writes = vec![
        checkpoint(first, Stage::Planning, Stage::Retrieving, now),
        // Lost: another token.
        checkpoint(LeasePair { token: Uuid::new_v4(), ..second }, Stage::Planning, Stage::Retrieving, now),
        // Moved: its worker ran another stage.
        checkpoint(third, Stage::Analyzing, Stage::Generating, now),
    ];
    let txn = store::begin_write(&db.db).await?;
    let outcomes = store::boundaries::write(&txn, &writes).await?;
    txn.commit().await?;
    let BoundaryOutcome::Landed(landed) = &outcomes[0] else { anyhow::bail!("the first did not land: {outcomes:?}") };
    ensure_eq!((landed.job.stage, landed.event_new, landed.any_endpoint), (Stage::Retrieving, true, false));
    ensure_eq!(landed.job.cost, json!({ "usd_nanos": 5 }));
    let events = journal::after::<entity::research_task_progress_event::Entity, _>(&db.db, first.job_id, 0, 10).await?;
    ensure_eq!(
        events.last().map(|row| (row.sequence, row.idempotency_key.as_str())),
        Some((landed.event_sequence, "stage:retrieving"))
    );
    anyhow::ensure!(matches!(outcomes[1], BoundaryOutcome::Fenced(Fence::LeaseLost)), "{:?}", outcomes[1]);
    anyhow::ensure!(
        matches!(outcomes[2], BoundaryOutcome::Fenced(Fence::StageMoved(Stage::Planning))),
        "{:?}",
        outcomes[2]
    );
    for fenced in [second, third] {
        let row = store::tasks::find(&db.db, fenced.job_id).await?.ok_or_else(|| anyhow::anyhow!("no row"))?;
        ensure_eq!(row.stage, Stage::Planning, "a fenced boundary wrote");
    }
    // Replayed: its event and partial result are not written twice.
    let txn = store::begin_write(&db.db).await?;
    let mut replay = checkpoint(first, Stage::Retrieving, Stage::Analyzing, now);
    replay.event = event("stage:retrieving");
    let outcomes = store::boundaries::write(&txn, &[replay]).await?;
    txn.commit().await?;
    let BoundaryOutcome::Landed(replayed) = &outcomes[0] else { anyhow::bail!("the replay did not land") };
    ensure_eq!((replayed.event_new, replayed.event_sequence), (false, landed.event_sequence));
    let partials =
        journal::after::<entity::research_task_partial_result::Entity, _>(&db.db, first.job_id, 0, 10).await?;
    ensure_eq!(partials.len(), 1);
    Ok(())
}

async fn a_completion_writes_its_trace_draft_and_closes_the_outbox(db: TestDb) -> anyhow::Result<()> {
    let (task, lease, _) = leased(&db).await?;
    let now = entity::now_millis();
    let checks = json!([{ "sentence": "Leases fence [1].", "citation": 1, "verdict": "supported" }]);
    let citations = json!([{ "n": 1, "sentence": "Leases fence [1].", "verdict": "supported", "quote": null }]);
    let trace = TraceWrite {
        id: Uuid::now_v7(),
        answer: "Leases fence [1].".into(),
        evidence: json!([]),
        checks: checks.clone(),
        citations: citations.clone(),
    };
    let completion = BoundaryWrite {
        stage: Stage::Completed,
        lease_expires_at: None,
        event: event("stage:completed"),
        partials: Vec::new(),
        trace: Some(trace.clone()),
        ..checkpoint(lease, Stage::Planning, Stage::Completed, now)
    };
    let txn = store::begin_write(&db.db).await?;
    let outcomes = store::boundaries::write(&txn, &[completion]).await?;
    txn.commit().await?;
    let BoundaryOutcome::Landed(landed) = &outcomes[0] else { anyhow::bail!("the completion did not land") };
    ensure_eq!(
        (landed.job.stage, landed.job.lease_token, landed.job.completed_at),
        (Stage::Completed, None, Some(now))
    );
    let stored = store::answer_traces::find(&db.db, trace.id).await?.ok_or_else(|| anyhow::anyhow!("no trace"))?;
    ensure_eq!(
        (stored.answer.as_str(), stored.subject_id.as_deref()),
        (trace.answer.as_str(), Some(task.job.subject_id.as_str()))
    );
    let stored_checks = store::answer_traces::checks_for(&db.db, &[trace.id]).await?;
    let row = stored_checks.get(&trace.id).ok_or_else(|| anyhow::anyhow!("no citation check row"))?;
    ensure_eq!((&row.checks, row.citations.as_ref()), (&checks, Some(&citations)), "written with the trace");
    let draft = store::drafts::find(&db.db, lease.job_id).await?.ok_or_else(|| anyhow::anyhow!("no draft"))?;
    ensure_eq!((draft.answer.as_str(), draft.generation), (trace.answer.as_str(), 1));
    let entries = fixtures::deliveries(&db, &task.job).await?;
    ensure_eq!(entries.iter().map(|row| row.status).collect::<Vec<_>>(), vec![OutboxStatus::Completed]);
    Ok(())
}

async fn claiming_finds_pairs_and_due_rows_and_leases_them(db: TestDb) -> anyhow::Result<()> {
    let first = fixtures::task(&db).await?;
    let second = fixtures::job(&db, &first.member, entity::AccessChannel::Interactive).await?;
    let other = fixtures::task(&db).await?;
    let pairs = store::claims::pairs(&db.db).await?;
    for task in [&first.job, &other.job] {
        anyhow::ensure!(pairs.contains(&pair(task)), "{pairs:?} lacks {task:?}");
    }
    let mut sorted = pairs.clone();
    sorted.sort();
    ensure_eq!(pairs, sorted, "pairs come in (tenant, space) order");
    let now = entity::now_millis();
    let txn = store::begin_write(&db.db).await?;
    let due = store::claims::due(&txn, &pair(&first.job), now, 10, &[]).await?;
    ensure_eq!(due.iter().map(|row| row.id).collect::<Vec<_>>(), vec![first.job.id, second.id], "oldest first");
    let rest = store::claims::due(&txn, &pair(&first.job), now, 10, &[first.job.id]).await?;
    ensure_eq!(rest.iter().map(|row| row.id).collect::<Vec<_>>(), vec![second.id]);
    let token = Uuid::new_v4();
    let started = EventWrite {
        id: Uuid::now_v7(),
        event_type: ProgressEventType::Started,
        key: "started".into(),
        payload: json!({ "worker_id": "store" }),
    };
    let write = LeaseWrite {
        job_id: first.job.id,
        token,
        worker_id: "store".into(),
        stage: Stage::Planning,
        lease_expires_at: now + 60_000,
        now,
        started: Some(started),
    };
    let leased = store::claims::lease(&txn, &[write]).await?;
    txn.commit().await?;
    ensure_eq!(leased.len(), 1);
    let leased = &leased[0];
    ensure_eq!(
        (leased.job.lease_token, leased.job.stage, leased.job.execution_attempts),
        (Some(token), Stage::Planning, 1)
    );
    ensure_eq!(leased.started.map(|started| (started.sequence, started.new)), Some((1, true)));
    ensure_eq!((leased.grant, leased.any_endpoint), (None, false));
    let entries = fixtures::deliveries(&db, &first.job).await?;
    ensure_eq!(entries.iter().map(|row| row.status).collect::<Vec<_>>(), vec![OutboxStatus::Leased]);
    let running = store::claims::running(&db.db, now).await?;
    let mine = running.iter().find(|row| row.tenant_id == first.job.tenant_id).map(|row| row.running);
    ensure_eq!(mine, Some(1));
    ensure_eq!(store::claims::live_leases(&db.db, &first.job.tenant_id, None, now).await?, 1);
    ensure_eq!(store::claims::live_leases(&db.db, &first.job.tenant_id, Some(Uuid::now_v7()), now).await?, 0);
    Ok(())
}

async fn outbox_entries_move_through_their_statuses_without_touching_the_task(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let now = entity::now_millis();
    ensure_eq!(store::outbox::last_revision(&db.db, task.job.id).await?, 1);
    let locked = store::outbox::lock_due(&db.db, "publisher", 30_000, 10, now).await?;
    let mine: Vec<_> = locked.iter().filter(|row| row.research_task_job_id == task.job.id).collect();
    ensure_eq!(mine.len(), 1);
    ensure_eq!(mine[0].status, OutboxStatus::Dispatching);
    let txn = store::begin_write(&db.db).await?;
    anyhow::ensure!(store::outbox::record_published(&txn, mine[0], "queue:1", now).await?);
    txn.commit().await?;
    let row = store::tasks::find(&db.db, task.job.id).await?.ok_or_else(|| anyhow::anyhow!("no row"))?;
    ensure_eq!(row.queue_job_id.as_deref(), Some("queue:1"));
    ensure_eq!(
        (row.row_version, row.updated_at),
        (task.job.row_version, task.job.updated_at),
        "a publish bumped the task"
    );
    ensure_eq!(store::outbox::mark_leased(&db.db, task.job.id, now).await?, 1);
    ensure_eq!(store::outbox::close(&db.db, task.job.id, OutboxStatus::Canceled, now).await?, 1);
    let entry = store::outbox::entry(&row, 2, now);
    store::outbox::insert(&db.db, entry).await?;
    ensure_eq!(store::outbox::last_revision(&db.db, task.job.id).await?, 2);
    let statuses: Vec<_> = fixtures::deliveries(&db, &task.job).await?.iter().map(|row| row.status).collect();
    ensure_eq!(statuses, vec![OutboxStatus::Canceled, OutboxStatus::Pending]);
    Ok(())
}
