//! Which backend a connection speaks.
use sea_orm::{ConnectionTrait, DatabaseBackend};

/// The two backends the store speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// The embedded default: one file, one writer, FTS5.
    Sqlite,
    /// Production: row locks, `SKIP LOCKED`, LISTEN/NOTIFY, tsvector.
    Postgres,
}

/// The dialect of `conn` (fixed when its pool was opened).
pub(crate) fn dialect<C: ConnectionTrait>(conn: &C) -> Dialect {
    match conn.get_database_backend() {
        DatabaseBackend::Postgres => Dialect::Postgres,
        // MySQL is not built in; anything else is SQLite.
        _ => Dialect::Sqlite,
    }
}
