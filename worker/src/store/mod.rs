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

/// The statements both backends have, by the same names, each read from its own
/// backend's `sql/` folder (a backend missing one does not compile). Invoked in
/// `postgres` and `sqlite` after each defines its `statement!`.
macro_rules! shared_statements {
    () => {
        /// The grant rule's verdicts for a set of snapshots (`store::grants::verdicts`).
        pub(crate) const GRANT_VERDICTS: &str =
            statement!("grant_verdicts.head", "grant_denial", "grant_verdicts.tail");
        /// A task row's lease, stage and grant verdict, locked (`store::tasks::fence`).
        pub(crate) const FENCE: &str = statement!("fence.head", "grant_denial", "fence.tail");
        /// Every pair with unfinished tasks (`store::claims::pairs`).
        pub(crate) const PAIRS: &str = statement!("pairs");
        /// A tenant's live leases (`store::claims::live_leases`).
        pub(crate) const LIVE_LEASES_OF_TENANT: &str = statement!("live_leases");
        /// A space's live leases (`store::claims::live_leases`).
        pub(crate) const LIVE_LEASES_OF_SPACE: &str = statement!("live_leases", "live_leases.space");
        /// What a tenant's tasks spent since a time (`store::quotas::usd_nanos_spent_since`).
        pub(crate) const USD_NANOS_SPENT_SINCE: &str = statement!("usd_nanos_spent_since");
        /// A task by id, if its subject reads it and its grant holds (`store::tasks::find_readable`).
        pub(crate) const TASK_READABLE: &str = statement!("task_readable.head", "grant_denial", "task_readable.tail");
        /// The grant rule as a condition on a `research_task_jobs` row, at one bound time
        /// (`store::tasks::page`).
        pub(crate) const GRANT_HOLDS_OF_JOBS: &str =
            statement!("grant_holds_of_jobs.head", "grant_denial", "grant_holds_of_jobs.tail");
        /// A space's best passages for a query (`store::passages::full_text`).
        pub(crate) const FULL_TEXT: &str = statement!("full_text");
        /// A document's passages without a model's embedding (`store::embeddings::unembedded`).
        pub(crate) const UNEMBEDDED: &str = statement!("unembedded");
        /// Ready documents lacking a model's vectors wait again (`store::embeddings::reconcile`).
        pub(crate) const RECONCILE_UNEMBEDDED: &str = statement!("reconcile_unembedded");
        /// A space's passages by id (`store::passages::by_ids`).
        pub(crate) const PASSAGES_BY_IDS: &str = statement!("passages_by_ids");
    };
}

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
pub mod signals;
pub mod spaces;
pub(crate) mod sqlite;
pub mod tasks;
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

/// How many write transactions are worth running at once: a few on PostgreSQL (a
/// transaction's statements run one after another on one connection, so several keep the
/// server's cores busy), one on SQLite (one writer).
pub fn writers_at_once<C: sea_orm::ConnectionTrait>(conn: &C) -> usize {
    match dialect(conn) {
        Dialect::Postgres => 4,
        Dialect::Sqlite => 1,
    }
}
