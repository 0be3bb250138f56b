//! Production topology, for real: one `api` process with the embedded worker off and two
//! `worker` processes on one PostgreSQL database. One worker is killed with SIGKILL in the
//! middle of the work; every task must still finish, exactly once.
//!
//! The test runs the binaries cargo built, and builds them itself first (a no-op after
//! `cargo build --workspace`), so it never runs stale executables.

use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use entity::{
    ProgressEventType, Stage, answer_trace, research_task_job as job, research_task_partial_result as partial,
    research_task_progress_event as progress,
};
use futures_util::{StreamExt as _, TryStreamExt as _};
use kfs_tests::process::{ApiProcess, Binaries, Process, api_command, command, wait_until};
use kfs_tests::server::{GraphqlClient, TestServer};
use kfs_tests::{DbTest, TestDb, db_tests};
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QueryOrder};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::worker_support::assert_gapless;

/// This module's tests: PostgreSQL only, because several processes sharing one database
/// is the production topology, and SQLite's is one process.
pub fn tests() -> Vec<DbTest> {
    db_tests![; postgres_only: two_worker_processes_finish_every_task_exactly_once_when_one_is_killed]
}

/// How many tasks the test creates: enough that the killed worker holds leases mid-stage.
const TASKS: usize = 200;

/// The killed worker's lease: short, so its stranded tasks are claimed again quickly.
const LEASE_MS: u64 = 2_000;

/// Completed tasks before the kill: the workers are demonstrably running by then, and
/// most of the work is still ahead.
const COMPLETED_BEFORE_KILL: u64 = 20;

/// The progress events of a task that ran to its answer in `rounds` rounds, in sequence
/// order: the first claim's `started`, one `stage_changed` per boundary (round 2 on keyed
/// by round), then completion. A re-run after a crash must add nothing to this list.
fn expected_events(rounds: usize) -> Vec<String> {
    let mut keys = vec!["started".to_owned(), "stage:retrieving".to_owned(), "stage:analyzing".to_owned()];
    for round in 2..=rounds {
        keys.push(format!("stage:retrieving:r{round}"));
        keys.push(format!("stage:analyzing:r{round}"));
    }
    keys.extend(["stage:generating".to_owned(), "stage:completed".to_owned()]);
    keys
}

/// What the knowledge space holds, so the built-in engine retrieves real evidence.
const DOCUMENTS: &[(&str, &str)] = &[
    (
        "Leases",
        "A lease is a time-bounded claim on a job. A worker renews its lease with heartbeats while a stage runs.",
    ),
    ("Fencing tokens", "Every write carries the lease token. A stale worker whose lease expired writes nothing."),
    ("Crash recovery", "When a worker process dies its lease expires, and another worker claims the job again."),
    ("Checkpoints", "Each stage boundary commits the new stage, its progress event and its partial results at once."),
    (
        "Idempotency",
        "Progress events and partial results are idempotent on their key, so a re-run writes nothing twice.",
    ),
    ("Retry backoff", "Failed attempts are retried with exponential backoff and jitter."),
    ("Outbox", "Every delivery of a job to the queue is an outbox row written in the job's own transaction."),
    (
        "Notifications",
        "PostgreSQL LISTEN and NOTIFY wake workers up; polling keeps them correct when a wake-up is lost.",
    ),
    ("Gardening", "Tomatoes need sun and regular watering; basil grows well beside them."),
    ("Tides", "Tides are caused by the gravitational pull of the moon and the sun on the oceans."),
];

/// The questions the tasks ask, in turn.
const QUESTIONS: &[&str] = &[
    "What happens to a lease when a worker process dies?",
    "How does a fencing token stop a stale worker from writing?",
    "Why are progress events idempotent, and what does a checkpoint commit?",
    "How do LISTEN and NOTIFY wake workers, and what if a wake-up is lost?",
    "How are failed attempts retried?",
    "What causes tides?",
];

async fn two_worker_processes_finish_every_task_exactly_once_when_one_is_killed(db: TestDb) -> anyhow::Result<()> {
    let started = Instant::now();
    let binaries = Binaries::build().await?;
    // The API alone: no embedded worker, so every task runs in a worker process.
    let mut api = ApiProcess::start(api_command(&binaries.api, &db.url)).await?;
    let mut doomed = Process::spawn("worker-a", worker_command(&binaries.worker, &db.url, "worker-a"))?;
    let mut survivor = Process::spawn("worker-b", worker_command(&binaries.worker, &db.url, "worker-b"))?;

    let tenant = format!("tenant-{}", Uuid::new_v4().simple());
    let client = GraphqlClient::new(api.graphql_url(), TestServer::token("alice", &tenant));
    let space = create_space_with_documents(&client).await?;
    // The kill lands while tasks are still being created, so worker-a is busy whether
    // the workers keep up with the API or fall behind it.
    let (tasks, (stranded, killed)) = tokio::try_join!(
        create_tasks(&client, space, TASKS),
        kill_mid_work(&db, space, &mut doomed, [&mut api.process, &mut survivor], started),
    )?;
    anyhow::ensure!(tasks.len() == TASKS, "created {} distinct tasks, expected {TASKS}", tasks.len());
    let created = started.elapsed();

    wait_until(Duration::from_secs(90), "every task to complete", async || {
        api.process.ensure_running()?;
        survivor.ensure_running()?;
        let ended_badly = job::Entity::find()
            .filter(job::Column::KnowledgeSpaceId.eq(space))
            .filter(job::Column::Stage.is_in([Stage::Failed, Stage::Canceled]))
            .one(&db.db)
            .await?;
        if let Some(task) = ended_badly {
            anyhow::bail!("task {} ended {:?}: {:?}", task.id, task.stage, task.error);
        }
        Ok(completed(&db, space).await? == TASKS as u64)
    })
    .await?;
    let finished = started.elapsed();

    let jobs = assert_each_task_completed_once(&db, space, &tasks, &stranded).await?;
    for id in &stranded {
        assert_api_shows_the_answer(&client, *id).await?;
    }
    let reclaimed: i32 = jobs.iter().map(|job| job.execution_attempts - 1).sum();
    eprintln!(
        "multiprocess: worker-a killed at {killed:.1?} holding {} leases, {TASKS} tasks created by {created:.1?}, \
         all completed at {finished:.1?} with {reclaimed} extra claims",
        stranded.len(),
    );
    Ok(())
}

/// Kills `doomed` (worker-a) with SIGKILL once some tasks completed and while it holds
/// leases: a crash between two checkpoints, with no chance to release anything. Returns
/// the tasks it stranded and when it died.
async fn kill_mid_work(
    db: &TestDb,
    space: Uuid,
    doomed: &mut Process,
    others: [&mut Process; 2],
    started: Instant,
) -> anyhow::Result<(Vec<Uuid>, Duration)> {
    let [api, survivor] = others;
    wait_until(Duration::from_secs(60), "worker-a to hold a lease after some tasks completed", async || {
        for child in [&mut *api, &mut *doomed, &mut *survivor] {
            child.ensure_running()?;
        }
        Ok(completed(db, space).await? >= COMPLETED_BEFORE_KILL && !leased_by(db, "worker-a").await?.is_empty())
    })
    .await?;
    doomed.kill()?;
    let killed = started.elapsed();
    // A COMMIT the worker sent just before it died still lands: wait until PostgreSQL has
    // ended every session of worker-a, so what it held is settled before we read it.
    wait_until(Duration::from_secs(30), "PostgreSQL to end worker-a's sessions", async || {
        Ok(sessions_of(db, "worker-a").await? == 0)
    })
    .await?;
    // Read after the kill: what it held at its death, not at the check before.
    let stranded = leased_by(db, "worker-a").await?;
    anyhow::ensure!(!stranded.is_empty(), "worker-a held no lease when it died, so its death tested nothing");
    Ok((stranded, killed))
}

/// Open PostgreSQL sessions whose application name is `name`.
async fn sessions_of(db: &TestDb, name: &str) -> anyhow::Result<i64> {
    let sql = "SELECT count(*)::text FROM pg_stat_activity WHERE application_name = $1";
    let counts = db.strings(sql, [name.into()]).await?;
    Ok(counts.first().and_then(|count| count.parse().ok()).unwrap_or(0))
}

/// A worker whose lease lapses [`LEASE_MS`] after its last heartbeat, so a killed one's
/// tasks are claimed again within seconds, and whose poll finds them promptly.
fn worker_command(binary: &std::path::Path, database_url: &str, worker_id: &str) -> std::process::Command {
    let mut worker = command(binary);
    // The session name lets the test see when PostgreSQL has ended a killed worker's sessions.
    let separator = if database_url.contains('?') { '&' } else { '?' };
    worker
        .env("DATABASE_URL", format!("{database_url}{separator}application_name={worker_id}"))
        .env("KFS_WORKER_WORKER_ID", worker_id)
        .env("KFS_WORKER_LEASE_MS", LEASE_MS.to_string())
        .env("KFS_WORKER_HEARTBEAT_MS", (LEASE_MS / 8).to_string())
        .env("KFS_WORKER_POLL_INTERVAL_MS", "200")
        .env("KFS_WORKER_MAX_CONCURRENCY", "8")
        .env("KFS_WORKER_BATCH_SIZE", "8")
        .env("KFS_WORKER_RETRY_BASE_MS", "100")
        .env("KFS_WORKER_RETRY_CAP_MS", "1000")
        .env("RUST_LOG", "info");
    worker
}

/// How many of the space's tasks have completed.
async fn completed(db: &TestDb, space: Uuid) -> anyhow::Result<u64> {
    Ok(job::Entity::find()
        .filter(job::Column::KnowledgeSpaceId.eq(space))
        .filter(job::Column::Stage.eq(Stage::Completed))
        .count(&db.db)
        .await?)
}

/// The unfinished tasks `worker_id` holds a lease on.
async fn leased_by(db: &TestDb, worker_id: &str) -> anyhow::Result<Vec<Uuid>> {
    let running = [Stage::Planning, Stage::Retrieving, Stage::Analyzing, Stage::Generating];
    let rows = job::Entity::find()
        .filter(job::Column::WorkerId.eq(worker_id))
        .filter(job::Column::LeaseToken.is_not_null())
        .filter(job::Column::Stage.is_in(running))
        .all(&db.db)
        .await?;
    Ok(rows.into_iter().map(|row| row.id).collect())
}

/// Every task completed exactly once: one answer trace, progress events exactly
/// [`expected_events`] of its rounds with sequences 1..n, partial results gapless with unique keys; the
/// tasks the kill stranded were claimed again. Returns the tasks as they ended.
async fn assert_each_task_completed_once(
    db: &TestDb,
    space: Uuid,
    tasks: &HashSet<Uuid>,
    stranded: &[Uuid],
) -> anyhow::Result<Vec<job::Model>> {
    let jobs = job::Entity::find().filter(job::Column::KnowledgeSpaceId.eq(space)).all(&db.db).await?;
    let found: HashSet<Uuid> = jobs.iter().map(|job| job.id).collect();
    anyhow::ensure!(&found == tasks, "the space holds {} tasks, not the {} created", found.len(), tasks.len());
    for job in &jobs {
        anyhow::ensure!(
            job.stage == Stage::Completed && job.completed_at.is_some() && job.lease_token.is_none(),
            "task {} ended {:?} (lease {:?})",
            job.id,
            job.stage,
            job.lease_token
        );
    }
    for id in stranded {
        let attempts = jobs.iter().find(|job| job.id == *id).map_or(0, |job| job.execution_attempts);
        anyhow::ensure!(
            attempts >= 2,
            "stranded task {id} completed after {attempts} claim(s), so nobody re-claimed it"
        );
    }

    let traces =
        answer_trace::Entity::find().filter(answer_trace::Column::KnowledgeSpaceId.eq(space)).all(&db.db).await?;
    let mut traces_per_task: HashMap<Option<Uuid>, usize> = HashMap::new();
    for trace in &traces {
        *traces_per_task.entry(trace.research_task_id).or_default() += 1;
    }
    for id in tasks {
        let count = traces_per_task.get(&Some(*id)).copied().unwrap_or(0);
        anyhow::ensure!(count == 1, "task {id} has {count} answer traces");
    }
    anyhow::ensure!(traces.len() == tasks.len(), "{} answer traces for {} tasks", traces.len(), tasks.len());

    let events = progress::Entity::find()
        .filter(progress::Column::KnowledgeSpaceId.eq(space))
        .order_by_asc(progress::Column::Sequence)
        .all(&db.db)
        .await?;
    for (id, events) in group(events, |event| event.research_task_job_id) {
        let sequences: Vec<i32> = events.iter().map(|event| event.sequence).collect();
        assert_gapless(&format!("task {id}'s progress"), &sequences)?;
        let keys: Vec<&str> = events.iter().map(|event| event.idempotency_key.as_str()).collect();
        let rounds = keys.iter().filter(|key| key.starts_with("stage:analyzing")).count();
        anyhow::ensure!(keys == expected_events(rounds), "task {id}'s progress events are {keys:?}");
        let completions = events
            .iter()
            .filter(|event| event.event_type == ProgressEventType::StageChanged && event.stage == Stage::Completed)
            .count();
        anyhow::ensure!(completions == 1, "task {id} has {completions} completion events");
    }

    let partials = partial::Entity::find()
        .filter(partial::Column::KnowledgeSpaceId.eq(space))
        .order_by_asc(partial::Column::Sequence)
        .all(&db.db)
        .await?;
    let with_partials = group(partials, |result| result.research_task_job_id);
    anyhow::ensure!(
        with_partials.len() == tasks.len(),
        "{} of {} tasks have partial results",
        with_partials.len(),
        tasks.len()
    );
    for (id, results) in with_partials {
        let sequences: Vec<i32> = results.iter().map(|result| result.sequence).collect();
        assert_gapless(&format!("task {id}'s partial results"), &sequences)?;
        let keys: HashSet<&str> = results.iter().map(|result| result.idempotency_key.as_str()).collect();
        anyhow::ensure!(keys.len() == results.len(), "task {id} has a partial result key twice");
        anyhow::ensure!(keys.contains("evidence"), "task {id} has no evidence bundle");
    }
    Ok(jobs)
}

/// Rows grouped by task, each group in the order the rows came.
fn group<T>(rows: Vec<T>, task: impl Fn(&T) -> Uuid) -> HashMap<Uuid, Vec<T>> {
    let mut groups: HashMap<Uuid, Vec<T>> = HashMap::new();
    for row in rows {
        groups.entry(task(&row)).or_default().push(row);
    }
    groups
}

/// A space of the caller's, holding [`DOCUMENTS`].
async fn create_space_with_documents(client: &GraphqlClient) -> anyhow::Result<Uuid> {
    let data =
        client.run("mutation { createKnowledgeSpace(input: { name: \"Multiprocess\" }) { id } }", json!({})).await?;
    let space = uuid_at(&data, "/createKnowledgeSpace/id")?;
    for (title, content) in DOCUMENTS {
        let query = "mutation($input: AddKnowledgeDocumentInput!) { addKnowledgeDocument(input: $input) { id } }";
        let input = json!({ "knowledgeSpaceId": space, "title": title, "content": content });
        client.run(query, json!({ "input": input })).await?;
    }
    Ok(space)
}

/// Creates `count` tasks, eight requests at a time, across all modes. Each carries an
/// idempotency key, so a retried request could never add a task.
async fn create_tasks(client: &GraphqlClient, space: Uuid, count: usize) -> anyhow::Result<HashSet<Uuid>> {
    const MODES: [&str; 4] = ["FAST", "RESEARCH", "DEEP", "AUTO"];
    let query = "mutation($input: CreateResearchTaskInput!) { createResearchTask(input: $input) { id stage } }";
    futures_util::stream::iter(0..count)
        .map(|index| async move {
            let input = json!({
                "knowledgeSpaceId": space,
                "query": QUESTIONS[index % QUESTIONS.len()],
                "mode": MODES[index % MODES.len()],
                "topK": 3,
                "budgetUsd": 1.0,
                "idempotencyKey": format!("multiprocess-{index}"),
            });
            let data = client.run(query, json!({ "input": input })).await?;
            uuid_at(&data, "/createResearchTask/id")
        })
        .buffer_unordered(8)
        .try_collect()
        .await
}

/// The API reads back what the worker processes wrote: the task completed, with its
/// answer and the progress events of its rounds.
async fn assert_api_shows_the_answer(client: &GraphqlClient, id: Uuid) -> anyhow::Result<()> {
    let query = "query($id: UUID!) { researchTask(id: $id) {
        stage executionAttempts answerTrace { researchTaskId } progressEvents { sequence eventType stage } } }";
    let data = client.run(query, json!({ "id": id })).await?;
    let task = data.get("researchTask").context("no researchTask")?;
    anyhow::ensure!(task["stage"] == "COMPLETED", "the API shows task {id} as {task}");
    anyhow::ensure!(
        task["answerTrace"]["researchTaskId"] == json!(id),
        "the API shows task {id} without its answer: {task}"
    );
    let events = task["progressEvents"].as_array().context("no progressEvents")?;
    let last = events.last().context("no progress events")?;
    let rounds = events.iter().filter(|event| event["stage"] == "ANALYZING").count();
    anyhow::ensure!(
        events.len() == expected_events(rounds).len()
            && last["eventType"] == "STAGE_CHANGED"
            && last["stage"] == "COMPLETED",
        "the API shows task {id}'s events as {events:?}"
    );
    Ok(())
}

/// The UUID at `pointer` in a GraphQL `data` object.
fn uuid_at(data: &Value, pointer: &str) -> anyhow::Result<Uuid> {
    let text = data.pointer(pointer).and_then(Value::as_str).with_context(|| format!("no {pointer} in {data}"))?;
    text.parse().with_context(|| format!("{pointer} is not a UUID: {text}"))
}
