//! Wake-ups for everything that follows a task: subscribers and worker loops in this
//! process hear them at once; other processes hear the PostgreSQL NOTIFY that the same
//! commit sends.
use sea_orm::{ConnectionTrait, DbErr, Statement};
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use uuid::Uuid;

/// The PostgreSQL channel every process listens on.
pub const CHANNEL: &str = "kfs_research_task";

/// What changed for one task. Carries ids and sequences only, never content, so a NOTIFY
/// payload stays far under PostgreSQL's 8000-byte limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSignal {
    /// The task.
    pub task_id: Uuid,
    /// The newest progress sequence this commit wrote, if any.
    pub progress_sequence: Option<i32>,
    /// The newest partial-result sequence this commit wrote, if any.
    pub partial_sequence: Option<i32>,
    /// Whether a worker may now have work (a new delivery or a freed lease).
    pub work_available: bool,
    /// Whether the commit wrote the task's answer draft, and nothing else: answer
    /// subscribers read it (it is also `by_lease_holder`: lease keepers need not look).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub answer_draft: bool,
    /// Whether the commit queued webhook deliveries: only then need a webhook loop look
    /// before its next poll.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub webhooks: bool,
    /// Whether the commit was the lease holder's own write under its lease (a checkpoint,
    /// a completion, a failed attempt, a release): no other party took the lease, so lease
    /// keepers need not look. Absent means they should.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_lease_holder: bool,
}

/// What this process's listeners hear.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Signal {
    /// A commit changed one task.
    Task(TaskSignal),
    /// A queue message arrived: it names deliveries, not one task, and only tells the
    /// worker loops that work is due somewhere.
    WorkDue,
    /// Documents were written that want embeddings: wakes the embedding loop.
    EmbeddingsDue,
}

impl Signal {
    /// Whether a worker loop may now find work.
    pub fn announces_work(&self) -> bool {
        match self {
            Self::Task(task) => task.work_available,
            Self::WorkDue => true,
            Self::EmbeddingsDue => false,
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

    /// Tells this process's embedding loop that documents want embeddings (other
    /// processes find them when they next poll).
    pub fn embeddings_due(&self) {
        let _ = self.sender.send(Signal::EmbeddingsDue);
    }
}

/// Queues a PostgreSQL NOTIFY inside the transaction, delivered at commit (never before,
/// never when it rolls back). One per commit: callers send one signal per transaction.
pub async fn notify_in_transaction<C: ConnectionTrait>(txn: &C, signal: &TaskSignal) -> Result<(), DbErr> {
    if txn.get_database_backend() != sea_orm::DatabaseBackend::Postgres {
        return Ok(());
    }
    let payload = serde_json::to_string(signal).map_err(|error| DbErr::Custom(error.to_string()))?;
    queue_notify(txn, payload).await
}

/// The most task signals one NOTIFY carries (a list of them stays far under
/// PostgreSQL's 8000-byte payload limit).
pub const SIGNALS_PER_NOTIFY: usize = 32;

/// [`notify_in_transaction`] for a commit that changed several tasks: one NOTIFY whose
/// payload lists their signals, one per [`SIGNALS_PER_NOTIFY`] of them.
pub async fn notify_many_in_transaction<C: ConnectionTrait>(txn: &C, signals: &[TaskSignal]) -> Result<(), DbErr> {
    match signals {
        [] => Ok(()),
        [one] => notify_in_transaction(txn, one).await,
        _ if txn.get_database_backend() != sea_orm::DatabaseBackend::Postgres => Ok(()),
        _ => {
            for chunk in signals.chunks(SIGNALS_PER_NOTIFY) {
                let payload = serde_json::to_string(chunk).map_err(|error| DbErr::Custom(error.to_string()))?;
                queue_notify(txn, payload).await?;
            }
            Ok(())
        }
    }
}

async fn queue_notify<C: ConnectionTrait>(txn: &C, payload: String) -> Result<(), DbErr> {
    let statement = Statement::from_sql_and_values(
        sea_orm::DatabaseBackend::Postgres,
        "SELECT pg_notify($1, $2)",
        [CHANNEL.into(), payload.into()],
    );
    txn.execute_raw(statement).await.map(|_| ())
}
