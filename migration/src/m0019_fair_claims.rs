//! What fair claiming reads: the unfinished tasks of each tenant and space in age order,
//! without the finished ones (which are most rows). The claim walks the (tenant, space)
//! pairs with unfinished work through this index, one probe per pair, and takes each
//! pair's oldest due task from it, so a claim costs the number of active spaces, not the
//! size of the backlog. A partial index on both backends; safe to replay.
use sea_orm_migration::prelude::*;

use crate::raw::run_script;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The stages of unfinished tasks; claims name exactly this list so both planners use
/// the partial index.
pub const UNFINISHED: &str = "'queued', 'planning', 'retrieving', 'analyzing', 'generating', 'paused'";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        let script = format!(
            "CREATE INDEX IF NOT EXISTS \"research_task_jobs_unfinished_idx\" ON \"research_task_jobs\" \
             (\"tenant_id\", \"knowledge_space_id\", \"updated_at\", \"id\") WHERE \"stage\" IN ({UNFINISHED});"
        );
        run_script(manager, &script).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        run_script(manager, "DROP INDEX IF EXISTS \"research_task_jobs_unfinished_idx\";").await
    }
}
