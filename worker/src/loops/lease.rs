//! The lease loop: claims due research tasks, as many as there are free run slots, and
//! runs each one's pipeline; and [`run_due`], its deterministic form for tests.
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};
use tokio_util::task::TaskTracker;

use super::{Loop, Step};
use crate::lifecycle::{self, LifecycleError};
use crate::pipeline::{Pipeline, RunOutcome, Stop};

/// Claims due jobs and runs them (`KFS_MAX_CONCURRENCY` at once, `KFS_BATCH_SIZE` per
/// claim); woken by any signal that announces work.
pub(crate) struct LeaseLoop {
    pipeline: Pipeline,
    permits: Arc<Semaphore>,
    jobs: TaskTracker,
    stop: Stop,
    wake: Arc<Notify>,
}

impl LeaseLoop {
    /// The loop, spawning pipelines on `jobs`.
    pub(crate) fn new(pipeline: Pipeline, jobs: TaskTracker, stop: Stop, wake: Arc<Notify>) -> Self {
        let permits = Arc::new(Semaphore::new(pipeline.settings.max_concurrency.max(1)));
        Self { pipeline, permits, jobs, stop, wake }
    }
}

impl Loop for LeaseLoop {
    const NAME: &'static str = "claiming due research tasks";

    fn wake_up(&self) -> Option<Arc<Notify>> {
        Some(self.wake.clone())
    }

    fn poll(&self) -> Duration {
        super::poll_interval(&self.pipeline.settings)
    }

    async fn step(&mut self) -> Result<Step, LifecycleError> {
        let now = self.pipeline.clock.now();
        lease_step(&self.pipeline, &self.permits, &self.jobs, &self.stop, Some(self.wake.clone()), now).await
    }

    /// Only this loop spawns onto `jobs`, so closing it here (not when shutdown begins)
    /// means the drain cannot see an empty tracker while a claim that was already under
    /// way is about to add a pipeline: that pipeline sees the drain and releases its lease.
    fn stopped(self) {
        self.jobs.close();
        tracing::info!("lease loop stopped claiming");
    }
}

/// One lease-loop step: claims as many due jobs as there are free run slots and spawns
/// their pipelines on `jobs`. A finished pipeline notifies `wake` (when given), since its
/// slot is free.
pub(crate) async fn lease_step(
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
            // The run's outcome is logged inside its span.
            let _ = pipeline.run(job, &stop).await;
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
