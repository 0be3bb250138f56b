//! Publishing outbox entries to an external queue, when there is one.
//!
//! By default the database is the queue: a task's outbox entry stays `pending` until a
//! worker's claim marks it `leased` (`store::claims`), then `completed` or `canceled`
//! with the task; workers find due tasks by polling and by the signals commits send, and
//! no outbox loop runs. An external queue plugs in as a [`Publisher`]: the outbox loop
//! then publishes due entries (`pending → dispatching → dispatched`, `dead` after its
//! attempts), and a claim still marks the entry `leased`, fencing out a publish under way.
//! Publishing never writes the task row.
use async_trait::async_trait;
use entity::research_task_outbox as outbox;
use sea_orm::DatabaseConnection;
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

pub use crate::lifecycle::DispatchOutcome;
use crate::lifecycle::{self, LifecycleError, Published};
use crate::retry::RetryPolicy;
use crate::store;

/// One `research.task` message (schema version 1).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct QueueMessage {
    /// The entry's idempotency key: the queue drops a second message with the same id.
    pub id: String,
    /// Always `research.task`.
    pub event_type: String,
    /// Always 1.
    pub schema_version: i32,
    /// The task to run.
    pub task_id: Uuid,
    /// The entry's payload.
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

/// Why a publish failed; the entry backs off and is tried again.
#[derive(Debug, thiserror::Error)]
#[error("publishing failed")]
pub struct PublishError(#[source] pub crate::research::engine::BoxError);

/// An external queue the outbox publishes to.
#[async_trait]
pub trait Publisher: Send + Sync {
    /// Publishes one message and returns the queue's id for it.
    async fn publish(&self, message: &QueueMessage) -> Result<String, PublishError>;
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

/// Locks due entries, publishes them, and records the outcomes in one transaction.
pub async fn dispatch_due(
    db: &DatabaseConnection,
    publisher: &dyn Publisher,
    worker_id: &str,
    batch: u64,
    now: i64,
    policy: OutboxPolicy,
) -> Result<DispatchOutcome, LifecycleError> {
    let locked = store::outbox::lock_due(db, worker_id, policy.lock_ms, batch, now).await?;
    if locked.is_empty() {
        return Ok(DispatchOutcome::default());
    }
    let mut dispatches = Vec::with_capacity(locked.len());
    for row in locked {
        let published = match publisher.publish(&QueueMessage::of(&row)).await {
            Ok(queue_job_id) => Published::Queued(queue_job_id),
            Err(error) => Published::Failed {
                message: format!("{:#}", anyhow::Error::from(error)),
                delay_ms: policy.retry.delay_ms(row.dispatch_attempts + 1),
            },
        };
        dispatches.push((row, published));
    }
    lifecycle::record_dispatches(db, dispatches, policy.max_attempts, now).await
}
