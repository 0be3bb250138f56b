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
    /// A follow-up's standalone query, which the plan was made from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standalone_query: Option<&'a str>,
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

/// An evidence passage as the answer trace stores it: every key of the passage and its
/// citation number (1 for the first).
#[derive(Serialize)]
pub(super) struct CitedPassage<'a> {
    #[serde(flatten)]
    pub passage: &'a Passage,
    pub citation: usize,
}

/// What a stage's engine reported, as its stage event keeps it: the engine's own fields
/// (anything but an object counts as none) beside the parts the pipeline adds by name
/// (`calls`, `clarification`, `decision`).
#[derive(Debug, Default)]
pub(super) struct Report(serde_json::Map<String, Value>);

impl Report {
    /// The engine's report.
    pub fn of(report: Value) -> Self {
        match report {
            Value::Object(fields) => Self(fields),
            _ => Self::default(),
        }
    }

    /// This report with `part` under `key`.
    pub fn with(mut self, key: &str, part: Value) -> Self {
        self.0.insert(key.to_owned(), part);
        self
    }

    /// Takes the part under `key` out, if there is one.
    pub fn take(&mut self, key: &str) -> Option<Value> {
        self.0.remove(key)
    }

    /// The part under `key`, if there is one.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    /// Whether nothing is left.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// As stored: null when nothing is left.
    pub fn into_value(self) -> Value {
        if self.0.is_empty() { Value::Null } else { Value::Object(self.0) }
    }
}

/// A record as the journal stores it.
pub(super) fn stored(record: &impl Serialize) -> Value {
    // Every record here is plain data (no map with non-string keys): it always serializes.
    serde_json::to_value(record).unwrap_or(Value::Null)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_report_keeps_the_engines_fields_beside_named_parts() {
        let report = Report::of(json!({ "model": "m" })).with("decision", json!({ "go": true }));
        assert_eq!(report.into_value(), json!({ "model": "m", "decision": { "go": true } }));
    }

    #[test]
    fn a_report_that_is_not_an_object_or_left_empty_is_stored_as_null() {
        assert_eq!(Report::of(json!("text")).into_value(), Value::Null);
        let mut report = Report::of(json!({ "calls": [] }));
        assert_eq!(report.take("calls"), Some(json!([])));
        assert_eq!(report.into_value(), Value::Null);
    }
}
