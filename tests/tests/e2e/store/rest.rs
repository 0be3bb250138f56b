//! The rest of the store's backend-specific operations, on both backends: signals between
//! processes, the per-tenant locks, what quotas count, answer drafts, and how many writers
//! are worth running at once.
use std::time::Duration;

use kfs_tests::{Backend, DbTest, TestDb, db_tests, ensure_eq, fixtures};
use worker::notify::{Notifier, Signal, TaskSignal};
use worker::store::{self, locks::TenantLock};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        an_announced_signal_reaches_other_processes_only_when_its_transaction_commits,
        the_seal_lock_waits_for_creators_and_creators_share_it,
        quotas_count_unfinished_tasks_and_what_a_day_spent,
        a_finished_draft_keeps_its_generation_only_when_it_was_the_answers_start,
    ]
}

async fn an_announced_signal_reaches_other_processes_only_when_its_transaction_commits(
    db: TestDb,
) -> anyhow::Result<()> {
    let elsewhere = Notifier::new();
    let mut heard = elsewhere.subscribe();
    let other_pool = worker::db::connect(&db.url).await?;
    let (shutdown, tracker) = (worker::runtime::CancellationToken::new(), worker::runtime::TaskTracker::new());
    store::signals::spawn_listener(&other_pool, elsewhere.clone(), || {}, shutdown.clone(), &tracker);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (kept, dropped) = (uuid::Uuid::now_v7(), uuid::Uuid::now_v7());
    let txn = store::begin_write(&db.db).await?;
    store::signals::announce(&txn, &[TaskSignal::changed(dropped)]).await?;
    txn.rollback().await?;
    let txn = store::begin_write(&db.db).await?;
    store::signals::announce(&txn, &[TaskSignal::work(kept).with_webhooks(true)]).await?;
    txn.commit().await?;
    let mut got = Vec::new();
    while let Ok(Ok(Signal::Task(signal))) = tokio::time::timeout(Duration::from_millis(700), heard.recv()).await {
        got.push(signal);
    }
    match db.backend {
        // Across processes, the committed signal as it was sent, and nothing else.
        Backend::Postgres => ensure_eq!(got, vec![TaskSignal::work(kept).with_webhooks(true)]),
        // One process: signals travel in-process only, there is nothing to hear.
        Backend::Sqlite => ensure_eq!(got, Vec::<TaskSignal>::new()),
    }
    shutdown.cancel();
    tracker.close();
    tracker.wait().await;
    other_pool.close().await?;
    Ok(())
}

async fn the_seal_lock_waits_for_creators_and_creators_share_it(db: TestDb) -> anyhow::Result<()> {
    let tenant = format!("tenant-{}", uuid::Uuid::new_v4().simple());
    let creator = store::begin_write(&db.db).await?;
    store::locks::lock_tenant(&creator, &tenant, TenantLock::Creating).await?;
    if db.backend == Backend::Postgres {
        // Creators share the lock; the seal waits for every creator under way.
        let other = store::begin_write(&db.db).await?;
        let shared = tokio::time::timeout(
            Duration::from_secs(2),
            store::locks::lock_tenant(&other, &tenant, TenantLock::Creating),
        )
        .await;
        anyhow::ensure!(matches!(shared, Ok(Ok(()))), "a second creator waited");
        other.rollback().await?;
        let sealer = db.db.clone();
        let tenant_for_seal = tenant.clone();
        let seal = tokio::spawn(async move {
            let txn = store::begin_write(&sealer).await?;
            store::locks::lock_tenant(&txn, &tenant_for_seal, TenantLock::Sealing).await?;
            txn.rollback().await?;
            anyhow::Ok(std::time::Instant::now())
        });
        tokio::time::sleep(Duration::from_millis(300)).await;
        let released = std::time::Instant::now();
        creator.rollback().await?;
        let sealed = seal.await??;
        anyhow::ensure!(sealed >= released, "the seal did not wait for the creator");
    } else {
        // One writer at a time already: the write transaction is the lock.
        creator.rollback().await?;
    }
    Ok(())
}

async fn quotas_count_unfinished_tasks_and_what_a_day_spent(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let tenant = &task.job.tenant_id;
    ensure_eq!(store::quotas::unfinished_tasks(&db.db, tenant).await?, 1);
    ensure_eq!(store::quotas::usd_nanos_spent_since(&db.db, tenant, 0).await?, 0);
    let txn = store::begin_write(&db.db).await?;
    let row = store::tasks::lock(&txn, task.job.id).await?.ok_or_else(|| anyhow::anyhow!("no row"))?;
    store::tasks::save(
        &txn,
        entity::research_task_job::Model { cost: serde_json::json!({ "usd_nanos": 1234 }), ..row },
    )
    .await?;
    txn.commit().await?;
    fixtures::job(&db, &task.member, entity::AccessChannel::Interactive).await?;
    ensure_eq!(store::quotas::usd_nanos_spent_since(&db.db, tenant, 0).await?, 1234);
    ensure_eq!(store::quotas::usd_nanos_spent_since(&db.db, tenant, entity::now_millis() + 1).await?, 0);
    ensure_eq!(store::quotas::unfinished_tasks(&db.db, tenant).await?, 2);
    ensure_eq!(store::quotas::unfinished_tasks(&db.db, "no-such-tenant").await?, 0);
    Ok(())
}

async fn a_finished_draft_keeps_its_generation_only_when_it_was_the_answers_start(db: TestDb) -> anyhow::Result<()> {
    let task = fixtures::task(&db).await?;
    let (tenant, id) = (task.job.tenant_id.as_str(), task.job.id);
    let now = entity::now_millis();
    store::drafts::upsert(&db.db, store::drafts::row(tenant, id, 1, "Bees ", now)).await?;
    store::drafts::finish(&db.db, tenant, id, "Bees make honey.", now).await?;
    let draft = store::drafts::find(&db.db, id).await?.ok_or_else(|| anyhow::anyhow!("no draft"))?;
    ensure_eq!((draft.generation, draft.answer.as_str(), draft.char_count), (1, "Bees make honey.", 16));
    store::drafts::upsert(&db.db, store::drafts::row(tenant, id, 2, "Wasps", now)).await?;
    // Code points, not bytes: "é" is one character on both backends.
    store::drafts::finish(&db.db, tenant, id, "Bées make honey.", now).await?;
    let draft = store::drafts::find(&db.db, id).await?.ok_or_else(|| anyhow::anyhow!("no draft"))?;
    ensure_eq!((draft.generation, draft.char_count), (3, 16));
    store::drafts::delete(&db.db, id).await?;
    ensure_eq!(store::drafts::find(&db.db, id).await?, None);
    ensure_eq!(store::writers_at_once(&db.db), if db.backend == Backend::Postgres { 4 } else { 1 });
    Ok(())
}
