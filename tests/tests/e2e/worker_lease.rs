//! The lease: claims race safely, a stale worker is fenced out of every write, failed
//! attempts back off and the last one fails for good, paused tasks wake up by themselves.
use entity::{OutboxStatus, ProgressEventType, Stage, now_millis, research_task_outbox as outbox};
use kfs_tests::{DbTest, TestDb, db_tests, fixtures};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use serde_json::json;
use worker::Notifier;
use worker::lifecycle::{self, Checkpoint, Completion, FailOutcome, Failure, LifecycleError, RetryPolicy, TaskRef};

use crate::worker_support::{events, partials, reload};

/// This module's tests.
pub fn tests() -> Vec<DbTest> {
    db_tests![
        two_workers_racing_for_one_job_exactly_one_wins,
        first_claim_moves_the_task_to_planning_and_leases_its_delivery,
        stale_worker_cannot_commit_after_lease_expires,
        failed_attempts_back_off_and_the_last_one_fails_for_good,
        a_task_whose_leases_keep_lapsing_fails_after_its_attempts,
        a_paused_task_resumes_by_itself_once_resume_after_passes,
        one_batched_heartbeat_renews_every_lease_and_loses_only_the_stolen_one,
        a_batch_of_claims_commits_in_chunks_and_every_other_process_hears_each_one,
        a_batched_heartbeat_skips_a_row_locked_elsewhere_without_calling_it_lost,
        every_stage_boundary_is_heard_in_another_process_as_in_this_one,
        one_claim_step_leases_new_lapsed_and_woken_jobs_and_fails_the_exhausted_one,
        two_workers_claiming_many_jobs_at_once_lease_each_exactly_once,
    ]
}

const LEASE_MS: i64 = 30_000;

async fn two_workers_racing_for_one_job_exactly_one_wins(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let notifier = Notifier::new();
    let now = now_millis();
    let (a, b) = tokio::join!(
        lifecycle::claim_due(&db.db, &notifier, "worker-a", LEASE_MS, 1, now),
        lifecycle::claim_due(&db.db, &notifier, "worker-b", LEASE_MS, 1, now),
    );
    let (a, b) = (a?, b?);
    anyhow::ensure!(a.len() + b.len() == 1, "claims: a={} b={}", a.len(), b.len());
    let winner = a.iter().chain(&b).next().ok_or_else(|| anyhow::anyhow!("nobody won"))?;
    let row = reload(&db, task.job.id).await?;
    kfs_tests::ensure_eq!(row.worker_id.as_deref(), Some(winner.lease.worker_id.as_str()));
    kfs_tests::ensure_eq!(row.lease_token, Some(winner.lease.token));
    anyhow::ensure!(row.execution_attempts == 1, "attempts {}", row.execution_attempts);
    let started = events(&db, task.job.id).await?;
    anyhow::ensure!(started.len() == 1 && started[0].event_type == ProgressEventType::Started, "{started:?}");
    Ok(())
}

async fn first_claim_moves_the_task_to_planning_and_leases_its_delivery(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let notifier = Notifier::new();
    let now = now_millis();
    let claimed = lifecycle::claim_due(&db.db, &notifier, "worker-a", LEASE_MS, 8, now).await?;
    kfs_tests::ensure_eq!(claimed.len(), 1);
    let row = &claimed[0].job;
    anyhow::ensure!(row.stage == Stage::Planning, "stage {:?}", row.stage);
    kfs_tests::ensure_eq!(row.row_version, task.job.row_version + 1);
    anyhow::ensure!(
        row.lease_expires_at == Some(now + LEASE_MS) && row.heartbeat_at == Some(now),
        "now {now}: {row:?}"
    );
    let started = events(&db, row.id).await?;
    anyhow::ensure!(
        started.len() == 1 && started[0].idempotency_key == "started" && started[0].stage == Stage::Planning
    );
    let delivery = outbox::Entity::find().filter(outbox::Column::ResearchTaskJobId.eq(row.id)).one(&db.db).await?;
    kfs_tests::ensure_eq!(delivery.map(|d| d.status), Some(OutboxStatus::Leased));
    // Nothing else is due: the lease is live.
    anyhow::ensure!(lifecycle::claim_due(&db.db, &notifier, "worker-b", LEASE_MS, 8, now).await?.is_empty());
    Ok(())
}

async fn stale_worker_cannot_commit_after_lease_expires(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let notifier = Notifier::new();
    let now = now_millis();
    let stale = lifecycle::claim_due(&db.db, &notifier, "worker-a", LEASE_MS, 1, now).await?;
    let stale = stale.first().ok_or_else(|| anyhow::anyhow!("first claim failed"))?;
    // What the stale worker believes the row is: its claim's copy.
    let (stale, believed) = (stale.lease.clone(), stale.job.clone());
    let later = now + LEASE_MS + 1;
    let fresh = lifecycle::claim_due(&db.db, &notifier, "worker-b", LEASE_MS, 1, later).await?;
    anyhow::ensure!(fresh.len() == 1, "the expired lease was not re-claimed");
    let before = reload(&db, task.job.id).await?;
    let events_before = events(&db, task.job.id).await?.len();

    let lost = |result: Result<(), LifecycleError>, what: &str| match result {
        Err(LifecycleError::LeaseLost) => Ok(()),
        other => Err(anyhow::anyhow!("{what} by the stale worker answered {other:?}")),
    };
    lost(lifecycle::heartbeat(&db.db, &stale, LEASE_MS, entity::now_millis()).await, "heartbeat")?;
    let step = Checkpoint {
        next_stage: Stage::Retrieving,
        partial_results: vec![("retrieval:1".into(), json!({ "stale": true }))],
        cost_delta: worker::research::cost::CostDelta::reported(json!({ "usd": 1.0 })),
        payload: json!({}),
        round: 1,
    };
    lost(
        lifecycle::checkpoint(&db.db, &notifier, &stale, &believed, LEASE_MS, step, entity::now_millis())
            .await
            .map(|_| ()),
        "checkpoint",
    )?;
    let done = Completion {
        answer: "stale".into(),
        evidence: json!([]),
        citation_checks: json!([]),
        citations: json!([]),
        cost_delta: worker::research::cost::CostDelta::none(),
        payload: json!(null),
    };
    let completed = lifecycle::complete(&db.db, &notifier, &stale, &believed, done, entity::now_millis()).await;
    lost(completed.map(|_| ()), "complete")?;
    let failure =
        Failure { message: "stale".into(), retryable: false, cost_delta: worker::research::cost::CostDelta::none() };
    let policy = RetryPolicy { base_ms: 10, cap_ms: 10 };
    lost(
        lifecycle::fail_attempt(&db.db, &notifier, &stale, failure, policy, entity::now_millis()).await.map(|_| ()),
        "fail",
    )?;
    lost(lifecycle::release(&db.db, &notifier, &stale, entity::now_millis()).await, "release")?;

    let after = reload(&db, task.job.id).await?;
    anyhow::ensure!(after == before, "the stale worker changed the row:\n{before:?}\n{after:?}");
    anyhow::ensure!(events(&db, task.job.id).await?.len() == events_before, "the stale worker wrote an event");
    anyhow::ensure!(partials(&db, task.job.id).await?.is_empty(), "the stale worker wrote a partial result");
    Ok(())
}

async fn failed_attempts_back_off_and_the_last_one_fails_for_good(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    kfs_tests::ensure_eq!(task.job.max_execution_attempts, 3);
    let notifier = Notifier::new();
    let policy = RetryPolicy { base_ms: 1_000, cap_ms: 1_500 };
    let mut now = now_millis();
    for attempt in 1..=3 {
        let claimed = lifecycle::claim_due(&db.db, &notifier, "worker-a", LEASE_MS, 1, now).await?;
        let claimed = claimed.first().ok_or_else(|| anyhow::anyhow!("attempt {attempt} was not claimed"))?;
        kfs_tests::ensure_eq!(claimed.job.execution_attempts, attempt);
        let failure = Failure {
            message: format!("flaky {attempt}"),
            retryable: true,
            cost_delta: worker::research::cost::CostDelta::none(),
        };
        let before = now_millis();
        match lifecycle::fail_attempt(&db.db, &notifier, &claimed.lease, failure, policy, entity::now_millis()).await? {
            FailOutcome::Retrying { retry_at } if attempt < 3 => {
                let ceiling = (1_000_i64 << (attempt - 1)).min(1_500);
                let delay = retry_at - before;
                anyhow::ensure!(
                    delay >= ceiling / 2 - 5 && delay <= ceiling + 1_000,
                    "attempt {attempt} backs off {delay} ms"
                );
                let row = reload(&db, task.job.id).await?;
                anyhow::ensure!(
                    row.lease_token.is_none() && row.stage == Stage::Planning && row.retry_at == Some(retry_at)
                );
                anyhow::ensure!(row.error.as_deref() == Some(format!("flaky {attempt}").as_str()));
                // Not due before retry_at, due at it.
                anyhow::ensure!(
                    lifecycle::claim_due(&db.db, &notifier, "worker-b", LEASE_MS, 1, retry_at - 1).await?.is_empty()
                );
                now = retry_at;
            }
            FailOutcome::Failed if attempt == 3 => {}
            other => anyhow::bail!("attempt {attempt} ended {other:?}"),
        }
    }
    let row = reload(&db, task.job.id).await?;
    anyhow::ensure!(row.stage == Stage::Failed && row.error.as_deref() == Some("flaky 3"), "{row:?}");
    anyhow::ensure!(row.lease_token.is_none() && row.completed_at.is_some(), "{row:?}");
    let last = events(&db, task.job.id).await?.pop().ok_or_else(|| anyhow::anyhow!("no events"))?;
    anyhow::ensure!(last.event_type == ProgressEventType::Failed && last.stage == Stage::Failed, "{last:?}");
    Ok(())
}

async fn a_task_whose_leases_keep_lapsing_fails_after_its_attempts(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let notifier = Notifier::new();
    let mut now = now_millis();
    // Three workers crash in turn (their leases lapse); the fourth claim finds no attempt left.
    for attempt in 1..=3 {
        let claimed = lifecycle::claim_due(&db.db, &notifier, &format!("worker-{attempt}"), LEASE_MS, 1, now).await?;
        anyhow::ensure!(claimed.len() == 1, "attempt {attempt} was not claimed");
        now += LEASE_MS + 1;
    }
    let last = lifecycle::claim_due(&db.db, &notifier, "worker-4", LEASE_MS, 1, now).await?;
    anyhow::ensure!(last.is_empty(), "a task past its attempts was leased again");
    let row = reload(&db, task.job.id).await?;
    anyhow::ensure!(row.stage == Stage::Failed, "stage {:?}", row.stage);
    anyhow::ensure!(row.error.as_deref().is_some_and(|e| e.contains("3 execution attempts")), "{:?}", row.error);
    let types: Vec<_> = events(&db, task.job.id).await?.into_iter().map(|e| e.event_type).collect();
    anyhow::ensure!(types == [ProgressEventType::Started, ProgressEventType::Failed], "{types:?}");
    Ok(())
}

async fn a_paused_task_resumes_by_itself_once_resume_after_passes(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let notifier = Notifier::new();
    let now = now_millis();
    let first = lifecycle::claim_due(&db.db, &notifier, "worker-a", LEASE_MS, 1, now).await?;
    kfs_tests::ensure_eq!(first.len(), 1);
    let owner = TaskRef {
        id: task.job.id,
        tenant_id: task.job.tenant_id.clone(),
        subject_id: task.job.subject_id.clone(),
        expected_row_version: None,
    };
    let resume_after = now + 60_000;
    lifecycle::pause(&db.db, &notifier, &owner, Some(resume_after), entity::now_millis()).await?;
    anyhow::ensure!(
        lifecycle::claim_due(&db.db, &notifier, "worker-b", LEASE_MS, 1, resume_after - 1).await?.is_empty()
    );
    let woke = lifecycle::claim_due(&db.db, &notifier, "worker-b", LEASE_MS, 1, resume_after).await?;
    let woke = woke.first().ok_or_else(|| anyhow::anyhow!("the paused task did not wake"))?;
    anyhow::ensure!(
        woke.job.stage == Stage::Planning && woke.job.paused_from_stage.is_none() && woke.job.resume_after.is_none()
    );
    let types: Vec<_> = events(&db, task.job.id).await?.into_iter().map(|e| e.event_type).collect();
    let expected = [ProgressEventType::Started, ProgressEventType::Paused, ProgressEventType::Resumed];
    anyhow::ensure!(types == expected, "{types:?}");
    let deliveries =
        outbox::Entity::find().filter(outbox::Column::ResearchTaskJobId.eq(task.job.id)).all(&db.db).await?;
    let statuses: Vec<_> = deliveries.iter().map(|d| (d.delivery_revision, d.status)).collect();
    anyhow::ensure!(statuses.contains(&(2, OutboxStatus::Leased)), "{statuses:?}");
    Ok(())
}

async fn one_batched_heartbeat_renews_every_lease_and_loses_only_the_stolen_one(db: TestDb) -> anyhow::Result<()> {
    use entity::research_task_job as job;
    use sea_orm::sea_query::Expr;
    use std::time::Duration;

    let notifier = Notifier::new();
    let owner = fixtures::task(&db).await?.member;
    for _ in 0..5 {
        fixtures::job(&db, &owner, entity::AccessChannel::Interactive).await?;
    }
    let claimed = lifecycle::claim_due(&db.db, &notifier, "keeper", LEASE_MS, 10, now_millis()).await?;
    anyhow::ensure!(claimed.len() == 6, "claimed {}", claimed.len());
    let settings =
        worker::WorkerSettings { heartbeat_ms: 100, lease_ms: LEASE_MS, ..worker::WorkerSettings::default() };
    let keeper = worker::pipeline::LeaseKeeper::start(
        db.db.clone(),
        &notifier,
        std::sync::Arc::new(settings),
        entity::Clock::system(),
    );
    let holdings: Vec<_> = claimed.iter().map(|claimed| keeper.hold(&claimed.lease)).collect();
    anyhow::ensure!(keeper.len() == 6);
    // Another worker takes one lease without any signal reaching this one (its lease
    // lapsed and was claimed elsewhere): only the next batched beat can notice.
    let stolen = &claimed[2];
    job::Entity::update_many()
        .col_expr(job::Column::LeaseToken, Expr::value(uuid::Uuid::new_v4()))
        .filter(job::Column::Id.eq(stolen.job.id))
        .exec(&db.db)
        .await?;
    let before = now_millis();
    tokio::time::timeout(Duration::from_secs(5), holdings[2].lost.cancelled())
        .await
        .map_err(|_| anyhow::anyhow!("the stolen lease was never found lost"))?;
    for (index, holding) in holdings.iter().enumerate().filter(|(index, _)| *index != 2) {
        anyhow::ensure!(!holding.lost.is_cancelled(), "lease {index} was lost with the stolen one");
    }
    // Wait for one more beat, then every other lease has been renewed past where it was.
    tokio::time::sleep(Duration::from_millis(250)).await;
    for (index, claimed) in claimed.iter().enumerate().filter(|(index, _)| *index != 2) {
        let row = reload(&db, claimed.job.id).await?;
        anyhow::ensure!(
            row.heartbeat_at.is_some_and(|at| at >= before),
            "lease {index} was not renewed by the batched beat: {:?}",
            row.heartbeat_at
        );
        anyhow::ensure!(row.lease_token == Some(claimed.lease.token), "lease {index} changed hands");
    }
    // A cancel is a signal: the keeper looks at once rather than at the next beat.
    let cancelled = &claimed[4];
    let task = TaskRef {
        id: cancelled.job.id,
        tenant_id: cancelled.job.tenant_id.clone(),
        subject_id: cancelled.job.subject_id.clone(),
        expected_row_version: None,
    };
    lifecycle::cancel(&db.db, &notifier, &task, now_millis()).await?;
    tokio::time::timeout(Duration::from_secs(2), holdings[4].lost.cancelled())
        .await
        .map_err(|_| anyhow::anyhow!("the canceled task's lease was not found lost"))?;
    drop(holdings);
    anyhow::ensure!(keeper.is_empty(), "dropped holdings leave nothing to renew");
    Ok(())
}

/// 70 due tasks claimed in one step commit in chunks (one transaction and one NOTIFY per
/// chunk): each is leased once with its own token, its `started` event and its delivery
/// leased, and another process's listener hears a signal for every one of them.
async fn a_batch_of_claims_commits_in_chunks_and_every_other_process_hears_each_one(db: TestDb) -> anyhow::Result<()> {
    use std::collections::HashSet;
    use std::time::Duration;

    const TASKS: usize = 70;
    let owner = fixtures::task(&db).await?.member;
    for _ in 1..TASKS {
        fixtures::job(&db, &owner, entity::AccessChannel::Interactive).await?;
    }
    // Another process: its own pool and notifier, fed only by LISTEN (PostgreSQL).
    let elsewhere = Notifier::new();
    let mut heard = elsewhere.subscribe();
    let other_pool = worker::db::connect(&db.url).await?;
    let (shutdown, tracker) = (worker::runtime::CancellationToken::new(), worker::runtime::TaskTracker::new());
    worker::store::signals::spawn_listener(&other_pool, elsewhere.clone(), || {}, shutdown.clone(), &tracker);
    // Let the listener subscribe before anything commits.
    tokio::time::sleep(Duration::from_millis(300)).await;

    let claimed = lifecycle::claim_due(&db.db, &Notifier::new(), "batch", LEASE_MS, 100, now_millis()).await?;
    kfs_tests::ensure_eq!(claimed.len(), TASKS);
    let tokens: HashSet<_> = claimed.iter().map(|one| one.lease.token).collect();
    kfs_tests::ensure_eq!(tokens.len(), TASKS);
    for one in &claimed {
        let row = reload(&db, one.job.id).await?;
        anyhow::ensure!(row.lease_token == Some(one.lease.token) && row.stage == Stage::Planning, "{row:?}");
        let keys: Vec<String> = events(&db, one.job.id).await?.into_iter().map(|event| event.idempotency_key).collect();
        kfs_tests::ensure_eq!(keys, vec!["started".to_owned()]);
        let delivery =
            outbox::Entity::find().filter(outbox::Column::ResearchTaskJobId.eq(one.job.id)).one(&db.db).await?;
        kfs_tests::ensure_eq!(delivery.map(|row| row.status), Some(OutboxStatus::Leased));
    }
    if db.backend == kfs_tests::Backend::Postgres {
        let wanted: HashSet<uuid::Uuid> = claimed.iter().map(|one| one.job.id).collect();
        let mut signaled = HashSet::new();
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while signaled.len() < wanted.len() {
            match tokio::time::timeout_at(deadline, heard.recv()).await {
                Ok(Ok(worker::notify::Signal::Task(signal))) if !signal.by_lease_holder => {
                    signaled.insert(signal.task_id);
                }
                Ok(Ok(_)) => {}
                Ok(Err(error)) => anyhow::bail!("the listener's signals ended: {error}"),
                Err(_) => anyhow::bail!("heard {} of {} claims from another process", signaled.len(), wanted.len()),
            }
        }
        kfs_tests::ensure_eq!(signaled, wanted);
    }
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
    other_pool.close().await?;
    Ok(())
}

/// PostgreSQL: a batched beat does not wait for a row another transaction holds (most
/// often this worker's own checkpoint, which renews it anyway): it renews the others at
/// once, and the skipped lease is not lost. (SQLite's writers take turns; nothing to skip.)
async fn a_batched_heartbeat_skips_a_row_locked_elsewhere_without_calling_it_lost(db: TestDb) -> anyhow::Result<()> {
    use sea_orm::TransactionTrait;
    use std::time::Duration;

    if db.backend != kfs_tests::Backend::Postgres {
        return Ok(());
    }
    let owner = fixtures::task(&db).await?.member;
    for _ in 0..2 {
        fixtures::job(&db, &owner, entity::AccessChannel::Interactive).await?;
    }
    let claimed = lifecycle::claim_due(&db.db, &Notifier::new(), "keeper", LEASE_MS, 10, now_millis()).await?;
    kfs_tests::ensure_eq!(claimed.len(), 3);
    let leases: Vec<lifecycle::LeasePair> = claimed.iter().map(|one| one.lease.pair()).collect();
    let holder = db.db.begin().await?;
    worker::store::tasks::lock(&holder, claimed[0].job.id).await?;
    let later = now_millis() + 5_000;
    let beat = lifecycle::heartbeats(&db.db, &leases, LEASE_MS, later);
    let lost = tokio::time::timeout(Duration::from_secs(2), beat)
        .await
        .map_err(|_| anyhow::anyhow!("the beat waited for the locked row"))??;
    anyhow::ensure!(lost.is_empty(), "a locked lease was called lost: {lost:?}");
    holder.rollback().await?;
    for (index, one) in claimed.iter().enumerate() {
        let row = reload(&db, one.job.id).await?;
        let renewed = row.heartbeat_at == Some(later);
        anyhow::ensure!(renewed == (index != 0), "lease {index}: heartbeat_at {:?}", row.heartbeat_at);
    }
    // Once the lock is gone, the next beat renews it too.
    anyhow::ensure!(lifecycle::heartbeats(&db.db, &leases, LEASE_MS, later + 1).await?.is_empty());
    kfs_tests::ensure_eq!(reload(&db, claimed[0].job.id).await?.heartbeat_at, Some(later + 1));
    Ok(())
}

/// A stage boundary's signal reaches another process (PostgreSQL's NOTIFY, sent in the
/// boundary's transaction): its listener hears each checkpoint and the completion with the
/// lease holder's mark, exactly the signal this process's notifier carries.
async fn every_stage_boundary_is_heard_in_another_process_as_in_this_one(db: TestDb) -> anyhow::Result<()> {
    use std::time::Duration;
    use worker::notify::{Signal, TaskSignal};

    let task = fixtures::task(&db).await?;
    let (here, elsewhere) = (Notifier::new(), Notifier::new());
    let (mut heard_here, mut heard_elsewhere) = (here.subscribe(), elsewhere.subscribe());
    let other_pool = worker::db::connect(&db.url).await?;
    let (shutdown, tracker) = (worker::runtime::CancellationToken::new(), worker::runtime::TaskTracker::new());
    worker::store::signals::spawn_listener(&other_pool, elsewhere.clone(), || {}, shutdown.clone(), &tracker);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let mut claimed = lifecycle::claim_due(&db.db, &here, "worker-a", LEASE_MS, 1, now_millis()).await?;
    let claimed = claimed.pop().ok_or_else(|| anyhow::anyhow!("nothing claimed"))?;
    let next = async |receiver: &mut tokio::sync::broadcast::Receiver<Signal>| -> anyhow::Result<TaskSignal> {
        loop {
            match tokio::time::timeout(Duration::from_secs(5), receiver.recv()).await {
                Ok(Ok(Signal::Task(signal))) if signal.by_lease_holder => return Ok(signal),
                Ok(Ok(_)) => {}
                Ok(Err(error)) => anyhow::bail!("signals ended: {error}"),
                Err(_) => anyhow::bail!("no signal of a stage boundary within 5 s"),
            }
        }
    };
    let mut from = claimed.job.clone();
    for (stage, partial) in [(Stage::Retrieving, true), (Stage::Analyzing, false), (Stage::Generating, true)] {
        let partial_results =
            if partial { vec![(format!("bundle:{}", stage.as_str()), json!({ "passages": [] }))] } else { Vec::new() };
        let step = Checkpoint {
            next_stage: stage,
            partial_results,
            cost_delta: worker::research::cost::CostDelta::none(),
            payload: json!({}),
            round: 1,
        };
        from = lifecycle::checkpoint(&db.db, &here, &claimed.lease, &from, LEASE_MS, step, now_millis()).await?;
        let local = next(&mut heard_here).await?;
        kfs_tests::ensure_eq!(local.task_id, task.job.id);
        if db.backend == kfs_tests::Backend::Postgres {
            kfs_tests::ensure_eq!(next(&mut heard_elsewhere).await?, local, "at {stage:?}");
        }
    }
    let done = Completion {
        answer: "Bees make honey [1].".into(),
        evidence: json!([]),
        citation_checks: json!([]),
        citations: json!([]),
        cost_delta: worker::research::cost::CostDelta::none(),
        payload: serde_json::Value::Null,
    };
    lifecycle::complete(&db.db, &here, &claimed.lease, &from, done, now_millis()).await?;
    let local = next(&mut heard_here).await?;
    kfs_tests::ensure_eq!(local.task_id, task.job.id);
    if db.backend == kfs_tests::Backend::Postgres {
        kfs_tests::ensure_eq!(next(&mut heard_elsewhere).await?, local, "at completion");
    }
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
    other_pool.close().await?;
    Ok(())
}

/// One claim step over every kind of due job: two new ones, a running one whose lease
/// lapsed with attempts left, a paused one whose `resume_after` passed, and a running one
/// whose lease lapsed after its last attempt. The first four are leased, each under its
/// own token (on PostgreSQL the plain ones by one statement), with the events and
/// deliveries a claim of each alone leaves; the last fails instead of being leased.
async fn one_claim_step_leases_new_lapsed_and_woken_jobs_and_fails_the_exhausted_one(db: TestDb) -> anyhow::Result<()> {
    use entity::{AccessChannel, research_task_job as job};
    use sea_orm::sea_query::Expr;
    let notifier = Notifier::new();
    let owner = fixtures::task(&db).await?;
    let lapsing = owner.job.clone();
    let waking = fixtures::job(&db, &owner.member, AccessChannel::Interactive).await?;
    let exhausted = fixtures::job(&db, &owner.member, AccessChannel::Interactive).await?;
    let now = now_millis();
    let running = lifecycle::claim_due(&db.db, &notifier, "worker-a", LEASE_MS, 3, now).await?;
    kfs_tests::ensure_eq!(running.len(), 3);
    let owner_of = |id| TaskRef {
        id,
        tenant_id: lapsing.tenant_id.clone(),
        subject_id: lapsing.subject_id.clone(),
        expected_row_version: None,
    };
    lifecycle::pause(&db.db, &notifier, &owner_of(waking.id), Some(now + 10), now_millis()).await?;
    job::Entity::update_many()
        .col_expr(job::Column::MaxExecutionAttempts, Expr::value(1))
        .filter(job::Column::Id.eq(exhausted.id))
        .exec(&db.db)
        .await?;
    let fresh = [
        fixtures::job(&db, &owner.member, AccessChannel::Interactive).await?,
        fixtures::job(&db, &owner.member, AccessChannel::Interactive).await?,
    ];

    // Every lease of worker-a has lapsed by then.
    let later = now + LEASE_MS + 1;
    let claimed = lifecycle::claim_due(&db.db, &notifier, "worker-b", LEASE_MS, 10, later).await?;
    let mut ids: Vec<_> = claimed.iter().map(|one| one.job.id).collect();
    ids.sort();
    let mut expected = vec![lapsing.id, waking.id, fresh[0].id, fresh[1].id];
    expected.sort();
    kfs_tests::ensure_eq!(ids, expected, "the jobs leased");
    for one in &claimed {
        let row = reload(&db, one.job.id).await?;
        kfs_tests::ensure_eq!(row, one.job, "the claim returns the row as committed");
        anyhow::ensure!(row.lease_token == Some(one.lease.token) && row.worker_id.as_deref() == Some("worker-b"));
        kfs_tests::ensure_eq!(row.stage, Stage::Planning);
        let attempts = if fresh.iter().any(|job| job.id == row.id) { 1 } else { 2 };
        kfs_tests::ensure_eq!(row.execution_attempts, attempts, "attempts of {}", row.id);
        let deliveries =
            outbox::Entity::find().filter(outbox::Column::ResearchTaskJobId.eq(row.id)).all(&db.db).await?;
        anyhow::ensure!(deliveries.iter().any(|d| d.status == OutboxStatus::Leased), "{deliveries:?}");
    }
    let types = async |id| -> anyhow::Result<Vec<ProgressEventType>> {
        let journal = events(&db, id).await?;
        crate::worker_support::assert_gapless("progress", &journal.iter().map(|e| e.sequence).collect::<Vec<_>>())?;
        Ok(journal.into_iter().map(|e| e.event_type).collect())
    };
    use ProgressEventType::{Failed, Paused, Resumed, Started};
    for job in &fresh {
        kfs_tests::ensure_eq!(types(job.id).await?, [Started]);
    }
    kfs_tests::ensure_eq!(types(lapsing.id).await?, [Started], "a rescue starts nothing");
    kfs_tests::ensure_eq!(types(waking.id).await?, [Started, Paused, Resumed]);
    kfs_tests::ensure_eq!(types(exhausted.id).await?, [Started, Failed]);
    let failed = reload(&db, exhausted.id).await?;
    anyhow::ensure!(failed.stage == Stage::Failed && failed.lease_token.is_none(), "{failed:?}");
    Ok(())
}

/// Two workers claim from one backlog at the same moment, each up to 32 jobs a step (on
/// PostgreSQL, rows locked a share at a time and leased together), until nothing is due:
/// every job is leased exactly once, each under the token of the one claim that returned
/// it, and each has exactly one `started` event.
async fn two_workers_claiming_many_jobs_at_once_lease_each_exactly_once(db: TestDb) -> anyhow::Result<()> {
    use entity::AccessChannel;
    const JOBS: usize = 70;
    let owner = fixtures::task(&db).await?;
    let mut ids = vec![owner.job.id];
    for _ in 1..JOBS {
        ids.push(fixtures::job(&db, &owner.member, AccessChannel::Interactive).await?.id);
    }
    let notifier = Notifier::new();
    let mut claimed = Vec::new();
    loop {
        let now = now_millis();
        let (a, b) = tokio::join!(
            lifecycle::claim_due(&db.db, &notifier, "worker-a", LEASE_MS, 32, now),
            lifecycle::claim_due(&db.db, &notifier, "worker-b", LEASE_MS, 32, now),
        );
        let (a, b) = (a?, b?);
        if a.is_empty() && b.is_empty() {
            break;
        }
        claimed.extend(a.into_iter().chain(b));
    }
    let mut leased: Vec<_> = claimed.iter().map(|one| one.job.id).collect();
    leased.sort();
    ids.sort();
    kfs_tests::ensure_eq!(leased, ids, "each job leased once");
    for one in &claimed {
        let row = reload(&db, one.job.id).await?;
        anyhow::ensure!(
            row.lease_token == Some(one.lease.token) && row.worker_id.as_deref() == Some(one.lease.worker_id.as_str()),
            "{} carries {:?} of {:?}, the claim returned {:?}",
            row.id,
            row.lease_token,
            row.worker_id,
            one.lease
        );
        let started = events(&db, one.job.id).await?.into_iter().filter(|e| e.event_type == ProgressEventType::Started);
        kfs_tests::ensure_eq!(started.count(), 1, "started events of {}", one.job.id);
    }
    Ok(())
}
