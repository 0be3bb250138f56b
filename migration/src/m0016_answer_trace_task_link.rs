//! Links an answer trace to the research task that wrote it.
use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

use crate::columns::*;
use crate::raw::run_script;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if !manager.has_column("answer_traces", "research_task_id").await? {
            // SQLite may add a column with a REFERENCES clause (it cannot add a table
            // constraint); PostgreSQL gets the same foreign key, named.
            let script = match manager.get_database_backend() {
                DatabaseBackend::Postgres => {
                    "ALTER TABLE \"answer_traces\" ADD COLUMN \"research_task_id\" UUID \
                     CONSTRAINT \"answer_traces_research_task_fk\" REFERENCES \"research_task_jobs\" (\"id\") ON DELETE SET NULL;"
                }
                _ => {
                    "ALTER TABLE \"answer_traces\" ADD COLUMN \"research_task_id\" uuid_text \
                     CONSTRAINT \"answer_traces_research_task_fk\" REFERENCES \"research_task_jobs\" (\"id\") ON DELETE SET NULL;"
                }
            };
            run_script(manager, script).await?;
        }
        let by_task = index("answer_traces_research_task_idx", "answer_traces", &["research_task_id"], false);
        manager.create_index(by_task).await
    }
}
