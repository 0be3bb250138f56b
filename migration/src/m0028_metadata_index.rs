//! Metadata filters (`limits.filters.metadata`) read documents by JSON containment on
//! PostgreSQL; a GIN index over `knowledge_documents.metadata` (`jsonb_path_ops`, which
//! answers exactly `@>`) lets them skip the space's other documents. SQLite has no such
//! index: its filter reads the space's documents (see `store::filtered`). Safe to replay.
use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DatabaseBackend};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DatabaseBackend::Postgres {
            return Ok(());
        }
        let statement = r#"CREATE INDEX IF NOT EXISTS "knowledge_documents_metadata_idx" ON "knowledge_documents" USING GIN ("metadata" jsonb_path_ops)"#;
        manager.get_connection().execute_unprepared(statement).await.map(|_| ())
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() != DatabaseBackend::Postgres {
            return Ok(());
        }
        let statement = r#"DROP INDEX IF EXISTS "knowledge_documents_metadata_idx""#;
        manager.get_connection().execute_unprepared(statement).await.map(|_| ())
    }
}
