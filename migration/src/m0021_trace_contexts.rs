//! The trace a task belongs to: the W3C trace context (`traceparent`, `tracestate`) of the
//! request that created it, so the worker's spans for the task join that request's trace
//! in any process. A table of its own rather than columns on `research_task_jobs`, whose
//! shape is the user's seed; one row per task, removed with it. Safe to replay.
use sea_orm_migration::prelude::*;

use crate::columns::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let contexts = "research_task_trace_contexts";
        let mut job = ForeignKey::create()
            .name("research_task_trace_contexts_job_fk")
            .from(name(contexts), name("research_task_job_id"))
            .to(name("research_task_jobs"), name("id"))
            .on_delete(ForeignKeyAction::Cascade)
            .to_owned();
        manager
            .create_table(
                Table::create()
                    .table(name(contexts))
                    .if_not_exists()
                    .col(ColumnDef::new(name("research_task_job_id")).uuid().not_null().primary_key())
                    // `traceparent` is 55 characters in version 00; later versions may append.
                    .col(varchar("traceparent", 128))
                    // The spec bounds `tracestate` at 32 members of at most 256 characters.
                    .col(ColumnDef::new(name("tracestate")).string_len(512).null())
                    .col(millis("created_at"))
                    .foreign_key(&mut job)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(name("research_task_trace_contexts")).if_exists().to_owned()).await
    }
}
