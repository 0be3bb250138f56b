//! Steering notes: guidance a person adds to a queued, running or paused task
//! (`steerResearchTask`), which the next round's decision and the answer take into
//! account. A table of its own rather than a column on `research_task_jobs`, whose shape
//! is the user's seed; removed with its task. Safe to replay.
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
        let notes = "research_task_notes";
        let mut job = ForeignKey::create()
            .name("research_task_notes_job_fk")
            .from(name(notes), name("research_task_job_id"))
            .to(name("research_task_jobs"), name("id"))
            .on_delete(ForeignKeyAction::Cascade)
            .to_owned();
        manager
            .create_table(
                Table::create()
                    .table(name(notes))
                    .if_not_exists()
                    .col(uuid_pk())
                    .col(uuid("research_task_job_id"))
                    .col(text("text"))
                    .col(millis("created_at"))
                    .foreign_key(&mut job)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(index("research_task_notes_job_idx", notes, &["research_task_job_id", "created_at"], false))
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(name("research_task_notes")).if_exists().to_owned()).await
    }
}
