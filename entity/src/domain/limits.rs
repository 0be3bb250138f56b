//! A task's `limits`, parsed once where they enter (the API, or a test calling the
//! lifecycle) into a typed value: every key has a type and a range, a value of the wrong
//! type or out of range is refused naming its key, an unknown key is refused (a typo must
//! not silently mean "no limit"), and `null` means the key's default. The worker reads the
//! stored JSON back through the same parser.
//!
//! Every key is one line of the [`task_limits!`] table below, which generates the struct,
//! its parser and the text the GraphQL schema shows for `limits` (`task_limits_doc!`).
use super::limit_value::LimitValue;
use serde::Serialize;
use serde_json::Value;

/// Why a `limits` object was refused: the key it names (the whole object when empty) and
/// what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LimitsError {
    /// The key, as the client wrote it; empty when the object itself is wrong.
    pub key: String,
    /// What is wrong, in words that name the key.
    pub message: String,
}

impl std::fmt::Display for LimitsError {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str(&self.message)
    }
}

impl std::error::Error for LimitsError {}

/// An integer from `MIN` to `MAX`, inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(transparent)]
pub struct Bounded<const MIN: i64, const MAX: i64>(i64);

impl<const MIN: i64, const MAX: i64> Bounded<MIN, MAX> {
    /// The value, when it lies within the bounds.
    pub fn new(value: i64) -> Option<Self> {
        (MIN..=MAX).contains(&value).then_some(Self(value))
    }

    /// The integer.
    pub fn get(self) -> i64 {
        self.0
    }
}

impl<const MIN: i64, const MAX: i64> LimitValue for Bounded<MIN, MAX> {
    fn from_json(value: &Value) -> Result<Self, String> {
        // 1000.0 is a float to serde_json, and a float is not an integer here: what a client
        // sends is what is stored and shown back.
        value.as_i64().and_then(Self::new).ok_or_else(|| format!("an integer from {MIN} to {MAX}"))
    }
}

impl LimitValue for bool {
    fn from_json(value: &Value) -> Result<Self, String> {
        value.as_bool().ok_or_else(|| "true or false".to_owned())
    }
}

/// Generates [`TaskLimits`] (a field per key, `None` for the default), its parser, the
/// list of keys, and `task_limits_doc!()`, the keys described for the schema. A row is
/// `/// what it limits` then `key: Type = "type, range and default";`.
macro_rules! task_limits {
    ($( #[doc = $doc:literal] $key:ident : $ty:ty = $shape:literal; )*) => {
        /// The limits a task runs under; `None` means the key's default.
        #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
        pub struct TaskLimits {
            $(
                #[doc = $doc]
                #[serde(skip_serializing_if = "Option::is_none")]
                pub $key: Option<$ty>,
            )*
        }

        impl TaskLimits {
            /// Every key, in the order the schema lists them.
            pub const KEYS: &[&str] = &[$(stringify!($key)),*];

            /// Sets `key` from its JSON value (`null` leaves the default).
            fn set(&mut self, key: &str, value: &Value) -> Result<(), LimitsError> {
                match key {
                    $(
                        stringify!($key) => {
                            if !value.is_null() {
                                let parsed = <$ty as LimitValue>::from_json(value).map_err(|expected| {
                                    LimitsError::new(key, format!("limits.{key} must be {expected}"))
                                })?;
                                self.$key = Some(parsed);
                            }
                            Ok(())
                        }
                    )*
                    unknown => Err(LimitsError::new(
                        unknown,
                        format!(
                            "limits.{unknown} is not a limit; the limits are {}",
                            Self::KEYS.join(", ")
                        ),
                    )),
                }
            }
        }

        /// The keys of `limits`, one Markdown line each, for the schema's description.
        #[macro_export]
        macro_rules! task_limits_doc {
            () => {
                concat!($("- `", stringify!($key), "` (", $shape, "):", $doc, "\n",)*)
            };
        }
    };
}

task_limits! {
    /// The most sub-queries a plan may hold; a plan that needs more fails the task.
    max_sub_queries: Bounded<1, 16> = "integer, 1 to 16; default: no limit";
    /// The most evidence analysis may keep.
    max_evidence: Bounded<1, 100> = "integer, 1 to 100; default: no limit (topK still applies)";
    /// Milliseconds after creation by which the task must be done, or it fails.
    deadline_ms: Bounded<1_000, 2_592_000_000> = "integer, 1000 to 2592000000 (30 days); default: none";
    /// The most rounds of retrieval and analysis; after each one the engine decides whether the question is answered or what to search next.
    max_rounds: Bounded<1, 8> = "integer, 1 to 8; default: FAST 1, RESEARCH 2, DEEP 4, AUTO as the mode it resolves to";
    /// Whether the `openai` engine also asks the model, per cited claim, whether the cited passage supports it (budgeted; the lexical check always runs).
    verify: bool = "true or false; default: true in DEEP, false otherwise";
    /// Whether the task pauses after planning until a person approves its plan (`approveResearchPlan`, possibly edited) or resumes it; its `PAUSED` event and `awaiting` show the plan.
    approve_plan: bool = "true or false; default: false";
    /// Whether the engine may ask one clarifying question before planning when it judges the question ambiguous (`answerResearchClarification`); the built-in engine never asks.
    clarify: bool = "true or false; default: false";
    /// How long a wait for a person lasts before the task goes on by itself (plan approval with the proposed plan, a clarification without an answer); waiting does not count against `deadline_ms`.
    input_timeout_ms: Bounded<60_000, 604_800_000> = "integer, 60000 to 604800000 (7 days); default: 86400000 (one day)";
    /// Which documents evidence may come from, in every round and for full-text and vector search alike: `{metadata, mediaTypes, documentIds, createdAfter, createdBefore}`, the shape of `ResearchFiltersInput` (where `createResearchTask`'s `filters` is stored); every condition given must hold. A filter that matches nothing gives the no-evidence answer.
    filters: super::filters::DocumentFilters = "object; default: every document of the space";
}

impl TaskLimits {
    /// How long a wait for a person lasts, in milliseconds.
    pub fn input_timeout(&self) -> i64 {
        self.input_timeout_ms.map_or(86_400_000, Bounded::get)
    }

    /// Whether the task may wait for a person at all.
    pub fn may_wait(&self) -> bool {
        self.approve_plan == Some(true) || self.clarify == Some(true)
    }
}

impl LimitsError {
    fn new(key: &str, message: String) -> Self {
        Self { key: key.to_owned(), message }
    }
}

impl TaskLimits {
    /// Parses a client's `limits` object: every key known, every value of its type and
    /// within its range.
    pub fn parse(value: &Value) -> Result<Self, LimitsError> {
        let object = match value {
            Value::Object(object) => object,
            Value::Null => return Ok(Self::default()),
            _ => return Err(LimitsError::new("", "limits must be a JSON object".to_owned())),
        };
        let mut limits = Self::default();
        for (key, value) in object {
            limits.set(key, value)?;
        }
        Ok(limits)
    }

    /// Reads a task's stored `limits`. Rows written since limits were parsed at the edge
    /// always parse; a row from before may hold a key or value the parser refuses, and
    /// then every key that does parse is kept and the rest mean their default, as they
    /// did when the row was written.
    pub fn from_stored(value: &Value) -> Self {
        if let Ok(limits) = Self::parse(value) {
            return limits;
        }
        let mut limits = Self::default();
        if let Value::Object(object) = value {
            for (key, value) in object {
                let _ = limits.set(key, value);
            }
        }
        limits
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn every_documented_key_parses_and_null_means_the_default() {
        let limits = TaskLimits::parse(
            &json!({ "max_sub_queries": 3, "max_evidence": 7, "deadline_ms": 60000, "max_rounds": 8, "verify": false }),
        )
        .expect("valid limits");
        assert_eq!(limits.max_rounds.map(Bounded::get), Some(8));
        assert_eq!(limits.verify, Some(false));
        assert_eq!(limits.max_sub_queries.map(Bounded::get), Some(3));
        assert_eq!(limits.max_evidence.map(Bounded::get), Some(7));
        assert_eq!(limits.deadline_ms.map(Bounded::get), Some(60_000));
        let defaults = TaskLimits::parse(&json!({ "max_sub_queries": null, "deadline_ms": null })).expect("nulls");
        assert_eq!(defaults, TaskLimits::default());
        assert_eq!(TaskLimits::parse(&json!({})).expect("empty"), TaskLimits::default());
    }

    #[test]
    fn a_wrong_type_or_range_is_refused_naming_the_key() {
        for (limits, key) in [
            (json!({ "deadline_ms": "soon" }), "deadline_ms"),
            (json!({ "deadline_ms": 999 }), "deadline_ms"),
            (json!({ "deadline_ms": 1500.5 }), "deadline_ms"),
            (json!({ "deadline_ms": 1000.0 }), "deadline_ms"),
            (json!({ "deadline_ms": true }), "deadline_ms"),
            (json!({ "max_sub_queries": 0 }), "max_sub_queries"),
            (json!({ "max_rounds": 0 }), "max_rounds"),
            (json!({ "max_rounds": 9 }), "max_rounds"),
            (json!({ "verify": "yes" }), "verify"),
            (json!({ "verify": 1 }), "verify"),
            (json!({ "approve_plan": "yes" }), "approve_plan"),
            (json!({ "clarify": 0 }), "clarify"),
            (json!({ "input_timeout_ms": 59_999 }), "input_timeout_ms"),
            (json!({ "input_timeout_ms": 604_800_001 }), "input_timeout_ms"),
            (json!({ "max_sub_queries": 17 }), "max_sub_queries"),
            (json!({ "max_evidence": [] }), "max_evidence"),
            (json!({ "max_evidence": -1 }), "max_evidence"),
            (json!({ "max_evidence": 9_223_372_036_854_775_807_i64 }), "max_evidence"),
        ] {
            let error = TaskLimits::parse(&limits).expect_err("refused");
            assert_eq!(error.key, key, "{limits}");
            assert!(error.message.contains(&format!("limits.{key}")), "{}", error.message);
        }
    }

    #[test]
    fn an_unknown_key_is_refused_with_the_known_ones_listed() {
        let error = TaskLimits::parse(&json!({ "deadline": 5000 })).expect_err("a typo");
        assert_eq!(error.key, "deadline");
        assert!(error.message.contains("deadline_ms"), "{}", error.message);
        assert!(TaskLimits::parse(&json!([1])).is_err());
    }

    #[test]
    fn a_stored_row_from_before_keeps_what_parses() {
        let stored = TaskLimits::from_stored(&json!({ "deadline_ms": "soon", "max_evidence": 4, "old": 1 }));
        assert_eq!(stored.deadline_ms, None);
        assert_eq!(stored.max_evidence.map(Bounded::get), Some(4));
    }

    #[test]
    fn the_schema_text_names_every_key() {
        let doc = task_limits_doc!();
        for key in TaskLimits::KEYS {
            assert!(doc.contains(&format!("`{key}`")), "{doc}");
        }
    }
}
