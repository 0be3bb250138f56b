//! `research_task_outbox`: the message shape, statuses, the lock triple, and one delivery
//! per (job, revision) with a globally unique message id.
use anyhow::Context as _;
use entity::{OutboxStatus, research_task_outbox as outbox};
use kfs_tests::{DbTest, TestDb, Violation, db_tests, fixtures};
use sea_orm::{ActiveEnum, ActiveValue::Set, EntityTrait, Iterable, Value};
use uuid::Uuid;

use super::{accepted, set};

/// The outbox tests.
pub fn tests() -> Vec<DbTest> {
    db_tests![
        outbox_event_check_rejects_any_event_type_but_research_task,
        outbox_schema_check_rejects_any_schema_version_but_one,
        outbox_status_check_accepts_every_status_and_rejects_any_other,
        outbox_positive_check_rejects_a_delivery_revision_below_one,
        outbox_positive_check_rejects_negative_dispatch_attempts,
        outbox_lock_check_rejects_any_partial_lock,
        outbox_idempotency_keys_are_unique_across_all_jobs,
        outbox_delivery_revisions_are_unique_per_job,
        outbox_rows_must_belong_to_an_existing_job,
    ]
}

const OUTBOX: &str = "research_task_outbox";

/// The id of the delivery `create` wrote for a fresh task.
async fn first_delivery(db: &TestDb) -> anyhow::Result<outbox::Model> {
    let task = fixtures::task(db).await?;
    let deliveries = fixtures::deliveries(db, &task.job).await?;
    deliveries.into_iter().next().context("create wrote no outbox delivery")
}

async fn insert(db: &TestDb, row: outbox::ActiveModel) -> Result<u64, sea_orm::DbErr> {
    outbox::Entity::insert(row).exec_without_returning(&db.db).await
}

async fn outbox_event_check_rejects_any_event_type_but_research_task(db: TestDb) -> anyhow::Result<()> {
    let delivery = first_delivery(&db).await?.id;
    for event_type in ["research_task.started", "research.task.v2", "RESEARCH.TASK"] {
        let result = set(&db, OUTBOX, delivery, &[("event_type", event_type.into())]).await;
        db.assert_violates(result, Violation::Check("research_task_outbox_event_ck")).await.context(event_type)?;
    }
    accepted(set(&db, OUTBOX, delivery, &[("event_type", outbox::EVENT_TYPE.into())]).await, "research.task")
}

async fn outbox_schema_check_rejects_any_schema_version_but_one(db: TestDb) -> anyhow::Result<()> {
    let delivery = first_delivery(&db).await?.id;
    for version in [0, 2] {
        let result = set(&db, OUTBOX, delivery, &[("schema_version", version.into())]).await;
        db.assert_violates(result, Violation::Check("research_task_outbox_schema_ck")).await?;
    }
    accepted(set(&db, OUTBOX, delivery, &[("schema_version", outbox::SCHEMA_VERSION.into())]).await, "version 1")
}

async fn outbox_status_check_accepts_every_status_and_rejects_any_other(db: TestDb) -> anyhow::Result<()> {
    let delivery = first_delivery(&db).await?.id;
    for status in OutboxStatus::iter() {
        let value = status.to_value();
        accepted(set(&db, OUTBOX, delivery, &[("status", value.clone().into())]).await, &value)?;
    }
    for status in ["failed", "PENDING", "delivered"] {
        let result = set(&db, OUTBOX, delivery, &[("status", status.into())]).await;
        db.assert_violates(result, Violation::Check("research_task_outbox_status_ck")).await.context(status)?;
    }
    Ok(())
}

async fn outbox_positive_check_rejects_a_delivery_revision_below_one(db: TestDb) -> anyhow::Result<()> {
    let delivery = first_delivery(&db).await?.id;
    let result = set(&db, OUTBOX, delivery, &[("delivery_revision", 0.into())]).await;
    db.assert_violates(result, Violation::Check("research_task_outbox_positive_ck")).await
}

async fn outbox_positive_check_rejects_negative_dispatch_attempts(db: TestDb) -> anyhow::Result<()> {
    let delivery = first_delivery(&db).await?.id;
    let result = set(&db, OUTBOX, delivery, &[("dispatch_attempts", (-1).into())]).await;
    db.assert_violates(result, Violation::Check("research_task_outbox_positive_ck")).await?;
    accepted(set(&db, OUTBOX, delivery, &[("dispatch_attempts", 7.into())]).await, "seven attempts")
}

async fn outbox_lock_check_rejects_any_partial_lock(db: TestDb) -> anyhow::Result<()> {
    let delivery = first_delivery(&db).await?.id;
    let token = || Value::from(Uuid::new_v4());
    let by = || Value::from("outbox-1");
    let until = || Value::from(entity::now_millis() + 30_000);
    let no_token = || Value::from(Option::<Uuid>::None);
    let no_by = || Value::from(Option::<String>::None);
    let no_until = || Value::from(Option::<i64>::None);
    let partial_locks = [
        [token(), no_by(), no_until()],
        [no_token(), by(), no_until()],
        [no_token(), no_by(), until()],
        [token(), by(), no_until()],
        [token(), no_by(), until()],
        [no_token(), by(), until()],
    ];
    for [token, by, until] in partial_locks {
        let what = format!("lock ({token:?}, {by:?}, {until:?})");
        let lock = [("lock_token", token), ("locked_by", by), ("locked_until", until)];
        db.assert_violates(set(&db, OUTBOX, delivery, &lock).await, Violation::Check("research_task_outbox_lock_ck"))
            .await
            .context(what)?;
    }
    let full = [("lock_token", token()), ("locked_by", by()), ("locked_until", until())];
    accepted(set(&db, OUTBOX, delivery, &full).await, "a full lock")?;
    let none = [("lock_token", no_token()), ("locked_by", no_by()), ("locked_until", no_until())];
    accepted(set(&db, OUTBOX, delivery, &none).await, "no lock")
}

/// The key is the queue's message id, so it must be unique across every job, not per job.
async fn outbox_idempotency_keys_are_unique_across_all_jobs(db: TestDb) -> anyhow::Result<()> {
    let first = first_delivery(&db).await?;
    let other = fixtures::task(&db).await?.job;
    let result = insert(&db, fixtures::outbox_row(&other, 2, &first.idempotency_key)).await;
    db.assert_violates(result, Violation::Unique("research_task_outbox_idempotency_uq")).await?;
    insert(&db, fixtures::outbox_row(&other, 2, "another message id")).await?;
    Ok(())
}

async fn outbox_delivery_revisions_are_unique_per_job(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let result = insert(&db, fixtures::outbox_row(&task.job, 1, "a second first delivery")).await;
    db.assert_violates(result, Violation::Unique("research_task_outbox_job_delivery_uq")).await?;
    insert(&db, fixtures::outbox_row(&task.job, 2, "the second delivery")).await?;
    // Another job's deliveries count from 1 again.
    let other = fixtures::task(&db).await?.job;
    let deliveries = fixtures::deliveries(&db, &other).await?;
    anyhow::ensure!(
        deliveries.iter().map(|row| row.delivery_revision).collect::<Vec<_>>() == [1],
        "the other job's deliveries: {deliveries:?}"
    );
    Ok(())
}

async fn outbox_rows_must_belong_to_an_existing_job(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let mut orphan = fixtures::outbox_row(&task.job, 9, "an orphan");
    orphan.research_task_job_id = Set(Uuid::new_v4());
    db.assert_violates(insert(&db, orphan).await, Violation::ForeignKey(None)).await
}
