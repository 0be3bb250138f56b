//! Knowledge spaces and their members.
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
        manager
            .create_table(
                Table::create()
                    .table(name("knowledge_spaces"))
                    .if_not_exists()
                    .col(uuid_pk())
                    .col(varchar("tenant_id", 255))
                    .col(varchar("name", 255))
                    .col(millis("created_at"))
                    .col(millis("updated_at"))
                    .to_owned(),
            )
            .await?;
        // Every scoped table references (tenant_id, id), so a row can never point at a space
        // of another tenant.
        let tenant_id = index("knowledge_spaces_tenant_id_uq", "knowledge_spaces", &["tenant_id", "id"], true);
        manager.create_index(tenant_id).await?;

        let members = "knowledge_space_members";
        manager
            .create_table(
                Table::create()
                    .table(name(members))
                    .if_not_exists()
                    .col(uuid_pk())
                    .col(varchar("tenant_id", 255))
                    .col(uuid("knowledge_space_id"))
                    .col(varchar("subject_id", 255))
                    .col(varchar("role", 16))
                    .col(integer("revision"))
                    .col(millis_null("removed_at"))
                    .col(millis("created_at"))
                    .col(millis("updated_at"))
                    .check(check("knowledge_space_members_role_ck", "\"role\" IN ('owner', 'editor', 'viewer')"))
                    .check(check("knowledge_space_members_revision_ck", "\"revision\" >= 1"))
                    .foreign_key(&mut space_fk(members))
                    .to_owned(),
            )
            .await?;
        let subject = index(
            "knowledge_space_members_scope_subject_uq",
            members,
            &["tenant_id", "knowledge_space_id", "subject_id"],
            true,
        );
        manager.create_index(subject).await?;
        let by_subject = index("knowledge_space_members_subject_idx", members, &["tenant_id", "subject_id"], false);
        manager.create_index(by_subject).await
    }
}
