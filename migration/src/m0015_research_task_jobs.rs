//! The user's seed: research task jobs, their outbox, partial results and progress events,
//! and the grant bindings on permission snapshots and answer traces.
//!
//! On PostgreSQL this runs the seed's SQL verbatim (`sql/0015_research_task_jobs.postgres.sql`,
//! a copy of the user's file without its path header): the requirement is an exact
//! reproduction, and the seed is already written to be replayed. On SQLite it runs an
//! equivalent script, rebuilding the two altered tables once.
use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DatabaseBackend;

use crate::raw::run_script;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() == DatabaseBackend::Postgres {
            return run_script(manager, include_str!("sql/0015_research_task_jobs.postgres.sql")).await;
        }
        let api_key_scope = "CREATE UNIQUE INDEX IF NOT EXISTS \"knowledge_space_api_keys_scope_id_uq\" \
             ON \"knowledge_space_api_keys\" (\"tenant_id\", \"knowledge_space_id\", \"id\");";
        run_script(manager, api_key_scope).await?;
        if !manager.has_column("knowledge_space_permission_snapshots", "api_key_id").await? {
            run_script(manager, include_str!("sql/0015_rebuild_grants.sqlite.sql")).await?;
        }
        run_script(manager, include_str!("sql/0015_research_task_jobs.sqlite.sql")).await
    }
}
