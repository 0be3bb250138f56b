//! The background loops, each declared once in a file of its own: its name, what wakes
//! it, its poll and its step, built from the settings it reads ([`Loop`]). One runner
//! ([`run`]) drives them all the same way; the composition root (`runtime::spawn_with`)
//! lists which run. Each step is also a public function returning a [`Step`], so tests
//! drive a loop without sleeping.
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::lifecycle::LifecycleError;
use crate::observe::Ticks;

pub(crate) mod deletions;
pub(crate) mod embeddings;
pub(crate) mod extraction;
pub(crate) mod lease;
pub(crate) mod outbox;
pub(crate) mod retention;
pub(crate) mod wakeups;
pub(crate) mod webhooks;

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

impl Step {
    /// Whether the step did work, so more may be due at once.
    fn was_busy(self) -> bool {
        match self {
            Self::Claimed(_)
            | Self::Published(_)
            | Self::Embedded(_)
            | Self::Delivered(_)
            | Self::Deleted(_)
            | Self::Extracted(_) => true,
            Self::Backoff(_) | Self::Idle => false,
        }
    }
}

/// A background loop.
pub(crate) trait Loop: Send + 'static {
    /// What it does, as logs ("… failed") and readiness name it.
    const NAME: &'static str;

    /// What wakes it before its poll is up: a signal of work, or nothing (it only polls).
    fn wake_up(&self) -> Option<Arc<Notify>>;

    /// How long an idle step waits for a wake-up before looking again anyway.
    fn poll(&self) -> Duration;

    /// One step.
    fn step(&mut self) -> impl Future<Output = Result<Step, LifecycleError>> + Send;

    /// Called once the loop has stopped stepping.
    fn stopped(self)
    where
        Self: Sized,
    {
    }
}

/// Runs `job` until `stop`. A busy step goes round again at once (more may be due);
/// otherwise the next waits for a wake-up or the poll, whichever comes first: the poll is
/// the safety net that makes a lost wake-up a delay, never a stuck task. A failed step is
/// logged and waits like an idle one; a step told to back off waits that long.
pub(crate) async fn run<L: Loop>(mut job: L, ticks: Ticks, stop: CancellationToken) {
    let poll = job.poll();
    // A loop with no wake-up waits on one nobody notifies.
    let wake = job.wake_up().unwrap_or_default();
    loop {
        ticks.tick(L::NAME, poll);
        let step = job.step().await.unwrap_or_else(|error| {
            tracing::error!(error = %error, "{} failed", L::NAME);
            Step::Idle
        });
        let backoff = match step {
            Step::Backoff(wait) => {
                // A loop waiting out an endpoint's Retry-After has not stalled.
                ticks.tick(L::NAME, wait.max(poll));
                Some(wait)
            }
            _ => None,
        };
        // Stopping first, so a stream of wake-ups cannot keep a stopping worker going.
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            () = std::future::ready(()), if step.was_busy() => {}
            () = tokio::time::sleep(backoff.unwrap_or_default()), if backoff.is_some() => {}
            () = wake.notified(), if backoff.is_none() => {}
            () = tokio::time::sleep(poll), if backoff.is_none() => {}
        }
    }
    job.stopped();
}

/// The common poll of the loops that have a wake-up (`KFS_POLL_INTERVAL_MS`).
pub(crate) fn poll_interval(settings: &crate::config::WorkerSettings) -> Duration {
    Duration::from_millis(settings.poll_interval_ms.max(1))
}
