//! Knowledge documents and their full-text index: a GIN index over a tsvector on
//! PostgreSQL, an FTS5 table kept in step by triggers on SQLite.
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
        let documents = "knowledge_documents";
        manager
            .create_table(
                Table::create()
                    .table(name(documents))
                    .if_not_exists()
                    .col(uuid_pk())
                    .col(varchar("tenant_id", 255))
                    .col(uuid("knowledge_space_id"))
                    .col(varchar("title", 512))
                    .col(text("content"))
                    .col(varchar("created_by", 255))
                    .col(millis("created_at"))
                    .col(millis("updated_at"))
                    .foreign_key(&mut space_fk(documents))
                    .to_owned(),
            )
            .await?;
        let by_space = index(
            "knowledge_documents_space_idx",
            documents,
            &["tenant_id", "knowledge_space_id", "created_at", "id"],
            false,
        );
        manager.create_index(by_space).await?;
        let script = match manager.get_database_backend() {
            DatabaseBackend::Postgres => include_str!("sql/0004_document_search.postgres.sql"),
            _ => include_str!("sql/0004_document_search.sqlite.sql"),
        };
        run_script(manager, script).await
    }
}
