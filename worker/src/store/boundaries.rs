//! Stage boundaries: the one write by which a lease holder moves its task on. A boundary
//! lands only while the task's row still carries the lease's token, is still in the stage
//! its worker ran, and the task's grant holds at the boundary's time; then, in the caller's
//! transaction, its row (stage, cost, lease), its partial results, its `stage_changed`
//! event and, for a completion, the answer trace, the answer draft and the closed outbox
//! entries. A boundary held out writes nothing.
//!
//! A batch of any size (one included) is one operation: on PostgreSQL one statement
//! (`postgres/sql/boundaries.*.sql`), rows locked in id order; on SQLite the same writes
//! row by row in id order (`sqlite/boundaries.rs`). Everything a boundary writes is decided
//! by the caller (the lifecycle): the store only writes it.
use entity::{Stage, research_task_job as job};
use sea_orm::{ConnectionTrait, DbErr};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use super::tasks::{Fence, LeasePair};
use super::{Dialect, dialect};

/// One task's stage boundary, as decided.
#[derive(Debug, Clone)]
pub struct BoundaryWrite {
    /// The lease that fences it.
    pub lease: LeasePair,
    /// The stage its worker ran (the row must still be in it).
    pub from_stage: Stage,
    /// The stage it moves to (`completed` with a trace).
    pub stage: Stage,
    /// The task's cost with this stage's spend added.
    pub cost: Value,
    /// The boundary's time.
    pub now: i64,
    /// A checkpoint renews the lease until then; a completion clears the lease (`None`).
    pub lease_expires_at: Option<i64>,
    /// Its `stage_changed` event.
    pub event: EventWrite,
    /// Its partial results (a key written before is skipped).
    pub partials: Vec<PartialWrite>,
    /// For a completion, the answer trace.
    pub trace: Option<TraceWrite>,
}

/// A progress event to write at the task's next sequence (none when its key was written).
#[derive(Debug, Clone, Serialize)]
pub struct EventWrite {
    /// The row id.
    pub id: Uuid,
    /// Its type.
    pub event_type: entity::ProgressEventType,
    /// Its idempotency key.
    pub key: String,
    /// Its payload.
    pub payload: Value,
}

/// A partial result to write at the task's next partial sequence.
#[derive(Debug, Clone, Serialize)]
pub struct PartialWrite {
    /// The row id.
    pub id: Uuid,
    /// Its idempotency key.
    pub key: String,
    /// The evidence bundle.
    pub bundle: Value,
}

/// A completion's answer trace (bound to the task's subject and grant by the store).
#[derive(Debug, Clone, Serialize)]
pub struct TraceWrite {
    /// The trace id.
    pub id: Uuid,
    /// The answer.
    pub answer: String,
    /// The cited evidence, a JSON array in citation order.
    pub evidence: Value,
}

/// What became of one boundary.
#[derive(Debug, Clone)]
pub enum BoundaryOutcome {
    /// It landed.
    Landed(Box<Landed>),
    /// Its fence held it out; it wrote nothing.
    Fenced(Fence),
}

/// A landed boundary.
#[derive(Debug, Clone)]
pub struct Landed {
    /// The task row as written.
    pub job: job::Model,
    /// Its event's sequence (new, or the one its key was written at before).
    pub event_sequence: i32,
    /// Whether the event is new (a replayed boundary appends nothing).
    pub event_new: bool,
    /// Whether the task's creator has an enabled webhook endpoint.
    pub any_endpoint: bool,
}

/// Writes `boundaries` (of different tasks, each a move the caller's stage rule allows) in
/// `txn`; returns each one's outcome in the order given. An `Err` means a statement failed
/// and the transaction must be rolled back.
pub async fn write<C: ConnectionTrait>(txn: &C, boundaries: &[BoundaryWrite]) -> Result<Vec<BoundaryOutcome>, DbErr> {
    if boundaries.is_empty() {
        return Ok(Vec::new());
    }
    match dialect(txn) {
        Dialect::Postgres => super::postgres::boundaries::write(txn, boundaries).await,
        Dialect::Sqlite => super::sqlite::boundaries::write(txn, boundaries).await,
    }
}
