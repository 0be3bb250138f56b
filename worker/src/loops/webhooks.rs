//! The webhook loop: sends due webhook deliveries.
use std::sync::Arc;
use std::time::Duration;

use entity::Clock;
use sea_orm::DatabaseConnection;
use tokio::sync::Notify;

use super::{Loop, Step};
use crate::config::WorkerSettings;
use crate::lifecycle::LifecycleError;
use crate::webhooks;

/// Sends due deliveries whenever events may have queued some, and at every poll.
pub(crate) struct WebhookLoop {
    db: DatabaseConnection,
    policy: webhooks::DeliveryPolicy,
    poll: Duration,
    clock: Clock,
    wake: Arc<Notify>,
}

impl WebhookLoop {
    /// The loop, or why its HTTP client could not be built (then no webhooks are sent).
    pub(crate) fn from_settings(
        db: DatabaseConnection,
        settings: &WorkerSettings,
        clock: Clock,
        wake: Arc<Notify>,
    ) -> Result<Self, reqwest::Error> {
        Ok(Self { db, policy: webhook_policy(settings)?, poll: super::poll_interval(settings), clock, wake })
    }
}

impl Loop for WebhookLoop {
    const NAME: &'static str = "sending webhooks";

    fn wake_up(&self) -> Option<Arc<Notify>> {
        Some(self.wake.clone())
    }

    fn poll(&self) -> Duration {
        self.poll
    }

    async fn step(&mut self) -> Result<Step, LifecycleError> {
        Ok(match webhooks::deliver_due(&self.db, &self.policy, self.clock.now()).await? {
            0 => Step::Idle,
            tried => Step::Delivered(tried),
        })
    }
}

/// What the webhook loop sends with (`KFS_WEBHOOK_*`).
pub(crate) fn webhook_policy(settings: &WorkerSettings) -> Result<webhooks::DeliveryPolicy, reqwest::Error> {
    let timeout = Duration::from_millis(settings.webhooks.timeout_ms.max(1));
    Ok(webhooks::DeliveryPolicy {
        settings: settings.webhooks.clone(),
        client: webhooks::address::client(timeout, settings.webhooks.allow_private)?,
        worker_id: settings.worker_id.clone(),
    })
}
