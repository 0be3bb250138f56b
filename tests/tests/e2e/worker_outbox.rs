//! The outbox loop and the runtime: deliveries are published once, redelivered when a
//! publisher dies mid-publish, dead-lettered after repeated failures; the in-process
//! runtime runs a created task to completion and shuts down releasing its leases.
use std::sync::Mutex;

use entity::{AccessChannel, OutboxStatus, Stage, now_millis, research_task_outbox as outbox};
use kfs_tests::{DbTest, TestDb, db_tests, fixtures};
use sea_orm::{ColumnTrait, EntityTrait, QueryFilter};
use uuid::Uuid;
use worker::Notifier;
use worker::lifecycle::RetryPolicy;
use worker::outbox::{OutboxPolicy, PublishError, Publisher, QueueMessage, dispatch_due};
use worker::research::engine::async_trait;
use worker::runtime::{CancellationToken, TaskTracker};
use worker::store::outbox as delivery;

use crate::worker_support::{Act, Ask, Scripted, create_task, reload, settings, space_with_documents};

/// This module's tests.
pub fn tests() -> Vec<DbTest> {
    db_tests![
        a_pending_delivery_is_published_once_with_its_idempotency_key,
        a_delivery_abandoned_mid_publish_is_redelivered_after_its_lock_lapses,
        a_publish_that_lost_the_race_to_a_claim_leaves_the_running_job_alone,
        failed_publishes_back_off_and_end_dead,
        the_runtime_runs_a_created_task_to_completion,
        shutdown_releases_the_leases_of_stages_still_running,
    ]
}

const POLICY: OutboxPolicy =
    OutboxPolicy { lock_ms: 30_000, max_attempts: 3, retry: RetryPolicy { base_ms: 1_000, cap_ms: 4_000 } };

/// Remembers what it published; fails every publish when `failing`.
#[derive(Default)]
struct Recording {
    failing: bool,
    published: Mutex<Vec<QueueMessage>>,
}

#[async_trait]
impl Publisher for Recording {
    async fn publish(&self, message: &QueueMessage) -> Result<String, PublishError> {
        if self.failing {
            return Err(PublishError("queue unavailable".into()));
        }
        self.published.lock().map_err(|_| PublishError("poisoned".into()))?.push(message.clone());
        Ok(format!("queued:{}", message.id))
    }
}

impl Recording {
    fn ids(&self) -> Vec<String> {
        self.published.lock().map(|list| list.iter().map(|m| m.id.clone()).collect()).unwrap_or_default()
    }
}

async fn delivery_of(db: &TestDb, task_id: Uuid) -> anyhow::Result<outbox::Model> {
    outbox::Entity::find()
        .filter(outbox::Column::ResearchTaskJobId.eq(task_id))
        .one(&db.db)
        .await?
        .ok_or_else(|| anyhow::anyhow!("no delivery for {task_id}"))
}

async fn a_pending_delivery_is_published_once_with_its_idempotency_key(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let publisher = Recording::default();
    let now = now_millis();
    let outcome = dispatch_due(&db.db, &publisher, "outbox-a", 8, now, POLICY).await?;
    anyhow::ensure!(outcome.dispatched == 1, "{outcome:?}");
    let row = delivery_of(&db, task.job.id).await?;
    anyhow::ensure!(
        row.status == OutboxStatus::Dispatched && row.delivered_at == Some(now) && row.dispatch_attempts == 1
    );
    anyhow::ensure!(
        row.lock_token.is_none() && row.locked_by.is_none() && row.locked_until.is_none(),
        "the lock was kept: {row:?}"
    );
    let queue_id = format!("queued:{}", row.idempotency_key);
    kfs_tests::ensure_eq!(row.queue_job_id.as_deref(), Some(queue_id.as_str()));
    kfs_tests::ensure_eq!(reload(&db, task.job.id).await?.queue_job_id.as_deref(), Some(queue_id.as_str()));
    let messages = publisher.published.lock().map_err(|_| anyhow::anyhow!("poisoned"))?.clone();
    anyhow::ensure!(
        messages.len() == 1 && messages[0].id == row.idempotency_key && messages[0].schema_version == 1,
        "published {messages:?} for {row:?}"
    );
    anyhow::ensure!(messages[0].event_type == "research.task" && messages[0].task_id == task.job.id);
    anyhow::ensure!(dispatch_due(&db.db, &publisher, "outbox-a", 8, now, POLICY).await?.is_idle());
    Ok(())
}

async fn a_delivery_abandoned_mid_publish_is_redelivered_after_its_lock_lapses(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let now = now_millis();
    // A publisher locks the row and dies before recording anything.
    let locked = delivery::lock_due(&db.db, "outbox-dead", POLICY.lock_ms, 8, now).await?;
    anyhow::ensure!(locked.len() == 1 && locked[0].status == OutboxStatus::Dispatching, "locked {locked:?}");
    let publisher = Recording::default();
    anyhow::ensure!(
        dispatch_due(&db.db, &publisher, "outbox-b", 8, now, POLICY).await?.is_idle(),
        "a live lock was stolen"
    );
    let later = now + POLICY.lock_ms;
    let outcome = dispatch_due(&db.db, &publisher, "outbox-b", 8, later, POLICY).await?;
    anyhow::ensure!(outcome.dispatched == 1, "{outcome:?}");
    let row = delivery_of(&db, task.job.id).await?;
    anyhow::ensure!(
        row.status == OutboxStatus::Dispatched && publisher.ids() == [row.idempotency_key.clone()],
        "{row:?}, published {:?}",
        publisher.ids()
    );
    // The dead publisher's late write is fenced out by its lost lock token.
    let txn = worker::store::begin_write(&db.db).await?;
    let landed = delivery::record_published(&txn, &locked[0], "late", later).await?;
    txn.commit().await?;
    anyhow::ensure!(!landed && delivery_of(&db, task.job.id).await?.queue_job_id != Some("late".into()));
    anyhow::ensure!(reload(&db, task.job.id).await?.queue_job_id != Some("late".into()), "the job took the late id");
    Ok(())
}

async fn a_publish_that_lost_the_race_to_a_claim_leaves_the_running_job_alone(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let now = now_millis();
    // The outbox loop locks the delivery; a worker claims the job before it records.
    let locked = delivery::lock_due(&db.db, "outbox-a", POLICY.lock_ms, 8, now).await?;
    anyhow::ensure!(locked.len() == 1, "locked {locked:?}");
    let claimed = worker::lifecycle::claim_due(&db.db, &Notifier::new(), "worker-a", 30_000, 1, now).await?;
    anyhow::ensure!(claimed.len() == 1, "claimed {}", claimed.len());
    let running = reload(&db, task.job.id).await?;
    let txn = worker::store::begin_write(&db.db).await?;
    let landed = delivery::record_published(&txn, &locked[0], "queued:late", now + 1).await?;
    txn.commit().await?;
    anyhow::ensure!(!landed, "the publish was recorded after the claim");
    // The lease holder's row is as its claim left it: no queue id, no new row version.
    kfs_tests::ensure_eq!(reload(&db, task.job.id).await?, running);
    kfs_tests::ensure_eq!(delivery_of(&db, task.job.id).await?.status, OutboxStatus::Leased);
    Ok(())
}

async fn failed_publishes_back_off_and_end_dead(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let publisher = Recording { failing: true, ..Recording::default() };
    let mut now = now_millis();
    for attempt in 1..=POLICY.max_attempts {
        let outcome = dispatch_due(&db.db, &publisher, "outbox-a", 8, now, POLICY).await?;
        let row = delivery_of(&db, task.job.id).await?;
        anyhow::ensure!(
            row.dispatch_attempts == attempt
                && row.last_error.as_deref().is_some_and(|e| e.contains("queue unavailable"))
        );
        anyhow::ensure!(row.lock_token.is_none(), "the lock was kept: {row:?}");
        if attempt < POLICY.max_attempts {
            anyhow::ensure!(
                outcome.retrying == 1 && row.status == OutboxStatus::Pending && row.available_at > now,
                "{outcome:?} {row:?}"
            );
            anyhow::ensure!(
                dispatch_due(&db.db, &publisher, "outbox-a", 8, row.available_at - 1, POLICY).await?.is_idle()
            );
            now = row.available_at;
        } else {
            anyhow::ensure!(outcome.dead == 1 && row.status == OutboxStatus::Dead, "{outcome:?} {row:?}");
        }
    }
    anyhow::ensure!(dispatch_due(&db.db, &publisher, "outbox-a", 8, now + 3_600_000, POLICY).await?.is_idle());
    // A dead delivery delays nothing: the lease loop still finds the job by itself.
    let claimed = worker::lifecycle::claim_due(&db.db, &Notifier::new(), "worker-a", 30_000, 1, now).await?;
    kfs_tests::ensure_eq!(claimed.len(), 1);
    Ok(())
}

async fn the_runtime_runs_a_created_task_to_completion(db: TestDb) -> anyhow::Result<()> {
    let (_space, owner, _documents) = space_with_documents(&db).await?;
    let notifier = Notifier::new();
    let mut signals = notifier.subscribe();
    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    worker::runtime::spawn(db.db.clone(), notifier.clone(), settings("runtime"), shutdown.clone(), &tracker)?;
    let task =
        create_task(&db, &notifier, fixtures::member_grant(&owner, AccessChannel::Interactive), Ask::default()).await?;
    // Wait on the task's own signals, re-reading the row each time, until it completes.
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        if reload(&db, task.id).await?.stage == Stage::Completed {
            break;
        }
        tokio::time::timeout_at(deadline, signals.recv())
            .await
            .map_err(|_| anyhow::anyhow!("the task never completed"))??;
    }
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
    let row = delivery_of(&db, task.id).await?;
    anyhow::ensure!(row.status == OutboxStatus::Completed, "{row:?}");
    Ok(())
}

async fn shutdown_releases_the_leases_of_stages_still_running(db: TestDb) -> anyhow::Result<()> {
    let (_space, owner, _documents) = space_with_documents(&db).await?;
    let notifier = Notifier::new();
    let engine = Scripted::new(&db, Stage::Analyzing, Act::Block);
    let shutdown = CancellationToken::new();
    let tracker = TaskTracker::new();
    let task =
        create_task(&db, &notifier, fixtures::member_grant(&owner, AccessChannel::Interactive), Ask::default()).await?;
    worker::runtime::spawn_with_engine(
        db.db.clone(),
        notifier.clone(),
        settings("stopping"),
        engine.clone(),
        shutdown.clone(),
        &tracker,
    );
    engine.entered.notified().await;
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
    let row = reload(&db, task.id).await?;
    anyhow::ensure!(row.stage == Stage::Analyzing && row.lease_token.is_none() && row.worker_id.is_none(), "{row:?}");
    anyhow::ensure!(row.execution_attempts == 0, "a released attempt is given back: {}", row.execution_attempts);
    let claimed = worker::lifecycle::claim_due(&db.db, &notifier, "next", 30_000, 1, now_millis()).await?;
    anyhow::ensure!(
        claimed.len() == 1 && claimed[0].job.stage == Stage::Analyzing,
        "another worker picks it up at once"
    );
    Ok(())
}
