//! Appending to a task's journals (progress events and partial results) with gapless
//! per-job sequences. The next sequence is the last one plus one, which is only gapless
//! because callers hold the job's row lock; a key written before returns its sequence.
//!
//! An append is one statement: `INSERT … SELECT <last sequence + 1> … ON CONFLICT DO
//! NOTHING RETURNING sequence`. Only a key written before (a replay) costs a second one,
//! to read the sequence it was written at.
use entity::{
    ProgressEventType, Stage, research_task_job, research_task_partial_result as partial,
    research_task_progress_event as progress,
};
use sea_orm::sea_query::{Expr, ExprTrait, Func, OnConflict, Query, SimpleExpr};
use sea_orm::{ConnectionTrait, DbErr, Iterable, StatementBuilder};
use serde_json::Value;
use uuid::Uuid;

use crate::journal::{Journal, sequence_of_key};

/// An appended progress event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The event's sequence (new, or the one its key was written at before).
    pub sequence: i32,
    /// Whether this append queued webhook deliveries (the webhook loop should look).
    pub webhooks: bool,
}

impl Appended {
    /// This event as the last of a transaction that appended `earlier` before it: its
    /// sequence, and webhooks queued if either queued any.
    pub fn after(self, earlier: Option<Self>) -> Self {
        Self { webhooks: self.webhooks || earlier.is_some_and(|earlier| earlier.webhooks), ..self }
    }
}

/// Where a keyed row went in its journal.
enum Slot {
    /// A row with the key was written before, at this sequence: nothing was written.
    Written(i32),
    /// The row was written at this sequence, the last one plus one; with the value of the
    /// insert's `also` condition.
    New(i32, bool),
}

/// Inserts the row `values` (every column of `J`, the sequence's place holding `None`)
/// at the job's next sequence unless a row with `key` exists. `also`, a condition of the
/// caller's, is evaluated in the same statement and returned with a new row.
async fn insert_next<J: Journal, C: ConnectionTrait>(
    txn: &C,
    job_id: Uuid,
    key: &str,
    values: Vec<(J::Column, Option<SimpleExpr>)>,
    also: Option<SimpleExpr>,
) -> Result<Slot, DbErr> {
    // The last sequence plus one, read in the same statement (the caller's row lock keeps
    // it from moving until commit).
    let next = Expr::expr(Func::coalesce([Expr::col(J::SEQUENCE).max(), Expr::val(0)])).add(1);
    let mut select = Query::select();
    for (_, value) in &values {
        select.expr(value.clone().unwrap_or_else(|| next.clone()));
    }
    select.from(J::default().table_ref()).and_where(Expr::col(J::JOB).eq(job_id));
    let insert = Query::insert()
        .into_table(J::default().table_ref())
        .columns(values.iter().map(|(column, _)| *column))
        .select_from(select)
        .map_err(|error| DbErr::Custom(error.to_string()))?
        // Either unique index (key or sequence) makes it a no-op; only a written key can
        // clash while the caller holds the row lock.
        .on_conflict(OnConflict::new().do_nothing().to_owned())
        .returning(Query::returning().exprs([Expr::col(J::SEQUENCE), also.unwrap_or_else(|| Expr::val(false))]))
        .to_owned();
    let statement = StatementBuilder::build(&insert, &txn.get_database_backend());
    if let Some(row) = txn.query_one_raw(statement).await? {
        return Ok(Slot::New(row.try_get_by_index(0)?, row.try_get_by_index::<Option<bool>>(1)?.unwrap_or(false)));
    }
    sequence_of_key::<J, _>(txn, job_id, key)
        .await?
        .map(Slot::Written)
        .ok_or_else(|| DbErr::Custom(format!("journal append for {job_id} clashed on a sequence, not its key {key}")))
}

/// Appends one progress event unless one with the same idempotency key exists; returns
/// the sequence of the event (new or existing). Call only while holding the job's lock.
pub async fn append_progress_event<C: ConnectionTrait>(
    txn: &C,
    job: &research_task_job::Model,
    event_type: ProgressEventType,
    stage: Stage,
    idempotency_key: &str,
    payload: Value,
    now: i64,
) -> Result<Appended, DbErr> {
    let values = progress::Column::iter()
        .map(|column| {
            let value: Option<SimpleExpr> = match column {
                progress::Column::Id => Some(Expr::val(Uuid::now_v7())),
                progress::Column::TenantId => Some(Expr::val(job.tenant_id.as_str())),
                progress::Column::KnowledgeSpaceId => Some(Expr::val(job.knowledge_space_id)),
                progress::Column::ResearchTaskJobId => Some(Expr::val(job.id)),
                progress::Column::Sequence => None,
                progress::Column::IdempotencyKey => Some(Expr::val(idempotency_key)),
                progress::Column::EventType => Some(Expr::val(event_type)),
                progress::Column::Stage => Some(Expr::val(stage)),
                progress::Column::Payload => Some(Expr::val(payload.clone())),
                progress::Column::CreatedAt => Some(Expr::val(now)),
            };
            (column, value)
        })
        .collect();
    let any_endpoint = Some(crate::webhooks::any_endpoint(job));
    let (sequence, any_endpoint) =
        match insert_next::<progress::Entity, _>(txn, job.id, idempotency_key, values, any_endpoint).await? {
            Slot::Written(sequence) => return Ok(Appended { sequence, webhooks: false }),
            Slot::New(sequence, any_endpoint) => (sequence, any_endpoint),
        };
    // Webhooks of the task's creator, in the same transaction as the event.
    let webhooks =
        any_endpoint && crate::webhooks::enqueue(txn, job, event_type, stage, sequence, &payload, now).await?;
    Ok(Appended { sequence, webhooks })
}

/// Appends one partial result unless one with the same idempotency key exists; returns
/// its sequence. Call only while holding the job's lock.
pub async fn append_partial_result<C: ConnectionTrait>(
    txn: &C,
    job: &research_task_job::Model,
    idempotency_key: &str,
    evidence_bundle: Value,
    now: i64,
) -> Result<i32, DbErr> {
    let values = partial::Column::iter()
        .map(|column| {
            let value: Option<SimpleExpr> = match column {
                partial::Column::Id => Some(Expr::val(Uuid::now_v7())),
                partial::Column::TenantId => Some(Expr::val(job.tenant_id.as_str())),
                partial::Column::KnowledgeSpaceId => Some(Expr::val(job.knowledge_space_id)),
                partial::Column::ResearchTaskJobId => Some(Expr::val(job.id)),
                partial::Column::Sequence => None,
                partial::Column::IdempotencyKey => Some(Expr::val(idempotency_key)),
                partial::Column::EvidenceBundle => Some(Expr::val(evidence_bundle.clone())),
                partial::Column::CreatedAt => Some(Expr::val(now)),
            };
            (column, value)
        })
        .collect();
    match insert_next::<partial::Entity, _>(txn, job.id, idempotency_key, values, None).await? {
        Slot::Written(sequence) | Slot::New(sequence, _) => Ok(sequence),
    }
}
