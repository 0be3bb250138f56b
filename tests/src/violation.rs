//! Asserting that a statement failed on the constraint it should have, by name where the
//! database reports one. PostgreSQL names every violated constraint (or unique index);
//! SQLite names a violated CHECK only when it is named (`CHECK constraint failed: <name>`),
//! reports a unique index by its columns and a foreign key not at all.
use anyhow::{Context as _, bail, ensure};
use sea_orm::sqlx::error::{DatabaseError, ErrorKind};
use sea_orm::{DbErr, RuntimeErr, Value};

use crate::{Backend, TestDb};

/// The constraint a statement must violate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Violation {
    /// A named CHECK constraint.
    Check(&'static str),
    /// A unique index (or constraint), by name.
    Unique(&'static str),
    /// A foreign key, by name when the schema names it; `None` for the seed's unnamed
    /// ones, whose generated PostgreSQL names are not part of the contract.
    ForeignKey(Option<&'static str>),
}

/// What the database said about a failed statement.
#[derive(Debug)]
pub struct Reported {
    /// The category sqlx derived from the error code.
    pub kind: ErrorKind,
    /// The constraint PostgreSQL named; always `None` on SQLite.
    pub constraint: Option<String>,
    /// The database's message.
    pub message: String,
    /// The SQLSTATE (PostgreSQL) or extended result code (SQLite).
    pub code: Option<String>,
}

/// The database error inside `error`, if it is one (rather than a pool or decoding error).
pub fn reported(error: &DbErr) -> Option<Reported> {
    let (DbErr::Exec(RuntimeErr::SqlxError(inner)) | DbErr::Query(RuntimeErr::SqlxError(inner))) = error else {
        return None;
    };
    let database: &dyn DatabaseError = inner.as_database_error()?;
    Some(Reported {
        kind: normalized_kind(database),
        constraint: database.constraint().map(str::to_owned),
        message: database.message().to_owned(),
        code: database.code().map(|code| code.into_owned()),
    })
}

/// SQLite's extended result code for a constraint raised by a trigger, which is how it
/// reports `ON DELETE RESTRICT` (sqlx maps only `SQLITE_CONSTRAINT_FOREIGNKEY`, 787).
const SQLITE_CONSTRAINT_TRIGGER: &str = "1811";

/// sqlx's category, except that a SQLite RESTRICT (a trigger-raised "FOREIGN KEY
/// constraint failed") counts as the foreign-key violation it is.
fn normalized_kind(database: &dyn DatabaseError) -> ErrorKind {
    let restrict = database.code().as_deref() == Some(SQLITE_CONSTRAINT_TRIGGER)
        && database.message() == "FOREIGN KEY constraint failed";
    if restrict { ErrorKind::ForeignKeyViolation } else { database.kind() }
}

impl TestDb {
    /// Fails unless `result` is the violation `expected`, described as precisely as this
    /// backend reports it.
    pub async fn assert_violates<T: std::fmt::Debug>(
        &self,
        result: Result<T, DbErr>,
        expected: Violation,
    ) -> anyhow::Result<()> {
        let error = match result {
            Ok(value) => bail!("expected {expected:?} to reject the statement, but it succeeded with {value:?}"),
            Err(error) => error,
        };
        let reported =
            reported(&error).with_context(|| format!("expected {expected:?}, got a non-database error: {error}"))?;
        let kind = match expected {
            Violation::Check(_) => ErrorKind::CheckViolation,
            Violation::Unique(_) => ErrorKind::UniqueViolation,
            Violation::ForeignKey(_) => ErrorKind::ForeignKeyViolation,
        };
        ensure!(reported.kind == kind, "expected {expected:?}, got {reported:?}");
        match (self.backend, expected) {
            (
                Backend::Postgres,
                Violation::Check(name) | Violation::Unique(name) | Violation::ForeignKey(Some(name)),
            ) => {
                ensure!(reported.constraint.as_deref() == Some(name), "expected {expected:?}, got {reported:?}");
            }
            (Backend::Postgres, Violation::ForeignKey(None)) => {}
            (Backend::Sqlite, Violation::Check(name)) => {
                let wanted = format!("CHECK constraint failed: {name}");
                ensure!(reported.message == wanted, "expected {wanted:?}, got {reported:?}");
            }
            (Backend::Sqlite, Violation::Unique(index)) => {
                let wanted = format!("UNIQUE constraint failed: {}", self.sqlite_index_columns(index).await?);
                ensure!(reported.message == wanted, "expected {wanted:?} ({index}), got {reported:?}");
            }
            // SQLite's only word on a foreign key is "FOREIGN KEY constraint failed".
            (Backend::Sqlite, Violation::ForeignKey(_)) => {}
        }
        Ok(())
    }

    /// `table.column, table.column` of a SQLite index, as its UNIQUE errors print them.
    async fn sqlite_index_columns(&self, index: &str) -> anyhow::Result<String> {
        let table = self
            .strings("SELECT tbl_name FROM sqlite_master WHERE type = 'index' AND name = $1", [Value::from(index)])
            .await?;
        let table = table.first().with_context(|| format!("no SQLite index named {index}"))?;
        let columns =
            self.strings("SELECT name FROM pragma_index_info($1) ORDER BY seqno", [Value::from(index)]).await?;
        Ok(columns.iter().map(|column| format!("{table}.{column}")).collect::<Vec<_>>().join(", "))
    }
}
