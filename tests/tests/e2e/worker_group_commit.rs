//! Group commit: several tasks' stage boundaries in one transaction, each still fenced
//! by its own lease token and checked against its own grant, so a boundary whose lease
//! or grant is gone loses that boundary alone; one that fails after writing rolls the
//! group back and every boundary is committed alone instead.
use std::time::Duration;

use entity::{AccessChannel, MemberRole, Stage, member, now_millis};
use kfs_tests::{Backend, DbTest, TestDb, db_tests, ensure_eq, fixtures};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, sea_query::Expr};
use serde_json::json;
use uuid::Uuid;
use worker::Notifier;
use worker::lifecycle::{
    self, Boundary, BoundaryStep, Checkpoint, Claimed, Committed, Completion, LifecycleError, commit_boundaries,
};
use worker::notify::Signal;

use crate::worker_support::{events, partials, reload};

/// This module's tests.
pub fn tests() -> Vec<DbTest> {
    db_tests![
        a_group_commits_every_boundary_but_the_ones_whose_lease_or_grant_is_gone,
        a_boundary_failing_after_its_writes_rolls_the_group_back_and_the_rest_commit_alone,
        a_group_that_cannot_reach_the_database_fails_every_boundary_and_writes_nothing,
        a_group_writes_no_key_twice_and_numbers_what_it_writes_without_a_gap,
        two_groups_sharing_rows_at_once_each_commit_only_the_leases_they_hold,
    ]
}

const LEASE_MS: i64 = 30_000;

fn to_retrieving(claimed: &Claimed) -> Boundary {
    let step = Checkpoint {
        next_stage: Stage::Retrieving,
        partial_results: vec![("retrieval:1".into(), json!({ "task": claimed.job.id }))],
        cost_delta: worker::research::cost::CostDelta::none(),
        payload: json!({}),
        round: 1,
    };
    Boundary {
        lease: claimed.lease.clone(),
        from: claimed.job.clone(),
        step: BoundaryStep::Checkpoint(step, LEASE_MS),
        now: now_millis(),
        span: tracing::Span::none(),
    }
}

/// Five tasks of the owner and one of a reader whose membership then changes revision
/// (so that task's grant no longer holds); one of the owner's leases is taken by another
/// worker. One group with all six boundaries (one of them an answer) commits the four
/// that still hold, each with its event and partial result and a signal heard here and,
/// on PostgreSQL, in another process; the stolen one is `LeaseLost`, the reader's
/// `GrantDenied`, and neither row nor journal of those two changes.
async fn a_group_commits_every_boundary_but_the_ones_whose_lease_or_grant_is_gone(db: TestDb) -> anyhow::Result<()> {
    let owner = fixtures::task(&db).await?;
    for _ in 0..4 {
        fixtures::job(&db, &owner.member, AccessChannel::Interactive).await?;
    }
    let reader = fixtures::member(&db, &owner.space, "viewer", MemberRole::Viewer).await?;
    let readers_task = fixtures::job(&db, &reader, AccessChannel::Interactive).await?;
    let here = Notifier::new();
    let elsewhere = Notifier::new();
    let (mut heard_here, mut heard_elsewhere) = (here.subscribe(), elsewhere.subscribe());
    let other_pool = worker::db::connect(&db.url).await?;
    let (shutdown, tracker) = (worker::runtime::CancellationToken::new(), worker::runtime::TaskTracker::new());
    if db.backend == Backend::Postgres {
        worker::store::signals::spawn_listener(&other_pool, elsewhere.clone(), || {}, shutdown.clone(), &tracker);
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    let claimed = lifecycle::claim_due(&db.db, &here, "worker-a", LEASE_MS, 10, now_millis()).await?;
    ensure_eq!(claimed.len(), 6);

    let mut owners: Vec<&Claimed> = claimed.iter().filter(|claimed| claimed.job.id != readers_task.id).collect();
    let readers = claimed.iter().find(|claimed| claimed.job.id == readers_task.id).expect("the reader's task");
    let stolen = owners.remove(1);
    entity::research_task_job::Entity::update_many()
        .col_expr(entity::research_task_job::Column::LeaseToken, Expr::value(Uuid::new_v4()))
        .filter(entity::research_task_job::Column::Id.eq(stolen.job.id))
        .exec(&db.db)
        .await?;
    member::Entity::update_many()
        .col_expr(member::Column::Revision, Expr::value(2))
        .filter(member::Column::Id.eq(reader.id))
        .exec(&db.db)
        .await?;
    let untouched = [reload(&db, stolen.job.id).await?, reload(&db, readers.job.id).await?];
    let untouched_events = [events(&db, stolen.job.id).await?.len(), events(&db, readers.job.id).await?.len()];

    // The last of the owner's tasks gets its answer in the group (a task jumps stages
    // only in a test: `from` says generating, and the fence checks the row's stage).
    let answering = owners.pop().expect("four owner tasks");
    let mut answering_from = answering.job.clone();
    entity::research_task_job::Entity::update_many()
        .col_expr(entity::research_task_job::Column::Stage, Expr::value(Stage::Generating))
        .filter(entity::research_task_job::Column::Id.eq(answering.job.id))
        .exec(&db.db)
        .await?;
    answering_from.stage = Stage::Generating;
    let answer = Boundary {
        lease: answering.lease.clone(),
        from: answering_from,
        step: BoundaryStep::Complete(Completion {
            answer: "Bees make honey [1].".into(),
            evidence: json!([]),
            citation_checks: json!([{ "sentence": "Bees make honey [1].", "citation": 1, "verdict": "supported" }]),
            citations: json!([]),
            cost_delta: worker::research::cost::CostDelta::none(),
            payload: json!(null),
        }),
        now: now_millis(),
        span: tracing::Span::none(),
    };
    let mut group: Vec<Boundary> = owners.iter().map(|claimed| to_retrieving(claimed)).collect();
    group.insert(1, to_retrieving(stolen));
    group.push(to_retrieving(readers));
    group.push(answer);
    let ids: Vec<Uuid> = group.iter().map(|boundary| boundary.lease.job_id).collect();

    let results = commit_boundaries(&db.db, &here, group).await;
    ensure_eq!(results.len(), ids.len());
    let mut committed = Vec::new();
    for (id, result) in ids.iter().zip(&results) {
        match result {
            Ok(Committed::Checkpoint(job)) => {
                ensure_eq!((job.id, job.stage), (*id, Stage::Retrieving));
                ensure_eq!(reload(&db, *id).await?.stage, Stage::Retrieving);
                ensure_eq!(partials(&db, *id).await?.len(), 1, "the checkpoint's partial result");
                committed.push(*id);
            }
            Ok(Committed::Complete(trace)) => {
                ensure_eq!((*id, trace.research_task_id), (answering.job.id, Some(answering.job.id)));
                ensure_eq!(reload(&db, *id).await?.stage, Stage::Completed);
                committed.push(*id);
            }
            Err(LifecycleError::LeaseLost) => ensure_eq!(*id, stolen.job.id, "only the stolen lease is lost"),
            Err(LifecycleError::GrantDenied(_)) => ensure_eq!(*id, readers.job.id, "only the reader's grant died"),
            Err(other) => anyhow::bail!("task {id}: {other:?}"),
        }
    }
    ensure_eq!(committed.len(), 4);
    ensure_eq!([reload(&db, stolen.job.id).await?, reload(&db, readers.job.id).await?], untouched);
    ensure_eq!([events(&db, stolen.job.id).await?.len(), events(&db, readers.job.id).await?.len()], untouched_events);
    anyhow::ensure!(partials(&db, stolen.job.id).await?.is_empty() && partials(&db, readers.job.id).await?.is_empty());

    // Each committed boundary is announced, here and elsewhere, as its lease holder's own.
    let mut listeners = vec![&mut heard_here];
    if db.backend == Backend::Postgres {
        listeners.push(&mut heard_elsewhere);
    }
    for receiver in listeners {
        let mut heard = std::collections::BTreeSet::new();
        while heard.len() < committed.len() {
            match tokio::time::timeout(Duration::from_secs(5), receiver.recv()).await {
                Ok(Ok(Signal::Task(signal))) if signal.by_lease_holder => {
                    heard.insert(signal.task_id);
                }
                Ok(Ok(_)) => {}
                Ok(Err(error)) => anyhow::bail!("signals ended: {error}"),
                Err(_) => anyhow::bail!("heard {} of {} boundaries within 5 s", heard.len(), committed.len()),
            }
        }
        ensure_eq!(heard, committed.iter().copied().collect(), "the signalled tasks");
    }
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
    other_pool.close().await?;
    Ok(())
}

/// A boundary that asks for a move its stage does not allow is refused after its fenced
/// update wrote: the group rolls back and each boundary is committed alone, so the others
/// land exactly once (one event and one partial result each) and the refused one leaves
/// its row as it was.
async fn a_boundary_failing_after_its_writes_rolls_the_group_back_and_the_rest_commit_alone(
    db: TestDb,
) -> anyhow::Result<()> {
    let owner = fixtures::task(&db).await?;
    for _ in 0..3 {
        fixtures::job(&db, &owner.member, AccessChannel::Interactive).await?;
    }
    let notifier = Notifier::new();
    let claimed = lifecycle::claim_due(&db.db, &notifier, "worker-a", LEASE_MS, 10, now_millis()).await?;
    ensure_eq!(claimed.len(), 4);
    let mut group: Vec<Boundary> = claimed.iter().map(to_retrieving).collect();
    // Planning may not jump to generating.
    let refused = claimed[2].job.id;
    if let BoundaryStep::Checkpoint(step, _) = &mut group[2].step {
        step.next_stage = Stage::Generating;
    }
    let before = reload(&db, refused).await?;
    let events_before: Vec<_> = {
        let mut counts = Vec::new();
        for claimed in &claimed {
            counts.push(events(&db, claimed.job.id).await?.len());
        }
        counts
    };

    let results = commit_boundaries(&db.db, &notifier, group).await;
    for ((claimed, result), events_before) in claimed.iter().zip(&results).zip(events_before) {
        let id = claimed.job.id;
        if id == refused {
            anyhow::ensure!(
                matches!(result, Err(LifecycleError::NotAllowed { .. })),
                "the refused move answered {result:?}"
            );
            ensure_eq!(reload(&db, id).await?, before);
            ensure_eq!(events(&db, id).await?.len(), events_before);
            anyhow::ensure!(partials(&db, id).await?.is_empty());
        } else {
            anyhow::ensure!(matches!(result, Ok(Committed::Checkpoint(_))), "task {id}: {result:?}");
            ensure_eq!(reload(&db, id).await?.stage, Stage::Retrieving);
            ensure_eq!(events(&db, id).await?.len(), events_before + 1, "one stage event for {id}");
            ensure_eq!(partials(&db, id).await?.len(), 1, "one partial result for {id}");
        }
    }
    Ok(())
}

/// A group whose pool cannot hand out a connection fails each of its boundaries with a
/// database error (their leases then lapse and the stages run again), and writes nothing.
async fn a_group_that_cannot_reach_the_database_fails_every_boundary_and_writes_nothing(
    db: TestDb,
) -> anyhow::Result<()> {
    let owner = fixtures::task(&db).await?;
    fixtures::job(&db, &owner.member, AccessChannel::Interactive).await?;
    let notifier = Notifier::new();
    let claimed = lifecycle::claim_due(&db.db, &notifier, "worker-a", LEASE_MS, 10, now_millis()).await?;
    ensure_eq!(claimed.len(), 2);
    let before = [reload(&db, claimed[0].job.id).await?, reload(&db, claimed[1].job.id).await?];
    let closed = worker::db::connect(&db.url).await?;
    closed.clone().close().await?;

    let results = commit_boundaries(&closed, &notifier, claimed.iter().map(to_retrieving).collect()).await;
    ensure_eq!(results.len(), 2);
    for result in &results {
        anyhow::ensure!(matches!(result, Err(LifecycleError::Database(_))), "answered {result:?}");
    }
    ensure_eq!([reload(&db, claimed[0].job.id).await?, reload(&db, claimed[1].job.id).await?], before);
    Ok(())
}

/// Keys written before (a replayed boundary) are not written again: a partial result
/// whose key exists keeps its row and sequence while the new ones follow it with no gap,
/// and a `stage_changed` event whose key exists is not appended twice; both boundaries
/// still land and are signalled.
async fn a_group_writes_no_key_twice_and_numbers_what_it_writes_without_a_gap(db: TestDb) -> anyhow::Result<()> {
    let owner = fixtures::task(&db).await?;
    fixtures::job(&db, &owner.member, AccessChannel::Interactive).await?;
    let notifier = Notifier::new();
    let mut heard = notifier.subscribe();
    let claimed = lifecycle::claim_due(&db.db, &notifier, "worker-a", LEASE_MS, 10, now_millis()).await?;
    ensure_eq!(claimed.len(), 2);
    let (bundled, announced) = (&claimed[0], &claimed[1]);
    let written_bundle = json!({ "written": "before" });
    fixtures::append_partial(&db, &bundled.job, "retrieval:1", written_bundle.clone()).await?;
    fixtures::append_event(
        &db,
        &announced.job,
        entity::ProgressEventType::StageChanged,
        Stage::Retrieving,
        "stage:retrieving",
    )
    .await?;
    while heard.try_recv().is_ok() {}

    let mut replay = to_retrieving(bundled);
    if let BoundaryStep::Checkpoint(step, _) = &mut replay.step {
        step.partial_results = vec![
            ("retrieval:1".into(), json!({ "written": "again" })),
            ("retrieval:2".into(), json!({ "written": "now" })),
        ];
    }
    let results = commit_boundaries(&db.db, &notifier, vec![replay, to_retrieving(announced)]).await;
    for result in &results {
        anyhow::ensure!(matches!(result, Ok(Committed::Checkpoint(_))), "{result:?}");
    }

    let kept = partials(&db, bundled.job.id).await?;
    let rows: Vec<_> = kept.iter().map(|row| (row.sequence, row.idempotency_key.as_str())).collect();
    ensure_eq!(rows, [(1, "retrieval:1"), (2, "retrieval:2")]);
    ensure_eq!(kept[0].evidence_bundle, written_bundle, "the written bundle is kept");
    let journal = events(&db, announced.job.id).await?;
    let keys: Vec<_> = journal.iter().map(|event| (event.sequence, event.idempotency_key.as_str())).collect();
    ensure_eq!(keys, [(1, "started"), (2, "stage:retrieving")]);
    ensure_eq!(reload(&db, announced.job.id).await?.stage, Stage::Retrieving);
    let mut signalled = std::collections::BTreeSet::new();
    while let Ok(Signal::Task(signal)) = heard.try_recv() {
        signalled.insert(signal.task_id);
    }
    ensure_eq!(signalled, [announced.job.id, bundled.job.id].into_iter().collect());
    Ok(())
}

/// Two workers' groups commit at the same moment over the same two rows, each holding the
/// lease of one and a lost lease of the other (a stale worker and its successor, crossed):
/// whatever the interleaving, each lands its own boundary, hears `LeaseLost` for the
/// other, and every row ends with one stage event. (On PostgreSQL each group locks its
/// rows in id order, so neither holds a row the other waits for.)
async fn two_groups_sharing_rows_at_once_each_commit_only_the_leases_they_hold(db: TestDb) -> anyhow::Result<()> {
    let owner = fixtures::task(&db).await?;
    let notifier = Notifier::new();
    for round in 0..3 {
        for _ in 0..2 {
            fixtures::job(&db, &owner.member, AccessChannel::Interactive).await?;
        }
        let claimed = lifecycle::claim_due(&db.db, &notifier, "worker-a", LEASE_MS, 2, now_millis()).await?;
        ensure_eq!(claimed.len(), 2, "round {round}");
        let (kept, taken) = (&claimed[0], &claimed[1]);
        // Worker B took the second row over; it never held the first.
        let successor = Uuid::new_v4();
        entity::research_task_job::Entity::update_many()
            .col_expr(entity::research_task_job::Column::LeaseToken, Expr::value(successor))
            .col_expr(entity::research_task_job::Column::WorkerId, Expr::value("worker-b"))
            .filter(entity::research_task_job::Column::Id.eq(taken.job.id))
            .exec(&db.db)
            .await?;
        let mut b_holds = taken.clone();
        b_holds.lease = lifecycle::Lease { token: successor, worker_id: "worker-b".into(), ..taken.lease.clone() };
        b_holds.job = reload(&db, taken.job.id).await?;
        let mut b_lost = kept.clone();
        b_lost.lease = lifecycle::Lease { token: Uuid::new_v4(), worker_id: "worker-b".into(), ..kept.lease.clone() };

        let group_a = vec![to_retrieving(kept), to_retrieving(taken)];
        let group_b = vec![to_retrieving(&b_holds), to_retrieving(&b_lost)];
        let (a, b) =
            tokio::join!(commit_boundaries(&db.db, &notifier, group_a), commit_boundaries(&db.db, &notifier, group_b));
        for (who, results) in [("a", a), ("b", b)] {
            anyhow::ensure!(
                matches!(results.as_slice(), [Ok(Committed::Checkpoint(_)), Err(LifecycleError::LeaseLost)]),
                "round {round}, worker {who}: {results:?}"
            );
        }
        for id in [kept.job.id, taken.job.id] {
            ensure_eq!(reload(&db, id).await?.stage, Stage::Retrieving);
            let stage_events = events(&db, id).await?.into_iter().filter(|e| e.idempotency_key == "stage:retrieving");
            ensure_eq!(stage_events.count(), 1, "round {round}: stage events of {id}");
            ensure_eq!(partials(&db, id).await?.len(), 1, "round {round}: partial results of {id}");
        }
    }
    Ok(())
}
