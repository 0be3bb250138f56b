//! The loops' wake-ups, and the task that turns in-process signals into them.
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::sync::broadcast::Receiver;
use tokio::sync::broadcast::error::RecvError;
use tokio_util::sync::CancellationToken;

use crate::notify::Signal;

/// The wake-ups of the loops. `Notify` keeps one permit when nobody waits, so a signal
/// that arrives while a step runs is not lost: the next wait returns at once.
#[derive(Clone, Default)]
pub(crate) struct Wakeups {
    pub(crate) lease: Arc<Notify>,
    pub(crate) outbox: Arc<Notify>,
    pub(crate) embeddings: Arc<Notify>,
    pub(crate) extractions: Arc<Notify>,
    pub(crate) webhooks: Arc<Notify>,
}

impl Wakeups {
    /// Wakes every loop once (after signals may have been missed).
    pub(crate) fn all(&self) {
        self.lease.notify_one();
        self.outbox.notify_one();
        self.embeddings.notify_one();
        self.extractions.notify_one();
        self.webhooks.notify_one();
    }
}

/// Turns in-process signals that announce work into loop wake-ups, until `shutdown`.
pub(crate) async fn forward_signals(
    mut signals: Receiver<Signal>,
    wake: Wakeups,
    extraction_loops: usize,
    shutdown: CancellationToken,
) {
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
