//! The audit log (`audit_events`): rows appended in the transaction of the action they
//! record, read newest first, and deleted only with their tenant.
use entity::audit_event as event;
use sea_orm::{ColumnTrait, ConnectionTrait, DbErr, EntityTrait, QueryFilter, QuerySelect};
use uuid::Uuid;

/// Appends an audit event (decided by the caller).
pub async fn insert<C: ConnectionTrait>(conn: &C, row: event::Model) -> Result<(), DbErr> {
    use sea_orm::{ActiveModelTrait as _, IntoActiveModel as _};
    event::Entity::insert(row.into_active_model().reset_all()).exec_without_returning(conn).await?;
    Ok(())
}

/// Deletes up to `limit` of the tenant's audit events; returns how many.
pub async fn delete_some_of_tenant<C: ConnectionTrait>(txn: &C, tenant_id: &str, limit: u64) -> Result<u64, DbErr> {
    let ids: Vec<Uuid> = event::Entity::find()
        .select_only()
        .column(event::Column::Id)
        .filter(event::Column::TenantId.eq(tenant_id))
        .limit(limit)
        .into_tuple()
        .all(txn)
        .await?;
    if ids.is_empty() {
        return Ok(0);
    }
    Ok(event::Entity::delete_many().filter(event::Column::Id.is_in(ids)).exec(txn).await?.rows_affected)
}
