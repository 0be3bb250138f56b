//! `research_task_trace_contexts`: the W3C trace context of the request that created a
//! task, so the worker's spans for it join that request's trace.
use sea_orm::entity::prelude::*;

/// One task's trace context.
#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "research_task_trace_contexts")]
pub struct Model {
    /// The task.
    #[sea_orm(primary_key, auto_increment = false)]
    pub research_task_job_id: Uuid,
    /// The `traceparent` header value of the creating span.
    pub traceparent: String,
    /// The `tracestate` header value, when there was one.
    pub tracestate: Option<String>,
    /// Epoch milliseconds.
    pub created_at: i64,
}

/// No relations are navigated through SeaORM; queries join explicitly.
#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
