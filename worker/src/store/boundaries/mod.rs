//! Stage boundaries: the one write by which a lease holder moves its task on. A boundary
//! lands only while the task's row still carries the lease's token, is still in the stage
//! its worker ran, and the task's grant holds at the boundary's time; then, in the caller's
//! transaction, its row (stage, cost, lease), its partial results, its `stage_changed`
//! event and, for a completion, the answer trace, the answer draft and the closed outbox
//! entries. A boundary held out writes nothing.
//!
//! A batch of any size (one included) is one operation: on PostgreSQL one statement
//! (`postgres/sql/boundaries.*.sql`), rows locked in id order; on SQLite the same writes
//! row by row in id order (`sqlite/boundaries.rs`). Everything a boundary writes is decided
//! by the caller (the lifecycle): the store only writes it.
pub(crate) mod rows;

pub use rows::{BoundaryOutcome, BoundaryWrite, EventWrite, Landed, PartialWrite, TraceWrite};
use sea_orm::{ConnectionTrait, DbErr};

use crate::store::backend::{Backend, on_backend};

/// Writes `boundaries` (of different tasks, each a move the caller's stage rule allows) in
/// `txn`; returns each one's outcome in the order given. An `Err` means a statement failed
/// and the transaction must be rolled back.
pub async fn write<C: ConnectionTrait>(txn: &C, boundaries: &[BoundaryWrite]) -> Result<Vec<BoundaryOutcome>, DbErr> {
    if boundaries.is_empty() {
        return Ok(Vec::new());
    }
    on_backend!(txn, |B| B::write_boundaries(txn, boundaries).await)
}
