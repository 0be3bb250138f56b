//! What operators read: the process's Prometheus recorder (histograms with buckets, so
//! they aggregate across replicas), the queue gauges refreshed by a cheap periodic query,
//! and readiness: the database answers, no migration is pending, and every worker loop
//! of this process ticked lately.
use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use migration::MigratorTrait as _;
use sea_orm::{ActiveEnum as _, DatabaseConnection, DbErr};

/// Bucket bounds of every histogram, in seconds: request latencies at the bottom, model
/// stages and queue waits at the top.
const BUCKETS: [f64; 16] =
    [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 1800.0];

fn handle() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let installed =
                PrometheusBuilder::new().set_buckets(&BUCKETS).and_then(|builder| builder.install_recorder());
            match installed {
                Ok(handle) => Some(handle),
                Err(error) => {
                    tracing::warn!(error = %error, "metrics recorder not installed; /metrics will be empty");
                    None
                }
            }
        })
        .as_ref()
}

/// Installs the process's recorder (once: tests run many servers in one process) and
/// registers every counter of [`COUNTERS`] at 0; call it at start so early metrics are not
/// lost.
pub fn install() {
    static REGISTERED: OnceLock<()> = OnceLock::new();
    if handle().is_some() {
        REGISTERED.get_or_init(register_counters);
    }
}

/// A label's name and every value it takes.
pub type Label = (&'static str, &'static [&'static str]);

/// Every counter operators alert on, with every value of its label (the README's
/// "Operations" table lists the same). Each is registered at 0 when the recorder is
/// installed, so a rate or an alert on it sees 0, not "no data", until its first event.
pub const COUNTERS: &[(&str, Option<Label>)] = &[
    ("research_tasks_created_total", None),
    ("research_tasks_ended_total", Some(("stage", &["completed", "failed", "canceled"]))),
    ("research_task_commands_total", Some(("command", &["paused", "resumed", "canceled", "steered"]))),
    ("research_task_retries_total", None),
    ("research_lease_rescues_total", None),
    ("research_fenced_out_total", None),
    ("research_grant_denials_total", Some(("reason", crate::grant::GrantDenial::LABELS))),
    ("research_outbox_dead_total", None),
    ("webhook_deliveries_dead_total", None),
    ("retention_pruned_total", Some(("table", &["research_task_jobs", "audit_events", "answer_traces"]))),
    ("rate_limited_total", Some(("bucket", &["requests", "cost", "tenant-requests", "tenant-cost", "connections"]))),
    ("quota_refusals_total", Some(("quota", crate::lifecycle::QuotaRefusal::LABELS))),
    ("claims_deferred_by_cap_total", None),
    ("db_statements_total", None),
];

fn register_counters() {
    for (name, label) in COUNTERS {
        match label {
            None => metrics::counter!(*name).increment(0),
            Some((key, values)) => {
                for value in *values {
                    metrics::counter!(*name, *key => *value).increment(0);
                }
            }
        }
    }
}

/// Every metric, in Prometheus text.
pub fn render() -> String {
    handle().map(PrometheusHandle::render).unwrap_or_default()
}

/// Refreshes the queue gauges: tasks by stage, the oldest queued task's age, outbox rows
/// by status, tasks waiting for a person by reason, and the pool's connections.
pub async fn refresh_gauges(db: &DatabaseConnection, now: i64) -> Result<(), DbErr> {
    for (stage, count) in crate::store::ops::stage_counts(db).await? {
        metrics::gauge!("research_tasks", "stage" => stage.as_str()).set(count as f64);
    }
    metrics::gauge!("research_oldest_queued_task_age_seconds")
        .set(crate::store::ops::oldest_queued_seconds(db, now).await?);
    for (status, count) in crate::store::ops::outbox_counts(db).await? {
        metrics::gauge!("research_outbox_rows", "status" => status.to_value()).set(count as f64);
    }
    for (reason, count) in crate::store::ops::awaiting_counts(db).await? {
        metrics::gauge!("research_tasks_awaiting_input", "reason" => reason).set(count as f64);
    }
    if let Some(pool) = crate::db::pool_connections(db) {
        metrics::gauge!("db_pool_connections", "state" => "open").set(f64::from(pool.0));
        metrics::gauge!("db_pool_connections", "state" => "idle").set(pool.1 as f64);
    }
    Ok(())
}

/// The last ticks of this process's worker loops, each with the interval it should tick at.
#[derive(Clone, Default)]
pub struct Ticks(Arc<Mutex<HashMap<&'static str, (Instant, Duration)>>>);

impl Ticks {
    /// `name` ticked now; it should tick again within `every`.
    pub fn tick(&self, name: &'static str, every: Duration) {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).insert(name, (Instant::now(), every));
    }

    /// The loops that have not ticked for three of their intervals (and at least 10 s).
    pub fn stalled(&self) -> Vec<&'static str> {
        let ticks = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut stalled: Vec<&'static str> = ticks
            .iter()
            .filter(|(_, (at, every))| at.elapsed() > (*every * 3).max(Duration::from_secs(10)))
            .map(|(name, _)| *name)
            .collect();
        stalled.sort_unstable();
        stalled
    }
}

/// Why the process is not ready, if it is not: the database does not answer, migrations
/// are pending, or a loop stalled.
pub async fn not_ready(db: &DatabaseConnection, ticks: &Ticks) -> Option<String> {
    if let Err(error) = db.ping().await {
        return Some(format!("database unreachable: {error}"));
    }
    match migration::Migrator::get_pending_migrations(db).await {
        Ok(pending) if !pending.is_empty() => return Some(format!("{} migrations pending", pending.len())),
        Ok(_) => {}
        Err(error) => return Some(format!("migrations unreadable: {error}")),
    }
    let stalled = ticks.stalled();
    (!stalled.is_empty()).then(|| format!("worker loops stalled: {}", stalled.join(", ")))
}

/// Refreshes the queue gauges every ten seconds until `shutdown`.
pub fn spawn_gauges(
    db: DatabaseConnection,
    shutdown: tokio_util::sync::CancellationToken,
    tracker: &tokio_util::task::TaskTracker,
) {
    tracker.spawn(async move {
        let mut every = tokio::time::interval(Duration::from_secs(10));
        loop {
            tokio::select! {
                () = shutdown.cancelled() => return,
                _ = every.tick() => {
                    if let Err(error) = refresh_gauges(&db, entity::now_millis()).await {
                        tracing::debug!(error = %error, "refreshing the queue gauges failed");
                    }
                }
            }
        }
    });
}
