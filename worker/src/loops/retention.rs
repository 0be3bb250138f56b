//! The retention loop (when `KFS_RETENTION_DAYS` is set): deletes finished tasks older
//! than the retention, and their answer traces if told to.
use std::sync::Arc;
use std::time::Duration;

use entity::Clock;
use sea_orm::DatabaseConnection;
use tokio::sync::Notify;

use super::{Loop, Step};
use crate::config::WorkerSettings;
use crate::lifecycle::{self, LifecycleError};

/// How many tasks one step prunes at most.
const PRUNED_PER_STEP: u64 = 100;

/// Prunes once per `KFS_RETENTION_INTERVAL_MS`; nothing wakes it sooner.
pub(crate) struct RetentionLoop {
    db: DatabaseConnection,
    days: u32,
    answer_traces: bool,
    every: Duration,
    clock: Clock,
}

impl RetentionLoop {
    /// The loop, when the settings keep finished tasks for a number of days.
    pub(crate) fn from_settings(db: DatabaseConnection, settings: &WorkerSettings, clock: Clock) -> Option<Self> {
        Some(Self {
            db,
            days: settings.retention_days?,
            answer_traces: settings.retention_answer_traces,
            every: Duration::from_millis(settings.retention_interval_ms.max(1)),
            clock,
        })
    }
}

impl Loop for RetentionLoop {
    const NAME: &'static str = "pruning finished tasks";

    fn wake_up(&self) -> Option<Arc<Notify>> {
        None
    }

    fn poll(&self) -> Duration {
        self.every
    }

    /// Never busy: one batch per interval.
    async fn step(&mut self) -> Result<Step, LifecycleError> {
        let pruned =
            lifecycle::prune(&self.db, self.days, self.answer_traces, PRUNED_PER_STEP, self.clock.now()).await?;
        if pruned.tasks > 0 {
            tracing::info!(
                tasks = pruned.tasks,
                answer_traces = pruned.answer_traces,
                "retention pruned finished tasks"
            );
        }
        Ok(Step::Idle)
    }
}
