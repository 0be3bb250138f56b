//! The worker loops: the lease loop (claim due jobs, run their pipelines), the webhook,
//! deletion and retention loops, with an embeddings endpoint the embedding loop (work off
//! the backlog of documents waiting for vectors), and with an external queue the outbox
//! loop (publish due entries). The API runs them in-process through [`spawn`]; the
//! `worker` binary runs them alone. Each loop step is a public function returning a
//! [`Step`], so tests drive the loops without sleeping.
use std::sync::Arc;
use std::time::Duration;

/// The process's one LISTEN (PostgreSQL) that feeds a [`Notifier`]; the API starts it
/// beside its live hub, [`spawn`] starts it for a worker process of its own.
pub use crate::store::signals::spawn_listener;
use entity::Clock;
use sea_orm::DatabaseConnection;
use tokio::sync::{Notify, Semaphore};
/// Re-exported so callers of [`spawn`] need not depend on tokio-util themselves.
pub use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::config::{EngineKind, WorkerSettings};
use crate::knowledge::backlog::{self, BacklogPolicy, Worked};
use crate::knowledge::embeddings::Embedder;
use crate::knowledge::retrieve::Retriever;
use crate::knowledge::uploads::{self, Extraction, ExtractionPolicy};
use crate::lifecycle::{self, LifecycleError};
use crate::notify::{Notifier, Signal};
use crate::outbox::{self, OutboxPolicy, Publisher};
use crate::pipeline::{Pipeline, RunOutcome, Stop};
use crate::research::engine::{BuiltinEngine, ResearchEngine};
use crate::research::openai::OpenAiEngine;
use crate::research::rerank::Reranker;
use crate::webhooks;

/// What one loop step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// The lease loop claimed this many jobs.
    Claimed(usize),
    /// The outbox loop handled this many entries (published, retried or dead).
    Published(usize),
    /// The embedding loop worked a document, embedding this many passages.
    Embedded(usize),
    /// The webhook loop tried this many deliveries.
    Delivered(usize),
    /// The deletion loop finished this many space deletions.
    Deleted(usize),
    /// An extraction loop worked this many uploaded files.
    Extracted(usize),
    /// The loop's remote endpoint is unavailable: wait this long (wake-ups do not help).
    Backoff(Duration),
    /// Nothing was due.
    Idle,
}

/// Starts the worker loops with the engine the settings choose
/// ([`research_engine`]); they run until `shutdown` is cancelled, then stop claiming, give
/// running stages `shutdown_grace_ms` to reach a checkpoint and release the leases that
/// remain. Every task is spawned on `tracker`, so `tracker.wait()` returns when the worker
/// has fully stopped. Fails, starting nothing, when the engine's settings are incomplete.
pub fn spawn(
    db: DatabaseConnection,
    notifier: Notifier,
    settings: WorkerSettings,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) -> anyhow::Result<crate::observe::Ticks> {
    let engine = research_engine(&settings)?;
    Ok(spawn_with_engine(db, notifier, settings, engine, shutdown, tracker))
}

/// The engine `KFS_ENGINE` names, retrieving with the embeddings endpoint when there is
/// one; an error says what the configuration lacks.
pub fn research_engine(settings: &WorkerSettings) -> anyhow::Result<Arc<dyn ResearchEngine>> {
    // The pipeline builds its own retriever from the same settings; a bad endpoint stops
    // the start here, where it is said.
    Retriever::from_settings(&settings.embeddings).map_err(anyhow::Error::msg)?;
    let reranker = Reranker::from_settings(&settings.rerank).map_err(anyhow::Error::msg)?;
    let builtin = BuiltinEngine::new(settings.engine.clone()).reranking_with(reranker);
    Ok(match settings.engine.kind {
        EngineKind::Builtin => Arc::new(builtin),
        EngineKind::Openai => {
            let endpoint = settings.openai.endpoint().map_err(anyhow::Error::msg)?;
            Arc::new(OpenAiEngine::new(endpoint, builtin)?)
        }
    })
}

/// [`spawn`] with another engine (one that calls a language model, or a test double).
pub fn spawn_with_engine(
    db: DatabaseConnection,
    notifier: Notifier,
    settings: WorkerSettings,
    engine: Arc<dyn ResearchEngine>,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) -> crate::observe::Ticks {
    spawn_with(db, notifier, settings, engine, None, shutdown, tracker)
}

/// [`spawn_with_engine`] with an external queue the outbox loop publishes to (`None`: the
/// database is the queue and no outbox loop runs).
pub fn spawn_with(
    db: DatabaseConnection,
    notifier: Notifier,
    settings: WorkerSettings,
    engine: Arc<dyn ResearchEngine>,
    publisher: Option<Arc<dyn Publisher>>,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) -> crate::observe::Ticks {
    let settings = Arc::new(settings);
    let clock = Clock::system();
    let retriever = Retriever::from_settings(&settings.embeddings).unwrap_or_else(|error| {
        tracing::error!(error = %error, "the embeddings endpoint is misconfigured; research searches by full text only");
        Retriever::full_text()
    });
    let pipeline = Pipeline {
        db: db.clone(),
        notifier: notifier.clone(),
        engine,
        retriever,
        settings: settings.clone(),
        clock: clock.clone(),
        fairness: Arc::default(),
        keeper: crate::pipeline::LeaseKeeper::start(db.clone(), &notifier, settings.clone(), clock.clone()),
        committer: crate::pipeline::BoundaryCommitter::start(db.clone(), notifier.clone()),
    };
    let wake = Wakeups::default();
    let stop = Stop { drain: shutdown.clone(), abort: CancellationToken::new() };
    let jobs = TaskTracker::new();

    let extraction_loops = settings.extract.concurrency.max(1);
    tracker.spawn(forward_signals(notifier.subscribe(), wake.clone(), extraction_loops, shutdown.clone()));
    if settings.pg_listen {
        // Its signals reach the loops through `forward_signals`; after a gap, look once.
        let gap = wake.clone();
        spawn_listener(&db, notifier.clone(), move || gap.all(), shutdown.clone(), tracker);
    }
    tracker.spawn(lease_loop(pipeline, wake.clone(), stop.clone(), jobs.clone()));
    if let Some(embedder) = backlog_embedder(&settings) {
        tracker.spawn(embedding_loop(
            db.clone(),
            embedder,
            settings.clone(),
            clock.clone(),
            wake.clone(),
            shutdown.clone(),
        ));
    }
    match webhook_policy(&settings) {
        Ok(policy) => {
            tracker.spawn(webhook_loop(
                db.clone(),
                policy,
                settings.clone(),
                clock.clone(),
                wake.clone(),
                shutdown.clone(),
            ));
        }
        Err(error) => tracing::error!(error = %error, "building the webhook client failed; no webhooks are sent"),
    }
    if let Some(days) = settings.retention_days {
        tracker.spawn(retention_loop(
            db.clone(),
            days,
            settings.clone(),
            clock.clone(),
            wake.ticks.clone(),
            shutdown.clone(),
        ));
    }
    tracker.spawn(deletion_loop(db.clone(), notifier.clone(), wake.ticks.clone(), shutdown.clone()));
    for _ in 0..settings.extract.concurrency.max(1) {
        tracker.spawn(extraction_loop(db.clone(), settings.clone(), clock.clone(), wake.clone(), shutdown.clone()));
    }
    let ticks = wake.ticks.clone();
    if let Some(publisher) = publisher {
        tracker.spawn(outbox_loop(db, publisher, settings.clone(), clock, wake, shutdown.clone()));
    }
    tracker.spawn(drain(jobs, stop, Duration::from_millis(settings.shutdown_grace_ms), shutdown));
    ticks
}

/// The wake-ups of the loops. `Notify` keeps one permit when nobody waits, so a signal
/// that arrives while a step runs is not lost: the next wait returns at once.
#[derive(Clone, Default)]
struct Wakeups {
    lease: Arc<Notify>,
    outbox: Arc<Notify>,
    embeddings: Arc<Notify>,
    extractions: Arc<Notify>,
    webhooks: Arc<Notify>,
    /// Each loop's last tick, for readiness.
    ticks: crate::observe::Ticks,
}

impl Wakeups {
    fn all(&self) {
        self.lease.notify_one();
        self.outbox.notify_one();
        self.embeddings.notify_one();
        self.extractions.notify_one();
        self.webhooks.notify_one();
    }
}

/// One lease-loop step: claims as many due jobs as there are free run slots and spawns
/// their pipelines on `jobs`. A finished pipeline notifies `wake` (when given), since its
/// slot is free.
pub async fn lease_step(
    pipeline: &Pipeline,
    permits: &Arc<Semaphore>,
    jobs: &TaskTracker,
    stop: &Stop,
    wake: Option<Arc<Notify>>,
    now: i64,
) -> Result<Step, LifecycleError> {
    let free = permits.available_permits().min(usize::try_from(pipeline.settings.batch_size).unwrap_or(usize::MAX));
    if free == 0 {
        return Ok(Step::Idle);
    }
    let claimed = claim(pipeline, free as u64, now).await?;
    let count = claimed.len();
    for job in claimed {
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            // Only this loop takes permits, so one is free for every claim; if not, the
            // lease lapses and the job is claimed again later.
            tracing::error!(task.id = %job.lease.job_id, "no run slot for a claimed job");
            continue;
        };
        let (pipeline, stop, wake) = (pipeline.clone(), stop.clone(), wake.clone());
        jobs.spawn(async move {
            run_logged(&pipeline, job, &stop).await;
            drop(permit);
            if let Some(wake) = wake {
                wake.notify_one();
            }
        });
    }
    Ok(if count == 0 { Step::Idle } else { Step::Claimed(count) })
}

/// Claims up to `batch` due jobs, fairly across tenants and spaces and within the caps.
async fn claim(pipeline: &Pipeline, batch: u64, now: i64) -> Result<Vec<lifecycle::Claimed>, LifecycleError> {
    let settings = &pipeline.settings;
    let claim =
        lifecycle::Claim { worker_id: &settings.worker_id, lease_ms: settings.lease_ms, batch, caps: settings.caps() };
    let mut fairness = pipeline.fairness.lock().await;
    lifecycle::claim_fairly(&pipeline.db, &pipeline.notifier, &claim, &mut fairness, now).await
}

/// Claims due jobs and runs each to its end before returning: the deterministic form of
/// the lease loop, for tests and one-shot runs.
pub async fn run_due(pipeline: &Pipeline, stop: &Stop, now: i64) -> Result<(Step, Vec<RunOutcome>), LifecycleError> {
    let claimed = claim(pipeline, pipeline.settings.batch_size, now).await?;
    if claimed.is_empty() {
        return Ok((Step::Idle, Vec::new()));
    }
    let count = claimed.len();
    let mut outcomes = Vec::with_capacity(count);
    for job in claimed {
        outcomes.push(pipeline.run(job, stop).await?);
    }
    Ok((Step::Claimed(count), outcomes))
}

/// One outbox-loop step.
pub async fn outbox_step(
    db: &DatabaseConnection,
    publisher: &dyn Publisher,
    settings: &WorkerSettings,
    now: i64,
) -> Result<Step, LifecycleError> {
    let policy = OutboxPolicy {
        lock_ms: settings.outbox_lock_ms,
        max_attempts: settings.outbox_max_attempts,
        retry: settings.retry_policy(),
    };
    let outcome = outbox::dispatch_due(db, publisher, &settings.worker_id, settings.batch_size, now, policy).await?;
    let handled = outcome.dispatched + outcome.retrying + outcome.dead;
    Ok(if handled == 0 { Step::Idle } else { Step::Published(handled) })
}

/// Runs one claimed job; its outcome is logged inside the run's span.
async fn run_logged(pipeline: &Pipeline, job: lifecycle::Claimed, stop: &Stop) {
    let _ = pipeline.run(job, stop).await;
}

async fn lease_loop(pipeline: Pipeline, wake: Wakeups, stop: Stop, jobs: TaskTracker) {
    let permits = Arc::new(Semaphore::new(pipeline.settings.max_concurrency.max(1)));
    let poll = Duration::from_millis(pipeline.settings.poll_interval_ms.max(1));
    let step = || {
        let (pipeline, permits, jobs, stop, wake) =
            (pipeline.clone(), permits.clone(), jobs.clone(), stop.clone(), wake.lease.clone());
        async move { lease_step(&pipeline, &permits, &jobs, &stop, Some(wake), pipeline.clock.now()).await }
    };
    repeat("claiming due research tasks", step, &wake.lease, &stop.drain, poll, &wake.ticks).await;
    // Only this loop spawns onto `jobs`, so closing it here (not when shutdown begins)
    // means `drain` cannot see an empty tracker while a claim that was already under way
    // is about to add a pipeline: that pipeline sees the drain and releases its lease.
    jobs.close();
    tracing::info!("lease loop stopped claiming");
}

async fn outbox_loop(
    db: DatabaseConnection,
    publisher: Arc<dyn Publisher>,
    settings: Arc<WorkerSettings>,
    clock: Clock,
    wake: Wakeups,
    shutdown: CancellationToken,
) {
    let poll = Duration::from_millis(settings.poll_interval_ms.max(1));
    let step = || {
        let (db, publisher, settings, now) = (db.clone(), publisher.clone(), settings.clone(), clock.now());
        async move { outbox_step(&db, publisher.as_ref(), &settings, now).await }
    };
    repeat("dispatching the outbox", step, &wake.outbox, &shutdown, poll, &wake.ticks).await;
}

/// What the webhook loop sends with.
pub fn webhook_policy(settings: &WorkerSettings) -> Result<webhooks::DeliveryPolicy, reqwest::Error> {
    let timeout = Duration::from_millis(settings.webhooks.timeout_ms.max(1));
    Ok(webhooks::DeliveryPolicy {
        settings: settings.webhooks.clone(),
        client: webhooks::address::client(timeout, settings.webhooks.allow_private)?,
        worker_id: settings.worker_id.clone(),
    })
}

/// Sends due webhook deliveries whenever events may have queued some, and at every poll.
async fn webhook_loop(
    db: DatabaseConnection,
    policy: webhooks::DeliveryPolicy,
    settings: Arc<WorkerSettings>,
    clock: Clock,
    wake: Wakeups,
    shutdown: CancellationToken,
) {
    let poll = Duration::from_millis(settings.poll_interval_ms.max(1));
    let step = || {
        let (db, policy, now) = (db.clone(), policy.clone(), clock.now());
        async move {
            match webhooks::deliver_due(&db, &policy, now).await? {
                0 => Ok(Step::Idle),
                tried => Ok(Step::Delivered(tried)),
            }
        }
    };
    repeat("sending webhooks", step, &wake.webhooks, &shutdown, poll, &wake.ticks).await;
}

/// Deletes finished tasks older than `days`, once per `retention_interval_ms`.
async fn retention_loop(
    db: DatabaseConnection,
    days: u32,
    settings: Arc<WorkerSettings>,
    clock: Clock,
    ticks: crate::observe::Ticks,
    shutdown: CancellationToken,
) {
    let every = Duration::from_millis(settings.retention_interval_ms.max(1));
    let never = Notify::new();
    let step = || {
        let (db, traces, now) = (db.clone(), settings.retention_answer_traces, clock.now());
        async move {
            let pruned = lifecycle::prune(&db, days, traces, 100, now).await?;
            if pruned.tasks > 0 {
                tracing::info!(
                    tasks = pruned.tasks,
                    answer_traces = pruned.answer_traces,
                    "retention pruned finished tasks"
                );
            }
            Ok(Step::Idle)
        }
    };
    repeat("pruning finished tasks", step, &never, &shutdown, every, &ticks).await;
}

/// How often a worker looks for space deletions an interrupted request left unfinished.
const DELETION_INTERVAL: Duration = Duration::from_secs(30);

/// Finishes space deletions whose request stopped half-way (a crash, a timeout).
async fn deletion_loop(
    db: DatabaseConnection,
    notifier: Notifier,
    ticks: crate::observe::Ticks,
    shutdown: CancellationToken,
) {
    let never = Notify::new();
    let step = || {
        let (db, notifier) = (db.clone(), notifier.clone());
        async move {
            let finished = lifecycle::finish_pending_deletions(&db, &notifier).await?
                + lifecycle::finish_pending_erasures(&db, &notifier).await?;
            Ok(if finished > 0 { Step::Deleted(finished) } else { Step::Idle })
        }
    };
    repeat("finishing space deletions", step, &never, &shutdown, DELETION_INTERVAL, &ticks).await;
}

/// The embeddings client of the backlog loop, when an endpoint is configured.
fn backlog_embedder(settings: &WorkerSettings) -> Option<Embedder> {
    let endpoint = settings.embeddings.endpoint().ok()??;
    let timeout = Duration::from_millis(settings.embeddings.timeout_ms.max(1));
    match Embedder::new(endpoint, timeout) {
        Ok(embedder) => Some(embedder),
        Err(error) => {
            tracing::error!(error = %error, "building the embeddings client failed; no embeddings are made");
            None
        }
    }
}

/// The policy the backlog loop works by.
pub fn backlog_policy(settings: &WorkerSettings) -> BacklogPolicy {
    BacklogPolicy {
        worker_id: settings.worker_id.clone(),
        lock_ms: settings.lease_ms,
        batch_size: settings.embeddings.batch_size.max(1),
        max_attempts: settings.embeddings.max_attempts.max(1),
        retry: settings.retry_policy(),
    }
}

/// One embedding-loop step: works the document that has waited longest.
pub async fn embedding_step(
    db: &DatabaseConnection,
    embedder: &Embedder,
    policy: &BacklogPolicy,
    stop: &CancellationToken,
    clock: &Clock,
) -> Result<Step, LifecycleError> {
    Ok(match backlog::embed_due(db, embedder, policy, stop, || clock.now()).await? {
        Worked::Idle => Step::Idle,
        Worked::Document { embedded, .. } => Step::Embedded(embedded),
        Worked::Unavailable { wait } => Step::Backoff(wait),
    })
}

async fn embedding_loop(
    db: DatabaseConnection,
    embedder: Embedder,
    settings: Arc<WorkerSettings>,
    clock: Clock,
    wake: Wakeups,
    shutdown: CancellationToken,
) {
    let poll = Duration::from_millis(settings.poll_interval_ms.max(1));
    let policy = backlog_policy(&settings);
    let step = || {
        let (db, embedder, policy, shutdown, clock) =
            (db.clone(), embedder.clone(), policy.clone(), shutdown.clone(), clock.clone());
        async move { embedding_step(&db, &embedder, &policy, &shutdown, &clock).await }
    };
    repeat("embedding passages", step, &wake.embeddings, &shutdown, poll, &wake.ticks).await;
}

/// The policy the extraction loops work by.
pub fn extraction_policy(settings: &WorkerSettings) -> ExtractionPolicy {
    ExtractionPolicy {
        extract: settings.extract.clone(),
        max_extracted_bytes: settings.max_extracted_bytes,
        chunk: settings.chunk,
        embeddings_on: crate::knowledge::index::Indexing::from_settings(settings.chunk, &settings.embeddings)
            .embeddings_on,
    }
}

/// One extraction-loop step: extracts the uploaded file that has waited longest.
pub async fn extraction_step(
    db: &DatabaseConnection,
    policy: &ExtractionPolicy,
    stop: &CancellationToken,
    clock: &Clock,
) -> Result<Step, LifecycleError> {
    Ok(match uploads::extract_due(db, policy, stop, || clock.now()).await? {
        Extraction::Idle => Step::Idle,
        Extraction::File { .. } => Step::Extracted(1),
    })
}

/// One of `KFS_EXTRACT_CONCURRENCY` loops that extract uploaded files, one at a time each.
async fn extraction_loop(
    db: DatabaseConnection,
    settings: Arc<WorkerSettings>,
    clock: Clock,
    wake: Wakeups,
    shutdown: CancellationToken,
) {
    let poll = Duration::from_millis(settings.poll_interval_ms.max(1));
    let policy = extraction_policy(&settings);
    let step = || {
        let (db, policy, shutdown, clock) = (db.clone(), policy.clone(), shutdown.clone(), clock.clone());
        async move { extraction_step(&db, &policy, &shutdown, &clock).await }
    };
    repeat("extracting uploaded files", step, &wake.extractions, &shutdown, poll, &wake.ticks).await;
}

/// Runs a loop's `step` until `stop`. A busy step goes round again at once (more may be
/// due); otherwise the next waits for a wake-up or the poll, whichever comes first: the
/// poll is the safety net that makes a lost wake-up a delay, never a stuck task. A failed
/// step is logged (as `what` failed) and waits like an idle one.
async fn repeat<F, Fut>(
    what: &'static str,
    mut step: F,
    wake: &Notify,
    stop: &CancellationToken,
    poll: Duration,
    ticks: &crate::observe::Ticks,
) where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Step, LifecycleError>>,
{
    loop {
        ticks.tick(what, poll);
        let (busy, backoff) = match step().await {
            Ok(
                Step::Claimed(_)
                | Step::Published(_)
                | Step::Embedded(_)
                | Step::Delivered(_)
                | Step::Deleted(_)
                | Step::Extracted(_),
            ) => (true, None),
            Ok(Step::Backoff(wait)) => (false, Some(wait)),
            Ok(Step::Idle) => (false, None),
            Err(error) => {
                tracing::error!(error = %error, "{what} failed");
                (false, None)
            }
        };
        if let Some(wait) = backoff {
            // A loop waiting out an endpoint's Retry-After has not stalled.
            ticks.tick(what, wait.max(poll));
        }
        // Stopping first, so a stream of wake-ups cannot keep a stopping worker going.
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            () = std::future::ready(()), if busy => {}
            () = tokio::time::sleep(backoff.unwrap_or_default()), if backoff.is_some() => {}
            () = wake.notified(), if backoff.is_none() => {}
            () = tokio::time::sleep(poll), if backoff.is_none() => {}
        }
    }
}

/// Turns in-process signals that announce work into loop wake-ups.
async fn forward_signals(
    mut signals: tokio::sync::broadcast::Receiver<Signal>,
    wake: Wakeups,
    extraction_loops: usize,
    shutdown: CancellationToken,
) {
    use tokio::sync::broadcast::error::RecvError;
    loop {
        tokio::select! {
            biased;
            () = shutdown.cancelled() => break,
            received = signals.recv() => match received {
                Ok(Signal::DocumentsDue) => {
                    wake.embeddings.notify_one();
                    // One wake-up per extraction loop that may be waiting.
                    for _ in 0..extraction_loops {
                        wake.extractions.notify_one();
                    }
                }
                Ok(signal) => {
                    if signal.announces_work() {
                        wake.lease.notify_one();
                        wake.outbox.notify_one();
                    }
                    // Only a commit that queued webhook deliveries (or a queue message,
                    // which names none) wakes the webhook loop; its poll finds the rest.
                    if matches!(&signal, Signal::WorkDue) || matches!(&signal, Signal::Task(task) if task.webhooks) {
                        wake.webhooks.notify_one();
                    }
                }
                // Missed signals may have announced work: look once, to be safe.
                Err(RecvError::Lagged(_)) => wake.all(),
                Err(RecvError::Closed) => break,
            },
        }
    }
}

/// After shutdown: wait for running pipelines to stop at their next checkpoint, up to the
/// grace period; then abort the rest, which release their leases.
async fn drain(jobs: TaskTracker, stop: Stop, grace: Duration, shutdown: CancellationToken) {
    shutdown.cancelled().await;
    tokio::select! {
        () = jobs.wait() => {}
        () = tokio::time::sleep(grace) => {
            tracing::warn!(running = jobs.len(), "shutdown grace period over; releasing leases");
            stop.abort.cancel();
            jobs.wait().await;
        }
    }
    tracing::info!("worker stopped");
}
