//! Connecting to the database and starting write transactions the same way everywhere.
use std::time::Duration;

use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
use sea_orm::{ConnectOptions, Database, DatabaseBackend, DatabaseConnection, DbErr};

use crate::store::is_unavailable;

/// Opens a pool. SQLite gets WAL, a busy timeout and enforced foreign keys, because the
/// API and the worker loops write to it from one process at the same time.
pub async fn connect(url: &str) -> Result<DatabaseConnection, DbErr> {
    let mut options = ConnectOptions::new(url.to_owned());
    options
        .sqlx_logging(false)
        // Long enough to ride out a burst, short enough that a request answers "unavailable"
        // promptly while the database is down.
        .acquire_timeout(Duration::from_secs(5))
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
    let mut db = Database::connect(options).await?;
    // Every statement sent, in or out of a transaction: what a request or a task costs the
    // database shows in `db_statements_total` (the reads bench divides it by requests).
    db.set_metric_callback(|_| metrics::counter!("db_statements_total").increment(1));
    Ok(db)
}

/// Opens a pool and applies every pending migration (see [`migrate`]).
pub async fn connect_and_migrate(url: &str) -> Result<DatabaseConnection, DbErr> {
    let db = connect(url).await?;
    migrate(&db).await?;
    Ok(db)
}

/// How long [`connect_and_migrate_patiently`] first waits after a failure; each wait
/// doubles, up to [`PATIENT_MAX`].
const PATIENT_MIN: Duration = Duration::from_secs(1);
/// The longest wait between two tries of [`connect_and_migrate_patiently`].
const PATIENT_MAX: Duration = Duration::from_secs(30);

/// [`connect_and_migrate`] for a process that may start before its database: while the
/// database is unreachable (refused, down, starting up; see [`is_unavailable`]) it tries
/// again after 1 s, doubling to 30 s with jitter, logging each failure, until it connects
/// or `stop` resolves (`Ok(None)`). Any other failure (a malformed URL, a refused password,
/// a migration that fails) is returned at once: waiting would not mend it.
pub async fn connect_and_migrate_patiently(
    url: &str,
    stop: impl Future<Output = ()>,
) -> Result<Option<DatabaseConnection>, DbErr> {
    use backon::BackoffBuilder as _;
    let mut delays = backon::ExponentialBuilder::default()
        .with_min_delay(PATIENT_MIN)
        .with_max_delay(PATIENT_MAX)
        .with_jitter()
        .without_max_times()
        .build();
    let mut stop = std::pin::pin!(stop);
    let mut tries = 0u32;
    loop {
        tries += 1;
        match connect_and_migrate(url).await {
            Ok(db) => {
                if tries > 1 {
                    tracing::info!(tries, "connected to the database");
                }
                return Ok(Some(db));
            }
            Err(error) if is_unavailable(&error) => {
                let wait = delays.next().unwrap_or(PATIENT_MAX);
                tracing::warn!(error = %error, tries, wait_ms = wait.as_millis() as u64, "the database is unreachable; trying again");
                tokio::select! {
                    () = tokio::time::sleep(wait) => {}
                    () = &mut stop => return Ok(None),
                }
            }
            Err(error) => return Err(error),
        }
    }
}

/// The PostgreSQL advisory lock every process takes around migrating: "kfs_migr".
const MIGRATION_LOCK: i64 = 0x6b66_735f_6d69_6772;

/// Applies every pending migration, one process at a time. Every replica migrates on
/// start, so two starting together against a fresh PostgreSQL would race to create the
/// same tables: each takes a session advisory lock first, and the second finds nothing
/// left to do once it holds it. The lock is the session's, so a process that dies while
/// migrating releases it. On SQLite each migration's transaction takes the write lock,
/// which serves the same purpose.
pub async fn migrate(db: &DatabaseConnection) -> Result<(), DbErr> {
    use migration::MigratorTrait;
    if db.get_database_backend() != DatabaseBackend::Postgres {
        return migration::Migrator::up(db, None).await;
    }
    let sqlx_error = |error: sea_orm::sqlx::Error| DbErr::Conn(sea_orm::RuntimeErr::SqlxError(error.into()));
    let mut session = db.get_postgres_connection_pool().acquire().await.map_err(sqlx_error)?;
    sea_orm::sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(MIGRATION_LOCK)
        .execute(&mut *session)
        .await
        .map_err(sqlx_error)?;
    let migrated = migration::Migrator::up(db, None).await;
    let unlocked =
        sea_orm::sqlx::query("SELECT pg_advisory_unlock($1)").bind(MIGRATION_LOCK).execute(&mut *session).await;
    if unlocked.is_err() {
        // Never hand a session that may still hold the lock back to the pool: closing it
        // ends the session, and the lock with it.
        drop(session.detach());
    }
    migrated?;
    unlocked.map_err(sqlx_error)?;
    Ok(())
}

/// The pool's open and idle connections, where the driver reports them (PostgreSQL).
pub fn pool_connections(db: &DatabaseConnection) -> Option<(u32, usize)> {
    if db.get_database_backend() != DatabaseBackend::Postgres {
        return None;
    }
    let pool = db.get_postgres_connection_pool();
    Some((pool.size(), pool.num_idle()))
}

/// The embedded database, the default: a SQLite file beside the process, created and
/// migrated on start.
pub const EMBEDDED_URL: &str = "sqlite://./data/kfs.sqlite?mode=rwc";

/// Whether `url` names the embedded database (a SQLite file in this process) rather than
/// a database server.
pub fn is_embedded(url: &str) -> bool {
    url.starts_with("sqlite:")
}

/// The database `url` names, for people to read, without any credential it carries: the
/// SQLite file, or the PostgreSQL database and where it is.
pub fn describe(url: &str) -> String {
    if let Some(rest) = url.strip_prefix("sqlite://") {
        let path = rest.split('?').next().unwrap_or_default();
        return format!("SQLite file {path} (created and migrated on start)");
    }
    match url.parse::<sea_orm::sqlx::postgres::PgConnectOptions>() {
        Ok(options) => format!(
            "PostgreSQL database {} on {}:{}",
            options.get_database().unwrap_or("(default)"),
            options.get_host(),
            options.get_port()
        ),
        Err(_) => "the database DATABASE_URL names".to_owned(),
    }
}

/// Creates the directory of the SQLite file `url` names, so the first start just works
/// (nothing to do for a database server or an in-memory database).
pub fn prepare_storage(url: &str) -> std::io::Result<()> {
    let Some(rest) = url.strip_prefix("sqlite://") else {
        return Ok(());
    };
    let path = rest.split('?').next().unwrap_or_default();
    match std::path::Path::new(path).parent() {
        Some(dir) if !dir.as_os_str().is_empty() && path != ":memory:" => std::fs::create_dir_all(dir),
        _ => Ok(()),
    }
}
