//! Documents as passages: each document gains its format, source and metadata, a
//! revision, and the state of its embeddings (the backlog the worker loops lease); its
//! passages get a table with a full-text index (GIN over a tsvector on PostgreSQL, FTS5 on
//! SQLite) replacing the whole-document index; embeddings get one vector per passage and
//! model. Documents stored before are split on the next start (their `indexed_revision`
//! is null), so nothing already stored becomes unsearchable. Safe to replay.
use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DatabaseBackend};

use crate::columns::*;
use crate::raw::run_script;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The columns documents gain, as SQLite spells them (PostgreSQL's script has its own).
const SQLITE_DOCUMENT_COLUMNS: &[(&str, &str)] = &[
    (
        "media_type",
        "VARCHAR(32) NOT NULL DEFAULT 'text/plain' CONSTRAINT \"knowledge_documents_media_type_ck\" \
         CHECK (\"media_type\" IN ('text/plain', 'text/markdown', 'text/html'))",
    ),
    ("source_uri", "TEXT"),
    (
        "metadata",
        "TEXT NOT NULL DEFAULT '{}' CONSTRAINT \"knowledge_documents_metadata_ck\" CHECK (json_valid(\"metadata\"))",
    ),
    ("revision", "INTEGER NOT NULL DEFAULT 1"),
    ("indexed_revision", "INTEGER"),
    (
        "indexing_status",
        "VARCHAR(16) NOT NULL DEFAULT 'pending' CONSTRAINT \"knowledge_documents_indexing_ck\" \
         CHECK (\"indexing_status\" IN ('pending', 'ready', 'failed'))",
    ),
    ("indexing_error", "TEXT"),
    ("indexing_attempts", "INTEGER NOT NULL DEFAULT 0"),
    ("indexing_available_at", "BIGINT"),
    ("indexing_lock_token", "uuid_text"),
    ("indexing_locked_by", "VARCHAR(255)"),
    ("indexing_locked_until", "BIGINT"),
    ("updated_by", "VARCHAR(255)"),
];

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        if manager.get_database_backend() == DatabaseBackend::Postgres {
            return run_script(manager, include_str!("sql/0017_knowledge_passages.postgres.sql")).await;
        }
        let documents = "knowledge_documents";
        for (column, definition) in SQLITE_DOCUMENT_COLUMNS {
            if !manager.has_column(documents, column).await? {
                let statement = format!("ALTER TABLE \"{documents}\" ADD COLUMN \"{column}\" {definition}");
                manager.get_connection().execute_unprepared(&statement).await?;
            }
        }
        manager
            .create_index(index(
                "knowledge_documents_scope_id_uq",
                documents,
                &["tenant_id", "knowledge_space_id", "id"],
                true,
            ))
            .await?;
        manager
            .create_index(index(
                "knowledge_documents_indexing_idx",
                documents,
                &["indexing_status", "indexing_available_at", "id"],
                false,
            ))
            .await?;
        create_passages(manager).await?;
        create_embeddings(manager).await?;
        run_script(manager, include_str!("sql/0017_knowledge_passages.sqlite.sql")).await
    }
}

async fn create_passages(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    let backend = manager.get_database_backend();
    let passages = "knowledge_passages";
    let mut document = ForeignKey::create()
        .name("knowledge_passages_document_fk")
        .from(name(passages), (name("tenant_id"), name("knowledge_space_id"), name("document_id")))
        .to(name("knowledge_documents"), (name("tenant_id"), name("knowledge_space_id"), name("id")))
        .on_delete(ForeignKeyAction::Cascade)
        .to_owned();
    manager
        .create_table(
            Table::create()
                .table(name(passages))
                .if_not_exists()
                .col(uuid_pk())
                .col(varchar("tenant_id", 255))
                .col(uuid("knowledge_space_id"))
                .col(uuid("document_id"))
                .col(integer("document_revision"))
                .col(integer("ordinal"))
                .col(integer("char_start"))
                .col(integer("char_end"))
                .col(json(backend, "heading_path"))
                .col(text("context"))
                .col(text("text"))
                .col(integer("token_count"))
                .col(millis("created_at"))
                .check(check(
                    "knowledge_passages_range_ck",
                    "\"ordinal\" >= 0 AND \"char_start\" >= 0 AND \"char_end\" >= \"char_start\" \
                     AND \"token_count\" >= 0 AND \"document_revision\" >= 1",
                ))
                .foreign_key(&mut document)
                .to_owned(),
        )
        .await?;
    manager
        .create_index(index("knowledge_passages_document_ordinal_uq", passages, &["document_id", "ordinal"], true))
        .await?;
    manager
        .create_index(index("knowledge_passages_space_idx", passages, &["tenant_id", "knowledge_space_id"], false))
        .await?;
    manager
        .create_index(index(
            "knowledge_passages_scope_id_uq",
            passages,
            &["tenant_id", "knowledge_space_id", "id"],
            true,
        ))
        .await
}

async fn create_embeddings(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    let embeddings = "knowledge_passage_embeddings";
    let mut passage = ForeignKey::create()
        .name("knowledge_passage_embeddings_passage_fk")
        .from(name(embeddings), (name("tenant_id"), name("knowledge_space_id"), name("passage_id")))
        .to(name("knowledge_passages"), (name("tenant_id"), name("knowledge_space_id"), name("id")))
        .on_delete(ForeignKeyAction::Cascade)
        .to_owned();
    manager
        .create_table(
            Table::create()
                .table(name(embeddings))
                .if_not_exists()
                .col(ColumnDef::new(name("passage_id")).uuid().not_null().primary_key())
                .col(varchar("tenant_id", 255))
                .col(uuid("knowledge_space_id"))
                .col(varchar("model", 255))
                .col(integer("dimensions"))
                .col(ColumnDef::new(name("vector")).blob().not_null())
                .col(millis("created_at"))
                .check(check(
                    "knowledge_passage_embeddings_vector_ck",
                    "\"dimensions\" >= 1 AND length(\"vector\") = 4 * \"dimensions\"",
                ))
                .foreign_key(&mut passage)
                .to_owned(),
        )
        .await?;
    manager
        .create_index(index(
            "knowledge_passage_embeddings_space_model_idx",
            embeddings,
            &["knowledge_space_id", "model"],
            false,
        ))
        .await
}
