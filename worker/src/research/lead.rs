//! The evidence sentence an answer must hold, when a reranker is configured: BM25's best
//! [`RERANKED_SENTENCES`] sentences of the evidence's readable texts (`best_sentence`) in
//! the reranker's order, its first the lead. One rerank request per answer, charged to the
//! task like a retrieval's and made only when its price fits what is left of the budget and
//! it can finish before `limits.deadline_ms`; skipped or failed, grounding ranks by BM25
//! alone, and the generating event says why.
use serde_json::{Value, json};

use crate::research::best_sentence::{RERANKED_SENTENCES, ranked_sentences};
use crate::research::cost::CostReport;
use crate::research::rerank::Reranker;
use crate::research::support::Reading;

/// The lead a reranker chose (`None` when it did not run or had no choice to make), what
/// it cost and its record for the event (`null` when nothing was asked).
pub struct Lead {
    /// The evidence item's index and the sentence.
    pub sentence: Option<(usize, String)>,
    /// The rerank request's price, when it was made.
    pub cost: CostReport,
    /// What happened.
    pub report: Value,
}

impl Lead {
    fn none(report: Value) -> Self {
        Self { sentence: None, cost: CostReport::default(), report }
    }
}

/// What the task may still spend: what is left of its budget (nanodollars) and when its
/// deadline passes (epoch ms), when it has them.
#[derive(Debug, Clone, Copy, Default)]
pub struct Spend {
    /// What is left of the budget.
    pub budget_left: Option<i64>,
    /// The deadline.
    pub deadline: Option<i64>,
}

/// The lead sentence for `question` among the evidence's readable `texts`, as `reranker`
/// orders BM25's best.
pub async fn lead_sentence(reranker: Option<&Reranker>, question: &str, texts: &[String], spend: Spend) -> Lead {
    let Some(reranker) = reranker else { return Lead::none(Value::Null) };
    let readings: Vec<Reading> = texts.iter().map(|text| Reading::new(text)).collect();
    let candidates = ranked_sentences(question, &readings, RERANKED_SENTENCES);
    if candidates.len() < 2 {
        // Nothing to choose between: BM25's choice stands.
        return Lead::none(Value::Null);
    }
    if let Some(reason) = reranker.refusal(spend.budget_left, spend.deadline, entity::now_millis()) {
        return Lead::none(json!({ "outcome": "skipped", "reason": reason }));
    }
    let price = reranker.usd_nanos_per_search();
    let documents: Vec<String> = candidates.iter().map(|(_, sentence)| sentence.clone()).collect();
    match reranker.rerank(question, &documents).await {
        Ok(order) => {
            let first = order.first().and_then(|ranked| candidates.get(ranked.index)).cloned();
            let moved = first.as_ref().is_some_and(|chosen| *chosen != candidates[0]);
            let report = json!({ "outcome": "reranked", "sentences": documents.len(), "changed_lead": moved });
            Lead { sentence: first, cost: CostReport { usd_nanos: price, ..CostReport::default() }, report }
        }
        Err(error) => {
            tracing::warn!(error = %error, "reranking the answer's sentences failed; BM25's choice stands");
            Lead::none(json!({ "outcome": "failed", "error": error.to_string() }))
        }
    }
}
