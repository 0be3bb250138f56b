//! What a failed statement means, in terms the layers above act on, whichever backend
//! said it: the database out of reach (try again), a foreign key to something gone, a
//! named constraint refused, or something else. PostgreSQL reports constraint names and
//! SQLSTATEs; SQLite names CHECK constraints in its message, reports UNIQUE violations by
//! their columns, and foreign keys by an extended result code only.
use sea_orm::{DbErr, RuntimeErr};

/// Whether `error` means the database could not be reached (down, restarting, failing
/// over, the pool out of connections, or SQLite's lock held past the busy timeout) rather
/// than that it refused the statement. Such errors are worth retrying once it is back;
/// callers answer "unavailable", not "internal".
pub fn is_unavailable(error: &DbErr) -> bool {
    use sea_orm::ConnAcquireErr;
    use sea_orm::sqlx::Error as Sqlx;
    let sqlx = match error {
        DbErr::ConnectionAcquire(ConnAcquireErr::Timeout | ConnAcquireErr::ConnectionClosed) => return true,
        DbErr::Conn(RuntimeErr::SqlxError(inner))
        | DbErr::Exec(RuntimeErr::SqlxError(inner))
        | DbErr::Query(RuntimeErr::SqlxError(inner)) => inner,
        DbErr::Conn(_) => return true,
        _ => return false,
    };
    match sqlx.as_ref() {
        Sqlx::Io(_) | Sqlx::Tls(_) | Sqlx::PoolTimedOut | Sqlx::PoolClosed | Sqlx::WorkerCrashed => true,
        // SQLSTATE class 08 (connection exception) and 57P01–57P03 (the server is shutting
        // down, crashed, or not accepting connections yet); SQLite's busy and locked (5, 6
        // and their extended codes: a writer held the lock past the busy timeout).
        Sqlx::Database(database) => database.code().is_some_and(|code| {
            code.starts_with("08") || matches!(code.as_ref(), "57P01" | "57P02" | "57P03") || sqlite_busy(&code)
        }),
        _ => false,
    }
}

/// Whether a SQLite result code (primary or extended) is SQLITE_BUSY or SQLITE_LOCKED.
fn sqlite_busy(code: &str) -> bool {
    code.parse::<u32>().is_ok_and(|code| matches!(code & 0xff, 5 | 6))
}

/// Why the database refused a statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// It could not be reached ([`is_unavailable`]).
    Unavailable,
    /// A row named something that is gone (a foreign key).
    Missing,
    /// A named constraint refused the row: a UNIQUE index or a CHECK.
    Constraint(String),
    /// Anything else: a bug or an outage of another kind.
    Other,
}

/// The unique indexes a client can trip and SQLite's wording of each (it names the
/// columns, not the index).
const UNIQUE_COLUMNS: &[(&str, &str)] = &[(
    "knowledge_space_members_scope_subject_uq",
    "knowledge_space_members.tenant_id, knowledge_space_members.knowledge_space_id, knowledge_space_members.subject_id",
)];

/// The CHECK constraints a client can trip (both backends name them).
const CHECKS: &[&str] = &["knowledge_space_members_role_ck", "research_task_jobs_positive_ck"];

/// What `error` means.
pub fn classify(error: &DbErr) -> Refusal {
    if is_unavailable(error) {
        return Refusal::Unavailable;
    }
    let (DbErr::Exec(RuntimeErr::SqlxError(inner)) | DbErr::Query(RuntimeErr::SqlxError(inner))) = error else {
        return Refusal::Other;
    };
    let sea_orm::sqlx::Error::Database(database) = inner.as_ref() else {
        return Refusal::Other;
    };
    // PostgreSQL's SQLSTATE 23503, SQLite's extended code 787.
    if database.code().is_some_and(|code| code == "23503" || code == "787") {
        return Refusal::Missing;
    }
    if let Some(name) = database.constraint() {
        return Refusal::Constraint(name.to_owned());
    }
    let message = database.message();
    let named = UNIQUE_COLUMNS
        .iter()
        .find(|(_, columns)| message.ends_with(columns))
        .map(|(name, _)| *name)
        .or_else(|| CHECKS.iter().copied().find(|name| message.contains(name)));
    named.map_or(Refusal::Other, |name| Refusal::Constraint(name.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_that_are_not_violations_are_other() {
        assert_eq!(classify(&DbErr::Custom("boom".into())), Refusal::Other);
    }
}
