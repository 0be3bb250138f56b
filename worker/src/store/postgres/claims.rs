//! Leases in one statement (`sql/claims.*.sql`): every row's lease, the `started` events,
//! the outbox entries marked `leased`, each task's grant verdict and whether its creator
//! has a webhook endpoint.
use std::collections::HashMap;

use entity::{GrantDenial, OutboxStatus, research_task_job as job};
use sea_orm::{ActiveEnum as _, ConnectionTrait, DatabaseBackend, DbErr, FromQueryResult, QueryResult, Statement};
use serde::Serialize;
use uuid::Uuid;

use crate::store::claims::rows::{LeaseWrite, Leased};
use crate::store::journal::Appended;
use crate::store::outbox::UNLEASED;

/// One lease as the statement reads it (an element of `$1`).
#[derive(Serialize)]
struct Row<'a> {
    id: Uuid,
    token: Uuid,
    worker_id: &'a str,
    stage: &'static str,
    lease_expires_at: i64,
    now: i64,
    started: Option<Started<'a>>,
}

#[derive(Serialize)]
struct Started<'a> {
    id: Uuid,
    event_type: String,
    key: &'a str,
    payload: &'a serde_json::Value,
}

pub(crate) async fn lease<C: ConnectionTrait>(txn: &C, leases: &[LeaseWrite]) -> Result<Vec<Leased>, DbErr> {
    let rows: Vec<Row<'_>> = leases
        .iter()
        .map(|lease| Row {
            id: lease.job_id,
            token: lease.token,
            worker_id: &lease.worker_id,
            stage: lease.stage.as_str(),
            lease_expires_at: lease.lease_expires_at,
            now: lease.now,
            started: lease.started.as_ref().map(|event| Started {
                id: event.id,
                event_type: event.event_type.to_value(),
                key: &event.key,
                payload: &event.payload,
            }),
        })
        .collect();
    let input = serde_json::to_string(&rows).map_err(|error| DbErr::Custom(error.to_string()))?;
    let unleased: Vec<String> = UNLEASED.iter().map(|status| status.to_value()).collect();
    let values = [input.into(), unleased.into(), OutboxStatus::Leased.to_value().into()];
    let statement = Statement::from_sql_and_values(DatabaseBackend::Postgres, super::CLAIMS, values);
    let mut written: HashMap<Uuid, QueryResult> = HashMap::with_capacity(rows.len());
    for row in txn.query_all_raw(statement).await? {
        written.insert(row.try_get("", "id")?, row);
    }
    let mut leased = Vec::with_capacity(leases.len());
    for lease in leases {
        let row = written
            .remove(&lease.job_id)
            .ok_or_else(|| DbErr::Custom(format!("the claim of {} found no row", lease.job_id)))?;
        let sequence: Option<i32> = row.try_get("", "started_sequence")?;
        let new: bool = row.try_get("", "started_new")?;
        let denial: Option<String> = row.try_get("", "denial")?;
        leased.push(Leased {
            job: job::Model::from_query_result(&row, "")?,
            started: sequence.map(|sequence| Appended { sequence, new }),
            any_endpoint: row.try_get("", "any_endpoint")?,
            grant: denial.as_deref().map(GrantDenial::from_label),
        });
    }
    Ok(leased)
}
