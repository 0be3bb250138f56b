//! A chunk of claims written by one statement, on PostgreSQL (`claims.postgres.sql`):
//! every job's lease, the `started` event of those claimed from `queued`, and their
//! deliveries marked `leased`, where claiming each alone (`claim::claim_one`) costs three
//! statements per job. Only the common claim comes here (a due job with attempts left that
//! is not paused); the rest are claimed one by one.
use std::sync::OnceLock;

use entity::{ProgressEventType, Stage, research_task_job as job};
use sea_orm::{ConnectionTrait, DatabaseBackend, DatabaseTransaction, DbErr, FromQueryResult, Statement};
use serde::Serialize;
use uuid::Uuid;

use super::claim::{record_claim, started_payload};
use super::journal::Appended;
use super::lease::{Claimed, Lease};
use super::row::{event_signal, postgres_statement, signal};
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
            // The row is locked, so the claim's attempt is the next of the ones it read.
            let payload = started_payload(worker_id, job.execution_attempts + 1);
            Row {
                id: job.id,
                token: Uuid::new_v4(),
                worker_id,
                stage: started.unwrap_or(job.stage).as_str(),
                lease_expires_at: now.saturating_add(lease_ms),
                now,
                started: started.map(|_| Started { id: Uuid::now_v7(), payload }),
            }
        })
        .collect();
    let input = serde_json::to_string(&rows).map_err(|error| DbErr::Custom(error.to_string()))?;
    let statement = Statement::from_sql_and_values(DatabaseBackend::Postgres, sql(), [input.into()]);
    let results = txn.query_all_raw(statement).await?;
    let mut claimed = Vec::with_capacity(results.len());
    let mut signals = Vec::with_capacity(results.len());
    for result in &results {
        let leased = job::Model::from_query_result(result, "")?;
        let row = rows.iter().find(|row| row.id == leased.id);
        let (Some(row), Some(due)) = (row, due.iter().find(|job| job.id == leased.id)) else {
            return Err(DbErr::Custom(format!("claimed {}, which was not due", leased.id)));
        };
        let started: Option<i32> = result.try_get("", "started_sequence")?;
        let new_event: bool = result.try_get("", "started_new")?;
        let any_endpoint: bool = result.try_get("", "any_endpoint")?;
        let grant_checked: bool = result.try_get("", "grant_holds")?;
        record_claim(due, now);
        let signal = match (started, &row.started) {
            (Some(sequence), Some(Started { payload, .. })) => {
                let webhooks = new_event
                    && any_endpoint
                    && crate::webhooks::enqueue(
                        txn,
                        &leased,
                        ProgressEventType::Started,
                        leased.stage,
                        sequence,
                        payload,
                        now,
                    )
                    .await?;
                event_signal(leased.id, Appended { sequence, webhooks, announced: false }, None, false)
            }
            _ => signal(leased.id, None, None, false),
        };
        let token = leased.lease_token.ok_or_else(|| DbErr::Custom(format!("claim of {} left no token", leased.id)))?;
        let lease = Lease { job_id: leased.id, token, worker_id: worker_id.to_owned() };
        signals.push(signal);
        claimed.push(Claimed { job: leased, lease, grant_checked });
    }
    Ok((claimed, signals))
}

/// The statement, with the grant rule checked at the claim's time.
fn sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| postgres_statement(include_str!("claims.postgres.sql"), "l", "c.\"now\"", "l"))
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
    /// Its `started` event, when it starts now.
    started: Option<Started>,
}

/// A claim's `started` event.
#[derive(Serialize)]
struct Started {
    id: Uuid,
    payload: serde_json::Value,
}
