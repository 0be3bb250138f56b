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
use crate::notify::TaskSignal;

/// An appended progress event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The event's sequence (new, or the one its key was written at before).
    pub sequence: i32,
    /// Whether this append queued webhook deliveries (the webhook loop should look).
    pub webhooks: bool,
    /// Whether the append also queued the transaction's NOTIFY
    /// ([`append_progress_event_announcing`]), so the commit need not send one.
    pub announced: bool,
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
    notify: Option<SimpleExpr>,
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
        .returning(
            Query::returning()
                .exprs([Expr::col(J::SEQUENCE), also.unwrap_or_else(|| Expr::val(false))].into_iter().chain(notify)),
        )
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
    append(txn, job, Event { event_type, stage, idempotency_key, payload }, None, now).await
}

/// [`append_progress_event`] for the last write of a transaction: on PostgreSQL the same
/// statement also queues the transaction's NOTIFY, `signal` with this event's sequence and
/// `webhooks` set when the task's creator has an enabled endpoint (a wake-up the webhook
/// loop may find nothing for), one statement fewer per commit. A replayed key appends
/// nothing and so announces nothing: [`Appended::announced`] says which happened, and
/// `row::commit_announced` sends the NOTIFY itself when it is false.
pub async fn append_progress_event_announcing<C: ConnectionTrait>(
    txn: &C,
    job: &research_task_job::Model,
    event: Event<'_>,
    signal: &TaskSignal,
    now: i64,
) -> Result<Appended, DbErr> {
    let announce = crate::db::is_postgres(txn.get_database_backend()).then_some(signal);
    append(txn, job, event, announce, now).await
}

/// A progress event to append.
#[derive(Debug, Clone)]
pub struct Event<'a> {
    /// Its type.
    pub event_type: ProgressEventType,
    /// The stage it reports.
    pub stage: Stage,
    /// Its idempotency key (a replay appends nothing).
    pub idempotency_key: &'a str,
    /// Its payload.
    pub payload: Value,
}

async fn append<C: ConnectionTrait>(
    txn: &C,
    job: &research_task_job::Model,
    event: Event<'_>,
    announce: Option<&TaskSignal>,
    now: i64,
) -> Result<Appended, DbErr> {
    let Event { event_type, stage, idempotency_key, payload } = event;
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
    // (Announcing evaluates this probe twice, for the row and for the NOTIFY: a RETURNING
    // list cannot name another of its own columns, and the probe is one index lookup.)
    let any_endpoint = crate::webhooks::any_endpoint(job);
    let notify = announce.map(|signal| notify_with_sequence(signal, any_endpoint.clone())).transpose()?;
    let announced = notify.is_some();
    let (sequence, any_endpoint) =
        match insert_next::<progress::Entity, _>(txn, job.id, idempotency_key, values, Some(any_endpoint), notify)
            .await?
        {
            Slot::Written(sequence) => return Ok(Appended { sequence, webhooks: false, announced: false }),
            Slot::New(sequence, any_endpoint) => (sequence, any_endpoint),
        };
    // Webhooks of the task's creator, in the same transaction as the event.
    let webhooks =
        any_endpoint && crate::webhooks::enqueue(txn, job, event_type, stage, sequence, &payload, now).await?;
    Ok(Appended { sequence, webhooks, announced })
}

/// `pg_notify` of `signal` (serialized as every NOTIFY is) with `progress_sequence` set to
/// the inserted row's `sequence` and `webhooks` to `webhooks`, for an insert's RETURNING.
fn notify_with_sequence(signal: &TaskSignal, webhooks: SimpleExpr) -> Result<SimpleExpr, DbErr> {
    let template = serde_json::to_string(signal).map_err(|error| DbErr::Custom(error.to_string()))?;
    let payload = Expr::cust_with_exprs(
        "CAST(jsonb_set(jsonb_set(CAST($1 AS jsonb), '{progress_sequence}', to_jsonb(\"sequence\")), \
         '{webhooks}', to_jsonb($2)) AS text)",
        [Expr::val(template), webhooks],
    );
    // pg_notify returns void, which is read back as text (never looked at).
    Ok(Expr::cust_with_exprs("CAST(pg_notify($1, $2) AS text)", [Expr::val(crate::notify::CHANNEL), payload]))
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
    match insert_next::<partial::Entity, _>(txn, job.id, idempotency_key, values, None, None).await? {
        Slot::Written(sequence) | Slot::New(sequence, _) => Ok(sequence),
    }
}
