//! A stage boundary as the lifecycle decides it, and what became of it.
use entity::{Stage, research_task_job as job};
use serde::Serialize;
use serde_json::Value;
use uuid::Uuid;

use crate::store::rows::{Fence, LeasePair};

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
    /// The citation checks, a JSON array (`answer_trace_citation_checks`; none written
    /// when empty).
    pub checks: Value,
    /// The final answer's citations with their quotes, a JSON array (written with the
    /// checks).
    pub citations: Value,
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
