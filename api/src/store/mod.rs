//! Database access for the API: free functions taking `&impl ConnectionTrait`, so each works
//! alone or inside a transaction. Research task rows are only *read* here; every write to
//! them goes through `worker::lifecycle`.

pub mod answer_traces;
pub mod api_keys;
pub mod audit;
pub mod constraint;
pub mod documents;
pub mod members;
pub mod ops;
pub mod spaces;
pub mod tasks;
pub mod webhooks;

/// Begins a write transaction that will create something for `tenant_id`, refusing with
/// CONFLICT while the tenant is being erased (the seal's check holds until the
/// transaction ends; see `worker::lifecycle::guard_tenant`).
pub async fn begin_creating(
    db: &sea_orm::DatabaseConnection,
    tenant_id: &str,
) -> Result<sea_orm::DatabaseTransaction, crate::error::ApiError> {
    let txn = worker::store::begin_write(db).await?;
    worker::lifecycle::guard_tenant(&txn, tenant_id).await?;
    Ok(txn)
}

use sea_orm::{ColumnTrait, Condition};
use uuid::Uuid;

/// Where a page of a newest-first list starts: after the row with this time and id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageKey {
    /// The row's ordering time, epoch milliseconds.
    pub at: i64,
    /// The row's id, which breaks ties between equal times.
    pub id: Uuid,
}

/// `(at, id) < (key.at, key.id)`: the rows after `key` in `at DESC, id DESC` order. Written
/// out rather than as a row-value comparison so SQLite and PostgreSQL read it alike.
pub fn before<A: ColumnTrait, I: ColumnTrait>(at: A, id: I, key: PageKey) -> Condition {
    Condition::any().add(at.lt(key.at)).add(Condition::all().add(at.eq(key.at)).add(id.lt(key.id)))
}
