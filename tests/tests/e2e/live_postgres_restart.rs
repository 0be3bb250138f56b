//! Live progress across processes and a database restart: a subscriber on one `api`
//! process (embedded worker off) follows a task that a separate `worker` process runs,
//! while PostgreSQL restarts under both: a fast restart, and a stop long enough that the
//! subscription's own reads fail. Every session dies, the api's LISTEN included, so the
//! notifications of what commits meanwhile are lost; the subscriber must still get every
//! sequence exactly once, and no error.
//!
//! The shared PostgreSQL other tests run on is never restarted: this test starts a cluster
//! of its own (`cluster.rs`), which is why it ignores the harness's database.
pub(crate) mod cluster;

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};
use kfs_tests::process::{ApiProcess, Binaries, Process, api_command, command, wait_until};
use kfs_tests::server::{GraphqlClient, TestServer};
use kfs_tests::ws::{Event, WsClient, sequence_of};
use kfs_tests::{DbTest, TestDb, db_tests};
use serde_json::{Value, json};
use uuid::Uuid;

use crate::live_support::{PROGRESS, assert_exactly, take};
use crate::worker_support::DOCUMENTS;
use cluster::{Control, PrivatePostgres};

/// PostgreSQL alone: LISTEN/NOTIFY between processes, and a server to restart.
pub fn tests() -> Vec<DbTest> {
    db_tests![; postgres_only:
        a_subscriber_gets_every_sequence_once_from_a_worker_process_across_a_postgres_restart,
        a_subscriber_gets_every_sequence_once_after_postgres_was_down_for_seconds,
        processes_started_before_their_database_wait_for_it_and_then_work,
    ]
}

/// How long the second test keeps PostgreSQL down. Within 2.5 s of the stop the
/// subscription goes back to the database (its topic fails its next 500 ms poll, and the
/// subscription checks its topic every 2 s); its read then waits for a connection for the
/// pool's 10 s acquire timeout. Thirteen seconds outlast both, so the read surely fails
/// while the database is gone.
const OUTAGE: Duration = Duration::from_secs(13);

/// What happens to PostgreSQL while the subscriber follows.
#[derive(Debug, Clone, Copy)]
enum Outage {
    /// `pg_ctl restart -m fast`: a fraction of a second.
    Restart,
    /// `pg_ctl stop -m fast`, this long, then `pg_ctl start`.
    Down(Duration),
}

async fn a_subscriber_gets_every_sequence_once_from_a_worker_process_across_a_postgres_restart(
    _shared: TestDb,
) -> anyhow::Result<()> {
    follow_through(Outage::Restart).await
}

async fn a_subscriber_gets_every_sequence_once_after_postgres_was_down_for_seconds(
    _shared: TestDb,
) -> anyhow::Result<()> {
    follow_through(Outage::Down(OUTAGE)).await
}

/// How long the run may take after the restart before the test fails instead of hanging.
const RUN_DEADLINE: Duration = Duration::from_secs(60);

/// A subscriber on the api process follows a task through `outage`; the worker process
/// then runs the task, and the subscriber must get every sequence once.
async fn follow_through(outage: Outage) -> anyhow::Result<()> {
    // Declared first so it is dropped last: the processes stop before their database.
    let postgres = PrivatePostgres::start().await?;
    let binaries = Binaries::build().await?;
    // The API alone, on the private cluster.
    let mut api_command = api_command(&binaries.api, &postgres.url());
    api_command.env("RUST_BACKTRACE", "0");
    let mut api = ApiProcess::start(api_command).await?;
    let tenant = format!("tenant-{}", Uuid::new_v4().simple());
    let client = GraphqlClient::new(api.graphql_url(), TestServer::token("alice", &tenant));

    // The task is paused before any worker exists, so the run cannot start before the
    // subscriber follows it.
    let space = space_with_documents(&client).await?;
    let task = create_task(&client, &space).await?;
    client.run(PAUSE, json!({ "id": task })).await?;
    let mut worker = Process::spawn("worker", worker_command(&binaries.worker, &postgres.url()))?;
    // A restart while the worker still connects and migrates would stop it for good (a
    // failed start is fatal, as it should be); a task it completes shows it is past that.
    let warm_up = create_task(&client, &space).await?;
    wait_until(Duration::from_secs(30), "the worker process to complete a first task", async || {
        worker.ensure_running()?;
        Ok(client.run(READ_TASK, json!({ "id": warm_up })).await?["researchTask"]["stage"] == "COMPLETED")
    })
    .await?;
    let mut subscriber = WsClient::connect_and_init(&api.ws_url(), Some(client.token())).await?;
    subscriber.subscribe("feed", PROGRESS, json!({ "task": task, "after": 0 })).await?;
    let mut payloads = take(&mut subscriber, "feed", 1).await?;

    let restarting = Instant::now();
    match outage {
        Outage::Restart => postgres.control(Control::Restart).await?,
        Outage::Down(duration) => {
            postgres.control(Control::Stop).await?;
            // The outage itself, not a wait for something: its length is the scenario.
            tokio::time::sleep(duration).await;
            postgres.control(Control::Start).await?;
        }
    }
    let restarted = restarting.elapsed();
    // The api's pooled sessions died with the server; the pool replaces them on use.
    client.run(RESUME, json!({ "id": task })).await.context("resuming right after the restart")?;
    let resumed = restarting.elapsed();
    let completed = tokio::time::timeout(RUN_DEADLINE, async {
        loop {
            match subscriber.next_event().await? {
                Event::Next(_, payload) => payloads.push(payload),
                Event::Complete(_) => return anyhow::Ok(restarting.elapsed()),
                other => bail!("after {} events: {other:?}", payloads.len()),
            }
        }
    })
    .await
    .with_context(|| format!("the feed did not complete within {RUN_DEADLINE:?} of the outage"))??;
    api.process.ensure_running()?;
    worker.ensure_running()?;

    let delivered: Vec<i64> =
        payloads.iter().map(|payload| sequence_of(payload, "researchTaskProgress")).collect::<Result<_, _>>()?;
    let stored = client.run(READ_TASK, json!({ "id": task })).await?;
    ensure!(stored["researchTask"]["stage"] == "COMPLETED", "the feed completed, the task did not: {stored}");
    let written = stored["researchTask"]["progressEvents"].as_array().map_or(0, Vec::len) as i64;
    assert_exactly("progress across the restart", &delivered, 1, written)?;
    eprintln!(
        "live_postgres_restart ({outage:?}): PostgreSQL back after {restarted:?}; resumed at {resumed:?}, feed of \
         {written} events complete at {completed:?} after the outage began"
    );
    Ok(())
}

/// The `worker` and `api` binaries started while their PostgreSQL is down keep trying
/// (logging each failure) instead of exiting; the worker's `/healthz` answers meanwhile
/// and its `/readyz` says why it is not ready; once the database starts both go on on
/// their own, and a task runs. Before, the worker exited at once.
async fn processes_started_before_their_database_wait_for_it_and_then_work(_shared: TestDb) -> anyhow::Result<()> {
    let postgres = PrivatePostgres::start().await?;
    postgres.control(Control::Stop).await?;
    let binaries = Binaries::build().await?;
    let mut command = worker_command(&binaries.worker, &postgres.url());
    command.env("KFS_WORKER_HTTP_ADDR", "127.0.0.1:0").env("RUST_LOG", "warn,worker=info");
    let mut worker = Process::spawn("worker", command)?;
    let line = worker.line_starting_with("worker operations:", Duration::from_secs(30)).await?;
    let operations = line.trim_start_matches("worker operations:").trim().to_owned();
    ensure!(reqwest::get(format!("{operations}/healthz")).await?.status().is_success(), "/healthz while waiting");
    let ready = reqwest::get(format!("{operations}/readyz")).await?;
    ensure!(ready.status().as_u16() == 503, "/readyz while waiting: {}", ready.status());
    ensure!(ready.text().await?.contains("connecting to the database"));
    // Two failed tries, each logged, and the process still running.
    let mut failures = 0;
    while failures < 2 {
        let line = worker.next_line(Duration::from_secs(30)).await.context("the worker went quiet")?;
        if line.contains("the database is unreachable; trying again") {
            failures += 1;
        }
        worker.ensure_running()?;
    }
    let mut api = Process::spawn("api", api_command(&binaries.api, &postgres.url()))?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    api.ensure_running().context("the api exited instead of waiting")?;
    postgres.control(Control::Start).await?;
    wait_until(Duration::from_secs(60), "the worker to be ready", async || {
        worker.ensure_running()?;
        Ok(reqwest::get(format!("{operations}/readyz")).await?.status().is_success())
    })
    .await?;
    let line = api.line_starting_with("GraphiQL:", Duration::from_secs(60)).await?;
    let addr = line.trim_start_matches("GraphiQL:").trim().trim_start_matches("http://").trim_end_matches("/graphiql");
    let tenant = format!("tenant-{}", Uuid::new_v4().simple());
    let client = GraphqlClient::new(format!("http://{addr}/graphql"), TestServer::token("alice", &tenant));
    let space = space_with_documents(&client).await?;
    let task = create_task(&client, &space).await?;
    wait_until(Duration::from_secs(30), "the task to complete", async || {
        Ok(client.run(READ_TASK, json!({ "id": task })).await?["researchTask"]["stage"] == "COMPLETED")
    })
    .await?;
    Ok(())
}

/// A worker whose lease lapses two seconds after a lost heartbeat and whose poll runs
/// every 200 ms, so a run the restart broke is taken up again quickly.
fn worker_command(binary: &std::path::Path, database_url: &str) -> std::process::Command {
    let mut worker = command(binary);
    worker
        .env("DATABASE_URL", database_url)
        .env("KFS_WORKER_WORKER_ID", "restart-worker")
        .env("KFS_WORKER_LEASE_MS", "2000")
        .env("KFS_WORKER_HEARTBEAT_MS", "250")
        .env("KFS_WORKER_POLL_INTERVAL_MS", "200")
        .env("KFS_WORKER_RETRY_BASE_MS", "100")
        .env("KFS_WORKER_RETRY_CAP_MS", "1000")
        .env("RUST_LOG", "warn")
        .env("RUST_BACKTRACE", "0");
    worker
}

const PAUSE: &str = "mutation($id: UUID!) { pauseResearchTask(id: $id) { stage } }";
const RESUME: &str = "mutation($id: UUID!) { resumeResearchTask(id: $id) { stage } }";
const READ_TASK: &str = "query($id: UUID!) { researchTask(id: $id) { stage progressEvents { sequence } } }";

/// A space of alice's holding [`DOCUMENTS`], so the run retrieves real evidence.
async fn space_with_documents(client: &GraphqlClient) -> anyhow::Result<String> {
    let data = client.run("mutation { createKnowledgeSpace(input: { name: \"Restart\" }) { id } }", json!({})).await?;
    let space = data.pointer("/createKnowledgeSpace/id").and_then(Value::as_str).context("no space id")?.to_owned();
    for (title, content) in DOCUMENTS {
        let query = "mutation($input: AddKnowledgeDocumentInput!) { addKnowledgeDocument(input: $input) { id } }";
        client
            .run(query, json!({ "input": { "knowledgeSpaceId": space, "title": title, "content": content } }))
            .await?;
    }
    Ok(space)
}

/// A queued research task in the space; returns its id.
async fn create_task(client: &GraphqlClient, space: &str) -> anyhow::Result<String> {
    let query = "mutation($input: CreateResearchTaskInput!) { createResearchTask(input: $input) { id } }";
    let input = json!({ "knowledgeSpaceId": space, "query": "How does a lease token fence a stale worker?", "mode": "FAST", "topK": 3 });
    let data = client.run(query, json!({ "input": input })).await?;
    data.pointer("/createResearchTask/id").and_then(Value::as_str).map(str::to_owned).context("no task id")
}
