//! Throughput of the built-in engine: how many research tasks per second one and two
//! worker runtimes finish on a small corpus, on SQLite and on PostgreSQL. On PostgreSQL it
//! also prints the transactions the database committed per task, the stage boundaries
//! (checkpoints and completions) committed per second, and that rate as a ratio of
//! `pgbench -N` TPS on the same database with as many clients as the workers' pools
//! (needs `pgbench` on the PATH).
//!
//! Run it with `cargo bench -p workspace-tests --bench throughput`; the PostgreSQL rows need
//! `KFS_TEST_POSTGRES_URL` (an admin URL, as for the tests) and are skipped without it.
//! Each configuration gets a fresh database (a temporary SQLite file, or a PostgreSQL
//! database created and dropped here), [`TASKS`] queued tasks created through
//! `worker::lifecycle::create`, and then its workers, each with its own pool and
//! `worker_id` as separate processes would have. The clock runs from starting the
//! workers until the last task completed.
//!
//! `KFS_BENCH_TASKS` changes the number of tasks per row, `KFS_BENCH_MAX_CONCURRENCY` each
//! worker's `max_concurrency`, and `KFS_BENCH_ONLY=postgres:1` measures that row alone. `KFS_BENCH_OPS_SCREENSHOT=<png>`
//! also serves the API on the first PostgreSQL single-worker row's database (the SQLite
//! one without PostgreSQL) and saves a screenshot of its `/ops` page, taken in headless
//! Chromium six seconds into the run: give that row enough tasks to last longer.
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use entity::{
    AccessChannel, MemberRole, ResearchMode, Stage, research_task_job as job, research_task_progress_event as progress,
};
use kfs_tests::{Backend, TestConfig, TestDb, fixtures};
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter, QuerySelect};
use uuid::Uuid;
use worker::lifecycle::{NewTask, create};
use worker::runtime::{CancellationToken, TaskTracker};
use worker::{Notifier, WorkerSettings};

/// Tasks per configuration unless `KFS_BENCH_TASKS` says otherwise: enough that start-up
/// (the pools' first connections, the first claims) is noise at a thousand tasks a
/// second, few enough that the four configurations finish in about a minute.
const TASKS: usize = 3_000;

/// When the screenshot of `/ops` is taken, after the page went live: three snapshots in.
const SCREENSHOT_AFTER_MS: u64 = 6_000;

/// The configurations measured: backend and number of worker runtimes.
const CONFIGURATIONS: [(Backend, usize); 4] =
    [(Backend::Sqlite, 1), (Backend::Sqlite, 2), (Backend::Postgres, 1), (Backend::Postgres, 2)];

/// A configuration still running after this has hung; the bench fails instead of waiting.
const DEADLINE: Duration = Duration::from_secs(600);

/// The corpus: twenty short documents, some on the questions' topics and some not, so
/// full-text search has something to rank.
const DOCUMENTS: [(&str, &str); 20] = [
    ("Leases", "A lease is a time-bounded claim on a job; a worker renews it with heartbeats while a stage runs."),
    ("Fencing tokens", "Every write carries the lease token, so a stale worker whose lease expired writes nothing."),
    ("Crash recovery", "When a worker dies its lease expires and another worker claims the job again."),
    ("Checkpoints", "A stage boundary commits the new stage, its progress event and its partial results at once."),
    (
        "Idempotency keys",
        "Progress events and partial results are idempotent on their key; a re-run writes nothing twice.",
    ),
    (
        "Retry backoff",
        "Failed attempts are retried with exponential backoff and jitter so workers do not retry together.",
    ),
    ("Transactional outbox", "A delivery to the queue is an outbox row written in the job's own transaction."),
    ("LISTEN and NOTIFY", "PostgreSQL notifications wake workers up; polling keeps them correct when one is lost."),
    ("SKIP LOCKED", "FOR UPDATE SKIP LOCKED lets many workers claim different rows without waiting on each other."),
    ("Write-ahead logging", "SQLite in WAL mode lets readers continue while one writer commits."),
    ("Busy timeout", "A busy timeout makes a SQLite writer wait for the lock instead of failing at once."),
    ("Full-text search", "PostgreSQL ranks documents with tsvector and tsquery; SQLite uses the FTS5 extension."),
    ("Permission snapshots", "A task runs under the grant issued when it was created, re-checked at every stage."),
    ("Budgets", "Each stage reports what it cost; passing the budget stops the task with a clear error."),
    ("Tides", "Tides are caused by the gravitational pull of the moon and the sun on the oceans."),
    ("Photosynthesis", "Plants turn light, water and carbon dioxide into sugar and oxygen."),
    ("Gardening", "Tomatoes need sun and regular watering; basil grows well beside them."),
    ("Volcanoes", "Magma rises through the crust and erupts as lava, ash and gas."),
    ("Bread", "Yeast ferments sugars in dough, and the gas it releases makes bread rise."),
    ("Bees", "Bees carry pollen between flowers while they collect nectar for honey."),
];

/// The questions the tasks ask, in turn.
const QUESTIONS: [&str; 5] = [
    "What happens to a lease when a worker dies, and how does fencing stop it?",
    "How do idempotency keys and checkpoints prevent duplicate results after a crash?",
    "How do SKIP LOCKED and LISTEN NOTIFY help many workers share a queue?",
    "Why does SQLite need WAL mode and a busy timeout with concurrent writers?",
    "What causes tides and why do bees carry pollen?",
];

/// One measured configuration.
struct Figure {
    backend: Backend,
    workers: usize,
    elapsed: Duration,
    /// PostgreSQL only: transactions the database committed during the run (every
    /// statement outside a transaction counts as one), and `pgbench -N`'s TPS on the same
    /// database with as many clients as the workers' pools hold.
    postgres: Option<(u64, f64)>,
    /// Stage boundaries committed (`stage_changed` events: three checkpoints and the
    /// completion per task).
    checkpoints: u64,
}

/// Connections in one worker's PostgreSQL pool (`worker::db::connect`).
const POOL: usize = 16;

fn main() -> ExitCode {
    // `cargo bench` passes `--bench`; anything else (`cargo test --all-targets`) only
    // checks that the bench builds, instead of spending a minute measuring.
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("throughput: run it with `cargo bench -p workspace-tests --bench throughput`");
        return ExitCode::SUCCESS;
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("throughput: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    let config = TestConfig::from_env();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("building the runtime")?;
    let defaults = WorkerSettings {
        max_concurrency: usize::try_from(kfs_tests::bench::env_number(
            "KFS_BENCH_MAX_CONCURRENCY",
            WorkerSettings::default().max_concurrency as u64,
        )?)?,
        ..WorkerSettings::default()
    };
    let tasks = match std::env::var("KFS_BENCH_TASKS") {
        Ok(value) => value.parse().context("KFS_BENCH_TASKS must be a count")?,
        Err(_) => TASKS,
    };
    let mut screenshot = std::env::var_os("KFS_BENCH_OPS_SCREENSHOT").map(PathBuf::from);
    let screenshot_backend = if config.postgres_url.is_some() { Backend::Postgres } else { Backend::Sqlite };
    // The figures mean little without the machine: workers, database and this process
    // share its cores.
    let cpus = std::thread::available_parallelism().map_or(1, usize::from);
    println!(
        "{tasks} tasks per row, {} documents, mode RESEARCH, top_k 5, {cpus} CPUs; \
         each worker: max_concurrency {}, batch_size {}",
        DOCUMENTS.len(),
        defaults.max_concurrency,
        defaults.batch_size
    );
    println!(
        "{:<10} {:>7} {:>9} {:>9} {:>10} {:>14} {:>12} {:>6}",
        "backend", "workers", "seconds", "tasks/s", "txn/task", "checkpoints/s", "pgbench -N", "ratio"
    );
    // `KFS_BENCH_ONLY=postgres:1` measures one row (for profiling).
    let only = std::env::var("KFS_BENCH_ONLY").ok();
    for (backend, workers) in CONFIGURATIONS {
        if only.as_ref().is_some_and(|only| *only != format!("{}:{workers}", backend.name())) {
            continue;
        }
        if backend == Backend::Postgres && config.postgres_url.is_none() {
            println!("{:<10} {workers:>7}   skipped: KFS_TEST_POSTGRES_URL is not set", backend.name());
            continue;
        }
        let (mut figure, mut conditions) = (None, None);
        let (slot, shown) = (&mut figure, &mut conditions);
        let shoot = if backend == screenshot_backend && workers == 1 { screenshot.take() } else { None };
        runtime.block_on(TestDb::run(backend, &config, |db| async move {
            *slot = Some(measure(&db, workers, tasks, defaults.max_concurrency, shoot).await?);
            if backend == Backend::Postgres {
                *shown = Some(kfs_tests::bench::postgres_conditions(&db.db).await?);
            }
            Ok(())
        }))?;
        let figure = figure.context("the measurement left no figure")?;
        let seconds = figure.elapsed.as_secs_f64();
        let per_second = figure.checkpoints as f64 / seconds;
        let (per_task, pgbench, ratio) = match figure.postgres {
            Some((commits, tps)) => (
                format!("{:.1}", commits as f64 / tasks as f64),
                format!("{tps:.0}"),
                format!("{:.2}", per_second / tps),
            ),
            None => ("-".to_owned(), "-".to_owned(), "-".to_owned()),
        };
        println!(
            "{:<10} {:>7} {seconds:>9.2} {:>9.1} {per_task:>10} {per_second:>14.0} {pgbench:>12} {ratio:>6}",
            figure.backend.name(),
            figure.workers,
            tasks as f64 / seconds
        );
        if let Some(conditions) = conditions {
            println!("{:<10} {:>7}   {conditions}", "", "");
        }
    }
    Ok(())
}

/// Seeds the corpus and the tasks, then times `workers` runtimes until every task completed;
/// with `screenshot`, the operations page is photographed there during the run.
async fn measure(
    db: &TestDb,
    workers: usize,
    tasks: usize,
    max_concurrency: usize,
    screenshot: Option<PathBuf>,
) -> anyhow::Result<Figure> {
    let space = seed(db, tasks).await?;
    let commits_before = committed(db).await?;
    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    let mut pools = Vec::with_capacity(workers);
    for _ in 0..workers {
        // A pool each, as separate processes would have: they then contend for the
        // database exactly as production replicas do.
        pools.push(worker::db::connect(&db.url).await.context("connecting a worker")?);
    }
    let started = Instant::now();
    // The same moment on the clock `completed_at` is stamped with.
    let started_at = entity::now_millis();
    for (index, pool) in pools.iter().enumerate() {
        let settings =
            WorkerSettings { worker_id: format!("bench-{}", index + 1), max_concurrency, ..WorkerSettings::default() };
        worker::runtime::spawn(pool.clone(), Notifier::new(), settings, shutdown.clone(), &tracker)?;
    }
    let elapsed = match screenshot {
        None => wait_for_all(db, space, tasks, started, started_at).await,
        Some(path) => {
            let (outcome, shot) =
                tokio::join!(wait_for_all(db, space, tasks, started, started_at), ops_screenshot(db, &path));
            let shot = shot.context("taking the /ops screenshot")?;
            println!("/ops screenshot during this run: {shot}");
            outcome
        }
    };
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
    for pool in pools {
        pool.close().await.context("closing a worker pool")?;
    }
    let elapsed = elapsed?;
    let checkpoints = progress::Entity::find()
        .filter(progress::Column::KnowledgeSpaceId.eq(space))
        .filter(progress::Column::EventType.eq(entity::ProgressEventType::StageChanged))
        .count(&db.db)
        .await?;
    let postgres = match (commits_before, committed(db).await?) {
        (Some(before), Some(after)) => {
            let pgbench_time = Duration::from_secs(8);
            let tps =
                kfs_tests::bench::pgbench(&db.url, kfs_tests::bench::Pgbench::Write, POOL * workers, pgbench_time)
                    .await?;
            Some((after.saturating_sub(before), tps))
        }
        _ => None,
    };
    Ok(Figure { backend: db.backend, workers, elapsed, postgres, checkpoints })
}

/// Polls until every task of the space completed; fails on a task that ended otherwise,
/// or at [`DEADLINE`]. Returns when the last task completed, by its `completed_at`, so the
/// poll interval adds no error; it is long enough that the bench's own counting of a
/// large backlog stays a small share of the database's work.
async fn wait_for_all(
    db: &TestDb,
    space: Uuid,
    tasks: usize,
    started: Instant,
    started_at: i64,
) -> anyhow::Result<Duration> {
    loop {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let in_space = job::Entity::find().filter(job::Column::KnowledgeSpaceId.eq(space));
        let completed = in_space.clone().filter(job::Column::Stage.eq(Stage::Completed)).count(&db.db).await?;
        if completed == tasks as u64 {
            let last: Option<Option<i64>> = in_space
                .select_only()
                .column_as(job::Column::CompletedAt.max(), "last")
                .into_tuple()
                .one(&db.db)
                .await?;
            let last = last.flatten().context("completed tasks without completed_at")?;
            return Ok(Duration::from_millis(u64::try_from(last - started_at).unwrap_or(0)));
        }
        let ended_badly =
            in_space.filter(job::Column::Stage.is_in([Stage::Failed, Stage::Canceled])).one(&db.db).await?;
        if let Some(task) = ended_badly {
            anyhow::bail!("task {} ended {:?}: {:?}", task.id, task.stage, task.error);
        }
        anyhow::ensure!(
            started.elapsed() < DEADLINE,
            "only {completed} of {tasks} tasks completed within {DEADLINE:?}"
        );
    }
}

/// PostgreSQL's count of transactions committed in this database so far (`None` on
/// SQLite). The workers' sessions report theirs when they end, so read after closing
/// their pools.
async fn committed(db: &TestDb) -> anyhow::Result<Option<u64>> {
    use sea_orm::{ConnectionTrait, Statement};
    if db.backend != Backend::Postgres {
        return Ok(None);
    }
    let backend = db.db.get_database_backend();
    // Sessions flush their counts at most once a second; give the closed ones that long.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    db.db.execute_raw(Statement::from_string(backend, "SELECT pg_stat_clear_snapshot()")).await?;
    let sql = "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()";
    let row = db.db.query_one_raw(Statement::from_string(backend, sql)).await?.context("no pg_stat_database row")?;
    Ok(Some(u64::try_from(row.try_get_by_index::<i64>(0)?)?))
}

/// A space with an owner, [`DOCUMENTS`] and `tasks` queued tasks; returns the space.
async fn seed(db: &TestDb, tasks: usize) -> anyhow::Result<Uuid> {
    let space = fixtures::space(db).await?;
    let owner = fixtures::member(db, &space, "owner", MemberRole::Owner).await?;
    for (title, content) in DOCUMENTS {
        fixtures::document(db, &owner, title, content).await?;
    }
    let notifier = Notifier::new();
    for index in 0..tasks {
        let asked = fixtures::new_task(
            fixtures::member_grant(&owner, AccessChannel::Interactive),
            QUESTIONS[index % QUESTIONS.len()],
        );
        let input = NewTask { mode: Some(ResearchMode::Research), ..asked };
        create(&db.db, &notifier, input, entity::now_millis()).await.context("creating a task")?;
    }
    Ok(space.id)
}

/// Serves the API (no worker of its own) on the bench's database with `bench-operator` as
/// its operator, and saves a screenshot of `/ops` at `path` from headless Chromium;
/// returns the path. Needs Node.js and `npm ci --prefix tests` (the tests install it).
async fn ops_screenshot(db: &TestDb, path: &std::path::Path) -> anyhow::Result<String> {
    let server = kfs_tests::server::TestServer::start_with(&db.url, |settings| {
        settings.operator_subjects = vec!["bench-operator".to_owned()];
    })
    .await?;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("node/ops-screenshot.mjs");
    let output = tokio::process::Command::new("node")
        .arg(script)
        .arg(server.server.base_url())
        .arg(kfs_tests::server::TestServer::token("bench-operator", "any-tenant"))
        .arg(path)
        .arg(SCREENSHOT_AFTER_MS.to_string())
        .env("KFS_CHROMIUM", kfs_tests::harness::chromium())
        .output()
        .await
        .context("running node (is Node.js installed?)")?;
    server.stop().await;
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: serde_json::Value =
        stdout.lines().rev().find_map(|line| serde_json::from_str(line).ok()).with_context(|| {
            format!("no report from the script: {stdout}{}", String::from_utf8_lossy(&output.stderr))
        })?;
    anyhow::ensure!(report["ok"] == true, "the screenshot failed: {report}");
    Ok(path.display().to_string())
}
