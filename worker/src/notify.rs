//! Wake-ups for everything that follows a task: subscribers and worker loops in this
//! process hear them at once; other processes hear the PostgreSQL NOTIFY that the same
//! commit sends.
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use uuid::Uuid;

/// What changed for one task: its id and what kind of reader should look. Carries no
/// content (readers re-read what they follow from the database), so a NOTIFY payload
/// stays far under PostgreSQL's 8000-byte limit and a lost signal costs a poll, never
/// data.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSignal {
    /// The task.
    pub task_id: Uuid,
    /// Whether a worker may now have work (a new outbox entry or a freed lease).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub work_available: bool,
    /// Whether the commit queued webhook deliveries: only then need a webhook loop look
    /// before its next poll.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub webhooks: bool,
    /// Whether the commit was the lease holder's own write under its lease (a checkpoint,
    /// a completion, a failed attempt, a release, an answer draft): no other party took
    /// the lease, so lease keepers need not look. Absent means they should.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_lease_holder: bool,
}

impl TaskSignal {
    /// The task changed (subscribers re-read; lease keepers look).
    pub fn changed(task_id: Uuid) -> Self {
        Self { task_id, work_available: false, webhooks: false, by_lease_holder: false }
    }

    /// The task changed and a worker may now claim it.
    pub fn work(task_id: Uuid) -> Self {
        Self { work_available: true, ..Self::changed(task_id) }
    }

    /// The task changed under its lease holder's own write.
    pub fn by_lease_holder(task_id: Uuid) -> Self {
        Self { by_lease_holder: true, ..Self::changed(task_id) }
    }

    /// The same signal, saying whether webhook deliveries were queued.
    pub fn with_webhooks(self, webhooks: bool) -> Self {
        Self { webhooks: self.webhooks || webhooks, ..self }
    }
}

/// What this process's listeners hear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// A commit changed one task.
    Task(TaskSignal),
    /// A queue message arrived: it names deliveries, not one task, and only tells the
    /// worker loops that work is due somewhere.
    WorkDue,
    /// Documents were written that want background work (embeddings, or an uploaded
    /// file's extraction): wakes the embedding and extraction loops.
    DocumentsDue,
}

impl Signal {
    /// Whether a worker loop may now find work.
    pub fn announces_work(&self) -> bool {
        match self {
            Self::Task(task) => task.work_available,
            Self::WorkDue => true,
            Self::DocumentsDue => false,
        }
    }
}

/// In-process fan-out of signals. Cloning shares the channel.
#[derive(Clone)]
pub struct Notifier {
    sender: broadcast::Sender<Signal>,
}

impl Default for Notifier {
    fn default() -> Self {
        Self::new()
    }
}

impl Notifier {
    /// A notifier with room for bursts; a receiver that lags re-reads from the database.
    pub fn new() -> Self {
        let (sender, _) = broadcast::channel(4096);
        Self { sender }
    }

    /// Follows every signal from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Signal> {
        self.sender.subscribe()
    }

    /// Tells this process's listeners about a task; call only after the commit that made
    /// the change.
    pub fn publish(&self, signal: TaskSignal) {
        // No receiver is fine: nobody is following that task right now.
        let _ = self.sender.send(Signal::Task(signal));
    }

    /// Tells this process's worker loops that work is due (a queue message arrived).
    pub fn work_due(&self) {
        let _ = self.sender.send(Signal::WorkDue);
    }

    /// Tells this process's embedding and extraction loops that documents want their
    /// work (other processes find them when they next poll).
    pub fn documents_due(&self) {
        let _ = self.sender.send(Signal::DocumentsDue);
    }
}

/// The most task signals one cross-process announcement carries (a list of them stays far
/// under PostgreSQL's 8000-byte NOTIFY payload limit).
pub const SIGNALS_PER_NOTIFY: usize = 32;
