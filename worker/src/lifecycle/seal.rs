//! A tenant's erasure, made safe against everything its members do meanwhile. Erasing
//! first *seals* the tenant: one transaction writes its `tenant_erasures` row and seals
//! each of its spaces (members removed, keys revoked, so no grant holds and nothing of it
//! is readable), and from then on every write that would create something for the
//! tenant — a space, member, key, document, task or webhook endpoint — is refused
//! ([`guard`]). Then everything goes, space by space, and the seal is lifted only when no
//! row of the tenant is left ([`finish_tenant_erasure`]); the worker's pending-deletions
//! loop finishes an erasure an interrupted request left.
//!
//! The seal and the creators meet under a per-tenant lock (`store::locks`): every
//! creating transaction takes it shared before it checks for the seal, and sealing takes
//! it exclusively, so the seal waits for creators already past their check to commit
//! (their rows are then found and erased) and every later creator sees the seal.
use entity::tenant_erasure;
use sea_orm::{ConnectionTrait, DatabaseConnection, DatabaseTransaction};

use super::LifecycleError;
use super::erase::{Erased, begin_space_deletion, finish_space_deletion, tenant_spaces};
use crate::notify::Notifier;
use crate::store::locks::{TenantLock, lock_tenant};
use crate::store::{self, begin_write};

/// Refuses, in a transaction about to create something for `tenant_id`, when the tenant
/// is being erased. Call it in the creating transaction, before the insert: it holds the
/// tenant's seal lock (shared) until that transaction ends.
pub async fn guard(txn: &DatabaseTransaction, tenant_id: &str) -> Result<(), LifecycleError> {
    lock_tenant(txn, tenant_id, TenantLock::Creating).await?;
    if store::erasures::is_sealed(txn, tenant_id).await? { Err(LifecycleError::TenantBeingErased) } else { Ok(()) }
}

/// Whether `tenant_id` is sealed for erasure (reads refuse what a seal hides).
pub async fn is_sealed<C: ConnectionTrait>(conn: &C, tenant_id: &str) -> Result<bool, LifecycleError> {
    Ok(store::erasures::is_sealed(conn, tenant_id).await?)
}

/// Seals `tenant_id` for erasure, in one transaction: its erasure row, and each of its
/// spaces sealed (members removed, keys revoked). From its commit on, nothing new is
/// accepted for the tenant and nothing of it is readable. Sealing twice is harmless.
pub async fn seal_tenant(
    db: &DatabaseConnection,
    tenant_id: &str,
    requested_by: &str,
    now: i64,
) -> Result<(), LifecycleError> {
    let txn = begin_write(db).await?;
    lock_tenant(&txn, tenant_id, TenantLock::Sealing).await?;
    let row = tenant_erasure::Model {
        tenant_id: tenant_id.to_owned(),
        requested_by: requested_by.to_owned(),
        requested_at: now,
    };
    store::erasures::insert(&txn, row).await?;
    for space_id in tenant_spaces(&txn, tenant_id).await? {
        begin_space_deletion(&txn, tenant_id, space_id, requested_by, now).await?;
    }
    txn.commit().await?;
    Ok(())
}

/// Deletes everything of a sealed tenant, its audit events included, then lifts the seal.
/// Idempotent: run again after an interruption, it goes on where it stopped. Returns what
/// went and how many audit events.
pub async fn finish_tenant_erasure(
    db: &DatabaseConnection,
    notifier: &Notifier,
    tenant_id: &str,
) -> Result<(Erased, u64), LifecycleError> {
    let mut erased = Erased::default();
    let mut audit_events = 0;
    // The seal keeps anything new out, so this ends; a space created before the seal (its
    // creator committed first) was sealed with the others and is found here like them.
    loop {
        for space_id in tenant_spaces(db, tenant_id).await? {
            erased += finish_space_deletion(db, notifier, tenant_id, space_id).await?;
        }
        let txn = begin_write(db).await?;
        let deleted = store::audit::delete_some_of_tenant(&txn, tenant_id, AUDIT_BATCH).await?;
        if deleted > 0 {
            audit_events += deleted;
            txn.commit().await?;
            continue;
        }
        // The seal is lifted in the transaction that finds the last of the tenant gone.
        if store::deletions::has_spaces(&txn, tenant_id).await? {
            txn.rollback().await?;
            continue;
        }
        store::erasures::delete(&txn, tenant_id).await?;
        txn.commit().await?;
        break;
    }
    tracing::info!(erased = ?erased, audit_events, "tenant erased");
    Ok((erased, audit_events))
}

/// Audit events deleted per transaction while a tenant is erased.
const AUDIT_BATCH: u64 = 500;

/// Finishes every tenant erasure an interrupted request left behind; returns how many.
pub async fn finish_pending_erasures(db: &DatabaseConnection, notifier: &Notifier) -> Result<usize, LifecycleError> {
    let pending = store::erasures::pending(db, 10).await?;
    for row in &pending {
        finish_tenant_erasure(db, notifier, &row.tenant_id).await?;
    }
    Ok(pending.len())
}
