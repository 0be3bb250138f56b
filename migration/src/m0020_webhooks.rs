//! Webhooks: endpoints a principal registers for its own tasks in a space, one durable
//! delivery per (endpoint, task event) written in the transaction of the event that causes
//! it, and one row per attempt. Deliveries go with their task (and with their endpoint);
//! retention deletes a finished task and so its deliveries; its index of tasks by stage
//! and age lets it find them without reading the unfinished ones. Safe to replay.
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
        manager
            .create_index(index(
                "research_task_jobs_retention_idx",
                "research_task_jobs",
                &["stage", "updated_at", "id"],
                false,
            ))
            .await?;
        let endpoints = "webhook_endpoints";
        manager
            .create_table(
                Table::create()
                    .table(name(endpoints))
                    .if_not_exists()
                    .col(uuid_pk())
                    .col(varchar("tenant_id", 255))
                    .col(uuid("knowledge_space_id"))
                    .col(varchar("subject_id", 255))
                    .col(text("url"))
                    .col(json(backend, "events"))
                    .col(text("secret"))
                    .col(millis_null("disabled_at"))
                    .col(millis("created_at"))
                    .col(millis("updated_at"))
                    .foreign_key(&mut space_fk(endpoints))
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(index(
                "webhook_endpoints_owner_idx",
                endpoints,
                &["tenant_id", "knowledge_space_id", "subject_id"],
                false,
            ))
            .await?;

        let deliveries = "webhook_deliveries";
        let mut endpoint = ForeignKey::create()
            .name("webhook_deliveries_endpoint_fk")
            .from(name(deliveries), name("endpoint_id"))
            .to(name(endpoints), name("id"))
            .on_delete(ForeignKeyAction::Cascade)
            .to_owned();
        let mut task = ForeignKey::create()
            .name("webhook_deliveries_task_fk")
            .from(name(deliveries), name("research_task_job_id"))
            .to(name("research_task_jobs"), name("id"))
            .on_delete(ForeignKeyAction::Cascade)
            .to_owned();
        manager
            .create_table(
                Table::create()
                    .table(name(deliveries))
                    .if_not_exists()
                    .col(uuid_pk())
                    .col(uuid("endpoint_id"))
                    .col(varchar("tenant_id", 255))
                    .col(uuid("research_task_job_id"))
                    .col(varchar("event_type", 64))
                    .col(varchar("stage", 16))
                    .col(integer("sequence"))
                    .col(text("body"))
                    .col(varchar("status", 16))
                    .col(integer("attempts"))
                    .col(millis("next_attempt_at"))
                    .col(ColumnDef::new(name("lock_token")).uuid().null())
                    .col(ColumnDef::new(name("locked_by")).string_len(255).null())
                    .col(millis_null("locked_until"))
                    .col(ColumnDef::new(name("last_status_code")).integer().null())
                    .col(ColumnDef::new(name("last_error")).text().null())
                    .col(millis("created_at"))
                    .col(millis("updated_at"))
                    .col(millis_null("delivered_at"))
                    .check(check(
                        "webhook_deliveries_status_ck",
                        "\"status\" IN ('pending', 'delivered', 'dead') AND \"attempts\" >= 0",
                    ))
                    .foreign_key(&mut endpoint)
                    .foreign_key(&mut task)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(index(
                "webhook_deliveries_event_uq",
                deliveries,
                &["endpoint_id", "research_task_job_id", "sequence"],
                true,
            ))
            .await?;
        manager
            .create_index(index("webhook_deliveries_due_idx", deliveries, &["status", "next_attempt_at", "id"], false))
            .await?;
        manager
            .create_index(index("webhook_deliveries_task_idx", deliveries, &["research_task_job_id"], false))
            .await?;

        let attempts = "webhook_delivery_attempts";
        let mut delivery = ForeignKey::create()
            .name("webhook_delivery_attempts_delivery_fk")
            .from(name(attempts), name("delivery_id"))
            .to(name(deliveries), name("id"))
            .on_delete(ForeignKeyAction::Cascade)
            .to_owned();
        manager
            .create_table(
                Table::create()
                    .table(name(attempts))
                    .if_not_exists()
                    .col(uuid_pk())
                    .col(uuid("delivery_id"))
                    .col(integer("attempt"))
                    .col(ColumnDef::new(name("status_code")).integer().null())
                    .col(ColumnDef::new(name("latency_ms")).big_integer().not_null())
                    .col(ColumnDef::new(name("error")).text().null())
                    .col(millis("attempted_at"))
                    .foreign_key(&mut delivery)
                    .to_owned(),
            )
            .await?;
        manager
            .create_index(index("webhook_delivery_attempts_delivery_idx", attempts, &["delivery_id", "attempt"], false))
            .await
    }

    async fn down(&self, manager: &SchemaManager) -> Result<(), DbErr> {
        for table in ["webhook_delivery_attempts", "webhook_deliveries", "webhook_endpoints"] {
            manager.drop_table(Table::drop().table(name(table)).if_exists().to_owned()).await?;
        }
        Ok(())
    }
}
