//! Database constraint violations as client errors, decided by the constraint's name
//! (the store reads the name from whichever backend refused the row).
use sea_orm::DbErr;
use worker::store::Refusal;

use crate::error::ApiError;

/// A constraint a client can trip, and what it means to them.
struct Known {
    /// The constraint or index name.
    name: &'static str,
    /// The client's error.
    answer: fn() -> ApiError,
}

const KNOWN: &[Known] = &[
    Known {
        name: "knowledge_space_members_scope_subject_uq",
        answer: || ApiError::conflict("the subject is already a member of this knowledge space"),
    },
    Known {
        name: "knowledge_space_members_role_ck",
        answer: || ApiError::bad_input("role is not a knowledge space role"),
    },
    Known {
        name: "research_task_jobs_positive_ck",
        answer: || ApiError::bad_input("topK must be at least 1 and budgetUsd at least 0"),
    },
];

/// Classifies a database error: the store says what it means (whichever backend said
/// it); a constraint this table knows becomes its client error, anything else is internal.
pub fn classify(error: DbErr) -> ApiError {
    match worker::store::classify(&error) {
        Refusal::Unavailable => ApiError::Unavailable(error.into()),
        // A row that names something gone: the space (or key, or task) was deleted, or its
        // tenant erased, between the request's access check and its write.
        Refusal::Missing => ApiError::NotFound,
        Refusal::Constraint(name) => match KNOWN.iter().find(|known| known.name == name) {
            Some(known) => (known.answer)(),
            None => ApiError::internal(error),
        },
        Refusal::Other => ApiError::internal(error),
    }
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
