//! Per-tenant locks that serialize decisions about one tenant across processes: the seal
//! of an erasure against everything that creates for the tenant, and the counting of its
//! quotas and caps. PostgreSQL takes advisory locks, held until the transaction ends;
//! SQLite's write transactions already take turns, so there is nothing to take.
use sea_orm::{ConnectionTrait, DbErr, Statement};

use super::{Dialect, dialect};

/// Which per-tenant lock, and how it is held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TenantLock {
    /// Creating something for the tenant: shared with every other creator, exclusive of
    /// a seal.
    Creating,
    /// Sealing the tenant for erasure: waits for every creator under way.
    Sealing,
    /// Counting the tenant's quota or cap: one counter at a time.
    Counting,
}

/// Takes `lock` on `tenant_id` until `txn` ends.
pub async fn lock_tenant<C: ConnectionTrait>(txn: &C, tenant_id: &str, lock: TenantLock) -> Result<(), DbErr> {
    if dialect(txn) != Dialect::Postgres {
        return Ok(());
    }
    let sql = match lock {
        TenantLock::Creating => super::postgres::LOCK_TENANT_SHARED,
        TenantLock::Sealing => super::postgres::LOCK_TENANT_EXCLUSIVE,
        TenantLock::Counting => super::postgres::LOCK_TENANT_COUNTING,
    };
    txn.query_one_raw(Statement::from_sql_and_values(txn.get_database_backend(), sql, [tenant_id.into()])).await?;
    Ok(())
}
