//! Webhook endpoints and webhook deliveries (`webhook_endpoints`, `webhook_deliveries`,
//! `webhook_delivery_attempts`) as the lifecycle and the webhook loop use them. (An outbox
//! entry is something else: see `outbox`.)
use entity::{webhook_delivery as delivery, webhook_endpoint as endpoint};
use sea_orm::sea_query::OnConflict;
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, PaginatorTrait as _, QueryFilter};

/// Whose endpoints: a task's creator in its tenant and space.
#[derive(Debug, Clone, Copy)]
pub struct Owner<'a> {
    /// The tenant.
    pub tenant_id: &'a str,
    /// The space.
    pub knowledge_space_id: uuid::Uuid,
    /// The subject that created the task.
    pub subject_id: &'a str,
}

/// The owner's enabled endpoints.
pub async fn enabled_endpoints<C: ConnectionTrait>(conn: &C, owner: Owner<'_>) -> Result<Vec<endpoint::Model>, DbErr> {
    endpoint::Entity::find()
        .filter(endpoint::Column::TenantId.eq(owner.tenant_id))
        .filter(endpoint::Column::KnowledgeSpaceId.eq(owner.knowledge_space_id))
        .filter(endpoint::Column::SubjectId.eq(owner.subject_id))
        .filter(endpoint::Column::DisabledAt.is_null())
        .all(conn)
        .await
}

/// Whether the owner has any enabled endpoint (so the common event nobody subscribed to
/// costs no lookup of endpoints).
pub async fn has_endpoint<C: ConnectionTrait>(conn: &C, owner: Owner<'_>) -> Result<bool, DbErr> {
    let count = endpoint::Entity::find()
        .filter(endpoint::Column::TenantId.eq(owner.tenant_id))
        .filter(endpoint::Column::KnowledgeSpaceId.eq(owner.knowledge_space_id))
        .filter(endpoint::Column::SubjectId.eq(owner.subject_id))
        .filter(endpoint::Column::DisabledAt.is_null())
        .count(conn)
        .await?;
    Ok(count > 0)
}

/// Writes webhook deliveries (decided by the caller), each idempotent on (endpoint,
/// task, sequence): an event replayed writes none twice.
pub async fn insert_deliveries<C: ConnectionTrait>(txn: &C, rows: Vec<delivery::Model>) -> Result<(), DbErr> {
    use sea_orm::{ActiveModelTrait as _, IntoActiveModel as _};
    if rows.is_empty() {
        return Ok(());
    }
    let on_conflict = OnConflict::columns([
        delivery::Column::EndpointId,
        delivery::Column::ResearchTaskJobId,
        delivery::Column::Sequence,
    ])
    .do_nothing()
    .to_owned();
    let rows = rows.into_iter().map(|row| row.into_active_model().reset_all());
    delivery::Entity::insert_many(rows).on_conflict(on_conflict).exec_without_returning(txn).await?;
    Ok(())
}
