//! The transaction every creating mutation writes in.

/// Begins a write transaction that will create something for `tenant_id`, refusing with
/// CONFLICT while the tenant is being erased (the seal's check holds until the
/// transaction ends; see `worker::lifecycle::guard_tenant`).
pub(super) async fn begin_creating(
    db: &sea_orm::DatabaseConnection,
    tenant_id: &str,
) -> Result<sea_orm::DatabaseTransaction, crate::error::ApiError> {
    let txn = worker::store::begin_write(db).await?;
    worker::lifecycle::guard_tenant(&txn, tenant_id).await?;
    Ok(txn)
}
