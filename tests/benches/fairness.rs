//! Sharing workers between tenants, measured: (1) what one fair claim costs with 100,000
//! tasks queued (the claim walks the pairs with unfinished work, never the backlog), and
//! (2) a second tenant's create→COMPLETED latency while a first tenant's 5,000 tasks are
//! queued ahead of it, against the same tenant on an idle service; and (3) another tenant's
//! read latency while one principal floods the API past its rate limit.
//!
//! Run it with `cargo bench -p workspace-tests --bench fairness`; the PostgreSQL rows need
//! `KFS_TEST_POSTGRES_URL` and are skipped without it. Latencies come from the rows
//! themselves (`completed_at - created_at`, both stamped by the lifecycle).
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use entity::{AccessChannel, MemberRole, Stage, research_task_job as job};
use kfs_tests::{Backend, TestConfig, TestDb, fixtures};
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, IntoActiveModel, PaginatorTrait, QueryFilter};
use uuid::Uuid;
use worker::lifecycle::{self, Caps, Claim, Failure, Fairness, RetryPolicy, create};
use worker::runtime::{CancellationToken, TaskTracker};
use worker::{Notifier, WorkerSettings};

/// The backlog the claim cost is measured under.
const BACKLOG: usize = 100_000;
/// Other (tenant, space) pairs with a task each, so the walk has pairs to visit.
const OTHER_PAIRS: usize = 50;
/// Claims timed.
const CLAIMS: usize = 200;
/// The flood, and the quiet tenant's tasks created while it waits.
const FLOOD: usize = 5_000;
const QUIET_TASKS: usize = 20;
/// The quiet tenant creates one task this often.
const QUIET_EVERY: Duration = Duration::from_millis(500);

fn main() -> ExitCode {
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("fairness: run it with `cargo bench -p workspace-tests --bench fairness`");
        return ExitCode::SUCCESS;
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("fairness: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let config = TestConfig::from_env();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("building the runtime")?;
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("load average at start: {}", load.split_whitespace().take(3).collect::<Vec<_>>().join(" "));
    for backend in [Backend::Sqlite, Backend::Postgres] {
        if backend == Backend::Postgres && config.postgres_url.is_none() {
            println!("{}: skipped (KFS_TEST_POSTGRES_URL is not set)", backend.name());
            continue;
        }
        runtime.block_on(TestDb::run(backend, &config, |db| async move { claim_cost(&db).await }))?;
        runtime.block_on(TestDb::run(backend, &config, |db| async move { latency(&db, false).await }))?;
        runtime.block_on(TestDb::run(backend, &config, |db| async move { latency(&db, true).await }))?;
        runtime.block_on(TestDb::run(backend, &config, |db| async move { flooded_reads(&db).await }))?;
    }
    Ok(())
}

/// `count` queued copies of `template` (new ids, ages one millisecond apart), inserted in
/// batches: a backlog as a flood of creates would leave it, without timing the creates.
async fn copies(db: &TestDb, template: &job::Model, count: usize) -> anyhow::Result<()> {
    const BATCH: usize = 500;
    let mut made = 0;
    while made < count {
        let rows: Vec<job::ActiveModel> = (made..(made + BATCH).min(count))
            .map(|index| {
                let mut row = template.clone().into_active_model();
                row.id = Set(Uuid::now_v7());
                row.created_at = Set(template.created_at + index as i64);
                row.updated_at = Set(template.updated_at + index as i64);
                row
            })
            .collect();
        made += rows.len();
        job::Entity::insert_many(rows).exec(&db.db).await?;
    }
    Ok(())
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() as f64 - 1.0) * p).round() as usize]
}

async fn claim_cost(db: &TestDb) -> anyhow::Result<()> {
    let notifier = Notifier::new();
    let space = fixtures::space(db).await?;
    let owner = fixtures::member(db, &space, "flooder", MemberRole::Owner).await?;
    let template = fixtures::job(db, &owner, AccessChannel::ServiceApi).await?;
    copies(db, &template, BACKLOG).await?;
    for _ in 0..OTHER_PAIRS {
        let other = fixtures::space(db).await?;
        let member = fixtures::member(db, &other, "other", MemberRole::Owner).await?;
        let task = fixtures::job(db, &member, AccessChannel::Interactive).await?;
        copies(db, &task, 20).await?;
    }
    let mut fairness = Fairness::default();
    let claim = Claim {
        worker_id: "bench",
        lease_ms: 60_000,
        batch: 1,
        caps: Caps { per_tenant: Some(1_000), per_space: None },
    };
    let mut millis = Vec::with_capacity(CLAIMS);
    for _ in 0..CLAIMS {
        let started = Instant::now();
        let claimed = lifecycle::claim_fairly(&db.db, &notifier, &claim, &mut fairness, entity::now_millis()).await?;
        millis.push(started.elapsed().as_secs_f64() * 1e3);
        let one = claimed.first().context("nothing to claim")?;
        let done = Failure {
            message: "bench".into(),
            retryable: false,
            cost_delta: worker::research::cost::CostDelta::none(),
        };
        lifecycle::fail_attempt(
            &db.db,
            &notifier,
            &one.lease,
            done,
            RetryPolicy { base_ms: 1, cap_ms: 1 },
            entity::now_millis(),
        )
        .await?;
    }
    millis.sort_by(f64::total_cmp);
    println!(
        "{}: one fair claim (with caps) over {BACKLOG} queued tasks in one space and {} other spaces: p50 {:.2} ms, p99 {:.2} ms",
        db.backend.name(),
        OTHER_PAIRS,
        percentile(&millis, 0.5),
        percentile(&millis, 0.99)
    );
    Ok(())
}

async fn latency(db: &TestDb, flooded: bool) -> anyhow::Result<()> {
    let notifier = Notifier::new();
    if flooded {
        let space = fixtures::space(db).await?;
        let owner = fixtures::member(db, &space, "flooder", MemberRole::Owner).await?;
        let template = fixtures::job(db, &owner, AccessChannel::ServiceApi).await?;
        copies(db, &template, FLOOD - 1).await?;
    }
    let quiet_space = fixtures::space(db).await?;
    let quiet = fixtures::member(db, &quiet_space, "quiet", MemberRole::Owner).await?;
    fixtures::document(db, &quiet, "Tides", "Tides are caused by the pull of the moon and the sun on the oceans.")
        .await?;

    let (shutdown, tracker) = (CancellationToken::new(), TaskTracker::new());
    let pool = worker::db::connect(&db.url).await?;
    let settings = WorkerSettings { worker_id: "bench-worker".into(), ..WorkerSettings::default() };
    worker::runtime::spawn(pool.clone(), notifier.clone(), settings, shutdown.clone(), &tracker)?;
    let started = Instant::now();
    for _ in 0..QUIET_TASKS {
        let input =
            fixtures::new_task(fixtures::member_grant(&quiet, AccessChannel::Interactive), "What causes tides?");
        create(&db.db, &notifier, input, entity::now_millis()).await?;
        tokio::time::sleep(QUIET_EVERY).await;
    }
    let in_quiet = || job::Entity::find().filter(job::Column::KnowledgeSpaceId.eq(quiet_space.id));
    loop {
        let done = in_quiet().filter(job::Column::Stage.eq(Stage::Completed)).count(&db.db).await?;
        if done == QUIET_TASKS as u64 {
            break;
        }
        anyhow::ensure!(started.elapsed() < Duration::from_secs(300), "the quiet tenant's tasks did not finish");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let flood_done = if flooded {
        job::Entity::find()
            .filter(job::Column::KnowledgeSpaceId.ne(quiet_space.id))
            .filter(job::Column::Stage.is_in([Stage::Completed, Stage::Failed]))
            .count(&db.db)
            .await?
    } else {
        0
    };
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
    pool.close().await?;
    let mut millis: Vec<f64> = in_quiet()
        .all(&db.db)
        .await?
        .iter()
        .filter_map(|row| Some((row.completed_at? - row.created_at) as f64))
        .collect();
    millis.sort_by(f64::total_cmp);
    let what = if flooded {
        format!("behind a {FLOOD}-task flood ({flood_done} of it done meanwhile)")
    } else {
        "idle".to_owned()
    };
    println!(
        "{}: quiet tenant's {QUIET_TASKS} tasks, create→COMPLETED, {what}: p50 {:.0} ms, p99 {:.0} ms",
        db.backend.name(),
        percentile(&millis, 0.5),
        percentile(&millis, 0.99)
    );
    Ok(())
}

/// Concurrent clients of the flooding principal.
const FLOODERS: usize = 8;
/// How long each read measurement lasts.
const READ_FOR: Duration = Duration::from_secs(4);

/// Another tenant's `viewer` latency, idle and while one principal floods past a 50
/// requests/s limit (its requests answered 429).
async fn flooded_reads(db: &TestDb) -> anyhow::Result<()> {
    let server = kfs_tests::server::TestServer::start_with(&db.url, |settings| {
        settings.rate_requests_per_second = Some(50);
    })
    .await?;
    let url = server.graphql_url();
    let reader = kfs_tests::server::TestServer::token("reader", "quiet-tenant");
    let flooder = kfs_tests::server::TestServer::token("flooder", "busy-tenant");
    let http = reqwest::Client::new();
    let body = serde_json::json!({ "query": "{ viewer { subjectId } }" });
    let read = async |token: &str| -> anyhow::Result<Vec<f64>> {
        let mut millis = Vec::new();
        let until = Instant::now() + READ_FOR;
        while Instant::now() < until {
            let started = Instant::now();
            let status = http.post(&url).bearer_auth(token).json(&body).send().await?.status();
            anyhow::ensure!(status.is_success(), "the reader was refused: {status}");
            millis.push(started.elapsed().as_secs_f64() * 1e3);
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        millis.sort_by(f64::total_cmp);
        Ok(millis)
    };
    let idle = read(&reader).await?;
    let stop = CancellationToken::new();
    let refused = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let mut flood = Vec::new();
    for _ in 0..FLOODERS {
        let (http, url, body, token, stop, refused) =
            (http.clone(), url.clone(), body.clone(), flooder.clone(), stop.clone(), refused.clone());
        flood.push(tokio::spawn(async move {
            while !stop.is_cancelled() {
                if let Ok(response) = http.post(&url).bearer_auth(&token).json(&body).send().await
                    && response.status().as_u16() == 429
                {
                    refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                }
            }
        }));
    }
    let during = read(&reader).await?;
    stop.cancel();
    for task in flood {
        let _ = task.await;
    }
    server.stop().await;
    println!(
        "{}: another tenant's reads, idle p50 {:.2} ms p99 {:.2} ms; while one principal floods ({FLOODERS} clients, {} answered 429): p50 {:.2} ms p99 {:.2} ms",
        db.backend.name(),
        percentile(&idle, 0.5),
        percentile(&idle, 0.99),
        refused.load(std::sync::atomic::Ordering::Relaxed),
        percentile(&during, 0.5),
        percentile(&during, 0.99)
    );
    Ok(())
}
