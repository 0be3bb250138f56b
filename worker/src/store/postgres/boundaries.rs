//! A batch of stage boundaries written by one statement (`sql/boundaries.*.sql`): the
//! fenced updates of every row, their partial results and events, and for completions the
//! answer trace, the draft and the closed outbox entries. A batch of any size costs the
//! same round trip; a boundary whose fence holds it out is then asked why, under its lock.
use std::collections::HashMap;

use entity::{OutboxStatus, research_task_job as job};
use sea_orm::{ActiveEnum as _, ConnectionTrait, DatabaseBackend, DbErr, FromQueryResult, QueryResult, Statement};
use serde::Serialize;
use uuid::Uuid;

use crate::store::boundaries::rows::{BoundaryOutcome, BoundaryWrite, EventWrite, Landed, PartialWrite, TraceWrite};
use crate::store::outbox::OPEN;
use crate::store::tasks::fence;

/// One boundary as the statement reads it (an element of `$1`).
#[derive(Serialize)]
struct Row<'a> {
    id: Uuid,
    token: Uuid,
    from_stage: &'static str,
    stage: &'static str,
    cost: &'a serde_json::Value,
    now: i64,
    lease_expires_at: Option<i64>,
    event_id: Uuid,
    event_type: String,
    event_key: &'a str,
    event_payload: &'a serde_json::Value,
    partials: &'a [PartialWrite],
    trace: Option<&'a TraceWrite>,
}

impl<'a> Row<'a> {
    fn of(write: &'a BoundaryWrite) -> Self {
        let EventWrite { id, event_type, key, payload } = &write.event;
        Row {
            id: write.lease.job_id,
            token: write.lease.token,
            from_stage: write.from_stage.as_str(),
            stage: write.stage.as_str(),
            cost: &write.cost,
            now: write.now,
            lease_expires_at: write.lease_expires_at,
            event_id: *id,
            event_type: event_type.to_value(),
            event_key: key,
            event_payload: payload,
            partials: &write.partials,
            trace: write.trace.as_ref(),
        }
    }
}

pub(crate) async fn write<C: ConnectionTrait>(
    txn: &C,
    boundaries: &[BoundaryWrite],
) -> Result<Vec<BoundaryOutcome>, DbErr> {
    let rows: Vec<Row<'_>> = boundaries.iter().map(Row::of).collect();
    let input = serde_json::to_string(&rows).map_err(|error| DbErr::Custom(error.to_string()))?;
    let open: Vec<String> = OPEN.iter().map(|status| status.to_value()).collect();
    let values = [input.into(), open.into(), OutboxStatus::Completed.to_value().into()];
    let statement = Statement::from_sql_and_values(DatabaseBackend::Postgres, super::BOUNDARIES, values);
    let mut written: HashMap<Uuid, QueryResult> = HashMap::with_capacity(rows.len());
    for row in txn.query_all_raw(statement).await? {
        written.insert(row.try_get("", "id")?, row);
    }
    let mut outcomes = Vec::with_capacity(boundaries.len());
    for boundary in boundaries {
        let outcome = match written.remove(&boundary.lease.job_id) {
            Some(row) => BoundaryOutcome::Landed(Box::new(Landed {
                job: job::Model::from_query_result(&row, "")?,
                event_sequence: row.try_get("", "event_sequence")?,
                event_new: row.try_get("", "event_new")?,
                any_endpoint: row.try_get("", "any_endpoint")?,
            })),
            // Held out: say why, under the row's lock.
            None => match fence(txn, boundary.lease, boundary.from_stage, boundary.now).await? {
                Some(fenced) => BoundaryOutcome::Fenced(fenced),
                // The grant was restored between the two statements; the lock now keeps
                // the row still, so the caller's retry lands it.
                None => {
                    return Err(DbErr::Custom(format!(
                        "the boundary of task {} raced a change to its grant; it will be retried",
                        boundary.lease.job_id
                    )));
                }
            },
        };
        outcomes.push(outcome);
    }
    Ok(outcomes)
}
