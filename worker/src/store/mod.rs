//! The store: every SQL statement this service sends, and every difference between
//! SQLite and PostgreSQL, behind named operations with typed parameters and typed rows.
//! Everything above it (the lifecycle, knowledge, grants, notifications, webhooks, the
//! API's reads) decides what to write and passes it down as data; the store only writes
//! and reads.
//!
//! The backend is chosen once, when the pool is opened (`db::connect`); each operation
//! asks the connection it is given for its [`Dialect`] and runs the one implementation it
//! has for that backend. Operations that read and write the same on both backends are
//! written once, with sea-orm's builder, in this folder; what only one backend does (or
//! does differently) lives under `postgres/` and `sqlite/`, and statements written as text
//! live in `.sql` files there, with bound parameters only. PostgreSQL gets one-statement
//! forms of the hot paths (a batch of stage boundaries, a batch of claims); SQLite, one
//! writer in process, gets the per-row forms.
//!
//! Every operation takes `&impl ConnectionTrait`, so it runs alone or inside the caller's
//! transaction; operations that need the job's row lock say so.

pub mod answer_traces;
pub mod api_keys;
pub mod audit;
pub mod boundaries;
pub mod claims;
pub mod deletions;
mod dialect;
pub mod documents;
pub mod drafts;
pub mod embeddings;
pub mod erasures;
pub mod errors;
pub mod grants;
pub mod journal;
pub mod locks;
pub mod members;
pub mod ops;
pub mod outbox;
pub mod pages;
pub mod passages;
pub(crate) mod postgres;
pub mod quotas;
pub mod retention;
pub mod signals;
pub mod spaces;
pub(crate) mod sqlite;
pub mod tasks;
pub mod trace_contexts;
pub mod webhooks;

pub use dialect::Dialect;
pub(crate) use dialect::dialect;
pub use errors::{Refusal, classify, is_unavailable};

use sea_orm::{DatabaseTransaction, DbErr, SqliteTransactionMode, TransactionOptions, TransactionTrait};

/// Begins a transaction that will write. On SQLite it takes the write lock up front
/// (`BEGIN IMMEDIATE`): a deferred transaction that reads and then writes fails with
/// "database is locked" under contention whatever the busy timeout.
pub async fn begin_write<C>(db: &C) -> Result<DatabaseTransaction, DbErr>
where
    C: TransactionTrait<Transaction = DatabaseTransaction>,
{
    db.begin_with_options(TransactionOptions {
        sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
        ..Default::default()
    })
    .await
}

/// How many write transactions are worth running at once: a few on PostgreSQL (a
/// transaction's statements run one after another on one connection, so several keep the
/// server's cores busy), one on SQLite (one writer).
pub fn writers_at_once<C: sea_orm::ConnectionTrait>(conn: &C) -> usize {
    match dialect(conn) {
        Dialect::Postgres => 4,
        Dialect::Sqlite => 1,
    }
}
