//! The composition root of a worker: builds the pipeline and starts the background loops
//! (`loops/`, each declared there once) that the settings ask for. The API runs them
//! in-process through [`spawn`]; the `worker` binary runs them alone.
use std::sync::Arc;
use std::time::Duration;

/// The process's one LISTEN (PostgreSQL) that feeds a [`Notifier`]; the API starts it
/// beside its live hub, [`spawn`] starts it for a worker process of its own.
pub use crate::store::signals::spawn_listener;
use entity::Clock;
use sea_orm::DatabaseConnection;
/// Re-exported so callers of [`spawn`] need not depend on tokio-util themselves.
pub use tokio_util::{sync::CancellationToken, task::TaskTracker};

use crate::config::{EngineKind, WorkerSettings};
use crate::knowledge::retrieve::Retriever;
use crate::loops::{
    self, Loop, deletions::DeletionLoop, embeddings::EmbeddingLoop, extraction::ExtractionLoop, lease::LeaseLoop,
    outbox::OutboxLoop, retention::RetentionLoop, wakeups::Wakeups, webhooks::WebhookLoop,
};
/// What the tests drive the loops with: a step's result, the lease loop's deterministic
/// form, and the policies two loops work by.
pub use crate::loops::{Step, embeddings::backlog_policy, extraction::extraction_policy, lease::run_due};
use crate::notify::Notifier;
use crate::observe::Ticks;
use crate::outbox::Publisher;
use crate::pipeline::{Pipeline, Stop};
use crate::research::engine::{BuiltinEngine, ResearchEngine};
use crate::research::openai::OpenAiEngine;
use crate::research::rerank::Reranker;

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
) -> anyhow::Result<Ticks> {
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
) -> Ticks {
    spawn_with(db, notifier, settings, engine, None, shutdown, tracker)
}

/// [`spawn_with_engine`] with an external queue the outbox loop publishes to (`None`: the
/// database is the queue and no outbox loop runs). Returns each loop's last tick, for
/// readiness.
pub fn spawn_with(
    db: DatabaseConnection,
    notifier: Notifier,
    settings: WorkerSettings,
    engine: Arc<dyn ResearchEngine>,
    publisher: Option<Arc<dyn Publisher>>,
    shutdown: CancellationToken,
    tracker: &TaskTracker,
) -> Ticks {
    let settings = Arc::new(settings);
    let clock = Clock::system();
    let pipeline = pipeline(&db, &notifier, &settings, engine, &clock);
    let (wake, ticks) = (Wakeups::default(), Ticks::default());
    let stop = Stop { drain: shutdown.clone(), abort: CancellationToken::new() };
    let jobs = TaskTracker::new();
    tracker.spawn(loops::wakeups::forward_signals(
        notifier.subscribe(),
        wake.clone(),
        loops::extraction::loops(&settings),
        shutdown.clone(),
    ));
    if settings.pg_listen {
        // Its signals reach the loops through `forward_signals`; after a gap, look once.
        let gap = wake.clone();
        spawn_listener(&db, notifier.clone(), move || gap.all(), shutdown.clone(), tracker);
    }

    // The loops.
    start_loop(tracker, &ticks, &shutdown, LeaseLoop::new(pipeline, jobs.clone(), stop.clone(), wake.lease.clone()));
    if let Some(job) =
        EmbeddingLoop::from_settings(db.clone(), &settings, clock.clone(), wake.embeddings.clone(), shutdown.clone())
    {
        start_loop(tracker, &ticks, &shutdown, job);
    }
    match WebhookLoop::from_settings(db.clone(), &settings, clock.clone(), wake.webhooks.clone()) {
        Ok(job) => start_loop(tracker, &ticks, &shutdown, job),
        Err(error) => tracing::error!(error = %error, "building the webhook client failed; no webhooks are sent"),
    }
    if let Some(job) = RetentionLoop::from_settings(db.clone(), &settings, clock.clone()) {
        start_loop(tracker, &ticks, &shutdown, job);
    }
    start_loop(tracker, &ticks, &shutdown, DeletionLoop::new(db.clone(), notifier.clone()));
    for job in ExtractionLoop::from_settings(&db, &settings, &clock, &wake.extractions, &shutdown) {
        start_loop(tracker, &ticks, &shutdown, job);
    }
    if let Some(publisher) = publisher {
        start_loop(
            tracker,
            &ticks,
            &shutdown,
            OutboxLoop::new(db, publisher, settings.clone(), clock, wake.outbox.clone()),
        );
    }
    tracker.spawn(drain(jobs, stop, Duration::from_millis(settings.shutdown_grace_ms), shutdown));
    ticks
}

/// The pipeline the lease loop runs jobs with.
fn pipeline(
    db: &DatabaseConnection,
    notifier: &Notifier,
    settings: &Arc<WorkerSettings>,
    engine: Arc<dyn ResearchEngine>,
    clock: &Clock,
) -> Pipeline {
    let retriever = Retriever::from_settings(&settings.embeddings).unwrap_or_else(|error| {
        tracing::error!(error = %error, "the embeddings endpoint is misconfigured; research searches by full text only");
        Retriever::full_text()
    });
    Pipeline {
        db: db.clone(),
        notifier: notifier.clone(),
        engine,
        retriever,
        settings: settings.clone(),
        clock: clock.clone(),
        fairness: Arc::default(),
        keeper: crate::pipeline::LeaseKeeper::start(db.clone(), notifier, settings.clone(), clock.clone()),
        committer: crate::pipeline::BoundaryCommitter::start(db.clone(), notifier.clone()),
    }
}

/// Runs `job` on `tracker` until `shutdown`, its ticks on `ticks`.
fn start_loop<L: Loop>(tracker: &TaskTracker, ticks: &Ticks, shutdown: &CancellationToken, job: L) {
    tracker.spawn(loops::run(job, ticks.clone(), shutdown.clone()));
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
