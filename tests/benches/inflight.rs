//! Thousands of tasks in flight: one worker runtime on PostgreSQL with an engine whose
//! four stages each wait `KFS_BENCH_STAGE_MS` (10,000) of pure waiting, a stand-in for a
//! language model call, and `KFS_BENCH_INFLIGHT` (5,000) tasks allowed at once. Prints the
//! tasks in flight, the completion rate against the ideal (in flight ÷ total stage time),
//! the database statements per second (`db_statements_total`), the memory per task in
//! flight, and the p99 lateness of lease renewals (how far a running task's lease fell
//! behind where on-time beats keep it).
//!
//! `KFS_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/postgres cargo bench -p
//! workspace-tests --bench inflight`; `KFS_BENCH_SECONDS` (40) is the measured window,
//! after a warm-up of two tasks' durations: the first flight is claimed in a burst and
//! completes in one, so only after it has the flight reached its steady state.
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use entity::{AccessChannel, MemberRole, Stage, research_task_job as job};
use kfs_tests::{Backend, TestConfig, TestDb, fixtures};
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QuerySelect};
use worker::lifecycle::{NewTask, create};
use worker::research::engine::{
    Answer, CostReport, EngineError, Passage, Plan, ResearchEngine, Retrieval, StageContext, Staged, async_trait,
};
use worker::runtime::{CancellationToken, TaskTracker};
use worker::{Notifier, WorkerSettings};

fn main() -> ExitCode {
    kfs_tests::bench::main("inflight", run)
}

/// Every stage waits, then answers the least that lets the next one run.
struct Waiting {
    stage: Duration,
}

impl Waiting {
    async fn wait(&self, ctx: &StageContext<'_>) -> Result<(), EngineError> {
        tokio::select! {
            () = tokio::time::sleep(self.stage) => Ok(()),
            () = ctx.cancel.cancelled() => Err(EngineError::Transient("canceled".into())),
        }
    }
}

#[async_trait]
impl ResearchEngine for Waiting {
    async fn plan(&self, ctx: &StageContext<'_>) -> Result<Staged<Plan>, EngineError> {
        self.wait(ctx).await?;
        let plan = Plan { mode: entity::ResearchMode::Fast, sub_queries: vec![ctx.job.query.clone()] };
        Ok(Staged::new(plan, CostReport::default()))
    }
    async fn retrieve(&self, ctx: &StageContext<'_>, _: &Plan) -> Result<Staged<Vec<Retrieval>>, EngineError> {
        self.wait(ctx).await?;
        Ok(Staged::new(Vec::new(), CostReport::default()))
    }
    async fn analyze(&self, ctx: &StageContext<'_>, _: &[Retrieval]) -> Result<Staged<Vec<Passage>>, EngineError> {
        self.wait(ctx).await?;
        Ok(Staged::new(Vec::new(), CostReport::default()))
    }
    async fn generate(&self, ctx: &StageContext<'_>, _: &[Passage]) -> Result<Staged<Answer>, EngineError> {
        self.wait(ctx).await?;
        let answer = Answer { text: "Waited for the model.".to_owned(), evidence: Vec::new(), citations: Vec::new() };
        Ok(Staged::new(answer, CostReport::default()))
    }
}

fn run() -> anyhow::Result<()> {
    let config = TestConfig::from_env();
    if config.postgres_url.is_none() {
        println!("inflight: skipped, KFS_TEST_POSTGRES_URL is not set (the figures are PostgreSQL's)");
        return Ok(());
    }
    let stage = Duration::from_millis(kfs_tests::bench::env_number("KFS_BENCH_STAGE_MS", 10_000)?);
    let in_flight = usize::try_from(kfs_tests::bench::env_number("KFS_BENCH_INFLIGHT", 5_000)?)?;
    let window = Duration::from_secs(kfs_tests::bench::env_number("KFS_BENCH_SECONDS", 40)?);
    worker::observe::install();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    runtime.block_on(TestDb::run(Backend::Postgres, &config, |db| async move {
        // Enough tasks that the queue never runs dry: one full flight, plus what the
        // warm-up and the window complete at the ideal rate, plus slack.
        let task_time = stage * 4;
        let ideal = in_flight as f64 / task_time.as_secs_f64();
        let warm_up = task_time * 2;
        let total = in_flight + (ideal * (warm_up + window).as_secs_f64() * 1.2) as usize;
        let seeding = Instant::now();
        seed(&db, total).await?;
        println!(
            "{total} tasks seeded in {:.1} s; stage wait {stage:?} x 4, at most {in_flight} in flight, ideal {ideal:.1} tasks/s",
            seeding.elapsed().as_secs_f64()
        );
        let settings = WorkerSettings {
            worker_id: "inflight".to_owned(),
            max_concurrency: in_flight,
            batch_size: 500,
            poll_interval_ms: 200,
            ..WorkerSettings::default()
        };
        let (lease_ms, heartbeat_ms) = (settings.lease_ms, settings.heartbeat_ms as i64);
        let rss_before = rss_kib()?;
        let shutdown = CancellationToken::new();
        let tracker = TaskTracker::new();
        let pool = worker::db::connect(&db.url).await?;
        let engine: Arc<dyn ResearchEngine> = Arc::new(Waiting { stage });
        worker::runtime::spawn_with_engine(pool.clone(), Notifier::new(), settings, engine, shutdown.clone(), &tracker);
        let started = Instant::now();
        tokio::time::sleep(warm_up).await;
        let completed_before = completed(&db).await?;
        let statements_before = statements();
        let window_started = Instant::now();
        let (mut flights, mut lateness, mut rss_peak) = (Vec::new(), Vec::new(), rss_before);
        while window_started.elapsed() < window {
            tokio::time::sleep(Duration::from_secs(1)).await;
            let now = entity::now_millis();
            let leases: Vec<Option<i64>> = job::Entity::find()
                .select_only()
                .column(job::Column::LeaseExpiresAt)
                .filter(job::Column::Stage.is_in([Stage::Planning, Stage::Retrieving, Stage::Analyzing, Stage::Generating]))
                .into_tuple()
                .all(&db.db)
                .await?;
            flights.push(leases.len());
            // On-time beats keep every lease at least `lease - heartbeat` ahead of now.
            lateness.extend(leases.iter().flatten().map(|expires| (lease_ms - heartbeat_ms - (expires - now)).max(0)));
            rss_peak = rss_peak.max(rss_kib()?);
        }
        let seconds = window_started.elapsed().as_secs_f64();
        let done = completed(&db).await? - completed_before;
        let per_second = (statements() - statements_before) / seconds;
        shutdown.cancel();
        tracker.close();
        tracker.wait().await;
        pool.close().await?;
        lateness.sort_unstable();
        let p99 = lateness.get(lateness.len().saturating_sub(1).min(lateness.len() * 99 / 100)).copied().unwrap_or(0);
        let mean_flight = flights.iter().sum::<usize>() as f64 / flights.len().max(1) as f64;
        let rate = done as f64 / seconds;
        println!("warm-up {:.0} s, window {seconds:.0} s", (window_started - started).as_secs_f64());
        println!("in flight (mean of 1 s samples): {mean_flight:.0}, min {}", flights.iter().min().copied().unwrap_or(0));
        let series: Vec<String> = flights.iter().map(usize::to_string).collect();
        println!("in flight, each second of the window: {}", series.join(" "));
        println!("completed: {rate:.1} tasks/s = {:.2} of the ideal {:.1} for that flight", rate / (mean_flight / task_time.as_secs_f64()), mean_flight / task_time.as_secs_f64());
        println!("database statements: {per_second:.0}/s ({:.1} per task)", per_second / rate.max(f64::MIN_POSITIVE));
        println!(
            "memory: {} KiB more resident at peak, {:.1} KiB per task in flight",
            rss_peak.saturating_sub(rss_before),
            rss_peak.saturating_sub(rss_before) as f64 / mean_flight.max(1.0)
        );
        println!("lease renewal lateness p99: {p99} ms (heartbeat every {heartbeat_ms} ms, lease {lease_ms} ms)");
        println!("{}", kfs_tests::bench::postgres_conditions(&db.db).await?);
        println!("load average: {}", std::fs::read_to_string("/proc/loadavg").unwrap_or_default().trim());
        Ok(())
    }))
}

async fn seed(db: &TestDb, total: usize) -> anyhow::Result<()> {
    let space = fixtures::space(db).await?;
    let owner = fixtures::member(db, &space, "owner", MemberRole::Owner).await?;
    let notifier = Notifier::new();
    for index in 0..total {
        let input = NewTask {
            mode: Some(entity::ResearchMode::Fast),
            ..fixtures::new_task(
                fixtures::member_grant(&owner, AccessChannel::Interactive),
                &format!("Question {index}?"),
            )
        };
        create(&db.db, &notifier, input, entity::now_millis()).await?;
    }
    Ok(())
}

async fn completed(db: &TestDb) -> anyhow::Result<u64> {
    Ok(job::Entity::find().filter(job::Column::Stage.eq(Stage::Completed)).count(&db.db).await?)
}

fn statements() -> f64 {
    worker::observe::render()
        .lines()
        .find_map(|line| line.strip_prefix("db_statements_total ")?.trim().parse().ok())
        .unwrap_or(0.0)
}

fn rss_kib() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|line| line.strip_prefix("VmRSS:")?.trim().trim_end_matches("kB").trim().parse().ok())
        .context("no VmRSS")
}
