//! What operators read from a `worker` process of its own (`KFS_WORKER_HTTP_ADDR`):
//! `/healthz`, `/readyz`, and `/metrics` whose values after a scripted run (two tasks
//! completed, one failed on a revoked key, one rescued from a lapsed lease, one dead
//! outbox row) are what they should be, with histograms as buckets and a stable set of
//! names and labels.
use std::time::Duration;

use anyhow::ensure;
use entity::{AccessChannel, MemberRole, OutboxStatus, Stage, api_key, research_task_job as job};
use kfs_tests::process::{Binaries, Process, command, wait_until};
use kfs_tests::{DbTest, TestDb, db_tests, ensure_eq, fixtures};
use sea_orm::{ActiveValue::Set, ColumnTrait, EntityTrait, PaginatorTrait, QueryFilter};
use worker::Notifier;
use worker::lifecycle::{NewTask, create};

use crate::worker_support::key_grant;

pub fn tests() -> Vec<DbTest> {
    db_tests![
        the_worker_process_serves_health_readiness_and_metrics_that_describe_its_work,
        every_documented_counter_is_served_at_zero_before_its_first_event,
    ]
}

/// The value of one sample line (`name{labels} value`) of a Prometheus text page.
fn sample(page: &str, series: &str) -> Option<f64> {
    page.lines().find_map(|line| line.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

async fn the_worker_process_serves_health_readiness_and_metrics_that_describe_its_work(
    db: TestDb,
) -> anyhow::Result<()> {
    let notifier = Notifier::new();
    let space = fixtures::space(&db).await?;
    let owner = fixtures::member(&db, &space, "owner", MemberRole::Owner).await?;
    for (title, content) in crate::worker_support::DOCUMENTS {
        fixtures::document(&db, &owner, title, content).await?;
    }
    let done = [
        fixtures::job(&db, &owner, AccessChannel::Interactive).await?,
        fixtures::job(&db, &owner, AccessChannel::Interactive).await?,
    ];
    // A task whose key is revoked before it runs: it fails on its grant.
    let key = fixtures::api_key(&db, &space).await?;
    let doomed = create(
        &db.db,
        &notifier,
        NewTask { ..fixtures::new_task(key_grant(&key), "What causes tides?") },
        entity::now_millis(),
    )
    .await?
    .task;
    let revoked =
        api_key::ActiveModel { id: Set(key.id), revoked_at: Set(Some(entity::now_millis())), ..Default::default() };
    api_key::Entity::update(revoked).exec(&db.db).await?;
    // A task another worker claimed and let lapse: the process rescues it.
    let stranded = fixtures::job(&db, &owner, AccessChannel::Interactive).await?;
    let ghost = worker::lifecycle::claim_due(&db.db, &notifier, "ghost", 1, 1, entity::now_millis()).await?;
    ensure_eq!(ghost.len(), 1, "the ghost claimed one task");
    let ghost_task = ghost[0].job.id;
    // A dead outbox row.
    let mut dead = fixtures::outbox_row(&done[0], 99, "dead-row");
    dead.status = Set(OutboxStatus::Dead);
    entity::research_task_outbox::Entity::insert(dead).exec(&db.db).await?;
    tokio::time::sleep(Duration::from_millis(20)).await;

    let binaries = Binaries::build().await?;
    let mut worker = command(&binaries.worker);
    worker
        .env("DATABASE_URL", &db.url)
        .env("RUST_LOG", "warn")
        .env("KFS_WORKER_HTTP_ADDR", "127.0.0.1:0")
        .env("KFS_WORKER_POLL_INTERVAL_MS", "100");
    let mut process = Process::spawn("worker", worker)?;
    let line = process.line_starting_with("worker operations: ", Duration::from_secs(60)).await?;
    let base = line.trim_start_matches("worker operations: ").trim().to_owned();
    let http = reqwest::Client::new();
    ensure_eq!(http.get(format!("{base}/healthz")).send().await?.text().await?, "ok");

    let all = [done[0].id, done[1].id, doomed.id, stranded.id];
    wait_until(Duration::from_secs(60), "every task to end", async || {
        process.ensure_running()?;
        let ended = job::Entity::find()
            .filter(job::Column::Id.is_in(all))
            .filter(job::Column::Stage.is_in([Stage::Completed, Stage::Failed]))
            .count(&db.db)
            .await?;
        Ok(ended == all.len() as u64)
    })
    .await?;
    let ready = http.get(format!("{base}/readyz")).send().await?;
    ensure_eq!(ready.status().as_u16(), 200, "{}", ready.text().await?);
    // The gauges refresh every ten seconds; the first refresh ran at start.
    let page = http.get(format!("{base}/metrics")).send().await?.text().await?;
    ensure_eq!(sample(&page, "research_tasks_ended_total{stage=\"completed\"}"), Some(3.0), "{page}");
    ensure_eq!(sample(&page, "research_tasks_ended_total{stage=\"failed\"}"), Some(1.0));
    ensure_eq!(sample(&page, "research_grant_denials_total{reason=\"keyrevoked\"}"), Some(1.0));
    ensure_eq!(sample(&page, "research_lease_rescues_total"), Some(1.0), "the ghost's task ({ghost_task}) was rescued");
    ensure_eq!(
        sample(&page, "research_queue_wait_seconds_count"),
        Some(3.0),
        "three tasks claimed from the queue here"
    );
    ensure_eq!(sample(&page, "research_outbox_rows{status=\"dead\"}"), Some(1.0));
    ensure!(
        page.contains("research_stage_duration_seconds_bucket{stage=\"planning\",le=\""),
        "histograms have buckets"
    );
    // The names and label sets operators build on. (The outbox dispatch histogram shows
    // once a row is published, which a claim that comes first makes unnecessary: not here.)
    for name in [
        "research_tasks{stage=\"queued\"}",
        "research_oldest_queued_task_age_seconds",
        "research_outbox_rows{status=\"pending\"}",
        "research_queue_wait_seconds_bucket",
        "research_stage_duration_seconds_count{stage=\"generating\"}",
    ] {
        ensure!(page.contains(name), "{name} is missing from:\n{page}");
    }
    ensure!(!page.contains(&space.tenant_id) && !page.contains(&done[0].id.to_string()), "no tenant or task in labels");
    Ok(())
}

/// An alert on a counter must see 0, not "no data", before the counter's first event: a
/// fresh `api` process serves every counter of `worker::observe::COUNTERS`, with every
/// label value, at 0 (before, each appeared only after its first increment, and
/// `quota_refusals_total` never did). The README's "Operations" table names each series
/// and every label value.
async fn every_documented_counter_is_served_at_zero_before_its_first_event(db: TestDb) -> anyhow::Result<()> {
    let binaries = Binaries::build().await?;
    let api = kfs_tests::process::ApiProcess::start(kfs_tests::process::api_command(&binaries.api, &db.url)).await?;
    let page = reqwest::get(format!("http://{}/metrics", api.addr)).await?.text().await?;
    let readme = std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../README.md"))?;
    for (name, label) in worker::observe::COUNTERS {
        ensure!(readme.contains(name), "the README does not document {name}");
        let series: Vec<String> = match label {
            None => vec![(*name).to_owned()],
            Some((key, values)) => values.iter().map(|value| format!("{name}{{{key}=\"{value}\"}}")).collect(),
        };
        for series in series {
            let value = sample(&page, &series);
            ensure!(value.is_some(), "{series} is not served:\n{page}");
            if *name != "db_statements_total" {
                ensure_eq!(value, Some(0.0), "{series} before anything happened");
            }
        }
        if let Some((_, values)) = label {
            for value in *values {
                ensure!(
                    readme.contains(&format!("`{value}`")),
                    "the README does not list {name}'s label value {value}"
                );
            }
        }
    }
    Ok(())
}
