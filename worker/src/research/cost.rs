//! What a task spends, accumulated exactly. A task's `cost` JSON is
//! `{ input_tokens, output_tokens, usd, usd_nanos, stages: { <stage>: { …the same… } } }`
//! (DESIGN.md): `usd_nanos` is an integer, summed exactly however many stages and calls
//! add to it, and `usd` is always derived from it (`usd_nanos / 1e9`), so clients never
//! see a float sum such as `0.000034000000000000007`.
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// Nanodollars in one dollar.
const NANOS_PER_USD: f64 = 1e9;

/// What one stage (or one model call) spent.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CostReport {
    /// Tokens read.
    pub input_tokens: i64,
    /// Tokens written.
    pub output_tokens: i64,
    /// Billionths of a US dollar at the configured prices.
    pub usd_nanos: i64,
}

impl CostReport {
    /// The cost of `input` and `output` tokens at prices in dollars per million tokens,
    /// rounded to the nearest nanodollar once, here; everything after adds integers.
    pub fn at_prices(input_tokens: i64, output_tokens: i64, input_usd_per_1m: f64, output_usd_per_1m: f64) -> Self {
        let dollars = input_tokens as f64 * input_usd_per_1m / 1e6 + output_tokens as f64 * output_usd_per_1m / 1e6;
        Self { input_tokens, output_tokens, usd_nanos: usd_to_nanos(dollars) }
    }

    /// The shape accumulated into the job's `cost`: the totals, plus this stage's share.
    pub fn to_delta(self, stage: &str) -> CostDelta {
        self.to_delta_with_calls(stage, None)
    }

    /// [`Self::to_delta`] with the stage's per-call records (`calls`, when the engine
    /// reported them) kept under the stage.
    pub fn to_delta_with_calls(self, stage: &str, calls: Option<Value>) -> CostDelta {
        let part = self.to_json();
        let mut delta = part.clone();
        delta["stages"] = json!({ stage: part });
        if let Some(calls) = calls {
            delta["stages"][stage]["calls"] = calls;
        }
        CostDelta(delta)
    }

    fn to_json(self) -> Value {
        json!({
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "usd_nanos": self.usd_nanos,
            "usd": nanos_to_usd(self.usd_nanos),
        })
    }
}

/// What a stage, an attempt or a call spent, in the shape accumulated into a task's `cost`
/// (numbers add, objects merge, per-call lists append; see [`merge`]). Only ever added to
/// a task's cost, never stored alone.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(transparent)]
pub struct CostDelta(Value);

impl Default for CostDelta {
    fn default() -> Self {
        Self::none()
    }
}

impl CostDelta {
    /// Nothing spent.
    pub fn none() -> Self {
        Self(Value::Object(Map::new()))
    }

    /// What an engine reported, in whatever shape it reports (an object of numbers).
    pub fn reported(value: Value) -> Self {
        if value.is_null() { Self::none() } else { Self(value) }
    }

    /// This delta and `other` together.
    pub fn and(&self, other: &CostDelta) -> CostDelta {
        CostDelta(merge(&self.0, &other.0))
    }

    /// `total` (a task's `cost`) with this delta added.
    pub fn added_to(&self, total: &Value) -> Value {
        merge(total, &self.0)
    }

    /// The delta as JSON (for an event's payload).
    pub fn as_json(&self) -> &Value {
        &self.0
    }
}

/// The calls to a model one stage run made, each with what it cost: what the stage spent
/// even when it fails, so a failed attempt's spending still counts against the budget.
#[derive(Debug, Default)]
pub struct CallLog {
    calls: std::sync::Mutex<Vec<(CostReport, Value)>>,
}

impl CallLog {
    /// Records a call: its cost and what to say about it (model, status, whether the
    /// tokens were estimated).
    pub fn record(&self, cost: CostReport, detail: Value) {
        self.lock().push((cost, detail));
    }

    /// What the calls cost together.
    pub fn total(&self) -> CostReport {
        self.lock().iter().fold(CostReport::default(), |sum, (cost, _)| CostReport {
            input_tokens: sum.input_tokens + cost.input_tokens,
            output_tokens: sum.output_tokens + cost.output_tokens,
            usd_nanos: sum.usd_nanos + cost.usd_nanos,
        })
    }

    /// One record per call: its detail with its cost.
    pub fn records(&self) -> Vec<Value> {
        self.lock()
            .iter()
            .map(|(cost, detail)| {
                let mut record = cost.to_json();
                if let (Value::Object(record), Value::Object(detail)) = (&mut record, detail) {
                    record.extend(detail.clone());
                }
                record
            })
            .collect()
    }

    /// Whether any call was made.
    pub fn is_empty(&self) -> bool {
        self.lock().is_empty()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<(CostReport, Value)>> {
        self.calls.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Whole nanodollars, rounded.
pub fn usd_to_nanos(usd: f64) -> i64 {
    (usd * NANOS_PER_USD).round() as i64
}

/// Dollars of a nanodollar count.
pub fn nanos_to_usd(nanos: i64) -> f64 {
    nanos as f64 / NANOS_PER_USD
}

/// What `cost` says was spent, in nanodollars (from `usd` for rows written before
/// `usd_nanos` existed).
pub fn spent_nanos(cost: &Value) -> i64 {
    cost.get("usd_nanos")
        .and_then(Value::as_i64)
        .or_else(|| cost.get("usd").and_then(Value::as_f64).map(usd_to_nanos))
        .unwrap_or(0)
}

/// Adds `delta` into `total` number by number (objects merge recursively, integers add
/// exactly), so the job's `cost` accumulates whatever shape an engine reports; then every
/// `usd` is derived again from its `usd_nanos`.
pub fn merge(total: &Value, delta: &Value) -> Value {
    let mut merged = add(&with_nanos(total), &with_nanos(delta));
    derive_usd(&mut merged);
    merged
}

fn add(total: &Value, delta: &Value) -> Value {
    match (total, delta) {
        (Value::Object(left), Value::Object(right)) => {
            let mut merged = left.clone();
            for (key, value) in right {
                let next = match left.get(key) {
                    Some(existing) => add(existing, value),
                    None => value.clone(),
                };
                merged.insert(key.clone(), next);
            }
            Value::Object(merged)
        }
        // Per-call records accumulate: each stage and attempt adds its calls after the others.
        (Value::Array(left), Value::Array(right)) => Value::Array(left.iter().chain(right).cloned().collect()),
        (Value::Number(left), Value::Number(right)) => match (left.as_i64(), right.as_i64()) {
            (Some(a), Some(b)) => json!(a.saturating_add(b)),
            _ => json!(left.as_f64().unwrap_or(0.0) + right.as_f64().unwrap_or(0.0)),
        },
        (_, Value::Null) => total.clone(),
        _ => delta.clone(),
    }
}

/// A copy in which every object with a `usd` but no `usd_nanos` gains the nanos (rows and
/// engines that reported dollars only), so the sum is taken over integers.
fn with_nanos(value: &Value) -> Value {
    match value {
        Value::Array(items) => Value::Array(items.iter().map(with_nanos).collect()),
        Value::Object(fields) => {
            let mut copy: Map<String, Value> =
                fields.iter().map(|(key, value)| (key.clone(), with_nanos(value))).collect();
            if let (None, Some(usd)) = (copy.get("usd_nanos"), copy.get("usd").and_then(Value::as_f64)) {
                copy.insert("usd_nanos".into(), json!(usd_to_nanos(usd)));
            }
            Value::Object(copy)
        }
        other => other.clone(),
    }
}

/// Sets every `usd` beside a `usd_nanos` to `usd_nanos / 1e9`.
fn derive_usd(value: &mut Value) {
    match value {
        Value::Object(fields) => {
            if let Some(nanos) = fields.get("usd_nanos").and_then(Value::as_i64) {
                fields.insert("usd".into(), json!(nanos_to_usd(nanos)));
            }
            fields.values_mut().for_each(derive_usd);
        }
        Value::Array(items) => items.iter_mut().for_each(derive_usd),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nanos_add_exactly_and_usd_is_derived_from_them() {
        let stage = CostReport { input_tokens: 10, output_tokens: 2, usd_nanos: 34_000 };
        let mut total = json!({});
        for _ in 0..3 {
            total = stage.to_delta("planning").added_to(&total);
        }
        assert_eq!(total["usd_nanos"], json!(102_000));
        assert_eq!(total["usd"], json!(0.000102));
        assert_eq!(total["stages"]["planning"]["usd_nanos"], json!(102_000));
        assert_eq!(total["input_tokens"], json!(30));
    }

    #[test]
    fn a_float_only_total_is_carried_over_into_nanos() {
        let merged = merge(&json!({ "usd": 0.5 }), &json!({ "usd_nanos": 250_000_000 }));
        assert_eq!(merged["usd_nanos"], json!(750_000_000));
        assert_eq!(merged["usd"], json!(0.75));
    }

    #[test]
    fn prices_per_million_round_once() {
        let report = CostReport::at_prices(1_000, 500, 0.5, 1.5);
        assert_eq!(report.usd_nanos, 1_250_000);
    }

    #[test]
    fn per_call_records_accumulate_in_order() {
        let first = json!({ "stages": { "planning": { "calls": [{ "usd_nanos": 5 }] } } });
        let second = json!({ "stages": { "planning": { "calls": [{ "usd_nanos": 7 }] } } });
        let merged = merge(&first, &second);
        assert_eq!(
            merged["stages"]["planning"]["calls"],
            json!([{ "usd_nanos": 5, "usd": 5e-9 }, { "usd_nanos": 7, "usd": 7e-9 }])
        );
    }

    #[test]
    fn other_numbers_merge_number_by_number() {
        let total = json!({ "tokens": { "input": 10 } });
        let delta = json!({ "tokens": { "input": 5, "output": 2 } });
        assert_eq!(merge(&total, &delta), json!({ "tokens": { "input": 15, "output": 2 } }));
    }
}
