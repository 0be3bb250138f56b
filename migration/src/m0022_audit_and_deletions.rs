//! The audit log and pending space deletions.
//!
//! `audit_events` is append-only: one row per security-relevant action (keys created,
//! rotated, revoked; members added, changed, removed; spaces created and deleted; tasks
//! and traces deleted; tenants erased; operator actions), naming who did it (subject,
//! channel, API key, identity provider), from which request, and what; never a secret or
//! task content. A trigger refuses every UPDATE on both backends. Rows are not tied to
//! their space by a foreign key: the record of a space's deletion outlives the space.
//! Retention and `eraseTenant` delete them; nothing else does.
//!
//! `knowledge_space_deletions` marks a space whose deletion has begun: its access was
//! sealed (members removed, keys revoked) in the transaction that wrote the row, and its
//! rows are being deleted in batches; a worker loop finishes what an interrupted request
//! left. Safe to replay.
use sea_orm_migration::prelude::*;

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
        let backend = manager.get_database_backend();
        let events = "audit_events";
        manager
            .create_table(
                Table::create()
                    .table(name(events))
                    .if_not_exists()
                    .col(uuid_pk())
                    .col(varchar("tenant_id", 255))
                    .col(ColumnDef::new(name("knowledge_space_id")).uuid().null())
                    .col(varchar("action", 64))
                    .col(varchar("actor_subject_id", 255))
                    .col(varchar("actor_channel", 32))
                    .col(ColumnDef::new(name("actor_api_key_id")).uuid().null())
                    .col(ColumnDef::new(name("actor_issuer")).string_len(512).null())
                    .col(ColumnDef::new(name("request_id")).string_len(128).null())
                    .col(varchar("target_type", 64))
                    .col(ColumnDef::new(name("target_id")).string_len(255).null())
                    .col(json(backend, "details"))
                    .col(millis("created_at"))
                    .check(check("audit_events_channel_ck", &format!("\"actor_channel\" IN {CHANNELS}")))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(index("audit_events_space_idx", events, &["knowledge_space_id", "created_at", "id"], false))
            .await?;
        manager
            .create_index(index("audit_events_tenant_idx", events, &["tenant_id", "created_at", "id"], false))
            .await?;
        manager.create_index(index("audit_events_created_idx", events, &["created_at", "id"], false)).await?;
        let append_only = match backend {
            sea_orm::DatabaseBackend::Postgres => {
                "CREATE OR REPLACE FUNCTION \"audit_events_append_only\"() RETURNS trigger LANGUAGE plpgsql AS $$ \
                 BEGIN RAISE EXCEPTION 'audit events are append-only'; END; $$;\n\
                 DROP TRIGGER IF EXISTS \"audit_events_no_update\" ON \"audit_events\";\n\
                 CREATE TRIGGER \"audit_events_no_update\" BEFORE UPDATE ON \"audit_events\" \
                 FOR EACH ROW EXECUTE FUNCTION \"audit_events_append_only\"();"
            }
            _ => {
                "CREATE TRIGGER IF NOT EXISTS \"audit_events_no_update\" BEFORE UPDATE ON \"audit_events\"\n\
                 BEGIN SELECT RAISE(ABORT, 'audit events are append-only');\n\
                 END;"
            }
        };
        run_script(manager, append_only).await?;

        let deletions = "knowledge_space_deletions";
        manager
            .create_table(
                Table::create()
                    .table(name(deletions))
                    .if_not_exists()
                    .col(ColumnDef::new(name("knowledge_space_id")).uuid().not_null().primary_key())
                    .col(varchar("tenant_id", 255))
                    .col(varchar("requested_by", 255))
                    .col(millis("requested_at"))
                    .to_owned(),
            )
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        manager.drop_table(Table::drop().table(name("knowledge_space_deletions")).if_exists().to_owned()).await?;
        manager.drop_table(Table::drop().table(name("audit_events")).if_exists().to_owned()).await?;
        if manager.get_database_backend() == sea_orm::DatabaseBackend::Postgres {
            run_script(manager, "DROP FUNCTION IF EXISTS \"audit_events_append_only\"();").await?;
        }
        Ok(())
    }
}
