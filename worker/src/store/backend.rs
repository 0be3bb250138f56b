//! Everything the two backends do differently, as one trait each backend implements once
//! (`postgres::Postgres` in `postgres/backend.rs`, `sqlite::Sqlite` in
//! `sqlite/backend.rs`), and the one place that picks the implementation for a connection
//! ([`on_backend!`]). An operation that differs asks its backend through the trait; a
//! backend missing an item does not compile, and no file of the store matches on the
//! dialect itself. The trait names only plain rows (`rows.rs`, `boundaries/rows.rs`,
//! `claims/rows.rs`), and the backends' types are declared apart from their
//! implementations, so an implementation may reuse the store's operations (SQLite's
//! per-row forms do) without a circle.
use entity::research_task_job as job;
use sea_orm::sea_query::{Condition, SelectStatement};
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, QuerySelect};
use serde_json::Value as Json;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use uuid::Uuid;

use super::boundaries::rows::{BoundaryOutcome, BoundaryWrite};
use super::claims::rows::{LeaseWrite, Leased};
use super::rows::{NewTaskRows, PassageRow, Scope, TenantLock};
use crate::notify::{Notifier, TaskSignal};

/// Runs `$body` with `$backend` naming the implementation of [`Backend`] that `$conn`
/// speaks: the store's one choice of backend.
macro_rules! on_backend {
    ($conn:expr, |$backend:ident| $body:expr) => {
        match $crate::store::dialect($conn) {
            $crate::store::Dialect::Postgres => {
                type $backend = $crate::store::postgres::Postgres;
                $body
            }
            $crate::store::Dialect::Sqlite => {
                type $backend = $crate::store::sqlite::Sqlite;
                $body
            }
        }
    };
}
pub(crate) use on_backend;

/// The statements both backends have, by the same names, each read from its own backend's
/// `sql/` folder (`shared_statements!`).
pub(crate) struct Statements {
    /// The grant rule's verdicts for a set of snapshots (`store::grants::verdicts`).
    pub(crate) grant_verdicts: &'static str,
    /// A task row's lease, stage and grant verdict, locked (`store::tasks::fence`).
    pub(crate) fence: &'static str,
    /// Every pair with unfinished tasks (`store::claims::pairs`).
    pub(crate) pairs: &'static str,
    /// A tenant's live leases (`store::claims::live_leases`).
    pub(crate) live_leases_of_tenant: &'static str,
    /// A space's live leases (`store::claims::live_leases`).
    pub(crate) live_leases_of_space: &'static str,
    /// What a tenant's tasks spent since a time (`store::quotas::usd_nanos_spent_since`).
    pub(crate) usd_nanos_spent_since: &'static str,
    /// A task by id, if its subject reads it and its grant holds (`store::tasks::find_readable`).
    pub(crate) task_readable: &'static str,
    /// The grant rule as a condition on a `research_task_jobs` row, at one bound time
    /// (`store::tasks::page`).
    pub(crate) grant_holds_of_jobs: &'static str,
    /// A space's best passages for a query (`store::passages::full_text`).
    pub(crate) full_text: &'static str,
    /// A document's passages without a model's embedding (`store::embeddings::unembedded`).
    pub(crate) unembedded: &'static str,
    /// Ready documents lacking a model's vectors wait again (`store::embeddings::reconcile`).
    pub(crate) reconcile_unembedded: &'static str,
    /// A space's passages by id (`store::passages::by_ids`).
    pub(crate) passages_by_ids: &'static str,
}

/// What one backend does its own way. PostgreSQL locks rows, batches the hot paths into
/// one statement and talks to other processes; SQLite, one writer in process, writes row
/// by row and has no one to talk to.
pub(crate) trait Backend {
    /// Its text of the statements both have.
    const STATEMENTS: Statements;

    /// How many write transactions are worth running at once.
    const WRITERS_AT_ONCE: usize;

    /// `query`, locking the rows it reads until the transaction ends (nothing to add where
    /// a write transaction already holds the one write lock).
    fn locking_rows<Q: QuerySelect>(query: Q) -> Q;

    /// `query`, locking the rows it reads and passing over rows another transaction has
    /// locked (a claim takes what nobody else is taking).
    fn skipping_locked_rows<Q: QuerySelect>(query: Q) -> Q;

    /// [`Self::skipping_locked_rows`] for a statement built by hand; whether rows may now
    /// be passed over.
    fn skip_locked_rows(statement: &mut SelectStatement) -> bool;

    /// A list of ids as this backend's statements bind it.
    fn id_list(ids: &[Uuid]) -> sea_orm::Value;

    /// The bound values of [`Statements::full_text`] for `terms` (words safe to quote).
    fn full_text_values(scope: Scope<'_>, terms: &[String], limit: i64) -> Vec<sea_orm::Value>;

    /// A condition every document whose metadata `key` holds `value` meets (more may meet
    /// it; the filter rule decides), or `None` when SQL cannot narrow it.
    fn metadata_holds(key: &str, value: &Json) -> Option<Condition>;

    /// The statement taking `lock` on a tenant until the transaction ends, if the backend
    /// needs one (`$1` the tenant).
    fn tenant_lock(lock: TenantLock) -> Option<&'static str>;

    /// Writes a new task's rows (`store::tasks::create`).
    async fn create_task<C: ConnectionTrait>(txn: &C, rows: NewTaskRows) -> Result<job::Model, DbErr>;

    /// Writes a batch of stage boundaries (`store::boundaries::write`).
    async fn write_boundaries<C: ConnectionTrait>(
        txn: &C,
        boundaries: &[BoundaryWrite],
    ) -> Result<Vec<BoundaryOutcome>, DbErr>;

    /// Writes a batch of leases (`store::claims::lease`).
    async fn lease<C: ConnectionTrait>(txn: &C, leases: &[LeaseWrite]) -> Result<Vec<Leased>, DbErr>;

    /// Full-text search for several non-empty term lists at once
    /// (`store::passages::full_text_for_queries`), each list's passages in the order given.
    async fn full_text_for_queries<C: ConnectionTrait>(
        conn: &C,
        scope: Scope<'_>,
        searched: &[&[String]],
        limit: i64,
    ) -> Result<Vec<Vec<PassageRow>>, DbErr>;

    /// Queues `signals` (not empty) for other processes, delivered when `txn` commits.
    async fn announce<C: ConnectionTrait>(txn: &C, signals: &[TaskSignal]) -> Result<(), DbErr>;

    /// Starts this process's listener for other processes' signals, if there are any.
    fn spawn_listener(
        db: &DatabaseConnection,
        notifier: Notifier,
        on_gap: impl Fn() + Send + Sync + 'static,
        shutdown: CancellationToken,
        tracker: &TaskTracker,
    );
}
