//! Sharing workers between tenants: a tenant with a deep backlog does not delay another
//! tenant's first task; running-task caps per tenant and per space hold however many
//! workers race, a task over its cap waits queued, and a freed slot is used at once;
//! tenant quotas refuse new tasks with QUOTA_EXCEEDED and free up again.
use std::time::Duration;

use anyhow::{Context as _, ensure};
use entity::{AccessChannel, MemberRole, Stage, now_millis, research_task_job as job};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq, fixtures};
use sea_orm::{ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use serde_json::json;
use worker::Notifier;
use worker::lifecycle::{self, Caps, Claim, Claimed, Failure, Fairness, RetryPolicy};

use crate::api_support::{Api, string_at};

pub fn tests() -> Vec<DbTest> {
    db_tests![
        a_new_tenants_task_is_claimed_before_a_deep_backlog_is_a_tenth_done,
        running_caps_hold_under_two_racing_workers_and_a_freed_slot_is_used_at_once,
        quotas_refuse_new_tasks_until_they_free_up,
    ]
}

const LEASE_MS: i64 = 60_000;

/// Ends a claimed task at once (failed for good: terminal, like a finished one), as a
/// worker whose engine took no time would.
async fn finish(db: &TestDb, notifier: &Notifier, claimed: &Claimed) -> anyhow::Result<()> {
    let done =
        Failure { message: "done".into(), retryable: false, cost_delta: worker::research::cost::CostDelta::none() };
    let policy = RetryPolicy { base_ms: 10, cap_ms: 10 };
    lifecycle::fail_attempt(&db.db, notifier, &claimed.lease, done, policy, now_millis()).await?;
    Ok(())
}

async fn a_new_tenants_task_is_claimed_before_a_deep_backlog_is_a_tenth_done(db: TestDb) -> anyhow::Result<()> {
    const BACKLOG: usize = 2_000;
    let notifier = Notifier::new();
    let busy_space = fixtures::space(&db).await?;
    let busy = fixtures::member(&db, &busy_space, "flooder", MemberRole::Owner).await?;
    for _ in 0..BACKLOG {
        fixtures::job(&db, &busy, AccessChannel::ServiceApi).await?;
    }
    let quiet_space = fixtures::space(&db).await?;
    let quiet = fixtures::member(&db, &quiet_space, "newcomer", MemberRole::Owner).await?;
    let newcomer = fixtures::job(&db, &quiet, AccessChannel::Interactive).await?;

    // The lease loop's step, driven by hand: claim four, finish them, again.
    let mut fairness = Fairness::default();
    let claim = Claim { worker_id: "fair-worker", lease_ms: LEASE_MS, batch: 4, caps: Caps::default() };
    let mut backlog_done = 0usize;
    let mut steps = 0;
    loop {
        steps += 1;
        ensure!(steps < 1_000, "the newcomer's task was never claimed");
        let claimed = lifecycle::claim_fairly(&db.db, &notifier, &claim, &mut fairness, now_millis()).await?;
        ensure!(!claimed.is_empty(), "nothing claimed in step {steps}");
        let newcomer_claimed = claimed.iter().any(|one| one.job.id == newcomer.id);
        for one in &claimed {
            finish(&db, &notifier, one).await?;
        }
        if newcomer_claimed {
            break;
        }
        backlog_done += claimed.len();
    }
    println!(
        "fairness: the newcomer's task was claimed in step {steps}, after {backlog_done} of {BACKLOG} backlog tasks"
    );
    ensure!(backlog_done < BACKLOG / 10, "the newcomer waited for {backlog_done} backlog tasks");
    ensure_eq!(steps, 1, "claimed within one claim cycle");
    Ok(())
}

async fn running_caps_hold_under_two_racing_workers_and_a_freed_slot_is_used_at_once(db: TestDb) -> anyhow::Result<()> {
    let notifier = Notifier::new();
    let first = fixtures::space(&db).await?;
    let owner = fixtures::member(&db, &first, "owner", MemberRole::Owner).await?;
    // A second space of the same tenant.
    let second = entity::knowledge_space::ActiveModel {
        id: sea_orm::ActiveValue::Set(uuid::Uuid::now_v7()),
        tenant_id: sea_orm::ActiveValue::Set(first.tenant_id.clone()),
        name: sea_orm::ActiveValue::Set("Second".into()),
        created_at: sea_orm::ActiveValue::Set(now_millis()),
        updated_at: sea_orm::ActiveValue::Set(now_millis()),
    };
    let second = entity::knowledge_space::Entity::insert(second).exec_with_returning(&db.db).await?;
    let owner_two = fixtures::member(&db, &second, "owner", MemberRole::Owner).await?;
    for _ in 0..10 {
        fixtures::job(&db, &owner, AccessChannel::Interactive).await?;
        fixtures::job(&db, &owner_two, AccessChannel::Interactive).await?;
    }
    let caps = Caps { per_tenant: Some(3), per_space: Some(2) };
    let now = now_millis();
    let (mut fair_a, mut fair_b) = (Fairness::default(), Fairness::default());
    let claim_a = Claim { worker_id: "worker-a", lease_ms: LEASE_MS, batch: 8, caps };
    let claim_b = Claim { worker_id: "worker-b", lease_ms: LEASE_MS, batch: 8, caps };
    let (a, b) = tokio::join!(
        lifecycle::claim_fairly(&db.db, &notifier, &claim_a, &mut fair_a, now),
        lifecycle::claim_fairly(&db.db, &notifier, &claim_b, &mut fair_b, now),
    );
    let claimed: Vec<Claimed> = a?.into_iter().chain(b?).collect();
    ensure_eq!(claimed.len(), 3, "the tenant's cap");
    for space in [first.id, second.id] {
        let in_space = claimed.iter().filter(|one| one.job.knowledge_space_id == space).count();
        ensure!(in_space <= 2, "space cap passed: {in_space}");
    }
    let queued = job::Entity::find()
        .filter(job::Column::TenantId.eq(first.tenant_id.as_str()))
        .filter(job::Column::Stage.eq(Stage::Queued))
        .count(&db.db)
        .await?;
    ensure_eq!(queued, 17, "the tasks over the cap wait, queued, not failed");
    // At the cap, nothing more is claimed; once one finishes, its slot is taken at once.
    ensure!(lifecycle::claim_fairly(&db.db, &notifier, &claim_a, &mut fair_a, now).await?.is_empty());
    finish(&db, &notifier, &claimed[0]).await?;
    let next = lifecycle::claim_fairly(&db.db, &notifier, &claim_b, &mut fair_b, now_millis()).await?;
    ensure_eq!(next.len(), 1, "the freed slot");
    Ok(())
}

async fn quotas_refuse_new_tasks_until_they_free_up(db: TestDb) -> anyhow::Result<()> {
    let api = crate::live_support::api_with(&db, |settings| {
        settings.quota_queued_per_tenant = Some(2);
    })
    .await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let create = "mutation($s: UUID!) { createResearchTask(input: {knowledgeSpaceId: $s, query: \"What causes tides?\"}) { id } }";
    let first = string_at(&api.data(Some(&token), create, json!({ "s": space })).await?, "/createResearchTask/id")?;
    api.data(Some(&token), create, json!({ "s": space })).await?;
    let metrics_url = format!("{}/metrics", api.server.server.base_url());
    let refusals = async || -> anyhow::Result<f64> {
        let page = reqwest::get(&metrics_url).await?.text().await?;
        let series = "quota_refusals_total{quota=\"unfinished_tasks\"} ";
        page.lines().find_map(|line| line.strip_prefix(series)?.trim().parse().ok()).context("no quota_refusals_total")
    };
    let refusals_before = refusals().await?;
    let refused = api.call(Some(&token), create, json!({ "s": space })).await?;
    ensure_eq!(refused["errors"][0]["extensions"]["code"], json!("QUOTA_EXCEEDED"), "{refused}");
    ensure_eq!(refused["errors"][0]["extensions"]["limit"], json!(2.0));
    ensure!(refusals().await? >= refusals_before + 1.0, "the refusal is counted in /metrics");
    ensure!(refused["data"].is_null() || refused["data"]["createResearchTask"].is_null());
    // Another tenant is not affected.
    let other = Api { server: api.server, tenant: format!("other-{}", uuid::Uuid::new_v4().simple()) };
    let other_space = other.space("bob").await?;
    other.data(Some(&other.token("bob")), create, json!({ "s": other_space })).await?;
    let api = Api { server: other.server, tenant: api.tenant };
    // A finished task frees its place.
    let cancel = "mutation($id: UUID!) { cancelResearchTask(id: $id) { stage } }";
    api.data(Some(&token), cancel, json!({ "id": first })).await?;
    api.data(Some(&token), create, json!({ "s": space })).await?;
    api.server.stop().await;

    // The daily spend: the built-in engine's first task spends, the next is refused until
    // 00:00 UTC.
    let api = crate::live_support::api_with(&db, |settings| {
        settings.embedded_worker = true;
        settings.worker.poll_interval_ms = 100;
        settings.quota_usd_per_tenant_per_day = Some(0.000_000_001);
    })
    .await?;
    let space = api.space("alice").await?;
    let token = api.token("alice");
    let task = string_at(&api.data(Some(&token), create, json!({ "s": space })).await?, "/createResearchTask/id")?;
    let read = "query($id: UUID!) { researchTask(id: $id) { stage } }";
    kfs_tests::process::wait_until(Duration::from_secs(30), "the task to complete", async || {
        Ok(api.data(Some(&token), read, json!({ "id": task })).await?["researchTask"]["stage"] == "COMPLETED")
    })
    .await?;
    let refused = api.call(Some(&token), create, json!({ "s": space })).await?;
    let extensions = &refused["errors"][0]["extensions"];
    ensure_eq!(extensions["code"], json!("QUOTA_EXCEEDED"), "{refused}");
    let resets = extensions["resetsAt"].as_str().context("resetsAt")?;
    let resets_at = chrono::DateTime::parse_from_rfc3339(resets)?;
    let midnight = (chrono::Utc::now().date_naive() + chrono::Days::new(1)).and_hms_opt(0, 0, 0).context("midnight")?;
    ensure_eq!(resets_at.naive_utc(), midnight, "resets at the next 00:00 UTC");
    api.stop().await;
    Ok(())
}
