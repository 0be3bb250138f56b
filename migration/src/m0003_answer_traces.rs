//! Answer traces, before the seed binds them to a subject and a grant.
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
        let traces = "answer_traces";
        manager
            .create_table(
                Table::create()
                    .table(name(traces))
                    .if_not_exists()
                    .col(uuid_pk())
                    .col(varchar("tenant_id", 255))
                    .col(uuid("knowledge_space_id"))
                    .col(text("query"))
                    .col(text("answer"))
                    .col(json(backend, "evidence"))
                    .col(millis("created_at"))
                    .foreign_key(&mut space_fk(traces))
                    .to_owned(),
            )
            .await
    }
}
