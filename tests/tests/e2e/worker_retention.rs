//! Retention while traffic runs: finished tasks older than the retention go with every row
//! that hangs off them (events, partial results, outbox rows, the answer draft, webhook
//! deliveries); their answer traces stay, unlinked, unless pruning them is asked for;
//! unfinished and recent tasks are never touched, and the live tasks finish as usual.
use std::time::Duration;

use anyhow::ensure;
use entity::{
    AccessChannel, MemberRole, Stage, answer_trace, research_task_answer_draft as draft, research_task_job as job,
    research_task_outbox as outbox, research_task_partial_result as partial, research_task_progress_event as progress,
    webhook_delivery as delivery,
};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq, fixtures};
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use uuid::Uuid;
use worker::Notifier;
use worker::pipeline::Stop;

use crate::worker_support::{DOCUMENTS, pipeline};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        pruning_during_live_traffic_deletes_only_old_finished_tasks_and_what_hangs_off_them,
        answer_traces_are_pruned_only_when_asked,
        a_thread_goes_with_its_last_turn_and_an_empty_one_stays,
    ]
}

const DAY_MS: i64 = 86_400_000;

/// Rows of every table that hangs off a task.
async fn rows_of(db: &TestDb, task: Uuid) -> anyhow::Result<[u64; 5]> {
    Ok([
        progress::Entity::find().filter(progress::Column::ResearchTaskJobId.eq(task)).count(&db.db).await?,
        partial::Entity::find().filter(partial::Column::ResearchTaskJobId.eq(task)).count(&db.db).await?,
        outbox::Entity::find().filter(outbox::Column::ResearchTaskJobId.eq(task)).count(&db.db).await?,
        draft::Entity::find().filter(draft::Column::ResearchTaskJobId.eq(task)).count(&db.db).await?,
        delivery::Entity::find().filter(delivery::Column::ResearchTaskJobId.eq(task)).count(&db.db).await?,
    ])
}

/// Ages a task's row by `days` (the passage of time, as a test sets it).
async fn age(db: &TestDb, task: Uuid, days: i64) -> anyhow::Result<()> {
    let at = entity::now_millis() - days * DAY_MS;
    let row = job::ActiveModel { id: Set(task), updated_at: Set(at), ..Default::default() };
    job::Entity::update(row).exec(&db.db).await?;
    Ok(())
}

/// A space whose owner has a webhook endpoint, and `completed` tasks run to their end.
async fn finished_tasks(
    db: &TestDb,
    notifier: &Notifier,
    completed: usize,
) -> anyhow::Result<(entity::member::Model, Vec<Uuid>)> {
    let space = fixtures::space(db).await?;
    let owner = fixtures::member(db, &space, "owner", MemberRole::Owner).await?;
    for (title, content) in DOCUMENTS {
        fixtures::document(db, &owner, title, content).await?;
    }
    let endpoint = entity::webhook_endpoint::ActiveModel {
        id: Set(Uuid::now_v7()),
        tenant_id: Set(space.tenant_id.clone()),
        knowledge_space_id: Set(space.id),
        subject_id: Set("owner".into()),
        url: Set("http://127.0.0.1:9/hook".into()),
        events: Set(serde_json::json!(["research_task.started", "research_task.stage_changed"])),
        secret: Set(worker::webhooks::new_secret()),
        disabled_at: Set(None),
        created_at: Set(entity::now_millis()),
        updated_at: Set(entity::now_millis()),
    };
    entity::webhook_endpoint::Entity::insert(endpoint).exec(&db.db).await?;
    let runner = pipeline(db, notifier, "retention-setup", None);
    let mut ids = Vec::new();
    for _ in 0..completed {
        let task = fixtures::job(db, &owner, AccessChannel::Interactive).await?;
        worker::runtime::run_due(&runner, &Stop::default(), entity::now_millis()).await?;
        ids.push(task.id);
    }
    Ok((owner, ids))
}

async fn pruning_during_live_traffic_deletes_only_old_finished_tasks_and_what_hangs_off_them(
    db: TestDb,
) -> anyhow::Result<()> {
    let notifier = Notifier::new();
    let (owner, finished) = finished_tasks(&db, &notifier, 4).await?;
    let (old, recent) = finished.split_at(2);
    for task in old {
        ensure!(rows_of(&db, *task).await?.iter().all(|count| *count > 0), "every table has rows of the task");
        age(&db, *task, 40).await?;
    }
    // An unfinished task as old as those: never pruned.
    let waiting = fixtures::job(&db, &owner, AccessChannel::Interactive).await?;
    let paused = lifecycle_pause(&db, &notifier, &owner, waiting.id).await?;
    age(&db, paused, 40).await?;

    // Live traffic: a worker runs new tasks while pruning passes run.
    let (shutdown, tracker) = (worker::runtime::CancellationToken::new(), worker::runtime::TaskTracker::new());
    let mut settings = crate::worker_support::settings("live");
    settings.poll_interval_ms = 50;
    worker::runtime::spawn(db.db.clone(), notifier.clone(), settings, shutdown.clone(), &tracker)?;
    let mut live = Vec::new();
    let mut pruned = 0;
    for _ in 0..20 {
        live.push(fixtures::job(&db, &owner, AccessChannel::Interactive).await?.id);
        pruned += worker::lifecycle::prune(&db.db, 30, false, 1, entity::now_millis()).await?.tasks;
    }
    kfs_tests::process::wait_until(Duration::from_secs(60), "the live tasks to complete", async || {
        let done = job::Entity::find()
            .filter(job::Column::Id.is_in(live.clone()))
            .filter(job::Column::Stage.eq(Stage::Completed))
            .count(&db.db)
            .await?;
        Ok(done == live.len() as u64)
    })
    .await?;
    pruned += worker::lifecycle::prune(&db.db, 30, false, 1, entity::now_millis()).await?.tasks;
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;

    ensure_eq!(pruned, 2, "the two old finished tasks");
    for task in old {
        ensure!(job::Entity::find_by_id(*task).one(&db.db).await?.is_none());
        ensure_eq!(rows_of(&db, *task).await?, [0; 5], "everything of the task went");
    }
    let kept =
        answer_trace::Entity::find().filter(answer_trace::Column::ResearchTaskId.is_null()).count(&db.db).await?;
    ensure_eq!(kept, 2, "their answer traces stay, unlinked");
    for task in recent.iter().chain(std::iter::once(&paused)).chain(&live) {
        ensure!(job::Entity::find_by_id(*task).one(&db.db).await?.is_some(), "kept {task}");
        ensure!(rows_of(&db, *task).await?[0] > 0, "with its events");
    }
    Ok(())
}

async fn answer_traces_are_pruned_only_when_asked(db: TestDb) -> anyhow::Result<()> {
    let notifier = Notifier::new();
    let (_, finished) = finished_tasks(&db, &notifier, 1).await?;
    age(&db, finished[0], 10).await?;
    ensure_eq!(worker::lifecycle::prune(&db.db, 30, true, 100, entity::now_millis()).await?.tasks, 0, "not old enough");
    let pruned = worker::lifecycle::prune(&db.db, 7, true, 100, entity::now_millis()).await?;
    ensure_eq!((pruned.tasks, pruned.answer_traces), (1, 1));
    ensure_eq!(answer_trace::Entity::find().count(&db.db).await?, 0);
    Ok(())
}

/// Pauses a queued task through the lifecycle, as the API would.
async fn lifecycle_pause(
    db: &TestDb,
    notifier: &Notifier,
    owner: &entity::member::Model,
    task: Uuid,
) -> anyhow::Result<Uuid> {
    let task_ref = worker::lifecycle::TaskRef {
        id: task,
        tenant_id: owner.tenant_id.clone(),
        subject_id: owner.subject_id.clone(),
        expected_row_version: None,
    };
    worker::lifecycle::pause(&db.db, notifier, &task_ref, None, entity::now_millis()).await?;
    Ok(task)
}

/// A thread of `owner` in their space, with `turns` as its turns (in order).
async fn thread_of(db: &TestDb, owner: &entity::member::Model, turns: &[Uuid]) -> anyhow::Result<Uuid> {
    use entity::{research_thread as thread, research_thread_turn as turn};
    let id = Uuid::now_v7();
    let now = entity::now_millis();
    let row = thread::ActiveModel {
        id: Set(id),
        tenant_id: Set(owner.tenant_id.clone()),
        knowledge_space_id: Set(owner.knowledge_space_id),
        subject_id: Set(owner.subject_id.clone()),
        title: Set(None),
        metadata: Set(serde_json::json!({})),
        created_at: Set(now),
        updated_at: Set(now),
    };
    thread::Entity::insert(row).exec(&db.db).await?;
    for (at, task) in turns.iter().enumerate() {
        let row = turn::ActiveModel {
            research_task_job_id: Set(*task),
            research_thread_id: Set(id),
            created_at: Set(now + at as i64),
        };
        turn::Entity::insert(row).exec(&db.db).await?;
    }
    Ok(id)
}

async fn a_thread_goes_with_its_last_turn_and_an_empty_one_stays(db: TestDb) -> anyhow::Result<()> {
    use entity::research_thread as thread;
    let notifier = Notifier::new();
    let (owner, finished) = finished_tasks(&db, &notifier, 3).await?;
    let emptied = thread_of(&db, &owner, &finished[..1]).await?;
    let kept = thread_of(&db, &owner, &finished[1..]).await?;
    let empty = thread_of(&db, &owner, &[]).await?;
    age(&db, finished[0], 10).await?;
    age(&db, finished[1], 10).await?;
    let pruned = worker::lifecycle::prune(&db.db, 7, false, 100, entity::now_millis()).await?;
    ensure_eq!(pruned.tasks, 2);
    ensure_eq!(thread::Entity::find_by_id(emptied).one(&db.db).await?, None, "its last turn went: so does it");
    ensure!(thread::Entity::find_by_id(kept).one(&db.db).await?.is_some(), "a turn is left");
    ensure!(thread::Entity::find_by_id(empty).one(&db.db).await?.is_some(), "a client's empty thread stays");
    Ok(())
}
