//! Database constraint violations as client errors, decided by the constraint's name.
//! PostgreSQL reports the name; SQLite names CHECK constraints in its message but reports
//! UNIQUE violations by their columns, so each unique index also lists its SQLite form.
use sea_orm::{DbErr, RuntimeErr};

use crate::error::ApiError;

/// A constraint a client can trip, and what it means to them.
struct Known {
    /// The constraint or index name (PostgreSQL reports it; SQLite names CHECKs).
    name: &'static str,
    /// How SQLite words a UNIQUE violation of it, if it is a unique index.
    sqlite_columns: Option<&'static str>,
    /// The client's error.
    answer: fn() -> ApiError,
}

const KNOWN: &[Known] = &[
    Known {
        name: "knowledge_space_members_scope_subject_uq",
        sqlite_columns: Some(
            "knowledge_space_members.tenant_id, knowledge_space_members.knowledge_space_id, knowledge_space_members.subject_id",
        ),
        answer: || ApiError::conflict("the subject is already a member of this knowledge space"),
    },
    Known {
        name: "knowledge_space_members_role_ck",
        sqlite_columns: None,
        answer: || ApiError::bad_input("role is not a knowledge space role"),
    },
    Known { name: "knowledge_space_members_space_fk", sqlite_columns: None, answer: || ApiError::NotFound },
    Known { name: "knowledge_space_api_keys_space_fk", sqlite_columns: None, answer: || ApiError::NotFound },
    Known { name: "knowledge_documents_space_fk", sqlite_columns: None, answer: || ApiError::NotFound },
    Known {
        name: "research_task_jobs_positive_ck",
        sqlite_columns: None,
        answer: || ApiError::bad_input("topK must be at least 1 and budgetUsd at least 0"),
    },
];

/// Classifies a database error: a known constraint becomes its client error, anything
/// else is internal.
pub fn classify(error: DbErr) -> ApiError {
    if worker::db::is_unavailable(&error) {
        return ApiError::Unavailable(error.into());
    }
    let Some((constraint, message)) = violation(&error) else {
        return ApiError::internal(error);
    };
    // A row that names something gone: the space (or key, or task) was deleted, or its
    // tenant erased, between the request's access check and its write. SQLite names no
    // constraint for these, so every foreign key counts: to the client it is not found.
    if is_foreign_key(&error) {
        return ApiError::NotFound;
    }
    let found = KNOWN.iter().find(|known| {
        constraint.as_deref() == Some(known.name)
            || message.contains(known.name)
            || known.sqlite_columns.is_some_and(|columns| message.ends_with(columns))
    });
    match found {
        Some(known) => (known.answer)(),
        None => ApiError::internal(error),
    }
}

/// Whether the database refused a row for a foreign key (PostgreSQL's SQLSTATE 23503,
/// SQLite's extended code 787).
fn is_foreign_key(error: &DbErr) -> bool {
    let (DbErr::Exec(RuntimeErr::SqlxError(inner)) | DbErr::Query(RuntimeErr::SqlxError(inner))) = error else {
        return false;
    };
    let sea_orm::sqlx::Error::Database(database) = inner.as_ref() else {
        return false;
    };
    database.code().is_some_and(|code| code == "23503" || code == "787")
}

/// The violated constraint's name (when the database reports one) and the message.
fn violation(error: &DbErr) -> Option<(Option<String>, String)> {
    let (DbErr::Exec(RuntimeErr::SqlxError(inner)) | DbErr::Query(RuntimeErr::SqlxError(inner))) = error else {
        return None;
    };
    let sea_orm::sqlx::Error::Database(database) = inner.as_ref() else {
        return None;
    };
    Some((database.constraint().map(str::to_owned), database.message().to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_that_are_not_violations_stay_internal() {
        let answer = classify(DbErr::Custom("boom".into()));
        assert_eq!(answer.code(), "INTERNAL_SERVER_ERROR");
    }
}
