//! `answer_trace_citation_checks`: the verdicts grounding reached on an answer's sentences,
//! one row per answer trace, written with it.
use sea_orm::entity::prelude::*;

/// One answer trace's citation checks.
#[derive(Clone, Debug, PartialEq, DeriveEntityModel)]
#[sea_orm(table_name = "answer_trace_citation_checks")]
pub struct Model {
    /// The answer trace.
    #[sea_orm(primary_key, auto_increment = false)]
    pub answer_trace_id: Uuid,
    /// `[{sentence, citation, verdict}]`, in the order the answer's sentences were checked.
    pub checks: Json,
    /// The final answer's citations with their quotes: `[{n, sentence, verdict, quote}]`,
    /// one per citation mark; null for answers from before quotes.
    pub citations: Option<Json>,
    /// Epoch milliseconds.
    pub created_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
