//! The research wing: what a stage does, apart from the queue machinery that runs it. The
//! [`engine::ResearchEngine`] interface with the built-in engine and the `openai` one, the
//! reranker client, rounds (when another search is worth it), grounding (whether a
//! sentence is supported by the passage it cites, by its words or, with embeddings, its
//! meaning: `meaning`), the answer as it is written and its citations with their quotes, the prompts, and what model calls cost.
//!
//! The wing knows no database: engines reach passages through the [`engine::PassageSearch`]
//! port the pipeline hands them in the stage's context, and give back typed outputs that the
//! pipeline (`crate::pipeline`) turns into stage boundaries.
pub(crate) mod answer;
pub mod best_sentence;
pub mod bm25;
pub mod citations;
pub mod cited;
pub mod cost;
pub mod engine;
pub mod grounding;
pub mod lead;
pub mod meaning;
pub(crate) mod openai;
pub mod ranking;
pub mod readable;
pub mod rerank;
pub mod rounds;
pub mod support;
pub mod thread;
