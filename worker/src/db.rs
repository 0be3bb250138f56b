//! Connecting to the database and starting write transactions the same way everywhere.
use std::time::Duration;

use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
use sea_orm::{
    ConnectOptions, Database, DatabaseBackend, DatabaseConnection, DatabaseTransaction, DbErr,
    SqliteTransactionMode, TransactionOptions, TransactionTrait,
};

/// Opens a pool. SQLite gets WAL, a busy timeout and enforced foreign keys, because the
/// API and the worker loops write to it from one process at the same time.
pub async fn connect(url: &str) -> Result<DatabaseConnection, DbErr> {
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .sqlx_logging(false)
        .acquire_timeout(Duration::from_secs(10))
        .map_sqlx_sqlite_opts(|sqlite| {
            sqlite
                .create_if_missing(true)
                .journal_mode(SqliteJournalMode::Wal)
                .synchronous(SqliteSynchronous::Normal)
                .busy_timeout(Duration::from_secs(10))
                .foreign_keys(true)
        });
    if url.starts_with("sqlite") {
        options.max_connections(8).min_connections(1);
    } else {
        options.max_connections(16);
    }
    Database::connect(options).await
}

/// Opens a pool and applies every pending migration.
pub async fn connect_and_migrate(url: &str) -> Result<DatabaseConnection, DbErr> {
    use migration::MigratorTrait;
    let db = connect(url).await?;
    migration::Migrator::up(&db, None).await?;
    Ok(db)
}

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

/// Whether the connection is PostgreSQL (row locks, NOTIFY) rather than SQLite.
pub fn is_postgres(backend: DatabaseBackend) -> bool {
    backend == DatabaseBackend::Postgres
}
