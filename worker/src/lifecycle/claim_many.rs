//! A chunk of claims written by one statement, on PostgreSQL (`claims.postgres.sql`):
//! every job's lease, the `started` event of those claimed from `queued`, and their
//! deliveries marked `leased`, where claiming each alone (`claim::claim_one`) costs three
//! statements per job. Only the common claim comes here (a due job with attempts left that
//! is not paused); the rest are claimed one by one.
use std::sync::OnceLock;

use entity::{ProgressEventType, Stage, research_task_job as job};
use sea_orm::{ConnectionTrait, DatabaseBackend, DatabaseTransaction, DbErr, FromQueryResult, Statement};
use serde::Serialize;
use serde_json::json;
use uuid::Uuid;

use super::journal::Appended;
use super::lease::{Claimed, Lease};
use super::row::{event_signal, signal};
use crate::notify::TaskSignal;

/// Whether `due` (locked by this transaction) is claimed by [`lease_all`]: not paused (a
/// due paused job resumes first) and with attempts left (else it fails instead).
pub(super) fn is_plain(due: &job::Model) -> bool {
    due.stage != Stage::Paused && due.execution_attempts < due.max_execution_attempts
}

/// Leases every job of `due` (each plain, locked by `txn`) to `worker_id`, each with its
/// own new token; returns the claims and their commit's signals.
pub(super) async fn lease_all(
    txn: &DatabaseTransaction,
    due: &[job::Model],
    worker_id: &str,
    lease_ms: i64,
    now: i64,
) -> Result<(Vec<Claimed>, Vec<TaskSignal>), DbErr> {
    if due.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let rows: Vec<Row<'_>> = due
        .iter()
        .map(|job| {
            // The first claim starts the pipeline: the stage after `queued`.
            let started = (job.stage == Stage::Queued).then(|| job.stage.next_in_pipeline()).flatten();
            Row {
                id: job.id,
                token: Uuid::new_v4(),
                worker_id,
                stage: started.unwrap_or(job.stage).as_str(),
                lease_expires_at: now.saturating_add(lease_ms),
                now,
                started_event_id: started.map(|_| Uuid::now_v7()),
            }
        })
        .collect();
    let input = serde_json::to_string(&rows).map_err(|error| DbErr::Custom(error.to_string()))?;
    let statement = Statement::from_sql_and_values(DatabaseBackend::Postgres, sql(), [input.into()]);
    let results = txn.query_all_raw(statement).await?;
    let mut claimed = Vec::with_capacity(results.len());
    let mut signals = Vec::with_capacity(results.len());
    for (result, due) in results.iter().zip(order_of(due, &results)?) {
        let leased = job::Model::from_query_result(result, "")?;
        let started: Option<i32> = result.try_get("", "started_sequence")?;
        let new_event: bool = result.try_get("", "started_new")?;
        let any_endpoint: bool = result.try_get("", "any_endpoint")?;
        let grant_checked: bool = result.try_get("", "grant_holds")?;
        record_metrics(due, now);
        let signal = match started {
            Some(sequence) => {
                let payload = json!({ "worker_id": worker_id, "attempt": leased.execution_attempts });
                let webhooks = new_event
                    && any_endpoint
                    && crate::webhooks::enqueue(
                        txn,
                        &leased,
                        ProgressEventType::Started,
                        leased.stage,
                        sequence,
                        &payload,
                        now,
                    )
                    .await?;
                event_signal(leased.id, Appended { sequence, webhooks, announced: false }, None, false)
            }
            None => signal(leased.id, None, None, false),
        };
        let token = leased.lease_token.ok_or_else(|| DbErr::Custom(format!("claim of {} left no token", leased.id)))?;
        let lease = Lease { job_id: leased.id, token, worker_id: worker_id.to_owned() };
        signals.push(signal);
        claimed.push(Claimed { job: leased, lease, grant_checked });
    }
    Ok((claimed, signals))
}

/// The due row each result row leased (the statement returns them in its own order).
fn order_of<'a>(due: &'a [job::Model], results: &[sea_orm::QueryResult]) -> Result<Vec<&'a job::Model>, DbErr> {
    results
        .iter()
        .map(|result| {
            let id: Uuid = result.try_get("", "id")?;
            due.iter().find(|job| job.id == id).ok_or_else(|| DbErr::Custom(format!("claimed {id}, which was not due")))
        })
        .collect()
}

/// What a claim tells the metrics, as `claim_one` does.
fn record_metrics(due: &job::Model, now: i64) {
    if due.stage == Stage::Queued {
        metrics::histogram!("research_queue_wait_seconds").record((now - due.created_at).max(0) as f64 / 1e3);
    } else if due.lease_token.is_some() {
        metrics::counter!("research_lease_rescues_total").increment(1);
    }
}

/// The statement, with the grant rule checked at the claim's time.
fn sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| {
        let holds = crate::grant::holds_at(DatabaseBackend::Postgres, "l.\"permission_snapshot_id\"", "c.\"now\"");
        include_str!("claims.postgres.sql").replace("{GRANT_HOLDS}", &holds)
    })
}

/// One claim as the statement reads it (an element of `$1`).
#[derive(Serialize)]
struct Row<'a> {
    id: Uuid,
    token: Uuid,
    worker_id: &'a str,
    /// The stage it runs from: the first of the pipeline for a queued job, else its own.
    stage: &'static str,
    lease_expires_at: i64,
    now: i64,
    /// The id of its `started` event, when it starts now.
    started_event_id: Option<Uuid>,
}
