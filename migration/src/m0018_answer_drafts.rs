//! The answer as it is being written: one draft row per task, which the worker holding the
//! lease rewrites (fenced by that lease) at a bounded rate while a model streams, and which
//! every process's `researchTaskAnswer` subscriptions read. `generation` counts restarts
//! (a cut stream retried, a new attempt): within one generation the text only grows.
//! Completing the task sets the draft to the stored answer in the same transaction. Safe to
//! replay.
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
        let drafts = "research_task_answer_drafts";
        let mut job = ForeignKey::create()
            .name("research_task_answer_drafts_job_fk")
            .from(name(drafts), name("research_task_job_id"))
            .to(name("research_task_jobs"), name("id"))
            .on_delete(ForeignKeyAction::Cascade)
            .to_owned();
        manager
            .create_table(
                Table::create()
                    .table(name(drafts))
                    .if_not_exists()
                    .col(ColumnDef::new(name("research_task_job_id")).uuid().not_null().primary_key())
                    .col(varchar("tenant_id", 255))
                    .col(integer("generation"))
                    .col(text("answer"))
                    .col(integer("char_count"))
                    .col(millis("updated_at"))
                    .check(check(
                        "research_task_answer_drafts_counts_ck",
                        "\"generation\" >= 1 AND \"char_count\" >= 0",
                    ))
                    .foreign_key(&mut job)
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(name("research_task_answer_drafts")).if_exists().to_owned()).await
    }
}
