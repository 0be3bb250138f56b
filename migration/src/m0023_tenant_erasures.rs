//! `tenant_erasures`: tenants whose erasure has begun and not finished. The row is the
//! seal: written under an exclusive per-tenant lock in the transaction that also seals
//! each of the tenant's spaces, it makes every later request that would create something
//! for the tenant (a space, member, key, document, task or webhook endpoint) answer
//! CONFLICT, until the erasure completes and deletes the row. A worker loop finishes an
//! erasure an interrupted request left. Safe to replay.
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
                    .table(name("tenant_erasures"))
                    .if_not_exists()
                    .col(ColumnDef::new(name("tenant_id")).string_len(255).not_null().primary_key())
                    .col(varchar("requested_by", 255))
                    .col(millis("requested_at"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(name("tenant_erasures")).if_exists().to_owned()).await
    }
}
