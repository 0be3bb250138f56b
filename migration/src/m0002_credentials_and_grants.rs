//! API keys and permission snapshots (the seed adds the key binding to snapshots later).
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
        let keys = "knowledge_space_api_keys";
        manager
            .create_table(
                Table::create()
                    .table(name(keys))
                    .if_not_exists()
                    .col(uuid_pk())
                    .col(varchar("tenant_id", 255))
                    .col(uuid("knowledge_space_id"))
                    .col(varchar("name", 255))
                    .col(varchar("secret_hash", 64))
                    .col(integer("revision"))
                    .col(millis_null("expires_at"))
                    .col(millis_null("revoked_at"))
                    .col(varchar("created_by", 255))
                    .col(millis("created_at"))
                    .col(millis("updated_at"))
                    .check(check("knowledge_space_api_keys_revision_ck", "\"revision\" >= 1"))
                    .foreign_key(&mut space_fk(keys))
                    .to_owned(),
            )
            .await?;
        let by_space = index(
            "knowledge_space_api_keys_space_idx",
            keys,
            &["tenant_id", "knowledge_space_id", "created_at"],
            false,
        );
        manager.create_index(by_space).await?;

        let snapshots = "knowledge_space_permission_snapshots";
        manager
            .create_table(
                Table::create()
                    .table(name(snapshots))
                    .if_not_exists()
                    .col(uuid_pk())
                    .col(varchar("tenant_id", 255))
                    .col(uuid("knowledge_space_id"))
                    .col(varchar("subject_id", 255))
                    .col(varchar("access_channel", 16))
                    .col(integer("revision"))
                    .col(json(backend, "permissions"))
                    .col(millis("issued_at"))
                    .check(check(
                        "knowledge_space_permission_snapshots_channel_ck",
                        &format!("\"access_channel\" IN {CHANNELS}"),
                    ))
                    .check(check("knowledge_space_permission_snapshots_revision_ck", "\"revision\" >= 1"))
                    .foreign_key(&mut space_fk(snapshots))
                    .to_owned(),
            )
            .await
    }
}
