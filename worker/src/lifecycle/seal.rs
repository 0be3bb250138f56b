//! A tenant's erasure, made safe against everything its members do meanwhile. Erasing
//! first *seals* the tenant: one transaction writes its `tenant_erasures` row and seals
//! each of its spaces (members removed, keys revoked, so no grant holds and nothing of it
//! is readable), and from then on every write that would create something for the
//! tenant — a space, member, key, document, task or webhook endpoint — is refused
//! ([`guard`]). Then everything goes, space by space, and the seal is lifted only when no
//! row of the tenant is left ([`finish_tenant_erasure`]); the worker's pending-deletions
//! loop finishes an erasure an interrupted request left.
//!
//! The seal and the creators meet under a per-tenant lock: on PostgreSQL every creating
//! transaction takes a shared advisory lock on the tenant before it checks for the seal,
//! and sealing takes it exclusively, so the seal waits for creators already past their
//! check to commit (their rows are then found and erased) and every later creator sees
//! the seal. SQLite's write transactions take turns (`BEGIN IMMEDIATE`), which does the
//! same.
use entity::{audit_event, knowledge_space as space, tenant_erasure};
use sea_orm::sea_query::OnConflict;
use sea_orm::{
    ActiveValue::Set, ColumnTrait, ConnectionTrait, DatabaseConnection, DatabaseTransaction, EntityTrait, QueryFilter,
    QuerySelect, Statement,
};

use super::LifecycleError;
use super::erase::{Erased, begin_space_deletion, finish_space_deletion, tenant_spaces};
use crate::db::{begin_write, is_postgres};
use crate::notify::Notifier;

/// The first key of the tenant seal's advisory lock ("kfs_seal" as an `int4`), so it
/// never meets another lock on the same tenant.
const SEAL_LOCK_CLASS: i32 = 0x6b66_7365;

/// Takes the tenant's seal lock in `txn`: shared for a creator, exclusive for the seal.
async fn lock<C: ConnectionTrait>(txn: &C, tenant_id: &str, exclusive: bool) -> Result<(), LifecycleError> {
    if !is_postgres(txn.get_database_backend()) {
        return Ok(());
    }
    let function = if exclusive { "pg_advisory_xact_lock" } else { "pg_advisory_xact_lock_shared" };
    let sql = format!("SELECT {function}($1, hashtext($2))::text AS \"locked\"");
    let statement =
        Statement::from_sql_and_values(txn.get_database_backend(), &sql, [SEAL_LOCK_CLASS.into(), tenant_id.into()]);
    txn.query_one_raw(statement).await?;
    Ok(())
}

/// Refuses, in a transaction about to create something for `tenant_id`, when the tenant
/// is being erased. Call it in the creating transaction, before the insert: it holds the
/// tenant's seal lock (shared) until that transaction ends.
pub async fn guard(txn: &DatabaseTransaction, tenant_id: &str) -> Result<(), LifecycleError> {
    lock(txn, tenant_id, false).await?;
    let sealed = tenant_erasure::Entity::find_by_id(tenant_id.to_owned()).one(txn).await?;
    match sealed {
        Some(_) => Err(LifecycleError::TenantBeingErased),
        None => Ok(()),
    }
}

/// Whether `tenant_id` is sealed for erasure (reads refuse what a seal hides).
pub async fn is_sealed<C: ConnectionTrait>(conn: &C, tenant_id: &str) -> Result<bool, LifecycleError> {
    Ok(tenant_erasure::Entity::find_by_id(tenant_id.to_owned()).one(conn).await?.is_some())
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
    lock(&txn, tenant_id, true).await?;
    let row = tenant_erasure::ActiveModel {
        tenant_id: Set(tenant_id.to_owned()),
        requested_by: Set(requested_by.to_owned()),
        requested_at: Set(now),
    };
    tenant_erasure::Entity::insert(row)
        .on_conflict(OnConflict::column(tenant_erasure::Column::TenantId).do_nothing().to_owned())
        .exec_without_returning(&txn)
        .await?;
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
        let ids: Vec<uuid::Uuid> = audit_event::Entity::find()
            .select_only()
            .column(audit_event::Column::Id)
            .filter(audit_event::Column::TenantId.eq(tenant_id))
            .limit(AUDIT_BATCH)
            .into_tuple()
            .all(&txn)
            .await?;
        if !ids.is_empty() {
            let deleted =
                audit_event::Entity::delete_many().filter(audit_event::Column::Id.is_in(ids)).exec(&txn).await?;
            audit_events += deleted.rows_affected;
            txn.commit().await?;
            continue;
        }
        // The seal is lifted in the transaction that finds the last of the tenant gone.
        if space::Entity::find().filter(space::Column::TenantId.eq(tenant_id)).one(&txn).await?.is_some() {
            txn.rollback().await?;
            continue;
        }
        tenant_erasure::Entity::delete_by_id(tenant_id.to_owned()).exec(&txn).await?;
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
    let pending = tenant_erasure::Entity::find().limit(10).all(db).await?;
    for row in &pending {
        finish_tenant_erasure(db, notifier, &row.tenant_id).await?;
    }
    Ok(pending.len())
}
