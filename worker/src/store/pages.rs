//! Keyset pages of newest-first lists: a page starts after the row with a given time and
//! id, so pages stay stable while rows are added.
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
