//! The one error every operation of the application layer answers with. Each variant is a
//! category a client acts on and carries one code (GraphQL's `extensions.code`, the prefix
//! of an MCP tool error, an HTTP status); a channel renders it, and logs an internal
//! cause once where it does, never sending it.
use entity::Stage;
use sea_orm::DbErr;

use crate::lifecycle::LifecycleError;

/// An operation's refusal or failure, as a client sees it.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// No valid credential came with the request.
    #[error("authentication required")]
    Unauthenticated,
    /// The caller is known but may not do this.
    #[error("forbidden")]
    Forbidden,
    /// No such thing for this caller (another tenant's or subject's thing answers the same).
    #[error("not found")]
    NotFound,
    /// The input breaks a rule; the message says which.
    #[error("{0}")]
    BadUserInput(String),
    /// The request conflicts with the current state of the thing it acts on.
    #[error("{message}")]
    Conflict {
        /// What conflicts, in a sentence.
        message: String,
        /// The task's stage now, when the conflict is about a task.
        current_stage: Option<Stage>,
        /// The task's row version now, when the conflict is about a task.
        row_version: Option<i32>,
        /// The task the request conflicts with, when another task is in its way (a thread's
        /// turn in flight).
        task_id: Option<uuid::Uuid>,
    },
    /// A quota of the tenant is used up.
    #[error("{message}")]
    QuotaExceeded {
        /// Which quota, in a sentence.
        message: String,
        /// Its value.
        limit: f64,
        /// When it resets (epoch ms), if it does by itself.
        resets_at: Option<i64>,
    },
    /// The caller sent more than its rate limits allow; try again after this long.
    #[error("rate limit exceeded; try again in {retry_after_secs} s")]
    RateLimited {
        /// Whole seconds to wait (at least 1).
        retry_after_secs: u64,
    },
    /// The query asks for too much at once.
    #[error("{0}")]
    TooComplex(String),
    /// The database cannot be reached right now; the request may be tried again shortly
    /// (HTTP answers 503 with `Retry-After`). The cause is logged, never sent.
    #[error("the service is unavailable; try again shortly")]
    Unavailable(#[source] anyhow::Error),
    /// Something failed on our side; the cause is logged, never sent.
    #[error("internal server error")]
    Internal(#[source] anyhow::Error),
}

impl AppError {
    /// The error of a refused rate-limit check that asks to wait `wait`.
    pub fn rate_limited(wait: std::time::Duration) -> Self {
        Self::RateLimited { retry_after_secs: wait.as_secs_f64().ceil().max(1.0) as u64 }
    }

    /// An internal error from any cause.
    pub fn internal(cause: impl Into<anyhow::Error>) -> Self {
        Self::Internal(cause.into())
    }

    /// A bad-input error with the given message.
    pub fn bad_input(message: impl Into<String>) -> Self {
        Self::BadUserInput(message.into())
    }

    /// A conflict that concerns no task.
    pub fn conflict(message: impl Into<String>) -> Self {
        Self::Conflict { message: message.into(), current_stage: None, row_version: None, task_id: None }
    }

    /// The `extensions.code` this error carries.
    pub fn code(&self) -> &'static str {
        match self {
            Self::Unauthenticated => "UNAUTHENTICATED",
            Self::Forbidden => "FORBIDDEN",
            Self::NotFound => "NOT_FOUND",
            Self::BadUserInput(_) => "BAD_USER_INPUT",
            Self::Conflict { .. } => "CONFLICT",
            Self::TooComplex(_) => "TOO_COMPLEX",
            Self::QuotaExceeded { .. } => "QUOTA_EXCEEDED",
            Self::RateLimited { .. } => "RATE_LIMITED",
            Self::Unavailable(_) => "SERVICE_UNAVAILABLE",
            Self::Internal(_) => "INTERNAL_SERVER_ERROR",
        }
    }
}

impl From<crate::knowledge::index::SplitError> for AppError {
    fn from(error: crate::knowledge::index::SplitError) -> Self {
        use crate::knowledge::index::SplitError;
        match error {
            SplitError::TooManyPassages(too_many) => Self::BadUserInput(too_many.to_string()),
            SplitError::Busy { retry_after } => Self::rate_limited(retry_after),
        }
    }
}

impl From<DbErr> for AppError {
    fn from(error: DbErr) -> Self {
        classify(error)
    }
}

// Database constraint violations as client errors, decided by the constraint's name (the
// store reads the name from whichever backend refused the row).

/// A constraint a client can trip, and what it means to them.
struct Known {
    /// The constraint or index name.
    name: &'static str,
    /// The client's error.
    answer: fn() -> AppError,
}

const KNOWN: &[Known] = &[
    Known {
        name: "knowledge_space_members_scope_subject_uq",
        answer: || AppError::conflict("the subject is already a member of this knowledge space"),
    },
    Known {
        name: "knowledge_space_members_role_ck",
        answer: || AppError::bad_input("role is not a knowledge space role"),
    },
    Known {
        name: "research_task_jobs_positive_ck",
        answer: || AppError::bad_input("topK must be at least 1 and budgetUsd at least 0"),
    },
];

/// Classifies a database error: the store says what it means (whichever backend said
/// it); a constraint this table knows becomes its client error, anything else is internal.
fn classify(error: DbErr) -> AppError {
    match crate::store::classify(&error) {
        crate::store::Refusal::Unavailable => AppError::Unavailable(error.into()),
        // A row that names something gone: the space (or key, or task) was deleted, or its
        // tenant erased, between the request's access check and its write.
        crate::store::Refusal::Missing => AppError::NotFound,
        crate::store::Refusal::Constraint(name) => match KNOWN.iter().find(|known| known.name == name) {
            Some(known) => (known.answer)(),
            None => AppError::internal(error),
        },
        crate::store::Refusal::Other => AppError::internal(error),
    }
}

impl From<LifecycleError> for AppError {
    fn from(error: LifecycleError) -> Self {
        match error {
            LifecycleError::NotFound => Self::NotFound,
            LifecycleError::StaleRowVersion { expected, actual } => Self::Conflict {
                message: format!("expectedRowVersion {expected} is stale; the task is at row version {actual}"),
                current_stage: None,
                row_version: Some(actual),
                task_id: None,
            },
            LifecycleError::NotAllowed { command: "steer", current: current @ entity::Stage::Generating } => {
                Self::Conflict {
                    message: "steer is not allowed while the task is generating: the answer is already being written, and a note would not reach it".to_owned(),
                    current_stage: Some(current),
                    row_version: None,
                    task_id: None,
                }
            }
            LifecycleError::NotAllowed { command, current } => Self::Conflict {
                message: format!("{command} is not allowed while the task is {}", current.as_str()),
                current_stage: Some(current),
                row_version: None,
                task_id: None,
            },
            LifecycleError::IdempotencyMismatch => {
                Self::conflict("idempotencyKey was already used for a task with different input")
            }
            LifecycleError::IdempotencyKeyUnreadable => {
                Self::conflict("idempotencyKey was used by a task you can no longer read; use a new idempotencyKey")
            }
            LifecycleError::QuotaExceeded(refusal) => Self::QuotaExceeded {
                message: format!("quota exceeded: at most {} {}", refusal.limit, refusal.what),
                limit: refusal.limit,
                resets_at: refusal.resets_at,
            },
            // Worker-only outcomes: no API path holds a lease or commits a stage boundary.
            LifecycleError::LeaseLost => Self::internal(anyhow::anyhow!("lease lost on an API path")),
            LifecycleError::GrantDenied(_) => Self::internal(anyhow::anyhow!("a stage boundary on an API path")),
            LifecycleError::TurnInFlight(task_id) => Self::Conflict {
                message: "the thread has a turn in flight, and multitaskStrategy REJECT refuses another".to_owned(),
                current_stage: None,
                row_version: None,
                task_id: Some(task_id),
            },
            LifecycleError::TooManyTurns(limit) => {
                Self::BadUserInput(format!("a research thread holds at most {limit} turns (KFS_THREAD_MAX_TURNS)"))
            }
            LifecycleError::TooManyNotes(limit) => Self::BadUserInput(format!(
                "note: a task takes at most {limit} steering notes, and this one has {limit}"
            )),
            LifecycleError::PlanTooLong { count, max } => Self::BadUserInput(format!(
                "subQueries holds {count} sub-queries; this task's limits.max_sub_queries is {max}"
            )),
            LifecycleError::NotAwaiting { wanted, awaiting, current } => Self::Conflict {
                message: match awaiting {
                    Some(awaiting) => format!(
                        "the task waits for {}, not for {}",
                        awaiting.replace('_', " "),
                        wanted.replace('_', " ")
                    ),
                    None => format!(
                        "the task waits for no input (it is {}); only a task waiting for {} takes this",
                        current.as_str(),
                        wanted.replace('_', " ")
                    ),
                },
                current_stage: Some(current),
                row_version: None,
                task_id: None,
            },
            LifecycleError::TenantBeingErased => {
                Self::conflict("the tenant is being erased: nothing new is accepted for it until the erasure completes")
            }
            LifecycleError::Database(error) => error.into(),
        }
    }
}

#[cfg(test)]
mod constraint_tests {
    use super::*;

    #[test]
    fn errors_that_are_not_violations_stay_internal() {
        let answer = classify(DbErr::Custom("boom".into()));
        assert_eq!(answer.code(), "INTERNAL_SERVER_ERROR");
    }
}
