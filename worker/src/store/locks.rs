//! Per-tenant locks that serialize decisions about one tenant across processes: the seal
//! of an erasure against everything that creates for the tenant, and the counting of its
//! quotas and caps. PostgreSQL takes advisory locks, held until the transaction ends;
//! SQLite's write transactions already take turns, so there is nothing to take.
use sea_orm::{ConnectionTrait, DbErr, Statement};

use super::backend::{Backend, on_backend};
pub use super::rows::TenantLock;

/// Takes `lock` on `tenant_id` until `txn` ends.
pub async fn lock_tenant<C: ConnectionTrait>(txn: &C, tenant_id: &str, lock: TenantLock) -> Result<(), DbErr> {
    let Some(sql) = on_backend!(txn, |B| B::tenant_lock(lock)) else {
        return Ok(());
    };
    txn.query_one_raw(Statement::from_sql_and_values(txn.get_database_backend(), sql, [tenant_id.into()])).await?;
    Ok(())
}
