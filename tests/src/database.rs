//! A fresh, migrated database for every test, on SQLite or PostgreSQL, dropped afterwards
//! whatever the test's outcome.
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use anyhow::Context as _;
use sea_orm::{ConnectionTrait, DatabaseConnection, DbErr, ExecResult, Statement, Value};
use uuid::Uuid;

/// The two databases every test runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Backend {
    /// A temporary SQLite file (the embedded default).
    Sqlite,
    /// A temporary database on the server `KFS_TEST_POSTGRES_URL` names (production).
    Postgres,
}

impl Backend {
    /// Both backends, in the order their trials are listed.
    pub const ALL: [Backend; 2] = [Backend::Sqlite, Backend::Postgres];

    /// The lowercase name that ends each trial's name.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sqlite => "sqlite",
            Self::Postgres => "postgres",
        }
    }
}

/// Where test databases come from, read once from the environment by the test binary.
#[derive(Debug, Clone, Default)]
pub struct TestConfig {
    /// An admin URL (e.g. `postgres://postgres@127.0.0.1:5432/postgres`) of a server on
    /// which each PostgreSQL test creates and drops its own database; `None` skips them.
    pub postgres_url: Option<String>,
    /// Whether a missing `postgres_url` is an error rather than a skip (CI sets it, so a
    /// misconfigured runner cannot pass by testing SQLite alone).
    pub require_postgres: bool,
}

impl TestConfig {
    /// Reads `KFS_TEST_POSTGRES_URL` and `KFS_TEST_REQUIRE_POSTGRES` (`1` or `true`).
    pub fn from_env() -> Self {
        let postgres_url = std::env::var("KFS_TEST_POSTGRES_URL").ok().filter(|url| !url.trim().is_empty());
        let require_postgres =
            std::env::var("KFS_TEST_REQUIRE_POSTGRES").is_ok_and(|value| matches!(value.trim(), "1" | "true" | "yes"));
        Self { postgres_url, require_postgres }
    }
}

/// One test's database: a pool to it, the URL it was opened with (for servers and workers
/// the test starts) and its backend.
#[derive(Debug, Clone)]
pub struct TestDb {
    /// A pool opened with `worker::db::connect`, so it has the production settings.
    pub db: DatabaseConnection,
    /// The database's URL, for anything else the test connects (a server, a worker).
    pub url: String,
    /// Which database this is.
    pub backend: Backend,
    /// Every database created for the running test; dropped together when it ends.
    scope: Arc<Scope>,
}

impl TestDb {
    /// Creates a database, migrates it, runs `test` on it and drops it (and any sibling
    /// the test created) afterwards, even when the test fails or panics.
    pub async fn run<F, Fut>(backend: Backend, config: &TestConfig, test: F) -> anyhow::Result<()>
    where
        F: FnOnce(TestDb) -> Fut,
        Fut: Future<Output = anyhow::Result<()>>,
    {
        use futures_util::FutureExt as _;
        let scope = Arc::new(Scope { backend, admin_url: config.postgres_url.clone(), created: Mutex::default() });
        let outcome = match scope.create(true).await {
            Ok(db) => std::panic::AssertUnwindSafe(crate::harness::with_deadline(test(db)))
                .catch_unwind()
                .await
                .unwrap_or_else(|panic| Err(anyhow::anyhow!("test panicked: {}", panic_message(&panic)))),
            Err(error) => Err(error.context("creating the test database")),
        };
        let cleanup = scope.drop_all().await;
        match (outcome, cleanup) {
            (Ok(()), cleanup) => cleanup.context("dropping the test databases"),
            (Err(error), Ok(())) => Err(error),
            (Err(error), Err(cleanup)) => {
                Err(error.context(format!("and dropping the test databases failed too: {cleanup:#}")))
            }
        }
    }

    /// Another fresh, fully migrated database on the same backend, dropped with this one.
    pub async fn sibling(&self) -> anyhow::Result<TestDb> {
        self.scope.create(true).await
    }

    /// Another fresh database with no migrations applied, dropped with this one (for
    /// tests that migrate step by step).
    pub async fn empty_sibling(&self) -> anyhow::Result<TestDb> {
        self.scope.create(false).await
    }

    /// Executes one statement with `$1`, `$2`… placeholders (both backends accept them).
    /// Bind UUIDs as values: sqlx stores them as 16-byte blobs on SQLite, so a literal
    /// would never match.
    pub async fn exec(&self, sql: &str, values: impl IntoIterator<Item = Value>) -> Result<ExecResult, DbErr> {
        let statement = Statement::from_sql_and_values(self.db.get_database_backend(), sql, values);
        self.db.execute_raw(statement).await
    }

    /// Runs a query whose first column is text and returns that column of every row.
    pub async fn strings(&self, sql: &str, values: impl IntoIterator<Item = Value>) -> anyhow::Result<Vec<String>> {
        let statement = Statement::from_sql_and_values(self.db.get_database_backend(), sql, values);
        let rows = self.db.query_all_raw(statement).await.with_context(|| format!("running {sql}"))?;
        rows.iter()
            .map(|row| row.try_get_by_index::<String>(0).with_context(|| format!("reading the text column of {sql}")))
            .collect()
    }

    /// The tables (every one, the full-text index's own included) with a row whose text, in
    /// any column, contains `needle`: where a copy of something deleted could hide.
    pub async fn tables_holding(&self, needle: &str) -> anyhow::Result<Vec<String>> {
        let (tables, contains) = match self.backend {
            Backend::Postgres => (
                "SELECT table_name::text FROM information_schema.tables \
                 WHERE table_schema = 'public' AND table_type = 'BASE TABLE'",
                // The whole row as text: every column, JSON and arrays included.
                "SELECT COUNT(*) FROM \"{table}\" AS row_of WHERE strpos(row_of::text, $1) > 0",
            ),
            Backend::Sqlite => (
                "SELECT name FROM sqlite_master WHERE type = 'table'",
                "SELECT COUNT(*) FROM \"{table}\" WHERE {columns}",
            ),
        };
        let mut holding = Vec::new();
        for table in self.strings(tables, []).await? {
            let sql = match self.backend {
                Backend::Postgres => contains.replace("{table}", &table),
                Backend::Sqlite => {
                    let columns = self
                        .strings("SELECT name FROM pragma_table_info($1)", [table.clone().into()])
                        .await?
                        .iter()
                        .map(|column| format!("instr(CAST(\"{column}\" AS TEXT), $1) > 0"))
                        .collect::<Vec<_>>();
                    if columns.is_empty() {
                        continue;
                    }
                    contains.replace("{table}", &table).replace("{columns}", &columns.join(" OR "))
                }
            };
            let statement = Statement::from_sql_and_values(self.db.get_database_backend(), &sql, [needle.into()]);
            let row = self.db.query_one_raw(statement).await?.with_context(|| format!("no row from {sql}"))?;
            if row.try_get_by_index::<i64>(0)? > 0 {
                holding.push(table);
            }
        }
        Ok(holding)
    }

    /// Counts the rows of `table` whose `column` equals `value`.
    pub async fn count_where(&self, table: &str, column: &str, value: impl Into<Value>) -> anyhow::Result<i64> {
        let sql = format!("SELECT COUNT(*) FROM \"{table}\" WHERE \"{column}\" = $1");
        let statement = Statement::from_sql_and_values(self.db.get_database_backend(), &sql, [value.into()]);
        let row = self.db.query_one_raw(statement).await?.with_context(|| format!("no row from {sql}"))?;
        Ok(row.try_get_by_index::<i64>(0)?)
    }
}

/// The databases one test created, so they can all be dropped when it ends.
#[derive(Debug)]
struct Scope {
    backend: Backend,
    admin_url: Option<String>,
    created: Mutex<Vec<Created>>,
}

/// One database to remove, with the pool to close first.
#[derive(Debug)]
enum Created {
    SqliteFile { path: PathBuf, pool: Option<DatabaseConnection> },
    Postgres { name: String, pool: Option<DatabaseConnection> },
}

impl Scope {
    /// Creates (and, if asked, migrates) one database and registers it for dropping
    /// before anything can fail, so a failed migration leaves nothing behind.
    async fn create(self: &Arc<Self>, migrate: bool) -> anyhow::Result<TestDb> {
        let name = format!("kfs_test_{}", Uuid::new_v4().simple());
        let url = match self.backend {
            Backend::Sqlite => {
                let path = std::env::temp_dir().join(format!("{name}.sqlite"));
                let url = format!("sqlite://{}?mode=rwc", path.display());
                self.register(Created::SqliteFile { path, pool: None });
                url
            }
            Backend::Postgres => {
                let admin_url = self.admin_url.as_deref().context("KFS_TEST_POSTGRES_URL is not set")?;
                let admin = admin_connection(admin_url).await?;
                admin
                    .execute_unprepared(&format!("CREATE DATABASE \"{name}\""))
                    .await
                    .with_context(|| format!("creating database {name}"))?;
                admin.close().await?;
                self.register(Created::Postgres { name: name.clone(), pool: None });
                database_url(admin_url, &name)?
            }
        };
        let db = if migrate {
            worker::db::connect_and_migrate(&url).await.with_context(|| format!("migrating {url}"))?
        } else {
            worker::db::connect(&url).await.with_context(|| format!("connecting to {url}"))?
        };
        self.attach_pool(db.clone());
        Ok(TestDb { db, url, backend: self.backend, scope: Arc::clone(self) })
    }

    fn register(&self, created: Created) {
        self.lock().push(created);
    }

    /// Remembers the pool of the database registered last, to close it before dropping.
    fn attach_pool(&self, db: DatabaseConnection) {
        if let Some(Created::SqliteFile { pool, .. } | Created::Postgres { pool, .. }) = self.lock().last_mut() {
            *pool = Some(db);
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Created>> {
        // A panic while holding this lock cannot leave the list half-written.
        self.created.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Closes every pool and removes every database; reports the first failure after
    /// trying them all.
    async fn drop_all(&self) -> anyhow::Result<()> {
        let created = std::mem::take(&mut *self.lock());
        let mut first_error = None;
        for database in created {
            if let Err(error) = self.remove(database).await {
                first_error.get_or_insert(error);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn remove(&self, database: Created) -> anyhow::Result<()> {
        match database {
            Created::SqliteFile { path, pool } => {
                if let Some(pool) = pool {
                    pool.close().await?;
                }
                for suffix in ["", "-wal", "-shm", "-journal"] {
                    let file = PathBuf::from(format!("{}{suffix}", path.display()));
                    match std::fs::remove_file(&file) {
                        Err(error) if error.kind() != std::io::ErrorKind::NotFound => {
                            return Err(error).with_context(|| format!("removing {}", file.display()));
                        }
                        _ => {}
                    }
                }
                Ok(())
            }
            Created::Postgres { name, pool } => {
                if let Some(pool) = pool {
                    // Closing first is politeness; FORCE below ends any connection a
                    // test leaked (a spawned server, a worker still running).
                    let _ = pool.close().await;
                }
                let admin_url = self.admin_url.as_deref().context("KFS_TEST_POSTGRES_URL is not set")?;
                let admin = admin_connection(admin_url).await?;
                admin
                    .execute_unprepared(&format!("DROP DATABASE IF EXISTS \"{name}\" WITH (FORCE)"))
                    .await
                    .with_context(|| format!("dropping database {name}"))?;
                admin.close().await?;
                Ok(())
            }
        }
    }
}

/// One connection to the admin database, for CREATE and DROP DATABASE. Each test runs on
/// its own runtime, and a pool must not outlive the runtime it was opened on, so none is
/// shared between tests.
async fn admin_connection(admin_url: &str) -> anyhow::Result<DatabaseConnection> {
    let mut options = sea_orm::ConnectOptions::new(admin_url.to_owned());
    options.max_connections(1).min_connections(0).sqlx_logging(false);
    sea_orm::Database::connect(options)
        .await
        .with_context(|| format!("connecting to KFS_TEST_POSTGRES_URL ({})", redact(admin_url)))
}

/// The admin URL with its database replaced by `name`; user, host and options are kept.
pub fn database_url(admin_url: &str, name: &str) -> anyhow::Result<String> {
    let mut url = reqwest::Url::parse(admin_url).context("KFS_TEST_POSTGRES_URL is not a URL")?;
    url.set_path(&format!("/{name}"));
    Ok(url.to_string())
}

/// The URL without its password, for error messages.
fn redact(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if parsed.password().is_some() => {
            let _ = parsed.set_password(Some("***"));
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}

/// The text a panic carried, when it is a string.
fn panic_message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|message| (*message).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a non-string payload".to_owned())
}

#[cfg(test)]
mod tests {
    use super::database_url;

    #[test]
    fn database_url_replaces_only_the_database() -> anyhow::Result<()> {
        let url = database_url("postgres://postgres:secret@127.0.0.1:5432/postgres?sslmode=disable", "kfs_test_1")?;
        assert_eq!(url, "postgres://postgres:secret@127.0.0.1:5432/kfs_test_1?sslmode=disable");
        assert_eq!(database_url("postgres://postgres@localhost", "x")?, "postgres://postgres@localhost/x");
        Ok(())
    }
}
