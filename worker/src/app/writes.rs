//! The transactions operations write in.
use sea_orm::{DatabaseConnection, DatabaseTransaction};

use super::AppError;

/// Begins a write transaction that will create something for `tenant_id`, refusing with
/// CONFLICT while the tenant is being erased (the seal's check holds until the
/// transaction ends; see `crate::lifecycle::guard_tenant`).
pub(super) async fn begin_creating(db: &DatabaseConnection, tenant_id: &str) -> Result<DatabaseTransaction, AppError> {
    let txn = crate::store::begin_write(db).await?;
    crate::lifecycle::guard_tenant(&txn, tenant_id).await?;
    Ok(txn)
}

/// Begins a write transaction that creates nothing (a removal, a revocation).
pub(super) async fn begin(db: &DatabaseConnection) -> Result<DatabaseTransaction, AppError> {
    Ok(crate::store::begin_write(db).await?)
}
