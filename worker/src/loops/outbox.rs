//! The outbox loop (with an external queue only): publishes due outbox entries.
use std::sync::Arc;
use std::time::Duration;

use entity::Clock;
use sea_orm::DatabaseConnection;
use tokio::sync::Notify;

use super::{Loop, Step};
use crate::config::WorkerSettings;
use crate::lifecycle::LifecycleError;
use crate::outbox::{self, OutboxPolicy, Publisher};

/// Publishes due entries to the queue; woken by any signal that announces work.
pub(crate) struct OutboxLoop {
    db: DatabaseConnection,
    publisher: Arc<dyn Publisher>,
    settings: Arc<WorkerSettings>,
    clock: Clock,
    wake: Arc<Notify>,
}

impl OutboxLoop {
    /// The loop, publishing with `publisher`.
    pub(crate) fn new(
        db: DatabaseConnection,
        publisher: Arc<dyn Publisher>,
        settings: Arc<WorkerSettings>,
        clock: Clock,
        wake: Arc<Notify>,
    ) -> Self {
        Self { db, publisher, settings, clock, wake }
    }
}

impl Loop for OutboxLoop {
    const NAME: &'static str = "dispatching the outbox";

    fn wake_up(&self) -> Option<Arc<Notify>> {
        Some(self.wake.clone())
    }

    fn poll(&self) -> Duration {
        super::poll_interval(&self.settings)
    }

    async fn step(&mut self) -> Result<Step, LifecycleError> {
        outbox_step(&self.db, self.publisher.as_ref(), &self.settings, self.clock.now()).await
    }
}

/// One outbox-loop step.
pub(crate) async fn outbox_step(
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
