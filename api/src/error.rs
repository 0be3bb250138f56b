//! How an operation's error looks to a GraphQL client. The error itself (its categories
//! and codes, and how database and lifecycle refusals map onto them) is the application
//! layer's, `worker::app::AppError`; this file renders it, and logs an internal cause once,
//! where it turns into a GraphQL error, never sending it.
use async_graphql::{ErrorExtensionValues, ErrorExtensions as _};

pub use worker::app::AppError as ApiError;

/// An error rendered for GraphQL: the message, and the code with its details as
/// `extensions`.
pub trait ToGql {
    /// The GraphQL error, extended.
    fn to_gql(&self) -> async_graphql::Error;
}

impl ToGql for ApiError {
    fn to_gql(&self) -> async_graphql::Error {
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
            if let Self::Conflict { current_stage, row_version, task_id, .. } = self {
                if let Some(task_id) = task_id {
                    values.set("taskId", task_id.to_string());
                }
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

/// Turns a `Result<T, ApiError>` into what async-graphql resolvers return, keeping the
/// code (async-graphql's blanket `From<Display>` would drop the extensions).
pub trait IntoGql<T> {
    /// The same result with the error extended.
    fn gql(self) -> async_graphql::Result<T>;
}

impl<T> IntoGql<T> for Result<T, ApiError> {
    fn gql(self) -> async_graphql::Result<T> {
        self.map_err(|error| error.to_gql())
    }
}
