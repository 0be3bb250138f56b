//! Memory per idle subscribed connection: the server's resident memory before and after
//! opening N connections (each initialised with a valid token and holding one
//! `researchTaskProgress` subscription to a paused task), divided by N.
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{StreamExt as _, TryStreamExt as _};
use tokio::sync::mpsc;

use crate::client::{self, Subscriber};
use crate::server::{self, Memory};
use crate::tasks;

/// Tasks the idle connections follow, round-robin.
const TASKS: usize = 10;
/// Connection counts measured, in increasing order, on one server.
pub const STEPS: [usize; 2] = [1_000, 5_000];
/// Connections being established at once.
pub const CONNECTING: usize = 64;
/// Pause before reading memory, so the allocator and the connections' first keep-alive
/// timers have settled.
const SETTLE: Duration = Duration::from_secs(3);

/// The server's memory at each step.
pub struct MemoryReport {
    /// Before any WebSocket connection.
    pub base: Memory,
    /// After each step.
    pub steps: Vec<Step>,
}

/// One step: connections open in all, the server's memory then, and how long this step
/// took to establish its connections.
pub struct Step {
    /// Connections open after the step.
    pub connections: usize,
    /// The server's memory after the step settled.
    pub memory: Memory,
    /// How long the step's connections took to be established.
    pub opened_in: Duration,
}

impl MemoryReport {
    /// Bytes of resident memory per connection at a step: (rss - base) / connections.
    pub fn per_connection(&self, step: usize) -> Option<(f64, f64)> {
        let Step { connections, memory, .. } = self.steps.get(step)?;
        let per = |now: u64, base: u64| now.saturating_sub(base) as f64 * 1024.0 / *connections as f64;
        Some((per(memory.rss_kib, self.base.rss_kib), per(memory.anon_kib, self.base.anon_kib)))
    }
}

/// Starts a server on `database_url`, opens the connections step by step and reads its
/// memory before and after each step.
pub async fn measure(binary: &Path, database_url: &str) -> anyhow::Result<MemoryReport> {
    let mut server = server::start(binary, database_url).await?;
    let fixture = tasks::create(server.graphql_url(), TASKS).await?;
    tokio::time::sleep(SETTLE).await;
    let base = server::memory(&mut server)?;
    // Events reach nobody in this run: the receiver is dropped at once.
    let (receipts, _) = mpsc::unbounded_channel();
    let token: Arc<str> = fixture.client.token().into();
    let mut subscribers: Vec<Subscriber> = Vec::new();
    let mut steps = Vec::new();
    for target in STEPS {
        let started = Instant::now();
        let opened = futures_util::stream::iter(subscribers.len()..target)
            .map(|n| {
                let task = n % fixture.tasks.len();
                client::subscribe(n, server.addr, token.clone(), task, fixture.tasks[task], 1, receipts.clone())
            })
            .buffer_unordered(CONNECTING)
            .try_collect::<Vec<_>>()
            .await?;
        let opened_in = started.elapsed();
        subscribers.extend(opened);
        tokio::time::sleep(SETTLE).await;
        steps.push(Step { connections: target, memory: server::memory(&mut server)?, opened_in });
    }
    drop(subscribers);
    Ok(MemoryReport { base, steps })
}
