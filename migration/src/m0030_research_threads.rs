//! Research threads: a conversation of research tasks, one subject's in one space
//! (`research_threads`), and which task is which turn of which thread
//! (`research_thread_turns`, one row per turn, keyed by its task). Tables of ours: the
//! seed's `research_task_jobs` gains no column. A thread goes with its space (and so with
//! its tenant's erasure); a turn row goes with its task or its thread. Safe to replay.
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
        let threads = "research_threads";
        manager
            .create_table(
                Table::create()
                    .table(name(threads))
                    .if_not_exists()
                    .col(uuid_pk())
                    .col(text("tenant_id"))
                    .col(uuid("knowledge_space_id"))
                    .col(text("subject_id"))
                    .col(ColumnDef::new(name("title")).text().null())
                    .col(json(backend, "metadata"))
                    .col(millis("created_at"))
                    .col(millis("updated_at"))
                    .foreign_key(&mut space_fk(threads))
                    .to_owned(),
            )
            .await?;
        // `researchThreads`: one subject's threads in a space, most recently updated first.
        let scope = ["tenant_id", "knowledge_space_id", "subject_id", "updated_at", "id"];
        manager.create_index(index("research_threads_scope_updated_idx", threads, &scope, false)).await?;

        let turns = "research_thread_turns";
        let mut task = ForeignKey::create()
            .name("research_thread_turns_job_fk")
            .from(name(turns), name("research_task_job_id"))
            .to(name("research_task_jobs"), name("id"))
            .on_delete(ForeignKeyAction::Cascade)
            .to_owned();
        let mut thread = ForeignKey::create()
            .name("research_thread_turns_thread_fk")
            .from(name(turns), name("research_thread_id"))
            .to(name(threads), name("id"))
            .on_delete(ForeignKeyAction::Cascade)
            .to_owned();
        manager
            .create_table(
                Table::create()
                    .table(name(turns))
                    .if_not_exists()
                    .col(ColumnDef::new(name("research_task_job_id")).uuid().not_null().primary_key())
                    .col(uuid("research_thread_id"))
                    .col(millis("created_at"))
                    .foreign_key(&mut task)
                    .foreign_key(&mut thread)
                    .to_owned(),
            )
            .await?;
        // A thread's turns, oldest first.
        let order = ["research_thread_id", "created_at", "research_task_job_id"];
        manager.create_index(index("research_thread_turns_thread_idx", turns, &order, false)).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(name("research_thread_turns")).if_exists().to_owned()).await?;
        manager.drop_table(Table::drop().table(name("research_threads")).if_exists().to_owned()).await
    }
}
