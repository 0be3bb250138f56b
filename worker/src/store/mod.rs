//! The store: every SQL statement this service sends, and every difference between
//! SQLite and PostgreSQL, behind named operations with typed parameters and typed rows.
//! Everything above it (the lifecycle, knowledge, grants, notifications, webhooks, the
//! API's reads) decides what to write and passes it down as data; the store only writes
//! and reads.
//!
//! The backend is chosen once, when the pool is opened (`db::connect`); what the two
//! backends do differently is one trait, [`backend::Backend`], implemented once by each,
//! and an operation that differs reaches its backend's implementation through the one
//! dispatch there is (`on_backend!`). Operations that read and write the same on both backends are
//! written once, with sea-orm's builder, in this folder; what only one backend does (or
//! does differently) lives under `postgres/` and `sqlite/`, and statements written as text
//! live in `.sql` files there, with bound parameters only. PostgreSQL gets one-statement
//! forms of the hot paths (a batch of stage boundaries, a batch of claims); SQLite, one
//! writer in process, gets the per-row forms.
//!
//! Every operation takes `&impl ConnectionTrait`, so it runs alone or inside the caller's
//! transaction; operations that need the job's row lock say so.

/// The statements both backends have ([`backend::Statements`]), each read from its own
/// backend's `sql/` folder (a backend missing one does not compile). Invoked in `postgres`
/// and `sqlite` after each defines its `statement!`.
macro_rules! shared_statements {
    () => {
        crate::store::backend::Statements {
            grant_verdicts: statement!("grant_verdicts.head", "grant_denial", "grant_verdicts.tail"),
            fence: statement!("fence.head", "grant_denial", "fence.tail"),
            pairs: statement!("pairs"),
            live_leases_of_tenant: statement!("live_leases"),
            live_leases_of_space: statement!("live_leases", "live_leases.space"),
            usd_nanos_spent_since: statement!("usd_nanos_spent_since"),
            task_readable: statement!("task_readable.head", "grant_denial", "task_readable.tail"),
            grant_holds_of_jobs: statement!("grant_holds_of_jobs.head", "grant_denial", "grant_holds_of_jobs.tail"),
            full_text: statement!("full_text"),
            unembedded: statement!("unembedded"),
            reconcile_unembedded: statement!("reconcile_unembedded"),
            passages_by_ids: statement!("passages_by_ids"),
        }
    };
}

pub mod answer_traces;
pub mod api_keys;
pub mod audit;
pub(crate) mod backend;
pub mod boundaries;
pub mod claims;
pub mod deletions;
mod dialect;
pub mod documents;
pub mod drafts;
pub mod embeddings;
pub mod erasures;
pub mod errors;
pub mod files;
pub mod filtered;
pub mod grants;
pub mod journal;
pub mod locks;
pub mod members;
pub mod notes;
pub mod ops;
pub mod outbox;
pub mod pages;
pub mod passages;
pub(crate) mod postgres;
pub mod quotas;
pub mod retention;
pub(crate) mod rows;
pub mod signals;
pub mod spaces;
pub(crate) mod sqlite;
pub mod tasks;
pub mod threads;
pub mod trace_contexts;
pub mod waits;
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

/// How many write transactions are worth running at once (the backend's
/// [`backend::Backend::WRITERS_AT_ONCE`]).
pub fn writers_at_once<C: sea_orm::ConnectionTrait>(conn: &C) -> usize {
    backend::on_backend!(conn, |B| <B as backend::Backend>::WRITERS_AT_ONCE)
}
