//! Subscription benchmark (issue 5): what an idle subscribed WebSocket costs the server,
//! and how long a committed progress event takes to reach 1,000 subscribers under load.
//!
//! `cargo bench -p workspace-tests --bench subscriptions`. The server is the `api` binary in a
//! process of its own (built first with this bench's profile, `release`), with the
//! embedded worker off so the tasks stay where the bench puts them, on a fresh SQLite
//! file and, when `KFS_TEST_POSTGRES_URL` is set, on a fresh PostgreSQL database too.
//! Optional: `KFS_BENCH_RATE` (commits per second, default 50) and `KFS_BENCH_SECONDS`
//! (default 10) for the latency run.
mod client;
mod latency;
mod memory;
mod server;
mod tasks;

use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use kfs_tests::{Backend, TestConfig, TestDb};

use latency::{Load, percentile};

/// File descriptors the bench and the server each need: one per connection and some.
const NOFILE: u64 = 20_000;

fn main() -> ExitCode {
    // `cargo test --benches` runs bench binaries without `--bench`: do nothing there, so
    // the bench never runs as part of a test suite.
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("subscriptions: a benchmark; run it with `cargo bench -p workspace-tests --bench subscriptions`");
        return ExitCode::SUCCESS;
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("subscriptions bench failed: {error:#}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> anyhow::Result<()> {
    // The server inherits the raised limit: it holds one descriptor per connection too.
    let nofile = rlimit::increase_nofile_limit(NOFILE).context("raising RLIMIT_NOFILE")?;
    let needed = memory::STEPS.iter().max().copied().unwrap_or_default() as u64 + 500;
    anyhow::ensure!(
        nofile >= needed,
        "RLIMIT_NOFILE is {nofile}, the bench needs {needed}: raise the hard limit (ulimit -Hn)"
    );
    let (binary, build) = server::build_api()?;
    let load = Load {
        subscribers: 1_000,
        tasks: 20,
        rate: env_number("KFS_BENCH_RATE", 50)?,
        duration: Duration::from_secs(env_number("KFS_BENCH_SECONDS", 10)?.into()),
    };
    let config = TestConfig::from_env();
    let mut backends = vec![Backend::Sqlite];
    if config.postgres_url.is_some() {
        backends.push(Backend::Postgres);
    } else {
        println!("PostgreSQL skipped: KFS_TEST_POSTGRES_URL is not set");
    }
    println!("server: {} ({build}), embedded worker off, RLIMIT_NOFILE {nofile}", binary.display());
    let started = std::time::Instant::now();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    let binary = &binary;
    for backend in backends {
        runtime.block_on(TestDb::run(backend, &config, |db| async move {
            println!("\n== {} ==", backend.name());
            let report = memory::measure(binary, &db.url).await?;
            print_memory(&report);
            let committer_db = (backend == Backend::Postgres).then(|| db.db.clone());
            let report = latency::measure(binary, &db.url, committer_db, load).await?;
            print_latency(&report, load);
            Ok(())
        }))?;
    }
    let ends = client::UNEXPECTED_ENDS.load(std::sync::atomic::Ordering::Relaxed);
    anyhow::ensure!(ends == 0, "{ends} subscriber connections ended while the bench still followed them");
    println!("\nfinished in {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

fn print_memory(report: &memory::MemoryReport) {
    println!(
        "idle subscribed connections (1 KB = 1,000 bytes): server RSS before {} KiB (anonymous {} KiB)",
        report.base.rss_kib, report.base.anon_kib
    );
    let mut previous = (0, report.base);
    for (index, step) in report.steps.iter().enumerate() {
        let (rss, anon) = report.per_connection(index).unwrap_or_default();
        let added = step.connections - previous.0;
        // The step's own connections alone, without the fixed costs the first step pays
        // (database pool connections opened by the burst, allocator arenas).
        let marginal = step.memory.rss_kib.saturating_sub(previous.1.rss_kib) as f64 * 1024.0 / added as f64;
        println!(
            "  {:>5} connections: RSS {} KiB (+{} KiB) -> {:.1} KB per connection (anonymous {:.1} KB; this step's {added} alone {:.1} KB each, opened in {:.1} s)",
            step.connections,
            step.memory.rss_kib,
            step.memory.rss_kib.saturating_sub(report.base.rss_kib),
            rss / 1000.0,
            anon / 1000.0,
            marginal / 1000.0,
            step.opened_in.as_secs_f64(),
        );
        previous = (step.connections, step.memory);
    }
}

fn print_latency(report: &latency::LatencyReport, load: Load) {
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let deliveries = &report.deliveries;
    println!(
        "delivery latency, commit -> client: {} subscribers over {} tasks, {} commits/s for {:?}; commits by {}",
        load.subscribers, load.tasks, load.rate, load.duration, report.path
    );
    println!("  machine load average (1 min) when commits began: {}", report.load_average);
    println!(
        "  deliveries {} of {} expected ({} commits, {} failed)",
        deliveries.len(),
        report.expected,
        report.commits.len(),
        report.failed_commits
    );
    println!(
        "  p50 {:.1} ms   p99 {:.1} ms   max {:.1} ms",
        ms(percentile(deliveries, 50.0)),
        ms(percentile(deliveries, 99.0)),
        ms(deliveries.last().copied().unwrap_or_default())
    );
    println!(
        "  the commit call itself: p50 {:.1} ms   p99 {:.1} ms",
        ms(percentile(&report.commits, 50.0)),
        ms(percentile(&report.commits, 99.0))
    );
}

/// A positive number from the environment, or `default`.
fn env_number(name: &str, default: u32) -> anyhow::Result<u32> {
    match std::env::var(name) {
        Ok(value) => value
            .trim()
            .parse::<u32>()
            .ok()
            .filter(|n| *n > 0)
            .with_context(|| format!("{name} must be a positive number")),
        Err(_) => Ok(default),
    }
}
