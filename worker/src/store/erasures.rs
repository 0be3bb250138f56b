//! Tenant erasures (`tenant_erasures`): a row per tenant being erased, the seal every
//! creating transaction checks (under the tenant's `Creating` lock) before it writes.
use entity::tenant_erasure as erasure;
use sea_orm::sea_query::OnConflict;
use sea_orm::{ConnectionTrait, DbErr, EntityTrait, QuerySelect};

/// Whether the tenant is sealed for erasure.
pub async fn is_sealed<C: ConnectionTrait>(conn: &C, tenant_id: &str) -> Result<bool, DbErr> {
    Ok(erasure::Entity::find_by_id(tenant_id.to_owned()).one(conn).await?.is_some())
}

/// Seals the tenant (a second seal keeps the first).
pub async fn insert<C: ConnectionTrait>(txn: &C, row: erasure::Model) -> Result<(), DbErr> {
    use sea_orm::{ActiveModelTrait as _, IntoActiveModel as _};
    erasure::Entity::insert(row.into_active_model().reset_all())
        .on_conflict(OnConflict::column(erasure::Column::TenantId).do_nothing().to_owned())
        .exec_without_returning(txn)
        .await?;
    Ok(())
}

/// Lifts the tenant's seal.
pub async fn delete<C: ConnectionTrait>(txn: &C, tenant_id: &str) -> Result<(), DbErr> {
    erasure::Entity::delete_by_id(tenant_id.to_owned()).exec(txn).await?;
    Ok(())
}

/// Up to `limit` erasures under way.
pub async fn pending<C: ConnectionTrait>(conn: &C, limit: u64) -> Result<Vec<erasure::Model>, DbErr> {
    erasure::Entity::find().limit(limit).all(conn).await
}
