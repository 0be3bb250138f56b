//! Create → first progress event at the subscriber: a client creates a task over HTTP,
//! subscribes to its progress over a WebSocket (`graphql-transport-ws`) after the
//! `queued` event, and the clock stops at the first event the worker writes (its claim's
//! `stage_changed` to planning). The `api` binary (release) runs on PostgreSQL with its
//! embedded worker; printed are p50 and p99 while another tenant's backlog keeps the
//! worker busy (the throughput bench's load: built-in engine, research mode, a queue of
//! `KFS_BENCH_BACKLOG` tasks, 30,000 by default, created before the server starts so that
//! it outlasts the figure: the count left unfinished afterwards, and the backlog's
//! completion rate meanwhile, are printed), and again at idle once the backlog is done.
//!
//! `KFS_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p
//! workspace-tests --bench latency`; `KFS_BENCH_SAMPLES` (100) per figure.
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use entity::{AccessChannel, ResearchMode, research_task_job as job};
use futures_util::{StreamExt as _, TryStreamExt as _};
use kfs_tests::process::{ApiProcess, api_command, build};
use kfs_tests::server::{GraphqlClient, TestServer};
use kfs_tests::ws::{Event, WsClient};
use kfs_tests::{Backend, TestConfig, TestDb, fixtures};
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::json;
use worker::Notifier;
use worker::lifecycle::{NewTask, create};

fn main() -> ExitCode {
    kfs_tests::bench::main("latency", run)
}

const CREATE: &str = "mutation($input: CreateResearchTaskInput!) { createResearchTask(input: $input) { id } }";
const PROGRESS: &str =
    "subscription($task: UUID!) { researchTaskProgress(taskId: $task, afterSequence: 1) { sequence stage } }";

fn run() -> anyhow::Result<()> {
    let config = TestConfig::from_env();
    if config.postgres_url.is_none() {
        println!("latency: skipped, KFS_TEST_POSTGRES_URL is not set (the figures are PostgreSQL's)");
        return Ok(());
    }
    let samples = usize::try_from(kfs_tests::bench::env_number("KFS_BENCH_SAMPLES", 100)?)?;
    let backlog = usize::try_from(kfs_tests::bench::env_number("KFS_BENCH_BACKLOG", 30_000)?)?;
    let ([api], profile) = build(["api"])?;
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(TestDb::run(Backend::Postgres, &config, |db| async move {
        // Another tenant's backlog, created before the server (and its worker) starts, so
        // the worker runs at the throughput bench's load while the busy figure is taken:
        // no creating client keeps ahead of a worker finishing a thousand tasks a second.
        let loader = seed_backlog(&db, backlog).await?;
        let mut command = api_command(&api, &db.url);
        command.env("KFS_EMBEDDED_WORKER", "true").env("KFS_WORKER_POLL_INTERVAL_MS", "1000");
        let server = ApiProcess::start(command).await?;
        println!("api: {} (profile {profile}), embedded worker on; {samples} samples per figure", api.display());
        let probe = Caller::new(&server, "probe").await?;
        let (started, done_before) = (Instant::now(), completed(&db, loader).await?);
        let busy = measure(&server, &probe, samples).await?;
        let done_after = completed(&db, loader).await?;
        let rate = (done_after - done_before) as f64 / started.elapsed().as_secs_f64();
        let left = backlog as u64 - done_after;
        report(&format!("with another tenant's {backlog}-task backlog ({left} still unfinished after)"), &busy);
        println!("the backlog's tasks completed while that figure was taken: {rate:.0}/s");
        while completed(&db, loader).await? < backlog as u64 {
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        let idle = measure(&server, &probe, samples).await?;
        report("idle (the backlog done)", &idle);
        println!("load average: {}", std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim());
        Ok(())
    }))
}

/// `tasks` queued tasks of a tenant of their own (research mode, over one document),
/// created through the lifecycle by 16 creators; returns their space.
async fn seed_backlog(db: &TestDb, tasks: usize) -> anyhow::Result<uuid::Uuid> {
    let space = fixtures::space(db).await?;
    let owner = fixtures::member(db, &space, "loader", entity::MemberRole::Owner).await?;
    fixtures::document(
        db,
        &owner,
        "Leases",
        "A lease is a time-bounded claim on a job; fencing tokens stop stale workers.",
    )
    .await?;
    let grant = fixtures::member_grant(&owner, AccessChannel::Interactive);
    let notifier = Notifier::new();
    let creates = futures_util::stream::iter(0..tasks).map(|index| {
        let query = format!("How do leases and fencing work? {index}");
        let input = NewTask { mode: Some(ResearchMode::Research), ..fixtures::new_task(grant.clone(), &query) };
        let notifier = &notifier;
        async move { create(&db.db, notifier, input, entity::now_millis()).await.map(|_| ()) }
    });
    creates.buffer_unordered(16).try_collect::<Vec<()>>().await?;
    Ok(space.id)
}

/// A tenant with a space holding one document.
struct Caller {
    client: GraphqlClient,
    token: String,
    space: String,
}

impl Caller {
    async fn new(server: &ApiProcess, name: &str) -> anyhow::Result<Self> {
        let tenant = format!("{name}-{}", uuid::Uuid::new_v4().simple());
        let token = TestServer::token(name, &tenant);
        let client = GraphqlClient::new(server.graphql_url(), token.clone());
        let space =
            client.run("mutation { createKnowledgeSpace(input: { name: \"Latency\" }) { id } }", json!({})).await?;
        let space = space["createKnowledgeSpace"]["id"].as_str().context("no space")?.to_owned();
        let document = json!({ "knowledgeSpaceId": space, "title": "Leases", "content": "A lease is a time-bounded claim on a job; fencing tokens stop stale workers." });
        client
            .run(
                "mutation($input: AddKnowledgeDocumentInput!) { addKnowledgeDocument(input: $input) { id } }",
                json!({ "input": document }),
            )
            .await?;
        Ok(Self { client, token, space })
    }
}

/// `samples` create → first-worker-event times, one task at a time.
async fn measure(server: &ApiProcess, caller: &Caller, samples: usize) -> anyhow::Result<Vec<Duration>> {
    let mut socket = WsClient::connect_and_init(&server.ws_url(), Some(&caller.token)).await?;
    let mut times = Vec::with_capacity(samples);
    for index in 0..samples {
        let started = Instant::now();
        let input = json!({ "knowledgeSpaceId": caller.space, "query": "What is a lease?", "mode": "FAST" });
        let created = caller.client.run(CREATE, json!({ "input": input })).await?;
        let task = created["createResearchTask"]["id"].as_str().context("no task id")?.to_owned();
        let id = format!("probe-{index}");
        socket.subscribe(&id, PROGRESS, json!({ "task": task })).await?;
        loop {
            match tokio::time::timeout(Duration::from_secs(60), socket.next_event()).await?? {
                Event::Next(from, _) if from == id => break,
                Event::Next(..) | Event::Complete(_) => continue,
                other => anyhow::bail!("waiting for the first event: {other:?}"),
            }
        }
        times.push(started.elapsed());
        socket.complete(&id).await?;
    }
    times.sort();
    Ok(times)
}

/// The space's completed tasks.
async fn completed(db: &TestDb, space: uuid::Uuid) -> anyhow::Result<u64> {
    let done = job::Entity::find()
        .filter(job::Column::KnowledgeSpaceId.eq(space))
        .filter(job::Column::Stage.eq(entity::Stage::Completed));
    Ok(done.count(&db.db).await?)
}

fn report(what: &str, sorted: &[Duration]) {
    let at = |p: f64| {
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        sorted.get(rank.clamp(1, sorted.len().max(1)) - 1).copied().unwrap_or_default()
    };
    println!("create -> first progress event, {what}: p50 {:.1} ms, p99 {:.1} ms", ms(at(50.0)), ms(at(99.0)));
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}
