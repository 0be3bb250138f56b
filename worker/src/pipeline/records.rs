//! What the stages write into the journal, as types: each stage's `stage_changed` payload
//! and the bundles a round leaves (`retrieval`, `evidence`). The bundles are read back
//! (`rounds.rs`) through the same types they were written with.
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::research::engine::{Passage, Plan, Retrieval};
use crate::research::rounds::Outcome;

/// Planning's payload: the plan round 1 searches.
#[derive(Serialize)]
pub(super) struct Planned<'a> {
    pub plan: &'a Plan,
}

/// Retrieval's payload: the round and how many sub-queries it searched.
#[derive(Serialize)]
pub(super) struct Retrieved {
    pub round: u32,
    pub sub_queries: usize,
}

/// Analysis's payload: what the round kept and what was decided after it (with the next
/// round's plan when another follows).
#[derive(Serialize)]
pub(super) struct Analyzed<'a> {
    pub evidence: usize,
    pub round: u32,
    pub queries: &'a [String],
    pub new_evidence: usize,
    pub decision: Outcome,
    pub notes_applied: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<Plan>,
}

/// What a bundle holds (its `kind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum BundleKind {
    /// One sub-query's passages.
    Retrieval,
    /// What a round kept.
    #[default]
    Evidence,
}

/// One sub-query's retrieval, as its round's bundle stores it.
#[derive(Serialize, Deserialize)]
pub(super) struct RetrievalBundle {
    #[serde(default = "retrieval_kind")]
    pub kind: BundleKind,
    #[serde(flatten)]
    pub retrieval: Retrieval,
}

fn retrieval_kind() -> BundleKind {
    BundleKind::Retrieval
}

/// The evidence a round kept, as its bundle stores it (a bundle without any reads as
/// empty).
#[derive(Serialize, Deserialize)]
pub(super) struct EvidenceBundle {
    #[serde(default)]
    pub kind: BundleKind,
    #[serde(default)]
    pub evidence: Vec<Passage>,
}

/// A record as the journal stores it.
pub(super) fn stored(record: &impl Serialize) -> Value {
    // Every record here is plain data (no map with non-string keys): it always serializes.
    serde_json::to_value(record).unwrap_or(Value::Null)
}
