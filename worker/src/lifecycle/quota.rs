//! Per-tenant quotas, checked where a task is created, inside its transaction and under
//! the tenant's lock, so racing creates cannot pass a quota together.
use sea_orm::DatabaseTransaction;

use super::error::{LifecycleError, QuotaRefusal};
use crate::store::{
    self,
    locks::{TenantLock, lock_tenant},
};

/// Milliseconds in a day.
const DAY_MS: i64 = 86_400_000;

/// What one tenant may hold and spend (`None`: no limit).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Quotas {
    /// Unfinished tasks (queued, running or paused) at once
    /// (`KFS_QUOTA_QUEUED_PER_TENANT`).
    pub unfinished_per_tenant: Option<u64>,
    /// US dollars the tenant's tasks created since 00:00 UTC may have spent
    /// (`KFS_QUOTA_USD_PER_TENANT_PER_DAY`).
    pub usd_per_tenant_per_day: Option<f64>,
}

/// Refuses a new task of `tenant` when a quota is used up.
pub(super) async fn check(
    txn: &DatabaseTransaction,
    quotas: Quotas,
    tenant: &str,
    now: i64,
) -> Result<(), LifecycleError> {
    if quotas == Quotas::default() {
        return Ok(());
    }
    lock_tenant(txn, tenant, TenantLock::Counting).await?;
    if let Some(limit) = quotas.unfinished_per_tenant {
        let unfinished = store::quotas::unfinished_tasks(txn, tenant).await?;
        if unfinished >= limit {
            let what = "unfinished research tasks per tenant";
            let quota = QuotaRefusal::LABELS[0];
            return Err(QuotaRefusal { quota, what, limit: limit as f64, resets_at: None }.counted());
        }
    }
    if let Some(limit) = quotas.usd_per_tenant_per_day {
        let day_start = now - now.rem_euclid(DAY_MS);
        let spent = store::quotas::usd_nanos_spent_since(txn, tenant, day_start).await?;
        if spent >= crate::research::cost::usd_to_nanos(limit) {
            let what = "US dollars spent per tenant per day";
            let quota = QuotaRefusal::LABELS[1];
            return Err(QuotaRefusal { quota, what, limit, resets_at: Some(day_start + DAY_MS) }.counted());
        }
    }
    Ok(())
}

/// Refuses an upload of `adding` bytes (giving back `replacing`, the bytes of the file it
/// replaces) when the tenant's stored file bytes would pass `limit`
/// (`KFS_QUOTA_UPLOAD_BYTES_PER_TENANT`). Call in the upload's transaction: the tenant's
/// lock makes racing uploads count one after the other.
pub async fn check_upload_bytes(
    txn: &DatabaseTransaction,
    limit: Option<u64>,
    tenant: &str,
    adding: i64,
    replacing: i64,
) -> Result<(), LifecycleError> {
    let Some(limit) = limit else { return Ok(()) };
    lock_tenant(txn, tenant, TenantLock::Counting).await?;
    let stored = store::files::stored_bytes(txn, tenant).await?;
    let after = stored.saturating_sub(replacing).saturating_add(adding);
    if u64::try_from(after).unwrap_or(u64::MAX) > limit {
        let what = "bytes of uploaded files per tenant";
        let quota = QuotaRefusal::LABELS[2];
        return Err(QuotaRefusal { quota, what, limit: limit as f64, resets_at: None }.counted());
    }
    Ok(())
}
