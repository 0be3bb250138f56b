//! Input waits: a task that pauses for a person (plan approval after planning, a
//! clarifying question before it) records what it waits for here, and how the wait ended.
//! A table of its own rather than columns on `research_task_jobs`, whose shape is the
//! user's seed: the job row keeps only what the seed gives a pause (`paused`,
//! `paused_from_stage`, `resume_after` as the wait's end). At most one wait of each kind
//! per task; removed with its task. Safe to replay.
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
        let backend = manager.get_database_backend();
        let waits = "research_task_waits";
        let mut job = ForeignKey::create()
            .name("research_task_waits_job_fk")
            .from(name(waits), name("research_task_job_id"))
            .to(name("research_task_jobs"), name("id"))
            .on_delete(ForeignKeyAction::Cascade)
            .to_owned();
        let mut proposed_plan = json(backend, "proposed_plan");
        proposed_plan.null();
        let mut approved_plan = json(backend, "approved_plan");
        approved_plan.null();
        manager
            .create_table(
                Table::create()
                    .table(name(waits))
                    .if_not_exists()
                    .col(uuid_pk())
                    .col(uuid("research_task_job_id"))
                    .col(varchar("reason", 32))
                    .col(proposed_plan)
                    .col(ColumnDef::new(name("question")).text().null())
                    .col(millis("since"))
                    .col(millis("until"))
                    .col(millis_null("resolved_at"))
                    .col(ColumnDef::new(name("resolution")).string_len(16).null())
                    .col(approved_plan)
                    .col(ColumnDef::new(name("answer")).text().null())
                    .check(check("research_task_waits_reason_ck", "\"reason\" IN ('plan_approval', 'clarification')"))
                    .check(check(
                        "research_task_waits_resolution_ck",
                        "(\"resolution\" IS NULL AND \"resolved_at\" IS NULL) OR (\"resolution\" IN \
                         ('approved', 'answered', 'resumed', 'timed_out', 'canceled') AND \"resolved_at\" IS NOT NULL)",
                    ))
                    .foreign_key(&mut job)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(index("research_task_waits_job_reason_uq", waits, &["research_task_job_id", "reason"], true))
            .await?;
        // The operations page counts the open waits (resolved_at IS NULL) by reason.
        manager.create_index(index("research_task_waits_open_idx", waits, &["resolved_at", "reason"], false)).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(name("research_task_waits")).if_exists().to_owned()).await
    }
}
