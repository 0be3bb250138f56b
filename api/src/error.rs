//! The one error type every resolver and store function answers with. Each variant is a
//! category a client acts on and maps to one `extensions.code`; internal causes are logged
//! once, where the error turns into a GraphQL error, and never sent.
use async_graphql::{ErrorExtensionValues, ErrorExtensions};
use entity::Stage;
use sea_orm::DbErr;
use worker::LifecycleError;

/// An error as a client sees it.
#[derive(Debug, thiserror::Error)]
pub enum ApiError {
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

impl ApiError {
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
        Self::Conflict { message: message.into(), current_stage: None, row_version: None }
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

impl ErrorExtensions for ApiError {
    fn extend(&self) -> async_graphql::Error {
        match self {
            // The one place an internal cause is logged; the client sees only the code.
            Self::Internal(cause) => tracing::error!(error = format!("{cause:#}"), "request failed"),
            Self::Unavailable(cause) => {
                tracing::warn!(error = format!("{cause:#}"), "request failed: the database is unavailable")
            }
            _ => {}
        }
        async_graphql::Error::new(self.to_string()).extend_with(|_, values: &mut ErrorExtensionValues| {
            values.set("code", self.code());
            if let Self::Conflict { current_stage, row_version, .. } = self {
                if let Some(stage) = current_stage {
                    values.set("currentStage", stage.as_str().to_ascii_uppercase());
                }
                if let Some(version) = row_version {
                    values.set("rowVersion", *version);
                }
            }
            if let Self::RateLimited { retry_after_secs } = self {
                values.set("retryAfterSeconds", *retry_after_secs);
            }
            if let Self::QuotaExceeded { limit, resets_at, .. } = self {
                values.set("limit", *limit);
                if let Some(at) = resets_at.and_then(chrono::DateTime::from_timestamp_millis) {
                    values.set("resetsAt", at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
                }
            }
        })
    }
}

impl From<worker::knowledge::index::SplitError> for ApiError {
    fn from(error: worker::knowledge::index::SplitError) -> Self {
        use worker::knowledge::index::SplitError;
        match error {
            SplitError::TooManyPassages(too_many) => Self::BadUserInput(too_many.to_string()),
            SplitError::Busy { retry_after } => Self::rate_limited(retry_after),
        }
    }
}

impl From<DbErr> for ApiError {
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
fn classify(error: DbErr) -> ApiError {
    match worker::store::classify(&error) {
        worker::store::Refusal::Unavailable => ApiError::Unavailable(error.into()),
        // A row that names something gone: the space (or key, or task) was deleted, or its
        // tenant erased, between the request's access check and its write.
        worker::store::Refusal::Missing => ApiError::NotFound,
        worker::store::Refusal::Constraint(name) => match KNOWN.iter().find(|known| known.name == name) {
            Some(known) => (known.answer)(),
            None => ApiError::internal(error),
        },
        worker::store::Refusal::Other => ApiError::internal(error),
    }
}

impl From<LifecycleError> for ApiError {
    fn from(error: LifecycleError) -> Self {
        match error {
            LifecycleError::NotFound => Self::NotFound,
            LifecycleError::StaleRowVersion { expected, actual } => Self::Conflict {
                message: format!("expectedRowVersion {expected} is stale; the task is at row version {actual}"),
                current_stage: None,
                row_version: Some(actual),
            },
            LifecycleError::NotAllowed { command: "steer", current: current @ entity::Stage::Generating } => {
                Self::Conflict {
                    message: "steer is not allowed while the task is generating: the answer is already being written, and a note would not reach it".to_owned(),
                    current_stage: Some(current),
                    row_version: None,
                }
            }
            LifecycleError::NotAllowed { command, current } => Self::Conflict {
                message: format!("{command} is not allowed while the task is {}", current.as_str()),
                current_stage: Some(current),
                row_version: None,
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
            },
            LifecycleError::TenantBeingErased => {
                Self::conflict("the tenant is being erased: nothing new is accepted for it until the erasure completes")
            }
            LifecycleError::Database(error) => error.into(),
        }
    }
}

/// Turns a `Result<T, ApiError>` into what async-graphql resolvers return, keeping the
/// code (async-graphql's blanket `From<Display>` would drop the extensions).
pub trait IntoGql<T> {
    /// The same result with the error extended.
    fn gql(self) -> async_graphql::Result<T>;
}

impl<T> IntoGql<T> for Result<T, ApiError> {
    fn gql(self) -> async_graphql::Result<T> {
        self.map_err(|error| error.extend())
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
