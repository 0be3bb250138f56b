//! What the bench binaries share: running only under `cargo bench` (which passes
//! `--bench`; `cargo test --all-targets` merely checks they build), reporting a failure
//! as the exit code, numbers from the environment, and `pgbench` as the yardstick.
use std::process::ExitCode;

use anyhow::Context as _;

/// Runs `run` under `cargo bench`, printing how to run it otherwise; its error fails the
/// process with the whole cause chain.
pub fn main(name: &str, run: impl FnOnce() -> anyhow::Result<()>) -> ExitCode {
    if !std::env::args().any(|arg| arg == "--bench") {
        println!("{name}: a benchmark; run it with `cargo bench -p workspace-tests --bench {name}`");
        return ExitCode::SUCCESS;
    }
    match run() {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("{name} bench failed: {error:#}");
            ExitCode::FAILURE
        }
    }
}

/// The number in environment variable `name`, or `default` when it is unset.
pub fn env_number(name: &str, default: u64) -> anyhow::Result<u64> {
    match std::env::var(name) {
        Ok(value) => value.parse().with_context(|| format!("{name} must be a number")),
        Err(_) => Ok(default),
    }
}

/// What `pgbench` runs: `-S` (one primary-key SELECT per transaction) or `-N` (the
/// TPC-B-like write transaction without its contended branch updates).
#[derive(Debug, Clone, Copy)]
pub enum Pgbench {
    /// `pgbench -S`.
    Select,
    /// `pgbench -N`.
    Write,
}

/// `pgbench`'s TPS on the database at `url` (initialised there at scale 1) with
/// `clients` connections for `duration`. Needs `pgbench` on the PATH.
pub async fn pgbench(url: &str, mode: Pgbench, clients: usize, duration: std::time::Duration) -> anyhow::Result<f64> {
    let init = tokio::process::Command::new("pgbench").args(["-i", "-q", "-s", "1", url]).output().await;
    let init = init.context("running pgbench (is it installed?)")?;
    anyhow::ensure!(init.status.success(), "pgbench -i failed: {}", String::from_utf8_lossy(&init.stderr));
    let clients = clients.to_string();
    let seconds = duration.as_secs().max(1).to_string();
    let flag = match mode {
        Pgbench::Select => "-S",
        Pgbench::Write => "-N",
    };
    let run = tokio::process::Command::new("pgbench")
        .args([flag, "-n", "-c", &clients, "-j", "2", "-T", &seconds, url])
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&run.stdout);
    anyhow::ensure!(run.status.success(), "pgbench {flag} failed: {}{}", stdout, String::from_utf8_lossy(&run.stderr));
    stdout
        .lines()
        .find_map(|line| line.strip_prefix("tps = ")?.split_whitespace().next()?.parse().ok())
        .with_context(|| format!("no tps in pgbench's output: {stdout}"))
}

/// The PostgreSQL settings that move write figures most, as one line for a bench's output
/// ("autovacuum off" on a CI box leaves tables without statistics or vacuuming, which no
/// production server should run with).
pub async fn postgres_conditions(db: &sea_orm::DatabaseConnection) -> anyhow::Result<String> {
    use sea_orm::{ConnectionTrait, Statement};
    let mut shown = Vec::new();
    for setting in ["autovacuum", "synchronous_commit", "fsync"] {
        let statement = Statement::from_string(db.get_database_backend(), format!("SHOW {setting}"));
        let row = db.query_one_raw(statement).await?.with_context(|| format!("SHOW {setting} returned nothing"))?;
        shown.push(format!("{setting} {}", row.try_get_by_index::<String>(0)?));
    }
    Ok(format!("PostgreSQL: {}", shown.join(", ")))
}
