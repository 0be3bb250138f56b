//! Delivery latency under load: subscribers spread over a few tasks, progress events
//! committed at a steady rate, and for every delivery the time from just before the commit
//! was asked for to the client reading the event. Both instants come from this process's
//! monotonic clock; deliveries are matched to commits by (task, sequence).
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{StreamExt as _, TryStreamExt as _};
use sea_orm::DatabaseConnection;
use tokio::sync::{Mutex, mpsc};

use crate::client::{self, Receipt};
use crate::server;
use crate::tasks::{self, Committer};

/// The load: how many subscribers over how many tasks, and the commit rate.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    /// Open subscriptions.
    pub subscribers: usize,
    /// Tasks they follow, round-robin.
    pub tasks: usize,
    /// Commits per second, round-robin over the tasks.
    pub rate: u32,
    /// How long commits go on.
    pub duration: Duration,
}

/// What was measured.
pub struct LatencyReport {
    /// How commits reached the server.
    pub path: &'static str,
    /// Commit to client, one per delivery, sorted.
    pub deliveries: Vec<Duration>,
    /// Deliveries expected (commits × subscribers of the committed task).
    pub expected: usize,
    /// How long the commit calls took, sorted.
    pub commits: Vec<Duration>,
    /// Commits that failed.
    pub failed_commits: usize,
    /// The machine's one-minute load average when the commits began: other work on the
    /// same cores shows up in the tail.
    pub load_average: String,
}

/// How long to wait for the last deliveries after the last commit.
const DRAIN: Duration = Duration::from_secs(10);

/// Starts a server, opens the subscribers, commits at the load's rate and collects every
/// delivery. `db` (PostgreSQL) commits through the lifecycle from this process; without
/// it commits go through GraphQL mutations.
pub async fn measure(
    binary: &Path,
    database_url: &str,
    db: Option<DatabaseConnection>,
    load: Load,
) -> anyhow::Result<LatencyReport> {
    let server = server::start(binary, database_url).await?;
    let fixture = tasks::create(server.graphql_url(), load.tasks).await?;
    let (receipts, mut received) = mpsc::unbounded_channel();
    let token: Arc<str> = fixture.client.token().into();
    let subscribers = futures_util::stream::iter(0..load.subscribers)
        .map(|n| {
            let task = n % fixture.tasks.len();
            client::subscribe(n, server.addr, token.clone(), task, fixture.tasks[task], 1, receipts.clone())
        })
        .buffer_unordered(crate::memory::CONNECTING)
        .try_collect::<Vec<_>>()
        .await?;
    drop(receipts);
    let mut followers = vec![0usize; fixture.tasks.len()];
    (0..load.subscribers).for_each(|n| followers[n % fixture.tasks.len()] += 1);
    tokio::time::sleep(Duration::from_secs(2)).await;

    let committer = Arc::new(match db {
        Some(db) => Committer::Lifecycle { db, tenant: fixture.tenant.clone() },
        None => Committer::Mutation(fixture.client.clone()),
    });
    // Each task's last sequence; commits on one task run one at a time so the sequence
    // each gets is known before it commits.
    let last: Arc<Vec<Mutex<i32>>> = Arc::new(fixture.tasks.iter().map(|_| Mutex::new(1)).collect());
    let load_average = std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|text| text.split_whitespace().next().map(str::to_owned))
        .unwrap_or_else(|| "unknown".to_owned());
    let total = (f64::from(load.rate) * load.duration.as_secs_f64()) as usize;
    let mut ticker = tokio::time::interval(Duration::from_secs_f64(1.0 / f64::from(load.rate)));
    let mut running = Vec::with_capacity(total);
    for i in 0..total {
        ticker.tick().await;
        let (task, task_id) = (i % fixture.tasks.len(), fixture.tasks[i % fixture.tasks.len()]);
        let (committer, last) = (committer.clone(), last.clone());
        running.push(tokio::spawn(async move {
            let mut sequence = last[task].lock().await;
            let started = committer.commit(task_id, *sequence + 1).await;
            let outcome = started.map(|started| (task, *sequence + 1, started, started.elapsed()));
            if outcome.is_ok() {
                *sequence += 1;
            }
            outcome
        }));
    }
    let mut sent = HashMap::new();
    let (mut commits, mut failed_commits, mut expected) = (Vec::new(), 0, 0);
    for commit in running {
        match commit.await? {
            Ok((task, sequence, started, took)) => {
                sent.insert((task, sequence), started);
                commits.push(took);
                expected += followers[task];
            }
            Err(error) => {
                failed_commits += 1;
                eprintln!("a commit failed: {error:#}");
            }
        }
    }

    let mut deliveries = Vec::with_capacity(expected);
    let deadline = tokio::time::Instant::now() + DRAIN;
    while deliveries.len() < expected {
        let Ok(Some(Receipt { task, sequence, at })) = tokio::time::timeout_at(deadline, received.recv()).await else {
            break;
        };
        if let Some(started) = sent.get(&(task, sequence)) {
            deliveries.push(at.saturating_duration_since(*started));
        }
    }
    drop(subscribers);
    deliveries.sort();
    commits.sort();
    Ok(LatencyReport { path: committer.describe(), deliveries, expected, commits, failed_commits, load_average })
}

/// The `p`-th percentile (0–100) of sorted durations, nearest rank.
pub fn percentile(sorted: &[Duration], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}
