//! `AnswerTrace`: a final answer with the evidence it cites.
use async_graphql::{Json, Object};
use chrono::{DateTime, Utc};
use entity::answer_trace as trace;
use serde_json::Value;
use uuid::Uuid;

use super::datetime;
use crate::graphql::enums::GqlChannel;

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
    /// The cited evidence, in citation order: a JSON array of items `{ citation,
    /// document_id, title, snippet, score, passage_id, text, char_start, char_end,
    /// heading_path, rankers }`. `char_start`/`char_end` index the document's content in
    /// Unicode code points, half-open (for HTML, the markup of the block); `text` (and
    /// `snippet`, the same) is the passage as it was used, kept even after the document
    /// changes; `rankers` lists `{ ranker: "full_text" | "vector" | "rerank", rank, score }`
    /// (`rerank`: the reranking endpoint's order of the fused candidates, when one is
    /// configured and answered). `score` is the full-text score, the fused reciprocal-rank
    /// score when vectors took part, or the reranker's relevance score when it reranked.
    /// Traces from before passages lack the passage keys.
    async fn evidence(&self) -> Json<Value> {
        Json(self.0.evidence.clone())
    }
    /// The channel of the grant the answer was produced under.
    async fn access_channel(&self) -> Option<GqlChannel> {
        self.0.access_channel.map(Into::into)
    }
    async fn created_at(&self) -> DateTime<Utc> {
        datetime(self.0.created_at)
    }
}
