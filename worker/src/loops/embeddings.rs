//! The embedding loop (with an embeddings endpoint only): works off the backlog of
//! documents waiting for vectors, the one that waited longest first.
use std::sync::Arc;
use std::time::Duration;

use entity::Clock;
use sea_orm::DatabaseConnection;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{Loop, Step};
use crate::config::WorkerSettings;
use crate::knowledge::backlog::{self, BacklogPolicy, Worked};
use crate::knowledge::embeddings::Embedder;
use crate::lifecycle::LifecycleError;

/// Embeds due documents; woken when documents become due.
pub(crate) struct EmbeddingLoop {
    db: DatabaseConnection,
    embedder: Embedder,
    policy: BacklogPolicy,
    poll: Duration,
    clock: Clock,
    wake: Arc<Notify>,
    stop: CancellationToken,
}

impl EmbeddingLoop {
    /// The loop, when an embeddings endpoint is configured and its client builds.
    pub(crate) fn from_settings(
        db: DatabaseConnection,
        settings: &WorkerSettings,
        clock: Clock,
        wake: Arc<Notify>,
        stop: CancellationToken,
    ) -> Option<Self> {
        let endpoint = settings.embeddings.endpoint().ok()??;
        let timeout = Duration::from_millis(settings.embeddings.timeout_ms.max(1));
        let embedder = Embedder::new(endpoint, timeout)
            .inspect_err(
                |error| tracing::error!(error = %error, "building the embeddings client failed; no embeddings are made"),
            )
            .ok()?;
        let (policy, poll) = (backlog_policy(settings), super::poll_interval(settings));
        Some(Self { db, embedder, policy, poll, clock, wake, stop })
    }
}

impl Loop for EmbeddingLoop {
    const NAME: &'static str = "embedding passages";

    fn wake_up(&self) -> Option<Arc<Notify>> {
        Some(self.wake.clone())
    }

    fn poll(&self) -> Duration {
        self.poll
    }

    async fn step(&mut self) -> Result<Step, LifecycleError> {
        embedding_step(&self.db, &self.embedder, &self.policy, &self.stop, &self.clock).await
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
pub(crate) async fn embedding_step(
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
