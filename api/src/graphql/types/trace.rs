//! `AnswerTrace`: a final answer with the evidence it cites.
use async_graphql::{Context, Json, Object};
use chrono::{DateTime, Utc};
use entity::answer_trace as trace;
use serde_json::Value;
use uuid::Uuid;

use super::citation::Citation;
use super::datetime;
use crate::error::{ApiError, IntoGql as _};
use crate::graphql::context::state;
use crate::graphql::enums::GqlChannel;
use crate::graphql::loaders::{ChecksOfTrace, RequestLoaders, loaded};

/// An answer and its evidence, visible only to the subject that asked.
pub struct AnswerTrace(pub trace::Model);

/// An answer and its evidence, visible only to the subject that asked.
#[Object]
impl AnswerTrace {
    async fn id(&self) -> Uuid {
        self.0.id
    }
    async fn knowledge_space_id(&self) -> Uuid {
        self.0.knowledge_space_id
    }
    /// The research task that wrote it, if one did.
    async fn research_task_id(&self) -> Option<Uuid> {
        self.0.research_task_id
    }
    async fn query(&self) -> &str {
        &self.0.query
    }
    /// The extractive answer with numbered citations.
    async fn answer(&self) -> &str {
        &self.0.answer
    }
    /// The final answer's citations, one per citation mark, in the answer's order: the
    /// sentence as it stands, the verdict that kept the citation, the evidence item it
    /// names and the quote (the passage's words that support the sentence, located in
    /// the document). What the check removed is only in `citationChecks`. Answers from
    /// before citation checks list their marks with no verdict and no quote.
    async fn citations(&self, ctx: &Context<'_>) -> async_graphql::Result<Vec<Citation>> {
        let run = async {
            let recorded = match ctx.data_opt::<RequestLoaders>() {
                Some(loaders) => {
                    let row = loaders.load_one(ChecksOfTrace(self.0.id)).await.map_err(loaded)?;
                    worker::research::citations::of_trace(&self.0.answer, row.and_then(|row| row.citations).as_ref())
                }
                None => worker::app::tasks::citations(&state(ctx)?.app, &self.0).await?,
            };
            let citations = recorded.into_iter().map(|record| Citation::of(record, &self.0.evidence)).collect();
            Ok::<_, ApiError>(citations)
        };
        run.await.gql()
    }
    /// Kept for compatibility; `citations` has the same items typed. The cited evidence,
    /// in citation order: a JSON array of items `{ citation,
    /// document_id, title, snippet, score, passage_id, text, char_start, char_end,
    /// heading_path, rankers }`. `char_start`/`char_end` index the document's content in
    /// Unicode code points, half-open (for HTML, the markup of the block); `text` (and
    /// `snippet`, the same) is the passage as it was used, kept even after the document
    /// changes; `rankers` lists `{ ranker: "full_text" | "vector" | "rerank", rank, score }`
    /// (`rerank`: the reranking endpoint's order of the fused candidates, when one is
    /// configured and answered). `score` is the full-text score, the fused reciprocal-rank
    /// score when vectors took part, or the reranker's relevance score when it reranked.
    /// `question_score` is analysis's score against the question (the retrieval's order
    /// fused with BM25 against the question), absent from traces before it. Traces from
    /// before passages lack the passage keys.
    async fn evidence(&self) -> Json<Value> {
        Json(self.0.evidence.clone())
    }
    /// Kept for compatibility (`citations` has the final answer's citations typed). Every
    /// verdict of the answer's citation check, in the order its sentences were
    /// checked: a JSON array of `{ sentence, citation, written_citation, verdict }`.
    /// `sentence` is the sentence as the model wrote it (its citations as written);
    /// `citation` is the number it now cites (for `removed_citation`, the number as
    /// written; null where no citation is concerned); `written_citation` is the number the
    /// model wrote (null where it wrote none: `attributed`, `added_from_evidence`,
    /// `removed_sentence`, `extractive_fallback`); `verdict` is `supported` (the cited
    /// evidence supports the sentence by the support check: its numbers, versions,
    /// identifiers and quoted strings are in the passage, at least half of its stemmed
    /// content words too, and it denies what the passage denies), `moved` (the citation
    /// now names the evidence that does), `removed_citation` (it named evidence that does
    /// not exist, or that does not support the sentence while none does),
    /// `removed_sentence` (nothing supports it, or it only repeated, held citation marks,
    /// markup, or a title or heading of the evidence), `attributed` (it had no citation and
    /// now cites its best support), `added_from_evidence` (the evidence sentence that best
    /// answers the question, which the answer did not state, now leads it) or
    /// `extractive_fallback` (nothing supported remained; the answer is the extractive one
    /// over the same evidence). `[]` for answers from before checks.
    async fn citation_checks(&self, ctx: &Context<'_>) -> async_graphql::Result<Json<Value>> {
        let run = async {
            let checks = match ctx.data_opt::<RequestLoaders>() {
                Some(loaders) => {
                    loaders.load_one(ChecksOfTrace(self.0.id)).await.map_err(loaded)?.map(|row| row.checks)
                }
                None => worker::app::tasks::citation_checks(&state(ctx)?.app, &self.0).await?,
            };
            Ok::<_, ApiError>(Json(checks.unwrap_or_else(|| Value::Array(Vec::new()))))
        };
        run.await.gql()
    }
    /// The channel of the grant the answer was produced under.
    async fn access_channel(&self) -> Option<GqlChannel> {
        self.0.access_channel.map(Into::into)
    }
    async fn created_at(&self) -> DateTime<Utc> {
        datetime(self.0.created_at)
    }
}
