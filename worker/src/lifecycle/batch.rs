//! A group of stage boundaries written by one statement, on PostgreSQL
//! (`boundaries.postgres.sql`): the fenced updates of every row, their partial results and
//! `stage_changed` events, and for completions the answer trace, the answer draft and the
//! closed deliveries. A group of any size then costs the same few round trips (the
//! statement, the NOTIFY and the commit), where writing each boundary on its own
//! (`checkpoint_in`, `complete_in`) costs three to six statements per boundary.
//!
//! Each boundary keeps its own fence: its row is written only while it carries its own
//! lease token, is still in the stage its worker ran and its grant holds, and everything
//! else it writes hangs off that row, so a boundary whose lease or grant is gone writes
//! nothing and the others land. Nothing here decides a transition: callers pass only
//! boundaries the stage rule allows.
use std::collections::HashMap;
use std::sync::OnceLock;

use entity::{ProgressEventType, Stage, research_task_job as job};
use sea_orm::{ConnectionTrait, DatabaseBackend, DatabaseTransaction, DbErr, FromQueryResult, QueryResult, Statement};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::group::{Boundary, BoundaryStep, Committed};
use super::journal::Appended;
use super::lease::{answer_trace_of, checkpoint_payload, completion_payload, stage_event_key};
use super::row::{announced_signal, lease_holder_signal, postgres_statement, why_unfenced};
use super::{Checkpoint, Completion, LifecycleError};
use crate::notify::TaskSignal;

/// A boundary the statement wrote: what it left, and the signal its commit announces.
pub(super) struct Landed {
    /// The job after its checkpoint, or the completed task's answer trace.
    pub committed: Committed,
    /// The signal of its commit (its last event's sequence filled in).
    pub signal: TaskSignal,
}

/// Writes `boundaries` (of different tasks, each a move the stage rule allows) in `txn`;
/// returns each one's outcome in the order given: landed, or why its fence held it out
/// ([`LifecycleError::LeaseLost`], `NotAllowed`, [`LifecycleError::GrantDenied`]), in which
/// case it wrote nothing. An `Err` means a statement failed and the transaction must be
/// rolled back.
pub(super) async fn write(
    txn: &DatabaseTransaction,
    boundaries: &[&Boundary],
) -> Result<Vec<Result<Landed, LifecycleError>>, DbErr> {
    let rows: Vec<Row<'_>> = boundaries.iter().map(|boundary| Row::of(boundary)).collect();
    let input = serde_json::to_string(&rows).map_err(|error| DbErr::Custom(error.to_string()))?;
    let statement = Statement::from_sql_and_values(DatabaseBackend::Postgres, sql(), [input.into()]);
    let mut written: HashMap<Uuid, QueryResult> = HashMap::with_capacity(rows.len());
    for row in txn.query_all_raw(statement).await? {
        written.insert(row.try_get("", "id")?, row);
    }
    let mut outcomes = Vec::with_capacity(rows.len());
    for (boundary, row) in boundaries.iter().zip(rows) {
        let outcome = match written.remove(&boundary.lease.job_id) {
            Some(result) => Ok(landed(txn, boundary, row, &result).await?),
            // (A statement failing here leaves the transaction unusable: `?` rolls the group back.)
            None => Err(why_unfenced(txn, &boundary.lease, &boundary.from, row.command(), boundary.now).await?),
        };
        outcomes.push(outcome);
    }
    Ok(outcomes)
}

/// The statement, with the grant rule checked at each boundary's own time.
fn sql() -> &'static str {
    static SQL: OnceLock<String> = OnceLock::new();
    SQL.get_or_init(|| postgres_statement(include_str!("boundaries.postgres.sql"), "j", "b.\"now\"", "f"))
}

/// What one landed boundary left, with its webhook deliveries queued (in the same
/// transaction, as `append_progress_event` queues them) when its event is new and the
/// task's creator has an endpoint.
async fn landed(
    txn: &DatabaseTransaction,
    boundary: &Boundary,
    row: Row<'_>,
    result: &QueryResult,
) -> Result<Landed, DbErr> {
    let job = job::Model::from_query_result(result, "")?;
    let sequence: i32 = result.try_get("", "event_sequence")?;
    let new_event: bool = result.try_get("", "event_new")?;
    let partial: Option<i32> = result.try_get("", "partial_sequence")?;
    let any_endpoint: bool = result.try_get("", "any_endpoint")?;
    let webhooks = new_event
        && any_endpoint
        && crate::webhooks::enqueue(
            txn,
            &job,
            ProgressEventType::StageChanged,
            row.next_stage,
            sequence,
            &row.event_payload,
            boundary.now,
        )
        .await?;
    let appended = Appended { sequence, webhooks, announced: false };
    let signal = announced_signal(lease_holder_signal(job.id, partial), appended);
    let committed = match row.trace {
        None => Committed::Checkpoint(Box::new(job)),
        // What the statement inserted: the same values `complete_in` inserts.
        Some(trace) => Committed::Complete(Box::new(answer_trace_of(
            &job,
            trace.id,
            trace.answer.to_owned(),
            trace.evidence.clone(),
            boundary.now,
        ))),
    };
    Ok(Landed { committed, signal })
}

/// One boundary as the statement reads it (an element of `$1`).
#[derive(Serialize)]
struct Row<'a> {
    id: Uuid,
    token: Uuid,
    from_stage: &'static str,
    stage: &'static str,
    /// The job's cost with the stage's spend added, from the row this lease last committed
    /// (only the lease holder writes `cost`).
    cost: Value,
    now: i64,
    /// A checkpoint renews the lease from here; a completion clears it (null).
    lease_expires_at: Option<i64>,
    complete: bool,
    event_id: Uuid,
    event_key: String,
    event_payload: Value,
    partials: Vec<Partial<'a>>,
    trace: Option<Trace<'a>>,
    #[serde(skip)]
    next_stage: Stage,
}

#[derive(Serialize)]
struct Partial<'a> {
    id: Uuid,
    key: &'a str,
    bundle: &'a Value,
}

#[derive(Serialize)]
struct Trace<'a> {
    id: Uuid,
    answer: &'a str,
    evidence: &'a Value,
    /// The answer's length in Unicode code points, as the draft counts it.
    char_count: i32,
}

impl<'a> Row<'a> {
    fn of(boundary: &'a Boundary) -> Self {
        let Boundary { lease, from, step, now, .. } = boundary;
        let base = |next_stage: Stage, cost_delta: &Value| Row {
            id: lease.job_id,
            token: lease.token,
            from_stage: from.stage.as_str(),
            stage: next_stage.as_str(),
            cost: crate::cost::merge(&from.cost, cost_delta),
            now: *now,
            lease_expires_at: None,
            complete: false,
            event_id: Uuid::now_v7(),
            event_key: stage_event_key(next_stage),
            event_payload: Value::Null,
            partials: Vec::new(),
            trace: None,
            next_stage,
        };
        match step {
            BoundaryStep::Checkpoint(Checkpoint { next_stage, partial_results, cost_delta, payload }, lease_ms) => {
                let partials =
                    partial_results.iter().map(|(key, bundle)| Partial { id: Uuid::now_v7(), key, bundle }).collect();
                Row {
                    lease_expires_at: Some(now.saturating_add(*lease_ms)),
                    event_payload: checkpoint_payload(from.stage, payload.clone()),
                    partials,
                    ..base(*next_stage, cost_delta)
                }
            }
            BoundaryStep::Complete(Completion { answer, evidence, cost_delta, payload }) => {
                let row = base(Stage::Completed, cost_delta);
                let trace = Trace {
                    id: Uuid::now_v7(),
                    answer,
                    evidence,
                    char_count: i32::try_from(answer.chars().count()).unwrap_or(i32::MAX),
                };
                let event_payload = completion_payload(from.stage, trace.id, &row.cost, payload.clone());
                Row { complete: true, event_payload, trace: Some(trace), ..row }
            }
        }
    }

    /// The lifecycle command this boundary is, for refusals.
    fn command(&self) -> &'static str {
        if self.complete { "complete" } else { "checkpoint" }
    }
}
