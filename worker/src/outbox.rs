//! The outbox loop's step: publish due deliveries to the queue. The queue only wakes
//! workers up (the lease loop also finds due jobs by polling), so a lost message delays a
//! task but never loses it. The rows themselves are written by `lifecycle::delivery`.
use async_trait::async_trait;
use entity::{OutboxStatus, research_task_outbox as outbox};
use sea_orm::{ConnectionTrait, DatabaseConnection, DatabaseTransaction, DbErr, Statement};
use serde::Serialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::db::begin_write;
use crate::lifecycle::{LifecycleError, RetryPolicy, delivery};
use crate::notify::{Notifier, TaskSignal};

/// The PostgreSQL channel the `research.task` queue publishes on.
pub const QUEUE_CHANNEL: &str = "kfs_research_task_queue";

/// One `research.task` message (schema version 1).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueMessage {
    /// The delivery's idempotency key: the queue drops a second message with the same id.
    pub id: String,
    /// Always `research.task`.
    pub event_type: String,
    /// Always 1.
    pub schema_version: i32,
    /// The task to run.
    pub task_id: Uuid,
    /// The delivery's payload.
    pub payload: Value,
}

impl QueueMessage {
    fn of(row: &outbox::Model) -> Self {
        Self {
            id: row.idempotency_key.clone(),
            event_type: row.event_type.clone(),
            schema_version: row.schema_version,
            task_id: row.research_task_job_id,
            payload: row.payload.clone(),
        }
    }
}

/// Why a publish failed; the delivery backs off and is tried again.
#[derive(Debug, thiserror::Error)]
#[error("publishing failed")]
pub struct PublishError(#[source] pub crate::engine::BoxError);

/// A queue the outbox publishes to.
#[async_trait]
pub trait Publisher: Send + Sync {
    /// Publishes one message and returns the queue's id for it.
    async fn publish(&self, message: &QueueMessage) -> Result<String, PublishError>;

    /// Runs once inside the transaction that records a batch as dispatched, before its
    /// commit (a transactional queue, such as PostgreSQL NOTIFY, publishes here).
    async fn before_commit(&self, _txn: &DatabaseTransaction, _published: &[QueueMessage]) -> Result<(), DbErr> {
        Ok(())
    }

    /// Runs once after that commit.
    fn after_commit(&self, _published: &[QueueMessage]) {}
}

/// The embedded queue: a message is a wake-up on the process's notifier.
pub struct InProcessPublisher {
    notifier: Notifier,
}

impl InProcessPublisher {
    /// Publishes on this notifier.
    pub fn new(notifier: Notifier) -> Self {
        Self { notifier }
    }
}

#[async_trait]
impl Publisher for InProcessPublisher {
    async fn publish(&self, message: &QueueMessage) -> Result<String, PublishError> {
        Ok(format!("inproc:{}", message.id))
    }

    fn after_commit(&self, published: &[QueueMessage]) {
        for message in published {
            self.notifier.publish(TaskSignal {
                task_id: message.task_id,
                progress_sequence: None,
                partial_sequence: None,
                work_available: true,
                answer_draft: false,
                webhooks: false,
                by_lease_holder: false,
            });
        }
    }
}

/// The PostgreSQL queue: one NOTIFY on [`QUEUE_CHANNEL`] per commit, naming the batch's
/// message ids, delivered when the dispatch is recorded and never if it rolls back.
pub struct PostgresPublisher;

/// NOTIFY payloads must stay under 8000 bytes; the ids are a courtesy, the wake-up is what counts.
const NOTIFY_BUDGET: usize = 7000;

#[async_trait]
impl Publisher for PostgresPublisher {
    async fn publish(&self, message: &QueueMessage) -> Result<String, PublishError> {
        Ok(format!("pg:{}", message.id))
    }

    async fn before_commit(&self, txn: &DatabaseTransaction, published: &[QueueMessage]) -> Result<(), DbErr> {
        if published.is_empty() || !crate::db::is_postgres(txn.get_database_backend()) {
            return Ok(());
        }
        let mut ids = Vec::new();
        let mut size = 0;
        for message in published {
            size += message.id.len() + 3;
            if size > NOTIFY_BUDGET {
                break;
            }
            ids.push(message.id.as_str());
        }
        let payload = json!({ "schema_version": 1, "messages": ids, "count": published.len() }).to_string();
        let statement = Statement::from_sql_and_values(
            txn.get_database_backend(),
            "SELECT pg_notify($1, $2)",
            [QUEUE_CHANNEL.into(), payload.into()],
        );
        txn.execute_raw(statement).await.map(|_| ())
    }
}

/// How the outbox retries and gives up.
#[derive(Debug, Clone, Copy)]
pub struct OutboxPolicy {
    /// How long a loop holds a row while publishing it, in milliseconds.
    pub lock_ms: i64,
    /// Publish attempts before a row is `dead`.
    pub max_attempts: i32,
    /// Backoff between attempts.
    pub retry: RetryPolicy,
}

/// What one dispatch step did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DispatchOutcome {
    /// Rows published and recorded `dispatched`.
    pub dispatched: usize,
    /// Rows whose publish failed and that will be retried.
    pub retrying: usize,
    /// Rows that used their last attempt and are now `dead`.
    pub dead: usize,
}

impl DispatchOutcome {
    /// Whether the step found nothing to do.
    pub fn is_idle(&self) -> bool {
        *self == Self::default()
    }
}

/// Claims due deliveries, publishes them, and records the outcome of the batch in one
/// transaction (with one NOTIFY for the PostgreSQL queue).
pub async fn dispatch_due(
    db: &DatabaseConnection,
    publisher: &dyn Publisher,
    worker_id: &str,
    batch: u64,
    now: i64,
    policy: OutboxPolicy,
) -> Result<DispatchOutcome, LifecycleError> {
    let locked = delivery::lock_due(db, worker_id, policy.lock_ms, batch, now).await?;
    if locked.is_empty() {
        return Ok(DispatchOutcome::default());
    }
    let mut results = Vec::with_capacity(locked.len());
    for row in &locked {
        results.push(publisher.publish(&QueueMessage::of(row)).await);
    }
    let mut outcome = DispatchOutcome::default();
    let mut published = Vec::new();
    let txn = begin_write(db).await?;
    for (row, result) in locked.iter().zip(results) {
        match result {
            Ok(queue_job_id) => {
                if delivery::record_published(&txn, row, &queue_job_id, now).await? {
                    metrics::histogram!("research_outbox_dispatch_seconds")
                        .record((now - row.created_at).max(0) as f64 / 1e3);
                    outcome.dispatched += 1;
                    published.push(QueueMessage::of(row));
                }
            }
            Err(error) => {
                let delay = policy.retry.delay_ms(row.dispatch_attempts + 1);
                let message = format!("{:#}", anyhow::Error::from(error));
                let written = delivery::record_failed(&txn, row, &message, policy.max_attempts, delay, now).await?;
                match written {
                    Some(OutboxStatus::Dead) => {
                        tracing::error!(outbox.id = %row.id, task.id = %row.research_task_job_id, error = %message, "outbox delivery is dead");
                        metrics::counter!("research_outbox_dead_total").increment(1);
                        outcome.dead += 1;
                    }
                    Some(_) => {
                        tracing::warn!(outbox.id = %row.id, error = %message, "outbox publish failed; will retry");
                        outcome.retrying += 1;
                    }
                    None => {}
                }
            }
        }
    }
    publisher.before_commit(&txn, &published).await?;
    txn.commit().await?;
    publisher.after_commit(&published);
    Ok(outcome)
}
