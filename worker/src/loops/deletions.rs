//! The deletion loop: finishes space deletions and tenant erasures whose request stopped
//! half-way (a crash, a timeout).
use std::sync::Arc;
use std::time::Duration;

use sea_orm::DatabaseConnection;
use tokio::sync::Notify;

use super::{Loop, Step};
use crate::lifecycle::{self, LifecycleError};
use crate::notify::Notifier;

/// How often a worker looks for deletions an interrupted request left unfinished.
const DELETION_INTERVAL: Duration = Duration::from_secs(30);

/// Looks every [`DELETION_INTERVAL`]; nothing wakes it sooner.
pub(crate) struct DeletionLoop {
    db: DatabaseConnection,
    notifier: Notifier,
}

impl DeletionLoop {
    /// The loop.
    pub(crate) fn new(db: DatabaseConnection, notifier: Notifier) -> Self {
        Self { db, notifier }
    }
}

impl Loop for DeletionLoop {
    const NAME: &'static str = "finishing space deletions";

    fn wake_up(&self) -> Option<Arc<Notify>> {
        None
    }

    fn poll(&self) -> Duration {
        DELETION_INTERVAL
    }

    async fn step(&mut self) -> Result<Step, LifecycleError> {
        let finished = lifecycle::finish_pending_deletions(&self.db, &self.notifier).await?
            + lifecycle::finish_pending_erasures(&self.db, &self.notifier).await?;
        Ok(if finished > 0 { Step::Deleted(finished) } else { Step::Idle })
    }
}
