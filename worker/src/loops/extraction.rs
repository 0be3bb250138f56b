//! The extraction loops (`KFS_EXTRACT_CONCURRENCY` of them): extract uploaded files, one
//! at a time each, the one that waited longest first.
use std::sync::Arc;
use std::time::Duration;

use entity::Clock;
use sea_orm::DatabaseConnection;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use super::{Loop, Step};
use crate::config::WorkerSettings;
use crate::knowledge::uploads::{self, Extraction, ExtractionPolicy};
use crate::lifecycle::LifecycleError;

/// Extracts due files; woken when documents become due.
pub(crate) struct ExtractionLoop {
    db: DatabaseConnection,
    policy: ExtractionPolicy,
    poll: Duration,
    clock: Clock,
    wake: Arc<Notify>,
    stop: CancellationToken,
}

impl ExtractionLoop {
    /// The loops the settings ask for.
    pub(crate) fn from_settings(
        db: &DatabaseConnection,
        settings: &WorkerSettings,
        clock: &Clock,
        wake: &Arc<Notify>,
        stop: &CancellationToken,
    ) -> Vec<Self> {
        let (policy, poll) = (extraction_policy(settings), super::poll_interval(settings));
        (0..loops(settings))
            .map(|_| Self {
                db: db.clone(),
                policy: policy.clone(),
                poll,
                clock: clock.clone(),
                wake: wake.clone(),
                stop: stop.clone(),
            })
            .collect()
    }
}

/// How many extraction loops run (each wake-up of documents wakes them all).
pub(crate) fn loops(settings: &WorkerSettings) -> usize {
    settings.extract.concurrency.max(1)
}

impl Loop for ExtractionLoop {
    const NAME: &'static str = "extracting uploaded files";

    fn wake_up(&self) -> Option<Arc<Notify>> {
        Some(self.wake.clone())
    }

    fn poll(&self) -> Duration {
        self.poll
    }

    async fn step(&mut self) -> Result<Step, LifecycleError> {
        extraction_step(&self.db, &self.policy, &self.stop, &self.clock).await
    }
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
pub(crate) async fn extraction_step(
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
