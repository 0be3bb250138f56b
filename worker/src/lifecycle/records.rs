//! The payloads of the events the lifecycle writes for people's part in a task: a command
//! (`canceled`, `paused`, `resumed`), a pause for input, the end of a wait, an automatic
//! resume. Types, so every writer says the same thing the same way.
use entity::Stage;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// How a wait for a person ended, as the `resumed` event says it.
#[derive(Debug, Clone, Serialize)]
pub(super) struct WaitEnded {
    /// What the task waited for.
    pub reason: String,
    /// Whether the approved plan differs from the proposed one.
    pub edited: bool,
    /// Whether the clarifying question was answered.
    pub answered: bool,
    /// Whether the wait ran out.
    pub timed_out: bool,
    /// The sub-queries round 1 searches (plan approval only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<Vec<String>>,
}

/// A command's event: the stage it left, when it resumes by itself (null: never), and, for
/// a resume that ended a wait, how the wait ended.
#[derive(Serialize)]
pub(super) struct Commanded {
    pub from_stage: Stage,
    pub resume_after: Option<i64>,
    #[serde(flatten)]
    pub wait: Option<WaitEnded>,
}

/// A task paused to wait for a person: why, until when, and what it asks.
#[derive(Serialize)]
pub(super) struct PausedForInput {
    pub from_stage: Stage,
    pub reason: &'static str,
    pub resume_after: i64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    /// A follow-up's standalone query, beside the plan it was planned from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub standalone_query: Option<String>,
}

/// A paused task put back in its stage: by itself (`automatic`) or by a person's input,
/// with how its wait ended, if it waited.
#[derive(Serialize)]
pub(super) struct Resumed {
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub automatic: bool,
    #[serde(flatten)]
    pub wait: Option<WaitEnded>,
    pub from_stage: Stage,
}

/// A record as an event stores it.
pub(super) fn stored(record: &impl Serialize) -> Value {
    // Plain data with string keys: serializing it cannot fail.
    serde_json::to_value(record).unwrap_or(Value::Null)
}

/// A plan as a wait for its approval stores it (`{mode, sub_queries}`): an approval reads
/// and replaces its sub-queries and keeps every other field as it was.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct StoredPlan {
    #[serde(default)]
    pub sub_queries: Vec<String>,
    #[serde(flatten)]
    pub rest: serde_json::Map<String, Value>,
}

impl StoredPlan {
    /// The plan a wait stored (none reads as an empty plan).
    pub fn of(stored: Option<Value>) -> Self {
        stored.and_then(|plan| serde_json::from_value(plan).ok()).unwrap_or_default()
    }

    /// As stored.
    pub fn into_value(self) -> Value {
        // Strings and a map of JSON values: it always serializes.
        serde_json::to_value(self).unwrap_or(Value::Null)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_approval_replaces_the_sub_queries_and_keeps_the_rest_of_the_plan() {
        let stored = serde_json::json!({ "mode": "research", "sub_queries": ["a", "b"] });
        let mut plan = StoredPlan::of(Some(stored));
        assert_eq!(plan.sub_queries, ["a", "b"]);
        plan.sub_queries = vec!["c".to_owned()];
        assert_eq!(plan.into_value(), serde_json::json!({ "mode": "research", "sub_queries": ["c"] }));
    }

    #[test]
    fn a_missing_plan_reads_as_an_empty_one() {
        assert!(StoredPlan::of(None).sub_queries.is_empty());
        assert!(StoredPlan::of(Some(Value::String("odd".into()))).sub_queries.is_empty());
    }
}
