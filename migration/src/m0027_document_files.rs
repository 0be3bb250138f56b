//! Uploaded files: a document made from a PDF or Word file keeps the file's bytes in
//! tables of ours (the api that receives it and the worker that extracts it may run on
//! different machines), in parts of at most a mebibyte so neither side ever builds the
//! file in one statement, until the document is removed (both tables cascade from the
//! document). The file row also carries the extraction's state, lease and error, apart
//! from the document's indexing columns, whose CHECK constraints stay as they are. Passages
//! of a PDF learn the pages they come from. Safe to replay.
use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::{ConnectionTrait, DatabaseBackend};

use crate::columns::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

/// The media types an uploaded file may be stored as (detected from its bytes).
const FILE_MEDIA_TYPES: &str = "'application/pdf', \
     'application/vnd.openxmlformats-officedocument.wordprocessingml.document'";

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        create_files(manager).await?;
        create_parts(manager).await?;
        add_page_columns(manager).await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in ["knowledge_document_file_parts", "knowledge_document_files"] {
            manager.drop_table(Table::drop().table(name(table)).if_exists().to_owned()).await?;
        }
        Ok(())
    }
}

async fn create_files(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    let files = "knowledge_document_files";
    let mut document = ForeignKey::create()
        .name("knowledge_document_files_document_fk")
        .from(name(files), name("document_id"))
        .to(name("knowledge_documents"), name("id"))
        .on_delete(ForeignKeyAction::Cascade)
        .to_owned();
    manager
        .create_table(
            Table::create()
                .table(name(files))
                .if_not_exists()
                .col(ColumnDef::new(name("document_id")).uuid().not_null().primary_key())
                .col(varchar("tenant_id", 255))
                .col(uuid("knowledge_space_id"))
                .col(varchar("file_name", 512))
                .col(varchar("media_type", 128))
                .col(ColumnDef::new(name("byte_size")).big_integer().not_null())
                .col(integer("document_revision"))
                .col(varchar("state", 16))
                .col(ColumnDef::new(name("error")).text().null())
                .col(ColumnDef::new(name("attempts")).integer().not_null().default(0))
                .col(millis_null("available_at"))
                .col(ColumnDef::new(name("lock_token")).uuid().null())
                .col(millis_null("locked_until"))
                .col(ColumnDef::new(name("page_count")).integer().null())
                .col(millis("created_at"))
                .col(millis("updated_at"))
                .check(check(
                    "knowledge_document_files_media_type_ck",
                    &format!("\"media_type\" IN ({FILE_MEDIA_TYPES})"),
                ))
                .check(check(
                    "knowledge_document_files_state_ck",
                    "\"state\" IN ('extracting', 'splitting', 'done', 'failed')",
                ))
                .check(check("knowledge_document_files_size_ck", "\"byte_size\" >= 0"))
                .foreign_key(&mut document)
                .to_owned(),
        )
        .await?;
    // The extraction loop leases the file that has waited longest among those due.
    manager.create_index(index("knowledge_document_files_due_idx", files, &["state", "available_at"], false)).await?;
    // The upload quota sums a tenant's stored bytes.
    manager.create_index(index("knowledge_document_files_tenant_idx", files, &["tenant_id"], false)).await
}

async fn create_parts(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    let parts = "knowledge_document_file_parts";
    let mut file = ForeignKey::create()
        .name("knowledge_document_file_parts_file_fk")
        .from(name(parts), name("document_id"))
        .to(name("knowledge_document_files"), name("document_id"))
        .on_delete(ForeignKeyAction::Cascade)
        .to_owned();
    manager
        .create_table(
            Table::create()
                .table(name(parts))
                .if_not_exists()
                .col(uuid("document_id"))
                .col(integer("part"))
                .col(ColumnDef::new(name("bytes")).blob().not_null())
                .primary_key(Index::create().col(name("document_id")).col(name("part")))
                .foreign_key(&mut file)
                .to_owned(),
        )
        .await
        .map(|_| ())
}

/// `knowledge_passages.page_start` / `page_end`: the 1-based, inclusive pages of a PDF a
/// passage comes from; null for every other format.
async fn add_page_columns(manager: &SchemaManager<'_>) -> Result<(), DbErr> {
    let passages = "knowledge_passages";
    for column in ["page_start", "page_end"] {
        let statement = match manager.get_database_backend() {
            DatabaseBackend::Postgres => {
                format!("ALTER TABLE \"{passages}\" ADD COLUMN IF NOT EXISTS \"{column}\" INTEGER")
            }
            _ if manager.has_column(passages, column).await? => continue,
            _ => format!("ALTER TABLE \"{passages}\" ADD COLUMN \"{column}\" INTEGER"),
        };
        manager.get_connection().execute_unprepared(&statement).await?;
    }
    Ok(())
}
